// A dead-letter topic's page: its records (filtered), a dry run, Redrive at a rate with its progress and Stop,
// and the audit of past replays. Uses app.js's helpers (el, $, getJSON, triggerDag, apiBase, fmtMs, fmtAge,
// status). Never a key or a value: the endpoints send coordinates and what the headers say.
"use strict";

const DLT_FILTERS = [
  ["exception", "Exception class", "myapp.errors.InvalidOrder (comma-separated for several)"],
  ["original_topic", "Original topic", ""], ["since", "Failed since", "2h, an ISO time or epoch ms"],
  ["until", "Failed until", "same forms"], ["partition", "DLT partitions", "0 or 0,2"],
  ["offsets", "DLT offsets", "A-B, A- or A"], ["limit", "Limit (oldest first; the dry run applies it)", ""],
];
const ENDED = ["done", "stopped", "failed"];
let dltPage = null;

function dltUrl(page, suffix = "") {
  return `api/topologies/${encodeURIComponent(page.ident)}/dead-letters/${encodeURIComponent(page.topic)}${suffix}`;
}

async function postJSON(url, body) {
  const response = await fetch(url, {method: "POST", credentials: "same-origin",
    headers: {"Content-Type": "application/json"}, body: JSON.stringify(body || {})});
  const text = await response.text();
  if (!response.ok) {
    let detail = text;
    try { detail = JSON.parse(text).detail; } catch (error) { /* not JSON: the text as it is */ }
    throw new Error(`HTTP ${response.status}: ${detail}`);
  }
  return JSON.parse(text);
}

function filterValues() {
  const values = {};
  for (const input of document.querySelectorAll("#dlt-filters input")) {
    if (input.value.trim()) values[input.name] = input.value.trim();
  }
  return values;
}

async function openDltPage(dead, prefill = {}) {
  const page = dltPage = {ident: $("#topology").value, topic: dead.topic, meta: null, dryRun: null, replay: null};
  const filters = el("form", {id: "dlt-filters", class: "filters", onsubmit: (event) => {
      event.preventDefault(); loadRecords(page);
    }, oninput: () => forgetDryRun(page)},
    DLT_FILTERS.map(([name, label, hint]) => el("label", {}, label,
      el("input", {name, placeholder: hint || null, value: prefill[name] || null}))),
    el("button", {type: "submit"}, "Apply filters"));
  document.body.dataset.dltLoaded = "false";
  $("#view").replaceChildren(
    el("p", {}, el("button", {type: "button", onclick: render}, "← All tiers")),
    el("h2", {id: "dlt-title"}, `Dead letters: ${dead.topic}`), el("div", {class: "meta", id: "dlt-meta"}),
    filters, el("section", {id: "dlt-records"}), el("section", {id: "dlt-redrive"}),
    el("section", {id: "dlt-progress"}), el("section", {id: "dlt-audit"}));
  await loadRecords(page);
}

async function loadRecords(page) {
  const query = new URLSearchParams(Object.entries(filterValues()).filter(([key]) => key !== "limit"));
  status("reading the DLT…");
  try {
    const data = await getJSON(dltUrl(page) + (query.toString() ? `?${query}` : ""));
    if (dltPage !== page) return;
    const first = page.meta === null;
    page.meta = data;
    $("#dlt-meta").textContent = `${deadKind(data)} · replay DAG ${data.replay_dag_id}` +
      (data.replay_dag_found ? "" : " (not in Airflow: build it with build_dlt_replay_dag to redrive)");
    $("#dlt-records").replaceChildren(recordsTable(page, data));
    if (first) {
      $("#dlt-redrive").replaceChildren(data.can_redrive ? redriveForm(page, data) : []);
      if (data.can_audit) refreshAudit(page);
    }
  } catch (error) {
    $("#dlt-records").replaceChildren(el("div", {class: "error", "data-error": "records"}, error.message));
  }
  document.body.dataset.dltLoaded = "true";
  status("");
}

function recordsTable(page, data) {
  const select = (r) => {  // narrow the selection to this one record
    for (const [name, value] of [["partition", r.partition], ["offsets", r.offset]]) {
      document.querySelector(`#dlt-filters input[name="${name}"]`).value = String(value);
    }
    forgetDryRun(page);
    loadRecords(page);
  };
  return el("div", {},
    el("h3", {}, el("span", {class: "big", "data-matched": ""}, data.matched), " records match",
       ` (${data.scanned} read at ${fmtMs(data.now_ms)})`),
    data.partial ? el("div", {class: "meta"}, `partial read: ${data.partial}; the dry run reads them all`) : null,
    data.records.length < data.matched ? el("div", {class: "meta"}, `the ${data.records.length} newest:`) : null,
    el("div", {class: "scroll"}, el("table", {class: "samples"}, el("thead", {}, el("tr", {}, ["record", "age", "family", "exception", "failure",
                                                                  "from", ""].map((h) => el("th", {}, h)))),
      el("tbody", {}, data.records.map((r) => el("tr", {"data-record": `${r.partition}@${r.offset}`},
        el("td", {}, `${r.partition}@${r.offset}`), el("td", {title: fmtMs(r.timestamp_ms)}, fmtAge(r.age_s)),
        el("td", {}, r.family), el("td", {"data-record-exception": ""}, r.exception),
        el("td", {}, r.failure_message || "—"), el("td", {}, origin(r)),
        el("td", {}, el("button", {type: "button", title: "select only this record", onclick: () => select(r)},
                       "Only this"))))))));
}

function redriveForm(page, data) {
  const targets = el("select", {id: "redrive-to", onchange: () => forgetDryRun(page)},
    el("option", {value: ""}, "each record's original topic"), data.targets.map((t) => el("option", {value: t}, t)));
  return el("div", {class: "card redrive"}, el("h3", {}, "Redrive"),
    el("p", {class: "hint"}, `A dry run lists exactly what would move and where; Redrive then triggers `,
       el("code", {}, data.replay_dag_id), ` with its filters, as you, through Airflow's API. Records are moved `,
       `as they are (a transform goes through the replay DAG's own form).`),
    el("label", {}, "Target ", targets),
    el("button", {type: "button", id: "dry-run", onclick: () => dryRun(page)}, "Dry run"),
    el("div", {id: "dry-run-result"}),
    el("label", {}, "Rate (records per second; empty: as fast as Kafka takes them) ",
       el("input", {id: "redrive-rate", type: "number", min: "0.1", step: "any", value: "100"})),
    el("button", {type: "button", id: "redrive", disabled: true, onclick: () => redrive(page)}, "Redrive"),
    el("div", {id: "redrive-warning", class: "meta"}));
}

function forgetDryRun(page) {
  if (!page.dryRun) return;
  page.dryRun = null;
  const button = $("#redrive");
  if (button) button.disabled = true;
  $("#dry-run-result").replaceChildren(el("p", {class: "meta"}, "the selection changed: dry run again"));
}

async function dryRun(page) {
  const to = $("#redrive-to").value;
  forgetDryRun(page);
  $("#dry-run-result").replaceChildren(el("p", {class: "meta"}, "dry run: reading the DLT and its replay log…"));
  try {
    const result = await postJSON(dltUrl(page, "/dry-run"), {...filterValues(), ...(to ? {to} : {})});
    page.dryRun = result;
    $("#dry-run-result").replaceChildren(dryRunView(result));
    $("#redrive").disabled = result.would_move === 0;
  } catch (error) {
    $("#dry-run-result").replaceChildren(el("div", {class: "error", "data-error": "dry-run"}, error.message));
  }
}

function dryRunView(r) {
  const where = (m) => `${m.target}[${m.target_partition === null ? "by key" : m.target_partition}]`;
  const targets = Object.entries(r.targets).map(([t, n]) => `${t}: ${n}`).join(", ") || "nothing";
  return el("div", {},
    el("p", {}, el("span", {class: "big", "data-dry-run-count": ""}, r.would_move), " records would move (",
       el("span", {"data-dry-run-targets": ""}, targets), `); matched ${r.matched}, already replayed `,
       `${r.already_replayed}, beyond the limit ${r.beyond_limit}, nothing to replay ${r.not_replayable}`),
    el("p", {class: "meta"}, `Redrive moves these: records that failed after ${fmtMs(Number(r.conf.until))} `,
       "are left for the next one."),
    el("div", {class: "scroll"}, el("table", {}, el("thead", {}, el("tr", {}, el("th", {}, "record"), el("th", {}, "goes to"),
                                                            el("th", {}, "attempt"))),
      el("tbody", {}, r.moves.map((m) => el("tr", {"data-move": `${m.partition}@${m.offset}`},
        el("td", {}, `${r.dlt}[${m.partition}]@${m.offset}`), el("td", {"data-move-target": ""}, where(m)),
        el("td", {}, m.attempt ?? 1)))))),
    r.moves_truncated ? el("p", {class: "meta"}, `… and ${r.moves_truncated} more`) : null,
    r.not_replayable_records.map((n) => el("div", {class: "meta"}, `${r.dlt}[${n.partition}]@${n.offset}: ${n.reason}`)));
}

function newReplayId() {
  const at = new Date().toISOString().replace(/[-:]/g, "").replace(/\.\d+Z$/, "Z");
  const random = Array.from(crypto.getRandomValues(new Uint8Array(4)), (b) => b.toString(16).padStart(2, "0"));
  return `redrive-${at}-${random.join("")}`;
}

async function redrive(page, replayId = null) {
  const rate = $("#redrive-rate").value.trim();
  if (rate && !(Number(rate) > 0)) {
    $("#dlt-progress").replaceChildren(el("div", {class: "error"}, `rate ${rate}: give records per second above 0`));
    return;
  }
  const conf = replayId ? page.replay.conf : {...page.dryRun.conf, dry_run: false, replay_id: newReplayId(),
                                              ...(rate ? {rate: `${rate}/s`} : {})};
  $("#redrive").disabled = true;
  try {
    const run = await triggerDag(page.meta.replay_dag_id, conf);
    const expected = replayId ? page.replay.expected : page.dryRun.would_move;
    page.replay = {id: conf.replay_id, runId: run.dag_run_id, conf, expected, stopAsked: false};
    pollReplay(page, page.replay);
  } catch (error) {
    $("#dlt-progress").replaceChildren(el("div", {class: "error", "data-error": "redrive"},
                                          `could not trigger ${page.meta.replay_dag_id}: ${error.message}`));
    $("#redrive").disabled = false;
  }
}

async function pollReplay(page, replay) {
  if (dltPage !== page || page.replay !== replay) return;  // another page, or another redrive, took over
  let found = null;
  let run = null;
  try {
    run = await getJSON(`${apiBase()}dags/${encodeURIComponent(page.meta.replay_dag_id)}/dagRuns/${encodeURIComponent(replay.runId)}`);
    if (page.meta.can_audit) {  // one read of the replay log: this replay's progress and the audit
      const data = await getJSON(dltUrl(page, "/replays"));
      found = data.replays.find((s) => s.replay_id === replay.id) || null;
      refreshAudit(page, data);
    }
  } catch (error) {
    status(`progress: ${error.message}`, true);
  }
  showProgress(page, replay, found, run);
  const runEnded = run && ["success", "failed"].includes(run.state);
  if ((found && ENDED.includes(found.state)) || (runEnded && (!found || found.state !== "running"))) {
    return;  // ended: the audit was refreshed with its last status
  }
  setTimeout(() => pollReplay(page, replay), 1000);
}

function showProgress(page, replay, s, run) {
  const state = s ? s.state : "waiting";
  const moved = s ? s.moved || 0 : 0;
  const selected = s ? s.selected ?? replay.expected : replay.expected;
  const running = state === "running";
  const text = s ? `${state}${s.reason ? `: ${s.reason}` : ""} · moved ${moved} of ${selected}` +
    `, remaining ${s.remaining ?? "—"} · rate asked ${s.rate ? `${s.rate}/s` : "none"}, measured ${s.measured_rate ?? "—"}/s`
    : `waiting for the run to start moving (DAG run ${run ? run.state : "?"})`;
  const differs = s && replay.expected !== null && s.selected !== undefined && s.selected !== replay.expected;
  $("#dlt-progress").replaceChildren(el("div", {class: "card progress", "data-replay-id": replay.id,
      "data-dag-run-id": replay.runId, "data-replay-state": state, "data-replay-moved": moved},
    el("h3", {}, `Redrive ${replay.id}`),
    el("div", {class: "meta"}, `DAG run ${replay.runId}: ${run ? run.state : "?"}`),
    el("progress", {max: Math.max(1, selected || 0), value: moved}),
    el("div", {"data-replay-status": ""}, text),
    differs ? el("div", {class: "meta"}, `the dry run listed ${replay.expected}`) : null,
    page.meta.can_audit ? null : el("div", {class: "meta"}, "you may not read the replay DAG's runs: no progress"),
    page.meta.can_stop ? el("button", {type: "button", id: "redrive-stop", disabled: !running || replay.stopAsked,
      onclick: () => stopReplay(page, replay)}, "Stop") : stopOff(page, replay, running),
    ["stopped", "failed"].includes(state) ? el("button", {type: "button", id: "redrive-resume",
      title: "trigger the replay DAG again with the same replay id: it moves only the rest",
      onclick: () => redrive(page, replay.id)}, "Resume") : null,
    replay.stopAsked && running ? el("span", {class: "meta"}, " stop requested: it stops at its next chunk boundary") : null));
}

// No Stop without [kafka_retry] redrive_kafka_conn_id: the view's own Kafka principal only reads.
function stopOff(page, replay, running) {
  return running ? el("div", {class: "meta", id: "redrive-stop-off"},
    `to stop it: airflow-kafka-retry dlt replay-stop --topology <its file> --dlt ${page.topic} ` +
    `--replay-id ${replay.id} (or set [kafka_retry] redrive_kafka_conn_id for a Stop here)`) : null;
}

async function stopReplay(page, replay) {
  replay.stopAsked = true;
  const button = $("#redrive-stop");
  if (button) button.disabled = true;
  try {
    await postJSON(dltUrl(page, `/replays/${encodeURIComponent(replay.id)}/stop`), {});
  } catch (error) {
    replay.stopAsked = false;
    status(`could not stop ${replay.id}: ${error.message}`, true);
  }
}

function startedBy(s) {
  const who = s.started_by || {};
  const run = who.airflow ? ` (run ${who.airflow.run_id})` : "";
  return s.triggered_by ? `${s.triggered_by}${run}` : `${who.user || "?"} on ${who.host || "?"}${run}`;
}

function filtersText(f) {
  if (!f) return "—";
  return Object.entries(f).filter(([, v]) => v !== null && !(Array.isArray(v) && !v.length))
    .map(([k, v]) => k.endsWith("_ms") ? `${k.slice(0, -3)}=${fmtMs(v)}` : `${k}=${Array.isArray(v) ? v.join(",") : v}`)
    .join(" ") || "all";
}

async function refreshAudit(page, known = null) {
  try {
    const data = known || await getJSON(dltUrl(page, "/replays"));
    if (dltPage !== page) return;
    const running = data.replays.filter((s) => s.state === "running").map((s) => s.replay_id);
    const warning = $("#redrive-warning");
    if (warning) {
      warning.textContent = running.length ? `running now: ${running.join(", ")}; a redrive started meanwhile ` +
        "fences it (it fails at its next commit, what it moved stays moved, nothing moves twice)" : "";
    }
    $("#dlt-audit").replaceChildren(el("h3", {}, "Past replays"), data.replays.length ? el("table", {},
      el("thead", {}, el("tr", {}, ["replay", "state", "moved", "rate", "started by", "started", "ended", "filters"]
        .map((h) => el("th", {}, h)))),
      el("tbody", {}, data.replays.map((s) => el("tr", {"data-audit": s.replay_id},
        el("td", {}, s.replay_id), el("td", {"data-audit-state": "", title: s.reason || ""}, s.state),
        el("td", {class: "num"}, `${s.moved ?? "—"} / ${s.selected ?? "—"}`),
        el("td", {}, `${s.rate ? `${s.rate}/s` : "—"} (${s.measured_rate ?? "—"}/s)`), el("td", {}, startedBy(s)),
        el("td", {}, fmtMs(s.started_ms)), el("td", {}, fmtMs(s.ended_ms)),
        el("td", {}, filtersText(s.filters), s.to ? ` → ${s.to}` : ""))))) : el("p", {class: "meta"}, "none yet"));
  } catch (error) {
    $("#dlt-audit").replaceChildren(el("div", {class: "error"}, `past replays: ${error.message}`));
  }
}

// The "Retry tiers" page: reads the plugin's JSON endpoints and triggers DAG runs through Airflow's REST API.
// No payloads and no Kafka configuration ever reach this page; every value is inserted as text, never HTML.
"use strict";

const BUCKETS = [["now", "due now"], ["minute", "< 1 minute"], ["hour", "< 1 hour"], ["day", "< 1 day"],
                 ["later", "later"]];
const $ = (selector) => document.querySelector(selector);

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "class") node.className = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

async function getJSON(url) {
  const response = await fetch(url, {credentials: "same-origin"});
  if (!response.ok) throw new Error(`${url}: HTTP ${response.status} ${await response.text()}`);
  return response.json();
}

function apiBase() {
  // the plugin is mounted at <base>/kafka-retry/; Airflow's REST API lives at <base>/api/v2
  return new URL("../api/v2/", window.location.href.replace(/[?#].*$/, "")).toString();
}

async function triggerDag(dagId, conf) {
  const response = await fetch(`${apiBase()}dags/${encodeURIComponent(dagId)}/dagRuns`, {
    method: "POST", credentials: "same-origin", headers: {"Content-Type": "application/json"},
    body: JSON.stringify({logical_date: null, conf: conf || {}}),
  });
  const text = await response.text();
  if (!response.ok) throw new Error(`HTTP ${response.status}: ${text}`);
  return JSON.parse(text);
}

function fmtMs(ms) {
  if (ms === null || ms === undefined) return "—";
  return new Date(ms).toISOString().replace(".000Z", "Z");
}

function fmtDelay(ms) {
  if (!ms) return "no delay";
  for (const [unit, size] of [["h", 3600000], ["m", 60000], ["s", 1000]]) {
    if (ms % size === 0) return `${ms / size}${unit} delay`;
  }
  return `${ms}ms delay`;
}

function histogram(due) {
  const max = Math.max(1, ...BUCKETS.map(([key]) => due[key] || 0));
  return el("div", {class: "bars"}, BUCKETS.map(([key, label]) => [
    el("span", {}, label),
    el("div", {class: due[key] ? "bar" : "bar zero", style: `width:${Math.max(1, 100 * (due[key] || 0) / max)}%`}),
    el("span", {class: "num", "data-due": key}, due[key] || 0),
  ]));
}

function partitionTable(partitions) {
  return el("table", {}, el("thead", {}, el("tr", {}, el("th", {}, "partition"), el("th", {class: "num"}, "committed"),
                                            el("th", {class: "num"}, "end"), el("th", {class: "num"}, "backlog"))),
    el("tbody", {}, partitions.map((p) => el("tr", {"data-partition": p.partition},
      el("td", {}, p.partition), el("td", {class: "num"}, p.committed ?? "—"), el("td", {class: "num"}, p.end ?? "—"),
      el("td", {class: "num", "data-partition-backlog": p.partition}, p.backlog)))));
}

function runsTable(runs) {
  if (!runs.length) return el("p", {class: "meta"}, "no runs yet (or no permission to read them)");
  return el("table", {}, el("thead", {}, el("tr", {}, el("th", {}, "run"), el("th", {}, "state"),
      el("th", {class: "num"}, "drained"), el("th", {class: "num"}, "ok"), el("th", {class: "num"}, "routed"),
      el("th", {class: "num"}, "dead"))),
    el("tbody", {}, runs.map((r) => {
      const t = (r.summary && r.summary.totals) || {};
      const sum = (obj) => Object.values(obj || {}).reduce((a, b) => a + b, 0);
      return el("tr", {}, el("td", {title: r.run_id}, (r.run_after || r.run_id).slice(0, 19)),
        el("td", {class: `state-${r.state}`}, r.state || "—"), el("td", {class: "num"}, t.drained ?? "—"),
        el("td", {class: "num"}, t.succeeded ?? "—"), el("td", {class: "num"}, r.summary ? sum(t.routed) : "—"),
        el("td", {class: "num"}, r.summary ? sum(t.dead_lettered) + (t.dropped || 0) : "—"));
    })));
}

function tierCard(tier) {
  const backlog = tier.backlog || {};
  const totals = backlog.totals || {backlog: 0, due: {}};
  const run = el("button", {type: "button", disabled: !tier.can_trigger,
    title: tier.can_trigger ? `trigger ${tier.dag_id} now` : "you may not trigger this DAG",
    onclick: async (event) => {
      event.target.disabled = true;
      try {
        const created = await triggerDag(tier.dag_id, tier.trigger_conf || {});
        status(`triggered ${tier.dag_id}: ${created.dag_run_id}`);
      } catch (error) { status(`could not trigger ${tier.dag_id}: ${error.message}`, true); }
      event.target.disabled = false;
    }}, "Run now");
  return el("section", {class: `card ${tier.kind}`, "data-topic": tier.topic, "data-kind": tier.kind},
    el("h3", {}, tier.topic),
    el("div", {class: "meta"}, `${tier.kind === "main" ? "main topic" : `tier ${tier.index}`} · ${fmtDelay(tier.delay_ms)}`,
       ` · group ${tier.group}`),
    backlog.error ? el("div", {class: "error", "data-error": tier.topic}, backlog.error) : [
      el("div", {}, el("span", {class: "big", "data-backlog": tier.topic}, totals.backlog), " records waiting",
         totals.scanned < totals.backlog ? ` (${totals.scanned} read for due times)` : ""),
      histogram(totals.due || {}),
      el("div", {class: "meta"}, `next due: ${fmtMs(totals.next_due_ms)}`),
      partitionTable(backlog.partitions || []),
    ],
    el("h4", {}, "Last runs ", el("a", {href: `../dags/${encodeURIComponent(tier.dag_id)}`, target: "_top"},
                                  tier.dag_id)),
    runsTable(tier.runs || []), run);
}

function fmtAge(seconds) {
  for (const [unit, size] of [["d", 86400], ["h", 3600], ["m", 60]]) {
    if (seconds >= size) return `${Math.floor(seconds / size)}${unit}`;
  }
  return `${Math.floor(seconds)}s`;
}

function oldestText(o) {
  if (!o) return "—";
  const main = o.head_main_offset === null || o.head_main_offset === undefined ? "" : ` (main offset ${o.head_main_offset})`;
  return `since ${fmtMs(o.since_ms)} (${fmtAge(o.age_s)}), head ${o.head}${main}${o.in_dlt ? " in its DLT" : ""}, ${o.held} held`;
}

// ordering: key: the blocked keys per partition (counts and the oldest block; never a key)
function blockedCard(topic, blocked) {
  const totals = blocked.totals || {blocked_keys: 0, held_records: 0};
  return el("section", {class: "card blocked", "data-topic": blocked.topic, "data-kind": "blocked"},
    el("h3", {}, "Blocked keys"), el("div", {class: "meta"}, `ordering: key · state ${blocked.topic}`),
    blocked.error ? el("div", {class: "error", "data-error": blocked.topic}, blocked.error) : [
      el("div", {}, el("span", {class: "big", "data-blocked-keys": topic}, totals.blocked_keys), " keys blocked, ",
         el("span", {"data-held-records": topic}, totals.held_records), " records held"),
      el("div", {class: "meta", "data-oldest": topic}, `oldest: ${oldestText(totals.oldest)}`),
      totals.bad_entries ? el("div", {class: "error"}, `${totals.bad_entries} state entries could not be read`) : [],
      el("table", {}, el("thead", {}, el("tr", {}, el("th", {}, "partition"), el("th", {class: "num"}, "keys"),
                                          el("th", {class: "num"}, "held"), el("th", {}, "oldest"))),
        el("tbody", {}, (blocked.partitions || []).map((p) => el("tr", {"data-blocked-partition": p.partition},
          el("td", {}, p.partition), el("td", {class: "num"}, p.blocked_keys), el("td", {class: "num"}, p.held_records),
          el("td", {}, [oldestText(p.oldest), ...(p.bad || []).map((b) => el("div", {class: "error"}, b))]))))),
    ]);
}

function deadCard(dead) {
  const counts = dead.counts || {};
  const byException = Object.entries(counts.by_exception || {});
  // its page (redrive.js): the records, and for who may trigger the replay DAG a dry run and Redrive
  const open = el("button", {type: "button", "data-open-dlt": dead.topic, onclick: () => openDltPage(dead)},
                  dead.can_trigger ? "Records & redrive" : "Records");
  return el("section", {class: `card ${dead.kind}`, "data-topic": dead.topic, "data-kind": dead.kind},
    el("h3", {}, dead.topic, " ", open), el("div", {class: "meta", "data-dead-kind": dead.topic}, deadKind(dead)),
    counts.error ? el("div", {class: "error", "data-error": dead.topic}, counts.error) : [
      el("div", {}, el("span", {class: "big", "data-dead-total": dead.topic}, counts.total),
         " records", counts.truncated ? " (at least; scan limit reached)" : ""),
      el("table", {}, el("thead", {}, el("tr", {}, el("th", {}, "exception class"), el("th", {class: "num"}, "records"),
                                          el("th", {}, ""))),
        el("tbody", {}, byException.map(([cls, n]) => el("tr", {"data-exception": cls},
          el("td", {}, cls), el("td", {class: "num", "data-exception-count": cls}, n),
          // "<other>" sums the classes past the view's cap (docs/security.md): no one class to replay
          el("td", {}, el("button", {type: "button", disabled: !dead.can_trigger || cls === "<other>",
            title: cls === "<other>" ? "many exception classes: filter by one in the replay form" :
              dead.can_trigger ? "open the replay form" : "you may not trigger the replay DAG",
            // "unknown" and "<share-group: reason>" name no class to filter by
            onclick: () => openReplay(dead, {exception: cls === "unknown" || cls.startsWith("<") ? "" : cls})},
            "Replay")))))),
      familyNotes(counts),
      hourly(counts.by_hour || []),
      samplesTable(counts.samples || []),
    ]);
}

// What a card is: the topology's DLT, its parking topic, or another framework's queue it names
function deadKind(dead) {
  if (dead.kind === "parking") return "parking: replayed records that failed again";
  if (dead.kind !== "dlq") return "dead-letter topic";
  return "another framework's dead-letter queue" +
    (dead.family ? ` · records without family headers: ${dead.family}` : " · family detected per record");
}

// Which frameworks wrote the records, and what their headers do not say (docs/dead-letters.md)
function familyNotes(counts) {
  const families = Object.entries(counts.by_family || {});
  const missing = Object.entries(counts.missing || {});
  const unreadable = Object.entries(counts.unreadable || {});
  return el("div", {class: "meta"},
    families.length ? el("div", {}, "families: ", families.map(([family, n], i) =>
      [i ? ", " : "", el("span", {"data-family-count": family}, `${family} ${n}`)])) : null,
    missing.length ? el("div", {}, "missing: ", missing.map(([name, n], i) =>
      [i ? ", " : "", el("span", {"data-missing-count": name}, `${name} (${n})`)])) : null,
    unreadable.length ? el("div", {class: "error"}, "unreadable headers: ",
      unreadable.map(([name, n]) => `${name} (${n})`).join(", ")) : null,
    counts.not_replayable ? el("div", {"data-not-replayable": counts.not_replayable},
      `${counts.not_replayable} without a copied record (share-group DLQ): nothing to replay`) : null);
}

function origin(s) {
  if (s.original_partition === null || s.original_offset === null) return s.original_topic || "—";
  return `${s.original_topic || "?"}[${s.original_partition}]@${s.original_offset}`;
}

// The newest records by their coordinates and what their headers say; never a key or a value
function samplesTable(samples) {
  if (!samples.length) return null;
  return el("div", {}, el("h4", {}, "Newest records"), el("table", {class: "samples"},
    el("thead", {}, el("tr", {}, ["record", "family", "from", "failed at", "group / connector", "failure",
                                  "deliveries", "missing"].map((h) => el("th", {}, h)))),
    el("tbody", {}, samples.map((s) => el("tr", {"data-sample": `${s.partition}@${s.offset}`},
      el("td", {}, `${s.partition}@${s.offset}`), el("td", {"data-sample-family": ""}, s.family),
      el("td", {"data-sample-origin": ""}, origin(s)), el("td", {}, fmtMs(s.failed_at_ms)),
      el("td", {}, s.group || s.connector || "—"),
      el("td", {"data-sample-failure": "", title: s.failure_cause ? `cause ${s.failure_cause}` : null},
         [s.failure_class, s.failure_message].filter(Boolean).join(": ") || "—"),
      el("td", {class: "num"}, s.delivery_count ?? "—"),
      el("td", {"data-sample-missing": ""}, (s.missing || []).join(", ") || "—"),
    )))));
}

function hourly(series) {
  if (!series.length) return null;
  const totals = series.map((s) => Object.values(s.counts).reduce((a, b) => a + b, 0));
  const max = Math.max(1, ...totals);
  return el("div", {}, el("h4", {}, "By hour of failure (UTC)"),
    el("div", {class: "bars"}, series.slice(-24).map((s, i) => {
      const n = totals[series.length - Math.min(series.length, 24) + i];
      return [el("span", {}, s.hour.slice(5, 13).replace("T", " ")),
              el("div", {class: "bar", style: `width:${Math.max(1, 100 * n / max)}%`,
                         title: JSON.stringify(s.counts)}), el("span", {class: "num"}, n)];
    })));
}

let replayTarget = null;

function openReplay(dead, prefill) {
  replayTarget = dead;
  const form = $("#replay-form");
  form.reset();
  form.elements.dlt.value = dead.topic;
  for (const [key, value] of Object.entries(prefill)) form.elements[key].value = value;
  form.elements.dry_run.checked = true;
  $("#replay-dag").textContent = dead.replay_dag_id;
  $("#replay-result").textContent = "";
  $("#replay-dialog").showModal();
}

async function submitReplay(event) {
  if (event.submitter && event.submitter.value !== "submit") return;
  event.preventDefault();
  const form = $("#replay-form");
  const conf = {dlt: form.elements.dlt.value, dry_run: form.elements.dry_run.checked};
  for (const key of ["exception", "original_topic", "since", "until", "to", "transform"]) {
    if (form.elements[key].value.trim()) conf[key] = form.elements[key].value.trim();
  }
  if (form.elements.limit.value) conf.limit = Number(form.elements.limit.value);
  try {
    const created = await triggerDag(replayTarget.replay_dag_id, conf);
    $("#replay-result").textContent = `triggered ${replayTarget.replay_dag_id}: ${created.dag_run_id}`;
  } catch (error) {
    $("#replay-result").textContent = `could not trigger ${replayTarget.replay_dag_id}: ${error.message}`;
  }
}

function status(text, isError = false) {
  const node = $("#status");
  node.textContent = text;
  node.className = isError ? "error" : "";
}

async function render() {
  const ident = $("#topology").value;
  if (!ident) return;
  status("reading the broker…");
  const view = $("#view");
  try {
    const data = await getJSON(`api/topologies/${encodeURIComponent(ident)}`);
    view.replaceChildren();
    if (data.error) {
      view.append(el("div", {class: "error", "data-error": "topology"}, data.error));
      status("");
      return;
    }
    view.append(el("p", {class: "meta"}, `${data.source} · main topic ${data.topic} · group ${data.group_id} · read at ${fmtMs(data.now_ms)}`));
    const flow = el("div", {class: "flow", id: "tiers"});
    data.tiers.forEach((tier, i) => { if (i) flow.append(el("span", {class: "arrow"}, "→")); flow.append(tierCard(tier)); });
    view.append(el("h2", {}, "Tiers"), flow);
    if (data.blocked_keys) {
      view.append(el("h2", {}, "Key order"), el("div", {class: "flow", id: "blocked-keys"}, blockedCard(data.topic, data.blocked_keys)));
    }
    view.append(el("h2", {}, "Dead letters"),
                el("div", {class: "flow", id: "dead-letters"}, data.dead_letter_topics.map(deadCard)));
    document.body.dataset.loaded = "true";
    status("");
  } catch (error) {
    view.replaceChildren(el("div", {class: "error"}, error.message));
    status("");
  }
}

async function start() {
  $("#refresh").addEventListener("click", render);
  $("#topology").addEventListener("change", render);
  $("#replay-form").addEventListener("submit", submitReplay);
  try {
    const data = await getJSON("api/topologies");
    const select = $("#topology");
    if (!data.topologies.length) {
      const where = data.patterns.length ? ` (looked in ${data.patterns.join(", ")})` : "";
      $("#view").replaceChildren(el("p", {}, `No topology files found that you may read${where}; set [kafka_retry] topologies, or ask for read access to their tier DAGs.`));
      document.body.dataset.loaded = "true";
      return;
    }
    for (const t of data.topologies) select.append(el("option", {value: t.id}, t.topic ? `${t.topic} (${t.source})` : t.source));
    await render();
  } catch (error) {
    $("#view").replaceChildren(el("div", {class: "error"}, error.message));
  }
}

start();

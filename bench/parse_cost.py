"""
``python -m bench.parse_cost``: what one topology DAG file costs Airflow's DAG processor to parse.

    python -m bench.parse_cost                   # 20 topologies, one DAG file each, and one folder DAG file
    python -m bench.parse_cost --topologies 200  # more of them
    python -m bench.parse_cost --topologies 200 --shards 40,10,5  # and the folder in 40, 10, 5 files
    python -m bench.parse_cost --name parse-cost-before

Airflow 3's DAG processor parses each file in a child forked from its manager, which has imported
Airflow (and pre-imported the ``airflow.*`` modules the file names) but not this package: every parse
pays the import of what the DAG file needs. This bench does the same: a parent imports the DAG
processor, and for each file forks a child that runs the processor's own ``_parse_file`` (the DagBag
import and the serialization of its DAGs) and reports its wall time and CPU time. Cases:

* ``per_file``: N topologies (event mode, 3 tiers), each with a DAG file of its own calling
  ``build_retry_dags``, as a user following the example would;
* ``folder``: the same N topologies from one DAG file calling ``build_retry_dags_from_folder``
  (its time divided by N is the cost per topology);
* ``shards_K`` (``--shards K,...``): the same folder split over K DAG files, each building its shard
  (``shard=(i, K)``), as ``docs/capacity.md`` recommends for many topologies.

It also runs ``airflow dags report`` (one process, every file: the first file pays the imports, the
rest are warm) and records each child's modules that parse time must not load (Kafka client, Spark,
engine, OpenLineage, plugin). It writes ``bench/results/<UTC date>-<name>.json`` and prints a summary.
Timing is measured, never asserted.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.results_file import claim_result_file
from testkit.parse_imports import heavy_modules

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"

TOPOLOGY = """\
topic: {name}
group_id: {name}-svc
attempts: 4
backoff: {{kind: custom, delays: [30s, 60s, 120s]}}
"""
DAG_FILE = """\
from airflow_kafka_retry import build_retry_dags

globals().update(
    build_retry_dags({topology!r}, handler="handlers.orders:handle", dag_id_template="{prefix}__{{topic}}")
)
"""
FOLDER_DAG_FILE = """\
from airflow_kafka_retry import build_retry_dags_from_folder

globals().update(build_retry_dags_from_folder({folder!r}, handler="handlers.orders:handle"))
"""
SHARD_DAG_FILE = """\
from airflow_kafka_retry import build_retry_dags_from_folder

globals().update(
    build_retry_dags_from_folder({folder!r}, handler="handlers.orders:handle", shard=({index}, {count}))
)
"""


def write_deployment(home: Path, count: int) -> tuple[Path, Path]:
    """``count`` topology YAMLs, a DAG file per topology (``per_file``) and a folder DAG file (``folder``)."""
    topologies, per_file, folder = home / "topologies", home / "per_file", home / "folder"
    for path in (topologies, per_file, folder):
        path.mkdir(parents=True)
    for i in range(count):
        name = f"t{i:03d}"
        yaml = topologies / f"{name}.yaml"
        yaml.write_text(TOPOLOGY.format(name=name))
        (per_file / f"{name}.py").write_text(DAG_FILE.format(topology=str(yaml), prefix=name))
    (folder / "retry_topologies.py").write_text(FOLDER_DAG_FILE.format(folder=str(topologies)))
    return per_file, folder


def write_shards(home: Path, count: int) -> Path:
    """``count`` DAG files that together build its folder (``shard=(i, count)``)."""
    shards = home / f"shards_{count}"
    shards.mkdir()
    for index in range(count):
        (shards / f"retry_topologies_{index:02d}.py").write_text(
            SHARD_DAG_FILE.format(folder=str(home / "topologies"), index=index, count=count)
        )
    return shards


def _fork_parse(path: Path) -> dict[str, Any]:
    """Parse ``path`` as the DAG processor does: in a forked child, with ``_parse_file``."""
    import structlog
    from airflow.dag_processing.processor import DagFileParseRequest, _parse_file, _pre_import_airflow_modules

    log = structlog.get_logger()
    _pre_import_airflow_modules(str(path), log)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: parse, report, exit without cleanup (as the processor's child does)
        os.close(read)
        try:
            before = set(sys.modules)
            wall, cpu = time.perf_counter(), time.process_time()
            msg = DagFileParseRequest(file=str(path), bundle_path=path.parent, bundle_name="bench")
            result = _parse_file(msg, log)
            report = {
                "wall_s": time.perf_counter() - wall,
                "cpu_s": time.process_time() - cpu,
                "dags": len(result.serialized_dags) if result else 0,
                "import_errors": dict(result.import_errors) if result and result.import_errors else {},
                "heavy_modules": heavy_modules(set(sys.modules) - before),
            }
        except BaseException as exc:
            report = {"error": repr(exc)}
        os.write(write, json.dumps(report).encode())
        os._exit(0)
    os.close(write)
    chunks = []
    while chunk := os.read(read, 65536):
        chunks.append(chunk)
    os.close(read)
    os.waitpid(pid, 0)
    return json.loads(b"".join(chunks))


def worker(folder: Path) -> None:
    """In the deployment's environment: fork-parse every DAG file of ``folder``, print JSON."""
    import airflow.dag_processing.manager  # noqa: F401 - what the DAG processor's manager has imported

    sys.path.insert(0, str(folder))
    print(json.dumps({p.name: _fork_parse(p) for p in sorted(folder.glob("*.py"))}))


def _summary(parses: dict[str, dict[str, Any]], topologies: int) -> dict[str, Any]:
    walls = [p["wall_s"] for p in parses.values() if "wall_s" in p]
    cpus = [p["cpu_s"] for p in parses.values() if "cpu_s" in p]
    return {
        "files": len(parses),
        "topologies": topologies,
        "dags": sum(p.get("dags", 0) for p in parses.values()),
        "errors": {
            k: p.get("error") or p.get("import_errors")
            for k, p in parses.items()
            if p.get("error") or p.get("import_errors")
        },
        "wall_s_per_file": {"median": round(statistics.median(walls), 4), "max": round(max(walls), 4)}
        if walls
        else None,
        "wall_ms_per_topology": round(1000 * sum(walls) / topologies, 2) if walls else None,
        "cpu_ms_per_topology": round(1000 * sum(cpus) / topologies, 2) if cpus else None,
        "heavy_modules": sorted({m for p in parses.values() for m in p.get("heavy_modules", [])}),
    }


def _dags_report(env: dict[str, str], cwd: Path) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "airflow", "dags", "report", "-o", "json"],
        check=False,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        cwd=cwd,
    )
    rows = None
    for line in reversed(done.stdout.splitlines()):  # the JSON line, after any log lines
        if line.startswith("[{") or line == "[]":
            rows = json.loads(line)
            break
    if done.returncode != 0 or not rows:
        return {"error": (done.stderr or done.stdout)[-2000:]}
    durations = sorted(_seconds(r["duration"]) for r in rows)
    return {
        "files": len(rows),
        "dags": sum(int(r["dag_num"]) for r in rows),
        "slowest_file_s": round(durations[-1], 4),
        "median_file_s": round(statistics.median(durations), 4),
        "total_s": round(sum(durations), 4),
    }


def _seconds(value: Any) -> float:
    """``dags report`` prints a duration as ``0:00:00.123456`` (a timedelta) or a number of seconds."""
    if isinstance(value, (int, float)):
        return float(value)
    hours, minutes, seconds = str(value).split(":")
    return int(hours) * 3600 + int(minutes) * 60 + float(seconds)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.parse_cost", description=__doc__.split("\n\n")[0])
    parser.add_argument("--topologies", type=int, default=20)
    parser.add_argument("--name", default="parse-cost", help="results file: <UTC date>-<name>.json")
    parser.add_argument(
        "--shards",
        default="",
        help="also the folder split over this many DAG files (shard=(i, N)); a list: 40,10,5",
    )
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument(
        "--code",
        type=Path,
        default=REPO,
        help="the checkout whose airflow_kafka_retry is parsed (default: this one)",
    )
    parser.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker(args.worker)
        return 0
    from airflow_kafka_retry.sandbox.airflow_stack import airflow_env

    stamp = datetime.datetime.now(datetime.UTC)
    load_before = os.getloadavg()
    code = args.code.resolve()
    # as installed by pip: byte-compiled (an environment with PYTHONDONTWRITEBYTECODE compiles at every parse)
    subprocess.run(
        [sys.executable, "-m", "compileall", "-q", str(code / "airflow_kafka_retry"), str(code / "dags")],
        check=True,
        env={k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"},
        capture_output=True,
    )
    cases: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="akr-bench-parse-") as tmp:
        home = Path(tmp)
        per_file, folder = write_deployment(home, args.topologies)
        layouts = [("per_file", per_file), ("folder", folder)]
        layouts += [(f"shards_{n}", write_shards(home, int(n))) for n in args.shards.split(",") if n.strip()]
        env = airflow_env(home, pythonpath=[code, REPO, code / "dags"])
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        migrated = subprocess.run(
            [sys.executable, "-m", "airflow", "db", "migrate"], env=env, capture_output=True, check=False
        )
        for case, dags in layouts:
            env["AIRFLOW__CORE__DAGS_FOLDER"] = str(dags)
            done = subprocess.run(
                [
                    sys.executable,
                    __file__,
                    "--worker",
                    str(dags),
                ],  # as a script: airflow_kafka_retry from code
                check=False,
                env=env,
                capture_output=True,
                text=True,
                timeout=1800,
                cwd=home,
            )
            if done.returncode != 0:
                raise SystemExit(f"{case}: the parse worker failed:\n{done.stderr[-3000:]}")
            parses = json.loads(done.stdout.strip().splitlines()[-1])
            report = (
                _dags_report(env, home)
                if migrated.returncode == 0
                else {"error": "airflow db migrate failed"}
            )
            cases[case] = {"fork_parse": _summary(parses, args.topologies), "dags_report": report}
            print(case, json.dumps(cases[case]), flush=True)
    document = {
        "date": stamp.isoformat(timespec="seconds"),
        "bench": "parse_cost",
        "topologies": args.topologies,
        "code": str(code),
        "bytecode": "precompiled (compileall), as a pip install leaves it",
        "machine": {
            "cores": os.cpu_count(),
            "load_average_at_start": [round(x, 2) for x in load_before],
            "load_average_at_end": [round(x, 2) for x in os.getloadavg()],
            "python": sys.version.split()[0],
            "platform": platform.platform(),
        },
        "cases": cases,
    }
    out = claim_result_file(args.out, stamp, args.name)  # one file per run, named by its start time
    out.write_text(json.dumps(document, indent=2) + "\n")
    print(f"written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

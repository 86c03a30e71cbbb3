"""
``python -m bench.parse_cost``: what one topology DAG file costs Airflow's DAG processor to parse.

    python -m bench.parse_cost                   # 20 topologies, one DAG file each, and one folder DAG file
    python -m bench.parse_cost --topologies 200  # more of them
    python -m bench.parse_cost --topologies 200 --shards 40,10,5  # and the folder in 40, 10, 5 files
    python -m bench.parse_cost --topologies 200 --layouts folder --profile  # where the time goes
    python -m bench.parse_cost --name parse-cost-before

Airflow 3's DAG processor parses each file in a child forked from its manager, which has imported
Airflow (and pre-imported the ``airflow.*`` modules the file names) but not this package: every parse
pays the import of what the DAG file needs. This bench does the same: a parent imports the DAG
processor, and for each file forks a child that runs the processor's own ``_parse_file`` (the DagBag
import and the serialization of its DAGs), encodes the result's frame as the child's ``send`` does, and
reports its wall time, its CPU time and the CPU of each phase (``bench/parse_profile.py``: running the
DAG file, serializing its DAGs, the frame) with the frame's size. Layouts:

* ``per_file``: N topologies (event mode, 3 tiers), each with a DAG file of its own calling
  ``build_retry_dags``, as a user following the example would;
* ``folder``: the same N topologies from one DAG file calling ``build_retry_dags_from_folder``
  (its time divided by N is the cost per topology);
* ``shards_K`` (``--shards K,...``): the same folder split over K DAG files, each building its shard
  (``shard=(i, K)``), as ``docs/capacity.md`` recommends for many topologies.

Each layout comes with each argument set of ``--arguments`` (``bench/parse_deployment.py``), side by
side: ``plain`` (the handler only) and ``readme`` (README.md's DAG file: notifiers, ``default_args``,
``asset_server``...); a case is ``<arguments>_<layout>``. ``--profile`` runs every parse under cProfile
and records each case's costliest functions per topology (its times are inflated, not measurements).

It also runs ``airflow dags report`` (one process, every file: the first file pays the imports, the
rest are warm; ``--no-report`` skips it) and records each child's modules that parse time must not load
(Kafka client, Spark, engine, OpenLineage, plugin). It writes ``bench/results/<UTC date>-<name>.json``
and prints a summary. Timing is measured, never asserted.
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
from pathlib import Path
from typing import Any

from bench.parse_deployment import ARGUMENTS, write_folder, write_per_file, write_topologies
from bench.parse_profile import profile_summary, timed_parse
from bench.results_file import claim_result_file
from testkit.parse_imports import heavy_modules

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"


def _fork_parse(path: Path, profile_to: Path | None = None, write: bool = False) -> dict[str, Any]:
    """
    Parse ``path`` as the DAG processor does: in a forked child, with ``_parse_file``.

    ``write``: then write its result to the metadata DB as the manager does (``bench/parse_write.py``).
    """
    import structlog
    from airflow.dag_processing.processor import _pre_import_airflow_modules

    log = structlog.get_logger()
    _pre_import_airflow_modules(str(path), log)
    read, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: parse, report, exit without cleanup (as the processor's child does)
        os.close(read)
        frame = b""
        try:
            before = set(sys.modules)
            result, frame, phases = timed_parse(path, log, profile_to)
            report = {
                **phases,
                "dags": len(result.serialized_dags) if result else 0,
                "import_errors": dict(result.import_errors) if result and result.import_errors else {},
                "heavy_modules": heavy_modules(set(sys.modules) - before),
            }
        except BaseException as exc:
            report = {"error": repr(exc)}
        document = json.dumps(report).encode()
        os.write(write_end, len(document).to_bytes(4, "big") + document)
        if write:
            view = memoryview(frame)
            while view:
                view = view[os.write(write_end, view) :]
        os._exit(0)
    os.close(write_end)
    chunks = []
    while chunk := os.read(read, 65536):
        chunks.append(chunk)
    os.close(read)
    os.waitpid(pid, 0)
    data = b"".join(chunks)
    size = int.from_bytes(data[:4], "big")
    report = json.loads(data[4 : 4 + size])
    if write and "error" not in report:
        from bench.parse_write import write_result

        report.update(write_result(data[4 + size :], path))
    return report


def worker(folder: Path, profile: Path | None, write: bool) -> None:
    """In the deployment's environment: fork-parse every DAG file of ``folder``, print JSON."""
    import airflow.dag_processing.manager  # noqa: F401 - what the DAG processor's manager has imported

    sys.path.insert(0, str(folder))
    files = sorted(folder.glob("*.py"))
    dumps = {p.name: profile / f"{p.stem}.prof" if profile else None for p in files}
    print(json.dumps({p.name: _fork_parse(p, dumps[p.name], write) for p in files}))


def _summary(parses: dict[str, dict[str, Any]], topologies: int) -> dict[str, Any]:
    walls = [p["wall_s"] for p in parses.values() if "wall_s" in p]

    def per_topology(key: str, scale: float = 1000) -> float | None:
        values = [p[key] for p in parses.values() if key in p]
        return round(scale * sum(values) / topologies, 2) if values else None

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
        "wall_ms_per_topology": per_topology("wall_s"),
        "cpu_ms_per_topology": per_topology("cpu_s"),
        # the phases of that CPU: running the DAG file, serializing its DAGs, encoding the result's frame
        "import_cpu_ms_per_topology": per_topology("import_cpu_s"),
        "serialize_cpu_ms_per_topology": per_topology("serialize_cpu_s"),
        "frame_cpu_ms_per_topology": per_topology("frame_cpu_s"),
        "frame_kb_per_topology": per_topology("frame_bytes", scale=1 / 1024),
        # --write: what the manager then spends on it (decode; first write; a re-write of unchanged DAGs)
        "decode_cpu_ms_per_topology": per_topology("decode_cpu_s"),
        "first_write_cpu_ms_per_topology": per_topology("first_write_cpu_s"),
        "rewrite_cpu_ms_per_topology": per_topology("rewrite_cpu_s"),
        "rewrite_wall_ms_per_topology": per_topology("rewrite_wall_s"),
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
    parser.add_argument(
        "--arguments",
        default=",".join(ARGUMENTS),
        help=f"the DAG files' argument sets, side by side (bench/parse_deployment.py): {','.join(ARGUMENTS)}",
    )
    parser.add_argument(
        "--layouts", default="per_file,folder", help="per_file (a DAG file per topology), folder, or both"
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="cProfile every parse and record each case's costliest functions (times are then inflated)",
    )
    parser.add_argument(
        "--write",
        action="store_true",
        help="also write each result to the (SQLite) metadata DB as the DAG processor's manager does, and "
        "again as at a re-parse (bench/parse_write.py)",
    )
    parser.add_argument("--no-report", action="store_true", help="skip `airflow dags report`")
    parser.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--worker-profile", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--worker-write", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker(args.worker, args.worker_profile, args.worker_write)
        return 0
    from airflow_kafka_retry.sandbox.airflow_stack import airflow_env

    argument_sets = [a.strip() for a in args.arguments.split(",") if a.strip()]
    unknown = sorted(set(argument_sets) - set(ARGUMENTS))
    if unknown:
        parser.error(f"--arguments: unknown {', '.join(unknown)}; known: {', '.join(ARGUMENTS)}")
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
        topologies = write_topologies(home, args.topologies)
        layouts: list[tuple[str, Path]] = []
        for arguments in argument_sets:  # side by side: each layout with each argument set
            if "per_file" in args.layouts:
                layouts.append((f"{arguments}_per_file", write_per_file(home, topologies, arguments)))
            if "folder" in args.layouts:
                layouts.append((f"{arguments}_folder", write_folder(home, topologies, arguments)))
            for n in (int(n) for n in args.shards.split(",") if n.strip()):
                layouts.append((f"{arguments}_shards_{n}", write_folder(home, topologies, arguments, n)))
        env = airflow_env(home, pythonpath=[code, REPO, code / "dags"])
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        migrated = subprocess.run(
            [sys.executable, "-m", "airflow", "db", "migrate"], env=env, capture_output=True, check=False
        )
        for case, dags in layouts:
            env["AIRFLOW__CORE__DAGS_FOLDER"] = str(dags)
            profile = home / f"profile_{case}" if args.profile else None
            # a script (airflow_kafka_retry from code), without its folder on sys.path (-P): bench/profile.py
            # would hide the standard library's profile module
            command = [sys.executable, "-P", __file__, "--worker", str(dags)]
            if args.write:
                command.append("--worker-write")
            if profile is not None:
                profile.mkdir()
                command += ["--worker-profile", str(profile)]
            done = subprocess.run(
                command, check=False, env=env, capture_output=True, text=True, timeout=1800, cwd=home
            )
            if done.returncode != 0:
                raise SystemExit(f"{case}: the parse worker failed:\n{done.stderr[-3000:]}")
            parses = json.loads(done.stdout.strip().splitlines()[-1])
            cases[case] = {"fork_parse": _summary(parses, args.topologies)}
            if not args.no_report and not args.profile:
                cases[case]["dags_report"] = (
                    _dags_report(env, home)
                    if migrated.returncode == 0
                    else {"error": "airflow db migrate failed"}
                )
            print(case, json.dumps(cases[case]), flush=True)
            if profile is not None:
                cases[case]["profile"] = profile_summary(sorted(profile.glob("*.prof")), args.topologies)
    document = {
        "date": stamp.isoformat(timespec="seconds"),
        "bench": "parse_cost",
        "topologies": args.topologies,
        "code": str(code),
        "bytecode": "precompiled (compileall), as a pip install leaves it",
        "profiled": args.profile,  # cProfile inflates every time of a profiled run
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

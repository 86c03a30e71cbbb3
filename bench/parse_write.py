"""
What the DAG processor's manager does with a parse's result, for ``bench/parse_cost.py --write``.

The child sends its result as one msgpack frame; the manager decodes it (msgspec, then pydantic, as
``WatchedSubprocess.handle_requests`` does) and writes it with ``update_dag_parsing_results_in_db``:
the ``dag`` rows, tags, assets and their references, the serialized DAGs (a new version only when a
DAG's hash changed). The DAG processor re-parses every file every ``min_file_process_interval``, so
the steady cost is a **re-write** of unchanged DAGs: :func:`write_result` writes a result once (the
first write creates the rows) and then ``rewrites`` more times, timing each in CPU and wall seconds of
this process (with SQLite the database's own work is in this process; with PostgreSQL it is not).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

BUNDLE = "bench"


def write_result(frame: bytes, file: Path, *, rewrites: int = 2) -> dict[str, Any]:
    """Decode ``frame`` (a parse result of ``file``) and write it ``1 + rewrites`` times; their costs."""
    import msgspec
    from airflow.dag_processing.processor import DagFileProcessorProcess
    from airflow.sdk.execution_time.comms import _RequestFrame

    cpu, wall = time.process_time(), time.perf_counter()
    body = msgspec.msgpack.Decoder(_RequestFrame).decode(frame[4:]).body
    result = DagFileProcessorProcess.decoder.validate_python(body)
    report: dict[str, Any] = {
        "decode_cpu_s": time.process_time() - cpu,
        "decode_wall_s": time.perf_counter() - wall,
    }
    _ensure_bundle()
    writes = []
    for _ in range(1 + rewrites):
        cpu, wall = time.process_time(), time.perf_counter()
        _persist(result, file)
        writes.append((time.process_time() - cpu, time.perf_counter() - wall))
    report["first_write_cpu_s"], report["first_write_wall_s"] = writes[0]
    if rewrites:
        report["rewrite_cpu_s"] = min(c for c, _ in writes[1:])  # the steady re-parse of unchanged DAGs
        report["rewrite_wall_s"] = min(w for _, w in writes[1:])
    return report


def _persist(result: Any, file: Path) -> None:
    """``DagFileProcessorManager.persist_parsing_result``'s write, in its own session."""
    from airflow.dag_processing.collection import update_dag_parsing_results_in_db
    from airflow.utils.session import create_session

    with create_session() as session:
        update_dag_parsing_results_in_db(
            bundle_name=BUNDLE,
            bundle_version=None,
            dags=result.serialized_dags,
            import_errors={(BUNDLE, k): v for k, v in (result.import_errors or {}).items()},
            parse_duration=None,
            warnings=set(),
            session=session,
            files_parsed={(BUNDLE, file.name)},
        )


def _ensure_bundle() -> None:
    """The ``bench`` bundle's row (the manager syncs its configured bundles before it parses)."""
    from airflow.models.dagbundle import DagBundleModel
    from airflow.utils.session import create_session

    with create_session() as session:
        if session.get(DagBundleModel, BUNDLE) is None:
            session.add(DagBundleModel(name=BUNDLE))

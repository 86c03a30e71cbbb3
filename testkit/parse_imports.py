"""
What parsing a DAG file must not load: the modules of the tasks and the triggerer.

Shared by the parse test (``tests/unit/test_parse_imports.py``: a real parse loads none of them) and the
parse-cost bench (``bench/parse_cost.py``: each measured parse lists those it loaded).
"""

from __future__ import annotations

from collections.abc import Iterable

#: Modules a DAG file's parse must not load (they belong to the tasks and the triggerer).
HEAVY_PREFIXES = (
    "confluent_kafka",
    "pyspark",
    "openlineage",
    "airflow.providers.openlineage",
    "airflow_kafka_retry.engine.",
    "airflow_kafka_retry.spark",
    "airflow_kafka_retry.observability",
    "airflow_kafka_retry.plugin",
)
#: ``engine.drain.options`` is a plain dataclass of run options (no I/O): operators validate ``options``
#: with it. Its package ``engine.drain`` comes with it (a docstring, no import).
ALLOWED = ("airflow_kafka_retry.engine.drain", "airflow_kafka_retry.engine.drain.options")


def heavy_modules(names: Iterable[str]) -> list[str]:
    """The modules of ``names`` that parsing a DAG file must not import."""
    return sorted(n for n in names if n.startswith(HEAVY_PREFIXES) and n not in ALLOWED)

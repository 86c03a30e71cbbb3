"""The two CLI modules share their helpers through ``cli_support`` and never import each other."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).parents[2] / "airflow_kafka_retry"


def _imported_modules(path: Path) -> set[str]:
    """Every module ``path`` imports, at the top or inside a function."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


def test_the_dlt_cli_does_not_import_the_main_cli():
    assert "airflow_kafka_retry.cli" not in _imported_modules(PACKAGE / "dlt" / "cli.py")


def test_the_shared_helpers_import_neither_cli():
    imported = _imported_modules(PACKAGE / "cli_support.py")
    assert not imported & {"airflow_kafka_retry.cli", "airflow_kafka_retry.dlt.cli"}
    assert not any(m.startswith("airflow_kafka_retry") for m in imported)


def test_both_clis_use_the_shared_helpers():
    for path in (PACKAGE / "cli.py", PACKAGE / "dlt" / "cli.py"):
        assert "airflow_kafka_retry.cli_support" in _imported_modules(path), path

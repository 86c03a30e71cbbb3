"""
Measure, once per test run, which Kafka behaviours the broker under test really has.

Tests that depend on one of these behaviours are skipped (with the reason) on brokers that lack
it, instead of passing by accident; the same tests run in full against real Kafka. Every check
uses its own explicitly created topic (one partition, except where a check needs more) and runs in
its own daemon thread with a deadline. A check that *measures* the behaviour missing returns the
reason; a check that raises or overruns its deadline has measured nothing, so the probe fails
(``CapabilityProbeError``) instead of reporting the capability missing, which would only skip tests.

Against an external cluster (real Kafka) every capability is expected: ``check_expected`` turns one
measured missing into ``MissingCapabilityError`` (see ``expected_capabilities``).

The checks are in :mod:`.capability_checks` and :mod:`.capability_txn_checks`.

``delete_records`` policy: on Tansu 0.6 a DeleteRecords request panics the broker's connection
task (the broker itself keeps serving other connections). So by default it is *not sent* to a
broker whose cluster id names it as Tansu (reported missing, "not probed: ..."); on any other
broker it is sent last, from a throwaway AdminClient with short timeouts, and the probe then
checks with a fresh client that the broker still answers (``BrokerProbeError`` if not).
``probe_delete_records=True`` forces the request, ``False`` never sends it.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from confluent_kafka import (
    KafkaException,
)

from airflow_kafka_retry.sandbox.scratch_topics import admin_client, create_topics, delete_topics
from testkit.capability_checks import (
    SIZE_LIMIT,
    check_abort_isolation,
    check_commit_metadata,
    check_delete_records,
    check_exact_high_watermark,
    check_max_message_bytes,
    check_timestamp_lookup,
)
from testkit.capability_txn_checks import (
    TXN_PRODUCERS,
    check_concurrent_txn_offset_commits,
    check_offsets_only_transactions,
)

log = logging.getLogger(__name__)

#: Names of the boolean capability fields, in probe order.
CAPABILITIES: tuple[str, ...] = (
    "abort_isolation",
    "exact_high_watermark",
    "timestamp_lookup",
    "enforces_max_message_bytes",
    "concurrent_txn_offset_commits",
    "offsets_only_transactions",
    "commit_metadata",
    "delete_records",
)

TANSU_DELETE_RECORDS_REASON = (
    "not probed: DeleteRecords is known to crash Tansu's connection task (not implemented in Tansu 0.6)"
)


#: Names the capabilities a broker under ``KAFKA_BOOTSTRAP_SERVERS`` must have (comma-separated, ``all`` or
#: ``none``); without it, an external cluster must have all of them (real Kafka does).
EXPECTED_ENV = "KAFKA_EXPECTED_CAPABILITIES"


class BrokerProbeError(RuntimeError):
    """The broker could not be reached, or stopped answering after the probes."""


class CapabilityProbeError(BrokerProbeError):
    """A capability check raised or overran its deadline: it measured nothing, so no test may skip on it."""


class MissingCapabilityError(BrokerProbeError):
    """The broker lacks a capability it is expected to have (real Kafka has every one)."""


@dataclass(frozen=True)
class BrokerCapabilities:
    """Which optional-in-practice Kafka behaviours a broker has; ``reasons`` explains each missing one."""

    abort_isolation: bool = False
    """Records of an aborted transaction are hidden from ``read_committed`` consumers."""
    exact_high_watermark: bool = False
    """ListOffsets(latest) and ``get_watermark_offsets(cached=False)`` equal the true log end."""
    timestamp_lookup: bool = False
    """``offsets_for_times`` finds the first offset at or after a timestamp."""
    enforces_max_message_bytes: bool = False
    """A record larger than the topic's ``max.message.bytes`` is rejected."""
    concurrent_txn_offset_commits: bool = False
    """Offsets committed for one group by concurrent transactional producers (different
    ``transactional.id``) are all stored once ``commit_transaction`` returns: none is lost or held back."""
    offsets_only_transactions: bool = False
    """A transaction that commits consumer offsets but produces no record stores those offsets
    (the engine commits such a transaction for every chunk in which no record failed)."""
    commit_metadata: bool = False
    """An offset commit's metadata string is stored and returned by ``committed()`` (the DLT watch keeps
    its admitted metric tags there)."""
    delete_records: bool = False
    """``AdminClient.delete_records`` moves the low watermark."""
    reasons: dict[str, str] = field(default_factory=dict, hash=False)
    cluster_id: str | None = None
    is_tansu: bool = False
    probe_seconds: float = 0.0

    @classmethod
    def everything(cls, **overrides: object) -> BrokerCapabilities:
        """All capabilities present (a real Kafka broker), with optional field overrides."""
        values: dict[str, object] = {name: True for name in CAPABILITIES}
        values.update(overrides)
        return cls(**values)  # type: ignore[arg-type]

    def has(self, name: str) -> bool:
        """Whether capability ``name`` is present; ``ValueError`` for an unknown name."""
        _check_name(name)
        return bool(getattr(self, name))

    def missing(self) -> dict[str, str]:
        """``{name: reason}`` for every missing capability."""
        return {n: self.reasons.get(n, "no reason recorded") for n in CAPABILITIES if not getattr(self, n)}

    def summary_lines(self) -> list[str]:
        """Human-readable lines, one per capability, for the pytest terminal summary."""
        kind = "Tansu" if self.is_tansu else "Kafka"
        lines = [
            (
                f"broker capabilities ({kind}, cluster id {self.cluster_id!r}, "
                f"probed in {self.probe_seconds:.1f}s):"
            )
        ]
        for name in CAPABILITIES:
            if getattr(self, name):
                lines.append(f"  {name}: yes")
            else:
                lines.append(f"  {name}: NO - {self.reasons.get(name, 'no reason recorded')}")
        return lines


def _check_name(name: str) -> None:
    if name not in CAPABILITIES:
        raise ValueError(f"unknown broker capability {name!r}; known: {', '.join(CAPABILITIES)}")


def expected_capabilities(*, external: bool, setting: str | None) -> tuple[str, ...]:
    """
    The capabilities the broker under test must have.

    ``setting`` is ``KAFKA_EXPECTED_CAPABILITIES`` (``None`` when unset): ``all``, ``none`` or a
    comma-separated list of names. Unset, an external cluster (``external``) is taken for real Kafka
    and must have every capability; the embedded Tansu broker need have none (tests skip instead).
    """
    if setting is None or not setting.strip():
        return CAPABILITIES if external else ()
    value = setting.strip().lower()
    if value == "all":
        return CAPABILITIES
    if value == "none":
        return ()
    names = tuple(n.strip() for n in setting.split(",") if n.strip())
    unknown = [n for n in names if n not in CAPABILITIES]
    if unknown:
        raise ValueError(
            f"{EXPECTED_ENV}: unknown broker capability {', '.join(map(repr, unknown))}; "
            f"use all, none or names from: {', '.join(CAPABILITIES)}"
        )
    return names


def check_expected(caps: BrokerCapabilities, expected: tuple[str, ...], *, broker: str) -> None:
    """``MissingCapabilityError`` naming each capability in ``expected`` that ``caps`` lacks, and why."""
    lacking = {name: reason for name, reason in caps.missing().items() if name in expected}
    if lacking:
        listed = "; ".join(f"{name}: {reason}" for name, reason in lacking.items())
        raise MissingCapabilityError(
            f"broker {broker} lacks {len(lacking)} capability(ies) expected of it ({listed}). Real Kafka has "
            f"every one, so tests needing them would be skipped, not run. If this broker is not real Kafka, "
            f"set {EXPECTED_ENV} to the capabilities it must have (comma-separated, or none)."
        )


def missing_reason(caps: BrokerCapabilities, name: str) -> str | None:
    """``None`` if ``caps`` has ``name``, else a skip message naming the capability and why it is missing."""
    if caps.has(name):
        return None
    return f"broker lacks capability {name!r}: {caps.reasons.get(name, 'no reason recorded')}"


_CheckFn = Callable[[str, str, float], "str | None"]
#: capability -> (check, topic config, partitions of its topic)
_CHECKS: dict[str, tuple[_CheckFn, Mapping[str, str], int]] = {
    "abort_isolation": (check_abort_isolation, {}, 1),
    "exact_high_watermark": (check_exact_high_watermark, {}, 1),
    "timestamp_lookup": (check_timestamp_lookup, {}, 1),
    "enforces_max_message_bytes": (check_max_message_bytes, {"max.message.bytes": str(SIZE_LIMIT)}, 1),
    "concurrent_txn_offset_commits": (check_concurrent_txn_offset_commits, {}, TXN_PRODUCERS + 1),
    "offsets_only_transactions": (check_offsets_only_transactions, {}, 1),
    "commit_metadata": (check_commit_metadata, {}, 1),
    "delete_records": (check_delete_records, {}, 1),
}


# ----------------------------------------------------------------------------- runner
#: What a finished check gives: (reason the capability is missing or None, error that kept it from measuring).
_Outcome = tuple["str | None", "str | None"]


def _run_bounded(name: str, bootstrap: str, topic: str, timeout: float) -> Callable[[], _Outcome]:
    """Start check ``name`` in a daemon thread; return a function that joins it by the deadline."""
    check, config, partitions = _CHECKS[name]
    box: dict[str, _Outcome] = {}

    def target() -> None:
        try:
            create_topics(bootstrap, [topic], partitions, config=config, timeout=timeout)
            box["outcome"] = (check(bootstrap, topic, timeout), None)
        except Exception as exc:  # reported as the probe's error, never as "missing"
            log.debug("capability check %s failed", name, exc_info=True)
            box["outcome"] = (None, f"raised {type(exc).__name__}: {exc}")

    thread = threading.Thread(target=target, name=f"caps-{name}", daemon=True)
    thread.start()
    limit = 2 * timeout + 2  # create + check, each bounded by timeout
    deadline = time.monotonic() + limit

    def join() -> _Outcome:
        thread.join(max(0.0, deadline - time.monotonic()))
        if thread.is_alive():
            return None, f"did not finish within {limit:.1f}s"
        return box["outcome"]

    return join


def _cluster_id(bootstrap: str, timeout: float) -> str | None:
    try:
        return admin_client(bootstrap).list_topics(timeout=timeout).cluster_id
    except KafkaException as exc:
        raise BrokerProbeError(f"broker at {bootstrap} does not answer metadata requests: {exc}") from exc


def probe_capabilities(
    bootstrap: str, *, check_timeout: float = 5.0, probe_delete_records: bool | None = None
) -> BrokerCapabilities:
    """
    Measure the capabilities of the broker at ``bootstrap`` (takes about 1.5 s on Tansu).

    Checks run in parallel on throwaway topics that are deleted afterwards; ``delete_records``
    runs last and alone (see the module docstring for when it is sent at all). Raises
    ``BrokerProbeError`` if the broker is unreachable before, or stops answering after, probing,
    and ``CapabilityProbeError`` naming every check that raised or overran its deadline.
    """
    started = time.monotonic()
    cluster_id = _cluster_id(bootstrap, check_timeout)
    is_tansu = "tansu" in (cluster_id or "").lower()
    run = uuid.uuid4().hex[:8]
    topics = {name: f"caps-probe-{run}-{name.replace('_', '-')}" for name in CAPABILITIES}
    reasons: dict[str, str | None] = {}
    errors: dict[str, str] = {}

    def record(name: str, outcome: _Outcome) -> None:
        reasons[name], error = outcome
        if error is not None:
            errors[name] = error

    try:
        joins = {
            name: _run_bounded(name, bootstrap, topics[name], check_timeout)
            for name in CAPABILITIES
            if name != "delete_records"
        }
        for name, join in joins.items():
            record(name, join())
        send = probe_delete_records if probe_delete_records is not None else not is_tansu
        if send:
            record(
                "delete_records",
                _run_bounded("delete_records", bootstrap, topics["delete_records"], check_timeout)(),
            )
            _cluster_id_after(bootstrap, check_timeout)
        else:
            reasons["delete_records"] = (
                TANSU_DELETE_RECORDS_REASON if is_tansu else "not probed: probe_delete_records=False"
            )
    finally:
        try:
            delete_topics(bootstrap, topics.values(), timeout=check_timeout)
        except Exception:  # throwaway topics; never fail the probe over cleanup
            log.warning("could not delete capability probe topics %s", list(topics.values()), exc_info=True)
    if errors:
        listed = "; ".join(f"{name} {error}" for name, error in errors.items())
        raise CapabilityProbeError(
            f"capability check(s) of the broker at {bootstrap} measured nothing: {listed}. A check that "
            "errs is not a missing capability (that would skip the tests needing it); fix the broker or the "
            "check."
        )
    caps = BrokerCapabilities(
        **{name: reasons[name] is None for name in CAPABILITIES},
        reasons={name: reason for name, reason in reasons.items() if reason is not None},
        cluster_id=cluster_id,
        is_tansu=is_tansu,
        probe_seconds=time.monotonic() - started,
    )
    log.info("%s", "\n".join(caps.summary_lines()))
    return caps


def _cluster_id_after(bootstrap: str, timeout: float) -> None:
    try:
        _cluster_id(bootstrap, timeout)
    except BrokerProbeError as exc:
        raise BrokerProbeError(f"broker stopped answering after the delete_records probe: {exc}") from exc

"""
A ledger of keyed records with per-key sequence numbers, for the key-order tests and bench (issue 50).

* :func:`plan` draws which key each record has (seeded), numbering each key's records 0, 1, 2, ...
* :func:`failures` says, from ``(seed, key, seq)`` alone, how often a record fails before it succeeds:
  about 5 % once, 5 % twice, 1 % never (:data:`NEVER`: it ends in the DLT), the rest never fail.
* :func:`handle` is the handler (``testkit.ordering_ledger:handle``, batch-indexed): a record fails while
  its attempt is <= its failures; every call's outcome is appended to ``$AKR_ORDER_LEDGER`` as one line
  ``ok|fail key seq attempt pid epoch_ms`` (O_APPEND: several processes share the file, in handling order).
* :func:`check_order`: per key, the handled sequence is its produced sequence minus the dead-lettered
  records, in order; nothing lost, nothing twice (a killed process's lines handled again later excepted:
  handling is at least once across a SIGKILL, committing is not).

A record's value is ``key seq produced_ms`` (bytes), so the handler needs no deserializer and a held copy
carries everything the check needs. No key or value is ever logged by the engine; the ledger file is the
test's own.
"""

from __future__ import annotations

import hashlib
import os
import random
import time
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Producer

from airflow_kafka_retry import BatchFailedError

LEDGER_ENV, SEED_ENV = "AKR_ORDER_LEDGER", "AKR_ORDER_SEED"
HANDLER = "testkit.ordering_ledger:handle"
#: :func:`failures` of a record that never succeeds.
NEVER = -1
#: Out of 10,000: never succeeds, fails once, fails twice.
NEVER_IN, ONCE_IN, TWICE_IN = 100, 500, 500


class LedgerFailure(RuntimeError):
    """A ledger record's planned failure (retryable)."""


def failures(key: str, seq: int, seed: int = 0) -> int:
    """How many times record ``seq`` of ``key`` fails before it succeeds; :data:`NEVER`: it never does."""
    digest = hashlib.sha256(f"{seed}/{key}/{seq}".encode()).digest()
    draw = int.from_bytes(digest[:4], "big") % 10_000
    if draw < NEVER_IN:
        return NEVER
    if draw < NEVER_IN + ONCE_IN:
        return 1
    if draw < NEVER_IN + ONCE_IN + TWICE_IN:
        return 2
    return 0


def value_of(key: str, seq: int, produced_ms: int) -> bytes:
    return f"{key} {seq} {produced_ms}".encode()


def parse(value: bytes) -> tuple[str, int, int]:
    """``(key, seq, produced_ms)`` of a ledger record's value."""
    key, seq, produced = value.decode().split(" ")
    return key, int(seq), int(produced)


def _append(lines: list[str]) -> None:
    if not lines:
        return
    fd = os.open(os.environ[LEDGER_ENV], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, "".join(lines).encode())
    finally:
        os.close(fd)


def handle(records: Sequence[Any]) -> None:
    """The ledger's handler: the first record that must fail fails the batch at its index."""
    seed, pid = int(os.environ.get(SEED_ENV, "0")), os.getpid()
    lines: list[str] = []
    for index, record in enumerate(records):
        value = record.raw_value if record.raw_value is not None else record.value
        key, seq, _ = parse(value)
        now = int(time.time() * 1000)
        planned = failures(key, seq, seed)
        if planned == NEVER or record.attempt <= planned:
            lines.append(f"fail {key} {seq} {record.attempt} {pid} {now}\n")
            _append(lines)
            error = LedgerFailure(f"ledger record {seq} of its key fails on attempt {record.attempt}")
            raise BatchFailedError(index, error)
        lines.append(f"ok {key} {seq} {record.attempt} {pid} {now}\n")
    _append(lines)


# ----------------------------------------------------------------------------- what is produced
@dataclass
class Plan:
    """The records, in produce order: ``(key, seq)``; and the seed of their fates."""

    records: list[tuple[str, int]]
    seed: int = 0

    def sequences(self) -> dict[str, list[int]]:
        out: dict[str, list[int]] = defaultdict(list)
        for key, seq in self.records:
            out[key].append(seq)
        return dict(out)

    def dead(self) -> set[tuple[str, int]]:
        """The records that never succeed (dead-lettered under ``release_on: dlt``)."""
        return {(k, s) for k, s in self.records if failures(k, s, self.seed) == NEVER}

    def never_failing_keys(self) -> set[str]:
        """Keys none of whose records ever fails."""
        failing = {k for k, s in self.records if failures(k, s, self.seed) != 0}
        return {k for k, _ in self.records} - failing


def plan(records: int, keys: int, seed: int = 0) -> Plan:
    """``records`` records over ``keys`` keys (each key drawn at random, seeded), seq numbered per key."""
    rng, next_seq = random.Random(seed), [0] * keys
    out = []
    for _ in range(records):
        k = rng.randrange(keys)
        out.append((f"key-{k}", next_seq[k]))
        next_seq[k] += 1
    return Plan(out, seed)


def produce(
    bootstrap: str,
    topic: str,
    records: Iterable[tuple[str, int]],
    *,
    rate: float | None = None,
    timeout_s: float = 120.0,
) -> dict[tuple[str, int], int]:
    """
    Produce ``records`` to ``topic`` (partitioned by key), at ``rate`` records/s if given.

    Returns when each was produced (epoch ms, also in its value), by ``(key, seq)``.
    """
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "linger.ms": 5,
            "compression.type": "lz4",
        }
    )
    errors: list[Any] = []

    def delivered(err: Any, _msg: Any) -> None:
        if err is not None:
            errors.append(err)

    started, count, produced = time.monotonic(), 0, {}
    for key, seq in records:
        if rate:
            ahead = started + count / rate - time.monotonic()
            if ahead > 0:
                time.sleep(ahead)
        produced[(key, seq)] = now = int(time.time() * 1000)
        value = value_of(key, seq, now)
        while True:
            try:
                producer.produce(topic, key=key.encode(), value=value, on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
        count += 1
    if producer.flush(timeout_s):
        raise RuntimeError(f"{topic}: ledger records not acknowledged within {timeout_s:.0f} s")
    if errors:
        raise RuntimeError(f"{topic}: {len(errors)} ledger records failed, first: {errors[0]}")
    return produced


# ----------------------------------------------------------------------------- what was handled
@dataclass(frozen=True)
class Entry:
    """One line of the ledger file: a handler call's outcome for one record."""

    ok: bool
    key: str
    seq: int
    attempt: int
    pid: int
    at_ms: int


def read_ledger(path: str) -> list[Entry]:
    out = []
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                outcome, key, seq, attempt, pid, at = line.split()
                out.append(Entry(outcome == "ok", key, int(seq), int(attempt), int(pid), int(at)))
    return out


@dataclass
class OrderReport:
    """What :func:`check_order` found; ``problems`` empty when the ledger holds."""

    keys: int = 0
    handled: int = 0
    dead: int = 0
    lost: int = 0
    duplicates: int = 0
    handled_again_after_kill: int = 0
    out_of_order_keys: int = 0
    problems: list[str] = field(default_factory=list)

    @property
    def holds(self) -> bool:
        return not self.problems


def check_order(
    ledger: Plan, entries: Sequence[Entry], *, killed_pids: Iterable[int] = (), retried: bool = False
) -> OrderReport:
    """
    Per key: the successes, in the ledger file's order, are its produced sequence minus the dead ones.

    A success written by a killed process counts when no later success of the same record follows (its
    chunk committed before the kill); otherwise it was handled again after the kill and is dropped.
    ``retried``: the same for every process (a chunk whose commit failed is handled again by its run).
    """
    killed = set(killed_pids)
    dead = ledger.dead()
    report = OrderReport(keys=len(ledger.sequences()), dead=len(dead))
    seen: dict[str, list[Entry]] = defaultdict(list)
    for entry in entries:
        if entry.ok:
            seen[entry.key].append(entry)
    for key, produced in sorted(ledger.sequences().items()):
        expected = [s for s in produced if (key, s) not in dead]
        kept = []
        for i, entry in enumerate(seen.get(key, [])):
            again = any(e.seq == entry.seq for e in seen[key][i + 1 :])
            if again and (retried or entry.pid in killed):
                report.handled_again_after_kill += 1
                continue
            kept.append(entry.seq)
        report.handled += len(kept)
        if kept == expected:
            continue
        lost = set(expected) - set(kept)
        twice = len(kept) - len(set(kept))
        report.lost += len(lost)
        report.duplicates += twice
        strays = set(kept) - set(expected)
        if not lost and not twice and not strays:
            report.out_of_order_keys += 1
        if len(report.problems) < 5:
            report.problems.append(
                f"key {key!r}: expected {expected}, handled {kept} (lost {sorted(lost)}, "
                f"twice {twice}, dead-lettered yet handled {sorted(strays)})"
            )
    return report


def settle(
    tiers: Sequence[Any], run_tier: Any, ledger: Plan, path: str, *, max_passes: int = 12
) -> tuple[int, list[Any]]:
    """
    Run every tier in passes until the ledger is settled; the passes and the run summaries.

    ``run_tier(tier) -> RunSummary``; settled: every record that can succeed has (per the ledger file) and
    a whole pass drained nothing; at most ``max_passes``.

    Under ``ordering: key`` a held record waits for its head's mark, which the next run of the main tier
    reads: so passes, as the watcher would start runs one after the other.
    """
    wanted = {(k, s) for k, s in ledger.records} - ledger.dead()
    summaries: list[Any] = []
    for passes in range(1, max_passes + 1):
        drained = 0
        for tier in tiers:
            summary = run_tier(tier)
            if not summary.ok:
                failed = [p.error for p in summary.failed_partitions]
                raise AssertionError(f"pass {passes}, tier {tier.topic}: {failed}")
            summaries.append(summary)
            drained += summary.totals()["drained"]
        done = {(e.key, e.seq) for e in read_ledger(path) if e.ok}
        if drained == 0 and wanted <= done:
            return passes, summaries
    return max_passes, summaries

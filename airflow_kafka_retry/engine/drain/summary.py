"""Run summaries: counts, offset ranges, durations and dead-letter coordinates. Never payloads."""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

from airflow_kafka_retry.engine.drain.distribution import Distribution

DEFAULT_COORDINATE_CAP = 100
#: What a run under ``ordering: key`` counts per partition (its totals show them when any is non-zero).
ORDERING_COUNTS = ("held", "released", "marks_written", "marks_ignored")
#: Errors of retried attempts a partition summary keeps.
MAX_RETRY_ERRORS = 3


@dataclass
class DeadLetter:
    """Where a dead-lettered (or dropped) record came from and where it went."""

    topic: str
    partition: int
    offset: int
    exception: str
    reason: str
    dlt_topic: str | None = None
    dlt_partition: int | None = None
    dlt_offset: int | None = None


@dataclass
class PartitionSummary:
    """What one run did to one partition of a tier."""

    topic: str
    partition: int
    group: str
    status: str = "ok"  # ok | failed
    error: str | None = None
    start_offset: int | None = None  # the committed offset the run started from (None: no commit yet)
    first_offset: int | None = None  # first drained record
    last_offset: int | None = None  # last drained record
    committed_offset: int | None = None  # what the run committed (next offset to read)
    stop_reason: str | None = None  # end | not_due | limit | stopped
    stopped_by: str | None = (
        None  # why a stopped partition stopped: killed, deadline, window_closed, max_run...
    )
    left: int | None = (
        None  # records after the committed offset, up to the end seen by the run (None: unknown)
    )
    next_due_ms: int | None = None  # due time of the first record left for a later run
    drained: int = 0
    succeeded: int = 0
    routed: dict[str, int] = field(default_factory=dict)  # destination topic -> records
    dead_lettered: dict[str, int] = field(default_factory=dict)  # exception class -> records
    dlt_topics: dict[str, int] = field(default_factory=dict)  # DLT topic -> records sent there
    dropped: int = 0
    untrusted_replays: int = 0  # failed records whose replay headers were ignored (not in the replay log)
    handler_calls: int = 0
    extra_handler_calls: int = 0
    transactions: int = 0
    duration_s: float = 0.0
    dead_letters: list[DeadLetter] = field(default_factory=list)
    dead_letters_truncated: int = 0
    lateness_ms: Distribution = field(default_factory=Distribution)  # handled - due, records with a due time
    handler_ms: Distribution = field(default_factory=Distribution)  # time of each handler call (batch)
    held: int = 0  # ordering: key: main records held behind their key's head
    released: int = 0  # ordering: key: held records handled once their key was released
    marks_written: int = 0  # ordering: key: marks written to the hold topic
    marks_ignored: int = 0  # ordering: key: marks read that named no head of the state
    retries: int = 0  # attempts tried again after a broker failure in the run (drain/supervisor.py)
    retry_errors: list[str] = field(default_factory=list)  # what failed the first of those attempts

    def count_route(self, topic: str) -> None:
        self.routed[topic] = self.routed.get(topic, 0) + 1

    def count_dead_letter(self, letter: DeadLetter, cap: int) -> None:
        self.dead_lettered[letter.exception] = self.dead_lettered.get(letter.exception, 0) + 1
        if letter.dlt_topic is not None:
            self.dlt_topics[letter.dlt_topic] = self.dlt_topics.get(letter.dlt_topic, 0) + 1
        if len(self.dead_letters) < cap:
            self.dead_letters.append(letter)
        else:
            self.dead_letters_truncated += 1

    def absorb(self, later: PartitionSummary, cap: int = DEFAULT_COORDINATE_CAP) -> None:
        """Add what a later pass over the same partition did (the same run, continued)."""
        if self.status == "ok" and later.status != "ok":
            self.status, self.error = later.status, later.error
        if self.first_offset is None:
            self.first_offset = later.first_offset
        for name in ("last_offset", "committed_offset"):
            value = getattr(later, name)
            if value is not None:
                setattr(self, name, value)
        self.stop_reason, self.stopped_by, self.left, self.next_due_ms = (
            later.stop_reason,
            later.stopped_by,
            later.left,
            later.next_due_ms,
        )
        for name in (
            "drained",
            "succeeded",
            "dropped",
            "untrusted_replays",
            "handler_calls",
            "extra_handler_calls",
            "transactions",
            "dead_letters_truncated",
            "retries",
            *ORDERING_COUNTS,
        ):
            setattr(self, name, getattr(self, name) + getattr(later, name))
        self.retry_errors.extend(later.retry_errors[: max(0, MAX_RETRY_ERRORS - len(self.retry_errors))])
        self.duration_s = round(self.duration_s + later.duration_s, 3)
        for mine, theirs in (
            (self.routed, later.routed),
            (self.dead_lettered, later.dead_lettered),
            (self.dlt_topics, later.dlt_topics),
        ):
            for key, count in theirs.items():
                mine[key] = mine.get(key, 0) + count
        self.lateness_ms.merge(later.lateness_ms)
        self.handler_ms.merge(later.handler_ms)
        room = max(0, cap - len(self.dead_letters))
        self.dead_letters.extend(later.dead_letters[:room])
        self.dead_letters_truncated += max(0, len(later.dead_letters) - room)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PartitionSummary:
        data = dict(data)
        data["dead_letters"] = [DeadLetter(**d) for d in data.get("dead_letters", [])]
        data["lateness_ms"] = Distribution.from_dict(data.get("lateness_ms"))
        data["handler_ms"] = Distribution.from_dict(data.get("handler_ms"))
        return cls(**data)


@dataclass
class RunSummary:
    """What one run did to a tier, over all its partitions."""

    topology: str
    tier: int
    topic: str
    group: str
    engine: str
    cutoff_ms: int
    started_ms: int
    finished_ms: int = 0
    partitions: list[PartitionSummary] = field(default_factory=list)
    stopped: str | None = (
        None  # why the run stopped early (killed, window_closed, max_run...); None: it did not
    )

    def note_stops(self) -> None:
        """Set :attr:`stopped` from the partitions that were stopped (once they are all in)."""
        if self.stopped is None:
            self.stopped = next(
                (
                    p.stopped_by
                    for p in sorted(self.partitions, key=lambda p: p.partition)
                    if p.stop_reason == "stopped"
                ),
                None,
            )

    def absorb(self, later: RunSummary, cap: int = DEFAULT_COORDINATE_CAP) -> None:
        """Add a later pass of the same run (``engine/drain/follow.py``): partitions merged by number."""
        mine = {p.partition: p for p in self.partitions}
        for p in later.partitions:
            if p.partition in mine:
                mine[p.partition].absorb(p, cap)
            else:
                self.partitions.append(p)
        self.finished_ms = max(self.finished_ms, later.finished_ms)
        self.stopped = self.stopped or later.stopped

    @property
    def failed_partitions(self) -> list[PartitionSummary]:
        return [p for p in self.partitions if p.status != "ok"]

    @property
    def ok(self) -> bool:
        return not self.failed_partitions

    def totals(self) -> dict[str, Any]:
        routed: Counter[str] = Counter()
        dead: Counter[str] = Counter()
        dlts: Counter[str] = Counter()
        for p in self.partitions:
            routed.update(p.routed)
            dead.update(p.dead_lettered)
            dlts.update(p.dlt_topics)
        totals: dict[str, Any] = {
            "drained": sum(p.drained for p in self.partitions),
            "succeeded": sum(p.succeeded for p in self.partitions),
            "routed": dict(sorted(routed.items())),
            "dead_lettered": dict(sorted(dead.items())),
            "dlt_topics": dict(sorted(dlts.items())),
            "dropped": sum(p.dropped for p in self.partitions),
            "failed_partitions": sorted(p.partition for p in self.failed_partitions),
        }
        ordering = {name: sum(getattr(p, name) for p in self.partitions) for name in ORDERING_COUNTS}
        if any(ordering.values()):  # ordering: key (docs/ordering.md): what the run held, released, marked
            totals["ordering"] = ordering
        return totals

    def lateness(self) -> Distribution:
        """Handled minus due time of the run's records (those with a due time), over all partitions."""
        return Distribution.merged([p.lateness_ms for p in self.partitions])

    def handler_time(self) -> Distribution:
        """Time of each handler call (one batch, or one bisection step), over all partitions."""
        return Distribution.merged([p.handler_ms for p in self.partitions])

    def to_dict(self) -> dict[str, Any]:
        return {
            "status": "ok" if self.ok else "failed",
            "topology": self.topology,
            "tier": self.tier,
            "topic": self.topic,
            "group": self.group,
            "engine": self.engine,
            "cutoff_ms": self.cutoff_ms,
            "started_ms": self.started_ms,
            "finished_ms": self.finished_ms,
            "duration_s": round((self.finished_ms - self.started_ms) / 1000, 3),
            "stopped": self.stopped,
            "totals": self.totals(),
            "lateness_ms": self.lateness().to_dict(),
            "handler_ms": self.handler_time().to_dict(),
            "partitions": [p.to_dict() for p in sorted(self.partitions, key=lambda p: p.partition)],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunSummary:
        return cls(
            topology=data["topology"],
            tier=data["tier"],
            topic=data["topic"],
            group=data["group"],
            engine=data["engine"],
            cutoff_ms=data["cutoff_ms"],
            started_ms=data["started_ms"],
            finished_ms=data["finished_ms"],
            stopped=data.get("stopped"),
            partitions=[PartitionSummary.from_dict(p) for p in data["partitions"]],
        )

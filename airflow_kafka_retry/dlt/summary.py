"""What a replay reports (CLI output, XCom): counts, and each move by coordinates. Never payloads."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class Move:
    """
    One DLT record and where it goes (dry run) or went.

    :param target_partition: None when the producer partitions by key.
    :param attempt: the attempt it starts at in the target (None: attempt 1 on a main topic).
    :param transformed: the transform changed its key, value or headers.
    :param by_key: produced without a partition (the producer partitioned by key): the original
        partition was unknown, negative, not a number, missing in the target, or the key changed.
    """

    partition: int
    offset: int
    target: str
    target_partition: int | None
    attempt: int | None = None
    transformed: bool = False
    target_offset: int | None = None
    by_key: bool = False

    def line(self, source: str) -> str:
        where = (
            f"{self.target}[{self.target_partition}]"
            if self.target_partition is not None
            else f"{self.target}[by key]"
        )
        if self.target_offset is not None:
            where += f"@{self.target_offset}"
        edited = " (transformed)" if self.transformed else ""
        return f"{source}[{self.partition}]@{self.offset} -> {where}{edited}"


@dataclass
class ReplaySummary:
    """
    The result of one replay run.

    Counts: ``matched`` records pass the filters; of those, ``already_replayed`` were moved by
    another replay (never again), ``moved_before`` by an earlier run of this replay id, ``left_out``
    the transform returned None for, ``beyond_limit`` fell past ``--limit``; ``selected`` is what
    this replay id moves in total (``moved_before`` included) and ``moved`` what this run moved
    (in a dry run: 0, and ``moves`` lists what would move). ``not_replayable`` matched records hold
    nothing to replay (a share-group DLQ's metadata without a copied record); ``not_replayable_records``
    names up to 100 of them by coordinates, with why.
    """

    replay_id: str
    topology: str
    dlt: str
    replay_log: str
    dry_run: bool
    filters: dict[str, Any]
    to: str | None
    transform: str | None
    started_ms: int
    resumed: bool = False
    status: str = "ok"  # ok | stopped (at a chunk boundary: resume with the same id) | failed
    error: str | None = None
    scanned: int = 0
    matched: int = 0
    already_replayed: int = 0
    moved_before: int = 0
    left_out: int = 0
    beyond_limit: int = 0
    selected: int = 0
    moved: int = 0
    transactions: int = 0
    targets: dict[str, int] = field(default_factory=dict)
    moves: list[Move] = field(default_factory=list)
    moves_truncated: int = 0
    finished_ms: int | None = None
    not_replayable: int = 0
    not_replayable_records: list[dict[str, Any]] = field(default_factory=list)
    rate: float | None = None  # asked, moves per second (None: unpaced)
    measured_rate: float | None = None  # this run's moves per second since its first move

    def add_not_replayable(self, entry: dict[str, Any], cap: int = 100) -> None:
        self.not_replayable += 1
        if len(self.not_replayable_records) < cap:
            self.not_replayable_records.append(entry)

    def add_move(self, move: Move, cap: int | None) -> None:
        self.targets[move.target] = self.targets.get(move.target, 0) + 1
        if cap is None or len(self.moves) < cap:
            self.moves.append(move)
        else:
            self.moves_truncated += 1

    def lines(self) -> list[str]:
        """Human-readable account: one line per move, then the totals."""
        verb = "would move" if self.dry_run else "moved"
        out = [m.line(self.dlt) for m in self.moves]
        if self.moves_truncated:
            out.append(f"... and {self.moves_truncated} more")
        out += [
            f"{self.dlt}[{r['partition']}]@{r['offset']}: {r['reason']}" for r in self.not_replayable_records
        ]
        unlisted = self.not_replayable - len(self.not_replayable_records)
        if unlisted:
            out.append(f"... and {unlisted} more with nothing to replay")
        count = self.selected - self.moved_before if self.dry_run else self.moved
        out.append(
            f"replay {self.replay_id}: {verb} {count} record(s) from {self.dlt} "
            f"({', '.join(f'{t}: {n}' for t, n in self.targets.items()) or 'nothing'}); matched "
            f"{self.matched}, already replayed {self.already_replayed}, moved before by this replay id "
            f"{self.moved_before}, left out by the transform {self.left_out}, beyond the limit "
            f"{self.beyond_limit}, nothing to replay {self.not_replayable}"
        )
        if self.rate is not None or self.measured_rate is not None:
            out.append(f"rate: asked {self.rate or 'none'}/s, measured {self.measured_rate or '-'}/s")
        if self.status == "stopped":
            out.append(f"stopped: {self.error}; the same replay id resumes it, moving only the rest")
        return out

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

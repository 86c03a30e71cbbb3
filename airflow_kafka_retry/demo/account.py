"""
Where every order went: the reconciliation the demo ends with, and the flow the picture draws.

Three independent sources, by order id (the record key; never the order itself):

- what was produced, read back from the shop's topic once the run is over (the records without the
  DLT replay's ``dlt_replay-id`` header; an order's fate follows from its id);
- the order service's books (``handled.jsonl``: every handling, its topic, attempt, due and
  handled time, outcome, and whether the record was a DLT replay);
- the broker: the keys and coordinates in each DLT and the parking topic, and the DLT replay
  log (which DLT records were replayed).

Each order must end in exactly one final place: processed (on the main topic, a retry tier, or
after the DLT replay), a DLT it was not replayed from, or the parking topic. An order in no final
place or in several is *unaccounted for*: it is listed on its own, never counted as a place. The
XCom run summaries are checked against the books: the successes they count per topic must match.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from airflow_kafka_retry.demo.orders import FATES, fate
from airflow_kafka_retry.engine.kafka.clients import KafkaConfigError
from airflow_kafka_retry.engine.kafka.messages import headers_of, offset_of
from airflow_kafka_retry.engine.kafka.reading import TopicReader
from airflow_kafka_retry.engine.logs.replay_log import log_topic, read_log
from airflow_kafka_retry.policy.headers.codec import last_header
from airflow_kafka_retry.policy.headers.replay import REPLAY_ID

if TYPE_CHECKING:
    from airflow_kafka_retry.policy.topology.model import Topology

PROCESSED = "processed"
UNACCOUNTED = "unaccounted for"
AFTER_REPLAY = "after DLT replay"


def dead_ends(topology: Topology) -> tuple[str, str]:
    """The demo topology's main DLT and parking topic (it has both: its DLT strategy is not ``no_dlt``)."""
    if topology.dlt_topic is None or topology.parking_topic is None:
        raise ValueError(
            f"{topology.source}: the demo needs a DLT and a parking topic, not dlt_strategy: no_dlt"
        )
    return topology.dlt_topic, topology.parking_topic


def held_topics(topology: Topology) -> list[str]:
    """Where the demo's orders can be held: every DLT, then the parking topic."""
    return [*(t.topic for t in topology.dlt_tiers), dead_ends(topology)[1]]


@dataclass(frozen=True)
class Parked:
    """A record of an order found in a DLT or the parking topic."""

    topic: str
    partition: int
    offset: int
    replayed: bool = False


def read_produced(kafka_config: Mapping[str, Any], topic: str) -> Counter[str]:
    """Order id -> how many times the shop's producer wrote it to ``topic`` (DLT replays left out)."""
    written: Counter[str] = Counter()
    with TopicReader(kafka_config) as reader:
        for partition in range(reader.partitions(topic)):
            for message in reader.read(topic, partition):
                if last_header(headers_of(message) or [], REPLAY_ID) is None:
                    key = message.key()
                    written[key.decode() if key is not None else "?"] += 1
    return written


def produced_fates(written: Mapping[str, int]) -> dict[str, str]:
    """Order id -> its fate, for the ids read back from the topic (a key that is no order id: "unknown")."""
    return {
        order_id: fate(int(order_id)) if order_id.isdigit() else "unknown"
        for order_id in sorted(written, key=_id)
    }


def _id(order_id: str) -> tuple[int, str]:
    return (int(order_id), "") if order_id.isdigit() else (-1, order_id)


def read_parked(kafka_config: Mapping[str, Any], topology: Topology) -> dict[str, list[Parked]]:
    """Order id -> its records in the DLTs and the parking topic (keys and coordinates only)."""
    found: dict[str, list[Parked]] = {}
    topics = held_topics(topology)
    with TopicReader(kafka_config) as reader:
        for topic in topics:
            try:
                partitions = reader.partitions(topic)
            except KafkaConfigError:
                continue  # never created: nothing there
            replayed = (
                set(read_log(reader, log_topic(topic)).moved) if topic != topology.parking_topic else set()
            )
            for partition in range(partitions):
                for message in reader.read(topic, partition):
                    raw_key = message.key()
                    key = raw_key.decode() if raw_key is not None else "?"
                    found.setdefault(key, []).append(
                        Parked(
                            topic, partition, offset_of(message), (partition, offset_of(message)) in replayed
                        )
                    )
    return found


@dataclass
class OrderAccount:
    """One order's way through the topics and where it ended."""

    order_id: str
    fate: str
    path: list[str]
    places: list[str]  # every final place it is in (exactly one when all is well)

    @property
    def place(self) -> str:
        return self.places[0] if len(self.places) == 1 else UNACCOUNTED


@dataclass
class Account:
    """The demo's books: where every order ended, its lateness, and what the XCom summaries say."""

    orders: list[OrderAccount]
    lateness: dict[str, dict[str, float | int]]
    xcom_succeeded: dict[str, int]
    books_succeeded: dict[str, int]
    places: list[str] = field(default_factory=list)  # every possible final place, in the table's order
    handled_twice: int = 0
    intended: int | None = None  # orders the producer meant to write (None: not known)
    written_twice: dict[str, int] = field(default_factory=dict)  # id -> times written, where more than once
    strangers: list[str] = field(default_factory=list)  # ids handled or parked that were never produced

    @property
    def produced(self) -> int:
        """Orders read back from the topic."""
        return len(self.orders)

    @property
    def placed(self) -> int:
        """Orders in exactly one final place."""
        return sum(1 for o in self.orders if o.place != UNACCOUNTED)

    def unaccounted(self) -> dict[str, list[str]]:
        """Order id -> the final places it is in (none, or several), for every order not in exactly one."""
        return {o.order_id: o.places for o in self.orders if o.place == UNACCOUNTED}

    def final_counts(self) -> dict[str, int]:
        """Final place -> orders in it, in the table's order (orders unaccounted for are not in a place)."""
        counts = Counter(o.place for o in self.orders if o.place != UNACCOUNTED)
        return {place: counts[place] for place in sorted(counts, key=self._rank)}

    def by_fate(self) -> dict[str, dict[str, int]]:
        table: dict[str, Counter[str]] = {}
        for o in self.orders:
            if o.place != UNACCOUNTED:
                table.setdefault(o.place, Counter())[o.fate] += 1
        return {place: {f: table[place][f] for f in FATES} for place in sorted(table, key=self._rank)}

    def _rank(self, place: str) -> int:
        return self.places.index(place) if place in self.places else len(self.places)

    def edges(self) -> list[tuple[str, str, int]]:
        """The flow: (from, to, orders) over every order's path."""
        counts: Counter[tuple[str, str]] = Counter()
        for o in self.orders:
            counts.update(zip(o.path, o.path[1:], strict=False))
        return [(a, b, n) for (a, b), n in sorted(counts.items())]

    @property
    def reconciles(self) -> bool:
        """
        True when the books balance.

        Every order read back is in exactly one final place, the producer wrote what it meant to (each order
        once), nothing else was handled or parked, and the XCom summaries agree with the books.
        """
        return (
            self.placed == self.produced
            and self.intended in (None, self.produced)
            and not self.written_twice
            and not self.strangers
            and self.xcom_succeeded == self.books_succeeded
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "produced": self.produced,
            "intended": self.intended,
            "placed": self.placed,
            "final": self.final_counts(),
            "by_fate": self.by_fate(),
            "unaccounted": self.unaccounted(),
            "written_twice": self.written_twice,
            "strangers": self.strangers,
            "edges": [list(e) for e in self.edges()],
            "lateness": self.lateness,
            "xcom_succeeded": self.xcom_succeeded,
            "books_succeeded": self.books_succeeded,
            "handled_twice": self.handled_twice,
            "reconciles": self.reconciles,
        }


def reconcile(
    topology: Topology,
    produced: Mapping[str, str],
    handled: Iterable[Mapping[str, Any]],
    parked: Mapping[str, list[Parked]],
    summaries: Iterable[Mapping[str, Any]],
    *,
    intended: int | None = None,
    written: Mapping[str, int] | None = None,
) -> Account:
    """
    Put every produced order (id -> fate, read back from the topic) in its final place(s); trace its path.

    ``intended`` is how many orders the producer meant to write; ``written`` how many times each id was read
    back from the topic (an id written more than once, or fewer ids than intended, does not reconcile).
    """
    entries: dict[str, list[Mapping[str, Any]]] = {}
    for e in sorted(handled, key=lambda e: e["handled_ms"]):
        entries.setdefault(str(e["id"]), []).append(e)
    main, parking = topology.topic, dead_ends(topology)[1]
    tiers = {t.topic for t in topology.retry_tiers}
    orders, twice = [], 0
    for order_id, kind in produced.items():
        mine = entries.get(order_id, [])
        oks = [e for e in mine if e["ok"]]
        twice += max(0, len(oks) - 1)
        records = parked.get(order_id, [])
        places = (
            [f"{PROCESSED} {AFTER_REPLAY}" if oks[0]["replayed"] else f"{PROCESSED} on {oks[0]['topic']}"]
            if oks
            else []
        )
        places += [r.topic for r in records if not r.replayed]
        # the path: main topic -> the retry tiers it visited -> its first-pass end -> (replay) -> its end
        path = [main] + [
            t for t in dict.fromkeys(e["topic"] for e in mine if not e["replayed"]) if t in tiers
        ]
        first = [e for e in oks if not e["replayed"]]
        dlts = [r for r in records if r.topic != parking]
        if first:
            path.append(PROCESSED)
        elif dlts:
            path.append(dlts[0].topic)
            if dlts[0].replayed:
                again = [e for e in oks if e["replayed"]]
                path.append(
                    PROCESSED
                    if again
                    else parking
                    if any(r.topic == parking for r in records)
                    else UNACCOUNTED
                )
        orders.append(OrderAccount(order_id, kind, path, places))
    books = Counter(e["topic"] for es in entries.values() for e in es if e["ok"])
    xcom: Counter[str] = Counter()
    for s in summaries:
        xcom[s["topic"]] += s["totals"]["succeeded"]
    table_order = [
        *(f"{PROCESSED} on {t.topic}" for t in topology.tiers),
        f"{PROCESSED} {AFTER_REPLAY}",
        *(t.topic for t in topology.dlt_tiers),
        parking,
    ]
    strangers = sorted((set(entries) | set(parked)) - set(produced), key=_id)
    return Account(
        orders,
        _lateness(topology, entries),
        dict(sorted(xcom.items())),
        dict(sorted(books.items())),
        table_order,
        twice,
        intended,
        {i: n for i, n in (written or {}).items() if n > 1},
        strangers,
    )


def _lateness(
    topology: Topology, entries: Mapping[str, list[Mapping[str, Any]]]
) -> dict[str, dict[str, Any]]:
    """Per retry tier: handled time minus due time (seconds), p50 and max, over every handling there."""
    out: dict[str, dict[str, Any]] = {}
    for tier in topology.retry_tiers:
        late = [
            (e["handled_ms"] - e["due_ms"]) / 1000
            for es in entries.values()
            for e in es
            if e["topic"] == tier.topic and e["due_ms"] is not None
        ]
        out[tier.topic] = {
            "delay_s": tier.delay_ms / 1000,
            "handled": len(late),
            "p50_s": round(statistics.median(late), 2) if late else None,
            "max_s": round(max(late), 2) if late else None,
            "early": sum(1 for x in late if x < 0),
        }
    return out

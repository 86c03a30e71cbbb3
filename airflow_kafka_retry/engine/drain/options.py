"""How a tier run behaves: the handler, batching, transactions, limits."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from airflow_kafka_retry.policy.client_names import DEFAULT_TRANSACTIONAL_ID_PREFIX

__all__ = ["DEFAULT_TRANSACTIONAL_ID_PREFIX", "DrainOptions"]


@dataclass(frozen=True)
class DrainOptions:
    """
    Options of one tier run (shared by the local engine, Spark executors, CLI and operators).

    :param handler: the user's handler, ``package.module:function``.
    :param value_deserializer: optional ``package.module:function`` turning value bytes into the
        object the handler gets; a record it cannot decode is dead-lettered with its original bytes.
    :param key_deserializer: the same for keys (failures write the key-exception headers).
    :param batch_size: records per handler call.
    :param chunk_size: records per Kafka transaction (routed records + offset commit). A chunk is read
        and handled a few hundred records at a time and only its failed records wait for the commit,
        so a large chunk costs no memory; it saves transactions (each one is several broker round
        trips) and, after a crash, is the most a partition hands to the handler again.
    :param max_records: stop a partition after this many records (None: drain everything due).
    :param in_place_attempts: extra tries of a failed record before routing; each counts as an attempt.
    :param in_place_backoff_ms: pause before each in-place try.
    :param max_extra_calls: bound on handler calls spent isolating failures of one batch.
    :param transactional: route and commit in Kafka transactions (else idempotent produce, then commit).
    :param transactional_id_prefix: prefix of the deterministic ``transactional.id``.
    :param consumer_group: override the tier's consumer group.
    :param dead_letter_cap: dead-letter coordinates kept per partition in the summary.
    :param idle_timeout_s: fail a partition when the broker answers nothing for this long.
    :param deadline_ms: wall-clock deadline (epoch ms): a partition still running then stops at its next
        chunk boundary, committing what it finished; the rest stays for the next run (None: no deadline).
    :param handler_timeout_s: a handler call that has not returned after this many seconds fails its
        batch with ``HandlerTimeoutError`` (the hanging record is isolated by bisection and routed as
        a failure) and its thread is abandoned; None (default): calls are not timed. See
        ``engine/drain/handler_timeouts.py`` for the cost.
    :param call_timeout_s: the timeout of each Kafka client call that can block (the transaction calls,
        ``send_offsets_to_transaction``, ``committed``, flush, metadata); the engine abandons a call that
        has not returned 5 s after it (librdkafka does not always keep its own timeout when a broker
        dies) and retries the partition with fresh clients. See ``engine/drain/supervisor.py``.
    :param broker_retry_s: how long after a partition's first broker failure (a stuck call, a timeout, a
        coordinator or leader gone, too few in-sync replicas) it is tried again, within the run; then the
        partition fails with an error naming the call and the broker it waited for. 0: never retried.
    """

    handler: str
    value_deserializer: str | None = None
    key_deserializer: str | None = None
    batch_size: int = 100
    chunk_size: int = 5000
    max_records: int | None = None
    in_place_attempts: int = 0
    in_place_backoff_ms: int = 0
    max_extra_calls: int = 64
    transactional: bool = True
    transactional_id_prefix: str = DEFAULT_TRANSACTIONAL_ID_PREFIX
    consumer_group: str | None = None
    dead_letter_cap: int = 100
    idle_timeout_s: float = 60.0
    deadline_ms: int | None = None
    handler_timeout_s: float | None = None
    call_timeout_s: float = 20.0
    broker_retry_s: float = 30.0

    def __post_init__(self) -> None:
        positive = {"batch_size": self.batch_size, "chunk_size": self.chunk_size}
        for name, value in positive.items():
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"option {name} must be an integer >= 1, got {value!r}")
        non_negative = {
            "in_place_attempts": self.in_place_attempts,
            "in_place_backoff_ms": self.in_place_backoff_ms,
            "max_extra_calls": self.max_extra_calls,
            "dead_letter_cap": self.dead_letter_cap,
        }
        for name, value in non_negative.items():
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"option {name} must be an integer >= 0, got {value!r}")
        if self.max_records is not None and (
            isinstance(self.max_records, bool)
            or not isinstance(self.max_records, int)
            or self.max_records < 1
        ):
            raise ValueError(f"option max_records must be an integer >= 1 or None, got {self.max_records!r}")
        deadline = self.deadline_ms
        if deadline is not None and (isinstance(deadline, bool) or not isinstance(deadline, int)):
            raise ValueError(
                f"option deadline_ms must be epoch milliseconds (an integer) or None, "
                f"got {self.deadline_ms!r}"
            )
        timeout = self.handler_timeout_s
        if timeout is not None and (
            isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0
        ):
            raise ValueError(
                f"option handler_timeout_s must be a number of seconds > 0 or None, got {timeout!r}"
            )
        seconds: tuple[tuple[str, float, float], ...] = (
            ("call_timeout_s", self.call_timeout_s, 1.0),
            ("broker_retry_s", self.broker_retry_s, 0.0),
        )
        for name, given, least in seconds:
            if isinstance(given, bool) or not isinstance(given, (int, float)) or given < least:
                raise ValueError(f"option {name} must be a number of seconds >= {least:g}, got {given!r}")
        if not isinstance(self.handler, str) or ":" not in self.handler:
            raise ValueError(f"option handler must be 'package.module:function', got {self.handler!r}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

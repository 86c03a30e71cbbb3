"""
Whether a replay really moved a record: its audit headers checked against the replay log.

Anyone who can produce to a topic can write ``dlt_replay-*`` headers. A failing record is parked
(not dead-lettered) only when the replay log of the DLT (or parking topic) its audit names recorded
that move of that very copy: ``record/<partition>/<offset>`` written by the same replay id, in the
same transaction as the copy itself, with the digest of the copy's replay id, key and value
(``engine/logs/replay_log.py``). So a record whose copy is readable is always known to the log, and the
audit of a real copy put on another record confirms nothing. The log of each topic is read once
per partition run; when it has grown, only its new entries are read. Its end is asked at most once per
piece the engine reads (:meth:`ReplayLogCheck.new_read`): a copy and its log entry are committed in one
transaction, so the log as it stood after a piece was read holds the entry of every real copy in it, and
a flood of forged records costs one watermark request per piece, not one per record.

Its requests run under the partition attempt's deadlines (``engine/kafka/deadlines.py``): the log's end is
asked with the attempt's call timeout, and a read of the log is given :data:`READ_LOG_S`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from confluent_kafka import KafkaException, TopicPartition

from airflow_kafka_retry.engine.kafka.clients import NotAuthorized, principal_of
from airflow_kafka_retry.engine.kafka.deadlines import CallDeadlines
from airflow_kafka_retry.engine.kafka.reading import TopicReader
from airflow_kafka_retry.engine.kafka.scan import ReadError
from airflow_kafka_retry.engine.logs.replay_log import ReplayLog, log_topic, read_log
from airflow_kafka_retry.policy.client_names import READER_GROUP_PREFIX
from airflow_kafka_retry.policy.errors import ReplayError

if TYPE_CHECKING:
    from airflow_kafka_retry.policy.headers.replay import ReplayAudit

log = logging.getLogger(__name__)

#: Seconds a read of a replay log (or of what was appended to it) may take before the attempt is abandoned.
READ_LOG_S = 120.0


class ReplayLogCheck:
    """
    ``check(audit, digest)``: whether the log of ``audit.topic`` recorded that move of that copy.

    True when that replay moved the DLT record the audit names and logged ``digest`` for its copy.

    Opens its reader on first use; :meth:`close` closes it.

    :param deadlines: the partition attempt's deadlines (its own if none).
    :param timeout_s: the timeout of a request for the log's end.
    """

    def __init__(
        self,
        kafka_config: Mapping[str, Any],
        *,
        deadlines: CallDeadlines | None = None,
        timeout_s: float = 10.0,
    ) -> None:
        self.kafka_config = kafka_config
        self.deadlines = deadlines or CallDeadlines("replay log check")
        self.timeout_s = timeout_s
        self._reader: TopicReader | None = None
        self._logs: dict[str, tuple[ReplayLog, int]] = {}  # log topic -> (what it says, its end then)
        self._current: set[str] = set()  # log topics whose end was asked since the last piece was read

    def new_read(self) -> None:
        """The engine read another piece: a log's end asked before may predate its copies' entries."""
        self._current.clear()

    def __call__(self, audit: ReplayAudit, digest: str) -> bool:
        try:
            topic = log_topic(audit.topic)
        except ReplayError:
            return False
        cached = self._logs.get(topic)
        if cached is not None and cached[0].confirms(audit, digest):
            return True
        if cached is not None and topic in self._current:  # read up to its end since this piece was read
            return False
        end = self._end(topic)
        self._current.add(topic)
        if cached is None or end > cached[1]:
            try:
                with self.deadlines.call("read", READ_LOG_S, f"the leader of {topic}[0] (a replay log)"):
                    if cached is None or cached[1] < 0:  # never read, or there was no log then
                        replay_log = read_log(self._open(), topic)
                    else:  # only what was appended since (the log has one partition)
                        replay_log = read_log(self._open(), topic, known=cached[0], start=cached[1])
            except NotAuthorized:
                raise
            except (ReplayError, ReadError, KafkaException) as exc:
                self._refuse_if_not_authorized(topic, exc)
                log.warning(
                    "cannot read the replay log %s (%s); its replay headers are not trusted", topic, exc
                )
                return False
            cached = self._logs[topic] = (replay_log, end)
        return cached[0].confirms(audit, digest)

    def _open(self) -> TopicReader:
        if self._reader is None:
            self._reader = TopicReader(self.kafka_config)
        return self._reader

    def _end(self, topic: str) -> int:
        consumer, timeout = self._open().consumer, self.deadlines.timeout(self.timeout_s)
        try:
            with self.deadlines.call(
                "get_watermark_offsets", timeout, f"the leader of {topic}[0] (a replay log)"
            ):
                return consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=timeout)[1]
        except KafkaException as exc:
            self._refuse_if_not_authorized(topic, exc)
            return -1  # no log yet

    def _refuse_if_not_authorized(self, topic: str, exc: BaseException) -> None:
        """
        A log the principal may not read fails the run (an ACL is missing), naming it.

        Taking it for "not trusted" would dead-letter, not park, every replayed record that fails again:
        a silent change of where records go. Only the topology's own logs are asked about (``audit.topic``
        is one of its DLTs or its parking topic), so a record cannot make a run fail on another topic.
        """
        text = str(exc)
        if "GROUP_AUTHORIZATION_FAILED" in text or "group authorization failed" in text.lower():
            what = f"READ on group prefix {READER_GROUP_PREFIX!r} (the log's reader)"
        elif "AUTHORIZATION_FAILED" in text or "authorization failed" in text.lower():
            what = f"READ on topic {topic!r}"
        else:
            return
        raise NotAuthorized(
            f"{principal_of(self.kafka_config)} lacks {what}: a replayed record failed again and the replay "
            f"log {topic!r} that proves its replay cannot be read ({text}); grant the tier runs the ACLs "
            "`airflow-kafka-retry topology acls FILE --role tiers` prints",
            [topic],
        ) from exc

    def close(self) -> None:
        if self._reader is not None:
            self._reader.__exit__()
            self._reader = None

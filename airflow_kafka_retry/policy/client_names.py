"""
The names the provider gives its clients' Kafka resources besides the topology's topics and tier groups.

One place for each, so the engine that uses a name and the ACL bindings that grant it
(:mod:`.topology.acl`) cannot drift apart: transactional ids of tier runs and replays, the replay and
redelivery log topics, the throw-away readers' group prefix and the DLT watch's group.

Pure: no I/O.
"""

from __future__ import annotations

DEFAULT_TRANSACTIONAL_ID_PREFIX = "airflow-kafka-retry."
#: ``<DLT or parking topic><REPLAY_LOG_SUFFIX>``: which records a replay of that topic moved.
REPLAY_LOG_SUFFIX = "-replay-log"
#: ``<topology topic><REDELIVERY_LOG_SUFFIX>``: the round of each record redelivered to a share group.
REDELIVERY_LOG_SUFFIX = "-redelivery-log"
#: Readers that assign partitions and never commit take a fresh group under this prefix.
READER_GROUP_PREFIX = "airflow-kafka-retry.reader."
#: The DLT watch's own consumer group (committed offsets and exception tags, never a member).
WATCH_GROUP_TEMPLATE = "{group_id}-dlt-watch"


def transactional_id(prefix: str, group: str, topic: str, partition: int) -> str:
    """
    The deterministic transactional id of one (tier group, topic, partition).

    ``/`` cannot occur in a topic name, so the last two fields are unambiguous whatever the group.
    """
    return f"{tier_transactional_prefix(prefix, group)}{topic}/{partition}"


def tier_transactional_prefix(prefix: str, group: str) -> str:
    """What every transactional id of a tier group's runs starts with."""
    return f"{prefix}{group}/"


def replay_transactional_id(prefix: str, source: str) -> str:
    """One transactional id per DLT: replays of the same DLT fence each other, never interleave."""
    return f"{prefix}replay/{source}"


def replay_log_name(source: str) -> str:
    """The replay log of ``source`` (a DLT or parking topic), unchecked for length."""
    return f"{source}{REPLAY_LOG_SUFFIX}"


def redelivery_log_name(topic: str) -> str:
    """The redelivery log of the topology whose ``topic`` is ``topic``, unchecked for length."""
    return f"{topic}{REDELIVERY_LOG_SUFFIX}"


def watch_group(group_id: str) -> str:
    """The DLT watch's default group for a topology whose ``group_id`` is ``group_id``."""
    return WATCH_GROUP_TEMPLATE.format(group_id=group_id)

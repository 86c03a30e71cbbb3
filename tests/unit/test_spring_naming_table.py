"""Spring's topic names and listener groups, configuration by configuration, through ``topology show``.

Every expected value below was worked out by hand from Spring for Apache Kafka's SOURCE (git tags of
github.com/spring-projects/spring-kafka), not from this provider's code. ``DTPF`` is
``spring-kafka/src/main/java/org/springframework/kafka/retrytopic/DestinationTopicPropertiesFactory.java``;
the same file is unchanged (for naming) from v3.2.10 to v4.0.7, v4.1.1 and main. The rules used:

* R-values: the delays are ``BackOffValuesGenerator`` output, ``maxAttempts - 1`` of them
  (v3.2.10 BackOffValuesGenerator.java:55; v4.0.7 :49), default a fixed 1000 ms back-off (v3.2.10 :48,
  v4.0.7 :42) and 3 attempts (v3.2.10 RetryTopicConstants.java:43).
* R-fixed: ``isFixedDelay = SUFFIX_WITH_INDEX_VALUE || size > 1 && all delays equal`` (v3.2.10 DTPF:137-138).
* R-amount: ``retryTopicsAmount = size - reusableTopicAttempts()`` where reusable attempts are
  ``count(last delay) - 1`` under SINGLE_TOPIC reuse with more than one delay (v3.2.10 DTPF:143, 220-226).
* R-suffix (v3.2.10 DTPF:200-214): reuse and one topic -> the retry suffix alone (201-202); fixed ->
  ``-retry-<backOffIndex>`` from 0 (204-205); else ``-retry-<delay>`` (208, joined with "-" at 245-247),
  plus ``-<index - first index of the delay>`` when the delay repeats and there is no reuse (209-210).
* R-reusable: a topic is REUSABLE_RETRY_TOPIC when reuse is on and its delay repeats (v3.2.10 DTPF:216-218).
* R-dlt: the DLT is ``<topic><dlt suffix>`` (v3.2.10 DTPF:181-185), an exception-based DLT
  ``<topic><key><dlt suffix>`` (v3.2.10 DTPF:189); default suffixes ``-retry``/``-dlt``
  (v3.2.10 RetryTopicConstants.java:32, 37; custom ones used when they have text, DTPF:255-260).
* R-group: every retry/DLT listener gets the main group id plus its topic suffix
  (v3.2.10 SuffixingRetryTopicNamesProviderFactory.java:49-51, ``Suffixer.maybeAddTo`` concat,
  Suffixer.java:41-48).
* R-2.7: 2.7 has no same-interval reuse for growing delays; ``FixedDelayStrategy.SINGLE_TOPIC`` collapses only
  a fixed back-off (v2.7.14 DTPF:98-100, 151-160, isFixedDelay 187-190).
* Defaults per preset: ``@RetryableTopic`` delay suffixing (v3.2.10 RetryableTopic.java:191), SINGLE_TOPIC
  from 3.2 (v3.2.10 RetryableTopic.java:201), MULTIPLE_TOPICS in 3.1 (v3.1.10 RetryableTopic.java:187) and 2.7
  (v2.7.14 RetryableTopic.java:186); builder MULTIPLE_TOPICS in 4.0 (v4.0.7
  RetryTopicConfigurationBuilder.java:96), SINGLE_TOPIC in 4.1 (v4.1.1
  RetryTopicConfigurationBuilder.java:97).
"""

from __future__ import annotations

import io
import json
from contextlib import redirect_stdout
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from airflow_kafka_retry.cli import main

G = "orders-service"


@dataclass(frozen=True)
class Row:
    id: str
    keys: dict[str, Any]
    delays: list[int]
    retry: list[tuple[str, bool]]  # (topic, reusable), in order
    dlts: list[str] = field(default_factory=lambda: ["orders-dlt"])
    rule: str = ""

    def groups(self) -> dict[str, str]:
        """R-group: main group id + the topic's suffix (what the topic adds to 'orders')."""
        return {t: G + t[len("orders") :] for t in [*(t for t, _ in self.retry), *self.dlts]}


ROWS = [
    Row(
        "3.2-defaults",
        {"compat": "spring-3.2"},
        [1000, 1000],
        [("orders-retry", True)],
        rule="R-values, R-amount 2-1=1, R-suffix 201-202 (v3.2.10 RetryableTopic.java:201 SINGLE_TOPIC)",
    ),
    Row(
        "2.7-defaults",
        {"compat": "spring-2.7"},
        [1000, 1000],
        [("orders-retry-0", False), ("orders-retry-1", False)],
        rule="R-fixed (all equal), R-suffix 204-205; v3.1.10 DTPF:208-209 and v2.7.14 DTPF:154-155 agree",
    ),
    Row(
        "builder-4.0-defaults",
        {"compat": "spring-builder-4.0"},
        [1000, 1000],
        [("orders-retry-0", False), ("orders-retry-1", False)],
        rule="v4.0.7 RetryTopicConfigurationBuilder.java:96 MULTIPLE_TOPICS, R-fixed, R-suffix 204-205",
    ),
    Row(
        "builder-4.1-defaults",
        {"compat": "spring-builder-4.1"},
        [1000, 1000],
        [("orders-retry", True)],
        rule="v4.1.1 RetryTopicConfigurationBuilder.java:97 SINGLE_TOPIC, R-amount, R-suffix 201-202",
    ),
    Row(
        "3.2-exponential",
        {
            "compat": "spring-3.2",
            "attempts": 4,
            "backoff": {"kind": "exponential", "initial": "1s", "multiplier": 2, "max": "30s"},
        },
        [1000, 2000, 4000],
        [("orders-retry-1000", False), ("orders-retry-2000", False), ("orders-retry-4000", False)],
        rule="R-fixed false (distinct), R-suffix 208 + 245-247",
    ),
    Row(
        "3.2-exponential-with-max",
        {
            "compat": "spring-3.2",
            "attempts": 6,
            "backoff": {"kind": "exponential", "initial": "1s", "multiplier": 2, "max": "5s"},
        },
        [1000, 2000, 4000, 5000, 5000],
        [
            ("orders-retry-1000", False),
            ("orders-retry-2000", False),
            ("orders-retry-4000", False),
            ("orders-retry-5000", True),
        ],
        rule="R-amount 5-(2-1)=4, R-suffix 208 (no -N under reuse, 209), R-reusable 216-218",
    ),
    Row(
        "builder-4.0-exponential-with-max",
        {
            "compat": "spring-builder-4.0",
            "attempts": 6,
            "backoff": {"kind": "exponential", "initial": "1s", "multiplier": 2, "max": "5s"},
        },
        [1000, 2000, 4000, 5000, 5000],
        [
            ("orders-retry-1000", False),
            ("orders-retry-2000", False),
            ("orders-retry-4000", False),
            ("orders-retry-5000-0", False),
            ("orders-retry-5000-1", False),
        ],
        rule="R-suffix 209-210: 5000 repeats, index 3-3=0 and 4-3=1",
    ),
    Row(
        "3.2-index-suffixing",
        {
            "compat": "spring-3.2",
            "attempts": 4,
            "topic_suffixing": "index",
            "backoff": {"kind": "exponential", "initial": "1s", "multiplier": 2, "max": "30s"},
        },
        [1000, 2000, 4000],
        [("orders-retry-0", False), ("orders-retry-1", False), ("orders-retry-2", False)],
        rule="R-fixed via SUFFIX_WITH_INDEX_VALUE (137), R-suffix 204-205 from 0",
    ),
    Row(
        "3.2-index-suffixing-fixed-reuse",
        {"compat": "spring-3.2", "attempts": 4, "topic_suffixing": "index"},
        [1000, 1000, 1000],
        [("orders-retry", True)],
        rule="R-amount 3-(3-1)=1, R-suffix 201-202 comes before the index rule",
    ),
    Row(
        "3.2-custom-delays",
        {"compat": "spring-3.2", "attempts": 4, "backoff": {"kind": "custom", "delays": ["1s", "5s", "30s"]}},
        [1000, 5000, 30000],
        [("orders-retry-1000", False), ("orders-retry-5000", False), ("orders-retry-30000", False)],
        rule="R-amount (30000 once: 0 reusable), R-suffix 208",
    ),
    Row(
        "builder-4.0-custom-delays-repeat-apart",
        {
            "compat": "spring-builder-4.0",
            "attempts": 4,
            "backoff": {"kind": "custom", "delays": ["1s", "2s", "1s"]},
        },
        [1000, 2000, 1000],
        [("orders-retry-1000-0", False), ("orders-retry-2000", False), ("orders-retry-1000-2", False)],
        rule="R-suffix 209-210: the second 1000 is at index 2, first at 0 -> '-2' (not '-1')",
    ),
    Row(
        "3.2-fixed-reuse-off",
        {
            "compat": "spring-3.2",
            "attempts": 4,
            "reuse_same_interval": False,
            "backoff": {"kind": "fixed", "delay": "5s"},
        },
        [5000, 5000, 5000],
        [("orders-retry-0", False), ("orders-retry-1", False), ("orders-retry-2", False)],
        rule="explicit MULTIPLE_TOPICS: R-fixed (all equal), R-suffix 204-205",
    ),
    Row(
        "3.2-max-attempts-1",
        {"compat": "spring-3.2", "attempts": 1},
        [],
        [],
        rule="R-values: 0 delays, so no retry topic (DTPF:166 loops retryTopicsAmount=0 times); DLT only",
    ),
    Row(
        "3.2-max-attempts-2",
        {"compat": "spring-3.2", "attempts": 2},
        [1000],
        [("orders-retry", False)],
        rule="R-amount (size 1: 0 reusable, 221), R-suffix 201-202; R-reusable false (1000 does not repeat)",
    ),
    Row(
        "builder-4.0-max-attempts-2",
        {"compat": "spring-builder-4.0", "attempts": 2},
        [1000],
        [("orders-retry-1000", False)],
        rule="R-fixed needs size > 1 (138), so R-suffix 208: delay suffix",
    ),
    Row(
        "3.2-exception-dlts",
        {
            "compat": "spring-3.2",
            "dlt_routing": {"-validation": ["myapp.errors.InvalidOrder"], "-lookup": ["KeyError"]},
        },
        [1000, 1000],
        [("orders-retry", True)],
        dlts=["orders-dlt", "orders-validation-dlt", "orders-lookup-dlt"],
        rule="R-dlt: <topic><key><dlt suffix> (DTPF:189; key = ExceptionBasedDltDestination.suffix(), :36)",
    ),
    Row(
        "3.2-custom-suffixes",
        {
            "compat": "spring-3.2",
            "retry_suffix": "-again",
            "dlt_suffix": "-dead",
            "backoff": {"kind": "exponential", "initial": "1s", "multiplier": 3, "max": "1m"},
        },
        [1000, 3000],
        [("orders-again-1000", False), ("orders-again-3000", False)],
        dlts=["orders-dead"],
        rule="R-dlt custom suffixes (DTPF:255-260), R-suffix 208 with the custom retry suffix (245-247)",
    ),
    Row(
        "3.2-custom-suffixes-exception-dlt",
        {"compat": "spring-3.2", "dlt_suffix": "-dead", "dlt_routing": {"-bad": ["ValueError"]}},
        [1000, 1000],
        [("orders-retry", True)],
        dlts=["orders-dead", "orders-bad-dead"],
        rule="R-dlt: the key is followed by the custom DLT suffix (DTPF:189)",
    ),
    Row(
        "2.7-single-topic-fixed",
        {"compat": "spring-2.7", "attempts": 4, "reuse_same_interval": True},
        [1000, 1000, 1000],
        [("orders-retry", True)],
        rule="R-2.7: FixedDelayStrategy.SINGLE_TOPIC with a fixed back-off -> one '-retry' topic "
        "(v2.7.14 DTPF:89-96, 151-153)",
    ),
    Row(
        "2.7-single-topic-growing",
        {
            "compat": "spring-2.7",
            "attempts": 6,
            "reuse_same_interval": True,
            "backoff": {"kind": "exponential", "initial": "1s", "multiplier": 2, "max": "5s"},
        },
        [1000, 2000, 4000, 5000, 5000],
        [
            ("orders-retry-1000", False),
            ("orders-retry-2000", False),
            ("orders-retry-4000", False),
            ("orders-retry-5000-0", False),
            ("orders-retry-5000-1", False),
        ],
        rule="R-2.7: not a fixed back-off, so SINGLE_TOPIC does nothing; v2.7.14 DTPF:156-158 '-<i - first>'",
    ),
]


def show(tmp_path: Path, keys: dict[str, Any]) -> dict[str, Any]:
    """``airflow-kafka-retry topology show`` on a file with these keys; its JSON output."""
    path = tmp_path / "topology.yaml"
    path.write_text(yaml.safe_dump({"topic": "orders", "group_id": G, **keys}), encoding="utf-8")
    out = io.StringIO()
    with redirect_stdout(out):
        assert main(["topology", "show", str(path)]) == 0
    return json.loads(out.getvalue())


def test_the_table_has_at_least_twelve_configurations_each_with_its_rule() -> None:
    assert len(ROWS) >= 12
    assert all(row.rule for row in ROWS)


@pytest.mark.parametrize("row", ROWS, ids=[r.id for r in ROWS])
def test_topology_show_prints_springs_names_and_groups(tmp_path: Path, row: Row) -> None:
    data = show(tmp_path, row.keys)
    assert data["compat"]["preset"] == row.keys["compat"]
    assert data["backoff"]["delays_ms"] == row.delays
    main_tier, *retry = data["tiers"]
    assert (main_tier["topic"], main_tier["consumer_group"]) == ("orders", G)
    assert [(t["topic"], t["reusable"]) for t in retry] == row.retry, row.rule
    assert [t["delay_ms"] for t in retry] == row.delays[: len(retry)]
    assert sorted(data["dlt_topics"]) == sorted(row.dlts), row.rule
    groups = {t["topic"]: t["consumer_group"] for t in retry} | data["dlt_consumer_groups"]
    assert groups == row.groups(), "R-group"


def test_the_default_stays_this_providers_own_names(tmp_path: Path) -> None:
    data = show(tmp_path, {})
    assert data["compat"] == {
        "preset": "none",
        "matches": data["compat"]["matches"],
        "from_preset": {},
        "overridden": {},
    }
    assert [(t["topic"], t["consumer_group"]) for t in data["tiers"][1:]] == [
        ("orders-retry-1", "orders-service-orders-retry-1"),
        ("orders-retry-2", "orders-service-orders-retry-2"),
    ]
    assert data["dlt_consumer_groups"] == {"orders-dlt": "orders-service-orders-dlt"}

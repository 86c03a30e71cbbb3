"""``build_retry_dags_from_folder``: every topology YAML of a folder, one bad file isolated."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from airflow_kafka_retry.factory.folder import TopologyFolderError, build_retry_dags_from_folder, in_shard

HANDLER = "handlers.orders:handle"


def topology(folder: Path, name: str, topic: str, *, delays: str = "[30s, 60s]") -> Path:
    path = folder / name
    path.write_text(
        f"topic: {topic}\ngroup_id: {topic}-svc\nattempts: 3\nbackoff: {{kind: custom, delays: {delays}}}\n"
    )
    return path


def test_every_topology_of_the_folder_gets_its_dags(tmp_path):
    topology(tmp_path, "payments.yaml", "payments")
    topology(tmp_path, "shipments.yml", "shipments")
    (tmp_path / "notes.txt").write_text("not a topology")
    dags = build_retry_dags_from_folder(tmp_path, handler=HANDLER, tags=["platform"])
    assert sorted(dags) == ["kafka_retry__payments", "kafka_retry__shipments"]  # one DAG per topology
    assert all("platform" in d.tags for d in dags.values())
    assert dags["kafka_retry__shipments"].get_task("retry_1").topology == str(tmp_path / "shipments.yml")
    tiers = build_retry_dags_from_folder(tmp_path, handler=HANDLER, layout="tiers")
    assert sorted(tiers) == sorted(
        f"kafka_retry__{topic}{suffix}"
        for topic in ("payments", "shipments")
        for suffix in ("-retry-1", "-retry-2", "-dlt", "__ensure_topics")
    )


def test_a_bad_yaml_is_logged_naming_the_file_and_skipped(tmp_path, caplog):
    topology(tmp_path, "payments.yaml", "payments")
    bad = tmp_path / "broken.yaml"
    bad.write_text("topic: broken\ngroup_id: broken-svc\nattempts: 3\nbackoff: {kind: fixed, interval: 1m}\n")
    (tmp_path / "garbled.yaml").write_text("topic: [unclosed\n")
    with caplog.at_level(logging.ERROR, logger="airflow_kafka_retry.factory.folder"):
        dags = build_retry_dags_from_folder(tmp_path, handler=HANDLER)
    assert sorted(dags) == ["kafka_retry__payments"]
    messages = [r.getMessage() for r in caplog.records]
    assert any(str(bad) in m and "backoff.interval" in m for m in messages), messages
    assert any(str(tmp_path / "garbled.yaml") in m and "not valid YAML" in m for m in messages), messages


def test_strict_makes_a_bad_yaml_an_error_naming_the_file(tmp_path):
    topology(tmp_path, "payments.yaml", "payments")
    (tmp_path / "broken.yaml").write_text("topic: broken\n")
    with pytest.raises(TopologyFolderError, match=r"broken\.yaml: .*group_id"):
        build_retry_dags_from_folder(tmp_path, handler=HANDLER, strict=True)


def test_two_files_of_one_topic_the_second_is_skipped_naming_the_first(tmp_path, caplog):
    topology(tmp_path, "a.yaml", "payments")
    topology(tmp_path, "b.yaml", "payments", delays="[10s, 20s]")
    with caplog.at_level(logging.ERROR, logger="airflow_kafka_retry.factory.folder"):
        dags = build_retry_dags_from_folder(tmp_path, handler=HANDLER)
    assert dags["kafka_retry__payments"].get_task("retry_1").topology == str(tmp_path / "a.yaml")
    assert any(
        "b.yaml" in r.getMessage() and "also built from a.yaml" in r.getMessage() for r in caplog.records
    )


def test_tier_overrides_go_to_the_topology_of_their_topic(tmp_path):
    topology(tmp_path, "payments.yaml", "payments")
    topology(tmp_path, "shipments.yaml", "shipments")
    dags = build_retry_dags_from_folder(
        tmp_path, handler=HANDLER, tier_overrides={"shipments-retry-2": {"window": "01:00-05:00"}}
    )
    assert dags["kafka_retry__shipments"].get_task("retry_2").window == "01:00-05:00"
    assert dags["kafka_retry__payments"].get_task("retry_2").window is None
    tiers = build_retry_dags_from_folder(
        tmp_path,
        handler=HANDLER,
        layout="tiers",
        tier_overrides={"shipments-retry-2": {"schedule": "0 1 * * *"}},
    )
    assert tiers["kafka_retry__shipments-retry-2"].timetable.timetable.expression == "0 1 * * *"
    assert tiers["kafka_retry__payments-retry-2"].timetable.timetable.expression != "0 1 * * *"
    with pytest.raises(
        TopologyFolderError, match="tier_overrides name orders-retry-1, a topic of no topology"
    ):
        build_retry_dags_from_folder(
            tmp_path, handler=HANDLER, tier_overrides={"orders-retry-1": {"max_run": "1h"}}
        )


def test_not_a_folder(tmp_path):
    with pytest.raises(TopologyFolderError, match="not a folder"):
        build_retry_dags_from_folder(tmp_path / "missing", handler=HANDLER)


def test_a_task_process_builds_only_the_topology_of_its_dag(tmp_path, monkeypatch, caplog):
    topology(tmp_path, "payments.yaml", "payments")
    topology(tmp_path, "shipments.yaml", "shipments")
    (tmp_path / "broken.yaml").write_text("topic: [unclosed\n")
    monkeypatch.setenv("_AIRFLOW_PARSING_CONTEXT_DAG_ID", "kafka_retry__shipments")
    monkeypatch.setenv("_AIRFLOW_PARSING_CONTEXT_TASK_ID", "retry_2")
    with caplog.at_level(logging.ERROR, logger="airflow_kafka_retry.factory.folder"):
        dags = build_retry_dags_from_folder(
            tmp_path, handler=HANDLER, tier_overrides={"payments-retry-1": {"max_run": "1h"}}
        )
    assert sorted(dags) == ["kafka_retry__shipments"]
    assert caplog.records == []  # the broken file is another topology's business in a task process


def test_a_task_process_loads_only_the_file_naming_its_topic_when_one_does(tmp_path, monkeypatch):
    """A folder of many topologies: the task's own file is found by its text, no other YAML is loaded."""
    from airflow_kafka_retry.factory import folder

    for i in range(20):
        topology(tmp_path, f"t{i:02d}.yaml", f"team{i:02d}-events")
    (tmp_path / "quoted.yaml").write_text(  # its topic written with an escape: found by loading, later
        'topic: "esc\\x61ped"\ngroup_id: g\nattempts: 3\nbackoff: {kind: custom, delays: [30s, 60s]}\n'
    )
    loaded: list[str] = []
    load = folder.load_topology

    def counted(path):
        loaded.append(Path(path).name)
        return load(path)

    monkeypatch.setattr(folder, "load_topology", counted)
    monkeypatch.setenv("_AIRFLOW_PARSING_CONTEXT_DAG_ID", "kafka_retry__team17-events")
    assert sorted(build_retry_dags_from_folder(tmp_path, handler=HANDLER)) == ["kafka_retry__team17-events"]
    assert set(loaded) == {"t17.yaml"}
    loaded.clear()
    monkeypatch.setenv("_AIRFLOW_PARSING_CONTEXT_DAG_ID", "kafka_retry__escaped")
    assert sorted(build_retry_dags_from_folder(tmp_path, handler=HANDLER)) == ["kafka_retry__escaped"]
    assert "quoted.yaml" in loaded


def test_shards_split_the_folder_each_topology_in_exactly_one(tmp_path):
    for i in range(12):
        topology(tmp_path, f"t{i:02d}.yaml", f"t{i:02d}")
    whole = build_retry_dags_from_folder(tmp_path, handler=HANDLER)
    shards = [build_retry_dags_from_folder(tmp_path, handler=HANDLER, shard=(i, 3)) for i in range(3)]
    assert all(shards), "with 12 files, each of 3 shards gets some"
    assert sum(len(s) for s in shards) == len(whole)
    assert set().union(*shards) == set(whole)
    # stable: a new file moves no other topology
    topology(tmp_path, "t99.yaml", "t99")
    again = [build_retry_dags_from_folder(tmp_path, handler=HANDLER, shard=(i, 3)) for i in range(3)]
    for before, after in zip(shards, again, strict=True):
        assert set(before) <= set(after)


def test_names_that_differ_in_a_few_digits_spread_over_every_shard():
    # CRC-32 put these 100 names into 4 of 8 shards (it is affine in the input bits)
    names = [f"cap{i:03d}-035239.yaml" for i in range(100)]
    assert {next(i for i in range(8) if in_shard(n, (i, 8))) for n in names} == set(range(8))
    assert all(sum(in_shard(n, (i, 8)) for i in range(8)) == 1 for n in names)


def test_tier_overrides_of_another_shard_are_not_an_error(tmp_path):
    topology(tmp_path, "a.yaml", "a")
    topology(tmp_path, "b.yaml", "b")
    overrides = {"a-retry-1": {"max_run": "1h"}, "b-retry-1": {"max_run": "1h"}}
    built = [
        build_retry_dags_from_folder(tmp_path, handler=HANDLER, shard=(i, 2), tier_overrides=overrides)
        for i in range(2)
    ]
    assert set().union(*built) == set(build_retry_dags_from_folder(tmp_path, handler=HANDLER))


@pytest.mark.parametrize("shard", [(2, 2), (-1, 2), (0, 0), (True, 2), (0,), [0, 2], "0/2"])
def test_a_bad_shard_is_an_error_naming_it(tmp_path, shard):
    with pytest.raises(TopologyFolderError, match="shard must be"):
        build_retry_dags_from_folder(tmp_path, handler=HANDLER, shard=shard)

"""A folder DAG file through Airflow's own CLI: one bad topology YAML does not take the others down."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.support.warm_airflow import run_airflow

REPO = Path(__file__).resolve().parents[2]

FOLDER_DAG = """
from airflow_kafka_retry import build_retry_dags_from_folder

globals().update(build_retry_dags_from_folder({folder!r}, handler="handlers.orders:handle", strict={strict}))
"""
GOOD = "topic: {topic}\ngroup_id: {topic}-svc\nattempts: 3\nbackoff: {{kind: custom, delays: [30s, 60s]}}\n"


@pytest.fixture(scope="module")
def airflow_home(tmp_path_factory) -> Path:
    """One migrated metadata DB for the module (the CLI refuses to run without); each test has its folder."""
    home = tmp_path_factory.mktemp("airflow")
    done = airflow(home, home / "no-dags", "db", "migrate")
    assert done.returncode == 0, done.stderr[-3000:]
    return home


def airflow(home: Path, dags: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    env.update(
        AIRFLOW_HOME=str(home),
        AIRFLOW__CORE__DAGS_FOLDER=str(dags),
        AIRFLOW__CORE__LOAD_EXAMPLES="False",
        PYTHONPATH=os.pathsep.join([str(REPO), str(REPO / "dags"), env.get("PYTHONPATH", "")]),
    )
    return run_airflow(env, *args)


def json_rows(done: subprocess.CompletedProcess, returncode: int = 0) -> list[dict]:
    assert done.returncode == returncode, done.stderr[-3000:]
    for line in reversed(done.stdout.splitlines()):
        if line.startswith("[") and (line.startswith("[{") or line == "[]"):
            return json.loads(line)
    raise AssertionError(f"no JSON in: {done.stdout[-2000:]}")


def deploy(home: Path, *, strict: bool) -> Path:
    folder = home / "topologies"
    (home / "dags").mkdir(parents=True)
    folder.mkdir()
    for topic in ("payments", "shipments"):
        (folder / f"{topic}.yaml").write_text(GOOD.format(topic=topic))
    (folder / "refunds.yaml").write_text("topic: refunds\ngroup_id: refunds-svc\nattempts: three\n")
    (home / "dags" / "retry_topologies.py").write_text(FOLDER_DAG.format(folder=str(folder), strict=strict))
    return folder


def test_a_bad_yaml_is_skipped_and_the_other_topologies_are_listed(airflow_home, tmp_path):
    deploy(tmp_path, strict=False)
    dags = tmp_path / "dags"
    listed = {
        row["dag_id"]
        for row in json_rows(airflow(airflow_home, dags, "dags", "list", "--local", "-o", "json"))
    }
    assert {f"kafka_retry__{t}" for t in ("payments", "shipments")} <= listed  # one DAG per topology
    assert not any("refunds" in dag_id for dag_id in listed)
    errors = json_rows(airflow(airflow_home, dags, "dags", "list-import-errors", "--local", "-o", "json"))
    assert errors == []


def test_strict_reports_the_bad_yaml_as_an_import_error_of_the_dag_file(airflow_home, tmp_path):
    folder = deploy(tmp_path, strict=True)
    dags = tmp_path / "dags"
    listed = airflow(airflow_home, dags, "dags", "list-import-errors", "--local", "-o", "json")
    [error] = json_rows(listed, returncode=1)  # the CLI exits 1 when there are import errors
    assert error["filepath"].endswith("retry_topologies.py")
    assert str(folder / "refunds.yaml") in error["error"]
    assert "attempts" in error["error"]


SHARD_DAG = """
from airflow_kafka_retry import build_retry_dags_from_folder

globals().update(build_retry_dags_from_folder({folder!r}, handler="handlers.orders:handle", shard={shard!r}))
"""


def test_shard_files_list_every_topology_once_each_from_the_file_of_its_shard(airflow_home, tmp_path):
    from airflow_kafka_retry.factory.folder import in_shard

    folder, dags = tmp_path / "topologies", tmp_path / "dags"
    folder.mkdir()
    dags.mkdir()
    topics = [f"t{i}" for i in range(6)]
    for topic in topics:
        (folder / f"{topic}.yaml").write_text(GOOD.format(topic=topic))
    for index in range(2):
        (dags / f"retry_topologies_{index}.py").write_text(
            SHARD_DAG.format(folder=str(folder), shard=(index, 2))
        )
    rows = json_rows(airflow(airflow_home, dags, "dags", "list", "--local", "-o", "json"))
    built = [r for r in rows if r["dag_id"].startswith("kafka_retry__")]
    assert sorted(r["dag_id"] for r in built) == [f"kafka_retry__{t}" for t in topics]  # one each
    for row in built:
        topic = row["dag_id"].removeprefix("kafka_retry__")
        index = next(i for i in range(2) if in_shard(f"{topic}.yaml", (i, 2)))
        assert row["fileloc"].endswith(f"retry_topologies_{index}.py"), row
    assert len({r["fileloc"] for r in built}) == 2, "with 6 topologies both shards get some"

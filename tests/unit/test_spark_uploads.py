"""
Kubernetes cluster mode: the operator deletes only the copies it uploaded itself (issue 38 item 1).

``spark-submit``'s output (in client mode the driver's and the handler's own output too) is never a
source of what to delete: a line ``Uploading file: X to dest: Y`` printed by anyone used to get Y
deleted recursively.
"""

from __future__ import annotations

import json
import logging
from types import SimpleNamespace

import fsspec
import pytest

from airflow_kafka_retry.engine.drain.summary import PartitionSummary, RunSummary
from airflow_kafka_retry.spark.result import write_result

from tests.unit.test_spark_secrets import PROTECTED, airflow_connections  # noqa: F401 - a fixture
from tests.unit.test_spark_submit import TOPOLOGY, _context, _operator

OWN_FOLDER_PREFIX = "airflow-kafka-retry-"


@pytest.fixture
def kubernetes_cluster(monkeypatch, airflow_connections):  # noqa: F811 - the fixture above
    from airflow.providers.apache.spark.hooks import spark_submit as provider_hook

    # a k8s:// master needs the cncf.kubernetes provider (not installed here) for the hook to be built
    monkeypatch.setattr(provider_hook, "kube_client", SimpleNamespace(), raising=False)
    monkeypatch.setenv(
        "AIRFLOW_CONN_SPARK_DEFAULT",
        json.dumps(
            {
                "conn_type": "spark",
                "host": "k8s://https://k8s.example:6443",
                "extra": {"deploy-mode": "cluster"},
            }
        ),
    )


def _summary() -> dict:
    partitions = [PartitionSummary("orders-retry-1", 0, "g", drained=1, succeeded=1)]
    return RunSummary(TOPOLOGY, 1, "orders-retry-1", "g", "spark", 1, 1, 2, partitions).to_dict()


def _fake_spark_submit(monkeypatch, seen: dict, lines=()):
    """spark-submit in Kubernetes cluster mode, as far as the operator's hook sees it."""
    from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

    def fake_execute(self, context):
        hook = self._hook = self._get_hook()
        seen.update(files=self.files.split(","), py_files=self.py_files.split(","))
        seen["contents"] = {}
        for uri in [*seen["files"], *seen["py_files"]]:
            if "://" in uri:  # what the driver pod downloads
                with fsspec.open(uri, "rb") as remote:
                    seen["contents"][uri] = remote.read()
        hook._process_spark_submit_log(
            iter([*lines, "INFO LoggingPodStatusWatcherImpl: Application finished\n"])
        )
        args = self.application_args
        write_result(args[args.index("--result") + 1], _summary())

    monkeypatch.setattr(SparkSubmitOperator, "execute", fake_execute)


def _victim(root, name="kafka-config.json"):
    folder = root / "spark-upload-0b8e3a52-6a5c-4d4e-9a53-3c1f1b8b1f00"
    folder.mkdir(parents=True)
    (folder / name).write_text("someone else's file")
    return folder / name


def test_a_printed_upload_line_gets_nothing_deleted(tmp_path, monkeypatch, kubernetes_cluster):
    bucket = tmp_path / "upload-path"
    outside = _victim(tmp_path / "elsewhere")  # anywhere the worker may write
    inside = _victim(bucket)  # another run's upload, under the configured upload path
    lines = []
    for victim in (outside, inside):
        lines.append("INFO KubernetesUtils: Uploading file: {shipped} to dest: " + f"{victim.as_uri()}...\n")
    from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

    def printing_execute(self, context):  # the handler prints the line naming the run's own credentials
        hook = self._hook = self._get_hook()
        shipped = next(f for f in self.files.split(",") if f.endswith("kafka-config.json"))
        hook._process_spark_submit_log(iter(line.format(shipped=shipped) for line in lines))
        args = self.application_args
        write_result(args[args.index("--result") + 1], _summary())

    monkeypatch.setattr(SparkSubmitOperator, "execute", printing_execute)
    op = _operator(tmp_path, conf={**PROTECTED, "spark.kubernetes.file.upload.path": bucket.as_uri()})
    assert op.execute(_context())["status"] == "ok"
    assert outside.read_text() == "someone else's file", (
        "a printed line deleted a file outside the upload path"
    )
    assert inside.read_text() == "someone else's file", "a printed line deleted another run's upload"


def test_the_operator_uploads_its_own_files_and_deletes_exactly_its_own_folder(
    tmp_path, monkeypatch, kubernetes_cluster
):
    bucket = tmp_path / "upload-path"
    theirs = _victim(bucket, "lookup.csv")
    seen: dict = {}
    _fake_spark_submit(monkeypatch, seen)
    op = _operator(tmp_path, conf={**PROTECTED, "spark.kubernetes.file.upload.path": bucket.as_uri() + "/"})
    assert op.execute(_context())["status"] == "ok"
    credentials = [f for f in seen["files"] if f.endswith("/kafka-config.json")]
    assert len(credentials) == 1
    own_folder = credentials[0].rsplit("/", 1)[0]
    assert own_folder.startswith(bucket.as_uri() + "/" + OWN_FOLDER_PREFIX), own_folder
    # spark-submit got remote URIs in the run's own folder, so it uploads none of the run's files itself
    zipped = [f for f in seen["py_files"] if f.startswith(own_folder + "/")]
    assert len(zipped) == 1
    assert json.loads(seen["contents"][credentials[0]])["bootstrap.servers"]
    assert seen["contents"][zipped[0]][:2] == b"PK"
    assert sorted(p.name for p in bucket.iterdir()) == [theirs.parent.name], "the run's folder outlived it"
    assert theirs.read_text() == "someone else's file"


def test_without_a_backend_for_the_upload_path_spark_uploads_and_the_copies_are_named(
    tmp_path, monkeypatch, kubernetes_cluster, caplog
):
    seen: dict = {}
    _fake_spark_submit(monkeypatch, seen)
    upload_path = "nosuchfs://bucket/up"
    op = _operator(tmp_path, conf={**PROTECTED, "spark.kubernetes.file.upload.path": upload_path})
    with caplog.at_level(logging.WARNING):
        assert op.execute(_context())["status"] == "ok"
    assert not any("://" in f for f in seen["files"]), "local files for spark-submit to upload"
    assert f"could not upload the run's files to {upload_path}" in caplog.text
    assert "spark-upload-" in caplog.text  # where Spark leaves its copies, for the operator to delete by hand


def test_the_own_folder_stays_when_spark_submit_did_not_wait_for_the_application(
    tmp_path, monkeypatch, kubernetes_cluster, caplog
):
    bucket = tmp_path / "upload-path"
    seen: dict = {}
    _fake_spark_submit(monkeypatch, seen)
    conf = {
        **PROTECTED,
        "spark.kubernetes.file.upload.path": bucket.as_uri(),
        "spark.kubernetes.submission.waitAppCompletion": "false",
    }
    op = _operator(tmp_path, conf=conf)
    with caplog.at_level(logging.WARNING):
        assert op.execute(_context())["status"] == "ok"
    (own_folder,) = list(bucket.iterdir())
    assert own_folder.name.startswith(OWN_FOLDER_PREFIX)
    assert "did not wait for the application to end" in caplog.text
    assert own_folder.as_uri() in caplog.text


def test_the_own_folder_is_private_and_its_copies_0600(tmp_path):
    """Issue 48 item 3: the credentials copy was left 0644 in a 0755 folder (the umask's modes)."""
    import os
    import stat

    from airflow_kafka_retry.spark.staging import upload_own_files

    credentials, zipped = tmp_path / "credentials.json", tmp_path / "py_files.zip"
    credentials.write_text("{}")
    zipped.write_bytes(b"PK")
    upload = tmp_path / "upload"
    old = os.umask(0o022)
    try:
        staged = upload_own_files(str(upload), [str(credentials), str(zipped)])
    finally:
        os.umask(old)
    assert staged is not None
    folder, remote = staged
    assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700
    for uri in remote.values():
        assert stat.S_IMODE(os.stat(uri).st_mode) == 0o600, uri
        assert os.path.dirname(uri) == folder


def test_a_failed_first_upload_deletes_the_folder_it_made(tmp_path, caplog):
    """Issue 48 item 3: when the first file could not be uploaded, the empty folder stayed behind."""
    from airflow_kafka_retry.spark.staging import upload_own_files

    upload = tmp_path / "upload"
    with caplog.at_level(logging.WARNING):
        assert upload_own_files(str(upload), [str(tmp_path / "missing.json")]) is None
    assert "could not upload the run's files" in caplog.text
    assert list(upload.iterdir()) == []  # the folder it made is gone
    assert "could not delete" not in caplog.text

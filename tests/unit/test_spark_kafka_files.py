"""The public files a Kafka configuration names travel with it to the Spark driver and executors."""

from __future__ import annotations

import json
import os
import stat

import pytest

from airflow_kafka_retry.engine.kafka.clients import KafkaConfigError
from airflow_kafka_retry.spark import app, kafka_files
from airflow_kafka_retry.spark.credentials import write_credentials_file
from airflow_kafka_retry.spark.kafka_files import FILES_KEY, materialized, pack_files

CA = b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
CRL = bytes(range(256))  # DER: any bytes travel as they are


@pytest.fixture
def files(tmp_path):
    (tmp_path / "ca.pem").write_bytes(CA)
    (tmp_path / "crl.der").write_bytes(CRL)
    (tmp_path / "client.key").write_bytes(b"PRIVATE")
    (tmp_path / "ca-dir").mkdir()
    return tmp_path


def test_only_public_files_that_exist_here_are_packed(files):
    config = {
        "bootstrap.servers": "k:9093",
        "ssl.ca.location": str(files / "ca.pem"),
        "ssl.crl.location": str(files / "crl.der"),
        "ssl.certificate.location": str(files / "only-on-the-cluster.pem"),
        "ssl.key.location": str(files / "client.key"),  # key material: mounted, never carried
    }
    packed = pack_files(config)
    assert sorted(packed[FILES_KEY]) == ["ssl.ca.location", "ssl.crl.location"]
    assert {k: v for k, v in packed.items() if k != FILES_KEY} == config
    assert b"PRIVATE" not in json.dumps(packed).encode()
    for where in (str(files / "ca-dir"), "probe"):  # a CA folder, the system store: paths as they are
        assert FILES_KEY not in pack_files({**config, "ssl.ca.location": where, "ssl.crl.location": ""})


def test_each_block_gets_its_own_private_copies_deleted_when_it_ends(files):
    packed = pack_files({"bootstrap.servers": "k:9093", "ssl.ca.location": str(files / "ca.pem")})
    (files / "ca.pem").unlink()  # the driver and executors never read the original path
    with materialized(packed, "on executor host 'h'") as config:
        copy = config["ssl.ca.location"]
        assert FILES_KEY not in config
        assert copy != str(files / "ca.pem")
        with open(copy, "rb") as fh:
            assert fh.read() == CA
        assert stat.S_IMODE(os.stat(copy).st_mode) == 0o600
        assert stat.S_IMODE(os.stat(os.path.dirname(copy)).st_mode) == 0o700
        with materialized(packed, "on executor host 'h'") as other:
            assert os.path.dirname(other["ssl.ca.location"]) != os.path.dirname(copy)
    assert not os.path.exists(os.path.dirname(copy))
    seen: list[str] = []

    def failing_task() -> None:
        with materialized(packed, "there") as config:
            seen.append(config["ssl.ca.location"])
            raise RuntimeError("the partition failed")

    with pytest.raises(RuntimeError):
        failing_task()
    assert seen
    assert not os.path.exists(os.path.dirname(seen[0]))


def test_a_configuration_without_files_is_used_as_it_is():
    config = {"bootstrap.servers": "k:9093", "ssl.ca.location": "/mounted/ca.pem"}
    with materialized(config, "here") as used:
        assert used == config


def test_the_credentials_file_carries_the_ca_to_the_app(files, tmp_path):
    """What the submission writes, the app reads: the CA's bytes, not only its path on the worker."""
    (tmp_path / "work").mkdir()
    config = {"bootstrap.servers": "k:9093", "sasl.password": "pw", "ssl.ca.location": str(files / "ca.pem")}
    path = write_credentials_file(config, str(tmp_path / "work"))
    (files / "ca.pem").unlink()
    with materialized(app.read_kafka_config(path), "on the driver's host 'h'") as used:
        with open(used["ssl.ca.location"], "rb") as fh:
            assert fh.read() == CA
        assert used["sasl.password"] == "pw"


def test_a_file_too_large_to_carry_is_named(files, monkeypatch):
    monkeypatch.setattr(kafka_files, "MAX_FILE_BYTES", 100)
    with pytest.raises(
        KafkaConfigError, match=r"ssl\.crl\.location=.*crl\.der' is 256 bytes, more than the 100"
    ):
        pack_files({"bootstrap.servers": "k", "ssl.crl.location": str(files / "crl.der")})


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ("a string", "must map Kafka settings to files"),
        ({"ssl.key.location": {"path": "k", "base64": ""}}, "'ssl.key.location', which is not one of"),
        ({"ssl.ca.location": {"path": "ca.pem", "base64": "not base64!"}}, "not a path and base64"),
        ({"ssl.ca.location": {"path": "ca.pem"}}, "not a path and base64"),
    ],
)
def test_a_malformed_files_entry_is_named(entry, message):
    with pytest.raises(KafkaConfigError, match=message), materialized({FILES_KEY: entry}, "here"):
        pass

"""``airflow-kafka-retry broker --kafka --secure``: a secured node whose secrets stay in 0600 files."""

from __future__ import annotations

import json
import os
import re
import signal
import stat
import subprocess
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from tests.support.broker_cli import broker_cli, wait_gone

pytestmark = [pytest.mark.integration]


def test_secure_broker_cli_prints_config_files_never_a_password(tmp_path: Path) -> None:
    with broker_cli("--secure", "--user", "tiers") as (proc, bootstrap):
        assert proc.stdout is not None
        assert proc.stderr is not None
        assert re.fullmatch(r"127\.0\.0\.1:\d+", bootstrap), bootstrap + proc.stderr.read()
        files = dict(proc.stdout.readline().split()[1:] for _ in range(2))
        assert set(files) == {"admin", "tiers"}
        printed = [bootstrap, *files.values()]
        for line in iter(proc.stderr.readline, ""):
            printed.append(line)
            if line.startswith("Apache Kafka (SASL_SSL"):
                break
        jvm = int(re.search(r"pid (\d+)", printed[-1]).group(1))  # type: ignore[union-attr]
        configs = {user: json.loads(Path(path).read_text()) for user, path in files.items()}
        for path in files.values():
            assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
            assert stat.S_IMODE(os.stat(Path(path).parent).st_mode) == 0o700
        passwords = [c["sasl.password"] for c in configs.values()]
        assert configs["tiers"]["bootstrap.servers"] == bootstrap
        assert configs["tiers"]["security.protocol"] == "SASL_SSL"
        assert Path(configs["tiers"]["ssl.ca.location"]).is_file()
        # the tier user logs in and, without an ACL, sees nothing; the admin sees everything
        assert AdminClient(configs["tiers"]).list_topics(timeout=20).brokers
        ps = subprocess.run(["ps", "-eww", "-o", "args"], capture_output=True, text=True, check=True).stdout
        assert not [p for p in passwords if p in ps or any(p in line for line in printed)]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
        assert wait_gone(jvm), "broker outlived the CLI"
        assert not any(Path(p).exists() for p in files.values()), "secrets left behind"

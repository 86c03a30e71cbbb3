"""
A secured single-node Apache Kafka: SASL_SSL with SCRAM-SHA-512 over TLS, ACLs enforced, users per role.

``SecureKafka()`` is :class:`~airflow_kafka_retry.sandbox.kafka.ApacheKafka` (same jars, lifecycle and
readiness) with:

* a throw-away CA and a broker certificate for ``IP:127.0.0.1`` made with ``openssl``, the key in a PKCS12
  keystore; clients need only the CA (``ssl.ca.location``);
* a ``SASL_SSL`` listener for clients (:attr:`bootstrap`), SCRAM-SHA-512 only; ``PLAINTEXT`` for the
  inter-broker and controller listeners, on loopback (their principal, ``User:ANONYMOUS``, is a super user:
  the node talks to itself there; clients are never given that port);
* ``StandardAuthorizer`` with ``allow.everyone.if.no.acl.found=false``: no ACL, no access;
* a super user ``admin`` added when the storage is formatted (its password is on the storage tool's command
  line for the second it formats, never on the broker's), and the users of ``users`` created through the
  admin API (``alter_user_scram_credentials``) once the node is ready.

Every password is random, and lives only in this process and in ``0600`` files of a ``0700`` folder: the
node's ``server.properties`` (the keystore's password) and one client configuration per user
(:meth:`config_file`, JSON for ``--kafka-config``); :meth:`stop` deletes them with the node's data.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow_kafka_retry.sandbox.kafka import ApacheKafka, KafkaStartError
from airflow_kafka_retry.sandbox.processes import free_port

if TYPE_CHECKING:
    from airflow_kafka_retry.sandbox.kafka_node import KafkaNode

MECHANISM = "SCRAM-SHA-512"
ADMIN = "admin"
_OPENSSL_TIMEOUT_S = 60.0


def _private(path: Path, text: str) -> Path:
    """Write ``text`` to a new ``0600`` file (``O_EXCL``: nothing planted there first is reused)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
    return path


def _openssl(*args: str, cwd: Path) -> None:
    try:
        run = subprocess.run(
            ["openssl", *args],
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=_OPENSSL_TIMEOUT_S,
            check=False,
        )
    except FileNotFoundError:
        raise KafkaStartError(
            "the secured broker needs the openssl command (Debian: apt-get install openssl)"
        )
    except subprocess.TimeoutExpired:
        raise KafkaStartError(f"openssl {args[0]} did not finish within {_OPENSSL_TIMEOUT_S:g} s") from None
    if run.returncode != 0:
        raise KafkaStartError(
            f"openssl {args[0]} failed (exit {run.returncode}): {run.stderr.strip()[-500:]}"
        )


def make_tls(folder: Path, keystore_password: str) -> tuple[Path, Path]:
    """A throw-away CA and a broker keystore for ``127.0.0.1`` in ``folder``: (CA PEM, PKCS12 keystore)."""
    _private(folder / "keystore.pass", keystore_password)
    _private(folder / "broker.ext", "subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n")
    _openssl(
        "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem",
        "-days", "2", "-subj", "/CN=airflow-kafka-retry test CA",
        "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign",
        cwd=folder,
    )  # fmt: skip
    _openssl(
        "req", "-newkey", "rsa:2048", "-nodes", "-keyout", "broker.key", "-out", "broker.csr",
        "-subj", "/CN=127.0.0.1",
        cwd=folder,
    )  # fmt: skip
    _openssl(
        "x509", "-req", "-in", "broker.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
        "-out", "broker.pem", "-days", "2", "-extfile", "broker.ext",
        cwd=folder,
    )  # fmt: skip
    _openssl(
        "pkcs12", "-export", "-in", "broker.pem", "-inkey", "broker.key", "-name", "broker",
        "-out", "broker.p12", "-passout", "file:keystore.pass",
        cwd=folder,
    )  # fmt: skip
    for name in ("ca.key", "broker.key", "broker.p12"):
        os.chmod(folder / name, 0o600)
    return folder / "ca.pem", folder / "broker.p12"


class SecureKafka(ApacheKafka):
    """
    A single-node Apache Kafka that authenticates (SCRAM-SHA-512 over TLS) and authorizes (ACLs).

    Other parameters: :class:`~airflow_kafka_retry.sandbox.kafka.ApacheKafka`'s.

    :param users: users to create besides ``admin`` (one per role, say); each gets a client configuration.
    """

    def __init__(self, *, users: Sequence[str] = (), **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._users = [u for u in dict.fromkeys(users) if u != ADMIN]
        self._passwords: dict[str, str] = {}
        self._folder: Path | None = None
        self._secure_port: int | None = None
        self.ca_path: Path | None = None
        self._keystore: Path | None = None
        self._keystore_password = ""

    # ------------------------------------------------------------------ what clients use
    @property
    def bootstrap(self) -> str:
        """The ``SASL_SSL`` listener: the only one clients get."""
        if self._secure_port is None or self.port is None:
            raise RuntimeError("broker is not started")
        return f"127.0.0.1:{self._secure_port}"

    @property
    def users(self) -> list[str]:
        return [ADMIN, *self._passwords.keys() - {ADMIN}]

    def client_config(self, user: str) -> dict[str, Any]:
        """The librdkafka configuration of ``user`` (it holds the password: keep it out of logs)."""
        if user not in self._passwords or self.ca_path is None:
            raise KeyError(f"no user {user!r} on this broker; users: {', '.join(sorted(self._passwords))}")
        return {
            "bootstrap.servers": self.bootstrap,
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": MECHANISM,
            "sasl.username": user,
            "sasl.password": self._passwords[user],
            "ssl.ca.location": str(self.ca_path),
        }

    def config_file(self, user: str) -> Path:
        """A ``0600`` JSON file of :meth:`client_config` (``--kafka-config`` / ``--admin-config``)."""
        if self._folder is None:
            raise RuntimeError("broker is not started")
        path = self._folder / f"client-{user}.json"
        if not path.exists():
            _private(path, json.dumps(self.client_config(user), indent=2))
        return path

    def add_user(self, user: str, *, timeout: float = 30.0) -> None:
        """Create ``user`` with a random password (admin API), and wait until it can log in."""
        self.add_users([user], timeout=timeout)

    def add_users(self, users: Sequence[str], *, timeout: float = 30.0) -> None:
        """Create ``users`` with random passwords in one admin request, and wait until each can log in."""
        from confluent_kafka.admin import (
            AdminClient,
            ScramCredentialInfo,
            ScramMechanism,
            UserScramCredentialAlteration,
            UserScramCredentialUpsertion,
        )

        if not users:
            return
        passwords = {user: secrets.token_urlsafe(24) for user in users}
        admin = AdminClient(self.client_config(ADMIN))
        info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096)
        upserts: list[UserScramCredentialAlteration] = [
            UserScramCredentialUpsertion(u, info, p.encode()) for u, p in passwords.items()
        ]
        futures = admin.alter_user_scram_credentials(upserts, request_timeout=timeout)
        for future in futures.values():
            future.result(timeout=timeout)
        self._passwords.update(passwords)
        for user in passwords:
            self._wait_login(user, timeout)

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> SecureKafka:
        self._folder = Path(tempfile.mkdtemp(prefix="airflow-kafka-retry-secure-"))
        self._keystore_password = secrets.token_urlsafe(24)
        self._passwords = {ADMIN: secrets.token_urlsafe(24)}
        try:
            self.ca_path, self._keystore = make_tls(self._folder, self._keystore_password)
            super().start()
            self._wait_login(ADMIN, 60.0)
            self.add_users(self._users)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        try:
            super().stop()
        finally:
            self._secure_port = None
            if self._folder is not None:
                shutil.rmtree(self._folder, ignore_errors=True)
                self._folder = None

    def __enter__(self) -> SecureKafka:
        return self.start()

    # ------------------------------------------------------------------ ApacheKafka's hooks
    def _listener_overrides(self, port: int, controller_port: int) -> dict[str, str]:
        self._secure_port = free_port()
        secure = f"SASL_SSL://127.0.0.1:{self._secure_port}"
        return {
            "listeners": f"PLAINTEXT://127.0.0.1:{port},{secure},CONTROLLER://127.0.0.1:{controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port},{secure}",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL,CONTROLLER:PLAINTEXT",
            "inter.broker.listener.name": "PLAINTEXT",
            "sasl.enabled.mechanisms": MECHANISM,
            "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": (
                "org.apache.kafka.common.security.scram.ScramLoginModule required;"
            ),
            "ssl.keystore.type": "PKCS12",
            "ssl.keystore.location": str(self._keystore),
            "ssl.keystore.password": self._keystore_password,
            "ssl.key.password": self._keystore_password,
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "allow.everyone.if.no.acl.found": "false",
            "super.users": f"User:{ADMIN};User:ANONYMOUS",
        }

    def _format_args(self, node: KafkaNode) -> list[str]:
        os.chmod(node.config, 0o600)  # it holds the keystore's password
        return ["--add-scram", f"{MECHANISM}=[name={ADMIN},password={self._passwords[ADMIN]}]"]

    def _wait_login(self, user: str, timeout: float) -> None:
        """Until ``user`` authenticates on :attr:`bootstrap` (a new SCRAM credential takes a moment)."""
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import AdminClient

        deadline = time.monotonic() + timeout
        admin = AdminClient({**self.client_config(user), "logger": _QUIET})
        while True:
            try:
                admin.list_topics(timeout=min(5.0, max(0.5, deadline - time.monotonic())))
                return
            except KafkaException as exc:
                if time.monotonic() >= deadline:
                    raise KafkaStartError(
                        f"user {user!r} could not log in to {self.bootstrap} within {timeout:g} s: {exc}"
                    ) from None
                time.sleep(0.2)


def _quiet_logger() -> Any:
    import logging

    logger = logging.getLogger("airflow_kafka_retry.sandbox.kafka_secure.rdkafka")
    logger.setLevel(logging.ERROR)
    return logger


_QUIET = _quiet_logger()

"""
Masking a ``spark-submit`` command line before it is logged.

A ``--conf`` value may be a secret (``spark.hadoop.fs.s3a.secret.key``, ``spark.ssl.keyPassword``,
``spark.authenticate.secret``, a ``spark.kubernetes.driverEnv.API_TOKEN``). Spark redacts such
values in its UI and event log (``spark.redaction.regex``), and the Spark provider's hook masks
``key=value`` pairs whose key holds ``secret`` or ``password`` in the command it logs. The command
lines this package logs get the same treatment with a wider net: every ``KEY=VALUE`` token, and the
value after a ``--some-option`` whose name looks secret, is replaced by ``******`` when the key
holds ``password``, ``secret``, ``token``, ``key``, ``sasl`` or ``ssl``; so is every value of an
environment variable set through Spark (``spark.executorEnv.*``, ``spark.yarn.appMasterEnv.*``,
``spark.kubernetes.driverEnv.*``), and a ``KEY=VALUE`` inside a value (``-Djavax.net.ssl.
trustStorePassword=...`` in ``spark.driver.extraJavaOptions``) is masked by the same rules.

What ``spark-submit`` prints is masked by :class:`OutputMasker`: the same rules, plus every secret
value the submission was given, wherever it shows up (Spark's ``--verbose`` prints properties as
``(key,value)``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

MASK = "******"
SECRET_KEY = re.compile(r"password|secret|token|key|sasl|ssl", re.IGNORECASE)
#: Spark properties that set an environment variable of the driver or executors: any value may be a secret
ENV_KEY = re.compile(r"(?:executorEnv|appMasterEnv|driverEnv)\.", re.IGNORECASE)
_SPACE = re.compile(r"(\s+)")
#: options whose value is a path or a name, never a secret (``--keytab`` is the PATH of a keytab)
_PATH_OPTIONS = ("--kafka-config-file", "--keytab", "--properties-file")
#: shorter values are not searched for in output lines (they would mask ordinary words and numbers)
MIN_SECRET_LENGTH = 4
#: librdkafka settings whose value is a credential (``sasl.password``, ``ssl.key.password``, ``ssl.key.pem``)
KAFKA_SECRET_KEY = re.compile(r"password|secret|token|jaas|oauthbearer\.config|\.pem$", re.IGNORECASE)
_NOT_SECRETS = frozenset(("true", "false", "none", "null"))


def _secret_key(key: str) -> bool:
    return bool(SECRET_KEY.search(key) or ENV_KEY.search(key))


def _mask_token(token: str) -> str:
    key, sep, value = token.partition("=")
    if not sep or not value:
        return token
    if _secret_key(key):
        return f"{key}={MASK}"
    if "=" in value:  # KEY=VALUE pairs inside the value (JVM options)
        return f"{key}={mask_text(value)}"
    return token


def secrets_in(token: str) -> list[str]:
    """The values :func:`_mask_token` hides in ``token`` (nested ``KEY=VALUE`` pairs included)."""
    key, sep, value = token.partition("=")
    if not sep or not value:
        return []
    if _secret_key(key):
        return [value]
    return [found for part in value.split() for found in secrets_in(part)]


def mask_command(cmd: Sequence[str]) -> str:
    """``cmd`` joined with spaces, each secret-looking value replaced by ``******``."""
    masked: list[str] = []
    hide_next = False
    for arg in cmd:
        if hide_next:
            masked.append(MASK)
            hide_next = False
            continue
        if arg.startswith("--") and "=" not in arg and arg not in _PATH_OPTIONS and SECRET_KEY.search(arg):
            hide_next = True
        masked.append(_mask_token(arg))
    return " ".join(masked)


def mask_text(text: str) -> str:
    """
    ``text`` (a logged command or output line) with the value of every secret-looking ``KEY=VALUE`` masked.

    Splits on whitespace only, so it runs in linear time on any line.
    """
    return "".join(part if part.isspace() else _mask_token(part) for part in _SPACE.split(text))


class OutputMasker:
    """
    Masks a line of ``spark-submit`` output (or of a command) before it is logged or shown.

    :func:`mask_text`'s rules, then every value of ``secrets`` (of :data:`MIN_SECRET_LENGTH` or more
    characters) wherever it appears in the line.
    """

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        wanted = {
            s
            for s in map(str, secrets)
            if len(s) >= MIN_SECRET_LENGTH and not s.isdigit() and s.lower() not in _NOT_SECRETS
        }
        self._secrets = sorted(wanted, key=len, reverse=True)

    @classmethod
    def for_submission(
        cls, conf: Mapping[str, Any] | None, kafka_config: Mapping[str, Any] | None
    ) -> OutputMasker:
        """The secrets of a submission: masked ``--conf`` values and Kafka settings whose key looks secret."""
        found = [v for k, v in (conf or {}).items() for v in secrets_in(f"{k}={v}")]
        found += [
            str(v) for k, v in (kafka_config or {}).items() if KAFKA_SECRET_KEY.search(k) and v is not None
        ]
        return cls(found)

    @property
    def secrets(self) -> list[str]:
        return list(self._secrets)

    def __call__(self, line: str) -> str:
        masked = mask_text(line)
        for secret in self._secrets:
            masked = masked.replace(secret, MASK)
        return masked

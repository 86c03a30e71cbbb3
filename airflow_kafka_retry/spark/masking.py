"""Masking a ``spark-submit`` command line before it is logged.

A ``--conf`` value may be a secret (``spark.hadoop.fs.s3a.secret.key``, ``spark.ssl.keyPassword``,
``spark.authenticate.secret``, a ``spark.kubernetes.driverEnv.API_TOKEN``). Spark redacts such
values in its UI and event log (``spark.redaction.regex``), and the Spark provider's hook masks
``key=value`` pairs whose key holds ``secret`` or ``password`` in the command it logs. The command
lines this package logs get the same treatment with a wider net: every ``KEY=VALUE`` token, and the
value after a ``--some-option`` whose name looks secret, is replaced by ``******`` when the key
holds ``password``, ``secret``, ``token``, ``key``, ``sasl`` or ``ssl``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

MASK = "******"
SECRET_KEY = re.compile(r"password|secret|token|key|sasl|ssl", re.IGNORECASE)
_SPACE = re.compile(r"(\s+)")
#: options whose value is a path or a name, never a secret (``--keytab`` is the PATH of a keytab)
_PATH_OPTIONS = ("--kafka-config-file", "--keytab", "--properties-file")


def _mask_token(token: str) -> str:
    key, sep, value = token.partition("=")
    if sep and value and SECRET_KEY.search(key):
        return f"{key}={MASK}"
    return token


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
    """``text`` (a logged command or output line) with the value of every secret-looking ``KEY=VALUE`` masked.

    Splits on whitespace only, so it runs in linear time on any line.
    """
    return "".join(part if part.isspace() else _mask_token(part) for part in _SPACE.split(text))

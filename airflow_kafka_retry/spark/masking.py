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

A masked value runs to the end of its word and over the words after it up to the next option or
``KEY=VALUE`` (a word starting with ``-`` or holding ``=``): ``API_TOKEN=abc def`` is masked whole.

What ``spark-submit`` prints is masked by :class:`OutputMasker`: the same rules, plus every secret
value the submission was given (Spark's ``--verbose`` prints properties as ``(key,value)``). A value
whose key looks secret (a ``--conf`` key holding ``password``, ``token`` ..., a Kafka credential) is
masked wherever it shows up, inside other words too. The value of an environment variable whose name
does not look secret is masked only where it stands as a word of its own (not next to a letter, digit,
``_``, ``-`` or ``.``): ``APP=orders`` masks ``(spark.executorEnv.APP,orders)`` but leaves the driver
pod ``orders-driver-1`` alone, whose name the Spark provider reads from the same output to track it.
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


def _continues(word: str) -> bool:
    """Whether ``word`` goes on the value before it: not an option (``-x``) nor a ``KEY=VALUE``."""
    return bool(word) and not word.startswith("-") and "=" not in word


def _pairs(text: str) -> list[str]:
    """``text``'s words, each with the words that continue it (see :func:`_continues`) and their spaces."""
    parts = _SPACE.split(text)  # word, space, word, ... (words may be empty)
    grouped: list[str] = []
    for index in range(0, len(parts), 2):
        word = parts[index]
        if grouped and _continues(word):
            grouped[-1] += parts[index - 1] + word
        elif word:
            grouped.append(word)
    return grouped


def _found(token: str) -> list[tuple[str, bool]]:
    """
    ``(value, anywhere)`` for each value :func:`_mask_token` hides in ``token`` (nested pairs included).

    ``anywhere``: the key looks secret, so the value is hunted for inside other words too; otherwise
    (an environment variable of an ordinary name) only where it stands as a word of its own.
    """
    key, sep, value = token.partition("=")
    if not sep or not value:
        return []
    if _secret_key(key):
        return [(value, bool(SECRET_KEY.search(key)))]
    return [found for pair in _pairs(value) for found in _found(pair)]


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

    A masked value goes on over the words after it up to the next option or ``KEY=VALUE`` (a value
    with spaces is masked whole; so is, at worst, the rest of the line). Splits on whitespace only,
    so it runs in linear time on any line.
    """
    parts = _SPACE.split(text)  # word, space, word, ... (words may be empty)
    out: list[str] = []
    hiding = False
    for index in range(0, len(parts), 2):
        word = parts[index]
        space = parts[index - 1] if index else ""
        if hiding and _continues(word):
            continue
        masked = _mask_token(word)
        hiding = masked != word and masked.endswith(f"={MASK}")
        out.append(space + masked)
    return "".join(out)


class OutputMasker:
    """
    Masks a line of ``spark-submit`` output (or of a command) before it is logged or shown.

    :func:`mask_text`'s rules, then every value of ``secrets`` wherever it appears in the line, and
    every value of ``words`` where it stands as a word of its own (no letter, digit, ``_``, ``-`` or
    ``.`` on either side); values shorter than :data:`MIN_SECRET_LENGTH`, numbers and booleans are not
    hunted for.
    """

    def __init__(self, secrets: Iterable[str] = (), words: Iterable[str] = ()) -> None:
        self._secrets = _wanted(secrets)
        self._words = [w for w in _wanted(words) if w not in self._secrets]
        self._word_pattern = (
            re.compile(rf"(?<![\w.\-])(?:{'|'.join(map(re.escape, self._words))})(?![\w.\-])")
            if self._words
            else None
        )

    @classmethod
    def for_submission(
        cls, conf: Mapping[str, Any] | None, kafka_config: Mapping[str, Any] | None
    ) -> OutputMasker:
        """
        The secrets of a submission: masked ``--conf`` values and Kafka settings whose key looks secret.

        Environment values (``spark.*Env.*``) of names that do not look secret are masked as words.
        """
        found = [pair for k, v in (conf or {}).items() for pair in _found(f"{k}={v}")]
        secrets = [value for value, anywhere in found if anywhere]
        secrets += [
            str(v) for k, v in (kafka_config or {}).items() if KAFKA_SECRET_KEY.search(k) and v is not None
        ]
        return cls(secrets, [value for value, anywhere in found if not anywhere])

    @property
    def secrets(self) -> list[str]:
        """Every value this masker hunts for, wherever or as a word."""
        return sorted([*self._secrets, *self._words])

    def __call__(self, line: str) -> str:
        masked = mask_text(line)
        for secret in self._secrets:
            masked = masked.replace(secret, MASK)
        if self._word_pattern is not None:
            masked = self._word_pattern.sub(MASK, masked)
        return masked


def _wanted(values: Iterable[str]) -> list[str]:
    """The values worth hunting for, longest first (a secret holding another is masked whole)."""
    wanted = {
        s
        for s in map(str, values)
        if len(s) >= MIN_SECRET_LENGTH and not s.isdigit() and s.lower() not in _NOT_SECRETS
    }
    return sorted(wanted, key=len, reverse=True)

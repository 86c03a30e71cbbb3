"""
Kafka secrets on their way to Spark executors: refuse to send them over an unprotected network.

Every Spark task carries the Kafka configuration in its serialized closure (see
:mod:`~airflow_kafka_retry.spark.app`). With a ``local`` master the driver and its executors share
one JVM and nothing crosses a network. With any other master (``spark://``, ``yarn``, ``k8s://``,
``local-cluster[...]``) the closure travels over Spark's RPC, which is plaintext and
unauthenticated unless ``spark.authenticate`` and ``spark.network.crypto.enabled`` are on.

:func:`check_secrets_transport` refuses such a run when the configuration holds secrets (SASL or
SSL key material), unless the caller passes ``allow_unencrypted_secrets=True``. It runs where the
submission is prepared (:func:`~airflow_kafka_retry.spark.submit.prepare_submission`, used by the
operator and the CLI) and again on the driver, on the configuration Spark really runs with.
"""

from __future__ import annotations

import importlib.util
import os
import re
from collections.abc import Mapping
from typing import Any

#: What Spark must have on for secrets to cross its RPC: authenticated, and encrypted (AES-GCM).
REQUIRED_SETTINGS = ("spark.authenticate", "spark.network.crypto.enabled")
ALLOW_FLAG = "allow_unencrypted_secrets"

#: librdkafka keys whose value is a secret: passwords, client secrets, private keys in PEM form.
_SECRET_KEY = re.compile(
    r"password|secret|passphrase|private\.key|^ssl\.key\.pem$|^sasl\.oauthbearer\.config$", re.IGNORECASE
)
_LOCAL_MASTER = re.compile(r"^local(\[[^\]]*\])?$")


class UnencryptedSecretsError(ValueError):
    """Kafka secrets would cross Spark's network unprotected; the message names the missing settings."""


def secret_keys(kafka_config: Mapping[str, Any]) -> list[str]:
    """
    The keys of ``kafka_config`` that hold secrets.

    SASL passwords, OAUTHBEARER secrets, SSL key material.
    """
    return sorted(k for k, v in kafka_config.items() if _SECRET_KEY.search(k) and v not in (None, ""))


def is_local_master(master: str | None) -> bool:
    """
    ``local``, ``local[N]``, ``local[*]``, ``local[N,F]``: driver and executors in one JVM.

    ``local-cluster[...]`` starts separate executor JVMs that talk over RPC, so it is not local.
    """
    return bool(_LOCAL_MASTER.match((master or "").strip()))


def _true(value: Any) -> bool:
    return str(value).strip().lower() == "true"


def missing_protection(spark_conf: Mapping[str, Any]) -> list[str]:
    """The :data:`REQUIRED_SETTINGS` that ``spark_conf`` does not set to ``true``."""
    return [key for key in REQUIRED_SETTINGS if not _true(spark_conf.get(key, "false"))]


def check_secrets_transport(
    kafka_config: Mapping[str, Any],
    *,
    master: str | None,
    spark_conf: Mapping[str, Any],
    allow_unencrypted_secrets: bool = False,
    where: str = "",
) -> None:
    """
    Refuse a run whose Kafka secrets would cross Spark's network in the clear.

    :param kafka_config: the librdkafka configuration the tasks will carry.
    :param master: the Spark master (``local[2]``, ``yarn``, ``spark://...``, ``k8s://...``).
    :param spark_conf: the Spark properties the run gets (``--conf``, properties file, spark-defaults).
    :param allow_unencrypted_secrets: accept the risk explicitly (e.g. a single-tenant cluster on an
        isolated network).
    :param where: where the settings were looked up, appended to the message.
    :raises UnencryptedSecretsError: naming the secret keys, the master and each missing setting.
    """
    if allow_unencrypted_secrets or is_local_master(master):
        return
    secrets = secret_keys(kafka_config)
    missing = missing_protection(spark_conf)
    if not secrets or not missing:
        return
    settings = " and ".join(f"{key}=true" for key in missing)
    raise UnencryptedSecretsError(
        f"the Kafka configuration holds secrets ({', '.join(secrets)}) and every Spark task carries it to "
        "the "
        f"executors of master {master!r} over Spark's RPC, which is not protected: {', '.join(missing)} "
        f"{'is' if len(missing) == 1 else 'are'} not set{where}. Set {settings} (Spark then authenticates "
        "and "
        "encrypts its RPC), let executors resolve credentials themselves (a secret the cluster mounts, such "
        "as "
        f"ssl.key.location, or an OAUTHBEARER token source), or pass {ALLOW_FLAG}=True to accept the risk"
    )


# ----------------------------------------------------------------------------- the settings spark-submit uses
def read_properties(path: str) -> dict[str, str]:
    """
    A Spark properties file, in ``spark-defaults.conf`` format.

    ``key value`` or ``key=value`` lines; ``#`` comments.
    """
    props: dict[str, str] = {}
    with open(path, encoding="utf-8") as fh:
        for raw in fh:
            line = raw.strip()
            if not line or line.startswith(("#", "!")):
                continue
            match = re.match(r"([^\s=:]+)\s*[=:\s]\s*(.*)$", line)
            if match:
                props[match.group(1)] = match.group(2).strip()
    return props


def spark_defaults_file(environ: Mapping[str, str] | None = None) -> str | None:
    """
    The ``spark-defaults.conf`` spark-submit reads, if it exists.

    ``$SPARK_CONF_DIR``, else ``$SPARK_HOME/conf``, else the ``conf`` folder of the installed
    ``pyspark`` (whose ``spark-submit`` sets ``SPARK_HOME`` to it).
    """
    env = os.environ if environ is None else environ
    home = env.get("SPARK_HOME")
    if not home and environ is None:
        spec = importlib.util.find_spec("pyspark")
        home = (
            next(iter(spec.submodule_search_locations)) if spec and spec.submodule_search_locations else None
        )
    folder = env.get("SPARK_CONF_DIR") or (os.path.join(home, "conf") if home else None)
    path = os.path.join(folder, "spark-defaults.conf") if folder else None
    return path if path and os.path.isfile(path) else None


def effective_spark_conf(
    conf: Mapping[str, Any] | None,
    properties_file: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> tuple[dict[str, str], str]:
    """
    The Spark properties ``spark-submit`` will use, as far as the submitting side can see them.

    The properties file if one is given, else ``spark-defaults.conf`` (spark-submit reads the defaults
    besides a properties file only with ``--load-spark-defaults``), then ``conf`` (``--conf`` wins, as
    in spark-submit). Returns the properties and where they were looked up (for error messages).
    """
    merged: dict[str, str] = {}
    sources: list[str] = []
    path = properties_file or spark_defaults_file(environ)
    if path and os.path.isfile(path):
        merged.update(read_properties(path))
        sources.append(path)
    merged.update({k: str(v) for k, v in (conf or {}).items()})
    return merged, f" (looked in --conf{''.join(', ' + s for s in sources)})"

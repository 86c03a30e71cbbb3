"""
``build_retry_dags_from_folder``: the DAGs of every topology YAML of a folder, from one DAG file.

A platform team holding many topologies keeps their YAML files in one folder and one DAG file calls
this. The DAG processor then parses one file: the provider's import is paid once for all topologies,
not once per topology file. One bad YAML does not take the other topologies' DAGs down: by default it
is logged (naming the file and the problem) and skipped, as Airflow DAG factories over config folders
do; ``strict=True`` turns it into an import error of the DAG file instead. A task process (Airflow's
parsing context names the DAG it runs) builds only the topology holding that DAG, looking first in the
files whose text names the DAG's topic, so a task start does not pay for every topology of the folder.

The DAG processor writes a file's DAGs to the metadata DB in one transaction that locks their rows, and the
scheduler skips a locked DAG when it creates runs: a file of 100 topologies (400 DAGs) held them for about
16 s of every 33 s on a loaded 2-core machine, so a due tier's run waited that long. ``shard=(i, n)`` builds
only the topologies of shard ``i`` of ``n`` (a stable hash of the YAML's file name: shards are uneven), so
``n`` DAG files split the folder and each transaction locks a few DAGs briefly (docs/capacity.md).
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow_kafka_retry.factory.connections import role_connections
from airflow_kafka_retry.factory.retry_dags import DEFAULT_DAG_ID_TEMPLATE, SETUP_SUFFIX, build_retry_dags
from airflow_kafka_retry.policy.topology.file import load_topology

if TYPE_CHECKING:
    from airflow.sdk import DAG

    from airflow_kafka_retry.policy.topology.model import Topology

log = logging.getLogger(__name__)

#: The topology files of a folder.
PATTERNS = ("*.yaml", "*.yml")


class TopologyFolderError(ValueError):
    """A topology file of the folder cannot be built (``strict=True``); the message names the file."""


def build_retry_dags_from_folder(
    folder: str | Path,
    *,
    handler: str | None = None,
    strict: bool = False,
    tier_overrides: Mapping[str, Mapping[str, Any]] | None = None,
    shard: tuple[int, int] | None = None,
    **kwargs: Any,
) -> dict[str, DAG]:
    """
    Build the DAGs of every topology YAML (``*.yaml``, ``*.yml``) in ``folder``, sorted by file name.

    Each file is built by :func:`~airflow_kafka_retry.factory.retry_dags.build_retry_dags` with the same
    arguments; a DAG file does ``globals().update(build_retry_dags_from_folder(...))``. DAG ids come from
    ``dag_id_template`` (default ``kafka_retry__{topic}``), so the topologies of a folder need distinct
    topics.

    :param folder: the folder of topology YAML files (not searched recursively).
    :param handler: the handler of every topology that handles its due records, ``package.module:function``;
        not given to an ``on_due: redeliver`` topology (none runs there). A folder of only such topologies
        needs none; a topology that handles, in a folder built without one, is a file that cannot be built.
    :param strict: False (default): a file that cannot be built (bad YAML, a DAG id already built from
        another file) is logged at ERROR, naming the file and the problem, and skipped; the other
        topologies' DAGs are built. True: it raises ``TopologyFolderError`` naming the file, an import
        error of the DAG file (so no DAG of the folder is built).
    :param tier_overrides: as in ``build_retry_dags``, keyed by topic; each topology gets the entries of
        its own topics. A key matching no topology of the folder is an error (not checked with ``shard``:
        a key may name a topic of another shard).
    :param shard: ``(index, count)``: build only the topologies whose file name falls in shard ``index``
        of ``count`` (``0 <= index < count``; a stable hash of the name, so adding a file moves no other
        topology). ``count`` DAG files, one per index, build the whole folder: each one's DB write then
        locks only its own DAGs (see the module's docstring). Default: every topology.
    :param kwargs: every other argument of ``build_retry_dags`` (``engine``, ``kafka_conn_id``,
        ``conn_ids``, ``dag_id_template``, ``trigger``, ``default_args``...). ``conn_ids`` (a connection
        per role) is checked first: a wrong role is an error of the DAG file, not a skipped topology.
    """
    if shard is not None:
        _check_shard(shard)
    role_connections(kwargs.get("kafka_conn_id", "kafka_default"), kwargs.get("conn_ids"))
    root = Path(folder)
    if not root.is_dir():
        raise TopologyFolderError(f"{root}: not a folder (of topology YAML files)")
    files = sorted({p for pattern in PATTERNS for p in root.glob(pattern) if p.is_file()})
    if shard is not None:
        files = [p for p in files if in_shard(p.name, shard)]
    if not files:
        log.warning("%s: no topology file (%s); no DAG built", root, ", ".join(PATTERNS))
    overrides = dict(tier_overrides or {})
    used: set[str] = set()
    dags: dict[str, DAG] = {}
    built_from: dict[str, Path] = {}
    wanted = _parsing_dag_id()
    if wanted is not None:
        files = _likely_first(files, wanted, kwargs)
    for path in files:
        if wanted is not None and wanted not in _dag_ids(path, kwargs):
            continue  # a task process of another topology's DAG
        try:
            topology = load_topology(path)  # once: every step below takes the loaded topology
            own = _own_overrides(topology, overrides)
            built = build_retry_dags(
                topology, handler=_handler_of(topology, handler), tier_overrides=own or None, **kwargs
            )
            for dag_id in built:
                if dag_id in dags:
                    raise ValueError(
                        f"DAG id {dag_id!r} is also built from {built_from[dag_id].name}: the topologies of "
                        "one folder need distinct topics (or a dag_id_template that tells them apart)"
                    )
        except Exception as exc:
            if strict:
                raise TopologyFolderError(f"{path}: {exc}") from exc
            log.error("%s: skipped, none of its DAGs is built: %s: %s", path, type(exc).__name__, exc)
            continue
        used.update(own)
        dags.update(built)
        built_from.update(dict.fromkeys(built, path))
        if wanted is not None and wanted in built:
            break  # a task process: its DAG's topology is built, the other files are not loaded
    unknown = sorted(set(overrides) - used)
    if unknown and wanted is None and shard is None and (strict or not _any_skipped(files, built_from)):
        raise TopologyFolderError(
            f"{root}: tier_overrides name {', '.join(unknown)}, a topic of no topology in this folder"
        )
    return dags


def in_shard(name: str, shard: tuple[int, int]) -> bool:
    """
    Whether the topology file ``name`` belongs to shard ``(index, count)``: SHA-256 of the name.

    Not CRC-32: it is affine in the input bits, so names that differ in a few digits (``cap000.yaml``,
    ``cap001.yaml``...) fell into half of 40 shards.
    """
    index, count = _check_shard(shard)
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big") % count == index


def _check_shard(shard: Any) -> tuple[int, int]:
    ok = isinstance(shard, tuple) and len(shard) == 2
    ok = (
        ok and all(isinstance(v, int) and not isinstance(v, bool) for v in shard) and 0 <= shard[0] < shard[1]
    )
    if not ok:
        raise TopologyFolderError(
            f"shard must be a tuple (index, count) of integers with 0 <= index < count, got {shard!r}"
        )
    return shard


def _parsing_dag_id() -> str | None:
    """The DAG a task process parses this file for (Airflow's parsing context), else None."""
    from airflow.sdk import get_parsing_context

    return get_parsing_context().dag_id


def _likely_first(files: list[Path], wanted: str, kwargs: Mapping[str, Any]) -> list[Path]:
    """
    ``files``, those whose text names the topic in the DAG id ``wanted`` first (a task process's search).

    Loading every topology of a folder of 1,000 to find one DAG took a task process 0.15 s before its task
    began. The text test is only an order: a topic written otherwise (quoted with escapes) is found later.
    """
    template = str(kwargs.get("dag_id_template", DEFAULT_DAG_ID_TEMPLATE))
    dag_id = wanted.removesuffix(SETUP_SUFFIX)
    prefix, found, suffix = template.partition("{topic}")
    if not found or "{" in prefix + suffix or not (dag_id.startswith(prefix) and dag_id.endswith(suffix)):
        return files
    topic = dag_id[len(prefix) : len(dag_id) - len(suffix)]
    if not topic:
        return files

    def names_it(path: Path) -> bool:
        try:
            return topic in path.read_text(errors="replace")
        except OSError:
            return False  # loaded in its turn, where its error is reported

    return sorted(files, key=lambda p: not names_it(p))  # stable: the folder's order within each part


def _dag_ids(path: Path, kwargs: Mapping[str, Any]) -> set[str]:
    """Every DAG id the topology in ``path`` may get (a file that cannot be loaded: none)."""
    from airflow_kafka_retry.policy.errors import TopologyError

    try:
        topology = load_topology(path)  # cached: the build loads it again for free
    except (TopologyError, OSError):
        return set()
    template = kwargs.get("dag_id_template", DEFAULT_DAG_ID_TEMPLATE)
    topics = [t.topic for t in (*topology.tiers, *topology.dlt_tiers)]
    return {template.format(topic=t) for t in topics} | {template.format(topic=topology.topic) + SETUP_SUFFIX}


def _handler_of(topology: Topology, handler: str | None) -> str | None:
    """The folder's handler for a topology that handles its due records; None under ``on_due: redeliver``."""
    return None if topology.on_due == "redeliver" else handler


def _own_overrides(topology: Topology, overrides: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """The entries of ``overrides`` whose key is a topic of ``topology``."""
    if not overrides:
        return {}
    topics = {t.topic for t in (*topology.tiers, *topology.dlt_tiers)}
    return {topic: value for topic, value in overrides.items() if topic in topics}


def _any_skipped(files: list[Path], built_from: Mapping[str, Path]) -> bool:
    """A file was skipped (an override may name one of its topics, so unknown keys are not an error)."""
    return len(set(built_from.values())) < len(files)

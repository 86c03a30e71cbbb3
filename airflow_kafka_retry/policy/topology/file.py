"""
Reading a retry topology from a YAML file (or an fsspec URL) into a validated model.

:func:`load_topology` caches a file's topology in the process until the file changes;
:func:`load_topology_from` also reads one from an fsspec URL (a Spark deployment's topology). The mapping
is parsed as :meth:`Topology.from_mapping <airflow_kafka_retry.policy.topology.model.Topology.from_mapping>`
parses any (:mod:`.topology.mapping`): every problem named with the file and field.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from airflow_kafka_retry.policy.errors import TopologyError
from airflow_kafka_retry.policy.topology.model import Topology

#: Validated topologies by file path: (modification time, content hash, topology). A DAG file, its task
#: and the task's OpenLineage and metrics code each load the same file; only a changed file is parsed again.
_LOADED: dict[str, tuple[int, str, Topology]] = {}


def load_topology(path: str | Path) -> Topology:
    """
    Load and validate a topology YAML file; a TopologyError names the file, field and problem.

    The result is cached in the process, keyed by the path, the file's modification time and the hash of
    its content: loading an unchanged file again returns the same (frozen) ``Topology``.
    """
    import yaml  # local: the policy package stays importable without PyYAML for pure use

    source = str(path)
    try:
        mtime_ns = os.stat(path).st_mtime_ns
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise TopologyError(f"cannot read the file: {exc.strerror or exc}", source=source) from None
    digest = hashlib.sha256(text.encode()).hexdigest()
    cached = _LOADED.get(source)
    if cached is not None and cached[:2] == (mtime_ns, digest):
        return cached[2]
    try:
        try:  # libyaml's loader when PyYAML has it: several times faster
            data = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
        except yaml.YAMLError:
            data = yaml.safe_load(text)  # the same error, in PyYAML's own words and marks
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise TopologyError(f"not valid YAML{where}: {getattr(exc, 'problem', exc)}", source=source) from None
    if data is None:
        raise TopologyError(
            "the file is empty; a topology needs at least 'topic' and 'group_id'", source=source
        )
    topology = Topology.from_mapping(data, source=source)
    _LOADED[source] = (mtime_ns, digest, topology)
    return topology


def load_topology_from(url: str) -> Topology:
    """Load a topology from a local path (as :func:`load_topology` does) or an fsspec URL."""
    if "://" not in url:
        return load_topology(url)
    import fsspec
    import yaml

    try:
        with fsspec.open(url, "r", encoding="utf-8") as fh:
            text = fh.read()
    except OSError as exc:
        raise TopologyError(f"cannot read the file: {exc.strerror or exc}", source=url) from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise TopologyError(f"not valid YAML: {getattr(exc, 'problem', exc)}", source=url) from None
    if data is None:
        raise TopologyError("the file is empty; a topology needs at least 'topic' and 'group_id'", source=url)
    return Topology.from_mapping(data, source=url)

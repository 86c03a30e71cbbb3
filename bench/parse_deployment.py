"""
The deployments ``bench/parse_cost.py`` parses: topology YAMLs and the DAG files over them.

Each layout (a DAG file per topology, one folder DAG file, the folder in shard files) comes with two sets of
DAG file arguments, side by side:

* ``plain``: only the handler, as ``docs/capacity.md``'s earlier runs had it;
* ``readme``: the arguments README.md's DAG file passes (``dags/example_retry_tiers.py``): a value
  deserializer, two DLT notifiers (``DltLogNotifier`` and Airflow's ``SmtpNotifier``, a ``BaseNotifier``
  as ``SlackNotifier`` is), ``asset_server``, ``default_args`` with an owner, retries, a retry delay and a
  notifier as ``on_failure_callback``, and tags;
* ``on_dlt``, ``asset_server``, ``default_args``: one of those alone, to tell what each costs.
"""

from __future__ import annotations

from pathlib import Path

TOPOLOGY = """\
topic: {name}
group_id: {name}-svc
attempts: 4
backoff: {{kind: custom, delays: [30s, 60s, 120s]}}
"""
#: What README.md's DAG file imports for its arguments.
README_IMPORTS = """\
from datetime import timedelta

from airflow.providers.smtp.notifications.smtp import SmtpNotifier

from airflow_kafka_retry.notifications.dlt_log import DltLogNotifier
"""
#: README.md's DAG file arguments, one by one (keyword arguments of the call).
README_ARGUMENTS = {
    "value_deserializer": """
        value_deserializer="handlers.orders:decode",""",
    "on_dlt": """
        on_dlt=[
            DltLogNotifier(),
            SmtpNotifier(from_email="airflow@example.com", to="orders-team@example.com"),
        ],""",
    "asset_server": """
        asset_server="kafka:9092",""",
    "default_args": """
        default_args={
            "owner": "orders-team",
            "retries": 1,
            "retry_delay": timedelta(seconds=30),
            "on_failure_callback": SmtpNotifier(from_email="airflow@example.com", to="oncall@example.com"),
        },""",
    "tags": """
        tags=["orders"],""",
}
#: The argument sets: (imports, keyword arguments) a DAG file adds to its call. ``plain``: none; ``readme``:
#: all of README.md's; ``on_dlt``, ``asset_server``, ``default_args``: that one alone (what each costs).
ARGUMENTS: dict[str, tuple[str, str]] = {
    "plain": ("", ""),
    "readme": (README_IMPORTS, "".join(README_ARGUMENTS.values())),
    **{name: (README_IMPORTS, README_ARGUMENTS[name]) for name in ("on_dlt", "asset_server", "default_args")},
}
DAG_FILE = """\
{imports}from airflow_kafka_retry import build_retry_dags

globals().update(
    build_retry_dags(
        {topology!r},
        handler="handlers.orders:handle",
        dag_id_template="{prefix}__{{topic}}",{arguments}
    )
)
"""
FOLDER_DAG_FILE = """\
{imports}from airflow_kafka_retry import build_retry_dags_from_folder

globals().update(
    build_retry_dags_from_folder(
        {folder!r},
        handler="handlers.orders:handle",{shard}{arguments}
    )
)
"""


def write_topologies(home: Path, count: int) -> Path:
    """``count`` topology YAMLs (event mode, 3 retry tiers each) in ``home/topologies``."""
    topologies = home / "topologies"
    topologies.mkdir(parents=True)
    for i in range(count):
        name = f"t{i:03d}"
        (topologies / f"{name}.yaml").write_text(TOPOLOGY.format(name=name))
    return topologies


def write_per_file(home: Path, topologies: Path, arguments: str) -> Path:
    """A DAG file per topology YAML, calling ``build_retry_dags`` with the argument set ``arguments``."""
    imports, extra = ARGUMENTS[arguments]
    folder = home / f"{arguments}_per_file"
    folder.mkdir()
    for yaml in sorted(topologies.glob("*.yaml")):
        (folder / f"{yaml.stem}.py").write_text(
            DAG_FILE.format(
                imports=imports + "\n" if imports else "",
                topology=str(yaml),
                prefix=yaml.stem,
                arguments=extra,
            )
        )
    return folder


def write_folder(home: Path, topologies: Path, arguments: str, shards: int = 0) -> Path:
    """One folder DAG file (``shards=0``) or ``shards`` files each building its shard ``(i, shards)``."""
    imports, extra = ARGUMENTS[arguments]
    folder = home / (f"{arguments}_shards_{shards}" if shards else f"{arguments}_folder")
    folder.mkdir()
    for index in range(shards or 1):
        name = f"retry_topologies_{index:02d}.py" if shards else "retry_topologies.py"
        (folder / name).write_text(
            FOLDER_DAG_FILE.format(
                imports=imports + "\n" if imports else "",
                folder=str(topologies),
                shard=f"\n        shard=({index}, {shards})," if shards else "",
                arguments=extra,
            )
        )
    return folder

"""
docs/options.md lists every option a user can set, and nothing else: read against the code itself.

Each section of the page is keyed by the first backticked word of its heading (``build_retry_dags``, a
class name, ``airflow-kafka-retry drain``, ``[kafka_retry]``...); its options are the backticked words of
the first cell of its table rows. Here each key is paired with what the code has under it: the
signatures of the factory and of every operator, sensor, trigger and notifier the package defines, the
drain options' and header policy's fields, the topology file's keys (as its loader names them in its
unknown-key error), the ``[kafka_retry]`` options, every parser of the CLI, and the environment variables
the package and the test suite's launchers (testkit/) read. A failure names the section and the option to
add or to remove.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import importlib
import inspect
import pkgutil
import re
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import airflow_kafka_retry

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "options.md"
PACKAGE = Path(airflow_kafka_retry.__file__).parent
#: Where the environment variables listed are read: the package, and the test suite's launchers (testkit/).
ENV_READERS = (PACKAGE, REPO / "testkit")

#: Where the classes users may construct live; every public subclass of Airflow's bases there counts.
SURFACES = ("operators", "sensors", "triggers", "notifications")
#: Read by the package but not its options: the process's search paths, and Airflow's own settings
#: (the ``[kafka_retry]`` ones are listed as options of that section).
NOT_OPTIONS = {"PATH", "PYTHONPATH"}
_ENV_READ = re.compile(
    r'\benviron\.get\(\s*"(?P<a>[A-Z][A-Z0-9_]*)"'
    r'|\bgetenv\(\s*"(?P<b>[A-Z][A-Z0-9_]*)"'
    r'|\benviron\[\s*"(?P<c>[A-Z][A-Z0-9_]*)"\s*\](?!\s*=[^=])'
    r'|^[A-Z_]*_ENV\s*=\s*"(?P<d>[A-Z][A-Z0-9_]*)"',
    re.MULTILINE,
)


def documented(text: str) -> dict[str, set[str]]:
    """Section key -> the options its table rows name."""
    sections: dict[str, set[str]] = {}
    current: set[str] | None = None
    for line in text.splitlines():
        if line.startswith("#"):
            key = re.search(r"`([^`]+)`", line)
            current = sections.setdefault(key.group(1), set()) if key else None
        elif current is not None and line.startswith("| `"):
            current.update(re.findall(r"`([^`]+)`", line.split("|")[1]))
    return sections


def _parameters(function: Callable[..., object]) -> list[inspect.Parameter]:
    return [
        p
        for p in inspect.signature(function).parameters.values()
        if p.name != "self" and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)
    ]


def _given_to_super(cls: type) -> set[str]:
    """The keywords ``cls.__init__`` passes to ``super().__init__`` itself (not the caller's to set)."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls.__init__)))  # type: ignore[misc]
    return {
        keyword.arg
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "__init__"
        and isinstance(node.func.value, ast.Call)
        and getattr(node.func.value.func, "id", None) == "super"
        for keyword in node.keywords
        if keyword.arg is not None
    }


def constructor_options(cls: type) -> set[str]:
    """
    What a user may pass to ``cls``: its ``__init__``'s named parameters and, while that takes ``**kwargs``
    on to a base class of this package, the base's, less those the class passes itself.
    """
    options: set[str] = set()
    taken: set[str] = set()
    for klass in cls.__mro__:
        if "__init__" not in vars(klass):
            continue
        if not klass.__module__.startswith("airflow_kafka_retry."):
            break  # Airflow's BaseOperator / BaseTrigger arguments are Airflow's
        options |= {p.name for p in _parameters(klass.__init__)} - taken  # type: ignore[misc]
        taken |= _given_to_super(klass)
        if not any(p.kind is p.VAR_KEYWORD for p in inspect.signature(klass.__init__).parameters.values()):  # type: ignore[misc]
            break
    return options


def surface_classes() -> Iterator[type]:
    from airflow.models import BaseOperator
    from airflow.sdk.bases.notifier import BaseNotifier
    from airflow.triggers.base import BaseTrigger

    for surface in SURFACES:
        package = importlib.import_module(f"airflow_kafka_retry.{surface}")
        for info in pkgutil.iter_modules(package.__path__):
            module = importlib.import_module(f"{package.__name__}.{info.name}")
            for name, value in vars(module).items():
                if (
                    inspect.isclass(value)
                    and value.__module__ == module.__name__
                    and not name.startswith("_")
                    and issubclass(value, (BaseOperator, BaseTrigger, BaseNotifier))
                ):
                    yield value


def cli_options() -> dict[str, set[str]]:
    """``airflow-kafka-retry [command...]`` -> its options (the longest spelling) and positionals."""
    from airflow_kafka_retry.cli import build_parser

    found: dict[str, set[str]] = {}

    def walk(parser: argparse.ArgumentParser, path: str) -> None:
        names = found.setdefault(path, set())
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for command, child in action.choices.items():
                    walk(child, f"{path} {command}")
            elif not isinstance(action, argparse._HelpAction):
                names.add(max(action.option_strings, key=len) if action.option_strings else action.dest)

    walk(build_parser(), "airflow-kafka-retry")
    return {path: names for path, names in found.items() if names}


def topology_keys() -> set[str]:
    """The topology file's keys, as the loader lists them for a key it does not know."""
    from airflow_kafka_retry.policy.errors import TopologyError
    from airflow_kafka_retry.policy.topology.mapping import topology_arguments

    _, errors = topology_arguments({"topic": "t", "group_id": "g", "zzzz_not_a_key": 1}, source="probe")
    [message] = [str(e) for e in errors if isinstance(e, TopologyError) and "zzzz_not_a_key" in str(e)]
    return set(re.search(r"known keys: ([^;\n]+)", message).group(1).rstrip(". ").split(", "))  # type: ignore[union-attr]


def environment_variables() -> set[str]:
    names: set[str] = set()
    for path in (p for root in ENV_READERS for p in root.rglob("*.py")):
        for match in _ENV_READ.finditer(path.read_text()):
            names.add(next(v for v in match.groupdict().values() if v))
    return {n for n in names - NOT_OPTIONS if not n.startswith("AIRFLOW__")}


def read_elsewhere(section: str, option: str) -> bool:
    """An environment variable read by a name held in a variable (``PYSPARK_PYTHON``)."""
    readers = (p for root in ENV_READERS for p in root.rglob("*.py"))
    return section == "os.environ" and any(f'"{option}"' in p.read_text() for p in readers)


def expected() -> dict[str, set[str]]:
    from airflow_kafka_retry.engine.drain.options import DrainOptions
    from airflow_kafka_retry.factory.replay_dag import build_dlt_replay_dag
    from airflow_kafka_retry.factory.retry_dags import build_retry_dags
    from airflow_kafka_retry.plugin.settings import OPTIONS
    from airflow_kafka_retry.policy.headers.header_policy import HeaderPolicy

    sections = {
        "build_retry_dags": {p.name for p in _parameters(build_retry_dags)},
        "build_dlt_replay_dag": {p.name for p in _parameters(build_dlt_replay_dag)},
        "DrainOptions": {f.name for f in dataclasses.fields(DrainOptions)},
        "topology.yaml": topology_keys(),
        "headers:": {f.name for f in dataclasses.fields(HeaderPolicy)},
        "[kafka_retry]": set(OPTIONS),
        "os.environ": environment_variables(),
        **{cls.__name__: constructor_options(cls) for cls in surface_classes()},
        **cli_options(),
    }
    return sections


def test_every_option_is_on_the_options_page_and_every_listed_one_exists() -> None:
    page = documented(PAGE.read_text())
    problems = []
    for section, options in sorted(expected().items()):
        if section not in page:
            problems.append(f"docs/options.md has no section for {section!r} (options: {sorted(options)})")
            continue
        if missing := options - page[section]:
            problems.append(f"docs/options.md, {section}: missing {sorted(missing)}")
        if stale := {o for o in page[section] - options if not read_elsewhere(section, o)}:
            problems.append(
                f"docs/options.md, {section}: lists {sorted(stale)}, which {section} no longer has"
            )
    assert not problems, "\n".join(problems)


def test_the_page_is_in_the_docs_table_of_contents() -> None:
    assert re.search(r"^options$", (REPO / "docs" / "index.md").read_text(), re.MULTILINE)

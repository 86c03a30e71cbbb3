"""CPU seconds per test file: what a file costs a loaded machine, whatever the machine's load.

A file's wall time grows with the load beside it (CI's 2 cores run three workers); its CPU time barely
does, so it is the measure for deciding what the suite can afford. Each worker adds up, per file, the CPU
its own process and every child process it waited for used while the file's tests ran (a fixture's
process counts once it is stopped and reaped, so a module's broker or Airflow stack lands on its file).
Processes the controller started (the suite's shared broker) are not counted.

The controller writes ``.artifacts/cpu-<UTC time>.json`` next to the run's JUnit XML (files, most
expensive first) and lists the 15 most expensive files at the end of the run.
"""

from __future__ import annotations

import json
import resource
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

_SECONDS_KEY = pytest.StashKey[Counter[str]]()
_MERGED_KEY = pytest.StashKey[Counter[str]]()
TOP = 15


def _cpu_now() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    began = _cpu_now()
    yield
    seconds = item.config.stash.setdefault(_SECONDS_KEY, Counter())
    seconds[item.nodeid.split("::", 1)[0]] += _cpu_now() - began


def pytest_sessionfinish(session: pytest.Session) -> None:
    config = session.config
    seconds = config.stash.get(_SECONDS_KEY, Counter())
    workeroutput = getattr(config, "workeroutput", None)
    if workeroutput is not None:  # a pytest-xdist worker: the controller writes the record
        workeroutput["cpu_seconds"] = json.dumps(dict(seconds))
        return
    merged = config.stash.setdefault(_MERGED_KEY, Counter())
    merged.update(seconds)
    _write(config, merged)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object) -> None:
    raw = getattr(node, "workeroutput", {}).get("cpu_seconds")
    if raw:
        node.config.stash.setdefault(_MERGED_KEY, Counter()).update(json.loads(raw))


def _write(config: pytest.Config, seconds: Counter[str]) -> None:
    junit = config.getoption("xmlpath", None)
    if not junit or not seconds:
        return
    path = Path(str(junit)).with_name(Path(str(junit)).name.replace("junit-", "cpu-")).with_suffix(".json")
    ranked = {f: round(s, 1) for f, s in seconds.most_common()}
    path.write_text(json.dumps(ranked, indent=1) + "\n")


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    seconds = config.stash.get(_MERGED_KEY, None)
    if not seconds:
        return
    terminalreporter.section(f"cpu seconds per file (the {TOP} most; {sum(seconds.values()):.0f} s in all)")
    for path, s in seconds.most_common(TOP):
        terminalreporter.write_line(f"{s:8.1f}  {path}")

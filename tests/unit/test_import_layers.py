"""The import graph of the package, testkit/ and bench/: no circle, and no import back up a layer (issue 49).

The package never imports the unshipped ``testkit/`` (the wheel lacks it), and ``tests/`` never imports
``bench/``: what both use lives in ``testkit/``.

Every import counts, ``if TYPE_CHECKING`` ones and those inside functions included: an arrow is an arrow
to whoever reads or moves the code. Parsed with ``ast``, nothing is imported.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
ROOTS = ("airflow_kafka_retry", "testkit", "bench")
#: The engine's sub-packages, lowest first: each may import only those of a lower rank (scans and heads
#: share a rank, so neither imports the other).
ENGINE_LAYERS = {"kafka": 0, "logs": 1, "scans": 2, "heads": 2, "drain": 3, "local": 4}
ENGINE = "airflow_kafka_retry.engine"
#: The policy package's sub-packages and root modules, lowest first, ranked as the engine's are: the leaf
#: modules import nothing of the package, timing and headers only those, topology all of them but routing.
POLICY_LAYERS = {
    "errors": 0,
    "classify": 0,
    "client_names": 0,
    "timing": 1,
    "headers": 1,
    "ordering": 1,
    "dead_letters": 2,
    "redrive": 2,
    "topology": 3,
    "routing": 4,
}
POLICY = "airflow_kafka_retry.policy"
RANKS = {ENGINE: ENGINE_LAYERS, POLICY: POLICY_LAYERS}
#: The bottom of the house: what each of these packages may import of the package (itself aside).
BELOW = {
    "airflow_kafka_retry.policy": ("airflow_kafka_retry.errors",),
    ENGINE: ("airflow_kafka_retry.errors", "airflow_kafka_retry.policy"),
}


def module_files(root: Path) -> dict[str, Path]:
    """Every module under ``root`` (a package directory), by dotted name."""
    modules = {}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules[".".join(parts)] = path
    return modules


def imports_of(name: str, path: Path, known: Mapping[str, Path]) -> Iterator[tuple[str, int]]:
    """The known modules ``name`` imports, with the line (``from pkg import module``: the module)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in known:
                    yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                full = f"{base}.{alias.name}"
                if full in known:
                    yield full, node.lineno
                elif base in known:
                    yield base, node.lineno


def imports_of_package(root: Path, package: str) -> list[str]:
    """``file:line: module`` for each import of ``package`` (or a module of it) by a file under ``root``."""
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                if name == package or name.startswith(package + "."):
                    found.append(f"{path.relative_to(root.parent)}:{node.lineno}: {name}")
    return found


def import_graph(modules: Mapping[str, Path]) -> dict[str, dict[str, int]]:
    graph: dict[str, dict[str, int]] = {}
    for name, path in modules.items():
        edges = graph.setdefault(name, {})
        for target, line in imports_of(name, path, modules):
            if target != name:
                edges.setdefault(target, line)
    return graph


def circles(graph: Mapping[str, Mapping[str, int]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def sub_package(module: str, package: str = ENGINE) -> str | None:
    """The sub-package (or root module) of ``package`` that ``module`` is in, None outside ``package``."""
    if not module.startswith(package + "."):
        return None
    return module.removeprefix(package + ".").split(".")[0]


def upward_imports(
    graph: Mapping[str, Mapping[str, int]],
    modules: Mapping[str, Path],
    root: Path = REPO,
    package: str = ENGINE,
) -> list[str]:
    """``file:line: a -> b`` for each import in ``package`` into a sub-package of its rank or above."""
    ranks = RANKS[package]
    found = []
    for source, targets in graph.items():
        mine = sub_package(source, package)
        if mine is None:
            continue
        for target, line in targets.items():
            theirs = sub_package(target, package)
            if theirs is None or theirs == mine or theirs not in ranks or mine not in ranks:
                continue  # an unranked module is named by the test that every module is ranked
            if ranks[theirs] >= ranks[mine]:
                where = modules[source].relative_to(root)
                found.append(f"{where}:{line}: {source} ({mine}) imports {target} ({theirs})")
    return sorted(found)


def imports_from_above(graph: Mapping[str, Mapping[str, int]]) -> list[str]:
    """``a -> b`` for each import by a :data:`BELOW` package of a module of the package outside its list."""
    found = []
    for source, targets in graph.items():
        for package, allowed in BELOW.items():
            if source != package and not source.startswith(package + "."):
                continue
            for target in targets:
                inside = target == package or target.startswith(package + ".")
                ours = target.split(".")[0] == "airflow_kafka_retry"
                if (
                    ours
                    and not inside
                    and not any(target == a or target.startswith(a + ".") for a in allowed)
                ):
                    found.append(f"{source} -> {target}")
    return sorted(found)


@pytest.fixture(scope="module")
def modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for root in ROOTS:
        found.update(module_files(REPO / root))
    return found


def test_no_module_imports_itself_back_through_others(modules):
    assert circles(import_graph(modules)) == []


def test_policy_and_engine_import_nothing_above_them(modules):
    assert imports_from_above(import_graph(modules)) == []


def test_every_engine_module_lives_in_a_ranked_sub_package(modules):
    loose = [m for m in modules if m.startswith(ENGINE + ".") and sub_package(m) not in ENGINE_LAYERS]
    assert loose == []


def test_no_engine_sub_package_imports_one_of_its_rank_or_above(modules):
    assert upward_imports(import_graph(modules), modules) == []


def test_tests_never_import_bench():
    assert imports_of_package(REPO / "tests", "bench") == []


def test_the_package_never_imports_testkit():
    assert imports_of_package(REPO / "airflow_kafka_retry", "testkit") == []


def test_the_check_sees_an_import_of_a_package_anywhere_in_a_file(tmp_path):
    (tmp_path / "tests" / "unit").mkdir(parents=True)
    (tmp_path / "tests" / "unit" / "test_x.py").write_text(
        "import benchmark\nimport os, bench.report\n\n\ndef test():\n    from bench import results_file\n"
    )
    assert imports_of_package(tmp_path / "tests", "bench") == [
        "tests/unit/test_x.py:2: bench.report",
        "tests/unit/test_x.py:6: bench",
    ]


def test_every_policy_module_lives_in_a_ranked_sub_package_or_is_a_ranked_leaf(modules):
    loose = [m for m in modules if sub_package(m, POLICY) not in (None, *POLICY_LAYERS)]
    assert loose == []


def test_no_policy_sub_package_imports_one_of_its_rank_or_above(modules):
    assert upward_imports(import_graph(modules), modules, package=POLICY) == []


def test_the_checks_see_a_circle_and_an_upward_import(tmp_path):
    """The tool itself: a two-module circle and a kafka -> drain import are found, with file and line."""
    package = tmp_path / "airflow_kafka_retry"
    for sub in ("engine/kafka", "engine/drain"):
        (package / sub).mkdir(parents=True)
        (package / sub / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "engine" / "__init__.py").write_text("")
    typed_only = "if TYPE_CHECKING:\n    from airflow_kafka_retry.engine.drain import job\n"
    (package / "engine" / "kafka" / "clients.py").write_text(
        "from typing import TYPE_CHECKING\n" + typed_only
    )
    (package / "engine" / "drain" / "job.py").write_text("from ..kafka import clients\n")
    (package / "policy").mkdir()
    (package / "policy" / "__init__.py").write_text("")
    (package / "policy" / "naming.py").write_text("import airflow_kafka_retry.engine.kafka.clients\n")
    found = module_files(package)
    graph = import_graph(found)
    assert circles(graph) == [[f"{ENGINE}.drain.job", f"{ENGINE}.kafka.clients"]]
    where = "airflow_kafka_retry/engine/kafka/clients.py:3"
    assert upward_imports(graph, found, tmp_path) == [
        f"{where}: {ENGINE}.kafka.clients (kafka) imports {ENGINE}.drain.job (drain)"
    ]
    assert imports_from_above(graph) == [f"airflow_kafka_retry.policy.naming -> {ENGINE}.kafka.clients"]


def test_the_checks_see_a_policy_import_up_a_rank(tmp_path):
    """headers -> topology (a rank up) and headers -> timing (its rank) are found; topology -> headers not."""
    package = tmp_path / "airflow_kafka_retry"
    policy = package / "policy"
    for sub in ("headers", "topology", "timing"):
        (policy / sub).mkdir(parents=True)
        (policy / sub / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (policy / "__init__.py").write_text("")
    (policy / "headers" / "codec.py").write_text(
        "from airflow_kafka_retry.policy.topology import model\nfrom ..timing import waves\n"
    )
    (policy / "topology" / "model.py").write_text("from airflow_kafka_retry.policy.headers import codec\n")
    (policy / "timing" / "waves.py").write_text("")
    (policy / "stray.py").write_text("")
    found = module_files(package)
    where = "airflow_kafka_retry/policy/headers/codec.py"
    assert upward_imports(import_graph(found), found, tmp_path, POLICY) == [
        f"{where}:1: {POLICY}.headers.codec (headers) imports {POLICY}.topology.model (topology)",
        f"{where}:2: {POLICY}.headers.codec (headers) imports {POLICY}.timing.waves (timing)",
    ]
    assert [m for m in found if sub_package(m, POLICY) not in (None, *POLICY_LAYERS)] == [f"{POLICY}.stray"]

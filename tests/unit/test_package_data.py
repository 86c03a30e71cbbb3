"""Every non-Python file under ``airflow_kafka_retry/`` is package data: the wheel carries it.

The patterns are read from pyproject.toml's ``[tool.setuptools.package-data]`` and expanded as setuptools
does (a glob relative to the package's folder); the wheel itself is built and run by scripts/check-wheel.
"""

from __future__ import annotations

import glob
import tomllib
from pathlib import Path

REPO = Path(__file__).parents[2]
PACKAGE = REPO / "airflow_kafka_retry"


def _data_files() -> list[Path]:
    return sorted(
        path
        for path in PACKAGE.rglob("*")
        if path.is_file() and path.suffix not in (".py", ".pyc") and "__pycache__" not in path.parts
    )


def _covered() -> set[Path]:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    package_data: dict[str, list[str]] = config["tool"]["setuptools"]["package-data"]
    covered: set[Path] = set()
    for package, patterns in package_data.items():
        folders = (
            [p.parent for p in PACKAGE.rglob("__init__.py")]
            if package in ("", "*")
            else [REPO.joinpath(*package.split("."))]
        )
        for folder in folders:
            for pattern in patterns:
                covered |= {Path(p) for p in glob.glob(str(folder / pattern), recursive=True)}
    return covered


def test_the_package_has_data_files():
    names = {p.name for p in _data_files()}
    assert {"pom.xml", "index.html"} <= names, names


def test_every_non_python_file_of_the_package_is_package_data():
    covered = _covered()
    missing = [str(p.relative_to(REPO)) for p in _data_files() if p not in covered]
    assert not missing, (
        f"not package data (add a pattern to [tool.setuptools.package-data] in pyproject.toml): {missing}"
    )


def test_every_package_data_key_is_a_package():
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    for package in config["tool"]["setuptools"]["package-data"]:
        if package not in ("", "*"):
            assert (REPO.joinpath(*package.split(".")) / "__init__.py").is_file(), package

"""
The ``--py-files`` zip: this package plus the user's handler and deserializer code.

Executors then need nothing of ours pre-installed (only the third-party libraries the code
imports, e.g. ``confluent-kafka``). The user's code is found on the submitting side with
:func:`importlib.util.find_spec`; its whole top-level package (or single module) is shipped.
Standard-library modules are skipped (every Python has them), and so are compiled extension
modules, which Python cannot import from a zip -- those must be installed on the executors.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import sysconfig
import zipfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from airflow_kafka_retry.engine.kafka.loading import UserCodeError

if TYPE_CHECKING:
    from airflow_kafka_retry.engine.drain.options import DrainOptions

log = logging.getLogger(__name__)

PACKAGE = "airflow_kafka_retry"
_EXTENSION_SUFFIXES = (".so", ".pyd", ".dylib")
_SKIPPED_DIRS = ("__pycache__",)


def user_modules(options: DrainOptions) -> list[str]:
    """Module names of the handler and deserializers (``pkg.mod`` of ``pkg.mod:func``), in order, unique."""
    names: list[str] = []
    for path in (options.handler, options.value_deserializer, options.key_deserializer):
        if path:
            module = path.partition(":")[0]
            if module and module not in names:
                names.append(module)
    return names


def _stdlib_dirs() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    return tuple(os.path.realpath(paths[k]) for k in ("stdlib", "platstdlib") if k in paths)


def _is_stdlib(origin: str) -> bool:
    real = os.path.realpath(origin)
    return any(real.startswith(d + os.sep) and "site-packages" not in real[len(d) :] for d in _stdlib_dirs())


def top_level_sources(module: str) -> list[tuple[str, Path]]:
    """
    ``(name in the zip, path on disk)`` of ``module``'s top-level package or module.

    Empty for built-in and standard-library modules.

    :raises UserCodeError: the module cannot be found, or is a compiled extension.
    """
    top = module.split(".")[0]
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError) as exc:
        raise UserCodeError(f"cannot locate module {top!r} to ship it to the executors: {exc}") from exc
    if spec is None:
        raise UserCodeError(
            f"cannot locate module {top!r} (of {module!r}) to ship it to the executors; "
            "is it importable where the run is submitted?"
        )
    if spec.origin in (None, "built-in", "frozen") and not spec.submodule_search_locations:
        return []
    if spec.submodule_search_locations:  # a package (possibly a namespace package over several folders)
        locations = [Path(p) for p in spec.submodule_search_locations]
        if spec.origin and spec.origin not in ("namespace",) and _is_stdlib(spec.origin):
            return []
        return [(top, location) for location in locations]
    origin = str(spec.origin)
    if _is_stdlib(origin):
        return []
    if origin.endswith(_EXTENSION_SUFFIXES) or not origin.endswith(".py"):
        raise UserCodeError(
            f"module {top!r} is a compiled extension ({origin}); it cannot be shipped in a zip "
            "and must be installed on the Spark executors"
        )
    return [(f"{top}.py", Path(origin))]


def _package_files(name: str, root: Path) -> Iterator[tuple[str, Path]]:
    if root.is_file():
        yield name, root
        return
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in _SKIPPED_DIRS and not d.startswith("."))
        for filename in sorted(files):
            if filename.endswith((".pyc", ".pyo")) or filename.startswith("."):
                continue
            path = Path(folder) / filename
            if filename.endswith(_EXTENSION_SUFFIXES):
                log.warning(
                    "%s: compiled extension %s is not shipped (zip imports cannot load it); install "
                    "it on the executors",
                    name,
                    path,
                )
                continue
            yield f"{name}/{path.relative_to(root).as_posix()}", path


def build_py_files(destination: str | os.PathLike[str], modules: Iterable[str] = ()) -> list[str]:
    """
    Write the zip for ``--py-files``: this package and the top-level packages of ``modules``.

    :param destination: the zip file to create.
    :param modules: dotted module names of user code (handler, deserializers).
    :returns: the top-level names that went into the zip.
    """
    sources: list[tuple[str, Path]] = []
    for module in (PACKAGE, *modules):
        for name, path in top_level_sources(module):
            if (name, path) not in sources:
                sources.append((name, path))
    written: set[str] = set()
    shipped: list[str] = []
    with zipfile.ZipFile(destination, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for name, root in sources:
            for arcname, path in _package_files(name, root):
                if arcname in written:
                    continue
                zf.write(path, arcname)
                written.add(arcname)
            top = name.removesuffix(".py")
            if top not in shipped:
                shipped.append(top)
    log.info("py-files %s: %s (%s files)", destination, ", ".join(shipped), len(written))
    return shipped


def build_for_options(destination: str | os.PathLike[str], options: DrainOptions) -> list[str]:
    """:func:`build_py_files` for the user code named by ``options``."""
    return build_py_files(destination, user_modules(options))

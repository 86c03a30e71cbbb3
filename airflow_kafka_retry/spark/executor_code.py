"""
The user's code on a Spark executor: import it first, and say how to ship what is missing.

On a cluster, executors run in other JVMs, often on other machines, with the Python their worker
was given. What reaches them is what the submission shipped (``--py-files``: this package and the
top-level packages of the handler and deserializers, see :mod:`~airflow_kafka_retry.spark.pyfiles`)
and what is installed there; the driver's ``sys.path`` and environment do not. A module the handler
imports that is neither fails on the executor, which without this check the run's summary reported
as the engine's ``UserCodeError`` with no word on where it failed or what to do.

:func:`import_user_code` imports the handler and deserializers on the executor before any record is
read, and turns a missing module into an error naming the module, the executor's host and Python,
what the submission shipped, and the two ways to get the module there.
"""

from __future__ import annotations

import socket
import sys
from typing import TYPE_CHECKING

from airflow_kafka_retry.engine.kafka.loading import UserCodeError, load_callable
from airflow_kafka_retry.spark.pyfiles import PACKAGE, user_modules

if TYPE_CHECKING:
    from airflow_kafka_retry.engine.drain.options import DrainOptions


class ExecutorImportError(UserCodeError):
    """The user's code cannot be imported on a Spark executor; the message names the module and the fix."""


def _missing_module(exc: BaseException) -> str | None:
    """The name of the module whose absence made ``exc`` (a ``ModuleNotFoundError`` in its causes)."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ModuleNotFoundError) and seen.name:
            return seen.name
        seen = seen.__cause__ or seen.__context__
    return None


def missing_module_message(what: str, path: str, module: str, options: DrainOptions) -> str:
    """The error for ``module`` missing on this executor while importing ``what`` (``path``)."""
    shipped = ", ".join(dict.fromkeys([PACKAGE, *(m.split(".")[0] for m in user_modules(options))]))
    return (
        f"{what} {path!r} cannot be imported on the Spark executor on {socket.gethostname()} "
        f"(Python {sys.executable}): no module named {module!r}. The submission ships {shipped} in "
        f"--py-files; ship {module.split('.')[0]!r} as well, as a zip of the package or a wheel of it "
        "(the operator's py_files=, drain's --conf spark.submit.pyFiles=), or install it into the "
        "executors' Python (a compiled extension must be installed)."
    )


def import_user_code(options: DrainOptions, *, on_executor: bool = True) -> None:
    """
    Import the handler and deserializers named by ``options`` (the driver checks them too, before any job).

    :raises ExecutorImportError: on an executor, a module they import is missing there (the message says
        how to ship it).
    :raises UserCodeError: any other failure to load them, or any failure on the driver.
    """
    for path, what in (
        (options.handler, "handler"),
        (options.value_deserializer, "value_deserializer"),
        (options.key_deserializer, "key_deserializer"),
    ):
        if not path:
            continue
        try:
            load_callable(path, what=what)
        except UserCodeError as exc:
            module = _missing_module(exc) if on_executor else None
            if module is None:
                raise
            raise ExecutorImportError(missing_module_message(what, path, module, options)) from exc

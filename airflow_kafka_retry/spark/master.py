"""
A ``spark://`` master must answer before anything is submitted to it.

A Spark standalone client that cannot reach its master retries registration three times, 20 s each, then
fails every job with ``An error occurred while calling ...collectAndServe``: a minute lost, and an error
that names neither the master nor the cause. :func:`check_master_answers` opens a TCP connection to each
address of a ``spark://`` master URL (``spark://h1:7077,h2:7077`` for a master with standby masters) and
raises :class:`SparkMasterUnreachableError`, naming the URL and what each address answered, when none
accepts within :data:`CONNECT_TIMEOUT_S`. Other masters (``local``, ``yarn``, ``k8s://``) are not checked:
their clients report an unreachable cluster themselves.
"""

from __future__ import annotations

import socket

#: how long each address of the master may take to accept a connection
CONNECT_TIMEOUT_S = 10.0
DEFAULT_PORT = 7077


class SparkMasterUnreachableError(ValueError):
    """No address of a ``spark://`` master accepted a connection; raised before anything is submitted."""


def master_addresses(master: str) -> list[tuple[str, int]]:
    """The ``(host, port)`` pairs of a ``spark://`` master URL; ``[]`` for any other master."""
    text = master.strip()
    if not text.startswith("spark://"):
        return []
    addresses = []
    for part in text[len("spark://") :].split(","):
        host, sep, port = part.strip().rstrip("/").rpartition(":")
        if not sep:
            host, port = port, str(DEFAULT_PORT)
        if not host or not port.isdigit():
            raise SparkMasterUnreachableError(f"Spark master {master!r}: {part!r} is not host:port")
        addresses.append((host.strip("[]"), int(port)))
    return addresses


def check_master_answers(master: str, timeout_s: float = CONNECT_TIMEOUT_S) -> None:
    """
    Return when an address of ``master`` accepts a TCP connection (at once for a non-``spark://`` master).

    :raises SparkMasterUnreachableError: naming the master URL and each address's error.
    """
    failures = []
    for host, port in master_addresses(master):
        try:
            with socket.create_connection((host, port), timeout=timeout_s):
                return
        except OSError as exc:
            failures.append(f"{host}:{port}: {exc.strerror or exc or type(exc).__name__}")
    if failures:
        raise SparkMasterUnreachableError(
            f"Spark master {master} does not answer ({'; '.join(failures)}, within {timeout_s:g} s each): "
            "nothing was submitted. Check that the master runs and that this machine reaches it "
            "(the Spark connection's host and port, or --master)"
        )

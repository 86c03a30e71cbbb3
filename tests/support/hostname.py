"""``[core] hostname_callable`` for tests that run two of a component on one machine: the name in
``AKR_HOSTNAME`` (so each one's job row in the metadata DB says which process it is), else the FQDN."""

from __future__ import annotations

import os
import socket


def from_env() -> str:
    return os.environ.get("AKR_HOSTNAME") or socket.getfqdn()

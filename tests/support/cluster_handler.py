"""The fault handler (``fault_handler.indexed``), with the cluster cases' fault points installed on import.

The engine imports the handler in every process that runs a partition (a thread's, a worker process, a
Spark executor), so importing :mod:`cluster_points` here puts the points wherever the chunk is routed.
"""

from __future__ import annotations

from tests.support import cluster_points  # noqa: F401 - installs the fault points
from tests.support.fault_handler import indexed

__all__ = ["indexed"]

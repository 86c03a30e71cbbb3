"""The ordering ledger's handler (``testkit/ordering_ledger.py``) with the cluster fault points installed.

As ``cluster_handler``: the engine imports the handler wherever a partition runs, so importing
:mod:`cluster_points` here stops the chunk at the point the test names (``$AKR_POINT_DIR``).
"""

from __future__ import annotations

from testkit.ordering_ledger import handle

from tests.support import cluster_points  # noqa: F401 - installs the fault points

__all__ = ["handle"]

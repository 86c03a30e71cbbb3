"""Each bench run writes its result whole into its own file under ``bench/results/``, never over another's."""

from __future__ import annotations

import datetime
from pathlib import Path


def claim_result_file(folder: Path, stamp: datetime.datetime, name: str = "event-tiers") -> Path:
    """
    This run's own results file, named by its UTC start time; created empty now, never over another run's.

    The run rewrites it whole after each case (a run cut short keeps what it measured).
    """
    folder.mkdir(parents=True, exist_ok=True)
    out = folder / f"{stamp:%Y-%m-%dT%H%M%SZ}-{name}.json"
    out.open("x").close()  # FileExistsError rather than overwrite a stored result
    return out


def write_new_result(path: Path, document: object) -> Path:
    """Write a run's whole result as JSON into ``path``, which must not exist yet (never over another's)."""
    import json

    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("x") as out:  # FileExistsError rather than overwrite a stored result
        out.write(json.dumps(document, indent=2) + "\n")
    return path

"""What a deployment's metadata DB holds in its ``trigger`` rows, for tests that read them."""

from __future__ import annotations

import configparser
import json
from pathlib import Path
from typing import Any


def trigger_kwargs(home: Path, stored: str) -> dict[str, Any]:
    """
    A ``trigger`` row's kwargs: Airflow stores them encrypted with the deployment's Fernet key.

    The key is the one Airflow wrote to ``<home>/airflow.cfg`` at its first start. (Searching the stored
    text for a secret finds nothing whatever the kwargs hold: it is ciphertext.)
    """
    from cryptography.fernet import Fernet

    config = configparser.ConfigParser(interpolation=None)
    config.read(home / "airflow.cfg")
    return json.loads(Fernet(config["core"]["fernet_key"].encode()).decrypt(stored.encode()))

"""An OAUTHBEARER token callback as an executor would run it: reads a token the cluster mounts."""

from __future__ import annotations

import os
import time


def mounted_token(oauthbearer_config: str) -> tuple[str, float]:
    """confluent-kafka's ``oauth_cb`` contract: (token, expiry as epoch seconds)."""
    with open(os.environ.get("AKR_TOKEN_FILE", "/var/run/secrets/kafka/token"), encoding="utf-8") as fh:
        return fh.read().strip(), time.time() + 300

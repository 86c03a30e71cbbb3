"""The "Retry tiers" view: an Airflow plugin with its own FastAPI app and a navigation entry."""

from __future__ import annotations

from functools import cache
from typing import Any

from airflow.providers.common.compat.sdk import AirflowPlugin

URL_PREFIX = "/kafka-retry"


@cache
def _fastapi_apps() -> list[dict[str, Any]]:
    from airflow_kafka_retry.plugin.app import create_app

    return [{"app": create_app(), "url_prefix": URL_PREFIX, "name": "Kafka retry tiers"}]


class _BuiltOnFirstUse:
    """
    The FastAPI app is built only where it is used (the API server).

    Not in every process that loads plugins.
    """

    def __get__(self, instance: object, owner: type) -> list[dict[str, Any]]:
        return _fastapi_apps()


class RetryTiersPlugin(AirflowPlugin):
    """Registered through the ``airflow.plugins`` entry point and ``get_provider_info()["plugins"]``."""

    name = "kafka_retry_tiers"
    fastapi_apps = _BuiltOnFirstUse()
    external_views = [
        {
            "name": "Retry tiers",
            "href": f"{URL_PREFIX}/",
            "destination": "nav",
            "url_route": "kafka-retry-tiers",
            "category": "browse",
        }
    ]

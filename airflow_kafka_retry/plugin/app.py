"""The FastAPI app of the "Retry tiers" view, mounted by the plugin under ``/kafka-retry``.

Every endpoint needs an Airflow login (the API server's own JWT cookie or bearer token) and shows a
DAG's runs only to users who may read that DAG. Kafka is read on the server with the
``kafka_conn_id`` connection; neither its configuration nor any record payload reaches the browser.
Triggering goes through Airflow's own REST API from the page, with the user's own permissions.
"""

from __future__ import annotations

import logging
from importlib import resources
from typing import Any

from fastapi import Depends, FastAPI, HTTPException
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import HTMLResponse, Response

from airflow_kafka_retry.plugin import runs, view_model
from airflow_kafka_retry.plugin.settings import ViewSettings, load_settings
from airflow_kafka_retry.policy.resolver import wall_clock_ms

log = logging.getLogger(__name__)
_STATIC = {"app.js": "text/javascript", "style.css": "text/css"}


def _auth_manager() -> Any:
    from airflow.api_fastapi.app import get_auth_manager

    return get_auth_manager()


def _may(user: Any, method: str, dag_id: str, *, run: bool = False) -> bool:
    from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity, DagDetails

    try:
        return bool(_auth_manager().is_authorized_dag(
            method=method, user=user, access_entity=DagAccessEntity.RUN if run else None,
            details=DagDetails(id=dag_id)))
    except Exception:  # noqa: BLE001 - an auth manager that cannot answer grants nothing
        log.exception("authorization check failed for DAG %s", dag_id)
        return False


def _kafka_config(settings: ViewSettings) -> dict[str, Any]:
    from airflow_kafka_retry.hooks.kafka_retry import KafkaRetryHook

    return KafkaRetryHook(kafka_config_id=settings.kafka_conn_id).kafka_config()


def create_app() -> FastAPI:
    from airflow.api_fastapi.core_api.security import get_user as _user  # the API server's authentication

    app = FastAPI(title="Kafka retry tiers", docs_url=None, redoc_url=None, openapi_url=None)

    @app.get("/", response_class=HTMLResponse)
    def page() -> str:
        return resources.files("airflow_kafka_retry.plugin").joinpath("static/index.html").read_text()

    @app.get("/static/{name}")
    def static(name: str) -> Response:
        if name not in _STATIC:
            raise HTTPException(404, f"no static file {name!r}")
        text = resources.files("airflow_kafka_retry.plugin").joinpath(f"static/{name}").read_text()
        return Response(text, media_type=_STATIC[name])

    @app.get("/api/topologies")
    def topologies(user: Any = Depends(_user)) -> dict[str, Any]:
        settings = load_settings()
        return {"patterns": list(settings.topologies), "topologies": view_model.list_topologies(settings)}

    @app.get("/api/topologies/{ident}")
    async def topology(ident: str, user: Any = Depends(_user)) -> dict[str, Any]:
        settings = load_settings()
        path = view_model.find_topology_file(settings, ident)
        if path is None:
            raise HTTPException(404, f"no topology {ident!r}; the view reads {', '.join(settings.topologies)}")
        try:
            config = await run_in_threadpool(_kafka_config, settings)
        except Exception as exc:  # noqa: BLE001 - e.g. the connection does not exist: say so, never its content
            return {"id": ident, "source": path,
                    "error": f"connection {settings.kafka_conn_id!r}: {type(exc).__name__}: {exc}"}

        def read_runs(dag_id: str, limit: int) -> list[dict[str, Any]]:
            return runs.last_runs(dag_id, limit) if _may(user, "GET", dag_id, run=True) else []

        return await run_in_threadpool(
            view_model.topology_view, path, settings, config, now_ms=wall_clock_ms(), runs_reader=read_runs,
            can_trigger=lambda dag_id: _may(user, "POST", dag_id, run=True))

    return app

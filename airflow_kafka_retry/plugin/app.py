"""
The FastAPI app of the "Retry tiers" view, mounted by the plugin under ``/kafka-retry``.

Every endpoint needs an Airflow login (the API server's own JWT cookie or bearer token). A topology is
listed and shown only to users who may read all its tier DAGs; to anyone else it does not exist (the
same 404 as an unknown id, so ids cannot be probed); the configured topology patterns and the topology
files' paths (where the DAGs folder is) are shown only to admins (:meth:`.DagAccess.may_administer`),
anyone else sees a file's name. A DAG's runs need read access to its runs, their summaries read access
to its XComs (:mod:`.access`). Kafka is read on the server with the ``kafka_conn_id`` connection,
through the cache and cap of :mod:`airflow_kafka_retry.plugin.scans`; neither its configuration nor any
record payload reaches the browser. Triggering goes through Airflow's own REST API from the page, with
the user's own permissions. A dead-letter topic's page (records, dry run, redrives, Stop) has its routes
in :mod:`airflow_kafka_retry.plugin.redrive_api`.
"""

from __future__ import annotations

from importlib import resources
from typing import Any

from fastapi import Depends, FastAPI, HTTPException
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import HTMLResponse, Response

from airflow_kafka_retry.plugin import lookup, runs, scans, view_model
from airflow_kafka_retry.plugin.access import DagAccess
from airflow_kafka_retry.plugin.redrive_api import redrive_router
from airflow_kafka_retry.plugin.settings import kafka_config, load_settings
from airflow_kafka_retry.policy.routing.resolver import wall_clock_ms

_STATIC = {"app.js": "text/javascript", "redrive.js": "text/javascript", "style.css": "text/css"}


def create_app() -> FastAPI:
    from airflow.api_fastapi.core_api.security import get_user as _user  # the API server's authentication

    app = FastAPI(title="Kafka retry tiers", docs_url=None, redoc_url=None, openapi_url=None)
    cache = scans.ScanCache()
    app.include_router(redrive_router())

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
        files = view_model.topology_files(settings)
        access = DagAccess(user, lookup.dag_ids(files, settings))
        admin = access.may_administer()
        return {
            "patterns": list(settings.topologies) if admin else [],
            "topologies": [f.listing(admin) for f in files if lookup.visible(access, f, settings)],
        }

    @app.get("/api/topologies/{ident}")
    async def topology(ident: str, user: Any = Depends(_user)) -> dict[str, Any]:
        settings = load_settings()
        file, access = await run_in_threadpool(lookup.visible_topology, settings, ident, user)
        admin = await run_in_threadpool(access.may_administer)
        if file.topology is None:
            return {"id": ident, "source": file.source(admin), "error": file.shown_error(admin)}
        topology = file.topology
        try:
            config = await run_in_threadpool(kafka_config, settings)
        except Exception as exc:  # e.g. the connection does not exist: say so, never its content
            return {
                "id": ident,
                "source": file.source(admin),
                "error": f"connection {settings.kafka_conn_id!r}: {type(exc).__name__}: {exc}",
            }

        def read_runs(dag_id: str, limit: int, task_id: str | None) -> list[dict[str, Any]]:
            if not access.may("GET", dag_id, "RUN"):
                return []
            return runs.last_runs(dag_id, limit, task_id, summaries=access.may("GET", dag_id, "XCOM"))

        def view() -> dict[str, Any]:
            scan = cache.get(
                scans.cache_key(file.path, topology, settings),
                settings.cache_ttl_s,
                lambda: scans.read_topology(topology, settings, config, now_ms=wall_clock_ms()),
                busy=lambda: scans.busy_scan(topology, now_ms=wall_clock_ms()),
            )
            return view_model.topology_view(
                file.path,
                topology,
                settings,
                scan,
                runs_reader=read_runs,
                can_trigger=lambda dag_id: access.may("POST", dag_id, "RUN"),
                full_path=admin,
            )

        return await run_in_threadpool(view)

    return app

"""
The endpoints of a dead-letter topic's page in the view: its records, a dry run, its replays, Stop.

Who may do what is Airflow's auth manager's answer, as for the topology's replay DAG itself
(``build_dlt_replay_dag``, named by ``[kafka_retry] replay_dag_id_template``):

- the page and its records: whoever may see the topology (:mod:`.lookup`; else the 404 of an unknown
  topology); the topic must be one of its dead-letter topics (its DLTs, parking topic, named queues);
- the dry run and *Stop*: whoever may trigger the replay DAG, else 403. *Redrive* itself is the replay
  DAG's trigger, called from the browser through Airflow's REST API with the user's own login;
- the replays (the audit of past redrives, a redrive's progress): whoever may read the replay DAG's runs
  (its runs' conf holds the same filters), else 403.

*Stop* writes to the replay log, which the tier runs read to trust a replayed record, so it never goes
through ``[kafka_retry] kafka_conn_id`` (the ``view`` role: reads only) but through
``[kafka_retry] redrive_kafka_conn_id`` (the ``replay`` role's principal); unset, the page offers no
*Stop* and the endpoint answers 409 naming the option.

The Kafka work (``plugin/dlt_reads.py``) runs on the server with ``[kafka_retry] kafka_conn_id``, under the
view's cap of Kafka scans and a deadline (``[kafka_retry] timeout`` for a listing, ``replay_timeout`` for
the rest): a busy view answers 503, a read past its deadline 504, a broker error 502, bad input 400
naming the field. Never a key or a value, nor the Kafka configuration, reaches the browser or a log.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from confluent_kafka import KafkaException
from fastapi import APIRouter, Depends, HTTPException, Request
from fastapi.concurrency import run_in_threadpool

from airflow_kafka_retry.dlt.errors import ReplayAbortedError
from airflow_kafka_retry.dlt.filters import ReplayFilter
from airflow_kafka_retry.dlt.replay_request import ReplayRequest, check_replay_id
from airflow_kafka_retry.engine.kafka.clients import KafkaConfigError
from airflow_kafka_retry.engine.kafka.deadlines import CallStuckError
from airflow_kafka_retry.engine.kafka.scan import ReadError
from airflow_kafka_retry.plugin import dlt_page, dlt_reads, lookup, runs, scans
from airflow_kafka_retry.plugin.settings import kafka_config, load_settings
from airflow_kafka_retry.policy.errors import ReplayError
from airflow_kafka_retry.policy.routing.resolver import wall_clock_ms

if TYPE_CHECKING:
    from airflow_kafka_retry.plugin.access import DagAccess
    from airflow_kafka_retry.plugin.settings import ViewSettings
    from airflow_kafka_retry.policy.topology.model import Topology

T = TypeVar("T")

#: The 409 of a stop while ``[kafka_retry] redrive_kafka_conn_id`` is unset.
STOP_OFF = (
    "Stop from the view is off: set [kafka_retry] redrive_kafka_conn_id to a connection holding the replay "
    "role's principal (the view's own connection only reads), or stop the replay with "
    "`airflow-kafka-retry dlt replay-stop`"
)


@dataclass(frozen=True)
class RedriveRights:
    """What one user may do on a DLT's page: redrive (dry run, Redrive, Stop), read the replays (audit)."""

    redrive: bool
    audit: bool


def redrive_rights(access: DagAccess, replay_dag_id: str) -> RedriveRights:
    """Trigger the replay DAG (POST on its runs) to redrive; read its runs to see the replays."""
    return RedriveRights(
        redrive=access.may("POST", replay_dag_id, "RUN"), audit=access.may("GET", replay_dag_id, "RUN")
    )


@dataclass(frozen=True)
class DltPage:
    """A DLT page a user may see: its topology, topic, replay DAG and what the user may do."""

    settings: ViewSettings
    topology: Topology
    topic: str
    replay_dag_id: str
    rights: RedriveRights

    def require(self, allowed: bool, what: str, needs: str) -> None:
        """403 naming the replay DAG and the permission (``needs``) when the user may not ``what``."""
        if not allowed:
            raise HTTPException(
                403, f"you may not {what}: it needs permission to {needs} {self.replay_dag_id}"
            )

    def capped(
        self, seconds: float, what: str, work: Callable[[dict[str, Any]], T], *, conn_id: str | None = None
    ) -> T:
        """
        ``work(kafka_config)`` under the view's cap and a deadline, its errors as HTTP answers.

        :param conn_id: the connection to use (default ``[kafka_retry] kafka_conn_id``).
        """
        conn_id = conn_id or self.settings.kafka_conn_id
        try:
            config = kafka_config(self.settings, conn_id)
        except Exception as exc:  # e.g. the connection does not exist: say so, never its content
            raise HTTPException(502, f"connection {conn_id!r}: {type(exc).__name__}: {exc}")
        with http_errors(what):
            return scans.run_capped(self.settings, seconds, what, functools.partial(work, config))


def find_page(ident: str, topic: str, user: Any) -> DltPage:
    """The page of ``topic`` in topology ``ident``, if the user may see it (else 404)."""
    settings = load_settings()
    file, access = lookup.visible_topology(settings, ident, user)
    if file.topology is None or topic not in scans.dead_topics(file.topology):
        raise HTTPException(404, f"no dead-letter topic {topic!r} in topology {ident!r}")
    replay_dag_id = lookup.replay_dag_id(file.topology, settings)
    return DltPage(settings, file.topology, topic, replay_dag_id, redrive_rights(access, replay_dag_id))


def replay_dag_targets(dag_id: str) -> list[str] | None:
    """The targets the replay DAG's form offers, as Airflow serialized it; None when it is not in Airflow."""
    from airflow.models.serialized_dag import SerializedDagModel

    from airflow_kafka_retry.factory.replay_dag import offered_targets

    dag = SerializedDagModel.get_dag(dag_id)
    if dag is None:
        return None
    try:
        return offered_targets(dag.params.get_param("to").schema)
    except KeyError:  # a replay DAG without a target field: records go to their original topic only
        return []


@contextmanager
def http_errors(what: str) -> Iterator[None]:
    """Bad input 400, a busy view 503, a deadline passed 504, a broker error 502: each naming ``what``."""
    try:
        yield
    except (KafkaConfigError, KafkaException, ReadError, ReplayAbortedError) as exc:
        raise HTTPException(502, f"{what}: {exc}") from None
    except ReplayError as exc:
        raise HTTPException(400, str(exc)) from None
    except scans.ScanBusy as exc:
        raise HTTPException(503, f"{what}: {exc}") from None
    except CallStuckError as exc:
        raise HTTPException(504, str(exc)) from None


def given_filters(values: dict[str, Any]) -> dict[str, Any]:
    """The page's filters (:data:`~.dlt_page.FILTERS`) and ``to``, empty ones left out; another name: 400."""
    unknown = sorted(set(values) - {*dlt_page.FILTERS, "to"})
    if unknown:
        raise HTTPException(
            400, f"unknown field(s) {', '.join(unknown)}: use {', '.join(dlt_page.FILTERS)}, to"
        )
    return {k: v for k, v in values.items() if v not in (None, "")}


def redrive_router() -> APIRouter:
    """The DLT page's routes, behind the API server's authentication."""
    from airflow.api_fastapi.core_api.security import get_user as _user

    router = APIRouter(prefix="/api/topologies/{ident}/dead-letters/{topic}")

    @router.get("")
    async def records(ident: str, topic: str, request: Request, user: Any = Depends(_user)) -> dict[str, Any]:
        def work() -> dict[str, Any]:
            page = find_page(ident, topic, user)
            filters = given_filters(dict(request.query_params))
            filters.pop("to", None)
            filters.pop("limit", None)  # the dry run applies it, oldest first
            now_ms = wall_clock_ms()
            with http_errors(f"the filters of {topic}"):
                selection = ReplayFilter.build(**filters, now_ms=now_ms)
            targets = replay_dag_targets(page.replay_dag_id)
            meta = dlt_page.page_meta(
                page.topology,
                topic,
                replay_dag_id=page.replay_dag_id,
                targets=targets,
                can_redrive=page.rights.redrive,
                can_audit=page.rights.audit,
                can_stop=bool(page.settings.redrive_kafka_conn_id),
            )
            timeout = page.settings.timeout_s
            listing = page.capped(
                2 * timeout + 5,
                f"the records of {topic}",
                lambda config: dlt_reads.list_records(
                    config, page.topology, topic, selection, now_ms=now_ms, timeout_s=timeout
                ),
            )
            return {**meta, **listing}

        return await run_in_threadpool(work)

    @router.post("/dry-run")
    async def dry_run(
        ident: str, topic: str, body: dict[str, Any] | None = None, user: Any = Depends(_user)
    ) -> dict[str, Any]:
        def work() -> dict[str, Any]:
            page = find_page(ident, topic, user)
            page.require(page.rights.redrive, "dry-run a redrive", "trigger")
            targets = replay_dag_targets(page.replay_dag_id)
            if targets is None:
                raise HTTPException(409, f"the replay DAG {page.replay_dag_id} is not in Airflow")
            filters = given_filters(body or {})
            with http_errors(f"the dry run of {topic}"):
                request = ReplayRequest(dlt=topic, **filters)
            return page.capped(
                page.settings.replay_timeout_s,
                f"the dry run of {topic}",
                lambda config: dlt_reads.dry_run(config, page.topology, request, targets=targets),
            )

        return await run_in_threadpool(work)

    @router.get("/replays")
    async def replays(
        ident: str, topic: str, replay_id: str | None = None, user: Any = Depends(_user)
    ) -> dict[str, Any]:
        def work() -> dict[str, Any]:
            page = find_page(ident, topic, user)
            page.require(page.rights.audit, "read the replays", "read the runs of")
            found = page.capped(
                page.settings.replay_timeout_s,
                f"the replay log of {topic}",
                lambda config: dlt_reads.statuses(config, page.topology, topic),
            )
            shown = [s for s in found if replay_id in (None, s.get("replay_id"))]
            return {
                "replays": dlt_page.with_triggering_users(shown, page.replay_dag_id, runs.triggering_users)
            }

        return await run_in_threadpool(work)

    @router.post("/replays/{replay_id}/stop")
    async def stop(ident: str, topic: str, replay_id: str, user: Any = Depends(_user)) -> dict[str, Any]:
        def work() -> dict[str, Any]:
            page = find_page(ident, topic, user)
            page.require(page.rights.redrive, "stop a redrive", "trigger")
            if not page.settings.redrive_kafka_conn_id:
                raise HTTPException(409, STOP_OFF)
            with http_errors(f"the stop of {replay_id}"):
                check_replay_id(replay_id)
            name = str(user.get_name()) if hasattr(user, "get_name") else str(user)
            try:
                return page.capped(
                    page.settings.replay_timeout_s,
                    f"the stop of {replay_id}",
                    lambda config: dlt_reads.stop(config, page.topology, topic, replay_id, user=name),
                    conn_id=page.settings.redrive_kafka_conn_id,
                )
            except HTTPException as exc:
                if exc.status_code == 400:  # not running, or no such replay: nothing to stop
                    raise HTTPException(409, exc.detail) from None
                raise

        return await run_in_threadpool(work)

    return router

"""
What ``build_retry_dags`` makes of a topology's ``input`` and ``on_due``: the input lane and the handler.

A topology with ``input`` (another framework's dead-letter queue, ``policy/topology/input_lane.py``) has that
DLQ as its tier 0: the task ``main`` drains it into the tiers. Without that task nothing feeds the tiers,
so the factory includes it unasked, and refuses ``include_main=False``. So it does under ``ordering: key``
(docs/ordering.md): records are held where main records are first handled, by the task ``main`` (the
keeper); a Spring service (``compat``) left to drain the main topic would not know which keys are held.

Under ``on_due: redeliver`` no handler runs (``engine/drain/redelivery.py``: the input lane routes each dead
letter, a tier produces each due record back to its source topic), so ``handler=`` is refused rather than
silently ignored, as the factory refuses the DAG arguments it sets itself: a handler there would look
like it ran. The tasks get :data:`REDELIVER_HANDLER`, which the engine never calls. Everything else takes
a handler, as before. Each error names the topology's file and the field that decides.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from airflow_kafka_retry.policy.errors import TopologyError

if TYPE_CHECKING:
    from airflow_kafka_retry.policy.topology.model import Topology

#: The handler path every task of an ``on_due: redeliver`` topology gets (never called: it raises).
REDELIVER_HANDLER = "airflow_kafka_retry.engine.drain.redelivery:no_handler"


def tasks_handler(topology: Topology, handler: str | None) -> str:
    """The handler the topology's reprocess tasks take; a TopologyError when ``handler`` does not fit."""
    if topology.on_due == "redeliver":
        if handler is not None:
            raise TopologyError(
                f"on_due: redeliver calls no handler (each due record goes back to its source topic for "
                f"the share consumer), but build_retry_dags got handler={handler!r}: drop handler=, or "
                "set on_due: handle to process the dead letters with it",
                field="on_due",
                source=topology.source,
            )
        return REDELIVER_HANDLER
    if handler is None:
        raise TopologyError(
            "the tiers of this topology handle their due records (on_due: handle, the default), so "
            "build_retry_dags needs handler='package.module:function'",
            field="on_due",
            source=topology.source,
        )
    return handler


def includes_main(topology: Topology, include_main: bool | None) -> bool:
    """
    Whether the DAGs drain tier 0: asked for, else (None) exactly when the topology needs it.

    It does with an ``input`` or ``ordering: key``; False is refused there.
    """
    if topology.ordering == "key":
        return _ordered_main(topology, include_main)
    if topology.input is None:
        return bool(include_main)
    if include_main is False:
        raise TopologyError(
            f"the topology drains {topology.input.dlq!r} as its tier 0 (the task 'main'), which is what "
            "feeds its tiers, but build_retry_dags got include_main=False: leave include_main unset",
            field="input",
            source=topology.source,
        )
    return True


def _ordered_main(topology: Topology, include_main: bool | None) -> bool:
    """``ordering: key`` holds records where main records are first handled: the task ``main`` is needed."""
    if include_main is False:
        if topology.compat != "none":
            why = (
                f"with compat: {topology.compat} the main topic would be left to the Spring service, whose "
                "listener does not know which keys are held (it would handle a key's later record before "
                "the one in retry): let the provider drain it"
            )
        else:
            why = "records are held where main records are first handled, by the task 'main' (the keeper)"
        raise TopologyError(
            f"ordering: key needs the provider to drain the main topic {topology.topic!r} ({why}), but "
            "build_retry_dags got include_main=False: leave include_main unset, or set ordering: none",
            field="ordering",
            source=topology.source,
        )
    return True

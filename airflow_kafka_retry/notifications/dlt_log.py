"""``DltLogNotifier``: write a line to the task log when records reached a DLT (or were dropped)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseNotifier

if TYPE_CHECKING:
    import jinja2
    from airflow.sdk import Context

#: The default message; ``kafka_retry_summary`` is the run summary the operators put in the context.
DEFAULT_MESSAGE = (
    "{% set s = kafka_retry_summary %}{% set t = s.get('totals', s) %}{% set dlts = t.get('dlt_topics', {}) "
    "%}"
    "Kafka retry: {{ dlts.values() | sum }} record(s) reached a DLT {{ dlts | tojson }}"
    "{% if s.get('topic') %} from {{ s.topic }}{% endif %}"
    "{% if t.get('dropped') %}, {{ t.dropped }} dropped{% endif %}; by exception: "
    "{{ t.get('dead_lettered', {}) | tojson }} (DAG {{ ti.dag_id }}, task {{ ti.task_id }}, run {{ run_id }})"
)
LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
    "critical": logging.CRITICAL,
}


class DltLogNotifier(BaseNotifier):
    """
    Log a templated message about the records a run dead-lettered; for ``on_dlt`` of the reprocess operators.

    The message is rendered with the task's context plus ``kafka_retry_summary``: the summary of the
    reprocess run (``topic``, ``totals.dlt_topics`` per DLT topic, ``totals.dead_lettered`` per
    exception class, ``totals.dropped``, capped ``dead_letters`` coordinates; never payloads) or of
    the DLT watch (the same ``totals`` keys, no ``topic``). The default message reads either.

    :param message: Jinja template of the line to log. (templated)
    :param level: ``debug``, ``info``, ``warning`` (default), ``error`` or ``critical``.
    """

    template_fields = ("message",)

    def __init__(self, *, message: str = DEFAULT_MESSAGE, level: str = "warning", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if not isinstance(level, str) or level.lower() not in LEVELS:
            raise ValueError(f"level must be one of {', '.join(LEVELS)}, got {level!r}")
        self.message = message
        self.level = level.lower()
        self._template = message

    def render_template_fields(self, context: Context, jinja_env: jinja2.Environment | None = None) -> None:
        self.message = self._template  # rendering replaces the field: start from the template on every call
        super().render_template_fields(context, jinja_env)

    def notify(self, context: Context) -> None:
        self.log.log(LEVELS[self.level], "%s", self.message)

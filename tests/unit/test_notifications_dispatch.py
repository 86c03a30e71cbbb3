"""Unit tests for airflow_kafka_retry.notifications.dispatch."""

from __future__ import annotations

import logging

import pytest
from airflow.sdk import BaseNotifier

from airflow_kafka_retry.notifications.dispatch import SUMMARY_KEY, normalize_notifiers, notify_dlt


class Recording(BaseNotifier):
    template_fields = ("message",)

    def __init__(self, message: str = "") -> None:
        super().__init__()
        self.message = message
        self.seen: list[dict] = []

    def notify(self, context):
        self.seen.append(dict(context[SUMMARY_KEY]))


def test_normalize_accepts_none_one_or_many() -> None:
    notifier = Recording()
    assert normalize_notifiers(None) == ()
    assert normalize_notifiers(notifier) == (notifier,)
    assert normalize_notifiers([notifier, print]) == (notifier, print)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("send-alert", "on_dlt must be a notifier"),
        ({"a": 1}, "on_dlt must be a notifier"),
        ([print, "oops"], r"on_dlt\[1\] is a str, not a notifier"),
    ],
)
def test_normalize_refuses_what_cannot_be_called(value, message) -> None:
    with pytest.raises(TypeError, match=message):
        normalize_notifiers(value)


def test_every_notifier_sees_the_summary_and_a_raising_one_is_logged(caplog) -> None:
    first, last = Recording(), Recording()
    calls: list[dict] = []

    def broken(context):
        raise RuntimeError("smtp down")

    context: dict = {"ti": None}
    with caplog.at_level(logging.ERROR):
        ok = notify_dlt(
            [first, broken, lambda c: calls.append(c[SUMMARY_KEY]), last], context, {"totals": {"x": 1}}
        )
    assert ok == 3
    assert first.seen == last.seen == calls == [{"totals": {"x": 1}}]
    assert context[SUMMARY_KEY] == {"totals": {"x": 1}}
    assert "DLT notifier" in caplog.text
    assert "broken" in caplog.text
    assert "smtp down" in caplog.text


def test_notifier_templates_render_against_the_summary() -> None:
    notifier = Recording(message="{{ kafka_retry_summary.totals.x }} record(s)")
    rendered: list[str] = []
    notifier.notify = lambda context: rendered.append(notifier.message)  # type: ignore[method-assign]
    notify_dlt([notifier], {}, {"totals": {"x": 7}})
    assert rendered == ["7 record(s)"]

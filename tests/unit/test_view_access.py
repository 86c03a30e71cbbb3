"""Unit tests of the view's permission checks (plugin/access.py) against a fake auth manager."""

from __future__ import annotations

from airflow_kafka_retry.plugin.access import DagAccess


class Manager:
    def __init__(self, readable: set[str], *, fail: bool = False) -> None:
        self.readable, self.fail = readable, fail
        self.asked: list[tuple] = []

    def is_authorized_dag(self, *, method, user, access_entity=None, details=None) -> bool:
        if self.fail:
            raise RuntimeError("auth backend down")
        self.asked.append(
            (
                method,
                user,
                access_entity.name if access_entity else None,
                details.id if details else None,
                details.team_name if details else None,
            )
        )
        return details is None or details.id in self.readable

    def batch_is_authorized_dag(self, requests, *, user) -> bool:
        return all(self.is_authorized_dag(user=user, **r) for r in requests)


def access(manager: Manager, dag_ids=("a", "b")) -> DagAccess:
    return DagAccess("alice", dag_ids, auth_manager=manager, team_names=lambda ids: {"a": "team-a"})


def test_a_topology_needs_read_access_to_every_tier_dag_with_the_dag_team_named():
    manager = Manager({"a"})
    assert access(manager).may_read_all(["a"])
    assert not access(manager).may_read_all(["a", "b"])
    assert ("GET", "alice", None, "a", "team-a") in manager.asked
    assert ("GET", "alice", None, "b", None) in manager.asked


def test_no_dags_is_no_permission_and_a_failing_auth_manager_grants_nothing():
    assert not access(Manager({"a"})).may_read_all([])
    broken = access(Manager({"a"}, fail=True))
    assert not broken.may_read_all(["a"])
    assert not broken.may("GET", "a", "XCOM")
    assert not broken.may_read_every_dag()


def test_entity_checks_name_the_entity_and_the_team():
    manager = Manager({"a"})
    assert access(manager).may("GET", "a", "XCOM")
    assert not access(manager).may("POST", "b", "RUN")
    assert manager.asked == [("GET", "alice", "XCOM", "a", "team-a"), ("POST", "alice", "RUN", "b", None)]
    assert access(manager).may_read_every_dag()
    assert manager.asked[-1] == ("GET", "alice", None, None, None)

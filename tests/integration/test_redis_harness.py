"""The Redis harness (the CeleryExecutor's broker in tests): a private server that answers only with its
password, keeps the password off every command line, persists nothing, and leaves nothing behind."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest
import redis

from testkit.redis_server import RedisError, RedisServer

pytestmark = pytest.mark.integration


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_server_answers_only_with_its_password_and_stops_without_a_trace():
    with RedisServer() as server:
        pid, folder = server.pid, server.log_path.parent
        assert pid is not None
        client = server.client()
        assert client.set("k", "v")
        assert client.get("k") == b"v"
        assert client.config_get("save") == {"save": ""}
        assert client.config_get("appendonly") == {"appendonly": "no"}
        with pytest.raises(redis.AuthenticationError):
            redis.Redis(host="127.0.0.1", port=server.port, socket_timeout=5).ping()
        with pytest.raises(redis.AuthenticationError):
            redis.Redis(host="127.0.0.1", port=server.port, password="not-it", socket_timeout=5).ping()
        # the password: in a file only its owner reads, in a folder only its owner enters, on no command line
        assert stat.S_IMODE((folder / "redis.conf").stat().st_mode) == 0o600
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode()
        assert server.password not in cmdline
        assert server.url() == f"redis://:{server.password}@127.0.0.1:{server.port}/0"
        client.close()
    assert not _alive(pid)
    assert not folder.exists()


def test_another_server_on_the_port_is_not_taken_for_ours(monkeypatch):
    """Readiness is an authenticated PING: a server on the port without our password never counts."""
    with RedisServer() as other:
        monkeypatch.setattr("testkit.redis_server.free_port", lambda: other.port)
        # ours cannot bind the port the other holds: it exits, or (if it kept running) never answers
        with pytest.raises(RedisError, match="redis-server"):
            RedisServer(startup_timeout=5).start()
        assert other.client().ping()

"""The etcd test seam itself: EtcdServer starts, fails clearly, and cleans up."""

from __future__ import annotations

import os
import pathlib
import socket
import urllib.request

import pytest

from gazette.keyspace import testing

pytestmark = pytest.mark.integration


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_server_starts_healthy_and_stops_without_a_trace() -> None:
    server = testing.EtcdServer()
    with server:
        pid = server.pid
        assert pid is not None and alive(pid)
        work_dir = server.work_dir
        assert server.endpoint == f"http://127.0.0.1:{server.client_port}"
        with urllib.request.urlopen(f"{server.endpoint}/health", timeout=5) as resp:
            assert b'"health":"true"' in resp.read()
    assert server.pid is None
    assert not alive(pid)
    assert not work_dir.exists()


def test_a_given_work_dir_is_kept(tmp_path: pathlib.Path) -> None:
    with testing.EtcdServer(work_dir=tmp_path / "etcd") as server:
        assert (tmp_path / "etcd" / "data").is_dir()
        assert server.log_path == tmp_path / "etcd" / "etcd.log"
    assert (tmp_path / "etcd" / "data").is_dir()


def test_missing_binary_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(testing.EtcdStartError, match="missing or not executable"):
        testing.EtcdServer(binary="/nonexistent/etcd").start()
    monkeypatch.setenv(testing.BINARY_ENV, "/nonexistent/etcd")
    with pytest.raises(testing.EtcdStartError, match="/nonexistent/etcd"):
        testing.etcd_binary()


def test_failed_start_shows_etcd_output_and_leaves_no_process(tmp_path: pathlib.Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert not testing.port_is_free(port)
        server = testing.EtcdServer(work_dir=tmp_path, client_port=port, startup_timeout=20)
        with pytest.raises(testing.EtcdStartError, match="address already in use") as info:
            server.start()
    assert "exited with status" in str(info.value)
    assert server.pid is None


def test_etcd_fixture_gives_an_empty_keyspace(etcd_server: testing.EtcdServer) -> None:
    assert etcd_server.pid is not None and alive(etcd_server.pid)
    assert os.path.isdir(etcd_server.work_dir)

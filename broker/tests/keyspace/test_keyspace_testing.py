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


def _ephemeral_low() -> int:
    with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
        return int(f.read().split()[0])


def test_test_ports_come_from_below_the_ephemeral_range() -> None:
    # Outgoing connections take their source ports from the ephemeral range, so a
    # port chosen there may be gone before its server binds it.
    low = _ephemeral_low()
    if low - 10000 < 2000:
        pytest.fail(f"this test needs room below the ephemeral range (it starts at {low})")
    ports = testing.free_ports(20)
    assert len(set(ports)) == 20 and all(10000 <= p < low for p in ports), ports
    pairs = testing.free_port_pairs(5)
    assert all(p >= 10000 and p + 1 < low for p in pairs), pairs
    for p in (*ports, *pairs, *(p + 1 for p in pairs)):
        assert testing.port_is_free(p)


def test_ports_of_a_busy_range_are_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        # A range of one port, which is taken: the kernel picks instead.
        monkeypatch.setattr(testing, "_test_port_range", lambda: range(busy, busy + 1))
        assert testing.free_ports(3) != [busy] * 3 and busy not in testing.free_ports(3)


def test_without_room_below_the_ephemeral_range_the_kernel_picks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(testing, "_LOWEST_TEST_PORT", _ephemeral_low() - 100)
    assert testing._test_port_range() is None
    (port,) = testing.free_ports(1)
    assert port >= _ephemeral_low()  # Bound to port 0: the kernel chose it.

"""SQLStore on a real PostgreSQL: commits with the checkpoint, fencing, dependencies, pipelining."""

from __future__ import annotations

import asyncio
import os
import pathlib
import shutil
from collections.abc import AsyncIterator, Iterator

import psycopg
import pytest

from gazette.broker.client import AsyncOperation
from gazette.consumer import protocol as pc
from gazette.consumer import testing
from gazette.consumer.runtime import store_sql
from gazette.consumer.testing import TaskShard

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]


@pytest.fixture(scope="module")
def pg(tmp_path_factory: pytest.TempPathFactory) -> Iterator[testing.PostgresServer]:
    with testing.PostgresServer(tmp_path_factory.mktemp("pg") / "server") as server:
        yield server


Shard = TaskShard


@pytest.fixture
async def dsn(pg: testing.PostgresServer, request: pytest.FixtureRequest) -> AsyncIterator[str]:
    dsn = pg.create_database(request.node.name[:40].lower())
    async with await psycopg.AsyncConnection.connect(dsn) as conn:
        await store_sql.SQLStore.create_table(conn)
        await conn.execute("CREATE TABLE kv (k TEXT PRIMARY KEY, v INTEGER)")
        await conn.commit()
    yield dsn


def checkpoint(offset: int) -> pc.Checkpoint:
    cp = pc.Checkpoint()
    cp.sources["a/journal"].read_through = offset
    return cp


async def put(store: store_sql.SQLStore, k: str, v: int) -> None:
    conn = await store.transaction()
    await conn.execute(
        "INSERT INTO kv VALUES (%s, %s) ON CONFLICT (k) DO UPDATE SET v = EXCLUDED.v", (k, v)
    )


async def kv(dsn: str) -> dict[str, int]:
    async with await psycopg.AsyncConnection.connect(dsn) as conn:
        cur = await conn.execute("SELECT k, v FROM kv")
        return dict(await cur.fetchall())


async def test_restore_of_a_new_shard_is_an_empty_checkpoint_and_commits_round_trip(
    dsn: str,
) -> None:
    async with asyncio.TaskGroup() as tg:
        shard = Shard("/app/items/shard-a", tg)
        store = await store_sql.SQLStore.open(dsn, shard)  # type: ignore[arg-type]
        assert await store.restore_checkpoint(shard) == pc.Checkpoint()  # type: ignore[arg-type]
        assert store.fence == 1
        await put(store, "x", 1)
        await store.start_commit(shard, checkpoint(100), ())  # type: ignore[arg-type]
        await store.destroy()
        again = await store_sql.SQLStore.open(dsn, shard)  # type: ignore[arg-type]
        assert await again.restore_checkpoint(shard) == checkpoint(100)  # type: ignore[arg-type]
        assert again.fence == 2
        await again.destroy()
    assert await kv(dsn) == {"x": 1}


async def test_a_new_primary_fences_the_old_one(dsn: str) -> None:
    async with asyncio.TaskGroup() as tg:
        shard = Shard("/app/items/shard-b", tg)
        old = await store_sql.SQLStore.open(dsn, shard)  # type: ignore[arg-type]
        await old.restore_checkpoint(shard)  # type: ignore[arg-type]
        new = await store_sql.SQLStore.open(dsn, shard)  # type: ignore[arg-type]
        await new.restore_checkpoint(shard)  # type: ignore[arg-type]
        await put(old, "zombie", 1)
        op = old.start_commit(shard, checkpoint(7), ())  # type: ignore[arg-type]
        await op.wait()
        assert isinstance(op.error, store_sql.FenceError)
        assert "fence was updated" in str(op.error)
        await put(new, "primary", 2)
        await new.start_commit(shard, checkpoint(9), ())  # type: ignore[arg-type]
        for s in (old, new):
            await s.destroy()
    assert await kv(dsn) == {"primary": 2}  # Nothing of the zombie's transaction.
    async with asyncio.TaskGroup() as tg:
        shard = Shard("/app/items/shard-b", tg)
        third = await store_sql.SQLStore.open(dsn, shard)  # type: ignore[arg-type]
        assert await third.restore_checkpoint(shard) == checkpoint(9)  # type: ignore[arg-type]
        await third.destroy()


async def test_commit_waits_for_its_dependencies_and_fails_with_them(dsn: str) -> None:
    async with asyncio.TaskGroup() as tg:
        shard = Shard("/app/items/shard-c", tg)
        store = await store_sql.SQLStore.open(dsn, shard)  # type: ignore[arg-type]
        await store.restore_checkpoint(shard)  # type: ignore[arg-type]
        dep = AsyncOperation()
        await put(store, "a", 1)
        op = store.start_commit(shard, checkpoint(1), [dep])  # type: ignore[arg-type]
        await asyncio.sleep(0.1)
        assert not op.done() and await kv(dsn) == {}
        dep.resolve()
        await op
        assert await kv(dsn) == {"a": 1}

        failing = AsyncOperation()
        await put(store, "b", 2)
        op = store.start_commit(shard, checkpoint(2), [failing])  # type: ignore[arg-type]
        failing.resolve(RuntimeError("append failed"))
        await op.wait()
        assert isinstance(op.error, store_sql.DependencyFailed)
        assert "append failed" in str(op.error)
        await store.destroy()
    assert await kv(dsn) == {"a": 1}


async def test_next_transaction_writes_while_the_previous_commits(dsn: str) -> None:
    async with asyncio.TaskGroup() as tg:
        shard = Shard("/app/items/shard-d", tg)
        store = await store_sql.SQLStore.open(dsn, shard)  # type: ignore[arg-type]
        await store.restore_checkpoint(shard)  # type: ignore[arg-type]
        dep = AsyncOperation()
        await put(store, "first", 1)
        op1 = store.start_commit(shard, checkpoint(1), [dep])  # type: ignore[arg-type]
        # The next transaction is not blocked by the pending commit.
        async with asyncio.timeout(2):
            await put(store, "second", 2)
        dep.resolve()
        await op1
        await store.start_commit(shard, checkpoint(2), ())  # type: ignore[arg-type]
        await store.destroy()
    assert await kv(dsn) == {"first": 1, "second": 2}


def test_server_restarts_with_its_data(tmp_path: pathlib.Path) -> None:
    with testing.PostgresServer(tmp_path / "pg") as server:
        dsn = server.create_database("durable")
        with psycopg.connect(dsn) as conn:
            conn.execute("CREATE TABLE t (x INTEGER)")
            conn.execute("INSERT INTO t VALUES (42)")
        server.kill()
        server.start()
        with psycopg.connect(dsn) as conn:
            assert conn.execute("SELECT x FROM t").fetchall() == [(42,)]


def test_a_picked_port_taken_before_postgres_binds_it_is_swapped(
    tmp_path: pathlib.Path,
) -> None:
    import socket

    squatter = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    squatter.bind(("127.0.0.1", 0))
    squatter.listen()
    try:
        server = testing.PostgresServer(tmp_path / "server")
        taken = squatter.getsockname()[1]
        server.port = taken  # As if another process took the port we picked.
        with server:
            assert server.port != taken
            with psycopg.connect(server.dsn, connect_timeout=5) as conn:
                assert conn.execute("SELECT 1").fetchone() == (1,)
    finally:
        squatter.close()


@pytest.mark.skipif(os.geteuid() != 0, reason="the server runs as nobody only under root")
def test_a_server_installed_under_a_private_directory_runs_as_root(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A clone in root's home (0700) puts the wheel's binaries out of nobody's reach.
    private = tmp_path / "home"
    private.mkdir(mode=0o700)
    wheel_pginstall = testing.pg_bin_dir().parent
    site = private / "venv" / "site-packages"
    pginstall = site / wheel_pginstall.parent.name / "pginstall"
    shutil.copytree(wheel_pginstall, pginstall, symlinks=True)
    libs = wheel_pginstall.parent.parent / f"{wheel_pginstall.parent.name}.libs"
    shutil.copytree(libs, site / libs.name, symlinks=True)
    from gazette.consumer.testing import postgres

    monkeypatch.setattr(postgres, "pg_bin_dir", lambda: pginstall / "bin")
    try:
        with (
            testing.PostgresServer(tmp_path / "server") as server,
            psycopg.connect(server.dsn, connect_timeout=5) as conn,
        ):
            assert conn.execute("SELECT 1").fetchone() == (1,)
    finally:  # The copy made for this test's private installation (41 MB).
        shutil.rmtree(postgres._copy_for_nobody(pginstall).parents[2])
    assert private.stat().st_mode & 0o777 == 0o700, "the private directory was opened up"

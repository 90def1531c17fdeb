"""The etcd connection options against real, secured etcd servers.

TLS with client certificates (and what is refused), etcd users (and their
tokens expiring under long-running watches and lease keep-alives), several
endpoints failing over when a member goes down, and the checks of the options
themselves.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import pathlib
from collections.abc import AsyncIterator, Iterator

import aetcd
import aetcd.rpc
import pytest

from gazette import allocator, keyspace
from gazette.keyspace import errors, testing
from gazette.keyspace import etcd as etcd_mod
from gazette.keyspace import options as ks_options

pytestmark = pytest.mark.integration

WAIT = 15.0
USER, PASSWORD, PREFIX = "gazette", "s3cret", "/gazette/"
TOKEN_TTL = 2  # seconds: etcd's --auth-token-ttl of the auth fixture


def decode(key: str, value: bytes) -> bytes:
    return value


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> testing.TLSFiles:
    return testing.make_tls(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def tls_server(
    tmp_path_factory: pytest.TempPathFactory, tls: testing.TLSFiles
) -> Iterator[testing.EtcdServer]:
    with testing.EtcdServer(work_dir=tmp_path_factory.mktemp("etcd-tls"), tls=tls) as server:
        yield server


@pytest.fixture(scope="module")
def auth_server(
    tmp_path_factory: pytest.TempPathFactory, tls: testing.TLSFiles
) -> Iterator[testing.EtcdServer]:
    """TLS with client certificates, etcd auth on, and tokens that expire after 2 s."""
    server = testing.EtcdServer(
        work_dir=tmp_path_factory.mktemp("etcd-auth"), tls=tls, auth_token_ttl=TOKEN_TTL
    )
    with server:
        server.enable_auth({USER: (PASSWORD, PREFIX)})
        yield server


@contextlib.asynccontextmanager
async def connected(config: keyspace.EtcdConfig, *, wipe: str = "") -> AsyncIterator[aetcd.Client]:
    client = await keyspace.connect(config, call_timeout=10)
    try:
        yield client
    finally:
        if wipe:
            await client.delete_prefix(wipe.encode())
        await client.close()


@contextlib.asynccontextmanager
async def watching(ks: keyspace.KeySpace, client: aetcd.Client) -> AsyncIterator[None]:
    async with asyncio.TaskGroup() as tg:
        task = tg.create_task(ks.watch(client))
        try:
            yield
        finally:
            task.cancel()


async def put(client: aetcd.Client, key: str, value: bytes, lease: int = 0) -> int:
    stub = await etcd_mod.kv_stub(client)
    resp = await stub.Put(aetcd.rpc.PutRequest(key=key.encode(), value=value, lease=lease))
    return int(resp.header.revision)


# --- TLS ---------------------------------------------------------------------


async def test_tls_with_a_client_certificate_puts_gets_watches_and_keeps_leases(
    tls_server: testing.EtcdServer,
) -> None:
    config = tls_server.config()
    assert config.address.startswith("https://") and config.tls
    async with connected(config, wipe="/tls/") as client:
        await client.put(b"/tls/a", b"1")
        got = await client.get(b"/tls/a")
        assert got is not None and got.value == b"1"

        ks = keyspace.KeySpace("/tls", decode, keyspace.KeySpaceConfig(watch_delay=0))
        await ks.load(client)
        assert [kv.key for kv in ks.key_values] == ["/tls/a"]
        lease = await allocator.grant_lease(client, 5)
        async with watching(ks, client):
            rev = await put(client, "/tls/b", b"2", lease=lease)
            await ks.wait_for_revision(rev, timeout=WAIT)
            kv = ks.search("/tls/b")
            assert kv is not None and kv.lease == lease
        reply = await client.refresh_lease(lease)
        assert reply.TTL > 0
        await allocator.revoke_lease(client, lease)


@pytest.mark.parametrize("case", ["no client certificate", "another CA's certificate"])
async def test_tls_refuses_clients_without_a_certificate_of_its_ca(
    tls_server: testing.EtcdServer, tls: testing.TLSFiles, case: str
) -> None:
    config = tls_server.config()
    if case == "no client certificate":
        config = dataclasses.replace(config, cert_file="", cert_key_file="")
    else:
        config = dataclasses.replace(
            config, cert_file=tls.other_client_cert, cert_key_file=tls.other_client_key
        )
    async with connected(config) as client:
        with pytest.raises(errors.EtcdError) as info:
            await keyspace.KeySpace("/tls", decode).load(client)
    message = str(info.value)
    assert info.value.code == "UNAVAILABLE"
    assert "handshake failed" in message.lower() and "BAD_CERTIFICATE" in message
    assert "--etcd.cert-file" in message  # The hint names the flags to check.


async def test_tls_refuses_a_server_certificate_of_an_untrusted_ca(
    tls_server: testing.EtcdServer, tls: testing.TLSFiles
) -> None:
    # The stranger's certificate as the "CA": etcd's own certificate doesn't verify.
    config = dataclasses.replace(tls_server.config(), trusted_ca_file=tls.other_client_cert)
    async with connected(config) as client:
        with pytest.raises(errors.EtcdError, match="CERTIFICATE_VERIFY_FAILED") as info:
            await keyspace.KeySpace("/tls", decode).load(client)
    assert "--etcd.trusted-ca-file" in str(info.value)


# --- etcd users ----------------------------------------------------------------


async def test_a_user_reads_and_writes_its_prefix_only(auth_server: testing.EtcdServer) -> None:
    async with connected(auth_server.config(USER, PASSWORD), wipe=PREFIX) as client:
        await client.put(f"{PREFIX}a".encode(), b"1")
        got = await client.get(f"{PREFIX}a".encode())
        assert got is not None and got.value == b"1"
        with pytest.raises(errors.EtcdError, match="permission denied"):
            await keyspace.apply_changes(client, "/elsewhere", [("x", b"", keyspace.ANY_REVISION)])


async def test_a_password_file_is_read(
    auth_server: testing.EtcdServer, tmp_path: pathlib.Path
) -> None:
    secret = tmp_path / "password"
    secret.write_text(PASSWORD + "\n")  # As `echo` writes a Secret.
    config = dataclasses.replace(
        auth_server.config(USER, PASSWORD), password="", password_file=str(secret)
    )
    async with connected(config, wipe=PREFIX) as client:
        await client.put(f"{PREFIX}f".encode(), b"1")


async def test_a_wrong_password_fails_at_connect_naming_the_flags(
    auth_server: testing.EtcdServer,
) -> None:
    with pytest.raises(errors.EtcdAuthError) as info:
        await keyspace.connect(auth_server.config(USER, "wrong"), call_timeout=10)
    message = str(info.value)
    assert "authentication failed" in message
    assert f"{USER!r} (--etcd.username)" in message and "--etcd.password" in message
    # Without credentials, a secured etcd refuses the keyspace outright.
    config = dataclasses.replace(auth_server.config(USER, PASSWORD), username="", password="")
    async with connected(config) as client:
        with pytest.raises(errors.EtcdError) as refused:
            await keyspace.KeySpace(PREFIX.rstrip("/"), decode).load(client)
        assert refused.value.code in ("INVALID_ARGUMENT", "PERMISSION_DENIED")


async def test_watches_and_lease_keep_alives_outlive_their_token(
    auth_server: testing.EtcdServer,
) -> None:
    """etcd forgets an unused token after --auth-token-ttl (2 s here): calls after that
    authenticate again, a running watch goes on, a lease is still kept alive, and a
    watch started with the stale token is refused once, then started afresh."""
    root = f"{PREFIX}expiry"
    async with (
        connected(auth_server.config(USER, PASSWORD), wipe=PREFIX) as client,
        connected(auth_server.config(USER, PASSWORD)) as writer,
    ):
        auth = client.token_auth
        assert auth is not None and auth.authentications == 1
        ks = keyspace.KeySpace(root, decode, keyspace.KeySpaceConfig(watch_delay=0))
        await ks.load(client)
        lease = await allocator.grant_lease(client, 3 * TOKEN_TTL)
        async with asyncio.TaskGroup() as tg:
            keeper = tg.create_task(allocator.keep_alive(client, lease, 3 * TOKEN_TTL))
            async with watching(ks, client):
                rev = await put(writer, f"{root}/a", b"1")
                await ks.wait_for_revision(rev, timeout=WAIT)
                # Idle past the token's life (the keep-alives don't renew it).
                await asyncio.sleep(2 * TOKEN_TTL + 1)
                rev = await put(writer, f"{root}/b", b"2")
                await ks.wait_for_revision(rev, timeout=WAIT)
                # A unary call with the expired token authenticates again and succeeds.
                got = await client.get(f"{root}/a".encode())
                assert got is not None and got.value == b"1"
                assert auth.authentications >= 2
            # A new watch, after the token expired again: refused, then re-authenticated.
            await asyncio.sleep(TOKEN_TTL + 1)
            before = auth.authentications
            fresh = keyspace.KeySpace(root, decode, keyspace.KeySpaceConfig(watch_delay=0))
            fresh.load_snapshot(ks.header, [])  # Watch from the mirror's revision, no call.
            async with watching(fresh, client):
                rev = await put(writer, f"{root}/c", b"3")
                await fresh.wait_for_revision(rev, timeout=WAIT)
            assert fresh.search(f"{root}/c") is not None
            assert auth.authentications > before
            assert not keeper.done()  # No LeaseLost.
            keeper.cancel()
        # The lease lived through all of it (more than its own TTL).
        info = await client.get_lease_info(lease)
        assert info.TTL > 0
        await allocator.revoke_lease(client, lease)


async def test_a_refused_watch_fails_after_one_fresh_token(auth_server: testing.EtcdServer) -> None:
    async with connected(auth_server.config(USER, PASSWORD)) as client:
        ks = keyspace.KeySpace("/not-mine", decode)
        ks.load_snapshot(keyspace_header(), [])
        with pytest.raises(
            errors.EtcdError, match=r"watch of /not-mine cancelled: .*permission denied"
        ):
            await asyncio.wait_for(ks.watch(client), WAIT)


def keyspace_header() -> object:
    from gazette.broker.protocol import protocol_pb2

    return protocol_pb2.Header.Etcd(revision=1)


# --- Several endpoints -----------------------------------------------------------


async def test_a_dead_first_endpoint_is_passed_over(etcd_server: testing.EtcdServer) -> None:
    dead = f"http://127.0.0.1:{testing.free_port()}"
    async with connected(keyspace.EtcdConfig(address=f"{dead},{etcd_server.endpoint}")) as client:
        await client.put(b"/failover/a", b"1")
        got = await client.get(b"/failover/a")
        assert got is not None and got.value == b"1"
        ks = keyspace.KeySpace("/failover", decode, keyspace.KeySpaceConfig(watch_delay=0))
        await ks.load(client)
        async with watching(ks, client):
            rev = await put(client, "/failover/b", b"2")
            await ks.wait_for_revision(rev, timeout=WAIT)
        await client.delete_prefix(b"/failover/")


async def test_a_cluster_keeps_serving_when_the_first_member_goes_down(
    tmp_path: pathlib.Path, tls: testing.TLSFiles
) -> None:
    with testing.EtcdCluster(tmp_path, 3, tls=tls) as cluster:
        cluster.members[0].enable_auth({USER: (PASSWORD, PREFIX)})
        config = cluster.config(USER, PASSWORD)
        assert len(config.endpoints) == 3
        root = f"{PREFIX}cluster"
        async with connected(config) as client:
            ks = keyspace.KeySpace(
                root, decode, keyspace.KeySpaceConfig(watch_delay=0, backoff=(0.0, 0.1, 0.2))
            )
            await ks.load(client)
            lease = await allocator.grant_lease(client, 10)
            async with watching(ks, client):
                rev = await put(client, f"{root}/a", b"1", lease=lease)
                await ks.wait_for_revision(rev, timeout=WAIT)

                cluster.members[0].stop()

                # Writes, reads, the watch and the lease go on through the other members.
                rev = await put(client, f"{root}/b", b"2")
                await ks.wait_for_revision(rev, timeout=WAIT)
                got = await client.get(f"{root}/a".encode())
                assert got is not None and got.value == b"1"
                reply = await client.refresh_lease(lease)
                assert reply.TTL > 0
            assert client.channel.current.url != cluster.members[0].endpoint


# --- The options themselves ------------------------------------------------------


def test_options_name_the_flag_that_is_wrong(tmp_path: pathlib.Path) -> None:
    cert = tmp_path / "c.pem"
    cert.write_text("x")
    cases: list[tuple[ks_options.EtcdConfig, str]] = [
        (
            keyspace.EtcdConfig(address="https://e:2379", cert_file=str(cert)),
            "--etcd.cert-file: needs --etcd.cert-key-file too",
        ),
        (
            keyspace.EtcdConfig(address="https://e:2379", cert_key_file=str(cert)),
            "--etcd.cert-key-file: needs --etcd.cert-file too",
        ),
        (
            keyspace.EtcdConfig(address="https://e:2379", trusted_ca_file=str(tmp_path / "no")),
            f"--etcd.trusted-ca-file: no such file: {tmp_path / 'no'}",
        ),
        (
            keyspace.EtcdConfig(address="http://e:2379", trusted_ca_file=str(cert)),
            "--etcd.trusted-ca-file: is for https:// etcd endpoints",
        ),
        (
            keyspace.EtcdConfig(address="https://a:1,http://b:2"),
            "--etcd.address: mixes https:// and plaintext endpoints",
        ),
        (keyspace.EtcdConfig(password="p"), "--etcd.password: needs --etcd.username"),
        (
            keyspace.EtcdConfig(username="u", password="p", password_file=str(cert)),
            "--etcd.password: give either it or --etcd.password-file",
        ),
        (
            keyspace.EtcdConfig(username="u", password_file=str(tmp_path / "gone")),
            f"--etcd.password-file: no such file: {tmp_path / 'gone'}",
        ),
        (keyspace.EtcdConfig(address=" , "), "--etcd.address: no etcd endpoint given"),
    ]
    for config, message in cases:
        with pytest.raises(errors.EtcdConfigError) as info:
            config.check()
        assert str(info.value).startswith(message), (config, info.value)
        assert info.value.flag == message.split(":")[0]


def test_endpoints_of_an_address_list() -> None:
    got = ks_options.parse_endpoints("https://etcd-0.etcd:2379, https://[::1]:2380,https://h")
    assert [(e.target, e.tls) for e in got] == [
        ("etcd-0.etcd:2379", True),
        ("[::1]:2380", True),
        ("h:2379", True),
    ]
    unix = ks_options.parse_endpoints("unix:///run/etcd.sock,unix://host/run/b.sock,127.0.0.1:1")
    assert [(e.target, e.tls) for e in unix] == [
        ("unix:///run/etcd.sock", False),
        ("unix:///run/b.sock", False),
        ("127.0.0.1:1", False),
    ]
    config = keyspace.EtcdConfig(username="u", password="secret-value")
    assert "secret-value" not in repr(config)


async def test_a_unix_socket_endpoint(tmp_path: pathlib.Path) -> None:
    with _UnixEtcd(work_dir=tmp_path / "etcd") as server:
        sock = server.work_dir / _UnixEtcd.SOCKET
        async with connected(keyspace.EtcdConfig(address=f"unix://{sock}")) as client:
            await client.put(b"/unix/a", b"1")
            got = await client.get(b"/unix/a")
            assert got is not None and got.value == b"1"
            await client.delete_prefix(b"/unix/")


class _UnixEtcd(testing.EtcdServer):
    """An etcd that also listens for clients on a Unix socket.

    etcd takes unix:// listen URLs of the form host:port only, and makes the socket
    file of that name in its working directory.
    """

    SOCKET = "etcd.sock:1"

    def argv(self) -> list[str]:
        argv = super().argv()
        i = argv.index("--listen-client-urls") + 1
        argv[i] = f"{argv[i]},unix://{self.SOCKET}"
        return argv


# --- A broker process --------------------------------------------------------------


def etcd_args(config: keyspace.EtcdConfig) -> list[str]:
    """The --etcd.* flags of ``config``, the password left to $ETCD_PASSWORD."""
    return [
        "--etcd.address", config.address,
        "--etcd.cert-file", config.cert_file,
        "--etcd.cert-key-file", config.cert_key_file,
        "--etcd.trusted-ca-file", config.trusted_ca_file,
        "--etcd.username", config.username,
    ]  # fmt: skip


def test_brokers_serve_through_a_tls_and_auth_etcd(
    auth_server: testing.EtcdServer, tmp_path: pathlib.Path
) -> None:
    """Two broker processes against the TLS + auth etcd (tokens of 2 s): they
    announce themselves, take a journal, and keep serving past many token lives."""
    from gazette.broker import testing as broker_testing
    from gazette.broker.protocol import protocol_pb2_grpc as pb2_grpc

    config = auth_server.config(USER, PASSWORD)
    root = f"{PREFIX}brokers"
    cluster = broker_testing.BrokerCluster(
        # The address is given again by etcd_args; the last --etcd.address wins.
        config.address,
        work_dir=tmp_path,
        brokers=2,
        etcd_prefix=root,
        extra_args=etcd_args(config),
        env={"ETCD_PASSWORD": PASSWORD},
    )

    async def exercise() -> None:
        async with cluster.channel(0) as ch:
            stub = pb2_grpc.JournalStub(ch)
            spec = broker_testing.journal_spec("etcd/secured", stores=[cluster.store_url])
            await broker_testing.apply_specs(stub, spec)  # type: ignore[arg-type]
            await broker_testing.wait_writable(stub, "etcd/secured")  # type: ignore[arg-type]
            await broker_testing.append(stub, "etcd/secured", [b"one\n"])  # type: ignore[arg-type]
            # Idle past the brokers' tokens: applying again needs a fresh one.
            await asyncio.sleep(2 * TOKEN_TTL + 1)
            again = broker_testing.journal_spec("etcd/secured-2", stores=[cluster.store_url])
            await broker_testing.apply_specs(stub, again)  # type: ignore[arg-type]
            await broker_testing.wait_writable(stub, "etcd/secured-2")  # type: ignore[arg-type]
            await broker_testing.append(stub, "etcd/secured", [b"two\n"])  # type: ignore[arg-type]
            content, _ = await broker_testing.read(stub, "etcd/secured")  # type: ignore[arg-type]
            assert content == b"one\ntwo\n"

        async with connected(config) as client:
            members = await client.get_prefix(f"{root}/members/".encode())
            assert len(members) == 2

    try:
        with cluster:
            asyncio.run(exercise())
            assert not cluster.exited_on_their_own(), cluster.logs()
    finally:
        testing.wipe_prefix(auth_server.config(), f"{root}/")


def test_a_broker_refused_by_etcd_exits_with_one_line(
    auth_server: testing.EtcdServer, tmp_path: pathlib.Path
) -> None:
    import subprocess
    import sys

    base = [sys.executable, "-m", "gazette.broker", "--broker.host", "127.0.0.1"]
    config = auth_server.config(USER, PASSWORD)
    out = subprocess.run(
        [*base, *etcd_args(config), "--etcd.password", "wrong"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "BROKER_SPOOL_DIR": str(tmp_path)},
    )
    assert out.returncode == 1, out.stderr
    last = out.stderr.strip().splitlines()[-1]
    assert "etcd refused user 'gazette' (--etcd.username)" in last, out.stderr
    assert "Traceback" not in out.stderr

    # A certificate without its key never gets that far.
    out = subprocess.run(
        [*base, "--etcd.address", config.address, "--etcd.cert-file", config.cert_file],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 1
    assert out.stderr.strip().splitlines() == [
        "--etcd.cert-file: needs --etcd.cert-key-file too (a certificate and its key)"
    ]
    missing = tmp_path / "missing-ca.crt"
    out = subprocess.run(
        [*base, "--etcd.address", config.address, "--etcd.trusted-ca-file", str(missing)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.stderr.strip().splitlines() == [f"--etcd.trusted-ca-file: no such file: {missing}"]


async def test_auth_setup_turns_auth_on_under_a_running_client_and_runs_again(
    tmp_path: pathlib.Path,
) -> None:
    import subprocess
    import sys

    (tmp_path / "root").write_text("r00t-pw\n")
    (tmp_path / "user").write_text(PASSWORD + "\n")

    def setup(root_file: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [
                sys.executable, "-m", "gazette.keyspace.auth_setup",
                "--etcd.address", server.endpoint,
                "--root-password-file", root_file,
                "--user", USER, "--password-file", str(tmp_path / "user"),
                "--prefix", PREFIX,
                "--timeout", "20",
            ],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip

    server = testing.EtcdServer(work_dir=tmp_path / "etcd")
    with server:
        user = ks_options.EtcdConfig(address=server.endpoint, username=USER, password=PASSWORD)
        # A process that signs in before auth is on (as the chart's brokers may) works...
        async with connected(user) as client:
            await client.put(f"{PREFIX}before".encode(), b"1")
            done = await asyncio.to_thread(setup, str(tmp_path / "root"))
            assert done.returncode == 0, done.stderr
            assert "etcd auth enabled: users root and gazette" in done.stderr
            server.auth_enabled, server.root_password = True, "r00t-pw"
            # ...and goes on once it is, signing in then, under its prefix only.
            await client.put(f"{PREFIX}after".encode(), b"2")
            got = await client.get(f"{PREFIX}before".encode())
            assert got is not None and got.value == b"1"
            with pytest.raises(errors.EtcdError, match="permission denied"):
                await keyspace.apply_changes(
                    client, "/elsewhere", [("x", b"", keyspace.ANY_REVISION)]
                )
        anonymous = ks_options.EtcdConfig(address=server.endpoint)
        async with connected(anonymous) as client:
            with pytest.raises(errors.EtcdError) as refused:
                await keyspace.KeySpace(PREFIX.rstrip("/"), decode).load(client)
            assert refused.value.code in ("INVALID_ARGUMENT", "PERMISSION_DENIED")

        again = await asyncio.to_thread(setup, str(tmp_path / "root"))
        assert again.returncode == 0, again.stderr
        assert "was on already; users checked" in again.stderr
        (tmp_path / "wrong").write_text("not-root's\n")
        wrong = await asyncio.to_thread(setup, str(tmp_path / "wrong"))
        assert wrong.returncode == 1
        assert "error: --root-password-file: " in wrong.stderr, wrong.stderr
        async with connected(server.config(), wipe=PREFIX):
            pass

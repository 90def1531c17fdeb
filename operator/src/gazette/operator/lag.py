"""How far each Shard is behind its sources, asked of its primary, for the Shard's ``status``.

Every ``interval`` seconds the controller runs a round (:meth:`LagChecker.check`) over
the Shards it serves. Each shard's lag is computed as ``gazctl shards list --lag``
computes it (:mod:`gazette.consumer.lag`): its primary's ``Stat`` tells the offsets
it has read through, and each source's write head comes from a metadata-only read
(once per journal a round, however many shards read it). What the operator adds is
where to ask, all from etcd mirrors it keeps anyway (no etcd read per shard):

* the primary is the slot-0 PRIMARY replica of the shard's assignments
  (:mod:`gazette.operator.assignments`); its endpoint is the ``ConsumerSpec`` under
  ``<app prefix>/members/<zone>#<suffix>``, and the Stat goes to it straight;
* the write heads are read through ``broker_address`` when given, else through a
  broker registered under ``<broker root>/members`` (not exiting).

With authorization on (``--broker.auth-keys[-file]``, ``--consumer.auth-keys[-file]``),
every call carries a token of :mod:`gazette.operator.lagauth`: READ of that one journal
or shard, for a minute. Keys that can't be read leave every shard's lag unknown, with
the flag and the reason.

With TLS on, brokers and consumers advertise ``https://`` endpoints, and may require a
client certificate (``--broker.server-ca-file``, ``--consumer.server-ca-file``). The
operator's side of those connections is a client's, named as gazctl's and a consumer's
broker client name it: ``--broker.cert-file``, ``--broker.cert-key-file``,
``--broker.trusted-ca-file`` towards brokers, the same under ``--consumer.`` towards
consumers (:func:`client_tls`). The files are read again for each round's channels, so
a renewed certificate (a Secret cert-manager rotated) is presented from the next round
on; files that stop loading leave every shard's lag unknown, naming the flag.

A shard that can't be asked (no primary, no endpoint, the Stat failed or timed out,
a write head unknown) gets a :class:`~gazette.consumer.lag.ShardLag` whose ``error``
says why, and :func:`gazette.operator.status.lag_status_for` shows no number for it.

Usage::

    checker = lag.LagChecker(lag.LagConfig(), mirrors, broker_root="/gazette/cluster")
    # Over TLS: lag.LagConfig(broker_tls=lag.client_tls("broker", "c.crt", "c.key", "ca.crt"))
    found = await checker.check([lag.Target("uid-1", prefix, "shard-000", ["a/b"], primary)])
    found["uid-1"].total
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Sequence

import grpc
from google.protobuf import message as pbmessage

from gazette.broker import client
from gazette.broker import protocol as pb
from gazette.broker.protocol import auth, dial
from gazette.consumer import lag as consumer_lag
from gazette.consumer import protocol as pc
from gazette.consumer.protocol import protocol_pb2_grpc as pc_grpc
from gazette.operator import lagauth, status
from gazette.operator import mirrors as mirrors_

__all__ = ["TLS_FLAGS", "LagChecker", "LagConfig", "Target", "client_tls"]

logger = logging.getLogger(__name__)

_MEMBERS = "/members"

#: The client TLS flags of one side (``--broker.`` or ``--consumer.``), in the order of
#: :class:`~gazette.broker.protocol.dial.TLS`'s files: Gazette's client names, which
#: gazctl and a consumer's broker client take too.
TLS_FLAGS = ("cert-file", "cert-key-file", "trusted-ca-file")


def client_tls(
    section: str, cert_file: str = "", key_file: str = "", ca_file: str = ""
) -> dial.TLS:
    """The TLS of lag's calls to ``section`` (``broker`` or ``consumer``), its files loaded.

    Raises ``pb.TLSConfigError`` whose text begins with the flag at fault
    (``--broker.trusted-ca-file: ...``): a file that can't be read or parsed, a
    certificate without its key or the other way round, a key not of its certificate.
    """
    files = (cert_file, key_file, ca_file)
    try:
        tls = dial.TLS(*files)
        tls.pem()  # Parse now: gRPC would only say UNAVAILABLE at the handshake.
    except pb.TLSConfigError as e:
        raise _named(section, files, e) from None
    return tls


def _named(section: str, files: tuple[str, str, str], e: pb.TLSConfigError) -> pb.TLSConfigError:
    """``e`` with the flag of the file at fault in front."""
    if e.path and e.path in files:
        flag = TLS_FLAGS[files.index(e.path)]
    else:  # A certificate without its key, or a key without its certificate.
        flag = TLS_FLAGS[1] if files[0] else TLS_FLAGS[0]
    return pb.TLSConfigError(f"--{section}.{flag}: {e}", e.path)


def _files(tls: dial.TLS) -> tuple[str, str, str]:
    return tls.cert_file, tls.key_file, tls.ca_file


@dataclasses.dataclass(frozen=True, slots=True)
class LagConfig:
    """Tunables of the Shards' lag.

    ``interval``: seconds between two rounds (0: lag is not checked, and Shards show
    none). ``refresh``: an unchanged lag is written again (with its new
    ``lagCheckedAt``) once its last write is this old, so a reader can tell a current
    value from one the operator stopped checking without a write per shard per round.
    ``stat_timeout``: seconds a primary's Stat, and a write head's read, may take.
    ``concurrency``: shards asked at once. ``broker_address``: where write heads are
    read ("": a broker registered in etcd). ``broker_auth_keys`` (inline) or
    ``broker_auth_keys_file``: the keys brokers verify with, to sign the write heads'
    reads; ``consumer_auth_keys`` / ``consumer_auth_keys_file``: those consumers verify
    ``Stat`` with (none: no token is sent).
    """

    interval: float = 15.0
    refresh: float = 300.0
    stat_timeout: float = consumer_lag.STAT_TIMEOUT
    concurrency: int = 16
    broker_address: str = ""
    broker_auth_keys: str = dataclasses.field(default="", repr=False)
    broker_auth_keys_file: str = ""
    consumer_auth_keys: str = dataclasses.field(default="", repr=False)
    consumer_auth_keys_file: str = ""
    broker_tls: dial.TLS = dataclasses.field(default_factory=dial.TLS)
    consumer_tls: dial.TLS = dataclasses.field(default_factory=dial.TLS)

    @property
    def enabled(self) -> bool:
        return self.interval > 0

    def broker_keys(self) -> lagauth.Keys:
        """The brokers' keys; AuthorizationError if both flags are given."""
        return lagauth.Keys(
            self.broker_auth_keys, self.broker_auth_keys_file, flag="--broker.auth-keys"
        )

    def consumer_keys(self) -> lagauth.Keys:
        """The consumers' keys; AuthorizationError if both flags are given."""
        return lagauth.Keys(
            self.consumer_auth_keys, self.consumer_auth_keys_file, flag="--consumer.auth-keys"
        )


@dataclasses.dataclass(frozen=True, slots=True)
class Target:
    """One Shard to check: its object's uid, where its spec is, what it reads, its primary."""

    uid: str
    prefix: str
    shard_id: str
    journals: Sequence[str]
    primary: status.Replica | None


def _raw(key: str, value: bytes) -> None:
    """Members are decoded when an endpoint is looked up, not on every change."""
    del key, value


class LagChecker:
    """Rounds of lag checks over the endpoints etcd holds (see the module's docstring)."""

    def __init__(
        self,
        config: LagConfig,
        mirrors: mirrors_.Mirrors,
        *,
        broker_root: str,
    ) -> None:
        self.config = config
        self._mirrors = mirrors
        self._broker_root = broker_root
        self._dial = dial.DialConfig(tls=config.consumer_tls)
        self._broker_auth = lagauth.LagAuthorizer(config.broker_keys())
        self._consumer_auth = lagauth.LagAuthorizer(config.consumer_keys())

    def follow(self, prefix: str) -> None:
        """Follow the members of the application at ``prefix`` (and the brokers')."""
        self._mirrors.follow(prefix + _MEMBERS, _raw)
        if not self.config.broker_address:
            self._mirrors.follow(self._broker_root + _MEMBERS, _raw)

    def consumer_endpoint(self, prefix: str, replica: status.Replica) -> str | None:
        """The endpoint of consumer ``replica`` of the application at ``prefix``, if known."""
        mirror = self._mirrors.get(prefix + _MEMBERS)
        if mirror is None:
            return None
        kv = mirror.search(f"{prefix}{_MEMBERS}/{replica.zone}#{replica.suffix}")
        if kv is None:
            return None
        try:
            spec = pc.ConsumerSpec.FromString(kv.value)
        except pbmessage.DecodeError:  # A member no consumer wrote.
            return None
        return spec.process_spec.endpoint or None

    def broker_endpoint(self) -> str | None:
        """Where write heads are read: the configured address, else a live broker's."""
        if self.config.broker_address:
            return self.config.broker_address
        mirror = self._mirrors.get(self._broker_root + _MEMBERS)
        if mirror is None:
            return None
        for kv in mirror.key_values:
            try:
                spec = pb.BrokerSpec.FromString(kv.value)
            except pbmessage.DecodeError:
                continue
            if not spec.exiting and spec.process_spec.endpoint:
                return spec.process_spec.endpoint
        return None

    async def check(self, targets: Sequence[Target]) -> dict[str, consumer_lag.ShardLag]:
        """The lag of each target, by uid: one round."""
        if not targets:
            return {}
        broker = self.broker_endpoint()
        if broker is None:
            why = "no broker is registered in etcd (nowhere to read write heads)"
            return {t.uid: consumer_lag.ShardLag(error=why) for t in targets}
        try:
            # Once a round: a rotated keys file is signed with from the next round on.
            self._broker_auth.keys.refresh()
            self._consumer_auth.keys.refresh()
            # Likewise the certificates: renewed files are presented from this round on,
            # and files gone bad say so (naming the flag) rather than fail each handshake.
            client_tls("broker", *_files(self.config.broker_tls))
            client_tls("consumer", *_files(self.config.consumer_tls))
        except (pb.AuthorizationError, pb.TLSConfigError) as e:
            return {t.uid: consumer_lag.ShardLag(error=str(e)) for t in targets}
        channels: dict[str, grpc.aio.Channel] = {}
        limit = asyncio.Semaphore(self.config.concurrency)
        broker_tls = self.config.broker_tls
        config = client.ClientConfig(
            address=broker,
            wait_for_ready=False,
            cert_file=broker_tls.cert_file,
            cert_key_file=broker_tls.key_file,
            trusted_ca_file=broker_tls.ca_file,
        )
        async with client.JournalClient(config) as jc:
            # The client would sign hour-long tokens of whatever a call asks: lag's
            # calls get READ of their one journal, for a minute.
            jc.credentials = self._broker_auth
            heads = consumer_lag.WriteHeads(jc, timeout=self.config.stat_timeout)

            async def one(target: Target) -> consumer_lag.ShardLag:
                if target.primary is None:
                    return consumer_lag.ShardLag(error=pc.Status.Name(pc.NO_SHARD_PRIMARY))
                endpoint = self.consumer_endpoint(target.prefix, target.primary)
                if endpoint is None:
                    return consumer_lag.ShardLag(
                        error=f"primary {target.primary.member} has no endpoint in etcd"
                    )
                channel = channels.get(endpoint)
                if channel is None:
                    try:
                        channel = channels[endpoint] = dial.channel(endpoint, self._dial)
                    except pb.TLSConfigError as e:
                        # The files went bad since the round checked them (a Secret being
                        # replaced): this shard's lag is unknown, not the round's end.
                        why = _named("consumer", _files(self._dial.tls), e)
                        return consumer_lag.ShardLag(error=str(why))
                stub = pc_grpc.ShardStub(channel)

                async def stat() -> pc.StatResponse:
                    try:
                        resp: pc.StatResponse = await stub.Stat(
                            pc.StatRequest(shard=target.shard_id),
                            timeout=self.config.stat_timeout,
                            metadata=self._consumer_auth.authorize(
                                lagauth.shard_claims(auth.Capability.READ, target.shard_id)
                            )
                            or None,
                        )
                    except grpc.aio.AioRpcError as e:
                        raise consumer_lag.LagUnknown(dial.rpc_code(e).name) from e
                    if resp.status != pc.OK:
                        raise consumer_lag.LagUnknown(pc.Status.Name(resp.status))
                    try:
                        pc.validate(resp)
                    except pb.ValidationError as e:
                        raise consumer_lag.LagUnknown(f"invalid Stat response: {e}") from e
                    return resp

                async with limit:
                    try:
                        return await consumer_lag.shard_lag(
                            stat, target.journals, heads, stat_timeout=self.config.stat_timeout
                        )
                    except pb.TLSConfigError as e:  # The broker's channel, likewise.
                        return consumer_lag.ShardLag(
                            error=str(_named("broker", _files(broker_tls), e))
                        )

            try:
                found = await asyncio.gather(*(one(t) for t in targets))
            finally:
                await heads.close()
                for channel in channels.values():
                    with contextlib.suppress(grpc.RpcError):
                        await channel.close()
        return {t.uid: f for t, f in zip(targets, found, strict=True)}

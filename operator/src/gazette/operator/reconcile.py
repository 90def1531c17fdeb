"""Reconciling one Journal or Shard object into etcd: the operator's logic, free of kopf.

Every function here takes the object as the plain dict the API server returns
(its ``body``) and a :class:`SpecStore`, the seam to etcd, and returns what it
did. The kopf handlers of :mod:`gazette.operator.handlers` are thin wrappers,
so the rules below are unit-tested by calling these functions directly with an
in-memory store (:class:`gazette.operator.testing.MemorySpecStore`).

The rules:

* The object's spec and its labels (``metadata.labels`` outside reserved domains,
  plus ``spec.labels``) are mapped (:mod:`gazette.operator.mapping`) and validated
  by the protocol's own validation, as the Apply RPCs validate: a failure is
  ``InvalidSpec`` and nothing is written.
* Its etcd key is ``<root>/items/<name>``: the root is the broker cluster's
  prefix for Journals, and ``<consumers prefix>/<gazette.dev/consumer label>``
  for Shards.
* Several objects may name the same key (in other namespaces, say). The oldest
  (creation time, then namespace, name and uid) owns it; the others report
  ``ResourceConflict`` and write nothing. When the owner goes, the next oldest
  takes over (:mod:`gazette.operator.controller` reconciles it then).
* The spec is written with the Apply RPCs' checked transaction
  (:func:`gazette.keyspace.apply_changes`), guarded by the mod revision just
  read, and only when it differs from what etcd holds (so reconciling
  unchanged objects writes nothing). A JournalSpec's ``suspend``, which brokers
  write, is carried over from etcd.
* A paused object writes nothing and reports ``Paused``.
* An object that names another key than the one its ``status.etcdKey`` records
  (its ``gazette.dev/consumer`` label changed, or the operator's ``--etcd.prefix``
  or ``--consumers.prefix`` did) *moves* its spec: the new key is written, then the
  old one removed (:func:`release`), so one key holds it. The old key is removed only
  when it still holds what this object put there (its mod revision is the recorded
  ``status.modRevision``, or its value is the declared spec but for a journal's
  ``suspend``), no other object declares it (the next one takes it over instead), and
  the status says this cluster's operator wrote it (``status.cluster``); otherwise it
  is left, with a Warning. Moving ignores ``deletionPolicy``, which is
  about deleting the object: the object lives on, elsewhere.
"""

from __future__ import annotations

import dataclasses
import enum
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol

from google.protobuf import message as pbmessage

from gazette import keyspace, message
from gazette.broker import protocol as pb
from gazette.consumer import protocol as pc
from gazette.operator import crd, errors, mapping

__all__ = [
    "JOURNALS",
    "SHARDS",
    "Claim",
    "Claimed",
    "Move",
    "Outcome",
    "Reason",
    "ReconcileConfig",
    "Recorded",
    "SpecKind",
    "SpecStore",
    "Stored",
    "claim_key",
    "claim_of",
    "declared",
    "delete",
    "drifted",
    "is_paused",
    "is_unmanaged",
    "reconcile",
    "recorded",
    "release",
]

logger = logging.getLogger(__name__)

#: How many times a write is retried when another writer raced us between read and write.
_WRITE_ATTEMPTS = 3


class Reason(enum.StrEnum):
    """Reasons of the Ready condition."""

    APPLIED = "Applied"
    INVALID_SPEC = "InvalidSpec"
    RESOURCE_CONFLICT = "ResourceConflict"
    ETCD_ERROR = "EtcdError"
    PAUSED = "Paused"
    NO_CLUSTER = "NoCluster"
    """The object has no ``gazette.dev/cluster`` label: no operator serves it."""


@dataclasses.dataclass(frozen=True, slots=True)
class ReconcileConfig:
    """Where specs go: the etcd prefixes of one Gazette cluster.

    ``broker_root`` is the brokers' ``--etcd.prefix`` (Journals go under
    ``<broker_root>/items/``); ``consumers_root`` is the folder of consumer
    applications' prefixes (the Shards of consumer ``app`` go under
    ``<consumers_root>/<app>/items/``).
    """

    broker_root: str = "/gazette/cluster"
    consumers_root: str = "/gazette/consumers"


@dataclasses.dataclass(frozen=True, slots=True)
class Stored:
    """A spec's value as etcd holds it."""

    value: bytes
    mod_revision: int


class SpecStore(Protocol):
    """The seam to etcd: read one item, apply checked changes under a root."""

    async def get(self, root: str, name: str) -> Stored | None:
        """The value of ``<root>/items/<name>``, or None when absent. Raises SpecStoreError."""
        ...

    async def apply(self, root: str, changes: Sequence[keyspace.Change]) -> keyspace.ApplyResult:
        """:func:`gazette.keyspace.apply_changes` of ``changes``. Raises SpecStoreError."""
        ...


@dataclasses.dataclass(frozen=True, slots=True)
class Claim:
    """One object's claim on an etcd key; the oldest claim of a key owns it."""

    namespace: str
    name: str
    uid: str
    created: str

    def order(self) -> tuple[str, str, str, str]:
        # RFC 3339 timestamps of the API server (second precision, UTC "Z") sort as text;
        # ties, frequent for objects of one `kubectl apply`, fall to namespace and name.
        return (self.created, self.namespace, self.name, self.uid)

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


Claimed = Callable[[str], Iterable[Claim]]
"""The claims of the objects naming an etcd key (kopf's index, or the controller's)."""


def _nobody(key: str) -> Iterable[Claim]:
    del key
    return ()


@dataclasses.dataclass(frozen=True, slots=True)
class Recorded:
    """Where an object's status says its spec is: ``status.etcdKey`` and what goes with it.

    ``mod_revision`` is ``status.modRevision`` (0 when unknown); ``cluster`` is
    ``status.cluster``, the ``gazette.dev/cluster`` of the operator that wrote it (None on
    objects written before it was recorded).
    """

    key: str
    mod_revision: int = 0
    cluster: str | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class Move:
    """What became of the key an object held before (its ``status.etcdKey``).

    ``deleted``: it was removed (or was gone already); otherwise it was left, to the
    objects declaring it now or because it changed since this object wrote it.
    ``warning``: it was left although nothing else declares it (an orphan, told in a
    Warning Event). ``message`` says which; ``revision`` is etcd's after the delete (0
    when there was nothing to delete).
    """

    key: str
    deleted: bool
    message: str
    warning: bool = False
    revision: int = 0


@dataclasses.dataclass(frozen=True, slots=True)
class Outcome:
    """What one reconcile did: the Ready condition's reason and message, and where.

    ``retry`` asks the caller to try again later (etcd failed); ``mod_revision`` is the
    key's revision after an ``Applied`` outcome, and ``wrote`` says this reconcile put it
    there (etcd held something else). ``moved`` tells what became of the key the object
    held before, when it now names another one.
    """

    reason: Reason
    message: str
    key: str = ""
    mod_revision: int = 0
    retry: bool = False
    wrote: bool = False
    moved: Move | None = None

    @property
    def ready(self) -> bool:
        return self.reason is Reason.APPLIED


@dataclasses.dataclass(frozen=True)
class SpecKind:
    """What differs between Journals and Shards."""

    crd: crd.Kind
    build: Callable[[Mapping[str, Any], Mapping[str, object] | None], pbmessage.Message]
    """The spec an object declares, from its ``spec`` and its ``metadata.labels``."""
    validate: Callable[[Any], None]
    decode: Callable[[bytes], pbmessage.Message]
    item: Callable[[Any], str]
    root: Callable[[Mapping[str, str], ReconcileConfig], str]
    carry: Callable[[Any, Any], None]
    """Copies into the desired spec (2nd) what etcd's current spec (1st) owns."""
    references: Callable[[Any, ReconcileConfig, SpecStore], Awaitable[str | None]] | None = None
    """What the spec names that must exist first; the problem if something doesn't."""


def _journal_root(labels: Mapping[str, str], config: ReconcileConfig) -> str:
    return config.broker_root


def _shard_root(labels: Mapping[str, str], config: ReconcileConfig) -> str:
    app = labels.get(crd.CONSUMER_LABEL, "")
    if not app:
        raise errors.InvalidSpecError(
            f"missing label {crd.CONSUMER_LABEL} (the consumer application of the shard)",
            field="metadata.labels",
        )
    # Kubernetes label values are [A-Za-z0-9._-] without leading or trailing symbols;
    # only "." and ".." would make an unclean prefix.
    if app in (".", ".."):
        raise errors.InvalidSpecError(
            f"invalid consumer {app!r}", field=f"metadata.labels.{crd.CONSUMER_LABEL}"
        )
    return f"{config.consumers_root}/{app}"


def _carry_suspend(current: pb.JournalSpec, desired: pb.JournalSpec) -> None:
    # Brokers write `suspend` (Gazette `broker/append_fsm.go`); declaring a journal must not undo it.
    if current.HasField("suspend"):
        desired.suspend.CopyFrom(current.suspend)
    else:
        desired.ClearField("suspend")


def _carry_nothing(current: pc.ShardSpec, desired: pc.ShardSpec) -> None:
    del current, desired


# Decoded values are normalized to Go's presence of sub-messages, as built specs are, so
# that a spec written by Go (or by us) compares equal to the one declared.
def _decode_journal(value: bytes) -> pb.JournalSpec:
    return mapping.normalize_journal(pb.JournalSpec.FromString(value))


def _decode_shard(value: bytes) -> pc.ShardSpec:
    return mapping.normalize_shard(pc.ShardSpec.FromString(value))


async def _shard_references(
    spec: pc.ShardSpec, config: ReconcileConfig, store: SpecStore
) -> str | None:
    """A shard's source journals must exist and hold messages a consumer can decode.

    Gazette's ``gazctl shards apply`` checks the same (``VerifyReferencedJournals``):
    a shard reading a journal that isn't there would fail on every assignment.
    """
    for i, source in enumerate(spec.sources):
        field = f"spec.sources[{i}].journal"
        stored = await store.get(config.broker_root, source.journal)
        if stored is None:
            return (
                f"{field}: journal {source.journal!r} does not exist"
                f" (no {keyspace.item_key(config.broker_root, source.journal)} in etcd)"
            )
        try:
            journal = pb.JournalSpec.FromString(stored.value)
        except pbmessage.DecodeError:
            return f"{field}: journal {source.journal!r} has an undecodable spec in etcd"
        content_type = pb.value_of(journal.labels, pb.LABEL_CONTENT_TYPE)
        try:
            message.framing_for(content_type)
        except message.errors.UnknownContentType:
            return (
                f"{field}: journal {source.journal!r} has content-type {content_type!r},"
                " which no message framing reads"
            )
    return None


JOURNALS = SpecKind(
    crd=crd.JOURNAL,
    build=mapping.journal_spec,
    validate=pb.validate,
    decode=_decode_journal,
    item=lambda spec: spec.name,
    root=_journal_root,
    carry=_carry_suspend,
)
SHARDS = SpecKind(
    crd=crd.SHARD,
    build=mapping.shard_spec,
    validate=pc.validate,
    decode=_decode_shard,
    item=lambda spec: spec.id,
    root=_shard_root,
    carry=_carry_nothing,
    references=_shard_references,
)


def _meta(body: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = body.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def _strings(value: object) -> Mapping[str, str]:
    return value if isinstance(value, Mapping) else {}


def is_paused(body: Mapping[str, Any]) -> bool:
    """Whether the object carries ``gazette.dev/paused: "true"``."""
    return _strings(_meta(body).get("annotations")).get(crd.PAUSED_ANNOTATION) == "true"


def is_unmanaged(body: Mapping[str, Any]) -> bool:
    """Whether the object carries ``gazette.dev/unmanaged: "true"``."""
    return _strings(_meta(body).get("annotations")).get(crd.UNMANAGED_ANNOTATION) == "true"


def claim_of(body: Mapping[str, Any]) -> Claim:
    """The claim of the object ``body`` (on whatever key it names)."""
    meta = _meta(body)
    return Claim(
        namespace=str(meta.get("namespace", "")),
        name=str(meta.get("name", "")),
        uid=str(meta.get("uid", "")),
        created=str(meta.get("creationTimestamp", "")),
    )


def _target(body: Mapping[str, Any], kind: SpecKind, config: ReconcileConfig) -> tuple[str, str]:
    spec = body.get("spec")
    name = spec.get("name") if isinstance(spec, Mapping) else None
    if not isinstance(name, str) or not name:
        raise errors.InvalidSpecError("missing name", field="spec.name")
    return kind.root(_strings(_meta(body).get("labels")), config), name


def claim_key(body: Mapping[str, Any], kind: SpecKind, config: ReconcileConfig) -> str | None:
    """The etcd key the object names, or None when it names none (no name, no consumer).

    The claim is on the name alone: an object whose spec is otherwise invalid still holds
    its name, and says so in its status.
    """
    try:
        root, name = _target(body, kind, config)
    except errors.InvalidSpecError:
        return None
    return keyspace.item_key(root, name)


def _owner(me: Claim, claims: Iterable[Claim]) -> Claim:
    return min((me, *claims), key=Claim.order)


def recorded(body: Mapping[str, Any]) -> Recorded | None:
    """Where the object's status says its spec is (``status.etcdKey``), if it says."""
    st = body.get("status")
    if not isinstance(st, Mapping):
        return None
    key = st.get("etcdKey")
    if not isinstance(key, str) or not key:
        return None
    revision = st.get("modRevision")
    cluster = st.get("cluster")
    return Recorded(
        key,
        revision if isinstance(revision, int) and not isinstance(revision, bool) else 0,
        cluster if isinstance(cluster, str) else None,
    )


def _split(key: str) -> tuple[str, str] | None:
    # (root, name) of `<root>/items/<name>`: the first "/items/" (roots are clean paths
    # without one in practice; journal names may hold one).
    root, sep, name = key.partition("/items/")
    if not sep or not root.startswith("/") or not name:
        return None
    return root, name


async def release(
    body: Mapping[str, Any],
    kind: SpecKind,
    store: SpecStore,
    held: Recorded,
    claims: Iterable[Claim] = (),
) -> Move:
    """Remove ``held.key``, where object ``body`` kept its spec before it named another key.

    Left alone when another object declares it (``claims``, the object's own claim
    aside: the oldest of them takes it over), or when it changed since the object wrote
    it (its mod revision is not ``held.mod_revision`` and its value is not the spec the
    object declares, suspension aside), or when it holds no spec of the same name.
    Raises SpecStoreError when etcd fails.
    """
    me = claim_of(body)
    others = sorted((c for c in claims if c.uid != me.uid), key=Claim.order)
    if others:
        return Move(held.key, False, f"{held.key} is left to {others[0]}, which declares it")
    split = _split(held.key)
    if split is None:
        return Move(held.key, False, f"{held.key} is no item key: left alone", warning=True)
    root, name = split
    current = await store.get(root, name)
    if current is None:
        return Move(held.key, True, f"{held.key} is not in etcd")
    if (
        held.mod_revision
        and current.mod_revision != held.mod_revision
        and not _holds_declared(body, kind, current.value)
    ):
        return Move(
            held.key,
            False,
            f"{held.key} changed in etcd (mod revision {current.mod_revision}) since this "
            f"object wrote it (mod revision {held.mod_revision}): left in etcd, remove it "
            "by hand if it is no longer wanted",
            warning=True,
        )
    try:
        item = kind.item(kind.decode(current.value))
    except pbmessage.DecodeError:
        item = None
    if item != name:
        return Move(
            held.key,
            False,
            f"{held.key} holds no {kind.crd.kind} spec {name!r}: left alone",
            warning=True,
        )
    result = await store.apply(root, [keyspace.Change(name, None, current.mod_revision)])
    if not result.succeeded:
        return Move(
            held.key,
            False,
            f"{held.key} changed in etcd while it was being removed: left in etcd",
            warning=True,
        )
    logger.info("deleted %s at revision %d: its object moved", held.key, result.revision)
    return Move(
        held.key,
        True,
        f"removed {held.key} at revision {result.revision}",
        revision=result.revision,
    )


def _holds_declared(body: Mapping[str, Any], kind: SpecKind, value: bytes) -> bool:
    """Whether ``value`` is the spec ``body`` declares, but for what etcd owns (a journal's
    ``suspend``, which brokers write without the object knowing the new mod revision)."""
    spec = body.get("spec")
    try:
        desired = kind.build(spec if isinstance(spec, Mapping) else {}, _meta(body).get("labels"))
        current = kind.decode(value)
    except (errors.InvalidSpecError, pbmessage.DecodeError):
        return False
    kind.carry(current, desired)
    return bool(current == desired)


def _moved_from(body: Mapping[str, Any], key: str) -> Recorded | None:
    """The key the object held before, if it now names another one (and this cluster's)."""
    held = recorded(body)
    if held is None or held.key == key:
        return None
    cluster = _strings(_meta(body).get("labels")).get(crd.CLUSTER_LABEL)
    if held.cluster is not None and held.cluster != cluster:
        # Another cluster's operator wrote it, into its etcd: that one removes it.
        return None
    return held


async def _move(
    body: Mapping[str, Any],
    kind: SpecKind,
    store: SpecStore,
    held: Recorded,
    claimed: Claimed,
    outcome: Outcome,
) -> Outcome:
    try:
        moved = await release(body, kind, store, held, claimed(held.key))
    except errors.SpecStoreError as e:
        # The status keeps the old key, so the next attempt tries again.
        return Outcome(
            Reason.ETCD_ERROR,
            f"removing {held.key}, where this object's spec was before: {e}",
            key=held.key,
            retry=True,
        )
    return dataclasses.replace(outcome, moved=moved)


def declared(
    body: Mapping[str, Any], kind: SpecKind, config: ReconcileConfig
) -> tuple[str, str, pbmessage.Message]:
    """(root, name, validated spec) that object ``body`` declares.

    Raises InvalidSpecError or ``pb.ValidationError`` when it declares no valid spec.
    """
    root, name = _target(body, kind, config)
    spec = body.get("spec")
    desired = kind.build(spec if isinstance(spec, Mapping) else {}, _meta(body).get("labels"))
    kind.validate(desired)
    return root, name, desired


def drifted(
    body: Mapping[str, Any], kind: SpecKind, config: ReconcileConfig, held: bytes | None
) -> bool:
    """Whether etcd's value ``held`` (None: absent) of the object's key differs from its spec.

    False for an object that declares no valid spec or is paused: there is nothing
    to put back. What etcd owns (a journal's ``suspend``) is carried over first, as
    a write would carry it.
    """
    if is_paused(body):
        return False
    try:
        _, _, desired = declared(body, kind, config)
    except (errors.InvalidSpecError, pb.ValidationError):
        return False
    if held is None:
        return True
    try:
        current = kind.decode(held)
    except pbmessage.DecodeError:
        return True
    kind.carry(current, desired)
    return bool(current != desired)


async def reconcile(
    body: Mapping[str, Any],
    kind: SpecKind,
    config: ReconcileConfig,
    store: SpecStore,
    claims: Iterable[Claim] = (),
    *,
    claimed: Claimed = _nobody,
) -> Outcome:
    """Make etcd hold the spec that object ``body`` declares, if it may; say what happened.

    ``claims`` are the other objects naming the same key (the object's own claim may be
    among them); ``claimed`` answers them for any key, for the key the object held
    before when it moves (see the module's docstring). Never raises for etcd failures:
    they come back as ``EtcdError`` with ``retry`` set.
    """
    if is_paused(body):
        return Outcome(Reason.PAUSED, f"annotation {crd.PAUSED_ANNOTATION} is set: etcd untouched")
    try:
        root, name, desired = declared(body, kind, config)
    except (errors.InvalidSpecError, pb.ValidationError) as e:
        return Outcome(Reason.INVALID_SPEC, str(e))
    key = keyspace.item_key(root, name)
    held = _moved_from(body, key)
    me = claim_of(body)
    owner = _owner(me, claims)
    if owner != me:
        outcome = Outcome(
            Reason.RESOURCE_CONFLICT,
            f"{kind.crd.kind} {owner} declared {name!r} first; this object is ignored",
            key=key,
        )
    else:
        try:
            if kind.references is not None:
                problem = await kind.references(desired, config, store)
                if problem is not None:
                    # Retried: the journal may be applied just after the shard. A move waits
                    # for it too: the old spec stays until the new one can be written.
                    return Outcome(Reason.INVALID_SPEC, problem, key=key, retry=True)
            outcome = await _write(store, root, name, key, kind, desired)
        except errors.SpecStoreError as e:
            return Outcome(Reason.ETCD_ERROR, str(e), key=key, retry=True)
    if held is None or outcome.retry:
        return outcome
    # Make before break: the new key is written (or is another object's) before the old
    # one goes, so a moved shard is never without a spec.
    return await _move(body, kind, store, held, claimed, outcome)


async def _write(
    store: SpecStore,
    root: str,
    name: str,
    key: str,
    kind: SpecKind,
    desired: pbmessage.Message,
) -> Outcome:
    for _ in range(_WRITE_ATTEMPTS):
        current = await store.get(root, name)
        expect = keyspace.MUST_NOT_EXIST
        if current is not None:
            expect = current.mod_revision
            try:
                held = kind.decode(current.value)
            except pbmessage.DecodeError:
                # Garbage written by hand: overwrite it, guarded like any other value.
                logger.warning("overwriting undecodable value of %s", key)
            else:
                kind.carry(held, desired)
                if held == desired:
                    return Outcome(Reason.APPLIED, "etcd holds the spec", key, current.mod_revision)
        value = desired.SerializeToString(deterministic=True)
        result = await store.apply(root, [keyspace.Change(name, value, expect)])
        if result.succeeded:
            logger.info("wrote %s at revision %d", key, result.revision)
            return Outcome(Reason.APPLIED, "etcd holds the spec", key, result.revision, wrote=True)
        # Someone else wrote the key between our read and write: read it again.
        logger.info("%s changed under us (expected mod revision %d); retrying", key, expect)
    return Outcome(
        Reason.ETCD_ERROR,
        f"{key} kept changing under {_WRITE_ATTEMPTS} checked writes",
        key=key,
        retry=True,
    )


async def delete(
    body: Mapping[str, Any],
    kind: SpecKind,
    config: ReconcileConfig,
    store: SpecStore,
    claims: Iterable[Claim] = (),
    *,
    claimed: Claimed = _nobody,
) -> str:
    """Remove the spec of object ``body`` from etcd, if this object owns it; say what happened.

    Called only for ``deletionPolicy: Delete``. A paused object, or one that another
    object out-claims, leaves etcd alone. A key the object held before a move that did
    not finish (``status.etcdKey``) goes too, as :func:`release` would remove it. Raises
    SpecStoreError when etcd fails (the caller retries, holding its finalizer).
    """
    if is_paused(body):
        return f"paused: the spec stays in etcd ({crd.PAUSED_ANNOTATION})"
    try:
        root, name = _target(body, kind, config)
    except errors.InvalidSpecError as e:
        return f"nothing to delete: {e}"
    key = keyspace.item_key(root, name)
    held = _moved_from(body, key)
    if held is not None:
        moved = await release(body, kind, store, held, claimed(held.key))
        if moved.warning or not moved.deleted:
            logger.warning("%s", moved.message)
    owner = _owner(claim_of(body), claims)
    if owner != claim_of(body):
        return f"{key} belongs to {owner}: left in etcd"
    for _ in range(_WRITE_ATTEMPTS):
        current = await store.get(root, name)
        if current is None:
            return f"{key} is not in etcd"
        result = await store.apply(root, [keyspace.Change(name, None, current.mod_revision)])
        if result.succeeded:
            logger.info("deleted %s at revision %d", key, result.revision)
            return f"deleted {key} at revision {result.revision}"
    raise errors.SpecStoreError(f"{key} kept changing under {_WRITE_ATTEMPTS} checked deletes")

"""The ``status`` of Journal and Shard objects: what reconciling and serving look like there.

Pure functions, each answering the status an object should have, or None when it
already has it, so handling a settled object again patches nothing:

* :func:`status_for`, after a reconcile :class:`~gazette.operator.reconcile.Outcome`.
  Its condition is ``Ready`` on Journals (a journal declared in etcd is ready: brokers
  serve it) and ``Applied`` on Shards, whose ``Ready`` says more;
* :func:`shard_status_for`, from a Shard's replicas as the consumers report them in
  etcd (their assignments' ``ReplicaStatus``): ``primary``, ``standbys``,
  ``standbyCount``, ``route`` (members in slot order), ``replicas`` (member, slot,
  status code name, errors when FAILED), ``replicaStatus`` (the highest code, as
  ``gazctl shards list`` reduces it; ``primary`` and ``replicaStatus`` are empty when
  there is none) and the ``Ready`` condition: True when the slot-0
  replica is PRIMARY, else False with reason ``NoPrimary``, ``Failed``, ``Disabled``
  or, when the object's spec is not in etcd, its ``Applied`` reason.

* :func:`lag_status_for`, from a shard's lag as its primary reports it
  (:mod:`gazette.operator.lag`): ``lag`` (bytes unread over its sources),
  ``lagSources`` (per journal: ``readThrough``, ``writeHead``, ``lag``), ``lagCheckedAt``,
  and ``lagUnknown`` (why there is no number: no primary, a failed Stat...) instead of
  a stale ``lag``.

The two write disjoint conditions and fields: the reconcile handler owns ``Applied``
(``Ready`` on Journals), ``observedGeneration``, ``etcdKey``, ``modRevision`` and
``cluster`` (where the spec is, and whose etcd that is); the
controller's shard status (:mod:`gazette.operator.controller`) owns the rest, its
lag checks the ``lag*`` fields.
Conditions follow Kubernetes' conventions (``type``, ``status``, ``reason``,
``message``, ``observedGeneration``, ``lastTransitionTime``, which changes only when
``status`` flips); the CRD requires all but ``observedGeneration``.

Example::

    replicas = [status.Replica("zone-a", "consumer-1", 0, pc.ReplicaStatus.PRIMARY)]
    new = status.shard_status_for(body, replicas, now)
    # new["primary"] == "zone-a/consumer-1"; Ready is True, reason "Primary"
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Mapping, Sequence
from typing import Any

from gazette.consumer import lag as consumer_lag
from gazette.consumer import protocol as pc
from gazette.operator import crd, reconcile

__all__ = [
    "APPLIED",
    "LAG_FIELDS",
    "READY",
    "Replica",
    "ShardReason",
    "condition",
    "holds_spec",
    "lag_status_for",
    "ready_condition",
    "shard_status_for",
    "status_for",
    "timestamp",
]

READY = "Ready"
APPLIED = "Applied"
"""The condition of a Shard saying whether its ShardSpec is in etcd (the reconcile outcome)."""

_Code = pc.ReplicaStatus.Code
_CODE_NAMES = {int(v): k for k, v in _Code.items()}


def timestamp(now: datetime.datetime) -> str:
    """RFC 3339 in UTC at second precision, as the API server writes its own times."""
    return now.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def condition(status: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    """The condition of type ``kind`` of an object's ``status``, if any."""
    for cond in status.get("conditions") or ():
        if isinstance(cond, Mapping) and cond.get("type") == kind:
            return cond
    return None


def ready_condition(status: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The Ready condition of an object's ``status``, if any."""
    return condition(status, READY)


def _conditions(
    current: Mapping[str, Any],
    kind: str,
    ok: bool,
    reason: str,
    message: str,
    generation: object,
    now: datetime.datetime,
) -> list[Any]:
    """``current``'s conditions with the one of type ``kind`` set as given (first if new)."""
    old = condition(current, kind)
    cond: dict[str, Any] = {
        "type": kind,
        "status": "True" if ok else "False",
        "reason": reason,
        "message": message,
    }
    if generation is not None:
        cond["observedGeneration"] = generation
    if old is not None and old.get("status") == cond["status"] and old.get("lastTransitionTime"):
        cond["lastTransitionTime"] = old["lastTransitionTime"]
    else:
        cond["lastTransitionTime"] = timestamp(now)
    # In place: two writers (the reconcile handler, the controller's shard status) each set
    # their own condition; moving it first would make each undo the other's order.
    out: list[Any] = [c for c in current.get("conditions") or () if isinstance(c, Mapping)]
    for i, c in enumerate(out):
        if c.get("type") == kind:
            out[i] = cond
            return out
    return [cond, *out]


def _unchanged(current: Mapping[str, Any], new: Mapping[str, Any], kind: str) -> bool:
    if condition(current, kind) is None:
        return False
    return {k: current.get(k) for k in new} == new


def status_for(
    body: Mapping[str, Any],
    outcome: reconcile.Outcome,
    now: datetime.datetime,
    *,
    kind: str = READY,
) -> dict[str, Any] | None:
    """The status object ``body`` should have after ``outcome``, or None if it has it already.

    ``kind`` is the type of the condition the outcome sets (``Ready`` on Journals,
    ``Applied`` on Shards). ``etcdKey``, ``modRevision`` and ``cluster`` say where the
    object's spec is: set by an ``Applied`` outcome (``cluster`` is the object's
    ``gazette.dev/cluster``, whose operator wrote it), cleared (None, which a merge patch
    removes) when the object moved away from the key it recorded without holding a new
    one, and kept through other outcomes (a paused or invalid object, a failure).
    """
    meta = body.get("metadata") or {}
    current: Mapping[str, Any] = body.get("status") or {}
    generation = meta.get("generation")
    conditions = _conditions(
        current, kind, outcome.ready, str(outcome.reason), outcome.message, generation, now
    )
    new: dict[str, Any] = {"conditions": conditions}
    if generation is not None:
        new["observedGeneration"] = generation
    held = (current.get("etcdKey"), current.get("modRevision"), current.get("cluster"))
    if outcome.reason is reconcile.Reason.APPLIED and outcome.key:
        labels = meta.get("labels") or {}
        held = (outcome.key, outcome.mod_revision or None, labels.get(crd.CLUSTER_LABEL))
    elif outcome.moved is not None and outcome.moved.key == held[0]:
        held = (None, None, None)
    for name, value in zip(("etcdKey", "modRevision", "cluster"), held, strict=True):
        if value or name in current:
            new[name] = value or None

    if _unchanged(current, new, kind):
        return None
    return new


class ShardReason:
    """Reasons of a Shard's Ready condition (beside the Applied reasons it passes on)."""

    PRIMARY = "Primary"
    NO_PRIMARY = "NoPrimary"
    FAILED = "Failed"
    DISABLED = "Disabled"


@dataclasses.dataclass(frozen=True, slots=True, order=True)
class Replica:
    """One assignment of a shard, as etcd holds it: member, slot, ReplicaStatus."""

    zone: str
    suffix: str
    slot: int
    code: int = _Code.IDLE
    errors: tuple[str, ...] = ()

    @property
    def member(self) -> str:
        return f"{self.zone}/{self.suffix}"

    @property
    def code_name(self) -> str:
        return _CODE_NAMES.get(self.code, str(self.code))

    def as_status(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "member": self.member,
            "zone": self.zone,
            "suffix": self.suffix,
            "slot": self.slot,
            "status": self.code_name,
        }
        if self.code == _Code.FAILED:
            out["errors"] = list(self.errors)
        return out


# An object whose spec never made it to etcd under its key (refused, or the key is
# another object's): the assignments there, if any, are not its replicas.
_NOT_OWNED = frozenset(
    {str(reconcile.Reason.INVALID_SPEC), str(reconcile.Reason.RESOURCE_CONFLICT)}
)


def holds_spec(applied: Mapping[str, Any]) -> bool:
    """Whether an object whose ``Applied`` condition is ``applied`` has its spec in etcd.

    Refused (InvalidSpec) or another object's key (ResourceConflict): the assignments
    under that key, and their lag, are not the object's.
    """
    return str(applied.get("reason")) not in _NOT_OWNED


def _ready(replicas: Sequence[Replica], disabled: bool) -> tuple[bool, str, str]:
    """(ready, reason, message) of a shard with these replicas (in slot order)."""
    primary = next((r for r in replicas if r.slot == 0), None)
    standbys = sum(1 for r in replicas if r.slot > 0 and r.code == _Code.STANDBY)
    if primary is not None and primary.code == _Code.PRIMARY:
        return True, ShardReason.PRIMARY, f"primary {primary.member}, {standbys} ready standby(s)"
    failed = [r for r in replicas if r.code == _Code.FAILED]
    if failed:
        first = failed[0]
        why = "; ".join(first.errors) or "no error given"
        return (
            False,
            ShardReason.FAILED,
            f"replica {first.member} (slot {first.slot}) FAILED: {why}",
        )
    if disabled:
        return False, ShardReason.DISABLED, "spec.disable is set: no replica is assigned"
    if not replicas:
        return False, ShardReason.NO_PRIMARY, "no replica is assigned (is a consumer running?)"
    if primary is None:
        return False, ShardReason.NO_PRIMARY, "no replica is in slot 0"
    return (
        False,
        ShardReason.NO_PRIMARY,
        f"slot-0 replica {primary.member} is {primary.code_name}, not PRIMARY yet",
    )


def shard_status_for(
    body: Mapping[str, Any], replicas: Sequence[Replica], now: datetime.datetime
) -> dict[str, Any] | None:
    """The status fields a Shard ``body`` should have with ``replicas``, or None if it has them.

    ``replicas`` are the assignments under the object's key, in any order. Nothing is
    said (None) before the reconcile handler reported an ``Applied`` condition; an object
    whose spec is not in etcd (InvalidSpec, ResourceConflict) shows no replicas and is
    not Ready, with the Applied reason.
    """
    meta = body.get("metadata") or {}
    current: Mapping[str, Any] = body.get("status") or {}
    applied = condition(current, APPLIED)
    if applied is None:
        return None
    spec = body.get("spec")
    disabled = isinstance(spec, Mapping) and spec.get("disable") is True
    ordered = sorted(replicas, key=lambda r: (r.slot, r.zone, r.suffix))
    if str(applied.get("reason")) in _NOT_OWNED:
        ordered = []
        ok, reason, message = (
            False,
            str(applied.get("reason")),
            f"the spec is not in etcd: {applied.get('message', '')}",
        )
    else:
        ok, reason, message = _ready(ordered, disabled)
    primary = next((r.member for r in ordered if r.slot == 0 and r.code == _Code.PRIMARY), "")
    standbys = [r.member for r in ordered if r.slot > 0 and r.code == _Code.STANDBY]
    reduced = max((r.code for r in ordered), default=None)
    new: dict[str, Any] = {
        "primary": primary,
        "standbys": standbys,
        "standbyCount": len(standbys),
        "route": [r.member for r in ordered],
        "replicas": [r.as_status() for r in ordered],
        "replicaStatus": "" if reduced is None else _CODE_NAMES.get(reduced, str(reduced)),
        "conditions": _conditions(current, READY, ok, reason, message, meta.get("generation"), now),
    }
    if _unchanged(current, new, READY):
        return None
    return new


LAG_FIELDS = ("lag", "lagSources", "lagUnknown")
"""The fields :func:`lag_status_for` compares; ``lagCheckedAt`` changes with every check."""


def _parse_timestamp(text: object) -> datetime.datetime | None:
    if not isinstance(text, str):
        return None
    try:
        return datetime.datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.UTC)
    except ValueError:
        return None


def lag_status_for(
    body: Mapping[str, Any],
    found: consumer_lag.ShardLag,
    now: datetime.datetime,
    *,
    refresh: float,
) -> dict[str, Any] | None:
    """The lag fields a Shard ``body`` should have after a check found ``found``, or None.

    ``lag`` is set only when every part of it is known (the Stat answered and every
    source's write head was read); otherwise it is removed (None, which a merge patch
    deletes) and ``lagUnknown`` says why, so a number shown is never an old one.
    ``lagSources`` lists each source (``journal``, ``readThrough``, and ``writeHead``
    and ``lag`` or ``error``), when the primary answered. ``lagCheckedAt`` is the
    check's time. None when the fields are as found and were written less than
    ``refresh`` seconds ago: an unchanged lag is not rewritten on every check.
    """
    current: Mapping[str, Any] = body.get("status") or {}
    total = found.total
    sources: list[dict[str, Any]] | None = None
    unknown = found.error or None
    if not found.error:
        sources = []
        for s in found.sources:
            one: dict[str, Any] = {"journal": s.journal, "readThrough": s.read_through}
            if s.lag is not None:
                one.update(writeHead=s.write_head, lag=s.lag)
            else:
                one["error"] = s.error
                unknown = unknown or f"write head of {s.journal} unknown: {s.error}"
            sources.append(one)
    new: dict[str, Any] = {"lag": total, "lagSources": sources, "lagUnknown": unknown}
    checked = _parse_timestamp(current.get("lagCheckedAt"))
    if (
        all(current.get(k) == v for k, v in new.items())
        and checked is not None
        and (now - checked).total_seconds() < refresh
    ):
        return None
    new["lagCheckedAt"] = timestamp(now)
    return new

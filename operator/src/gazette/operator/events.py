"""Kubernetes Events of Journal and Shard objects: which changes are worth telling.

Conditions say where an object stands; Events say what happened to it, in
``kubectl describe`` and ``kubectl events``. One is posted on each transition of
the reconcile condition (``Ready`` on Journals, ``Applied`` on Shards):

* ``Warning`` when it becomes ``InvalidSpec`` or ``ResourceConflict`` (again when
  the message changes: a fixed spec with another mistake), ``EtcdError`` or
  ``NoCluster`` (once per outage, however often the retries fail);
* ``Normal`` ``Applied`` when the spec reaches etcd: the first time, and on every
  write of a new value (an edit, or a spec put back after an out-of-band edit);
  ``Normal`` ``Paused`` when the object is paused.

Beside it, :func:`for_move` tells what became of the key an object held before it
named another (:class:`~gazette.operator.reconcile.Move`): ``Normal`` ``Moved`` when the
old key was removed, ``Warning`` ``KeyLeftBehind`` when it was left with nothing
declaring it.

Pure functions: :func:`for_outcome` answers the Event, the caller delivers it
(``kopf.event`` in handlers, :meth:`gazette.operator.kube.KubeClient.post_event`
elsewhere), so a large ``kubectl apply`` costs one Event an object, not one a pass.

Example::

    event = events.for_outcome(body, outcome, status.READY)
    if event is not None:
        kopf.event(body, type=event.type, reason=event.reason, message=event.message)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from gazette.operator import reconcile, status

__all__ = ["NORMAL", "WARNING", "WARNING_REASONS", "Event", "for_move", "for_outcome"]

NORMAL = "Normal"
WARNING = "Warning"

_R = reconcile.Reason
WARNING_REASONS = frozenset({_R.INVALID_SPEC, _R.RESOURCE_CONFLICT, _R.ETCD_ERROR, _R.NO_CLUSTER})
"""Reasons of the reconcile condition that are posted as Warning events."""
# Reasons whose messages vary from one failed attempt to the next (error details):
# one Event when the reason starts, not one per retry.
_BY_REASON_ONLY = frozenset({_R.ETCD_ERROR, _R.NO_CLUSTER, _R.PAUSED})


@dataclasses.dataclass(frozen=True, slots=True)
class Event:
    """A Kubernetes Event about one object: ``type`` Normal or Warning, a reason, a message."""

    type: str
    reason: str
    message: str


def for_outcome(
    body: Mapping[str, Any], outcome: reconcile.Outcome, condition: str = status.READY
) -> Event | None:
    """The Event that reconcile ``outcome`` of object ``body`` calls for, if any.

    ``body`` is the object as it was before the outcome (its ``condition`` says what
    was last reported); ``condition`` is the type of the reconcile condition.
    """
    old = status.condition(body.get("status") or {}, condition) or {}
    reason = outcome.reason
    same_reason = old.get("reason") == str(reason)
    if reason is _R.APPLIED:
        if outcome.wrote:
            return Event(
                NORMAL,
                str(reason),
                f"wrote {outcome.key} at etcd revision {outcome.mod_revision}",
            )
        if same_reason:
            return None
        return Event(
            NORMAL,
            str(reason),
            f"etcd holds the spec at {outcome.key} (revision {outcome.mod_revision})",
        )
    if same_reason and (reason in _BY_REASON_ONLY or old.get("message") == outcome.message):
        return None
    kind = WARNING if reason in WARNING_REASONS else NORMAL
    return Event(kind, str(reason), outcome.message)


def for_move(outcome: reconcile.Outcome) -> Event | None:
    """The Event telling what became of the key the object held before ``outcome``, if any.

    None when nothing moved, or the old key was left to the object declaring it now.
    """
    moved = outcome.moved
    if moved is None:
        return None
    if moved.warning:
        return Event(WARNING, "KeyLeftBehind", moved.message)
    if not moved.deleted:
        return None
    where = f" to {outcome.key}" if outcome.key and outcome.key != moved.key else ""
    return Event(NORMAL, "Moved", f"the spec moved from {moved.key}{where}: {moved.message}")

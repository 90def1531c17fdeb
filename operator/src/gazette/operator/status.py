"""The ``status`` of Journal and Shard objects: what a reconcile outcome looks like there.

Pure functions. :func:`status_for` answers the status an object should have after
an :class:`~gazette.operator.reconcile.Outcome`, or None when it already has it,
so a periodic pass over settled objects patches nothing.

The ``Ready`` condition follows Kubernetes' conventions (``type``, ``status``,
``reason``, ``message``, ``observedGeneration``, ``lastTransitionTime``, which
changes only when ``status`` flips).
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any

from gazette.operator import reconcile

__all__ = ["READY", "ready_condition", "status_for", "timestamp"]

READY = "Ready"


def timestamp(now: datetime.datetime) -> str:
    """RFC 3339 in UTC at second precision, as the API server writes its own times."""
    return now.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def ready_condition(status: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The Ready condition of an object's ``status``, if any."""
    for cond in status.get("conditions") or ():
        if isinstance(cond, Mapping) and cond.get("type") == READY:
            return cond
    return None


def status_for(
    body: Mapping[str, Any], outcome: reconcile.Outcome, now: datetime.datetime
) -> dict[str, Any] | None:
    """The status object ``body`` should have after ``outcome``, or None if it has it already.

    ``modRevision`` and ``etcdKey`` keep their last known values through outcomes
    that don't know them (a paused or invalid object).
    """
    meta = body.get("metadata") or {}
    current: Mapping[str, Any] = body.get("status") or {}
    generation = meta.get("generation")
    old = ready_condition(current)
    cond: dict[str, Any] = {
        "type": READY,
        "status": "True" if outcome.ready else "False",
        "reason": str(outcome.reason),
        "message": outcome.message,
    }
    if generation is not None:
        cond["observedGeneration"] = generation
    if old is not None and old.get("status") == cond["status"] and old.get("lastTransitionTime"):
        cond["lastTransitionTime"] = old["lastTransitionTime"]
    else:
        cond["lastTransitionTime"] = timestamp(now)

    others = [
        c
        for c in current.get("conditions") or ()
        if isinstance(c, Mapping) and c.get("type") != READY
    ]
    new: dict[str, Any] = {"conditions": [cond, *others]}
    if generation is not None:
        new["observedGeneration"] = generation
    key = outcome.key or current.get("etcdKey")
    if key:
        new["etcdKey"] = key
    revision = outcome.mod_revision or current.get("modRevision")
    if revision:
        new["modRevision"] = revision

    if old is not None and {k: current.get(k) for k in new} == new:
        return None
    return new

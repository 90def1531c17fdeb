from __future__ import annotations

import datetime

from operator_objects import journal

from gazette.operator import reconcile, status

T0 = datetime.datetime(2030, 1, 1, tzinfo=datetime.UTC)
T1 = T0 + datetime.timedelta(minutes=1)
APPLIED = reconcile.Outcome(reconcile.Reason.APPLIED, "ok", "/k", 7)


def test_transition_time_moves_only_when_status_flips() -> None:
    first = status.status_for(journal(), APPLIED, T0)
    assert first is not None
    assert status.status_for(journal(status=first), APPLIED, T1) is None

    paused = reconcile.Outcome(reconcile.Reason.PAUSED, "paused")
    second = status.status_for(journal(status=first), paused, T1)
    assert second is not None
    cond = status.ready_condition(second)
    assert cond is not None
    assert (cond["status"], cond["lastTransitionTime"]) == ("False", "2030-01-01T00:01:00Z")
    # What a paused outcome doesn't know is kept.
    assert (second["modRevision"], second["etcdKey"]) == (7, "/k")

    conflict = reconcile.Outcome(reconcile.Reason.RESOURCE_CONFLICT, "taken", "/k")
    third = status.status_for(journal(status=second), conflict, T1 + datetime.timedelta(minutes=1))
    assert third is not None
    cond = status.ready_condition(third)
    assert cond is not None
    assert cond["lastTransitionTime"] == "2030-01-01T00:01:00Z"
    assert cond["reason"] == "ResourceConflict"


def test_new_generation_is_observed() -> None:
    first = status.status_for(journal(), APPLIED, T0)
    assert first is not None
    again = status.status_for(journal(generation=2, status=first), APPLIED, T1)
    assert again is not None
    assert again["observedGeneration"] == 2


def test_other_conditions_are_kept() -> None:
    other = {"type": "Other", "status": "True"}
    got = status.status_for(journal(status={"conditions": [other]}), APPLIED, T0)
    assert got is not None
    assert got["conditions"][1] == other

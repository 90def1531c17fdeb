"""A Shard's lag fields from one check: pure computation (the controller's lag rounds apply it)."""

from __future__ import annotations

import datetime
from typing import Any

from operator_objects import shard

from gazette.consumer import lag
from gazette.operator import status

T0 = datetime.datetime(2030, 1, 1, tzinfo=datetime.UTC)
REFRESH = 300.0


def checked(body: dict[str, Any], new: dict[str, Any] | None) -> dict[str, Any]:
    """``body`` once ``new`` was merge-patched into its status (None removes a field)."""
    assert new is not None
    merged = {**body.get("status", {}), **new}
    return body | {"status": {k: v for k, v in merged.items() if v is not None}}


def behind(read: int, head: int, journal: str = "examples/words/part-000") -> lag.ShardLag:
    return lag.ShardLag((lag.SourceLag(journal, read, head),))


def test_a_known_lag_is_its_total_over_sources_with_each_source_detailed() -> None:
    found = lag.ShardLag(
        (lag.SourceLag("a/one", 100, 250), lag.SourceLag("a/two", 40, 40)),
    )
    new = status.lag_status_for(shard(), found, T0, refresh=REFRESH)
    assert new == {
        "lag": 150,
        "lagSources": [
            {"journal": "a/one", "readThrough": 100, "writeHead": 250, "lag": 150},
            {"journal": "a/two", "readThrough": 40, "writeHead": 40, "lag": 0},
        ],
        "lagUnknown": None,
        "lagCheckedAt": "2030-01-01T00:00:00Z",
    }


def test_no_primary_removes_the_number_and_says_why() -> None:
    body = checked(shard(), status.lag_status_for(shard(), behind(0, 500), T0, refresh=REFRESH))
    assert body["status"]["lag"] == 500
    later = T0 + datetime.timedelta(seconds=15)
    new = status.lag_status_for(
        body, lag.ShardLag(error="NO_SHARD_PRIMARY"), later, refresh=REFRESH
    )
    # None: a JSON merge patch removes the old number and its sources.
    assert new == {
        "lag": None,
        "lagSources": None,
        "lagUnknown": "NO_SHARD_PRIMARY",
        "lagCheckedAt": "2030-01-01T00:00:15Z",
    }
    assert "lag" not in checked(body, new)["status"]


def test_an_unknown_write_head_leaves_no_partial_sum() -> None:
    found = lag.ShardLag(
        (lag.SourceLag("a/one", 10, 20), lag.SourceLag("a/two", 5, None, "JOURNAL_NOT_FOUND")),
    )
    new = status.lag_status_for(shard(), found, T0, refresh=REFRESH)
    assert new is not None
    assert new["lag"] is None
    assert new["lagUnknown"] == "write head of a/two unknown: JOURNAL_NOT_FOUND"
    assert new["lagSources"][1] == {
        "journal": "a/two",
        "readThrough": 5,
        "error": "JOURNAL_NOT_FOUND",
    }


def test_an_unchanged_lag_is_rewritten_only_once_its_check_time_is_refresh_old() -> None:
    body = checked(shard(), status.lag_status_for(shard(), behind(7, 7), T0, refresh=REFRESH))
    assert body["status"]["lag"] == 0
    soon = T0 + datetime.timedelta(seconds=REFRESH - 1)
    assert status.lag_status_for(body, behind(7, 7), soon, refresh=REFRESH) is None
    # A change is written at once, whatever the time.
    moved = status.lag_status_for(body, behind(7, 9), soon, refresh=REFRESH)
    assert moved is not None and moved["lag"] == 2
    # Unchanged but old: written again, so lagCheckedAt never lags far behind the checks.
    late = T0 + datetime.timedelta(seconds=REFRESH)
    again = status.lag_status_for(body, behind(7, 7), late, refresh=REFRESH)
    assert again is not None and again["lagCheckedAt"] == "2030-01-01T00:05:00Z"
    # An unknown lag settles the same way.
    unknown = checked(
        body, status.lag_status_for(body, lag.ShardLag(error="UNAVAILABLE"), soon, refresh=REFRESH)
    )
    assert (
        status.lag_status_for(unknown, lag.ShardLag(error="UNAVAILABLE"), soon, refresh=REFRESH)
        is None
    )


def test_the_lag_fields_are_disjoint_from_the_replicas_status() -> None:
    # The two writers (replica watch, lag rounds) never undo each other's fields.
    found = status.lag_status_for(shard(), behind(0, 1), T0, refresh=REFRESH)
    assert found is not None
    assert set(found) == {*status.LAG_FIELDS, "lagCheckedAt"}
    assert not set(found) & {"primary", "standbys", "route", "replicas", "conditions"}

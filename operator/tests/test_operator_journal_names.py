"""The operator refuses journal names that would climb out of a fragment store."""

from __future__ import annotations

import pytest
from operator_objects import JOURNAL_SPEC, journal

from gazette.operator import reconcile, testing

CONFIG = reconcile.ReconcileConfig(broker_root="/g/cluster", consumers_root="/g/consumers")


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("../escape", "Name: cannot have a '..' path segment (../escape)"),
        ("/abs/journal", "Name: cannot begin with '/' (/abs/journal)"),
        ("a//journal", "Name: must be a clean path (a//journal)"),
    ],
)
async def test_escaping_journal_name_is_invalid(name: str, message: str) -> None:
    store = testing.MemorySpecStore()
    body = journal() | {"spec": {**JOURNAL_SPEC, "name": name}}
    outcome = await reconcile.reconcile(body, reconcile.JOURNALS, CONFIG, store)
    assert outcome.reason is reconcile.Reason.INVALID_SPEC
    assert outcome.message == message
    assert store.values == {}

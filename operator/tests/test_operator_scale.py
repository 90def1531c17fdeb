"""What keeps the operator's pace with many objects (bench_operator) without changing what
it does: kopf's settings, and the cheaper diff base."""

from __future__ import annotations

from typing import Any, cast

import kopf
import pytest
from operator_objects import journal

from gazette.operator import crd, handlers


def test_kopf_workers_and_posters_are_bounded() -> None:
    settings = handlers.operator_settings()
    assert settings.queueing.worker_limit is not None
    assert settings.posting.worker_limit is not None
    assert settings.queueing.idle_timeout < 5.0  # kopf's default holds a slot 5 s per object.


def _bodies() -> list[dict[str, Any]]:
    labelled = journal()
    labelled["metadata"].update(
        annotations={
            crd.PAUSED_ANNOTATION: "true",
            "kubectl.kubernetes.io/last-applied-configuration": "{}",
            "kopf.gazette.dev/apply_journal": "{}",
        },
        managedFields=[{"manager": "kubectl", "fieldsV1": {"f:spec": {"f:name": {}}}}],
        generation=4,
    )
    labelled["status"] = {
        "conditions": [{"type": "Ready", "status": "True"}],
        crd.LAST_HANDLED_FIELD: '{"spec": {}}',
    }
    bare = {"apiVersion": "gazette.dev/v1alpha1", "kind": "Journal", "spec": {"name": "a/b"}}
    return [journal(), labelled, bare, {"metadata": {}, "status": {"x": 1}}]


@pytest.mark.parametrize("raw", _bodies())
@pytest.mark.parametrize("extra", [None, ["status.conditions"]])
def test_diff_base_is_kopfs_own(raw: dict[str, Any], extra: list[str] | None) -> None:
    ours = handlers.operator_settings().persistence.diffbase_storage
    kopfs = kopf.StatusDiffBaseStorage(field=f"status.{crd.LAST_HANDLED_FIELD}")
    body = kopf.Body(cast("kopf.RawBody", raw))
    assert ours.build(body=body, extra_fields=extra) == kopfs.build(body=body, extra_fields=extra)
    # And nothing of the body is shared with the essence (it is kept across events).
    essence = ours.build(body=body)
    if "spec" in essence:
        assert essence["spec"] is not raw.get("spec")

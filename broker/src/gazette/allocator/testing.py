"""Test helpers of the allocator: in-memory key/values and a toy decoder.

``build_state`` makes a :class:`~gazette.allocator.state.State` without etcd,
for unit tests, property tests and benchmarks of the solver, with the toy
:class:`JSONDecoder` values of Gazette's own allocator tests. Tests of a
broker keyspace (journals) live with the broker.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable
from typing import Any

from gazette.allocator import keys
from gazette.allocator.state import IsConsistentFn, State, always_consistent


@dataclasses.dataclass(frozen=True, slots=True)
class FakeKeyValue:
    key: str
    value: bytes = b""
    create_revision: int = 1
    mod_revision: int = 1
    version: int = 1
    lease: int = 0
    decoded: Any = None


class JSONDecoder:
    """Decodes the toy values of Gazette's allocator tests: ``{"R": n, "E": bool}``.

    Items: R = desired replication. Members: R = item limit, E = exiting.
    Assignments: the raw value as text ("" or e.g. "consistent").
    """

    def decode_item(self, item_id: str, value: bytes) -> keys.ItemValue:
        d = json.loads(value or b"{}")
        return keys.ItemValue(d, int(d.get("R", 0)))

    def decode_member(self, zone: str, suffix: str, value: bytes) -> keys.MemberValue:
        d = json.loads(value or b"{}")
        return keys.MemberValue(d, int(d.get("R", 0)), bool(d.get("E", False)))

    def decode_assignment(
        self, item_id: str, zone: str, suffix: str, slot: int, value: bytes
    ) -> Any:
        return value.decode()


def json_is_consistent(_item: keys.Item, kv: keys.KeyValue, _all: Any) -> bool:
    """Consistent iff the assignment's value says so (Gazette's test convention)."""
    return bool(kv.value == b"consistent")


def build_state(
    root: str,
    local_key: str,
    members: Iterable[tuple[str, str, int] | tuple[str, str, int, bool]],
    items: Iterable[tuple[str, int]],
    assignments: Iterable[tuple[str, str, str, int]] = (),
    is_consistent: IsConsistentFn = always_consistent,
    consistent: bool = True,
) -> State:
    """A State of members (zone, suffix, limit[, exiting]), items (id, replication)
    and assignments (item, zone, suffix, slot). Create revisions follow argument order."""
    entries: list[FakeKeyValue] = []
    rev = 1
    for m in members:
        zone, suffix, limit = m[0], m[1], m[2]
        exiting = bool(m[3]) if len(m) > 3 else False
        entries.append(
            FakeKeyValue(
                keys.member_key(root, zone, suffix),
                create_revision=rev,
                mod_revision=rev,
                lease=rev,
                decoded=keys.Member(zone, suffix, None, limit, exiting),
            )
        )
        rev += 1
    for item_id, r in items:
        entries.append(
            FakeKeyValue(
                keys.item_key(root, item_id),
                create_revision=rev,
                mod_revision=rev,
                decoded=keys.Item(item_id, None, r),
            )
        )
        rev += 1
    value = b"consistent" if consistent else b""
    for item_id, zone, suffix, slot in assignments:
        a = keys.Assignment(item_id, zone, suffix, slot, value.decode())
        entries.append(
            FakeKeyValue(
                keys.assignment_key(root, a),
                value=value,
                create_revision=rev,
                mod_revision=rev,
                decoded=a,
            )
        )
        rev += 1
    entries.sort(key=lambda kv: kv.key)
    return State(root, local_key, entries, is_consistent, revision=rev)

"""Test helpers of the allocator: in-memory key/values and a toy decoder.

``build_state`` makes a :class:`~gazette.allocator.state.State` without etcd,
for unit tests, property tests and benchmarks of the solver;
``journal_spec`` and ``broker_spec`` make the smallest specs ``pb.validate``
accepts, for tests of the broker keyspace.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable
from typing import Any

from gazette.allocator import keys
from gazette.allocator.state import IsConsistentFn, State, always_consistent
from gazette.broker import protocol as pb


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


def journal_spec(name: str, replication: int) -> pb.JournalSpec:
    """A valid JournalSpec (``pb.validate`` passes) of ``name`` and ``replication``."""
    spec = pb.JournalSpec(name=name, replication=replication)
    spec.fragment.length = 1 << 20
    spec.fragment.compression_codec = pb.NONE
    spec.fragment.refresh_interval.CopyFrom(pb.duration_from_seconds(60))
    pb.validate(spec)
    return spec


def broker_spec(zone: str, suffix: str, limit: int, exiting: bool = False) -> pb.BrokerSpec:
    """A valid BrokerSpec of member ``zone#suffix``, served at ``http://<suffix>:8080``."""
    spec = pb.BrokerSpec(journal_limit=limit, exiting=exiting)
    spec.process_spec.id.zone, spec.process_spec.id.suffix = zone, suffix
    spec.process_spec.endpoint = f"http://{suffix}:8080"
    pb.validate(spec)
    return spec

"""Fakes and fixtures shared by the message-layer tests."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field
from typing import Any

from gazette import message
from gazette.broker import protocol as pb
from gazette.broker.client import errors as client_errors
from gazette.message import json_framing

JOURNAL = "test/journal"


class TMsg:
    """A minimal Message: a UUID and a string (Gazette's ``testMsg``)."""

    __slots__ = ("err", "s", "uuid")

    def __init__(self, u: uuid.UUID = message.ZERO_UUID, s: str = "", err: Exception | None = None):
        self.uuid, self.s, self.err = u, s, err

    def get_uuid(self) -> uuid.UUID:
        return self.uuid

    def set_uuid(self, u: uuid.UUID) -> None:
        self.uuid = u

    def new_acknowledgement(self, journal: str) -> TMsg:
        return TMsg()

    def validate(self) -> None:
        if self.err is not None:
            raise self.err

    # JSON framing, as Go would encode struct{UUID uuid.UUID; Str string `json:",omitempty"`}.
    def marshal_json(self) -> bytes:
        doc: dict[str, Any] = {"UUID": str(self.uuid)}
        if self.s:
            doc["Str"] = self.s
        return json_framing.encode_json(doc)

    def unmarshal_json(self, data: bytes) -> None:
        doc = json_framing.decode_json(data)
        self.uuid = uuid.UUID(doc["UUID"]) if "UUID" in doc else message.ZERO_UUID
        self.s = doc.get("Str", "")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TMsg) and (self.uuid, self.s) == (other.uuid, other.s)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"TMsg({self.uuid}, {self.s!r})"


def spec(name: str = JOURNAL, content_type: str = pb.CONTENT_TYPE_JSON_LINES) -> pb.JournalSpec:
    s = pb.JournalSpec(name=name)
    s.labels.CopyFrom(pb.label_set([(pb.LABEL_CONTENT_TYPE, content_type)]))
    return s


class Generator:
    """Envelopes of one journal, 100 bytes each with 2 bytes of dead space between them."""

    def __init__(self, journal: str = JOURNAL) -> None:
        self.spec = pb.JournalSpec(name=journal)
        self.offset = 0

    def __call__(self, producer: bytes, clock: int, flags: int) -> message.Envelope:
        env = message.Envelope(
            self.spec,
            self.offset,
            self.offset + 100,
            TMsg(message.build_uuid(producer, clock, flags), str(clock)),
        )
        self.offset += 102
        return env


def zero_env(gen: Generator) -> message.Envelope:
    env = gen(bytes(6), 0, 0)
    env.message.set_uuid(message.ZERO_UUID)
    return env


async def aiter_of(envs: Iterable[message.Envelope]) -> AsyncIterator[message.Envelope]:
    for env in envs:
        yield env


class FakeReader:
    """A ChunkReader scripted with content, offset jumps and errors.

    ``script`` items: bytes (content at the current offset), ``("jump", to)``
    (an OffsetJump), or an exception to raise. Once exhausted, ``read()``
    returns b"" (end_offset reached) or, with ``blocking=False``, raises
    OffsetNotYetAvailable.
    """

    def __init__(
        self,
        script: Iterable[Any],
        offset: int = 0,
        *,
        non_blocking_end: bool = False,
        journal: str = JOURNAL,
    ) -> None:
        self.script = list(script)
        self._offset = offset
        self.non_blocking_end = non_blocking_end
        self.journal = journal
        self.reads = 0
        self.closed = False

    @property
    def offset(self) -> int:
        return self._offset

    async def read(self) -> bytes:
        self.reads += 1
        if not self.script:
            if self.non_blocking_end:
                raise client_errors.status_error(pb.OFFSET_NOT_YET_AVAILABLE, journal=self.journal)
            return b""
        item = self.script.pop(0)
        if isinstance(item, bytes):
            self._offset += len(item)
            return item
        if isinstance(item, tuple):
            _, to = item
            frm, self._offset = self._offset, to
            raise client_errors.OffsetJump(self.journal, frm, to)
        raise item

    async def close(self) -> None:
        self.closed = True


@dataclass
class FakeAppend:
    """Enough of client.AsyncAppend for the Publisher: ``with``, ``write``, ``journal``."""

    journal: str
    data: bytearray = field(default_factory=bytearray)
    _checkpoint: int = 0

    def __enter__(self) -> FakeAppend:
        self._checkpoint = len(self.data)
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc is not None:
            del self.data[self._checkpoint :]

    def write(self, data: bytes) -> None:
        self.data += data


class FakeAppends:
    """Records appends per journal, one FakeAppend per journal (as one open batch)."""

    def __init__(self) -> None:
        self.appends: dict[str, FakeAppend] = {}
        self.order: list[str] = []

    def start_append(self, journal: str) -> FakeAppend:
        self.order.append(journal)
        return self.appends.setdefault(journal, FakeAppend(journal))

    def content(self, journal: str) -> bytes:
        return bytes(self.appends[journal].data) if journal in self.appends else b""

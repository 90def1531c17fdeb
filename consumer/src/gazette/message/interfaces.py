"""What a message is, and the small records passed around with messages.

Gazette `message/interfaces.go`: a :class:`Message` is any object that
keeps the UUID the Publisher gives it and can make an empty acknowledgement
of its own type. A type which cannot keep a UUID returns :data:`ZERO_UUID`
and ignores ``set_uuid``; its messages are then processed at least once
rather than exactly once.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable
from typing import Protocol, TypeVar

from gazette.broker import protocol as pb

__all__ = [
    "AckIntent",
    "Envelope",
    "MappingFunc",
    "Message",
    "NewMessageFunc",
    "ProducerState",
]


class Message(Protocol):
    """A record of a journal, carrying the UUID Gazette sequences it with."""

    def get_uuid(self) -> uuid.UUID:
        """The UUID last set (the zero UUID if the type cannot keep one)."""
        ...

    def set_uuid(self, u: uuid.UUID) -> None: ...

    def new_acknowledgement(self, journal: str) -> Message:
        """A fresh, otherwise empty message of this type, to acknowledge a transaction in ``journal``."""
        ...


M = TypeVar("M", bound=Message)
M_contra = TypeVar("M_contra", contravariant=True)

#: Maps a message to the journal it is published to, and that journal's content-type.
MappingFunc = Callable[[M_contra], tuple[str, str]]
#: Makes the (empty) message that the next frame of a journal is decoded into.
NewMessageFunc = Callable[[pb.JournalSpec], Message]


@dataclasses.dataclass(frozen=True, slots=True)
class Envelope:
    """A message read from ``journal`` at byte offsets ``[begin, end)``.

    ``journal.name`` is exactly the journal string of the read request,
    including a ``;meta`` suffix if it had one (so reads of one journal
    under several names can be told apart).
    """

    journal: pb.JournalSpec
    begin: int
    end: int
    message: Message

    def get_uuid(self) -> uuid.UUID:
        return self.message.get_uuid()


@dataclasses.dataclass(frozen=True, slots=True)
class ProducerState:
    """Where a producer stands in a journal, as kept in consumer checkpoints.

    ``last_ack`` is the Clock of its last ACK_TXN (or OUTSIDE_TXN) message;
    ``begin`` is the offset of its first CONTINUE_TXN message after it (the
    start of its open transaction), or -1 if it has none.
    """

    journal: str
    producer: bytes
    last_ack: int
    begin: int


@dataclasses.dataclass(frozen=True, slots=True)
class AckIntent:
    """A framed ACK message which, appended to ``journal``, commits a transaction there.

    Built by :meth:`Publisher.build_ack_intents`; the consumer stores intents
    in its checkpoint *before* appending them, and appends them again after
    recovering that checkpoint.
    """

    journal: str
    content: bytes

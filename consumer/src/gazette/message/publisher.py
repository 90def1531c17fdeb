"""The Publisher: map, sequence and append messages (Gazette `message/publisher.go`).

Two ways to publish:

* :meth:`Publisher.publish_committed` — the message is committed by itself
  (flag OUTSIDE_TXN): read-committed readers see it as soon as it is
  appended. For producers outside of consumer transactions.
* :meth:`Publisher.publish_uncommitted` — the message joins the open
  transaction (CONTINUE_TXN); read-committed readers see it only once an
  acknowledgement follows it. :meth:`Publisher.build_ack_intents` makes
  those acknowledgements, one per journal published to since the last
  call; the consumer stores them in its checkpoint and appends them after
  the checkpoint commits (applications never call it themselves).

Appends go through an :class:`~gazette.broker.client.AppendService`, which
orders all writes to a journal. A message's UUID is assigned inside that
journal's append, so that UUID clocks grow in the journal's own order.
Publishing is synchronous: it starts the append and returns its
:class:`~gazette.broker.client.AsyncAppend`, to await or to ignore (the
append service's ``pending_except("")`` waits for everything).

Usage::

    async with client.AppendService(jc) as appends:
        pub = message.Publisher(appends)
        mapping = message.ModuloMapping(lambda m: m.doc["key"].encode(), watched_list)
        pub.publish_committed(mapping, message.JSONMessage({"key": "a", "n": 1}))
"""

from __future__ import annotations

import time
from typing import Any, TypeVar

from gazette.broker import client
from gazette.message import framing, interfaces, registry, uuids

__all__ = ["Publisher"]

M = TypeVar("M", bound=interfaces.Message)


class _Intent:
    __slots__ = ("framing", "journal", "msg")

    def __init__(self, journal: str, msg: interfaces.Message, f: framing.Framing) -> None:
        self.journal = journal
        self.msg = msg
        self.framing = f


class Publisher:
    """Publishes messages to journals through ``append_service``; see the module docstring.

    Without a ``clock``, the Publisher keeps its own and moves it to the
    current time on every publish; a caller's clock is only ticked (the
    caller moves it, e.g. once per consumer transaction, sparing a time
    call per message). ``producer`` defaults to a new random producer ID.
    """

    def __init__(
        self,
        append_service: client.AppendService,
        clock: uuids.Clock | None = None,
        producer: bytes | None = None,
    ) -> None:
        self.append_service = append_service
        self._auto_update = clock is None
        self.clock: uuids.Clock = uuids.Clock() if clock is None else clock
        self.producer: bytes = uuids.new_producer_id() if producer is None else producer
        if len(self.producer) != 6:
            raise ValueError(f"producer ID must be 6 bytes (got {len(self.producer)})")
        self._intents: dict[str, _Intent] = {}  # Insertion-ordered: first publish first.

    def publish_committed(self, mapping: interfaces.MappingFunc[M], msg: M) -> client.AsyncAppend:
        """Publish ``msg`` as committed by itself (OUTSIDE_TXN).

        Raises what ``msg.validate()`` raises (before mapping), what the mapping
        raises (e.g. ``errors.EmptyListResponse``), ``errors.UnknownContentType``
        for a journal without a registered framing, and FramingError.
        """
        _, _, aa = self._publish(mapping, msg, uuids.Flags.OUTSIDE_TXN)
        return aa

    def publish_uncommitted(self, mapping: interfaces.MappingFunc[M], msg: M) -> client.AsyncAppend:
        """Publish ``msg`` in the open transaction (CONTINUE_TXN), which the next ACK intents commit."""
        journal, f, aa = self._publish(mapping, msg, uuids.Flags.CONTINUE_TXN)
        if journal not in self._intents:
            self._intents[journal] = _Intent(journal, msg.new_acknowledgement(journal), f)
        return aa

    def build_ack_intents(self) -> list[interfaces.AckIntent]:
        """The framed ACKs of every journal published to uncommitted since the last call.

        Each ACK gets a fresh UUID (ACK_TXN) with a clock above those of the
        messages it commits. The caller must persist the intents before
        appending them, and append them again after a recovery.
        """
        out = []
        producer, clock = self.producer, self.clock
        for intent in self._intents.values():
            intent.msg.set_uuid(uuids.build_uuid(producer, clock.tick(), uuids.Flags.ACK_TXN))
            out.append(interfaces.AckIntent(intent.journal, intent.framing.marshal(intent.msg)))
        self._intents.clear()
        return out

    def _publish(
        self, mapping: interfaces.MappingFunc[M], msg: M, flags: int
    ) -> tuple[str, framing.Framing, client.AsyncAppend]:
        if self._auto_update:
            self.clock.update(time.time_ns())
        validate: Any = getattr(msg, "validate", None)
        if validate is not None:
            validate()
        journal, content_type = mapping(msg)
        f = registry.framing_for(content_type)
        # The append service orders all appends to |journal|: assigning the UUID
        # in the same step that joins the journal's queue makes clocks grow in
        # journal order even when publishes of several tasks interleave.
        aa = self.append_service.start_append(journal)
        with aa:
            msg.set_uuid(uuids.build_uuid(self.producer, self.clock.tick(), flags))
            aa.write(f.marshal(msg))
        return journal, f, aa

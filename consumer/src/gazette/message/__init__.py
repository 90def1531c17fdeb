"""Messages: records of journals, published and read exactly once.

Journals are byte streams; this package gives them records, in Gazette's
layouts so that Go and Python producers and consumers share journals
(Gazette's ``message`` package, `message/interfaces.go`). It sits between
the broker client (:mod:`gazette.broker.client`) and the consumer runtime,
and depends on nothing of ours but the broker client and protocol.

* **Messages** (:class:`Message`): any object that keeps a UUID and makes an
  empty acknowledgement of its own type. Ready-made: :class:`JSONMessage`
  (a dict; typed fields with :class:`JSONField`), :class:`CSVRecord` and
  :class:`ProtoMessage` (a protobuf message).
* **UUIDs** (:func:`build_uuid`, :class:`Clock`, :class:`Flags`): RFC 4122
  v1 UUIDs whose time fields carry the producer's clock, whose clock
  sequence carries the transaction flags, and whose node is the producer ID.
* **Framings**, chosen by a journal's ``content-type`` label
  (:func:`framing_for`): JSON lines (byte for byte what Go writes), fixed
  protobuf frames (magic word, length, payload; resynchronising past
  garbage) and CSV (Go ``encoding/csv`` rules).
* **Mappings** (:class:`ModuloMapping`, :class:`RendezvousMapping`,
  :class:`RandomMapping`): choose a journal of a topic's partitions.
* **Publisher**: UUIDs assigned in journal order, committed or uncommitted
  publishing, and the ACK intents that commit a transaction.
* **Reading** (:class:`ReadUncommittedIter`, :class:`ReadCommittedIter`) and
  the **Sequencer**: envelopes with exact byte offsets; duplicates dropped,
  rolled-back spans dropped, committed spans let out once, replaying what
  fell out of the ring.

Errors are in :mod:`gazette.message.errors` (a frame that does not decode
names its journal and offset: ``examples/foo@1234: ...``).

Usage::

    from gazette import message
    from gazette.broker import client, protocol as pb

    class Sum(message.JSONMessage):
        key = message.JSONField("Key", "")
        count = message.JSONField("Count", 0)

    async with client.JournalClient(cfg) as jc, client.AppendService(jc) as appends:
        # The topic's partitions (a client.WatchedList, whose updates() a task
        # iterates, keeps them current; mappings take one as it is).
        parts = await client.list_journals(jc, "app.gazette.dev/message-type=Sum")
        mapping = message.ModuloMapping(lambda m: m.key.encode(), lambda: parts)
        pub = message.Publisher(appends)
        await pub.publish_committed(mapping, Sum({"Key": "a", "Count": 1}))

        seq = message.Sequencer({}, [], buffer=1024)
        request = pb.ReadRequest(journal="examples/sums/part-000", block=True)
        async with message.ReadCommittedIter(jc, request, lambda spec: Sum(), seq) as it:
            async for env in it:
                print(env.journal.name, env.begin, env.message.doc)
"""

from gazette.message import errors
from gazette.message.errors import DecodeError, FramingError, ReadError
from gazette.message.fixed_framing import encode_fixed_frame
from gazette.message.framing import CSVFrameable, Decoder, Framing, JSONFrameable, ProtoFrameable
from gazette.message.interfaces import (
    AckIntent,
    Envelope,
    MappingFunc,
    Message,
    NewMessageFunc,
    ProducerState,
)
from gazette.message.mapping import (
    ModuloMapping,
    Partitions,
    RandomMapping,
    RendezvousMapping,
    fnv1a32,
)
from gazette.message.messages import CSVRecord, JSONField, JSONMessage, ProtoMessage
from gazette.message.publisher import Publisher
from gazette.message.reader import ChunkReader, ReadCommittedIter, ReadUncommittedIter
from gazette.message.registry import framing_for, register_framing
from gazette.message.sequencer import QueueOutcome, Sequencer
from gazette.message.uuids import (
    ZERO_UUID,
    Clock,
    Flags,
    build_uuid,
    get_clock,
    get_flags,
    get_producer,
    new_producer_id,
    parse_uuid,
)

__all__ = [
    "ZERO_UUID",
    "AckIntent",
    "CSVFrameable",
    "CSVRecord",
    "ChunkReader",
    "Clock",
    "DecodeError",
    "Decoder",
    "Envelope",
    "Flags",
    "Framing",
    "FramingError",
    "JSONField",
    "JSONFrameable",
    "JSONMessage",
    "MappingFunc",
    "Message",
    "ModuloMapping",
    "NewMessageFunc",
    "Partitions",
    "ProducerState",
    "ProtoFrameable",
    "ProtoMessage",
    "Publisher",
    "QueueOutcome",
    "RandomMapping",
    "ReadCommittedIter",
    "ReadError",
    "ReadUncommittedIter",
    "RendezvousMapping",
    "Sequencer",
    "build_uuid",
    "encode_fixed_frame",
    "errors",
    "fnv1a32",
    "framing_for",
    "get_clock",
    "get_flags",
    "get_producer",
    "new_producer_id",
    "parse_uuid",
    "register_framing",
]

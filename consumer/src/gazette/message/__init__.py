"""Messages: how applications write and read records of journals, exactly once.

Journals are byte streams; this package gives them records. It is the layer
between the broker client (:mod:`gazette.broker.client`) and the consumer
runtime (:mod:`gazette.consumer`), as Gazette's ``message`` package is. It
will hold, in Gazette's layouts so that Go and Python peers interoperate:

* framing: JSON lines and Gazette's fixed protobuf framing (a magic word and
  a little-endian length before each message), to pack messages into appends
  and unpack them from reads, resynchronising past garbage;
* UUIDs: RFC 4122 version 1 UUIDs whose clock and node carry the producer,
  its sequence and the transaction flags (outside, continue, ack), one per message;
* the publisher: sequences each message's UUID, maps it to a journal
  (a partition mapping over labels), and publishes it uncommitted or as part
  of a transaction closed by acknowledgements;
* the sequencer: reads messages back in order per producer, drops
  duplicates and rolled-back ones, and replays a transaction's messages
  once its acknowledgement commits them.

It depends on the broker client and protocol only; the consumer runtime,
gazctl and Spark jobs use it. It holds no code yet: see the issues.

Usage (to come)::

    from gazette import message

    publisher = message.Publisher(journal_client, clock)
    await publisher.publish_committed(mapping, msg)
"""

__all__: list[str] = []

"""Go's ``message`` package and ours, over our brokers: the same journals, the same UUIDs.

``gazette-msg`` (``go/main.go``, on go.gazette.dev/core v0.103) publishes
committed messages, acknowledged transactions, a rolled-back span (a
re-appended older ACK, as a recovered consumer writes) and never acknowledged
messages; read-committed readers must deliver the committed and acknowledged
ones exactly once, in order, and nothing else — whichever side wrote and
whichever side reads.
"""

from __future__ import annotations

import pytest
from interop_go import (
    ACK_TXN,
    FLAGS_OF_KIND,
    GazetteMsg,
    journal_frames,
    ndjson_journal,
    uuid_fields,
)

from gazette.broker import testing

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


async def test_go_publishes_go_reads_through_our_broker(
    gazette_msg: GazetteMsg, interop_cluster: testing.BrokerCluster
) -> None:
    """Go's Publisher, AppendService and ReadCommittedIter against our broker alone."""
    journal = "interop/go-go"
    await ndjson_journal(interop_cluster, journal)
    broker = interop_cluster[0].endpoint

    pub = await gazette_msg.apublish(
        broker, [journal], committed=5, txn=4, txns=2, rollback=3, pending=2
    )
    print("go publish:", pub)
    assert (pub["committed"], pub["txn"], pub["rollback"], pub["pending"]) == (5, 8, 3, 2)
    # One ACK per transaction, and the last one again to roll back.
    assert pub["acks"] == 3

    # The journal's bytes: Go's frames and UUID bits, read back raw.
    frames = await journal_frames(interop_cluster, journal)
    assert frames[-1][1] == pub["heads"][journal]
    kinds = [doc["Kind"] for _, _, doc in frames]
    assert kinds == (
        ["committed"] * 5
        + (["txn"] * 4 + ["ack"]) * 2
        + ["rollback"] * 3
        + ["ack"]
        + ["pending"] * 2
    )
    clocks = []
    for _, _, doc in frames:
        clock, flags, producer = uuid_fields(doc["UUID"])
        assert flags == FLAGS_OF_KIND[doc["Kind"]], doc
        assert producer == pub["producer"]
        clocks.append(clock)
    # Clocks rise in journal order, but for the re-appended (rolling back) ACK.
    rollback_ack = len(frames) - 3
    assert frames[rollback_ack][2] == frames[rollback_ack - 4][2]
    others = clocks[:rollback_ack] + clocks[rollback_ack + 1 :]
    assert others == sorted(set(others))

    # Go's read-committed reader delivers the committed and acknowledged
    # messages (and the ACKs that committed them) once each, in order.
    delivered, done = await gazette_msg.aread(broker, journal)
    print("go read:", done)
    msgs = [m for m in delivered if m["Flags"] != ACK_TXN]
    assert [m["Seq"] for m in msgs] == list(range(13))
    assert {m["Kind"] for m in msgs} == {"committed", "txn"}
    assert (done["reason"], done["delivered"], done["acks"]) == ("head", 13, 2)
    assert [(m["Begin"], m["End"]) for m in delivered] == [(b, e) for b, e, doc in frames[:15]]
    # Its checkpoint: read through the head; the producer's open span begins
    # at the first never-acknowledged message.
    assert done["offsets"] == {journal: pub["heads"][journal]}
    (state,) = done["producers"]
    first_pending = kinds.index("pending")
    assert state["Begin"] == frames[first_pending][0]
    assert state["LastAck"] == clocks[rollback_ack]

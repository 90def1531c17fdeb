"""The package's public surface: what ``__all__`` promises, and the names others build on."""

from __future__ import annotations

import dataclasses
import inspect

import gazette.message
from gazette import message


def test_all_is_exported_and_sorted() -> None:
    assert sorted(message.__all__) == sorted(set(message.__all__))
    for name in message.__all__:
        assert hasattr(message, name), name
    public = {
        name
        for name, value in vars(gazette.message).items()
        if not name.startswith("_") and not inspect.ismodule(value)
    }
    assert public <= set(message.__all__)


def test_the_runtime_contract() -> None:
    # Names and parameters the consumer runtime is written against.
    sig = inspect.signature
    assert list(sig(message.Sequencer).parameters) == ["offsets", "states", "buffer"]
    assert list(sig(message.Publisher).parameters) == ["append_service", "clock", "producer"]
    assert list(sig(message.ReadUncommittedIter).parameters)[:3] == [
        "jc",
        "request",
        "new_message",
    ]
    assert list(sig(message.ReadCommittedIter).parameters)[:4] == [
        "jc",
        "request",
        "new_message",
        "sequencer",
    ]
    assert [f.name for f in dataclasses.fields(message.Envelope)] == [
        "journal",
        "begin",
        "end",
        "message",
    ]
    assert [f.name for f in dataclasses.fields(message.ProducerState)] == [
        "journal",
        "producer",
        "last_ack",
        "begin",
    ]
    assert [f.name for f in dataclasses.fields(message.AckIntent)] == ["journal", "content"]
    for name in ("queue_uncommitted", "step", "replay_range", "start_replay", "has_pending"):
        assert callable(getattr(message.Sequencer, name))
    assert inspect.iscoroutinefunction(message.Sequencer.step)
    assert message.QueueOutcome.ACK_COMMIT_REPLAY.label == "ackCommitReplay"

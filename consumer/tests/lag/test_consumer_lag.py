"""The lag of a shard (gazette.consumer.lag) from a Stat and write heads, without a cluster.

The Stat is a function here (the seam gazctl and the operator fill with their RPCs) and
the write heads come from a dict. gazctl's (test_gazctl_shards_lag.py) and the
operator's (e2e/test_operator_shard_lag.py) tests run it against real brokers and
consumers.
"""

from __future__ import annotations

import asyncio

import pytest

from gazette.consumer import lag
from gazette.consumer import protocol as pc


class Heads(lag.WriteHeads):
    """Write heads from a dict, each read counted (a missing journal is unknown)."""

    def __init__(self, heads: dict[str, int]) -> None:
        self.heads = heads
        self.reads: list[str] = []

    async def get(self, journal: str) -> int:
        self.reads.append(journal)
        if journal not in self.heads:
            raise lag.LagUnknown("JOURNAL_NOT_FOUND")
        return self.heads[journal]


def answered(**read_through: int) -> pc.StatResponse:
    resp = pc.StatResponse(status=pc.OK)
    for journal, offset in read_through.items():
        resp.read_through[journal.replace("_", "/")] = offset
    return resp


async def test_each_source_against_its_head_and_the_total() -> None:
    async def stat() -> pc.StatResponse:
        return answered(a_one=100, a_two=40)

    found = await lag.shard_lag(
        stat, ["a/two", "a/one", "a/one"], Heads({"a/one": 250, "a/two": 40})
    )
    assert found.total == 150
    assert found.column() == "a/one:150, a/two:0"
    assert found.as_json() == {
        "sources": [
            {"journal": "a/one", "read_through": 100, "write_head": 250, "lag": 150},
            {"journal": "a/two", "read_through": 40, "write_head": 40, "lag": 0},
        ],
        "total": 150,
    }
    assert (
        found.comment()
        == "a/one read through 100, lag 150 bytes; a/two read through 40, lag 0 bytes"
    )


async def test_a_source_not_yet_read_is_behind_by_its_whole_head() -> None:
    async def stat() -> pc.StatResponse:
        return answered()

    found = await lag.shard_lag(stat, ["a/one"], Heads({"a/one": 64}))
    assert (found.total, found.sources[0].read_through) == (64, 0)


async def test_a_head_read_before_a_later_stat_never_makes_a_negative_lag() -> None:
    async def stat() -> pc.StatResponse:
        return answered(a_one=90)

    found = await lag.shard_lag(stat, ["a/one"], Heads({"a/one": 80}))
    assert found.total == 0


async def test_a_shard_that_cannot_answer_has_no_total_and_says_why() -> None:
    async def stat() -> pc.StatResponse:
        raise lag.LagUnknown("NO_SHARD_PRIMARY")

    heads = Heads({"a/one": 1})
    found = await lag.shard_lag(stat, ["a/one"], heads)
    assert (found.total, found.error, found.column()) == (
        None,
        "NO_SHARD_PRIMARY",
        "<NO_SHARD_PRIMARY>",
    )
    assert found.as_json() == {"error": "NO_SHARD_PRIMARY"}
    assert heads.reads == []  # Nothing to compare with: no head is read.


async def test_an_unknown_head_leaves_the_total_unknown() -> None:
    async def stat() -> pc.StatResponse:
        return answered(a_one=1, a_two=2)

    found = await lag.shard_lag(stat, ["a/one", "a/two"], Heads({"a/one": 5}))
    assert found.total is None
    assert found.column() == "a/one:4, a/two:<JOURNAL_NOT_FOUND>"
    assert found.as_json()["sources"][1] == {
        "journal": "a/two",
        "read_through": 2,
        "error": "JOURNAL_NOT_FOUND",
    }


async def test_a_stat_that_never_answers_is_cut_off() -> None:
    async def stat() -> pc.StatResponse:
        await asyncio.sleep(30)
        raise AssertionError("not reached")

    found = await lag.shard_lag(stat, ["a/one"], Heads({"a/one": 1}), stat_timeout=0.05)
    assert found.error == "no answer in 0.05s"


@pytest.mark.parametrize("shares", [1, 5])
async def test_write_heads_are_read_once_per_journal(shares: int) -> None:
    reads: list[str] = []

    class Counting(lag.WriteHeads):
        async def _read(self, journal: str) -> int:
            reads.append(journal)
            await asyncio.sleep(0.01)
            return 10

    heads = Counting(None)  # type: ignore[arg-type]
    got = await asyncio.gather(*(heads.get("a/one") for _ in range(shares)))
    await heads.close()
    assert (got, reads) == ([10] * shares, ["a/one"])

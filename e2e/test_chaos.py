"""The chaos suite (see ``e2e/chaos``): no acknowledged byte may be lost, whatever the fault.

Each test is one scenario on a fresh cluster; no offset may ever be acknowledged
twice. Where every broker loses its disk (``kill-all-fresh-disks``) the
unpersisted tail may be lost (reported, not judged), never handed out again.
``partition-shard-primary`` runs stream-sum's consumers too: its Sums must stay
exactly once. A failing assertion is a broker verdict and says so, with every
figure of the scenario; a harness problem raises
:class:`chaos.scenarios.HarnessError` instead. ``make test`` runs the
short version; ``make chaos`` the long one (``CHAOS_LONG=1``, ``CHAOS_KILLS``),
with ``-s`` and the summary table at the end. The partition tests need root and
``ip`` (iproute2): they skip where ``ip`` is missing and fail where network
namespaces can't be made; ``CHAOS_CUT=neigh`` cuts links with bogus neighbour
entries instead of blackhole routes, and ``CHAOS_GO=1`` runs them on Gazette's own
Go brokers (skipped without a Go toolchain), to compare with the reference.
"""

from __future__ import annotations

import json
import pathlib
from collections.abc import Awaitable

import pytest
from chaos import netcluster, netns, scenarios
from chaos.checker import ReadBack, Verdict, verify
from chaos.records import RecordId, record
from chaos.report import Report, save, side_by_side
from chaos.scenarios import Params
from chaos.workload import Ack

pytestmark = pytest.mark.integration

PARAMS = Params.from_env()


def _verdict(
    report: Report,
    reports: list[Report],
    *,
    kill_bound: bool = False,
    no_hangs: bool = False,
    clean_stops: bool = False,
    disks_lost: bool = False,
) -> None:
    """Assert ``report`` shows no broker failure (and keep it for the table).

    ``disks_lost``: every broker lost its disk, so the unpersisted tail may be
    lost: appends not yet stored when the disks went are only reported when
    lost; a reader that stalls, or any other append lost, still fails. In every
    scenario, jumps over offsets the store never held are excused (see below),
    and offsets acknowledged twice fail.
    """
    reports.append(report)
    description = report.describe()
    print("\n" + description)
    v = report.verdict
    broken = []
    if v.lost and not disks_lost:
        broken.append(f"lost {len(v.lost)} of {v.acked} acknowledged appends")
    if disks_lost and report.lost_beyond_tail:
        beyond = len(report.lost_beyond_tail)
        broken.append(f"lost {beyond} appends that were no unpersisted tail of a disk loss")
    if v.twice:
        broken.append(f"{len(v.twice)} acknowledgements at offsets already acknowledged")
    if v.denied_landed:
        broken.append(f"{len(v.denied_landed)} appends answered as failed for sure are in it")
    # A jump over offsets the store never held is a range the journal skipped (it
    # resumed past its acknowledgement fence after losing every holder of its tail):
    # no append acknowledged there may be lost (that fails above), the jump alone
    # doesn't. A stall, or a jump over stored content, always fails.
    skipped = v.unstored_holes
    holes = [h for h in v.holes if h not in skipped]
    if holes:
        broken.append(f"{len(holes)} holes a reader from 0 stalls on or jumps over")
    if v.conflicts:
        broken.append(f"{len(v.conflicts)} stored fragments disagree at an offset (or are corrupt)")
    if v.garbage_bytes:
        broken.append(f"{v.garbage_bytes} bytes that are no whole record")
    if v.aborted_visible:
        broken.append(f"{len(v.aborted_visible)} records of abandoned appends visible")
    if report.bad_acks:
        broken.append(f"{len(report.bad_acks)} acks whose span is not the bytes sent")
    if report.exits:
        broken.append(f"{len(report.exits)} process exits nobody asked for")
    if report.unwritable:
        broken.append(f"{len(report.unwritable)} times a journal was not writable after a fault")
    if report.consumer_failures:
        broken.append(f"{len(report.consumer_failures)} consumer failures")
    if v.acked == 0:
        broken.append("not one append was acknowledged")
    if kill_bound and report.max_gap > PARAMS.kill_bound_s:
        broken.append(
            f"writes unavailable {report.max_gap:.1f}s around a fault "
            f"(bound: lease {PARAMS.lease_s:g}s + 2s)"
        )
    if no_hangs and report.hung:
        broken.append(f"{report.hung} appends hung until the client deadline")
    if clean_stops and report.forced:
        broken.append(f"{len(report.forced)} brokers did not stop gracefully (exit 0) in time")
    assert not broken, "BROKER: " + "; ".join(broken) + "\n" + description


def _kills_s(kills: int, every: float) -> float:
    return kills * (every + PARAMS.kill_bound_s + 10)


@pytest.mark.timeout(PARAMS.budget_s(_kills_s(PARAMS.spaced_kills, PARAMS.spaced_every_s)))
async def test_sigkill_spaced(tmp_path: pathlib.Path, chaos_reports: list[Report]) -> None:
    report = await scenarios.sigkill(
        "sigkill-spaced", PARAMS, tmp_path, PARAMS.spaced_kills, PARAMS.spaced_every_s
    )
    _verdict(report, chaos_reports, kill_bound=True)


@pytest.mark.timeout(PARAMS.budget_s(_kills_s(PARAMS.rapid_kills, PARAMS.rapid_every_s)))
async def test_sigkill_rapid(tmp_path: pathlib.Path, chaos_reports: list[Report]) -> None:
    report = await scenarios.sigkill(
        "sigkill-rapid", PARAMS, tmp_path, PARAMS.rapid_kills, PARAMS.rapid_every_s
    )
    # Kills closer together than lease + restart overlap: one outage runs into the
    # next, so the lease + 2 s bound is the spaced scenario's to check.
    _verdict(report, chaos_reports)


@pytest.mark.timeout(PARAMS.budget_s(PARAMS.stops * (2 * PARAMS.lease_s + 20)))
async def test_sigstop_primary(tmp_path: pathlib.Path, chaos_reports: list[Report]) -> None:
    _verdict(await scenarios.sigstop(PARAMS, tmp_path), chaos_reports)


@pytest.mark.timeout(PARAMS.budget_s(PARAMS.etcd_rounds * (PARAMS.etcd_down_s + 30)))
async def test_etcd_kill(tmp_path: pathlib.Path, chaos_reports: list[Report]) -> None:
    _verdict(await scenarios.etcd_outage(PARAMS, tmp_path), chaos_reports)


@pytest.mark.timeout(PARAMS.budget_s(PARAMS.store_rounds * (PARAMS.store_outage_s + 35)))
async def test_store_outage(tmp_path: pathlib.Path, chaos_reports: list[Report]) -> None:
    _verdict(await scenarios.store_outage(PARAMS, tmp_path), chaos_reports)


@pytest.mark.timeout(PARAMS.budget_s(PARAMS.spool_rounds * (PARAMS.spool_full_s + 20)))
async def test_spool_full(tmp_path: pathlib.Path, chaos_reports: list[Report]) -> None:
    try:
        # (On Go's brokers, with CHAOS_GO=1: in namespaces, as the partitions run them.)
        report = await _partitioned(scenarios.spool_full(PARAMS, tmp_path))
    except scenarios.SpoolUnavailable as e:
        pytest.skip(str(e))
    _verdict(report, chaos_reports, no_hangs=True)


@pytest.mark.timeout(PARAMS.budget_s(PARAMS.stall_rounds * (PARAMS.stall_for_s + 30)))
async def test_spool_stall(tmp_path: pathlib.Path, chaos_reports: list[Report]) -> None:
    try:
        report = await _partitioned(scenarios.spool_stall(PARAMS, tmp_path))
    except scenarios.StallUnavailable as e:
        pytest.skip(str(e))
    _verdict(report, chaos_reports, no_hangs=True)


@pytest.mark.timeout(PARAMS.budget_s(PARAMS.aborts * 1.0 + 15))
async def test_client_aborts(tmp_path: pathlib.Path, chaos_reports: list[Report]) -> None:
    _verdict(await scenarios.aborts(PARAMS, tmp_path), chaos_reports)


@pytest.mark.timeout(PARAMS.budget_s(PARAMS.term_rounds * (PARAMS.term_timeout_s + 60)))
async def test_sigterm_all(tmp_path: pathlib.Path, chaos_reports: list[Report]) -> None:
    _verdict(await scenarios.sigterm_all(PARAMS, tmp_path), chaos_reports, clean_stops=True)


@pytest.mark.timeout(PARAMS.budget_s(PARAMS.term_rounds * 120))
async def test_kill_all(tmp_path: pathlib.Path, chaos_reports: list[Report]) -> None:
    _verdict(await scenarios.kill_all(PARAMS, tmp_path), chaos_reports)


@pytest.mark.timeout(PARAMS.budget_s(PARAMS.term_rounds * 120))
async def test_kill_all_fresh_disks(tmp_path: pathlib.Path, chaos_reports: list[Report]) -> None:
    # The brokers resume every journal by themselves (no reset of the heads),
    # past whatever may have been acknowledged: the lost tail is reported only.
    report = await scenarios.kill_all_fresh_disks(PARAMS, tmp_path)
    _verdict(report, chaos_reports, disks_lost=True)


@pytest.mark.timeout(PARAMS.budget_s(PARAMS.down_up_rounds * 200))
async def test_make_down_up(tmp_path: pathlib.Path, chaos_reports: list[Report]) -> None:
    _verdict(await scenarios.make_down_up(PARAMS, tmp_path), chaos_reports, clean_stops=True)


# --- Network partitions (namespaces on a bridge: needs root and `ip`) -------------------


def _partitions_s() -> float:
    return PARAMS.partitions * (PARAMS.partition_s + PARAMS.kill_bound_s + 10 + PARAMS.spacing_s)


async def _partitioned(run: Awaitable[Report]) -> Report:
    try:
        return await run
    except (netns.IpMissing, netcluster.GoUnavailable) as e:
        pytest.skip(str(e))
    # Any other NetnsError (no permission for `ip netns add`, say) fails the test.


@pytest.mark.timeout(PARAMS.budget_s(_partitions_s()))
async def test_partition_primary_rf2(tmp_path: pathlib.Path, chaos_reports: list[Report]) -> None:
    report = await _partitioned(scenarios.partition_primary(PARAMS, tmp_path))
    _verdict(report, chaos_reports)


@pytest.mark.timeout(PARAMS.budget_s(_partitions_s()))
async def test_partition_primary_rf3(tmp_path: pathlib.Path, chaos_reports: list[Report]) -> None:
    report = await _partitioned(
        scenarios.partition_primary(PARAMS, tmp_path, brokers=4, replication=3)
    )
    _verdict(report, chaos_reports)


@pytest.mark.timeout(PARAMS.budget_s(_partitions_s()))
async def test_partition_primary_staged(
    tmp_path: pathlib.Path, chaos_reports: list[Report]
) -> None:
    # The primary's links to its peers but one replica go first; an append commits meanwhile.
    report = await _partitioned(
        scenarios.partition_primary(PARAMS, tmp_path, brokers=4, replication=3, staged=True)
    )
    _verdict(report, chaos_reports)


@pytest.mark.timeout(PARAMS.budget_s(_partitions_s() + PARAMS.etcd_cut_past_lease_s))
async def test_partition_etcd_only(tmp_path: pathlib.Path, chaos_reports: list[Report]) -> None:
    report = await _partitioned(scenarios.partition_etcd_only(PARAMS, tmp_path))
    # Appenders and peers still reach the cut-off primary: once its lease is gone
    # the journal must move on as after a SIGKILL, not wait for the network to heal.
    _verdict(report, chaos_reports, kill_bound=True)


@pytest.mark.timeout(PARAMS.budget_s(_partitions_s()))
async def test_partition_peers_only(tmp_path: pathlib.Path, chaos_reports: list[Report]) -> None:
    report = await _partitioned(scenarios.partition_peers_only(PARAMS, tmp_path))
    # Our brokers give the journal up (cut off from every peer while etcd answers);
    # Gazette's wait for the heal, so Go runs are not held to the bound.
    _verdict(report, chaos_reports, kill_bound=not PARAMS.go)


@pytest.mark.timeout(
    PARAMS.budget_s(PARAMS.partitions * (PARAMS.partition_s + PARAMS.lease_s + 50) + 120)
)
async def test_partition_shard_primary(tmp_path: pathlib.Path, chaos_reports: list[Report]) -> None:
    # stream-sum's consumers in namespaces too: the process holding a shard's primary
    # is cut off; sums stay exactly once and the shard catches up soon after healing.
    report = await _partitioned(scenarios.partition_shard_primary(PARAMS, tmp_path))
    _verdict(report, chaos_reports)


def test_go_figures_print_beside_ours(tmp_path: pathlib.Path) -> None:
    # `make chaos-go` saves Go's rows (its scenarios named "-go"); `make chaos` matches them.
    def rep(name: str, acked: int, lost: int) -> Report:
        v = Verdict(acked=acked, lost=[f"l{i}" for i in range(lost)])
        return Report(name, 2, v, [], [("cut", 7.5)])

    saved = tmp_path / "go.json"
    save([rep("partition-peers-only-go", 90, 3)], saved)
    ours = [rep("partition-peers-only", 100, 0), rep("sigkill-rapid", 5, 0)]
    out = side_by_side(ours, json.loads(saved.read_text()), "go")
    lines = out.splitlines()
    assert "ours:" in lines[0] and "go:" in lines[0], out
    assert len(lines) == 4, out  # title, header, rule, the one shared scenario
    assert lines[3].split() == ["partition-peers-only", "100", "0", "0", "-", "0", "0", "0", "7.5",
                                "|", "90", "3", "0", "-", "0", "0", "0", "7.5"]  # fmt: skip


def test_an_append_failed_for_sure_may_not_be_read() -> None:
    # w0#0 was acknowledged once and read twice: one failed attempt may have landed.
    # w0#1 failed for sure (no attempt may have landed) and is read anyway.
    first, second = RecordId("w0", 0), RecordId("w0", 1)
    data = record(first) * 2 + record(second)
    acks = [Ack("j", 0, len(record(first)), (first,), 0.0)]
    reads = [ReadBack("j", len(data), [(0, data)])]
    sent = {first: ("j", 1), second: ("j", 0)}
    v = verify(acks, reads, set(), None, sent)
    assert v.duplicated == 1 and not v.lost
    assert v.denied_landed == [
        "j w0#1: read 1 times, acknowledged 0, 0 failed attempts that may have landed"
    ]
    assert not verify(acks, reads, set(), None, {**sent, second: ("j", 1)}).denied_landed

"""``gazctl shards recover`` and ``prune``: a shard's recovery log, played and pruned.

``recover`` plays a shard's recovery log into a local directory from its
hints, up to the log's write head, and stops there: it never hands the log
off, so the shard's primary keeps recording undisturbed. ``prune`` deletes the
fragments of recovery logs that no hints of the selected shards need, straight
from the fragment stores (as ``journals prune`` does). Gazette's
``cmd/gazctl/gazctlcmd/shards_recover.go`` and ``shards_prune.go``.

Which fragments prune keeps, as Gazette's: every hints of every selected
shard (the primary hints and each backup) name the live segments of the logs
a recovery would read. The *last* segment of each hints is taken as open-ended,
because playback reads on from it to the write head; so whatever follows the
last hinted segment of any hints is kept. A fragment is deleted only if it
overlaps no segment of any hints. A log is left alone entirely when one of
its shards is missing any of its hints (a backup slot not yet written, or
hints without live files), when its stores are unhealthy, or when it is
suspended: deleting needs proof that nothing refers to a fragment.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import pathlib
from collections.abc import Iterable

import click

from gazette.broker import client
from gazette.broker import protocol as pb
from gazette.consumer import protocol as pc
from gazette.consumer import recoverylog as rl
from gazette.gazctl import options, output, runner, shards_api

__all__ = ["LogPlan", "fold_hints", "overlaps_any", "plan_log", "prune_cmd", "recover_cmd"]

log = logging.getLogger(__name__)

#: Deletes from stores at once (cloud stores take many concurrent requests well).
REMOVE_CONCURRENCY = 32


# --- recover ---------------------------------------------------------------------------


def _check_empty_dir(directory: pathlib.Path) -> None:
    # The player empties its directory first (as Gazette's does); a command line
    # shouldn't delete what a mistyped --dir points at, so only an empty or new one goes.
    if directory.exists() and (not directory.is_dir() or any(directory.iterdir())):
        raise click.BadParameter(
            f"{str(directory)!r} is not an empty directory (recover writes into a new or empty"
            " one, which it replaces)",
            param_hint="'--dir'",
        )


@click.command("recover")
@shards_api.consumer_address
@click.option("--id", "shard_id", required=True, help="Id of the shard to recover.")
@click.option(
    "-d",
    "--dir",
    "directory",
    required=True,
    type=click.Path(path_type=pathlib.Path),
    help="New or empty directory to play the recovery log into.",
)
@options.broker_options
def recover_cmd(
    broker: options.BrokerOptions, address: str, shard_id: str, directory: pathlib.Path
) -> None:
    """Play a shard's recovery log into a directory: its store as last recorded.

    The hints come from the consumer (GetHints): the primary hints, else the
    newest backup, else none (the whole log is read). Playback reads the log
    through --broker.address up to its current write head and stops there. It
    does not hand the log off: the shard's primary keeps recording, so this is
    safe on a live shard (the directory is then a recent copy, not the latest).

    \b
    Example:
      gazctl shards recover --id chunks-part-000 --dir /tmp/chunks-part-000
    """
    try:
        pc.validate_shard_id(shard_id)
    except pb.ValidationError as e:
        raise click.BadParameter(str(e), param_hint="'--id'") from None
    _check_empty_dir(directory)

    async def go() -> None:
        async with shards_api.ShardClient(address) as sc:
            listed = await sc.list_shards(pb.LabelSelector(include=pb.label_set({"id": shard_id})))
            if len(listed.shards) != 1:
                raise click.ClickException(f"no shard {shard_id!r} (see `gazctl shards list`)")
            spec = listed.shards[0].spec
            journal = pc.recovery_log(spec)
            if not journal:
                raise click.ClickException(
                    f"shard {shard_id!r} has no recovery log (its recovery_log_prefix is empty)"
                )
            hints, which = shards_api.pick_first_hints(await sc.get_hints(shard_id), journal)
        async with client.JournalClient(broker.client_config()) as jc:
            try:
                fsm = await rl.Player(jc, hints, directory).play()
            except rl.errors.RecoveryLogError as e:
                raise shards_api.RecoveryError(shard_id, e) from e
        files = sum(len(node.links) for node in fsm.live_nodes.values())
        props = f" and {len(fsm.properties)} property file(s)" if fsm.properties else ""
        click.echo(f"recovered {journal} into {directory} (hints: {which}): {files} file(s){props}")

    runner.run(go())


# --- prune -----------------------------------------------------------------------------


def fold_hints(hints: rl.FSMHints, into: dict[str, list[rl.Segment]]) -> None:
    """Add the live segments of ``hints`` to ``into`` (by log), the last one open-ended.

    Playback of these hints reads on past their last segment to the log's
    write head, so that segment's ``last_offset`` is cleared: it then overlaps
    every fragment from its first offset on.
    """
    _, segments = rl.live_log_segments(hints)
    copies = []
    for seg in segments:
        s = rl.Segment()
        s.CopyFrom(seg)
        copies.append(s)
    if copies:
        copies[-1].last_offset = 0
    for s in copies:
        into.setdefault(s.log, []).append(s)


def overlaps_any(segments: Iterable[rl.Segment], fragment: pb.Fragment) -> bool:
    """Whether ``fragment`` holds any byte of a segment (0 offsets are open-ended).

    No segments at all means nothing is known about the log: everything overlaps.
    """
    seen = False
    for seg in segments:
        seen = True
        if (seg.first_offset < fragment.end or fragment.end == 0) and (
            seg.last_offset > fragment.begin or seg.last_offset == 0
        ):
            return True
    return not seen


@dataclasses.dataclass
class LogPlan:
    """The fragments of one recovery log that prune deletes and keeps."""

    journal: str
    prune: list[pb.Fragment] = dataclasses.field(default_factory=list)
    keep: list[pb.Fragment] = dataclasses.field(default_factory=list)

    @property
    def pruned_bytes(self) -> int:
        return _span(self.prune)

    @property
    def kept_bytes(self) -> int:
        return _span(self.keep)


def _span(fragments: Iterable[pb.Fragment]) -> int:
    return sum(f.end - f.begin for f in fragments)


def plan_log(journal: str, segments: list[rl.Segment], fragments: Iterable[pb.Fragment]) -> LogPlan:
    """Split ``fragments`` of ``journal`` into those no segment overlaps and the rest.

    A fragment to delete that is not persisted yet (no ``mod_time``) means the
    selected shards are not all the shards that use the log — a newer write no
    hints cover — and is an error, before anything is deleted.
    """
    plan = LogPlan(journal)
    for f in fragments:
        if overlaps_any(segments, f):
            plan.keep.append(f)
        elif not f.mod_time:
            raise shards_api.UncoveredFragmentError(journal, f)
        else:
            plan.prune.append(f)
    return plan


@dataclasses.dataclass
class _Hinted:
    """What the selected shards' hints say, log by log."""

    segments: dict[str, list[rl.Segment]] = dataclasses.field(default_factory=dict)
    #: Logs to leave alone, and why.
    skipped: dict[str, str] = dataclasses.field(default_factory=dict)
    shards: int = 0


async def _stores_healthy(jc: client.JournalClient, journal: str) -> str:
    """Why the log's fragment stores can't be pruned now ("" when they can)."""
    try:
        spec = await client.get_journal(jc, journal)
        for store in spec.fragment.stores:
            # Without the delete probe: prunes run unattended; a delete that is
            # refused is counted when it happens.
            await client.fragment_store_health(jc, store)
    except client.errors.ClientError as e:
        return f"its fragment stores can't be checked or are unhealthy: {e}"
    return ""


async def _gather_hints(
    sc: shards_api.ShardClient, jc: client.JournalClient, shards: Iterable[pc.ListResponse.Shard]
) -> _Hinted:
    out = _Hinted()
    health: dict[str, str] = {}
    for shard in shards:
        out.shards += 1
        shard_id = shard.spec.id
        journal = pc.recovery_log(shard.spec)
        if not journal:
            log.info("shard %s has no recovery log", shard_id)
            continue
        if journal not in health:
            health[journal] = await _stores_healthy(jc, journal)
        if health[journal]:
            out.skipped[journal] = health[journal]
            continue
        resp = await sc.get_hints(shard_id)
        # Every hints of a shard must be in hand before anything of its log may be
        # deleted: the ones missing could name any fragment. A shard whose log another
        # shard's missing hints skip is asked all the same: its hints may name
        # fragments of other (forked) logs.
        for i, slot in enumerate([*resp.backup_hints, resp.primary_hints]):
            name = "primary" if i == len(resp.backup_hints) else f"backup {i}"
            if not slot.HasField("hints"):
                out.skipped[journal] = f"shard {shard_id} has not written its {name} hints yet"
                break
            if not slot.hints.live_nodes:
                out.skipped[journal] = f"the {name} hints of shard {shard_id} have no live files"
                break
            try:
                fold_hints(slot.hints, out.segments)
            except rl.errors.RecoveryLogError as e:
                raise shards_api.RecoveryError(shard_id, e) from e
    return out


async def _list_fragments(jc: client.JournalClient, journal: str) -> list[pb.Fragment] | None:
    """The journal's fragments; None when it is suspended (nothing to list)."""
    request = pb.FragmentsRequest(journal=journal)
    try:
        return [f.spec async for f in client.list_all_fragments(jc, request)]
    except client.errors.Suspended:
        return None


@dataclasses.dataclass
class _Removal:
    removed: list[pb.Fragment] = dataclasses.field(default_factory=list)
    denied: int = 0
    failed: int = 0


async def _remove_all(file_root: str, fragments: list[pb.Fragment]) -> _Removal:
    # Imported here, as `journals prune` does: only prune needs the stores' libraries.
    from gazette.broker.fragment import errors as fragment_errors
    from gazette.broker.fragment import stores

    registry = stores.StoreRegistry(
        stores.StoresConfig(file_root=file_root or stores.UNCONFIGURED_FILE_ROOT)
    )
    out = _Removal()
    limit = asyncio.Semaphore(REMOVE_CONCURRENCY)

    async def remove(f: pb.Fragment) -> None:
        store = registry.get(f.backing_store)
        where = f"{f.backing_store}{pb.fragment_path(f)}"
        try:
            async with limit:
                await store.remove(pb.fragment_path(f))
        except (fragment_errors.FragmentError, OSError) as e:
            # Counted and reported, and the others go on, as Gazette's prune does.
            if _caused_by(e, FileNotFoundError):
                # Already gone (an earlier prune, before the brokers' index caught up):
                # what S3 answers too.
                pass
            elif store.is_auth_error(e):
                out.denied += 1
                click.echo(f"not allowed to remove {where}", err=True)
                return
            else:
                out.failed += 1
                click.echo(f"failed to remove {where}: {e}", err=True)
                return
        out.removed.append(f)

    async with asyncio.TaskGroup() as tg:
        for f in fragments:
            tg.create_task(remove(f))
    return out


def _caused_by(e: BaseException | None, kind: type[BaseException]) -> bool:
    while e is not None:
        if isinstance(e, kind):
            return True
        e = e.__cause__
    return False


def _totals(verb: str, prune: int, prune_bytes: int, keep: int, keep_bytes: int) -> str:
    return (
        f"{verb} {prune} fragment(s) ({output.human_bytes(prune_bytes)}),"
        f" kept {keep} ({output.human_bytes(keep_bytes)})"
    )


@click.command("prune")
@shards_api.consumer_address
@shards_api.shard_selector_option(required=True)
@click.option("--dry-run", is_flag=True, help="Show what would be deleted, delete nothing.")
@click.option(
    "--file-root", default="", help="Root of file:// stores (the brokers' --broker.file-root)."
)
@options.broker_options
def prune_cmd(
    broker: options.BrokerOptions, address: str, selector: str, dry_run: bool, file_root: str
) -> None:
    """Delete recovery-log fragments that no hints of the selected shards need.

    A recovery log holds every write its shard's store ever made, most of them
    long overwritten or compacted away. The hints of a shard (its primary hints
    and every backup, through GetHints) name the parts of the log that hold the
    store's live files; a fragment overlapping none of them, nor anything after
    the last part named by any hints, is deleted from its store. A log is
    skipped while one of its shards has not written all its hints, its stores
    are unhealthy, or it is suspended.

    CAUTION: a log forked from another's is read by the shards of both; select
    every shard that refers to a log, or fragments they need may be deleted.

    \b
    Example:
      gazctl shards prune -l app=word-count --dry-run
    """
    sel = options.parse_selector(selector)

    async def go() -> None:
        async with (
            shards_api.ShardClient(address) as sc,
            client.JournalClient(broker.client_config()) as jc,
        ):
            listed = await sc.list_shards(sel)
            hinted = await _gather_hints(sc, jc, listed.shards)
            for journal, reason in sorted(hinted.skipped.items()):
                click.echo(f"skipping {journal}: {reason}", err=True)
            # Plan every log before deleting from any, so a refusal deletes nothing.
            plans = []
            for journal, segments in sorted(hinted.segments.items()):
                if journal in hinted.skipped:
                    continue
                fragments = await _list_fragments(jc, journal)
                if fragments is None:
                    click.echo(f"skipping {journal}: it is suspended", err=True)
                    continue
                plans.append(plan_log(journal, segments, fragments))

        if not dry_run and not file_root:
            for plan in plans:
                if any(f.backing_store.startswith("file://") for f in plan.prune):
                    raise click.UsageError(
                        f"{plan.journal} has fragments in a file:// store: give --file-root"
                        " (the brokers' --broker.file-root) to delete them"
                    )
        verb = "would prune" if dry_run else "pruned"
        totals = [0, 0, 0, 0]
        failed = denied = 0
        for plan in plans:
            for f in plan.prune:
                click.echo(
                    f"{'would prune' if dry_run else 'pruning'} {f.backing_store}{pb.fragment_path(f)}"
                )
            pruned = plan.prune
            refused = ""
            if not dry_run and plan.prune:
                removal = await _remove_all(file_root, plan.prune)
                pruned = removal.removed
                failed, denied = failed + removal.failed, denied + removal.denied
                if removal.failed or removal.denied:
                    refused = f" ({removal.failed} failed, {removal.denied} not allowed)"
            # A fragment that could not be removed is still there: it counts as kept.
            kept_bytes = plan.kept_bytes + plan.pruned_bytes - _span(pruned)
            kept = len(plan.keep) + len(plan.prune) - len(pruned)
            row = [len(pruned), _span(pruned), kept, kept_bytes]
            click.echo(f"{plan.journal}: {_totals(verb, *row)}{refused}")
            totals = [a + b for a, b in zip(totals, row, strict=True)]
        click.echo(
            f"{len(plans)} log(s) of {hinted.shards} shard(s): {_totals(verb, *totals)}"
            + (f", {len(hinted.skipped)} log(s) skipped" if hinted.skipped else "")
            + (f", {denied} not allowed to delete" if denied else "")
        )
        if failed:
            raise click.ClickException(f"failed to remove {failed} fragment(s)")

    runner.run(go())

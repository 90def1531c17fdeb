"""The metadata RPCs of ``protocol.Journal``: List, Apply, ListFragments, FragmentStoreHealth.

They answer about journals and stores rather than move their content (that is
:mod:`gazette.broker.server.api`, which owns the gRPC edge, verifies tokens and
calls these with their claims). A journal the claims' selector does not select
is left out of List, not found by ListFragments, and refused by Apply (before
and after the change: see :func:`apply`).
Gazette references: ``broker/list_apply_api.go``, ``fragments_api.go``,
``fragment_store_health_api.go``.
"""

from __future__ import annotations

import asyncio
import bisect
import logging
from collections.abc import Callable, Sequence
from typing import Any, cast

import grpc

from gazette import keyspace
from gazette.allocator import routes
from gazette.broker import protocol as pb
from gazette.broker.fragment import cover_set, stores
from gazette.broker.fragment import errors as frag_errors
from gazette.broker.protocol import auth
from gazette.broker.server import errors, metrics, replica, service

log = logging.getLogger(__name__)

MAX_JOURNALS_PER_LIST_RESPONSE = 25
DEFAULT_FRAGMENTS_PAGE_LIMIT = 1000
DELETE_PROBE_TIMEOUT = 60.0


def authorizer(claims: auth.Claims) -> Callable[[pb.JournalSpec], bool] | None:
    """Whether ``claims`` select a journal (by its labels and name); None if they select all."""
    sel = claims.selector
    if not sel.include.labels and not sel.exclude.labels:
        return None
    if not sel.exclude.labels and len(sel.include.labels) == 1:
        only = sel.include.labels[0]
        if only.name == "name" and only.value and not only.prefix:
            # The claims of one journal (every token a client or broker signs for
            # an append or a read): a spec's labels never hold "name", so comparing
            # names decides it, without building the spec's label set per append.
            name = only.value
            return lambda spec: spec.name == name
    return lambda spec: pb.matches(sel, pb.label_set_ext(spec))


async def list_journals(
    svc: service.Service,
    req: pb.ListRequest,
    claims: auth.Claims,
    context: grpc.aio.ServicerContext[pb.ListRequest, pb.ListResponse],
) -> None:
    """List journals matching a selector; with ``watch``, again after every change.

    Only journals the claims select are listed. Like the request's, the claims'
    selector may use the ``prefix`` meta-label (as Gazette, only List reads it so).
    """
    pb.validate(req)
    selector = pb.rewrite_prefix_selector(req.selector)
    allowed = authorizer(
        auth.Claims(claims.capability, pb.rewrite_prefix_selector(claims.selector))
    )
    observed = svc.observed
    min_rev = req.watch_resume.etcd.revision + 1 if req.HasField("watch_resume") else 0
    last_count, last_max_mod = -1, -1
    while True:
        await observed.ks.wait_for_revision(min_rev)
        state = observed.state
        header = svc.unrouted_header()
        min_rev = observed.ks.revision + 1

        journals: list[pb.ListResponse.Journal] = []
        max_mod = -1
        for i, kv in enumerate(state.items):
            spec: pb.JournalSpec = kv.decoded.spec
            if not pb.matches(selector, pb.label_set_ext(spec)):
                continue
            if allowed is not None and not allowed(spec):
                continue
            max_mod = max(max_mod, kv.mod_revision)
            j = pb.ListResponse.Journal(
                mod_revision=kv.mod_revision, create_revision=kv.create_revision
            )
            j.spec.CopyFrom(spec)
            j.route.CopyFrom(_route_with_endpoints(state, state.assignments_of(i)))
            journals.append(j)
        if len(journals) == last_count and max_mod == last_max_mod:
            continue  # Nothing this listing shows has changed.
        last_count, last_max_mod = len(journals), max_mod

        resp = pb.ListResponse(status=pb.OK)
        resp.header.CopyFrom(header)
        resp.journals.extend(journals[:MAX_JOURNALS_PER_LIST_RESPONSE])
        await context.write(resp)
        for i in range(
            MAX_JOURNALS_PER_LIST_RESPONSE, len(journals), MAX_JOURNALS_PER_LIST_RESPONSE
        ):
            await context.write(
                pb.ListResponse(journals=journals[i : i + MAX_JOURNALS_PER_LIST_RESPONSE])
            )
        if not req.watch:
            return
        await context.write(pb.ListResponse())  # End of this snapshot.


async def apply(
    svc: service.Service, req: pb.ApplyRequest, claims: auth.Claims, out: metrics.Outcome
) -> pb.ApplyResponse:
    """Apply journal spec changes in one checked etcd transaction (keyspace.apply_changes).

    Each change must be within the claims' selector, or the whole request is
    refused (``not authorized to <journal>``): an upsert by the new spec's labels
    and name, a delete by the journal's name (both as Gazette checks them), and
    either by the labels the journal has now, if it exists, so that a token can
    neither relabel a journal it doesn't select into its selector nor delete one.
    """
    limit = svc.config.max_message_size
    if (size := req.ByteSize()) > limit:  # grpc core lets it in: see core_receive_limit.
        raise errors.MessageTooLarge("ApplyRequest", size, limit)
    pb.validate(req)
    allowed = authorizer(claims)
    if allowed is not None:
        _authorize_changes(svc, req, claims, allowed)
    changes: list[keyspace.Change] = []
    for ch in req.changes:
        if ch.HasField("upsert"):
            changes.append(
                keyspace.Change(
                    ch.upsert.name, ch.upsert.SerializeToString(), ch.expect_mod_revision
                )
            )
        else:
            changes.append(keyspace.Change(ch.delete, None, ch.expect_mod_revision))
    resp = pb.ApplyResponse(status=pb.OK)
    resp.header.CopyFrom(svc.unrouted_header())
    ks = svc.observed.ks
    result = await keyspace.apply_changes(svc.etcd, ks.root, changes)
    if not result.succeeded:
        resp.status = pb.ETCD_TRANSACTION_FAILED
        out.set(resp.status)
    elif result.changed:
        deleted = [ch.delete for ch in req.changes if not ch.HasField("upsert")]
        try:
            await svc.fences.delete(*deleted)
        except errors.BrokerServerError as e:  # Denied, say: they only take some room.
            log.warning("could not drop the fences of deleted journals %s: %s", deleted, e)
        # Read our own write before answering.
        await ks.wait_for_revision(result.revision)
    resp.header.etcd.revision = result.revision
    return resp


def _authorize_changes(
    svc: service.Service,
    req: pb.ApplyRequest,
    claims: auth.Claims,
    allowed: Callable[[pb.JournalSpec], bool],
) -> None:
    state = svc.observed.state
    for ch in req.changes:
        if ch.HasField("upsert"):
            name = ch.upsert.name
            ok = allowed(ch.upsert)
        else:
            name = ch.delete
            ok = pb.matches(claims.selector, pb.label_set({"name": name}))
        i = state.find_item(name)
        if ok and i != -1:
            ok = allowed(state.item(i).spec)
        if not ok:
            raise pb.AuthorizationError(f"not authorized to {name}")


async def list_fragments(
    svc: service.Service, req: pb.FragmentsRequest, claims: auth.Claims, out: metrics.Outcome
) -> pb.FragmentsResponse:
    """A page of a journal's fragments (optionally signed URLs), proxied to a member if needed."""
    pb.validate(req)
    page_limit = req.page_limit or DEFAULT_FRAGMENTS_PAGE_LIMIT
    res = await svc.resolve(
        req.journal,
        may_proxy=not req.do_not_proxy,
        require_primary=False,
        proxy_header=req.header if req.HasField("header") else None,
        authorized=authorizer(claims),
    )
    resp = pb.FragmentsResponse(status=st(res.status))
    resp.header.CopyFrom(res.header)
    if res.status != pb.OK:
        out.set(res.status)
        return resp
    assert res.journal_spec is not None
    if not pb.journal_may_read(res.journal_spec):
        resp.status = pb.NOT_ALLOWED
        out.set(resp.status)
        return resp
    if res.replica is None:
        _, endpoint = service.pick_member(res, require_primary=False)
        fwd = pb.FragmentsRequest()
        fwd.CopyFrom(req)
        fwd.header.CopyFrom(res.header)
        proxied: pb.FragmentsResponse = await svc.peers.stub(endpoint).ListFragments(
            fwd, metadata=svc.peer_metadata(auth.Capability.READ, req.journal) or None
        )
        return proxied

    fragments = await _fragments(svc, res.replica)
    begins = [f.begin for f in fragments]
    nxt = bisect.bisect_left(begins, req.next_page_token)
    ttl = pb.duration_seconds(req.signatureTTL) if req.HasField("signatureTTL") else None
    while nxt < len(fragments) and len(resp.fragments) < page_limit:
        f = fragments[nxt]
        nxt += 1
        if (f.mod_time != 0 and f.mod_time < req.begin_mod_time) or (
            req.end_mod_time != 0 and (f.mod_time == 0 or f.mod_time > req.end_mod_time)
        ):
            continue
        out_f = resp.fragments.add()
        out_f.spec.CopyFrom(f.spec)
        if ttl is not None and f.spec.backing_store:
            out_f.signed_url = svc.registry.sign_get_url(f.spec, ttl)
    resp.next_page_token = fragments[nxt].begin if nxt < len(fragments) else 0
    return resp


async def _fragments(
    svc: service.Service, rep: replica.Replica
) -> cover_set.CoverSet | Sequence[cover_set.Fragment]:
    """Every fragment of the replica's journal, once its first store listing is in.

    With the native data plane, the plane's index of the journal has them (its
    spool's commits never reach Python's index, which holds listings alone).
    """
    if svc.native is None:
        return await rep.index.inspect()
    await rep.index.wait_first_refresh()  # The plane's index gets each listing with it.
    fragments = svc.native.fragments(rep.journal)
    if fragments is None:
        raise errors.ReplicaStopped(rep.journal)
    return fragments


async def store_health(
    svc: service.Service,
    req: pb.FragmentStoreHealthRequest,
    metadata: Any,
    out: metrics.Outcome,
) -> pb.FragmentStoreHealthResponse:
    """The health of a fragment store, optionally probing that deletes are permitted.

    A store that some journal spec names answers from the health checks the broker
    runs anyway (Gazette's behaviour). Any other URL would have the broker send
    requests signed with its own credentials wherever the caller points it (a
    server-side request forgery, and a new metrics label per URL), so checking it
    takes the claims of an administrator (APPLY over every journal: who may name it
    in a spec anyway), and it is checked once, with nothing kept (Gazette checks any
    URL for a READ token, and keeps checking it for an hour).
    """
    pb.validate(req)
    resp = pb.FragmentStoreHealthResponse(status=pb.OK)
    resp.header.CopyFrom(svc.unrouted_header())
    err: BaseException | None
    if svc.store_named(req.fragment_store):
        active = svc.registry.get(req.fragment_store)
        next_check, err = active.health_status()
        if err is not None and str(err) == stores.FIRST_HEALTH_CHECK:
            await next_check.wait()
            _, err = active.health_status()
        if err is None and req.check_delete:
            try:
                async with asyncio.timeout(DELETE_PROBE_TIMEOUT):
                    await active.check_delete(req.check_delete_prefix)
            except (frag_errors.StoreError, TimeoutError) as e:
                err = e
    else:
        admin = auth.Capability.READ | auth.Capability.APPLY
        try:
            claims = svc.auth.verify(metadata, admin)  # Without keys: allowed.
            allowed = authorizer(claims) is None
        except pb.AuthorizationError:
            allowed = False
        if not allowed:
            raise pb.AuthorizationError(
                f"fragment store {req.fragment_store} is named by no journal spec: checking"
                " it needs the APPLY capability over every journal"
            )
        err = await svc.registry.probe(
            req.fragment_store,
            delete_prefix=req.check_delete_prefix if req.check_delete else None,
        )
    if err is not None:
        resp.status = pb.FRAGMENT_STORE_UNHEALTHY
        resp.store_health_error = str(err) or type(err).__name__
        out.set(resp.status)
    return resp


def st(status: int) -> pb.Status.ValueType:
    """A Status number as the generated enum type."""
    return cast("pb.Status.ValueType", status)


def _route_with_endpoints(state: Any, assignments: Any) -> pb.Route:
    rt = routes.route_of(assignments)
    routes.attach_endpoints(rt, state)
    return rt

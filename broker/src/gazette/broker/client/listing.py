"""List, Apply, ListFragments and FragmentStoreHealth helpers.

These RPCs aren't tied to one journal's route (ListFragments is, and goes to
the default address, which proxies it), so they use the client's default
address. Each helper validates the broker's answer and raises a
:class:`~gazette.broker.client.errors.StatusError` for a non-OK status.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

import grpc

from gazette.broker import protocol as pb
from gazette.broker.client import errors, journal_client
from gazette.broker.protocol import auth

__all__ = [
    "WatchedList",
    "apply_journals",
    "fragment_store_health",
    "get_journal",
    "list_all_fragments",
    "list_journals",
    "read_list_response",
]

log = logging.getLogger(__name__)


def _validated(msg: Any, what: str) -> None:
    try:
        pb.validate(msg)
    except pb.ValidationError as e:
        raise errors.ProtocolViolation(f"validating broker {what}", e) from e


def _transport(
    e: grpc.aio.AioRpcError, method: str, client: journal_client.JournalClient
) -> errors.TransportError:
    return errors.transport_error(e, method=method, address=client.config.address)


async def read_list_response(stream: Any, request: pb.ListRequest) -> pb.ListResponse:
    """One complete listing (a snapshot) from a List stream.

    A unary listing ends with the stream; a watch's snapshot ends with an empty
    response. Continuation messages of the snapshot are merged into the first.
    """
    first = await stream.read()
    if first is grpc.aio.EOF:
        raise errors.ProtocolViolation(
            "reading ListResponse", EOFError("stream ended before a listing")
        )
    _validated(first, "ListResponse")
    if first.status != pb.OK:
        raise errors.status_error(first.status, header=first.header)
    if (
        request.HasField("watch_resume")
        and request.watch_resume.etcd.revision >= first.header.etcd.revision
    ):
        raise errors.ProtocolViolation(
            "reading ListResponse",
            ValueError(
                f"server sent unexpected ListResponse revision ({first.header.etcd.revision}; "
                f"expected > {request.watch_resume.etcd.revision})"
            ),
        )
    while True:
        nxt = await stream.read()
        if nxt is grpc.aio.EOF:
            if request.watch:
                raise errors.ProtocolViolation(
                    "reading ListResponse", EOFError("unexpected EOF of a watched listing")
                )
            return first  # type: ignore[no-any-return]
        if not nxt.journals:
            if request.watch:
                return first  # type: ignore[no-any-return]
            raise errors.ProtocolViolation(
                "reading ListResponse",
                ValueError("unexpected empty ListResponse.Journals in unary listing"),
            )
        first.journals.extend(nxt.journals)


async def list_journals(
    client: journal_client.JournalClient,
    selector: pb.LabelSelector | str | None = None,
) -> pb.ListResponse:
    """Every journal matching ``selector`` (a ``pb.LabelSelector`` or its text form)."""
    if isinstance(selector, str):
        selector = pb.parse_selector(selector)
    request = pb.ListRequest(selector=selector or pb.LabelSelector())
    call = client.default().stub.List(
        request,
        metadata=client.authorize(auth.Claims(auth.Capability.LIST, request.selector)),
        wait_for_ready=client.config.wait_for_ready,
    )
    try:
        resp = await read_list_response(call, request)
    except grpc.aio.AioRpcError as e:
        raise _transport(e, "List", client) from e
    finally:
        call.cancel()
    for journal in resp.journals:
        client.update_route(journal.spec.name, journal.route)
    return resp


async def get_journal(client: journal_client.JournalClient, journal: str) -> pb.JournalSpec:
    """The spec of ``journal``; raises JournalNotFound if there is none."""
    sel = pb.LabelSelector(include=pb.label_set({"name": pb.strip_meta(journal)}))
    resp = await list_journals(client, sel)
    if not resp.journals:
        raise errors.status_error(
            pb.JOURNAL_NOT_FOUND, journal=journal, detail="named journal does not exist"
        )
    return resp.journals[0].spec


async def apply_journals(
    client: journal_client.JournalClient,
    request: pb.ApplyRequest,
    *,
    max_txn_size: int = 0,
) -> pb.ApplyResponse:
    """Apply ``request`` in one etcd transaction, or batches of ``max_txn_size`` changes."""
    changes = list(request.changes)
    size = max_txn_size or max(1, len(changes))
    resp = pb.ApplyResponse()
    for i in range(0, max(1, len(changes)), size):
        batch = pb.ApplyRequest(changes=changes[i : i + size])
        try:
            resp = await client.default().stub.Apply(
                batch,
                metadata=client.authorize(auth.Claims(auth.Capability.APPLY), auth.APPLY_LIFETIME),
                wait_for_ready=client.config.wait_for_ready,
            )
        except grpc.aio.AioRpcError as e:
            raise _transport(e, "Apply", client) from e
        _validated(resp, "ApplyResponse")
        if resp.status != pb.OK:
            raise errors.status_error(resp.status, header=resp.header)
    return resp


async def list_all_fragments(
    client: journal_client.JournalClient,
    request: pb.FragmentsRequest,
) -> AsyncIterator[pb.FragmentsResponse._Fragment]:
    """Every fragment of ``request.journal`` in its time window, following page tokens."""
    req = pb.FragmentsRequest()
    req.CopyFrom(request)
    while True:
        dispatch = client.dispatch(req.journal, primary=False)
        try:
            resp = await dispatch.stub.ListFragments(
                req,
                metadata=client.authorize(auth.journal_claims(auth.Capability.READ, req.journal)),
                wait_for_ready=client.config.wait_for_ready,
            )
        except grpc.aio.AioRpcError as e:
            raise errors.transport_error(
                e, method="ListFragments", address=dispatch.endpoint or client.config.address
            ) from e
        _validated(resp, "FragmentsResponse")
        if resp.status != pb.OK:
            raise errors.status_error(resp.status, journal=req.journal, header=resp.header)
        for f in resp.fragments:
            yield f
        if resp.next_page_token == 0:
            return
        req.next_page_token = resp.next_page_token


async def fragment_store_health(
    client: journal_client.JournalClient,
    store: str,
    *,
    check_delete_prefix: str = "",
) -> pb.FragmentStoreHealthResponse:
    """Ask a broker to check ``store``; raises FragmentStoreUnhealthy with its error text."""
    req = pb.FragmentStoreHealthRequest(
        fragment_store=store,
        check_delete=bool(check_delete_prefix),
        check_delete_prefix=check_delete_prefix,
    )
    pb.validate(req)
    try:
        call = client.default().stub.FragmentStoreHealth(
            req,
            metadata=client.authorize(auth.Claims(auth.Capability.READ)),
            wait_for_ready=client.config.wait_for_ready,
        )
        resp = await call
        trailer = await call.trailing_metadata() if check_delete_prefix else None
    except grpc.aio.AioRpcError as e:
        raise _transport(e, "FragmentStoreHealth", client) from e
    _validated(resp, "FragmentStoreHealthResponse")
    if resp.status != pb.OK:
        raise errors.status_error(resp.status, header=resp.header, detail=resp.store_health_error)
    assert isinstance(resp, pb.FragmentStoreHealthResponse)
    if check_delete_prefix and not any(key == DELETE_PROBE_TRAILER for key, _ in (trailer or ())):
        raise errors.DeleteProbeNotRun(
            f"{store}: the broker answered healthy without probing deletes (Gazette brokers"
            " before the delete probe ignore check_delete): delete permission is untested"
        )
    return resp


#: Trailing metadata by which a broker says it ran the delete probe (see the server's api).
DELETE_PROBE_TRAILER = "gazette-delete-probe"


class WatchedList:
    """A listing kept current by a List watch; :meth:`updates` yields each new snapshot.

    Failures restart the watch after a backoff, resuming from the last header.
    """

    def __init__(
        self, client: journal_client.JournalClient, selector: pb.LabelSelector | str | None = None
    ) -> None:
        if isinstance(selector, str):
            selector = pb.parse_selector(selector)
        self.client = client
        self.request = pb.ListRequest(selector=selector or pb.LabelSelector(), watch=True)
        self.listing: pb.ListResponse | None = None

    async def updates(self) -> AsyncIterator[pb.ListResponse]:
        attempt = 0
        while True:
            call = self.client.default().stub.List(
                self.request,
                metadata=self.client.authorize(
                    auth.Claims(auth.Capability.LIST, self.request.selector)
                ),
                wait_for_ready=True,
            )
            try:
                while True:
                    resp = await read_list_response(call, self.request)
                    self.listing = resp
                    self.request.watch_resume.CopyFrom(resp.header)
                    for journal in resp.journals:
                        self.client.update_route(journal.spec.name, journal.route)
                    attempt = 0
                    yield resp
            except (grpc.aio.AioRpcError, errors.ClientError) as e:
                if errors.is_refused(e):
                    raise  # Retrying with the same credentials is refused the same way.
                if attempt:
                    log.warning(
                        "watched journal listing failed (attempt %d, will retry): %s", attempt, e
                    )
            finally:
                call.cancel()
            await self.client.clock.sleep(self.client.config.backoff.delay(attempt))
            attempt += 1

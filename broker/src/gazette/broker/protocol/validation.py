"""`validate(msg)`: validation of every message Gazette validates, by its type.

The rules live with what they check: `specs` (journals, processes, brokers),
`headers` (routes, headers), `rpc` (requests and responses), `fragments`,
`labels` and `selector`. Each raises a `ValidationError` whose context names
the path of fields, e.g. ``Fragment.Stores[0]: missing bucket (gs:///baz/bing/)``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from google.protobuf.message import Message

from gazette.broker.protocol import headers, rpc, specs
from gazette.broker.protocol import protocol_pb2 as _pb
from gazette.broker.protocol.fragments import validate_fragment
from gazette.broker.protocol.labels import validate_label, validate_labelset
from gazette.broker.protocol.selector import validate_selector

__all__ = ["validate"]

_VALIDATORS: dict[type[Message], Callable[[Any], None]] = {
    _pb.Label: validate_label,
    _pb.LabelSet: validate_labelset,
    _pb.LabelSelector: validate_selector,
    _pb.JournalSpec: specs.validate_journal_spec,
    _pb.JournalSpec.Fragment: specs.validate_spec_fragment,
    _pb.JournalSpec.Suspend: specs.validate_suspend,
    _pb.ProcessSpec: specs.validate_process_spec,
    _pb.ProcessSpec.ID: specs.validate_process_id,
    _pb.BrokerSpec: specs.validate_broker_spec,
    _pb.Fragment: validate_fragment,
    _pb.Route: headers.validate_route,
    _pb.Header: headers.validate_header,
    _pb.Header.Etcd: headers.validate_etcd,
    _pb.ReadRequest: rpc.validate_read_request,
    _pb.ReadResponse: rpc.validate_read_response,
    _pb.AppendRequest: rpc.validate_append_request,
    _pb.AppendResponse: rpc.validate_append_response,
    _pb.ReplicateRequest: rpc.validate_replicate_request,
    _pb.ReplicateResponse: rpc.validate_replicate_response,
    _pb.ListRequest: rpc.validate_list_request,
    _pb.ListResponse: rpc.validate_list_response,
    _pb.ListResponse.Journal: rpc.validate_list_response_journal,
    _pb.ApplyRequest: rpc.validate_apply_request,
    _pb.ApplyRequest.Change: rpc.validate_apply_change,
    _pb.ApplyResponse: rpc.validate_status_header,
    _pb.FragmentsRequest: rpc.validate_fragments_request,
    _pb.FragmentsResponse: rpc.validate_fragments_response,
    _pb.FragmentsResponse._Fragment: rpc.validate_fragments_response_fragment,
    _pb.FragmentStoreHealthRequest: rpc.validate_store_health_request,
    _pb.FragmentStoreHealthResponse: rpc.validate_status_header,
}


def validate(msg: Message) -> None:
    """Validate `msg` by its type; raise ValidationError on the first broken rule.

    Raises TypeError for a message type which has no validation rules.
    """
    fn = _VALIDATORS.get(type(msg))
    if fn is None:
        raise TypeError(f"no validation rules for {type(msg).__qualname__}")
    fn(msg)

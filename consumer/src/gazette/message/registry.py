"""The content-type -> Framing registry (Gazette `message/routines.go`).

The built-in framings are registered on import: JSON lines, fixed protobuf
and CSV. ``application/x-gazette-recoverylog`` is deliberately absent: a
recovery log holds no messages. The registry is process-wide, as Go's is;
register a framing at import time, before any reader or publisher needs it.
"""

from __future__ import annotations

from gazette.message import csv_framing, errors, fixed_framing, framing, json_framing

__all__ = ["framing_for", "register_framing"]

_REGISTRY: dict[str, framing.Framing] = {}


def register_framing(f: framing.Framing) -> None:
    """Register ``f`` for its content-type, replacing an earlier registration."""
    _REGISTRY[f.content_type] = f


def framing_for(content_type: str) -> framing.Framing:
    """The Framing of ``content_type``; raises UnknownContentType if none is registered."""
    try:
        return _REGISTRY[content_type]
    except KeyError:
        raise errors.UnknownContentType(content_type) from None


register_framing(json_framing.JSONFraming())
register_framing(fixed_framing.FixedFraming())
register_framing(csv_framing.CSVFraming())

"""Tokens, path components and journal names (Gazette `validator.go`).

Lengths are measured in UTF-8 bytes, as Gazette measures them. Allowed runes
are Unicode letters and numbers plus a few symbols; no allowed rune is at or
below ``#`` (the etcd key separator).
"""

from __future__ import annotations

from gazette.broker.protocol.errors import ValidationError, within
from gazette.broker.protocol.letters import LetterPattern

__all__ = [
    "MAX_JOURNAL_NAME_LEN",
    "MIN_JOURNAL_NAME_LEN",
    "PATH_SYMBOLS",
    "TOKEN_SYMBOLS",
    "path_clean",
    "split_meta",
    "strip_meta",
    "validate_journal",
    "validate_path_component",
    "validate_token",
]

TOKEN_SYMBOLS = "-_+/."
"""Symbols allowed in tokens (zones, suffixes, label names, shard ids)."""
PATH_SYMBOLS = TOKEN_SYMBOLS + "=%"
"""Symbols allowed in path tokens (journal names, label values, postfixes)."""

MIN_JOURNAL_NAME_LEN = 4
MAX_JOURNAL_NAME_LEN = 512


def _token_pattern(symbols: str) -> LetterPattern:
    # Every character escaped, as a class member: '-' and ']' are never a range or an end.
    return LetterPattern("[<LN>" + "".join("\\" + c for c in symbols) + "]*")


_TOKEN_RE = {sym: _token_pattern(sym) for sym in (TOKEN_SYMBOLS, PATH_SYMBOLS)}


def _utf8_len(value: str) -> int:
    # ASCII is the overwhelmingly common case and needs no encoding.
    return len(value) if value.isascii() else len(value.encode("utf-8", "surrogatepass"))


def validate_token(value: str, min_len: int, max_len: int, symbols: str = TOKEN_SYMBOLS) -> None:
    """Require `min_len` <= UTF-8 length <= `max_len`, and only letters, numbers and `symbols`."""
    n = _utf8_len(value)
    if n < min_len or n > max_len:
        raise ValidationError(f"invalid length ({n}; expected {min_len} <= length <= {max_len})")
    pattern = _TOKEN_RE.get(symbols) or _token_pattern(symbols)
    if pattern.for_text(value).fullmatch(value) is None:
        raise ValidationError(f"not a valid token ({value})")


def path_clean(p: str) -> str:
    """POSIX lexical path cleaning, exactly as Go's `path.Clean`."""
    if p == "":
        return "."
    rooted = p.startswith("/")
    out: list[str] = []
    for part in p.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if out and out[-1] != "..":
                out.pop()
            elif not rooted:
                out.append("..")
            continue
        out.append(part)
    joined = "/".join(out)
    if rooted:
        return "/" + joined
    return joined or "."


def validate_path_component(value: str, min_len: int, max_len: int) -> None:
    """A path token which is a clean, relative path (Gazette `ValidatePathComponent`)."""
    validate_token(value, min_len, max_len, PATH_SYMBOLS)
    if value:
        if path_clean(value) != value:
            raise ValidationError(f"must be a clean path ({value})")
        if value[0] == "/":
            raise ValidationError(f"cannot begin with '/' ({value})")


def split_meta(journal: str) -> tuple[str, str]:
    """Split ``name;meta`` into ``("name", ";meta")``; the meta part keeps its ``;``."""
    i = journal.find(";")
    if i == -1:
        return journal, ""
    return journal[:i], journal[i:]


def strip_meta(journal: str) -> str:
    """The journal name without any ``;meta`` suffix."""
    i = journal.find(";")
    return journal if i == -1 else journal[:i]


def validate_journal(journal: str) -> None:
    """A journal name, optionally with a ``;meta`` path segment (Read and Append accept one).

    The name is a clean, relative path component (so no ``.`` segment, empty
    segment or leading ``/``) and, unlike Gazette, has no ``..`` segment.
    """
    name, meta = split_meta(journal)
    validate_path_component(name, MIN_JOURNAL_NAME_LEN, MAX_JOURNAL_NAME_LEN)
    # A deliberate departure from Gazette's `Journal.Validate`: Go's path.Clean keeps
    # leading ".." segments, so Gazette accepts "../x" and its file:// store writes that
    # journal's fragments outside --broker.file-root. A journal name is a path under
    # every fragment store, so it must not climb out of one. (After the clean-path
    # check a ".." can only lead, but looking at every segment costs nothing.)
    if ".." in name.split("/"):
        raise ValidationError(f"cannot have a '..' path segment ({name})")
    if meta:
        with within("metadata path segment"):
            validate_path_component(meta[1:], 1, MAX_JOURNAL_NAME_LEN)

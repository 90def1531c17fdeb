"""A port of the parts of Go's `net/url.Parse` that Gazette validation relies on.

Python's `urllib.parse` accepts nearly anything; Gazette rejects URLs which Go
cannot parse (bad escapes, bad ports, control characters, a colon in a first
relative segment, ...). `parse_url` gives the same verdicts and messages, e.g.
``parse "http://a b": invalid character " " in host name``.
"""

from __future__ import annotations

import dataclasses

from gazette.broker.protocol.gotext import go_quote

__all__ = ["GoURL", "URLError", "parse_url"]


class URLError(ValueError):
    """A URL which Go's url.Parse rejects; str() is Go's message."""


@dataclasses.dataclass(frozen=True, slots=True)
class GoURL:
    """The parsed parts of a URL, as Go's url.URL holds them (host and path unescaped)."""

    scheme: str = ""
    opaque: str = ""
    userinfo: str | None = None
    host: str = ""
    path: str = ""
    raw_query: str = ""
    fragment: str = ""

    def is_abs(self) -> bool:
        return self.scheme != ""

    def hostname(self) -> str:
        host, _ = _split_host_port(self.host)
        return host

    def port(self) -> str:
        _, port = _split_host_port(self.host)
        return port


_HEX = "0123456789abcdefABCDEF"
_MODE_PATH, _MODE_HOST, _MODE_USER, _MODE_FRAGMENT = range(4)
_HOST_OK = set("!$&'()*+,;=:[]<>\"")


def _split_host_port(host_port: str) -> tuple[str, str]:
    host, port = host_port, ""
    colon = host.rfind(":")
    if colon != -1 and _valid_optional_port(host[colon:]):
        host, port = host[:colon], host[colon + 1 :]
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host, port


def _valid_optional_port(port: str) -> bool:
    if port == "":
        return True
    if port[0] != ":":
        return False
    return all("0" <= c <= "9" for c in port[1:])


def _should_escape(c: str, mode: int) -> bool:
    if c.isascii() and c.isalnum():
        return False
    if mode == _MODE_HOST and c in _HOST_OK:
        return False
    if c in "-_.~":
        return False
    if c in "$&+,/:;=?@":
        if mode == _MODE_USER:
            return c in "@/?:"
        return mode != _MODE_FRAGMENT
    return not (mode == _MODE_FRAGMENT and c in "!()*")


def _unescape(s: str, mode: int) -> str:
    # Validates %-escapes (and host characters); returns s with escapes decoded.
    if "%" not in s and mode != _MODE_HOST:
        return s
    raw = s.encode("utf-8", "surrogatepass")
    out = bytearray()
    i, n = 0, len(raw)
    while i < n:
        c = raw[i]
        if c == 0x25:  # '%'
            chunk = raw[i : i + 3]
            if i + 2 >= n or chr(raw[i + 1]) not in _HEX or chr(raw[i + 2]) not in _HEX:
                text = chunk.decode("utf-8", "replace")
                raise URLError(f"invalid URL escape {go_quote(text)}")
            if mode == _MODE_HOST and int(chr(raw[i + 1]), 16) < 8 and chunk != b"%25":
                raise URLError(f"invalid URL escape {go_quote(chunk.decode())}")
            out.append(int(chunk[1:].decode(), 16))
            i += 3
            continue
        if mode == _MODE_HOST and c < 0x80 and _should_escape(chr(c), mode):
            raise URLError(f"invalid character {go_quote(chr(c))} in host name")
        out.append(c)
        i += 1
    return out.decode("utf-8", "replace")


def _get_scheme(raw: str) -> tuple[str, str]:
    for i, c in enumerate(raw):
        if ("a" <= c <= "z") or ("A" <= c <= "Z"):
            continue
        if ("0" <= c <= "9") or c in "+-.":
            if i == 0:
                return "", raw
            continue
        if c == ":":
            if i == 0:
                raise URLError("missing protocol scheme")
            return raw[:i], raw[i + 1 :]
        return "", raw
    return "", raw


def _parse_host(host: str) -> str:
    if host.startswith("["):
        i = host.rfind("]")
        if i < 0:
            raise URLError("missing ']' in host")
        colon_port = host[i + 1 :]
        if not _valid_optional_port(colon_port):
            raise URLError(f"invalid port {go_quote(colon_port)} after host")
    else:
        i = host.rfind(":")
        if i != -1:
            colon_port = host[i:]
            if not _valid_optional_port(colon_port):
                raise URLError(f"invalid port {go_quote(colon_port)} after host")
    return _unescape(host, _MODE_HOST)


def _valid_userinfo(s: str) -> bool:
    for c in s:
        if ("A" <= c <= "Z") or ("a" <= c <= "z") or ("0" <= c <= "9"):
            continue
        if c in "-._:~!$&'()*+,;=%@":
            continue
        return False
    return True


def _parse(raw: str) -> GoURL:
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in raw):
        raise URLError("net/url: invalid control character in URL")
    if raw == "*":
        return GoURL(path="*")
    scheme, rest = _get_scheme(raw)
    scheme = scheme.lower()
    if rest.endswith("?") and rest.count("?") == 1:
        rest, query = rest[:-1], ""
    else:
        rest, _, query = rest.partition("?")
    if not rest.startswith("/"):
        if scheme:
            return GoURL(scheme=scheme, opaque=rest, raw_query=query)
        if ":" in rest.partition("/")[0]:
            raise URLError("first path segment in URL cannot contain colon")
    userinfo: str | None = None
    host = ""
    if (scheme or not rest.startswith("///")) and rest.startswith("//"):
        authority, rest = rest[2:], ""
        i = authority.find("/")
        if i >= 0:
            authority, rest = authority[:i], authority[i:]
        at = authority.rfind("@")
        host = _parse_host(authority[at + 1 :] if at >= 0 else authority)
        if at >= 0:
            userinfo = authority[:at]
            if not _valid_userinfo(userinfo):
                raise URLError("net/url: invalid userinfo")
            _unescape(userinfo, _MODE_USER)
    path = _unescape(rest, _MODE_PATH)
    return GoURL(scheme=scheme, userinfo=userinfo, host=host, path=path, raw_query=query)


def parse_url(raw: str) -> GoURL:
    """Parse `raw` as Go's url.Parse does; raise URLError with Go's text on failure."""
    u, sep, frag = raw.partition("#")
    try:
        parsed = _parse(u)
    except URLError as e:
        raise URLError(f"parse {go_quote(u)}: {e}") from None
    if not sep or frag == "":
        return parsed
    try:
        fragment = _unescape(frag, _MODE_FRAGMENT)
    except URLError as e:
        raise URLError(f"parse {go_quote(raw)}: {e}") from None
    return dataclasses.replace(parsed, fragment=fragment)

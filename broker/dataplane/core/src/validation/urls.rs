//! Endpoints, and the parts of Go's `net/url.Parse` their validation rests on (ours:
//! `gazette.broker.protocol.urls`).
//!
//! Gazette refuses an endpoint Go cannot parse, with Go's words (`parse "http://a b":
//! invalid character " " in host name`), so the verdicts and the texts of Go's parser
//! are ported here, as the Python broker ports them: checks only, since an endpoint's
//! validity needs just its scheme and whether it has a host.

use super::{fail, unicode, ValidationError, Verdict};

/// An absolute URL with a host (Gazette `broker/protocol/endpoint.go`).
pub fn validate_endpoint(url: &str) -> Verdict {
    let parsed = parse_url(url).map_err(ValidationError::new)?;
    if parsed.scheme.is_empty() {
        return fail(format!("not absolute: {url}"));
    }
    if !parsed.has_host {
        return fail(format!("missing host: {url}"));
    }
    Ok(())
}

/// What validation needs of a parsed URL.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Parsed {
    /// Lower-cased; empty for a relative URL.
    pub scheme: String,
    pub has_host: bool,
}

/// Parses as Go's `url.Parse` does, or fails with its text.
pub(super) fn parse_url(raw: &str) -> Result<Parsed, String> {
    let (u, fragment) = match raw.split_once('#') {
        Some((u, fragment)) => (u, Some(fragment)),
        None => (raw, None),
    };
    let parsed = parse(u).map_err(|e| format!("parse {}: {e}", go_quote(u)))?;
    if let Some(fragment) = fragment.filter(|f| !f.is_empty()) {
        check_escapes(fragment, Mode::Fragment)
            .map_err(|e| format!("parse {}: {e}", go_quote(raw)))?;
    }
    Ok(parsed)
}

/// The part of a URL being unescaped, which decides what it may hold.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Path,
    Host,
    UserInfo,
    Fragment,
}

fn parse(raw: &str) -> Result<Parsed, String> {
    if raw.bytes().any(|b| b < 0x20 || b == 0x7f) {
        return Err("net/url: invalid control character in URL".to_string());
    }
    if raw == "*" {
        return Ok(Parsed {
            scheme: String::new(),
            has_host: false,
        });
    }
    let (scheme, rest) = split_scheme(raw)?;
    let scheme = scheme.to_ascii_lowercase();
    let rest = rest.split_once('?').map_or(rest, |(rest, _query)| rest);
    if !rest.starts_with('/') {
        if !scheme.is_empty() {
            // An opaque URL ("mailto:x"): Go checks nothing more of it.
            return Ok(Parsed {
                scheme,
                has_host: false,
            });
        }
        if rest.split('/').next().unwrap_or("").contains(':') {
            return Err("first path segment in URL cannot contain colon".to_string());
        }
    }
    let mut has_host = false;
    let mut path = rest;
    if (!scheme.is_empty() || !rest.starts_with("///")) && rest.starts_with("//") {
        let (authority, after) = match rest[2..].find('/') {
            Some(i) => rest[2..].split_at(i),
            None => (&rest[2..], ""),
        };
        path = after;
        let (userinfo, host) = match authority.rfind('@') {
            Some(at) => (Some(&authority[..at]), &authority[at + 1..]),
            None => (None, authority),
        };
        check_host(host)?;
        has_host = !host.is_empty();
        if let Some(userinfo) = userinfo {
            if !userinfo.bytes().all(valid_userinfo_byte) {
                return Err("net/url: invalid userinfo".to_string());
            }
            check_escapes(userinfo, Mode::UserInfo)?;
        }
    }
    check_escapes(path, Mode::Path)?;
    Ok(Parsed { scheme, has_host })
}

/// Splits `scheme:rest`, or gives no scheme when the text before the first `:` isn't one.
fn split_scheme(raw: &str) -> Result<(&str, &str), String> {
    for (i, b) in raw.bytes().enumerate() {
        match b {
            b'a'..=b'z' | b'A'..=b'Z' => {}
            b'0'..=b'9' | b'+' | b'-' | b'.' if i > 0 => {}
            b':' if i == 0 => return Err("missing protocol scheme".to_string()),
            b':' => return Ok((&raw[..i], &raw[i + 1..])),
            _ => return Ok(("", raw)),
        }
    }
    Ok(("", raw))
}

fn check_host(host: &str) -> Result<(), String> {
    let colon_port = if host.starts_with('[') {
        let Some(i) = host.rfind(']') else {
            return Err("missing ']' in host".to_string());
        };
        Some(&host[i + 1..])
    } else {
        host.rfind(':').map(|i| &host[i..])
    };
    if let Some(colon_port) = colon_port {
        if !valid_optional_port(colon_port) {
            return Err(format!("invalid port {} after host", go_quote(colon_port)));
        }
    }
    check_escapes(host, Mode::Host)
}

fn valid_optional_port(port: &str) -> bool {
    match port.strip_prefix(':') {
        _ if port.is_empty() => true,
        Some(digits) => digits.bytes().all(|b| b.is_ascii_digit()),
        None => false,
    }
}

fn valid_userinfo_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"-._:~!$&'()*+,;=%@".contains(&b)
}

/// Whether Go escapes ASCII byte `c` in `mode` (its `shouldEscape`).
fn should_escape(c: u8, mode: Mode) -> bool {
    if c.is_ascii_alphanumeric() {
        return false;
    }
    if mode == Mode::Host && b"!$&'()*+,;=:[]<>\"".contains(&c) {
        return false;
    }
    if b"-_.~".contains(&c) {
        return false;
    }
    if b"$&+,/:;=?@".contains(&c) {
        return match mode {
            Mode::UserInfo => b"@/?:".contains(&c),
            Mode::Fragment => false,
            Mode::Path | Mode::Host => true,
        };
    }
    !(mode == Mode::Fragment && b"!()*".contains(&c))
}

/// Go's `unescape`, for its verdict only: every `%` starts two hex digits, and a host
/// holds only what a host may.
fn check_escapes(s: &str, mode: Mode) -> Result<(), String> {
    if mode != Mode::Host && !s.contains('%') {
        return Ok(());
    }
    let raw = s.as_bytes();
    let mut i = 0;
    while i < raw.len() {
        let c = raw[i];
        if c == b'%' {
            let chunk = &raw[i..(i + 3).min(raw.len())];
            if chunk.len() < 3 || !chunk[1].is_ascii_hexdigit() || !chunk[2].is_ascii_hexdigit() {
                return Err(format!(
                    "invalid URL escape {}",
                    go_quote(&String::from_utf8_lossy(chunk))
                ));
            }
            // In a host, Go decodes only escapes of bytes >= 0x80 (and "%25", the zone
            // separator of an IPv6 literal).
            if mode == Mode::Host && hex_value(chunk[1]) < 8 && chunk != b"%25" {
                return Err(format!(
                    "invalid URL escape {}",
                    go_quote(&String::from_utf8_lossy(chunk))
                ));
            }
            i += 3;
            continue;
        }
        if mode == Mode::Host && c < 0x80 && should_escape(c, mode) {
            return Err(format!(
                "invalid character {} in host name",
                go_quote(&char::from(c).to_string())
            ));
        }
        i += 1;
    }
    Ok(())
}

fn hex_value(b: u8) -> u8 {
    match b {
        b'0'..=b'9' => b - b'0',
        b'a'..=b'f' => b - b'a' + 10,
        _ => b - b'A' + 10,
    }
}

/// Go's `%q` of a string, as Python renders it: double-quoted, printable characters
/// kept (Python's `str.isprintable`, see [`unicode::is_printable`]), others escaped.
pub(super) fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for ch in s.chars() {
        match ch {
            '"' | '\\' => {
                out.push('\\');
                out.push(ch);
            }
            _ if unicode::is_printable(ch) => out.push(ch),
            '\x07' => out.push_str("\\a"),
            '\x08' => out.push_str("\\b"),
            '\x0c' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\x0b' => out.push_str("\\v"),
            _ => {
                let code = u32::from(ch);
                let escaped = if code < 0x80 {
                    format!("\\x{code:02x}")
                } else if code <= 0xffff {
                    format!("\\u{code:04x}")
                } else {
                    format!("\\U{code:08x}")
                };
                out.push_str(&escaped);
            }
        }
    }
    out.push('"');
    out
}

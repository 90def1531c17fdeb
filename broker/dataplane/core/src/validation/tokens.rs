//! Tokens, path components and journal names (Gazette `broker/protocol/validator.go`,
//! `journal_spec_extensions.go`; ours: `gazette.broker.protocol.tokens`).
//!
//! Lengths are UTF-8 bytes, as Gazette counts them. A token's runes are letters and
//! numbers ([`super::unicode`]) or one of a few symbols, none at or below `#`, which
//! separates the parts of etcd keys.

use super::{fail, unicode, Verdict, Within};

/// Symbols allowed in tokens (zones, suffixes, label names).
pub const TOKEN_SYMBOLS: &str = "-_+/.";
/// Symbols allowed in path tokens (journal names, label values, postfixes).
pub const PATH_SYMBOLS: &str = "-_+/.=%";

pub const MIN_JOURNAL_NAME_LEN: usize = 4;
pub const MAX_JOURNAL_NAME_LEN: usize = 512;

/// `min_len <= len(value) <= max_len` in UTF-8 bytes, and only letters, numbers and
/// `symbols`.
pub fn validate_token(value: &str, min_len: usize, max_len: usize, symbols: &str) -> Verdict {
    let n = value.len();
    if n < min_len || n > max_len {
        return fail(format!(
            "invalid length ({n}; expected {min_len} <= length <= {max_len})"
        ));
    }
    let allowed = |c: char| {
        if c.is_ascii() {
            c.is_ascii_alphanumeric() || symbols.contains(c)
        } else {
            unicode::is_letter_or_number(c)
        }
    };
    if !value.chars().all(allowed) {
        return fail(format!("not a valid token ({value})"));
    }
    Ok(())
}

/// Lexical cleaning of a slash-separated path, as Go's `path.Clean`: no empty or `.`
/// segments, `..` segments resolved where they can be, `.` for nothing.
pub fn path_clean(p: &str) -> String {
    if p.is_empty() {
        return ".".to_string();
    }
    let rooted = p.starts_with('/');
    let mut out: Vec<&str> = Vec::new();
    for part in p.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                if out.last().is_some_and(|last| *last != "..") {
                    out.pop();
                } else if !rooted {
                    out.push("..");
                }
            }
            _ => out.push(part),
        }
    }
    let joined = out.join("/");
    if rooted {
        format!("/{joined}")
    } else if joined.is_empty() {
        ".".to_string()
    } else {
        joined
    }
}

/// A path token which is a clean, relative path (Gazette `ValidatePathComponent`).
pub fn validate_path_component(value: &str, min_len: usize, max_len: usize) -> Verdict {
    validate_token(value, min_len, max_len, PATH_SYMBOLS)?;
    if !value.is_empty() {
        if path_clean(value) != value {
            return fail(format!("must be a clean path ({value})"));
        }
        if value.starts_with('/') {
            return fail(format!("cannot begin with '/' ({value})"));
        }
    }
    Ok(())
}

/// A journal name, optionally followed by a `;meta` path segment (Read and Append
/// requests may name one).
///
/// Departure from Gazette, as Python departs: Go's `path.Clean` keeps leading `..`
/// segments, so Gazette accepts `../x`, whose fragments a `file://` store would write
/// outside its root. A journal name is a path under every store, so no segment of it
/// may be `..`.
pub fn validate_journal(journal: &str) -> Verdict {
    let (name, meta) = journal.split_at(journal.find(';').unwrap_or(journal.len()));
    validate_path_component(name, MIN_JOURNAL_NAME_LEN, MAX_JOURNAL_NAME_LEN)?;
    if name.split('/').any(|segment| segment == "..") {
        return fail(format!("cannot have a '..' path segment ({name})"));
    }
    if let Some(meta) = meta.strip_prefix(';') {
        validate_path_component(meta, 1, MAX_JOURNAL_NAME_LEN).within("metadata path segment")?;
    }
    Ok(())
}

//! Validation of the messages the data plane serves, word for word as the Python
//! broker validates them (`gazette.broker.protocol.validation`).
//!
//! The rules are Gazette's `Validate()` methods (`broker/protocol/rpc_extensions.go`,
//! `header_extensions.go`, `route_extensions.go`, `fragment_extensions.go`,
//! `label_extensions.go`, `journal_spec_extensions.go`, `validator.go`), as the Python
//! broker states them. Where the two disagree, this module follows Python: its texts
//! are what clients of either data plane see, and what the parity suite
//! (`broker/tests/protocol/test_pb_validate_native.py`) holds us to. Each departure is
//! noted where it is made.
//!
//! A [`ValidationError`] names the broken rule (`reason`) and the path of fields that
//! led to it (`context`), outermost first; it displays as
//! `Proposal.Journal: invalid length (2; expected 4 <= length <= 512)`, exactly as
//! `str()` of Python's `ValidationError` does.
//!
//! ```
//! use dataplane::{protocol::Fragment, validation};
//! let proposal = Fragment { journal: "a/journal".into(), compression_codec: 1, ..Default::default() };
//! assert!(validation::validate_fragment(&proposal).is_ok());
//! ```

use std::fmt;

use crate::protocol::{
    append_request, header, process_spec, AppendRequest, AppendResponse, CompressionCodec,
    Fragment, Header, Label, LabelSelector, LabelSet, ReadRequest, ReplicateRequest,
    ReplicateResponse, Route, Status,
};

mod text;
mod tokens;
mod unicode;
mod urls;

#[cfg(test)]
mod tests;

pub use tokens::{
    path_clean, validate_journal, validate_path_component, validate_token, MAX_JOURNAL_NAME_LEN,
    MIN_JOURNAL_NAME_LEN, PATH_SYMBOLS, TOKEN_SYMBOLS,
};
pub use urls::validate_endpoint;

// Bounds of tokens, in UTF-8 bytes (Python's `specs` and `labels`).
pub const MIN_ZONE_LEN: usize = 1;
pub const MAX_ZONE_LEN: usize = 32;
pub const MIN_SUFFIX_LEN: usize = 4;
pub const MAX_SUFFIX_LEN: usize = 128;
pub const MIN_LABEL_LEN: usize = 2;
pub const MAX_LABEL_LEN: usize = 64;
pub const MAX_LABEL_VALUE_LEN: usize = 1024;

/// A message, or a value within one, breaks a rule of the protocol.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValidationError {
    /// The fields leading to the offending value, outermost first
    /// (`["Proposal", "Journal"]`); empty when the message itself is at fault.
    pub context: Vec<String>,
    /// The rule broken, with the offending value.
    pub reason: String,
}

impl ValidationError {
    pub fn new(reason: impl Into<String>) -> Self {
        ValidationError {
            context: Vec::new(),
            reason: reason.into(),
        }
    }

    /// Puts `field` in front of the context, as the error leaves the message that has it.
    pub fn within(mut self, field: impl Into<String>) -> Self {
        self.context.insert(0, field.into());
        self
    }
}

impl fmt::Display for ValidationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.context.is_empty() {
            f.write_str(&self.reason)
        } else {
            write!(f, "{}: {}", self.context.join("."), self.reason)
        }
    }
}

impl std::error::Error for ValidationError {}

/// The outcome of validating one message or value.
pub type Verdict = Result<(), ValidationError>;

fn fail(reason: impl Into<String>) -> Verdict {
    Err(ValidationError::new(reason))
}

/// Python's `with within(field):` around a check.
trait Within {
    fn within(self, field: &str) -> Self;
    /// `field[index]`, formatted only when the check failed.
    fn within_at(self, field: &str, index: usize) -> Self;
}

impl Within for Verdict {
    fn within(self, field: &str) -> Self {
        self.map_err(|e| e.within(field))
    }

    fn within_at(self, field: &str, index: usize) -> Self {
        self.map_err(|e| e.within(format!("{field}[{index}]")))
    }
}

// ------------------------------------------------------------------ labels

/// A label outside a selector: a name token of 2..=64 bytes, a value path token of
/// 0..=1024 bytes, and no prefix.
pub fn validate_label(m: &Label) -> Verdict {
    label(m, false)
}

fn label(m: &Label, allow_prefix: bool) -> Verdict {
    validate_token(&m.name, MIN_LABEL_LEN, MAX_LABEL_LEN, TOKEN_SYMBOLS).within("Name")?;
    validate_token(&m.value, 0, MAX_LABEL_VALUE_LEN, PATH_SYMBOLS).within("Value")?;
    if m.prefix && !allow_prefix {
        return fail("Prefix may not be set outside of a LabelSelector");
    }
    Ok(())
}

/// Valid labels, sorted by (name, value) without duplicates, where a name with an
/// empty value has no other value.
pub fn validate_label_set(m: &LabelSet) -> Verdict {
    labels(&m.labels, false)
}

/// An absent set is an empty one, as in Python (proto3 reads it so).
fn labels_of(m: &Option<LabelSet>) -> &[Label] {
    m.as_ref().map_or(&[], |s| &s.labels)
}

fn labels(labels: &[Label], allow_prefix: bool) -> Verdict {
    for (i, cur) in labels.iter().enumerate() {
        label(cur, allow_prefix).within_at("Labels", i)?;
        let Some(prev) = i.checked_sub(1).map(|p| &labels[p]) else {
            continue;
        };
        // Strings order by code point in Python, which is UTF-8 byte order here.
        if prev.name < cur.name {
            continue;
        }
        if prev.name == cur.name {
            if prev.value >= cur.value {
                return fail(format!(
                    "Labels not in unique, sorted order (index {i}; label {} value {} <= {})",
                    cur.name, cur.value, prev.value
                ));
            }
            if prev.value.is_empty() {
                return fail(format!(
                    "Label has empty & non-empty values (index {i}; label {} value {})",
                    cur.name, cur.value
                ));
            }
        } else {
            return fail(format!(
                "Labels not in unique, sorted order (index {i}; label name {} <= {})",
                cur.name, prev.name
            ));
        }
    }
    Ok(())
}

/// Include and exclude groups which are valid label sets, where labels may be prefixes.
pub fn validate_label_selector(m: &LabelSelector) -> Verdict {
    labels(labels_of(&m.include), true).within("Include")?;
    labels(labels_of(&m.exclude), true).within("Exclude")
}

// ------------------------------------------------------------------ fragments

/// A codec a fragment can be written with: any named one but INVALID.
pub fn validate_codec(codec: i32) -> Verdict {
    match CompressionCodec::try_from(codec) {
        Ok(CompressionCodec::Invalid) | Err(_) => {
            fail(format!("invalid value ({})", text::codec_name(codec)))
        }
        Ok(_) => Ok(()),
    }
}

/// A valid journal, begin <= end, a valid codec, and a clean relative postfix of
/// at most 512 bytes.
pub fn validate_fragment(f: &Fragment) -> Verdict {
    validate_journal(&f.journal).within("Journal")?;
    if f.begin > f.end {
        return fail(format!(
            "expected Begin <= End (have {}, {})",
            f.begin, f.end
        ));
    }
    validate_codec(f.compression_codec).within("CompressionCodec")?;
    validate_path_component(&f.path_postfix, 0, MAX_JOURNAL_NAME_LEN).within("PathPostfix")
}

// ------------------------------------------------------------------ processes, routes, headers

/// A zone token of 1..=32 bytes and a suffix token of 4..=128 bytes.
pub fn validate_process_id(m: &process_spec::Id) -> Verdict {
    validate_token(&m.zone, MIN_ZONE_LEN, MAX_ZONE_LEN, TOKEN_SYMBOLS).within("Zone")?;
    validate_token(&m.suffix, MIN_SUFFIX_LEN, MAX_SUFFIX_LEN, TOKEN_SYMBOLS).within("Suffix")
}

/// Valid members in strictly increasing (zone, suffix) order, a primary that indexes
/// one of them (or -1), and either no endpoints or one per member, each empty or valid.
pub fn validate_route(m: &Route) -> Verdict {
    for (i, cur) in m.members.iter().enumerate() {
        validate_process_id(cur).within_at("Members", i)?;
        if let Some(prev) = i.checked_sub(1).map(|p| &m.members[p]) {
            if (&prev.zone, &prev.suffix) >= (&cur.zone, &cur.suffix) {
                return fail(format!(
                    "Members not in unique, sorted order (index {i}; {} <= {})",
                    id_text(prev),
                    id_text(cur)
                ));
            }
        }
    }
    let n = m.members.len();
    if m.primary < -1 || i64::from(m.primary) >= n as i64 {
        return fail(format!(
            "invalid Primary ({}; expected -1 <= Primary < {n})",
            m.primary
        ));
    }
    let ne = m.endpoints.len();
    if ne != 0 && ne != n {
        return fail(format!(
            "len(Endpoints) != 0, and != len(Members) ({ne} vs {n})"
        ));
    }
    for (i, ep) in m.endpoints.iter().enumerate() {
        if !ep.is_empty() {
            validate_endpoint(ep).within_at("Endpoints", i)?;
        }
    }
    Ok(())
}

/// Go's `%+v` of a process ID, as Gazette's message prints it.
fn id_text(m: &process_spec::Id) -> String {
    format!("{{Zone:{} Suffix:{}}}", m.zone, m.suffix)
}

/// Non-zero cluster, member and raft term, and a positive revision.
pub fn validate_etcd(m: &header::Etcd) -> Verdict {
    if m.cluster_id == 0 {
        return fail("invalid ClusterId (expected != 0)");
    }
    if m.member_id == 0 {
        return fail("invalid MemberId (expected != 0)");
    }
    if m.revision <= 0 {
        return fail(format!(
            "invalid Revision ({}; expected 0 < revision)",
            m.revision
        ));
    }
    if m.raft_term == 0 {
        return fail("invalid RaftTerm (expected != 0)");
    }
    Ok(())
}

/// A process ID (when not zero), a valid route and etcd header. An absent route or
/// etcd header is judged as an empty one (and an empty etcd header is invalid).
pub fn validate_header(m: &Header) -> Verdict {
    if let Some(pid) = &m.process_id {
        if !pid.zone.is_empty() || !pid.suffix.is_empty() {
            validate_process_id(pid).within("ProcessId")?;
        }
    }
    match &m.route {
        Some(route) => validate_route(route),
        None => validate_route(&Route::default()),
    }
    .within("Route")?;
    match &m.etcd {
        Some(etcd) => validate_etcd(etcd),
        None => validate_etcd(&header::Etcd::default()),
    }
    .within("Etcd")
}

fn header_in(m: &Header) -> Verdict {
    validate_header(m).within("Header")
}

// ------------------------------------------------------------------ requests and responses

/// A `Status` this protocol knows.
pub fn validate_status(status: i32) -> Verdict {
    if Status::try_from(status).is_err() {
        return fail(format!("invalid status ({status})"));
    }
    Ok(())
}

/// A header (if any), a journal (which may carry `;meta`), and offsets where
/// -1 <= offset, and end offset 0 or >= offset.
pub fn validate_read_request(m: &ReadRequest) -> Verdict {
    if let Some(h) = &m.header {
        header_in(h)?;
    }
    validate_journal(&m.journal).within("Journal")?;
    if m.offset < -1 {
        return fail(format!(
            "invalid Offset ({}; expected -1 <= Offset <= MaxInt64)",
            m.offset
        ));
    }
    if m.end_offset < 0 || (m.end_offset != 0 && m.end_offset < m.offset) {
        return fail(format!(
            "invalid EndOffset ({}; expected 0 or Offset <= EndOffset)",
            m.end_offset
        ));
    }
    Ok(())
}

/// The first message of an append names the journal (and its options) and carries no
/// content; the ones after carry content only.
pub fn validate_append_request(m: &AppendRequest) -> Verdict {
    if !m.journal.is_empty() {
        if let Some(h) = &m.header {
            header_in(h)?;
        }
        validate_journal(&m.journal).within("Journal")?;
        if m.offset < 0 {
            return fail(format!("invalid Offset ({}; expected >= 0)", m.offset));
        }
        if !m.content.is_empty() {
            return fail("unexpected Content");
        }
        if let Some(s) = &m.check_registers {
            validate_label_selector(s).within("CheckRegisters")?;
        }
        if let Some(s) = &m.union_registers {
            validate_label_set(s).within("UnionRegisters")?;
        }
        if let Some(s) = &m.subtract_registers {
            validate_label_set(s).within("SubtractRegisters")?;
        }
        if append_request::Suspend::try_from(m.suspend).is_err() {
            return fail(format!("invalid Suspend variant ({})", m.suspend)).within("Suspend");
        }
        return Ok(());
    }
    if m.header.is_some() {
        return fail("unexpected Header");
    }
    if m.do_not_proxy {
        return fail("unexpected DoNotProxy");
    }
    if m.offset != 0 {
        return fail("unexpected Offset");
    }
    if m.check_registers.is_some() {
        return fail("unexpected CheckRegisters");
    }
    if m.union_registers.is_some() {
        return fail("unexpected UnionRegisters");
    }
    if m.subtract_registers.is_some() {
        return fail("unexpected SubtractRegisters");
    }
    if m.suspend != append_request::Suspend::Resume as i32 {
        // "RESUMED" (sic): Gazette's text, kept by Python.
        return fail(format!(
            "unexpected Suspend ({}; expected SUSPEND_RESUMED)",
            text::suspend_name(m.suspend)
        ));
    }
    Ok(())
}

/// A known status and a valid header; OK carries a commit, and OK or
/// REGISTER_MISMATCH the registers.
pub fn validate_append_response(m: &AppendResponse) -> Verdict {
    validate_status(m.status).within("Status")?;
    match &m.header {
        Some(h) => header_in(h),
        None => header_in(&Header::default()),
    }?;
    let ok = m.status == Status::Ok as i32;
    if ok && m.commit.is_none() {
        return fail("expected Commit");
    }
    if (ok || m.status == Status::RegisterMismatch as i32) && m.registers.is_none() {
        return fail("expected Registers");
    }
    if let Some(f) = &m.commit {
        validate_fragment(f).within("Commit")?;
    }
    if let Some(r) = &m.registers {
        validate_label_set(r).within("Registers")?;
    }
    Ok(())
}

/// A proposal (with the RPC's header on its first message, which must then ask for an
/// acknowledgement), or content, never both.
///
/// Departure from Gazette: Go tells absent content from empty content and refuses a
/// proposal with any content at all (`Content != nil`); proto3 cannot tell them
/// apart in Python, which judges by emptiness, and so does this.
pub fn validate_replicate_request(m: &ReplicateRequest) -> Verdict {
    if let Some(proposal) = &m.proposal {
        if let Some(h) = &m.header {
            header_in(h)?;
            if !m.acknowledge {
                return fail("expected Acknowledge with Header");
            }
        }
        validate_fragment(proposal).within("Proposal")?;
        // Absent registers read as empty (Gazette's shim for peers before v0.83).
        labels(labels_of(&m.registers), false).within("Registers")?;
        if !m.content.is_empty() {
            return fail(format!(
                "unexpected Content with Proposal (len {})",
                m.content.len()
            ));
        }
        if m.content_delta != 0 {
            return fail(format!(
                "unexpected ContentDelta with Proposal ({})",
                m.content_delta
            ));
        }
        if !m.deprecated_journal.is_empty() && m.deprecated_journal != proposal.journal {
            return fail(format!(
                "DeprecatedJournal and Proposal.Journal mismatch ({} vs {})",
                m.deprecated_journal, proposal.journal
            ));
        }
        return Ok(());
    }
    if m.content.is_empty() {
        return fail("expected Content or Proposal");
    }
    if m.content_delta < 0 {
        return fail(format!(
            "invalid ContentDelta ({}; expected >= 0)",
            m.content_delta
        ));
    }
    if let Some(h) = &m.header {
        return fail(format!(
            "unexpected Header with Content ({})",
            text::header_text(h)
        ));
    }
    if let Some(r) = &m.registers {
        return fail(format!(
            "unexpected Registers with Content ({})",
            text::label_set_text(r)
        ));
    }
    if m.acknowledge {
        return fail("unexpected Acknowledge with Content");
    }
    if !m.deprecated_journal.is_empty() {
        return fail("unexpected DeprecatedJournal with Content");
    }
    Ok(())
}

/// A known status; WRONG_ROUTE carries a header and PROPOSAL_MISMATCH a fragment and
/// registers, and no other status carries any of them.
///
/// Gazette's own primary attaches a header to its first OK acknowledgement, so a
/// pipeline must not hold acknowledgements to this (Gazette's doesn't either).
pub fn validate_replicate_response(m: &ReplicateResponse) -> Verdict {
    validate_status(m.status).within("Status")?;
    if m.status == Status::WrongRoute as i32 {
        let Some(h) = &m.header else {
            return fail("expected Header");
        };
        header_in(h)?;
    } else if let Some(h) = &m.header {
        return fail(format!("unexpected Header ({})", text::header_text(h)));
    }
    if m.status == Status::ProposalMismatch as i32 {
        let Some(f) = &m.fragment else {
            return fail("expected Fragment");
        };
        validate_fragment(f).within("Fragment")?;
        let Some(r) = &m.registers else {
            return fail("expected Registers");
        };
        validate_label_set(r).within("Registers")?;
    } else if let Some(f) = &m.fragment {
        return fail(format!("unexpected Fragment ({})", text::fragment_text(f)));
    } else if let Some(r) = &m.registers {
        return fail(format!(
            "unexpected Registers ({})",
            text::label_set_text(r)
        ));
    }
    Ok(())
}

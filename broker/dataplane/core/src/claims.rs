//! The claims of a verified bearer token, read and checked as the Python server reads
//! them (`gazette.broker.protocol.auth`, after Gazette's `auth/auth.go` and
//! `broker/protocol/auth.go`).
//!
//! A token's payload is JSON: `cap`, a bit mask of capabilities; `sel`, a label
//! selector of the journals it covers (`{"include": {"labels": [...]}, "exclude":
//! ...}`); `iat` and `exp`, seconds since the epoch (`exp` required; 5 s of clock
//! skew tolerated both ways). Absent or null fields are zero values; unknown fields
//! are ignored; a field of the wrong type makes the token malformed. Refusals use the
//! server's words, so a caller reads the same reason whichever side refused it.

use serde_json::Value;

use crate::{
    labels,
    protocol::{JournalSpec, Label, LabelSelector, LabelSet},
};

/// Clock skew tolerated on `exp` and `iat`, in seconds.
pub const LEEWAY: f64 = 5.0;

/// Capability bits (Gazette's `pb.Capability_*`).
pub mod capability {
    /// List journals.
    pub const LIST: u32 = 1 << 1;
    /// Apply journal specs.
    pub const APPLY: u32 = 1 << 2;
    /// Read journals.
    pub const READ: u32 = 1 << 3;
    /// Append to journals.
    pub const APPEND: u32 = 1 << 4;
    /// Replicate journals (brokers' peers).
    pub const REPLICATE: u32 = 1 << 5;
    /// Named, in the order refusals name them.
    pub const NAMED: [(u32, &str); 5] = [
        (LIST, "LIST"),
        (APPLY, "APPLY"),
        (READ, "READ"),
        (APPEND, "APPEND"),
        (REPLICATE, "REPLICATE"),
    ];
}

/// What a token grants, and for how long.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Claims {
    /// Capability bits.
    pub capability: u32,
    /// The journals covered.
    pub selector: LabelSelector,
    /// Issued at (seconds since the epoch), if given.
    pub issued_at: Option<f64>,
    /// Expires at (seconds since the epoch).
    pub expires_at: f64,
}

impl Claims {
    /// Claims of a token's JSON payload, checked against `now` (seconds since the epoch).
    pub fn from_payload(payload: &[u8], now: f64) -> Result<Claims, String> {
        let value: Value = serde_json::from_slice(payload)
            .map_err(|e| format!("token is malformed: could not JSON decode claim: {e}"))?;
        let Value::Object(fields) = value else {
            return Err(malformed("Invalid payload string: must be a json object"));
        };
        let field = |name: &str| lookup(&fields, name);
        let capability = match field("cap") {
            None => 0,
            Some(v) => v
                .as_u64()
                .filter(|c| *c <= u64::from(u32::MAX))
                .map(|c| c as u32)
                .ok_or_else(|| malformed("cap: expected an unsigned 32-bit integer"))?,
        };
        let mut selector = LabelSelector::default();
        if let Some(sel) = field("sel") {
            let Value::Object(sel) = sel else {
                return Err(malformed("sel: expected an object"));
            };
            selector.include = Some(label_set(lookup(sel, "include"), "sel.include")?);
            selector.exclude = Some(label_set(lookup(sel, "exclude"), "sel.exclude")?);
        }
        // (Time claims by their exact names, as pyjwt and golang-jwt read them.)
        let time = |name: &str| -> Result<Option<f64>, String> {
            match fields.get(name).filter(|v| !v.is_null()) {
                None => Ok(None),
                Some(v) => v
                    .as_f64()
                    .filter(|t| t.is_finite())
                    .map(Some)
                    .ok_or_else(|| malformed(&format!("{name}: expected a number of seconds"))),
            }
        };
        let issued_at = time("iat")?;
        let Some(expires_at) = time("exp")? else {
            return Err(invalid(
                "token is missing required claim: exp claim is required",
            ));
        };
        if expires_at <= now - LEEWAY {
            return Err(invalid("token is expired"));
        }
        if issued_at.is_some_and(|iat| iat > now + LEEWAY) {
            return Err(invalid("token used before issued"));
        }
        Ok(Claims {
            capability,
            selector,
            issued_at,
            expires_at,
        })
    }

    /// Ok if the claims hold every bit of `require`, else the server's refusal.
    pub fn check_capability(&self, require: u32) -> Result<(), String> {
        if self.capability & require == require {
            return Ok(());
        }
        for (bit, name) in capability::NAMED {
            if require & bit != 0 && self.capability & bit == 0 {
                return Err(format!(
                    "authorization is missing required {name} capability"
                ));
            }
        }
        Err(format!(
            "authorization is missing required capability (have {:b}, but require {:b})",
            self.capability, require
        ))
    }

    /// Whether the claims select `spec`'s journal (by its labels and name).
    pub fn allows(&self, spec: &JournalSpec) -> bool {
        if labels::selects_all(&self.selector) {
            return true;
        }
        // The claims of one journal (what brokers and clients sign for an append or a
        // read): a spec's labels never hold `name`, so comparing names decides it.
        let include = self
            .selector
            .include
            .as_ref()
            .map_or(&[][..], |s| &s.labels[..]);
        let exclude_empty = self
            .selector
            .exclude
            .as_ref()
            .is_none_or(|s| s.labels.is_empty());
        if let [only] = include {
            if exclude_empty && only.name == "name" && !only.value.is_empty() && !only.prefix {
                return spec.name == only.value;
            }
        }
        labels::matches(&self.selector, &labels::label_set_ext(spec))
    }
}

/// `obj[name]`, else a key equal to it but for case (as Go's encoding/json reads
/// fields), else None; null reads as absent.
fn lookup<'a>(obj: &'a serde_json::Map<String, Value>, name: &str) -> Option<&'a Value> {
    obj.get(name)
        .or_else(|| {
            obj.iter()
                .find(|(k, _)| k.to_lowercase() == name)
                .map(|(_, v)| v)
        })
        .filter(|v| !v.is_null())
}

fn malformed(what: &str) -> String {
    format!("token is malformed: {what}")
}

fn invalid(what: &str) -> String {
    format!("token has invalid claims: {what}")
}

fn label_set(value: Option<&Value>, at: &str) -> Result<LabelSet, String> {
    let labels = match value {
        None => return Ok(LabelSet::default()),
        Some(Value::Object(set)) => lookup(set, "labels"),
        Some(_) => return Err(malformed(&format!("{at}: expected an object"))),
    };
    let labels = match labels {
        None => return Ok(LabelSet::default()),
        Some(Value::Array(labels)) => labels,
        Some(_) => return Err(malformed(&format!("{at}.labels: expected an array"))),
    };
    let mut out = Vec::with_capacity(labels.len());
    for (i, label) in labels.iter().enumerate() {
        let label = match label {
            Value::Null => {
                out.push(Label::default());
                continue;
            }
            Value::Object(label) => label,
            _ => return Err(malformed(&format!("{at}.labels[{i}]: expected an object"))),
        };
        let text = |name: &str| -> Result<String, String> {
            match lookup(label, name) {
                None => Ok(String::new()),
                Some(Value::String(s)) => Ok(s.clone()),
                Some(_) => Err(malformed(&format!(
                    "{at}.labels[{i}].{name}: expected a string"
                ))),
            }
        };
        let prefix = match lookup(label, "prefix") {
            None => false,
            Some(Value::Bool(b)) => *b,
            Some(_) => {
                return Err(malformed(&format!(
                    "{at}.labels[{i}].prefix: expected a boolean"
                )))
            }
        };
        out.push(Label {
            name: text("name")?,
            value: text("value")?,
            prefix,
        });
    }
    // Sorted and without repeats, whatever order the signer wrote them in.
    out.sort_by(|a, b| (&a.name, &a.value, a.prefix).cmp(&(&b.name, &b.value, b.prefix)));
    out.dedup();
    Ok(LabelSet { labels: out })
}

#[cfg(test)]
mod tests;

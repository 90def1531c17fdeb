//! Messages and enum values as Gazette's error texts print them (ours:
//! `gazette.broker.protocol.gotext`).
//!
//! A message embedded in a text (`unexpected Header with Content (...)`) is in Go's
//! compact text form: `name:value ` for each set field in the order the `.proto`
//! declares them, nested messages as `name:<...> `, proto3 zero values left out, and
//! every field followed by a space, the last one too.

use std::fmt::Write;

use crate::protocol::{
    append_request, process_spec, CompressionCodec, Fragment, Header, LabelSet, Route, Sha1Sum,
};

/// Go's `String()` of a codec: its name, or its number when it has none.
pub(super) fn codec_name(codec: i32) -> String {
    CompressionCodec::try_from(codec).map_or_else(|_| codec.to_string(), |c| c.as_str_name().into())
}

/// Go's `String()` of an append's suspend option.
pub(super) fn suspend_name(suspend: i32) -> String {
    append_request::Suspend::try_from(suspend)
        .map_or_else(|_| suspend.to_string(), |s| s.as_str_name().into())
}

pub(super) fn header_text(m: &Header) -> String {
    let mut out = String::new();
    write_header(&mut out, m);
    out
}

pub(super) fn label_set_text(m: &LabelSet) -> String {
    let mut out = String::new();
    write_label_set(&mut out, m);
    out
}

pub(super) fn fragment_text(m: &Fragment) -> String {
    let mut out = String::new();
    write_fragment(&mut out, m);
    out
}

fn write_header(out: &mut String, m: &Header) {
    if let Some(id) = &m.process_id {
        nested(out, "process_id", |out| write_process_id(out, id));
    }
    if let Some(route) = &m.route {
        nested(out, "route", |out| write_route(out, route));
    }
    if let Some(etcd) = &m.etcd {
        nested(out, "etcd", |out| {
            number(out, "cluster_id", etcd.cluster_id);
            number(out, "member_id", etcd.member_id);
            number(out, "revision", etcd.revision);
            number(out, "raft_term", etcd.raft_term);
        });
    }
}

fn write_process_id(out: &mut String, m: &process_spec::Id) {
    string(out, "zone", &m.zone);
    string(out, "suffix", &m.suffix);
}

fn write_route(out: &mut String, m: &Route) {
    for id in &m.members {
        nested(out, "members", |out| write_process_id(out, id));
    }
    number(out, "primary", m.primary);
    for endpoint in &m.endpoints {
        // Repeated fields print every item, empty ones too.
        quoted(out, "endpoints", endpoint.as_bytes());
    }
}

fn write_label_set(out: &mut String, m: &LabelSet) {
    for label in &m.labels {
        nested(out, "labels", |out| {
            string(out, "name", &label.name);
            string(out, "value", &label.value);
            if label.prefix {
                out.push_str("prefix:true ");
            }
        });
    }
}

fn write_fragment(out: &mut String, m: &Fragment) {
    string(out, "journal", &m.journal);
    number(out, "begin", m.begin);
    number(out, "end", m.end);
    if let Some(sum) = &m.sum {
        nested(out, "sum", |out| write_sum(out, sum));
    }
    if m.compression_codec != 0 {
        let _ = write!(
            out,
            "compression_codec:{} ",
            codec_name(m.compression_codec)
        );
    }
    string(out, "backing_store", &m.backing_store);
    number(out, "mod_time", m.mod_time);
    string(out, "path_postfix", &m.path_postfix);
}

fn write_sum(out: &mut String, m: &Sha1Sum) {
    number(out, "part1", m.part1);
    number(out, "part2", m.part2);
    number(out, "part3", m.part3);
}

fn nested(out: &mut String, name: &str, body: impl FnOnce(&mut String)) {
    out.push_str(name);
    out.push_str(":<");
    body(out);
    out.push_str("> ");
}

fn number<N: Default + PartialEq + std::fmt::Display>(out: &mut String, name: &str, v: N) {
    if v != N::default() {
        let _ = write!(out, "{name}:{v} ");
    }
}

fn string(out: &mut String, name: &str, v: &str) {
    if !v.is_empty() {
        quoted(out, name, v.as_bytes());
    }
}

/// The text format's quoting: C escapes for a few bytes, octal for other bytes outside
/// printable ASCII (so each byte of a multi-byte character is escaped).
fn quoted(out: &mut String, name: &str, v: &[u8]) {
    out.push_str(name);
    out.push_str(":\"");
    for &b in v {
        match b {
            b'\n' => out.push_str("\\n"),
            b'\r' => out.push_str("\\r"),
            b'\t' => out.push_str("\\t"),
            b'"' => out.push_str("\\\""),
            b'\\' => out.push_str("\\\\"),
            0x20..=0x7e => out.push(char::from(b)),
            _ => {
                let _ = write!(out, "\\{b:03o}");
            }
        }
    }
    out.push_str("\" ");
}

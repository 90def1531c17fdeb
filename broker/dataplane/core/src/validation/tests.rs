//! One test per rule, each with the exact text Python's `str(ValidationError)` gives
//! (after Gazette's `broker/protocol/*_test.go` and our `broker/tests/protocol`).

use bytes::Bytes;

use super::urls::{go_quote, parse_url, Parsed};
use super::*;
use crate::protocol::Sha1Sum;

fn text(v: Verdict) -> String {
    v.expect_err("expected a validation error").to_string()
}

fn id(zone: &str, suffix: &str) -> process_spec::Id {
    process_spec::Id {
        zone: zone.into(),
        suffix: suffix.into(),
    }
}

fn lbl(name: &str, value: &str) -> Label {
    Label {
        name: name.into(),
        value: value.into(),
        prefix: false,
    }
}

fn set(labels: &[(&str, &str)]) -> LabelSet {
    LabelSet {
        labels: labels.iter().map(|(n, v)| lbl(n, v)).collect(),
    }
}

fn etcd() -> header::Etcd {
    header::Etcd {
        cluster_id: 1,
        member_id: 2,
        revision: 3,
        raft_term: 4,
    }
}

fn route() -> Route {
    Route {
        members: vec![id("a", "broker-one"), id("b", "broker-two")],
        primary: 1,
        endpoints: vec!["http://one:8080".into(), "http://two:8080".into()],
    }
}

fn hdr() -> Header {
    Header {
        process_id: Some(id("a", "broker-one")),
        route: Some(route()),
        etcd: Some(etcd()),
    }
}

fn fragment() -> Fragment {
    Fragment {
        journal: "a/journal".into(),
        begin: 10,
        end: 20,
        compression_codec: CompressionCodec::Snappy as i32,
        path_postfix: "date=2024".into(),
        ..Default::default()
    }
}

fn proposal() -> ReplicateRequest {
    ReplicateRequest {
        header: Some(hdr()),
        proposal: Some(fragment()),
        registers: Some(set(&[("reg", "one")])),
        acknowledge: true,
        ..Default::default()
    }
}

fn content() -> ReplicateRequest {
    ReplicateRequest {
        content: Bytes::from_static(b"some content"),
        content_delta: 12,
        ..Default::default()
    }
}

// ------------------------------------------------------------------ errors

#[test]
fn an_error_shows_its_context_as_a_dotted_path() {
    let e = ValidationError::new("bad");
    assert_eq!(e.to_string(), "bad");
    let e = e.within("Journal").within("Proposal");
    assert_eq!(e.context, ["Proposal", "Journal"]);
    assert_eq!(e.to_string(), "Proposal.Journal: bad");
}

// ------------------------------------------------------------------ tokens and journals

#[test]
fn a_token_has_a_length_in_utf8_bytes() {
    assert_eq!(
        text(validate_token("a", 2, 4, TOKEN_SYMBOLS)),
        "invalid length (1; expected 2 <= length <= 4)"
    );
    assert_eq!(
        text(validate_token("ééé", 2, 4, TOKEN_SYMBOLS)),
        "invalid length (6; expected 2 <= length <= 4)"
    );
    assert!(validate_token("éé", 2, 4, TOKEN_SYMBOLS).is_ok());
}

#[test]
fn a_token_holds_letters_numbers_and_its_symbols() {
    assert!(validate_token("a-_+/.Z9", 0, 64, TOKEN_SYMBOLS).is_ok());
    assert!(validate_token("名前٣", 0, 64, TOKEN_SYMBOLS).is_ok());
    for bad in ["a b", "a=b", "a%b", "a#b", "a;b", "a\u{301}", "Ⓐ"] {
        assert_eq!(
            text(validate_token(bad, 0, 64, TOKEN_SYMBOLS)),
            format!("not a valid token ({bad})")
        );
    }
    assert!(validate_token("a=b%c", 0, 64, PATH_SYMBOLS).is_ok());
}

#[test]
fn paths_are_cleaned_as_go_cleans_them() {
    for (p, clean) in [
        ("", "."),
        (".", "."),
        ("..", ".."),
        ("/", "/"),
        ("a//b", "a/b"),
        ("a/./b/", "a/b"),
        ("a/../../b", "../b"),
        ("/../a", "/a"),
        ("a/b/..", "a"),
    ] {
        assert_eq!(path_clean(p), clean, "{p}");
    }
}

#[test]
fn a_path_component_is_clean_and_relative() {
    assert!(validate_path_component("", 0, 10).is_ok());
    assert_eq!(
        text(validate_path_component("a//b", 0, 10)),
        "must be a clean path (a//b)"
    );
    assert_eq!(
        text(validate_path_component("a/", 0, 10)),
        "must be a clean path (a/)"
    );
    assert_eq!(
        text(validate_path_component("/a", 0, 10)),
        "cannot begin with '/' (/a)"
    );
}

#[test]
fn a_journal_is_a_path_component_of_4_to_512_bytes() {
    assert!(validate_journal("a/journal").is_ok());
    assert_eq!(
        text(validate_journal("abc")),
        "invalid length (3; expected 4 <= length <= 512)"
    );
    let long = "a".repeat(513);
    assert_eq!(
        text(validate_journal(&long)),
        "invalid length (513; expected 4 <= length <= 512)"
    );
    assert_eq!(
        text(validate_journal("a journal")),
        "not a valid token (a journal)"
    );
}

#[test]
fn a_journal_has_no_parent_segment() {
    // Python's departure from Gazette, which accepts "../x".
    assert_eq!(
        text(validate_journal("../journal")),
        "cannot have a '..' path segment (../journal)"
    );
    assert_eq!(
        text(validate_journal("a/../journal")),
        "must be a clean path (a/../journal)"
    );
}

#[test]
fn a_journal_may_carry_a_metadata_segment() {
    assert!(validate_journal("a/journal;meta/data").is_ok());
    assert_eq!(
        text(validate_journal("a/journal;")),
        "metadata path segment: invalid length (0; expected 1 <= length <= 512)"
    );
    assert_eq!(
        text(validate_journal("a/journal;x;y")),
        "metadata path segment: not a valid token (x;y)"
    );
    assert_eq!(
        text(validate_journal("abc;meta")),
        "invalid length (3; expected 4 <= length <= 512)"
    );
}

// ------------------------------------------------------------------ endpoints

#[test]
fn an_endpoint_is_absolute_with_a_host() {
    assert!(validate_endpoint("http://host:8080/path").is_ok());
    assert!(validate_endpoint("unix://localhost/tmp/socket").is_ok());
    assert_eq!(
        text(validate_endpoint("host:8080")),
        "missing host: host:8080"
    );
    assert_eq!(
        text(validate_endpoint("/just/a/path")),
        "not absolute: /just/a/path"
    );
    assert_eq!(
        text(validate_endpoint("unix:///tmp/socket")),
        "missing host: unix:///tmp/socket"
    );
    assert_eq!(
        text(validate_endpoint("http:opaque")),
        "missing host: http:opaque"
    );
}

#[test]
fn an_endpoint_go_cannot_parse_is_refused_with_go_words() {
    for (url, why) in [
        (
            "http://a b",
            r#"parse "http://a b": invalid character " " in host name"#,
        ),
        (
            "http://host:port",
            r#"parse "http://host:port": invalid port ":port" after host"#,
        ),
        ("http://[::1", r#"parse "http://[::1": missing ']' in host"#),
        (
            "http://[::1]x",
            r#"parse "http://[::1]x": invalid port "x" after host"#,
        ),
        (
            "http://a/%zz",
            r#"parse "http://a/%zz": invalid URL escape "%zz""#,
        ),
        (
            "http://a/%4",
            r#"parse "http://a/%4": invalid URL escape "%4""#,
        ),
        (
            "http://a%41",
            r#"parse "http://a%41": invalid URL escape "%41""#,
        ),
        (
            "http://a\tb",
            r#"parse "http://a\tb": net/url: invalid control character in URL"#,
        ),
        (":8080", r#"parse ":8080": missing protocol scheme"#),
        ("a:b/c:d", "missing host: a:b/c:d"),
        (
            "1a:b",
            r#"parse "1a:b": first path segment in URL cannot contain colon"#,
        ),
        (
            "http://us er@host",
            r#"parse "http://us er@host": net/url: invalid userinfo"#,
        ),
        (
            "http://u%zz@host",
            r#"parse "http://u%zz@host": invalid URL escape "%zz""#,
        ),
        (
            "http://host/#%zz",
            r#"parse "http://host/#%zz": invalid URL escape "%zz""#,
        ),
    ] {
        assert_eq!(text(validate_endpoint(url)), why, "{url}");
    }
    // A host may escape bytes >= 0x80, and "%25" (an IPv6 zone's "%").
    assert!(validate_endpoint("http://h%C3%A9/").is_ok());
    assert!(validate_endpoint("http://[fe80::1%25en0]:80/").is_ok());
    assert_eq!(
        parse_url("*"),
        Ok(Parsed {
            scheme: String::new(),
            has_host: false
        })
    );
}

#[test]
fn quoting_keeps_printable_characters_and_escapes_the_rest() {
    assert_eq!(go_quote(r#"a"b\c"#), r#""a\"b\\c""#);
    assert_eq!(go_quote("é名"), "\"é名\"");
    assert_eq!(
        go_quote("\x07\x08\x0c\n\r\t\x0b\x01\x7f"),
        r#""\a\b\f\n\r\t\v\x01\x7f""#
    );
    assert_eq!(go_quote("\u{a0}\u{200b}"), r#""\u00a0\u200b""#);
    assert_eq!(go_quote("\u{e0001}"), r#""\U000e0001""#);
}

// ------------------------------------------------------------------ labels

#[test]
fn a_label_has_a_token_name_and_a_path_value() {
    assert!(validate_label(&lbl("ab", "")).is_ok());
    assert_eq!(
        text(validate_label(&lbl("a", "v"))),
        "Name: invalid length (1; expected 2 <= length <= 64)"
    );
    assert_eq!(
        text(validate_label(&lbl("a=b", "v"))),
        "Name: not a valid token (a=b)"
    );
    assert_eq!(
        text(validate_label(&lbl("name", "a b"))),
        "Value: not a valid token (a b)"
    );
    assert_eq!(
        text(validate_label(&lbl("name", &"v".repeat(1025)))),
        "Value: invalid length (1025; expected 0 <= length <= 1024)"
    );
}

#[test]
fn a_label_is_a_prefix_only_in_a_selector() {
    let prefix = Label {
        prefix: true,
        ..lbl("name", "a/")
    };
    assert_eq!(
        text(validate_label(&prefix)),
        "Prefix may not be set outside of a LabelSelector"
    );
    let selector = LabelSelector {
        include: Some(LabelSet {
            labels: vec![prefix.clone()],
        }),
        exclude: None,
    };
    assert!(validate_label_selector(&selector).is_ok());
}

#[test]
fn a_label_set_is_sorted_by_name() {
    assert!(validate_label_set(&set(&[("aa", "1"), ("bb", "1")])).is_ok());
    assert_eq!(
        text(validate_label_set(&set(&[("bb", "1"), ("aa", "1")]))),
        "Labels not in unique, sorted order (index 1; label name aa <= bb)"
    );
}

#[test]
fn a_label_set_is_sorted_and_unique_by_value() {
    assert!(validate_label_set(&set(&[("aa", "1"), ("aa", "2")])).is_ok());
    assert_eq!(
        text(validate_label_set(&set(&[("aa", "2"), ("aa", "1")]))),
        "Labels not in unique, sorted order (index 1; label aa value 1 <= 2)"
    );
    assert_eq!(
        text(validate_label_set(&set(&[("aa", "1"), ("aa", "1")]))),
        "Labels not in unique, sorted order (index 1; label aa value 1 <= 1)"
    );
}

#[test]
fn a_label_set_has_no_empty_value_beside_others() {
    assert_eq!(
        text(validate_label_set(&set(&[("aa", ""), ("aa", "1")]))),
        "Label has empty & non-empty values (index 1; label aa value 1)"
    );
}

#[test]
fn a_label_set_names_the_bad_label() {
    assert_eq!(
        text(validate_label_set(&set(&[("aa", "1"), ("b", "1")]))),
        "Labels[1].Name: invalid length (1; expected 2 <= length <= 64)"
    );
}

#[test]
fn a_selector_names_its_bad_group() {
    let selector = LabelSelector {
        include: Some(set(&[("aa", "1")])),
        exclude: Some(set(&[("bb", "2"), ("bb", "1")])),
    };
    assert_eq!(
        text(validate_label_selector(&selector)),
        "Exclude: Labels not in unique, sorted order (index 1; label bb value 1 <= 2)"
    );
    let selector = LabelSelector {
        include: Some(set(&[("aa", "x y")])),
        exclude: None,
    };
    assert_eq!(
        text(validate_label_selector(&selector)),
        "Include.Labels[0].Value: not a valid token (x y)"
    );
    assert!(validate_label_selector(&LabelSelector::default()).is_ok());
}

// ------------------------------------------------------------------ fragments

#[test]
fn a_fragment_is_valid() {
    assert!(validate_fragment(&fragment()).is_ok());
}

#[test]
fn a_fragment_names_a_valid_journal() {
    let f = Fragment {
        journal: "a//b".into(),
        ..fragment()
    };
    assert_eq!(
        text(validate_fragment(&f)),
        "Journal: must be a clean path (a//b)"
    );
}

#[test]
fn a_fragment_begins_before_it_ends() {
    let f = Fragment {
        begin: 21,
        ..fragment()
    };
    assert_eq!(
        text(validate_fragment(&f)),
        "expected Begin <= End (have 21, 20)"
    );
    let empty = Fragment {
        begin: 20,
        ..fragment()
    };
    assert!(validate_fragment(&empty).is_ok());
}

#[test]
fn a_fragment_has_a_named_codec() {
    for (codec, why) in [(0, "INVALID"), (6, "6"), (-1, "-1")] {
        let f = Fragment {
            compression_codec: codec,
            ..fragment()
        };
        assert_eq!(
            text(validate_fragment(&f)),
            format!("CompressionCodec: invalid value ({why})")
        );
    }
    for codec in 1..=5 {
        assert!(validate_codec(codec).is_ok());
    }
}

#[test]
fn a_fragment_postfix_is_a_clean_relative_path() {
    let f = Fragment {
        path_postfix: "/date".into(),
        ..fragment()
    };
    assert_eq!(
        text(validate_fragment(&f)),
        "PathPostfix: cannot begin with '/' (/date)"
    );
    let f = Fragment {
        path_postfix: "a;b".into(),
        ..fragment()
    };
    assert_eq!(
        text(validate_fragment(&f)),
        "PathPostfix: not a valid token (a;b)"
    );
}

// ------------------------------------------------------------------ processes, routes, headers

#[test]
fn a_process_id_has_a_zone_and_a_suffix() {
    assert!(validate_process_id(&id("a", "abcd")).is_ok());
    assert_eq!(
        text(validate_process_id(&id("", "abcd"))),
        "Zone: invalid length (0; expected 1 <= length <= 32)"
    );
    assert_eq!(
        text(validate_process_id(&id("a", "abc"))),
        "Suffix: invalid length (3; expected 4 <= length <= 128)"
    );
    assert_eq!(
        text(validate_process_id(&id("a b", "abcd"))),
        "Zone: not a valid token (a b)"
    );
}

#[test]
fn a_route_is_valid() {
    assert!(validate_route(&route()).is_ok());
    assert!(validate_route(&Route {
        primary: -1,
        ..Default::default()
    })
    .is_ok());
}

#[test]
fn a_route_names_its_bad_member() {
    let mut r = route();
    r.members[1].suffix = "x".into();
    assert_eq!(
        text(validate_route(&r)),
        "Members[1].Suffix: invalid length (1; expected 4 <= length <= 128)"
    );
}

#[test]
fn a_route_has_members_in_unique_sorted_order() {
    let mut r = route();
    r.members.swap(0, 1);
    assert_eq!(
        text(validate_route(&r)),
        "Members not in unique, sorted order (index 1; {Zone:b Suffix:broker-two} <= {Zone:a Suffix:broker-one})"
    );
    r.members[1] = r.members[0].clone();
    assert_eq!(
        text(validate_route(&r)),
        "Members not in unique, sorted order (index 1; {Zone:b Suffix:broker-two} <= {Zone:b Suffix:broker-two})"
    );
}

#[test]
fn a_route_primary_indexes_a_member() {
    for primary in [-2, 2, i32::MAX, i32::MIN] {
        let r = Route { primary, ..route() };
        assert_eq!(
            text(validate_route(&r)),
            format!("invalid Primary ({primary}; expected -1 <= Primary < 2)")
        );
    }
    assert_eq!(
        text(validate_route(&Route::default())),
        "invalid Primary (0; expected -1 <= Primary < 0)"
    );
}

#[test]
fn a_route_has_no_endpoints_or_one_per_member() {
    let mut r = route();
    r.endpoints.pop();
    assert_eq!(
        text(validate_route(&r)),
        "len(Endpoints) != 0, and != len(Members) (1 vs 2)"
    );
    r.endpoints.clear();
    assert!(validate_route(&r).is_ok());
}

#[test]
fn a_route_endpoint_is_empty_or_valid() {
    let mut r = route();
    r.endpoints[0] = String::new();
    assert!(validate_route(&r).is_ok());
    r.endpoints[1] = "two:8080".into();
    assert_eq!(
        text(validate_route(&r)),
        "Endpoints[1]: missing host: two:8080"
    );
}

#[test]
fn an_etcd_header_is_whole() {
    assert!(validate_etcd(&etcd()).is_ok());
    for (e, why) in [
        (
            header::Etcd {
                cluster_id: 0,
                ..etcd()
            },
            "invalid ClusterId (expected != 0)",
        ),
        (
            header::Etcd {
                member_id: 0,
                ..etcd()
            },
            "invalid MemberId (expected != 0)",
        ),
        (
            header::Etcd {
                revision: 0,
                ..etcd()
            },
            "invalid Revision (0; expected 0 < revision)",
        ),
        (
            header::Etcd {
                revision: -5,
                ..etcd()
            },
            "invalid Revision (-5; expected 0 < revision)",
        ),
        (
            header::Etcd {
                raft_term: 0,
                ..etcd()
            },
            "invalid RaftTerm (expected != 0)",
        ),
    ] {
        assert_eq!(text(validate_etcd(&e)), why);
    }
}

#[test]
fn a_header_checks_a_process_id_only_when_one_is_set() {
    assert!(validate_header(&hdr()).is_ok());
    let mut h = hdr();
    h.process_id = Some(id("", ""));
    assert!(validate_header(&h).is_ok());
    h.process_id = None;
    assert!(validate_header(&h).is_ok());
    h.process_id = Some(id("", "abcd"));
    assert_eq!(
        text(validate_header(&h)),
        "ProcessId.Zone: invalid length (0; expected 1 <= length <= 32)"
    );
}

#[test]
fn a_header_judges_an_absent_route_or_etcd_as_empty() {
    let h = Header {
        route: None,
        ..hdr()
    };
    assert_eq!(
        text(validate_header(&h)),
        "Route: invalid Primary (0; expected -1 <= Primary < 0)"
    );
    let h = Header {
        etcd: None,
        ..hdr()
    };
    assert_eq!(
        text(validate_header(&h)),
        "Etcd: invalid ClusterId (expected != 0)"
    );
}

// ------------------------------------------------------------------ read requests

fn read() -> ReadRequest {
    ReadRequest {
        header: Some(hdr()),
        journal: "a/journal;meta".into(),
        offset: 10,
        end_offset: 20,
        ..Default::default()
    }
}

#[test]
fn a_read_request_is_valid() {
    assert!(validate_read_request(&read()).is_ok());
    let from_the_head = ReadRequest {
        offset: -1,
        end_offset: 0,
        header: None,
        ..read()
    };
    assert!(validate_read_request(&from_the_head).is_ok());
}

#[test]
fn a_read_request_has_a_valid_header_and_journal() {
    let mut m = read();
    m.header.as_mut().unwrap().etcd.as_mut().unwrap().raft_term = 0;
    assert_eq!(
        text(validate_read_request(&m)),
        "Header.Etcd: invalid RaftTerm (expected != 0)"
    );
    let m = ReadRequest {
        journal: "/abs/journal".into(),
        ..read()
    };
    assert_eq!(
        text(validate_read_request(&m)),
        "Journal: cannot begin with '/' (/abs/journal)"
    );
}

#[test]
fn a_read_request_offset_is_at_least_minus_one() {
    let m = ReadRequest {
        offset: -2,
        ..read()
    };
    assert_eq!(
        text(validate_read_request(&m)),
        "invalid Offset (-2; expected -1 <= Offset <= MaxInt64)"
    );
}

#[test]
fn a_read_request_end_offset_is_zero_or_past_the_offset() {
    for end_offset in [-1, 9] {
        let m = ReadRequest {
            end_offset,
            ..read()
        };
        assert_eq!(
            text(validate_read_request(&m)),
            format!("invalid EndOffset ({end_offset}; expected 0 or Offset <= EndOffset)")
        );
    }
    let m = ReadRequest {
        end_offset: 10,
        ..read()
    };
    assert!(validate_read_request(&m).is_ok());
}

// ------------------------------------------------------------------ append requests

fn append() -> AppendRequest {
    AppendRequest {
        header: Some(hdr()),
        journal: "a/journal".into(),
        offset: 5,
        check_registers: Some(LabelSelector {
            include: Some(set(&[("reg", "one")])),
            exclude: None,
        }),
        union_registers: Some(set(&[("reg", "two")])),
        subtract_registers: Some(set(&[("reg", "one")])),
        suspend: append_request::Suspend::Keep as i32,
        ..Default::default()
    }
}

fn chunk() -> AppendRequest {
    AppendRequest {
        content: Bytes::from_static(b"data"),
        ..Default::default()
    }
}

#[test]
fn an_append_request_is_valid() {
    assert!(validate_append_request(&append()).is_ok());
    assert!(validate_append_request(&chunk()).is_ok());
    // An empty message is the end of an append's content.
    assert!(validate_append_request(&AppendRequest::default()).is_ok());
}

#[test]
fn a_first_append_request_has_a_valid_header_and_journal() {
    let mut m = append();
    m.header.as_mut().unwrap().route.as_mut().unwrap().primary = 5;
    assert_eq!(
        text(validate_append_request(&m)),
        "Header.Route: invalid Primary (5; expected -1 <= Primary < 2)"
    );
    let m = AppendRequest {
        journal: "a/journal;".into(),
        ..append()
    };
    assert_eq!(
        text(validate_append_request(&m)),
        "Journal.metadata path segment: invalid length (0; expected 1 <= length <= 512)"
    );
}

#[test]
fn a_first_append_request_has_no_negative_offset() {
    let m = AppendRequest {
        offset: -1,
        ..append()
    };
    assert_eq!(
        text(validate_append_request(&m)),
        "invalid Offset (-1; expected >= 0)"
    );
}

#[test]
fn a_first_append_request_has_no_content() {
    let m = AppendRequest {
        content: Bytes::from_static(b"x"),
        ..append()
    };
    assert_eq!(text(validate_append_request(&m)), "unexpected Content");
}

#[test]
fn a_first_append_request_has_valid_registers() {
    let m = AppendRequest {
        check_registers: Some(LabelSelector {
            include: None,
            exclude: Some(set(&[("r", "")])),
        }),
        ..append()
    };
    assert_eq!(
        text(validate_append_request(&m)),
        "CheckRegisters.Exclude.Labels[0].Name: invalid length (1; expected 2 <= length <= 64)"
    );
    let m = AppendRequest {
        union_registers: Some(set(&[("zz", ""), ("aa", "")])),
        ..append()
    };
    assert_eq!(
        text(validate_append_request(&m)),
        "UnionRegisters: Labels not in unique, sorted order (index 1; label name aa <= zz)"
    );
    let mut prefixed = set(&[("reg", "one")]);
    prefixed.labels[0].prefix = true;
    let m = AppendRequest {
        subtract_registers: Some(prefixed),
        ..append()
    };
    assert_eq!(
        text(validate_append_request(&m)),
        "SubtractRegisters.Labels[0]: Prefix may not be set outside of a LabelSelector"
    );
}

#[test]
fn a_first_append_request_has_a_known_suspend_option() {
    let m = AppendRequest {
        suspend: 7,
        ..append()
    };
    assert_eq!(
        text(validate_append_request(&m)),
        "Suspend: invalid Suspend variant (7)"
    );
}

#[test]
fn a_content_append_request_carries_content_only() {
    let cases: [(AppendRequest, &str); 6] = [
        (
            AppendRequest {
                header: Some(hdr()),
                ..chunk()
            },
            "unexpected Header",
        ),
        (
            AppendRequest {
                do_not_proxy: true,
                ..chunk()
            },
            "unexpected DoNotProxy",
        ),
        (
            AppendRequest {
                offset: 3,
                ..chunk()
            },
            "unexpected Offset",
        ),
        (
            AppendRequest {
                check_registers: Some(LabelSelector::default()),
                ..chunk()
            },
            "unexpected CheckRegisters",
        ),
        (
            AppendRequest {
                union_registers: Some(LabelSet::default()),
                ..chunk()
            },
            "unexpected UnionRegisters",
        ),
        (
            AppendRequest {
                subtract_registers: Some(LabelSet::default()),
                ..chunk()
            },
            "unexpected SubtractRegisters",
        ),
    ];
    for (m, why) in cases {
        assert_eq!(text(validate_append_request(&m)), why);
    }
}

#[test]
fn a_content_append_request_has_no_suspend_option() {
    for (suspend, name) in [(1, "SUSPEND_NO_RESUME"), (4, "SUSPEND_KEEP"), (9, "9")] {
        let m = AppendRequest { suspend, ..chunk() };
        assert_eq!(
            text(validate_append_request(&m)),
            format!("unexpected Suspend ({name}; expected SUSPEND_RESUMED)")
        );
    }
}

// ------------------------------------------------------------------ append responses

fn appended() -> AppendResponse {
    AppendResponse {
        status: Status::Ok as i32,
        header: Some(hdr()),
        commit: Some(fragment()),
        registers: Some(set(&[("reg", "one")])),
        ..Default::default()
    }
}

#[test]
fn an_append_response_is_valid() {
    assert!(validate_append_response(&appended()).is_ok());
    let refused = AppendResponse {
        status: Status::WrongAppendOffset as i32,
        commit: None,
        registers: None,
        ..appended()
    };
    assert!(validate_append_response(&refused).is_ok());
}

#[test]
fn an_append_response_has_a_known_status_and_a_header() {
    let m = AppendResponse {
        status: 16,
        ..appended()
    };
    assert_eq!(
        text(validate_append_response(&m)),
        "Status: invalid status (16)"
    );
    let m = AppendResponse {
        header: None,
        ..appended()
    };
    assert_eq!(
        text(validate_append_response(&m)),
        "Header.Route: invalid Primary (0; expected -1 <= Primary < 0)"
    );
}

#[test]
fn an_ok_append_response_has_a_commit_and_registers() {
    let m = AppendResponse {
        commit: None,
        ..appended()
    };
    assert_eq!(text(validate_append_response(&m)), "expected Commit");
    let m = AppendResponse {
        registers: None,
        ..appended()
    };
    assert_eq!(text(validate_append_response(&m)), "expected Registers");
    let m = AppendResponse {
        status: Status::RegisterMismatch as i32,
        commit: None,
        registers: None,
        ..appended()
    };
    assert_eq!(text(validate_append_response(&m)), "expected Registers");
}

#[test]
fn an_append_response_has_a_valid_commit_and_registers() {
    let m = AppendResponse {
        commit: Some(Fragment {
            end: 0,
            ..fragment()
        }),
        ..appended()
    };
    assert_eq!(
        text(validate_append_response(&m)),
        "Commit: expected Begin <= End (have 10, 0)"
    );
    let m = AppendResponse {
        registers: Some(set(&[("r", "")])),
        ..appended()
    };
    assert_eq!(
        text(validate_append_response(&m)),
        "Registers.Labels[0].Name: invalid length (1; expected 2 <= length <= 64)"
    );
}

// ------------------------------------------------------------------ replicate requests

#[test]
fn a_replicate_request_is_valid() {
    assert!(validate_replicate_request(&proposal()).is_ok());
    assert!(validate_replicate_request(&content()).is_ok());
    let later = ReplicateRequest {
        header: None,
        acknowledge: false,
        registers: None,
        deprecated_journal: "a/journal".into(),
        ..proposal()
    };
    assert!(validate_replicate_request(&later).is_ok());
}

#[test]
fn a_proposal_has_a_valid_header_asking_for_an_ack() {
    let mut m = proposal();
    m.header.as_mut().unwrap().route.as_mut().unwrap().endpoints[0] = "x".into();
    assert_eq!(
        text(validate_replicate_request(&m)),
        "Header.Route.Endpoints[0]: not absolute: x"
    );
    let m = ReplicateRequest {
        acknowledge: false,
        ..proposal()
    };
    assert_eq!(
        text(validate_replicate_request(&m)),
        "expected Acknowledge with Header"
    );
}

#[test]
fn a_proposal_is_a_valid_fragment() {
    let m = ReplicateRequest {
        proposal: Some(Fragment {
            journal: "a".into(),
            ..fragment()
        }),
        ..proposal()
    };
    assert_eq!(
        text(validate_replicate_request(&m)),
        "Proposal.Journal: invalid length (1; expected 4 <= length <= 512)"
    );
}

#[test]
fn a_proposal_has_valid_registers() {
    let m = ReplicateRequest {
        registers: Some(set(&[("reg", ""), ("reg", "one")])),
        ..proposal()
    };
    assert_eq!(
        text(validate_replicate_request(&m)),
        "Registers: Label has empty & non-empty values (index 1; label reg value one)"
    );
}

#[test]
fn a_proposal_has_no_content() {
    let m = ReplicateRequest {
        content: Bytes::from_static(b"abc"),
        ..proposal()
    };
    assert_eq!(
        text(validate_replicate_request(&m)),
        "unexpected Content with Proposal (len 3)"
    );
    let m = ReplicateRequest {
        content_delta: 7,
        ..proposal()
    };
    assert_eq!(
        text(validate_replicate_request(&m)),
        "unexpected ContentDelta with Proposal (7)"
    );
}

#[test]
fn a_proposal_agrees_with_a_deprecated_journal() {
    let m = ReplicateRequest {
        deprecated_journal: "other/journal".into(),
        ..proposal()
    };
    assert_eq!(
        text(validate_replicate_request(&m)),
        "DeprecatedJournal and Proposal.Journal mismatch (other/journal vs a/journal)"
    );
}

#[test]
fn a_replicate_request_has_content_or_a_proposal() {
    assert_eq!(
        text(validate_replicate_request(&ReplicateRequest::default())),
        "expected Content or Proposal"
    );
    let m = ReplicateRequest {
        content_delta: -1,
        ..content()
    };
    assert_eq!(
        text(validate_replicate_request(&m)),
        "invalid ContentDelta (-1; expected >= 0)"
    );
}

#[test]
fn content_comes_without_a_header_printed_as_go_prints_it() {
    let mut h = hdr();
    h.route.as_mut().unwrap().primary = -1;
    h.route.as_mut().unwrap().endpoints[1] = String::new();
    h.process_id.as_mut().unwrap().zone = "é\"\\\n".into();
    let m = ReplicateRequest {
        header: Some(h),
        ..content()
    };
    assert_eq!(
        text(validate_replicate_request(&m)),
        "unexpected Header with Content (process_id:<zone:\"\\303\\251\\\"\\\\\\n\" suffix:\"broker-one\" > \
         route:<members:<zone:\"a\" suffix:\"broker-one\" > members:<zone:\"b\" suffix:\"broker-two\" > \
         primary:-1 endpoints:\"http://one:8080\" endpoints:\"\" > \
         etcd:<cluster_id:1 member_id:2 revision:3 raft_term:4 > )"
    );
    let m = ReplicateRequest {
        header: Some(Header::default()),
        ..content()
    };
    assert_eq!(
        text(validate_replicate_request(&m)),
        "unexpected Header with Content ()"
    );
}

#[test]
fn content_comes_without_registers_acks_or_a_journal() {
    let mut registers = set(&[("reg", "one"), ("reg", "")]);
    registers.labels[1].prefix = true;
    let m = ReplicateRequest {
        registers: Some(registers),
        ..content()
    };
    assert_eq!(
        text(validate_replicate_request(&m)),
        "unexpected Registers with Content (labels:<name:\"reg\" value:\"one\" > \
         labels:<name:\"reg\" prefix:true > )"
    );
    let m = ReplicateRequest {
        acknowledge: true,
        ..content()
    };
    assert_eq!(
        text(validate_replicate_request(&m)),
        "unexpected Acknowledge with Content"
    );
    let m = ReplicateRequest {
        deprecated_journal: "a/journal".into(),
        ..content()
    };
    assert_eq!(
        text(validate_replicate_request(&m)),
        "unexpected DeprecatedJournal with Content"
    );
}

// ------------------------------------------------------------------ replicate responses

#[test]
fn a_replicate_response_is_valid() {
    assert!(validate_replicate_response(&ReplicateResponse::default()).is_ok());
    let wrong_route = ReplicateResponse {
        status: Status::WrongRoute as i32,
        header: Some(hdr()),
        ..Default::default()
    };
    assert!(validate_replicate_response(&wrong_route).is_ok());
    let mismatch = ReplicateResponse {
        status: Status::ProposalMismatch as i32,
        fragment: Some(fragment()),
        registers: Some(LabelSet::default()),
        ..Default::default()
    };
    assert!(validate_replicate_response(&mismatch).is_ok());
}

#[test]
fn a_replicate_response_has_a_known_status() {
    let m = ReplicateResponse {
        status: -1,
        ..Default::default()
    };
    assert_eq!(
        text(validate_replicate_response(&m)),
        "Status: invalid status (-1)"
    );
}

#[test]
fn a_wrong_route_response_has_a_valid_header_and_no_other_does() {
    let m = ReplicateResponse {
        status: Status::WrongRoute as i32,
        ..Default::default()
    };
    assert_eq!(text(validate_replicate_response(&m)), "expected Header");
    let m = ReplicateResponse {
        status: Status::WrongRoute as i32,
        header: Some(Header {
            process_id: Some(id("a", "b")),
            ..hdr()
        }),
        ..Default::default()
    };
    assert_eq!(
        text(validate_replicate_response(&m)),
        "Header.ProcessId.Suffix: invalid length (1; expected 4 <= length <= 128)"
    );
    let m = ReplicateResponse {
        header: Some(Header {
            process_id: Some(id("z", "abcd")),
            route: None,
            etcd: Some(header::Etcd {
                revision: -3,
                ..Default::default()
            }),
        }),
        ..Default::default()
    };
    assert_eq!(
        text(validate_replicate_response(&m)),
        "unexpected Header (process_id:<zone:\"z\" suffix:\"abcd\" > etcd:<revision:-3 > )"
    );
}

#[test]
fn a_proposal_mismatch_has_a_valid_fragment_and_registers() {
    let m = ReplicateResponse {
        status: Status::ProposalMismatch as i32,
        ..Default::default()
    };
    assert_eq!(text(validate_replicate_response(&m)), "expected Fragment");
    let m = ReplicateResponse {
        status: Status::ProposalMismatch as i32,
        fragment: Some(Fragment {
            compression_codec: 0,
            ..fragment()
        }),
        ..Default::default()
    };
    assert_eq!(
        text(validate_replicate_response(&m)),
        "Fragment.CompressionCodec: invalid value (INVALID)"
    );
    let m = ReplicateResponse {
        status: Status::ProposalMismatch as i32,
        fragment: Some(fragment()),
        ..Default::default()
    };
    assert_eq!(text(validate_replicate_response(&m)), "expected Registers");
    let m = ReplicateResponse {
        status: Status::ProposalMismatch as i32,
        fragment: Some(fragment()),
        registers: Some(set(&[("a", "")])),
        ..Default::default()
    };
    assert_eq!(
        text(validate_replicate_response(&m)),
        "Registers.Labels[0].Name: invalid length (1; expected 2 <= length <= 64)"
    );
}

#[test]
fn other_responses_have_no_fragment_or_registers() {
    let m = ReplicateResponse {
        fragment: Some(Fragment {
            sum: Some(Sha1Sum {
                part1: u64::MAX,
                part2: 0,
                part3: 7,
            }),
            compression_codec: 9,
            backing_store: "s3://bucket/".into(),
            mod_time: 123,
            ..fragment()
        }),
        ..Default::default()
    };
    assert_eq!(
        text(validate_replicate_response(&m)),
        "unexpected Fragment (journal:\"a/journal\" begin:10 end:20 \
         sum:<part1:18446744073709551615 part3:7 > compression_codec:9 \
         backing_store:\"s3://bucket/\" mod_time:123 path_postfix:\"date=2024\" )"
    );
    let m = ReplicateResponse {
        registers: Some(LabelSet::default()),
        ..Default::default()
    };
    assert_eq!(
        text(validate_replicate_response(&m)),
        "unexpected Registers ()"
    );
}

// ------------------------------------------------------------------ character classes

#[test]
fn letters_and_numbers_are_python_regex_classes() {
    // Letters (L*) and numbers (N*) of several scripts are in; marks, symbols,
    // separators and punctuation are out, as are Other_Alphabetic runes which
    // Rust's `is_alphanumeric` lets in.
    for c in [
        'a', 'Z', '0', 'é', 'ß', 'ǅ', 'ʰ', '名', '٣', 'Ⅻ', '½', '𝟘', '𐐀',
    ] {
        assert!(unicode::is_letter_or_number(c), "{c:?}");
    }
    for c in [
        '-',
        ' ',
        '\u{301}',
        '\u{94d}',
        'Ⓐ',
        '€',
        '\u{a0}',
        '。',
        '\u{10ffff}',
    ] {
        assert!(!unicode::is_letter_or_number(c), "{c:?}");
    }
}

#[test]
fn printable_is_python_isprintable() {
    for c in [' ', '~', 'é', '名', '\u{ad}'] {
        assert_eq!(unicode::is_printable(c), c != '\u{ad}', "{c:?}");
    }
    for c in [
        '\x1f',
        '\x7f',
        '\u{85}',
        '\u{a0}',
        '\u{2028}',
        '\u{e000}',
        '\u{10ffff}',
    ] {
        assert!(!unicode::is_printable(c), "{c:?}");
    }
}

//! Claims as the Python server reads them (`broker/tests/protocol/test_pb_auth*.py`).

use super::*;

const NOW: f64 = 1_700_000_000.0;

fn claims(json: &str) -> Result<Claims, String> {
    Claims::from_payload(json.as_bytes(), NOW)
}

fn spec(name: &str, labels: &[(&str, &str)]) -> JournalSpec {
    JournalSpec {
        name: name.into(),
        labels: Some(LabelSet {
            labels: labels
                .iter()
                .map(|(n, v)| Label {
                    name: n.to_string(),
                    value: v.to_string(),
                    prefix: false,
                })
                .collect(),
        }),
        ..Default::default()
    }
}

#[test]
fn gazettes_json_is_read() {
    let c = claims(
        r#"{"cap":8,"sel":{"include":{"labels":[{"name":"name","value":"a/j"}]},
            "exclude":{"labels":null}},"exp":1700003600,"iat":1700000000}"#,
    )
    .unwrap();
    assert_eq!(c.capability, capability::READ);
    assert_eq!(c.expires_at, 1_700_003_600.0);
    assert_eq!(c.issued_at, Some(NOW));
    assert!(c.allows(&spec("a/j", &[])));
    assert!(!c.allows(&spec("a/k", &[])));
    assert!(c.check_capability(capability::READ).is_ok());
    assert_eq!(
        c.check_capability(capability::READ | capability::APPEND)
            .unwrap_err(),
        "authorization is missing required APPEND capability"
    );
    assert_eq!(
        c.check_capability(1 << 20).unwrap_err(),
        "authorization is missing required capability (have 1000, but require 100000000000000000000)"
    );
}

#[test]
fn fields_default_and_match_case_insensitively_except_times() {
    let c = claims(r#"{"CAP":2,"Sel":{"Include":{"Labels":[{"Name":"topic","Value":"logs"}]}},"exp":1700000001}"#)
        .unwrap();
    assert_eq!(c.capability, capability::LIST);
    assert!(c.allows(&spec("x", &[("topic", "logs")])));
    assert!(!c.allows(&spec("x", &[("topic", "metrics")])));
    let c = claims(r#"{"exp":1700000001,"cap":null,"sel":null,"other":[1,2]}"#).unwrap();
    assert_eq!(c.capability, 0);
    assert!(c.allows(&spec("anything", &[])));
    assert_eq!(
        claims(r#"{"EXP":1700000001}"#).unwrap_err(),
        "token has invalid claims: token is missing required claim: exp claim is required"
    );
}

#[test]
fn expiry_and_issue_times_tolerate_five_seconds() {
    assert!(claims(r#"{"exp":1699999996}"#).is_ok());
    assert_eq!(
        claims(r#"{"exp":1699999995}"#).unwrap_err(),
        "token has invalid claims: token is expired"
    );
    assert!(claims(r#"{"exp":1700000100,"iat":1700000005}"#).is_ok());
    assert_eq!(
        claims(r#"{"exp":1700000100,"iat":1700000006}"#).unwrap_err(),
        "token has invalid claims: token used before issued"
    );
}

#[test]
fn wrong_types_are_malformed_naming_the_field() {
    for (json, why) in [
        (
            r#"{"exp":1700000100,"cap":-1}"#,
            "cap: expected an unsigned 32-bit integer",
        ),
        (
            r#"{"exp":1700000100,"cap":4294967296}"#,
            "cap: expected an unsigned 32-bit integer",
        ),
        (
            r#"{"exp":1700000100,"cap":true}"#,
            "cap: expected an unsigned 32-bit integer",
        ),
        (r#"{"exp":1700000100,"sel":[]}"#, "sel: expected an object"),
        (
            r#"{"exp":1700000100,"sel":{"include":1}}"#,
            "sel.include: expected an object",
        ),
        (
            r#"{"exp":1700000100,"sel":{"exclude":{"labels":{}}}}"#,
            "sel.exclude.labels: expected an array",
        ),
        (
            r#"{"exp":1700000100,"sel":{"include":{"labels":[{"name":1}]}}}"#,
            "sel.include.labels[0].name: expected a string",
        ),
        (
            r#"{"exp":1700000100,"sel":{"include":{"labels":[{"prefix":"yes"}]}}}"#,
            "sel.include.labels[0].prefix: expected a boolean",
        ),
        (r#"{"exp":"soon"}"#, "exp: expected a number of seconds"),
        (r#"[1]"#, "Invalid payload string: must be a json object"),
    ] {
        assert_eq!(
            claims(json).unwrap_err(),
            format!("token is malformed: {why}"),
            "{json}"
        );
    }
}

#[test]
fn selector_labels_are_sorted_whatever_the_signer_wrote() {
    let c = claims(
        r#"{"exp":1700000100,"sel":{"include":{"labels":[
            {"name":"topic","value":"b"},{"name":"app","value":"web"},{"name":"topic","value":"a"},
            {"name":"topic","value":"a"}]}}}"#,
    )
    .unwrap();
    let names: Vec<_> = c
        .selector
        .include
        .as_ref()
        .unwrap()
        .labels
        .iter()
        .map(|l| (l.name.as_str(), l.value.as_str()))
        .collect();
    assert_eq!(names, [("app", "web"), ("topic", "a"), ("topic", "b")]);
    assert!(c.allows(&spec("j", &[("app", "web"), ("topic", "b")])));
    assert!(!c.allows(&spec("j", &[("app", "web"), ("topic", "c")])));
}

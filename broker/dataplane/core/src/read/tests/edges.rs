//! Statuses, validation, tokens and names of the Read RPC at a member, after
//! the Python `test_broker_statuses.py` and `test_broker_auth.py`.

use std::time::{SystemTime, UNIX_EPOCH};

use super::*;

#[tokio::test]
async fn statuses_come_with_the_header() {
    let b = Broker::member().await;
    let got = read_via(
        &b,
        ReadRequest {
            journal: "not/a/journal".into(),
            ..read(0)
        },
    )
    .await;
    let [only] = &got.meta[..] else {
        panic!("{:?}", got.meta)
    };
    assert_eq!(status(only), Status::JournalNotFound);
    let hdr = only.header.as_ref().unwrap();
    assert_eq!(
        (hdr.process_id.clone(), hdr.etcd),
        (Some(member_a()), Some(etcd(10)))
    );

    b.publish(
        &member_a(),
        &b.endpoint.clone(),
        journal_spec::Flag::OWronly as u32,
    );
    let got = read_via(&b, read(0)).await;
    assert_eq!(status(&got.meta[0]), Status::NotAllowed);
    assert!(got.meta[0].header.is_some() && got.end.is_none());
}

#[tokio::test]
async fn invalid_requests_are_refused_with_pythons_words() {
    let b = Broker::member().await;
    let got = read_via(&b, read(-2)).await;
    let end = got.end.unwrap();
    assert_eq!(end.code(), Code::Unknown);
    assert_eq!(
        end.message(),
        "invalid Offset (-2; expected -1 <= Offset <= MaxInt64)"
    );
    let got = read_via(
        &b,
        ReadRequest {
            journal: String::new(),
            ..read(0)
        },
    )
    .await;
    assert_eq!(got.end.unwrap().code(), Code::Unknown);
}

#[tokio::test]
async fn a_journal_with_meta_reads_as_its_name() {
    let b = Broker::member().await;
    b.commit(b"meta").await;
    let req = ReadRequest {
        journal: format!("{JOURNAL};pump"),
        ..read(0)
    };
    let got = read_via(&b, req).await;
    assert_eq!(got.content, b"meta");
    assert_eq!(got.meta[0].fragment.as_ref().unwrap().journal, JOURNAL);
}

#[tokio::test]
async fn a_member_not_serving_the_replica_answers_unavailable() {
    let b = Broker::member().await;
    b.replicas.update(vec![]); // The assignment went; the registry lags.
    let end = read_via(&b, read(0)).await.end.unwrap();
    assert_eq!(
        (end.code(), end.message()),
        (Code::Unavailable, "replica of a/journal was stopped")
    );
}

#[tokio::test]
async fn tokens_need_read_and_bound_the_read() {
    use crate::auth::{tests::sign, Gate};
    let b = Broker::start(member_a(), Some(Gate::new(vec![b"key".to_vec()], false))).await;
    b.publish(&member_a(), &b.endpoint.clone(), 0);
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let with = |cap: u32, exp: u64| {
        let mut req = tonic::Request::new(ReadRequest {
            block: true,
            ..read(0)
        });
        let token = sign("HS256", b"key", &format!(r#"{{"cap":{cap},"exp":{exp}}}"#));
        req.metadata_mut()
            .insert("authorization", token.parse().unwrap());
        req
    };
    let got = stream(
        &mut b.client(),
        with(crate::claims::capability::APPEND, now + 60),
    )
    .await;
    let end = got.end.unwrap();
    assert_eq!(
        (end.code(), end.message()),
        (
            Code::Unauthenticated,
            "authorization is missing required READ capability"
        )
    );
    // A blocked read lasts as long as its token.
    let got = stream(
        &mut b.client(),
        with(crate::claims::capability::READ, now + 1),
    )
    .await;
    let end = got.end.unwrap();
    assert_eq!(
        (end.code(), end.message()),
        (Code::DeadlineExceeded, "context deadline exceeded")
    );
}

#[test]
fn flags_that_allow_reads() {
    use journal_spec::Flag;
    let spec = |flags: Flag| JournalSpec {
        flags: flags as u32,
        ..JournalSpec::default()
    };
    assert!(journal_may_read(&spec(Flag::NotSpecified)));
    assert!(journal_may_read(&spec(Flag::ORdonly)));
    assert!(journal_may_read(&spec(Flag::ORdwr)));
    assert!(!journal_may_read(&spec(Flag::OWronly)));
}

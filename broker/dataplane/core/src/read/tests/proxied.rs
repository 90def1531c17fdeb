//! Reads a non-member proxies to the journal's member, after the Python
//! `test_broker_statuses.py` proxy cases and Gazette's `proxyRead`.

use super::*;
use crate::claims::capability;
use crate::registry::missing_id;

/// The member, and a broker of another zone that is not in the route.
async fn pair() -> (Broker, Broker) {
    let member = Broker::member().await;
    let proxy = Broker::start(id("b", "proxy"), None).await;
    proxy.publish(&member_a(), &member.endpoint, 0);
    (member, proxy)
}

#[tokio::test]
async fn a_non_member_relays_the_members_answers() {
    let (member, proxy) = pair().await;
    let data = content(CHUNK + 77, 9);
    member.commit(&data).await;
    let req = ReadRequest {
        journal: format!("{JOURNAL};meta"),
        ..read(0)
    };
    let got = read_via(&proxy, req).await;
    assert!(got.end.is_none(), "{:?}", got.end);
    assert_eq!(got.content, data);
    assert_eq!(got.sizes, [CHUNK, 77]);
    // The member's own header, relayed as it is.
    let hdr = got.meta[0].header.as_ref().unwrap();
    assert_eq!(hdr.process_id, Some(member_a()));
    // Under this broker's token for the journal, as asked (its meta kept).
    let calls = proxy.host.peer_calls.lock().unwrap().clone();
    assert_eq!(calls, [(format!("{JOURNAL};meta"), capability::READ)]);
}

#[tokio::test]
async fn do_not_proxy_refuses_at_a_non_member() {
    let (_member, proxy) = pair().await;
    let got = read_via(
        &proxy,
        ReadRequest {
            do_not_proxy: true,
            ..read(0)
        },
    )
    .await;
    let [only] = &got.meta[..] else {
        panic!("{:?}", got.meta)
    };
    assert_eq!(status(only), Status::NotJournalBroker);
    let hdr = only.header.as_ref().unwrap();
    assert_eq!(hdr.process_id, Some(id("b", "proxy")));
}

#[tokio::test]
async fn a_broker_cut_off_proxies_nothing() {
    let (_member, proxy) = pair().await;
    let why =
        "this broker is cut off from the others (no peer answers); retry through another broker";
    *proxy.host.cut_off.lock().unwrap() = Some(why.into());
    let end = read_via(&proxy, read(0)).await.end.unwrap();
    assert_eq!((end.code(), end.message()), (Code::Unavailable, why));
}

#[tokio::test]
async fn stopping_proxy_reads_ends_the_relay_cleanly() {
    let (member, proxy) = pair().await;
    member.commit(b"first").await;
    let req = ReadRequest {
        block: true,
        ..read(0)
    };
    let mut answers = proxy.client().read(req).await.unwrap().into_inner();
    for _ in 0..2 {
        let msg = tokio::time::timeout(PROMPTLY, answers.message()).await;
        msg.unwrap().unwrap().expect("metadata, then content");
    }
    // Blocked at the member, at offset 5; the proxy shuts down.
    proxy.ctx.stop_proxy_reads();
    let end = tokio::time::timeout(PROMPTLY, answers.message()).await;
    assert!(matches!(end, Ok(Ok(None))), "{end:?}");
    // Later proxied reads end at once, and say nothing.
    let got = read_via(&proxy, read(0)).await;
    assert!(got.meta.is_empty() && got.end.is_none(), "{got:?}");
}

#[tokio::test]
async fn a_members_failure_is_relayed_with_its_code() {
    let (member, proxy) = pair().await;
    member.replicas.update(vec![]);
    let end = read_via(&proxy, read(0)).await.end.unwrap();
    assert_eq!(
        (end.code(), end.message()),
        (Code::Unavailable, "replica of a/journal was stopped")
    );
}

fn resolution(
    members: &[process_spec::Id],
    endpoints: &[&str],
    process: Option<process_spec::Id>,
) -> crate::registry::Resolution {
    crate::registry::Resolution {
        status: Status::Ok as i32,
        header: Header {
            process_id: process,
            route: Some(Route {
                members: members.to_vec(),
                primary: 0,
                endpoints: endpoints.iter().map(|e| e.to_string()).collect(),
            }),
            etcd: Some(etcd(1)),
        },
        local_id: id("b", "local"),
        spec: None,
        consistent: true,
        invalidated: tokio::sync::watch::channel(0).1,
    }
}

#[test]
fn members_of_our_zone_with_an_endpoint_are_preferred() {
    use super::super::proxy::pick_member;
    let members = [id("a", "one"), id("b", "two"), id("b", "three")];
    let res = resolution(&members, &["ep1", "", "ep3"], None);
    assert_eq!(pick_member(&res).unwrap(), (id("b", "three"), "ep3".into()));
    let res = resolution(&members, &["ep1", "ep2", "ep3"], None);
    assert_eq!(pick_member(&res).unwrap(), (id("b", "two"), "ep2".into()));
    let res = resolution(&members[..1], &["ep1"], None);
    assert_eq!(pick_member(&res).unwrap(), (id("a", "one"), "ep1".into()));
    // The resolved process, when the resolution names one.
    let res = resolution(&members, &["ep1", "ep2", "ep3"], Some(id("a", "one")));
    assert_eq!(pick_member(&res).unwrap(), (id("a", "one"), "ep1".into()));
    let res = resolution(&members, &["ep1"], Some(missing_id()));
    let err = pick_member(&res).unwrap_err();
    assert_eq!(
        err.message(),
        "resolved process local-BrokerSpec/missing-from-Etcd is not a route member"
    );
    let res = resolution(&members, &[], None);
    let err = pick_member(&res).unwrap_err();
    assert_eq!(
        (err.code(), err.message()),
        (Code::Unavailable, "no route member has an endpoint")
    );
}

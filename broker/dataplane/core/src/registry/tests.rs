//! The resolver's status rules, as the Python resolver's tests check them
//! (`broker/tests/server/test_resolver.py`), against a published registry.

use std::{sync::Arc, time::Duration};

use super::*;
use crate::protocol::{JournalSpec, Route};

fn id(zone: &str, suffix: &str) -> process_spec::Id {
    process_spec::Id {
        zone: zone.into(),
        suffix: suffix.into(),
    }
}

fn journal(name: &str, suspend: bool) -> Journal {
    let mut spec = JournalSpec {
        name: name.into(),
        replication: 2,
        ..Default::default()
    };
    if suspend {
        spec.suspend = Some(journal_spec::Suspend {
            level: journal_spec::suspend::Level::Full as i32,
            offset: 0,
        });
    }
    Journal {
        spec: Arc::new(spec),
        route: Route {
            members: vec![id("z1", "bk-1"), id("z2", "bk-2")],
            primary: 1,
            endpoints: vec![],
        },
        consistent: false,
    }
}

fn update(revision: i64, local: Option<process_spec::Id>, suspend: bool) -> Update {
    Update {
        etcd: header::Etcd {
            cluster_id: 7,
            member_id: 1,
            revision,
            raft_term: 2,
        },
        local_id: local,
        members: Some(
            ["bk-1", "bk-2", "bk-3"]
                .iter()
                .enumerate()
                .map(|(i, s)| (id(&format!("z{}", i + 1), s), format!("http://{s}:8080")))
                .collect(),
        ),
        journals: vec![("a/journal".into(), journal("a/journal", suspend))],
        removed: vec![],
    }
}

fn make(local: Option<(&str, &str)>, suspend: bool) -> Registry {
    let r = Registry::new();
    r.publish(update(7, local.map(|(z, s)| id(z, s)), suspend));
    r
}

fn query(may_proxy: bool, require_primary: bool) -> Query<'static> {
    Query {
        may_proxy,
        require_primary,
        ..Default::default()
    }
}

#[tokio::test]
async fn route_and_statuses() {
    let r = make(Some(("z1", "bk-1")), false);
    let res = r
        .resolve("a/journal;meta", query(false, false))
        .await
        .unwrap();
    assert_eq!(res.status(), Status::Ok);
    assert!(res.is_local());
    let rt = res.header.route.as_ref().unwrap();
    assert_eq!(rt.members, vec![id("z1", "bk-1"), id("z2", "bk-2")]);
    assert_eq!(rt.primary, 1);
    assert_eq!(rt.endpoints, vec!["http://bk-1:8080", "http://bk-2:8080"]);
    assert_eq!(res.header.process_id, Some(id("z1", "bk-1")));
    assert_eq!(res.header.etcd.unwrap().cluster_id, 7);
    assert_eq!(res.spec.as_ref().unwrap().name, "a/journal");

    let res = r.resolve("a/journal", query(false, true)).await.unwrap();
    assert_eq!(res.status(), Status::NotJournalPrimaryBroker);
    assert_eq!(
        res.header.process_id,
        Some(id("z1", "bk-1")),
        "we authored the error"
    );
    let res = r.resolve("a/journal", query(true, true)).await.unwrap();
    assert_eq!(res.status(), Status::Ok);
    assert_eq!(res.header.process_id, Some(id("z2", "bk-2")));
    assert!(!res.is_local());

    let missing = r.resolve("missing", query(false, false)).await.unwrap();
    assert_eq!(missing.status(), Status::JournalNotFound);
    assert!(missing.spec.is_none());
    let deny = |_: &JournalSpec| false;
    let hidden = r
        .resolve(
            "a/journal",
            Query {
                authorized: Some(&deny),
                ..query(false, false)
            },
        )
        .await
        .unwrap();
    assert_eq!(hidden.status(), Status::JournalNotFound);
    assert!(hidden.header.route.unwrap().members.is_empty());
}

#[tokio::test]
async fn non_member_and_suspended() {
    let r = make(Some(("z3", "bk-3")), false);
    let res = r.resolve("a/journal", query(false, false)).await.unwrap();
    assert_eq!(res.status(), Status::NotJournalBroker);
    let ok = r.resolve("a/journal", query(true, false)).await.unwrap();
    assert_eq!(ok.status(), Status::Ok);
    assert_eq!(ok.header.process_id, None, "any member may serve");

    let suspended = make(Some(("z1", "bk-1")), true);
    let res = suspended
        .resolve("a/journal", query(false, false))
        .await
        .unwrap();
    assert_eq!(res.status(), Status::Suspended);
}

#[tokio::test]
async fn proxy_header_checks_and_missing_member() {
    let r = make(Some(("z1", "bk-1")), false);
    let mut hdr = Header {
        etcd: Some(header::Etcd {
            cluster_id: 8,
            ..Default::default()
        }),
        ..Default::default()
    };
    fn q(h: &Header) -> Query<'_> {
        Query {
            proxy_header: Some(h),
            ..query(false, false)
        }
    }
    let err = r.resolve("a/journal", q(&hdr)).await.unwrap_err();
    assert!(err.to_string().contains("ClusterId doesn't match"), "{err}");
    hdr.etcd.as_mut().unwrap().cluster_id = 7;
    hdr.process_id = Some(id("z2", "bk-2"));
    let err = r.resolve("a/journal", q(&hdr)).await.unwrap_err();
    assert!(err.to_string().contains("ProcessId doesn't match"), "{err}");
    hdr.process_id = Some(id("z1", "bk-1"));
    assert_eq!(
        r.resolve("a/journal", q(&hdr)).await.unwrap().status(),
        Status::Ok
    );

    let gone = make(None, false);
    let res = gone
        .resolve("a/journal", query(false, false))
        .await
        .unwrap();
    assert_eq!(res.local_id, missing_id());
}

#[tokio::test]
async fn stopped_registry_refuses_to_serve_locally() {
    let r = make(Some(("z1", "bk-1")), false);
    r.stop_serving_local_replicas();
    let err = r
        .resolve("a/journal", query(false, false))
        .await
        .unwrap_err();
    assert_eq!(err, ResolveError::Stopped);
    assert!(err.to_string().contains("stopped serving local replicas"));
    // Proxying to the primary elsewhere still resolves.
    let res = r.resolve("a/journal", query(true, true)).await.unwrap();
    assert_eq!(res.status(), Status::Ok);
}

#[tokio::test]
async fn assignments_consistency_is_as_published() {
    let r = make(Some(("z1", "bk-1")), false);
    assert!(
        !r.resolve("a/journal", query(false, false))
            .await
            .unwrap()
            .consistent
    );
    let mut up = update(8, Some(id("z1", "bk-1")), false);
    up.journals[0].1.consistent = true;
    up.members = None; // Members unchanged: endpoints stay as published.
    r.publish(up);
    let res = r.resolve("a/journal", query(false, false)).await.unwrap();
    assert!(res.consistent);
    assert_eq!(res.header.route.unwrap().endpoints[0], "http://bk-1:8080");
}

#[tokio::test]
async fn republication_invalidates_resolutions_of_that_journal_only() {
    let r = make(Some(("z1", "bk-1")), false);
    let mut a = r.resolve("a/journal", query(false, false)).await.unwrap();
    let other = r.resolve("other", query(true, false)).await.unwrap();
    assert!(!a.invalidated.has_changed().unwrap());

    let mut up = update(8, Some(id("z1", "bk-1")), false);
    up.journals[0].1.route.primary = 0;
    r.publish(up);
    tokio::time::timeout(Duration::from_secs(1), a.invalidated.changed())
        .await
        .expect("invalidated")
        .unwrap();
    assert!(!other.invalidated.has_changed().unwrap());

    // A removed journal invalidates too, and resolves JOURNAL_NOT_FOUND after.
    r.publish(Update {
        etcd: header::Etcd {
            cluster_id: 7,
            revision: 9,
            ..Default::default()
        },
        local_id: Some(id("z1", "bk-1")),
        removed: vec!["a/journal".into()],
        ..Default::default()
    });
    let removed = tokio::time::timeout(Duration::from_secs(1), a.invalidated.changed())
        .await
        .expect("invalidated by removal");
    assert!(
        removed.is_ok(),
        "the removal is seen before the signal goes"
    );
    let res = r.resolve("a/journal", query(true, false)).await.unwrap();
    assert_eq!(res.status(), Status::JournalNotFound);
    assert!(!other.invalidated.has_changed().unwrap());
}

#[tokio::test]
async fn resolution_waits_for_the_revision_asked() {
    let r = Arc::new(make(Some(("z1", "bk-1")), false));
    let waiter = {
        let r = r.clone();
        tokio::spawn(async move {
            let q = Query {
                min_etcd_revision: 9,
                ..query(false, false)
            };
            r.resolve("a/journal", q)
                .await
                .map(|res| res.header.etcd.unwrap().revision)
        })
    };
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert!(!waiter.is_finished(), "revision 7 is published, 9 is asked");
    r.publish(Update {
        members: None,
        ..update(8, Some(id("z1", "bk-1")), false)
    });
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert!(!waiter.is_finished());
    r.publish(Update {
        members: None,
        ..update(9, Some(id("z1", "bk-1")), false)
    });
    let rev = tokio::time::timeout(Duration::from_secs(1), waiter)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(rev, 9);
    assert_eq!(r.revision(), 9);
}

#[test]
fn routes_are_equivalent_whatever_their_endpoints() {
    let a = journal("x", false).route;
    let mut b = a.clone();
    b.endpoints = vec!["http://elsewhere".into()];
    assert!(route_equivalent(&a, &b));
    b.primary = 0;
    assert!(!route_equivalent(&a, &b));
}

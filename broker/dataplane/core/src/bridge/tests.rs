use std::sync::atomic::AtomicUsize;

use super::*;
use crate::append::{AppendDeps, IndexSummary};
use crate::protocol::{Fragment, JournalSpec};
use crate::spool::files::SpoolFile;

/// A bridge whose wake-ups are counted.
fn bridge() -> (Arc<Bridge>, Arc<AtomicUsize>) {
    bridge_with(BridgeConfig::default())
}

fn bridge_with(config: BridgeConfig) -> (Arc<Bridge>, Arc<AtomicUsize>) {
    let wakes = Arc::new(AtomicUsize::new(0));
    let counted = wakes.clone();
    let b = Bridge::new(
        config,
        SharedGate::default(),
        Box::new(move || {
            counted.fetch_add(1, Ordering::SeqCst);
        }),
    );
    (Arc::new(b), wakes)
}

fn fragment(begin: i64, end: i64, file: &Arc<SpoolFile>) -> LocalFragment {
    LocalFragment {
        spec: Fragment {
            journal: "a/journal".into(),
            begin,
            end,
            ..Fragment::default()
        },
        file: Some(file.clone()),
    }
}

fn file() -> Arc<SpoolFile> {
    Arc::new(SpoolFile::create(None).unwrap())
}

fn ends(events: &[Event]) -> Vec<(&'static str, i64)> {
    events
        .iter()
        .map(|e| match e {
            Event::Complete { completed, .. } => ("complete", completed.end()),
            Event::Ask { .. } => ("ask", 0),
            _ => ("read", 0),
        })
        .collect()
}

fn completed(f: LocalFragment) -> Completed {
    Completed {
        confirmed_end: f.spec.end,
        fragment: f,
        compressed: None,
        continued: true,
        registers: Default::default(),
        first_append_time: None,
    }
}

#[test]
fn commits_tell_python_nothing_and_a_completion_wakes_it_at_once() {
    let (b, wakes) = bridge();
    let f = file();
    for end in [10, 20, 30] {
        b.spool_commit("a/journal", fragment(0, end, &f));
    }
    assert_eq!(wakes.load(Ordering::SeqCst), 0);
    assert!(b.drain().is_empty(), "the replica's index has them");
    b.spool_complete("a/journal", completed(fragment(0, 30, &f)), true, false);
    b.spool_complete("a/journal", completed(fragment(30, 40, &f)), true, false);
    assert_eq!(wakes.load(Ordering::SeqCst), 1, "once until drained");
    assert_eq!(ends(&b.drain()), vec![("complete", 30), ("complete", 40)]);
}

#[tokio::test]
async fn an_ask_waits_for_pythons_answer_and_a_closed_bridge_fails_it() {
    let (b, _) = bridge();
    let asked = b.ask(Ask::CheckpointHead {
        journal: "a/journal".into(),
        offset: 7,
    });
    let events = b.drain();
    let Event::Ask { id, ask } = &events[0] else {
        panic!("{events:?}")
    };
    assert_eq!(
        ask,
        &Ask::CheckpointHead {
            journal: "a/journal".into(),
            offset: 7
        }
    );
    b.answer(*id, Ok(Some(3)));
    assert_eq!(asked.await, Ok(Some(3)));

    let pending = b.ask(Ask::HeadResumesAt {
        journal: "a/journal".into(),
        index_end: 1,
    });
    b.close();
    assert_eq!(pending.await, Err("the broker is stopping".into()));
    let later = b.ask(Ask::HeadResumesAt {
        journal: "a/journal".into(),
        index_end: 1,
    });
    assert_eq!(later.await, Err("the broker is stopping".into()));
}

/// Answers every fence ask as Python does: the fence covers the asked end plus a step.
async fn answer_fences(b: Arc<Bridge>, asked: Arc<Mutex<Vec<i64>>>) {
    loop {
        for event in b.drain() {
            if let Event::Ask {
                id,
                ask: Ask::CoverFence { end, .. },
            } = event
            {
                asked.lock().unwrap().push(end);
                b.answer(id, Ok(Some(end + FENCE_STEP)));
            }
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

#[tokio::test]
async fn the_fence_is_raised_once_per_step_and_ahead_of_the_appends_that_need_it() {
    let (b, _) = bridge();
    let asked = Arc::new(Mutex::new(Vec::new()));
    let answering = tokio::spawn(answer_fences(b.clone(), asked.clone()));

    // The first acknowledgement waits for the fence to be taken over.
    let first = b.cover_fence("a/journal", 100).expect("not covered yet");
    first.await.unwrap();
    assert_eq!(*asked.lock().unwrap(), vec![100]);
    // Within the first half of the step: nothing to ask.
    assert!(b.cover_fence("a/journal", 100 + FENCE_STEP / 4).is_none());
    assert_eq!(asked.lock().unwrap().len(), 1);
    // Past half the step: raised in the background, the append does not wait.
    assert!(b
        .cover_fence("a/journal", 100 + FENCE_STEP * 3 / 4)
        .is_none());
    tokio::time::timeout(Duration::from_secs(5), async {
        while asked.lock().unwrap().len() < 2 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    })
    .await
    .unwrap();
    assert_eq!(asked.lock().unwrap()[1], 100 + FENCE_STEP + 1);
    // Now covered a whole step further: no wait, no ask.
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert!(b.cover_fence("a/journal", 100 + FENCE_STEP + 10).is_none());
    assert_eq!(asked.lock().unwrap().len(), 2);

    // A replaced replica takes the fence over again before it acknowledges.
    b.replica_made("a/journal");
    b.cover_fence("a/journal", 200)
        .expect("must take it over")
        .await
        .unwrap();
    assert_eq!(asked.lock().unwrap()[2], 200);
    answering.abort();
}

#[tokio::test]
async fn a_raise_asked_by_a_replaced_replica_does_not_cover_its_successor() {
    let (b, _) = bridge();
    let old = b.cover_fence("a/journal", 10).unwrap();
    let events = b.drain();
    let Event::Ask { id: old_id, .. } = &events[0] else {
        panic!("{events:?}")
    };
    b.replica_made("a/journal");
    let new = b
        .cover_fence("a/journal", 20)
        .expect("the successor takes it over");
    // The old replica's raise ends now, reaching far: it is not the successor's.
    b.answer(*old_id, Ok(Some(10 + FENCE_STEP)));
    assert_eq!(old.await, Ok(()));
    let events = b.drain();
    let Event::Ask { id, ask } = &events[0] else {
        panic!("{events:?}")
    };
    assert_eq!(
        ask,
        &Ask::CoverFence {
            journal: "a/journal".into(),
            end: 20
        }
    );
    assert!(
        b.cover_fence("a/journal", 30).is_some(),
        "still not covered"
    );
    b.answer(*id, Ok(Some(20 + FENCE_STEP)));
    assert_eq!(new.await, Ok(()));
}

#[tokio::test]
async fn a_fence_python_cannot_raise_fails_the_append_waiting_for_it() {
    let (b, _) = bridge();
    let waiting = b.cover_fence("a/journal", 10).unwrap();
    let events = b.drain();
    let Event::Ask { id, .. } = &events[0] else {
        panic!("{events:?}")
    };
    b.answer(*id, Err("etcd: permission denied".into()));
    assert_eq!(waiting.await, Err("etcd: permission denied".into()));
}

#[test]
fn the_lease_is_checked_against_what_python_published() {
    let (b, _) = bridge();
    assert!(b
        .check_lease()
        .unwrap_err()
        .contains("lease may have expired"));
    b.set_lease(Some(Duration::from_secs(10)), None);
    assert_eq!(b.check_lease(), Ok(()));
    b.set_lease(
        Some(Duration::from_secs(10)),
        Some("no peer answers".into()),
    );
    assert_eq!(
        b.check_lease(),
        Err(
            "this broker is cut off from the others (no peer answers); retry through another \
             broker"
                .into()
        )
    );
    b.set_lease(Some(Duration::ZERO), None);
    assert!(b.check_lease().is_err());
}

fn spec_with_store(store: &str) -> JournalSpec {
    JournalSpec {
        name: "a/journal".into(),
        replication: 3,
        fragment: Some(crate::protocol::journal_spec::Fragment {
            stores: vec![store.into()],
            ..Default::default()
        }),
        ..JournalSpec::default()
    }
}

#[test]
fn store_health_and_the_index_are_read_as_published() {
    let (b, _) = bridge();
    let spec = spec_with_store("s3://bucket/");
    assert!(!b.store_healthy(&spec), "unchecked is not healthy");
    b.set_store_health("s3://bucket/", None);
    assert!(b.store_healthy(&spec));
    b.set_store_health("s3://bucket/", Some("no such bucket".into()));
    assert!(!b.store_healthy(&spec));
    assert!(
        b.store_healthy(&JournalSpec::default()),
        "no store: nothing to check"
    );
}

fn assigned(journal: &str) -> crate::replica::LocalAssignment {
    crate::replica::LocalAssignment {
        journal: journal.into(),
        primary: false,
        create_revision: 1,
        lease: 7,
        members: vec![],
    }
}

#[tokio::test]
async fn appends_read_the_index_of_the_journals_replica() {
    let (b, _) = bridge();
    let replicas = Arc::new(ReplicaSet::new(b.clone(), Default::default()));
    assert_eq!(b.index("a/journal"), IndexSummary::default(), "unattached");
    b.attach_replicas(&replicas);
    replicas.update(vec![assigned("a/journal")]);
    let index = replicas.get("a/journal").unwrap().index().clone();

    // Its first listing is what the append waits for.
    let waiting = b.wait_first_refresh("a/journal");
    let stored = Fragment {
        journal: "a/journal".into(),
        begin: 0,
        end: 40,
        mod_time: 5,
        backing_store: "s3://bucket/".into(),
        ..Fragment::default()
    };
    let publisher = index.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(10)).await;
        publisher.replace_stored(vec![stored]).unwrap();
    });
    tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .unwrap();
    let summary = IndexSummary {
        first_refresh_done: true,
        begin: 0,
        end: 40,
        mod_time: 5,
    };
    assert_eq!(b.index("a/journal"), summary);
    // A commit of its spool counts at once (a local fragment: dirty, mod time 0).
    index.spool_commit(fragment(40, 50, &file()));
    assert_eq!(
        b.index("a/journal"),
        IndexSummary {
            end: 50,
            mod_time: 0,
            ..summary
        }
    );
    // A journal with no replica here has an empty index, and nothing to wait for.
    assert_eq!(b.index("other/journal"), IndexSummary::default());
    tokio::time::timeout(
        Duration::from_secs(5),
        b.wait_first_refresh("other/journal"),
    )
    .await
    .unwrap();
    replicas.update(vec![]);
    assert_eq!(b.index("a/journal"), IndexSummary::default());
    tokio::time::timeout(Duration::from_secs(5), replicas.stop_all())
        .await
        .unwrap();
}

#[test]
fn desired_replication_follows_suspension_and_the_brokers_cap() {
    use crate::protocol::journal_spec::{suspend::Level, Suspend};
    let (b, _) = bridge_with(BridgeConfig {
        max_replication: 2,
        ..BridgeConfig::default()
    });
    let mut spec = spec_with_store("s3://bucket/");
    assert_eq!(b.desired_replication(&spec), 2);
    spec.suspend = Some(Suspend {
        level: Level::Partial as i32,
        offset: 0,
    });
    assert_eq!(b.desired_replication(&spec), 1);
    spec.suspend = Some(Suspend {
        level: Level::Full as i32,
        offset: 0,
    });
    assert_eq!(b.desired_replication(&spec), 0);
}

#[test]
fn peer_calls_carry_a_token_of_one_journal_once_the_broker_has_keys() {
    let (b, _) = bridge();
    assert!(b.peer_metadata("a/journal", 32).is_empty());
    *b.gate.write().unwrap() = Some(Arc::new(crate::auth::Gate::new(
        vec![b"key".to_vec()],
        false,
    )));
    let md = b.peer_metadata("a/journal;meta", 32);
    let value = md
        .get("authorization")
        .unwrap()
        .to_str()
        .unwrap()
        .to_owned();
    let gate = crate::auth::Gate::new(vec![b"key".to_vec()], false);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let claims = gate.claims(Some(value.as_bytes()), now).unwrap().unwrap();
    assert!(claims.allows(&JournalSpec {
        name: "a/journal".into(),
        ..JournalSpec::default()
    }));
}

#[tokio::test]
async fn a_forgotten_peer_is_dialed_afresh() {
    let (b, _) = bridge();
    let peer = "http://127.0.0.1:1";
    b.channels.get(peer).unwrap();
    b.channels.get("http://127.0.0.1:2").unwrap();
    assert!(lock(&b.channels.open).contains_key(peer));
    // Its connection went quiet: the next call dials a new one, the other peer's stays.
    b.forget_peer(peer);
    assert!(!lock(&b.channels.open).contains_key(peer));
    assert!(lock(&b.channels.open).contains_key("http://127.0.0.1:2"));
    b.channels.get(peer).unwrap();
    assert!(lock(&b.channels.open).contains_key(peer));
}

//! Replica rules that need no broker, after the Python
//! `broker/tests/server/test_replica.py`: flushes, held tails, shutdown, the set.

use std::sync::Mutex;
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::Notify;

use super::*;
use crate::protocol::Status;

const JOURNAL: &str = "a/journal";

/// Records what the replica hands over, as the Python tests' FakeHost does.
#[derive(Default)]
struct FakeHost {
    /// (begin, stored end, at once): a fragment is stored through its confirmed
    /// end, the rest quarantined (what the persister does).
    completed: Mutex<Vec<(i64, i64, bool)>>,
    /// Fragments handed over while held back: (begin, confirmed end, end).
    held: Mutex<Vec<(i64, i64, i64)>>,
    commits: Mutex<Vec<(i64, i64)>>,
    checkpoints: Mutex<Vec<i64>>,
    listings: Mutex<Vec<(i64, i64)>>,
    /// Whether a listing finds the asked range stored.
    stored_elsewhere: Mutex<bool>,
    completion: Notify,
    /// Listings asked for by head recoveries; while `hold_listings`, each waits
    /// for `listings_done` to turn true.
    refreshes: Mutex<usize>,
    hold_listings: Mutex<bool>,
    listings_done: tokio::sync::watch::Sender<bool>,
}

impl ReplicaHost for FakeHost {
    fn spool_commit(&self, _: &str, fragment: LocalFragment) {
        let f = &fragment.spec;
        self.commits.lock().unwrap().push((f.begin, f.end));
    }

    fn spool_complete(&self, _: &str, c: Completed, at_once: bool, held: bool) {
        if held {
            self.held
                .lock()
                .unwrap()
                .push((c.begin(), c.confirmed_end, c.end()));
        } else {
            let stored = if c.confirmed() {
                c.end()
            } else {
                c.begin().max(c.confirmed_end)
            };
            self.completed
                .lock()
                .unwrap()
                .push((c.begin(), stored, at_once));
        }
        self.completion.notify_one();
    }

    fn listing_covers(&self, _: &str, begin: i64, end: i64) -> BoxFuture<bool> {
        self.listings.lock().unwrap().push((begin, end));
        let covered = *self.stored_elsewhere.lock().unwrap();
        Box::pin(async move { covered })
    }

    fn checkpoint_head(&self, _: &str, offset: i64) -> BoxFuture<Result<(), String>> {
        self.checkpoints.lock().unwrap().push(offset);
        Box::pin(async { Ok(()) })
    }

    fn refresh_listing(&self, _: &str) -> BoxFuture<()> {
        *self.refreshes.lock().unwrap() += 1;
        let mut done = self.listings_done.subscribe();
        let held = *self.hold_listings.lock().unwrap();
        Box::pin(async move {
            if held {
                let _ = done.wait_for(|d| *d).await;
            }
        })
    }
}

impl FakeHost {
    fn completed(&self) -> Vec<(i64, i64, bool)> {
        self.completed.lock().unwrap().clone()
    }
    fn held(&self) -> Vec<(i64, i64, i64)> {
        self.held.lock().unwrap().clone()
    }
    async fn wait_completion(&self) {
        tokio::time::timeout(Duration::from_secs(5), self.completion.notified())
            .await
            .expect("a fragment is handed over");
    }
}

fn replica(host: &Arc<FakeHost>, primary: bool, dir: &std::path::Path) -> Arc<Replica> {
    let config = ReplicaConfig {
        spool: Arc::new(SpoolConfig {
            directory: Some(dir.to_owned()),
            ..SpoolConfig::default()
        }),
        doubt_delay: Duration::from_millis(50),
        ..ReplicaConfig::default()
    };
    Replica::new(JOURNAL, primary, 1, 7, host.clone(), &config)
}

/// Writes and commits `data`; with `confirm`, every member of the route did too.
async fn commit(sp: &AsyncSpool, data: &'static [u8], confirm: bool) {
    let content = ReplicateRequest {
        content: Bytes::from_static(data),
        ..ReplicateRequest::default()
    };
    sp.apply(&content, false).await.unwrap();
    let proposal = ReplicateRequest {
        proposal: Some(sp.next()),
        registers: Some(sp.registers()),
        ..ReplicateRequest::default()
    };
    let resp = sp.apply(&proposal, false).await.unwrap();
    assert_eq!(resp.status, Status::Ok as i32);
    if confirm {
        sp.confirm(sp.end()).await;
    }
}

#[tokio::test]
async fn a_flush_rolls_the_spool_once_it_is_free() {
    let dir = tempfile::tempdir().unwrap();
    let host = Arc::new(FakeHost::default());
    let rep = replica(&host, false, dir.path());
    let served = tokio::spawn(rep.clone().serve());

    let held = rep.hold_spool().await; // A Replicate stream holds the spool.
    commit(&held, b"hello", true).await;
    rep.request_flush();
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(host.completed(), vec![]); // Not while the stream holds it.
    rep.return_spool(held, false).await;
    host.wait_completion().await;
    assert_eq!(host.completed(), vec![(0, 5, true)]); // A flush stores at once.
    let held = rep.hold_spool().await;
    assert_eq!((held.begin(), held.end()), (5, 5)); // Rolled to empty at its end.
    assert_eq!(host.commits.lock().unwrap().clone(), vec![(0, 5)]);
    drop(held);
    rep.stop();
    served.await.unwrap();
}

#[tokio::test]
async fn a_broken_stream_stores_what_the_replica_committed_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let host = Arc::new(FakeHost::default());
    let rep = replica(&host, false, dir.path());
    let served = tokio::spawn(rep.clone().serve());

    let held = rep.hold_spool().await;
    commit(&held, b"acked", true).await;
    let pending = ReplicateRequest {
        content: Bytes::from_static(b"never committed"),
        ..ReplicateRequest::default()
    };
    held.apply(&pending, false).await.unwrap();
    rep.return_spool(held, true).await; // The primary died mid-append.
    host.wait_completion().await;
    // Only the committed content, at once.
    assert_eq!(host.completed(), vec![(0, 5, true)]);
    rep.stop();
    served.await.unwrap();
}

/// A broken stream leaves a fragment of 9 confirmed bytes and a 5-byte tail
/// nobody confirmed: the confirmed part is handed over, the tail held.
async fn broken_with_an_unconfirmed_tail(host: &FakeHost, rep: &Replica) {
    let held = rep.hold_spool().await;
    commit(&held, b"confirmed", true).await;
    commit(&held, b"+tail", false).await; // Did every member commit it? Unknown.
    rep.return_spool(held, true).await;
    host.wait_completion().await;
    assert_eq!(host.held(), vec![(0, 9, 14)]);
    assert_eq!(host.completed(), vec![]);
}

#[tokio::test]
async fn a_held_tail_is_stored_whole_once_the_route_goes_on_from_it() {
    let dir = tempfile::tempdir().unwrap();
    let host = Arc::new(FakeHost::default());
    let rep = replica(&host, false, dir.path());
    let served = tokio::spawn(rep.clone().serve());
    broken_with_an_unconfirmed_tail(&host, &rep).await;

    rep.settle_held(14, true); // The next primary took its head from us.
    assert_eq!(host.completed(), vec![(0, 14, true)]);
    rep.stop();
    served.await.unwrap();
    assert_eq!(host.completed().len(), 1); // Nothing handed over twice.
}

#[tokio::test]
async fn an_adopted_tail_is_recorded_as_confirmed_in_its_spool_file() {
    let dir = tempfile::tempdir().unwrap();
    let host = Arc::new(FakeHost::default());
    let config = ReplicaConfig {
        spool: Arc::new(SpoolConfig {
            directory: Some(dir.path().to_owned()),
            recoverable: true,
            ..SpoolConfig::default()
        }),
        doubt_delay: Duration::from_millis(50),
        ..ReplicaConfig::default()
    };
    let rep = Replica::new(JOURNAL, false, 1, 7, host.clone(), &config);
    let served = tokio::spawn(rep.clone().serve());
    broken_with_an_unconfirmed_tail(&host, &rep).await;
    rep.settle_held(14, true);

    // A crash now must find the whole fragment confirmed, or recovery would
    // quarantine the tail the journal went on from.
    let records = crate::spool::files::find_records(dir.path()).unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let confirmed: Vec<i64> = records
            .iter()
            .filter_map(|p| crate::spool::files::SpoolRecord::read(p).ok())
            .filter(|r| r.begin == 0)
            .map(|r| r.confirmed)
            .collect();
        if confirmed == vec![14] {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "confirmed ends recorded: {confirmed:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    rep.stop();
    served.await.unwrap();
}

#[tokio::test]
async fn a_held_tail_the_route_did_not_go_on_from_is_never_stored() {
    // A member cut off from its route: the route went on from another offset.
    let dir = tempfile::tempdir().unwrap();
    let host = Arc::new(FakeHost::default());
    let rep = replica(&host, false, dir.path());
    let served = tokio::spawn(rep.clone().serve());
    broken_with_an_unconfirmed_tail(&host, &rep).await;

    rep.settle_held(20, false);
    assert_eq!(host.completed(), vec![(0, 9, true)]);
    rep.stop();
    served.await.unwrap();
}

async fn decided_by_a_listing(stored_elsewhere: bool) -> Vec<(i64, i64, bool)> {
    // The primary rolled us to the end of our held tail on its own knowledge: from
    // another holder of the same bytes (nobody stored them: ours must be) or from
    // other content ending there (stored by its members: ours must not be).
    let dir = tempfile::tempdir().unwrap();
    let host = Arc::new(FakeHost::default());
    *host.stored_elsewhere.lock().unwrap() = stored_elsewhere;
    let rep = replica(&host, false, dir.path());
    let served = tokio::spawn(rep.clone().serve());
    broken_with_an_unconfirmed_tail(&host, &rep).await;

    rep.settle_held(14, false);
    assert_eq!(host.completed(), vec![]); // Not yet: a listing decides.
    host.wait_completion().await;
    assert_eq!(host.listings.lock().unwrap().clone(), vec![(9, 14)]);
    rep.stop();
    served.await.unwrap();
    host.completed()
}

#[tokio::test]
async fn a_held_tail_nobody_stored_is_stored_after_the_doubt_delay() {
    assert_eq!(decided_by_a_listing(false).await, vec![(0, 14, true)]);
}

#[tokio::test]
async fn a_held_tail_another_member_stored_is_not_stored_again() {
    assert_eq!(decided_by_a_listing(true).await, vec![(0, 9, true)]);
}

#[tokio::test]
async fn a_stopping_replica_releases_a_held_tail_still_in_doubt() {
    let dir = tempfile::tempdir().unwrap();
    let host = Arc::new(FakeHost::default());
    let config = ReplicaConfig {
        spool: Arc::new(SpoolConfig {
            directory: Some(dir.path().to_owned()),
            ..SpoolConfig::default()
        }),
        doubt_delay: Duration::from_secs(3600),
        ..ReplicaConfig::default()
    };
    let rep = Replica::new(JOURNAL, false, 1, 7, host.clone(), &config);
    let served = tokio::spawn(rep.clone().serve());
    broken_with_an_unconfirmed_tail(&host, &rep).await;
    rep.settle_held(14, false);
    rep.stop();
    tokio::time::timeout(Duration::from_secs(5), served)
        .await
        .expect("a doubt does not hold up shutdown")
        .unwrap();
    assert_eq!(host.completed(), vec![(0, 9, true)]); // Only what was confirmed.
    assert_eq!(host.listings.lock().unwrap().clone(), vec![]);
}

#[tokio::test]
async fn a_stopping_replica_releases_what_it_holds_back() {
    let dir = tempfile::tempdir().unwrap();
    let host = Arc::new(FakeHost::default());
    let rep = replica(&host, true, dir.path());
    let served = tokio::spawn(rep.clone().serve());
    let held = rep.hold_spool().await;
    commit(&held, b"confirmed", true).await;
    commit(&held, b"+tail", false).await; // Its acknowledgements never came.
    drop(held);
    rep.stop(); // Deposed: the journal is no longer ours.
    served.await.unwrap();
    // Rolled at its end on the way out (held), then released: only what was confirmed.
    assert_eq!(host.held(), vec![(0, 9, 14)]);
    assert_eq!(host.completed(), vec![(0, 9, true)]);
    // And the journal is to go on from the confirmed end, not past the tail.
    assert_eq!(host.checkpoints.lock().unwrap().clone(), vec![9]);
}

#[tokio::test]
async fn a_spool_rolled_forward_past_an_unconfirmed_tail_releases_it() {
    // The route went on from a later offset than ours: our tail is not the journal's.
    let dir = tempfile::tempdir().unwrap();
    let host = Arc::new(FakeHost::default());
    let rep = replica(&host, false, dir.path());
    let held = rep.hold_spool().await;
    commit(&held, b"confirmed", true).await;
    commit(&held, b"+tail", false).await;
    let forward = ReplicateRequest {
        proposal: Some(Fragment {
            journal: JOURNAL.into(),
            begin: 20,
            end: 20,
            ..Fragment::default()
        }),
        ..ReplicateRequest::default()
    };
    let resp = held.apply(&forward, false).await.unwrap();
    assert_eq!(resp.status, Status::Ok as i32);
    assert_eq!(host.held(), vec![]);
    assert_eq!(host.completed(), vec![(0, 9, false)]);
}

#[tokio::test]
async fn a_stopping_primary_records_its_head_and_a_replica_does_not() {
    for primary in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let host = Arc::new(FakeHost::default());
        let rep = replica(&host, primary, dir.path());
        let served = tokio::spawn(rep.clone().serve());
        let held = rep.hold_spool().await;
        commit(&held, b"hello", true).await;
        drop(held);
        rep.stop();
        served.await.unwrap();
        let expect = if primary { vec![5] } else { vec![] };
        assert_eq!(host.checkpoints.lock().unwrap().clone(), expect);
        // Stored after the replica delay either way, as in Python: the roll on the
        // way out is not the primary's append path.
        assert_eq!(host.completed(), vec![(0, 5, false)]);
        // A stopped replica gives its spool to nobody again.
        assert!(
            tokio::time::timeout(Duration::from_millis(20), rep.hold_spool())
                .await
                .is_err()
        );
    }
}

fn assignment(journal: &str, primary: bool, create_revision: i64, lease: i64) -> LocalAssignment {
    LocalAssignment {
        journal: journal.into(),
        primary,
        create_revision,
        lease,
        members: vec![process_spec::Id {
            zone: "a".into(),
            suffix: "one".into(),
        }],
    }
}

#[tokio::test]
async fn the_set_keeps_a_replica_until_its_assignment_changes_in_kind() {
    let host = Arc::new(FakeHost::default());
    let set = ReplicaSet::new(host.clone(), ReplicaConfig::default());
    set.update(vec![
        assignment("a/j", false, 1, 7),
        assignment("b/j", true, 1, 7),
    ]);
    let (a, b) = (set.get("a/j").unwrap(), set.get("b/j").unwrap());

    // Promoted in place; the route's members changed for b/j.
    let mut b_moved = assignment("b/j", true, 1, 7);
    b_moved.members.push(process_spec::Id {
        zone: "b".into(),
        suffix: "two".into(),
    });
    let changed = set.update(vec![assignment("a/j", true, 1, 7), b_moved]);
    assert_eq!(changed, vec!["b/j".to_string()]);
    assert!(Arc::ptr_eq(&a, &set.get("a/j").unwrap()) && a.is_primary());
    assert!(Arc::ptr_eq(&b, &set.get("b/j").unwrap()));

    // Demoted, re-created, re-leased: fresh replicas; the old ones stop.
    for next in [
        assignment("a/j", false, 1, 7),
        assignment("a/j", false, 2, 7),
        assignment("a/j", false, 2, 8),
    ] {
        let old = set.get("a/j").unwrap();
        set.update(vec![next]);
        assert!(old.is_stopping());
        assert!(!Arc::ptr_eq(&old, &set.get("a/j").unwrap()));
    }
    assert!(b.is_stopping() && set.get("b/j").is_none()); // No longer assigned.

    set.stop_all().await;
    assert!(set.get("a/j").is_none());
    set.update(vec![assignment("c/j", false, 1, 7)]);
    assert!(set.is_empty()); // None made once stopped.
}

#[tokio::test]
async fn the_set_runs_its_daemon_beside_each_replica_until_it_stops() {
    let host = Arc::new(FakeHost::default());
    let set = ReplicaSet::new(host.clone(), ReplicaConfig::default());
    set.update(vec![assignment("a/j", true, 1, 7)]);
    let ran = Arc::new(Mutex::new(Vec::new()));
    let seen = ran.clone();
    set.set_daemon(Arc::new(move |rep: Arc<Replica>| {
        let seen = seen.clone();
        Box::pin(async move {
            seen.lock().unwrap().push(rep.journal().to_owned());
            rep.stopped().await;
            seen.lock().unwrap().push(format!("{} done", rep.journal()));
        })
    }));
    // Replicas serving already get one, and so does each new replica.
    set.update(vec![
        assignment("a/j", true, 1, 7),
        assignment("b/j", false, 1, 7),
    ]);
    let started = async {
        while ran.lock().unwrap().len() < 2 {
            tokio::task::yield_now().await;
        }
    };
    tokio::time::timeout(Duration::from_secs(5), started)
        .await
        .expect("both daemons start");
    tokio::time::timeout(Duration::from_secs(5), set.stop_all())
        .await
        .expect("the set stops");
    let mut ran = ran.lock().unwrap().clone();
    ran.sort();
    assert_eq!(ran, ["a/j", "a/j done", "b/j", "b/j done"]);
}

/// A replica whose head gaps recover after `delay` (never, without `resume`).
fn gapped(host: &Arc<FakeHost>, delay: Duration, resume: bool) -> Arc<Replica> {
    let config = ReplicaConfig {
        recovery_delay: delay,
        resume_head_gaps: resume,
        ..ReplicaConfig::default()
    };
    Replica::new(JOURNAL, true, 1, 7, host.clone(), &config)
}

const DELAY: Duration = Duration::from_secs(20);

#[tokio::test(start_paused = true)]
async fn a_head_gap_recovers_after_its_delay_and_a_listing_that_still_shows_it() {
    let host = Arc::new(FakeHost::default());
    *host.hold_listings.lock().unwrap() = true;
    let rep = gapped(&host, DELAY, true);
    assert_eq!(rep.head_recovery_due(), None);
    let seen = tokio::time::Instant::now();
    assert!(!rep.head_recovery_ready(0, 100)); // Seen: the delay starts.
    assert_eq!(rep.head_recovery_due(), Some(seen + DELAY));
    tokio::time::advance(DELAY - Duration::from_secs(1)).await;
    assert!(!rep.head_recovery_ready(0, 100)); // Not yet.
    assert_eq!(*host.refreshes.lock().unwrap(), 0);

    tokio::time::advance(Duration::from_secs(1)).await;
    assert!(!rep.head_recovery_ready(0, 100)); // Due: a fresh listing first.
    assert_eq!(*host.refreshes.lock().unwrap(), 1);
    assert_eq!(rep.head_recovery_due(), None); // Its end wakes the pulse instead.
    assert!(!rep.head_recovery_ready(0, 100)); // One listing at a time.
    assert_eq!(*host.refreshes.lock().unwrap(), 1);

    host.listings_done.send_replace(true);
    tokio::time::timeout(Duration::from_secs(1), rep.head_gap_listed())
        .await
        .expect("the applied listing wakes the pulse");
    assert_eq!(rep.head_recovery_due(), Some(seen + DELAY)); // Past: pulse now.
    assert!(rep.head_recovery_ready(0, 100));
    // Taken: the next gap starts over.
    assert_eq!(rep.head_recovery_due(), None);
}

#[tokio::test(start_paused = true)]
async fn a_head_gap_that_moves_starts_its_delay_over() {
    let host = Arc::new(FakeHost::default());
    let rep = gapped(&host, DELAY, true);
    assert!(!rep.head_recovery_ready(0, 100));
    tokio::time::advance(DELAY).await;
    // The stores grew meanwhile: another gap, timed afresh.
    assert!(!rep.head_recovery_ready(0, 150));
    let now = tokio::time::Instant::now();
    assert_eq!(rep.head_recovery_due(), Some(now + DELAY));
    assert!(!rep.head_recovery_ready(0, 150));
    assert_eq!(*host.refreshes.lock().unwrap(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_listing_for_a_gap_since_closed_does_not_vouch_for_the_next() {
    let host = Arc::new(FakeHost::default());
    *host.hold_listings.lock().unwrap() = true;
    let rep = gapped(&host, DELAY, true);
    assert!(!rep.head_recovery_ready(0, 100));
    tokio::time::advance(DELAY).await;
    assert!(!rep.head_recovery_ready(0, 100)); // Its listing starts.
    rep.head_gap_closed(); // The spools reached the journal's end meanwhile.
    assert_eq!(rep.head_recovery_due(), None);
    assert!(!rep.head_recovery_ready(0, 100)); // The same gap again, seen anew.
    host.listings_done.send_replace(true); // The first listing ends now.
    for _ in 0..3 {
        tokio::task::yield_now().await;
    }
    tokio::time::advance(DELAY).await;
    // Its delay is over, but a listing of its own must still show it.
    assert!(!rep.head_recovery_ready(0, 100));
    assert_eq!(*host.refreshes.lock().unwrap(), 2);
}

#[tokio::test(start_paused = true)]
async fn a_closed_head_gap_is_forgotten() {
    let host = Arc::new(FakeHost::default());
    let rep = gapped(&host, DELAY, true);
    assert!(!rep.head_recovery_ready(0, 100));
    rep.head_gap_closed();
    assert_eq!(rep.head_recovery_due(), None);
    tokio::time::advance(DELAY).await;
    assert!(!rep.head_recovery_ready(0, 100)); // Seen anew, so timed anew.
    assert_eq!(*host.refreshes.lock().unwrap(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_refused_head_gap_stays_refused_and_another_gap_is_not() {
    let host = Arc::new(FakeHost::default());
    let rep = gapped(&host, Duration::ZERO, true);
    rep.refuse_head_gap(0, 100, "its fence can't be read");
    for _ in 0..3 {
        assert!(!rep.head_recovery_ready(0, 100));
        assert_eq!(rep.head_recovery_due(), None);
    }
    assert!(!rep.head_recovery_ready(0, 150)); // Another gap is timed.
    assert!(rep.head_recovery_due().is_some());
}

#[tokio::test(start_paused = true)]
async fn without_resume_head_gaps_every_gap_is_refused() {
    let host = Arc::new(FakeHost::default());
    let rep = gapped(&host, DELAY, false);
    for _ in 0..3 {
        assert!(!rep.head_recovery_ready(0, 100));
        assert_eq!(rep.head_recovery_due(), None);
        tokio::time::advance(DELAY).await;
    }
    assert_eq!(*host.refreshes.lock().unwrap(), 0);
}

//! Queries, spool commits, listings and wake-ups, after the Python
//! `test_fragment_index.py`.

use std::sync::Mutex;

use super::*;
use crate::protocol::CompressionCodec;

const JOURNAL: &str = "a/journal";
const NOW: f64 = 1_700_000_000.0;
const STORE: &str = "file:///store/";
const PROMPTLY: Duration = Duration::from_secs(5);

fn local(begin: i64, end: i64) -> LocalFragment {
    LocalFragment {
        spec: Fragment {
            journal: JOURNAL.into(),
            begin,
            end,
            compression_codec: CompressionCodec::None as i32,
            ..Fragment::default()
        },
        file: Some(Arc::new(SpoolFile::create(None).unwrap())),
    }
}

fn stored(begin: i64, end: i64, mod_time: i64) -> Fragment {
    Fragment {
        journal: JOURNAL.into(),
        begin,
        end,
        compression_codec: CompressionCodec::Gzip as i32,
        backing_store: STORE.into(),
        mod_time,
        ..Fragment::default()
    }
}

/// Signs URLs as `signed:<begin>-<end>:<ttl>`; records the holes it is told of and
/// answers whether it asked for a listing.
#[derive(Default)]
struct Hooks {
    holes: Mutex<Vec<i64>>,
    lists: bool,
}

impl QueryHooks for Hooks {
    fn fragment_url(&self, f: &Fragment, ttl: Duration) -> BoxFuture<Result<String, String>> {
        let url = format!("signed:{}-{}:{}", f.begin, f.end, ttl.as_secs());
        Box::pin(async move { Ok(url) })
    }
    fn on_hole(&self, hole_end: i64) -> bool {
        self.holes.lock().unwrap().push(hole_end);
        self.lists
    }
}

fn new_index() -> Arc<FragmentIndex> {
    Arc::new(FragmentIndex::with_clock(
        JOURNAL,
        Arc::new(|| NOW),
        HOLE_LISTING_WAIT,
    ))
}

fn read(offset: i64) -> ReadRequest {
    ReadRequest {
        journal: JOURNAL.into(),
        offset,
        ..ReadRequest::default()
    }
}

fn blocking(offset: i64) -> ReadRequest {
    ReadRequest {
        block: true,
        ..read(offset)
    }
}

async fn query(ix: &FragmentIndex, req: ReadRequest) -> Answer {
    ix.query(&req, &Hooks::default()).await.unwrap()
}

/// (status, offset, write head) of an answer.
fn head(resp: &ReadResponse) -> (i32, i64, i64) {
    (resp.status, resp.offset, resp.write_head)
}

const OK: i32 = Status::Ok as i32;
const NOT_YET: i32 = Status::OffsetNotYetAvailable as i32;

/// Spawns a blocking query; it must still be waiting shortly after.
async fn blocked(ix: &Arc<FragmentIndex>, req: ReadRequest) -> tokio::task::JoinHandle<Answer> {
    let ix = ix.clone();
    let task = tokio::spawn(async move { ix.query(&req, &Hooks::default()).await.unwrap() });
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert!(!task.is_finished(), "the query waits");
    task
}

#[tokio::test]
async fn an_empty_index_has_nothing_yet() {
    let ix = new_index();
    let (resp, file) = query(&ix, read(-1)).await;
    assert_eq!(head(&resp), (NOT_YET, 0, 0));
    assert!(file.is_none() && resp.fragment.is_none());
    assert_eq!(ix.summary(), (0, 0, 0));
}

#[tokio::test]
async fn local_fragments_are_served_with_their_file() {
    let ix = new_index();
    let (a, b) = (local(0, 100), local(100, 200));
    ix.spool_commit(a);
    ix.spool_commit(b.clone());
    let (resp, file) = query(&ix, read(150)).await;
    assert_eq!(head(&resp), (OK, 150, 200));
    let frag = resp.fragment.unwrap();
    assert_eq!((frag.begin, frag.end), (100, 200));
    assert!(Arc::ptr_eq(&file.unwrap(), b.file.as_ref().unwrap()));
    assert_eq!(resp.fragment_url, "");
    // -1 reads at the write head, which is not available yet.
    let (resp, file) = query(&ix, read(-1)).await;
    assert_eq!(head(&resp), (NOT_YET, 200, 200));
    assert!(file.is_none());
    assert_eq!(ix.summary(), (0, 200, 0));
}

#[tokio::test]
async fn stored_fragments_carry_a_signed_url() {
    let ix = new_index();
    ix.replace_stored(vec![stored(0, 100, NOW as i64 - 10)])
        .unwrap();
    let (resp, file) = query(&ix, read(10)).await;
    assert_eq!(resp.status, OK);
    assert!(file.is_none());
    assert_eq!(resp.fragment.unwrap().backing_store, STORE);
    assert_eq!(resp.fragment_url, "signed:0-100:60");
    assert_eq!(ix.summary(), (0, 100, NOW as i64 - 10));

    // A URL that cannot be signed fails the query with the signer's words.
    struct Refuses;
    impl QueryHooks for Refuses {
        fn fragment_url(&self, _: &Fragment, _: Duration) -> BoxFuture<Result<String, String>> {
            Box::pin(async { Err("no such store".into()) })
        }
        fn on_hole(&self, _: i64) -> bool {
            false
        }
    }
    let err = ix.query(&read(10), &Refuses).await.unwrap_err();
    assert_eq!(err, QueryError::Sign("no such store".into()));
}

#[tokio::test]
async fn a_read_before_the_first_stored_fragment_jumps_forward() {
    let ix = new_index();
    ix.replace_stored(vec![stored(100, 200, NOW as i64)])
        .unwrap();
    let (resp, _) = query(&ix, read(0)).await;
    assert_eq!((resp.status, resp.offset), (OK, 100));
}

#[tokio::test]
async fn holes_are_jumped_only_when_the_next_fragment_is_old() {
    let old = (NOW - OFFSET_JUMP_AGE_THRESHOLD) as i64 - 1;
    let young = (NOW - OFFSET_JUMP_AGE_THRESHOLD) as i64 + 1;
    let ix = new_index();
    ix.replace_stored(vec![stored(0, 100, old), stored(200, 300, young)])
        .unwrap();
    let (resp, _) = query(&ix, read(150)).await;
    assert_eq!(head(&resp), (NOT_YET, 150, 300));

    ix.replace_stored(vec![stored(0, 100, old), stored(200, 300, old)])
        .unwrap();
    let (resp, _) = query(&ix, read(150)).await;
    assert_eq!((resp.status, resp.offset), (OK, 200));

    // A hole before a local (not yet stored) fragment is never jumped.
    let ix = new_index();
    ix.replace_stored(vec![stored(0, 100, old)]).unwrap();
    ix.spool_commit(local(200, 300));
    let (resp, _) = query(&ix, read(150)).await;
    assert_eq!(resp.status, NOT_YET);
}

#[tokio::test]
async fn a_range_skipped_for_good_is_jumped_once_listed() {
    // The journal resumed at its fence, 200, past its stored fragments (ending at
    // 100): nothing will ever be stored in between.
    let young = NOW as i64;
    let ix = new_index();
    ix.replace_stored(vec![stored(0, 100, young)]).unwrap();
    ix.spool_commit(local(200, 300));
    let waiting = blocked(&ix, blocking(150)).await;
    ix.mark_skipped(&[(100, 200)]);
    // Not before a listing made since: a broker may have stored there late.
    let (resp, _) = query(&ix, read(150)).await;
    assert_eq!(resp.status, NOT_YET);
    ix.replace_stored(vec![stored(0, 100, young)]).unwrap();
    let (resp, _) = tokio::time::timeout(PROMPTLY, waiting)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((resp.status, resp.offset), (OK, 200));
    // A recovered fragment inside the range is still served, and jumped to.
    ix.replace_stored(vec![stored(0, 100, young), stored(120, 150, young)])
        .unwrap();
    let (resp, _) = query(&ix, read(100)).await;
    assert_eq!((resp.status, resp.offset), (OK, 120));
    // Any other hole still waits.
    ix.replace_stored(vec![stored(0, 50, young), stored(60, 100, young)])
        .unwrap();
    let (resp, _) = query(&ix, read(55)).await;
    assert_eq!(resp.status, NOT_YET);
}

#[tokio::test]
async fn begin_mod_time_skips_older_fragments() {
    let ix = new_index();
    let listing = vec![
        stored(0, 100, 10),
        stored(100, 200, 20),
        stored(200, 300, 30),
    ];
    ix.replace_stored(listing).unwrap();
    let req = |begin_mod_time| ReadRequest {
        begin_mod_time,
        ..read(0)
    };
    let (resp, _) = query(&ix, req(25)).await;
    assert_eq!((resp.status, resp.offset), (OK, 200));
    assert_eq!(resp.fragment.unwrap().begin, 200);
    let (resp, _) = query(&ix, req(31)).await;
    assert_eq!((resp.status, resp.offset), (NOT_YET, 300));
}

#[tokio::test]
async fn a_blocking_query_wakes_on_the_commit_it_waits_for() {
    let ix = new_index();
    ix.spool_commit(local(0, 10));
    let waiting = blocked(&ix, blocking(-1)).await;
    // A change that does not reach its offset wakes it, and it waits again.
    ix.spool_commit(local(0, 10));
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert!(!waiting.is_finished());
    let next = local(10, 20);
    ix.spool_commit(next.clone());
    let (resp, file) = tokio::time::timeout(PROMPTLY, waiting)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((resp.status, resp.offset), (OK, 10));
    assert!(Arc::ptr_eq(&file.unwrap(), next.file.as_ref().unwrap()));
}

#[tokio::test]
async fn a_blocking_query_wakes_on_a_listing_and_fails_on_close() {
    let ix = new_index();
    let waiting = blocked(&ix, blocking(50)).await;
    ix.replace_stored(vec![stored(0, 100, NOW as i64)]).unwrap();
    let (resp, _) = tokio::time::timeout(PROMPTLY, waiting)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((resp.status, resp.offset), (OK, 50));

    let ix2 = ix.clone();
    let waiting = tokio::spawn(async move { ix2.query(&blocking(100), &Hooks::default()).await });
    tokio::time::sleep(Duration::from_millis(20)).await;
    ix.close();
    let got = tokio::time::timeout(PROMPTLY, waiting).await.unwrap();
    assert_eq!(got.unwrap().unwrap_err(), QueryError::Closed);
    // Later blocking queries fail at once; others are still answered.
    let got = ix.query(&blocking(100), &Hooks::default()).await;
    assert_eq!(got.unwrap_err(), QueryError::Closed);
    assert_eq!(query(&ix, read(10)).await.0.status, OK);
}

#[tokio::test]
async fn listings_drop_the_local_fragments_they_cover() {
    let ix = new_index();
    assert!(!ix.first_refresh_done());
    for f in [local(0, 100), local(100, 200), local(200, 300)] {
        ix.spool_commit(f);
    }
    // The listing holds [0, 200) as one fragment, and one after our spool.
    let now = NOW as i64;
    ix.replace_stored(vec![stored(0, 200, now), stored(300, 400, now)])
        .unwrap();
    assert!(ix.first_refresh_done());
    tokio::time::timeout(PROMPTLY, ix.wait_first_refresh())
        .await
        .unwrap();
    let shape = |ix: &FragmentIndex| -> Vec<(i64, i64, bool)> {
        let all = ix.fragments();
        all.iter()
            .map(|f| (f.spec.begin, f.spec.end, f.file.is_some()))
            .collect()
    };
    assert_eq!(
        shape(&ix),
        [(0, 200, false), (200, 300, true), (300, 400, false)]
    );
    // What the listing itself holds, local spools aside.
    assert!(ix.stored_covers(0, 200) && !ix.stored_covers(150, 301));
    // A later listing that covers the rest drops the last local too.
    ix.replace_stored(vec![stored(0, 200, 1), stored(200, 400, 2)])
        .unwrap();
    assert_eq!(shape(&ix), [(0, 200, false), (200, 400, false)]);
    assert!(ix.stored_covers(150, 301));
    // ... and one that lost fragments (removed from the store) forgets them.
    ix.replace_stored(vec![stored(200, 400, 2)]).unwrap();
    assert_eq!(shape(&ix), [(200, 400, false)]);
    // Another journal's fragment is refused, and changes nothing.
    let mut other = stored(400, 500, 3);
    other.journal = "other/journal".into();
    assert!(ix.replace_stored(vec![other]).is_err());
    assert_eq!(shape(&ix), [(200, 400, false)]);
}

#[tokio::test]
async fn a_hole_below_the_head_asks_for_a_listing_which_the_read_waits_for() {
    // A broker new to the journal's replicas: its spool starts at the head, and
    // what came before is in the store, which it has not listed since.
    let ix = new_index();
    ix.replace_stored(vec![]).unwrap();
    ix.spool_commit(local(100, 150));
    let hooks = Arc::new(Hooks {
        lists: true,
        ..Hooks::default()
    });
    let (ix2, hooks2) = (ix.clone(), hooks.clone());
    let waiting = tokio::spawn(async move { ix2.query(&read(0), &*hooks2).await.unwrap() });
    tokio::time::sleep(Duration::from_millis(50)).await;
    // Not blocking, yet it waits: for the listing it asked for.
    assert!(!waiting.is_finished());
    assert_eq!(*hooks.holes.lock().unwrap(), [100]); // Where the hole ends.
    ix.replace_stored(vec![stored(0, 100, NOW as i64)]).unwrap();
    let (resp, _) = tokio::time::timeout(PROMPTLY, waiting)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((resp.status, resp.offset), (OK, 0));
    assert_eq!(resp.fragment.unwrap().end, 100);
    // A read at the head (no fragment past it) asks for nothing.
    let (resp, _) = ix.query(&read(150), &*hooks).await.unwrap();
    assert_eq!(resp.status, NOT_YET);
    assert_eq!(*hooks.holes.lock().unwrap(), [100]);
}

#[tokio::test]
async fn a_hole_read_answers_when_no_listing_comes() {
    let ix = FragmentIndex::with_clock(JOURNAL, Arc::new(|| NOW), Duration::from_millis(200));
    ix.spool_commit(local(100, 150));
    let hooks = Hooks {
        lists: true,
        ..Hooks::default()
    };
    let started = tokio::time::Instant::now();
    let (resp, _) = ix.query(&read(10), &hooks).await.unwrap();
    assert_eq!(resp.status, NOT_YET);
    assert_eq!(*hooks.holes.lock().unwrap(), [100, 100]);
    assert!(started.elapsed() >= Duration::from_millis(200));

    // An owner that asked for no listing (it backs off) is answered at once.
    let started = tokio::time::Instant::now();
    let (resp, _) = ix.query(&read(10), &Hooks::default()).await.unwrap();
    assert_eq!(resp.status, NOT_YET);
    assert!(started.elapsed() < Duration::from_millis(200));
}

#[tokio::test]
async fn commits_through_the_spool_observer_reach_the_index() {
    use crate::spool::{NullObserver, SpoolConfig};
    let ix = new_index();
    let observer = Arc::new(Indexing {
        index: ix.clone(),
        inner: Arc::new(NullObserver),
    });
    let spool = Spool::new(JOURNAL, observer, Arc::new(SpoolConfig::default()));
    let spool = crate::disk::AsyncSpool::new(spool);
    let waiting = blocked(&ix, blocking(0)).await;
    let content = crate::protocol::ReplicateRequest {
        content: bytes::Bytes::from_static(b"hello"),
        ..Default::default()
    };
    spool.must_apply(&content).await;
    let commit = crate::protocol::ReplicateRequest {
        proposal: Some(spool.next()),
        registers: Some(spool.registers()),
        ..Default::default()
    };
    spool.must_apply(&commit).await;
    let (resp, file) = tokio::time::timeout(PROMPTLY, waiting)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(head(&resp), (OK, 0, 5));
    assert_eq!(file.unwrap().pread(5, 0).unwrap(), b"hello");
}

//! The read host of a running broker, with Python played by the test: stored
//! reads under credit, signed URLs, hole listings with back-off, reachability,
//! and a whole Read served from an index over a stored fragment and a spool.

use std::sync::atomic::AtomicUsize;

use futures_util::StreamExt;

use super::*;
use crate::auth::SharedGate;
use crate::index::FragmentIndex;
use crate::protocol::{journal_spec, ReadRequest, ReadResponse, Route, Status};
use crate::registry::{Journal, Update};

const JOURNAL: &str = "a/journal";
const PROMPTLY: Duration = Duration::from_secs(5);

fn bridge() -> (Arc<Bridge>, Arc<AtomicUsize>) {
    let wakes = Arc::new(AtomicUsize::new(0));
    let counted = wakes.clone();
    let b = Bridge::new(
        BridgeConfig::default(),
        SharedGate::default(),
        Box::new(move || {
            counted.fetch_add(1, Ordering::SeqCst);
        }),
    );
    (Arc::new(b), wakes)
}

fn stored(begin: i64, end: i64) -> Fragment {
    Fragment {
        journal: JOURNAL.into(),
        begin,
        end,
        backing_store: "s3://bucket/".into(),
        mod_time: 1_700_000_000,
        ..Fragment::default()
    }
}

/// The one stored read Python was asked for: (id, offset, credit).
fn asked_to_read(b: &Bridge) -> (u64, i64, u32) {
    let events = b.drain();
    match &events[..] {
        [Event::ReadStored {
            id,
            fragment,
            offset,
            credit,
        }] => {
            assert_eq!((fragment.begin, fragment.end), (0, 100));
            (*id, *offset, *credit)
        }
        _ => panic!("{events:?}"),
    }
}

fn credits(events: &[Event]) -> Vec<u64> {
    events
        .iter()
        .map(|e| match e {
            Event::ReadCredit { id } => *id,
            _ => panic!("{e:?}"),
        })
        .collect()
}

#[tokio::test]
async fn stored_chunks_flow_under_credit_to_their_end() {
    let (b, wakes) = bridge();
    let mut chunks = b.read_stored(&stored(0, 100), 40);
    assert_eq!(wakes.load(Ordering::SeqCst), 1, "Python is woken at once");
    let (id, offset, credit) = asked_to_read(&b);
    assert_eq!((offset, credit), (40, STORED_READ_CREDIT));

    assert!(b.stored_chunk(id, Bytes::from_static(b"abc")));
    assert!(b.stored_chunk(id, Bytes::from_static(b"def")));
    assert!(
        b.drain().is_empty(),
        "no credit before the read takes a chunk"
    );
    assert_eq!(chunks.next().await, Some(Ok(Bytes::from_static(b"abc"))));
    assert_eq!(credits(&b.drain()), [id]);
    assert_eq!(chunks.next().await, Some(Ok(Bytes::from_static(b"def"))));
    assert_eq!(credits(&b.drain()), [id]);

    b.stored_end(id, None);
    assert_eq!(chunks.next().await, None);
    assert_eq!(chunks.next().await, None);
    drop(chunks);
    assert!(b.drain().is_empty(), "an ended read cancels nothing");
    assert!(!b.stored_chunk(id, Bytes::from_static(b"late")));
}

#[tokio::test]
async fn a_store_failure_ends_the_stored_read_with_its_words() {
    let (b, _) = bridge();
    let mut chunks = b.read_stored(&stored(0, 100), 0);
    let (id, _, _) = asked_to_read(&b);
    assert!(b.stored_chunk(id, Bytes::from_static(b"abc")));
    b.stored_end(id, Some("unexpected EOF reading fragment".into()));
    assert_eq!(chunks.next().await, Some(Ok(Bytes::from_static(b"abc"))));
    assert_eq!(
        chunks.next().await,
        Some(Err("unexpected EOF reading fragment".into()))
    );
    assert_eq!(chunks.next().await, None);
}

#[tokio::test]
async fn a_read_that_leaves_early_tells_python_to_stop() {
    let (b, _) = bridge();
    let mut chunks = b.read_stored(&stored(0, 100), 0);
    let (id, _, _) = asked_to_read(&b);
    assert!(b.stored_chunk(id, Bytes::from_static(b"abc")));
    assert!(chunks.next().await.is_some());
    b.drain();
    drop(chunks);
    let events = b.drain();
    assert!(
        matches!(&events[..], [Event::ReadCancel { id: gone }] if *gone == id),
        "{events:?}"
    );
    assert!(!b.stored_chunk(id, Bytes::from_static(b"more")), "stop");
}

#[tokio::test]
async fn a_stopping_broker_fails_stored_reads() {
    let (b, _) = bridge();
    let mut under_way = b.read_stored(&stored(0, 100), 0);
    b.close();
    assert_eq!(
        under_way.next().await,
        Some(Err("the broker is stopping".into()))
    );
    let mut later = b.read_stored(&stored(0, 100), 0);
    assert_eq!(
        later.next().await,
        Some(Err("the broker is stopping".into()))
    );
    assert_eq!(later.next().await, None);
}

fn host(b: &Arc<Bridge>, refresh_interval: Option<u64>) -> BridgeReads {
    let registry = Arc::new(Registry::new());
    if let Some(seconds) = refresh_interval {
        let spec = crate::protocol::JournalSpec {
            name: JOURNAL.into(),
            replication: 1,
            fragment: Some(journal_spec::Fragment {
                refresh_interval: Some(prost_types::Duration {
                    seconds: seconds as i64,
                    nanos: 0,
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        registry.publish(Update {
            etcd: Default::default(),
            local_id: None,
            members: None,
            journals: vec![(
                JOURNAL.into(),
                Journal {
                    spec: Arc::new(spec),
                    route: Route::default(),
                    consistent: true,
                },
            )],
            removed: vec![],
        });
    }
    BridgeReads {
        bridge: b.clone(),
        registry,
    }
}

#[tokio::test]
async fn urls_are_signed_by_python() {
    let (b, _) = bridge();
    let reads = host(&b, None);
    let signing = reads.fragment_url(&stored(0, 100), Duration::from_secs(60));
    let events = b.drain();
    let [Event::Ask { id, ask }] = &events[..] else {
        panic!("{events:?}")
    };
    assert_eq!(
        ask,
        &Ask::SignUrl {
            journal: JOURNAL.into(),
            fragment: Box::new(stored(0, 100)),
            ttl: Duration::from_secs(60),
        }
    );
    b.answer_text(*id, Ok("https://signed".into()));
    assert_eq!(signing.await, Ok("https://signed".into()));

    let refused = reads.fragment_url(&stored(0, 100), Duration::from_secs(60));
    let events = b.drain();
    let [Event::Ask { id, .. }] = &events[..] else {
        panic!("{events:?}")
    };
    b.answer(*id, Err("no credentials".into()));
    assert_eq!(refused.await, Err("no credentials".into()));
}

fn listings(b: &Bridge) -> usize {
    b.drain()
        .iter()
        .filter(|e| matches!(e, Event::ListNow { journal } if journal == JOURNAL))
        .count()
}

#[tokio::test(start_paused = true)]
async fn reads_of_a_hole_list_the_stores_with_back_off_up_to_the_refresh_interval() {
    let (b, _) = bridge();
    let reads = host(&b, Some(2));
    assert!(reads.on_hole(JOURNAL, 100));
    assert_eq!(listings(&b), 1);
    assert!(!reads.on_hole(JOURNAL, 100), "backing off");
    assert_eq!(listings(&b), 0);
    // The back-off doubles (0.5 s, 1 s, 2 s) up to the refresh interval (2 s).
    for backoff in [500, 1000, 2000, 2000] {
        tokio::time::advance(Duration::from_millis(backoff - 1)).await;
        assert!(!reads.on_hole(JOURNAL, 100));
        tokio::time::advance(Duration::from_millis(1)).await;
        assert!(reads.on_hole(JOURNAL, 100), "after {backoff} ms");
        assert_eq!(listings(&b), 1);
    }
    // Another hole lists at once, and starts over.
    assert!(reads.on_hole(JOURNAL, 300));
    tokio::time::advance(HOLE_LISTING_BACKOFF).await;
    assert!(reads.on_hole(JOURNAL, 300));
    // A journal no longer served here starts over too.
    b.replica_gone(JOURNAL);
    assert!(reads.on_hole(JOURNAL, 300));
    // Without a spec, the ceiling is the default refresh interval.
    let unspecified = host(&b, None);
    assert!(unspecified.on_hole("other/journal", 1));
    assert_eq!(
        lock(&b.holes)["other/journal"].backoff,
        HOLE_LISTING_BACKOFF
    );
}

#[test]
fn reachability_is_what_python_published() {
    let (b, _) = bridge();
    let reads = host(&b, None);
    assert_eq!(reads.check_reachable(), Ok(()));
    b.set_lease(None, Some("no peer answers".into()));
    assert_eq!(
        reads.check_reachable(),
        Err(
            "this broker is cut off from the others (no peer answers); retry through another \
             broker"
                .into()
        )
    );
    b.set_lease(None, None);
    assert_eq!(reads.check_reachable(), Ok(()));
}

/// What the test's Python has: the content of its one stored fragment, and that
/// fragment to publish into `index` when the plane asks for a listing.
struct Python {
    content: Bytes,
    chunk: usize,
    index: Arc<FragmentIndex>,
    listing: Fragment,
    /// Chunks the plane refused (a read taking more than its credit would).
    refused: AtomicUsize,
}

/// Plays Python: signs URLs, lists the stores when asked, and streams `content`
/// (the stored fragment's, from its begin) in chunks of `chunk` bytes, never past
/// a read's credit.
async fn play_python(b: Arc<Bridge>, py: Arc<Python>) {
    let (content, chunk) = (py.content.clone(), py.chunk);
    struct Reading {
        at: usize,
        credit: u32,
    }
    let mut reading: HashMap<u64, Reading> = HashMap::new();
    loop {
        for event in b.drain() {
            match event {
                Event::Ask {
                    id,
                    ask: Ask::SignUrl { fragment, ttl, .. },
                } => b.answer_text(
                    id,
                    Ok(format!(
                        "signed:{}-{}:{}",
                        fragment.begin,
                        fragment.end,
                        ttl.as_secs()
                    )),
                ),
                Event::ReadStored {
                    id,
                    fragment,
                    offset,
                    credit,
                } => {
                    let at = (offset - fragment.begin) as usize;
                    reading.insert(id, Reading { at, credit });
                }
                Event::ReadCredit { id } => {
                    if let Some(r) = reading.get_mut(&id) {
                        r.credit += 1;
                    }
                }
                Event::ReadCancel { id } => drop(reading.remove(&id)),
                Event::ListNow { journal } => {
                    assert_eq!(journal, JOURNAL);
                    py.index.replace_stored(vec![py.listing.clone()]).unwrap();
                }
                other => panic!("{other:?}"),
            }
        }
        let mut done = Vec::new();
        for (id, r) in &mut reading {
            while r.credit > 0 && r.at < content.len() {
                let next = content.slice(r.at..content.len().min(r.at + chunk));
                r.at += next.len();
                r.credit -= 1;
                if !b.stored_chunk(*id, next) {
                    py.refused.fetch_add(1, Ordering::SeqCst);
                }
            }
            if r.at == content.len() {
                b.stored_end(*id, None);
                done.push(*id);
            }
        }
        for id in done {
            reading.remove(&id);
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// Serves `req` from `index` through the bridge, Python played by `py`; every
/// response, once the read ended.
async fn serve(b: &Arc<Bridge>, py: &Arc<Python>, req: ReadRequest) -> Vec<ReadResponse> {
    let reads: Arc<dyn ReadHost> = Arc::new(host(b, None));
    let python = tokio::spawn(play_python(b.clone(), py.clone()));
    let index = py.index.clone();
    let (tx, mut rx) = tokio::sync::mpsc::channel(2);
    let serving = tokio::spawn(async move {
        crate::read::serve_local(&reads, &index, Default::default(), req, &tx).await
    });
    let mut got: Vec<ReadResponse> = Vec::new();
    while let Some(resp) = tokio::time::timeout(PROMPTLY, rx.recv()).await.unwrap() {
        got.push(resp.unwrap());
    }
    serving.await.unwrap().unwrap();
    python.abort();
    assert_eq!(py.refused.load(Ordering::SeqCst), 0);
    got
}

fn python(end: i64) -> Arc<Python> {
    Arc::new(Python {
        content: (0..end as u32).map(|i| (i % 251) as u8).collect(),
        chunk: 300_000,
        index: Arc::new(FragmentIndex::new(JOURNAL)),
        listing: stored(0, end),
        refused: AtomicUsize::new(0),
    })
}

#[tokio::test]
async fn a_read_is_served_from_python_stores_through_the_bridge() {
    let (b, _) = bridge();
    let py = python(700_000);
    let content = py.content.clone();
    py.index.replace_stored(vec![stored(0, 700_000)]).unwrap();
    let req = ReadRequest {
        journal: JOURNAL.into(),
        offset: 100,
        ..ReadRequest::default()
    };
    let got = serve(&b, &py, req).await;

    let meta = &got[0];
    assert_eq!((meta.status, meta.offset), (Status::Ok as i32, 100));
    assert_eq!(meta.fragment_url, "signed:0-700000:60");
    let data: Vec<u8> = got[1..got.len() - 1]
        .iter()
        .flat_map(|r| r.content.to_vec())
        .collect();
    assert_eq!(data, &content[100..]);
    // Python's chunks are cut to the response size.
    assert!(got[1..got.len() - 1]
        .iter()
        .all(|r| r.content.len() <= crate::read::READ_CHUNK_SIZE));
    let last = got.last().unwrap();
    assert_eq!(
        (last.status, last.offset),
        (Status::OffsetNotYetAvailable as i32, 700_000)
    );
    assert!(lock(&b.stored).is_empty(), "nothing left registered");
}

#[tokio::test]
async fn a_read_of_a_hole_has_python_list_the_stores_and_reads_on() {
    let (b, _) = bridge();
    let py = python(1000);
    // The spool holds [1000, 1010): what came before is stored, unlisted yet.
    let spooled = crate::spool::LocalFragment {
        spec: Fragment {
            journal: JOURNAL.into(),
            begin: 1000,
            end: 1010,
            ..Fragment::default()
        },
        file: Some(Arc::new(
            crate::spool::files::SpoolFile::create(None).unwrap(),
        )),
    };
    py.index.spool_commit(spooled);
    let req = ReadRequest {
        journal: JOURNAL.into(),
        offset: 10,
        end_offset: 1000,
        ..ReadRequest::default()
    };
    let got = serve(&b, &py, req).await;
    assert_eq!(got[0].status, Status::Ok as i32);
    assert_eq!(got[0].fragment_url, "signed:0-1000:60");
    let data: Vec<u8> = got[1..].iter().flat_map(|r| r.content.to_vec()).collect();
    assert_eq!(data, &py.content[10..]);
    assert_eq!(
        lock(&b.holes)[JOURNAL].end,
        1000,
        "the hole's listing backs off"
    );
}

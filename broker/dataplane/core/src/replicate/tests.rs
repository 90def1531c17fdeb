//! The replica end of Replicate on a loopback tonic server, driven by the Rust
//! primary's pipeline ([`crate::pipeline`]) or by a raw client for the edges.
//! After the Python broker's replicate tests (`test_broker_statuses.py`'s wrong
//! route, `test_replica.py`'s broken streams) and the chaos suite's adoption rule.

use std::sync::Mutex;
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::mpsc;
use tokio_stream::wrappers::{ReceiverStream, TcpListenerStream};
use tonic::transport::Endpoint;
use tonic::Code;

use super::*;
use crate::disk::AsyncSpool;
use crate::pipeline::{Dial, Pipeline, REPLICATION_TIMEOUT};
use crate::protocol::journal_client::JournalClient;
use crate::protocol::journal_server::JournalServer;
use crate::protocol::{
    header, process_spec, CompressionCodec, Header, JournalSpec, LabelSet, ReplicateRequest,
};
use crate::registry::{Journal, Update};
use crate::replica::{
    BoxFuture, Completed, LocalAssignment, ReplicaConfig, ReplicaHost, ReplicaSet,
};
use crate::service::NativeJournal;
use crate::spool::{LocalFragment, NullObserver, Spool, SpoolConfig};

pub(crate) const JOURNAL: &str = "a/journal";
const PROMPTLY: Duration = Duration::from_secs(10);

pub(crate) fn id(zone: &str, suffix: &str) -> process_spec::Id {
    process_spec::Id {
        zone: zone.into(),
        suffix: suffix.into(),
    }
}

pub(crate) fn primary() -> process_spec::Id {
    id("a", "primary")
}

pub(crate) fn local() -> process_spec::Id {
    id("b", "replica")
}

pub(crate) fn etcd(revision: i64) -> header::Etcd {
    header::Etcd {
        cluster_id: 1,
        member_id: 2,
        revision,
        raft_term: 3,
    }
}

/// A completed fragment as handed over: (begin, end, confirmed end, at once, held).
pub(crate) type Handed = (i64, i64, i64, bool, bool);

#[derive(Default)]
pub(crate) struct Host {
    pub(crate) commits: Mutex<Vec<(i64, i64)>>,
    completed: Mutex<Vec<Handed>>,
}

impl ReplicaHost for Host {
    fn spool_commit(&self, _: &str, f: LocalFragment) {
        self.commits
            .lock()
            .unwrap()
            .push((f.spec.begin, f.spec.end));
    }
    fn spool_complete(&self, _: &str, c: Completed, at_once: bool, held: bool) {
        let row = (c.begin(), c.end(), c.confirmed_end, at_once, held);
        self.completed.lock().unwrap().push(row);
    }
    fn listing_covers(&self, _: &str, _: i64, _: i64) -> BoxFuture<bool> {
        Box::pin(async { false })
    }
    fn checkpoint_head(&self, _: &str, _: i64) -> BoxFuture<Result<(), String>> {
        Box::pin(async { Ok(()) })
    }
    fn refresh_listing(&self, _: &str) -> BoxFuture<()> {
        Box::pin(async {})
    }
}

impl Host {
    pub(crate) fn completed(&self) -> Vec<Handed> {
        self.completed.lock().unwrap().clone()
    }
}

/// A broker serving the replica end on loopback, assigned [`JOURNAL`] as a replica.
pub(crate) struct Broker {
    pub(crate) registry: Arc<Registry>,
    pub(crate) replicas: Arc<ReplicaSet>,
    pub(crate) host: Arc<Host>,
    lease_lost: Arc<Mutex<Option<String>>>,
    pub(crate) endpoint: String,
    dir: tempfile::TempDir,
    served: tokio::task::JoinHandle<()>,
}

impl Broker {
    pub(crate) async fn start() -> Broker {
        let dir = tempfile::tempdir().unwrap();
        let host = Arc::new(Host::default());
        let config = ReplicaConfig {
            spool: Arc::new(SpoolConfig {
                directory: Some(dir.path().to_owned()),
                ..SpoolConfig::default()
            }),
            ..ReplicaConfig::default()
        };
        let registry = Arc::new(Registry::new());
        let replicas = Arc::new(ReplicaSet::new(host.clone(), config));
        let lease_lost: Arc<Mutex<Option<String>>> = Arc::default();
        let lost = lease_lost.clone();
        let replicator = Arc::new(Replicator {
            registry: registry.clone(),
            replicas: replicas.clone(),
            check_lease: Arc::new(move || lost.lock().unwrap().clone().map_or(Ok(()), Err)),
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let endpoint = format!("http://{}", listener.local_addr().unwrap());
        let service = NativeJournal {
            replicator,
            appends: None,
            reads: None,
            gate: Default::default(),
        };
        let served = tokio::spawn(async move {
            tonic::transport::Server::builder()
                .add_service(JournalServer::new(service))
                .serve_with_incoming(TcpListenerStream::new(listener))
                .await
                .unwrap();
        });
        let broker = Broker {
            registry,
            replicas,
            host,
            lease_lost,
            endpoint,
            dir,
            served,
        };
        broker.publish(10, vec![primary(), local()], 0);
        broker
    }

    /// Publishes the journal's route at `revision`, and assigns it here when the
    /// route has this broker.
    pub(crate) fn publish(&self, revision: i64, members: Vec<process_spec::Id>, primary: i32) {
        let spec = JournalSpec {
            name: JOURNAL.into(),
            replication: members.len() as i32,
            ..JournalSpec::default()
        };
        let endpoints = members
            .iter()
            .map(|m| (m.clone(), format!("http://{}.{}:1", m.zone, m.suffix)))
            .collect();
        let route = Route {
            members: members.clone(),
            primary,
            endpoints: vec![],
        };
        let ours = members.contains(&local());
        let assigned = ours.then(|| LocalAssignment {
            journal: JOURNAL.into(),
            primary: members.get(primary as usize) == Some(&local()),
            create_revision: 1,
            lease: 7,
            members: members.clone(),
        });
        // Replicas first, then the registry: a stream woken by the publication
        // finds the replicas of that publication.
        self.replicas.update(assigned.into_iter().collect());
        self.registry.publish(Update {
            etcd: etcd(revision),
            local_id: Some(local()),
            members: Some(endpoints),
            journals: vec![(
                JOURNAL.into(),
                Journal {
                    spec: Arc::new(spec),
                    route,
                    consistent: true,
                },
            )],
            removed: vec![],
        });
    }

    pub(crate) fn replica(&self) -> Arc<Replica> {
        self.replicas.get(JOURNAL).unwrap()
    }

    /// The header a primary of `route` sends this broker.
    fn header(&self, revision: i64, members: Vec<process_spec::Id>, primary: i32) -> Header {
        let endpoints = members
            .iter()
            .map(|m| {
                if *m == local() {
                    self.endpoint.clone()
                } else {
                    "http://unused:1".to_owned()
                }
            })
            .collect();
        Header {
            process_id: Some(local()),
            route: Some(Route {
                members,
                primary,
                endpoints,
            }),
            etcd: Some(etcd(revision)),
        }
    }

    pub(crate) async fn stop(self) {
        tokio::time::timeout(PROMPTLY, self.replicas.stop_all())
            .await
            .expect("replicas stop");
        self.served.abort();
    }
}

pub(crate) fn empty() -> Fragment {
    Fragment {
        journal: JOURNAL.into(),
        compression_codec: CompressionCodec::None as i32,
        ..Fragment::default()
    }
}

pub(crate) fn fragment(begin: i64, end: i64, content: &[u8]) -> Fragment {
    use sha1::{Digest, Sha1};
    let digest: [u8; 20] = Sha1::digest(content).into();
    Fragment {
        begin,
        end,
        sum: (begin != end).then(|| crate::spool::sha1sum_from_digest(&digest)),
        ..empty()
    }
}

fn proposal(f: Fragment, header: Option<Header>) -> ReplicateRequest {
    ReplicateRequest {
        header,
        proposal: Some(f),
        registers: Some(LabelSet::default()),
        acknowledge: true,
        ..ReplicateRequest::default()
    }
}

fn content(data: &'static [u8]) -> ReplicateRequest {
    ReplicateRequest {
        content: Bytes::from_static(data),
        ..ReplicateRequest::default()
    }
}

/// A raw Replicate stream: send with `tx`, read answers from the stream. Its
/// connection is its own, so that a test can cut it as a dying primary's is.
struct Raw {
    tx: Option<mpsc::Sender<ReplicateRequest>>,
    answers: tonic::Streaming<ReplicateResponse>,
    socket: std::net::TcpStream,
}

impl Raw {
    async fn open(endpoint: &str) -> Raw {
        let addr = endpoint.trim_start_matches("http://");
        let socket = std::net::TcpStream::connect(addr).unwrap();
        socket.set_nonblocking(true).unwrap();
        let kept = socket.try_clone().unwrap();
        let once = Arc::new(Mutex::new(Some(socket)));
        let connector = tower::service_fn(move |_: http::Uri| {
            let socket = once.lock().unwrap().take();
            async move {
                let socket = socket.ok_or_else(|| std::io::Error::other("one connection only"))?;
                let socket = tokio::net::TcpStream::from_std(socket)?;
                Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(socket))
            }
        });
        let channel = Endpoint::from_static("http://replica.test")
            .connect_with_connector(connector)
            .await
            .unwrap();
        let (tx, rx) = mpsc::channel(16);
        let answers = JournalClient::new(channel)
            .replicate(ReceiverStream::new(rx))
            .await
            .unwrap()
            .into_inner();
        Raw {
            tx: Some(tx),
            answers,
            socket: kept,
        }
    }

    /// Cuts the connection, as a primary that died: the stream breaks, no EOF.
    fn kill(self) {
        self.socket.shutdown(std::net::Shutdown::Both).unwrap();
    }

    async fn send(&self, req: ReplicateRequest) {
        self.tx.as_ref().unwrap().send(req).await.unwrap();
    }

    async fn answer(&mut self) -> Result<ReplicateResponse, tonic::Status> {
        let next = tokio::time::timeout(PROMPTLY, self.answers.message())
            .await
            .expect("an answer comes");
        next.map(|m| m.expect("an answer, not the stream's end"))
    }

    /// Sends EOF and reads the stream's end.
    async fn close(mut self) -> Result<(), tonic::Status> {
        self.tx = None;
        let end = tokio::time::timeout(PROMPTLY, self.answers.message())
            .await
            .expect("the stream ends");
        end.map(|m| assert!(m.is_none(), "no answer after EOF: {m:?}"))
    }
}

/// Waits until `check` holds (bounded).
async fn eventually(what: &str, check: impl Fn() -> bool) {
    let deadline = tokio::time::Instant::now() + PROMPTLY;
    while !check() {
        assert!(tokio::time::Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

pub(crate) fn loopback_dial() -> Dial {
    Arc::new(|_: &process_spec::Id, endpoint: &str| {
        Ok(JournalClient::new(
            Endpoint::from_shared(endpoint.to_owned())?.connect_lazy(),
        ))
    })
}

fn local_spool(dir: &std::path::Path) -> Arc<AsyncSpool> {
    let config = SpoolConfig {
        directory: Some(dir.to_owned()),
        ..SpoolConfig::default()
    };
    Arc::new(AsyncSpool::new(Spool::new(
        JOURNAL,
        Arc::new(NullObserver),
        Arc::new(config),
    )))
}

#[tokio::test]
async fn a_pipeline_commits_pipelined_appends_to_the_native_replica() {
    let b = Broker::start().await;
    let dir = tempfile::tempdir().unwrap();
    let mut header = b.header(10, vec![primary(), local()], 0);
    header.process_id = Some(primary());
    let spool = local_spool(dir.path());
    let pln = Arc::new(Pipeline::new(
        header.clone(),
        spool.clone(),
        Box::new(|_| {}),
        &loopback_dial(),
        tonic::metadata::MetadataMap::new(),
        REPLICATION_TIMEOUT,
    ));
    pln.scatter(&proposal(empty(), Some(header))).await;
    assert_eq!(pln.gather_sync().await, Default::default());

    let mut barriers = Vec::new();
    for text in [&b"hello "[..], b"world"] {
        pln.scatter(&ReplicateRequest {
            content: Bytes::copy_from_slice(text),
            ..ReplicateRequest::default()
        })
        .await;
        pln.scatter(&proposal(spool.next(), None)).await;
        barriers.push(pln.barrier());
    }
    for (wait_for, close_after) in barriers {
        wait_for.wait().await;
        pln.gather_ok().await;
        close_after.open();
    }
    assert!(pln.recv_err().is_none(), "{:?}", pln.recv_err());
    assert_eq!(spool.end(), 11);
    tokio::time::timeout(PROMPTLY, pln.shutdown(false))
        .await
        .unwrap();

    // The replica committed what the primary did, and got its spool back on EOF.
    let replica = b.replica();
    let held = tokio::time::timeout(PROMPTLY, replica.hold_spool())
        .await
        .expect("the stream gave the spool back");
    assert_eq!(held.spec(), spool.spec());
    // The second commit confirmed the first one: the primary proposes only once
    // every member took the previous proposal.
    assert_eq!(held.confirmed_end(), 6);
    drop(held);
    assert_eq!(*b.host.commits.lock().unwrap(), vec![(0, 6), (0, 11)]);
    assert_eq!(b.host.completed(), vec![]); // A clean EOF flushes nothing.
    b.stop().await;
}

#[tokio::test]
async fn a_route_other_than_the_journals_is_answered_wrong_route() {
    let b = Broker::start().await;
    let mut raw = Raw::open(&b.endpoint).await;
    // The primary thinks this broker is its primary's peer under another primary.
    let stale = b.header(10, vec![primary(), local()], 1);
    raw.send(proposal(empty(), Some(stale))).await;
    let resp = raw.answer().await.unwrap();
    assert_eq!(resp.status, Status::WrongRoute as i32);
    let hdr = resp.header.unwrap();
    assert_eq!(hdr.route.unwrap().primary, 0); // Our route, to read through.
    assert_eq!(hdr.etcd.unwrap().revision, 10);
    raw.close().await.unwrap();
    b.stop().await;
}

#[tokio::test]
async fn an_unknown_journal_is_answered_not_found() {
    let b = Broker::start().await;
    let mut raw = Raw::open(&b.endpoint).await;
    let mut f = empty();
    f.journal = "other/journal".into();
    let hdr = b.header(10, vec![primary(), local()], 0);
    raw.send(proposal(f, Some(hdr))).await;
    let resp = raw.answer().await.unwrap();
    assert_eq!(resp.status, Status::JournalNotFound as i32);
    assert_eq!(resp.header.unwrap().process_id, Some(local()));
    b.stop().await;
}

#[tokio::test]
async fn a_stream_that_starts_without_a_header_or_with_a_doubtful_lease_fails() {
    let b = Broker::start().await;
    let mut raw = Raw::open(&b.endpoint).await;
    raw.send(proposal(empty(), None)).await;
    let err = raw.answer().await.unwrap_err();
    assert_eq!(err.code(), Code::Unknown);
    assert_eq!(
        err.message(),
        "expected first ReplicateRequest to have Header"
    );

    let why = "broker's etcd lease may have expired (etcd unreachable); retry";
    *b.lease_lost.lock().unwrap() = Some(why.into());
    let mut raw = Raw::open(&b.endpoint).await;
    raw.send(proposal(
        empty(),
        Some(b.header(10, vec![primary(), local()], 0)),
    ))
    .await;
    let err = raw.answer().await.unwrap_err();
    assert_eq!((err.code(), err.message()), (Code::Unavailable, why));
    b.stop().await;
}

#[tokio::test]
async fn a_header_of_another_cluster_is_refused() {
    let b = Broker::start().await;
    let mut raw = Raw::open(&b.endpoint).await;
    let mut hdr = b.header(10, vec![primary(), local()], 0);
    hdr.etcd.as_mut().unwrap().cluster_id = 99;
    raw.send(proposal(empty(), Some(hdr))).await;
    let err = raw.answer().await.unwrap_err();
    assert_eq!(err.code(), Code::Unknown);
    assert_eq!(
        err.message(),
        "request Etcd ClusterId doesn't match our own (99 vs 1)"
    );
    b.stop().await;
}

/// Opens a stream under the published route and commits `data` at [0, len).
async fn committed(b: &Broker, data: &'static [u8]) -> Raw {
    let mut raw = Raw::open(&b.endpoint).await;
    let hdr = b.header(10, vec![primary(), local()], 0);
    raw.send(proposal(empty(), Some(hdr))).await;
    assert_eq!(raw.answer().await.unwrap().status, Status::Ok as i32);
    raw.send(content(data)).await;
    let f = fragment(0, data.len() as i64, data);
    raw.send(proposal(f, None)).await;
    assert_eq!(raw.answer().await.unwrap().status, Status::Ok as i32);
    raw
}

#[tokio::test]
async fn a_second_stream_waits_for_the_spool_and_a_broken_one_stores_at_once() {
    let b = Broker::start().await;
    let raw = committed(&b, b"hello").await;

    // Another stream (a new pipeline of the same primary) waits for the spool.
    let mut second = Raw::open(&b.endpoint).await;
    second
        .send(proposal(
            empty(),
            Some(b.header(10, vec![primary(), local()], 0)),
        ))
        .await;
    let waiting = tokio::time::timeout(Duration::from_millis(100), second.answer()).await;
    assert!(waiting.is_err(), "the spool is the first stream's");

    // The first primary's call is reset: not an EOF, so the replica is to store
    // its copy at once; first, the spool goes to the waiting stream.
    raw.kill();
    let resp = second.answer().await.unwrap();
    assert_eq!(resp.status, Status::ProposalMismatch as i32);
    assert_eq!(resp.fragment.unwrap().end, 5);
    second.close().await.unwrap();
    // Then the flush: [0, 5) was never confirmed (no proposal followed it), so it
    // is held at once rather than left for the replica delay.
    eventually("the copy is handed over", || {
        b.host.completed() == vec![(0, 5, 0, true, true)]
    })
    .await;
    let host = b.host.clone();
    b.stop().await;
    // Released on stopping: stored through its confirmed end alone.
    assert_eq!(host.completed().last(), Some(&(0, 5, 0, true, false)));
}

#[tokio::test]
async fn a_route_change_ends_a_stream_waiting_for_its_next_message() {
    let b = Broker::start().await;
    let mut raw = committed(&b, b"hello").await;
    // A new primary: this stream's route is not the journal's any more.
    b.publish(11, vec![local(), id("c", "newer")], 1);
    let err = raw.answer().await.unwrap_err();
    assert_eq!(err.code(), Code::Unavailable);
    assert_eq!(
        err.message(),
        "a/journal: the route of this replication stream is no longer the journal's (its \
         primary was replaced)"
    );
    // The spool was given back (the broken stream's copy handed over at once).
    let held = tokio::time::timeout(PROMPTLY, b.replica().hold_spool())
        .await
        .expect("the spool was given back");
    drop(held);
    eventually("the copy is stored", || b.host.completed().len() == 1).await;
    b.stop().await;
}

#[tokio::test]
async fn a_stream_waiting_for_the_spool_resolves_again_when_the_route_changes() {
    let b = Broker::start().await;
    let _first = committed(&b, b"hello").await;
    let mut second = Raw::open(&b.endpoint).await;
    second
        .send(proposal(
            empty(),
            Some(b.header(10, vec![primary(), local()], 0)),
        ))
        .await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    // The journal moved on without the second stream's primary.
    b.publish(11, vec![local(), id("c", "newer")], 1);
    let resp = second.answer().await.unwrap();
    assert_eq!(resp.status, Status::WrongRoute as i32);
    assert_eq!(resp.header.unwrap().etcd.unwrap().revision, 11);
    b.stop().await;
}

#[tokio::test]
async fn a_held_tail_the_next_primary_rolls_to_is_adopted() {
    // The chaos suite's sigkill-rapid: the primary dies with a tail this replica
    // committed but nobody confirmed; the next primary learns our end from our
    // PROPOSAL_MISMATCH and rolls us to it, so the journal goes on from our tail.
    let b = Broker::start().await;
    let raw = committed(&b, b"confirmed").await;
    raw.send(content(b"+tail")).await;
    let mut raw = raw;
    raw.send(proposal(fragment(0, 14, b"confirmed+tail"), None))
        .await; // Confirms [0, 9); [9, 14) never is.
    assert_eq!(raw.answer().await.unwrap().status, Status::Ok as i32);
    raw.kill(); // The primary dies.
    eventually("the tail is held", || {
        b.host.completed() == vec![(0, 14, 9, true, true)]
    })
    .await;

    b.publish(11, vec![local(), id("c", "newer")], 1);
    let mut next = Raw::open(&b.endpoint).await;
    let hdr = b.header(11, vec![local(), id("c", "newer")], 1);
    next.send(proposal(empty(), Some(hdr))).await;
    let resp = next.answer().await.unwrap();
    assert_eq!(resp.status, Status::ProposalMismatch as i32);
    let ours = resp.fragment.unwrap();
    assert_eq!((ours.begin, ours.end), (14, 14)); // Flushed to empty at our end.
    next.send(proposal(fragment(14, 14, b""), None)).await;
    assert_eq!(next.answer().await.unwrap().status, Status::Ok as i32);
    // The next proposal confirms the roll: the held tail is the journal's.
    next.send(content(b"more")).await;
    next.send(proposal(fragment(14, 18, b"more"), None)).await;
    assert_eq!(next.answer().await.unwrap().status, Status::Ok as i32);
    assert_eq!(
        b.host.completed(),
        vec![(0, 14, 9, true, true), (0, 14, 14, true, false)]
    );
    next.close().await.unwrap();
    b.stop().await;
}

#[tokio::test]
async fn content_at_a_wrong_delta_is_invalid_and_rolled_back() {
    let b = Broker::start().await;
    let mut raw = committed(&b, b"hello").await;
    raw.send(content(b"abc")).await;
    raw.send(ReplicateRequest {
        content: Bytes::from_static(b"xyz"),
        content_delta: 7,
        ..ReplicateRequest::default()
    })
    .await;
    let err = raw.answer().await.unwrap_err();
    assert_eq!(err.code(), Code::Unknown);
    assert_eq!(err.message(), "invalid ContentDelta (7; expected 3)");
    let held = tokio::time::timeout(PROMPTLY, b.replica().hold_spool())
        .await
        .unwrap();
    assert_eq!((held.end(), held.delta()), (5, 0)); // "abc" rolled back.
    drop(held);
    b.stop().await;
}

#[tokio::test]
async fn a_stream_without_a_replica_here_is_unavailable_until_assigned() {
    let b = Broker::start().await;
    b.replicas.update(vec![]); // Published, but this broker has no replica (yet).
    let mut raw = Raw::open(&b.endpoint).await;
    raw.send(proposal(
        empty(),
        Some(b.header(10, vec![primary(), local()], 0)),
    ))
    .await;
    let err = raw.answer().await.unwrap_err();
    assert_eq!(
        (err.code(), err.message()),
        (Code::Unavailable, "replica of a/journal was stopped")
    );
    let _ = &b.dir;
    b.stop().await;
}

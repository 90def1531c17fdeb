//! After the Python `broker/tests/server/test_pipeline.py` (one test per test
//! there, named alike), plus the send timeout and the barrier's ordering with
//! several appends in flight. The peers are in-process tonic servers on loopback
//! ([`fake`]) applying requests to real spools; timeouts are short and real.

mod fake;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use sha1::{Digest, Sha1};
use tokio::sync::Notify;
use tonic::transport::Endpoint;

use super::*;
use crate::protocol::{header, CompressionCodec, Fragment, Label, LabelSet};
use crate::spool::sha1sum_from_digest;
use fake::{spool_in, Peer, JOURNAL};

/// Bounds every wait of a test that should end at once.
const PROMPTLY: Duration = Duration::from_secs(10);

fn primary_id() -> process_spec::Id {
    process_spec::Id {
        zone: "a".into(),
        suffix: "primary".into(),
    }
}

struct Harness {
    dir: tempfile::TempDir,
    peers: Vec<Peer>,
}

impl Harness {
    async fn start() -> Harness {
        let dir = tempfile::tempdir().unwrap();
        let peers = vec![
            Peer::start("peer-one", dir.path()).await,
            Peer::start("peer-two", dir.path()).await,
        ];
        Harness { dir, peers }
    }

    async fn stop(mut self) {
        for peer in &mut self.peers {
            peer.stop().await;
        }
    }
}

/// What a test sees of its pipeline: the pipeline, the local spool, and the
/// spools handed back.
struct Made {
    pln: Arc<Pipeline>,
    local: Arc<AsyncSpool>,
    returned: Arc<Mutex<Vec<Arc<AsyncSpool>>>>,
}

impl Made {
    fn returned_local(&self) -> bool {
        let returned = self.returned.lock().unwrap();
        returned.len() == 1 && Arc::ptr_eq(&returned[0], &self.local)
    }
}

/// Dials peers on loopback, connecting at the first call.
fn loopback_dial() -> Dial {
    Arc::new(|_member: &process_spec::Id, endpoint: &str| {
        Ok(crate::protocol::journal_client::JournalClient::new(
            Endpoint::from_shared(endpoint.to_owned())?.connect_lazy(),
        ))
    })
}

fn make_pipeline(h: &Harness, timeout: Duration) -> Made {
    make_pipeline_dialing(h, timeout, loopback_dial(), MetadataMap::new())
}

fn make_pipeline_dialing(
    h: &Harness,
    timeout: Duration,
    dial: Dial,
    metadata: MetadataMap,
) -> Made {
    let mut members = vec![primary_id()];
    let mut endpoints = vec!["http://unused:1".to_owned()];
    for p in &h.peers {
        members.push(p.id());
        endpoints.push(p.endpoint.clone());
    }
    let header = Header {
        process_id: Some(primary_id()),
        route: Some(Route {
            members,
            primary: 0,
            endpoints,
        }),
        etcd: Some(header::Etcd {
            cluster_id: 1,
            member_id: 2,
            revision: 10,
            raft_term: 3,
        }),
    };
    let local = spool_in(h.dir.path());
    let returned = Arc::new(Mutex::new(Vec::new()));
    let into = returned.clone();
    let pln = Pipeline::new(
        header,
        local.clone(),
        Box::new(move |spool| into.lock().unwrap().push(spool)),
        &dial,
        metadata,
        timeout,
    );
    Made {
        pln: Arc::new(pln),
        local,
        returned,
    }
}

fn empty_fragment() -> Fragment {
    Fragment {
        journal: JOURNAL.into(),
        compression_codec: CompressionCodec::None as i32,
        ..Fragment::default()
    }
}

fn sync_request(pln: &Pipeline, proposal: Fragment) -> ReplicateRequest {
    ReplicateRequest {
        header: Some(pln.header().clone()),
        proposal: Some(proposal),
        registers: Some(LabelSet::default()),
        acknowledge: true,
        ..ReplicateRequest::default()
    }
}

fn content(text: &'static [u8], delta: i64) -> ReplicateRequest {
    ReplicateRequest {
        content: Bytes::from_static(text),
        content_delta: delta,
        ..ReplicateRequest::default()
    }
}

fn commit(proposal: Fragment) -> ReplicateRequest {
    ReplicateRequest {
        proposal: Some(proposal),
        registers: Some(LabelSet::default()),
        acknowledge: true,
        ..ReplicateRequest::default()
    }
}

async fn close(pln: &Pipeline, abort: bool) {
    let closing = async {
        if abort {
            pln.abort().await;
        } else {
            pln.shutdown(false).await;
        }
    };
    tokio::time::timeout(PROMPTLY, closing).await.unwrap();
}

async fn sync(pln: &Pipeline) -> SyncOutcome {
    pln.scatter(&sync_request(pln, empty_fragment())).await;
    pln.gather_sync().await
}

fn text(err: Option<PipelineError>) -> String {
    err.map(|e| e.to_string()).unwrap_or_default()
}

#[tokio::test]
async fn sync_then_pipelined_commits() {
    let h = Harness::start().await;
    let m = make_pipeline(&h, REPLICATION_TIMEOUT);
    let pln = &m.pln;
    assert_eq!(sync(pln).await, SyncOutcome::default());
    assert!(pln.send_err().is_none() && pln.recv_err().is_none());
    // Each peer saw the header addressed to itself.
    for p in &h.peers {
        let headers = p.state.headers.lock().unwrap();
        assert_eq!(headers[0].process_id, Some(p.id()));
    }

    // Two appends, pipelined: the second sends before the first reads its acks.
    let mut barriers = Vec::new();
    for text in [&b"hello "[..], b"world"] {
        pln.scatter(&ReplicateRequest {
            content: Bytes::copy_from_slice(text),
            ..ReplicateRequest::default()
        })
        .await;
        pln.scatter(&commit(m.local.next())).await;
        barriers.push(pln.barrier());
    }
    for (wait_for, close_after) in barriers {
        wait_for.wait().await;
        pln.gather_ok().await;
        close_after.open();
    }
    assert!(pln.recv_err().is_none(), "{:?}", pln.recv_err());
    let spec = m.local.spec();
    assert_eq!(spec.end, 11);
    let digest: [u8; 20] = Sha1::digest(b"hello world").into();
    assert_eq!(spec.sum, Some(sha1sum_from_digest(&digest)));
    for p in &h.peers {
        assert_eq!(p.state.spool.spec(), spec);
    }
    close(pln, false).await;
    assert!(m.returned_local()); // The spool went back to its replica.
    h.stop().await;
}

#[tokio::test]
async fn gather_sync_rolls_to_a_peer_further_ahead() {
    let h = Harness::start().await;
    let m = make_pipeline(&h, REPLICATION_TIMEOUT);
    let regs = LabelSet {
        labels: vec![Label {
            name: "owner".into(),
            value: "peer".into(),
            ..Label::default()
        }],
    };
    let ahead = Fragment {
        end: 500,
        ..empty_fragment()
    };
    let (frag, answered) = (ahead.clone(), regs.clone());
    h.peers[1].script(Arc::new(move |_| {
        Some(Ok(ReplicateResponse {
            status: Status::ProposalMismatch as i32,
            fragment: Some(frag.clone()),
            registers: Some(answered.clone()),
            ..ReplicateResponse::default()
        }))
    }));
    let outcome = sync(&m.pln).await;
    assert_eq!(
        outcome,
        SyncOutcome {
            roll_to: 500,
            roll_registers: Some(regs),
            read_through: 0,
        }
    );
    assert!(m.pln.recv_err().is_none());
    close(&m.pln, false).await;
    h.stop().await;
}

#[tokio::test]
async fn gather_sync_wrong_route() {
    let h = Harness::start().await;
    let m = make_pipeline(&h, REPLICATION_TIMEOUT);
    let mut newer = m.pln.header().clone();
    newer.etcd.as_mut().unwrap().revision = 42;
    let route = newer.route.as_mut().unwrap();
    route.members.remove(2);
    route.endpoints.clear();
    h.peers[1].script(Arc::new(move |_| {
        Some(Ok(ReplicateResponse {
            status: Status::WrongRoute as i32,
            header: Some(newer.clone()),
            ..ReplicateResponse::default()
        }))
    }));
    let outcome = sync(&m.pln).await;
    assert_eq!(
        outcome,
        SyncOutcome {
            read_through: 42,
            ..SyncOutcome::default()
        }
    );
    close(&m.pln, false).await;

    // The same route at an older revision is a protocol error.
    let m = make_pipeline(&h, REPLICATION_TIMEOUT);
    let same = m.pln.header().clone();
    h.peers[1].script(Arc::new(move |_| {
        Some(Ok(ReplicateResponse {
            status: Status::WrongRoute as i32,
            header: Some(same.clone()),
            ..ReplicateResponse::default()
        }))
    }));
    sync(&m.pln).await;
    let err = text(m.pln.recv_err());
    assert!(err.contains("unexpected WRONG_ROUTE"), "{err}");
    assert!(err.contains("b/peer-two"), "{err}");
    close(&m.pln, true).await;
    h.stop().await;
}

#[tokio::test]
async fn a_dead_peer_fails_the_pipeline() {
    let mut h = Harness::start().await;
    let m = make_pipeline(&h, REPLICATION_TIMEOUT);
    let pln = &m.pln;
    sync(pln).await;
    h.peers[0].stop().await;
    pln.scatter(&content(b"lost", 0)).await;
    pln.scatter(&commit(m.local.next())).await;
    tokio::time::timeout(PROMPTLY, pln.gather_ok())
        .await
        .unwrap();
    let err = text(pln.recv_err().or_else(|| pln.send_err()));
    assert!(err.contains("peer-one"), "{err}");
    close(pln, true).await;
    // The primary's own spool committed (peers catch up at the next sync) and went back.
    assert!(m.returned_local());
    assert_eq!(m.local.end(), 4);
    h.stop().await;
}

#[tokio::test]
async fn a_peer_that_ended_its_stream_is_noted_before_the_commit() {
    let h = Harness::start().await;
    let m = make_pipeline(&h, REPLICATION_TIMEOUT);
    let pln = &m.pln;
    sync(pln).await;
    h.peers[0].script(Arc::new(|req| {
        (!req.content.is_empty())
            .then(|| Err(tonic::Status::internal("spool directory is stalled")))
    }));
    pln.scatter(&content(b"abc", 0)).await;
    // Once the peer's stream has ended, it is noted.
    let noted = async {
        loop {
            pln.note_ended_peers();
            if pln.failure().is_some() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(5), noted)
        .await
        .unwrap();
    let err = text(pln.failure());
    assert!(err.contains("peer-one"), "{err}");
    assert!(err.contains("stalled"), "{err}");
    // Whether a commit went out is each append's to say, not the pipeline's (an
    // append whose commit went out before the peer ended reads this same error).
    assert!(!err.contains("commit"), "{err}");
    close(pln, true).await;
    h.stop().await;
}

/// Makes `peer` answer nothing until released; sends content and its commit.
async fn commit_to_a_silent_peer(m: &Made, peer: &Peer) {
    peer.hold();
    m.pln.scatter(&content(b"data", 0)).await;
    m.pln.scatter(&commit(m.local.next())).await;
}

#[tokio::test]
async fn a_peer_that_never_answers_fails_the_pipeline_in_bounded_time() {
    // A peer behind a network partition neither answers nor fails: the pipeline
    // gives up on it after its timeout instead of waiting for TCP to.
    let h = Harness::start().await;
    let m = make_pipeline(&h, Duration::from_millis(500));
    let pln = &m.pln;
    sync(pln).await;
    assert!(pln.recv_err().is_none());
    // Peer-two's stream goes silent: it answers no proposal from now on.
    commit_to_a_silent_peer(&m, &h.peers[1]).await;
    let started = Instant::now();
    pln.gather_ok().await;
    let took = started.elapsed();
    let err = text(pln.recv_err());
    assert!(err.contains("peer-two"), "{err}");
    assert!(err.contains("no answer for 0.5s"), "{err}");
    assert!(took < Duration::from_secs(3), "{took:?}");
    h.peers[1].release();
    close(pln, true).await;
    assert!(m.returned_local());
    h.stop().await;
}

#[tokio::test]
async fn a_peer_that_left_the_route_is_not_waited_on() {
    // The route lost a silent peer (etcd gave its lease up): the append waiting on
    // its answer fails at once, naming why, instead of at the pipeline's timeout.
    let h = Harness::start().await;
    let m = make_pipeline(&h, Duration::from_secs(60));
    sync(&m.pln).await;
    commit_to_a_silent_peer(&m, &h.peers[1]).await;
    let pln = m.pln.clone();
    let gathering = tokio::spawn(async move { pln.gather_ok().await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!gathering.is_finished());
    let started = Instant::now();
    m.pln.interrupt("b/peer-two left the route of a/journal");
    tokio::time::timeout(PROMPTLY, gathering)
        .await
        .unwrap()
        .unwrap();
    assert!(started.elapsed() < Duration::from_secs(1));
    let err = text(m.pln.recv_err());
    assert!(err.contains("left the route"), "{err}");
    // Nothing more is waited on either: a later write or read fails the same way.
    let started = Instant::now();
    m.pln.scatter(&content(b"more", 0)).await;
    m.pln.gather_ok().await;
    assert!(started.elapsed() < Duration::from_secs(1));
    h.peers[1].release();
    close(&m.pln, true).await;
    assert!(m.returned_local());
    h.stop().await;
}

#[tokio::test]
async fn a_peer_that_takes_no_message_fails_the_send_in_bounded_time() {
    // A peer that accepted the stream but reads none of it: once the stream's
    // buffers and flow-control window are full, a send waits on it only so long.
    let h = Harness::start().await;
    h.peers[1].deafen();
    // Peer-one takes everything without writing it: however loaded the machine,
    // it keeps up.
    h.peers[0].script(Arc::new(|_| Some(Ok(ReplicateResponse::default()))));
    let m = make_pipeline(&h, Duration::from_millis(500));
    let pln = &m.pln;
    let chunk = Bytes::from(vec![b'x'; 256 << 10]);
    let started = Instant::now();
    let mut delta = 0;
    // 64 MiB at most: far past any window a peer grants.
    for _ in 0..256 {
        if pln.send_err().is_some() {
            break;
        }
        pln.scatter(&ReplicateRequest {
            content: chunk.clone(),
            content_delta: delta,
            ..ReplicateRequest::default()
        })
        .await;
        delta += chunk.len() as i64;
    }
    let err = text(pln.send_err());
    assert!(err.contains("peer-two"), "{err}");
    assert!(err.contains("send: took no message for 0.5s"), "{err}");
    assert!(started.elapsed() < Duration::from_secs(10));
    // The stream was given up on: its reads fail too, at once (not after another
    // timeout), as a cancelled call's do, while peer-one acknowledges what it took.
    pln.scatter(&commit(m.local.next())).await;
    pln.gather_ok().await;
    let err = text(pln.recv_err());
    assert!(err.contains("b/peer-two failed: recv: CANCELLED"), "{err}");
    close(pln, true).await;
    h.stop().await;
}

#[tokio::test]
async fn the_barrier_hands_acknowledgements_over_in_send_order() {
    // Three appends in flight: each sends while the ones before it still await
    // their acknowledgements, and each reads its own only after the one before.
    let h = Harness::start().await;
    let m = make_pipeline(&h, REPLICATION_TIMEOUT);
    let pln = &m.pln;
    sync(pln).await;
    let order = Arc::new(Mutex::new(Vec::new()));
    let all_sent = Arc::new(AtomicBool::new(false));
    let first_may_read = Arc::new(Notify::new());
    let mut readers = Vec::new();
    for (i, text) in [&b"one "[..], b"two ", b"three"].into_iter().enumerate() {
        pln.scatter(&ReplicateRequest {
            content: Bytes::copy_from_slice(text),
            ..ReplicateRequest::default()
        })
        .await;
        pln.scatter(&commit(m.local.next())).await;
        let (wait_for, close_after) = pln.barrier();
        let (pln, order, all_sent, first) = (
            pln.clone(),
            order.clone(),
            all_sent.clone(),
            first_may_read.clone(),
        );
        readers.push(tokio::spawn(async move {
            wait_for.wait().await;
            if i == 0 {
                // The first append reads only once every append has sent.
                first.notified().await;
                assert!(all_sent.load(Ordering::SeqCst));
            }
            pln.gather_ok().await;
            order.lock().unwrap().push(i);
            close_after.open();
        }));
    }
    // The acknowledgements are not all in: the pipeline is not idle, and the next
    // proposal would wait.
    let pln2 = pln.clone();
    let acknowledged = tokio::spawn(async move { pln2.acknowledged().await });
    tokio::task::yield_now().await;
    assert!(!pln.idle());
    assert!(!acknowledged.is_finished());
    all_sent.store(true, Ordering::SeqCst);
    first_may_read.notify_one();
    for reader in readers {
        tokio::time::timeout(PROMPTLY, reader)
            .await
            .unwrap()
            .unwrap();
    }
    assert_eq!(*order.lock().unwrap(), vec![0, 1, 2]);
    let failure = tokio::time::timeout(PROMPTLY, acknowledged)
        .await
        .unwrap()
        .unwrap();
    assert!(failure.is_none(), "{failure:?}");
    assert!(pln.idle());
    let spec = m.local.spec();
    assert_eq!(spec.end, 13);
    for p in &h.peers {
        assert_eq!(p.state.spool.spec(), spec);
    }
    close(pln, false).await;
    assert!(m.returned_local());
    h.stop().await;
}

#[tokio::test]
async fn a_peer_that_cannot_be_dialed_fails_its_sends() {
    let h = Harness::start().await;
    let loopback = loopback_dial();
    let dial: Dial = Arc::new(move |member: &process_spec::Id, endpoint: &str| {
        if member.suffix == "peer-two" {
            return Err("no route to host".into());
        }
        loopback(member, endpoint)
    });
    let m = make_pipeline_dialing(&h, REPLICATION_TIMEOUT, dial, MetadataMap::new());
    // Peer-one syncs all the same; the pipeline has failed.
    assert_eq!(sync(&m.pln).await, SyncOutcome::default());
    assert!(m.pln.recv_err().is_none());
    assert_eq!(
        text(m.pln.failure()),
        "replication peer b/peer-two failed: send: no route to host"
    );
    assert!(!m.pln.idle());
    assert_eq!(h.peers[0].state.proposals.lock().unwrap().len(), 1);
    close(&m.pln, true).await;
    h.stop().await;
}

#[tokio::test]
async fn a_local_spool_failure_comes_before_its_consequences() {
    // Content the primary's own spool refuses: that is the failure, as the spool
    // says it, though the peers failed their streams over the same content.
    let h = Harness::start().await;
    let m = make_pipeline(&h, REPLICATION_TIMEOUT);
    let pln = &m.pln;
    sync(pln).await;
    pln.scatter(&content(b"abc", 7)).await;
    let expected = "invalid ContentDelta (7; expected 0)";
    assert_eq!(text(pln.local_err()), expected);
    assert_eq!(text(pln.send_err()), expected);
    pln.scatter(&commit(m.local.spec())).await;
    pln.gather_ok().await;
    let peers = text(pln.recv_err());
    assert!(
        peers.contains("b/peer-one failed: recv: INTERNAL"),
        "{peers}"
    );
    assert_eq!(text(pln.failure()), expected);
    close(pln, true).await;
    assert!(m.returned_local());
    h.stop().await;
}

#[tokio::test]
async fn a_broken_off_pipeline_sends_nothing_more() {
    let h = Harness::start().await;
    let m = make_pipeline(&h, REPLICATION_TIMEOUT);
    let pln = &m.pln;
    sync(pln).await;
    assert!(pln.acknowledged().await.is_none());
    pln.break_off(PipelineError::Peer {
        peer: "b/peer-two".into(),
        message: "recv: UNAVAILABLE".into(),
    });
    let said = "replication peer b/peer-two failed: recv: UNAVAILABLE";
    assert_eq!(text(pln.acknowledged().await), said);
    assert_eq!(text(pln.send_err()), said);
    pln.scatter(&content(b"abc", 0)).await;
    assert_eq!(m.local.delta(), 0); // Not even applied locally.
    close(pln, false).await;
    assert_eq!(h.peers[0].state.proposals.lock().unwrap().len(), 1);
    h.stop().await;
}

#[tokio::test]
async fn confirm_replicas_repeats_the_commit_only_while_idle() {
    let h = Harness::start().await;
    let m = make_pipeline(&h, REPLICATION_TIMEOUT);
    let pln = &m.pln;
    sync(pln).await;
    pln.scatter(&content(b"abc", 0)).await;
    pln.scatter(&commit(m.local.next())).await;
    let (wait_for, close_after) = pln.barrier();
    // An acknowledgement is awaited: nothing is repeated.
    pln.confirm_replicas().await;
    wait_for.wait().await;
    pln.gather_ok().await;
    close_after.open();
    assert!(pln.idle());
    pln.confirm_replicas().await;
    let spec = m.local.spec();
    let repeated = async {
        for p in &h.peers {
            loop {
                let proposals = p.state.proposals.lock().unwrap().clone();
                if proposals.len() == 3 {
                    assert_eq!(proposals[2], (spec.clone(), false));
                    break;
                }
                assert!(proposals.len() < 3, "{proposals:?}");
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
    };
    tokio::time::timeout(PROMPTLY, repeated).await.unwrap();
    close(pln, false).await;
    assert!(pln.recv_err().is_none(), "{:?}", pln.recv_err());
    h.stop().await;
}

#[tokio::test]
async fn the_brokers_token_goes_with_every_call() {
    let h = Harness::start().await;
    let mut metadata = MetadataMap::new();
    metadata.insert("authorization", "Bearer broker-token".parse().unwrap());
    let m = make_pipeline_dialing(&h, REPLICATION_TIMEOUT, loopback_dial(), metadata);
    assert_eq!(sync(&m.pln).await, SyncOutcome::default());
    for p in &h.peers {
        assert_eq!(*p.state.tokens.lock().unwrap(), vec!["Bearer broker-token"]);
    }
    close(&m.pln, false).await;
    h.stop().await;
}

//! The Read RPC on loopback tonic servers: a member serving its replica's spools
//! and stored fragments (through a fake host), a non-member proxying to it. After
//! the Python `test_read_api.py`, `test_broker_statuses.py` and
//! `test_broker_auth.py`, and Gazette's `broker/read_api_test.go`.

use std::collections::HashMap;
use std::sync::Mutex;

use tokio_stream::wrappers::TcpListenerStream;
use tonic::Code;

use super::*;
use crate::protocol::journal_client::JournalClient;
use crate::protocol::journal_server::JournalServer;
use crate::protocol::{process_spec, CompressionCodec, ReplicateRequest, Route};
use crate::registry::{Journal, Update};
use crate::replica::{LocalAssignment, ReplicaConfig};
use crate::replicate::tests::{etcd, id, loopback_dial, Host, JOURNAL};
use crate::replicate::Replicator;
use crate::service::NativeJournal;
use crate::spool::SpoolConfig;

const PROMPTLY: Duration = Duration::from_secs(10);
const CHUNK: usize = READ_CHUNK_SIZE;
const STORE: &str = "file:///store/";

/// The stores, as the Python broker would read them for us.
#[derive(Default)]
struct FakeHost {
    /// Content of stored fragments, by their begin.
    stored: Mutex<HashMap<i64, Bytes>>,
    /// Fails stored reads with this text after their first chunk.
    store_fails: Mutex<Option<String>>,
    cut_off: Mutex<Option<String>>,
    holes: Mutex<Vec<i64>>,
    peer_calls: Mutex<Vec<(String, u32)>>,
}

/// Chunks of a stored object as a store yields them (not sized for the wire).
const STORE_CHUNK: usize = 300_000;

impl ReadHost for FakeHost {
    fn read_stored(&self, fragment: &Fragment, offset: i64) -> BoxStream<Result<Bytes, String>> {
        let data = self.stored.lock().unwrap()[&fragment.begin].clone();
        let from = (offset - fragment.begin) as usize;
        let mut chunks: Vec<Result<Bytes, String>> = (from..data.len())
            .step_by(STORE_CHUNK)
            .map(|at| Ok(data.slice(at..data.len().min(at + STORE_CHUNK))))
            .collect();
        if let Some(why) = self.store_fails.lock().unwrap().clone() {
            chunks.truncate(1);
            chunks.push(Err(why));
        }
        Box::pin(futures_util::stream::iter(chunks))
    }
    fn fragment_url(&self, f: &Fragment, ttl: Duration) -> BoxFuture<Result<String, String>> {
        let url = format!("signed:{}-{}:{}", f.begin, f.end, ttl.as_secs());
        Box::pin(async move { Ok(url) })
    }
    fn on_hole(&self, _: &str, hole_end: i64) -> bool {
        self.holes.lock().unwrap().push(hole_end);
        false
    }
    fn check_reachable(&self) -> Result<(), String> {
        self.cut_off.lock().unwrap().clone().map_or(Ok(()), Err)
    }
    fn dial(&self) -> Dial {
        loopback_dial()
    }
    fn peer_metadata(&self, journal: &str, capability: u32) -> MetadataMap {
        let call = (journal.to_owned(), capability);
        self.peer_calls.lock().unwrap().push(call);
        MetadataMap::new()
    }
}

fn member_a() -> process_spec::Id {
    id("a", "member")
}

/// A broker serving Read on loopback.
struct Broker {
    id: process_spec::Id,
    registry: Arc<Registry>,
    replicas: Arc<ReplicaSet>,
    host: Arc<FakeHost>,
    ctx: ReadContext,
    endpoint: String,
    _dir: tempfile::TempDir,
}

impl Broker {
    async fn start(id: process_spec::Id, gate: Option<crate::auth::Gate>) -> Broker {
        let dir = tempfile::tempdir().unwrap();
        let config = ReplicaConfig {
            spool: Arc::new(SpoolConfig {
                directory: Some(dir.path().to_owned()),
                ..SpoolConfig::default()
            }),
            ..ReplicaConfig::default()
        };
        let registry = Arc::new(Registry::new());
        let replicas = Arc::new(ReplicaSet::new(Arc::new(Host::default()), config));
        let host = Arc::new(FakeHost::default());
        let ctx = ReadContext::new(registry.clone(), replicas.clone(), host.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let endpoint = format!("http://{}", listener.local_addr().unwrap());
        let service = NativeJournal {
            replicator: Arc::new(Replicator {
                registry: registry.clone(),
                replicas: replicas.clone(),
                check_lease: Arc::new(|| Ok(())),
            }),
            appends: None,
            reads: Some(ctx.clone()),
            gate: Arc::new(std::sync::RwLock::new(gate.map(Arc::new))),
        };
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(JournalServer::new(service))
                .serve_with_incoming(TcpListenerStream::new(listener)),
        );
        Broker {
            id,
            registry,
            replicas,
            host,
            ctx,
            endpoint,
            _dir: dir,
        }
    }

    /// Publishes [`JOURNAL`] with `flags`, routed to `member` at `endpoint`; assigns
    /// it here if this broker is the member.
    fn publish(&self, member: &process_spec::Id, endpoint: &str, flags: u32) {
        if *member == self.id {
            self.replicas.update(vec![LocalAssignment {
                journal: JOURNAL.into(),
                primary: true,
                create_revision: 1,
                lease: 7,
                members: vec![member.clone()],
            }]);
        }
        let spec = JournalSpec {
            name: JOURNAL.into(),
            replication: 1,
            flags,
            ..JournalSpec::default()
        };
        self.registry.publish(Update {
            etcd: etcd(10),
            local_id: Some(self.id.clone()),
            members: Some(vec![(member.clone(), endpoint.to_owned())]),
            journals: vec![(
                JOURNAL.into(),
                Journal {
                    spec: Arc::new(spec),
                    route: Route {
                        members: vec![member.clone()],
                        primary: 0,
                        endpoints: vec![],
                    },
                    consistent: true,
                },
            )],
            removed: vec![],
        });
    }

    /// A broker that is the journal's one member.
    async fn member() -> Broker {
        let b = Broker::start(member_a(), None).await;
        b.publish(&member_a(), &b.endpoint.clone(), 0);
        b
    }

    fn client(&self) -> JournalClient<tonic::transport::Channel> {
        (loopback_dial())(&self.id, &self.endpoint).unwrap()
    }

    fn index(&self) -> Arc<FragmentIndex> {
        self.replicas.get(JOURNAL).unwrap().index().clone()
    }

    /// Appends `data` to the spool and commits it, as a replication stream would.
    async fn commit(&self, data: &[u8]) {
        let held = self.replicas.get(JOURNAL).unwrap().hold_spool().await;
        let content = ReplicateRequest {
            content: Bytes::copy_from_slice(data),
            ..ReplicateRequest::default()
        };
        held.must_apply(&content).await;
        let commit = ReplicateRequest {
            proposal: Some(held.next()),
            registers: Some(held.registers()),
            ..ReplicateRequest::default()
        };
        held.must_apply(&commit).await;
    }

    /// Rolls the spool to an empty fragment at `offset`.
    async fn roll_to(&self, offset: i64) {
        let held = self.replicas.get(JOURNAL).unwrap().hold_spool().await;
        let roll = ReplicateRequest {
            proposal: Some(Fragment {
                journal: JOURNAL.into(),
                begin: offset,
                end: offset,
                compression_codec: CompressionCodec::None as i32,
                ..Fragment::default()
            }),
            registers: Some(held.registers()),
            ..ReplicateRequest::default()
        };
        held.must_apply(&roll).await;
    }
}

fn content(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u64 * 7 + seed as u64) as u8 ^ (i >> 10) as u8)
        .collect()
}

fn read(offset: i64) -> ReadRequest {
    ReadRequest {
        journal: JOURNAL.into(),
        offset,
        ..ReadRequest::default()
    }
}

/// What a read streamed: its metadata responses, the sizes and bytes of its
/// content, and how it ended.
#[derive(Debug, Default)]
struct Streamed {
    meta: Vec<ReadResponse>,
    sizes: Vec<usize>,
    content: Vec<u8>,
    end: Option<tonic::Status>,
}

async fn stream(
    client: &mut JournalClient<tonic::transport::Channel>,
    req: tonic::Request<ReadRequest>,
) -> Streamed {
    let mut out = Streamed::default();
    let mut at = req.get_ref().offset;
    let mut answers = match client.read(req).await {
        Ok(answers) => answers.into_inner(),
        Err(status) => {
            out.end = Some(status);
            return out;
        }
    };
    loop {
        let next = tokio::time::timeout(PROMPTLY, answers.message());
        match next.await.expect("the read goes on") {
            Ok(Some(resp)) if resp.content.is_empty() => {
                at = resp.offset;
                out.meta.push(resp);
            }
            Ok(Some(resp)) => {
                assert_eq!(resp.offset, at, "content follows on");
                assert_eq!(
                    resp,
                    ReadResponse {
                        content: resp.content.clone(),
                        offset: at,
                        ..ReadResponse::default()
                    }
                );
                at += resp.content.len() as i64;
                out.sizes.push(resp.content.len());
                out.content.extend_from_slice(&resp.content);
            }
            Ok(None) => return out,
            Err(status) => {
                out.end = Some(status);
                return out;
            }
        }
    }
}

async fn read_via(broker: &Broker, req: ReadRequest) -> Streamed {
    stream(&mut broker.client(), tonic::Request::new(req)).await
}

fn status(resp: &ReadResponse) -> Status {
    Status::try_from(resp.status).unwrap()
}

#[tokio::test]
async fn a_spool_is_read_in_large_chunks_to_the_write_head() {
    let b = Broker::member().await;
    let data = content(2 * CHUNK + 999, 1);
    b.commit(&data).await;
    let got = read_via(&b, read(0)).await;
    assert!(got.end.is_none(), "{:?}", got.end);
    assert_eq!(got.content, data);
    assert_eq!(got.sizes, [CHUNK, CHUNK, 999]);
    let [first, last] = &got.meta[..] else {
        panic!("{:?}", got.meta)
    };
    assert_eq!(
        (status(first), first.offset, first.write_head),
        (Status::Ok, 0, data.len() as i64)
    );
    let hdr = first
        .header
        .as_ref()
        .expect("the first response has the header");
    assert_eq!(hdr.process_id, Some(member_a()));
    assert_eq!(hdr.etcd, Some(etcd(10)));
    let frag = first.fragment.as_ref().unwrap();
    assert_eq!(
        (frag.begin, frag.end, first.fragment_url.as_str()),
        (0, data.len() as i64, "")
    );
    // A non-blocking read ends where content does: not yet available.
    assert_eq!(status(last), Status::OffsetNotYetAvailable);
    assert_eq!(
        (last.offset, last.write_head, last.header.is_none()),
        (data.len() as i64, data.len() as i64, true)
    );
}

#[tokio::test]
async fn an_end_offset_bounds_the_read_across_fragments() {
    let b = Broker::member().await;
    let (one, two) = (content(CHUNK + 10, 2), content(CHUNK, 3));
    b.commit(&one).await;
    b.roll_to(one.len() as i64).await;
    b.commit(&two).await;
    let data = [one.clone(), two].concat();
    let (lo, hi) = (CHUNK as i64 - 1, 2 * CHUNK as i64 + 1);
    let got = read_via(
        &b,
        ReadRequest {
            end_offset: hi,
            ..read(lo)
        },
    )
    .await;
    assert!(got.end.is_none(), "{:?}", got.end);
    assert_eq!(got.content, &data[lo as usize..hi as usize]);
    // One metadata response per fragment, and nothing after the end offset.
    let begins: Vec<i64> = got
        .meta
        .iter()
        .map(|m| m.fragment.as_ref().unwrap().begin)
        .collect();
    assert_eq!(begins, [0, one.len() as i64]);
    assert_eq!(got.sizes, [11, CHUNK - 9]);
}

#[tokio::test]
async fn metadata_only_and_the_write_head() {
    let b = Broker::member().await;
    b.commit(b"hello, journal").await;
    let got = read_via(
        &b,
        ReadRequest {
            metadata_only: true,
            ..read(3)
        },
    )
    .await;
    assert_eq!(got.meta.len(), 1);
    assert!(got.content.is_empty() && got.end.is_none());
    assert_eq!((status(&got.meta[0]), got.meta[0].offset), (Status::Ok, 3));
    // -1 is the write head: nothing there yet, so one response, with the header.
    let got = read_via(&b, read(-1)).await;
    let [only] = &got.meta[..] else {
        panic!("{:?}", got.meta)
    };
    assert_eq!(
        (status(only), only.offset, only.write_head),
        (Status::OffsetNotYetAvailable, 14, 14)
    );
    assert!(only.header.is_some());
}

#[tokio::test]
async fn a_blocking_read_at_the_head_wakes_on_the_next_commit() {
    let b = Broker::member().await;
    b.commit(b"before").await;
    let req = ReadRequest {
        block: true,
        ..read(-1)
    };
    let mut answers = b.client().read(req).await.unwrap().into_inner();
    tokio::time::sleep(Duration::from_millis(50)).await;
    b.commit(b"after").await;
    let meta = tokio::time::timeout(PROMPTLY, answers.message())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(
        (status(&meta), meta.offset, meta.write_head),
        (Status::Ok, 6, 11)
    );
    let data = tokio::time::timeout(PROMPTLY, answers.message())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!((data.offset, &data.content[..]), (6, &b"after"[..]));
}

/// A member whose stores hold `[0, stored.len())`, and its spool what follows.
async fn stored_then_spooled(stored: &[u8], spooled: &[u8]) -> Broker {
    let b = Broker::member().await;
    let end = stored.len() as i64;
    b.host
        .stored
        .lock()
        .unwrap()
        .insert(0, Bytes::copy_from_slice(stored));
    let listed = Fragment {
        journal: JOURNAL.into(),
        begin: 0,
        end,
        compression_codec: CompressionCodec::Gzip as i32,
        backing_store: STORE.into(),
        mod_time: 1_700_000_000,
        ..Fragment::default()
    };
    b.index().replace_stored(vec![listed]).unwrap();
    b.roll_to(end).await;
    b.commit(spooled).await;
    b
}

#[tokio::test]
async fn stored_fragments_are_read_through_the_host_then_spools() {
    let (stored, spooled) = (content(600_000, 4), content(1000, 5));
    let b = stored_then_spooled(&stored, &spooled).await;
    let got = read_via(&b, read(0)).await;
    assert!(got.end.is_none(), "{:?}", got.end);
    assert_eq!(got.content, [stored.clone(), spooled].concat());
    // Store chunks are cut to the response size, without copies.
    assert_eq!(
        got.sizes,
        [CHUNK, STORE_CHUNK - CHUNK, CHUNK, STORE_CHUNK - CHUNK, 1000]
    );
    assert_eq!(got.meta[0].fragment_url, "signed:0-600000:60");
    assert_eq!(got.meta[1].fragment_url, "");
    // From inside the stored fragment to inside the spool.
    let got = read_via(
        &b,
        ReadRequest {
            end_offset: 600_010,
            ..read(599_990)
        },
    )
    .await;
    assert_eq!(
        got.content,
        [&stored[599_990..], &content(1000, 5)[..10]].concat()
    );
}

#[tokio::test]
async fn do_not_proxy_leaves_a_stored_fragment_to_the_client() {
    let b = stored_then_spooled(&content(1000, 6), b"spooled").await;
    let got = read_via(
        &b,
        ReadRequest {
            do_not_proxy: true,
            ..read(10)
        },
    )
    .await;
    assert!(got.content.is_empty() && got.end.is_none());
    let [only] = &got.meta[..] else {
        panic!("{:?}", got.meta)
    };
    assert_eq!(
        (status(only), only.offset, only.fragment_url.as_str()),
        (Status::Ok, 10, "signed:0-1000:60")
    );
    // A local fragment is still served.
    let got = read_via(
        &b,
        ReadRequest {
            do_not_proxy: true,
            ..read(1000)
        },
    )
    .await;
    assert_eq!(got.content, b"spooled");
}

#[tokio::test]
async fn a_failing_store_fails_the_read_with_its_words() {
    let b = stored_then_spooled(&content(700_000, 7), b"x").await;
    *b.host.store_fails.lock().unwrap() = Some("unexpected EOF reading fragment".into());
    let got = read_via(&b, read(0)).await;
    assert_eq!(got.sizes, [CHUNK, STORE_CHUNK - CHUNK]);
    let end = got.end.expect("the read fails");
    assert_eq!(
        (end.code(), end.message()),
        (Code::Unknown, "unexpected EOF reading fragment")
    );
}

/// A blocking read of all of the journal, once it read what there is.
async fn blocked_at_the_head(b: &Broker) -> tonic::Streaming<ReadResponse> {
    b.commit(b"some").await;
    let req = ReadRequest {
        block: true,
        ..read(0)
    };
    let mut answers = b.client().read(req).await.unwrap().into_inner();
    for _ in 0..2 {
        let msg = tokio::time::timeout(PROMPTLY, answers.message()).await;
        msg.unwrap().unwrap().expect("metadata, then content");
    }
    answers
}

#[tokio::test]
async fn blocked_reads_end_cleanly_when_the_replica_stops() {
    let b = Broker::member().await;
    let mut answers = blocked_at_the_head(&b).await;
    tokio::time::timeout(PROMPTLY, b.replicas.stop_all())
        .await
        .unwrap();
    let end = tokio::time::timeout(PROMPTLY, answers.message())
        .await
        .unwrap();
    assert!(matches!(end, Ok(None)), "{end:?}");
}

#[tokio::test]
async fn a_client_that_goes_away_ends_its_blocked_read() {
    let b = Broker::member().await;
    let baseline = Arc::strong_count(&b.host);
    let answers = blocked_at_the_head(&b).await;
    assert!(
        Arc::strong_count(&b.host) > baseline,
        "the read holds its context"
    );
    drop(answers);
    let deadline = tokio::time::Instant::now() + PROMPTLY;
    while Arc::strong_count(&b.host) > baseline {
        assert!(tokio::time::Instant::now() < deadline, "the read ended");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[test]
fn pieces_are_slices_of_the_chunk() {
    let chunk = Bytes::from(content(3 * CHUNK, 8));
    let cut = pieces(chunk.clone(), 2 * CHUNK + 5);
    assert_eq!(
        cut.iter().map(Bytes::len).collect::<Vec<_>>(),
        [CHUNK, CHUNK, 5]
    );
    assert_eq!(cut.concat(), &chunk[..2 * CHUNK + 5]);
    assert_eq!(cut[0].as_ptr(), chunk.as_ptr());
    assert_eq!(
        pieces(Bytes::from_static(b"abcdef"), 2),
        [Bytes::from_static(b"ab")]
    );
    assert!(pieces(Bytes::new(), 10).is_empty());
}

mod edges;
mod proxied;

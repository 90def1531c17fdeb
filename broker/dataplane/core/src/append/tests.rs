//! The append state machine against a real peer: this broker's registry,
//! replica and pipeline in-process, replicating to the native replica end of a
//! second broker on loopback ([`crate::replicate::tests::Broker`]). After the
//! Python `broker/tests/server/test_append_fsm.py`, transition by transition.

use std::sync::Mutex;
use std::time::Duration;

use bytes::Bytes;
use futures_util::stream;
use tonic::metadata::MetadataMap;

use super::*;
use crate::flow::{FlowClock, FlowLimits};
use crate::pipeline::Dial;
use crate::protocol::journal_client::JournalClient;
use crate::protocol::journal_server::JournalServer;
use crate::protocol::{journal_spec, process_spec, Label, LabelSelector, LabelSet};
use crate::registry::Registry;
use crate::registry::{Journal, Update};
use crate::replica::{BoxFuture, ReplicaSet};
use crate::replica::{LocalAssignment, ReplicaConfig};
use crate::replicate::tests::{
    etcd, id, local as peer_id, loopback_dial, primary as local_id, Broker, Host, JOURNAL,
};
use crate::spool::SpoolConfig;

const PROMPTLY: Duration = Duration::from_secs(10);

/// Answers for the Python broker; shared with the pulse's tests.
#[derive(Default)]
pub(crate) struct FakeDeps {
    pub(crate) index: Mutex<IndexSummary>,
    health_err: Mutex<Option<String>>,
    /// Revisions update_assignments and update_journal_spec answer.
    pub(crate) next_revision: Mutex<i64>,
    pub(crate) assignment_updates: Mutex<usize>,
    pub(crate) spec_updates: Mutex<Vec<JournalSpec>>,
    fence_err: Mutex<Option<String>>,
    fenced: Mutex<Vec<i64>>,
    pub(crate) resumes_at: Mutex<Option<i64>>,
    /// How often AwaitDesiredReplicas asked (once per append that got that far).
    pub(crate) replication_asked: Mutex<usize>,
}

impl AppendDeps for FakeDeps {
    fn flow_limits(&self) -> FlowLimits {
        FlowLimits::default()
    }
    fn check_lease(&self) -> Result<(), String> {
        Ok(())
    }
    fn dial(&self) -> Dial {
        loopback_dial()
    }
    fn peer_metadata(&self, _: &str, _: u32) -> MetadataMap {
        MetadataMap::new()
    }
    fn desired_replication(&self, spec: &JournalSpec) -> usize {
        *self.replication_asked.lock().unwrap() += 1;
        use journal_spec::suspend::Level;
        match spec.suspend.as_ref().map(|s| s.level) {
            Some(l) if l == Level::Partial as i32 => 1,
            Some(l) if l == Level::Full as i32 => 0,
            _ => spec.replication as usize,
        }
    }
    fn update_assignments(&self, _: &Resolution) -> BoxFuture<Result<i64, String>> {
        *self.assignment_updates.lock().unwrap() += 1;
        let revision = *self.next_revision.lock().unwrap();
        Box::pin(async move { Ok(revision) })
    }
    fn update_journal_spec(
        &self,
        _: &Resolution,
        spec: JournalSpec,
    ) -> BoxFuture<Result<i64, String>> {
        self.spec_updates.lock().unwrap().push(spec);
        let revision = *self.next_revision.lock().unwrap();
        Box::pin(async move { Ok(revision) })
    }
    fn store_healthy(&self, _: &JournalSpec) -> bool {
        self.health_err.lock().unwrap().is_none()
    }
    fn await_store_health(&self, _: &JournalSpec) -> BoxFuture<Option<String>> {
        let err = self.health_err.lock().unwrap().clone();
        Box::pin(async move { err })
    }
    fn index(&self, _: &str) -> IndexSummary {
        *self.index.lock().unwrap()
    }
    fn wait_first_refresh(&self, _: &str) -> BoxFuture<()> {
        Box::pin(async {})
    }
    fn head_resumes_at(&self, _: &str, _: i64) -> BoxFuture<Result<Option<i64>, String>> {
        let at = *self.resumes_at.lock().unwrap();
        Box::pin(async move { Ok(at) })
    }
    fn cover_fence(&self, _: &str, end: i64) -> Option<BoxFuture<Result<(), String>>> {
        self.fenced.lock().unwrap().push(end);
        let err = self.fence_err.lock().unwrap().clone();
        Some(Box::pin(async move { err.map_or(Ok(()), Err) }))
    }
}

/// This broker, primary of [`JOURNAL`], with its peer on loopback.
struct Primary {
    /// This broker's own endpoint, once it serves (see `serve`).
    endpoint: Mutex<String>,
    registry: Arc<Registry>,
    replicas: Arc<ReplicaSet>,
    deps: Arc<FakeDeps>,
    peer: Broker,
    _dir: tempfile::TempDir,
}

pub(crate) fn spec_of(members: usize) -> JournalSpec {
    JournalSpec {
        name: JOURNAL.into(),
        replication: members as i32,
        fragment: Some(journal_spec::Fragment {
            length: 1 << 20,
            compression_codec: crate::protocol::CompressionCodec::None as i32,
            ..journal_spec::Fragment::default()
        }),
        ..JournalSpec::default()
    }
}

impl Primary {
    async fn start() -> Primary {
        Primary::start_with(crate::replica::DEFAULT_RECOVERY_DELAY).await
    }

    /// With head gaps recovered after `recovery_delay`.
    async fn start_with(recovery_delay: Duration) -> Primary {
        let dir = tempfile::tempdir().unwrap();
        let config = ReplicaConfig {
            spool: Arc::new(SpoolConfig {
                directory: Some(dir.path().to_owned()),
                ..SpoolConfig::default()
            }),
            recovery_delay,
            ..ReplicaConfig::default()
        };
        let p = Primary {
            endpoint: Mutex::new("http://unused:1".into()),
            registry: Arc::new(Registry::new()),
            replicas: Arc::new(ReplicaSet::new(Arc::new(Host::default()), config)),
            deps: Arc::default(),
            peer: Broker::start().await,
            _dir: dir,
        };
        p.publish(10, vec![local_id(), peer_id()], 0, spec_of(2), true);
        p
    }

    /// Publishes the journal at `revision` here and at the peer.
    fn publish(
        &self,
        revision: i64,
        members: Vec<process_spec::Id>,
        primary: i32,
        spec: JournalSpec,
        consistent: bool,
    ) {
        self.peer.publish(revision, members.clone(), primary);
        let ours = members.contains(&local_id());
        self.replicas.update(
            ours.then(|| LocalAssignment {
                journal: JOURNAL.into(),
                primary: members.get(primary as usize) == Some(&local_id()),
                create_revision: 1,
                lease: 7,
                members: members.clone(),
            })
            .into_iter()
            .collect(),
        );
        let endpoints = vec![
            (local_id(), self.endpoint.lock().unwrap().clone()),
            (peer_id(), self.peer.endpoint.clone()),
            (id("c", "newer"), "http://unused:2".to_owned()),
        ];
        self.registry.publish(Update {
            etcd: etcd(revision),
            local_id: Some(local_id()),
            members: Some(endpoints),
            journals: vec![(
                JOURNAL.into(),
                Journal {
                    spec: Arc::new(spec),
                    route: crate::protocol::Route {
                        members,
                        primary,
                        endpoints: vec![],
                    },
                    consistent,
                },
            )],
            removed: vec![],
        });
    }

    fn ctx(&self) -> AppendContext {
        AppendContext {
            registry: self.registry.clone(),
            replicas: self.replicas.clone(),
            deps: self.deps.clone(),
            flow_clock: FlowClock::new(),
        }
    }

    fn fsm(&self, req: AppendRequest) -> AppendFsm {
        AppendFsm::new(self.ctx(), req, None)
    }

    /// Serves Append (and Replicate) of `ctx` on loopback; returns a client of it
    /// and its endpoint.
    async fn serve(
        &self,
        ctx: AppendContext,
    ) -> (JournalClient<tonic::transport::Channel>, String) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let endpoint = format!("http://{}", listener.local_addr().unwrap());
        let replicator = Arc::new(crate::replicate::Replicator {
            registry: ctx.registry.clone(),
            replicas: ctx.replicas.clone(),
            check_lease: Arc::new(|| Ok(())),
        });
        let service = crate::service::NativeJournal {
            replicator,
            appends: Some(ctx),
            reads: None,
            gate: Default::default(),
        };
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(JournalServer::new(service))
                .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
        );
        let client = JournalClient::new(
            tonic::transport::Endpoint::from_shared(endpoint.clone())
                .unwrap()
                .connect_lazy(),
        );
        (client, endpoint)
    }

    /// The stores hold the journal through `end` (and the index knows it).
    fn stored_through(&self, end: i64) {
        *self.deps.index.lock().unwrap() = IndexSummary {
            first_refresh_done: true,
            begin: 0,
            end,
            mod_time: 1,
        };
    }

    fn spool_end(&self) -> i64 {
        let slot = self.replicas.get(JOURNAL).unwrap();
        let held = slot
            .try_hold_pipeline()
            .expect("no append holds the pipeline");
        held.as_ref().map_or(-1, |p| p.spool().end())
    }

    async fn stop(self) {
        tokio::time::timeout(PROMPTLY, self.replicas.stop_all())
            .await
            .expect("replicas stop");
        self.peer.stop().await;
    }
}

fn append(journal: &str) -> AppendRequest {
    AppendRequest {
        journal: journal.into(),
        ..AppendRequest::default()
    }
}

fn chunks(parts: &[&'static [u8]]) -> impl Stream<Item = Result<AppendRequest, RpcStatus>> {
    let msgs: Vec<_> = parts
        .iter()
        .map(|p| {
            Ok(AppendRequest {
                content: Bytes::from_static(p),
                ..AppendRequest::default()
            })
        })
        .collect();
    stream::iter(msgs)
}

use futures_util::Stream;

async fn run(fsm: &mut AppendFsm, parts: &[&'static [u8]]) -> (i64, i64) {
    tokio::time::timeout(PROMPTLY, fsm.run(Some(chunks(parts))))
        .await
        .expect("the append ends")
        .0
}

#[tokio::test]
async fn an_append_commits_through_the_native_replica() {
    let p = Primary::start().await;
    let mut fsm = p.fsm(append(JOURNAL));
    let totals = run(&mut fsm, &[b"hello ", b"world", b""]).await;
    assert_eq!(fsm.state, State::Finished, "{:?}", fsm.err);
    assert_eq!(totals.0, 3);
    let committed = fsm.pln.as_ref().unwrap().spool().spec();
    assert_eq!((committed.begin, committed.end), (0, 11));
    // The peer committed the same fragment, SHA-1 and all.
    let peer = tokio::time::timeout(PROMPTLY, async {
        loop {
            let commits = p.peer.host.commits.lock().unwrap().clone();
            if commits.contains(&(0, 11)) {
                return commits;
            }
            drop(commits);
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("the peer commits");
    assert_eq!(peer.last(), Some(&(0, 11)));
    assert_eq!(*p.deps.fenced.lock().unwrap(), vec![11]);

    // The next append reuses the synchronised pipeline.
    let first = fsm.pln.clone().unwrap();
    let mut next = p.fsm(append(JOURNAL));
    run(&mut next, &[b"!", b""]).await;
    assert_eq!(next.state, State::Finished, "{:?}", next.err);
    assert!(Arc::ptr_eq(&first, next.pln.as_ref().unwrap()));
    assert_eq!(p.spool_end(), 12);
    p.stop().await;
}

#[tokio::test]
async fn a_pulse_commits_nothing_and_synchronises_the_route() {
    let p = Primary::start().await;
    let mut fsm = p.fsm(append(JOURNAL));
    tokio::time::timeout(PROMPTLY, fsm.run(None::<stream::Empty<_>>))
        .await
        .unwrap();
    assert_eq!(fsm.state, State::Finished, "{:?}", fsm.err);
    assert_eq!(p.spool_end(), 0);
    p.stop().await;
}

#[tokio::test]
async fn a_journal_not_found_is_its_status() {
    let p = Primary::start().await;
    let mut fsm = p.fsm(append("other/journal"));
    assert!(!fsm.run_to(State::StreamContent).await);
    assert_eq!(fsm.state, State::Error);
    assert_eq!(fsm.status(), Status::JournalNotFound as i32);
    assert!(fsm.err.is_none());
    p.stop().await;
}

#[tokio::test]
async fn an_append_to_a_journal_of_another_primary_proxies() {
    let p = Primary::start().await;
    p.publish(11, vec![local_id(), peer_id()], 1, spec_of(2), true);
    let mut fsm = p.fsm(append(JOURNAL));
    assert!(!fsm.run_to(State::StreamContent).await);
    assert_eq!(fsm.state, State::Proxy);
    assert_eq!(fsm.res().header.process_id, Some(peer_id()));
    // Proxying is refused with do_not_proxy.
    let mut fsm = p.fsm(AppendRequest {
        do_not_proxy: true,
        ..append(JOURNAL)
    });
    fsm.run_to(State::StreamContent).await;
    assert_eq!(fsm.status(), Status::NotJournalPrimaryBroker as i32);
    p.stop().await;
}

#[tokio::test]
async fn inconsistent_assignments_are_updated_then_read_through() {
    let p = Primary::start().await;
    p.publish(11, vec![local_id(), peer_id()], 0, spec_of(2), false);
    *p.deps.next_revision.lock().unwrap() = 12;
    let mut fsm = p.fsm(append(JOURNAL));
    let mut states = Vec::new();
    while fsm.state != State::UpdateAssignments {
        fsm.step().await;
        states.push(fsm.state);
    }
    fsm.step().await;
    assert_eq!(fsm.state, State::Resolve);
    assert_eq!(*p.deps.assignment_updates.lock().unwrap(), 1);
    // The resolution waits for the revision of the update.
    let waiting = tokio::time::timeout(Duration::from_millis(50), fsm.step()).await;
    assert!(waiting.is_err(), "resolving waits for revision 12");
    fsm.release_pipeline();
    drop(fsm);
    let mut fsm = p.fsm(append(JOURNAL));
    fsm.read_through_rev = 12;
    let publish = async {
        tokio::time::sleep(Duration::from_millis(20)).await;
        p.publish(12, vec![local_id(), peer_id()], 0, spec_of(2), true);
    };
    let reaching = tokio::time::timeout(PROMPTLY, fsm.run_to(State::StreamContent));
    let (_, reached) = tokio::join!(publish, reaching);
    let reached = reached.expect("the append proceeds once revision 12 is published");
    assert!(reached, "{:?} {:?}", fsm.state, fsm.err);
    fsm.release_pipeline();
    assert_eq!(
        states[..4],
        [
            State::AcquirePipeline,
            State::StartPipeline,
            State::SendPipelineSync,
            State::RecvPipelineSync
        ]
    );
    p.stop().await;
}

#[tokio::test]
async fn too_few_members_are_insufficient_and_too_many_are_waited_out() {
    let p = Primary::start().await;
    p.publish(11, vec![local_id(), peer_id()], 0, spec_of(3), true);
    let mut fsm = p.fsm(append(JOURNAL));
    fsm.run_to(State::StreamContent).await;
    assert_eq!(fsm.status(), Status::InsufficientJournalBrokers as i32);
    fsm.release_pipeline();

    p.publish(12, vec![local_id(), peer_id()], 0, spec_of(1), true);
    let mut fsm = p.fsm(append(JOURNAL));
    while fsm.state != State::AwaitDesiredReplicas {
        fsm.step().await;
    }
    fsm.step().await;
    assert_eq!((fsm.state, fsm.read_through_rev), (State::Resolve, 13));
    fsm.release_pipeline();
    p.stop().await;
}

#[tokio::test]
async fn client_stream_errors_roll_back() {
    let p = Primary::start().await;
    for (parts, why) in [
        (&[&b"abc"[..]][..], "append stream: unexpected EOF"),
        (
            &[&b"abc"[..], b"", b"more"][..],
            "append stream: expected EOF after empty Content chunk",
        ),
    ] {
        let mut fsm = p.fsm(append(JOURNAL));
        run(&mut fsm, parts).await;
        assert_eq!(fsm.state, State::Error);
        assert_eq!(fsm.err.as_ref().unwrap().message(), why);
        assert_eq!(p.spool_end(), 0); // Rolled back at every member.
    }
    // A register update needs content.
    let mut fsm = p.fsm(AppendRequest {
        union_registers: Some(LabelSet {
            labels: vec![Label {
                name: "owner".into(),
                value: "me".into(),
                prefix: false,
            }],
        }),
        ..append(JOURNAL)
    });
    run(&mut fsm, &[b""]).await;
    assert_eq!(
        fsm.err.as_ref().unwrap().message(),
        "append stream: register modification requires non-empty Append"
    );
    p.stop().await;
}

#[tokio::test]
async fn an_append_whose_fence_stays_low_is_committed_but_not_acknowledged() {
    let p = Primary::start().await;
    *p.deps.fence_err.lock().unwrap() = Some("etcd did not answer in time".into());
    let mut fsm = p.fsm(append(JOURNAL));
    run(&mut fsm, &[b"hello", b""]).await;
    assert_eq!(fsm.state, State::Error);
    assert_eq!(
        fsm.err.as_ref().unwrap().message(),
        "append to a/journal was committed at [0, 5) and is in the journal, but is not \
         acknowledged: its acknowledgement fence could not be raised (etcd did not answer \
         in time)"
    );
    assert_eq!(p.spool_end(), 5);
    p.stop().await;
}

#[tokio::test]
async fn a_failed_peer_fails_the_append_before_its_commit_goes_out() {
    let p = Primary::start().await;
    let mut fsm = p.fsm(append(JOURNAL));
    run(&mut fsm, &[b"ok", b""]).await;
    assert_eq!(fsm.state, State::Finished, "{:?}", fsm.err);
    let peer_replica = p.peer.replica();
    // The peer's replica goes away (its journal was re-assigned elsewhere).
    peer_replica.stop();
    let mut fsm = p.fsm(append(JOURNAL));
    run(&mut fsm, &[b"lost", b""]).await;
    assert_eq!(fsm.state, State::Error);
    let why = fsm.err.as_ref().unwrap().message().to_owned();
    assert!(why.contains("replication peer b/replica failed"), "{why}");
    p.stop().await;
}

mod preconditions;
mod rpc;

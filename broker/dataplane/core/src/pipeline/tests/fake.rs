//! Fake replica peers: in-process tonic `Journal` servers on loopback serving
//! only `Replicate`, by applying each request to a real spool as a replica broker
//! does, or as a test scripts them.

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::{ReceiverStream, TcpListenerStream};
use tokio_stream::{Stream, StreamExt};
use tonic::{Request, Response, Status, Streaming};

use crate::disk::AsyncSpool;
use crate::protocol::journal_server::{Journal, JournalServer};
use crate::protocol::*;
use crate::spool::{NullObserver, Spool, SpoolConfig};

pub const JOURNAL: &str = "a/journal";

/// Answers a request instead of the spool: `None` lets the spool apply it;
/// `Some(Err)` ends the stream with that status.
pub type Script =
    Arc<dyn Fn(&ReplicateRequest) -> Option<Result<ReplicateResponse, Status>> + Send + Sync>;

type Boxed<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send>>;

pub fn spool_in(dir: &std::path::Path) -> Arc<AsyncSpool> {
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

/// What a peer shares with its server's handlers.
pub struct PeerState {
    pub id: process_spec::Id,
    pub spool: Arc<AsyncSpool>,
    pub script: Mutex<Option<Script>>,
    pub headers: Mutex<Vec<Header>>,
    /// The `authorization` metadata of each stream opened (empty: none).
    pub tokens: Mutex<Vec<String>>,
    /// Every proposal taken, with whether it asked for an answer.
    pub proposals: Mutex<Vec<(Fragment, bool)>>,
    /// While true, the peer applies nothing (its disk or its network hangs).
    held: watch::Sender<bool>,
    /// While true, the peer reads nothing of new streams, and answers nothing.
    deaf: watch::Sender<bool>,
    /// Once true, every stream ends with UNAVAILABLE and the server stops.
    stopped: watch::Sender<bool>,
}

/// A replica on 127.0.0.1 (see the module documentation).
pub struct Peer {
    pub state: Arc<PeerState>,
    pub endpoint: String,
    served: Option<tokio::task::JoinHandle<()>>,
}

impl Peer {
    pub async fn start(suffix: &str, dir: &std::path::Path) -> Peer {
        let state = Arc::new(PeerState {
            id: process_spec::Id {
                zone: "b".into(),
                suffix: suffix.into(),
            },
            spool: spool_in(dir),
            script: Mutex::new(None),
            headers: Mutex::new(Vec::new()),
            proposals: Mutex::new(Vec::new()),
            tokens: Mutex::new(Vec::new()),
            held: watch::channel(false).0,
            deaf: watch::channel(false).0,
            stopped: watch::channel(false).0,
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let endpoint = format!("http://{}", listener.local_addr().unwrap());
        let mut stopped = state.stopped.subscribe();
        let server = tonic::transport::Server::builder()
            .add_service(JournalServer::new(Service(state.clone())))
            .serve_with_incoming_shutdown(TcpListenerStream::new(listener), async move {
                let _ = stopped.wait_for(|s| *s).await;
            });
        let served = tokio::spawn(async move {
            server.await.unwrap();
        });
        Peer {
            state,
            endpoint,
            served: Some(served),
        }
    }

    pub fn id(&self) -> process_spec::Id {
        self.state.id.clone()
    }

    pub fn script(&self, script: Script) {
        *self.state.script.lock().unwrap() = Some(script);
    }

    /// The peer applies nothing until [`release`](Self::release): a silent peer.
    pub fn hold(&self) {
        self.state.held.send_replace(true);
    }

    pub fn release(&self) {
        self.state.held.send_replace(false);
    }

    /// Streams opened from now on are never read nor answered.
    pub fn deafen(&self) {
        self.state.deaf.send_replace(true);
    }

    /// Ends every stream with UNAVAILABLE and stops serving (a peer that died).
    pub async fn stop(&mut self) {
        self.release();
        self.state.stopped.send_replace(true);
        if let Some(served) = self.served.take() {
            tokio::time::timeout(Duration::from_secs(10), served)
                .await
                .expect("the peer's server stops")
                .unwrap();
        }
    }
}

struct Service(Arc<PeerState>);

/// Serves one stream; `Err` ends it with that status.
async fn serve(
    state: &PeerState,
    requests: &mut Streaming<ReplicateRequest>,
    answers: &mpsc::Sender<Result<ReplicateResponse, Status>>,
) -> Result<(), Status> {
    while let Some(req) = requests.next().await {
        let req = req?;
        let _ = state.held.subscribe().wait_for(|held| !*held).await;
        if let Some(header) = &req.header {
            state.headers.lock().unwrap().push(header.clone());
        }
        if let Some(proposal) = &req.proposal {
            let taken = (proposal.clone(), req.acknowledge);
            state.proposals.lock().unwrap().push(taken);
        }
        let script = state.script.lock().unwrap().clone();
        let resp = match script.and_then(|s| s(&req)) {
            Some(resp) => resp?,
            None => state
                .spool
                .apply(&req, false)
                .await
                .map_err(|e| Status::internal(e.to_string()))?,
        };
        if req.acknowledge && answers.send(Ok(resp)).await.is_err() {
            return Ok(()); // The client went away.
        }
    }
    Ok(())
}

#[tonic::async_trait]
impl Journal for Service {
    type ListStream = Boxed<ListResponse>;
    type ReadStream = Boxed<ReadResponse>;
    type ReplicateStream = Boxed<ReplicateResponse>;

    async fn replicate(
        &self,
        req: Request<Streaming<ReplicateRequest>>,
    ) -> Result<Response<Self::ReplicateStream>, Status> {
        let token = req.metadata().get("authorization");
        let token = token.map_or("", |t| t.to_str().unwrap()).to_owned();
        self.0.tokens.lock().unwrap().push(token);
        let mut requests = req.into_inner();
        let (tx, rx) = mpsc::channel(16);
        let state = self.0.clone();
        let mut stopped = state.stopped.subscribe();
        let deaf = *state.deaf.borrow();
        tokio::spawn(async move {
            let served = async {
                if deaf {
                    // Holds the stream open, reading and answering nothing.
                    std::future::pending::<()>().await;
                }
                serve(&state, &mut requests, &tx).await
            };
            let end = tokio::select! {
                end = served => end,
                _ = stopped.wait_for(|s| *s) => Err(Status::unavailable("the peer stopped")),
            };
            if let Err(status) = end {
                let _ = tx.send(Err(status)).await;
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn list(&self, _: Request<ListRequest>) -> Result<Response<Self::ListStream>, Status> {
        Err(Status::unimplemented("list"))
    }

    async fn apply(&self, _: Request<ApplyRequest>) -> Result<Response<ApplyResponse>, Status> {
        Err(Status::unimplemented("apply"))
    }

    async fn read(&self, _: Request<ReadRequest>) -> Result<Response<Self::ReadStream>, Status> {
        Err(Status::unimplemented("read"))
    }

    async fn append(
        &self,
        _: Request<Streaming<AppendRequest>>,
    ) -> Result<Response<AppendResponse>, Status> {
        Err(Status::unimplemented("append"))
    }

    async fn list_fragments(
        &self,
        _: Request<FragmentsRequest>,
    ) -> Result<Response<FragmentsResponse>, Status> {
        Err(Status::unimplemented("list_fragments"))
    }

    async fn fragment_store_health(
        &self,
        _: Request<FragmentStoreHealthRequest>,
    ) -> Result<Response<FragmentStoreHealthResponse>, Status> {
        Err(Status::unimplemented("fragment_store_health"))
    }
}

//! The `protocol.Journal` RPCs the data plane serves itself, as a tonic service.
//!
//! The front door hands this service the RPCs served natively and forwards the
//! rest to the Python broker, so the methods not served here answer
//! `UNIMPLEMENTED` and are never reached through the door. Each RPC first checks
//! its bearer token for the capability it needs, as the Python edge does
//! (`gazette.broker.server.api`): a refusal is `UNAUTHENTICATED`.

use std::pin::Pin;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use futures_util::Stream;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

use crate::auth::Gate;
use crate::claims::{capability, Claims};
use crate::protocol::journal_server::Journal;
use crate::protocol::*;
use crate::replicate::Replicator;

type Boxed<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send>>;

/// How many answers of a stream may wait for the client before the server waits.
const ANSWERS_BUFFERED: usize = 32;

/// The natively served part of a broker's `protocol.Journal` service.
pub struct NativeJournal {
    pub replicator: Arc<Replicator>,
    /// The broker's keys (None: auth is off, every request goes through).
    pub gate: Option<Arc<Gate>>,
}

impl NativeJournal {
    /// The claims of a request's token for `require`; None when auth is off or the
    /// request may go without a token.
    fn claims<T>(&self, req: &Request<T>, require: u32) -> Result<Option<Claims>, Status> {
        let Some(gate) = &self.gate else {
            return Ok(None);
        };
        let authorization = req.metadata().get("authorization").map(|v| v.as_bytes());
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs_f64();
        let claims = gate
            .claims(authorization, now)
            .map_err(Status::unauthenticated)?;
        if let Some(claims) = &claims {
            claims
                .check_capability(require)
                .map_err(Status::unauthenticated)?;
        }
        Ok(claims)
    }
}

fn not_here(rpc: &str) -> Status {
    Status::unimplemented(format!(
        "{rpc} is served by the Python broker, not the data plane"
    ))
}

#[tonic::async_trait]
impl Journal for NativeJournal {
    type ListStream = Boxed<ListResponse>;
    type ReadStream = Boxed<ReadResponse>;
    type ReplicateStream = Boxed<ReplicateResponse>;

    async fn replicate(
        &self,
        req: Request<Streaming<ReplicateRequest>>,
    ) -> Result<Response<Self::ReplicateStream>, Status> {
        let claims = self.claims(&req, capability::REPLICATE)?;
        let requests = req.into_inner();
        let (tx, rx) = mpsc::channel(ANSWERS_BUFFERED);
        let replicator = self.replicator.clone();
        // The stream is served on a task of its own: it must run to its end (and
        // give back its spool) even once the client has gone.
        tokio::spawn(async move {
            if let Err(status) = replicator.serve(claims, requests, &tx).await {
                let _ = tx.send(Err(status)).await;
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn list(&self, _: Request<ListRequest>) -> Result<Response<Self::ListStream>, Status> {
        Err(not_here("List"))
    }

    async fn apply(&self, _: Request<ApplyRequest>) -> Result<Response<ApplyResponse>, Status> {
        Err(not_here("Apply"))
    }

    async fn read(&self, _: Request<ReadRequest>) -> Result<Response<Self::ReadStream>, Status> {
        Err(not_here("Read"))
    }

    async fn append(
        &self,
        _: Request<Streaming<AppendRequest>>,
    ) -> Result<Response<AppendResponse>, Status> {
        Err(not_here("Append"))
    }

    async fn list_fragments(
        &self,
        _: Request<FragmentsRequest>,
    ) -> Result<Response<FragmentsResponse>, Status> {
        Err(not_here("ListFragments"))
    }

    async fn fragment_store_health(
        &self,
        _: Request<FragmentStoreHealthRequest>,
    ) -> Result<Response<FragmentStoreHealthResponse>, Status> {
        Err(not_here("FragmentStoreHealth"))
    }
}

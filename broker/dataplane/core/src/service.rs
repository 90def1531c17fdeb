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

use crate::append::{AppendContext, AppendFsm, State};
use crate::auth::SharedGate;
use crate::claims::{capability, Claims};
use crate::protocol::journal_server::Journal;
use crate::protocol::*;
use crate::read::ReadContext;
use crate::replicate::{instant_of, Replicator};

type Boxed<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send>>;

/// How many answers of a stream may wait for the client before the server waits.
const ANSWERS_BUFFERED: usize = 32;

pub use crate::append::ABORT_GRACE;

/// How many responses of a read may wait for the client: its next chunk is read
/// while the one before goes out, and a slow client holds little memory.
const READ_AHEAD: usize = 2;

/// The natively served part of a broker's `protocol.Journal` service.
pub struct NativeJournal {
    pub replicator: Arc<Replicator>,
    /// Where appends run (None: Append is not served here).
    pub appends: Option<AppendContext>,
    /// Where reads run (None: Read is not served here).
    pub reads: Option<ReadContext>,
    /// The broker's keys as they are now (None inside: auth is off, every request
    /// goes through).
    pub gate: SharedGate,
}

impl NativeJournal {
    /// The claims of a request's token for `require`; None when auth is off or the
    /// request may go without a token.
    fn claims<T>(&self, req: &Request<T>, require: u32) -> Result<Option<Claims>, Status> {
        let Some(gate) = crate::auth::current(&self.gate) else {
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

/// Aborts an append when the RPC's handler is dropped (its client went away).
struct AbortOnDrop(Arc<crate::append::Abort>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Reads and drops what is left of a refused request's stream, for at most
/// [`crate::frontdoor::DRAIN_TIMEOUT`] (the Python broker's `api._drain`).
async fn drain<T>(mut requests: Streaming<T>) {
    let _ = tokio::time::timeout(crate::frontdoor::DRAIN_TIMEOUT, async {
        while let Ok(Some(_)) = requests.message().await {}
    })
    .await;
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
        let claims = match self.claims(&req, capability::REPLICATE) {
            Ok(claims) => claims,
            Err(refused) => {
                // As a refused Append: answered while the peer still writes, grpcio's
                // client reports its own INTERNAL rather than why.
                drain(req.into_inner()).await;
                return Err(refused);
            }
        };
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

    async fn read(&self, req: Request<ReadRequest>) -> Result<Response<Self::ReadStream>, Status> {
        let Some(ctx) = self.reads.clone() else {
            return Err(not_here("Read"));
        };
        let claims = self.claims(&req, capability::READ)?;
        let req = req.into_inner();
        crate::validation::validate_read_request(&req).map_err(crate::replicate::invalid)?;
        let (tx, rx) = mpsc::channel(READ_AHEAD);
        tokio::spawn(async move {
            // As Gazette, a read lasts no longer than its token.
            let deadline = claims.as_ref().map(|c| instant_of(c.expires_at));
            let served = crate::read::serve(&ctx, claims.as_ref(), req, &tx);
            let bounded = async {
                match deadline {
                    None => served.await,
                    Some(at) => tokio::time::timeout_at(at, served)
                        .await
                        .unwrap_or_else(|_| {
                            Err(Status::deadline_exceeded("context deadline exceeded"))
                        }),
                }
            };
            // A client that went away ends the read, blocked or not.
            let outcome = tokio::select! {
                outcome = bounded => outcome,
                () = tx.closed() => return,
            };
            if let Err(status) = outcome {
                if status.code() != tonic::Code::Cancelled {
                    tracing::warn!("served Read RPC failed: {}", status.message());
                }
                let _ = tx.send(Err(status)).await;
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn append(
        &self,
        req: Request<Streaming<AppendRequest>>,
    ) -> Result<Response<AppendResponse>, Status> {
        let Some(ctx) = self.appends.clone() else {
            return Err(not_here("Append"));
        };
        let claims = match self.claims(&req, capability::APPEND) {
            Ok(claims) => claims,
            Err(refused) => {
                // Answered while it still writes, grpcio's asyncio client (the HTTP
                // gateway's, for one) reports its own INTERNAL rather than why.
                drain(req.into_inner()).await;
                return Err(refused);
            }
        };
        let mut requests = req.into_inner();
        let first = match requests.message().await? {
            None => return Err(Status::unknown("append stream: unexpected EOF")),
            Some(first) => first,
        };
        crate::validation::validate_append_request(&first).map_err(crate::replicate::invalid)?;
        if first.journal.is_empty() {
            // A content chunk is a valid message, but the first must name its journal:
            // refused with the text a Read of an empty journal gets.
            let why = crate::validation::validate_journal("")
                .err()
                .map_or_else(String::new, |e| e.to_string());
            return Err(Status::unknown(format!("Journal: {why}")));
        }
        // The append runs on a task of its own: a client that goes away aborts it,
        // and it gets ABORT_GRACE to leave its pipeline in order before it is torn
        // down; it never stops half-way through content or acknowledgements.
        let mut fsm = AppendFsm::new(ctx.clone(), first, claims);
        let aborted = fsm.aborted.clone();
        let _abort_on_drop = AbortOnDrop(aborted.clone());
        let appended = tokio::spawn(async move {
            let gone = async move { aborted.wait().await };
            match fsm.run_bounded(Some(requests), gone).await {
                Some((totals, rest)) => {
                    let rest = rest.filter(|_| fsm.state == State::Proxy);
                    (fsm, totals, rest)
                }
                None => (fsm, (0, 0), None),
            }
        });
        let (fsm, (total, delayed), rest) = appended
            .await
            .map_err(|e| Status::internal(format!("append task failed: {e}")))?;
        if fsm.state == State::Proxy {
            let rest = rest.expect("kept for the proxy");
            return crate::append::proxy::forward(&ctx, &fsm, rest)
                .await
                .map(Response::new);
        }
        let Some(res) = fsm.resolved.as_ref() else {
            return Err(fsm
                .err
                .unwrap_or_else(|| Status::unknown("append failed without a cause")));
        };
        if fsm.state == State::Finished {
            return Ok(Response::new(AppendResponse {
                status: crate::protocol::Status::Ok as i32,
                header: Some(res.header.clone()),
                commit: fsm.client_fragment().cloned(),
                registers: Some(fsm.registers().clone()),
                total_chunks: total,
                delayed_chunks: delayed,
                ..AppendResponse::default()
            }));
        }
        if res.status != crate::protocol::Status::Ok as i32 {
            let mut resp = AppendResponse {
                status: res.status,
                header: Some(res.header.clone()),
                ..AppendResponse::default()
            };
            if res.status == crate::protocol::Status::RegisterMismatch as i32 {
                resp.registers = Some(fsm.registers().clone());
            }
            if res.status == crate::protocol::Status::FragmentStoreUnhealthy as i32 {
                resp.store_health_error = fsm
                    .err
                    .as_ref()
                    .map(|e| e.message().to_owned())
                    .unwrap_or_default();
            }
            return Ok(Response::new(resp));
        }
        Err(fsm
            .err
            .unwrap_or_else(|| Status::unknown("append failed without a cause")))
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

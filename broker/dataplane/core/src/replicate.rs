//! The replica end of the `Replicate` RPC: the Rust port of the Python
//! `JournalServicer.Replicate` (`gazette.broker.server.api`, after Gazette's
//! `broker/replicate_api.go`).
//!
//! A primary opens one stream per peer of its pipeline. Its first message carries
//! the primary's header (route and etcd revision) and a proposal; the replica
//! resolves the journal no earlier than that revision, refuses a route that is not
//! the journal's (`WRONG_ROUTE`, answered as a status, not an error), then takes
//! its replica's spool for the life of the stream and applies every message to it:
//! content is written, proposals commit, roll or roll back, and answers go back
//! when the primary asks for them.
//!
//! What the stream tells of the journal feeds the partition rules (see
//! [`crate::replica`]): the primary proposes only once every member took the
//! previous proposal, so each proposal confirms the one accepted before it; and
//! when the primary rolls this replica to the very end it reported in a
//! `PROPOSAL_MISMATCH`, the route goes on from this replica's content, which is
//! then adopted rather than held.
//!
//! A stream ends with the primary's EOF, or broken (the primary died, or was cut
//! off, or its route is no longer the journal's): a broken stream's replica
//! stores what it committed at once, since it may be the only copy. Either way
//! uncommitted content is rolled back before the spool is given back.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures_util::{Stream, StreamExt};
use tokio::sync::{mpsc, watch};
use tonic::Status as RpcStatus;

use crate::claims::Claims;
use crate::protocol::{Fragment, ReplicateRequest, ReplicateResponse, Route, Status};
use crate::registry::{route_equivalent, Query, Registry};
use crate::replica::{stopped_status, HeldSpool, Replica, ReplicaSet};
use crate::spool::SpoolError;
use crate::validation::validate_replicate_request;

/// Whether this broker may take part in writes now: Err with the reason when its
/// etcd lease may have expired or it is cut off from its peers (Python's
/// `Service.check_lease`). A replica past its lease must not help an old primary
/// commit.
pub type LeaseCheck = Arc<dyn Fn() -> Result<(), String> + Send + Sync>;

/// Serves Replicate streams against a broker's registry and replicas.
pub struct Replicator {
    pub registry: Arc<Registry>,
    pub replicas: Arc<ReplicaSet>,
    pub check_lease: LeaseCheck,
}

fn unknown(message: impl Into<String>) -> RpcStatus {
    RpcStatus::unknown(message)
}

/// A request that breaks the protocol's rules (Python's `pb.ValidationError`).
pub(crate) fn invalid(e: impl std::fmt::Display) -> RpcStatus {
    RpcStatus::unknown(e.to_string())
}

fn route_changed(journal: &str) -> RpcStatus {
    RpcStatus::unavailable(format!(
        "{journal}: the route of this replication stream is no longer the journal's (its \
         primary was replaced)"
    ))
}

/// A spool's failure as the Python broker answers it.
fn spool_error(e: SpoolError) -> RpcStatus {
    match e {
        e if e.is_write_error() => RpcStatus::unavailable(e.to_string()),
        e @ SpoolError::InvalidContentDelta { .. } => RpcStatus::unknown(e.to_string()),
        e => unknown(e.to_string()),
    }
}

/// The tokio instant of a token's expiry (seconds since the epoch).
pub(crate) fn instant_of(expires_at: f64) -> tokio::time::Instant {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs_f64();
    let left = Duration::try_from_secs_f64((expires_at - now).max(0.0)).unwrap_or(Duration::MAX);
    tokio::time::Instant::now()
        .checked_add(left)
        .unwrap_or_else(|| tokio::time::Instant::now() + Duration::from_secs(86400 * 365))
}

/// What the stream resolved to: the replica, its spool, and the first answer's header.
struct Served {
    replica: Arc<Replica>,
    held: HeldSpool,
    resolution: crate::registry::Resolution,
}

impl Replicator {
    /// Serves one stream: `requests` as they arrive, `answers` for the responses.
    /// Err ends the stream with that status (after the answers sent before it).
    pub async fn serve<S>(
        &self,
        claims: Option<Claims>,
        mut requests: S,
        answers: &mpsc::Sender<Result<ReplicateResponse, RpcStatus>>,
    ) -> Result<(), RpcStatus>
    where
        S: Stream<Item = Result<ReplicateRequest, RpcStatus>> + Unpin + Send,
    {
        let req = match requests.next().await {
            None => return Err(unknown("unexpected EOF")),
            Some(req) => req?,
        };
        validate_replicate_request(&req).map_err(invalid)?;
        let (Some(header), Some(proposal)) = (req.header.clone(), req.proposal.as_ref()) else {
            return Err(unknown("expected first ReplicateRequest to have Header"));
        };
        let journal = proposal.journal.clone();
        (self.check_lease)().map_err(RpcStatus::unavailable)?;

        // Gazette bounds the wait for the spool by the token's expiry, but not the
        // stream that follows: a pipeline outlives the token that opened it.
        let deadline = claims.as_ref().map(|c| instant_of(c.expires_at));
        let taken = async {
            let authorized = claims
                .as_ref()
                .map(|c| move |spec: &crate::protocol::JournalSpec| c.allows(spec));
            let authorized = authorized
                .as_ref()
                .map(|f| f as &(dyn Fn(&crate::protocol::JournalSpec) -> bool + Sync));
            loop {
                let query = Query {
                    may_proxy: false,
                    require_primary: false,
                    proxy_header: Some(&header),
                    authorized,
                    ..Query::default()
                };
                let res = self
                    .registry
                    .resolve(&journal, query)
                    .await
                    .map_err(|e| e.to_status())?;
                let route = res.header.route.clone().unwrap_or_default();
                let refusal = if res.status() != Status::Ok {
                    Some(res.status)
                } else if !route_equivalent(
                    &route,
                    header.route.as_ref().unwrap_or(&Route::default()),
                ) {
                    Some(Status::WrongRoute as i32)
                } else {
                    None
                };
                if let Some(status) = refusal {
                    return Ok(Err(ReplicateResponse {
                        status,
                        header: Some(res.header),
                        ..ReplicateResponse::default()
                    }));
                }
                let Some(replica) = self.replicas.get(&journal) else {
                    return Err(stopped_status(&journal));
                };
                let mut invalidated = res.invalidated.clone();
                tokio::select! {
                    held = replica.hold_spool() => {
                        return Ok(Ok(Served { replica, held, resolution: res }));
                    }
                    _ = invalidated.changed() => continue,
                    () = replica.stopped() => return Err(stopped_status(&journal)),
                }
            }
        };
        let taken = match deadline {
            None => taken.await,
            Some(at) => tokio::time::timeout_at(at, taken)
                .await
                .map_err(|_| RpcStatus::deadline_exceeded("context deadline exceeded"))?,
        };
        let served = match taken? {
            Err(refusal) => {
                let _ = answers.send(Ok(refusal)).await;
                return Ok(());
            }
            Ok(served) => served,
        };

        let route = header.route.clone().unwrap_or_default();
        let (changed_tx, changed) = watch::channel(false);
        let watcher = tokio::spawn(watch_route(
            self.registry.clone(),
            self.replicas.clone(),
            journal.clone(),
            route,
            served.replica.clone(),
            served.resolution.invalidated.clone(),
            changed_tx,
        ));
        let Served {
            replica,
            held,
            resolution,
        } = served;
        let mut stream = Stream_ {
            replica: &replica,
            held: &held,
            journal: &journal,
            changed,
        };
        let (result, broken) = stream
            .run(req, resolution.header, &mut requests, answers)
            .await;
        watcher.abort();
        // Whatever ended the stream, uncommitted content is rolled back.
        replica.return_spool(held, broken).await;
        result
    }
}

/// One stream that holds its replica's spool.
struct Stream_<'a> {
    replica: &'a Arc<Replica>,
    held: &'a HeldSpool,
    journal: &'a str,
    changed: watch::Receiver<bool>,
}

impl Stream_<'_> {
    /// Applies requests until the primary's EOF or a failure; returns the outcome
    /// and whether the stream broke (anything but the primary's EOF).
    async fn run<S>(
        &mut self,
        mut req: ReplicateRequest,
        header: crate::protocol::Header,
        requests: &mut S,
        answers: &mpsc::Sender<Result<ReplicateResponse, RpcStatus>>,
    ) -> (Result<(), RpcStatus>, bool)
    where
        S: Stream<Item = Result<ReplicateRequest, RpcStatus>> + Unpin + Send,
    {
        let mut header = Some(header);
        // Until the first content, proposals are the pipeline's synchronisation,
        // whose rolls are stored at once; rolls amid appends wait out the
        // persister's replica delay, as the primary normally stores first.
        let mut synchronising = true;
        // The proposal accepted last, which the next proposal confirms.
        let mut accepted: Option<Fragment> = None;
        // The end we told the primary in a PROPOSAL_MISMATCH, and whether the
        // primary then rolled us to exactly it (the route goes on from our content).
        let mut reported_end = -1;
        let mut adopt_at = -1;
        loop {
            let is_proposal = req.proposal.is_some();
            synchronising = synchronising && is_proposal;
            if is_proposal {
                if let Some(prev) = accepted.take() {
                    self.held.confirm(prev.end).await;
                    self.held.record_confirmed(None, None, false).await;
                    let (head, adopt) = if adopt_at >= 0 {
                        (adopt_at, true)
                    } else {
                        (self.held.begin(), false)
                    };
                    self.replica.settle_held(head, adopt);
                    adopt_at = -1;
                }
            }
            let applied = {
                let _at_once = synchronising.then(|| self.replica.storing_at_once());
                self.held.apply(&req, false).await
            };
            let mut resp = match applied {
                Ok(resp) => resp,
                Err(e) => return (Err(spool_error(e)), true),
            };
            if let Some(proposal) = &req.proposal {
                if resp.status == Status::Ok as i32 {
                    if proposal.begin == proposal.end && proposal.end == reported_end {
                        adopt_at = reported_end;
                    }
                    accepted = Some(proposal.clone());
                } else {
                    reported_end = resp.fragment.as_ref().map_or(-1, |f| f.end);
                }
            }
            if req.acknowledge {
                resp.header = header.take(); // Only the first answer carries it.
                if answers.send(Ok(resp)).await.is_err() {
                    return (Err(RpcStatus::cancelled("context canceled")), true);
                }
            } else if resp.status != Status::Ok as i32 {
                let why = format!("no ack requested but status != OK: {resp:?}");
                return (Err(RpcStatus::unavailable(why)), true);
            }
            if *self.changed.borrow() {
                return (Err(route_changed(self.journal)), true);
            }
            // Only a wait for the next message is cut by a route change, never an
            // apply: a spool is not left half-way through a request.
            let next = tokio::select! {
                next = requests.next() => next,
                _ = self.changed.wait_for(|c| *c) => {
                    return (Err(route_changed(self.journal)), true);
                }
            };
            req = match next {
                None => return (Ok(()), false), // The primary's EOF.
                Some(Err(status)) => return (Err(status), true),
                Some(Ok(req)) => match validate_replicate_request(&req) {
                    Ok(()) => req,
                    Err(e) => return (Err(invalid(e)), true),
                },
            };
        }
    }
}

/// Sets `changed` once `replica`'s resolution is not the stream's any more: the
/// journal resolves elsewhere, to another replica, or over another route (or the
/// replica stops). A primary cut off from etcd keeps its streams to its peers, and
/// each holds a peer's spool: without this, it would go on committing there after
/// its lease, and the journal's next primary would wait for that spool for the
/// whole partition.
async fn watch_route(
    registry: Arc<Registry>,
    replicas: Arc<ReplicaSet>,
    journal: String,
    route: Route,
    replica: Arc<Replica>,
    invalidated: watch::Receiver<u64>,
    changed: watch::Sender<bool>,
) {
    let query = Query {
        may_proxy: false,
        require_primary: false,
        ..Query::default()
    };
    let same = |res: &crate::registry::Resolution| {
        res.status() == Status::Ok
            && replicas
                .get(&journal)
                .is_some_and(|r| Arc::ptr_eq(&r, &replica))
            && res
                .header
                .route
                .as_ref()
                .is_some_and(|r| route_equivalent(r, &route))
    };
    tokio::select! {
        () = registry.until_changed(&journal, query, invalidated, same) => {}
        () = replica.stopped() => {}
    }
    changed.send_replace(true);
}

#[cfg(test)]
pub(crate) mod tests;

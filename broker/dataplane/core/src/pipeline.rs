//! A primary's replication pipeline: the Rust port of the Python
//! `gazette.broker.server.pipeline`, itself after Gazette's `broker/pipeline.go`.
//!
//! A [`Pipeline`] holds the primary's spool and one `Replicate` stream to every
//! other member of the journal's route. [`Pipeline::scatter`] sends a request to
//! every peer and applies it to the local spool; the `gather_*` methods read one
//! answer per peer. Appends are pipelined: the next append streams its content
//! while earlier ones still await their acknowledgements, and
//! [`Pipeline::barrier`] hands the receiving side over in the order appends sent
//! (a chain of gates, each append waiting on its predecessor's).
//!
//! Every method takes `&self`: the append that holds the pipeline sends while the
//! appends before it read, so it is shared (`Arc<Pipeline>`). The sending side
//! and the receiving side each sit behind an async mutex of their own, which
//! their single users (the holder; the append whose turn the barrier gave) never
//! contend for; what failed sits behind a plain mutex, never held across a wait.
//!
//! No wait on a peer is unbounded: a peer behind a network partition neither
//! fails nor answers, so each write to and read from one gives up after the
//! pipeline's timeout ([`REPLICATION_TIMEOUT`]), or at once after
//! [`Pipeline::interrupt`].

mod peer;

use std::fmt;
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::watch;
use tonic::metadata::MetadataMap;
use tonic::transport::Channel;

use crate::disk::{fmt_g, AsyncSpool};
use crate::protocol::journal_client::JournalClient;
use crate::protocol::{process_spec, Header, ReplicateRequest, ReplicateResponse, Route, Status};
use crate::registry::route_equivalent;
use crate::spool::SpoolError;
pub(crate) use peer::describe_status;
use peer::{Peer, PeerReceiver, PeerSender};

/// How long a peer may take to take a `Replicate` message or to answer one.
///
/// A peer behind a network partition neither fails nor answers (TCP retransmits
/// for many minutes): without a bound, an append to it would hang until its
/// client's deadline, and its journal with it. Peers answer in milliseconds; a
/// replica whose spool disk is stuck fails its write after
/// `--broker.spool-write-timeout` (10 s).
pub const REPLICATION_TIMEOUT: Duration = Duration::from_secs(15);

/// Why dialing a peer failed.
pub type DialError = Box<dyn std::error::Error + Send + Sync>;

/// Yields a Journal client of (member id, endpoint). The broker dials its shared
/// channels; tests dial servers on loopback. Called on the async runtime: it
/// must not block (connect lazily).
pub type Dial =
    Arc<dyn Fn(&process_spec::Id, &str) -> Result<JournalClient<Channel>, DialError> + Send + Sync>;

/// Takes the primary's spool back once the pipeline is done with it (its replica
/// keeps it for the next pipeline).
pub type ReturnSpool = Box<dyn FnOnce(Arc<AsyncSpool>) + Send>;

/// What broke a pipeline.
#[derive(Clone, Debug, thiserror::Error)]
pub enum PipelineError {
    /// The primary's own spool failed (a stalled or full disk), said as it is.
    #[error(transparent)]
    Spool(Arc<SpoolError>),
    /// A replication peer failed, or answered in a way the primary can't accept.
    #[error("replication peer {peer} failed: {message}")]
    Peer { peer: String, message: String },
}

/// `zone/suffix`, as errors name members.
pub fn id_str(id: &process_spec::Id) -> String {
    format!("{}/{}", id.zone, id.suffix)
}

/// What [`Pipeline::gather_sync`] found: how the primary proceeds.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SyncOutcome {
    /// A peer is further along: roll every member forward to this offset (0: none).
    pub roll_to: i64,
    /// The registers of the peer furthest along, to roll to with it.
    pub roll_registers: Option<crate::protocol::LabelSet>,
    /// A peer knows a newer route: read etcd through this revision (0: none).
    pub read_through: i64,
}

/// The gate an append waits on before it reads its acknowledgements: the previous
/// append has read its own (see [`Pipeline::barrier`]).
pub struct WaitFor(watch::Receiver<bool>);

impl WaitFor {
    /// Waits until the previous append opened its [`CloseAfter`] (or dropped it).
    pub async fn wait(mut self) {
        // An error is a sender dropped: its Drop opened the gate first.
        let _ = self.0.wait_for(|open| *open).await;
    }
}

/// The gate an append opens once it read its acknowledgements, letting the next
/// append read. Dropping it opens it too, so an append cancelled half-way never
/// holds up those behind it.
pub struct CloseAfter(watch::Sender<bool>);

impl CloseAfter {
    pub fn open(&self) {
        self.0.send_replace(true);
    }
}

impl Drop for CloseAfter {
    fn drop(&mut self) {
        self.open();
    }
}

fn opened_gate() -> watch::Receiver<bool> {
    watch::channel(true).1
}

struct State {
    // Per member, as described text ("CODE: message"); the primary's own failure
    // is `local_err`.
    send_errs: Vec<Option<String>>,
    recv_errs: Vec<Option<String>>,
    local_err: Option<Arc<SpoolError>>,
    // Set once a proposal could not be sent safely (see break_off): nothing more is.
    broken: Option<PipelineError>,
    read_barrier: watch::Receiver<bool>,
    return_spool: Option<ReturnSpool>,
}

/// A primary's replication pipeline; see the module documentation.
///
/// Its owner ends it with [`shutdown`](Self::shutdown) or [`abort`](Self::abort),
/// which hand the spool back; dropping it only ends its peers' calls.
pub struct Pipeline {
    header: Header,
    route: Route,
    spool: Arc<AsyncSpool>,
    timeout: Duration,
    // Per member; None for the primary and for peers that could not be dialed.
    peers: Vec<Option<Peer>>,
    senders: tokio::sync::Mutex<Vec<Option<PeerSender>>>,
    receivers: tokio::sync::Mutex<Vec<Option<PeerReceiver>>>,
    state: Mutex<State>,
    // Why waits on peers were cut short (see interrupt), once they were.
    interrupted: watch::Sender<Option<String>>,
}

impl fmt::Debug for Pipeline {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let members: Vec<String> = self.route.members.iter().map(id_str).collect();
        write!(f, "Pipeline<{:?} to {members:?}>", self.spool)
    }
}

/// Why a bounded wait on a peer gave up.
enum Cut {
    Timeout,
    Interrupted(String),
}

impl Pipeline {
    /// A pipeline over `header`'s route (which must have a primary, this broker)
    /// holding `spool`, with each write to and read from a peer bounded by
    /// `timeout` ([`REPLICATION_TIMEOUT`] in a broker). `metadata` goes with every
    /// `Replicate` call (the broker's own token, if any). A peer that can't be
    /// dialed is recorded as failed ([`send_err`](Self::send_err)). Must run on
    /// the async runtime: each peer's call runs on a task of its own.
    pub fn new(
        header: Header,
        spool: Arc<AsyncSpool>,
        return_spool: ReturnSpool,
        dial: &Dial,
        metadata: MetadataMap,
        timeout: Duration,
    ) -> Pipeline {
        let route = header.route.clone().unwrap_or_default();
        assert!(route.primary != -1, "a pipeline needs a primary");
        let n = route.members.len();
        let mut peers = Vec::with_capacity(n);
        let mut senders = Vec::with_capacity(n);
        let mut receivers = Vec::with_capacity(n);
        let mut send_errs = vec![None; n];
        for (i, member) in route.members.iter().enumerate() {
            let dialed = if i == route.primary as usize {
                None
            } else {
                let endpoint = route.endpoints.get(i).map_or("", String::as_str);
                match dial(member, endpoint) {
                    Ok(client) => Some(Peer::start(client, metadata.clone())),
                    Err(e) => {
                        send_errs[i] = Some(e.to_string());
                        None
                    }
                }
            };
            match dialed {
                Some((peer, tx, rx)) => {
                    peers.push(Some(peer));
                    senders.push(Some(tx));
                    receivers.push(Some(rx));
                }
                None => {
                    peers.push(None);
                    senders.push(None);
                    receivers.push(None);
                }
            }
        }
        Pipeline {
            header,
            route,
            spool,
            timeout,
            peers,
            senders: tokio::sync::Mutex::new(senders),
            receivers: tokio::sync::Mutex::new(receivers),
            state: Mutex::new(State {
                send_errs,
                recv_errs: vec![None; n],
                local_err: None,
                broken: None,
                read_barrier: opened_gate(),
                return_spool: Some(return_spool),
            }),
            interrupted: watch::channel(None).0,
        }
    }

    pub fn header(&self) -> &Header {
        &self.header
    }

    pub fn spool(&self) -> &Arc<AsyncSpool> {
        &self.spool
    }

    pub fn members(&self) -> &[process_spec::Id] {
        &self.route.members
    }

    fn member(&self, i: usize) -> String {
        id_str(&self.route.members[i])
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// `f`, a write to or read from a peer: bounded by the timeout, cut short by
    /// [`interrupt`](Self::interrupt). `f` is polled first, so what it can do
    /// without waiting it does even once interrupted.
    async fn bounded<F: Future>(&self, f: F) -> Result<F::Output, Cut> {
        let mut interrupted = self.interrupted.subscribe();
        tokio::select! {
            biased;
            out = f => Ok(out),
            why = interrupted.wait_for(Option::is_some) => Err(match why {
                Ok(why) => Cut::Interrupted(why.clone().unwrap_or_default()),
                Err(_) => Cut::Timeout, // Never: the sender is ours.
            }),
            _ = tokio::time::sleep(self.timeout) => Err(Cut::Timeout),
        }
    }

    fn cut_text(&self, cut: Cut, what: &str) -> String {
        match cut {
            Cut::Interrupted(why) => why,
            Cut::Timeout => format!("{what} for {}s (partitioned?)", fmt_g(self.timeout)),
        }
    }

    /// Stops waiting on peers: every write or read under way, or to come, fails
    /// with `why` (the first reason given stays).
    ///
    /// For a route that lost a member: a peer cut off by a partition neither
    /// answers nor fails, and the appends waiting on it would hold the journal
    /// until the timeout, long after etcd gave the journal a new route.
    pub fn interrupt(&self, why: impl Into<String>) {
        let why = why.into();
        self.interrupted.send_if_modified(|slot| {
            if slot.is_some() {
                return false;
            }
            *slot = Some(why);
            true
        });
    }

    /// Sends `req` to every live peer (a header addressed to each), then applies it
    /// to the local spool. Failures are recorded, not returned.
    ///
    /// # Panics
    ///
    /// If the local spool refuses the proposal: the primary proposes only what
    /// its own spool accepts.
    pub async fn scatter(&self, req: &ReplicateRequest) {
        if self.state().broken.is_some() {
            return;
        }
        {
            let senders = self.senders.lock().await;
            for (i, tx) in senders.iter().enumerate() {
                let Some(tx) = tx else { continue };
                if self.state().send_errs[i].is_some() {
                    continue;
                }
                let mut msg = req.clone();
                if let Some(header) = msg.header.as_mut() {
                    header.process_id = Some(self.route.members[i].clone());
                }
                let err = match self.bounded(tx.send(msg)).await {
                    Ok(Ok(())) => continue,
                    // The call ended, and tonic dropped its requests.
                    Ok(Err(_)) => match self.peers[i].as_ref().and_then(Peer::ended) {
                        Some(status) => describe_status(&status),
                        None => "the stream ended".to_owned(),
                    },
                    Err(cut) => {
                        if let Some(peer) = &self.peers[i] {
                            peer.cancel();
                        }
                        self.cut_text(cut, "took no message")
                    }
                };
                self.state().send_errs[i] = Some(err);
            }
        }
        if self.state().local_err.is_some() {
            return;
        }
        match self.spool.apply(req, true).await {
            Err(e) => self.state().local_err = Some(Arc::new(e)),
            Ok(resp) if resp.status != Status::Ok as i32 => {
                panic!("local spool rejected primary proposal: {resp:?}")
            }
            Ok(_) => {}
        }
    }

    /// Waits until every earlier proposal was acknowledged; its failure, if any.
    ///
    /// Proposals are sent one at a time: a replica takes the arrival of a proposal
    /// to mean that every member committed the one before (see
    /// [`crate::spool::Spool::confirm`]), so the next one may go only once all
    /// acknowledgements of the last one are in, and not at all if one of them
    /// failed ([`break_off`](Self::break_off)). Content still streams ahead of
    /// those acknowledgements.
    pub async fn acknowledged(&self) -> Option<PipelineError> {
        let gate = self.state().read_barrier.clone();
        WaitFor(gate).wait().await;
        self.failure()
    }

    /// Records, as failed, every peer whose stream has already ended.
    ///
    /// A replica ends its stream before our EOF only by failing (its spool disk
    /// stalled, say) or by leaving the route. Checked before a commit goes out: a
    /// commit no peer can take is not sent, so the append fails knowing it is not
    /// in the journal. The error says nothing of commits: an append whose commit
    /// went out before the peer ended reads it too.
    pub fn note_ended_peers(&self) {
        let mut state = self.state();
        for (i, peer) in self.peers.iter().enumerate() {
            let Some(peer) = peer else { continue };
            if state.recv_errs[i].is_some() {
                continue;
            }
            if let Some(status) = peer.ended() {
                state.recv_errs[i] = Some(describe_status(&status));
            }
        }
    }

    /// How the primary's own spool failed (a stalled or full disk), if it did.
    pub fn local_err(&self) -> Option<PipelineError> {
        self.state().local_err.clone().map(PipelineError::Spool)
    }

    /// What broke the pipeline, cause before consequence: the primary's own spool
    /// (its peers then see the pipeline close), then what a peer answered (a send
    /// to a peer that already failed fails too), then a failed send.
    pub fn failure(&self) -> Option<PipelineError> {
        let broken = self.state().broken.clone();
        if broken.is_some() {
            return broken;
        }
        self.local_err()
            .or_else(|| self.recv_err())
            .or_else(|| self.send_err())
    }

    /// No acknowledgement is awaited and nothing has failed.
    pub fn idle(&self) -> bool {
        let acknowledged = *self.state().read_barrier.borrow();
        acknowledged && self.send_err().is_none() && self.recv_err().is_none()
    }

    /// Repeats the committed fragment to every peer, asking no answer.
    ///
    /// Only while [`idle`](Self::idle) and held by the caller (no content in
    /// flight): the fragment is then confirmed, and a replica reads any proposal
    /// as saying so.
    pub async fn confirm_replicas(&self) {
        if !self.idle() {
            return;
        }
        let req = ReplicateRequest {
            proposal: Some(self.spool.spec()),
            registers: Some(self.spool.registers()),
            acknowledge: false,
            ..ReplicateRequest::default()
        };
        self.scatter(&req).await;
    }

    /// Sends nothing more: a peer failed an earlier proposal (the pipeline is done).
    pub fn break_off(&self, err: PipelineError) {
        let mut state = self.state();
        if state.broken.is_none() {
            state.broken = Some(err);
        }
    }

    /// The first failure to send (or, at the primary, to apply locally), if any.
    ///
    /// The primary's own spool comes first and as it is: its peers' failures that
    /// follow (they see the pipeline closed) are consequences.
    pub fn send_err(&self) -> Option<PipelineError> {
        let state = self.state();
        if let Some(broken) = &state.broken {
            return Some(broken.clone());
        }
        if let Some(local) = &state.local_err {
            return Some(PipelineError::Spool(local.clone()));
        }
        self.first_peer_err(&state.send_errs, "send")
    }

    /// The first failure of a peer's answers, if any.
    pub fn recv_err(&self) -> Option<PipelineError> {
        let state = self.state();
        self.first_peer_err(&state.recv_errs, "recv")
    }

    fn first_peer_err(&self, errs: &[Option<String>], side: &str) -> Option<PipelineError> {
        errs.iter().enumerate().find_map(|(i, e)| {
            e.as_ref().map(|e| PipelineError::Peer {
                peer: self.member(i),
                message: format!("{side}: {e}"),
            })
        })
    }

    /// Rolls back local partial content and returns the spool to its replica (once).
    async fn give_back_spool(&self) {
        let Some(return_spool) = self.state().return_spool.take() else {
            return;
        };
        let rollback = ReplicateRequest {
            proposal: Some(self.spool.spec()),
            registers: Some(self.spool.registers()),
            ..ReplicateRequest::default()
        };
        match self.spool.apply(&rollback, true).await {
            Ok(resp) if resp.status == Status::Ok as i32 => {}
            Ok(resp) => tracing::warn!("pipeline {self:?}: rollback refused: {resp:?}"),
            Err(e) => tracing::warn!("pipeline {self:?}: rollback failed: {e}"),
        }
        return_spool(self.spool.clone());
    }

    /// Tears down at once, without the EOF handshake (the owning RPC was cancelled).
    pub async fn abort(&self) {
        self.cancel_all();
        self.give_back_spool().await;
    }

    fn cancel_all(&self) {
        for peer in self.peers.iter().flatten() {
            peer.cancel();
        }
    }

    /// Rolls back local partial content, returns the spool and half-closes every
    /// stream.
    pub async fn close_send(&self) {
        self.give_back_spool().await;
        // Dropping the senders ends each call's requests: the peer reads EOF.
        for tx in self.senders.lock().await.iter_mut() {
            tx.take();
        }
    }

    /// Takes the next turn at the receiving side: wait on the first gate before
    /// reading, open the second once done (the next taker waits on it).
    pub fn barrier(&self) -> (WaitFor, CloseAfter) {
        let (tx, rx) = watch::channel(false);
        let wait_for = std::mem::replace(&mut self.state().read_barrier, rx);
        (WaitFor(wait_for), CloseAfter(tx))
    }

    /// One read of every live peer stream: (peer index, answer, or None at EOF).
    /// A peer whose read fails is recorded as failed and left out.
    async fn read_each(&self) -> Vec<(usize, Option<ReplicateResponse>)> {
        let mut receivers = self.receivers.lock().await;
        let mut out = Vec::with_capacity(receivers.len());
        for (i, rx) in receivers.iter_mut().enumerate() {
            let Some(rx) = rx else { continue };
            if self.state().recv_errs[i].is_some() {
                continue;
            }
            let peer = self.peers[i].as_ref().expect("a receiver has its peer");
            let err = match self.bounded(rx.recv()).await {
                Ok(Some(resp)) => {
                    out.push((i, Some(resp)));
                    continue;
                }
                // The call ended: cleanly (EOF) or with a status, the read's error.
                Ok(None) => match peer.ended() {
                    Some(status) if status.code() != tonic::Code::Ok => describe_status(&status),
                    _ => {
                        out.push((i, None));
                        continue;
                    }
                },
                Err(cut) => {
                    peer.cancel();
                    self.cut_text(cut, "no answer")
                }
            };
            self.state().recv_errs[i] = Some(err);
        }
        out
    }

    async fn gather(&self) -> Vec<(usize, ReplicateResponse)> {
        let mut answers = Vec::new();
        for (i, resp) in self.read_each().await {
            match resp {
                Some(resp) => answers.push((i, resp)),
                None => self.state().recv_errs[i] = Some("unexpected EOF".to_owned()),
            }
        }
        answers
    }

    /// Reads every peer's acknowledgement of a proposal; any but OK fails the peer.
    pub async fn gather_ok(&self) {
        for (i, resp) in self.gather().await {
            if resp.status != Status::Ok as i32 {
                self.state().recv_errs[i] = Some(format!("unexpected !OK response: {resp:?}"));
            }
        }
    }

    /// Reads every peer's answer to a sync proposal: how the primary proceeds.
    pub async fn gather_sync(&self) -> SyncOutcome {
        let mut out = SyncOutcome::default();
        let spool_end = self.spool.end();
        let etcd_revision = self.header.etcd.as_ref().map_or(0, |e| e.revision);
        for (i, resp) in self.gather().await {
            let status = Status::try_from(resp.status);
            let err = match status {
                Ok(Status::Ok) => continue,
                Ok(Status::WrongRoute) => {
                    let header = resp.header.clone().unwrap_or_default();
                    let revision = header.etcd.as_ref().map_or(0, |e| e.revision);
                    let route = header.route.clone().unwrap_or_default();
                    if !route_equivalent(&route, &self.route) && revision > etcd_revision {
                        out.read_through = out.read_through.max(revision);
                        continue;
                    }
                    format!("unexpected WRONG_ROUTE: {header:?}")
                }
                Ok(Status::ProposalMismatch) => {
                    let frag = resp.fragment.clone().unwrap_or_default();
                    if frag.end > spool_end {
                        if frag.end > out.roll_to {
                            out.roll_to = frag.end;
                            out.roll_registers = Some(resp.registers.clone().unwrap_or_default());
                        }
                        continue;
                    }
                    if frag.end == spool_end && frag.begin == frag.end {
                        out.roll_to = out.roll_to.max(frag.end);
                        continue;
                    }
                    format!(
                        "unexpected PROPOSAL_MISMATCH: {frag:?}, {:?}",
                        resp.registers.unwrap_or_default()
                    )
                }
                Ok(other) => format!("unexpected Status: {}", other.as_str_name()),
                Err(_) => format!("unexpected Status: {}", resp.status),
            };
            self.state().recv_errs[i] = Some(err);
        }
        out
    }

    /// Reads every peer's end of stream (after [`close_send`](Self::close_send));
    /// anything else fails the peer.
    pub async fn gather_eof(&self) {
        for (i, resp) in self.read_each().await {
            if let Some(resp) = resp {
                self.state().recv_errs[i] = Some(format!("unexpected response: {resp:?}"));
            }
        }
    }

    /// Closes the pipeline in turn: half-closes, reads every peer's EOF once the
    /// appends before have read theirs, then ends every call. `expect_err`: the
    /// pipeline failed already, so failures to close are not logged.
    pub async fn shutdown(&self, expect_err: bool) {
        let (wait_for, close_after) = self.barrier();
        self.close_send().await;
        if !expect_err {
            if let Some(e) = self.send_err() {
                tracing::warn!("tearing down pipeline: failed to close send: {e}");
            }
        }
        wait_for.wait().await;
        self.gather_eof().await;
        if !expect_err {
            if let Some(e) = self.recv_err() {
                tracing::warn!("tearing down pipeline: failed to gather EOF: {e}");
            }
        }
        close_after.open();
        self.cancel_all();
    }
}

#[cfg(test)]
mod tests;

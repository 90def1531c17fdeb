//! The append state machine: the Rust port of the Python
//! `gazette.broker.server.append_fsm` (after Gazette's `broker/append_fsm.go`).
//!
//! An append converges towards a synchronised replication pipeline before it may
//! stream content, and goes back to resolving whenever the journal's topology moves
//! under it:
//!
//! ```text
//!     Resolve -> AcquirePipeline -> StartPipeline -> SendPipelineSync
//!       -> RecvPipelineSync -> UpdateAssignments -> AwaitDesiredReplicas
//!       -> ValidatePreconditions -> (UpdateSuspend) -> StreamContent
//!       -> ReadAcknowledgements -> Finished
//!     terminal alternatives: Error (a status and/or an error), Proxy
//! ```
//!
//! Each state has one `on_<state>` method that leaves the machine in the next;
//! [`AppendFsm::run_to`] drives to a target and tests step one transition at a
//! time. The content phase (StreamContent, ReadAcknowledgements) is in
//! [`content`]. What the machine needs of the Python broker (etcd transactions,
//! the fragment index and stores, fences) it asks through [`AppendDeps`]; the
//! registry, replicas, spools and pipelines are this crate's.

mod content;
mod deps;
mod preconditions;
pub use deps::{AppendContext, AppendDeps, IndexSummary};
pub mod proxy;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use sha1::Sha1;
use tokio::sync::Notify;
use tonic::Status as RpcStatus;

use crate::claims::Claims;

use crate::pipeline::{Pipeline, REPLICATION_TIMEOUT};
use crate::protocol::{
    append_request, journal_spec, AppendRequest, Fragment, JournalSpec, LabelSet, ReplicateRequest,
    Status,
};
use crate::registry::{Query, Resolution};
use crate::replica::{HeldPipeline, Replica};

/// Client content is coalesced into Replicate content messages of about this many
/// bytes: gRPC's cost is mostly per message. Well below the 4 MiB default message
/// limit; a client chunk larger than this is forwarded alone.
pub const REPLICATE_CONTENT_BYTES: usize = 256 * 1024;
/// A journal's flush interval unless its spec sets one.
pub const DEFAULT_FLUSH_INTERVAL_S: i64 = 24 * 3600;
/// How long an aborted append (its client went away, or a pulse ran out of time)
/// may take to finish on its own before its pipeline is torn down (the Python
/// `ABORT_GRACE`; see [`AppendFsm::run_bounded`]).
pub const ABORT_GRACE: std::time::Duration = std::time::Duration::from_secs(30);

/// The states of an append.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    Resolve,
    AcquirePipeline,
    StartPipeline,
    SendPipelineSync,
    RecvPipelineSync,
    UpdateAssignments,
    AwaitDesiredReplicas,
    ValidatePreconditions,
    UpdateSuspend,
    /// Semi-terminal: needs the client's content.
    StreamContent,
    ReadAcknowledgements,
    Error,
    Proxy,
    Finished,
}

impl State {
    pub fn is_terminal(self) -> bool {
        matches!(self, State::Error | State::Proxy | State::Finished)
    }
}

fn cancelled() -> RpcStatus {
    RpcStatus::cancelled("context canceled")
}

fn pipeline_error(message: String) -> RpcStatus {
    RpcStatus::unavailable(message)
}

pub(super) fn now_seconds() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// Whether the spec's flags allow appends of content.
pub fn journal_may_write(spec: &JournalSpec) -> bool {
    use journal_spec::Flag;
    let flags = spec.flags;
    flags == Flag::NotSpecified as u32
        || flags == Flag::OWronly as u32
        || flags == Flag::ORdwr as u32
}

/// Why the machine was told to stop early, and a way to wait for it.
#[derive(Default)]
pub struct Abort {
    set: AtomicBool,
    notify: Notify,
}

impl Abort {
    pub fn abort(&self) {
        self.set.store(true, Ordering::Release);
        self.notify.notify_waiters();
    }
    pub fn is_set(&self) -> bool {
        self.set.load(Ordering::Acquire)
    }
    /// Completes once the append is aborted.
    pub async fn wait(&self) {
        loop {
            let notified = self.notify.notified();
            if self.is_set() {
                return;
            }
            notified.await;
        }
    }
}

/// One execution of an append (an Append RPC, or a replica's pulse).
pub struct AppendFsm {
    ctx: AppendContext,
    pub req: AppendRequest,
    claims: Option<Claims>,
    pub state: State,
    /// The resolution the machine works with; its status is the append's.
    pub resolved: Option<Resolution>,
    replica: Option<Arc<Replica>>,
    pub pln: Option<Arc<Pipeline>>,
    pln_header: bool,
    /// The pipeline slot we hold, with the replica it belongs to: a later
    /// resolution may name another replica (demoted and re-created), and the
    /// pipeline goes back where it came from.
    slot: Option<(Arc<Replica>, HeldPipeline)>,
    read_through_rev: i64,
    roll_to_offset: i64,
    roll_after_sync: bool,
    registers: LabelSet,
    next_suspend: Option<journal_spec::Suspend>,
    // The content phase (see `content`).
    client_commit: bool,
    client_fragment: Option<Fragment>,
    client_summer: Sha1,
    pending: Vec<Bytes>,
    pending_size: usize,
    proposal: Option<Fragment>,
    commit_sent: bool,
    rolled_back: bool,
    pub replicate_content_bytes: usize,
    /// Why the append failed, when it failed with an error rather than a status.
    pub err: Option<RpcStatus>,
    /// Set once the client went away (or a pulse ran out of time): waits before
    /// the content phase end in Error. Content and acknowledgements are never
    /// interrupted half-way: that would desynchronise the pipeline.
    pub aborted: Arc<Abort>,
}

impl AppendFsm {
    /// A machine for the append whose first message is `req`; `claims`, when auth
    /// is on, select the journals the client may append to.
    pub fn new(ctx: AppendContext, req: AppendRequest, claims: Option<Claims>) -> AppendFsm {
        AppendFsm {
            ctx,
            req,
            claims,
            state: State::Resolve,
            resolved: None,
            replica: None,
            pln: None,
            pln_header: false,
            slot: None,
            read_through_rev: 0,
            roll_to_offset: 0,
            roll_after_sync: false,
            registers: LabelSet::default(),
            next_suspend: None,
            client_commit: false,
            client_fragment: None,
            client_summer: Sha1::default(),
            pending: Vec::new(),
            pending_size: 0,
            proposal: None,
            commit_sent: false,
            rolled_back: false,
            replicate_content_bytes: REPLICATE_CONTENT_BYTES,
            err: None,
            aborted: Arc::default(),
        }
    }

    /// The client's content as committed (its span and SHA-1), once it streamed.
    pub fn client_fragment(&self) -> Option<&Fragment> {
        self.client_fragment.as_ref()
    }

    /// The journal's registers as the append leaves them.
    pub fn registers(&self) -> &LabelSet {
        &self.registers
    }

    /// The append's status (OK until a resolution or a check says otherwise).
    pub fn status(&self) -> i32 {
        self.resolved
            .as_ref()
            .map_or(Status::Ok as i32, |r| r.status)
    }

    fn set_status(&mut self, status: Status) {
        if let Some(res) = self.resolved.as_mut() {
            res.status = status as i32;
        }
    }

    fn fail(&mut self, err: RpcStatus) {
        self.err = Some(err);
        self.state = State::Error;
    }

    fn res(&self) -> &Resolution {
        self.resolved.as_ref().expect("resolved")
    }

    fn spec(&self) -> Arc<JournalSpec> {
        self.res()
            .spec
            .clone()
            .expect("a resolved journal has a spec")
    }

    fn the_replica(&self) -> &Arc<Replica> {
        self.replica.as_ref().expect("a local replica")
    }

    fn pipeline(&self) -> Arc<Pipeline> {
        self.pln.clone().expect("a pipeline")
    }

    fn invalidated(&self) -> bool {
        self.resolved
            .as_ref()
            .is_some_and(|r| r.invalidated.has_changed().unwrap_or(true))
    }

    /// Runs exactly one transition from the current (non-terminal) state.
    pub async fn step(&mut self) {
        if self.aborted.is_set() && self.state != State::ReadAcknowledgements {
            self.fail(cancelled());
            return;
        }
        match self.state {
            State::Resolve => self.on_resolve().await,
            State::AcquirePipeline => self.on_acquire_pipeline().await,
            State::StartPipeline => self.on_start_pipeline().await,
            State::SendPipelineSync => self.on_send_pipeline_sync().await,
            State::RecvPipelineSync => self.on_recv_pipeline_sync().await,
            State::UpdateAssignments => self.on_update_assignments().await,
            State::AwaitDesiredReplicas => self.on_await_desired_replicas(),
            State::ValidatePreconditions => self.on_validate_preconditions().await,
            State::UpdateSuspend => self.on_update_suspend().await,
            State::ReadAcknowledgements => self.on_read_acknowledgements().await,
            state => panic!("step from {state:?}"),
        }
    }

    /// Steps until `target`; false if another terminal state (or StreamContent)
    /// comes first.
    pub async fn run_to(&mut self, target: State) -> bool {
        while self.state != target {
            if self.state.is_terminal() || self.state == State::StreamContent {
                return false;
            }
            self.step().await;
        }
        true
    }

    /// Gives back the pipeline slot we hold, leaving in it the pipeline the next
    /// append is to use (always called once the machine is done).
    pub fn release_pipeline(&mut self) {
        if let Some((_, mut slot)) = self.slot.take() {
            *slot = self.pln.clone();
        }
    }

    /// Hard teardown when the driver could not finish (cancelled, out of time): a
    /// pipeline we hold may be half-way through a request, so it is aborted and its
    /// slot given back empty: the next append builds a fresh one.
    pub async fn abandon(&mut self) {
        if self.slot.is_some() {
            if let Some(pln) = self.pln.take() {
                pln.abort().await;
            }
            self.release_pipeline();
        }
    }

    /// Awaits `fut` unless the resolution is invalidated or the machine aborted
    /// first (None: interrupted; the machine then re-resolves, or stops).
    async fn race<T>(&self, fut: impl std::future::Future<Output = T>) -> Option<T> {
        let mut invalidated = self.res().invalidated.clone();
        let aborted = self.aborted.clone();
        tokio::select! {
            out = fut => Some(out),
            _ = invalidated.changed() => None,
            () = aborted.wait() => None,
        }
    }

    // -- States ---------------------------------------------------------------------

    async fn on_resolve(&mut self) {
        if let Err(why) = self.ctx.deps.check_lease() {
            return self.fail(RpcStatus::unavailable(why));
        }
        let min_revision = self.req.min_etcd_revision.max(self.read_through_rev);
        let allows = self.claims.clone();
        let authorized = allows
            .as_ref()
            .map(|c| move |spec: &JournalSpec| c.allows(spec));
        let query = Query {
            may_proxy: !self.req.do_not_proxy,
            require_primary: true,
            min_etcd_revision: min_revision,
            proxy_header: self.req.header.as_ref(),
            authorized: authorized
                .as_ref()
                .map(|f| f as &(dyn Fn(&JournalSpec) -> bool + Sync)),
        };
        let registry = self.ctx.registry.clone();
        let resolving = registry.resolve(&self.req.journal, query);
        let aborted = self.aborted.clone();
        let res = tokio::select! {
            res = resolving => res,
            () = aborted.wait() => {
                self.fail(cancelled());
                return;
            }
        };
        let res = match res {
            Ok(res) => res,
            Err(e) => return self.fail(e.to_status()),
        };
        let status = res.status();
        let is_local = res.is_local();
        self.resolved = Some(res);
        let resume = self.req.suspend == append_request::Suspend::Resume as i32;
        if status == Status::Suspended && resume {
            let offset = self.spec().suspend.as_ref().map_or(0, |s| s.offset);
            self.next_suspend = Some(journal_spec::Suspend {
                level: journal_spec::suspend::Level::None as i32,
                offset,
            });
            self.state = State::UpdateSuspend;
            return;
        }
        if status != Status::Ok {
            self.state = State::Error;
            return;
        }
        if !is_local {
            // A pipeline held from an earlier resolution is released: we now proxy.
            self.pln = None;
            self.release_pipeline();
            self.state = State::AwaitDesiredReplicas;
            return;
        }
        let Some(replica) = self.ctx.replicas.get(&self.req.journal) else {
            let journal = self.req.journal.clone();
            return self.fail(crate::replica::stopped_status(&journal));
        };
        self.replica = Some(replica.clone());
        match &self.slot {
            Some((held, _)) if Arc::ptr_eq(held, &replica) => {
                self.state = State::StartPipeline;
            }
            Some(_) => {
                // The replica was re-created since we took its pipeline: hand it back.
                self.pln = None;
                self.release_pipeline();
                self.state = State::AcquirePipeline;
            }
            None => self.state = State::AcquirePipeline,
        }
    }

    async fn on_acquire_pipeline(&mut self) {
        let replica = self.the_replica().clone();
        let slot = match replica.try_hold_pipeline() {
            Some(slot) => Some(slot), // The common case: no wait, nothing to race.
            None => self.race(replica.hold_pipeline()).await,
        };
        let Some(slot) = slot else {
            self.state = State::Resolve;
            return;
        };
        self.pln = slot.clone();
        self.slot = Some((replica, slot));
        self.state = State::StartPipeline;
    }

    async fn on_start_pipeline(&mut self) {
        let route = self.res().header.route.clone().unwrap_or_default();
        if let Some(pln) = &self.pln {
            let same = pln
                .header()
                .route
                .as_ref()
                .is_some_and(|r| crate::registry::route_equivalent(r, &route));
            if same {
                self.registers = pln.spool().registers();
                self.state = State::UpdateAssignments;
                return;
            }
        }
        if let Some(old) = self.pln.take() {
            old.shutdown(false).await;
        }
        let replica = self.the_replica().clone();
        let Some(held) = self.race(replica.hold_spool()).await else {
            self.state = State::Resolve;
            return;
        };
        let spool = (*held).clone();
        self.registers = spool.registers();
        let journal = self.req.journal.clone();
        let pln = Pipeline::new(
            self.res().header.clone(),
            spool.clone(),
            // The spool's slot is the pipeline's until it hands the spool back.
            Box::new(move |_| drop(held)),
            &self.ctx.deps.dial(),
            self.ctx
                .deps
                .peer_metadata(&journal, crate::claims::capability::REPLICATE),
            REPLICATION_TIMEOUT,
        );
        let pln = Arc::new(pln);
        replica.pipeline_built(&pln);
        self.pln = Some(pln);
        self.pln_header = true;
        // A new pipeline follows a route change or a failed one: once its members
        // agree on our fragment (its SHA-1 tells them it is the content they hold,
        // which they may then publish), they roll their spools, so that what they
        // hold is stored now (the primary's copy at once), not at the next roll.
        let spec = spool.spec();
        self.roll_after_sync = spec.begin != spec.end;
        self.state = State::SendPipelineSync;
    }

    async fn on_send_pipeline_sync(&mut self) {
        let pln = self.pipeline();
        let spec = self.spec();
        let fragment_spec = spec.fragment.clone().unwrap_or_default();
        let now = SystemTime::now();
        let proposal = match pln
            .spool()
            .maybe_roll(self.roll_to_offset, &fragment_spec, now)
        {
            Ok(p) => p,
            Err(e) => return self.fail(RpcStatus::unknown(e.to_string())),
        };
        let mut req = ReplicateRequest {
            proposal: Some(proposal),
            registers: Some(self.registers.clone()),
            acknowledge: true,
            ..ReplicateRequest::default()
        };
        if self.pln_header {
            req.header = Some(pln.header().clone());
            req.deprecated_journal = pln.spool().journal();
            self.pln_header = false;
        }
        if let Some(err) = pln.acknowledged().await {
            // An earlier append's proposal failed at a peer.
            self.pln = None;
            pln.shutdown(true).await;
            self.the_replica().request_flush();
            return self.fail(pipeline_error(format!("sync: {err}")));
        }
        pln.scatter(&req).await;
        self.state = State::RecvPipelineSync;
    }

    async fn on_recv_pipeline_sync(&mut self) {
        let pln = self.pipeline();
        let outcome = pln.gather_sync().await;
        self.roll_to_offset = outcome.roll_to;
        self.read_through_rev = outcome.read_through;
        if let Some(err) = pln.failure() {
            self.pln = None;
            pln.shutdown(true).await;
            self.the_replica().request_flush(); // A member is failing: store our copy now.
            return self.fail(pipeline_error(format!("gatherSync: {err}")));
        }
        if self.roll_to_offset != 0 {
            // A peer is further along (or at an equal offset with another fragment):
            // everyone rolls forward to it, taking its registers.
            if let Some(registers) = outcome.roll_registers {
                self.registers = registers;
            }
            self.state = State::SendPipelineSync;
        } else if self.read_through_rev != 0 {
            // A peer has a newer, different route: resolve again at its revision.
            self.pln = None;
            pln.shutdown(false).await;
            self.state = State::Resolve;
        } else {
            // Every member holds our fragment (or rolled to its end): the route goes
            // on from our content, so what we hold is the journal's.
            let spool = pln.spool().clone();
            let spec = spool.spec();
            spool.confirm(spec.end).await;
            spool.record_confirmed(None, None, true).await;
            self.the_replica().settle_held(spec.begin, true);
            if self.roll_after_sync && spec.begin != spec.end {
                self.roll_after_sync = false;
                self.roll_to_offset = spec.end;
                self.state = State::SendPipelineSync;
                return;
            }
            self.roll_after_sync = false;
            self.state = State::UpdateAssignments;
        }
    }

    async fn on_update_assignments(&mut self) {
        if self.res().consistent {
            self.state = State::AwaitDesiredReplicas;
            return;
        }
        match self.ctx.deps.update_assignments(self.res()).await {
            Ok(revision) => {
                self.read_through_rev = revision;
                self.state = State::Resolve;
            }
            Err(e) => self.fail(RpcStatus::unknown(e)),
        }
    }

    fn on_await_desired_replicas(&mut self) {
        let res = self.res();
        let route = res.header.route.as_ref();
        let n = route.map_or(0, |r| r.members.len());
        let desired = self.ctx.deps.desired_replication(&self.spec());
        if n > desired {
            // The allocator over-subscribed the journal ahead of removing a member:
            // wait for that removal rather than replicate to (or proxy through) it.
            self.read_through_rev = res.header.etcd.as_ref().map_or(0, |e| e.revision) + 1;
            self.state = State::Resolve;
        } else if n < desired {
            self.set_status(Status::InsufficientJournalBrokers);
            self.state = State::Error;
        } else if !res.is_local() {
            self.state = State::Proxy;
        } else {
            self.state = State::ValidatePreconditions;
        }
    }

    async fn on_update_suspend(&mut self) {
        let mut update = (*self.spec()).clone();
        update.suspend = self.next_suspend.take();
        match self
            .ctx
            .deps
            .update_journal_spec(self.res(), update.clone())
            .await
        {
            Ok(revision) => {
                tracing::info!(
                    "updated journal suspension of {} at revision {revision}: {:?}",
                    update.name,
                    update.suspend
                );
                self.read_through_rev = revision;
                self.state = State::Resolve;
            }
            Err(e) => self.fail(RpcStatus::unknown(e)),
        }
    }
}

#[cfg(test)]
pub(crate) mod tests;

//! Local replicas of assigned journals: the replica half of the Python
//! `gazette.broker.server.replica` (after Gazette's `broker/replica.go`).
//!
//! A [`Replica`] is this broker's runtime state of one journal assigned to it. It
//! owns the journal's spool behind an exclusive *slot*: one Replicate stream (or,
//! on the primary, one pipeline) holds it at a time ([`Replica::hold_spool`]) and
//! gives it back rolled back to its last commit ([`Replica::return_spool`]).
//!
//! It also decides what becomes of each fragment the spool completes, which is
//! where the partition rules live ([`Keeper`]): a completed fragment whose every
//! byte the route confirmed goes to the persister, but one with a tail committed
//! here and never confirmed is *held* until a synchronised pipeline says whether
//! the journal went on from it ([`Replica::settle_held`]). Only content the journal
//! kept is ever stored whole; the rest is stored through its confirmed end and the
//! tail quarantined by the persister.
//!
//! While it lives, a flush daemon rolls the spool to an empty fragment when asked
//! ([`Replica::request_flush`]: a Replicate stream broke, the route changed), which
//! hands its committed content to the persister at once. On [`Replica::stop`] it
//! rolls the spool one last time, releases what it held and, on a primary, records
//! where the journal goes on ([`ReplicaHost::checkpoint_head`]).
//!
//! A primary whose spools trail the journal's persisted fragments resumes past
//! that *head gap* once it is safe ([`Replica::head_recovery_ready`], in
//! `head_gap`).
//!
//! [`ReplicaSet`] keeps one replica per journal assigned to this broker, and runs a
//! daemon beside each (the pulse: see `crate::pulse`).

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use tokio::sync::{watch, Notify, OwnedMutexGuard};

mod head_gap;
mod held;
mod set;
pub use head_gap::DEFAULT_RECOVERY_DELAY;
pub use held::{Keeper, StoringAtOnce};
pub use set::{LocalAssignment, ReplicaDaemon, ReplicaSet};

use crate::disk::AsyncSpool;
use crate::flow::FlowState;
use crate::index::{FragmentIndex, Indexing};
use crate::pipeline::{id_str, Pipeline};
use crate::protocol::{process_spec, Fragment, LabelSet, ReplicateRequest};
use crate::spool::files::SpoolFile;
use crate::spool::{LocalFragment, Spool, SpoolConfig};

/// How long a held tail that the route went on from without this broker's word
/// waits before a store listing decides it: time for the members that did confirm
/// it to store it (the persister's replica delay is 2 s).
pub const DOUBT_DELAY: Duration = Duration::from_secs(5);

/// How long a stopping primary waits to record where its journal goes on.
pub const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a journal must be quiet after an answered append before its replicas
/// are told that the append is confirmed (see [`Replica::tell_confirmed_soon`]).
pub const CONFIRM_DELAY: Duration = Duration::from_millis(20);

/// A boxed future, as the host's async methods return.
pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// What a replica needs of its broker: the persister, the fragment index, store
/// listings and etcd, all Python's.
pub trait ReplicaHost: Send + Sync + 'static {
    /// The spool's fragment grew: the journal's index serves reads of it.
    fn spool_commit(&self, journal: &str, fragment: LocalFragment);

    /// A completed fragment for the persister. `at_once`: store it now rather than
    /// after the replica delay. `held`: its unconfirmed tail is held back, so only
    /// the confirmed part is stored now; the same fragment comes again, decided.
    /// Otherwise what lies past `confirmed_end` is quarantined, never stored.
    fn spool_complete(&self, journal: &str, completed: Completed, at_once: bool, held: bool);

    /// Whether the journal's stores hold `[begin, end)`, by a listing started after
    /// this call (one that fails is retried: a store outage keeps the answer back).
    fn listing_covers(&self, journal: &str, begin: i64, end: i64) -> BoxFuture<bool>;

    /// Records that the journal goes on at `offset` (a primary stopping).
    fn checkpoint_head(&self, journal: &str, offset: i64) -> BoxFuture<Result<(), String>>;

    /// Lists the journal's stores now rather than at the next refresh interval;
    /// completes once a listing started after this call was applied to the index
    /// (one that fails is retried: a store outage holds the answer back).
    fn refresh_listing(&self, journal: &str) -> BoxFuture<()>;

    /// A fresh replica of `journal` starts (newly assigned, or replacing one that
    /// was demoted, re-created or re-leased): what the host keeps per replica
    /// starts afresh.
    fn replica_made(&self, _journal: &str) {}

    /// `journal` is no longer assigned here (its replica shuts down).
    fn replica_gone(&self, _journal: &str) {}
}

/// A fragment a spool completed, as the persister takes it.
#[derive(Clone, Debug)]
pub struct Completed {
    /// The fragment and its spool file.
    pub fragment: LocalFragment,
    /// The primary's compressed copy and its length, when it made one.
    pub compressed: Option<(Arc<SpoolFile>, u64)>,
    /// Through where the route is known to hold it (see [`Spool::confirm`]).
    pub confirmed_end: i64,
    /// Whether the journal went on exactly at its end.
    pub continued: bool,
    /// The journal's registers at its last commit, and when it was first committed
    /// to (fragment path templates may name them).
    pub registers: crate::protocol::LabelSet,
    pub first_append_time: Option<std::time::SystemTime>,
}

impl Completed {
    fn of(sp: &Spool) -> Completed {
        Completed {
            fragment: sp.fragment(),
            compressed: sp.compressed().map(|(f, n)| (f.clone(), n)),
            confirmed_end: sp.confirmed_end(),
            continued: sp.continued(),
            registers: sp.registers().clone(),
            first_append_time: sp.first_append_time(),
        }
    }
    pub fn begin(&self) -> i64 {
        self.fragment.spec.begin
    }
    pub fn end(&self) -> i64 {
        self.fragment.spec.end
    }
    /// Whether every byte of it is known to be the journal's.
    pub fn confirmed(&self) -> bool {
        self.confirmed_end >= self.end()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The status of an RPC whose journal's replica went away while it used it.
pub fn stopped_status(journal: &str) -> tonic::Status {
    tonic::Status::unavailable(format!("replica of {journal} was stopped"))
}

/// The slot of a replica's spool, as its holder has it: the spool stays this
/// holder's until [`Replica::return_spool`] (dropping it gives it back as it is).
pub type HeldSpool = OwnedMutexGuard<Arc<AsyncSpool>>;

/// The slot of a primary's pipeline, as its holder has it: one append sends at a
/// time. None inside: no pipeline yet (or the last one failed); the holder leaves
/// the pipeline the next append is to use.
pub type HeldPipeline = OwnedMutexGuard<Option<Arc<Pipeline>>>;

/// How a replica is made; shared by every replica of a broker.
#[derive(Clone)]
pub struct ReplicaConfig {
    pub spool: Arc<SpoolConfig>,
    pub doubt_delay: Duration,
    /// How long a head gap must be seen before the journal resumes past it (at
    /// least a member lease: see `head_gap`).
    pub recovery_delay: Duration,
    /// Whether a head gap is resumed past at all without `gazctl journals
    /// reset-head` (`--broker.resume-head-gaps`).
    pub resume_head_gaps: bool,
}

impl Default for ReplicaConfig {
    fn default() -> Self {
        ReplicaConfig {
            spool: Arc::default(),
            doubt_delay: DOUBT_DELAY,
            recovery_delay: DEFAULT_RECOVERY_DELAY,
            resume_head_gaps: true,
        }
    }
}

/// Runtime state of one locally assigned journal; see the module documentation.
pub struct Replica {
    journal: String,
    primary: AtomicBool,
    create_revision: i64,
    lease: i64,
    host: Arc<dyn ReplicaHost>,
    keeper: Arc<Keeper>,
    index: Arc<FragmentIndex>,
    slot: Arc<tokio::sync::Mutex<Arc<AsyncSpool>>>,
    pipeline: Arc<tokio::sync::Mutex<Option<Arc<Pipeline>>>>,
    /// The pipeline built last, idle in its slot or held by an append (see
    /// [`route_members`](Self::route_members)).
    latest_pipeline: Mutex<Weak<Pipeline>>,
    /// The journal's append flow control: balance and clock carry over between
    /// appends (held by the append that streams content).
    pub flow: tokio::sync::Mutex<FlowState>,
    flush: Notify,
    confirm: Notify,
    stopping: watch::Sender<bool>,
    recovery_delay: Duration,
    resume_head_gaps: bool,
    head_gaps: Mutex<head_gap::HeadGaps>,
    head_gap_listed: Notify,
    // The slots, kept by shutdown so that nothing holds them again.
    retired: Mutex<Option<(HeldSpool, HeldPipeline)>>,
}

impl fmt::Debug for Replica {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Replica({}, primary={})",
            self.journal,
            self.is_primary()
        )
    }
}

impl Replica {
    /// A replica of `journal` with an empty spool at offset 0. Run it with
    /// [`serve`](Self::serve).
    pub fn new(
        journal: &str,
        primary: bool,
        create_revision: i64,
        lease: i64,
        host: Arc<dyn ReplicaHost>,
        config: &ReplicaConfig,
    ) -> Arc<Replica> {
        let keeper = Arc::new(Keeper::new(
            journal,
            host.clone(),
            config.spool.clone(),
            config.doubt_delay,
        ));
        // Each commit reaches the index (reads) before the host hears of it.
        let index = Arc::new(FragmentIndex::new(journal));
        let observer = Arc::new(Indexing {
            index: index.clone(),
            inner: keeper.clone(),
        });
        let spool = Spool::new(journal, observer, config.spool.clone());
        Arc::new(Replica {
            journal: journal.to_owned(),
            primary: AtomicBool::new(primary),
            create_revision,
            lease,
            host,
            keeper,
            index,
            slot: Arc::new(tokio::sync::Mutex::new(Arc::new(AsyncSpool::new(spool)))),
            pipeline: Arc::new(tokio::sync::Mutex::new(None)),
            latest_pipeline: Mutex::new(Weak::new()),
            flow: tokio::sync::Mutex::new(FlowState::default()),
            flush: Notify::new(),
            confirm: Notify::new(),
            stopping: watch::Sender::new(false),
            recovery_delay: config.recovery_delay,
            resume_head_gaps: config.resume_head_gaps,
            head_gaps: Mutex::default(),
            head_gap_listed: Notify::new(),
            retired: Mutex::new(None),
        })
    }

    pub fn journal(&self) -> &str {
        &self.journal
    }
    pub fn is_primary(&self) -> bool {
        self.primary.load(Ordering::Acquire)
    }
    pub fn create_revision(&self) -> i64 {
        self.create_revision
    }
    /// The etcd lease of this broker's assignment when the replica was made.
    pub fn lease(&self) -> i64 {
        self.lease
    }
    /// The journal's fragments, local and stored, which reads are served from.
    pub fn index(&self) -> &Arc<FragmentIndex> {
        &self.index
    }

    /// Takes the spool's slot, waiting while another stream or pipeline holds it.
    /// Callers race this against their resolution's invalidation and
    /// [`stopped`](Self::stopped): a stopped replica never gives its spool out again.
    pub async fn hold_spool(&self) -> HeldSpool {
        self.slot.clone().lock_owned().await
    }

    /// Takes the pipeline's slot, waiting while another append holds it. Callers
    /// race it as [`hold_spool`](Self::hold_spool)'s.
    pub async fn hold_pipeline(&self) -> HeldPipeline {
        self.pipeline.clone().lock_owned().await
    }

    /// The pipeline's slot if no append holds it now.
    pub fn try_hold_pipeline(&self) -> Option<HeldPipeline> {
        self.pipeline.clone().try_lock_owned().ok()
    }

    /// An append built `pln` for this journal: the pipeline [`route_members`]
    /// interrupts from now on.
    ///
    /// [`route_members`]: Self::route_members
    pub fn pipeline_built(&self, pln: &Arc<Pipeline>) {
        *lock(&self.latest_pipeline) = Arc::downgrade(pln);
    }

    /// The journal's route is now of `members`: a peer of the pipeline that left
    /// it is no longer waited on. The appends waiting on it fail now rather than
    /// at the pipeline's timeout (a member cut off by a partition neither answers
    /// nor fails), and the next append builds a pipeline over the new route. The
    /// pipeline is interrupted whether idle or held by an append: an append
    /// waiting for a silent peer's acknowledgement would otherwise hold the
    /// journal until the timeout (the chaos suite's partitions of a replica).
    pub fn route_members(&self, members: &[process_spec::Id]) {
        let Some(pln) = lock(&self.latest_pipeline).upgrade() else {
            return;
        };
        let gone: Vec<String> = pln
            .members()
            .iter()
            .filter(|m| !members.contains(m))
            .map(id_str)
            .collect();
        if !gone.is_empty() {
            pln.interrupt(format!(
                "{} left the route of {}",
                gone.join(", "),
                self.journal
            ));
        }
    }

    /// An append's commit is confirmed: tell the replicas once the pipeline idles.
    pub fn tell_confirmed_soon(&self) {
        self.confirm.notify_one();
    }

    /// Gives back a spool a Replicate stream held, rolling back uncommitted content.
    /// `broken`: the stream ended without the primary's EOF (it died or was cut off),
    /// so what this replica committed may exist nowhere else: it is stored at once.
    pub async fn return_spool(&self, held: HeldSpool, broken: bool) {
        let rollback = ReplicateRequest {
            proposal: Some(held.spec()),
            registers: Some(held.registers()),
            ..ReplicateRequest::default()
        };
        held.must_apply(&rollback).await;
        drop(held);
        if broken {
            self.request_flush();
        }
    }

    /// Fragments the spool completes while the guard lives are stored at once, as a
    /// primary's are: for rolls that happen because other holders of the content
    /// may be failing (a flush; a pipeline's synchronisation, which may roll this
    /// replica past a block only some members committed, and if this replica dies
    /// within the persister's replica delay, the journal would keep a hole).
    pub fn storing_at_once(&self) -> StoringAtOnce {
        self.keeper.storing_at_once()
    }

    /// A pipeline synchronised at `head`: decide the fragments held back.
    ///
    /// Held fragments that chain back from `head` are content the route went on
    /// from. With `adopt`, it went on from ours (we are its primary, or told the
    /// primary our end): they are the journal's and stored whole. Without, the
    /// primary had that end from elsewhere: from another holder of the same content,
    /// or from other content ending at the same offset; a store listing tells them
    /// apart after the doubt delay. Every other held fragment can no longer become
    /// the journal's: its confirmed part is stored and the rest quarantined.
    pub fn settle_held(&self, head: i64, adopt: bool) {
        self.keeper.settle_held(head, adopt);
    }

    /// This replica's route is over: nothing held back can become the journal's.
    pub fn release_held(&self) {
        self.keeper.release_held();
    }

    /// Rolls the spool and hands its committed content to the persister, soon
    /// (once no stream or pipeline holds it).
    pub fn request_flush(&self) {
        self.flush.notify_one();
    }

    /// Begins shutdown: [`serve`](Self::serve) ends once it has run.
    pub fn stop(&self) {
        if !self.stopping.send_replace(true) {
            tracing::info!(
                "stopping local journal replica {} (primary {})",
                self.journal,
                self.is_primary()
            );
        }
    }

    pub fn is_stopping(&self) -> bool {
        *self.stopping.borrow()
    }

    /// Completes once the replica is stopping.
    pub fn stopped(&self) -> impl Future<Output = ()> + Send + 'static {
        let mut rx = self.stopping.subscribe();
        async move {
            let _ = rx.wait_for(|s| *s).await;
        }
    }

    /// Runs the flush daemon until [`stop`](Self::stop), then shuts down.
    pub async fn serve(self: Arc<Self>) {
        tracing::info!(
            "starting local journal replica {} (primary {})",
            self.journal,
            self.is_primary()
        );
        let stopped = self.stopped();
        tokio::select! {
            () = stopped => {}
            () = self.flush_daemon() => {}
            () = self.confirm_daemon() => {}
        }
        self.shut_down().await;
    }

    /// Tells the replicas of an idle pipeline that its last commit is confirmed.
    ///
    /// A replica learns it from the next proposal, which on an idle journal may not
    /// come for long: if the primary then died, the replicas would hold its last
    /// acknowledged append back until a new route took it on from them. So once
    /// the journal was quiet for [`CONFIRM_DELAY`] after an answered append, an
    /// idle pipeline repeats its fragment as a proposal that asks no answer (a
    /// no-op for any spool, Gazette's included). Off the path of appends: a busy
    /// journal's next proposal says it anyway.
    async fn confirm_daemon(&self) {
        loop {
            self.confirm.notified().await;
            // Until the journal was quiet for a moment (a next append says it too).
            while tokio::time::timeout(CONFIRM_DELAY, self.confirm.notified())
                .await
                .is_ok()
            {}
            let Some(slot) = self.try_hold_pipeline() else {
                continue; // An append holds it: its own proposal says as much.
            };
            if let Some(pln) = slot.as_ref() {
                pln.confirm_replicas().await;
            }
        }
    }

    /// Closes the idle pipeline, if any: it holds the spool, and its replicas'
    /// streams hold theirs.
    async fn close_pipeline(&self) {
        let mut slot = self.hold_pipeline().await;
        if let Some(pln) = slot.take() {
            close_pipeline(&pln, &self.journal).await;
        }
    }

    async fn flush_daemon(&self) {
        loop {
            self.flush.notified().await;
            // A primary's idle pipeline holds the spool: close it (the next append
            // builds a new one), which also ends the replicas' streams so that they
            // can flush too.
            self.close_pipeline().await;
            let held = self.hold_spool().await;
            if held.content_length() != 0 {
                let spec = held.spec();
                tracing::info!(
                    "persisting [{}, {}) of {} now",
                    spec.begin,
                    spec.end,
                    self.journal
                );
                let _at_once = self.storing_at_once();
                held.must_apply(&empty_at_end(&spec, held.registers()))
                    .await;
            }
        }
    }

    async fn shut_down(&self) {
        self.close_pipeline().await;
        // Kept, not given back: no append builds a pipeline here again.
        let pipeline = self.hold_pipeline().await;
        let held = self.hold_spool().await;
        // Where what we publish ends: content past it (an append whose
        // acknowledgements never came) is quarantined below, so the journal must go
        // on from here, or it would have a hole where that content was.
        let mut head = held.confirmed_end();
        if let Some(low) = self.keeper.lowest_confirmed_end() {
            head = head.min(low);
        }
        // Roll to an empty fragment at the end: the last fragment goes to the persister.
        held.must_apply(&empty_at_end(&held.spec(), held.registers()))
            .await;
        self.release_held();
        if self.is_primary() && head > 0 {
            let recorded = tokio::time::timeout(
                SHUTDOWN_TIMEOUT,
                self.host.checkpoint_head(&self.journal, head),
            )
            .await;
            let failure = match recorded {
                Ok(Ok(())) => None,
                Ok(Err(e)) => Some(e),
                Err(_) => Some(format!("no answer within {SHUTDOWN_TIMEOUT:?}")),
            };
            if let Some(e) = failure {
                tracing::warn!("journal {}: head at {head} not recorded: {e}", self.journal);
            }
        }
        // Blocked reads end; their clients retry, at the journal's next replica.
        self.index.close();
        // Kept, not given back: nothing may use this replica's spool again.
        *lock(&self.retired) = Some((held, pipeline));
    }
}

/// Closes a pipeline with its EOF handshake, or aborts it if that takes too long.
pub async fn close_pipeline(pln: &Pipeline, journal: &str) {
    if tokio::time::timeout(SHUTDOWN_TIMEOUT, pln.shutdown(false))
        .await
        .is_err()
    {
        tracing::warn!("pipeline of {journal} did not close in time; aborting it");
        pln.abort().await;
    }
}

/// The proposal that completes a spool of `spec`: an empty fragment at its end.
pub fn empty_at_end(spec: &Fragment, registers: LabelSet) -> ReplicateRequest {
    ReplicateRequest {
        proposal: Some(Fragment {
            begin: spec.end,
            sum: None,
            ..spec.clone()
        }),
        registers: Some(registers),
        ..ReplicateRequest::default()
    }
}

#[cfg(test)]
mod tests;

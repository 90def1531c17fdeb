//! What an append needs of its broker: the crate's registry and replicas, and
//! [`AppendDeps`] for what the Python broker owns.

use std::sync::Arc;

use tonic::metadata::MetadataMap;

use crate::flow::{FlowClock, FlowLimits};
use crate::pipeline::Dial;
use crate::protocol::JournalSpec;
use crate::registry::{Registry, Resolution};
use crate::replica::{BoxFuture, ReplicaSet};

/// What the fragment index says of a journal (the Python broker lists the stores).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct IndexSummary {
    /// Whether the index has loaded its first store listing.
    pub first_refresh_done: bool,
    /// The lowest begin and highest end of its fragments, local and stored.
    pub begin: i64,
    pub end: i64,
    /// The newest modification time (seconds) of a stored fragment (0: none).
    pub mod_time: i64,
}

/// What an append needs of its broker that this crate does not own: etcd, the
/// fragment index and stores, and fences (all Python's).
pub trait AppendDeps: Send + Sync + 'static {
    fn flow_limits(&self) -> FlowLimits;
    /// Ok while this broker's etcd lease is surely valid; else why appends are
    /// refused (UNAVAILABLE): an earlier primary must not fork the journal.
    fn check_lease(&self) -> Result<(), String>;
    /// Dials the pipeline's peers.
    fn dial(&self) -> Dial;
    /// Metadata of this broker's calls to peers for `journal` needing `capability`
    /// (its own token, narrowed to the journal).
    fn peer_metadata(&self, journal: &str, capability: u32) -> MetadataMap;
    /// The replication the journal wants now (suspension lowers it).
    fn desired_replication(&self, spec: &JournalSpec) -> usize;
    /// Writes the route into the journal's assignments; the revision to read through.
    fn update_assignments(&self, res: &Resolution) -> BoxFuture<Result<i64, String>>;
    /// Writes `spec` (a suspension change); the revision to read through.
    fn update_journal_spec(
        &self,
        res: &Resolution,
        spec: JournalSpec,
    ) -> BoxFuture<Result<i64, String>>;
    /// Whether the journal has no store, or its primary store is healthy now.
    fn store_healthy(&self, spec: &JournalSpec) -> bool;
    /// Waits for the primary store's health check; the failure, if any.
    fn await_store_health(&self, spec: &JournalSpec) -> BoxFuture<Option<String>>;
    fn index(&self, journal: &str) -> IndexSummary;
    /// Completes once the index loaded its first store listing.
    fn wait_first_refresh(&self, journal: &str) -> BoxFuture<()>;
    /// Where a journal whose spools trail its stored fragments goes on (None: refuse),
    /// asked once its replica found the head gap ready to recover
    /// ([`crate::replica::Replica::head_recovery_ready`]): the acknowledgement
    /// fence may tell of appends acknowledged past the stored end.
    fn head_resumes_at(
        &self,
        journal: &str,
        index_end: i64,
    ) -> BoxFuture<Result<Option<i64>, String>>;
    /// Raises the journal's acknowledgement fence to cover `end`; None when it does
    /// already (or no fence is kept). Err: why it could not be raised.
    fn cover_fence(&self, journal: &str, end: i64) -> Option<BoxFuture<Result<(), String>>>;
}

/// Where an append runs: the broker's registry and replicas, and its deps.
#[derive(Clone)]
pub struct AppendContext {
    pub registry: Arc<Registry>,
    pub replicas: Arc<ReplicaSet>,
    pub deps: Arc<dyn AppendDeps>,
    /// The broker's one flow-control clock (see [`FlowClock`]).
    pub flow_clock: FlowClock,
}

//! The seam between the data plane and the Python broker that runs it.
//!
//! The data plane owns the per-append path; the Python broker owns etcd, the
//! fragment index and stores, the persister and the acknowledgement fences. A
//! [`Bridge`] is what the data plane's [`ReplicaHost`] and [`AppendDeps`] are in a
//! running broker, built so that no acknowledgement waits on Python:
//!
//! * What an append checks on its way (store health, the index's extent, the lease,
//!   how far the fence reaches) Python *publishes* into the bridge ahead of time,
//!   and the append reads it without a call.
//! * What the data plane tells Python (a spool grew, a fragment completed) goes to
//!   an *outbox* Python drains when it gets to it. Commits of a journal coalesce:
//!   Python sees the latest, never a backlog of every append.
//! * What needs Python's answer (an etcd transaction, a store listing, a fence
//!   raised) is an *ask*: it goes to the outbox with an id, and the asking task
//!   waits for Python's [`Bridge::answer`]. Asks are rare by design: a route change
//!   writes assignments once, a fence is raised once per [`FENCE_STEP`] of content,
//!   and before the last of a step is used (see [`Bridge::cover_fence`]).
//!
//! Python learns that the outbox has something by a byte written to a pipe its
//! event loop watches: written once per empty-to-non-empty change, so a busy
//! journal costs Python one wake-up per drain, not per append. No thread of the
//! data plane ever takes the GIL.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::{Duration, Instant};

use tokio::sync::{oneshot, watch};
use tonic::transport::{Channel, Endpoint};

use crate::append::IndexSummary;
use crate::auth::SharedGate;
use crate::flow::FlowLimits;
use crate::pipeline::DialError;
use crate::protocol::JournalSpec;
use crate::registry::Resolution;
use crate::replica::{BoxFuture, Completed, ReplicaHost};
use crate::spool::LocalFragment;

/// How far past an append's end a primary's fence is raised: one etcd write per
/// this many bytes of a journal's appends (the Python `fences.FENCE_STEP`).
pub const FENCE_STEP: i64 = 16 << 20;
/// How long an ask may wait for Python before it fails (Python's own fence and
/// etcd timeouts are shorter: this only bounds a Python that stopped answering).
pub const ASK_TIMEOUT: Duration = Duration::from_secs(30);
/// How long commits wait in the outbox before they wake Python (asks and completed
/// fragments wake it at once): a journal taking appends back to back costs Python
/// one drain per linger, not one per append. Python's index (reads it serves)
/// learns of a commit this much later at most.
pub const COMMIT_LINGER: Duration = Duration::from_millis(1);
/// Lifetime of the tokens the broker signs for its calls to peers (Python's
/// `auth.LIFETIME`: replication streams are long-lived).
pub const PEER_TOKEN_LIFETIME: u64 = 3600;

/// What Python is asked; each is answered with [`Answer`].
#[derive(Clone, Debug, PartialEq)]
pub enum Ask {
    /// List the journal's stores now; answered once a listing started after the
    /// ask was applied to the index.
    RefreshListing { journal: String },
    /// Whether the journal's stores hold `[begin, end)`, by a listing started now
    /// (Ok(1) or Ok(0)).
    ListingCovers {
        journal: String,
        begin: i64,
        end: i64,
    },
    /// Record that the journal goes on at `offset` (a primary stopping).
    CheckpointHead { journal: String, offset: i64 },
    /// Write the journal's route into its assignments, as read through `revision`;
    /// the revision to read through (0: lost a race, resolve again).
    UpdateAssignments { journal: String, revision: i64 },
    /// Write `spec` (a suspension change) over the spec read at `revision`.
    UpdateJournalSpec {
        journal: String,
        revision: i64,
        spec: Box<JournalSpec>,
    },
    /// Wait for the health check of `store`; Err: its failure.
    AwaitStoreHealth { journal: String, store: String },
    /// Where a journal whose spools trail its stored end goes on (Ok(None): refuse).
    HeadResumesAt { journal: String, index_end: i64 },
    /// Make the journal's fence cover `end`; the offset it covers now.
    CoverFence { journal: String, end: i64 },
}

/// Python's answer: a number (a revision, an offset, a flag), none, or an error.
pub type Answer = Result<Option<i64>, String>;

/// What the outbox hands Python.
#[derive(Debug)]
pub enum Event {
    /// The journal's spool grew to `fragment` (the latest of coalesced commits).
    Commit {
        journal: String,
        fragment: LocalFragment,
    },
    /// A completed fragment for the persister (see [`ReplicaHost::spool_complete`]).
    Complete {
        journal: String,
        completed: Completed,
        at_once: bool,
        held: bool,
    },
    /// A question; answer it with [`Bridge::answer`].
    Ask { id: u64, ask: Ask },
}

/// Settings of the bridge (from the broker's flags).
#[derive(Clone, Debug)]
pub struct BridgeConfig {
    pub flow_limits: FlowLimits,
    /// `--broker.max-replication`.
    pub max_replication: usize,
    /// The largest message of a call to a peer (a Replicate carries an append's chunk).
    pub max_message_size: usize,
    /// Our side of TLS to peers with `https://` endpoints.
    pub peer_tls: Option<PeerTls>,
}

impl Default for BridgeConfig {
    fn default() -> Self {
        BridgeConfig {
            flow_limits: FlowLimits::default(),
            max_replication: 9,
            max_message_size: 4 << 20,
            peer_tls: None,
        }
    }
}

/// PEM bytes of the CA that signs peers' certificates and of our client identity.
#[derive(Clone, Debug, Default)]
pub struct PeerTls {
    pub ca: Option<Vec<u8>>,
    pub cert: Option<Vec<u8>>,
    pub key: Option<Vec<u8>>,
}

#[derive(Default)]
struct Outbox {
    // The latest uncollected commit of each journal, and the order journals came in.
    commits: HashMap<String, LocalFragment>,
    commit_order: Vec<String>,
    // Everything else, in order. A commit of a fragment other than the one waiting
    // in `commits` pushes the waiting one here first: Python sees every fragment's
    // last commit.
    events: VecDeque<Event>,
    // Whether Python was woken since it last drained.
    signalled: bool,
    // Whether a wake for commits is due after COMMIT_LINGER.
    lingering: bool,
    closed: bool,
}

impl Outbox {
    fn commit(&mut self, journal: &str, fragment: LocalFragment) {
        match self.commits.get_mut(journal) {
            Some(waiting) if waiting.spec.begin == fragment.spec.begin => *waiting = fragment,
            Some(waiting) => {
                let before = std::mem::replace(waiting, fragment);
                self.events.push_back(Event::Commit {
                    journal: journal.to_owned(),
                    fragment: before,
                });
            }
            None => {
                self.commits.insert(journal.to_owned(), fragment);
                self.commit_order.push(journal.to_owned());
            }
        }
    }

    /// Moves the journal's waiting commit ahead of what comes next.
    fn flush_commit(&mut self, journal: &str) {
        if let Some(fragment) = self.commits.remove(journal) {
            self.commit_order.retain(|j| j != journal);
            self.events.push_back(Event::Commit {
                journal: journal.to_owned(),
                fragment,
            });
        }
    }

    fn take(&mut self) -> Vec<Event> {
        self.signalled = false;
        let mut out: Vec<Event> = self.events.drain(..).collect();
        for journal in std::mem::take(&mut self.commit_order) {
            if let Some(fragment) = self.commits.remove(&journal) {
                out.push(Event::Commit { journal, fragment });
            }
        }
        out
    }
}

/// See the module documentation.
pub struct Bridge {
    config: BridgeConfig,
    outbox: Arc<Mutex<Outbox>>,
    wake: Arc<dyn Fn() + Send + Sync>,
    asked: Mutex<HashMap<u64, oneshot::Sender<Answer>>>,
    next_id: AtomicU64,
    index: Mutex<HashMap<String, watch::Sender<IndexSummary>>>,
    // Stores by URL: their health check's failure, if any (absent: not checked yet).
    store_health: RwLock<HashMap<String, Option<String>>>,
    fences: Arc<Mutex<HashMap<String, deps::Fence>>>,
    // Tells fences of successive replicas of a journal apart.
    fence_generations: AtomicU64,
    // Until when our etcd lease is surely valid, and why no peer answers us (if so).
    lease: RwLock<(Option<Instant>, Option<String>)>,
    gate: SharedGate,
    channels: Arc<Channels>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The linger of commits is over: wake Python unless a wake since (for something
/// else) already took them.
fn wake_for_commits(outbox: &Mutex<Outbox>, wake: &(dyn Fn() + Send + Sync)) {
    let due = {
        let mut outbox = lock(outbox);
        outbox.lingering = false;
        !outbox.commits.is_empty() && !std::mem::replace(&mut outbox.signalled, true)
    };
    if due {
        wake();
    }
}

impl Bridge {
    /// A bridge that calls `wake` when its outbox goes from empty to not; `gate`
    /// holds the broker's keys (the first signs our calls to peers).
    pub fn new(config: BridgeConfig, gate: SharedGate, wake: Box<dyn Fn() + Send + Sync>) -> Self {
        Bridge {
            config: config.clone(),
            outbox: Arc::default(),
            wake: Arc::from(wake),
            asked: Mutex::default(),
            next_id: AtomicU64::new(1),
            index: Mutex::default(),
            store_health: RwLock::default(),
            fences: Arc::default(),
            fence_generations: AtomicU64::new(1),
            lease: RwLock::new((None, None)),
            channels: Arc::new(Channels {
                tls: config.peer_tls.clone(),
                open: Mutex::default(),
            }),
            gate,
        }
    }

    // -- Python's side ------------------------------------------------------------------

    /// Everything the outbox holds, in order; the next event wakes Python again.
    pub fn drain(&self) -> Vec<Event> {
        lock(&self.outbox).take()
    }

    /// Python's answer to ask `id` (an unknown id, whose asker gave up, is ignored).
    pub fn answer(&self, id: u64, answer: Answer) {
        if let Some(tx) = lock(&self.asked).remove(&id) {
            let _ = tx.send(answer);
        }
    }

    /// The broker stops: asks waiting and to come fail, and nothing more is queued.
    pub fn close(&self) {
        lock(&self.outbox).closed = true;
        for (_, tx) in lock(&self.asked).drain() {
            let _ = tx.send(Err("the broker is stopping".into()));
        }
    }

    /// What the journal's fragment index says now.
    pub fn set_index(&self, journal: &str, summary: IndexSummary) {
        let mut index = lock(&self.index);
        match index.get(journal) {
            Some(tx) => {
                tx.send_replace(summary);
            }
            None => {
                index.insert(journal.to_owned(), watch::Sender::new(summary));
            }
        }
    }

    /// The health of the store at `url`: None when its last check passed.
    pub fn set_store_health(&self, url: &str, failure: Option<String>) {
        self.store_health
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(url.to_owned(), failure);
    }

    /// Our etcd lease is valid for `valid_for` from now (None: in doubt), and
    /// `cut_off` says why no peer answers us, while that lasts.
    /// Dial `endpoint` afresh from now on: it stopped answering (Python's isolation
    /// watch saw it), and a connection cut by a partition can stay silent for long
    /// after the partition heals (TCP retransmits back off), hanging every new call
    /// on it. Calls under way keep the old channel (their own timeouts and route
    /// changes end them).
    pub fn forget_peer(&self, endpoint: &str) {
        lock(&self.channels.open).remove(endpoint);
    }

    pub fn set_lease(&self, valid_for: Option<Duration>, cut_off: Option<String>) {
        let until = valid_for.map(|d| Instant::now() + d);
        *self.lease.write().unwrap_or_else(|e| e.into_inner()) = (until, cut_off);
    }

    /// Ok while our lease is surely valid; else why writes are refused (Python's
    /// `LeaseInDoubt` and `CutOff` texts).
    pub fn check_lease(&self) -> Result<(), String> {
        let (until, cut_off) = &*self.lease.read().unwrap_or_else(|e| e.into_inner());
        if let Some(why) = cut_off {
            return Err(format!(
                "this broker is cut off from the others ({why}); retry through another broker"
            ));
        }
        match until {
            Some(until) if Instant::now() < *until => Ok(()),
            _ => Err("broker's etcd lease may have expired (etcd unreachable); retry".into()),
        }
    }

    // -- The data plane's side ----------------------------------------------------------

    /// Queues a commit; Python is woken after [`COMMIT_LINGER`] unless something
    /// else wakes it first.
    fn push_commit(&self, journal: &str, fragment: LocalFragment) {
        let linger = {
            let mut outbox = lock(&self.outbox);
            if outbox.closed {
                return;
            }
            outbox.commit(journal, fragment);
            !outbox.signalled && !std::mem::replace(&mut outbox.lingering, true)
        };
        if !linger {
            return;
        }
        let (outbox, wake) = (self.outbox.clone(), self.wake.clone());
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => drop(runtime.spawn(async move {
                tokio::time::sleep(COMMIT_LINGER).await;
                wake_for_commits(&outbox, &*wake);
            })),
            Err(_) => wake_for_commits(&outbox, &*wake),
        }
    }

    fn push(&self, f: impl FnOnce(&mut Outbox)) {
        let wake = {
            let mut outbox = lock(&self.outbox);
            if outbox.closed {
                return;
            }
            f(&mut outbox);
            !std::mem::replace(&mut outbox.signalled, true)
        };
        if wake {
            (self.wake)();
        }
    }

    /// Asks Python and waits for its answer (bounded by [`ASK_TIMEOUT`]).
    pub fn ask(&self, ask: Ask) -> BoxFuture<Answer> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        lock(&self.asked).insert(id, tx);
        let what = format!("{ask:?}");
        let mut queued = false;
        self.push(|outbox| {
            outbox.events.push_back(Event::Ask { id, ask });
            queued = true;
        });
        if !queued {
            lock(&self.asked).remove(&id);
            return Box::pin(async { Err("the broker is stopping".to_string()) });
        }
        Box::pin(async move {
            match tokio::time::timeout(ASK_TIMEOUT, rx).await {
                Ok(Ok(answer)) => answer,
                Ok(Err(_)) => Err("the broker is stopping".into()),
                Err(_) => Err(format!("the broker did not answer in time: {what}")),
            }
        })
    }

    fn ask_revision(&self, ask: Ask) -> BoxFuture<Result<i64, String>> {
        let asked = self.ask(ask);
        Box::pin(async move { asked.await.map(|r| r.unwrap_or(0)) })
    }

    /// A token of `capability` over `journal` alone, signed with our first key.
    fn peer_token(&self, journal: &str, capability: u32) -> Option<String> {
        let gate = self
            .gate
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()?;
        let journal = journal.split(';').next().unwrap_or(journal);
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs();
        gate.sign_journal_token(capability, journal, now, PEER_TOKEN_LIFETIME)
    }
}

/// Channels to peers, one per endpoint, dialed on first use (lazily: a dial
/// never blocks the runtime).
struct Channels {
    tls: Option<PeerTls>,
    open: Mutex<HashMap<String, Channel>>,
}

impl Channels {
    fn get(&self, endpoint: &str) -> Result<Channel, DialError> {
        if let Some(ch) = lock(&self.open).get(endpoint) {
            return Ok(ch.clone());
        }
        let mut ep = Endpoint::from_shared(endpoint.to_owned())?
            .tcp_nodelay(true)
            .http2_keep_alive_interval(Duration::from_secs(30))
            .keep_alive_timeout(Duration::from_secs(20))
            .keep_alive_while_idle(true)
            .connect_timeout(Duration::from_secs(10));
        if endpoint.starts_with("https://") {
            ep = ep.tls_config(client_tls(self.tls.as_ref()))?;
        }
        let ch = ep.connect_lazy();
        lock(&self.open).insert(endpoint.to_owned(), ch.clone());
        Ok(ch)
    }
}

fn journal_of(res: &Resolution) -> String {
    res.spec
        .as_ref()
        .map_or_else(String::new, |s| s.name.clone())
}

/// The etcd revision a resolution was made at (what Python's transaction checks
/// its keys against).
fn revision_of(res: &Resolution) -> i64 {
    res.header.etcd.as_ref().map_or(0, |e| e.revision)
}

fn client_tls(tls: Option<&PeerTls>) -> tonic::transport::ClientTlsConfig {
    let mut config = tonic::transport::ClientTlsConfig::new().with_enabled_roots();
    if let Some(tls) = tls {
        if let Some(ca) = &tls.ca {
            config = config.ca_certificate(tonic::transport::Certificate::from_pem(ca));
        }
        if let (Some(cert), Some(key)) = (&tls.cert, &tls.key) {
            config = config.identity(tonic::transport::Identity::from_pem(cert, key));
        }
    }
    config
}

impl ReplicaHost for Bridge {
    fn spool_commit(&self, journal: &str, fragment: LocalFragment) {
        self.push_commit(journal, fragment);
    }

    fn spool_complete(&self, journal: &str, completed: Completed, at_once: bool, held: bool) {
        self.push(|outbox| {
            outbox.flush_commit(journal);
            outbox.events.push_back(Event::Complete {
                journal: journal.to_owned(),
                completed,
                at_once,
                held,
            });
        });
    }

    fn listing_covers(&self, journal: &str, begin: i64, end: i64) -> BoxFuture<bool> {
        let journal = journal.to_owned();
        let asked = self.ask(Ask::ListingCovers {
            journal: journal.clone(),
            begin,
            end,
        });
        Box::pin(async move {
            match asked.await {
                Ok(covers) => covers.unwrap_or(0) != 0,
                Err(e) => {
                    // Held, never lost: the replica keeps the tail until it stops.
                    tracing::warn!("journal {journal}: store listing failed: {e}");
                    false
                }
            }
        })
    }

    /// A fresh replica takes the journal's fence over again before its first
    /// acknowledgement, as Python's fresh replica does.
    fn replica_made(&self, journal: &str) {
        lock(&self.fences).remove(journal);
    }

    /// Forgets what was published of a journal no longer served here.
    fn replica_gone(&self, journal: &str) {
        lock(&self.index).remove(journal);
        lock(&self.fences).remove(journal);
    }

    fn refresh_listing(&self, journal: &str) -> BoxFuture<()> {
        let journal = journal.to_owned();
        let asked = self.ask(Ask::RefreshListing {
            journal: journal.clone(),
        });
        Box::pin(async move {
            if let Err(e) = asked.await {
                tracing::warn!("journal {journal}: store listing not refreshed: {e}");
            }
        })
    }

    fn checkpoint_head(&self, journal: &str, offset: i64) -> BoxFuture<Result<(), String>> {
        let asked = self.ask(Ask::CheckpointHead {
            journal: journal.to_owned(),
            offset,
        });
        Box::pin(async move { asked.await.map(drop) })
    }
}

mod deps;

#[cfg(test)]
mod tests;

//! The seam between the data plane and the Python broker that runs it.
//!
//! The data plane owns the per-append path, and each replica's fragment index (fed
//! by its spool's commits); the Python broker owns etcd, the fragment stores and
//! their listings, the persister and the acknowledgement fences. A [`Bridge`] is
//! what the data plane's [`ReplicaHost`] and [`AppendDeps`] are in a running
//! broker, built so that no acknowledgement waits on Python:
//!
//! * What an append checks on its way (store health, the lease, how far the fence
//!   reaches, what the stores hold) Python *publishes* ahead of time, into the
//!   bridge or (store listings) into the replica's index, and the append reads it
//!   without a call.
//! * What the data plane tells Python (a fragment completed) goes to an *outbox*
//!   Python drains when it gets to it. Commits are not told: the replica's own
//!   index has them, and serves Read and ListFragments (which Python answers from
//!   it), so Python does no work per append.
//! * What needs Python's answer (an etcd transaction, a store listing, a fence
//!   raised) is an *ask*: it goes to the outbox with an id, and the asking task
//!   waits for Python's [`Bridge::answer`]. Asks are rare by design: a route change
//!   writes assignments once, a fence is raised once per [`FENCE_STEP`] of content,
//!   and before the last of a step is used (see [`Bridge::cover_fence`]).
//!
//! Reads served here ([`reads`]) use the same three: Python publishes each store
//! listing of a journal into its replica's index, and the ranges it skipped; a
//! read asks Python to sign a stored fragment's URL, and to stream a stored
//! fragment's content into a channel of the read's, a few chunks ahead of it.
//!
//! Python learns that the outbox has something by a byte written to a pipe its
//! event loop watches: written once per empty-to-non-empty change, so Python
//! costs one wake-up per drain, however much came meanwhile. No thread of the
//! data plane ever takes the GIL.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, RwLock, Weak};
use std::time::{Duration, Instant};

use tokio::sync::oneshot;
use tonic::transport::{Channel, Endpoint};

use crate::auth::SharedGate;
use crate::flow::FlowLimits;
use crate::index::FragmentIndex;
use crate::pipeline::DialError;
use crate::protocol::{Fragment, JournalSpec};
use crate::registry::Resolution;
use crate::replica::{BoxFuture, Completed, ReplicaHost, ReplicaSet};
use crate::spool::LocalFragment;

/// How far past an append's end a primary's fence is raised: one etcd write per
/// this many bytes of a journal's appends (the Python `fences.FENCE_STEP`).
pub const FENCE_STEP: i64 = 16 << 20;
/// How long an ask may wait for Python before it fails (Python's own fence and
/// etcd timeouts are shorter: this only bounds a Python that stopped answering).
pub const ASK_TIMEOUT: Duration = Duration::from_secs(30);
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
    /// A GET URL of stored `fragment`, signed for `ttl` (answered with a text).
    SignUrl {
        journal: String,
        fragment: Box<Fragment>,
        ttl: Duration,
    },
}

/// Python's answer: a number (a revision, an offset, a flag), none, or an error.
pub type Answer = Result<Option<i64>, String>;

/// What Python answered, before the asker reads it as a number or a text.
#[derive(Debug, Default)]
struct Reply {
    value: Option<i64>,
    text: Option<String>,
}

/// An ask's outcome as the asker waits for it.
type Replied = Result<Reply, String>;

/// What the outbox hands Python.
#[derive(Debug)]
pub enum Event {
    /// A completed fragment for the persister (see [`ReplicaHost::spool_complete`]).
    Complete {
        journal: String,
        completed: Completed,
        at_once: bool,
        held: bool,
    },
    /// A question; answer it with [`Bridge::answer`].
    Ask { id: u64, ask: Ask },
    /// Read stored `fragment` from `offset` on, handing its chunks to
    /// [`Bridge::stored_chunk`] and its end to [`Bridge::stored_end`]; `credit`
    /// chunks may go before the reader takes one.
    ReadStored {
        id: u64,
        fragment: Box<Fragment>,
        offset: i64,
        credit: u32,
    },
    /// The reader of stored read `id` took a chunk: one more may go.
    ReadCredit { id: u64 },
    /// The reader of stored read `id` went away: stop reading.
    ReadCancel { id: u64 },
    /// List the journal's stores now, and read the ranges it skipped for good (a
    /// read fell in a hole below the write head); nothing is answered.
    ListNow { journal: String },
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
    events: VecDeque<Event>,
    // Whether Python was woken since it last drained.
    signalled: bool,
    closed: bool,
}

impl Outbox {
    fn take(&mut self) -> Vec<Event> {
        self.signalled = false;
        self.events.drain(..).collect()
    }
}

/// See the module documentation.
pub struct Bridge {
    config: BridgeConfig,
    outbox: Arc<Mutex<Outbox>>,
    wake: Arc<dyn Fn() + Send + Sync>,
    asked: Mutex<HashMap<u64, oneshot::Sender<Replied>>>,
    // Stored reads under way, by id: where Python's chunks go.
    stored: reads::Stored,
    // Per journal, the last hole a read listed the stores for (see reads::on_hole).
    holes: Mutex<HashMap<String, reads::Hole>>,
    next_id: AtomicU64,
    // The broker's replicas, whose indexes appends read (see attach_replicas).
    replicas: OnceLock<Weak<ReplicaSet>>,
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

impl Bridge {
    /// A bridge that calls `wake` when its outbox goes from empty to not; `gate`
    /// holds the broker's keys (the first signs our calls to peers).
    pub fn new(config: BridgeConfig, gate: SharedGate, wake: Box<dyn Fn() + Send + Sync>) -> Self {
        Bridge {
            config: config.clone(),
            outbox: Arc::default(),
            wake: Arc::from(wake),
            asked: Mutex::default(),
            stored: Arc::default(),
            holes: Mutex::default(),
            next_id: AtomicU64::new(1),
            replicas: OnceLock::new(),
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
        self.reply(id, answer.map(|value| Reply { value, text: None }));
    }

    /// Python's answer to an ask answered with a text ([`Ask::SignUrl`]).
    pub fn answer_text(&self, id: u64, answer: Result<String, String>) {
        self.reply(
            id,
            answer.map(|text| Reply {
                value: None,
                text: Some(text),
            }),
        );
    }

    fn reply(&self, id: u64, reply: Replied) {
        if let Some(tx) = lock(&self.asked).remove(&id) {
            let _ = tx.send(reply);
        }
    }

    /// The broker stops: asks and stored reads waiting and to come fail, and
    /// nothing more is queued.
    pub fn close(&self) {
        lock(&self.outbox).closed = true;
        for (_, tx) in lock(&self.asked).drain() {
            let _ = tx.send(Err("the broker is stopping".into()));
        }
        for (_, tx) in lock(&self.stored).drain() {
            let _ = tx.send(Err("the broker is stopping".into()));
        }
    }

    /// The replicas this bridge hosts (made with it as their host): appends read
    /// the extent of a journal from its replica's index. Set once; a bridge
    /// without them sees every index empty.
    pub fn attach_replicas(&self, replicas: &Arc<ReplicaSet>) {
        let _ = self.replicas.set(Arc::downgrade(replicas));
    }

    /// The fragment index of the journal's replica here, if it has one.
    pub fn replica_index(&self, journal: &str) -> Option<Arc<FragmentIndex>> {
        let replicas = self.replicas.get()?.upgrade()?;
        let replica = replicas.get(journal)?;
        Some(replica.index().clone())
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

    fn push(&self, f: impl FnOnce(&mut Outbox)) {
        reads::push_to(&self.outbox, &*self.wake, f);
    }

    /// Asks Python and waits for its answer (bounded by [`ASK_TIMEOUT`]).
    pub fn ask(&self, ask: Ask) -> BoxFuture<Answer> {
        let asked = self.ask_reply(ask);
        Box::pin(async move { asked.await.map(|r| r.value) })
    }

    /// Asks Python for a text and waits for it (bounded by [`ASK_TIMEOUT`]).
    pub fn ask_text(&self, ask: Ask) -> BoxFuture<Result<String, String>> {
        let asked = self.ask_reply(ask);
        Box::pin(async move {
            asked
                .await?
                .text
                .ok_or_else(|| "the broker answered no text".to_string())
        })
    }

    fn ask_reply(&self, ask: Ask) -> BoxFuture<Replied> {
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
    /// Nothing for Python: the replica's index took it, and serves it.
    fn spool_commit(&self, _: &str, _: LocalFragment) {}

    fn spool_complete(&self, journal: &str, completed: Completed, at_once: bool, held: bool) {
        self.push(|outbox| {
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
        lock(&self.fences).remove(journal);
        lock(&self.holes).remove(journal);
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
pub mod reads;

#[cfg(test)]
mod tests;

//! What becomes of the fragments a replica's spool completes: the partition rules
//! of held tails (see the parent module), and the spool observer that applies them.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::{lock, Completed, ReplicaHost};
use crate::spool::{LocalFragment, Spool, SpoolConfig, SpoolObserver};

/// The spool's observer: hands commits to the index and decides completed fragments.
pub struct Keeper {
    journal: String,
    host: Arc<dyn ReplicaHost>,
    config: Arc<SpoolConfig>,
    doubt_delay: Duration,
    // >0 while completed fragments are stored at once (see storing_at_once).
    at_once: AtomicUsize,
    state: Mutex<Held>,
    next_doubt: AtomicU64,
}

#[derive(Default)]
struct Held {
    // Completed fragments with a tail no route confirmed yet, oldest first.
    held: Vec<Completed>,
    // Held fragments a store listing is to decide, each with its deciding task.
    doubtful: Vec<(u64, Completed, tokio::task::AbortHandle)>,
}

impl SpoolObserver for Keeper {
    fn spool_commit(&self, fragment: LocalFragment) {
        self.host.spool_commit(&self.journal, fragment);
    }

    fn spool_complete(&self, spool: Spool, primary: bool) {
        let at_once = primary || self.at_once.load(Ordering::Acquire) > 0;
        let completed = Completed::of(&spool);
        if completed.confirmed() || !completed.continued {
            // All of it is the journal's; or the journal went on from a later offset,
            // so its unconfirmed tail never will be.
            self.host
                .spool_complete(&self.journal, completed, at_once, false);
            return;
        }
        // The tail was committed here but no route confirmed it yet. The route may go
        // on from its end (adopt), or it may not: keep it until a synchronised
        // pipeline tells (settle_held), storing the confirmed part now.
        tracing::info!(
            "journal {}: holding [{}, {}) until its route confirms it",
            self.journal,
            completed.confirmed_end,
            completed.end()
        );
        lock(&self.state).held.push(completed.clone());
        self.host
            .spool_complete(&self.journal, completed, at_once, true);
    }
}

/// While alive, fragments the spool completes are stored at once (see
/// [`Replica::storing_at_once`]).
pub struct StoringAtOnce(Arc<Keeper>);

impl Drop for StoringAtOnce {
    fn drop(&mut self) {
        self.0.at_once.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Keeper {
    pub(super) fn new(
        journal: &str,
        host: Arc<dyn ReplicaHost>,
        config: Arc<SpoolConfig>,
        doubt_delay: Duration,
    ) -> Keeper {
        Keeper {
            journal: journal.to_owned(),
            host,
            config,
            doubt_delay,
            at_once: AtomicUsize::new(0),
            state: Mutex::default(),
            next_doubt: AtomicU64::new(0),
        }
    }

    /// See [`super::Replica::storing_at_once`].
    pub(super) fn storing_at_once(self: &Arc<Self>) -> StoringAtOnce {
        self.at_once.fetch_add(1, Ordering::AcqRel);
        StoringAtOnce(self.clone())
    }

    pub(super) fn settle_held(self: &Arc<Self>, mut head: i64, adopt: bool) {
        let held = std::mem::take(&mut lock(&self.state).held);
        for c in held.into_iter().rev() {
            if c.end() != head {
                // Not content the route went on from (-1, from release_held, is
                // nobody's end): its confirmed part is stored, the rest quarantined.
                self.host.spool_complete(&self.journal, c, true, false);
                continue;
            }
            head = c.begin();
            if adopt {
                self.adopt(c, "confirmed by a synchronised pipeline");
                continue;
            }
            tracing::info!(
                "journal {}: the route went on from the end of held [{}, {}) without this \
                 broker's word; it is stored in {:?} unless a store holds it by then",
                self.journal,
                c.confirmed_end,
                c.end(),
                self.doubt_delay
            );
            let id = self.next_doubt.fetch_add(1, Ordering::Relaxed);
            let keeper = self.clone();
            let mut state = lock(&self.state);
            let decide = tokio::spawn(keeper.decide_doubtful(id));
            state.doubtful.push((id, c, decide.abort_handle()));
        }
    }

    /// Stores held fragment `id` whole unless a fresh store listing covers its tail:
    /// the route went on from its end, either from our copy (nobody stored it: ours
    /// must be, or the journal keeps a hole that stalls every reader) or from other
    /// content ending at the same offset (its members stored it: ours must not be).
    async fn decide_doubtful(self: Arc<Self>, id: u64) {
        tokio::time::sleep(self.doubt_delay).await;
        let Some(range) = self.doubtful_range(id) else {
            return;
        };
        let covered = self
            .host
            .listing_covers(&self.journal, range.0, range.1)
            .await;
        let taken = {
            let mut state = lock(&self.state);
            let at = state.doubtful.iter().position(|(i, ..)| *i == id);
            at.map(|at| state.doubtful.remove(at).1)
        };
        let Some(c) = taken else {
            return; // Released meanwhile (release_held decided it).
        };
        if covered {
            tracing::warn!(
                "journal {}: [{}, {}) held here is stored from another member; this copy is not",
                self.journal,
                c.confirmed_end,
                c.end()
            );
            self.host.spool_complete(&self.journal, c, true, false);
        } else {
            self.adopt(
                c,
                "is stored: the route went on from its end and no store held it",
            );
        }
    }

    fn doubtful_range(&self, id: u64) -> Option<(i64, i64)> {
        let state = lock(&self.state);
        let (_, c, _) = state.doubtful.iter().find(|(i, ..)| *i == id)?;
        Some((c.begin().max(c.confirmed_end), c.end()))
    }

    fn adopt(&self, mut c: Completed, why: &str) {
        tracing::info!(
            "journal {}: [{}, {}) {why}",
            self.journal,
            c.begin(),
            c.end()
        );
        c.confirmed_end = c.end();
        // A crash before it is stored must not quarantine it: record it, in order
        // behind the content writes queued to the same disk.
        if let Some(file) = c.fragment.file.clone().filter(|f| f.is_recoverable()) {
            let (end, sync) = (c.confirmed_end, self.config.sync);
            let worker = self
                .config
                .workers
                .for_directory(self.config.directory.as_deref());
            worker.post(move || file.record_confirmed(end, sync).map(drop));
        }
        self.host.spool_complete(&self.journal, c, true, false);
    }

    pub(super) fn release_held(self: &Arc<Self>) {
        self.settle_held(-1, false);
        let doubtful = std::mem::take(&mut lock(&self.state).doubtful);
        for (_, c, decide) in doubtful {
            decide.abort();
            self.host.spool_complete(&self.journal, c, true, false);
        }
    }

    pub(super) fn lowest_confirmed_end(&self) -> Option<i64> {
        let state = lock(&self.state);
        let held = state.held.iter().map(|c| c.confirmed_end);
        let doubtful = state.doubtful.iter().map(|(_, c, _)| c.confirmed_end);
        held.chain(doubtful).min()
    }
}

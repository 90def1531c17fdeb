//! Head gaps: a primary whose synchronised spools end below the end of the
//! journal's persisted fragments (the Python `Replica.head_recovery_ready` and its
//! companions).
//!
//! Such a gap means that every broker that held the content past the spools' end
//! is gone, or stored it before it went. Gazette's broker refuses appends to the
//! journal from then on (INDEX_HAS_GREATER_OFFSET, see `broker/append_fsm.go`)
//! until an operator steps in, because an earlier primary that is still alive
//! could be writing past that end. We go on at the end of the persisted fragments
//! by ourselves once the gap has been seen for the recovery delay and a store
//! listing started after that delay still shows it. The delay is at least a member
//! lease: by then an earlier primary cut off from etcd has stopped serving (its
//! lease is gone), and a live holder of the tail has had the time to store it.
//! Brokers run without `--broker.resume-head-gaps` refuse instead, as Gazette's do.
//!
//! The pulse daemon (`crate::pulse`) wakes when a pending recovery falls due
//! ([`Replica::head_recovery_due`]) and when the listing it waits for was applied
//! ([`Replica::head_gap_listed`]); the append state machine asks
//! [`Replica::head_recovery_ready`] in its ValidatePreconditions state.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::futures::Notified;
use tokio::time::Instant;

use super::{lock, Replica};

/// How long a head gap must have been seen before the journal resumes past it.
pub const DEFAULT_RECOVERY_DELAY: Duration = Duration::from_secs(20);

/// What a replica knows of its journal's head gap.
#[derive(Default)]
pub(super) struct HeadGaps {
    pending: Option<Pending>,
    /// A gap refused until the journal is reset: (spool end, index end).
    refused: Option<(i64, i64)>,
    serial: u64,
}

/// A gap seen by the primary, on its way to recovery.
struct Pending {
    /// (spool end, index end).
    key: (i64, i64),
    seen_at: Instant,
    /// Tells this sighting from a later one of the same gap (a listing started for
    /// the one must not vouch for the other).
    serial: u64,
    listing: Listing,
}

/// The store listing a due recovery waits for (Python's `listed_at >= due`).
#[derive(Clone, Copy, Debug, PartialEq)]
enum Listing {
    NotStarted,
    Running,
    Applied,
}

impl Replica {
    /// Whether the primary may resume the journal at `index_end`, past its spools'
    /// `spool_end` (see the module documentation): the gap was seen for the
    /// recovery delay, and a listing started after that still shows it. The first
    /// call for a gap starts its delay; the first call after the delay starts the
    /// listing; answers are false until both are done. A gap refused
    /// ([`refuse_head_gap`](Self::refuse_head_gap)) is never ready.
    pub fn head_recovery_ready(self: &Arc<Self>, spool_end: i64, index_end: i64) -> bool {
        let key = (spool_end, index_end);
        if !self.resume_head_gaps {
            self.refuse_head_gap(
                spool_end,
                index_end,
                "every broker that held what came after may be gone, with offsets \
                 acknowledged but never persisted (brokers run with \
                 --broker.resume-head-gaps go on past them by themselves)",
            );
            return false;
        }
        let now = Instant::now();
        let mut gaps = lock(&self.head_gaps);
        if gaps.refused == Some(key) {
            return false;
        }
        let pending = match gaps.pending.as_mut() {
            Some(p) if p.key == key => p,
            _ => {
                gaps.serial += 1;
                let serial = gaps.serial;
                gaps.pending = Some(Pending {
                    key,
                    seen_at: now,
                    serial,
                    listing: Listing::NotStarted,
                });
                tracing::warn!(
                    "journal {}: spools end at {spool_end} but persisted fragments reach \
                     {index_end}; resuming at {index_end} in {:?} unless the gap closes",
                    self.journal,
                    self.recovery_delay
                );
                return false;
            }
        };
        if now < pending.seen_at + self.recovery_delay {
            return false;
        }
        match pending.listing {
            Listing::Applied => {
                gaps.pending = None;
                true
            }
            Listing::Running => false,
            Listing::NotStarted => {
                pending.listing = Listing::Running;
                let serial = pending.serial;
                drop(gaps);
                self.list_for_recovery(serial);
                false
            }
        }
    }

    /// Lists the journal's stores for the pending gap `serial`; once the listing
    /// is applied, the gap may recover and the pulse is woken to do it.
    fn list_for_recovery(self: &Arc<Self>, serial: u64) {
        let replica = self.clone();
        let listed = self.host.refresh_listing(&self.journal);
        let stopped = self.stopped();
        // Bounded by the replica's life: a store outage may hold a listing back
        // for long, and a stopped replica recovers nothing.
        tokio::spawn(async move {
            tokio::select! {
                () = listed => {}
                () = stopped => return,
            }
            let mut gaps = lock(&replica.head_gaps);
            if let Some(p) = gaps.pending.as_mut().filter(|p| p.serial == serial) {
                p.listing = Listing::Applied;
                drop(gaps);
                replica.head_gap_listed.notify_one();
            }
        });
    }

    /// Refuses the journal's head gap from `spool_end` to `index_end` until it is
    /// reset (`gazctl journals reset-head`); `why` says why, logged once per gap.
    pub fn refuse_head_gap(&self, spool_end: i64, index_end: i64, why: &str) {
        let key = (spool_end, index_end);
        {
            let mut gaps = lock(&self.head_gaps);
            if gaps.refused == Some(key) {
                return;
            }
            gaps.refused = Some(key);
        }
        tracing::error!(
            "journal {journal}: its brokers hold content through {spool_end}, but its \
             persisted fragments end at {index_end}: {why}. Appends are refused \
             (INDEX_HAS_GREATER_OFFSET) rather than hand those offsets out again. Once \
             every broker that served the journal before has exited or stored what it \
             held, resume it with `gazctl journals reset-head -l name={journal}`",
            journal = self.journal
        );
    }

    /// The primary found its spools at the journal's end: a pending gap is
    /// forgotten (or the pulse would keep waking for a recovery nobody needs).
    pub fn head_gap_closed(&self) {
        lock(&self.head_gaps).pending = None;
    }

    /// When a pending head recovery may take its next step: its delay runs out, or
    /// (past it) the listing it waits for was applied, or is still to be started.
    /// None without a pending gap, while its listing runs (its end wakes
    /// [`head_gap_listed`](Self::head_gap_listed)), or when gaps are never resumed.
    pub fn head_recovery_due(&self) -> Option<Instant> {
        if !self.resume_head_gaps {
            return None;
        }
        let gaps = lock(&self.head_gaps);
        let pending = gaps.pending.as_ref()?;
        (pending.listing != Listing::Running).then(|| pending.seen_at + self.recovery_delay)
    }

    /// Completes once a listing that a due head recovery waited for was applied
    /// (at once if that happened since the last wait).
    pub fn head_gap_listed(&self) -> Notified<'_> {
        self.head_gap_listed.notified()
    }
}

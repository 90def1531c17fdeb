//! The fragment index of one journal replica: the Rust port of the Python
//! `gazette.broker.fragment.index` (after Gazette's `broker/fragment/index.go`).
//!
//! A [`FragmentIndex`] holds two [`CoverSet`]s: every fragment known (local and
//! stored), and the local ones alone, which a reader reads with `pread` from the
//! spool file they share with the spool. Spool commits add local fragments (the
//! replica's spool reports them through [`Indexing`]); the Python broker lists the
//! stores and publishes what it found with [`FragmentIndex::replace_stored`], which
//! drops the local fragments the stores now cover (their files stay open while a
//! reader holds them).
//!
//! [`FragmentIndex::query`] picks the fragment that serves a read's offset; a
//! blocking query waits for the next change of the index (a commit, a listing, the
//! close of a stopping replica). Every change bumps a watch counter, subscribed
//! under the same lock that guards the sets, so no change between a query's look
//! and its wait goes unseen (Gazette closes a condition channel for the same).
//!
//! What the stores hold is Python's: a query asks its caller ([`QueryHooks`]) to
//! sign the URL of a stored fragment, and to list the stores at once when a read
//! falls in a hole below the write head.

mod cover_set;

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::sync::watch;

pub use cover_set::{CoverSet, JournalMismatch};

use crate::protocol::{Fragment, ReadRequest, ReadResponse, Status};
use crate::replica::BoxFuture;
use crate::spool::files::SpoolFile;
use crate::spool::{LocalFragment, Spool, SpoolObserver};

/// A read of an offset no fragment covers may jump to the next stored fragment
/// when that one is at least this old, in seconds (or is the journal's first).
pub const OFFSET_JUMP_AGE_THRESHOLD: f64 = 6.0 * 3600.0;
/// Lifetime of the URL signed into a read's metadata response.
pub const READ_URL_TTL: Duration = Duration::from_secs(60);
/// How long a non-blocking read of a hole below the write head waits for the store
/// listing it asked for before it answers OFFSET_NOT_YET_AVAILABLE.
pub const HOLE_LISTING_WAIT: Duration = Duration::from_secs(2);

/// Unix time in seconds; tests inject one to age fragments.
pub type UnixClock = Arc<dyn Fn() -> f64 + Send + Sync>;

/// What a query needs of the broker, whose stores are Python's.
pub trait QueryHooks: Sync {
    /// A signed GET URL of stored `fragment`, valid for `ttl` (the stores sign it,
    /// so the broker may take a moment: it is awaited without the index's lock).
    fn fragment_url(&self, fragment: &Fragment, ttl: Duration)
        -> BoxFuture<Result<String, String>>;
    /// A read found a hole ending at `hole_end` below the write head: content this
    /// broker never held, which other brokers may have stored since the last
    /// listing. Returns whether a listing was asked for (the owner backs off).
    fn on_hole(&self, hole_end: i64) -> bool;
}

/// Why a query has no answer.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum QueryError {
    /// The index was closed (its replica stopped) while a blocking query waited.
    #[error("fragment index closed")]
    Closed,
    /// The URL of a stored fragment could not be signed.
    #[error("{0}")]
    Sign(String),
}

/// A query's answer: the metadata response, and the local file of the fragment
/// (None: the fragment is stored, or there is none).
pub type Answer = (ReadResponse, Option<Arc<SpoolFile>>);

#[derive(Default)]
struct Sets {
    all: CoverSet,
    local: CoverSet,
    /// The last store listing as it came (local fragments may hide part of it in `all`).
    listed: CoverSet,
    /// Offset ranges no fragment will ever cover (see `mark_skipped`), sorted.
    skipped: Vec<(i64, i64)>,
    /// Whether a listing was applied since `skipped` last grew.
    skipped_listed: bool,
    first_refresh: bool,
    closed: bool,
}

/// See the module documentation.
pub struct FragmentIndex {
    journal: String,
    clock: UnixClock,
    hole_listing_wait: Duration,
    sets: Mutex<Sets>,
    /// Bumped on every change (blocking queries wait on it).
    changed: watch::Sender<u64>,
    /// Bumped on every applied listing, and on close.
    listings: watch::Sender<u64>,
}

/// What a query found under the lock.
enum Found {
    // Boxed: a response is large beside a hole's few fields.
    Fragment(Box<Answer>, bool),
    Hole {
        hole_end: Option<i64>,
        write_head: i64,
        closed: bool,
        changed: watch::Receiver<u64>,
        listed: watch::Receiver<u64>,
    },
}

fn system_clock() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs_f64()
}

impl FragmentIndex {
    /// An empty index of `journal`, on the system clock.
    pub fn new(journal: &str) -> FragmentIndex {
        FragmentIndex::with_clock(journal, Arc::new(system_clock), HOLE_LISTING_WAIT)
    }

    /// An empty index with its clock and hole listing wait given (tests).
    pub fn with_clock(
        journal: &str,
        clock: UnixClock,
        hole_listing_wait: Duration,
    ) -> FragmentIndex {
        FragmentIndex {
            journal: journal.to_owned(),
            clock,
            hole_listing_wait,
            sets: Mutex::new(Sets {
                skipped_listed: true,
                ..Sets::default()
            }),
            changed: watch::Sender::new(0),
            listings: watch::Sender::new(0),
        }
    }

    pub fn journal(&self) -> &str {
        &self.journal
    }

    fn lock(&self) -> MutexGuard<'_, Sets> {
        self.sets.lock().unwrap_or_else(|e| e.into_inner())
    }

    // -- Queries ------------------------------------------------------------------------

    /// The fragment serving `req.offset` (-1: the write head), as Gazette's
    /// `Index.Query` picks it, with its local file if it has one. A blocking
    /// request waits until a change makes its offset available, or fails with
    /// [`QueryError::Closed`] once the index closes.
    pub async fn query(
        &self,
        req: &ReadRequest,
        hooks: &dyn QueryHooks,
    ) -> Result<Answer, QueryError> {
        let mut offset = req.offset;
        let mut waited_for_listing = false;
        loop {
            match self.find(req, &mut offset) {
                Found::Fragment(answer, sign) => {
                    let (mut resp, file) = *answer;
                    if sign {
                        let frag = resp.fragment.as_ref().expect("a found fragment");
                        resp.fragment_url = hooks
                            .fragment_url(frag, READ_URL_TTL)
                            .await
                            .map_err(QueryError::Sign)?;
                    }
                    return Ok((resp, file));
                }
                Found::Hole {
                    hole_end,
                    write_head,
                    closed,
                    mut changed,
                    mut listed,
                } => {
                    // Called without the lock: the owner may take a while to ask.
                    let listing = hole_end.is_some_and(|end| hooks.on_hole(end));
                    if listing && !req.block && !waited_for_listing {
                        waited_for_listing = true;
                        let _ =
                            tokio::time::timeout(self.hole_listing_wait, listed.changed()).await;
                        continue;
                    }
                    if !req.block {
                        let resp = ReadResponse {
                            status: Status::OffsetNotYetAvailable as i32,
                            offset,
                            write_head,
                            ..ReadResponse::default()
                        };
                        return Ok((resp, None));
                    }
                    if closed || changed.changed().await.is_err() {
                        return Err(QueryError::Closed);
                    }
                }
            }
        }
    }

    fn find(&self, req: &ReadRequest, offset: &mut i64) -> Found {
        let sets = self.lock();
        let s = &sets.all;
        if *offset == -1 {
            *offset = s.end_offset();
        }
        loop {
            let (ind, mut found) = s.longest_overlapping(*offset);
            let next = s.get(ind);
            // Jump a hole to the next stored fragment when the read starts before the
            // journal's first fragment, or that fragment was stored long ago: a young
            // hole waits, as another broker may still be storing what fills it. A
            // range the journal skipped for good is jumped at once.
            if let Some(next) = next.filter(|_| !found) {
                let mod_time = next.spec.mod_time;
                let old = mod_time != 0
                    && (ind == 0 || (mod_time as f64) < (self.clock)() - OFFSET_JUMP_AGE_THRESHOLD);
                let skipped = sets.skipped_listed
                    && sets
                        .skipped
                        .iter()
                        .any(|&(b, e)| b <= *offset && next.spec.begin <= e);
                if old || skipped {
                    *offset = next.spec.begin;
                    found = true;
                }
            }
            if !found {
                return Found::Hole {
                    hole_end: next.map(|f| f.spec.begin),
                    write_head: s.end_offset(),
                    closed: sets.closed,
                    changed: self.changed.subscribe(),
                    listed: self.listings.subscribe(),
                };
            }
            let frag = next.expect("a found fragment");
            let mod_time = frag.spec.mod_time;
            if mod_time != 0 && mod_time < req.begin_mod_time {
                // Stored before the asked lower bound: skip its content.
                *offset = frag.spec.end;
                continue;
            }
            let resp = ReadResponse {
                status: Status::Ok as i32,
                offset: *offset,
                write_head: s.end_offset(),
                fragment: Some(frag.spec.clone()),
                ..ReadResponse::default()
            };
            let sign = !frag.spec.backing_store.is_empty() && mod_time != 0;
            return Found::Fragment(Box::new((resp, frag.file.clone())), sign);
        }
    }

    /// (first begin, last end, mod time of the last fragment; 0 while it is local).
    pub fn summary(&self) -> (i64, i64, i64) {
        let sets = self.lock();
        let s = &sets.all;
        let last_mod = s.iter().last().map_or(0, |f| f.spec.mod_time);
        (s.begin_offset(), s.end_offset(), last_mod)
    }

    pub fn end_offset(&self) -> i64 {
        self.lock().all.end_offset()
    }

    /// Every fragment, as a copy that later changes leave alone.
    pub fn fragments(&self) -> CoverSet {
        self.lock().all.clone()
    }

    /// Whether the last store listing alone (no local spool) covers `[begin, end)`.
    pub fn stored_covers(&self, begin: i64, end: i64) -> bool {
        let sets = self.lock();
        let mut at = begin;
        while at < end {
            let reach = sets
                .listed
                .iter()
                .filter(|f| f.spec.begin <= at && at < f.spec.end)
                .map(|f| f.spec.end)
                .max()
                .unwrap_or(at);
            if reach == at {
                return false;
            }
            at = reach;
        }
        true
    }

    pub fn first_refresh_done(&self) -> bool {
        self.lock().first_refresh
    }

    /// Completes once a store listing was applied (or the index closed).
    pub async fn wait_first_refresh(&self) {
        loop {
            let mut listed = {
                let sets = self.lock();
                if sets.first_refresh || sets.closed {
                    return;
                }
                self.listings.subscribe()
            };
            if listed.changed().await.is_err() {
                return;
            }
        }
    }

    // -- Changes ------------------------------------------------------------------------

    /// Adds a committed spool fragment with its file, and wakes blocked queries.
    pub fn spool_commit(&self, fragment: LocalFragment) {
        let mut sets = self.lock();
        if let Err(e) = sets.all.add(fragment.clone()) {
            tracing::error!(
                "fragment index of {}: spool commit refused: {e}",
                self.journal
            );
            return;
        }
        // The same journal's: `all` took it.
        let _ = sets.local.add(fragment);
        self.changed.send_modify(|n| *n += 1);
    }

    /// Replaces every stored fragment with a fresh listing of the journal's stores
    /// (fragments with their backing store and mod time). Local fragments the
    /// listing covers are dropped; the others stay on top of it.
    pub fn replace_stored(&self, listing: Vec<Fragment>) -> Result<(), JournalMismatch> {
        let mut stored = CoverSet::new();
        for spec in listing {
            if spec.journal != self.journal {
                return Err(JournalMismatch {
                    added: spec.journal,
                    held: self.journal.clone(),
                });
            }
            stored.add(LocalFragment { spec, file: None })?;
        }
        let mut sets = self.lock();
        sets.listed = stored.clone();
        sets.local = sets.local.difference(&stored);
        for frag in &sets.local {
            if !stored.add(frag.clone())? {
                // The difference keeps only what the listing does not cover.
                tracing::error!(
                    "fragment index of {}: local [{}, {}) unexpectedly covered by a listing",
                    self.journal,
                    frag.spec.begin,
                    frag.spec.end
                );
            }
        }
        sets.all = stored;
        sets.skipped_listed = true;
        sets.first_refresh = true;
        self.changed.send_modify(|n| *n += 1);
        self.listings.send_modify(|n| *n += 1);
        Ok(())
    }

    /// `ranges` of offsets were skipped for good (a journal resumed past its
    /// acknowledgement fence stores nothing there): reads jump them without
    /// waiting, once a listing applied after this shows nobody stored there late.
    pub fn mark_skipped(&self, ranges: &[(i64, i64)]) {
        let mut sets = self.lock();
        let mut skipped = sets.skipped.clone();
        skipped.extend(ranges.iter().copied().filter(|(b, e)| b < e));
        skipped.sort_unstable();
        skipped.dedup();
        if skipped != sets.skipped {
            sets.skipped = skipped;
            sets.skipped_listed = false;
            self.changed.send_modify(|n| *n += 1);
        }
    }

    /// Fails blocked and later blocking queries with [`QueryError::Closed`].
    pub fn close(&self) {
        let mut sets = self.lock();
        sets.closed = true;
        self.changed.send_modify(|n| *n += 1);
        self.listings.send_modify(|n| *n += 1);
    }
}

/// A spool observer that adds each commit to the replica's index, then passes
/// every event on to `inner`.
pub struct Indexing {
    pub index: Arc<FragmentIndex>,
    pub inner: Arc<dyn SpoolObserver>,
}

impl SpoolObserver for Indexing {
    fn spool_commit(&self, fragment: LocalFragment) {
        self.index.spool_commit(fragment.clone());
        self.inner.spool_commit(fragment);
    }

    fn spool_complete(&self, spool: Spool, primary: bool) {
        self.inner.spool_complete(spool, primary);
    }
}

#[cfg(test)]
mod tests;

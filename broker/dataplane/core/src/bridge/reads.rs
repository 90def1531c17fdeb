//! [`ReadHost`] of a running broker: what the reads the data plane serves need of
//! the Python broker, through the bridge and in its style (no read ever takes the
//! GIL, nor waits on Python's event loop but for what only Python has).
//!
//! * Stored content: Python owns the stores and their codecs, so it reads a stored
//!   fragment and hands the decoded chunks to the read's channel
//!   ([`Bridge::stored_chunk`]). It runs [`STORED_READ_CREDIT`] chunks ahead of the
//!   read at most, and a chunk more each time the read takes one: the store read
//!   of the next chunk overlaps the sending of this one (as Python's own
//!   `read_api` reads ahead), and a slow client holds the store read back rather
//!   than piling its content up in memory. A read that ends early (its end
//!   offset, its client gone) tells Python to stop.
//! * URLs of stored fragments are signed by Python's stores: an ask, answered
//!   with the URL.
//! * A read of a hole below the write head has Python list the journal's stores
//!   now, with the back-off of Python's replica (`Replica._on_hole`): the
//!   listing reaches the index as every listing does (Python publishes it into
//!   the replica's index), and the read does not wait for Python to take it up.
//! * Reachability is what Python published with the lease; dials and tokens are
//!   those of the appends' calls to peers.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use futures_util::Stream;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tonic::metadata::MetadataMap;

use super::*;
use crate::append::AppendDeps;
use crate::pipeline::Dial;
use crate::read::{BoxStream, ReadHost};
use crate::registry::Registry;

/// How many chunks of a stored fragment Python may hand over before the read
/// takes one.
pub const STORED_READ_CREDIT: u32 = 2;
/// The first back-off between store listings asked for by reads of one hole
/// (Python's `replica.HOLE_LISTING_BACKOFF`); it doubles up to the journal's
/// refresh interval while the hole stays.
pub const HOLE_LISTING_BACKOFF: Duration = Duration::from_millis(500);
/// The back-off's ceiling for a journal whose spec is gone.
pub const DEFAULT_REFRESH_INTERVAL: Duration = Duration::from_secs(300);

/// Where the chunks of each stored read under way go, by id.
pub(super) type Stored = Arc<Mutex<HashMap<u64, mpsc::UnboundedSender<Result<Bytes, String>>>>>;

/// The last hole of a journal that reads listed the stores for.
pub(super) struct Hole {
    end: i64,
    backoff: Duration,
    not_before: Instant,
}

impl Bridge {
    // -- Python's side ------------------------------------------------------------------

    /// A chunk of stored read `id`; false once its reader is gone (stop reading).
    pub fn stored_chunk(&self, id: u64, chunk: Bytes) -> bool {
        lock(&self.stored)
            .get(&id)
            .is_some_and(|tx| tx.send(Ok(chunk)).is_ok())
    }

    /// Stored read `id` ended: at the fragment's end (None), or failing with `error`.
    pub fn stored_end(&self, id: u64, error: Option<String>) {
        if let Some(tx) = lock(&self.stored).remove(&id) {
            if let Some(error) = error {
                let _ = tx.send(Err(error));
            }
        }
    }

    // -- The data plane's side ----------------------------------------------------------

    /// The decoded content of stored `fragment` from `offset` on, as Python reads it
    /// (see the module documentation).
    pub fn read_stored(
        &self,
        fragment: &Fragment,
        offset: i64,
    ) -> BoxStream<Result<Bytes, String>> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = mpsc::unbounded_channel();
        lock(&self.stored).insert(id, tx);
        let queued = push_to(&self.outbox, &*self.wake, |outbox| {
            outbox.events.push_back(Event::ReadStored {
                id,
                fragment: Box::new(fragment.clone()),
                offset,
                credit: STORED_READ_CREDIT,
            });
        });
        if !queued {
            lock(&self.stored).remove(&id);
            let stopping: Result<Bytes, String> = Err("the broker is stopping".into());
            return Box::pin(futures_util::stream::iter([stopping]));
        }
        Box::pin(StoredChunks {
            id,
            rx,
            outbox: self.outbox.clone(),
            wake: self.wake.clone(),
            stored: self.stored.clone(),
            ended: false,
        })
    }

    /// Ok unless no other broker answers this one (Python's `Service.check_reachable`
    /// and its `CutOff` text).
    pub fn check_reachable(&self) -> Result<(), String> {
        let (_, cut_off) = &*self.lease.read().unwrap_or_else(|e| e.into_inner());
        match cut_off {
            Some(why) => Err(format!(
                "this broker is cut off from the others ({why}); retry through another broker"
            )),
            None => Ok(()),
        }
    }

    /// A read found a hole of `journal` ending at `hole_end` below its write head:
    /// has Python list its stores (and read its skipped ranges) unless reads of the
    /// same hole did so less than a back-off ago; the back-off doubles up to
    /// `ceiling` while the hole stays. Returns whether a listing was asked for.
    pub fn list_for_hole(&self, journal: &str, hole_end: i64, ceiling: Duration) -> bool {
        let now = Instant::now();
        {
            let mut holes = lock(&self.holes);
            let backoff = match holes.get(journal) {
                Some(hole) if hole.end == hole_end => {
                    if now < hole.not_before {
                        return false;
                    }
                    (hole.backoff * 2).min(ceiling.max(HOLE_LISTING_BACKOFF))
                }
                _ => HOLE_LISTING_BACKOFF,
            };
            let hole = Hole {
                end: hole_end,
                backoff,
                not_before: now + backoff,
            };
            holes.insert(journal.to_owned(), hole);
        }
        push_to(&self.outbox, &*self.wake, |outbox| {
            outbox.events.push_back(Event::ListNow {
                journal: journal.to_owned(),
            });
        })
    }
}

/// Queues what `f` adds unless the outbox is closed, waking Python if it was not
/// woken since it last drained; returns whether it was queued.
pub(super) fn push_to(
    outbox: &Mutex<Outbox>,
    wake: &(dyn Fn() + Send + Sync),
    f: impl FnOnce(&mut Outbox),
) -> bool {
    let wake_now = {
        let mut outbox = lock(outbox);
        if outbox.closed {
            return false;
        }
        f(&mut outbox);
        !std::mem::replace(&mut outbox.signalled, true)
    };
    if wake_now {
        wake();
    }
    true
}

/// The chunks of one stored read, as Python hands them over.
struct StoredChunks {
    id: u64,
    rx: mpsc::UnboundedReceiver<Result<Bytes, String>>,
    outbox: Arc<Mutex<Outbox>>,
    wake: Arc<dyn Fn() + Send + Sync>,
    stored: Stored,
    ended: bool,
}

impl Stream for StoredChunks {
    type Item = Result<Bytes, String>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if self.ended {
            return Poll::Ready(None);
        }
        let next = std::task::ready!(self.rx.poll_recv(cx));
        match &next {
            Some(Ok(_)) => {
                // Python may read one chunk further, unless it is done already.
                let id = self.id;
                if lock(&self.stored).contains_key(&id) {
                    push_to(&self.outbox, &*self.wake, |outbox| {
                        outbox.events.push_back(Event::ReadCredit { id });
                    });
                }
            }
            Some(Err(_)) | None => self.ended = true,
        }
        Poll::Ready(next)
    }
}

impl Drop for StoredChunks {
    fn drop(&mut self) {
        // Left before Python said it ended: Python stops reading (and lets go of
        // the store's object).
        if lock(&self.stored).remove(&self.id).is_some() {
            let id = self.id;
            push_to(&self.outbox, &*self.wake, |outbox| {
                outbox.events.push_back(Event::ReadCancel { id });
            });
        }
    }
}

/// [`ReadHost`] of a running broker: the bridge, and the registry (whose specs
/// bound the back-off of hole listings).
pub struct BridgeReads {
    pub bridge: Arc<Bridge>,
    pub registry: Arc<Registry>,
}

impl ReadHost for BridgeReads {
    fn read_stored(&self, fragment: &Fragment, offset: i64) -> BoxStream<Result<Bytes, String>> {
        self.bridge.read_stored(fragment, offset)
    }

    fn fragment_url(
        &self,
        fragment: &Fragment,
        ttl: Duration,
    ) -> BoxFuture<Result<String, String>> {
        self.bridge.ask_text(Ask::SignUrl {
            journal: fragment.journal.clone(),
            fragment: Box::new(fragment.clone()),
            ttl,
        })
    }

    fn on_hole(&self, journal: &str, hole_end: i64) -> bool {
        let ceiling = match self.registry.journal(journal) {
            None => DEFAULT_REFRESH_INTERVAL,
            Some(j) => j
                .spec
                .fragment
                .as_ref()
                .and_then(|f| f.refresh_interval.as_ref())
                .map_or(Duration::ZERO, |d| {
                    Duration::new(d.seconds.max(0) as u64, d.nanos.max(0) as u32)
                }),
        };
        self.bridge.list_for_hole(journal, hole_end, ceiling)
    }

    fn check_reachable(&self) -> Result<(), String> {
        self.bridge.check_reachable()
    }

    fn dial(&self) -> Dial {
        AppendDeps::dial(&*self.bridge)
    }

    fn peer_metadata(&self, journal: &str, capability: u32) -> MetadataMap {
        AppendDeps::peer_metadata(&*self.bridge, journal, capability)
    }
}

#[cfg(test)]
mod tests;

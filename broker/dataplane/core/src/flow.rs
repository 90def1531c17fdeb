//! Append flow control (the Rust port of the Python
//! `gazette.broker.server.flow_control`, itself after Gazette's
//! `broker/append_flow_control.go`).
//!
//! Two limits act on the content of an append stream:
//!
//! - a per-journal *maximum* rate (`JournalSpec.max_append_rate`, capped by
//!   `--broker.max-append-rate`): a chunk larger than the banked balance is held
//!   back until ticks refill the balance (a "delayed chunk");
//! - a *minimum* rate (`--broker.min-append-rate`): a client that holds the
//!   journal's pipeline while sending slower than this is cut off with
//!   [`FlowControlUnderflow`], since every other writer of the journal waits
//!   behind it.
//!
//! [`FlowState`] is the bare arithmetic over milliseconds and chunk lengths, so
//! tests can feed it exact vectors. [`FlowControl`] puts it between an append and
//! the client's message stream, ticking every [`QUANTUM`]. A replica keeps one
//! `FlowState` for its journal: balance and clock carry over from one append to
//! the next (see [`FlowState::reset`]).
//!
//! Where this departs from Python, it is only in how Rust expresses it:
//!
//! - Python's integers are unbounded; here products of a rate and a duration are
//!   taken in `i128` and results saturate at the `i64` range (reached only by
//!   rates and spans of exabytes).
//! - A message that [`FlowControl::recv`] has taken from the stream but not yet
//!   paid for stays with the `FlowControl`, not in the call: dropping a `recv`
//!   future (a `select!` that chose another branch) loses nothing, and the next
//!   call resumes paying for it.
//! - A failure of the source is handed out as a clone on every later `recv`
//!   (Python re-raises the same exception object).
//! - Time is tokio's monotonic clock anchored once to the wall time
//!   ([`FlowClock`]), where Python reads `time.time()` at each tick; a step of the
//!   wall clock therefore neither stalls nor rushes the ticks.
//! - The source's failures are all logged by [`FlowControl::close`]; Python
//!   leaves out a cancellation, which a generic error type cannot tell apart.

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures_util::{Stream, StreamExt};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::{sleep_until, timeout_at, Instant};

use crate::protocol::AppendRequest;

/// How often flow control is evaluated: the balance refills and the
/// minimum-rate allowance drains in steps of this.
pub const QUANTUM: Duration = Duration::from_millis(50);
/// Seconds of rate granted up front: the initial balance of a journal, and how
/// long a new append may go before it must have sent at the minimum rate. A
/// second roughly bounds the round trip in which a client learns it may send.
pub const BURST_SECONDS: i64 = 1;
/// Unused balance is banked up to this many seconds of maximum rate, so a
/// journal written in bursts is not throttled right after a quiet spell.
pub const BANK_FACTOR: i64 = 10;
/// `--broker.min-append-rate` unless set: 64 KiB a second.
pub const DEFAULT_MIN_APPEND_RATE: i64 = 1 << 16;
/// Messages the reader of a [`FlowControl`] receives ahead of the one the append
/// is working on: enough to overlap the transport's delivery with the append's
/// work, few enough that a slow append holds little of a client's data.
pub const READ_AHEAD: usize = 2;

/// The client did not keep up the minimum append rate. The text is what clients
/// see (as `UNKNOWN`), the same as from the Python broker and from Gazette.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("client stream didn't sustain the minimum append data rate")]
pub struct FlowControlUnderflow;

/// Why [`FlowControl::recv`] gave no message.
#[derive(Debug, thiserror::Error)]
pub enum FlowError<E> {
    /// The client sent slower than the minimum rate (answered as `UNKNOWN`).
    #[error(transparent)]
    Underflow(#[from] FlowControlUnderflow),
    /// The append gave up on its client (its `aborted` check turned true),
    /// answered as `CANCELLED`; the text is the Python `errors.Cancelled`.
    #[error("context canceled")]
    Cancelled,
    /// The message stream failed (e.g. tonic's `Status` of a reset stream).
    #[error(transparent)]
    Source(E),
}

/// Process-wide limits, from `--broker.max-append-rate` and
/// `--broker.min-append-rate`, in bytes a second. A maximum of 0 is no maximum.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlowLimits {
    pub max_append_rate: i64,
    pub min_append_rate: i64,
}

impl Default for FlowLimits {
    fn default() -> Self {
        FlowLimits {
            max_append_rate: 0,
            min_append_rate: DEFAULT_MIN_APPEND_RATE,
        }
    }
}

/// The token bucket of one journal, in bytes and milliseconds.
///
/// `balance` is what may be sent now under the maximum rate; `spent` is what the
/// client has sent within the minimum-rate allowance, drained by ticks, and the
/// append underflows when it runs out; `charge` is what the chunk in hand still
/// owes the balance. The fields are public because tests check them against
/// exact vectors and metrics read the chunk counts.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FlowState {
    pub max_rate: i64,
    pub min_rate: i64,
    pub balance: i64,
    pub spent: i64,
    pub charge: i64,
    pub last_millis: i64,
    pub total_chunks: i64,
    pub delayed_chunks: i64,
}

impl FlowState {
    /// Begins a new append at `now_millis`, keeping the balance and clock of the
    /// journal's previous append.
    pub fn reset(&mut self, spec_max_rate: i64, limits: &FlowLimits, now_millis: i64) {
        let (balance, last) = (self.balance, self.last_millis);
        let mut max_rate = spec_max_rate;
        // Deliberately as Gazette has it: the process-wide limit lowers a journal's
        // non-zero rate, but a journal with no limit (0) stays unlimited.
        if limits.max_append_rate != 0 && limits.max_append_rate < max_rate {
            max_rate = limits.max_append_rate;
        }
        *self = FlowState {
            max_rate,
            balance,
            last_millis: last,
            ..FlowState::default()
        };
        if last == 0 {
            self.balance = max_rate.saturating_mul(BURST_SECONDS);
            self.last_millis = now_millis;
        } else {
            // Bring the balance up to date with the minimum rate still at zero, so
            // that idle time since the last append does not count against this one
            // (the underflow that this tick reports is therefore meaningless).
            let _ = self.on_tick(now_millis);
        }
        self.min_rate = limits.min_append_rate;
        self.spent = limits.min_append_rate.saturating_mul(BURST_SECONDS);
    }

    /// Advances the clock to `millis`, refilling the balance and draining the
    /// minimum-rate allowance, and fails once the allowance is used up.
    pub fn on_tick(&mut self, millis: i64) -> Result<(), FlowControlUnderflow> {
        if millis < self.last_millis {
            // The clock went back: wait for it to catch up rather than refund time.
            return Ok(());
        }
        let elapsed = millis - self.last_millis;
        let refill = i128::from(self.balance) + per_elapsed(self.max_rate, elapsed);
        let cap = i128::from(self.max_rate) * i128::from(BANK_FACTOR);
        self.balance = saturate(refill.min(cap));
        let drain = per_elapsed(self.min_rate, elapsed).min(i128::from(self.spent));
        self.spent = saturate(i128::from(self.spent) - drain);
        self.last_millis = millis;
        self.debit();
        if self.spent <= 0 {
            return Err(FlowControlUnderflow);
        }
        Ok(())
    }

    /// Charges a chunk of `length` bytes just received.
    ///
    /// # Panics
    ///
    /// If the previous chunk is not yet paid for: a caller bug ([`FlowControl`]
    /// never does it), never a client's doing.
    pub fn on_chunk(&mut self, length: i64) {
        assert!(self.charge == 0, "charge != 0");
        self.charge = length;
        self.debit();
        if self.charge != 0 {
            self.delayed_chunks += 1;
        }
        self.total_chunks += 1;
    }

    /// The journal's route changed during the append: lift the maximum rate for
    /// the rest of it. Routes converge through appends, so the one under way
    /// should finish fast, even above the journal's rate.
    pub fn on_invalidate(&mut self) {
        self.max_rate = 0;
        self.debit();
    }

    /// Pays what it can of the charge from the balance, counting what is paid
    /// toward the minimum rate; with no maximum rate, the whole charge is paid.
    fn debit(&mut self) {
        let d = self.balance.min(self.charge);
        self.balance -= d;
        self.charge -= d;
        self.spent = self.spent.saturating_add(d).min(self.min_rate);
        if self.max_rate == 0 {
            self.spent = self.spent.saturating_add(self.charge).min(self.min_rate);
            self.charge = 0;
        }
    }
}

/// Bytes of `rate` (a second) over `elapsed` milliseconds, rounded down as
/// Python's `//` does (also for a negative rate, which specs should not have).
fn per_elapsed(rate: i64, elapsed: i64) -> i128 {
    (i128::from(rate) * i128::from(elapsed)).div_euclid(1000)
}

fn saturate(v: i128) -> i64 {
    v.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64
}

/// A message whose content counts against the flow limits.
pub trait Content {
    /// Bytes of content the message carries.
    fn content_len(&self) -> usize;
}

impl Content for AppendRequest {
    fn content_len(&self) -> usize {
        self.content.len()
    }
}

/// Milliseconds since the Unix epoch, as [`FlowState`] counts them, read from
/// tokio's clock.
///
/// Flow control both reads the time and sleeps until the next tick. Taking both
/// from tokio lets a test pause and advance one clock for the two (and, paused,
/// tokio skips ahead whenever everything waits, so a test of a stalled client
/// takes no real time), where an injected clock trait would need a sleep of its
/// own to stay consistent with what it reads. Being tokio's `Instant`, it is also
/// monotonic. One `FlowClock` serves a whole broker, so that the milliseconds a
/// journal's state keeps from one append are comparable with the next one's.
#[derive(Clone, Copy, Debug)]
pub struct FlowClock {
    origin: Instant,
    origin_millis: i64,
}

impl FlowClock {
    /// A clock that reads the wall time now and runs on from it.
    pub fn new() -> Self {
        let millis = match SystemTime::now().duration_since(UNIX_EPOCH) {
            Ok(d) => i64::try_from(d.as_millis()).unwrap_or(i64::MAX),
            Err(_) => 0,
        };
        FlowClock::starting_at(millis)
    }

    /// A clock that reads `millis` now.
    pub fn starting_at(millis: i64) -> Self {
        FlowClock {
            origin: Instant::now(),
            origin_millis: millis,
        }
    }

    pub fn now_millis(&self) -> i64 {
        self.millis_at(Instant::now())
    }

    fn millis_at(&self, t: Instant) -> i64 {
        let since = t.saturating_duration_since(self.origin).as_millis();
        self.origin_millis
            .saturating_add(i64::try_from(since).unwrap_or(i64::MAX))
    }
}

impl Default for FlowClock {
    fn default() -> Self {
        FlowClock::new()
    }
}

type Check = Box<dyn Fn() -> bool + Send>;

/// Reads the messages of an append's stream through the journal's [`FlowState`].
///
/// A task per stream receives up to [`READ_AHEAD`] messages ahead of the append,
/// so the transport's delivery overlaps the append's work on the current one; it
/// is aborted when the `FlowControl` is dropped or [`closed`](Self::close).
///
/// Two checks are polled once a tick: `aborted` (the append gave up on its
/// client: the next tick fails with [`FlowError::Cancelled`]) and `invalidated`
/// (the journal's route changed: [`FlowState::on_invalidate`], once).
pub struct FlowControl<'s, M, E> {
    state: &'s mut FlowState,
    clock: FlowClock,
    invalidated: Check,
    aborted: Check,
    invalidate_seen: bool,
    next_tick: Instant,
    rx: mpsc::Receiver<Result<M, E>>,
    reader: Option<JoinHandle<()>>,
    /// Taken from the stream and charged, not yet paid for.
    pending: Option<M>,
    /// How the stream ended (Ok: it ran out), answered to every later `recv`.
    end: Option<Result<(), E>>,
}

impl<'s, M, E> FlowControl<'s, M, E>
where
    M: Content + Send + 'static,
    E: Clone + fmt::Display + Send + 'static,
{
    /// Starts reading `source` (spawning its reader on the current tokio
    /// runtime) for an append whose `state` was [`reset`](FlowState::reset) with
    /// `clock`'s time.
    pub fn new<S>(state: &'s mut FlowState, source: S, clock: FlowClock) -> Self
    where
        S: Stream<Item = Result<M, E>> + Send + 'static,
    {
        let (tx, rx) = mpsc::channel(READ_AHEAD);
        FlowControl {
            state,
            clock,
            invalidated: Box::new(|| false),
            aborted: Box::new(|| false),
            invalidate_seen: false,
            next_tick: Instant::now() + QUANTUM,
            rx,
            reader: Some(tokio::spawn(read_ahead(source, tx))),
            pending: None,
            end: None,
        }
    }

    /// Polls `check` each tick; once it is true the maximum rate is lifted.
    pub fn invalidated(mut self, check: impl Fn() -> bool + Send + 'static) -> Self {
        self.invalidated = Box::new(check);
        self
    }

    /// Polls `check` each tick; once it is true `recv` fails with
    /// [`FlowError::Cancelled`].
    pub fn aborted(mut self, check: impl Fn() -> bool + Send + 'static) -> Self {
        self.aborted = Box::new(check);
        self
    }

    pub fn state(&self) -> &FlowState {
        self.state
    }

    /// The next message once its content is paid for, or `None` at the end of
    /// the stream. The end, or the stream's failure, is answered again to every
    /// later call. Cancel-safe: a message taken from the stream is kept until a
    /// call returns it.
    pub async fn recv(&mut self) -> Result<Option<M>, FlowError<E>> {
        loop {
            self.tick_if_due()?;
            if self.pending.is_none() {
                match &self.end {
                    Some(Ok(())) => return Ok(None),
                    Some(Err(e)) => return Err(FlowError::Source(e.clone())),
                    None => {}
                }
                match timeout_at(self.next_tick, self.rx.recv()).await {
                    Err(_) => continue, // A tick is due first.
                    Ok(Some(Ok(msg))) => {
                        let length = i64::try_from(msg.content_len()).unwrap_or(i64::MAX);
                        self.state.on_chunk(length);
                        self.pending = Some(msg);
                    }
                    Ok(Some(Err(e))) => self.end = Some(Err(e)),
                    Ok(None) => self.end = Some(Ok(())),
                }
                if self.pending.is_none() {
                    continue;
                }
            }
            if self.state.charge == 0 {
                return Ok(self.pending.take());
            }
            sleep_until(self.next_tick).await;
        }
    }

    fn tick_if_due(&mut self) -> Result<(), FlowError<E>> {
        let now = Instant::now();
        if now < self.next_tick {
            return Ok(());
        }
        self.next_tick = now + QUANTUM;
        if (self.aborted)() {
            return Err(FlowError::Cancelled);
        }
        if !self.invalidate_seen && (self.invalidated)() {
            self.invalidate_seen = true;
            self.state.on_invalidate();
        }
        self.state.on_tick(self.clock.millis_at(now))?;
        Ok(())
    }

    /// Stops the reader, dropping the stream (and a receive in flight).
    ///
    /// The append ends on whichever failure it met first; a failure of the stream
    /// that came after it, or that it never read, is logged at debug rather than
    /// lost without a word.
    pub async fn close(mut self) {
        if let Some(reader) = self.reader.take() {
            reader.abort();
            // Only a cancellation, or a panic of the source, which is its own.
            let _ = reader.await;
        }
        let mut failure = match self.end.take() {
            Some(Err(e)) => Some(e),
            _ => None,
        };
        while let Ok(item) = self.rx.try_recv() {
            if let Err(e) = item {
                failure.get_or_insert(e);
            }
        }
        if let Some(e) = failure {
            tracing::debug!("append read-ahead ended with a failure: {e}");
        }
    }
}

impl<M, E> Drop for FlowControl<'_, M, E> {
    fn drop(&mut self) {
        if let Some(reader) = self.reader.take() {
            reader.abort();
        }
    }
}

/// Moves messages of `source` into `tx`, pulling one only once there is room
/// for it, so that no more than [`READ_AHEAD`] wait beside the one in the
/// append's hands. Dropping `tx` (returning) marks the end of the stream.
async fn read_ahead<S, M, E>(source: S, tx: mpsc::Sender<Result<M, E>>)
where
    S: Stream<Item = Result<M, E>>,
{
    let mut source = std::pin::pin!(source);
    loop {
        let Ok(permit) = tx.reserve().await else {
            return; // The FlowControl is gone.
        };
        match source.next().await {
            Some(Ok(msg)) => permit.send(Ok(msg)),
            Some(Err(e)) => {
                permit.send(Err(e));
                return;
            }
            None => return,
        }
    }
}

#[cfg(test)]
mod tests;

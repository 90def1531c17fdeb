//! Spool directories' disks, reached from async code (the Rust side of the Python
//! `files.DiskWorker` and of how `spool.Spool` uses it).
//!
//! A write to a spool file may block for as long as the disk pleases (a stalled
//! device, a hung network volume). So no file operation of a spool directory ever
//! runs on the async executor: a [`DiskWorker`] runs them, first in first out, on
//! a thread of its own, one per directory ([`DiskWorkers`]), and a caller waits at
//! most its timeout (`--broker.spool-write-timeout`).
//!
//! The operation itself can't be interrupted. A spool tolerates a write that
//! outlives its caller because of the order: it only touched offsets past the
//! commit point, and whatever the spool writes there next is queued behind it,
//! so lands after it. Several threads per directory could reorder the two.
//!
//! [`AsyncSpool`] is the handle the native Append and Replicate paths own over a
//! journal's [`Spool`]. Its state is split in two:
//!
//! - the spool itself, behind an async mutex that one request at a time holds.
//!   Content is checked against it, then only the file creation and the write go
//!   to the directory's thread (the SHA-1 is extended meanwhile, on the caller's
//!   side); the spool counts the content once the write answered in time. A write
//!   that timed out or failed thus leaves it untouched, whenever the disk gets to
//!   the write. Proposals apply on the caller's task, except the rare ones that
//!   may wait on compression (joining a batch, or compressing the rest of a
//!   fragment at a roll), which run on a thread of their own.
//! - a snapshot of its views ([`SpoolView`]), updated under a plain mutex, held
//!   for a copy, whenever a request completes. Views read only the snapshot, so
//!   they never wait on the disk or on the spool's mutex, even while a write is
//!   stuck. (A lock-free split of each field would make them cheaper but could
//!   show an `end` and a `delta` of different moments.)
//!
//! Threads here are never joined implicitly: a disk that never answers must not
//! keep the process from exiting.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::future::Future;
use std::io;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

/// A worker thread idle this long exits; the next operation starts another.
pub const IDLE_EXIT: Duration = Duration::from_secs(5);

/// The directory's disk did not answer in time.
#[derive(Clone, Debug, thiserror::Error)]
pub enum DiskTimeout {
    /// An earlier operation has outrun a caller's timeout and still runs: a new
    /// one could only wait behind it, so it is refused at once.
    #[error(
        "spool directory {directory} is stalled: an earlier operation has run {:.1}s, past the {}s timeout",
        running_for.as_secs_f64(),
        fmt_g(*timeout)
    )]
    Stalled {
        directory: String,
        running_for: Duration,
        timeout: Duration,
    },
    /// The operation did not finish within its caller's timeout.
    #[error("spool directory {directory}: no answer within {}s (is its disk stalled?)", fmt_g(*timeout))]
    NoAnswer {
        directory: String,
        timeout: Duration,
    },
}

/// Why [`DiskWorker::run`] has no result of its operation.
#[derive(Debug, thiserror::Error)]
pub enum RunError<E> {
    #[error(transparent)]
    Timeout(#[from] DiskTimeout),
    /// The operation ran, and failed.
    #[error("{0}")]
    Failed(E),
    /// The worker had no thread and could not make one.
    #[error("spool directory {directory}: no thread to run on: {source}")]
    NoThread {
        directory: String,
        #[source]
        source: io::Error,
    },
}

/// A seconds count as Python's `%g` writes it (six significant digits, no
/// trailing zeros): timeouts appear in messages exactly as the Python broker's.
pub fn fmt_g(d: Duration) -> String {
    let x = d.as_secs_f64();
    if x == 0.0 {
        return "0".to_owned();
    }
    let sci = format!("{x:.5e}");
    let (mantissa, exp) = sci.split_once('e').expect("an exponent");
    let exp: i32 = exp.parse().expect("a decimal exponent");
    if !(-4..6).contains(&exp) {
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{}e{sign}{:02}", trim_zeros(mantissa), exp.abs())
    } else {
        trim_zeros(&format!("{x:.*}", (5 - exp) as usize)).to_owned()
    }
}

fn trim_zeros(s: &str) -> &str {
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.')
    } else {
        s
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Operations run outside the locks here, and nothing under them panics midway.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

// -- DiskWorker ------------------------------------------------------------------------------

/// One operation's first phase (the blocking call, on the worker) returns the second
/// (handing the outcome over), run once the worker no longer counts as busy.
type Job = Box<dyn FnOnce() -> Finish + Send>;
type Finish = Box<dyn FnOnce() -> Outcome + Send>;

enum Outcome {
    Delivered,
    /// The caller had stopped waiting; what the operation failed with, if it did.
    Dropped(Option<String>),
    Posted(Option<String>),
}

enum Item {
    Op(Op),
    /// Let the thread exit once nothing else is queued ([`DiskWorker::close`]).
    Stop,
}

struct Op {
    job: Job,
    flags: Arc<OpFlags>,
}

#[derive(Default)]
struct OpFlags {
    /// Its caller's timeout ran out: while it still runs, the directory is stalled.
    timed_out: AtomicBool,
}

struct State {
    queue: VecDeque<Item>,
    /// The live thread's serial number (None: no thread).
    thread: Option<u64>,
    serial: u64,
    running: Option<Arc<OpFlags>>,
    running_since: Instant,
}

struct Inner {
    directory: Option<PathBuf>,
    name: String,
    idle_exit: Duration,
    state: Mutex<State>,
    /// The thread waits here for work.
    work: Condvar,
    /// `close` waits here for the thread to exit.
    exited: Condvar,
}

/// Runs the blocking file operations of one spool directory, in order, on one
/// thread (see the module documentation).
///
/// While an operation has run past a caller's timeout, callers fail at once
/// rather than queue behind it: appends to a stalled directory fail fast until the
/// disk answers, and nothing piles up meanwhile. The thread is made on first use,
/// exits after `idle_exit` without work, and is never joined but by [`close`]
/// (bounded), so a stuck disk cannot hold up the process's exit. Cloning gives
/// another handle on the same worker.
///
/// [`close`]: DiskWorker::close
#[derive(Clone)]
pub struct DiskWorker {
    inner: Arc<Inner>,
}

impl fmt::Debug for DiskWorker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "DiskWorker<{}>", self.inner.name)
    }
}

enum QueueError {
    Stalled(DiskTimeout),
    NoThread(io::Error),
}

impl DiskWorker {
    /// The worker of `directory` (None or empty: the OS temporary directory).
    pub fn new(directory: Option<&Path>) -> DiskWorker {
        DiskWorker::with_idle_exit(directory, IDLE_EXIT)
    }

    pub fn with_idle_exit(directory: Option<&Path>, idle_exit: Duration) -> DiskWorker {
        let directory = directory
            .filter(|d| !d.as_os_str().is_empty())
            .map(Path::to_path_buf);
        let name = directory.as_ref().map_or_else(
            || "the system temporary directory".to_owned(),
            |d| d.display().to_string(),
        );
        DiskWorker {
            inner: Arc::new(Inner {
                directory,
                name,
                idle_exit,
                state: Mutex::new(State {
                    queue: VecDeque::new(),
                    thread: None,
                    serial: 0,
                    running: None,
                    running_since: Instant::now(),
                }),
                work: Condvar::new(),
                exited: Condvar::new(),
            }),
        }
    }

    pub fn directory(&self) -> Option<&Path> {
        self.inner.directory.as_deref()
    }

    /// The directory as messages name it.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// Whether the worker has a thread (idle or busy).
    pub fn alive(&self) -> bool {
        lock(&self.inner.state).thread.is_some()
    }

    /// How long the running operation has been running (zero when none runs): how
    /// a health check tells a stalled disk.
    pub fn busy_for(&self) -> Duration {
        let st = lock(&self.inner.state);
        match st.running {
            Some(_) => st.running_since.elapsed(),
            None => Duration::ZERO,
        }
    }

    /// `op()` on the worker's thread, its caller waiting at most `timeout`.
    ///
    /// `op` is queued when `run` is called (not when the future is first polled),
    /// and the timeout counts from then. An `op` whose caller stopped waiting (the
    /// timeout, or the future dropped) never runs if it had not started; one that
    /// had runs to its end, and its outcome is dropped on the worker's thread (a
    /// file made for nobody closes there). `timeout` is a parameter, not the
    /// caller's own deadline, because it is also the bound past which a running
    /// operation counts as stuck. A panic of `op` resumes in the caller.
    pub fn run<T, E, F>(
        &self,
        op: F,
        timeout: Duration,
    ) -> impl Future<Output = Result<T, RunError<E>>> + Send + 'static
    where
        F: FnOnce() -> Result<T, E> + Send + 'static,
        T: Send + 'static,
        E: fmt::Display + Send + 'static,
    {
        let (tx, rx) = oneshot::channel();
        let job: Job = Box::new(move || {
            let result = catch_unwind(AssertUnwindSafe(op));
            let failure = match &result {
                Ok(Ok(_)) => None,
                Ok(Err(e)) => Some(e.to_string()),
                Err(_) => Some("it panicked".to_owned()),
            };
            Box::new(move || match tx.send(result) {
                Ok(()) => Outcome::Delivered,
                Err(_) => Outcome::Dropped(failure),
            })
        });
        let flags = Arc::new(OpFlags::default());
        let queued = self.queue(
            Op {
                job,
                flags: flags.clone(),
            },
            Some(timeout),
        );
        let deadline = tokio::time::Instant::now() + timeout;
        // Made now, not at the first poll: dropping an unpolled future abandons too.
        let mut abandon = Abandon {
            inner: self.inner.clone(),
            flags,
            armed: queued.is_ok(),
        };
        async move {
            match queued {
                Ok(()) => {}
                Err(QueueError::Stalled(t)) => return Err(RunError::Timeout(t)),
                Err(QueueError::NoThread(source)) => {
                    return Err(RunError::NoThread {
                        directory: abandon.inner.name.clone(),
                        source,
                    })
                }
            }
            let outcome = tokio::time::timeout_at(deadline, rx).await;
            match outcome {
                Ok(Ok(result)) => {
                    abandon.disarm(); // It ran: nothing left in the queue.
                    match result {
                        Ok(Ok(v)) => Ok(v),
                        Ok(Err(e)) => Err(RunError::Failed(e)),
                        Err(panic) => resume_unwind(panic),
                    }
                }
                // The worker dropped it unrun, which only abandoning does: as a timeout.
                Ok(Err(_)) | Err(_) => {
                    {
                        let _st = lock(&abandon.inner.state);
                        abandon.flags.timed_out.store(true, Ordering::Relaxed);
                    }
                    Err(RunError::Timeout(DiskTimeout::NoAnswer {
                        directory: abandon.inner.name.clone(),
                        timeout,
                    }))
                }
            }
        }
    }

    /// Queues `op` without waiting for it: in order with the rest, its failure
    /// logged. For writes nobody waits for (a replica's record of a confirmation)
    /// that must not land before the writes queued ahead of them.
    pub fn post<E, F>(&self, op: F)
    where
        F: FnOnce() -> Result<(), E> + Send + 'static,
        E: fmt::Display,
    {
        let job: Job = Box::new(move || {
            let failure = match catch_unwind(AssertUnwindSafe(op)) {
                Ok(Ok(())) => None,
                Ok(Err(e)) => Some(e.to_string()),
                Err(_) => Some("it panicked".to_owned()),
            };
            Box::new(move || Outcome::Posted(failure))
        });
        let op = Op {
            job,
            flags: Arc::default(),
        };
        if let Err(QueueError::NoThread(e)) = self.queue(op, None) {
            tracing::warn!(
                "spool directory {}: a queued write was dropped, no thread to run it: {e}",
                self.inner.name
            );
        }
    }

    /// Lets the thread exit once the queue is empty; whether it exited within
    /// `timeout` (None: however long it takes). A thread stuck in an operation
    /// exits only once it returns. The worker stays usable: a later operation
    /// starts a new thread.
    pub fn close(&self, timeout: Option<Duration>) -> bool {
        let inner = &self.inner;
        let mut st = lock(&inner.state);
        let Some(serial) = st.thread else {
            return true;
        };
        st.queue.push_back(Item::Stop);
        inner.work.notify_one();
        let deadline = timeout.map(|t| Instant::now() + t);
        while st.thread == Some(serial) {
            st = match deadline {
                None => inner
                    .exited
                    .wait(st)
                    .unwrap_or_else(PoisonError::into_inner),
                Some(d) => {
                    let now = Instant::now();
                    if now >= d {
                        return false;
                    }
                    inner
                        .exited
                        .wait_timeout(st, d - now)
                        .unwrap_or_else(PoisonError::into_inner)
                        .0
                }
            };
        }
        true
    }

    /// Queues `op`, unless (with a timeout to judge by) the directory is stalled;
    /// starts the thread if there is none.
    fn queue(&self, op: Op, stall_timeout: Option<Duration>) -> Result<(), QueueError> {
        let inner = &self.inner;
        let mut st = lock(&inner.state);
        if let (Some(timeout), Some(running)) = (stall_timeout, &st.running) {
            let running_for = st.running_since.elapsed();
            // Its own timeout may have fired a hair before it had run `timeout`
            // (it started a moment after its caller began to wait): hence the flag.
            if running.timed_out.load(Ordering::Relaxed) || running_for > timeout {
                return Err(QueueError::Stalled(DiskTimeout::Stalled {
                    directory: inner.name.clone(),
                    running_for,
                    timeout,
                }));
            }
        }
        st.queue.push_back(Item::Op(op));
        if st.thread.is_some() {
            inner.work.notify_one();
            return Ok(());
        }
        st.serial += 1;
        let serial = st.serial;
        let worker = inner.clone();
        // Detached: nothing joins it but a bounded close().
        let spawned = thread::Builder::new()
            .name(format!("spool-disk {}", inner.name))
            .spawn(move || serve(worker, serial));
        match spawned {
            Ok(_) => {
                st.thread = Some(serial);
                Ok(())
            }
            Err(e) => {
                // With no thread, the queue held nothing else: exits need it empty.
                let op = st.queue.pop_back();
                drop(st);
                drop(op);
                Err(QueueError::NoThread(e))
            }
        }
    }
}

/// Stops an abandoned operation from running if it has not started, releasing
/// what it holds (an append's content) at once.
struct Abandon {
    inner: Arc<Inner>,
    flags: Arc<OpFlags>,
    armed: bool,
}

impl Abandon {
    fn disarm(&mut self) {
        self.armed = false;
    }
}

impl Drop for Abandon {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let removed = {
            let mut st = lock(&self.inner.state);
            let at = st.queue.iter().position(
                |item| matches!(item, Item::Op(op) if Arc::ptr_eq(&op.flags, &self.flags)),
            );
            at.and_then(|i| st.queue.remove(i))
        };
        drop(removed);
    }
}

fn serve(inner: Arc<Inner>, serial: u64) {
    let mut st = lock(&inner.state);
    loop {
        let item = match st.queue.pop_front() {
            Some(item) => item,
            None => {
                let deadline = Instant::now() + inner.idle_exit;
                loop {
                    let now = Instant::now();
                    if !st.queue.is_empty() || now >= deadline {
                        break;
                    }
                    st = inner
                        .work
                        .wait_timeout(st, deadline - now)
                        .unwrap_or_else(PoisonError::into_inner)
                        .0;
                }
                st.queue.pop_front().unwrap_or(Item::Stop)
            }
        };
        let op = match item {
            Item::Op(op) => op,
            Item::Stop => {
                // Exit only with nothing queued: a thread is started only when there is
                // none, so whatever was queued under the lock meanwhile is served.
                if st.queue.is_empty() {
                    debug_assert_eq!(st.thread, Some(serial));
                    st.thread = None;
                    drop(st);
                    inner.exited.notify_all();
                    return;
                }
                continue;
            }
        };
        st.running = Some(op.flags);
        st.running_since = Instant::now();
        drop(st);
        let finish = (op.job)();
        let took = {
            let mut st = lock(&inner.state);
            st.running = None;
            st.running_since.elapsed()
        };
        // Handing the outcome over (or dropping it) happens here, on this thread.
        match finish() {
            Outcome::Delivered | Outcome::Posted(None) => {}
            Outcome::Posted(Some(e)) => {
                tracing::warn!("spool directory {}: a queued write failed: {e}", inner.name);
            }
            Outcome::Dropped(failure) => {
                tracing::warn!(
                    directory = %inner.name,
                    seconds = took.as_secs_f64(),
                    "spool directory {}: an operation its caller gave up on finished after {:.1}s{}",
                    inner.name,
                    took.as_secs_f64(),
                    failure.map(|e| format!(" ({e})")).unwrap_or_default()
                );
            }
        }
        st = lock(&inner.state);
    }
}

/// The [`DiskWorker`] of each spool directory, made on first use.
pub struct DiskWorkers {
    idle_exit: Duration,
    workers: Mutex<HashMap<PathBuf, DiskWorker>>,
}

impl Default for DiskWorkers {
    fn default() -> Self {
        DiskWorkers::with_idle_exit(IDLE_EXIT)
    }
}

impl fmt::Debug for DiskWorkers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let workers = lock(&self.workers);
        f.debug_list().entries(workers.values()).finish()
    }
}

impl DiskWorkers {
    pub fn new() -> DiskWorkers {
        DiskWorkers::default()
    }

    pub fn with_idle_exit(idle_exit: Duration) -> DiskWorkers {
        DiskWorkers {
            idle_exit,
            workers: Mutex::default(),
        }
    }

    /// The worker of `directory` (None or empty: the OS temporary directory).
    pub fn for_directory(&self, directory: Option<&Path>) -> DiskWorker {
        let key = directory.map(Path::to_path_buf).unwrap_or_default();
        lock(&self.workers)
            .entry(key)
            .or_insert_with_key(|key| DiskWorker::with_idle_exit(Some(key), self.idle_exit))
            .clone()
    }

    /// Stops every worker's thread (see [`DiskWorker::close`]); whether all
    /// stopped. `timeout` bounds the whole call, not each worker.
    pub fn close(&self, timeout: Option<Duration>) -> bool {
        let workers: Vec<DiskWorker> = lock(&self.workers).values().cloned().collect();
        let deadline = timeout.map(|t| Instant::now() + t);
        let mut stopped = true;
        for w in workers {
            let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            stopped = w.close(left) && stopped;
        }
        stopped
    }
}

mod async_spool;

pub use async_spool::AsyncSpool;

#[cfg(test)]
mod tests;

//! [`AsyncSpool`]: a journal's spool as the native paths hold it (see the module
//! documentation of `disk`).

use std::fmt;
use std::io;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::SystemTime;

use tokio::sync::oneshot;

use super::{lock, DiskWorker, RunError};
use crate::protocol::{journal_spec, Fragment, LabelSet, ReplicateRequest, ReplicateResponse};
use crate::spool::files::SpoolFile;
use crate::spool::{
    maybe_roll_view, ContentWrite, InvalidRollToOffset, LocalFragment, Spool, SpoolConfig,
    SpoolError, SpoolView,
};

/// `f()` on a thread of its own (never joined, so never holding up an exit);
/// inline if no thread can be made. For the rare spool work that may wait on
/// compression.
async fn off_thread<R: Send + 'static>(name: &str, f: impl FnOnce() -> R + Send + 'static) -> R {
    let (tx, rx) = oneshot::channel();
    let slot = Arc::new(Mutex::new(Some(f)));
    let theirs = slot.clone();
    let spawned = thread::Builder::new().name(name.to_owned()).spawn(move || {
        if let Some(f) = lock(&theirs).take() {
            let _ = tx.send(catch_unwind(AssertUnwindSafe(f)));
        }
    });
    if let Err(e) = spawned {
        tracing::warn!("{name} thread not started ({e}); running inline");
        let f = lock(&slot).take().expect("the thread never ran");
        return f();
    }
    match rx.await {
        Ok(Ok(r)) => r,
        Ok(Err(panic)) => resume_unwind(panic),
        Err(_) => unreachable!("the thread sends before it ends"),
    }
}

/// The async handle over one journal's [`Spool`] (see the module documentation).
///
/// Its owner (one Append pipeline or one Replicate stream at a time) applies
/// requests one after another; the views may be read from anywhere, any time.
pub struct AsyncSpool {
    spool: Arc<tokio::sync::Mutex<Spool>>,
    view: Arc<Mutex<SpoolView>>,
    worker: DiskWorker,
    config: Arc<SpoolConfig>,
}

impl fmt::Debug for AsyncSpool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "AsyncSpool<{:?}>", *lock(&self.view))
    }
}

impl AsyncSpool {
    /// Takes over `spool`; its disk is its config's directory's worker.
    pub fn new(spool: Spool) -> AsyncSpool {
        let config = spool.config().clone();
        let worker = config.workers.for_directory(config.directory.as_deref());
        AsyncSpool {
            view: Arc::new(Mutex::new(spool.view())),
            spool: Arc::new(tokio::sync::Mutex::new(spool)),
            worker,
            config,
        }
    }

    pub fn config(&self) -> &Arc<SpoolConfig> {
        &self.config
    }

    /// The worker of the spool's directory.
    pub fn worker(&self) -> &DiskWorker {
        &self.worker
    }

    // -- Views (never wait) --------------------------------------------------------------

    fn with_view<R>(&self, f: impl FnOnce(&SpoolView) -> R) -> R {
        f(&lock(&self.view))
    }

    /// The views as of the last completed request.
    pub fn view(&self) -> SpoolView {
        self.with_view(SpoolView::clone)
    }
    pub fn journal(&self) -> String {
        self.with_view(|v| v.spec.journal.clone())
    }
    pub fn begin(&self) -> i64 {
        self.with_view(SpoolView::begin)
    }
    pub fn end(&self) -> i64 {
        self.with_view(SpoolView::end)
    }
    /// Uncommitted bytes written past `end`.
    pub fn delta(&self) -> i64 {
        self.with_view(|v| v.delta)
    }
    pub fn content_length(&self) -> i64 {
        self.with_view(SpoolView::content_length)
    }
    /// The committed fragment.
    pub fn spec(&self) -> Fragment {
        self.with_view(|v| v.spec.clone())
    }
    /// The committed fragment with its file, as the index holds it.
    pub fn fragment(&self) -> LocalFragment {
        self.with_view(SpoolView::fragment)
    }
    pub fn registers(&self) -> LabelSet {
        self.with_view(|v| v.registers.clone())
    }
    pub fn file(&self) -> Option<Arc<SpoolFile>> {
        self.with_view(|v| v.file.clone())
    }
    pub fn first_append_time(&self) -> Option<SystemTime> {
        self.with_view(|v| v.first_append_time)
    }
    pub fn confirmed_end(&self) -> i64 {
        self.with_view(|v| v.confirmed_end)
    }
    /// Whether all committed content is known to be the journal's.
    pub fn confirmed(&self) -> bool {
        self.with_view(SpoolView::confirmed)
    }
    /// The fragment that committing the pending `delta` would produce.
    pub fn next(&self) -> Fragment {
        self.with_view(SpoolView::next)
    }
    /// The primary's next proposal ([`crate::spool::maybe_roll`]).
    pub fn maybe_roll(
        &self,
        roll_to_offset: i64,
        spec: &journal_spec::Fragment,
        now: SystemTime,
    ) -> Result<Fragment, InvalidRollToOffset> {
        self.with_view(|v| maybe_roll_view(v, roll_to_offset, spec, now))
    }

    // -- Transitions -------------------------------------------------------------------------

    /// Applies a content or proposal request (see [`Spool::apply`]).
    ///
    /// Content's file creation and write run on the directory's thread, each
    /// bounded by `config.write_timeout`; a timeout or an I/O failure fails the
    /// request ([`SpoolError::is_write_error`]) and leaves `delta` as it was.
    /// Dropping the future leaves the spool as if the request never came, or
    /// (a proposal already handed to its thread) as that thread leaves it.
    pub async fn apply(
        &self,
        req: &ReplicateRequest,
        primary: bool,
    ) -> Result<ReplicateResponse, SpoolError> {
        let mut sp = self.spool.clone().lock_owned().await;
        if req.proposal.is_none() {
            self.apply_content(&mut sp, req).await?;
            return Ok(ReplicateResponse::default());
        }
        if sp.apply_may_block(req, primary) {
            let req = req.clone();
            let view = self.view.clone();
            return off_thread("spool-roll", move || {
                let resp = sp.apply(&req, primary);
                *lock(&view) = sp.view();
                resp
            })
            .await;
        }
        let resp = sp.apply(req, primary);
        *lock(&self.view) = sp.view();
        resp
    }

    /// Applies a request that cannot fail (e.g. a rollback derived from this
    /// spool); panics if it does.
    pub async fn must_apply(&self, req: &ReplicateRequest) {
        match self.apply(req, false).await {
            Ok(resp) if resp.status == crate::protocol::Status::Ok as i32 => {}
            Ok(resp) => panic!("spool refused {req:?}: status {}", resp.status),
            Err(e) => panic!("spool refused {req:?}: {e}"),
        }
    }

    async fn apply_content(
        &self,
        sp: &mut Spool,
        req: &ReplicateRequest,
    ) -> Result<(), SpoolError> {
        let timeout = self.config.write_timeout;
        // Checked first, so a wrong delta creates no file.
        let mut prepared = sp.prepare_content(&req.content, req.content_delta)?;
        if let Some(create) = sp.file_to_create() {
            // A file made in time is kept even if the write below fails, as Python does.
            match self.worker.run(move || create.perform(), timeout).await {
                Ok(file) => {
                    sp.adopt_file(Arc::new(file));
                    lock(&self.view).sync_content(sp);
                }
                Err(e) => return Err(write_error(sp, e)),
            }
            prepared = sp.prepare_content(&req.content, req.content_delta)?;
        }
        let ContentWrite { disk, sum } = prepared;
        // Queued now; the SHA-1 is extended meanwhile, beside the write.
        let written = self.worker.run(move || disk.perform(), timeout);
        let hashed = if sum.len() >= self.config.threaded_write_size {
            tokio::task::spawn_blocking(move || sum.hash())
                .await
                .unwrap_or_else(|e| resume_unwind(e.into_panic()))
        } else {
            sum.hash()
        };
        match written.await {
            Ok(written) => {
                sp.finish_content(written, hashed);
                lock(&self.view).sync_content(sp);
                Ok(())
            }
            Err(e) => Err(write_error(sp, e)),
        }
    }

    /// Every member of the route committed this fragment through `end` (see
    /// [`Spool::confirm`]).
    pub async fn confirm(&self, end: i64) {
        let mut sp = self.spool.lock().await;
        sp.confirm(end);
        lock(&self.view).confirmed_end = sp.confirmed_end();
    }

    /// Writes the confirmed end into a recoverable spool file's record (nothing for
    /// an anonymous one). A primary awaits it (`wait`) before it acknowledges the
    /// append that confirmed it; a replica, which acknowledges nothing to clients,
    /// only queues it. `file` and `end` name what to record when the spool may have
    /// rolled since (the confirmation's file and end, taken when it happened); by
    /// default, the spool's own. A failure is logged, not returned: every member
    /// holds the content, and only its recovery after the whole route crashed
    /// depends on the record.
    pub async fn record_confirmed(
        &self,
        file: Option<Arc<SpoolFile>>,
        end: Option<i64>,
        wait: bool,
    ) {
        let Some((write, at)) = self.confirmed_writer(file, end) else {
            return;
        };
        if !wait {
            self.worker.post(write);
            return;
        }
        if let Err(e) = self.worker.run(write, self.config.write_timeout).await {
            tracing::warn!(
                "journal {}: confirmed end {at} not recorded on disk: {e}",
                self.journal()
            );
        }
    }

    /// Queues writing the confirmed end into the file's record (see
    /// [`record_confirmed`](Self::record_confirmed)).
    pub fn post_confirmed(&self) {
        if let Some((write, _)) = self.confirmed_writer(None, None) {
            self.worker.post(write);
        }
    }

    #[allow(clippy::type_complexity)]
    fn confirmed_writer(
        &self,
        file: Option<Arc<SpoolFile>>,
        end: Option<i64>,
    ) -> Option<(impl FnOnce() -> io::Result<()> + Send + 'static, i64)> {
        let (file, at) = self.with_view(|v| {
            (
                file.or_else(|| v.file.clone()),
                end.unwrap_or(v.confirmed_end),
            )
        });
        let file = file.filter(|f| f.is_recoverable())?;
        let sync = self.config.sync;
        Some((move || file.record_confirmed(at, sync).map(drop), at))
    }

    /// Removes a recoverable spool file's names: its content is stored (or dropped).
    /// A failure is logged.
    pub async fn forget_file(&self) {
        let Some(file) = self.file() else {
            return;
        };
        let Some(path) = file.path() else {
            return;
        };
        if let Err(e) = self
            .worker
            .run(move || file.unlink(), self.config.write_timeout)
            .await
        {
            tracing::warn!(
                "journal {}: spool file {} not removed: {e}",
                self.journal(),
                path.display()
            );
        }
    }

    /// Compresses what is left and closes the compressor ([`Spool::finish_compression`]),
    /// on a thread of its own as compression always runs.
    pub async fn finish_compression(&self) -> Result<(), SpoolError> {
        let mut sp = self.spool.clone().lock_owned().await;
        off_thread("spool-compress", move || sp.finish_compression()).await
    }
}

/// A content creation or write that did not succeed in time, as the spool words it.
fn write_error(sp: &Spool, e: RunError<io::Error>) -> SpoolError {
    match e {
        RunError::Timeout(t) => sp.content_write_timed_out(t),
        RunError::Failed(source) | RunError::NoThread { source, .. } => {
            sp.content_write_failed(source)
        }
    }
}

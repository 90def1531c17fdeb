//! The spool: a replica's transactional state of the fragment it is writing
//! (the Rust port of the Python `gazette.broker.fragment.spool`, itself after
//! Gazette's `broker/fragment/spool.go`).
//!
//! A [`Spool`] holds the committed fragment (its span and SHA-1), content written
//! past the commit point but not yet committed (its `delta`), the journal's
//! registers and, on the primary, a compressed copy being built in batches. It
//! changes only through [`Spool::apply`] of a `ReplicateRequest`, which carries
//! either
//!
//! - *content*, at `content_delta` past the commit point: written to the spool
//!   file and hashed; or
//! - a *proposal*: a fragment and registers that roll the spool to a new
//!   fragment, roll pending content back, commit it, or are refused with
//!   `PROPOSAL_MISMATCH`.
//!
//! All of it is blocking code. The async layer ([`crate::disk::AsyncSpool`])
//! splits a content request in three: [`Spool::prepare_content`] checks it against
//! the spool, the [`ContentDiskWrite`] it yields runs on the thread that owns the
//! spool directory's disk, and only once that write answered in time does
//! [`Spool::finish_content`] count it. Content goes straight to the file with
//! positional writes and is never kept in memory past the request that brought it.
//!
//! The primary compresses committed content behind its commits: a commit that
//! completes a batch hands the batch to a thread of its own and returns at once.
//! At most one batch is in flight; the next batch, a roll, and
//! [`Spool::finish_compression`] wait for it. A batch only reads committed spans
//! of the spool file, which later content and rollbacks never write, so it runs
//! safely beside them. (Go compresses inside the commit, `compressThrough`.)
//!
//! Where Python and Go differ, this follows Python, which carries our
//! partition-safety rules:
//!
//! - A failed content write fails the request and leaves `delta` as it was (Go's
//!   `applyContent` retries forever, hanging every append of the journal).
//! - Spools track how much of their fragment is *confirmed* (committed by every
//!   member of the route, [`Spool::confirm`]), and may live as recoverable files
//!   with a record of it ([`files`]), which the Python recovery reads after a
//!   crash. Go's spool files are always anonymous temporary files.
//! - A completed spool says whether the journal continues exactly at its end
//!   ([`Spool::continued`]).
//! - zstd is written at level 3 and gzip at level 1 (Go: 5, and its default);
//!   levels are not part of the formats.

pub mod codecs;
mod compression;
mod content;
pub mod files;
mod roll;

use compression::{Compressing, Compression, Job};
use content::Creation;
pub use content::{
    ContentDiskWrite, ContentSum, ContentWrite, FileCreation, HashedContent, WrittenContent,
};
pub use roll::{maybe_roll, maybe_roll_view, InvalidRollToOffset};

use std::fmt;
use std::io;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use sha1::{Digest, Sha1};

use bytes::Bytes;

use crate::disk::{DiskTimeout, DiskWorkers};
use crate::protocol::{
    CompressionCodec, Fragment, LabelSet, ReplicateRequest, ReplicateResponse, Sha1Sum, Status,
};
use codecs::UnsupportedCodec;
use files::{SpoolFile, COPY_BLOCK};

/// Settings of spools; one is shared by every spool of a broker.
#[derive(Clone, Debug)]
pub struct SpoolConfig {
    /// Directory of spool files (None: the OS temporary directory).
    pub directory: Option<PathBuf>,
    /// The primary compresses once this much committed content is uncompressed.
    pub compression_batch_size: i64,
    /// Pause before retrying a failed compression (retried until it succeeds: the
    /// content is committed, so there is nothing to give up to).
    pub retry_interval: Duration,
    /// Spool files keep their names in `directory`, beside a record of how much of
    /// them is confirmed, to be found again after a crash (`--broker.spool-dir`).
    pub recoverable: bool,
    /// Recording a confirmation flushes the spool file and its record to the
    /// device (`--broker.spool-sync`), against power loss; a crash of the process
    /// alone loses nothing the kernel was given.
    pub sync: bool,
    /// How long a spool file write or creation may take before its request fails
    /// (`--broker.spool-write-timeout`). The disk may still finish it later.
    pub write_timeout: Duration,
    /// Content of at least this many bytes is hashed off the async executor.
    pub threaded_write_size: usize,
    /// The threads spool file writes and creations run on, one per directory, and
    /// never an async executor's: a stalled disk would freeze it for every journal.
    /// Shared by every spool made with this config.
    pub workers: Arc<DiskWorkers>,
    /// Counters shared by every spool made with this config.
    pub stats: Arc<SpoolStats>,
}

impl Default for SpoolConfig {
    fn default() -> Self {
        SpoolConfig {
            directory: None,
            compression_batch_size: 1 << 20,
            retry_interval: Duration::from_secs(5),
            recoverable: false,
            sync: false,
            write_timeout: Duration::from_secs(10),
            threaded_write_size: 1 << 20,
            workers: Arc::default(),
            stats: Arc::default(),
        }
    }
}

/// Counters of spool events, read by the broker's metrics (the Python
/// `fragment.metrics` `SPOOL_*` counters).
#[derive(Debug, Default)]
pub struct SpoolStats {
    pub commits: AtomicU64,
    pub commit_bytes: AtomicU64,
    pub rollbacks: AtomicU64,
    pub rollback_bytes: AtomicU64,
    pub completed: AtomicU64,
    pub write_failures: AtomicU64,
}

fn bump(counter: &AtomicU64, by: i64) {
    counter.fetch_add(by.max(0) as u64, Ordering::Relaxed);
}

/// A committed fragment with its local file, as an index holds it.
#[derive(Clone, Debug)]
pub struct LocalFragment {
    pub spec: Fragment,
    pub file: Option<Arc<SpoolFile>>,
}

/// Told of spool events: commits (for the index) and completions (for the persister).
pub trait SpoolObserver: Send + Sync {
    /// The spool's fragment grew.
    fn spool_commit(&self, fragment: LocalFragment);
    /// The spool rolled away from a non-empty fragment, handed over here whole.
    fn spool_complete(&self, spool: Spool, primary: bool);
}

/// An observer that ignores everything (recovered spools, tests).
#[derive(Debug, Default)]
pub struct NullObserver;

impl SpoolObserver for NullObserver {
    fn spool_commit(&self, _: LocalFragment) {}
    fn spool_complete(&self, _: Spool, _: bool) {}
}

/// The clock that dates a spool's first commit.
pub type Clock = Arc<dyn Fn() -> SystemTime + Send + Sync>;

/// Why a request could not be applied.
#[derive(Debug, thiserror::Error)]
pub enum SpoolError {
    /// Content did not start where pending content ends (a protocol violation).
    #[error("invalid ContentDelta ({got}; expected {expected})")]
    InvalidContentDelta { got: i64, expected: i64 },
    /// The spool file could not be created or written (e.g. the disk is full).
    /// Nothing of the request counts as written.
    #[error("writing spool content of {journal}: {}", strerror(source))]
    Write {
        journal: String,
        #[source]
        source: io::Error,
    },
    /// The spool directory's disk did not answer within the write timeout (the
    /// write may still land later, past the commit point). Nothing counts as written.
    #[error("writing spool content of {journal}: {source} (--broker.spool-write-timeout)")]
    WriteTimeout {
        journal: String,
        #[source]
        source: DiskTimeout,
    },
    /// The fragment's codec has no compressor.
    #[error(transparent)]
    Codec(#[from] UnsupportedCodec),
    /// Compression was asked of a fragment whose codec is NONE.
    #[error("compression of a NONE spool")]
    NotCompressed,
}

impl SpoolError {
    /// Whether the spool file could not be written (in time): the Python
    /// `SpoolWriteError`, which a broker answers with UNAVAILABLE.
    pub fn is_write_error(&self) -> bool {
        matches!(
            self,
            SpoolError::Write { .. } | SpoolError::WriteTimeout { .. }
        )
    }
}

/// An I/O error as Python words it (`OSError.strerror`): the system's text alone,
/// without Rust's ` (os error N)` suffix.
pub(crate) fn strerror(e: &io::Error) -> String {
    let text = e.to_string();
    match e.raw_os_error() {
        Some(code) => text
            .strip_suffix(&format!(" (os error {code})"))
            .map_or_else(|| text.clone(), str::to_owned),
        None => text,
    }
}

/// A test's stand-in for a stalled disk: called before each file creation and
/// content write that a [`ContentDiskWrite`] performs; an error fails the step.
#[cfg(test)]
pub(crate) type DiskHook = Arc<dyn Fn(DiskStep) -> io::Result<()> + Send + Sync>;

/// What a [`ContentDiskWrite`] is about to do (tests).
#[cfg(test)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum DiskStep {
    Create,
    Write { offset: u64, len: usize },
}

/// The fragment a replica is writing; see the module documentation.
///
/// The owner applies requests to it exclusively (`&mut self`).
pub struct Spool {
    observer: Arc<dyn SpoolObserver>,
    config: Arc<SpoolConfig>,
    clock: Clock,
    spec: Fragment,
    file: Option<Arc<SpoolFile>>,
    registers: LabelSet,
    first_append_time: Option<SystemTime>,
    // How far this fragment's content is known to be the journal's (see confirm()):
    // only that part may be published by a member cut off from its route.
    confirmed_end: i64,
    // On a completed spool: it rolled at exactly its end, so the journal goes on
    // from this content (rather than past a gap).
    continued: bool,
    // Uncommitted bytes written past `spec.end`.
    delta: i64,
    // SHA-1 through `spec.end + delta`, and its state at `spec.end`: a rollback
    // restores the latter (Go marshals the hash state; a clone does the same).
    summer: Sha1,
    sum_state: Sha1,
    compressing: Compressing,
    // Content offset (from `spec.begin`) through which compression was started:
    // batches are counted from here, not from where the running one will end.
    compress_target: i64,
    #[cfg(test)]
    gate: Option<Arc<tests::Gate>>,
    #[cfg(test)]
    disk_hook: Option<DiskHook>,
}

impl fmt::Debug for Spool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Spool<{}:[{}, {}) +{}, codec {}, registers {:?}>",
            self.spec.journal,
            self.spec.begin,
            self.spec.end,
            self.delta,
            self.spec.compression_codec,
            self.registers.labels
        )
    }
}

impl Spool {
    /// An empty spool of `journal` at offset 0, codec NONE.
    pub fn new(
        journal: impl Into<String>,
        observer: Arc<dyn SpoolObserver>,
        config: Arc<SpoolConfig>,
    ) -> Spool {
        Spool::fresh(
            Fragment {
                journal: journal.into(),
                compression_codec: CompressionCodec::None as i32,
                ..Fragment::default()
            },
            LabelSet::default(),
            0,
            observer,
            config,
            Arc::new(SystemTime::now),
        )
    }

    /// Replaces the clock that dates first commits (tests).
    pub fn set_clock(&mut self, clock: Clock) {
        self.clock = clock;
    }

    fn fresh(
        spec: Fragment,
        registers: LabelSet,
        confirmed_end: i64,
        observer: Arc<dyn SpoolObserver>,
        config: Arc<SpoolConfig>,
        clock: Clock,
    ) -> Spool {
        Spool {
            observer,
            config,
            clock,
            spec,
            file: None,
            registers,
            first_append_time: None,
            confirmed_end,
            continued: false,
            delta: 0,
            summer: Sha1::new(),
            sum_state: Sha1::new(),
            compressing: Compressing::Idle(Compression::default()),
            compress_target: 0,
            #[cfg(test)]
            gate: None,
            #[cfg(test)]
            disk_hook: None,
        }
    }

    /// A completed spool of the confirmed content of a recoverable spool file
    /// found on disk after a crash (the Python `tails.recovered`): `[begin,
    /// confirmed)` of `file`, its SHA-1 computed afresh.
    pub fn recovered(
        journal: impl Into<String>,
        begin: i64,
        confirmed: i64,
        codec: i32,
        file: Arc<SpoolFile>,
        config: Arc<SpoolConfig>,
    ) -> io::Result<Spool> {
        let mut spec = Fragment {
            journal: journal.into(),
            begin,
            end: confirmed,
            compression_codec: codec,
            ..Fragment::default()
        };
        if confirmed > begin {
            spec.sum = Some(sha1_of(&file, (confirmed - begin) as u64)?);
        }
        let mut sp = Spool::fresh(
            spec,
            LabelSet::default(),
            confirmed,
            Arc::new(NullObserver),
            config,
            Arc::new(SystemTime::now),
        );
        sp.file = Some(file);
        Ok(sp)
    }

    // -- Views ----------------------------------------------------------------------

    pub fn journal(&self) -> &str {
        &self.spec.journal
    }
    pub fn begin(&self) -> i64 {
        self.spec.begin
    }
    pub fn end(&self) -> i64 {
        self.spec.end
    }
    /// The committed fragment.
    pub fn spec(&self) -> &Fragment {
        &self.spec
    }
    /// The local, uncompressed content (None until the first content).
    pub fn file(&self) -> Option<&Arc<SpoolFile>> {
        self.file.as_ref()
    }
    pub fn registers(&self) -> &LabelSet {
        &self.registers
    }
    /// When the fragment was first committed to.
    pub fn first_append_time(&self) -> Option<SystemTime> {
        self.first_append_time
    }
    /// Uncommitted bytes written past `end`.
    pub fn delta(&self) -> i64 {
        self.delta
    }
    pub fn content_length(&self) -> i64 {
        self.spec.end - self.spec.begin
    }
    pub fn config(&self) -> &Arc<SpoolConfig> {
        &self.config
    }
    /// The committed fragment with its file, as the index holds it.
    pub fn fragment(&self) -> LocalFragment {
        LocalFragment {
            spec: self.spec.clone(),
            file: self.file.clone(),
        }
    }
    /// How far the fragment is known to be the journal's (see [`confirm`](Self::confirm)).
    pub fn confirmed_end(&self) -> i64 {
        self.confirmed_end
    }
    /// Whether all committed content is known to be the journal's.
    pub fn confirmed(&self) -> bool {
        self.confirmed_end >= self.spec.end
    }
    /// On a completed spool: whether it was rolled at exactly its end.
    pub fn continued(&self) -> bool {
        self.continued
    }

    /// The fragment that committing the pending `delta` would produce.
    pub fn next(&self) -> Fragment {
        let end = self.spec.end + self.delta;
        Fragment {
            end,
            // An empty fragment carries the zero sum, not the SHA-1 of nothing.
            sum: (self.spec.begin != end).then(|| self.pending_sum()),
            ..self.spec.clone()
        }
    }

    fn pending_sum(&self) -> Sha1Sum {
        sha1sum_from_digest(&self.summer.clone().finalize().into())
    }

    // -- Confirmation and recoverable files -----------------------------------------

    /// Every member of the route committed this fragment through `end`.
    ///
    /// The primary calls it once every peer acknowledged a proposal; a replica once
    /// the primary sends the proposal after one it accepted (a primary proposes
    /// only after the previous proposal's acknowledgements are all in). An `end`
    /// outside this fragment (it has rolled since) is ignored.
    pub fn confirm(&mut self, end: i64) {
        if self.spec.begin <= end && end <= self.spec.end && end > self.confirmed_end {
            self.confirmed_end = end;
        }
    }

    /// Writes the confirmed end into the record of a recoverable spool file (a
    /// no-op for anonymous ones); with `config.sync`, data and record reach the
    /// device first. A primary does so before acknowledging the append that
    /// confirmed it. A failure should be logged rather than fail the append: every
    /// member holds the content, and only recovery after the whole route crashed
    /// depends on the record. To record a confirmation after the spool rolled, use
    /// [`SpoolFile::record_confirmed`] on the file taken when it happened.
    pub fn record_confirmed(&self) -> io::Result<()> {
        match &self.file {
            Some(f) => f
                .record_confirmed(self.confirmed_end, self.config.sync)
                .map(drop),
            None => Ok(()),
        }
    }

    /// Removes a recoverable spool file's names: its content is stored (or dropped).
    pub fn forget_file(&self) -> io::Result<()> {
        self.file.as_ref().map_or(Ok(()), |f| f.unlink())
    }

    // -- Transitions ----------------------------------------------------------------

    /// Applies a content or proposal request.
    ///
    /// Content fails on a wrong `content_delta` or a failed write; proposals answer
    /// OK, or PROPOSAL_MISMATCH with this spool's fragment and registers. A
    /// proposal fails only when compression does (an unsupported codec).
    pub fn apply(
        &mut self,
        req: &ReplicateRequest,
        primary: bool,
    ) -> Result<ReplicateResponse, SpoolError> {
        match &req.proposal {
            Some(proposal) => {
                let none = LabelSet::default();
                let registers = req.registers.as_ref().unwrap_or(&none);
                self.apply_proposal(proposal, registers, primary)
            }
            None => {
                self.apply_content(&req.content, req.content_delta)?;
                Ok(ReplicateResponse::default())
            }
        }
    }

    /// Applies a request that cannot fail, such as a rollback derived from this
    /// spool; panics if it does.
    pub fn must_apply(&mut self, req: &ReplicateRequest) {
        match self.apply(req, false) {
            Ok(resp) if resp.status == Status::Ok as i32 => {}
            Ok(resp) => panic!("spool refused {req:?}: status {}", resp.status),
            Err(e) => panic!("spool refused {req:?}: {e}"),
        }
    }

    fn apply_content(&mut self, content: &Bytes, content_delta: i64) -> Result<(), SpoolError> {
        let ContentWrite { disk, sum } = self.prepare_content(content, content_delta)?;
        match disk.perform() {
            Ok(written) => {
                self.finish_content(written, sum.hash());
                Ok(())
            }
            Err(source) => Err(self.content_write_failed(source)),
        }
    }

    /// Checks content at `content_delta` against the spool and says what writing it
    /// takes: the disk part (creating the file first if there is none yet) and the
    /// hash part. Neither touches the spool: it changes only in
    /// [`finish_content`](Self::finish_content), once the write succeeded. Fails
    /// only on a wrong `content_delta`.
    pub fn prepare_content(
        &self,
        content: &Bytes,
        content_delta: i64,
    ) -> Result<ContentWrite, SpoolError> {
        if content_delta != self.delta {
            return Err(SpoolError::InvalidContentDelta {
                got: content_delta,
                expected: self.delta,
            });
        }
        let target = match (&self.file, self.file_to_create()) {
            (Some(f), _) => Ok(f.clone()),
            (None, Some(create)) => Err(create),
            (None, None) => unreachable!("a spool without a file has one to create"),
        };
        Ok(ContentWrite {
            disk: ContentDiskWrite {
                target,
                offset: (self.content_length() + self.delta) as u64,
                content: content.clone(),
                #[cfg(test)]
                hook: self.disk_hook.clone(),
            },
            sum: ContentSum {
                summer: self.summer.clone(),
                content: content.clone(),
            },
        })
    }

    /// The spool file to create before content can be written (None once there is
    /// one). Its creation blocks like a write, so it too belongs to the directory's
    /// thread; [`adopt_file`](Self::adopt_file) then takes it on.
    pub fn file_to_create(&self) -> Option<FileCreation> {
        if self.file.is_some() {
            return None;
        }
        assert_eq!(
            self.content_length(),
            0,
            "spool fragment not empty, but has no file"
        );
        let kind = match (&self.config.directory, self.config.recoverable) {
            (Some(dir), true) => Creation::Recoverable {
                directory: dir.clone(),
                journal: self.spec.journal.clone(),
                begin: self.spec.begin,
                codec: self.spec.compression_codec,
            },
            (dir, _) => Creation::Anonymous(dir.clone()),
        };
        Some(FileCreation {
            kind,
            #[cfg(test)]
            hook: self.disk_hook.clone(),
        })
    }

    /// Takes on the file made by [`file_to_create`](Self::file_to_create).
    pub fn adopt_file(&mut self, file: Arc<SpoolFile>) {
        assert!(
            self.file.is_none() && self.content_length() == 0,
            "spool already has a file"
        );
        self.file = Some(file);
    }

    /// Counts content written by the [`ContentWrite`] that
    /// [`prepare_content`](Self::prepare_content) made of the spool as it still is.
    pub fn finish_content(&mut self, written: WrittenContent, hashed: HashedContent) {
        assert_eq!(
            written.offset,
            (self.content_length() + self.delta) as u64,
            "content written for another state of the spool"
        );
        assert_eq!(
            written.len, hashed.len,
            "content hashed is not content written"
        );
        if self.file.is_none() {
            self.file = Some(written.file);
        }
        self.summer = hashed.summer;
        self.delta += written.len as i64;
    }

    /// The error of a content write that failed; the spool is unchanged, so the
    /// rollback that follows the failed append ignores whatever part reached the file.
    pub fn content_write_failed(&self, source: io::Error) -> SpoolError {
        self.config
            .stats
            .write_failures
            .fetch_add(1, Ordering::Relaxed);
        SpoolError::Write {
            journal: self.spec.journal.clone(),
            source,
        }
    }

    /// The error of a content write whose disk did not answer in time; the spool is
    /// unchanged. The write may land later, past the commit point: the directory's
    /// thread runs whatever rewrites those offsets after it.
    pub fn content_write_timed_out(&self, source: DiskTimeout) -> SpoolError {
        self.config
            .stats
            .write_failures
            .fetch_add(1, Ordering::Relaxed);
        SpoolError::WriteTimeout {
            journal: self.spec.journal.clone(),
            source,
        }
    }

    /// Whether applying `req` may block on compression: joining a running batch, or
    /// a roll compressing what is left. Such requests belong off an async executor;
    /// any other applies at once (content aside: its write is
    /// [`prepare_content`](Self::prepare_content)'s to hand out).
    pub fn apply_may_block(&self, req: &ReplicateRequest, primary: bool) -> bool {
        let Some(p) = &req.proposal else {
            return false;
        };
        let rolls =
            p.end > self.spec.end + self.delta || (p.end == self.spec.end && p.begin == p.end);
        match &self.compressing {
            Compressing::Running(_) => {
                rolls
                    || (primary
                        && self.delta != 0
                        && (p.end - self.spec.begin) - self.compress_target
                            >= self.config.compression_batch_size)
            }
            Compressing::Idle(c) => {
                rolls
                    && (c.compressor.is_some()
                        || (primary
                            && self.spec.compression_codec != CompressionCodec::None as i32))
            }
        }
    }

    /// A snapshot of the spool's views (see [`SpoolView`]).
    pub fn view(&self) -> SpoolView {
        SpoolView {
            spec: self.spec.clone(),
            file: self.file.clone(),
            registers: self.registers.clone(),
            first_append_time: self.first_append_time,
            confirmed_end: self.confirmed_end,
            delta: self.delta,
            summer: self.summer.clone(),
        }
    }

    /// Installs a stand-in for a stalled disk (tests).
    #[cfg(test)]
    pub(crate) fn set_disk_hook(&mut self, hook: DiskHook) {
        self.disk_hook = Some(hook);
    }

    fn apply_proposal(
        &mut self,
        proposal: &Fragment,
        registers: &LabelSet,
        primary: bool,
    ) -> Result<ReplicateResponse, SpoolError> {
        // Roll forward when the proposal lies beyond anything we hold (a peer catching
        // up, or a member that missed commits across a partition), or is the empty
        // fragment at our end (the primary starting a new fragment).
        if proposal.end > self.spec.end + self.delta
            || (proposal.end == self.spec.end && proposal.begin == proposal.end)
        {
            self.roll(proposal, registers, primary)?;
        }

        // Our exact fragment and registers: roll pending content back.
        if fragments_equal(&self.spec, proposal) && self.registers.labels == registers.labels {
            if self.delta != 0 {
                let stats = &self.config.stats;
                stats.rollbacks.fetch_add(1, Ordering::Relaxed);
                bump(&stats.rollback_bytes, self.delta);
            }
            self.delta = 0;
            self.summer = self.sum_state.clone();
            return Ok(ok());
        }

        // Our fragment extended by the pending content: commit it.
        if self.delta != 0 && self.is_next(proposal) {
            let stats = &self.config.stats;
            stats.commits.fetch_add(1, Ordering::Relaxed);
            bump(&stats.commit_bytes, self.delta);

            let through = proposal.end - self.spec.begin;
            if primary
                && self.spec.compression_codec != CompressionCodec::None as i32
                && through - self.compress_target >= self.config.compression_batch_size
            {
                self.compress_target = through;
                self.start_batch(proposal.end)?;
            }
            self.spec = proposal.clone();
            self.observer.spool_commit(self.fragment());
            if self.first_append_time.is_none() {
                self.first_append_time = Some((self.clock)());
            }
            self.registers = registers.clone();
            self.delta = 0;
            self.sum_state = self.summer.clone();
            return Ok(ok());
        }

        Ok(ReplicateResponse {
            status: Status::ProposalMismatch as i32,
            fragment: Some(self.spec.clone()),
            registers: Some(self.registers.clone()),
            ..ReplicateResponse::default()
        })
    }

    /// Whether `p` is [`next`](Self::next), without cloning the spec to build it.
    /// Callers check `delta != 0` first, so next's sum is the pending digest (hashed
    /// last: every cheaper field must match before it is worth computing).
    fn is_next(&self, p: &Fragment) -> bool {
        let s = &self.spec;
        p.end == s.end + self.delta
            && p.begin == s.begin
            && p.journal == s.journal
            && p.compression_codec == s.compression_codec
            && p.backing_store == s.backing_store
            && p.mod_time == s.mod_time
            && p.path_postfix == s.path_postfix
            && sum_parts(p) == sum_parts_of(Some(&self.pending_sum()))
    }

    fn roll(
        &mut self,
        proposal: &Fragment,
        registers: &LabelSet,
        primary: bool,
    ) -> Result<(), SpoolError> {
        self.compression_idle()?;
        let has_compressor =
            matches!(&self.compressing, Compressing::Idle(c) if c.compressor.is_some());
        if has_compressor
            || (primary && self.spec.compression_codec != CompressionCodec::None as i32)
        {
            self.finish_compression()?;
        }
        // Only a proposal strictly beyond our fragment brings its registers.
        let registers = if proposal.end > self.spec.end {
            registers.clone()
        } else {
            self.registers.clone()
        };
        let fresh = Spool::fresh(
            Fragment {
                journal: self.spec.journal.clone(),
                begin: proposal.end,
                end: proposal.end,
                compression_codec: proposal.compression_codec,
                ..Fragment::default()
            },
            registers,
            proposal.end,
            self.observer.clone(),
            self.config.clone(),
            self.clock.clone(),
        );
        // The old state, with its file and compressed copy, becomes the completed
        // spool; the live one starts from scratch and shares nothing with it.
        let mut completed = std::mem::replace(self, fresh);
        #[cfg(test)]
        {
            self.gate = completed.gate.take();
            self.disk_hook = completed.disk_hook.take();
        }
        if completed.content_length() != 0 {
            self.config.stats.completed.fetch_add(1, Ordering::Relaxed);
            completed.continued = proposal.end == completed.spec.end;
            self.observer.spool_complete(completed, primary);
        }
        Ok(())
    }

    // -- Compression ------------------------------------------------------------------

    /// The compressed copy, once [`finish_compression`](Self::finish_compression)
    /// made it: its file and length (None for NONE, replicas until asked, empty
    /// fragments, or while a batch is running).
    pub fn compressed(&self) -> Option<(&Arc<SpoolFile>, u64)> {
        match &self.compressing {
            Compressing::Idle(c) if c.length != 0 => c.file.as_ref().map(|f| (f, c.length)),
            _ => None,
        }
    }

    /// Whether a compressed file exists yet (batches may still be appending to it).
    pub fn has_compressed_file(&self) -> bool {
        matches!(&self.compressing, Compressing::Idle(c) if c.file.is_some())
    }

    /// Waits for the running batch, if any, returning its error.
    pub fn wait_compression(&mut self) -> Result<(), SpoolError> {
        self.compression_idle().map(drop)
    }

    /// Compresses whatever is left and closes the compressor (idempotent). Then
    /// [`compressed`](Self::compressed) is the whole fragment's encoding (nothing
    /// for an empty fragment). It blocks: on the primary, completed spools arrive
    /// already compressed; the persister calls it on a replica's.
    pub fn finish_compression(&mut self) -> Result<(), SpoolError> {
        if self.spec.compression_codec == CompressionCodec::None as i32 {
            return Err(SpoolError::NotCompressed);
        }
        let job = self.job();
        let content_length = self.content_length();
        let end = self.spec.end;
        self.compression_idle()?.finish(&job, content_length, end)
    }

    fn job(&self) -> Job {
        Job {
            content: self.file.clone(),
            codec: self.spec.compression_codec,
            begin: self.spec.begin,
            directory: self.config.directory.clone(),
            retry: self.config.retry_interval,
        }
    }

    fn compression_idle(&mut self) -> Result<&mut Compression, SpoolError> {
        let mut result = Ok(());
        if matches!(self.compressing, Compressing::Running(_)) {
            let Compressing::Running(handle) = std::mem::replace(
                &mut self.compressing,
                Compressing::Idle(Compression::default()),
            ) else {
                unreachable!()
            };
            let (state, outcome) = handle
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
            self.compressing = Compressing::Idle(state);
            result = outcome;
        }
        let Compressing::Idle(state) = &mut self.compressing else {
            unreachable!()
        };
        result.map(|()| state)
    }

    /// Starts compressing through `end` on a thread of its own, once the previous
    /// batch finished (returning that batch's error instead, if it failed).
    fn start_batch(&mut self, end: i64) -> Result<(), SpoolError> {
        self.compression_idle()?;
        let job = self.job();
        let Compressing::Idle(mut state) = std::mem::replace(
            &mut self.compressing,
            Compressing::Idle(Compression::default()),
        ) else {
            unreachable!()
        };
        #[cfg(test)]
        let gate = self.gate.clone();
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let spawned = std::thread::Builder::new()
            .name("spool-compress".into())
            .spawn(move || {
                // The state comes through a channel so that it is not lost when the
                // thread cannot be made: it is then compressed inline below.
                let mut state: Compression = rx.recv().expect("compression state sent");
                #[cfg(test)]
                if let Some(g) = gate {
                    g.pass(end);
                }
                let outcome = state.compress_through(&job, end);
                (state, outcome)
            });
        match spawned {
            Ok(handle) => {
                tx.send(state)
                    .expect("compression thread waits for its state");
                self.compressing = Compressing::Running(handle);
                Ok(())
            }
            Err(e) => {
                tracing::warn!("spool compression thread not started ({e}); compressing inline");
                let outcome = state.compress_through(&self.job(), end);
                self.compressing = Compressing::Idle(state);
                outcome
            }
        }
    }
}

// -- Snapshots ---------------------------------------------------------------------------

/// The views of a spool at one moment ([`Spool::view`]): what an async owner can
/// read without waiting for the spool itself, which may be busy with a disk.
#[derive(Clone)]
pub struct SpoolView {
    /// The committed fragment.
    pub spec: Fragment,
    /// The local, uncompressed content (None until the first content).
    pub file: Option<Arc<SpoolFile>>,
    pub registers: LabelSet,
    /// When the fragment was first committed to.
    pub first_append_time: Option<SystemTime>,
    /// How far the fragment is known to be the journal's.
    pub confirmed_end: i64,
    /// Uncommitted bytes written past `end`.
    pub delta: i64,
    summer: Sha1,
}

impl fmt::Debug for SpoolView {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "SpoolView<{}:[{}, {}) +{}, confirmed {}>",
            self.spec.journal, self.spec.begin, self.spec.end, self.delta, self.confirmed_end
        )
    }
}

impl SpoolView {
    pub fn journal(&self) -> &str {
        &self.spec.journal
    }
    pub fn begin(&self) -> i64 {
        self.spec.begin
    }
    pub fn end(&self) -> i64 {
        self.spec.end
    }
    pub fn content_length(&self) -> i64 {
        self.spec.end - self.spec.begin
    }
    /// The committed fragment with its file, as the index holds it.
    pub fn fragment(&self) -> LocalFragment {
        LocalFragment {
            spec: self.spec.clone(),
            file: self.file.clone(),
        }
    }
    /// Whether all committed content is known to be the journal's.
    pub fn confirmed(&self) -> bool {
        self.confirmed_end >= self.spec.end
    }

    /// The fragment that committing the pending `delta` would produce.
    pub fn next(&self) -> Fragment {
        let end = self.spec.end + self.delta;
        Fragment {
            end,
            sum: (self.spec.begin != end)
                .then(|| sha1sum_from_digest(&self.summer.clone().finalize().into())),
            ..self.spec.clone()
        }
    }

    /// Takes on what content changes of `spool` (its file, delta and running sum);
    /// cheaper than a new snapshot on every content request.
    pub fn sync_content(&mut self, spool: &Spool) {
        if self.file.is_none() {
            self.file = spool.file.clone();
        }
        self.delta = spool.delta;
        self.summer = spool.summer.clone();
    }
}

fn ok() -> ReplicateResponse {
    ReplicateResponse {
        status: Status::Ok as i32,
        ..ReplicateResponse::default()
    }
}

/// Field-by-field equality of all eight fragment fields, where an absent sum
/// equals the zero sum (as Go's value comparison has it; message equality would
/// tell them apart).
pub fn fragments_equal(a: &Fragment, b: &Fragment) -> bool {
    a.begin == b.begin
        && a.end == b.end
        && a.journal == b.journal
        && sum_parts(a) == sum_parts(b)
        && a.compression_codec == b.compression_codec
        && a.backing_store == b.backing_store
        && a.mod_time == b.mod_time
        && a.path_postfix == b.path_postfix
}

fn sum_parts(f: &Fragment) -> (u64, u64, u32) {
    sum_parts_of(f.sum.as_ref())
}

fn sum_parts_of(s: Option<&Sha1Sum>) -> (u64, u64, u32) {
    s.map_or((0, 0, 0), |s| (s.part1, s.part2, s.part3))
}

/// A SHA1Sum of a digest: big-endian words of bytes 0-7, 8-15 and 16-19.
pub fn sha1sum_from_digest(d: &[u8; 20]) -> Sha1Sum {
    Sha1Sum {
        part1: u64::from_be_bytes(d[0..8].try_into().unwrap()),
        part2: u64::from_be_bytes(d[8..16].try_into().unwrap()),
        part3: u32::from_be_bytes(d[16..20].try_into().unwrap()),
    }
}

/// The lowercase hex digest of a sum (Python's `pb.sha1sum_hex`).
pub fn sha1sum_hex(s: &Sha1Sum) -> String {
    format!("{:016x}{:016x}{:08x}", s.part1, s.part2, s.part3)
}

/// SHA-1 of the first `len` bytes of `file`, read in blocks.
fn sha1_of(file: &SpoolFile, len: u64) -> io::Result<Sha1Sum> {
    let mut hasher = Sha1::new();
    let mut buf = vec![0; COPY_BLOCK.min(len as usize)];
    let mut pos = 0;
    while pos < len {
        let want = buf.len().min((len - pos) as usize);
        let n = file.read_at(&mut buf[..want], pos)?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("spool file ended at {pos}, before {len}"),
            ));
        }
        hasher.update(&buf[..n]);
        pos += n as u64;
    }
    Ok(sha1sum_from_digest(&hasher.finalize().into()))
}

#[cfg(test)]
mod tests;

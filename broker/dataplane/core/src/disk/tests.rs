//! After the Python `broker/tests/fragment/test_fragment_disk_worker.py` (and the
//! failed-write test of `test_fragment_spool.py`), plus the async spool's own.
//!
//! A stalled disk is played by operations, or a spool's disk hook, that wait on a
//! [`Gate`] the test opens. Every test opens its gates and checks that its
//! workers' threads stop; everything is bounded in time.

use std::convert::Infallible;
use std::sync::atomic::AtomicUsize;
use std::sync::Condvar;

use bytes::Bytes;
use sha1::{Digest, Sha1};

use super::*;
use std::time::SystemTime;

use crate::protocol::{
    journal_spec, CompressionCodec, Fragment, LabelSet, ReplicateRequest, Status,
};
use crate::spool::files::{SpoolFile, SpoolRecord};
use crate::spool::{
    sha1sum_from_digest, DiskStep, LocalFragment, NullObserver, Spool, SpoolConfig, SpoolError,
    SpoolObserver,
};

const TIMEOUT: Duration = Duration::from_millis(300);
const JOURNAL: &str = "a/journal";
const NONE: i32 = CompressionCodec::None as i32;
const GZIP: i32 = CompressionCodec::Gzip as i32;
const OK: i32 = Status::Ok as i32;

/// Holds whoever waits on it until opened (for at most 30 s).
#[derive(Default)]
struct Gate {
    open: Mutex<bool>,
    cv: Condvar,
    started: AtomicBool,
}

impl Gate {
    fn wait(&self) {
        self.started.store(true, Ordering::SeqCst);
        let open = lock(&self.open);
        let (open, _) = self
            .cv
            .wait_timeout_while(open, Duration::from_secs(30), |open| !*open)
            .unwrap();
        assert!(*open, "the test never opened the gate");
    }
    fn open(&self) {
        *lock(&self.open) = true;
        self.cv.notify_all();
    }
    fn started(&self) -> bool {
        self.started.load(Ordering::SeqCst)
    }
    async fn until_started(&self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !self.started() {
            assert!(
                Instant::now() < deadline,
                "the gated operation never started"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

/// Opens the gate and stops the workers' threads when the test ends, however it ends.
struct Teardown {
    gate: Arc<Gate>,
    workers: Arc<DiskWorkers>,
}

impl Drop for Teardown {
    fn drop(&mut self) {
        self.gate.open(); // Before stopping: a gated thread exits only once released.
        let stopped = self.workers.close(Some(Duration::from_secs(5)));
        if !thread::panicking() {
            assert!(stopped, "a spool-disk thread did not stop");
        }
    }
}

fn setup() -> (Arc<Gate>, Arc<DiskWorkers>, Teardown) {
    let gate = Arc::new(Gate::default());
    let workers = Arc::new(DiskWorkers::new());
    let teardown = Teardown {
        gate: gate.clone(),
        workers: workers.clone(),
    };
    (gate, workers, teardown)
}

/// Waits until the worker's stuck operation has returned (its gate just opened):
/// until then, a new operation still fails fast.
async fn released(worker: &DiskWorker) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while worker.busy_for() > Duration::ZERO {
        assert!(
            Instant::now() < deadline,
            "the released operation did not return"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Awaits `fut` while a ticker runs: (the executor's longest pause, its output).
async fn longest_pause<T>(fut: impl Future<Output = T>) -> (Duration, T) {
    let stop = Arc::new(AtomicBool::new(false));
    let ticking = stop.clone();
    let ticker = tokio::spawn(async move {
        let mut longest = Duration::ZERO;
        let mut last = Instant::now();
        while !ticking.load(Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_millis(5)).await;
            longest = longest.max(last.elapsed());
            last = Instant::now();
        }
        longest
    });
    let out = fut.await;
    stop.store(true, Ordering::SeqCst);
    (ticker.await.unwrap(), out)
}

fn frag(begin: i64, end: i64, data: &[u8]) -> Fragment {
    Fragment {
        journal: JOURNAL.into(),
        begin,
        end,
        compression_codec: NONE,
        sum: (!data.is_empty()).then(|| sha1sum_from_digest(&Sha1::digest(data).into())),
        ..Fragment::default()
    }
}

fn content(data: &[u8], delta: i64) -> ReplicateRequest {
    ReplicateRequest {
        content: Bytes::copy_from_slice(data),
        content_delta: delta,
        ..ReplicateRequest::default()
    }
}

fn proposal(f: Fragment) -> ReplicateRequest {
    ReplicateRequest {
        proposal: Some(f),
        registers: Some(LabelSet::default()),
        ..ReplicateRequest::default()
    }
}

fn config(workers: &Arc<DiskWorkers>, dir: &Path) -> SpoolConfig {
    SpoolConfig {
        directory: Some(dir.to_path_buf()),
        write_timeout: TIMEOUT,
        workers: workers.clone(),
        ..SpoolConfig::default()
    }
}

fn async_spool(config: SpoolConfig, hook: Option<crate::spool::DiskHook>) -> AsyncSpool {
    let mut sp = Spool::new(JOURNAL, Arc::new(NullObserver), Arc::new(config));
    if let Some(hook) = hook {
        sp.set_disk_hook(hook);
    }
    AsyncSpool::new(sp)
}

/// The (offset, length) of every content write, in order.
type Writes = Arc<Mutex<Vec<(u64, usize)>>>;

/// A hook holding every write of `len` bytes at the gate, and recording the writes.
fn gated_writes(gate: &Arc<Gate>, len: usize) -> (crate::spool::DiskHook, Writes) {
    let writes = Arc::new(Mutex::new(Vec::new()));
    let (gate, seen) = (gate.clone(), writes.clone());
    let hook: crate::spool::DiskHook = Arc::new(move |step| {
        if let DiskStep::Write { offset, len: n } = step {
            if n == len {
                gate.wait();
            }
            lock(&seen).push((offset, n));
        }
        Ok(())
    });
    (hook, writes)
}

fn pread(file: &SpoolFile, size: usize, offset: u64) -> Vec<u8> {
    file.pread(size, offset).unwrap()
}

// -- Ported from test_fragment_disk_worker.py --------------------------------------------

#[tokio::test]
async fn a_stuck_write_times_out_later_ones_fail_fast_and_release_recovers() {
    let (gate, workers, _teardown) = setup();
    let dir = tempfile::tempdir().unwrap();
    let (hook, writes) = gated_writes(&gate, 5);
    let sp = async_spool(config(&workers, dir.path()), Some(hook));
    sp.apply(&content(b"abc", 0), false).await.unwrap();
    let resp = sp
        .apply(&proposal(frag(0, 3, b"abc")), false)
        .await
        .unwrap();
    assert_eq!(resp.status, OK);
    let real = sp.file().unwrap();

    // The write times out, naming the journal, the directory and the timeout; the
    // executor kept running meanwhile (a write on it would have frozen it).
    let start = Instant::now();
    let (pause, raised) = longest_pause(sp.apply(&content(b"STUCK", 0), false)).await;
    let took = start.elapsed();
    let err = raised.unwrap_err();
    assert!(err.is_write_error(), "{err}");
    assert!(
        took >= TIMEOUT && took < TIMEOUT + Duration::from_secs(1),
        "{took:?}"
    );
    assert!(pause < Duration::from_millis(250), "{pause:?}");
    let message = err.to_string();
    assert!(
        message.contains(JOURNAL)
            && message.contains(&dir.path().display().to_string())
            && message.contains("0.3s")
            && message.ends_with("(--broker.spool-write-timeout)"),
        "{message}"
    );
    assert!(matches!(
        err,
        SpoolError::WriteTimeout {
            source: DiskTimeout::NoAnswer { .. },
            ..
        }
    ));
    assert_eq!(sp.delta(), 0); // Nothing of it counts.
    assert!(gate.started());
    assert_eq!(sp.config().stats.write_failures.load(Ordering::Relaxed), 1);

    // While it stays stuck, a later write fails at once rather than queueing behind it.
    let start = Instant::now();
    let err = sp.apply(&content(b"xy", 0), false).await.unwrap_err();
    assert!(err.to_string().contains("is stalled"), "{err}");
    assert!(start.elapsed() < TIMEOUT / 2);
    assert_eq!(sp.delta(), 0);

    // The disk answers: the late write lands past the commit point, and the spool's
    // next write to the same offsets lands after it.
    gate.open();
    released(sp.worker()).await;
    assert_eq!(pread(&real, 5, 3), b"STUCK");
    sp.apply(&content(b"de", 0), false).await.unwrap();
    let resp = sp
        .apply(&proposal(frag(0, 5, b"abcde")), false)
        .await
        .unwrap();
    assert_eq!(resp.status, OK);
    assert_eq!(lock(&writes)[1], (3, 5));
    assert_eq!(pread(&real, 5, 0), b"abcde");
    assert_eq!(sp.end(), 5);
}

#[tokio::test]
async fn a_stuck_file_creation_is_bounded_too() {
    // Creating a file on a stalled disk blocks like a write: it goes the same way.
    let (gate, workers, _teardown) = setup();
    let dir = tempfile::tempdir().unwrap();
    let creations = Arc::new(AtomicUsize::new(0));
    let (g, c) = (gate.clone(), creations.clone());
    let hook: crate::spool::DiskHook = Arc::new(move |step| {
        if step == DiskStep::Create {
            g.wait();
            c.fetch_add(1, Ordering::SeqCst);
        }
        Ok(())
    });
    let sp = async_spool(config(&workers, dir.path()), Some(hook));
    let err = sp.apply(&content(b"abc", 0), false).await.unwrap_err();
    assert!(err.to_string().contains("no answer within 0.3s"), "{err}");
    assert!(sp.file().is_none() && sp.delta() == 0);

    gate.open();
    released(sp.worker()).await;
    sp.apply(&content(b"abc", 0), false).await.unwrap();
    let file = sp.file().unwrap();
    assert_eq!(creations.load(Ordering::SeqCst), 2); // The late one was dropped, not used.
    let resp = sp
        .apply(&proposal(frag(0, 3, b"abc")), false)
        .await
        .unwrap();
    assert_eq!(resp.status, OK);
    assert_eq!(pread(&file, 3, 0), b"abc");
    assert!(Arc::ptr_eq(&file, &sp.file().unwrap()));
}

#[tokio::test]
async fn operations_run_in_order_and_a_timed_out_queued_one_never_runs() {
    let (gate, workers, _teardown) = setup();
    let worker = workers.for_directory(Some(Path::new("/nowhere")));
    let ran = Arc::new(Mutex::new(Vec::new()));
    let op = |name: &'static str, gated: bool| {
        let (ran, gate) = (ran.clone(), gate.clone());
        move || {
            if gated {
                gate.wait();
            }
            lock(&ran).push(name);
            Ok::<_, Infallible>(name)
        }
    };

    let first = tokio::spawn(worker.run(op("first", true), Duration::from_millis(200)));
    // "first" is running (held by the gate): wait for it, however loaded the machine.
    gate.until_started().await;
    let err = worker
        .run(op("queued", false), Duration::from_millis(100))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("no answer within 0.1s"), "{err}");
    assert!(matches!(
        first.await.unwrap(),
        Err(RunError::Timeout(DiskTimeout::NoAnswer { .. }))
    ));
    // Busy since "first" began to run, which may be a while after its caller began
    // waiting on a loaded machine: the figure only grows while it runs.
    let busy = worker.busy_for();
    assert!(busy > Duration::ZERO);
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(worker.busy_for() >= busy + Duration::from_millis(50));
    let err = worker
        .run(op("refused", false), Duration::from_millis(200))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("is stalled"), "{err}");
    gate.open();
    released(&worker).await;
    let after = worker.run(op("after", false), Duration::from_secs(5)).await;
    assert_eq!(after.unwrap(), "after");
    assert_eq!(*lock(&ran), ["first", "after"]);
    assert_eq!(worker.busy_for(), Duration::ZERO);
}

#[tokio::test]
async fn a_cancelled_caller_drops_the_outcome() {
    let (gate, workers, _teardown) = setup();
    let worker = workers.for_directory(Some(Path::new("/nowhere")));
    let g = gate.clone();
    let task = tokio::spawn(worker.run(
        move || -> io::Result<()> {
            g.wait();
            Err(io::Error::other("late failure"))
        },
        Duration::from_secs(5),
    ));
    gate.until_started().await;
    task.abort();
    assert!(task.await.unwrap_err().is_cancelled());
    gate.open();
    released(&worker).await;
    // The worker is free again, and its dropped failure surfaced nowhere.
    let seven = worker.run(|| Ok::<_, Infallible>(7), Duration::from_secs(5));
    assert_eq!(seven.await.unwrap(), 7);
}

#[tokio::test]
async fn errors_of_the_operation_reach_the_caller() {
    let (_gate, workers, _teardown) = setup();
    let worker = workers.for_directory(Some(Path::new("/nowhere")));
    let err = worker
        .run(
            || -> io::Result<()> { Err(io::Error::from_raw_os_error(28)) },
            Duration::from_secs(5),
        )
        .await
        .unwrap_err();
    let RunError::Failed(e) = err else {
        panic!("{err}")
    };
    assert_eq!(e.raw_os_error(), Some(28));
    assert!(e.to_string().contains("No space left"), "{e}");
}

#[tokio::test]
async fn an_idle_thread_exits_and_the_next_operation_starts_another() {
    let worker = DiskWorker::with_idle_exit(Some(Path::new("/nowhere")), Duration::from_millis(50));
    assert!(!worker.alive());
    let one = worker.run(|| Ok::<_, Infallible>(1), Duration::from_secs(5));
    assert_eq!(one.await.unwrap(), 1);
    let deadline = Instant::now() + Duration::from_secs(5);
    while worker.alive() {
        assert!(Instant::now() < deadline, "the idle thread did not exit");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let two = worker.run(|| Ok::<_, Infallible>(2), Duration::from_secs(5));
    assert_eq!(two.await.unwrap(), 2);
    assert!(worker.close(Some(Duration::from_secs(5))));
}

#[test]
fn a_stuck_operation_outliving_its_runtime_ends_quietly() {
    // A broker stopped while its disk is stuck: the write ends after the runtime is gone.
    let gate = Arc::new(Gate::default());
    let worker = DiskWorker::new(Some(Path::new("/nowhere")));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let g = gate.clone();
    let out = rt.block_on(worker.run(
        move || {
            g.wait();
            Ok::<_, Infallible>(())
        },
        Duration::from_millis(50),
    ));
    assert!(matches!(out, Err(RunError::Timeout(_))));
    drop(rt);
    gate.open();
    assert!(worker.close(Some(Duration::from_secs(5))));
}

#[test]
fn the_timeout_defaults_to_ten_seconds() {
    // (The flag itself, `--broker.spool-write-timeout`, is parsed by the Python broker.)
    assert_eq!(
        SpoolConfig::default().write_timeout,
        Duration::from_secs(10)
    );
}

// -- Ported from test_fragment_spool.py ----------------------------------------------------

#[tokio::test]
async fn a_failed_content_write_fails_the_request_and_keeps_the_spool_usable() {
    // A full disk: Go's spool retries forever, hanging every append of the journal;
    // ours fails the request (so its append fails and the client retries).
    let (_gate, workers, _teardown) = setup();
    let dir = tempfile::tempdir().unwrap();
    let full = Arc::new(AtomicBool::new(false));
    let f = full.clone();
    let hook: crate::spool::DiskHook = Arc::new(move |step| match step {
        DiskStep::Write { .. } if f.load(Ordering::SeqCst) => Err(io::Error::from_raw_os_error(28)),
        _ => Ok(()),
    });
    let sp = async_spool(config(&workers, dir.path()), Some(hook));
    sp.must_apply(&proposal(frag(0, 0, b""))).await;
    sp.apply(&content(b"abc", 0), false).await.unwrap();
    full.store(true, Ordering::SeqCst);
    let err = sp.apply(&content(b"defg", 3), false).await.unwrap_err();
    assert!(err.is_write_error());
    // Python's words: the system's message alone.
    assert_eq!(
        err.to_string(),
        "writing spool content of a/journal: No space left on device"
    );
    assert_eq!(sp.delta(), 3); // Nothing of the failed write counts.
    full.store(false, Ordering::SeqCst); // Space is back.
    sp.apply(&content(b"de", 3), false).await.unwrap();
    let resp = sp
        .apply(&proposal(frag(0, 5, b"abcde")), false)
        .await
        .unwrap();
    assert_eq!(resp.status, OK);
    assert_eq!(sp.end(), 5);
}

// -- The worker, further ---------------------------------------------------------------------

#[tokio::test]
async fn posted_operations_keep_their_order_with_the_rest() {
    let (_gate, workers, _teardown) = setup();
    let worker = workers.for_directory(None);
    assert_eq!(worker.name(), "the system temporary directory");
    let seen = Arc::new(Mutex::new(Vec::new()));
    for i in 0..3 {
        let s = seen.clone();
        worker.post(move || {
            lock(&s).push(i);
            Ok::<_, Infallible>(())
        });
    }
    worker.post(|| Err(io::Error::other("logged, not raised")));
    let s = seen.clone();
    let all = worker.run(
        move || Ok::<_, Infallible>(lock(&s).clone()),
        Duration::from_secs(5),
    );
    assert_eq!(all.await.unwrap(), [0, 1, 2]);
}

#[tokio::test]
async fn a_panic_of_the_operation_resumes_in_the_caller_and_the_worker_goes_on() {
    let (_gate, workers, _teardown) = setup();
    let worker = workers.for_directory(None);
    let w = worker.clone();
    let task = tokio::spawn(async move {
        w.run(
            || -> Result<(), Infallible> { panic!("disk on fire") },
            Duration::from_secs(5),
        )
        .await
    });
    assert!(task.await.unwrap_err().is_panic());
    let ok = worker.run(|| Ok::<_, Infallible>("fine"), Duration::from_secs(5));
    assert_eq!(ok.await.unwrap(), "fine");
}

#[tokio::test]
async fn close_is_bounded_while_an_operation_is_stuck() {
    let (gate, workers, _teardown) = setup();
    let worker = workers.for_directory(None);
    let g = gate.clone();
    worker.post(move || {
        g.wait();
        Ok::<_, Infallible>(())
    });
    gate.until_started().await;
    let start = Instant::now();
    assert!(!workers.close(Some(Duration::from_millis(100))));
    assert!(start.elapsed() < Duration::from_secs(2));
    assert!(worker.alive());
    gate.open();
    assert!(worker.close(Some(Duration::from_secs(5))));
    assert!(!worker.alive());
}

#[test]
fn timeouts_are_written_as_python_writes_them() {
    let g = |ms| fmt_g(Duration::from_millis(ms));
    assert_eq!(g(300), "0.3");
    assert_eq!(g(100), "0.1");
    assert_eq!(g(10_000), "10");
    assert_eq!(g(2_500), "2.5");
    assert_eq!(g(60_000), "60");
    assert_eq!(g(0), "0");
    assert_eq!(fmt_g(Duration::from_secs(1_000_000)), "1e+06");
    assert_eq!(fmt_g(Duration::from_micros(50)), "5e-05");
    assert_eq!(fmt_g(Duration::from_nanos(123_456_789)), "0.123457");
    let stalled = DiskTimeout::Stalled {
        directory: "/d".into(),
        running_for: Duration::from_millis(1234),
        timeout: Duration::from_secs(1),
    };
    assert_eq!(
        stalled.to_string(),
        "spool directory /d is stalled: an earlier operation has run 1.2s, past the 1s timeout"
    );
}

// -- The async spool ---------------------------------------------------------------------------

#[tokio::test]
async fn views_never_wait_on_a_stuck_write_and_a_rollback_goes_on_meanwhile() {
    let (gate, workers, _teardown) = setup();
    let dir = tempfile::tempdir().unwrap();
    let (hook, _) = gated_writes(&gate, 5);
    let sp = Arc::new(async_spool(config(&workers, dir.path()), Some(hook)));
    sp.apply(&content(b"abc", 0), false).await.unwrap();
    sp.must_apply(&proposal(frag(0, 3, b"abc"))).await;
    sp.apply(&content(b"de", 0), false).await.unwrap();

    let s = sp.clone();
    let stuck = tokio::spawn(async move { s.apply(&content(b"STUCK", 2), false).await });
    gate.until_started().await;
    // Mid-write: every view answers at once, from before the write.
    let start = Instant::now();
    assert_eq!((sp.begin(), sp.end(), sp.delta()), (0, 3, 2));
    assert_eq!(sp.next().sum, frag(0, 5, b"abcde").sum);
    assert_eq!(sp.fragment().spec.end, 3);
    assert_eq!(sp.journal(), JOURNAL);
    assert!(!sp.confirmed()); // Committed, but not yet by the whole route.
    assert!(start.elapsed() < Duration::from_millis(100));

    assert!(stuck.await.unwrap().unwrap_err().is_write_error());
    // The rollback of the failed append needs no disk: it applies at once.
    let start = Instant::now();
    sp.must_apply(&proposal(frag(0, 3, b"abc"))).await;
    assert!(start.elapsed() < TIMEOUT / 2);
    assert_eq!(sp.delta(), 0);
    gate.open();
    released(sp.worker()).await;
}

#[tokio::test]
async fn recoverable_spools_record_confirmations_on_the_directorys_thread() {
    let (_gate, workers, _teardown) = setup();
    let dir = tempfile::tempdir().unwrap();
    let cfg = SpoolConfig {
        recoverable: true,
        sync: true,
        ..config(&workers, dir.path())
    };
    let sp = async_spool(cfg, None);
    sp.apply(&content(b"abcdef", 0), false).await.unwrap();
    sp.must_apply(&proposal(frag(0, 6, b"abcdef"))).await;
    let file = sp.file().unwrap();
    let record = file.record_path().unwrap();
    let read = || SpoolRecord::read(&record).unwrap().confirmed;
    assert_eq!(read(), 0);
    assert_eq!(sp.confirmed_end(), 0);

    sp.confirm(6).await;
    assert_eq!(sp.confirmed_end(), 6);
    sp.record_confirmed(None, None, true).await;
    assert_eq!(read(), 6);
    // A confirmation of a file the spool no longer writes, at its own end.
    sp.record_confirmed(Some(file.clone()), Some(4), true).await;
    assert_eq!(read(), 4);
    // Queued only: it lands in order, before whatever is queued next.
    sp.post_confirmed();
    let done = sp.worker().run(|| Ok::<_, Infallible>(()), TIMEOUT);
    done.await.unwrap();
    assert_eq!(read(), 6);

    sp.forget_file().await;
    assert!(file.path().is_none() && !record.exists());
    // Nothing left to record into, or to remove.
    sp.record_confirmed(None, None, true).await;
    sp.forget_file().await;
}

#[derive(Default)]
struct Completions(Mutex<Vec<Spool>>);

impl SpoolObserver for Completions {
    fn spool_commit(&self, _: LocalFragment) {}
    fn spool_complete(&self, spool: Spool, _: bool) {
        lock(&self.0).push(spool);
    }
}

#[tokio::test]
async fn compression_stays_off_the_executor_and_rolls_hand_over_whole_fragments() {
    let (_gate, workers, _teardown) = setup();
    let dir = tempfile::tempdir().unwrap();
    let cfg = SpoolConfig {
        compression_batch_size: 4,
        threaded_write_size: 8, // The second content is hashed on a blocking thread.
        ..config(&workers, dir.path())
    };
    let done = Arc::new(Completions::default());
    let sp = AsyncSpool::new(Spool::new(JOURNAL, done.clone(), Arc::new(cfg)));
    let gz = |begin, end, data: &[u8]| Fragment {
        compression_codec: GZIP,
        ..frag(begin, end, data)
    };
    sp.apply(&proposal(gz(0, 0, b"")), true).await.unwrap();
    sp.apply(&content(b"hello", 0), true).await.unwrap();
    sp.must_apply(&proposal(gz(0, 5, b"hello"))).await; // Starts a batch.
    sp.apply(&content(b", world!!", 0), true).await.unwrap();
    let next = sp.next();
    assert_eq!(next.sum, frag(0, 14, b"hello, world!!").sum);
    let resp = sp.apply(&proposal(next), true).await.unwrap();
    assert_eq!(resp.status, OK);
    // A roll compresses the rest (a thread of its own) and hands the fragment over.
    let resp = sp.apply(&proposal(gz(14, 14, b"")), true).await.unwrap();
    assert_eq!(resp.status, OK);
    assert_eq!((sp.begin(), sp.end(), sp.file().is_none()), (14, 14, true));
    let mut completed = lock(&done.0).pop().unwrap();
    let (file, len) = completed.compressed().unwrap();
    let mut decoded = Vec::new();
    std::io::Read::read_to_end(
        &mut flate2::read::MultiGzDecoder::new(&pread(file, len as usize, 0)[..]),
        &mut decoded,
    )
    .unwrap();
    assert_eq!(decoded, b"hello, world!!");
    completed.finish_compression().unwrap(); // Idempotent.

    // A replica compresses only when asked (the persister), off the executor too.
    let replica = async_spool(config(&workers, dir.path()), None);
    replica
        .apply(&proposal(gz(0, 0, b"")), false)
        .await
        .unwrap();
    replica.apply(&content(b"xyz", 0), false).await.unwrap();
    replica.must_apply(&proposal(gz(0, 3, b"xyz"))).await;
    replica.finish_compression().await.unwrap();
    let plain = async_spool(config(&workers, dir.path()), None);
    assert!(matches!(
        plain.finish_compression().await,
        Err(SpoolError::NotCompressed)
    ));
}

#[tokio::test]
async fn a_wrong_content_delta_creates_no_file() {
    let (_gate, workers, _teardown) = setup();
    let dir = tempfile::tempdir().unwrap();
    let sp = async_spool(config(&workers, dir.path()), None);
    let err = sp.apply(&content(b"abc", 2), false).await.unwrap_err();
    assert_eq!(err.to_string(), "invalid ContentDelta (2; expected 0)");
    assert!(sp.file().is_none());
    assert!(!sp.worker().alive());
}

#[tokio::test]
async fn maybe_roll_reads_the_snapshot() {
    let (_gate, workers, _teardown) = setup();
    let dir = tempfile::tempdir().unwrap();
    let sp = async_spool(config(&workers, dir.path()), None);
    let spec = journal_spec::Fragment {
        length: 1 << 20,
        compression_codec: GZIP,
        ..journal_spec::Fragment::default()
    };
    // An empty spool rolls to a fresh fragment under the spec's codec.
    let next = sp.maybe_roll(0, &spec, SystemTime::now()).unwrap();
    assert_eq!((next.begin, next.end, next.compression_codec), (0, 0, GZIP));
    sp.must_apply(&proposal(frag(0, 0, b""))).await;
    sp.apply(&content(b"abc", 0), false).await.unwrap();
    sp.must_apply(&proposal(frag(0, 3, b"abc"))).await;
    assert!(sp.first_append_time().is_some());
    let same = sp.maybe_roll(0, &spec, SystemTime::now()).unwrap();
    assert_eq!(same, sp.spec());
    assert!(sp.maybe_roll(2, &spec, SystemTime::now()).is_err());
}

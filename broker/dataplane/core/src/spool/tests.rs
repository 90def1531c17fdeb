//! One test per transition of `Spool::apply`, after the Python
//! `broker/tests/fragment/test_fragment_spool.py`.

use std::io::Read;
use std::sync::{Condvar, Mutex};
use std::time::UNIX_EPOCH;

use bytes::Bytes;

use super::*;
use crate::protocol::{journal_spec, Label};
use roll::unix_seconds;

/// 2019-11-19T22:30:00Z, the Python tests' clock.
const T0_UNIX: u64 = 1_574_202_600;
const JOURNAL: &str = "a/journal";

fn t0() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(T0_UNIX)
}

const NONE: i32 = CompressionCodec::None as i32;
const GZIP: i32 = CompressionCodec::Gzip as i32;
const ZSTD: i32 = CompressionCodec::Zstandard as i32;
const SNAPPY: i32 = CompressionCodec::Snappy as i32;
const GZIP_OFFLOAD: i32 = CompressionCodec::GzipOffloadDecompression as i32;
const OK: i32 = Status::Ok as i32;
const MISMATCH: i32 = Status::ProposalMismatch as i32;

/// Holds batch compressions (on their threads) until opened; records the batch ends.
#[derive(Default)]
pub(super) struct Gate {
    open: Mutex<bool>,
    cv: Condvar,
    started: Mutex<Vec<i64>>,
}

impl Gate {
    pub(super) fn pass(&self, end: i64) {
        self.started.lock().unwrap().push(end);
        let open = self.open.lock().unwrap();
        let (open, timeout) = self
            .cv
            .wait_timeout_while(open, Duration::from_secs(10), |open| !*open)
            .unwrap();
        assert!(
            *open && !timeout.timed_out(),
            "the test never opened the gate"
        );
    }

    fn open(&self) {
        *self.open.lock().unwrap() = true;
        self.cv.notify_all();
    }

    fn started(&self) -> Vec<i64> {
        self.started.lock().unwrap().clone()
    }
}

#[derive(Default)]
struct Recorder {
    commits: Mutex<Vec<LocalFragment>>,
    completes: Mutex<Vec<(Spool, bool)>>,
}

impl SpoolObserver for Recorder {
    fn spool_commit(&self, fragment: LocalFragment) {
        self.commits.lock().unwrap().push(fragment);
    }
    fn spool_complete(&self, spool: Spool, primary: bool) {
        self.completes.lock().unwrap().push((spool, primary));
    }
}

impl Recorder {
    fn commits(&self) -> Vec<(i64, i64)> {
        let commits = self.commits.lock().unwrap();
        commits.iter().map(|c| (c.spec.begin, c.spec.end)).collect()
    }
    fn completed(&self) -> usize {
        self.completes.lock().unwrap().len()
    }
    /// The `i`-th completed spool (taken out: completed spools are owned).
    fn take(&self, i: usize) -> (Spool, bool) {
        let mut completes = self.completes.lock().unwrap();
        let placeholder = (
            Spool::new("taken", Arc::new(NullObserver), Arc::default()),
            false,
        );
        std::mem::replace(&mut completes[i], placeholder)
    }
}

fn new_spool_with(config: SpoolConfig) -> (Spool, Arc<Recorder>) {
    let obv = Arc::new(Recorder::default());
    let mut sp = Spool::new(JOURNAL, obv.clone(), Arc::new(config));
    sp.set_clock(Arc::new(t0));
    (sp, obv)
}

fn new_spool() -> (Spool, Arc<Recorder>) {
    new_spool_with(SpoolConfig::default())
}

fn batched(size: i64) -> SpoolConfig {
    SpoolConfig {
        compression_batch_size: size,
        ..SpoolConfig::default()
    }
}

fn frag(begin: i64, end: i64, codec: i32, data: Option<&[u8]>) -> Fragment {
    Fragment {
        journal: JOURNAL.into(),
        begin,
        end,
        compression_codec: codec,
        sum: data.map(|d| sha1sum_from_digest(&Sha1::digest(d).into())),
        ..Fragment::default()
    }
}

fn labels(name: &str, value: &str) -> LabelSet {
    LabelSet {
        labels: vec![Label {
            name: name.into(),
            value: value.into(),
            prefix: false,
        }],
    }
}

fn reg(value: &str) -> LabelSet {
    labels("reg", value)
}

fn proposal(f: Fragment, registers: LabelSet) -> ReplicateRequest {
    ReplicateRequest {
        proposal: Some(f),
        registers: Some(registers),
        ..ReplicateRequest::default()
    }
}

fn content(data: &[u8], delta: i64) -> ReplicateRequest {
    ReplicateRequest {
        content: Bytes::copy_from_slice(data),
        content_delta: delta,
        ..ReplicateRequest::default()
    }
}

/// Appends `data` and commits it, with `registers` (default: the spool's own).
fn commit(sp: &mut Spool, data: &[u8], registers: Option<LabelSet>, primary: bool) {
    let delta = sp.delta();
    sp.apply(&content(data, delta), primary).unwrap();
    let regs = registers.unwrap_or_else(|| sp.registers().clone());
    let resp = sp.apply(&proposal(sp.next(), regs), primary).unwrap();
    assert_eq!(resp.status, OK, "{resp:?}");
}

fn apply(sp: &mut Spool, req: ReplicateRequest, primary: bool) -> ReplicateResponse {
    sp.apply(&req, primary).unwrap()
}

fn local_content(sp: &Spool) -> Vec<u8> {
    let f = sp.file().expect("a spool file");
    f.pread(sp.content_length() as usize, 0).unwrap()
}

fn compressed_bytes(sp: &Spool) -> Vec<u8> {
    let (f, len) = sp.compressed().expect("a finished compression");
    f.pread(len as usize, 0).unwrap()
}

fn decoded(sp: &Spool) -> Vec<u8> {
    let data = compressed_bytes(sp);
    let mut out = Vec::new();
    match CompressionCodec::try_from(sp.spec().compression_codec).unwrap() {
        CompressionCodec::Gzip | CompressionCodec::GzipOffloadDecompression => {
            flate2::read::MultiGzDecoder::new(&data[..])
                .read_to_end(&mut out)
                .unwrap();
        }
        CompressionCodec::Zstandard => {
            zstd::stream::read::Decoder::new(&data[..])
                .unwrap()
                .read_to_end(&mut out)
                .unwrap();
        }
        CompressionCodec::Snappy => {
            snap::read::FrameDecoder::new(&data[..])
                .read_to_end(&mut out)
                .unwrap();
        }
        _ => out = data,
    }
    out
}

fn assert_frag(got: &Fragment, want: &Fragment) {
    assert!(fragments_equal(got, want), "{got:?} != {want:?}");
}

#[test]
fn next_of_fresh_empty_and_written_spools() {
    let (mut sp, _) = new_spool();
    assert_frag(&sp.next(), &frag(0, 0, NONE, None));
    assert!(sp.registers().labels.is_empty() && sp.first_append_time().is_none());

    sp.must_apply(&proposal(frag(100, 100, SNAPPY, None), LabelSet::default()));
    assert_frag(&sp.next(), &frag(100, 100, SNAPPY, None));

    apply(&mut sp, content(b"some", 0), false);
    apply(&mut sp, content(b" content", 4), false);
    assert_eq!(sp.delta(), 12);
    assert_frag(&sp.next(), &frag(100, 112, SNAPPY, Some(b"some content")));
    // Nothing is committed yet.
    assert_frag(sp.spec(), &frag(100, 100, SNAPPY, None));
}

#[test]
fn content_delta_mismatch() {
    let (mut sp, _) = new_spool();
    apply(&mut sp, content(b"foo", 0), false);
    let err = sp.apply(&content(b"bar", 2), false).unwrap_err();
    assert_eq!(err.to_string(), "invalid ContentDelta (2; expected 3)");
    assert_eq!(sp.delta(), 3);
}

#[test]
fn commit_then_rollback_then_commit() {
    let (mut sp, obv) = new_spool();
    apply(&mut sp, content(b"committed ", 0), false);
    let first = sp.next();
    assert_eq!(
        apply(&mut sp, proposal(first.clone(), reg("foo")), false).status,
        OK
    );
    assert_frag(sp.spec(), &frag(0, 10, NONE, Some(b"committed ")));
    assert_eq!(sp.registers(), &reg("foo"));
    assert_eq!(sp.first_append_time(), Some(t0()));
    assert_eq!(obv.commits(), [(0, 10)]);
    let committed_file = obv.commits.lock().unwrap()[0].file.clone().unwrap();
    assert!(Arc::ptr_eq(&committed_file, sp.file().unwrap()));

    // Pending content, then a rollback: a proposal of exactly the current fragment.
    apply(&mut sp, content(b"discarded", 0), false);
    assert_eq!(sp.delta(), 9);
    assert_eq!(
        apply(&mut sp, proposal(first, reg("foo")), false).status,
        OK
    );
    assert_eq!(sp.delta(), 0);
    assert_eq!(sp.config().stats.rollback_bytes.load(Ordering::Relaxed), 9);

    // The SHA-1 state was restored: the sum covers only committed content.
    apply(&mut sp, content(b"kept", 0), false);
    let second = sp.next();
    assert_frag(&second, &frag(0, 14, NONE, Some(b"committed kept")));
    assert_eq!(
        apply(&mut sp, proposal(second, reg("bar")), false).status,
        OK
    );
    assert_eq!(sp.registers(), &reg("bar"));
    assert_eq!(local_content(&sp), b"committed kept");
    assert_eq!(obv.commits().len(), 2);
    assert_eq!(obv.completed(), 0);
    assert_eq!(sp.config().stats.commits.load(Ordering::Relaxed), 2);
}

#[test]
fn reject_next_mismatch() {
    let (mut sp, _) = new_spool();
    apply(&mut sp, content(b"foobar", 0), false);
    let good = frag(0, 6, NONE, Some(b"foobar"));
    let wrong_end = Fragment {
        end: 5,
        ..good.clone()
    };
    let mut wrong_sum = good.clone();
    wrong_sum.sum.as_mut().unwrap().part1 = u64::MAX;
    for bad in [wrong_end, wrong_sum] {
        let resp = apply(&mut sp, proposal(bad, reg("foo")), false);
        assert_eq!(resp.status, MISMATCH);
        assert_frag(resp.fragment.as_ref().unwrap(), &frag(0, 0, NONE, None));
        assert_eq!(resp.registers.unwrap(), LabelSet::default());
    }
    assert_eq!(apply(&mut sp, proposal(good, reg("foo")), false).status, OK);
}

#[test]
fn more_mismatch_cases() {
    let (mut sp, obv) = new_spool();
    sp.must_apply(&proposal(frag(0, 0, GZIP, None), LabelSet::default()));
    apply(&mut sp, content(b"abcd", 0), false);
    let committed = sp.next();
    sp.must_apply(&proposal(committed.clone(), reg("foo")));

    // Re-committing exactly the current fragment and registers succeeds.
    sp.must_apply(&proposal(committed.clone(), reg("foo")));
    // Other registers are refused.
    let resp = apply(&mut sp, proposal(committed, reg("bar")), false);
    assert_eq!(resp.status, MISMATCH);
    assert_eq!(resp.registers.unwrap(), reg("foo"));

    apply(&mut sp, content(b"efgh", 0), false);
    // A rollback with the wrong registers is refused.
    let spec = sp.spec().clone();
    assert_eq!(
        apply(&mut sp, proposal(spec, reg("bar")), false).status,
        MISMATCH
    );

    // A mismatched proposal inside the spool's bounds doesn't roll it.
    let mut bad = sp.next();
    bad.begin = 1;
    assert_eq!(
        apply(&mut sp, proposal(bad.clone(), reg("bar")), false).status,
        MISMATCH
    );
    assert_eq!(
        (sp.begin(), sp.registers(), obv.completed()),
        (0, &reg("foo"), 0)
    );

    // Beyond the bounds: still a mismatch, but the spool rolls and takes the registers.
    bad.end = 9;
    assert_eq!(
        apply(&mut sp, proposal(bad.clone(), reg("bar")), false).status,
        MISMATCH
    );
    assert_eq!((sp.begin(), sp.end(), sp.delta()), (9, 9, 0));
    assert_eq!(sp.registers(), &reg("bar"));
    assert_eq!(obv.completed(), 1);
    let (mut done, primary) = obv.take(0);
    assert!(!primary);
    assert_eq!(local_content(&done), b"abcd");
    done.finish_compression().unwrap();
    assert_eq!(decoded(&done), b"abcd");

    // Empty spool, proposal inside bounds: unchanged.
    bad.end = 8;
    assert_eq!(
        apply(&mut sp, proposal(bad.clone(), reg("baz")), false).status,
        MISMATCH
    );
    assert_eq!((sp.end(), sp.registers()), (9, &reg("bar")));

    // Empty spool rolled beyond bounds: not a completion, registers taken.
    bad.end = 11;
    assert_eq!(
        apply(&mut sp, proposal(bad, reg("baz")), false).status,
        MISMATCH
    );
    assert_eq!(
        (sp.begin(), sp.end(), sp.registers()),
        (11, 11, &reg("baz"))
    );
    assert_eq!(obv.completed(), 1);
}

#[test]
fn roll_to_empty_proposal_at_end_keeps_registers() {
    let (mut sp, obv) = new_spool();
    commit(&mut sp, b"hello", Some(reg("foo")), false);
    // An empty proposal at our end rolls; registers are kept, not taken from it.
    let resp = apply(&mut sp, proposal(frag(5, 5, ZSTD, None), reg("foo")), false);
    assert_eq!(resp.status, OK);
    assert_eq!(
        (sp.begin(), sp.end(), sp.spec().compression_codec),
        (5, 5, ZSTD)
    );
    assert!(sp.first_append_time().is_none() && sp.file().is_none());
    assert_eq!(obv.completed(), 1);
    let (done, _) = obv.take(0);
    assert_frag(done.spec(), &frag(0, 5, NONE, Some(b"hello")));
    assert_eq!(done.first_append_time(), Some(t0()));
    assert_eq!(done.registers(), &reg("foo"));
    assert!(done.continued());
    // The completed spool is detached: the live one moves on independently.
    commit(&mut sp, b"world", None, false);
    assert_eq!(local_content(&done), b"hello");
    assert_eq!(local_content(&sp), b"world");
    assert_eq!(done.registers(), &reg("foo"));

    // With other registers, the same roll request is refused after rolling.
    let resp = apply(
        &mut sp,
        proposal(frag(10, 10, NONE, None), reg("bar")),
        false,
    );
    assert_eq!(resp.status, MISMATCH);
    assert_eq!(
        (sp.begin(), sp.end(), sp.registers()),
        (10, 10, &reg("foo"))
    );
}

#[test]
fn reject_roll_before_current_end() {
    let (mut sp, _) = new_spool();
    commit(&mut sp, b"0123456789", Some(reg("bar")), false);
    let resp = apply(&mut sp, proposal(frag(9, 9, NONE, None), reg("bar")), false);
    assert_eq!(resp.status, MISMATCH);
    assert_frag(resp.fragment.as_ref().unwrap(), sp.spec());
    assert_eq!(resp.registers.unwrap(), reg("bar"));
    let resp = apply(
        &mut sp,
        proposal(frag(11, 11, NONE, None), reg("baz")),
        false,
    );
    assert_eq!(resp.status, OK);
    assert_eq!(sp.registers(), &reg("baz"));
}

#[test]
fn roll_beyond_pending_content_discards_it() {
    let (mut sp, obv) = new_spool();
    commit(&mut sp, b"abc", None, false);
    apply(&mut sp, content(b"pending", 0), false);
    let resp = apply(
        &mut sp,
        proposal(frag(100, 100, NONE, None), reg("foo")),
        false,
    );
    assert_eq!(resp.status, OK);
    assert_eq!((sp.begin(), sp.end(), sp.delta()), (100, 100, 0));
    assert_eq!(sp.registers(), &reg("foo"));
    let (done, _) = obv.take(0);
    assert_eq!(local_content(&done), b"abc");
    assert!(!done.continued()); // Rolled past a gap.
}

#[test]
fn primary_compresses_incrementally() {
    for codec in [GZIP, ZSTD, SNAPPY, GZIP_OFFLOAD] {
        let (mut sp, obv) = new_spool_with(batched(10));
        apply(
            &mut sp,
            proposal(frag(0, 0, codec, None), LabelSet::default()),
            true,
        );
        let writes: [&[u8]; 5] = [
            b"first write ",
            b"second ",
            b"third ",
            b"fourth write ",
            b"final",
        ];
        for w in writes {
            commit(&mut sp, w, None, true);
        }
        // Incremental: compressed through the last commit that reached the batch size.
        sp.wait_compression().unwrap();
        assert!(sp.has_compressed_file(), "codec {codec}");
        let end = sp.end();
        apply(
            &mut sp,
            proposal(frag(end, end, codec, None), LabelSet::default()),
            true,
        );
        let (done, primary) = obv.take(0);
        assert!(primary && done.compressed().unwrap().1 > 0);
        assert_eq!(decoded(&done), writes.concat(), "codec {codec}");
    }
}

#[test]
fn gzip_batches_are_members() {
    let (mut sp, obv) = new_spool_with(batched(10));
    apply(
        &mut sp,
        proposal(frag(0, 0, GZIP, None), LabelSet::default()),
        true,
    );
    for w in [
        &b"first write "[..],
        b"second ",
        b"third ",
        b"fourth write ",
        b"final",
    ] {
        commit(&mut sp, w, None, true);
    }
    let end = sp.end();
    apply(
        &mut sp,
        proposal(frag(end, end, GZIP, None), LabelSet::default()),
        true,
    );
    let blob = compressed_bytes(&obv.take(0).0);
    // Decode member by member: each batch is one.
    let mut members = Vec::new();
    let mut rest = &blob[..];
    while !rest.is_empty() {
        let mut d = flate2::bufread::GzDecoder::new(rest);
        let mut out = Vec::new();
        d.read_to_end(&mut out).unwrap();
        members.push(String::from_utf8(out).unwrap());
        rest = d.into_inner();
    }
    assert_eq!(
        members,
        ["first write ", "second third ", "fourth write ", "final"]
    );

    // Compression offsets restart with the next spool.
    for w in [b"abc", b"xyz"] {
        commit(&mut sp, w, None, true);
    }
    let end = sp.end();
    apply(
        &mut sp,
        proposal(frag(end, end, GZIP, None), LabelSet::default()),
        true,
    );
    assert_eq!(decoded(&obv.take(1).0), b"abcxyz");
    // Below the batch size: compressed wholly when the spool completes.
    commit(&mut sp, b"small", None, true);
    let end = sp.end();
    apply(
        &mut sp,
        proposal(frag(end, end, GZIP, None), LabelSet::default()),
        true,
    );
    assert_eq!(decoded(&obv.take(2).0), b"small");
    // Rolling an empty spool completes nothing.
    apply(
        &mut sp,
        proposal(frag(end, end, GZIP, None), LabelSet::default()),
        true,
    );
    assert_eq!(obv.completed(), 3);
}

#[test]
fn replica_compresses_only_on_demand() {
    let (mut sp, obv) = new_spool_with(batched(1));
    sp.must_apply(&proposal(frag(0, 0, GZIP, None), LabelSet::default()));
    commit(&mut sp, b"an initial write ", None, false);
    commit(&mut sp, b"final write", None, false);
    let end = sp.end();
    sp.must_apply(&proposal(frag(end, end, GZIP, None), LabelSet::default()));
    let (mut done, primary) = obv.take(0);
    assert!(!primary && !done.has_compressed_file());
    assert_eq!(local_content(&done), b"an initial write final write");
    done.finish_compression().unwrap();
    assert!(done.compressed().unwrap().1 > 0);
    assert_eq!(decoded(&done), b"an initial write final write");
    done.finish_compression().unwrap(); // Idempotent.
    assert_eq!(decoded(&done), b"an initial write final write");
}

#[test]
fn content_larger_than_a_copy_block() {
    // Hashing and compression both cross block boundaries.
    let (mut sp, obv) = new_spool_with(batched(1));
    apply(
        &mut sp,
        proposal(frag(0, 0, ZSTD, None), LabelSet::default()),
        true,
    );
    let data: Vec<u8> = (0..COPY_BLOCK * 5 / 2).map(|i| (i % 251) as u8).collect();
    commit(&mut sp, &data, None, true);
    assert_eq!(local_content(&sp), data);
    let want = hex_sha1(&data);
    assert_eq!(sha1sum_hex(sp.spec().sum.as_ref().unwrap()), want);
    let end = sp.end();
    apply(
        &mut sp,
        proposal(frag(end, end, ZSTD, None), LabelSet::default()),
        true,
    );
    assert_eq!(decoded(&obv.take(0).0), data);
}

fn hex_sha1(data: &[u8]) -> String {
    sha1sum_hex(&sha1sum_from_digest(&Sha1::digest(data).into()))
}

#[test]
fn spool_directory_files_are_anonymous() {
    let dir = tempfile::tempdir().unwrap();
    let (mut sp, _) = new_spool_with(SpoolConfig {
        directory: Some(dir.path().into()),
        ..SpoolConfig::default()
    });
    commit(&mut sp, b"data", None, false);
    // The file exists only through its descriptor.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    assert_eq!(local_content(&sp), b"data");
    sp.record_confirmed().unwrap(); // Nothing to record into.
}

#[test]
fn a_failed_content_write_fails_the_request_and_keeps_the_spool_usable() {
    // A full disk: Go's spool retries forever, hanging every append of the journal;
    // ours fails the request (so its append fails and the client retries).
    let dir = tempfile::tempdir().unwrap();
    let (mut sp, _) = new_spool();
    sp.must_apply(&proposal(frag(0, 0, NONE, None), LabelSet::default()));
    apply(&mut sp, content(b"abc", 0), false);
    let real = sp.file.clone();
    // A read-only descriptor refuses writes as a full disk would.
    let path = dir.path().join("ro");
    std::fs::write(&path, b"").unwrap();
    sp.file = Some(Arc::new(SpoolFile::from_file(
        std::fs::File::open(&path).unwrap(),
    )));
    let err = sp.apply(&content(b"defg", 3), false).unwrap_err();
    assert!(matches!(err, SpoolError::Write { .. }), "{err}");
    assert!(err
        .to_string()
        .starts_with("writing spool content of a/journal: "));
    assert_eq!(sp.delta(), 3); // Nothing of the failed write counts.
    assert_eq!(sp.config().stats.write_failures.load(Ordering::Relaxed), 1);
    sp.file = real; // Space is back.
    apply(&mut sp, content(b"de", 3), false);
    let resp = apply(
        &mut sp,
        proposal(frag(0, 5, NONE, Some(b"abcde")), LabelSet::default()),
        false,
    );
    assert_eq!(resp.status, OK);
    assert_eq!(sp.end(), 5);
}

#[test]
fn a_commit_does_not_wait_for_its_batch_compression() {
    let (mut sp, obv) = new_spool_with(batched(10));
    apply(
        &mut sp,
        proposal(frag(0, 0, GZIP, None), LabelSet::default()),
        true,
    );
    let gate = Arc::new(Gate::default());
    sp.gate = Some(gate.clone());
    // The first batch's compression is held, yet its commit returns.
    commit(&mut sp, b"first batch ", None, true);
    assert_eq!(sp.end(), 12);
    // Commits below the next batch neither start nor wait for compression.
    commit(&mut sp, b"x", None, true);
    assert!(matches!(sp.compressing, Compressing::Running(_)));
    // The next batch waits for the held one: at most one is in flight.
    let opener = {
        let gate = gate.clone();
        std::thread::spawn(move || {
            while gate.started().is_empty() {
                std::thread::sleep(Duration::from_millis(5));
            }
            std::thread::sleep(Duration::from_millis(100));
            assert_eq!(gate.started(), [12]);
            gate.open();
        })
    };
    commit(&mut sp, b"second batch", None, true);
    opener.join().unwrap();
    let end = sp.end();
    apply(
        &mut sp,
        proposal(frag(end, end, GZIP, None), LabelSet::default()),
        true,
    );
    assert_eq!(decoded(&obv.take(0).0), b"first batch xsecond batch");
    assert_eq!(gate.started(), [12, 25]);
}

#[test]
fn a_roll_waits_for_the_running_batch() {
    let (mut sp, obv) = new_spool_with(batched(10));
    apply(
        &mut sp,
        proposal(frag(0, 0, GZIP, None), LabelSet::default()),
        true,
    );
    let gate = Arc::new(Gate::default());
    sp.gate = Some(gate.clone());
    commit(&mut sp, b"first batch ", None, true);
    let opener = {
        let gate = gate.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            gate.open();
        })
    };
    let end = sp.end();
    let resp = apply(
        &mut sp,
        proposal(frag(end, end, GZIP, None), LabelSet::default()),
        true,
    );
    assert_eq!(resp.status, OK);
    opener.join().unwrap();
    let (done, primary) = obv.take(0);
    assert!(primary);
    assert_eq!(decoded(&done), b"first batch ");
    // Finishing compressed nothing again: the roll used the batch's work.
    assert_eq!(gate.started(), [12]);
}

#[test]
fn an_unsupported_codec_fails_compression() {
    let (mut sp, _) = new_spool_with(batched(1));
    apply(
        &mut sp,
        proposal(frag(0, 0, 42, None), LabelSet::default()),
        true,
    );
    commit(&mut sp, b"data", None, true);
    // The batch failed on its thread; the roll that waits for it reports it.
    let err = sp
        .apply(&proposal(frag(4, 4, NONE, None), LabelSet::default()), true)
        .unwrap_err();
    assert_eq!(err.to_string(), "unsupported codec 42");
    assert_eq!(sp.end(), 4);
}

#[test]
fn confirm_ignores_ends_outside_the_fragment() {
    let (mut sp, _) = new_spool();
    sp.must_apply(&proposal(frag(10, 10, NONE, None), LabelSet::default()));
    assert_eq!(sp.confirmed_end(), 10);
    commit(&mut sp, b"abcdef", None, false);
    assert!(!sp.confirmed());
    sp.confirm(20);
    sp.confirm(5);
    assert_eq!(sp.confirmed_end(), 10);
    sp.confirm(13);
    sp.confirm(12); // Never backwards.
    assert_eq!(sp.confirmed_end(), 13);
    sp.confirm(16);
    assert!(sp.confirmed());
}

#[test]
fn recoverable_spools_record_confirmations_and_forget_their_files() {
    let dir = tempfile::tempdir().unwrap();
    let (mut sp, obv) = new_spool_with(SpoolConfig {
        directory: Some(dir.path().into()),
        recoverable: true,
        sync: true,
        ..SpoolConfig::default()
    });
    apply(
        &mut sp,
        proposal(frag(0, 0, NONE, None), LabelSet::default()),
        true,
    );
    commit(&mut sp, b"confirmed,", None, true);
    sp.confirm(sp.end());
    sp.record_confirmed().unwrap();
    commit(&mut sp, b"unconfirmed", None, true);
    let file = sp.file().unwrap().clone();
    let record = file.record_path().unwrap();
    let rec = files::SpoolRecord::read(&record).unwrap();
    assert_eq!(
        (rec.journal.as_str(), rec.begin, rec.confirmed, rec.codec),
        (JOURNAL, 0, 10, NONE)
    );
    assert_eq!(
        files::find_records(dir.path()).unwrap(),
        std::slice::from_ref(&record)
    );

    apply(
        &mut sp,
        proposal(frag(21, 21, NONE, None), LabelSet::default()),
        true,
    );
    let (done, _) = obv.take(0);
    assert_eq!(done.confirmed_end(), 10);
    done.forget_file().unwrap();
    assert!(!record.exists() && file.path().is_none());
    assert_eq!(local_content(&done), b"confirmed,unconfirmed");
}

// -- maybe_roll ---------------------------------------------------------------------

fn spec_fragment(length: i64, codec: i32, flush: i64) -> journal_spec::Fragment {
    journal_spec::Fragment {
        length,
        compression_codec: codec,
        flush_interval: Some(prost_types::Duration {
            seconds: flush,
            nanos: 0,
        }),
        ..journal_spec::Fragment::default()
    }
}

#[test]
fn maybe_roll_cases() {
    let (mut sp, _) = new_spool();
    let now = t0();
    let spec = spec_fragment(100, GZIP, 0);
    // Empty: re-proposed under the spec's codec.
    let out = maybe_roll(&sp, 0, &spec, now).unwrap();
    assert_frag(&out, &frag(0, 0, GZIP, None));
    sp.must_apply(&proposal(out, LabelSet::default()));
    commit(&mut sp, &[b'x'; 50], None, false);
    // Within length, no roll offset, no interval: the fragment itself.
    assert_frag(&maybe_roll(&sp, 0, &spec, now).unwrap(), sp.spec());
    // A roll offset equal to begin: no roll.
    assert_frag(&maybe_roll(&sp, sp.begin(), &spec, now).unwrap(), sp.spec());
    // Length exceeded (strictly).
    let at_length = spec_fragment(50, GZIP, 0);
    assert_frag(&maybe_roll(&sp, 0, &at_length, now).unwrap(), sp.spec());
    let past_length = spec_fragment(49, SNAPPY, 0);
    assert_frag(
        &maybe_roll(&sp, 0, &past_length, now).unwrap(),
        &frag(50, 50, SNAPPY, None),
    );
    // A requested roll offset beyond the end.
    assert_frag(
        &maybe_roll(&sp, 80, &spec, now).unwrap(),
        &frag(80, 80, GZIP, None),
    );
    let err = maybe_roll(&sp, 20, &spec, now).unwrap_err();
    assert!(err.to_string().contains("roll_to_offset"), "{err}");
    // Flush interval: the same hour bucket keeps it; the next hour rolls it.
    let hour = spec_fragment(100, GZIP, 3600);
    let minutes = |m: u64| now + Duration::from_secs(m * 60);
    assert_frag(
        &maybe_roll(&sp, 0, &hour, minutes(30) - Duration::from_secs(1)).unwrap(),
        sp.spec(),
    );
    assert_frag(
        &maybe_roll(&sp, 0, &hour, minutes(30)).unwrap(),
        &frag(50, 50, GZIP, None),
    );
}

#[test]
fn maybe_roll_buckets_a_never_committed_spool_before_the_epoch() {
    // A spool with content but no first commit (a recovered one) falls in Go's
    // zero-time bucket, which is never now's: it rolls.
    let dir = tempfile::tempdir().unwrap();
    let f = Arc::new(SpoolFile::create(Some(dir.path())).unwrap());
    f.pwrite(b"abc", 0).unwrap();
    let sp = Spool::recovered(JOURNAL, 0, 3, NONE, f, Arc::default()).unwrap();
    let hour = spec_fragment(100, GZIP, 3600);
    assert_frag(
        &maybe_roll(&sp, 0, &hour, t0()).unwrap(),
        &frag(3, 3, GZIP, None),
    );
    let no_interval = spec_fragment(100, GZIP, 0);
    assert_frag(&maybe_roll(&sp, 0, &no_interval, t0()).unwrap(), sp.spec());
}

#[test]
fn unix_seconds_round_down() {
    assert_eq!(unix_seconds(UNIX_EPOCH + Duration::from_millis(1500)), 1);
    assert_eq!(unix_seconds(UNIX_EPOCH - Duration::from_millis(1500)), -2);
    assert_eq!(unix_seconds(UNIX_EPOCH - Duration::from_secs(2)), -2);
}

#[test]
fn content_counts_only_once_its_write_is_finished() {
    // The async layer's split: a write that never answers leaves the spool as it was.
    let (mut sp, _) = new_spool();
    let data = Bytes::from_static(b"abc");
    let ContentWrite { disk, sum } = sp.prepare_content(&data, 0).unwrap();
    let written = disk.perform().unwrap();
    assert_eq!(sp.delta(), 0);
    assert!(sp.file().is_none());
    sp.finish_content(written, sum.hash());
    assert_eq!(sp.delta(), 3);
    assert_eq!(sp.file().unwrap().pread(3, 0).unwrap(), b"abc");
    let _abandoned = sp.prepare_content(&data, 3).unwrap();
    assert_eq!(sp.delta(), 3);
    assert!(matches!(
        sp.prepare_content(&data, 0),
        Err(SpoolError::InvalidContentDelta {
            got: 0,
            expected: 3
        })
    ));
    assert!(sp.file_to_create().is_none());
}

#[test]
fn write_errors_are_worded_as_python_words_them() {
    assert_eq!(
        strerror(&io::Error::from_raw_os_error(28)),
        "No space left on device"
    );
    assert_eq!(
        strerror(&io::Error::other("spool file ended")),
        "spool file ended"
    );
}

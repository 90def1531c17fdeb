//! Recoverable spool files are shared with the Python broker: its recovery reads
//! what a crashed Rust data plane left behind, and the other way round. These
//! tests hold the Rust spool to the golden files the Python spool wrote
//! (`tests/data/spool`, made by its `make_golden.py`; see its README).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use dataplane::protocol::{Fragment, LabelSet, ReplicateRequest, Status};
use dataplane::spool::files::{self, FoundSpool, SpoolRecord};
use dataplane::spool::{sha1sum_hex, NullObserver, Spool, SpoolConfig};

/// One scenario of `make_golden.py`: its writes, and what Python made of them.
struct Case {
    name: &'static str,
    confirmed: &'static [&'static [u8]],
    unconfirmed: &'static [&'static [u8]],
    pending: &'static [u8],
    manifest: HashMap<String, String>,
}

impl Case {
    fn get(&self, key: &str) -> &str {
        &self.manifest[key]
    }
    fn int(&self, key: &str) -> i64 {
        self.get(key).parse().unwrap()
    }
    /// The spool file and record Python left, under `spools/`.
    fn golden_paths(&self) -> (PathBuf, PathBuf) {
        let dir = data().join("spools").join(self.get("dir"));
        let spool = dir.join(self.get("file"));
        let record = dir.join(format!("{}{}", self.get("file"), files::RECORD_SUFFIX));
        (spool, record)
    }
}

fn data() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/spool")
}

fn cases() -> Vec<Case> {
    let manifest = |name: &str| {
        let text = std::fs::read_to_string(data().join(format!("{name}.manifest"))).unwrap();
        text.lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect()
    };
    vec![
        Case {
            name: "plain",
            confirmed: &[b"hello, ", b"world\n"],
            unconfirmed: &[b"unconfirmed\n"],
            pending: b"",
            manifest: manifest("plain"),
        },
        Case {
            name: "quoted",
            confirmed: &[b"first\n", b"second\n", b"third\n"],
            unconfirmed: &[],
            pending: b"pending, never committed\n",
            manifest: manifest("quoted"),
        },
    ]
}

fn content(data: &[u8], delta: i64) -> ReplicateRequest {
    ReplicateRequest {
        content: Bytes::copy_from_slice(data),
        content_delta: delta,
        ..ReplicateRequest::default()
    }
}

fn proposal(f: Fragment, registers: LabelSet) -> ReplicateRequest {
    ReplicateRequest {
        proposal: Some(f),
        registers: Some(registers),
        ..ReplicateRequest::default()
    }
}

/// What `make_golden.py` does, by the Rust spool: a primary's spool, confirmed
/// part way, then killed. Returns it and its record as first written.
fn replay(case: &Case, directory: &Path) -> (Spool, Vec<u8>) {
    let config = SpoolConfig {
        directory: Some(directory.into()),
        recoverable: true,
        ..SpoolConfig::default()
    };
    let journal = case.get("journal");
    let begin = case.int("begin");
    let codec = case.int("codec") as i32;
    let mut sp = Spool::new(journal, Arc::new(NullObserver), Arc::new(config));
    let roll = Fragment {
        journal: journal.into(),
        begin,
        end: begin,
        compression_codec: codec,
        ..Fragment::default()
    };
    let resp = sp
        .apply(&proposal(roll, LabelSet::default()), true)
        .unwrap();
    assert_eq!(resp.status, Status::Ok as i32);
    let mut initial_record = None;
    for (i, data) in case.confirmed.iter().chain(case.unconfirmed).enumerate() {
        sp.apply(&content(data, sp.delta()), true).unwrap();
        if initial_record.is_none() {
            let path = sp.file().unwrap().record_path().unwrap();
            initial_record = Some(std::fs::read(path).unwrap());
        }
        let resp = sp
            .apply(&proposal(sp.next(), sp.registers().clone()), true)
            .unwrap();
        assert_eq!(resp.status, Status::Ok as i32);
        if i < case.confirmed.len() {
            sp.confirm(sp.end());
            sp.record_confirmed().unwrap();
        }
    }
    if !case.pending.is_empty() {
        sp.apply(&content(case.pending, sp.delta()), true).unwrap();
    }
    (sp, initial_record.unwrap())
}

#[test]
fn rust_writes_what_python_writes() {
    for case in cases() {
        let tmp = tempfile::tempdir().unwrap();
        let (sp, initial_record) = replay(&case, tmp.path());
        let file = sp.file().unwrap();
        let path = file.path().unwrap();
        let (golden_spool, golden_record) = case.golden_paths();

        // Names: the journal's directory exactly; the file's up to its random part.
        let dir_name = path
            .parent()
            .unwrap()
            .file_name()
            .unwrap()
            .to_str()
            .unwrap();
        assert_eq!(dir_name, case.get("dir"), "{}", case.name);
        assert_eq!(path.parent().unwrap().parent().unwrap(), tmp.path());
        let name = path.file_name().unwrap().to_str().unwrap();
        let golden_name = case.get("file");
        assert_eq!(name.len(), golden_name.len(), "{name} vs {golden_name}");
        assert_eq!(name[..17], golden_name[..17], "{}: begin prefix", case.name);
        assert!(name.ends_with(files::SPOOL_SUFFIX));
        assert!(name[17..25]
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_'));
        let record_path = file.record_path().unwrap();
        assert_eq!(
            record_path.as_os_str(),
            format!("{}{}", path.display(), files::RECORD_SUFFIX).as_str()
        );

        // Contents: byte for byte.
        assert_eq!(
            std::fs::read(&path).unwrap(),
            std::fs::read(&golden_spool).unwrap(),
            "{}: spool file",
            case.name
        );
        assert_eq!(
            std::fs::read(&record_path).unwrap(),
            std::fs::read(&golden_record).unwrap(),
            "{}: record",
            case.name
        );
        assert_eq!(
            initial_record,
            std::fs::read(data().join(format!("{}.record.initial", case.name))).unwrap(),
            "{}: record as created",
            case.name
        );

        // And the spool's own view agrees with Python's.
        assert_eq!(sp.end(), case.int("committed_end"));
        assert_eq!(
            sha1sum_hex(sp.spec().sum.as_ref().unwrap()),
            case.get("committed_sum")
        );
        assert_eq!(sp.confirmed_end(), case.int("confirmed_end"));
        assert_eq!(files::find_records(tmp.path()).unwrap(), [record_path]);
    }
}

/// Copies the tree at `from` into `to`, so tests never touch the committed files.
fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

#[test]
fn rust_reads_what_python_wrote() {
    let tmp = tempfile::tempdir().unwrap();
    copy_tree(&data().join("spools"), tmp.path());
    // A quarantine folder of the recovery is not a journal's.
    std::fs::create_dir_all(tmp.path().join("quarantine/x")).unwrap();
    std::fs::write(tmp.path().join("quarantine/x/y.spool.record"), b"").unwrap();

    let mut cases = cases();
    // Recovery visits records in path order.
    cases.sort_by(|a, b| a.get("dir").cmp(b.get("dir")));
    let records = files::find_records(tmp.path()).unwrap();
    assert_eq!(records.len(), cases.len());
    for (record_path, case) in records.iter().zip(&cases) {
        let (golden_spool, _) = case.golden_paths();
        let found = FoundSpool::open(record_path).unwrap();
        assert_eq!(
            found.path.file_name().unwrap(),
            golden_spool.file_name().unwrap()
        );
        assert_eq!(found.journal, case.get("journal"));
        assert_eq!(found.begin, case.int("begin"));
        assert_eq!(found.codec, case.int("codec") as i32);
        assert_eq!(found.confirmed, case.int("confirmed_end"));
        assert_eq!(found.end, case.int("file_end"));
        assert_eq!(
            SpoolRecord::read(record_path).unwrap().confirmed,
            found.confirmed
        );

        let sp = Spool::recovered(
            found.journal.clone(),
            found.begin,
            found.confirmed,
            found.codec,
            found.file.clone(),
            Arc::new(SpoolConfig::default()),
        )
        .unwrap();
        assert_eq!(
            (sp.begin(), sp.end()),
            (case.int("begin"), case.int("confirmed_end"))
        );
        assert_eq!(
            sha1sum_hex(sp.spec().sum.as_ref().unwrap()),
            case.get("confirmed_sum")
        );
        assert!(sp.confirmed());
        let whole = found
            .file
            .pread((found.end - found.begin) as usize, 0)
            .unwrap();
        assert_eq!(whole, std::fs::read(&golden_spool).unwrap());
    }
}

#[test]
fn a_confirmed_end_past_the_file_is_cut_to_it() {
    // A record may claim more than reached the disk (the file's tail was lost);
    // recovery trusts the file's length, as Python's does.
    let tmp = tempfile::tempdir().unwrap();
    copy_tree(&data().join("spools"), tmp.path());
    let case = cases().into_iter().find(|c| c.name == "plain").unwrap();
    let (golden_spool, _) = case.golden_paths();
    let path = tmp
        .path()
        .join(case.get("dir"))
        .join(golden_spool.file_name().unwrap());
    let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    file.set_len(5).unwrap();
    let found = FoundSpool::open(&PathBuf::from(format!("{}.record", path.display()))).unwrap();
    assert_eq!((found.begin, found.confirmed, found.end), (0, 5, 5));
}

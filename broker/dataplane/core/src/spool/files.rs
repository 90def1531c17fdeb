//! Local files behind a spool: anonymous or recoverable spool files, and the
//! record beside a recoverable one (the Rust side of the Python
//! `gazette.broker.fragment.files`).
//!
//! Everything here is blocking `std::fs` code. It is meant to run on the thread
//! that owns a spool directory's writes, never on an async executor: a stalled
//! disk must stall that thread alone.
//!
//! The on-disk layout of recoverable spools is shared with the Python broker,
//! whose `recovery` module reads what a crashed broker left behind, whichever
//! implementation wrote it. It is, in a spool directory `D`:
//!
//! ```text
//! D/<journal, percent-quoted>/<begin as 16 hex digits>-<8 random chars>.spool
//! D/<journal, percent-quoted>/<begin as 16 hex digits>-<8 random chars>.spool.record
//! ```
//!
//! The record is a 32-byte little-endian head (magic `GZSPOOL1`, begin `i64`,
//! confirmed end `i64`, codec `i32`, journal name length `u32`) followed by the
//! journal's UTF-8 name. After creation only the confirmed end (8 bytes at
//! offset 16) is ever rewritten, in place.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// Positional reads and copies of spool content move data in blocks of this size
/// (as the Python `files.COPY_BLOCK`).
pub const COPY_BLOCK: usize = 1 << 20;

/// Suffix of a recoverable spool file.
pub const SPOOL_SUFFIX: &str = ".spool";
/// Suffix appended to a spool file's name to name its record.
pub const RECORD_SUFFIX: &str = ".record";
/// First eight bytes of every record.
pub const RECORD_MAGIC: &[u8; 8] = b"GZSPOOL1";
/// Length of a record's fixed head; the journal name follows it.
pub const RECORD_HEAD_LEN: usize = 32;
/// Offset of the confirmed end within a record.
pub const CONFIRMED_AT: u64 = 16;

/// Characters of the random part of a spool file's name: those of Python's
/// `tempfile` names, so files of both implementations look alike.
const NAME_CHARS: &[u8; 37] = b"abcdefghijklmnopqrstuvwxyz0123456789_";
/// Names tried before creation gives up (Python's `tempfile.TMP_MAX`).
const NAME_ATTEMPTS: usize = 10_000;

/// A spool file: anonymous (already unlinked), or recoverable (named in a spool
/// directory beside a [`SpoolRecord`]).
///
/// It is shared (`Arc<SpoolFile>`) by the spool writing it, the index serving
/// reads from it and completed copies handed to the persister. All I/O is
/// positional, so readers and the writer never disturb a shared offset. The
/// descriptor closes when the last holder drops it.
#[derive(Debug)]
pub struct SpoolFile {
    file: File,
    // The names of a recoverable file, until `unlink` removes them. A mutex rather
    // than `&mut self`: the file is shared, and the persister forgets the names
    // while readers may still hold it.
    names: Mutex<Option<Names>>,
    // Unique among the files of this process (see `serial`).
    serial: u64,
}

/// Serials of spool files, counted from 1.
static SERIALS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

fn next_serial() -> u64 {
    SERIALS.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

#[derive(Debug)]
struct Names {
    path: PathBuf,
    // Shared so that a confirmation writes it without holding `names` through the
    // I/O: a view asking whether the file is recoverable must never wait on a disk.
    record: Arc<SpoolRecord>,
}

impl SpoolFile {
    /// An unlinked temporary file in `directory` (default: the OS temporary directory).
    pub fn create(directory: Option<&Path>) -> io::Result<SpoolFile> {
        let dir = match directory {
            Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
            _ => std::env::temp_dir(),
        };
        let (file, path) = create_unique(&dir, "spool", "")?;
        // On failure the descriptor closes as `file` drops.
        std::fs::remove_file(&path)?;
        Ok(SpoolFile::from_file(file))
    }

    /// `<directory>/<journal, quoted>/<begin:016x>-<random>.spool`, and its record
    /// (confirmed end = `begin`), both made with Python's names and bytes.
    pub fn create_recoverable(
        directory: &Path,
        journal: &str,
        begin: i64,
        codec: i32,
    ) -> io::Result<SpoolFile> {
        // Python's `mkstemp` hands back an absolute path; so do we, so that a later
        // unlink does not depend on the working directory.
        let folder = std::path::absolute(directory)?.join(quote_journal(journal));
        std::fs::create_dir_all(&folder)?;
        let (file, path) = create_unique(&folder, &begin_prefix(begin), SPOOL_SUFFIX)?;
        let mut record_path = path.clone().into_os_string();
        record_path.push(RECORD_SUFFIX);
        match SpoolRecord::create(PathBuf::from(record_path), journal, begin, codec) {
            Ok(record) => Ok(SpoolFile {
                file,
                serial: next_serial(),
                names: Mutex::new(Some(Names {
                    path,
                    record: Arc::new(record),
                })),
            }),
            Err(e) => {
                drop(file);
                let _ = std::fs::remove_file(&path);
                Err(e)
            }
        }
    }

    /// Wraps an open file that has no names to manage (e.g. one found by recovery).
    pub fn from_file(file: File) -> SpoolFile {
        SpoolFile {
            file,
            serial: next_serial(),
            names: Mutex::new(None),
        }
    }

    /// A number no other spool file of this process has had: whoever keeps files
    /// by identity (the Python index, across the bridge) tells them apart by it.
    pub fn serial(&self) -> u64 {
        self.serial
    }

    /// The underlying file, for zero-copy reads (sendfile, mmap).
    pub fn as_file(&self) -> &File {
        &self.file
    }

    /// The spool file's path while it is recoverable (None: anonymous or unlinked).
    pub fn path(&self) -> Option<PathBuf> {
        self.names_lock().as_ref().map(|n| n.path.clone())
    }

    /// The record's path while the file is recoverable.
    pub fn record_path(&self) -> Option<PathBuf> {
        self.names_lock().as_ref().map(|n| n.record.path.clone())
    }

    /// Whether the file still has a record to confirm into.
    pub fn is_recoverable(&self) -> bool {
        self.names_lock().is_some()
    }

    /// Writes all of `data` at `offset`.
    pub fn pwrite(&self, data: &[u8], offset: u64) -> io::Result<()> {
        self.file.write_all_at(data, offset)
    }

    /// Fills `buf` from `offset`, stopping early only at the end of the file;
    /// returns how many bytes were read.
    pub fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let mut done = 0;
        while done < buf.len() {
            match self.file.read_at(&mut buf[done..], offset + done as u64) {
                Ok(0) => break,
                Ok(n) => done += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(done)
    }

    /// Up to `size` bytes at `offset` (fewer only at the end of the file).
    pub fn pread(&self, size: usize, offset: u64) -> io::Result<Vec<u8>> {
        let mut buf = vec![0; size];
        let n = self.read_at(&mut buf, offset)?;
        buf.truncate(n);
        Ok(buf)
    }

    /// The file's current length.
    pub fn size(&self) -> io::Result<u64> {
        Ok(self.file.metadata()?.len())
    }

    /// Records `end` as the confirmed end, if the file is recoverable (returns
    /// whether it was). With `sync`, the spool file's data reaches the device
    /// before the record claims it, and then the record does too.
    pub fn record_confirmed(&self, end: i64, sync: bool) -> io::Result<bool> {
        let Some(record) = self.names_lock().as_ref().map(|n| n.record.clone()) else {
            return Ok(false);
        };
        if sync {
            self.file.sync_data()?;
        }
        record.set_confirmed(end, sync)?;
        Ok(true)
    }

    /// Removes a recoverable file's names (its content is stored); holders keep
    /// reading the open file. Names already gone are not an error.
    pub fn unlink(&self) -> io::Result<()> {
        // Taken first: a failure below leaves nothing to confirm into, as in Python.
        let Some(names) = self.names_lock().take() else {
            return Ok(());
        };
        let mut first_err = None;
        for p in [&names.path, &names.record.path] {
            match std::fs::remove_file(p) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => {
                    first_err.get_or_insert(e);
                }
                _ => {}
            }
        }
        first_err.map_or(Ok(()), Err)
    }

    fn names_lock(&self) -> std::sync::MutexGuard<'_, Option<Names>> {
        // Nothing here can leave the names half-updated, so a poisoned lock is usable.
        self.names.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The sidecar of a recoverable spool file: whose content it is, and how much of it
/// is confirmed.
#[derive(Debug)]
pub struct SpoolRecord {
    file: File,
    path: PathBuf,
}

/// What a record says (see [`SpoolRecord::read`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordContents {
    pub journal: String,
    pub begin: i64,
    pub confirmed: i64,
    pub codec: i32,
}

/// Why a record could not be read.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    #[error("spool record {}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("spool record {} is {len} bytes, too short", path.display())]
    TooShort { path: PathBuf, len: usize },
    #[error("spool record {} is not one of ours, or torn", path.display())]
    NotOurs { path: PathBuf },
}

impl SpoolRecord {
    /// Creates the record at `path` (which must not exist) with confirmed end `begin`.
    pub fn create(path: PathBuf, journal: &str, begin: i64, codec: i32) -> io::Result<SpoolRecord> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)?;
        let name = journal.as_bytes();
        let name_len = u32::try_from(name.len())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "journal name too long"))?;
        let mut data = Vec::with_capacity(RECORD_HEAD_LEN + name.len());
        data.extend_from_slice(RECORD_MAGIC);
        data.extend_from_slice(&begin.to_le_bytes());
        data.extend_from_slice(&begin.to_le_bytes());
        data.extend_from_slice(&codec.to_le_bytes());
        data.extend_from_slice(&name_len.to_le_bytes());
        data.extend_from_slice(name);
        if let Err(e) = file.write_all_at(&data, 0) {
            drop(file);
            let _ = std::fs::remove_file(&path);
            return Err(e);
        }
        Ok(SpoolRecord { file, path })
    }

    /// The record's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Rewrites the confirmed end in place (one 8-byte write: a crash leaves the old
    /// value or the new one), then, with `sync`, flushes it to the device.
    pub fn set_confirmed(&self, end: i64, sync: bool) -> io::Result<()> {
        self.file.write_all_at(&end.to_le_bytes(), CONFIRMED_AT)?;
        if sync {
            self.file.sync_data()?;
        }
        Ok(())
    }

    /// Parses the record at `path`, refusing a torn or foreign one.
    pub fn read(path: &Path) -> Result<RecordContents, RecordError> {
        let data = std::fs::read(path).map_err(|source| RecordError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        Self::parse(&data).map_err(|short| {
            let path = path.to_path_buf();
            if short {
                RecordError::TooShort {
                    path,
                    len: data.len(),
                }
            } else {
                RecordError::NotOurs { path }
            }
        })
    }

    /// The record in `data`; `Err(true)` when too short for a head, `Err(false)` when
    /// not ours or torn. Bytes past the name are ignored, as Python does.
    fn parse(data: &[u8]) -> Result<RecordContents, bool> {
        let Some(head) = data.get(..RECORD_HEAD_LEN) else {
            return Err(true);
        };
        let i64_at = |at: usize| i64::from_le_bytes(head[at..at + 8].try_into().unwrap());
        let begin = i64_at(8);
        let confirmed = i64_at(16);
        let codec = i32::from_le_bytes(head[24..28].try_into().unwrap());
        let len = u32::from_le_bytes(head[28..32].try_into().unwrap()) as usize;
        let name = data
            .get(RECORD_HEAD_LEN..RECORD_HEAD_LEN.saturating_add(len))
            .ok_or(false)?;
        if &head[..8] != RECORD_MAGIC || begin > confirmed {
            return Err(false);
        }
        // Python's strict decode fails with a ValueError, which recovery treats as torn.
        let journal = std::str::from_utf8(name).map_err(|_| false)?.to_owned();
        Ok(RecordContents {
            journal,
            begin,
            confirmed,
            codec,
        })
    }
}

/// A recoverable spool file found on disk, opened for reading (the reading half
/// of the Python `recovery.recover`: what to store, and what to keep aside).
#[derive(Debug)]
pub struct FoundSpool {
    /// The spool file's path (its record's, less [`RECORD_SUFFIX`]).
    pub path: PathBuf,
    pub record_path: PathBuf,
    pub journal: String,
    pub begin: i64,
    /// The confirmed end, never past `end`.
    pub confirmed: i64,
    /// `begin` plus the file's length.
    pub end: i64,
    pub codec: i32,
    pub file: std::sync::Arc<SpoolFile>,
}

/// Why a found spool file could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum FoundError {
    #[error(transparent)]
    Record(#[from] RecordError),
    #[error("spool file {}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

impl FoundSpool {
    /// Opens the spool file of the record at `record_path`.
    pub fn open(record_path: &Path) -> Result<FoundSpool, FoundError> {
        let rec = SpoolRecord::read(record_path)?;
        use std::os::unix::ffi::OsStrExt;
        let name = record_path.as_os_str().as_bytes();
        let stem = name.strip_suffix(RECORD_SUFFIX.as_bytes()).unwrap_or(name);
        let path = PathBuf::from(std::ffi::OsStr::from_bytes(stem));
        let io_err = |source| FoundError::Io {
            path: path.clone(),
            source,
        };
        let file = File::open(&path).map_err(io_err)?;
        let len = file.metadata().map_err(io_err)?.len();
        let end = rec
            .begin
            .saturating_add(i64::try_from(len).unwrap_or(i64::MAX));
        Ok(FoundSpool {
            record_path: record_path.to_path_buf(),
            journal: rec.journal,
            begin: rec.begin,
            confirmed: rec.confirmed.min(end),
            end,
            codec: rec.codec,
            file: std::sync::Arc::new(SpoolFile::from_file(file)),
            path,
        })
    }
}

/// Every record under a spool directory, sorted as the Python recovery visits them:
/// `*.spool.record` files one level down, skipping `quarantine/`.
pub fn find_records(directory: &Path) -> io::Result<Vec<PathBuf>> {
    let suffix = format!("{SPOOL_SUFFIX}{RECORD_SUFFIX}");
    let mut found = Vec::new();
    for entry in std::fs::read_dir(directory)? {
        let entry = entry?;
        if entry.file_name() == "quarantine" || !entry.path().is_dir() {
            continue;
        }
        for inner in std::fs::read_dir(entry.path())? {
            let inner = inner?;
            if inner
                .file_name()
                .as_encoded_bytes()
                .ends_with(suffix.as_bytes())
            {
                found.push(inner.path());
            }
        }
    }
    found.sort();
    Ok(found)
}

/// The journal's directory name: Python's `urllib.parse.quote(journal, safe="")`,
/// which keeps only RFC 3986 unreserved characters and percent-encodes every other
/// UTF-8 byte in upper-case hex (so `/` becomes `%2F`).
pub fn quote_journal(journal: &str) -> String {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let mut out = String::with_capacity(journal.len() * 3 / 2);
    for &b in journal.as_bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-' | b'~') {
            out.push(b as char);
        } else {
            out.extend([
                '%',
                HEX[(b >> 4) as usize] as char,
                HEX[(b & 15) as usize] as char,
            ]);
        }
    }
    out
}

/// The name prefix of a spool file beginning at `begin`: Python's
/// `f"{begin:016x}-"` (a negative offset keeps its sign inside the 16 columns).
fn begin_prefix(begin: i64) -> String {
    if begin < 0 {
        format!("-{:015x}-", begin.unsigned_abs())
    } else {
        format!("{begin:016x}-")
    }
}

/// Creates `dir/<prefix><8 random chars><suffix>` exclusively (mode 0600), trying
/// new names while one exists, as Python's `mkstemp` does.
fn create_unique(dir: &Path, prefix: &str, suffix: &str) -> io::Result<(File, PathBuf)> {
    for _ in 0..NAME_ATTEMPTS {
        let path = dir.join(format!("{prefix}{}{suffix}", random_name()?));
        match OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
        {
            Ok(file) => return Ok((file, path)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
    Err(io::Error::new(
        io::ErrorKind::AlreadyExists,
        "no usable temporary file name found",
    ))
}

/// Eight characters of [`NAME_CHARS`], unbiased (bytes past the last whole multiple
/// of the alphabet's length are drawn again).
fn random_name() -> io::Result<String> {
    use ring::rand::SecureRandom;
    let rng = ring::rand::SystemRandom::new();
    let limit = (256 / NAME_CHARS.len() * NAME_CHARS.len()) as u8;
    let mut out = String::with_capacity(8);
    let mut bytes = [0u8; 16];
    while out.len() < 8 {
        rng.fill(&mut bytes)
            .map_err(|_| io::Error::other("no randomness for a spool file name"))?;
        for &b in bytes.iter().filter(|&&b| b < limit) {
            if out.len() == 8 {
                break;
            }
            out.push(NAME_CHARS[b as usize % NAME_CHARS.len()] as char);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting_matches_python() {
        // Values from `urllib.parse.quote(s, safe="")`.
        assert_eq!(quote_journal("a/journal"), "a%2Fjournal");
        assert_eq!(
            quote_journal("ex/\u{e4} b~c.d_e-f;x%"),
            "ex%2F%C3%A4%20b~c.d_e-f%3Bx%25"
        );
        assert_eq!(quote_journal("AZaz09"), "AZaz09");
    }

    #[test]
    fn begin_prefixes_match_python() {
        assert_eq!(begin_prefix(0), "0000000000000000-");
        assert_eq!(begin_prefix(0x1234567), "0000000001234567-");
        assert_eq!(begin_prefix(i64::MAX), "7fffffffffffffff-");
        assert_eq!(begin_prefix(-1), "-000000000000001-");
    }

    #[test]
    fn random_names_use_python_characters() {
        for _ in 0..50 {
            let n = random_name().unwrap();
            assert_eq!(n.len(), 8);
            assert!(n.bytes().all(|b| NAME_CHARS.contains(&b)), "{n}");
        }
    }

    #[test]
    fn anonymous_files_leave_no_name() {
        let dir = tempfile::tempdir().unwrap();
        let f = SpoolFile::create(Some(dir.path())).unwrap();
        f.pwrite(b"data", 0).unwrap();
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
        assert_eq!(f.pread(10, 0).unwrap(), b"data");
        assert_eq!(f.path(), None);
        assert!(!f.record_confirmed(4, true).unwrap());
    }

    #[test]
    fn records_refuse_torn_or_foreign_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x.spool.record");
        let rec = SpoolRecord::create(p.clone(), "j/k", 5, 2).unwrap();
        rec.set_confirmed(9, false).unwrap();
        let got = SpoolRecord::read(&p).unwrap();
        assert_eq!(
            got,
            RecordContents {
                journal: "j/k".into(),
                begin: 5,
                confirmed: 9,
                codec: 2
            }
        );
        let bytes = std::fs::read(&p).unwrap();
        // Torn name.
        std::fs::write(&p, &bytes[..bytes.len() - 1]).unwrap();
        assert!(matches!(
            SpoolRecord::read(&p),
            Err(RecordError::NotOurs { .. })
        ));
        // Short head.
        std::fs::write(&p, &bytes[..20]).unwrap();
        assert!(matches!(
            SpoolRecord::read(&p),
            Err(RecordError::TooShort { len: 20, .. })
        ));
        // Confirmed before begin.
        let mut bad = bytes.clone();
        bad[16..24].copy_from_slice(&4i64.to_le_bytes());
        std::fs::write(&p, &bad).unwrap();
        assert!(matches!(
            SpoolRecord::read(&p),
            Err(RecordError::NotOurs { .. })
        ));
        // Not our magic.
        let mut bad = bytes;
        bad[0] = b'X';
        std::fs::write(&p, &bad).unwrap();
        assert!(matches!(
            SpoolRecord::read(&p),
            Err(RecordError::NotOurs { .. })
        ));
        // Exclusive creation.
        assert!(SpoolRecord::create(p, "j/k", 5, 2).is_err());
    }

    #[test]
    fn unlink_forgets_names_and_keeps_content() {
        let dir = tempfile::tempdir().unwrap();
        let f = SpoolFile::create_recoverable(dir.path(), "a/b", 7, 1).unwrap();
        let (path, record) = (f.path().unwrap(), f.record_path().unwrap());
        f.pwrite(b"xyz", 0).unwrap();
        assert!(f.record_confirmed(10, true).unwrap());
        assert_eq!(SpoolRecord::read(&record).unwrap().confirmed, 10);
        f.unlink().unwrap();
        assert!(!path.exists() && !record.exists());
        assert_eq!(f.pread(3, 0).unwrap(), b"xyz");
        assert!(!f.record_confirmed(10, false).unwrap());
        f.unlink().unwrap(); // Idempotent.
    }
}

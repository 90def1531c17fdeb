//! A content write in the steps a disk worker takes it (see `Spool::prepare_content`):
//! the file to create, the bytes to write and hash, and what to count once written.

use std::io;
use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;
use sha1::{Digest, Sha1};

use super::files::SpoolFile;
#[cfg(test)]
use super::{DiskHook, DiskStep};

/// Content checked against a spool ([`Spool::prepare_content`]): its disk part and
/// its hash part, to be done wherever suits the caller (the hash may run beside the
/// write), then handed back to [`Spool::finish_content`].
pub struct ContentWrite {
    pub disk: ContentDiskWrite,
    pub sum: ContentSum,
}

/// A spool file to create ([`Spool::file_to_create`]).
pub struct FileCreation {
    pub(super) kind: Creation,
    #[cfg(test)]
    pub(super) hook: Option<DiskHook>,
}

pub(super) enum Creation {
    Anonymous(Option<PathBuf>),
    Recoverable {
        directory: PathBuf,
        journal: String,
        begin: i64,
        codec: i32,
    },
}

impl FileCreation {
    /// Creates the file; it blocks for as long as the disk takes.
    pub fn perform(self) -> io::Result<SpoolFile> {
        #[cfg(test)]
        if let Some(hook) = &self.hook {
            hook(DiskStep::Create)?;
        }
        match self.kind {
            Creation::Recoverable {
                directory,
                journal,
                begin,
                codec,
            } => SpoolFile::create_recoverable(&directory, &journal, begin, codec),
            Creation::Anonymous(dir) => SpoolFile::create(dir.as_deref()),
        }
    }
}

/// The blocking part of a content write, for the spool directory's thread.
pub struct ContentDiskWrite {
    // The spool's file, or the one to create first.
    pub(super) target: Result<Arc<SpoolFile>, FileCreation>,
    pub(super) offset: u64,
    pub(super) content: Bytes,
    #[cfg(test)]
    pub(super) hook: Option<DiskHook>,
}

impl ContentDiskWrite {
    /// Bytes to write.
    pub fn len(&self) -> usize {
        self.content.len()
    }

    /// Whether there is nothing to write (an empty file may still be created).
    pub fn is_empty(&self) -> bool {
        self.content.is_empty()
    }

    /// Creates the spool file if there is none yet, then writes the content. It
    /// blocks for as long as the disk takes.
    pub fn perform(self) -> io::Result<WrittenContent> {
        let file = match self.target {
            Ok(f) => f,
            Err(create) => Arc::new(create.perform()?),
        };
        #[cfg(test)]
        if let Some(hook) = &self.hook {
            hook(DiskStep::Write {
                offset: self.offset,
                len: self.content.len(),
            })?;
        }
        file.pwrite(&self.content, self.offset)?;
        Ok(WrittenContent {
            file,
            offset: self.offset,
            len: self.content.len(),
        })
    }
}

/// Content that reached the spool file, for [`Spool::finish_content`].
pub struct WrittenContent {
    pub(super) file: Arc<SpoolFile>,
    pub(super) offset: u64,
    pub(super) len: usize,
}

/// The hash part of a content write: the spool's running SHA-1, to extend by it.
pub struct ContentSum {
    pub(super) summer: Sha1,
    pub(super) content: Bytes,
}

impl ContentSum {
    /// Bytes to hash.
    pub fn len(&self) -> usize {
        self.content.len()
    }

    /// Whether there is nothing to hash.
    pub fn is_empty(&self) -> bool {
        self.content.is_empty()
    }

    /// The running SHA-1 extended by the content (CPU only; about 1 ms a MiB).
    pub fn hash(mut self) -> HashedContent {
        self.summer.update(&self.content);
        HashedContent {
            summer: self.summer,
            len: self.content.len(),
        }
    }
}

/// A running SHA-1 extended by content, for [`Spool::finish_content`].
pub struct HashedContent {
    pub(super) summer: Sha1,
    pub(super) len: usize,
}

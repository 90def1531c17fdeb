//! The compressed copy a primary's spool builds behind its commits, in batches on a
//! thread of their own (see the module doc of `spool`).

use std::io;
use std::path::PathBuf;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use super::codecs::Compressor;
use super::files::{SpoolFile, COPY_BLOCK};
use super::SpoolError;
use crate::protocol::CompressionCodec;

/// Whether a batch is being compressed. While one runs, its thread owns the
/// compression state and hands it back when joined.
pub(super) enum Compressing {
    Idle(Compression),
    Running(JoinHandle<(Compression, Result<(), SpoolError>)>),
}

/// The compressed copy of a spool being built.
#[derive(Debug, Default)]
pub(super) struct Compression {
    pub(super) file: Option<Arc<SpoolFile>>,
    pub(super) compressor: Option<Compressor>,
    /// Compressed bytes written to `file`.
    pub(super) pos: u64,
    /// Content offset (from the fragment's begin) compressed through.
    pub(super) to: i64,
    /// `pos` once the compressor is closed; 0 until then.
    pub(super) length: u64,
}

/// What a compression job needs of its spool, taken when it starts.
pub(super) struct Job {
    pub(super) content: Option<Arc<SpoolFile>>,
    pub(super) codec: i32,
    pub(super) begin: i64,
    pub(super) directory: Option<PathBuf>,
    pub(super) retry: Duration,
}

impl Compression {
    /// Compresses committed content through offset `end` into `file`. I/O failures
    /// are retried until they pass (the content is committed: nothing else may
    /// happen to it); only a codec without a compressor fails.
    pub(super) fn compress_through(&mut self, job: &Job, end: i64) -> Result<(), SpoolError> {
        if job.codec == CompressionCodec::None as i32 {
            return Err(SpoolError::NotCompressed);
        }
        let content = job
            .content
            .as_deref()
            .expect("committed content has a spool file");
        let stop = end - job.begin;
        let members = job.codec == CompressionCodec::Gzip as i32;
        if self.compressor.is_some() {
            // The usual case: extend the compression with the newly committed span.
            match self.compress_span(content, self.to, stop, members) {
                Ok(()) => {
                    self.to = stop;
                    return Ok(());
                }
                Err(e) => {
                    tracing::error!("incremental compression failed; rebuilding: {e}");
                    self.compressor = None;
                }
            }
        }
        // Build (or rebuild) the compressed file from the start of the fragment.
        loop {
            if self.file.is_none() {
                match SpoolFile::create(job.directory.as_deref()) {
                    Ok(f) => self.file = Some(Arc::new(f)),
                    Err(e) => {
                        tracing::error!("failed to create compressed spool (will retry): {e}");
                        std::thread::sleep(job.retry);
                        continue;
                    }
                }
            }
            self.pos = 0;
            self.compressor = Some(Compressor::new(job.codec)?);
            match self.compress_span(content, 0, stop, members) {
                Ok(()) => {
                    self.to = stop;
                    return Ok(());
                }
                Err(e) => {
                    tracing::error!("failed to compress spool (will retry): {e}");
                    self.compressor = None;
                    std::thread::sleep(job.retry);
                }
            }
        }
    }

    /// Compresses content `[start, stop)`; with `end_member`, ends the gzip member.
    pub(super) fn compress_span(
        &mut self,
        content: &SpoolFile,
        start: i64,
        stop: i64,
        end_member: bool,
    ) -> io::Result<()> {
        let mut pos = start;
        let mut buf = vec![0; COPY_BLOCK.min((stop - start).max(0) as usize)];
        while pos < stop {
            let want = buf.len().min((stop - pos) as usize);
            let n = content.read_at(&mut buf[..want], pos as u64)?;
            if n == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!("spool file ended at {pos}, before {stop}"),
                ));
            }
            let out = self.compressor().compress(&buf[..n])?;
            self.write(&out)?;
            pos += n as i64;
        }
        if end_member {
            let out = self.compressor().close()?;
            self.write(&out)?;
        }
        Ok(())
    }

    pub(super) fn compressor(&mut self) -> &mut Compressor {
        self.compressor.as_mut().expect("a compressor is open")
    }

    pub(super) fn write(&mut self, data: &[u8]) -> io::Result<()> {
        if !data.is_empty() {
            let file = self.file.as_ref().expect("a compressed file exists");
            file.pwrite(data, self.pos)?;
            self.pos += data.len() as u64;
        }
        Ok(())
    }

    pub(super) fn finish(
        &mut self,
        job: &Job,
        content_length: i64,
        end: i64,
    ) -> Result<(), SpoolError> {
        if self.length != 0 {
            return Ok(()); // Already finished.
        }
        if self.to < content_length {
            self.compress_through(job, end)?;
        } else if self.compressor.is_none() {
            return Ok(()); // An empty fragment.
        }
        loop {
            let closed = self.compressor().close().and_then(|tail| self.write(&tail));
            self.compressor = None;
            match closed {
                Ok(()) => {
                    self.length = self.pos;
                    return Ok(());
                }
                Err(e) => {
                    // The compressor is spent: rebuild the whole encoding, then close again.
                    tracing::error!("failed to finish compression (will retry): {e}");
                    std::thread::sleep(job.retry);
                    self.compress_through(job, end)?;
                }
            }
        }
    }
}

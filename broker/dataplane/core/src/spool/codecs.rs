//! Streaming compressors of fragment content, one per codec, writing the same
//! formats as the Python `gazette.broker.fragment.codecs` (and Gazette's
//! `broker/codecs/codecs.go`):
//!
//! - `GZIP`: RFC 1952; every [`Compressor::close`] ends a gzip member and the next
//!   write opens another, so the primary's batches make a multi-member file.
//! - `GZIP_OFFLOAD_DECOMPRESSION`: a single gzip member for the whole fragment
//!   (the store serves it with `Content-Encoding: gzip`).
//! - `ZSTANDARD`: one zstd frame, level 3 as in Python (Gazette uses 5; the level
//!   is not part of the format). Over the same libzstd release, the bytes equal
//!   python-zstandard's.
//! - `SNAPPY`: the Snappy framing format. Each write is flushed, so chunks end
//!   where Python's cramjam compressor ends them: the `snap` crate is what cramjam
//!   uses, and the bytes come out the same.
//!
//! Gzip is level 1 through flate2; Python uses ISA-L's level 1, so the deflate
//! bytes differ while both decode alike. Nothing reads compressed spool bytes back
//! across implementations: recovery works from the uncompressed spool file.

use std::io::{self, Write};

use flate2::write::GzEncoder;
use snap::write::FrameEncoder;

use crate::protocol::CompressionCodec;

/// Gzip level (see the module doc).
pub const GZIP_LEVEL: u32 = 1;
/// zstd level (see the module doc).
pub const ZSTD_LEVEL: i32 = 3;

/// A codec the spool cannot write.
#[derive(Debug, thiserror::Error)]
#[error("unsupported codec {0}")]
pub struct UnsupportedCodec(pub i32);

/// An incremental encoder. Encoded bytes are handed back as they are produced;
/// each encoder's sink is a `Vec` that is drained after every call.
pub enum Compressor {
    Identity,
    /// The member being written, if one is open.
    GzipMembers(Option<GzEncoder<Vec<u8>>>),
    /// None once closed.
    GzipSingle(Option<GzEncoder<Vec<u8>>>),
    Zstd(Option<zstd::stream::write::Encoder<'static, Vec<u8>>>),
    /// Boxed: the encoder keeps kilobytes of state inline.
    Snappy(Option<Box<FrameEncoder<Vec<u8>>>>),
}

impl std::fmt::Debug for Compressor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Compressor::Identity => "Compressor::Identity",
            Compressor::GzipMembers(_) => "Compressor::GzipMembers",
            Compressor::GzipSingle(_) => "Compressor::GzipSingle",
            Compressor::Zstd(_) => "Compressor::Zstd",
            Compressor::Snappy(_) => "Compressor::Snappy",
        })
    }
}

fn gzip() -> GzEncoder<Vec<u8>> {
    GzEncoder::new(Vec::new(), flate2::Compression::new(GZIP_LEVEL))
}

fn closed(what: &str) -> io::Error {
    io::Error::other(format!("write to a closed {what} compressor"))
}

impl Compressor {
    /// A compressor writing `codec`'s file format.
    pub fn new(codec: i32) -> Result<Compressor, UnsupportedCodec> {
        Ok(match CompressionCodec::try_from(codec) {
            Ok(CompressionCodec::None) => Compressor::Identity,
            Ok(CompressionCodec::Gzip) => Compressor::GzipMembers(None),
            Ok(CompressionCodec::GzipOffloadDecompression) => Compressor::GzipSingle(Some(gzip())),
            Ok(CompressionCodec::Zstandard) => Compressor::Zstd(Some(
                zstd::stream::write::Encoder::new(Vec::new(), ZSTD_LEVEL)
                    .map_err(|_| UnsupportedCodec(codec))?,
            )),
            Ok(CompressionCodec::Snappy) => {
                Compressor::Snappy(Some(Box::new(FrameEncoder::new(Vec::new()))))
            }
            Ok(CompressionCodec::Invalid) | Err(_) => return Err(UnsupportedCodec(codec)),
        })
    }

    /// Encodes `data`, returning whatever encoded bytes are ready (maybe none).
    pub fn compress(&mut self, data: &[u8]) -> io::Result<Vec<u8>> {
        match self {
            Compressor::Identity => Ok(data.to_vec()),
            Compressor::GzipMembers(member) => {
                let enc = member.get_or_insert_with(gzip);
                enc.write_all(data)?;
                Ok(std::mem::take(enc.get_mut()))
            }
            Compressor::GzipSingle(enc) => {
                let enc = enc.as_mut().ok_or_else(|| closed("gzip"))?;
                enc.write_all(data)?;
                Ok(std::mem::take(enc.get_mut()))
            }
            Compressor::Zstd(enc) => {
                let enc = enc.as_mut().ok_or_else(|| closed("zstd"))?;
                enc.write_all(data)?;
                Ok(std::mem::take(enc.get_mut()))
            }
            Compressor::Snappy(enc) => {
                let enc = enc.as_mut().ok_or_else(|| closed("snappy"))?;
                enc.write_all(data)?;
                // Emit the partial chunk too, as cramjam's compress-then-flush does.
                enc.flush()?;
                Ok(std::mem::take(enc.get_mut()))
            }
        }
    }

    /// Ends the current stream, returning its last bytes. For `GZIP` that is one
    /// member, and a later [`compress`](Self::compress) opens the next; every other
    /// codec is closed for good (a second close returns nothing).
    pub fn close(&mut self) -> io::Result<Vec<u8>> {
        match self {
            Compressor::Identity => Ok(Vec::new()),
            Compressor::GzipMembers(enc) | Compressor::GzipSingle(enc) => {
                enc.take().map_or(Ok(Vec::new()), GzEncoder::finish)
            }
            Compressor::Zstd(enc) => enc.take().map_or(Ok(Vec::new()), |e| e.finish()),
            Compressor::Snappy(enc) => enc.take().map_or(Ok(Vec::new()), |e| {
                e.into_inner().map_err(|e| io::Error::other(e.to_string()))
            }),
        }
    }
}

/// Encodes `data` whole (tests and small objects).
pub fn compress(codec: i32, data: &[u8]) -> io::Result<Vec<u8>> {
    let mut c = Compressor::new(codec).map_err(io::Error::other)?;
    let mut out = c.compress(data)?;
    out.extend(c.close()?);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    fn decode(codec: CompressionCodec, data: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        match codec {
            CompressionCodec::Gzip | CompressionCodec::GzipOffloadDecompression => {
                flate2::read::MultiGzDecoder::new(data)
                    .read_to_end(&mut out)
                    .unwrap();
            }
            CompressionCodec::Zstandard => {
                zstd::stream::read::Decoder::new(data)
                    .unwrap()
                    .read_to_end(&mut out)
                    .unwrap();
            }
            CompressionCodec::Snappy => {
                snap::read::FrameDecoder::new(data)
                    .read_to_end(&mut out)
                    .unwrap();
            }
            _ => out.extend_from_slice(data),
        }
        out
    }

    #[test]
    fn every_codec_round_trips_across_calls() {
        for codec in [
            CompressionCodec::None,
            CompressionCodec::Gzip,
            CompressionCodec::GzipOffloadDecompression,
            CompressionCodec::Zstandard,
            CompressionCodec::Snappy,
        ] {
            let mut c = Compressor::new(codec as i32).unwrap();
            let mut out = c.compress(b"hello, ").unwrap();
            out.extend(c.compress(b"world").unwrap());
            out.extend(c.close().unwrap());
            assert!(c.close().unwrap().is_empty(), "{codec:?}");
            assert_eq!(decode(codec, &out), b"hello, world", "{codec:?}");
        }
    }

    #[test]
    fn snappy_starts_with_the_stream_identifier() {
        let out = compress(CompressionCodec::Snappy as i32, b"x").unwrap();
        assert_eq!(&out[..10], b"\xff\x06\x00\x00sNaPpY");
    }

    #[test]
    fn snappy_and_zstd_bytes_match_python() {
        // Python: c = codecs.new_compressor(codec);
        // (c.compress(b"hello, ") + c.compress(b"world") + c.close()).hex()
        // (cramjam, and python-zstandard 0.25 over libzstd 1.5.7, the version zstd-sys builds).
        let python = [
            (
                CompressionCodec::Snappy,
                "ff060000734e61507059010b000091e095e168656c6c6f2c20010900002d4e1fa5776f726c64",
            ),
            (
                CompressionCodec::Zstandard,
                "28b52ffd005861000068656c6c6f2c20776f726c64",
            ),
        ];
        for (codec, want) in python {
            let mut c = Compressor::new(codec as i32).unwrap();
            let mut out = c.compress(b"hello, ").unwrap();
            out.extend(c.compress(b"world").unwrap());
            out.extend(c.close().unwrap());
            let hex: String = out.iter().map(|b| format!("{b:02x}")).collect();
            assert_eq!(hex, want, "{codec:?}");
        }
    }

    #[test]
    fn gzip_members_reopen_after_close() {
        let mut c = Compressor::new(CompressionCodec::Gzip as i32).unwrap();
        let mut out = c.compress(b"one").unwrap();
        out.extend(c.close().unwrap());
        let first = out.len();
        out.extend(c.compress(b"two").unwrap());
        out.extend(c.close().unwrap());
        assert_eq!(&out[first..first + 2], b"\x1f\x8b");
        assert_eq!(decode(CompressionCodec::Gzip, &out), b"onetwo");
    }

    #[test]
    fn closed_single_streams_refuse_writes() {
        let mut c = Compressor::new(CompressionCodec::Zstandard as i32).unwrap();
        c.close().unwrap();
        assert!(c.compress(b"late").is_err());
        assert!(Compressor::new(CompressionCodec::Invalid as i32).is_err());
        assert!(Compressor::new(42).is_err());
    }
}

//! Request messages checked at the door, before the broker decodes them.
//!
//! A forwarded gRPC request's body passes through [`Checked`], which follows the
//! gRPC framing (a compressed flag, a 4-byte length, the message) across HTTP/2
//! DATA frames and decodes each message with prost as the method's request type.
//! The backend only ever sees whole messages that decode, in order. The first
//! that doesn't ends the stream: the backend's side is reset, and the client is
//! answered `INVALID_ARGUMENT` with prost's reason, which names the message and
//! field (`AppendRequest.journal: invalid string value: data is not UTF-8
//! encoded`). Without this, grpc-python answers `UNKNOWN` ("Unexpected <class
//! 'DecodeError'>") where it is the server, and where a broker proxies an append,
//! the corrupt message reaches the primary only after the proxy's own decoding
//! waited on it (a 15 s hang, issue 29). Gazette's Go brokers answer such
//! messages with grpc-go's `INTERNAL` ("grpc: error unmarshalling request").
//!
//! Messages are only checked, never kept: a message that arrives in one DATA
//! frame (most do) is forwarded as the same frame; one split across frames is
//! gathered first (bounded by [`MAX_CHECKED`]). Compressed messages and those
//! larger than that pass unchecked: the backend's own limits refuse the latter.

use std::{
    future::Future,
    pin::Pin,
    sync::{Arc, OnceLock},
    task::{Context, Poll},
};

use bytes::{Bytes, BytesMut};
use http_body_util::BodyExt;
use hyper::body::{Body as HttpBody, Frame, Incoming, SizeHint};
use prost::Message;

use crate::protocol;

/// The largest message gathered to be checked (Gazette's default
/// `--broker.max-message-size` is 4 MiB; the backend refuses what exceeds its own).
pub const MAX_CHECKED: usize = 64 << 20;

/// Decodes a message of one request type, keeping nothing.
pub type Decoder = fn(Bytes) -> Result<(), prost::DecodeError>;

/// The request decoder of a gRPC method path of `protocol.Journal`, if it has one.
pub fn decoder_of(path: &str) -> Option<Decoder> {
    let decoder: Decoder = match path.strip_prefix("/protocol.Journal/")? {
        "List" => |b| protocol::ListRequest::decode(b).map(drop),
        "Apply" => |b| protocol::ApplyRequest::decode(b).map(drop),
        "Read" => |b| protocol::ReadRequest::decode(b).map(drop),
        "Append" => |b| protocol::AppendRequest::decode(b).map(drop),
        "Replicate" => |b| protocol::ReplicateRequest::decode(b).map(drop),
        "ListFragments" => |b| protocol::FragmentsRequest::decode(b).map(drop),
        "FragmentStoreHealth" => |b| protocol::FragmentStoreHealthRequest::decode(b).map(drop),
        _ => return None,
    };
    Some(decoder)
}

/// Why a request was cut: the gRPC status it is answered with.
#[derive(Clone, Debug, PartialEq)]
pub struct Cut {
    pub code: u32,
    pub why: String,
}

/// Why a request was cut, once it was: shared by its request body, which sets it,
/// and its response, which answers with it once the client's stream was drained.
#[derive(Clone, Default)]
pub struct Verdict(Arc<VerdictState>);

struct VerdictState {
    cut: OnceLock<Cut>,
    // False while what the client still sends after a cut is read and dropped.
    drained: tokio::sync::watch::Sender<bool>,
}

impl Default for VerdictState {
    fn default() -> Self {
        VerdictState {
            cut: OnceLock::new(),
            drained: tokio::sync::watch::Sender::new(true),
        }
    }
}

impl Verdict {
    pub fn get(&self) -> Option<&Cut> {
        self.0.cut.get()
    }

    /// Cuts the request (the first cut stands).
    pub fn set(&self, code: u32, why: String) {
        let _ = self.0.cut.set(Cut { code, why });
    }

    /// Completes once the client's stream is drained (at once when nothing drains it).
    pub fn drained(&self) -> impl Future<Output = ()> + Send + 'static {
        let mut rx = self.0.drained.subscribe();
        async move {
            let _ = rx.wait_for(|d| *d).await;
        }
    }

    fn mark_drained(&self) {
        self.0.drained.send_replace(true);
    }
}

/// How long a cut request's stream is read and dropped before it is answered (the
/// Python broker's `api.DRAIN_TIMEOUT`): answered while the client still writes,
/// grpcio's asyncio client reports its own INTERNAL instead of our status.
pub const DRAIN_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// The error a [`Checked`] body ends with, which makes hyper reset the stream.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Malformed(String);

/// A request body whose messages are checked on their way (see the module doc).
pub struct Checked<B = Incoming> {
    inner: Option<B>,
    decode: Decoder,
    /// The largest message allowed, and the flag that sets it (None: the backend
    /// enforces its own).
    limit: Option<(usize, &'static str, &'static str)>,
    verdict: Verdict,
    /// Bytes of a message split across frames, gathered until it is whole.
    partial: BytesMut,
    /// Bytes left of a message passing unchecked (compressed or too large).
    unchecked: usize,
    failed: bool,
}

impl<B> Checked<B> {
    pub fn new(inner: B, decode: Decoder, verdict: Verdict) -> Self {
        Checked {
            inner: Some(inner),
            decode,
            limit: None,
            verdict,
            partial: BytesMut::new(),
            unchecked: 0,
            failed: false,
        }
    }

    /// Refuses messages over `limit` bytes of type `what` (RESOURCE_EXHAUSTED, the
    /// text naming `flag`), and reads and drops what the client still sends after
    /// any cut before the response answers it (see [`DRAIN_TIMEOUT`]).
    pub fn limited(mut self, limit: usize, what: &'static str, flag: &'static str) -> Self {
        self.limit = Some((limit, what, flag));
        self
    }

    /// Checks the whole messages at the front of `data`, returning how many of its
    /// bytes they (and any unchecked bytes before them) span.
    fn check_prefix(&mut self, data: &Bytes) -> Result<usize, Cut> {
        let mut pos = 0;
        loop {
            if self.unchecked > 0 {
                let n = self.unchecked.min(data.len() - pos);
                self.unchecked -= n;
                pos += n;
                if self.unchecked > 0 {
                    return Ok(pos);
                }
            }
            let rest = &data[pos..];
            if rest.len() < 5 {
                return Ok(pos);
            }
            let compressed = rest[0] != 0;
            let len = u32::from_be_bytes([rest[1], rest[2], rest[3], rest[4]]) as usize;
            if let Some((limit, what, flag)) = self.limit {
                if len > limit {
                    return Err(Cut {
                        code: 8,
                        why: format!("{what} of {len} bytes is larger than {flag} ({limit} bytes)"),
                    });
                }
            }
            if compressed || len > MAX_CHECKED {
                pos += 5;
                self.unchecked = len;
                continue;
            }
            if rest.len() < 5 + len {
                return Ok(pos);
            }
            (self.decode)(data.slice(pos + 5..pos + 5 + len)).map_err(|e| Cut {
                code: 3,
                why: format!("malformed request message: {e}"),
            })?;
            pos += 5 + len;
        }
    }

    fn fail(&mut self, cut: Cut) -> Poll<Option<Result<Frame<Bytes>, Malformed>>>
    where
        B: HttpBody<Data = Bytes> + Unpin + Send + 'static,
    {
        self.failed = true;
        let why = cut.why.clone();
        if self.limit.is_some() && self.verdict.get().is_none() {
            // Answered only once the client stopped sending (or after DRAIN_TIMEOUT).
            self.verdict.0.drained.send_replace(false);
            if let Some(mut inner) = self.inner.take() {
                let verdict = self.verdict.clone();
                tokio::spawn(async move {
                    let _ = tokio::time::timeout(DRAIN_TIMEOUT, async {
                        while let Some(Ok(_)) = inner.frame().await {}
                    })
                    .await;
                    verdict.mark_drained();
                });
            } else {
                self.verdict.mark_drained();
            }
        }
        self.verdict.set(cut.code, cut.why);
        Poll::Ready(Some(Err(Malformed(why))))
    }
}

impl<B> HttpBody for Checked<B>
where
    B: HttpBody<Data = Bytes> + Unpin + Send + 'static,
    B::Error: std::fmt::Display,
{
    type Data = Bytes;
    type Error = Malformed;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Malformed>>> {
        let this = &mut *self;
        if this.failed {
            return Poll::Ready(None);
        }
        loop {
            let Some(inner) = this.inner.as_mut() else {
                return Poll::Ready(None);
            };
            let frame = match Pin::new(inner).poll_frame(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(None) => {
                    // A stream that ends inside a message: the backend tells of it.
                    if this.partial.is_empty() {
                        return Poll::Ready(None);
                    }
                    let rest = this.partial.split().freeze();
                    return Poll::Ready(Some(Ok(Frame::data(rest))));
                }
                Poll::Ready(Some(Err(e))) => {
                    return Poll::Ready(Some(Err(Malformed(format!("reading the request: {e}")))))
                }
                Poll::Ready(Some(Ok(frame))) => frame,
            };
            let data = match frame.into_data() {
                Ok(data) => data,
                Err(frame) => {
                    // Trailers: pass them on (with anything gathered before them).
                    if !this.partial.is_empty() {
                        let rest = this.partial.split().freeze();
                        return Poll::Ready(Some(Ok(Frame::data(rest))));
                    }
                    return Poll::Ready(Some(Ok(frame)));
                }
            };
            let data = if this.partial.is_empty() {
                data
            } else {
                this.partial.extend_from_slice(&data);
                this.partial.split().freeze()
            };
            let whole = match this.check_prefix(&data) {
                Ok(whole) => whole,
                Err(why) => return this.fail(why),
            };
            if whole < data.len() {
                this.partial.extend_from_slice(&data[whole..]);
            }
            if whole > 0 {
                return Poll::Ready(Some(Ok(Frame::data(data.slice(..whole)))));
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.failed
            || (self.partial.is_empty() && self.inner.as_ref().is_none_or(|b| b.is_end_stream()))
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}

/// A response answered with its request's cut instead, once it was cut (the
/// backend's side then ends in a reset, or the native service's in its own error
/// trailers).
pub struct Answered<B = Incoming> {
    inner: B,
    verdict: Verdict,
    done: bool,
    // Cut: the client's stream being drained before the answer goes out.
    draining: Option<Pin<Box<dyn Future<Output = ()> + Send>>>,
}

impl<B> Answered<B> {
    pub fn new(inner: B, verdict: Verdict) -> Self {
        Answered {
            inner,
            verdict,
            done: false,
            draining: None,
        }
    }
}

impl<B> HttpBody for Answered<B>
where
    B: HttpBody<Data = Bytes> + Unpin,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        if self.done {
            return Poll::Ready(None);
        }
        if let Some(draining) = self.draining.as_mut() {
            if draining.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            let cut = self.verdict.get().cloned().expect("cut");
            self.done = true;
            return Poll::Ready(Some(Ok(Frame::trailers(super::status_trailers(
                cut.code, &cut.why,
            )))));
        }
        let ended = match Pin::new(&mut self.inner).poll_frame(cx) {
            Poll::Ready(Some(Err(e))) if self.verdict.get().is_none() => {
                return Poll::Ready(Some(Err(e)))
            }
            Poll::Ready(Some(Err(_))) => true,
            Poll::Ready(Some(Ok(frame))) if frame.is_trailers() && self.verdict.get().is_some() => {
                true
            }
            other => return other,
        };
        debug_assert!(ended);
        self.draining = Some(Box::pin(self.verdict.drained()));
        self.as_mut().poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.done || self.inner.is_end_stream()
    }
}

#[cfg(test)]
mod tests;

//! The `Read` RPC: the Rust port of the Python `JournalServicer.Read` and
//! `gazette.broker.server.read_api` (after Gazette's `broker/read_api.go`).
//!
//! A read resolves its journal (any member of the route may serve it). A broker
//! that is not a member proxies the request to one, unless `do_not_proxy`, and
//! relays the member's answers as they come. A member serves it from its replica's
//! [`FragmentIndex`]: for each fragment at the read's offset, a metadata response
//! (the first also carries the resolution's header), then the fragment's content
//! in responses of up to [`READ_CHUNK_SIZE`] bytes, read with `pread` from the
//! spool file of a local fragment, or from the store of a stored one through the
//! Python broker ([`ReadHost::read_stored`]). It goes on to the next fragment
//! until the request's end offset, a non-OK status (OFFSET_NOT_YET_AVAILABLE ends
//! a non-blocking read at the write head), or a stored fragment the client asked
//! to fetch itself (`do_not_proxy`: the metadata carries its signed URL).
//!
//! Chunks: Gazette sends just under 32 KiB per response, to suit Go gRPC's
//! buffer pool. Python measured 256 KiB about twice as fast for whole-journal
//! reads on loopback (a message costs the same whatever its size), well under
//! gRPC's default 4 MiB receive limit, which Gazette's clients keep; this keeps
//! Python's size, so that a client sees the same responses from either.

mod proxy;

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::{Stream, StreamExt};
use tokio::sync::{mpsc, watch};
use tonic::metadata::MetadataMap;
use tonic::Status as RpcStatus;

use crate::claims::Claims;
use crate::index::{FragmentIndex, QueryError, QueryHooks};
use crate::pipeline::Dial;
use crate::protocol::Status;
use crate::protocol::{journal_spec, Fragment, Header, JournalSpec, ReadRequest, ReadResponse};
use crate::registry::{Query, Registry};
use crate::replica::{stopped_status, BoxFuture, ReplicaSet};
use crate::spool::files::SpoolFile;

/// Content bytes per ReadResponse (see the module documentation).
pub const READ_CHUNK_SIZE: usize = 1 << 18;

/// A boxed stream, as the host's streaming methods return.
pub type BoxStream<T> = Pin<Box<dyn Stream<Item = T> + Send>>;

/// Where a read's responses go (Err: the status the RPC ends with).
pub type Answers = mpsc::Sender<Result<ReadResponse, RpcStatus>>;

/// What a read needs of its broker that this crate does not own: the fragment
/// stores (Python's), the broker's reachability, and the dial and token seams
/// of calls to peers (as [`crate::append::AppendDeps`] has them). Its methods
/// are called on the async runtime: none may block (what needs Python is asked
/// for and awaited, as the bridge asks: see `crate::bridge::reads`).
pub trait ReadHost: Send + Sync + 'static {
    /// The decoded content of stored `fragment` from `offset` on, in chunks of
    /// any size; Err (the text the RPC fails with) when the store fails, or its
    /// object decodes short of or past the fragment's end.
    fn read_stored(&self, fragment: &Fragment, offset: i64) -> BoxStream<Result<Bytes, String>>;
    /// A GET URL of stored `fragment`, signed for `ttl`.
    fn fragment_url(&self, fragment: &Fragment, ttl: Duration)
        -> BoxFuture<Result<String, String>>;
    /// A read of `journal` found a hole ending at `hole_end` below the write head:
    /// list its stores now (with back-off). Returns whether a listing was asked
    /// for; [`FragmentIndex::replace_stored`] applies it.
    fn on_hole(&self, journal: &str, hole_end: i64) -> bool;
    /// Err (the status text) when no other broker answers this one: it proxies
    /// nothing then, as the call would hang (Python's `Service.check_reachable`).
    fn check_reachable(&self) -> Result<(), String>;
    /// Dials the member a read is proxied to.
    fn dial(&self) -> Dial;
    /// Metadata of this broker's calls to peers for `journal` needing `capability`
    /// (its own token, narrowed to the journal).
    fn peer_metadata(&self, journal: &str, capability: u32) -> MetadataMap;
}

/// Where reads run: the broker's registry and replicas, and its host.
#[derive(Clone)]
pub struct ReadContext {
    pub registry: Arc<Registry>,
    pub replicas: Arc<ReplicaSet>,
    pub host: Arc<dyn ReadHost>,
    stop_proxies: Arc<watch::Sender<bool>>,
}

impl ReadContext {
    pub fn new(
        registry: Arc<Registry>,
        replicas: Arc<ReplicaSet>,
        host: Arc<dyn ReadHost>,
    ) -> ReadContext {
        ReadContext {
            registry,
            replicas,
            host,
            stop_proxies: Arc::new(watch::Sender::new(false)),
        }
    }

    /// Ends every proxied read, now and later, with a clean EOF (the broker is
    /// shutting down; its clients go on through another broker).
    pub fn stop_proxy_reads(&self) {
        self.stop_proxies.send_replace(true);
    }

    fn proxies_stopped(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let mut rx = self.stop_proxies.subscribe();
        async move {
            let _ = rx.wait_for(|s| *s).await;
        }
    }
}

/// Whether the spec's flags allow reads (NOT_SPECIFIED, O_RDONLY, O_RDWR).
pub fn journal_may_read(spec: &JournalSpec) -> bool {
    use journal_spec::Flag;
    [Flag::NotSpecified, Flag::ORdonly, Flag::ORdwr]
        .iter()
        .any(|f| spec.flags == *f as u32)
}

/// The client went away: nobody hears this status.
fn gone() -> RpcStatus {
    RpcStatus::cancelled("context canceled")
}

async fn send(out: &Answers, resp: ReadResponse) -> Result<(), RpcStatus> {
    out.send(Ok(resp)).await.map_err(|_| gone())
}

/// Serves a validated read, sending its responses to `out`. Err ends the RPC with
/// that status, after the responses sent before it.
pub async fn serve(
    ctx: &ReadContext,
    claims: Option<&Claims>,
    req: ReadRequest,
    out: &Answers,
) -> Result<(), RpcStatus> {
    let authorized = claims.map(|c| move |spec: &JournalSpec| c.allows(spec));
    let query = Query {
        may_proxy: !req.do_not_proxy,
        require_primary: false,
        min_etcd_revision: req.min_etcd_revision,
        proxy_header: req.header.as_ref(),
        authorized: authorized
            .as_ref()
            .map(|f| f as &(dyn Fn(&JournalSpec) -> bool + Sync)),
    };
    let res = ctx
        .registry
        .resolve(&req.journal, query)
        .await
        .map_err(|e| e.to_status())?;
    let refusal = if res.status() != Status::Ok {
        Some(res.status)
    } else if !res.spec.as_deref().is_some_and(journal_may_read) {
        Some(Status::NotAllowed as i32)
    } else {
        None
    };
    if let Some(status) = refusal {
        let resp = ReadResponse {
            status,
            header: Some(res.header),
            ..ReadResponse::default()
        };
        return send(out, resp).await;
    }
    if !res.is_local() {
        return proxy::forward(ctx, req, &res, out).await;
    }
    let name = req
        .journal
        .split_once(';')
        .map_or(&*req.journal, |(n, _)| n);
    let Some(replica) = ctx.replicas.get(name) else {
        return Err(stopped_status(name));
    };
    serve_local(&ctx.host, replica.index(), res.header, req, out).await
}

/// The index's questions, answered by the host for one journal.
struct Hooks<'a> {
    host: &'a dyn ReadHost,
    journal: &'a str,
}

impl QueryHooks for Hooks<'_> {
    fn fragment_url(
        &self,
        fragment: &Fragment,
        ttl: Duration,
    ) -> BoxFuture<Result<String, String>> {
        self.host.fragment_url(fragment, ttl)
    }
    fn on_hole(&self, hole_end: i64) -> bool {
        self.host.on_hole(self.journal, hole_end)
    }
}

/// Streams `req` from `index` (Gazette's `serveRead`); `header` goes on the first
/// response. A closed index (its replica stopped) ends the read cleanly: the
/// client retries, elsewhere.
pub async fn serve_local(
    host: &Arc<dyn ReadHost>,
    index: &FragmentIndex,
    header: Header,
    mut req: ReadRequest,
    out: &Answers,
) -> Result<(), RpcStatus> {
    let hooks = Hooks {
        host: &**host,
        journal: index.journal(),
    };
    let end_offset = req.end_offset;
    let mut header = Some(header);
    loop {
        let (mut resp, file) = match index.query(&req, &hooks).await {
            Ok(answer) => answer,
            Err(QueryError::Closed) => return Ok(()),
            Err(QueryError::Sign(why)) => return Err(RpcStatus::unknown(why)),
        };
        if let Some(header) = header.take() {
            resp.header = Some(header);
        }
        let last = resp.status != Status::Ok as i32
            || req.metadata_only
            || (file.is_none() && req.do_not_proxy)
            || (end_offset != 0 && resp.offset >= end_offset);
        let frag = resp.fragment.clone().unwrap_or_default();
        let from = resp.offset;
        send(out, resp).await?;
        if last {
            return Ok(());
        }
        let limit = if end_offset == 0 {
            frag.end
        } else {
            frag.end.min(end_offset)
        };
        let (offset, what) = match file {
            Some(file) => (
                send_spooled(file, &frag, from, limit, out).await?,
                "spool file",
            ),
            None => (
                send_stored(&**host, &frag, from, limit, out).await?,
                "stored fragment",
            ),
        };
        if offset < limit {
            return Err(RpcStatus::unknown(format!(
                "{what} of {} ended at {offset}, before {limit}",
                frag.journal
            )));
        }
        if end_offset != 0 && offset >= end_offset {
            return Ok(());
        }
        req.offset = offset;
    }
}

/// Sends `[offset, limit)` of a local fragment's spool file; returns where it
/// stopped (short of `limit` only if the file is).
async fn send_spooled(
    file: Arc<SpoolFile>,
    frag: &Fragment,
    mut offset: i64,
    limit: i64,
    out: &Answers,
) -> Result<i64, RpcStatus> {
    while offset < limit {
        let want = READ_CHUNK_SIZE.min((limit - offset) as usize);
        let at = (offset - frag.begin) as u64;
        let f = file.clone();
        // Off the async workers: the file may have left the page cache.
        let data = tokio::task::spawn_blocking(move || f.pread(want, at))
            .await
            .map_err(|e| RpcStatus::internal(format!("spool read task failed: {e}")))?
            .map_err(|e| RpcStatus::unknown(crate::spool::strerror(&e)))?;
        if data.is_empty() {
            break;
        }
        let n = data.len() as i64;
        let resp = ReadResponse {
            offset,
            content: Bytes::from(data),
            ..ReadResponse::default()
        };
        send(out, resp).await?;
        offset += n;
    }
    Ok(offset)
}

/// Sends `[offset, limit)` of a stored fragment, as the host reads it.
async fn send_stored(
    host: &dyn ReadHost,
    frag: &Fragment,
    mut offset: i64,
    limit: i64,
    out: &Answers,
) -> Result<i64, RpcStatus> {
    let mut chunks = host.read_stored(frag, offset);
    while let Some(chunk) = chunks.next().await {
        let chunk = chunk.map_err(RpcStatus::unknown)?;
        for piece in pieces(chunk, (limit - offset) as usize) {
            let n = piece.len() as i64;
            let resp = ReadResponse {
                offset,
                content: piece,
                ..ReadResponse::default()
            };
            send(out, resp).await?;
            offset += n;
        }
        if offset >= limit {
            break;
        }
    }
    Ok(offset)
}

/// `chunk` cut to at most `room` bytes, in pieces of at most [`READ_CHUNK_SIZE`]
/// (slices of the one buffer: nothing is copied).
pub fn pieces(chunk: Bytes, room: usize) -> Vec<Bytes> {
    let kept = chunk.slice(..chunk.len().min(room));
    (0..kept.len())
        .step_by(READ_CHUNK_SIZE)
        .map(|at| kept.slice(at..kept.len().min(at + READ_CHUNK_SIZE)))
        .collect()
}

#[cfg(test)]
mod tests;

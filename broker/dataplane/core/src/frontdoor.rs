//! The broker's one listening port.
//!
//! The front door accepts every client and peer connection of a broker (TCP, with
//! TLS when configured), speaks HTTP/2 and HTTP/1.1, and hands each request to
//! whoever serves it. gRPC requests (HTTP/2, `content-type: application/grpc…`) go
//! to whoever serves their RPC: until an RPC is served natively, the Python gRPC
//! server on a private Unix socket. The request's headers, messages and trailers
//! pass through unchanged in both directions (a byte-level proxy, so status
//! details, metadata and deadlines are exactly what either side sent), and one
//! HTTP/2 connection to the Python server carries every forwarded stream. Every
//! other request goes to the broker's HTTP gateway (`GET`/`PUT /<journal>`,
//! `/debug/…`) on a second private socket, as Gazette's broker serves its gateway
//! and gRPC on one port.
//!
//! Cf. Gazette's `cmd/gazette/main.go` and `mainboilerplate/server.go`, where one
//! port serves gRPC and HTTP side by side.

mod closing;
mod forward;
mod native;
mod validate;

pub use forward::Backend;
use forward::{forward_http1, BACKEND_MAX_FRAME};
use native::serve_native;
pub use native::{NativeService, NATIVE_PATHS};
pub use validate::DRAIN_TIMEOUT;

use std::{convert::Infallible, net::SocketAddr, path::PathBuf, sync::Arc, time::Duration};

use bytes::Bytes;
use http::{HeaderValue, Request, Response};
use http_body_util::{combinators::UnsyncBoxBody, BodyExt, Empty};
use hyper::{body::Incoming, service::service_fn};
use hyper_util::{
    rt::{TokioExecutor, TokioIo},
    server::{conn::auto, graceful::GracefulShutdown},
};
use tokio::{net::TcpListener, sync::watch};
use tokio_rustls::TlsAcceptor;

use std::sync::atomic::{AtomicU64, Ordering};

/// Errors of response bodies, whoever made them (hyper's or tonic's).
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Bodies of responses: the backend's or the native service's as they stream, or
/// an empty one of ours.
pub type Body = UnsyncBoxBody<Bytes, BoxError>;

/// What a connection may hold of the broker, and for how long, before it is closed.
///
/// Chosen against what proxies promise by default: nginx closes a client that
/// sends no complete request header within 60 s (`client_header_timeout`) and
/// serves 512 connections per worker; Envoy closes connections idle for an hour
/// and limits none unless told. A broker's clients are programs that connect
/// once and keep the connection, so the limits here are tighter on silence and
/// looser on count.
#[derive(Clone, Debug)]
pub struct Limits {
    /// Connections served at once; more are closed as they are accepted.
    pub max_connections: usize,
    /// A new connection must send its first bytes (a TLS hello, an HTTP/2 preface
    /// or a request line) and finish its TLS handshake within this.
    pub first_bytes_timeout: Duration,
    /// An HTTP/1.1 request's header must arrive whole within this, and an idle
    /// keep-alive connection is closed after it.
    pub header_timeout: Duration,
    /// HTTP/2 connections are pinged this often, and closed if a ping goes
    /// unanswered for as long (a peer that vanished without a FIN).
    pub keepalive: Duration,
    /// What serves behind the door ("broker", "consumer"): refusals name the
    /// process and its `--<process>.max-connections` flag.
    pub process: String,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_connections: 4096,
            first_bytes_timeout: Duration::from_secs(10),
            header_timeout: Duration::from_secs(10),
            keepalive: Duration::from_secs(30),
            process: "broker".into(),
        }
    }
}

/// Counters of the front door, read by the broker's metrics.
#[derive(Debug, Default)]
pub struct Stats {
    /// Connections being served.
    pub open: AtomicU64,
    /// Connections accepted and closed at once: `max_connections` were open.
    pub refused: AtomicU64,
    /// Connections closed for sending nothing, or no TLS handshake, in time.
    pub silent: AtomicU64,
    /// Failures to accept a connection (out of file descriptors, …).
    pub accept_errors: AtomicU64,
}

/// Logs a warning at most once per interval, with how many were held back:
/// a flood of failures is one line every few seconds, never a log storm.
struct Throttle {
    interval: Duration,
    last: std::sync::Mutex<Option<std::time::Instant>>,
    held: AtomicU64,
}

impl Throttle {
    fn new(interval: Duration) -> Self {
        Throttle {
            interval,
            last: std::sync::Mutex::new(None),
            held: AtomicU64::new(0),
        }
    }

    fn warn(&self, message: std::fmt::Arguments<'_>) {
        let now = std::time::Instant::now();
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        if last.is_some_and(|t| now.duration_since(t) < self.interval) {
            self.held.fetch_add(1, Ordering::Relaxed);
            return;
        }
        *last = Some(now);
        let held = self.held.swap(0, Ordering::Relaxed);
        if held > 0 {
            tracing::warn!("{message} (and {held} more like it since the last report)");
        } else {
            tracing::warn!("{message}");
        }
    }
}

/// Flow-control windows of client connections.
const CLIENT_STREAM_WINDOW: u32 = 4 << 20;
const CLIENT_CONNECTION_WINDOW: u32 = 16 << 20;

/// Where the front door hands requests it does not serve itself.
pub struct Backends {
    /// The gRPC server of the broker's control plane (none: this port serves
    /// HTTP only, as a broker's second, `--broker.http-port`).
    pub grpc: Option<Backend>,
    /// The HTTP/1.1 gateway, if the broker serves one on this port.
    pub http: Option<PathBuf>,
    /// The bearer-token check of gRPC requests (none: the broker has no keys).
    /// Replaced whole when the broker's keys rotate.
    gate: crate::auth::SharedGate,
    /// The natively served RPCs, once the broker's data plane runs, and the
    /// largest request message they take (`--broker.max-grpc-recv-size`).
    native: std::sync::RwLock<Option<(NativeService, usize)>>,
}

impl Backends {
    /// The broker's gRPC server on the Unix socket at `grpc`, and its HTTP gateway
    /// at `http`.
    pub fn new(grpc: Option<PathBuf>, http: Option<PathBuf>) -> Self {
        Backends {
            grpc: grpc.map(Backend::new),
            http,
            gate: crate::auth::SharedGate::default(),
            native: std::sync::RwLock::new(None),
        }
    }

    /// The keys as they are now, shared with whoever else checks or signs tokens.
    pub fn gate(&self) -> crate::auth::SharedGate {
        self.gate.clone()
    }

    /// Serve [`NATIVE_PATHS`] with `service` from now on, refusing request messages
    /// over `limit` bytes (None: forward them).
    pub fn serve_natively(&self, service: Option<(NativeService, usize)>) {
        *self.native.write().unwrap_or_else(|e| e.into_inner()) = service;
    }

    fn native_for(&self, path: &str) -> Option<(NativeService, usize)> {
        if !NATIVE_PATHS.contains(&path) {
            return None;
        }
        self.native
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Check the tokens of gRPC requests with `gate` from now on (None: don't).
    pub fn set_gate(&self, gate: Option<crate::auth::Gate>) {
        *self.gate.write().unwrap_or_else(|e| e.into_inner()) = gate.map(Arc::new);
    }

    /// Hands `req` to whoever serves it.
    pub async fn route(&self, req: Request<Incoming>) -> Response<Body> {
        if is_grpc(&req) {
            let gate = self.gate.read().unwrap_or_else(|e| e.into_inner()).clone();
            if let Some(gate) = gate {
                let token = req
                    .headers()
                    .get(http::header::AUTHORIZATION)
                    .map(|v| v.as_bytes());
                if let Err(why) = gate.check(token) {
                    // UNAUTHENTICATED, and no message of the request is decoded or
                    // kept: its frames are read and dropped until the caller stops
                    // sending (for at most a second, or 16 MiB), and only then
                    // answered. Answered while a write is under way, grpc-python
                    // loses our status for an INTERNAL one (grpc/grpc#36066).
                    let mut body = req.into_body();
                    let _ = tokio::time::timeout(Duration::from_secs(1), async {
                        let mut dropped = 0usize;
                        while let Some(Ok(frame)) = body.frame().await {
                            dropped += frame.data_ref().map_or(0, |d| d.len());
                            if dropped > 16 << 20 {
                                break;
                            }
                        }
                    })
                    .await;
                    tokio::spawn(discard(body, Duration::from_secs(2)));
                    return grpc_error(16, &why);
                }
            }
            if let Some((native, limit)) = self.native_for(req.uri().path()) {
                return serve_native(native, limit, req).await;
            }
            return match &self.grpc {
                Some(grpc) => grpc.forward(req).await,
                None => grpc_error(12, "this port serves HTTP only: gRPC is on --broker.port"),
            };
        }
        match &self.http {
            Some(path) => forward_http1(path, req).await,
            None => text_response(
                http::StatusCode::NOT_FOUND,
                "this port serves gRPC only (the broker's HTTP gateway is off)\n",
            ),
        }
    }
}

/// Reads and drops `body` until it ends, for at most `limit`.
async fn discard(mut body: Incoming, limit: Duration) {
    let _ = tokio::time::timeout(limit, async {
        while let Some(Ok(_)) = body.frame().await {}
    })
    .await;
}

fn is_grpc<B>(req: &Request<B>) -> bool {
    req.version() == http::Version::HTTP_2
        && req
            .headers()
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("application/grpc"))
}

/// A plain-text response of ours.
pub fn text_response(status: http::StatusCode, text: &str) -> Response<Body> {
    let body = http_body_util::Full::new(Bytes::from(text.to_string()))
        .map_err(|never| match never {})
        .boxed_unsync();
    let mut resp = Response::new(body);
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    resp.headers_mut().insert(
        "x-content-type-options",
        HeaderValue::from_static("nosniff"),
    );
    resp
}

/// A trailers-only gRPC response with status `code` and `message`.
pub fn grpc_error(code: u32, message: &str) -> Response<Body> {
    let mut resp = Response::new(
        Empty::<Bytes>::new()
            .map_err(|never| match never {})
            .boxed_unsync(),
    );
    let headers = resp.headers_mut();
    headers.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/grpc"),
    );
    headers.extend(status_trailers(code, message));
    resp
}

/// The trailers of a gRPC status (`grpc-message` percent-encoded, as gRPC wants).
pub(crate) fn status_trailers(code: u32, message: &str) -> http::HeaderMap {
    let mut trailers = http::HeaderMap::new();
    trailers.insert("grpc-status", http::HeaderValue::from(code));
    if let Ok(value) = http::HeaderValue::from_str(&percent_encode(message)) {
        trailers.insert("grpc-message", value);
    }
    trailers
}

/// `message` as a `grpc-message` value: printable ASCII other than '%' as is.
fn percent_encode(message: &str) -> String {
    let mut encoded = String::with_capacity(message.len());
    for b in message.bytes() {
        if (0x20..0x7f).contains(&b) && b != b'%' {
            encoded.push(b as char);
        } else {
            encoded.push_str(&format!("%{b:02X}"));
        }
    }
    encoded
}

/// Serves connections accepted by `listener` until `stop` carries a grace period;
/// then it stops accepting, asks every connection to finish (HTTP/2 GOAWAY), and
/// returns once they have or the grace period has passed.
pub async fn serve(
    listener: TcpListener,
    backend: Arc<Backends>,
    tls: Option<TlsAcceptor>,
    limits: Limits,
    stats: Arc<Stats>,
    mut stop: watch::Receiver<Option<Duration>>,
) {
    let graceful = GracefulShutdown::new();
    let mut builder = auto::Builder::new(TokioExecutor::new());
    // Windows wide enough for a bulk append to stream without waiting on us, and
    // bounded per connection (what one client can make the broker buffer).
    builder
        .http2()
        .initial_stream_window_size(CLIENT_STREAM_WINDOW)
        .initial_connection_window_size(CLIENT_CONNECTION_WINDOW)
        .max_frame_size(BACKEND_MAX_FRAME)
        .timer(hyper_util::rt::TokioTimer::new())
        .keep_alive_interval(limits.keepalive)
        .keep_alive_timeout(limits.keepalive);
    builder
        .http1()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        // Header names as Go's net/http writes them (Content-Type, X-Route-Token):
        // some HTTP/1 clients of Gazette's gateway look them up by their exact case.
        .title_case_headers(true);
    let server = Arc::new(Server {
        builder,
        backend,
        tls,
        limits,
        stats,
    });
    let refusals = Throttle::new(Duration::from_secs(10));
    let refusing = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let accept_errors = Throttle::new(Duration::from_secs(10));
    let grace = loop {
        tokio::select! {
            changed = stop.changed() => {
                match changed {
                    Ok(()) => if let Some(grace) = *stop.borrow() { break grace },
                    Err(_) => break Duration::ZERO,
                }
            }
            accepted = listener.accept() => {
                let (stream, peer) = match accepted {
                    Ok(accepted) => accepted,
                    Err(e) => {
                        // Out of descriptors and the like: wait a moment, don't spin.
                        server.stats.accept_errors.fetch_add(1, Ordering::Relaxed);
                        accept_errors.warn(format_args!("accepting a connection: {e}"));
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let open = server.stats.open.load(Ordering::Relaxed);
                if open >= server.limits.max_connections as u64 {
                    server.stats.refused.fetch_add(1, Ordering::Relaxed);
                    refusals.warn(format_args!(
                        "refused a connection from {peer}: {open} are open, the most served \
                         at once (--{}.max-connections)",
                        server.limits.process
                    ));
                    // Told why, while few are being told; past that, closed unanswered.
                    // (Only this loop adds to `refusing`: reading it first is no race.)
                    if server.tls.is_none() && refusing.load(Ordering::Relaxed) < closing::MAX_REFUSING {
                        refusing.fetch_add(1, Ordering::Relaxed);
                        let refusing = refusing.clone();
                        let most = server.limits.max_connections;
                        let process = server.limits.process.clone();
                        tokio::spawn(async move {
                            closing::refuse(stream, most, &process).await;
                            refusing.fetch_sub(1, Ordering::Relaxed);
                        });
                    }
                    continue;
                }
                let _ = stream.set_nodelay(true);
                server.stats.open.fetch_add(1, Ordering::Relaxed);
                let watcher = graceful.watcher();
                let server = server.clone();
                tokio::spawn(async move {
                    server.connection(stream, peer, watcher).await;
                    server.stats.open.fetch_sub(1, Ordering::Relaxed);
                });
            }
        }
    };
    drop(listener);
    tokio::select! {
        () = graceful.shutdown() => {}
        () = tokio::time::sleep(grace) => {
            tracing::info!("connections still open after the {grace:?} grace period are closed");
        }
    }
}

struct Server {
    builder: auto::Builder<TokioExecutor>,
    backend: Arc<Backends>,
    tls: Option<TlsAcceptor>,
    limits: Limits,
    stats: Arc<Stats>,
}

impl Server {
    /// Serves one accepted connection to its end (on its own task: a slow
    /// handshake never holds up the accept loop).
    async fn connection(
        &self,
        stream: tokio::net::TcpStream,
        peer: SocketAddr,
        watcher: hyper_util::server::graceful::Watcher,
    ) {
        let deadline = self.limits.first_bytes_timeout;
        // Nothing is read for a connection that sends nothing: close it in time.
        let mut first = [0u8; 1];
        match tokio::time::timeout(deadline, stream.peek(&mut first)).await {
            Ok(Ok(n)) if n > 0 => {}
            Ok(_) => return,
            Err(_) => {
                self.stats.silent.fetch_add(1, Ordering::Relaxed);
                tracing::debug!("{peer} sent nothing for {deadline:?}");
                return;
            }
        }
        let backend = self.backend.clone();
        let service = service_fn(move |req: Request<Incoming>| {
            let backend = backend.clone();
            async move { Ok::<_, Infallible>(backend.route(req).await) }
        });
        let result = match &self.tls {
            None => {
                let stream = closing::Lingering::new(stream);
                let conn = self.builder.serve_connection(TokioIo::new(stream), service);
                watcher.watch(conn.into_owned()).await
            }
            Some(acceptor) => {
                // A TLS connection starts with a handshake record (0x16). Plain
                // HTTP gets a plain answer saying so, as Go's servers give.
                if first[0].is_ascii_uppercase() {
                    use tokio::io::{AsyncReadExt, AsyncWriteExt};
                    let mut stream = stream;
                    // Read the request's head first: closing with it unread would
                    // reset the connection before the client reads our answer.
                    let mut head = Vec::with_capacity(1024);
                    let _ = tokio::time::timeout(Duration::from_secs(1), async {
                        let mut buf = [0u8; 1024];
                        while head.len() < 16 << 10 && !head.windows(4).any(|w| w == b"\r\n\r\n") {
                            match stream.read(&mut buf).await {
                                Ok(0) | Err(_) => break,
                                Ok(n) => head.extend_from_slice(&buf[..n]),
                            }
                        }
                    })
                    .await;
                    let _ = stream
                        .write_all(
                            b"HTTP/1.0 400 Bad Request\r\nContent-Type: text/plain\r\n\r\n\
                              Client sent an HTTP request to an HTTPS server.\n",
                        )
                        .await;
                    let _ = stream.shutdown().await;
                    return;
                }
                let stream = closing::Lingering::new(stream);
                let stream = match tokio::time::timeout(deadline, acceptor.accept(stream)).await {
                    Ok(Ok(stream)) => stream,
                    Ok(Err(e)) => {
                        tracing::debug!("TLS handshake with {peer}: {e}");
                        return;
                    }
                    Err(_) => {
                        self.stats.silent.fetch_add(1, Ordering::Relaxed);
                        tracing::debug!("TLS handshake with {peer} took over {deadline:?}");
                        return;
                    }
                };
                let conn = self.builder.serve_connection(TokioIo::new(stream), service);
                watcher.watch(conn.into_owned()).await
            }
        };
        if let Err(e) = result {
            tracing::debug!("connection from {peer}: {e}");
        }
    }
}

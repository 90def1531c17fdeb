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

use std::{convert::Infallible, io, net::SocketAddr, path::PathBuf, sync::Arc, time::Duration};

use bytes::Bytes;
use http::{HeaderValue, Request, Response};
use http_body_util::{combinators::BoxBody, BodyExt, Empty};
use hyper::{body::Incoming, client::conn::http2::SendRequest, service::service_fn};
use hyper_util::{
    rt::{TokioExecutor, TokioIo},
    server::{conn::auto, graceful::GracefulShutdown},
};
use tokio::{
    net::{TcpListener, UnixStream},
    sync::{watch, Mutex},
};
use tokio_rustls::TlsAcceptor;

/// Bodies of responses: the backend's as they stream, or an empty one of ours.
pub type Body = BoxBody<Bytes, hyper::Error>;

/// How long a client has to finish its TLS handshake before its connection is closed.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Where the front door hands requests it does not serve itself.
pub struct Backends {
    /// The gRPC server of the broker's control plane.
    pub grpc: Backend,
    /// The HTTP/1.1 gateway, if the broker serves one on this port.
    pub http: Option<PathBuf>,
}

impl Backends {
    /// The broker's gRPC server on the Unix socket at `grpc`, and its HTTP gateway at `http`.
    pub fn new(grpc: PathBuf, http: Option<PathBuf>) -> Self {
        Backends {
            grpc: Backend::new(grpc),
            http,
        }
    }

    /// Hands `req` to whoever serves it.
    pub async fn route(&self, req: Request<Incoming>) -> Response<Body> {
        if is_grpc(&req) {
            return self.grpc.forward(req).await;
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

fn is_grpc<B>(req: &Request<B>) -> bool {
    req.version() == http::Version::HTTP_2
        && req
            .headers()
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("application/grpc"))
}

/// Headers of one hop only, never forwarded (RFC 9110 7.6.1).
const HOP_BY_HOP: [&str; 7] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "upgrade",
    "te",
    "trailer",
];

/// Forwards an HTTP request to the gateway on its Unix socket, over a connection
/// of its own (gateway requests are few and may stream for hours).
async fn forward_http1(path: &std::path::Path, req: Request<Incoming>) -> Response<Body> {
    let (mut parts, body) = req.into_parts();
    let authority = parts.uri.authority().map(|a| a.to_string());
    if let Some(path_and_query) = parts.uri.path_and_query().cloned() {
        parts.uri = http::Uri::from(path_and_query);
    }
    // An HTTP/2 request names its host in :authority; the gateway reads Host.
    if let (false, Some(authority)) = (parts.headers.contains_key(http::header::HOST), authority) {
        if let Ok(value) = HeaderValue::from_str(&authority) {
            parts.headers.insert(http::header::HOST, value);
        }
    }
    parts.version = http::Version::HTTP_11;
    for name in HOP_BY_HOP {
        parts.headers.remove(name);
    }
    let stream = match UnixStream::connect(path).await {
        Ok(stream) => stream,
        Err(e) => {
            return text_response(
                http::StatusCode::SERVICE_UNAVAILABLE,
                &format!("the broker's HTTP gateway is not answering: {e}\n"),
            )
        }
    };
    let (mut sender, connection) =
        match hyper::client::conn::http1::handshake(TokioIo::new(stream)).await {
            Ok(handshake) => handshake,
            Err(e) => {
                return text_response(
                    http::StatusCode::SERVICE_UNAVAILABLE,
                    &format!("the broker's HTTP gateway: {e}\n"),
                )
            }
        };
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            tracing::debug!("a gateway connection ended: {e}");
        }
    });
    match sender.send_request(Request::from_parts(parts, body)).await {
        Ok(resp) => {
            let (mut parts, body) = resp.into_parts();
            for name in HOP_BY_HOP {
                parts.headers.remove(name);
            }
            Response::from_parts(parts, body.boxed())
        }
        Err(e) => text_response(
            http::StatusCode::BAD_GATEWAY,
            &format!("the broker's HTTP gateway: {e}\n"),
        ),
    }
}

/// A plain-text response of ours.
pub fn text_response(status: http::StatusCode, text: &str) -> Response<Body> {
    let body = http_body_util::Full::new(Bytes::from(text.to_string()))
        .map_err(|never| match never {})
        .boxed();
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

/// A connection to the broker's gRPC server, shared by every forwarded stream.
pub struct Backend {
    path: PathBuf,
    conn: Mutex<Option<SendRequest<Incoming>>>,
}

impl Backend {
    /// The Python gRPC server listening on the Unix socket at `path`.
    pub fn new(path: PathBuf) -> Self {
        Backend {
            path,
            conn: Mutex::new(None),
        }
    }

    /// The shared HTTP/2 connection to the backend, made again if it closed.
    async fn sender(&self) -> io::Result<SendRequest<Incoming>> {
        let mut conn = self.conn.lock().await;
        if let Some(sender) = conn.as_ref() {
            if !sender.is_closed() {
                return Ok(sender.clone());
            }
        }
        let stream = UnixStream::connect(&self.path).await?;
        let (sender, connection) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
            .adaptive_window(true)
            .handshake(TokioIo::new(stream))
            .await
            .map_err(io::Error::other)?;
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!("the backend connection ended: {e}");
            }
        });
        *conn = Some(sender.clone());
        Ok(sender)
    }

    /// Forwards `req` and returns the backend's response, or an UNAVAILABLE
    /// status when the backend can't be reached (clients retry those).
    pub async fn forward(&self, req: Request<Incoming>) -> Response<Body> {
        let (mut parts, body) = req.into_parts();
        let path = parts
            .uri
            .path_and_query()
            .map(|p| p.as_str())
            .unwrap_or("/");
        // The HTTP/2 client wants an absolute URI; the authority is the socket's.
        match format!("http://localhost{path}").parse() {
            Ok(uri) => parts.uri = uri,
            Err(_) => return grpc_error(3, "the request's path is not a valid URI"),
        }
        let mut sender = match self.sender().await {
            Ok(sender) => sender,
            Err(e) => {
                return grpc_error(
                    14,
                    &format!("the broker's control plane is not answering: {e}"),
                )
            }
        };
        if let Err(e) = sender.ready().await {
            return grpc_error(
                14,
                &format!("the broker's control plane closed its connection: {e}"),
            );
        }
        match sender.send_request(Request::from_parts(parts, body)).await {
            Ok(resp) => resp.map(BodyExt::boxed),
            Err(e) => grpc_error(
                14,
                &format!("forwarding to the broker's control plane: {e}"),
            ),
        }
    }
}

/// A trailers-only gRPC response with status `code` and `message`.
pub fn grpc_error(code: u32, message: &str) -> Response<Body> {
    let mut resp = Response::new(
        Empty::<Bytes>::new()
            .map_err(|never| match never {})
            .boxed(),
    );
    let headers = resp.headers_mut();
    headers.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/grpc"),
    );
    headers.insert("grpc-status", HeaderValue::from(code));
    // grpc-message is percent-encoded; keep printable ASCII other than '%' as is.
    let mut encoded = String::with_capacity(message.len());
    for b in message.bytes() {
        if (0x20..0x7f).contains(&b) && b != b'%' {
            encoded.push(b as char);
        } else {
            encoded.push_str(&format!("%{b:02X}"));
        }
    }
    if let Ok(value) = HeaderValue::from_str(&encoded) {
        headers.insert("grpc-message", value);
    }
    resp
}

/// Serves connections accepted by `listener` until `stop` carries a grace period;
/// then it stops accepting, asks every connection to finish (HTTP/2 GOAWAY), and
/// returns once they have or the grace period has passed.
pub async fn serve(
    listener: TcpListener,
    backend: Arc<Backends>,
    tls: Option<TlsAcceptor>,
    mut stop: watch::Receiver<Option<Duration>>,
) {
    let graceful = GracefulShutdown::new();
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder.http2().adaptive_window(true);
    let builder = Arc::new(builder);
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
                        tracing::warn!("accepting a connection: {e}");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let _ = stream.set_nodelay(true);
                connection(stream, peer, &builder, &backend, tls.clone(), &graceful);
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

fn connection(
    stream: tokio::net::TcpStream,
    peer: SocketAddr,
    builder: &Arc<auto::Builder<TokioExecutor>>,
    backend: &Arc<Backends>,
    tls: Option<TlsAcceptor>,
    graceful: &GracefulShutdown,
) {
    let backend = backend.clone();
    let service = service_fn(move |req: Request<Incoming>| {
        let backend = backend.clone();
        async move { Ok::<_, Infallible>(backend.route(req).await) }
    });
    match tls {
        None => {
            let conn = builder
                .serve_connection(TokioIo::new(stream), service)
                .into_owned();
            let conn = graceful.watch(conn);
            tokio::spawn(async move {
                if let Err(e) = conn.await {
                    tracing::debug!("connection from {peer}: {e}");
                }
            });
        }
        Some(acceptor) => {
            // The handshake runs in the connection's task, never in the accept loop.
            let builder = builder.clone();
            let watcher = graceful.watcher();
            tokio::spawn(async move {
                let stream =
                    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                        Ok(Ok(stream)) => stream,
                        Ok(Err(e)) => {
                            tracing::debug!("TLS handshake with {peer}: {e}");
                            return;
                        }
                        Err(_) => {
                            tracing::debug!("TLS handshake with {peer} timed out");
                            return;
                        }
                    };
                let conn = builder
                    .serve_connection(TokioIo::new(stream), service)
                    .into_owned();
                if let Err(e) = watcher.watch(conn).await {
                    tracing::debug!("connection from {peer}: {e}");
                }
            });
        }
    }
}

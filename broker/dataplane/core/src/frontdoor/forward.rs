//! Forwarding to the Python broker behind the door: gRPC to its server on a Unix
//! socket, over one shared HTTP/2 connection, and plain HTTP to its gateway.

use std::{io, path::PathBuf};

use http::{HeaderValue, Request, Response};
use http_body_util::{BodyExt, Either};
use hyper::{body::Incoming, client::conn::http2::SendRequest};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::{net::UnixStream, sync::Mutex};

use super::{grpc_error, text_response, validate, Body, BoxError};

/// Flow-control windows and frame size of the connection to the Python server.
const BACKEND_STREAM_WINDOW: u32 = 8 << 20;
const BACKEND_CONNECTION_WINDOW: u32 = 64 << 20;
pub(super) const BACKEND_MAX_FRAME: u32 = (1 << 20) - 1;

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
pub(super) async fn forward_http1(
    path: &std::path::Path,
    req: Request<Incoming>,
) -> Response<Body> {
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
            Response::from_parts(parts, body.map_err(BoxError::from).boxed_unsync())
        }
        // The client's body failed on its way (it ended before its Content-Length,
        // or its chunks don't parse): the client's fault, answered as such.
        Err(e) if e.is_user() => {
            // The innermost cause says what was wrong ("connection closed before
            // message completed"); the outer ones only where it happened.
            let mut cause: &dyn std::error::Error = &e;
            while let Some(inner) = cause.source() {
                cause = inner;
            }
            let why = cause.to_string();
            text_response(
                http::StatusCode::BAD_REQUEST,
                &format!("reading the request body: {why}\n"),
            )
        }
        Err(e) => text_response(
            http::StatusCode::BAD_GATEWAY,
            &format!("the broker's HTTP gateway: {e}\n"),
        ),
    }
}

/// A connection to the broker's gRPC server, shared by every forwarded stream.
pub struct Backend {
    path: PathBuf,
    conn: Mutex<Option<SendRequest<Forwarded>>>,
}

/// A request body on its way to the backend: checked message by message when its
/// method's request type is known ([`validate`]), else as it came.
type Forwarded = Either<validate::Checked, Incoming>;

impl Backend {
    /// The Python gRPC server listening on the Unix socket at `path`.
    pub fn new(path: PathBuf) -> Self {
        Backend {
            path,
            conn: Mutex::new(None),
        }
    }

    /// The shared HTTP/2 connection to the backend, made again if it closed.
    async fn sender(&self) -> io::Result<SendRequest<Forwarded>> {
        let mut conn = self.conn.lock().await;
        if let Some(sender) = conn.as_ref() {
            if !sender.is_closed() {
                return Ok(sender.clone());
            }
        }
        let stream = UnixStream::connect(&self.path).await?;
        // Fixed, wide windows and large frames: on a Unix socket the round trip is
        // microseconds, so window probing would settle on small windows, and every
        // WINDOW_UPDATE or extra frame costs the Python side a wake-up.
        let (sender, connection) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
            .initial_stream_window_size(BACKEND_STREAM_WINDOW)
            .initial_connection_window_size(BACKEND_CONNECTION_WINDOW)
            .max_frame_size(BACKEND_MAX_FRAME)
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
        let verdict = validate::Verdict::default();
        let body = match validate::decoder_of(parts.uri.path()) {
            Some(decode) => Either::Left(validate::Checked::new(body, decode, verdict.clone())),
            None => Either::Right(body),
        };
        match sender.send_request(Request::from_parts(parts, body)).await {
            Ok(resp) => resp.map(|body| {
                validate::Answered::new(body, verdict)
                    .map_err(BoxError::from)
                    .boxed_unsync()
            }),
            Err(e) => match verdict.get() {
                Some(cut) => grpc_error(cut.code, &cut.why),
                None => grpc_error(
                    14,
                    &format!("forwarding to the broker's control plane: {e}"),
                ),
            },
        }
    }
}

//! How the front door lets connections go: a lingering close for every connection
//! it served, and a short answer for one it won't serve (over `max_connections`).

use std::{convert::Infallible, io, pin::Pin, time::Duration};

use http::Request;
use hyper::{body::Incoming, service::service_fn};
use hyper_util::rt::{TokioExecutor, TokioIo};

use super::grpc_error;

/// Connections over `max_connections` told why at once, and for how long each.
pub(super) const MAX_REFUSING: usize = 64;
const REFUSAL_TIME: Duration = Duration::from_secs(2);

/// Answers a connection accepted over `max_connections` and closes it, within
/// `REFUSAL_TIME`: an HTTP/1 request gets a 503, an HTTP/2 one (gRPC) UNAVAILABLE,
/// which clients retry, and both say why. (TLS connections are closed unanswered: a
/// handshake per refusal would cost what the limit saves.)
pub(super) async fn refuse(stream: tokio::net::TcpStream, most: usize, process: &str) {
    let _ = tokio::time::timeout(REFUSAL_TIME, answer_refused(stream, most, process)).await;
}

async fn answer_refused(stream: tokio::net::TcpStream, most: usize, process: &str) {
    let why = format!(
        "this {process} serves {most} connections at once, its most \
         (--{process}.max-connections): try again soon"
    );
    let mut first = [0u8; 3];
    match stream.peek(&mut first).await {
        Ok(3) if &first == b"PRI" => {
            let service = service_fn(move |_req: Request<Incoming>| {
                let why = why.clone();
                async move { Ok::<_, Infallible>(grpc_error(14, &why)) }
            });
            let conn = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                .serve_connection(TokioIo::new(stream), service);
            tokio::pin!(conn);
            // Answer what the client sent at once, then say goodbye (GOAWAY).
            let _ = tokio::time::timeout(Duration::from_millis(200), conn.as_mut()).await;
            conn.as_mut().graceful_shutdown();
            let _ = conn.await;
        }
        Ok(n) if n > 0 => {
            use tokio::io::AsyncWriteExt;
            let mut stream = stream;
            let body = format!("{why}\n");
            let head = format!(
                "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\n\
                 Content-Length: {}\r\nRetry-After: 1\r\nConnection: close\r\n\r\n",
                body.len()
            );
            let _ = stream.write_all(head.as_bytes()).await;
            let _ = stream.write_all(body.as_bytes()).await;
            let _ = stream.shutdown().await;
            linger(stream).await;
        }
        _ => {}
    }
}

/// How long, and how much, a closed connection is still read before the socket goes.
const LINGER_TIME: Duration = Duration::from_secs(2);
const LINGER_BYTES: usize = 16 << 20;

/// A lingering close: reads and drops what the client still sends, until it closes
/// its side or `LINGER_TIME` / `LINGER_BYTES` pass, before the socket is closed.
///
/// hyper has sent our last response and shut its side down, but a client may still be
/// sending a request body we refused (a PUT to a missing journal): closing a socket
/// with unread bytes sends a reset, and a client that gets it may lose the answer it
/// hasn't read yet. Go's `net/http` and our Python gateway do the same.
async fn linger(mut stream: tokio::net::TcpStream) {
    use tokio::io::AsyncReadExt;
    let _ = tokio::time::timeout(LINGER_TIME, async {
        let mut buf = vec![0u8; 64 << 10];
        let mut left = LINGER_BYTES;
        while left > 0 {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => left = left.saturating_sub(n),
            }
        }
    })
    .await;
}

/// A client's socket as hyper (or TLS) holds it: once they let go of it, it closes
/// lingering (see `linger`), on a task of its own.
pub(super) struct Lingering(Option<tokio::net::TcpStream>);

impl Lingering {
    pub(super) fn new(stream: tokio::net::TcpStream) -> Self {
        Lingering(Some(stream))
    }

    fn stream(self: Pin<&mut Self>) -> Pin<&mut tokio::net::TcpStream> {
        Pin::new(
            self.get_mut()
                .0
                .as_mut()
                .expect("a Lingering stream is taken only when dropped"),
        )
    }
}

impl Drop for Lingering {
    fn drop(&mut self) {
        if let Some(stream) = self.0.take() {
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                runtime.spawn(async move {
                    let mut stream = stream;
                    // Our side is done (hyper shut it down, unless the connection
                    // failed): say so, then read what the client still sends.
                    let _ = tokio::io::AsyncWriteExt::shutdown(&mut stream).await;
                    linger(stream).await;
                });
            }
        }
    }
}

impl tokio::io::AsyncRead for Lingering {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<io::Result<()>> {
        self.stream().poll_read(cx, buf)
    }
}

impl tokio::io::AsyncWrite for Lingering {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<io::Result<usize>> {
        self.stream().poll_write(cx, buf)
    }

    fn poll_flush(
        self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<io::Result<()>> {
        self.stream().poll_flush(cx)
    }

    fn poll_shutdown(
        self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<io::Result<()>> {
        self.stream().poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> std::task::Poll<io::Result<usize>> {
        self.stream().poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.0.as_ref().is_some_and(|s| s.is_write_vectored())
    }
}

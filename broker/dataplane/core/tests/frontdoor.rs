//! The front door forwards every RPC it does not serve to the backend unchanged:
//! unary, client- and server-streaming calls, metadata both ways, statuses, and an
//! UNAVAILABLE status when the backend is away. A tonic server on a Unix socket
//! stands in for the Python broker.

use std::{pin::Pin, sync::Arc, time::Duration};

use bytes::Bytes;
use dataplane::{
    frontdoor,
    protocol::{
        journal_client::JournalClient,
        journal_server::{Journal, JournalServer},
        *,
    },
};
use tokio::sync::watch;
use tokio_stream::{Stream, StreamExt};
use tonic::{Request, Response, Status, Streaming};

type Boxed<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send>>;

struct Backend;

#[tonic::async_trait]
impl Journal for Backend {
    type ListStream = Boxed<ListResponse>;
    type ReadStream = Boxed<ReadResponse>;
    type ReplicateStream = Boxed<ReplicateResponse>;

    async fn list(&self, _: Request<ListRequest>) -> Result<Response<Self::ListStream>, Status> {
        Err(Status::unimplemented("list"))
    }

    async fn apply(&self, req: Request<ApplyRequest>) -> Result<Response<ApplyResponse>, Status> {
        // Echo the caller's token, to show that metadata passes both ways.
        let token = req.metadata().get("authorization").cloned();
        let mut resp = Response::new(ApplyResponse {
            status: 0,
            header: None,
        });
        if let Some(token) = token {
            resp.metadata_mut().insert("x-token-seen", token);
        }
        Ok(resp)
    }

    async fn read(&self, req: Request<ReadRequest>) -> Result<Response<Self::ReadStream>, Status> {
        let offset = req.into_inner().offset;
        let chunks = (0..3).map(move |i| {
            Ok(ReadResponse {
                offset: offset + i * 5,
                content: Bytes::from_static(b"hello"),
                ..Default::default()
            })
        });
        Ok(Response::new(Box::pin(tokio_stream::iter(chunks))))
    }

    async fn append(
        &self,
        req: Request<Streaming<AppendRequest>>,
    ) -> Result<Response<AppendResponse>, Status> {
        let mut stream = req.into_inner();
        let first = stream
            .next()
            .await
            .ok_or_else(|| Status::invalid_argument("empty"))??;
        if first.journal == "refused" {
            return Err(Status::failed_precondition(
                "refused: a reason with % and é",
            ));
        }
        let mut chunks = 0;
        let mut bytes = 0;
        while let Some(msg) = stream.next().await {
            let msg = msg?;
            if msg.content.is_empty() {
                break;
            }
            chunks += 1;
            bytes += msg.content.len() as i64;
        }
        Ok(Response::new(AppendResponse {
            total_chunks: chunks,
            commit: Some(Fragment {
                journal: first.journal,
                begin: 0,
                end: bytes,
                ..Default::default()
            }),
            ..Default::default()
        }))
    }

    async fn replicate(
        &self,
        _: Request<Streaming<ReplicateRequest>>,
    ) -> Result<Response<Self::ReplicateStream>, Status> {
        Err(Status::unimplemented("replicate"))
    }

    async fn list_fragments(
        &self,
        _: Request<FragmentsRequest>,
    ) -> Result<Response<FragmentsResponse>, Status> {
        Err(Status::unimplemented("list_fragments"))
    }

    async fn fragment_store_health(
        &self,
        _: Request<FragmentStoreHealthRequest>,
    ) -> Result<Response<FragmentStoreHealthResponse>, Status> {
        Err(Status::unimplemented("fragment_store_health"))
    }
}

struct Harness {
    backends: Arc<frontdoor::Backends>,
    _dir: tempfile::TempDir,
    stats: Arc<frontdoor::Stats>,
    port: u16,
    stop: watch::Sender<Option<Duration>>,
    served: tokio::task::JoinHandle<()>,
}

async fn start(with_backend: bool) -> Harness {
    start_with(with_backend, frontdoor::Limits::default()).await
}

async fn start_with(with_backend: bool, limits: frontdoor::Limits) -> Harness {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("grpc.sock");
    if with_backend {
        let uds = tokio::net::UnixListener::bind(&socket).unwrap();
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(JournalServer::new(Backend))
                .serve_with_incoming(tokio_stream::wrappers::UnixListenerStream::new(uds)),
        );
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let (stop, stopped) = watch::channel(None);
    let stats = Arc::new(frontdoor::Stats::default());
    let backend = Arc::new(frontdoor::Backends::new(Some(socket), None));
    let backends = backend.clone();
    let served = tokio::spawn(frontdoor::serve(
        listener,
        backend,
        None,
        limits,
        stats.clone(),
        stopped,
    ));
    Harness {
        backends,
        _dir: dir,
        stats,
        port,
        stop,
        served,
    }
}

async fn client(port: u16) -> JournalClient<tonic::transport::Channel> {
    JournalClient::connect(format!("http://127.0.0.1:{port}"))
        .await
        .unwrap()
}

#[tokio::test]
async fn unary_calls_carry_metadata_both_ways() {
    let h = start(true).await;
    let mut c = client(h.port).await;
    let mut req = Request::new(ApplyRequest::default());
    req.metadata_mut()
        .insert("authorization", "Bearer abc".parse().unwrap());
    let resp = c.apply(req).await.unwrap();
    assert_eq!(resp.metadata().get("x-token-seen").unwrap(), "Bearer abc");
}

#[tokio::test]
async fn server_streams_arrive_whole_and_in_order() {
    let h = start(true).await;
    let mut c = client(h.port).await;
    let req = ReadRequest {
        journal: "a/b".into(),
        offset: 100,
        ..Default::default()
    };
    let mut stream = c.read(req).await.unwrap().into_inner();
    let mut offsets = vec![];
    while let Some(msg) = stream.next().await {
        let msg = msg.unwrap();
        assert_eq!(&msg.content[..], b"hello");
        offsets.push(msg.offset);
    }
    assert_eq!(offsets, vec![100, 105, 110]);
}

#[tokio::test]
async fn client_streams_and_large_messages_pass() {
    let h = start(true).await;
    let mut c = client(h.port).await;
    let big = Bytes::from(vec![7u8; 3 << 20]);
    let mut msgs = vec![AppendRequest {
        journal: "a/b".into(),
        ..Default::default()
    }];
    for _ in 0..4 {
        msgs.push(AppendRequest {
            content: big.clone(),
            ..Default::default()
        });
    }
    msgs.push(AppendRequest::default());
    let resp = c
        .append(tokio_stream::iter(msgs))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(resp.total_chunks, 4);
    assert_eq!(resp.commit.unwrap().end, 4 * (3 << 20));
}

#[tokio::test]
async fn statuses_and_their_messages_pass_unchanged() {
    let h = start(true).await;
    let mut c = client(h.port).await;
    let msgs = vec![AppendRequest {
        journal: "refused".into(),
        ..Default::default()
    }];
    let err = c.append(tokio_stream::iter(msgs)).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::FailedPrecondition);
    assert_eq!(err.message(), "refused: a reason with % and é");
    let err = c.list(ListRequest::default()).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::Unimplemented);
}

#[tokio::test]
async fn an_absent_backend_is_unavailable() {
    let h = start(false).await;
    let mut c = client(h.port).await;
    let err = c.apply(ApplyRequest::default()).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::Unavailable);
    assert!(err.message().contains("control plane"), "{}", err.message());
}

#[tokio::test]
async fn stopping_ends_serving_and_frees_the_port() {
    let h = start(true).await;
    let mut c = client(h.port).await;
    c.apply(ApplyRequest::default()).await.unwrap();
    h.stop.send(Some(Duration::from_millis(200))).unwrap();
    tokio::time::timeout(Duration::from_secs(5), h.served)
        .await
        .unwrap()
        .unwrap();
    assert!(tokio::net::TcpListener::bind(("127.0.0.1", h.port))
        .await
        .is_ok());
}

#[test]
fn grpc_messages_are_percent_encoded() {
    let resp = frontdoor::grpc_error(14, "down: 100% é");
    assert_eq!(resp.headers()["grpc-status"], "14");
    assert_eq!(resp.headers()["grpc-message"], "down: 100%25 %C3%A9");
}

/// Reads until the server closes the connection; how long that took.
async fn closed_within(stream: &mut tokio::net::TcpStream, limit: Duration) -> Duration {
    use tokio::io::AsyncReadExt;
    let start = tokio::time::Instant::now();
    let mut buf = [0u8; 1024];
    loop {
        match tokio::time::timeout(limit, stream.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return start.elapsed(),
            Ok(Ok(_)) => continue,
            Err(_) => panic!("the connection stayed open past {limit:?}"),
        }
    }
}

fn short_limits() -> frontdoor::Limits {
    frontdoor::Limits {
        first_bytes_timeout: Duration::from_millis(300),
        header_timeout: Duration::from_millis(300),
        ..Default::default()
    }
}

#[tokio::test]
async fn a_connection_that_sends_nothing_is_closed() {
    let h = start_with(true, short_limits()).await;
    let mut conn = tokio::net::TcpStream::connect(("127.0.0.1", h.port))
        .await
        .unwrap();
    let took = closed_within(&mut conn, Duration::from_secs(5)).await;
    assert!(took >= Duration::from_millis(250), "{took:?}");
    assert_eq!(h.stats.silent.load(std::sync::atomic::Ordering::Relaxed), 1);
    assert_eq!(h.stats.open.load(std::sync::atomic::Ordering::Relaxed), 0);
}

#[tokio::test]
async fn a_half_sent_http1_request_is_closed() {
    use tokio::io::AsyncWriteExt;
    let h = start_with(true, short_limits()).await;
    let mut conn = tokio::net::TcpStream::connect(("127.0.0.1", h.port))
        .await
        .unwrap();
    conn.write_all(b"GET /a/journal HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    closed_within(&mut conn, Duration::from_secs(5)).await;
}

#[tokio::test]
async fn connections_past_the_limit_are_refused_and_counted() {
    use std::sync::atomic::Ordering::Relaxed;
    use tokio::io::AsyncWriteExt;
    let limits = frontdoor::Limits {
        max_connections: 2,
        ..Default::default()
    };
    let h = start_with(true, limits).await;
    let mut held = vec![];
    for _ in 0..2 {
        let mut conn = tokio::net::TcpStream::connect(("127.0.0.1", h.port))
            .await
            .unwrap();
        conn.write_all(b"GET /a HTTP/1.1\r\n").await.unwrap();
        held.push(conn);
    }
    for _ in 0..100 {
        if h.stats.open.load(Relaxed) == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(h.stats.open.load(Relaxed), 2);
    // A third is told why and closed: an HTTP/1 request gets a 503 …
    let mut third = tokio::net::TcpStream::connect(("127.0.0.1", h.port))
        .await
        .unwrap();
    third
        .write_all(b"GET /a HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(
        Duration::from_secs(3),
        tokio::io::AsyncReadExt::read_to_end(&mut third, &mut answer),
    )
    .await
    .unwrap()
    .unwrap();
    let answer = String::from_utf8(answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 503 "), "{answer}");
    assert!(
        answer.ends_with(
            "this broker serves 2 connections at once, its most (--broker.max-connections): \
             try again soon\n"
        ),
        "{answer}"
    );
    // … and a gRPC call UNAVAILABLE, which clients retry.
    let channel = tonic::transport::Endpoint::from_shared(format!("http://127.0.0.1:{}", h.port))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let err = JournalClient::new(channel)
        .apply(ApplyRequest::default())
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::Unavailable);
    assert!(
        err.message().contains("(--broker.max-connections)"),
        "{err}"
    );
    assert_eq!(h.stats.refused.load(Relaxed), 2);
    // Once one closes, a new connection is served again.
    drop(held.pop());
    for _ in 0..100 {
        if h.stats.open.load(Relaxed) == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let mut c = client(h.port).await;
    c.apply(ApplyRequest::default()).await.unwrap();
}

#[tokio::test]
async fn requests_without_a_token_of_our_keys_are_refused_undecoded() {
    let h = start(true).await;
    h.backends.set_gate(Some(dataplane::auth::Gate::new(
        vec![b"key".to_vec()],
        false,
    )));
    let mut c = client(h.port).await;
    // A large append without a token: refused, its messages dropped undecoded.
    let big = Bytes::from(vec![7u8; 3 << 20]);
    let mut msgs = vec![AppendRequest {
        journal: "a/b".into(),
        ..Default::default()
    }];
    msgs.extend((0..8).map(|_| AppendRequest {
        content: big.clone(),
        ..Default::default()
    }));
    let err = c.append(tokio_stream::iter(msgs)).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::Unauthenticated);
    assert_eq!(err.message(), "missing or empty Authorization token");
    let mut req = Request::new(ApplyRequest::default());
    req.metadata_mut()
        .insert("authorization", "Bearer a.b.c".parse().unwrap());
    let err = c.apply(req).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::Unauthenticated);
    // Without keys, everything goes through again.
    h.backends.set_gate(None);
    c.apply(ApplyRequest::default()).await.unwrap();
}

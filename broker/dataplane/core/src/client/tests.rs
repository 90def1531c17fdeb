//! Appends of the client against an in-process tonic broker on loopback that
//! records what it is sent and answers as each test scripts it.

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::{oneshot, watch};
use tokio_stream::wrappers::TcpListenerStream;
use tokio_stream::{Stream, StreamExt};
use tonic::{Code, Request, Response, Status, Streaming};

use super::*;
use crate::protocol::journal_server::{Journal, JournalServer};
use crate::protocol::*;

type Boxed<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send>>;

/// How the broker answers an append once it has read its commit.
#[derive(Clone)]
enum Answer {
    /// OK, with a commit spanning the content.
    Commit,
    /// Ends the RPC with this status.
    Fail(Code, &'static str),
    /// Reads nothing until the watch turns true, then commits.
    StallUntil(watch::Receiver<bool>),
}

/// One append as the broker saw it.
#[derive(Debug, Default, Clone)]
struct Seen {
    authorization: String,
    journal: String,
    content: Vec<u8>,
    committed: bool,
    /// How the stream ended: "eof", "commit", the error read, or "dropped" (the
    /// server dropped the handler: its client reset the stream).
    end: String,
}

/// Marks a handler that ends without having said how.
struct Ended(Arc<Mutex<Seen>>);

impl Drop for Ended {
    fn drop(&mut self) {
        let mut seen = self.0.lock().unwrap();
        if seen.end.is_empty() {
            seen.end = "dropped".into();
        }
    }
}

struct State {
    answer: Mutex<Answer>,
    seen: Mutex<Vec<Arc<Mutex<Seen>>>>,
}

struct Broker(Arc<State>);

async fn serve_append(
    state: &State,
    req: Request<Streaming<AppendRequest>>,
) -> Result<AppendResponse, Status> {
    let authorization = req
        .metadata()
        .get("authorization")
        .map_or("", |v| v.to_str().unwrap())
        .to_owned();
    let seen = Arc::new(Mutex::new(Seen {
        authorization,
        ..Seen::default()
    }));
    state.seen.lock().unwrap().push(seen.clone());
    let _ended = Ended(seen.clone());
    let answer = state.answer.lock().unwrap().clone();
    let mut stream = req.into_inner();
    let first = stream.message().await?.expect("a first message");
    seen.lock().unwrap().journal = first.journal.clone();
    if let Answer::StallUntil(go) = &answer {
        let mut go = go.clone();
        let _ = go.wait_for(|g| *g).await;
    }
    loop {
        match stream.message().await {
            Ok(Some(msg)) if msg.content.is_empty() => {
                let mut s = seen.lock().unwrap();
                s.committed = true;
                s.end = "commit".into();
                break;
            }
            Ok(Some(msg)) => seen.lock().unwrap().content.extend_from_slice(&msg.content),
            Ok(None) => {
                seen.lock().unwrap().end = "eof".into();
                return Err(Status::unknown("unexpected EOF"));
            }
            Err(e) => {
                seen.lock().unwrap().end = format!("{:?}", e.code());
                return Err(e);
            }
        }
    }
    if let Answer::Fail(code, message) = answer {
        return Err(Status::new(code, message));
    }
    let end = seen.lock().unwrap().content.len() as i64;
    Ok(AppendResponse {
        status: crate::protocol::Status::Ok as i32,
        commit: Some(Fragment {
            journal: first.journal,
            end,
            ..Default::default()
        }),
        ..Default::default()
    })
}

#[tonic::async_trait]
impl Journal for Broker {
    type ListStream = Boxed<ListResponse>;
    type ReadStream = Boxed<ReadResponse>;
    type ReplicateStream = Boxed<ReplicateResponse>;

    async fn append(
        &self,
        req: Request<Streaming<AppendRequest>>,
    ) -> Result<Response<AppendResponse>, Status> {
        serve_append(&self.0, req).await.map(Response::new)
    }

    async fn list(&self, _: Request<ListRequest>) -> Result<Response<Self::ListStream>, Status> {
        Err(Status::unimplemented("list"))
    }

    async fn apply(&self, _: Request<ApplyRequest>) -> Result<Response<ApplyResponse>, Status> {
        Err(Status::unimplemented("apply"))
    }

    /// Answers `offset` responses of ten bytes each, then ends; for a journal named
    /// "fails", fails with DATA_LOSS; for one named "blocks", waits forever.
    async fn read(&self, req: Request<ReadRequest>) -> Result<Response<Self::ReadStream>, Status> {
        let req = req.into_inner();
        let responses = tokio_stream::iter((0..req.offset).map(|i| {
            Ok(ReadResponse {
                offset: i * 10,
                content: Bytes::from_static(b"0123456789"),
                ..Default::default()
            })
        }));
        let stream: Self::ReadStream = match req.journal.as_str() {
            "fails" => Box::pin(responses.chain(tokio_stream::once(Err(Status::data_loss(
                "the fragment is gone",
            ))))),
            "blocks" => Box::pin(responses.chain(tokio_stream::pending())),
            _ => Box::pin(responses),
        };
        Ok(Response::new(stream))
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
    state: Arc<State>,
    endpoint: String,
    dialer: Dialer,
}

impl Harness {
    async fn start(answer: Answer) -> Harness {
        let state = Arc::new(State {
            answer: Mutex::new(answer),
            seen: Mutex::new(Vec::new()),
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let endpoint = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(JournalServer::new(Broker(state.clone())))
                .serve_with_incoming(TcpListenerStream::new(listener)),
        );
        Harness {
            state,
            endpoint,
            dialer: Dialer::new(ClientTls::default(), 4 << 20),
        }
    }

    fn append(&self, journal: &str, metadata: &[(String, String)]) -> AppendCall {
        let first = AppendRequest {
            journal: journal.into(),
            ..Default::default()
        };
        self.dialer
            .append(
                &tokio::runtime::Handle::current(),
                &self.endpoint,
                metadata,
                first,
            )
            .unwrap()
    }

    fn seen(&self) -> Vec<Seen> {
        let seen = self.state.seen.lock().unwrap();
        seen.iter().map(|s| s.lock().unwrap().clone()).collect()
    }
}

/// Waits for the outcome (its task runs from now on, if it did not yet).
fn waiting(call: &mut AppendCall) -> oneshot::Receiver<Outcome> {
    let (tx, rx) = oneshot::channel();
    call.on_outcome(move |o| {
        let _ = tx.send(o);
    });
    rx
}

async fn outcome_of(rx: oneshot::Receiver<Outcome>) -> Outcome {
    tokio::time::timeout(Duration::from_secs(10), rx)
        .await
        .expect("an outcome in time")
        .unwrap()
}

async fn outcome(call: &mut AppendCall) -> Outcome {
    outcome_of(waiting(call)).await
}

#[tokio::test]
async fn an_append_streams_its_content_and_its_commit_with_its_token() {
    let h = Harness::start(Answer::Commit).await;
    let token = [("authorization".to_string(), "Bearer abc".to_string())];
    let mut call = h.append("a/journal", &token);
    assert_eq!(call.try_send(Bytes::from_static(b"hello ")), Sent::Queued);
    assert_eq!(call.try_send(Bytes::from_static(b"world\n")), Sent::Queued);
    assert_eq!(call.try_send(Bytes::new()), Sent::Queued);
    call.finish();
    let response = outcome(&mut call).await.unwrap();
    assert_eq!(response.commit.unwrap().end, 12);
    assert!(call.ended());
    // Asked again, the outcome is the same, at once.
    assert_eq!(outcome(&mut call).await.unwrap().status, 0);
    let seen = h.seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].authorization, "Bearer abc");
    assert_eq!(seen[0].journal, "a/journal");
    assert_eq!(seen[0].content, b"hello world\n");
    assert!(seen[0].committed);

    // The channel is shared: a second append goes over the same connection.
    let mut call = h.append("a/journal", &[]);
    assert_eq!(call.try_send(Bytes::new()), Sent::Queued);
    call.finish();
    assert!(outcome(&mut call).await.is_ok());
    assert_eq!(h.seen()[1].authorization, "");
}

#[tokio::test]
async fn a_status_of_the_broker_is_the_failure_word_for_word() {
    let h = Harness::start(Answer::Fail(Code::Unauthenticated, "no token: go away")).await;
    let mut call = h.append("a/journal", &[]);
    call.try_send(Bytes::from_static(b"x"));
    call.try_send(Bytes::new());
    call.finish();
    let failure = outcome(&mut call).await.unwrap_err();
    assert_eq!(
        failure,
        Failure {
            code: Code::Unauthenticated,
            message: "no token: go away".into()
        }
    );
    // Once ended, nothing more is taken.
    let mut call = h.append("a/journal", &[]);
    call.try_send(Bytes::new());
    let failure = outcome(&mut call).await.unwrap_err();
    assert_eq!(failure.code, Code::Unauthenticated);
    assert_eq!(call.try_send(Bytes::from_static(b"late")), Sent::Ended);
    call.writable().await; // At once: the RPC has ended.
}

#[tokio::test]
async fn an_unreachable_broker_is_unavailable() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    drop(listener); // Nothing listens there any more.
    let dialer = Dialer::new(ClientTls::default(), 4 << 20);
    let mut call = dialer
        .append(
            &tokio::runtime::Handle::current(),
            &endpoint,
            &[],
            AppendRequest::default(),
        )
        .unwrap();
    call.try_send(Bytes::new());
    call.finish();
    let failure = outcome(&mut call).await.unwrap_err();
    assert_eq!(failure.code, Code::Unavailable, "{failure:?}");
}

#[tokio::test]
async fn a_broker_that_dies_mid_append_is_unavailable() {
    // A "broker" that takes the connection and the append's first bytes of
    // content, then is gone: its socket closes under the call.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    let died = tokio::spawn(async move {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (mut socket, _) = listener.accept().await.unwrap();
        // An empty SETTINGS frame: the server's side of the HTTP/2 handshake.
        socket
            .write_all(&[0, 0, 0, 4, 0, 0, 0, 0, 0])
            .await
            .unwrap();
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        while !got.windows(7).any(|w| w == b"partial") {
            let n = socket.read(&mut buf).await.unwrap();
            assert!(n > 0, "the client closed first");
            got.extend_from_slice(&buf[..n]);
        }
    });
    let dialer = Dialer::new(ClientTls::default(), 4 << 20);
    let first = AppendRequest {
        journal: "a/journal".into(),
        ..Default::default()
    };
    let mut call = dialer
        .append(&tokio::runtime::Handle::current(), &endpoint, &[], first)
        .unwrap();
    call.try_send(Bytes::from_static(b"partial"));
    let failure = outcome(&mut call).await.unwrap_err();
    assert_eq!(failure.code, Code::Unavailable, "{failure:?}");
    died.await.unwrap();
}

#[tokio::test]
async fn a_cancelled_append_commits_nothing() {
    let (go, stalled) = watch::channel(false);
    let h = Harness::start(Answer::StallUntil(stalled)).await;
    let mut call = h.append("a/journal", &[]);
    call.try_send(Bytes::from_static(b"partial"));
    // Nothing goes out before someone waits (or the queue fills, or it finishes).
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(h.seen().is_empty());
    let cancelled = waiting(&mut call);
    // The broker holds the stream: wait until it has its first message.
    while h.seen().first().is_none_or(|s| s.journal.is_empty()) {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    call.cancel();
    assert_eq!(
        outcome_of(cancelled).await.unwrap_err().code,
        Code::Cancelled
    );
    go.send_replace(true);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while h.seen()[0].end.is_empty() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the broker saw no end"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let seen = &h.seen()[0];
    assert!(!seen.committed, "{seen:?}");

    // Dropped unfinished, an append is cancelled too.
    let (go, stalled) = watch::channel(false);
    *h.state.answer.lock().unwrap() = Answer::StallUntil(stalled);
    let mut call = h.append("a/journal", &[]);
    call.try_send(Bytes::from_static(b"partial"));
    drop(waiting(&mut call));
    while h.seen().get(1).is_none_or(|s| s.journal.is_empty()) {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    drop(call);
    go.send_replace(true);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while h.seen().get(1).is_none_or(|s| s.end.is_empty()) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the broker saw no end"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(!h.seen()[1].committed);
}

#[tokio::test]
async fn a_broker_that_reads_nothing_holds_the_writer_back() {
    let (go, stalled) = watch::channel(false);
    let h = Harness::start(Answer::StallUntil(stalled)).await;
    let mut call = h.append("a/journal", &[]);
    let chunk = Bytes::from(vec![b'x'; 64 << 10]);
    let mut queued = 0;
    loop {
        match call.try_send(chunk.clone()) {
            Sent::Queued => queued += 1,
            // The first Full starts the RPC, which takes what waits as far as HTTP/2
            // flow control lets it; then the queue stays full.
            Sent::Full => {
                let writable = call.writable();
                if tokio::time::timeout(Duration::from_millis(100), writable)
                    .await
                    .is_err()
                {
                    break;
                }
            }
            Sent::Ended => panic!("the append ended"),
        }
        assert!(queued < 1000, "nothing holds the writer back");
    }
    let writable = call.writable();
    go.send_replace(true);
    tokio::time::timeout(Duration::from_secs(10), writable)
        .await
        .expect("writable once the broker reads");
    while call.try_send(Bytes::new()) == Sent::Full {
        call.writable().await;
    }
    call.finish();
    let response = outcome(&mut call).await.unwrap();
    assert_eq!(response.commit.unwrap().end, queued * (64 << 10));
}

#[test]
fn statuses_sent_by_a_broker_keep_their_code() {
    for code in [
        Code::Internal,
        Code::Unknown,
        Code::Unavailable,
        Code::NotFound,
    ] {
        let failure = Failure::of(&Status::new(code, "said so"));
        assert_eq!(failure.code, code);
        assert_eq!(failure.message, "said so");
    }
}

async fn take(call: &ReadCall) -> Vec<ReadItem> {
    let (tx, rx) = oneshot::channel();
    call.take(move |batch| {
        let _ = tx.send(batch);
    });
    tokio::time::timeout(Duration::from_secs(10), rx)
        .await
        .expect("a batch in time")
        .unwrap()
}

fn read_of(h: &Harness, journal: &str, responses: i64) -> ReadCall {
    let request = ReadRequest {
        journal: journal.into(),
        offset: responses,
        ..Default::default()
    };
    h.dialer
        .read(
            &tokio::runtime::Handle::current(),
            &h.endpoint,
            &[],
            request,
        )
        .unwrap()
}

#[tokio::test]
async fn a_read_reads_ahead_so_far_and_hands_over_what_waits() {
    let h = Harness::start(Answer::Commit).await;
    let call = read_of(&h, "a/journal", 100);
    // Left alone, the runtime reads ahead READ_AHEAD responses, and no more.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let first = take(&call).await;
    assert_eq!(first.len(), READ_AHEAD);
    let mut items = first;
    while items.last() != Some(&ReadItem::End) {
        items.extend(take(&call).await);
    }
    assert_eq!(items.len(), 101);
    for (i, item) in items[..100].iter().enumerate() {
        let ReadItem::Response(response) = item else {
            panic!("item {i}: {item:?}");
        };
        assert_eq!(response.offset, i as i64 * 10);
    }
    // Past the end, the end again.
    assert_eq!(take(&call).await, vec![ReadItem::End]);
}

#[tokio::test]
async fn a_read_that_fails_ends_with_its_failure() {
    let h = Harness::start(Answer::Commit).await;
    let call = read_of(&h, "fails", 3);
    let mut items = Vec::new();
    while !matches!(items.last(), Some(ReadItem::Failed(_))) {
        items.extend(take(&call).await);
    }
    assert_eq!(items.len(), 4);
    assert_eq!(
        items[3],
        ReadItem::Failed(Failure {
            code: Code::DataLoss,
            message: "the fragment is gone".into()
        })
    );
}

#[tokio::test]
async fn a_cancelled_read_hands_its_waiting_taker_the_cancel() {
    let h = Harness::start(Answer::Commit).await;
    let call = read_of(&h, "blocks", 2);
    let mut items = Vec::new();
    while items.len() < 2 {
        items.extend(take(&call).await);
    }
    // Nothing more comes: the taker waits, until the read is cancelled.
    let (tx, rx) = oneshot::channel();
    call.take(move |batch| {
        let _ = tx.send(batch);
    });
    call.cancel();
    let items = tokio::time::timeout(Duration::from_secs(10), rx)
        .await
        .unwrap()
        .unwrap();
    assert!(
        matches!(&items[..], [ReadItem::Failed(f)] if f.code == Code::Cancelled),
        "{items:?}"
    );
}

//! One peer's `Replicate` stream of a [`Pipeline`](super::Pipeline).
//!
//! A tonic bidirectional call only yields its response stream once the peer sent
//! its response headers, which a peer may hold back until its first answer; and
//! the call goes out at all only while something polls it. So each peer's call
//! runs on a task of its own: requests reach it through a bounded channel (a full
//! channel is a peer that takes no more), and its answers come back through
//! another, followed by how the call ended.

use std::sync::{Arc, Mutex, PoisonError};

use futures_util::stream;
use tokio::sync::mpsc;
use tokio::task::AbortHandle;
use tonic::metadata::MetadataMap;
use tonic::transport::Channel;
use tonic::{Code, Status};

use crate::protocol::journal_client::JournalClient;
use crate::protocol::{ReplicateRequest, ReplicateResponse};

/// Requests queued ahead of the call per peer. The call itself holds one more
/// message in encoding and HTTP/2 holds a window's worth; past that a send waits,
/// as a Python write does until gRPC core takes the message.
const SEND_BUFFER: usize = 4;

/// Answers read ahead of the pipeline per peer. Only proposals that ask for one
/// are answered, so this is a count of appends in flight; a full buffer holds
/// the peer back through HTTP/2 flow control, never a message dropped.
const RESPONSE_BUFFER: usize = 32;

/// The sending half of a peer's stream; dropping it half-closes the stream.
pub(super) type PeerSender = mpsc::Sender<ReplicateRequest>;

/// The receiving half: answers in order, then `None` once the call ended (see
/// [`Peer::ended`] for how).
pub(super) type PeerReceiver = mpsc::Receiver<ReplicateResponse>;

/// What the pipeline keeps of a peer's call besides its two halves.
pub(super) struct Peer {
    task: AbortHandle,
    ended: Arc<Mutex<Option<Status>>>,
}

impl Peer {
    /// Starts the call to `client`, sending `metadata` with it.
    pub(super) fn start(
        mut client: JournalClient<Channel>,
        metadata: MetadataMap,
    ) -> (Peer, PeerSender, PeerReceiver) {
        let (req_tx, req_rx) = mpsc::channel(SEND_BUFFER);
        let (resp_tx, resp_rx) = mpsc::channel(RESPONSE_BUFFER);
        let ended = Arc::new(Mutex::new(None));
        let theirs = ended.clone();
        let requests = stream::unfold(req_rx, |mut rx| async move {
            rx.recv().await.map(|req| (req, rx))
        });
        let task = tokio::spawn(async move {
            let mut request = tonic::Request::new(requests);
            *request.metadata_mut() = metadata;
            let end = match client.replicate(request).await {
                Err(status) => status,
                Ok(response) => {
                    let mut answers = response.into_inner();
                    loop {
                        match answers.message().await {
                            Ok(Some(resp)) => {
                                if resp_tx.send(resp).await.is_err() {
                                    return; // The pipeline is gone.
                                }
                            }
                            Ok(None) => break Status::new(Code::Ok, ""),
                            Err(status) => break status,
                        }
                    }
                }
            };
            set_once(&theirs, end);
            // Dropping `resp_tx` now tells the receiving side the call ended.
        });
        let peer = Peer {
            task: task.abort_handle(),
            ended,
        };
        (peer, req_tx, resp_rx)
    }

    /// How the call ended, once it did (a status of code OK: the peer ended it
    /// cleanly).
    pub(super) fn ended(&self) -> Option<Status> {
        lock(&self.ended).clone()
    }

    /// Ends the call at once (HTTP/2 resets the stream); later reads see it
    /// cancelled, as a cancelled gRPC call reads.
    pub(super) fn cancel(&self) {
        set_once(
            &self.ended,
            Status::cancelled("cancelled by the replication pipeline"),
        );
        self.task.abort();
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn set_once(slot: &Mutex<Option<Status>>, status: Status) {
    let mut slot = lock(slot);
    if slot.is_none() {
        *slot = Some(status);
    }
}

/// A call's final status as short text, `CODE: message`, in the words of the
/// Python broker's `errors.describe_status` (gRPC's upper-case code names).
pub(crate) fn describe_status(status: &Status) -> String {
    let name = code_name(status.code());
    if status.message().is_empty() {
        name.to_owned()
    } else {
        format!("{name}: {}", status.message())
    }
}

fn code_name(code: Code) -> &'static str {
    match code {
        Code::Ok => "OK",
        Code::Cancelled => "CANCELLED",
        Code::Unknown => "UNKNOWN",
        Code::InvalidArgument => "INVALID_ARGUMENT",
        Code::DeadlineExceeded => "DEADLINE_EXCEEDED",
        Code::NotFound => "NOT_FOUND",
        Code::AlreadyExists => "ALREADY_EXISTS",
        Code::PermissionDenied => "PERMISSION_DENIED",
        Code::ResourceExhausted => "RESOURCE_EXHAUSTED",
        Code::FailedPrecondition => "FAILED_PRECONDITION",
        Code::Aborted => "ABORTED",
        Code::OutOfRange => "OUT_OF_RANGE",
        Code::Unimplemented => "UNIMPLEMENTED",
        Code::Internal => "INTERNAL",
        Code::Unavailable => "UNAVAILABLE",
        Code::DataLoss => "DATA_LOSS",
        Code::Unauthenticated => "UNAUTHENTICATED",
    }
}

//! The client side of `protocol.Journal/Append` and `Read`, for the Python client
//! library.
//!
//! `gazette.broker.client` streams appends from Python: through grpc.aio every
//! message and the answer are wake-ups of the event loop by grpc's poller thread,
//! which caps a Python client near 1k sequential acknowledged appends a second
//! (issue 28, item 5). Here an append is one tokio task over a tonic channel: Python
//! queues its messages without waiting ([`AppendCall::try_send`]) and is told the
//! outcome once ([`AppendCall::on_outcome`]). A read ([`ReadCall`]) reads ahead and
//! hands Python what waits in batches. What to append or read, where to
//! (routing), retries and errors stay Python's; this module only carries the RPCs.
//!
//! Channels ([`Dialer`]) are one per endpoint, dialed lazily, in the clear for
//! `http://` and with TLS for `https://` endpoints, as the Python client's dial
//! seam (`gazette.broker.protocol.dial`) decides.

use std::collections::HashMap;
use std::error::Error as _;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;
use tonic::metadata::{AsciiMetadataKey, AsciiMetadataValue};
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};
use tonic::{Code, Status};

use crate::protocol::{journal_client::JournalClient, AppendRequest, AppendResponse};

/// Messages of one append that may wait for its connection. With Python's
/// 128 KiB chunks, 1 MiB: a slow broker holds little of the client's memory, and
/// Python waits ([`AppendCall::writable`]) only when it is that far ahead.
pub const QUEUED_MESSAGES: usize = 8;

/// PEM files (their content) of the client's side of TLS: the CA that signs the
/// brokers' certificates (None: the platform's roots), and a certificate with its
/// key to present to brokers that ask for one.
#[derive(Clone, Debug, Default)]
pub struct ClientTls {
    pub ca: Option<Vec<u8>>,
    pub cert: Option<Vec<u8>>,
    pub key: Option<Vec<u8>>,
}

/// Why an RPC failed: a gRPC status code and its message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    pub code: Code,
    pub message: String,
}

impl Failure {
    /// The failure of an RPC that ended with `status`, coded as Go's gRPC codes it.
    ///
    /// A status the broker sent is taken as it is. One tonic made of a broken
    /// connection (refused, reset, closed mid-call, a failed TLS handshake, an
    /// HTTP/2 GOAWAY) is UNAVAILABLE, which clients retry: tonic codes some of them
    /// UNKNOWN, INTERNAL or CANCELLED, where Go's clients and Python's
    /// `dial.rpc_code` say UNAVAILABLE. A stream the broker reset keeps tonic's code
    /// (RST_STREAM INTERNAL_ERROR is INTERNAL, REFUSED_STREAM UNAVAILABLE, as in Go).
    pub fn of(status: &Status) -> Failure {
        let mut message = status.message().to_owned();
        let mut transport = false;
        let mut reset = false;
        let mut source = status.source();
        while let Some(e) = source {
            if let Some(h2) = e.downcast_ref::<h2::Error>() {
                reset |= h2.is_reset();
            }
            transport |= e.is::<std::io::Error>()
                || e.is::<hyper::Error>()
                || e.is::<tonic::transport::Error>();
            let text = e.to_string();
            if !message.contains(&text) {
                if !message.is_empty() {
                    message.push_str(": ");
                }
                message.push_str(&text);
            }
            source = e.source();
        }
        // Never our own cancel, which has its outcome already: hyper's "canceled"
        // is a request its connection dropped.
        let code = if transport && !reset {
            Code::Unavailable
        } else {
            status.code()
        };
        Failure { code, message }
    }

    fn cancelled() -> Failure {
        Failure {
            code: Code::Cancelled,
            message: "the call was cancelled".into(),
        }
    }
}

/// What an append came to: the broker's response, or why there is none.
pub type Outcome = Result<AppendResponse, Failure>;

/// Channels to broker endpoints, one each, dialed on first use.
pub struct Dialer {
    tls: Mutex<ClientTls>,
    max_message_size: usize,
    open: Mutex<HashMap<String, Channel>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Dialer {
    /// Messages beyond `max_message_size` bytes are neither sent nor taken.
    pub fn new(tls: ClientTls, max_message_size: usize) -> Dialer {
        Dialer {
            tls: Mutex::new(tls),
            max_message_size,
            open: Mutex::new(HashMap::new()),
        }
    }

    /// TLS of channels dialed from now on.
    pub fn set_tls(&self, tls: ClientTls) {
        *lock(&self.tls) = tls;
        lock(&self.open).retain(|endpoint, _| !endpoint.starts_with("https://"));
    }

    /// The channel of `endpoint` (`http://host:port` or `https://host:port`).
    ///
    /// Dialing is lazy (the first call connects) and must run inside the runtime
    /// that serves the channel: its connection is a task of that runtime.
    pub fn channel(&self, endpoint: &str) -> Result<Channel, String> {
        if let Some(ch) = lock(&self.open).get(endpoint) {
            return Ok(ch.clone());
        }
        let mut ep = Endpoint::from_shared(endpoint.to_owned())
            .map_err(|e| format!("endpoint {endpoint}: {e}"))?
            .tcp_nodelay(true)
            .http2_keep_alive_interval(Duration::from_secs(30))
            .keep_alive_timeout(Duration::from_secs(20))
            .keep_alive_while_idle(true)
            .connect_timeout(Duration::from_secs(10));
        if endpoint.starts_with("https://") {
            ep = ep
                .tls_config(client_tls(&lock(&self.tls)))
                .map_err(|e| format!("TLS of {endpoint}: {e}"))?;
        }
        let ch = ep.connect_lazy();
        lock(&self.open).insert(endpoint.to_owned(), ch.clone());
        Ok(ch)
    }

    /// Forgets every channel: calls under way keep theirs to their end.
    pub fn clear(&self) {
        lock(&self.open).clear();
    }

    /// Starts a read from `endpoint` (see [`ReadCall::start`]).
    pub fn read(
        &self,
        runtime: &tokio::runtime::Handle,
        endpoint: &str,
        metadata: &[(String, String)],
        request: crate::protocol::ReadRequest,
    ) -> Result<ReadCall, String> {
        let channel = {
            let _inside = runtime.enter();
            self.channel(endpoint)?
        };
        ReadCall::start(runtime, channel, metadata, request, self.max_message_size)
    }

    /// Starts an append to `endpoint` (see [`AppendCall::start`]).
    pub fn append(
        &self,
        runtime: &tokio::runtime::Handle,
        endpoint: &str,
        metadata: &[(String, String)],
        first: AppendRequest,
    ) -> Result<AppendCall, String> {
        let channel = {
            let _inside = runtime.enter();
            self.channel(endpoint)?
        };
        AppendCall::start(runtime, channel, metadata, first, self.max_message_size)
    }
}

/// Adds call metadata (ASCII pairs, such as `authorization`) to `request`.
fn add_metadata<T>(
    request: &mut tonic::Request<T>,
    metadata: &[(String, String)],
) -> Result<(), String> {
    for (key, value) in metadata {
        let key: AsciiMetadataKey = key
            .parse()
            .map_err(|_| format!("metadata key {key:?} can't be sent"))?;
        let value: AsciiMetadataValue = value
            .parse()
            .map_err(|_| format!("metadata {key} has a value that can't be sent"))?;
        request.metadata_mut().insert(key, value);
    }
    Ok(())
}

fn client_tls(tls: &ClientTls) -> ClientTlsConfig {
    let mut config = ClientTlsConfig::new();
    config = match &tls.ca {
        Some(ca) => config.ca_certificate(Certificate::from_pem(ca)),
        None => config.with_enabled_roots(),
    };
    if let (Some(cert), Some(key)) = (&tls.cert, &tls.key) {
        config = config.identity(Identity::from_pem(cert, key));
    }
    config
}

/// Whether a message was taken by [`AppendCall::try_send`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sent {
    /// It goes out in turn.
    Queued,
    /// [`QUEUED_MESSAGES`] wait already: try again once [`AppendCall::writable`].
    Full,
    /// The RPC has ended (its outcome says how) or was finished: nothing more goes.
    Ended,
}

type Waiter = Box<dyn FnOnce(Outcome) + Send>;

enum Slot {
    /// Under way; someone may be waiting for the outcome.
    Pending(Option<Waiter>),
    Done(Box<Outcome>),
}

/// What the RPC's task shares with its handle.
struct Shared {
    slot: Mutex<Slot>,
    ended: watch::Sender<bool>,
}

impl Shared {
    /// The first outcome is the one: a cancel racing the response loses to it or wins.
    fn complete(&self, outcome: Outcome) {
        let waiter = {
            let mut slot = lock(&self.slot);
            match &mut *slot {
                Slot::Done(_) => return,
                Slot::Pending(waiter) => {
                    let waiter = waiter.take();
                    *slot = Slot::Done(Box::new(outcome.clone()));
                    waiter
                }
            }
        };
        self.ended.send_replace(true);
        if let Some(waiter) = waiter {
            waiter(outcome);
        }
    }
}

/// The RPC's task before it is spawned.
type Unspawned = (
    tokio::runtime::Handle,
    std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>,
);

/// One Append RPC: its first message went with [`start`](Self::start); content
/// follows with [`try_send`](Self::try_send), an empty message commits, and
/// [`finish`](Self::finish) half-closes. Dropped before it finished, the RPC is
/// cancelled: the broker commits nothing of it.
///
/// The RPC's task is spawned only once the queue is full, or the request is
/// finished, or someone waits on it: a small append wakes the runtime once, with
/// every message at hand, where each message queued to a running task would wake
/// it (on a busy 2-core machine, tens of microseconds each).
pub struct AppendCall {
    tx: Option<mpsc::Sender<AppendRequest>>,
    shared: Arc<Shared>,
    unspawned: Option<Unspawned>,
    task: Option<tokio::task::AbortHandle>,
}

impl AppendCall {
    /// Prepares the RPC on `channel` with `metadata` (the `authorization` bearer
    /// token, say) and the request's `first` message. Fails only for metadata that
    /// can't be sent.
    pub fn start(
        runtime: &tokio::runtime::Handle,
        channel: Channel,
        metadata: &[(String, String)],
        first: AppendRequest,
        max_message_size: usize,
    ) -> Result<AppendCall, String> {
        let (tx, rx) = mpsc::channel(QUEUED_MESSAGES);
        let mut request = tonic::Request::new(ReceiverStream::new(rx));
        add_metadata(&mut request, metadata)?;
        // A fresh queue has room for the first message.
        tx.try_send(first)
            .map_err(|_| "the append's queue refused its first message".to_string())?;
        let shared = Arc::new(Shared {
            slot: Mutex::new(Slot::Pending(None)),
            ended: watch::channel(false).0,
        });
        let mut client = JournalClient::new(channel)
            .max_decoding_message_size(max_message_size)
            .max_encoding_message_size(max_message_size);
        let run = {
            let shared = shared.clone();
            async move {
                let outcome = match client.append(request).await {
                    Ok(response) => Ok(response.into_inner()),
                    Err(status) => Err(Failure::of(&status)),
                };
                shared.complete(outcome);
            }
        };
        Ok(AppendCall {
            tx: Some(tx),
            shared,
            unspawned: Some((runtime.clone(), Box::pin(run))),
            task: None,
        })
    }

    /// Spawns the RPC's task, once.
    fn spawn(&mut self) {
        if let Some((runtime, run)) = self.unspawned.take() {
            self.task = Some(runtime.spawn(run).abort_handle());
        }
    }

    /// Queues a message of `content` (empty: the commit) without waiting.
    pub fn try_send(&mut self, content: Bytes) -> Sent {
        let Some(tx) = &self.tx else {
            return Sent::Ended;
        };
        if *self.shared.ended.borrow() {
            return Sent::Ended;
        }
        let msg = AppendRequest {
            content,
            ..Default::default()
        };
        match tx.try_send(msg) {
            Ok(()) => Sent::Queued,
            Err(mpsc::error::TrySendError::Full(_)) => {
                self.spawn();
                Sent::Full
            }
            Err(mpsc::error::TrySendError::Closed(_)) => Sent::Ended,
        }
    }

    /// Ready once a message would be queued, or the RPC has ended.
    pub fn writable(&mut self) -> impl std::future::Future<Output = ()> + Send + 'static {
        self.spawn();
        let tx = self.tx.clone();
        let mut ended = self.shared.ended.subscribe();
        async move {
            let Some(tx) = tx else { return };
            tokio::select! {
                _ = tx.reserve() => {}
                _ = ended.wait_for(|e| *e) => {}
            }
        }
    }

    /// Half-closes the request stream: the broker has every message.
    pub fn finish(&mut self) {
        self.tx = None;
        self.spawn();
    }

    /// Whether the RPC has ended: its outcome is known.
    pub fn ended(&self) -> bool {
        *self.shared.ended.borrow()
    }

    /// Calls `then` with the outcome: at once (on this thread) if the RPC has
    /// ended, else from the runtime when it does. A second waiter replaces the first.
    pub fn on_outcome(&mut self, then: impl FnOnce(Outcome) + Send + 'static) {
        self.spawn();
        let done = {
            let mut slot = lock(&self.shared.slot);
            match &mut *slot {
                Slot::Done(outcome) => (**outcome).clone(),
                Slot::Pending(waiter) => {
                    *waiter = Some(Box::new(then));
                    return;
                }
            }
        };
        then(done);
    }

    /// Cancels the RPC (the broker commits nothing of it unless it had committed
    /// already); its outcome is CANCELLED unless it had one.
    pub fn cancel(&mut self) {
        self.unspawned = None;
        if let Some(task) = &self.task {
            task.abort();
        }
        self.shared.complete(Err(Failure::cancelled()));
    }
}

impl Drop for AppendCall {
    fn drop(&mut self) {
        if self.tx.is_some() {
            self.cancel();
        }
    }
}

mod read;
pub use read::{ReadCall, ReadItem, READ_AHEAD};

#[cfg(test)]
mod tests;

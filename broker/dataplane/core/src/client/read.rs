//! The client side of `protocol.Journal/Read`: a broker's responses, handed to
//! Python in batches.
//!
//! A read through grpc.aio wakes the event loop for every response. Here the
//! runtime reads ahead up to [`READ_AHEAD`] responses, and Python takes all that
//! wait at once ([`ReadCall::take`]): a reader that keeps up is woken once per
//! response that arrives while it waits, one that falls behind once per batch.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;
use tonic::transport::Channel;

use super::{add_metadata, lock, Failure};
use crate::protocol::{journal_client::JournalClient, ReadRequest, ReadResponse};

/// Responses that may wait for Python before the runtime stops reading (HTTP/2
/// flow control then holds the broker back).
pub const READ_AHEAD: usize = 16;

/// One step of a read as Python takes it.
#[derive(Clone, Debug, PartialEq)]
pub enum ReadItem {
    Response(Box<ReadResponse>),
    /// The broker closed the stream cleanly.
    End,
    /// The RPC failed: nothing follows.
    Failed(Failure),
}

type Taker = Box<dyn FnOnce(Vec<ReadItem>) + Send>;

#[derive(Default)]
struct Queue {
    items: VecDeque<ReadItem>,
    taker: Option<Taker>,
    /// The last item (End or Failed) was queued.
    ended: bool,
}

#[derive(Default)]
struct Shared {
    queue: Mutex<Queue>,
    /// Python took what waited: there is room again.
    room: Notify,
}

impl Shared {
    /// Queues `item` once there is room (the last one goes at once), or hands it
    /// straight to a taker waiting for it.
    async fn push(&self, item: ReadItem, last: bool) {
        let mut item = Some(item);
        loop {
            let room = self.room.notified();
            tokio::pin!(room);
            // Registered before the check: a take between the two still wakes us.
            room.as_mut().enable();
            let handed = {
                let mut queue = lock(&self.queue);
                if last || queue.items.len() < READ_AHEAD || queue.taker.is_some() {
                    queue.items.extend(item.take());
                    queue.ended |= last;
                    queue
                        .taker
                        .take()
                        .map(|taker| (taker, queue.items.drain(..).collect::<Vec<_>>()))
                } else {
                    None
                }
            };
            if item.is_none() {
                if let Some((taker, batch)) = handed {
                    taker(batch);
                }
                return;
            }
            room.await;
        }
    }
}

/// One Read RPC under way: responses gather as they come, for [`take`](Self::take).
/// Dropped, the RPC is cancelled.
pub struct ReadCall {
    shared: Arc<Shared>,
    task: tokio::task::AbortHandle,
}

impl ReadCall {
    /// Starts the RPC of `request` on `channel` with `metadata`. Fails only for
    /// metadata that can't be sent.
    pub fn start(
        runtime: &tokio::runtime::Handle,
        channel: Channel,
        metadata: &[(String, String)],
        request: ReadRequest,
        max_message_size: usize,
    ) -> Result<ReadCall, String> {
        let mut request = tonic::Request::new(request);
        add_metadata(&mut request, metadata)?;
        let shared = Arc::new(Shared::default());
        let mut client = JournalClient::new(channel)
            .max_decoding_message_size(max_message_size)
            .max_encoding_message_size(max_message_size);
        let task = {
            let shared = shared.clone();
            runtime.spawn(async move {
                let mut stream = match client.read(request).await {
                    Ok(response) => response.into_inner(),
                    Err(status) => {
                        return shared
                            .push(ReadItem::Failed(Failure::of(&status)), true)
                            .await;
                    }
                };
                loop {
                    match stream.message().await {
                        Ok(Some(response)) => {
                            shared
                                .push(ReadItem::Response(Box::new(response)), false)
                                .await
                        }
                        Ok(None) => return shared.push(ReadItem::End, true).await,
                        Err(status) => {
                            return shared
                                .push(ReadItem::Failed(Failure::of(&status)), true)
                                .await;
                        }
                    }
                }
            })
        };
        Ok(ReadCall {
            shared,
            task: task.abort_handle(),
        })
    }

    /// Calls `then` with every item waiting: at once (on this thread) if any
    /// wait, else from the runtime with the next one. After the last item, with
    /// [`ReadItem::End`]. A second taker replaces the first.
    pub fn take(&self, then: impl FnOnce(Vec<ReadItem>) + Send + 'static) {
        let batch = {
            let mut queue = lock(&self.shared.queue);
            if queue.items.is_empty() {
                if !queue.ended {
                    queue.taker = Some(Box::new(then));
                    return;
                }
                vec![ReadItem::End]
            } else {
                queue.items.drain(..).collect()
            }
        };
        self.shared.room.notify_one();
        then(batch);
    }

    /// Cancels the RPC; a taker waiting gets CANCELLED.
    pub fn cancel(&self) {
        self.task.abort();
        let handed = {
            let mut queue = lock(&self.shared.queue);
            if queue.ended {
                return;
            }
            queue.ended = true;
            queue
                .items
                .push_back(ReadItem::Failed(Failure::cancelled()));
            queue
                .taker
                .take()
                .map(|taker| (taker, queue.items.drain(..).collect::<Vec<_>>()))
        };
        if let Some((taker, batch)) = handed {
            taker(batch);
        }
    }
}

impl Drop for ReadCall {
    fn drop(&mut self) {
        self.task.abort();
    }
}

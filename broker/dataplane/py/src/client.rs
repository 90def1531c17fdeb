//! `ClientChannels`, `AppendCall` and `ReadCall`: the Python client library's
//! appends and reads, carried by the crate's `client` module on a runtime thread
//! of the process's own.
//!
//! Python starts an append with its first message, queues content without waiting
//! (`write`), and hands an asyncio future to `outcome`: the runtime settles it with
//! one `loop.call_soon_threadsafe`, so an acknowledged append costs the event loop
//! one wake-up, where grpc.aio costs one per message and one per answer. A read
//! settles a future with every response that waits (`take`).

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;

use bytes::Bytes;
use dataplane::client::{self, ClientTls, Dialer, Outcome, ReadItem, Sent};
use dataplane::protocol::{AppendRequest, AppendResponse, ReadRequest};
use prost::Message;
use pyo3::{
    exceptions::PyValueError,
    intern,
    prelude::*,
    types::{PyBytes, PyList},
    IntoPyObjectExt,
};

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The process's runtime of client calls (one thread: a client's calls are small
/// and few at a time), made on first use, and made again in a child forked after
/// it, which has the runtime but not its thread.
static RUNTIME: Mutex<Option<(u32, tokio::runtime::Runtime)>> = Mutex::new(None);

fn runtime() -> PyResult<tokio::runtime::Handle> {
    let pid = std::process::id();
    let mut current = lock(&RUNTIME);
    if let Some((of, runtime)) = &*current {
        if *of == pid {
            return Ok(runtime.handle().clone());
        }
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("gazette-client")
        .enable_all()
        .build()?;
    let handle = runtime.handle().clone();
    if let Some((_, parents)) = current.replace((pid, runtime)) {
        // Its thread is the parent's: shutting it down here would wait for it forever.
        std::mem::forget(parents);
    }
    Ok(handle)
}

/// Settles the asyncio `future` of `event_loop` with `value`, through Python's
/// `resolve(future, value)` called on the loop's thread (it skips a future
/// cancelled meanwhile).
fn settle(
    resolve: Py<PyAny>,
    event_loop: Py<PyAny>,
    future: Py<PyAny>,
    value: impl for<'py> FnOnce(Python<'py>) -> PyResult<Bound<'py, PyAny>>,
) {
    // None: the interpreter is finalizing, and nobody waits any more.
    let _ = Python::try_attach(|py| {
        let Ok(value) = value(py) else { return };
        // An error here is a closed loop: its client went away before the answer.
        let _ = event_loop.call_method1(
            py,
            intern!(py, "call_soon_threadsafe"),
            (resolve, future, value),
        );
    });
}

/// An outcome with its response validated (off the GIL) as Python's `pb.validate`
/// would validate it: Err holds the reason, word for word.
type Checked = Result<Result<AppendResponse, String>, client::Failure>;

fn check(outcome: Outcome) -> Checked {
    outcome.map(|response| {
        dataplane::validation::validate_append_response(&response)
            .map(|()| response)
            .map_err(|e| e.to_string())
    })
}

/// What Python gets of an outcome: the AppendResponse serialized, why it is
/// invalid (str), or the failure's (gRPC status code, message).
fn outcome_value(py: Python<'_>, outcome: Checked) -> PyResult<Bound<'_, PyAny>> {
    match outcome {
        Ok(Ok(response)) => Ok(PyBytes::new(py, &response.encode_to_vec()).into_any()),
        Ok(Err(invalid)) => invalid.into_bound_py_any(py),
        Err(failure) => (failure.code as i32, failure.message).into_bound_py_any(py),
    }
}

/// ClientChannels(resolve, max_message_size=8 MiB): a client's channels to broker
/// endpoints, one each, dialed on first use. `resolve(future, value)` settles a
/// future on its loop's thread.
#[pyclass(module = "gazette.dataplane._native", frozen)]
pub struct ClientChannels {
    dialer: Dialer,
    resolve: Py<PyAny>,
    /// The process the channels were dialed in: a forked child dials its own, as
    /// those it inherited are served by its parent's runtime thread.
    pid: AtomicU32,
}

#[pymethods]
impl ClientChannels {
    #[new]
    #[pyo3(signature = (resolve, max_message_size = 8 << 20))]
    fn new(resolve: Py<PyAny>, max_message_size: usize) -> Self {
        ClientChannels {
            dialer: Dialer::new(ClientTls::default(), max_message_size),
            resolve,
            pid: AtomicU32::new(std::process::id()),
        }
    }

    /// TLS of `https://` endpoints from now on (PEM content): the brokers' CA (None:
    /// the platform's roots), and a certificate and its key to present.
    #[pyo3(signature = (ca = None, cert = None, key = None))]
    fn set_tls(
        &self,
        ca: Option<Vec<u8>>,
        cert: Option<Vec<u8>>,
        key: Option<Vec<u8>>,
    ) -> PyResult<()> {
        if cert.is_some() != key.is_some() {
            return Err(PyValueError::new_err(
                "a TLS certificate and its key go together",
            ));
        }
        self.dialer.set_tls(ClientTls { ca, cert, key });
        Ok(())
    }

    /// Starts an Append RPC to `endpoint` (`http://host:port`, `https://host:port`)
    /// with its serialized first AppendRequest and call metadata.
    #[pyo3(signature = (endpoint, first, metadata = None))]
    fn append(
        &self,
        py: Python<'_>,
        endpoint: &str,
        first: &[u8],
        metadata: Option<Vec<(String, String)>>,
    ) -> PyResult<AppendCall> {
        let first = AppendRequest::decode(first)
            .map_err(|e| PyValueError::new_err(format!("AppendRequest: {e}")))?;
        let runtime = self.runtime()?;
        let call = self
            .dialer
            .append(
                &runtime,
                endpoint,
                metadata.as_deref().unwrap_or_default(),
                first,
            )
            .map_err(PyValueError::new_err)?;
        Ok(AppendCall {
            call: Mutex::new(call),
            resolve: self.resolve.clone_ref(py),
            runtime,
        })
    }

    /// Starts a Read RPC to `endpoint` with its serialized ReadRequest and call metadata.
    #[pyo3(signature = (endpoint, request, metadata = None))]
    fn read(
        &self,
        py: Python<'_>,
        endpoint: &str,
        request: &[u8],
        metadata: Option<Vec<(String, String)>>,
    ) -> PyResult<ReadCall> {
        let request = ReadRequest::decode(request)
            .map_err(|e| PyValueError::new_err(format!("ReadRequest: {e}")))?;
        let runtime = self.runtime()?;
        let call = self
            .dialer
            .read(
                &runtime,
                endpoint,
                metadata.as_deref().unwrap_or_default(),
                request,
            )
            .map_err(PyValueError::new_err)?;
        Ok(ReadCall {
            call,
            resolve: self.resolve.clone_ref(py),
        })
    }

    /// Forgets the channels (calls under way keep theirs).
    fn close(&self) {
        self.dialer.clear();
    }

    /// Ends the runtime thread of client calls (calls under way fail), waiting up to
    /// `timeout` seconds for it without the GIL. Python calls it at exit: the thread
    /// must not touch Python (its logging, say, as connections close) while the
    /// interpreter finalizes, which aborts the process. A later call starts another.
    #[staticmethod]
    #[pyo3(signature = (timeout = 1.0))]
    fn shutdown(py: Python<'_>, timeout: f64) {
        let taken = lock(&RUNTIME).take();
        if let Some((pid, runtime)) = taken {
            if pid == std::process::id() {
                let timeout = std::time::Duration::from_secs_f64(timeout.max(0.0));
                py.detach(move || runtime.shutdown_timeout(timeout));
            } else {
                std::mem::forget(runtime); // The parent's (see runtime()).
            }
        }
    }
}

impl ClientChannels {
    /// The runtime to start a call on; in a forked child, after forgetting the
    /// channels of its parent.
    fn runtime(&self) -> PyResult<tokio::runtime::Handle> {
        let runtime = runtime()?;
        let pid = std::process::id();
        if self.pid.swap(pid, Ordering::Relaxed) != pid {
            self.dialer.clear();
        }
        Ok(runtime)
    }
}

/// One Append RPC under way (see `ClientChannels.append`).
#[pyclass(module = "gazette.dataplane._native", frozen)]
pub struct AppendCall {
    call: Mutex<client::AppendCall>,
    resolve: Py<PyAny>,
    runtime: tokio::runtime::Handle,
}

#[pymethods]
impl AppendCall {
    /// Queues a message of `content` (b"": the commit). False when it is not taken:
    /// the queue is full (await `writable`) or the RPC has ended (`done()`).
    fn write(&self, content: &[u8]) -> bool {
        lock(&self.call).try_send(Bytes::copy_from_slice(content)) == Sent::Queued
    }

    /// Settles `future` (with None) once a message would be taken, or the RPC has ended.
    fn writable(&self, py: Python<'_>, event_loop: Py<PyAny>, future: Py<PyAny>) {
        let ready = lock(&self.call).writable();
        let resolve = self.resolve.clone_ref(py);
        self.runtime.spawn(async move {
            ready.await;
            settle(resolve, event_loop, future, |py| {
                Ok(py.None().into_bound(py))
            });
        });
    }

    /// Half-closes the stream: everything is sent.
    fn finish(&self) {
        lock(&self.call).finish();
    }

    /// Whether the RPC has ended (its outcome is known).
    fn done(&self) -> bool {
        lock(&self.call).ended()
    }

    /// Settles `future` with the outcome: the serialized AppendResponse (valid),
    /// why the response is invalid (str), or a failure's (gRPC status code, message).
    fn outcome(&self, py: Python<'_>, event_loop: Py<PyAny>, future: Py<PyAny>) {
        let resolve = self.resolve.clone_ref(py);
        lock(&self.call).on_outcome(move |outcome| {
            let checked = check(outcome);
            settle(resolve, event_loop, future, |py| outcome_value(py, checked));
        });
    }

    /// Cancels the RPC: the broker commits nothing of it (unless it already had).
    fn cancel(&self) {
        lock(&self.call).cancel();
    }
}

/// What Python gets of a batch of a read: serialized ReadResponses, None for the
/// clean end of the stream, a failure's (gRPC status code, message).
fn batch_value(py: Python<'_>, batch: Vec<ReadItem>) -> PyResult<Bound<'_, PyAny>> {
    let items = batch
        .into_iter()
        .map(|item| match item {
            ReadItem::Response(response) => {
                Ok(PyBytes::new(py, &response.encode_to_vec()).into_any())
            }
            ReadItem::End => Ok(py.None().into_bound(py)),
            ReadItem::Failed(failure) => {
                (failure.code as i32, failure.message).into_bound_py_any(py)
            }
        })
        .collect::<PyResult<Vec<_>>>()?;
    Ok(PyList::new(py, items)?.into_any())
}

/// One Read RPC under way (see `ClientChannels.read`).
#[pyclass(module = "gazette.dataplane._native", frozen)]
pub struct ReadCall {
    call: client::ReadCall,
    resolve: Py<PyAny>,
}

#[pymethods]
impl ReadCall {
    /// Settles `future` with a list of what has come (one item at least):
    /// serialized ReadResponses, then None at the stream's clean end, or a
    /// failure's (gRPC status code, message).
    fn take(&self, py: Python<'_>, event_loop: Py<PyAny>, future: Py<PyAny>) {
        let resolve = self.resolve.clone_ref(py);
        self.call.take(move |batch| {
            settle(resolve, event_loop, future, |py| batch_value(py, batch));
        });
    }

    /// Cancels the RPC.
    fn cancel(&self) {
        self.call.cancel();
    }
}

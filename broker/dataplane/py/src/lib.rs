//! `gazette.dataplane._native`: the native data plane as the Python broker starts it.
//!
//! Python calls in here at two seams only: starting and stopping the front door.
//! Every request is served on the crate's own tokio threads; none of them takes the
//! GIL.

use std::{
    net::{SocketAddr, TcpListener as StdListener, ToSocketAddrs},
    path::PathBuf,
    sync::Arc,
    time::Duration,
};

use dataplane::{frontdoor, tls};

mod client;
mod plane;
mod topology;
use pyo3::{exceptions::PyOSError, exceptions::PyValueError, prelude::*};
use tokio::sync::{oneshot, watch};

/// The broker's listening port, served natively (see the crate's `frontdoor`).
///
/// FrontDoor(host, port, backend, cert_file=None, key_file=None, ca_file=None, threads=2,
///           http_backend=None, max_connections=None, first_bytes_timeout=None,
///           header_timeout=None, keepalive=None, process="broker")
/// binds `host:port` at once (port 0: any; `.port` tells which) and serves it on
/// `threads` threads, forwarding the gRPC it does not serve itself to the gRPC server
/// listening on the Unix socket `backend` (None: answer gRPC UNIMPLEMENTED), and any
/// other HTTP request to the HTTP server on the Unix socket `http_backend` (none:
/// 404). `process` names what serves behind it in refusals. `stop(grace)` ends it.
#[pyclass(module = "gazette.dataplane._native")]
struct FrontDoor {
    port: u16,
    runtime: Option<tokio::runtime::Runtime>,
    stop: watch::Sender<Option<Duration>>,
    done: Option<oneshot::Receiver<()>>,
    stats: Arc<frontdoor::Stats>,
    backends: Arc<frontdoor::Backends>,
}

fn bind(host: &str, port: u16) -> PyResult<StdListener> {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let host = if host.is_empty() { "::" } else { host };
    let addrs: Vec<SocketAddr> = (host, port)
        .to_socket_addrs()
        .map_err(|e| PyValueError::new_err(format!("listen address {host}:{port}: {e}")))?
        .collect();
    let mut last = None;
    for addr in addrs {
        match StdListener::bind(addr) {
            Ok(listener) => return Ok(listener),
            Err(e) => last = Some(e),
        }
    }
    if host == "::" {
        // No IPv6 here (some containers): all IPv4 addresses, as gRPC falls back to.
        if let Ok(listener) = StdListener::bind(("0.0.0.0", port)) {
            return Ok(listener);
        }
    }
    Err(PyOSError::new_err(format!(
        "listening on {host}:{port}: {}",
        last.map_or("no address".to_string(), |e| e.to_string())
    )))
}

#[pymethods]
impl FrontDoor {
    #[new]
    // Python's keyword arguments, each optional but the first three.
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (
        host, port, backend, cert_file=None, key_file=None, ca_file=None, threads=2,
        http_backend=None, max_connections=None, first_bytes_timeout=None,
        header_timeout=None, keepalive=None, process=None,
    ))]
    fn new(
        host: &str,
        port: u16,
        backend: Option<PathBuf>,
        cert_file: Option<PathBuf>,
        key_file: Option<PathBuf>,
        ca_file: Option<PathBuf>,
        threads: usize,
        http_backend: Option<PathBuf>,
        max_connections: Option<usize>,
        first_bytes_timeout: Option<f64>,
        header_timeout: Option<f64>,
        keepalive: Option<f64>,
        process: Option<String>,
    ) -> PyResult<Self> {
        let mut limits = frontdoor::Limits::default();
        if let Some(process) = process {
            limits.process = process;
        }
        if let Some(n) = max_connections {
            limits.max_connections = n;
        }
        let seconds = |name: &str, v: f64| {
            if v.is_finite() && v > 0.0 {
                Ok(Duration::from_secs_f64(v))
            } else {
                Err(PyValueError::new_err(format!(
                    "{name} must be a positive number of seconds, not {v}"
                )))
            }
        };
        if let Some(v) = first_bytes_timeout {
            limits.first_bytes_timeout = seconds("first_bytes_timeout", v)?;
        }
        if let Some(v) = header_timeout {
            limits.header_timeout = seconds("header_timeout", v)?;
        }
        if let Some(v) = keepalive {
            limits.keepalive = seconds("keepalive", v)?;
        }
        let acceptor = match (&cert_file, &key_file) {
            (Some(cert), Some(key)) => Some(tokio_rustls::TlsAcceptor::from(
                tls::server_config(cert, key, ca_file.as_deref())
                    .map_err(|e| PyValueError::new_err(e.to_string()))?,
            )),
            (None, None) => None,
            _ => {
                return Err(PyValueError::new_err(
                    "a TLS certificate and its key go together",
                ))
            }
        };
        let listener = bind(host, port)?;
        listener.set_nonblocking(true)?;
        let port = listener.local_addr()?.port();
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads.max(1))
            .thread_name("gazette-dataplane")
            .enable_all()
            .build()?;
        let listener = {
            let _guard = runtime.enter();
            tokio::net::TcpListener::from_std(listener)?
        };
        let (stop, stopped) = watch::channel(None);
        let (done_tx, done) = oneshot::channel();
        let backend = Arc::new(frontdoor::Backends::new(backend, http_backend));
        let stats = Arc::new(frontdoor::Stats::default());
        let served_stats = stats.clone();
        let backends = backend.clone();
        runtime.spawn(async move {
            frontdoor::serve(listener, backend, acceptor, limits, served_stats, stopped).await;
            let _ = done_tx.send(());
        });
        Ok(FrontDoor {
            port,
            runtime: Some(runtime),
            stop,
            done: Some(done),
            stats,
            backends,
        })
    }

    /// Check bearer tokens of gRPC requests with these HMAC `keys` from now on
    /// (None: the broker has no keys, check nothing); `allow_missing` lets
    /// requests without a token through (the `AA==` key).
    #[pyo3(signature = (keys, allow_missing=false))]
    fn set_auth_keys(&self, keys: Option<Vec<Vec<u8>>>, allow_missing: bool) {
        self.backends
            .set_gate(keys.map(|keys| dataplane::auth::Gate::new(keys, allow_missing)));
    }

    /// The bound port.
    #[getter]
    fn port(&self) -> u16 {
        self.port
    }

    /// Counters of the port: connections open, and totals of connections refused
    /// (the limit was reached), closed silent (nothing sent, or no TLS handshake,
    /// in time) and failed accepts.
    fn stats(&self) -> std::collections::HashMap<&'static str, u64> {
        use std::sync::atomic::Ordering::Relaxed;
        let s = &self.stats;
        [
            ("open", s.open.load(Relaxed)),
            ("refused", s.refused.load(Relaxed)),
            ("silent", s.silent.load(Relaxed)),
            ("accept_errors", s.accept_errors.load(Relaxed)),
        ]
        .into_iter()
        .collect()
    }

    /// Stops accepting, lets open connections finish for up to `grace` seconds,
    /// then closes them. Blocks (without the GIL) until then; a second call returns at once.
    fn stop(&mut self, py: Python<'_>, grace: f64) {
        let grace = Duration::from_secs_f64(grace.max(0.0));
        let _ = self.stop.send(Some(grace));
        let done = self.done.take();
        let runtime = self.runtime.take();
        py.detach(move || {
            if let (Some(done), Some(runtime)) = (done, runtime) {
                let _ = runtime.block_on(done);
                runtime.shutdown_timeout(Duration::from_secs(1));
            }
        });
    }
}

impl FrontDoor {
    /// The runtime serving the door (None once stopped): the data plane runs on it.
    pub(crate) fn runtime_handle(&self) -> Option<tokio::runtime::Handle> {
        self.runtime.as_ref().map(|r| r.handle().clone())
    }

    pub(crate) fn backends(&self) -> Arc<frontdoor::Backends> {
        self.backends.clone()
    }
}

impl Drop for FrontDoor {
    fn drop(&mut self) {
        let _ = self.stop.send(Some(Duration::ZERO));
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

/// check_token(keys, authorization, require, spec=None, now=None, allow_missing=False)
///     -> (refusal or None, selects the journal)
///
/// How the data plane authorizes a request: verifies the `authorization` header's
/// bearer token with `keys`, reads its claims as of `now` (default: the clock), checks
/// that they hold every capability bit of `require`, and whether they select the journal
/// of the serialized JournalSpec `spec`. For tests that hold it to the Python server.
#[pyfunction]
#[pyo3(signature = (keys, authorization, require, spec=None, now=None, allow_missing=false))]
fn check_token(
    keys: Vec<Vec<u8>>,
    authorization: Option<&str>,
    require: u32,
    spec: Option<&[u8]>,
    now: Option<f64>,
    allow_missing: bool,
) -> PyResult<(Option<String>, bool)> {
    use prost::Message;
    let now = now.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64())
    });
    let gate = dataplane::auth::Gate::new(keys, allow_missing);
    let claims = match gate.claims(authorization.map(str::as_bytes), now) {
        Err(why) => return Ok((Some(why), false)),
        Ok(None) => return Ok((None, true)),
        Ok(Some(claims)) => claims,
    };
    if let Err(why) = claims.check_capability(require) {
        return Ok((Some(why), false));
    }
    let selects = match spec {
        None => true,
        Some(bytes) => {
            let spec = dataplane::protocol::JournalSpec::decode(bytes)
                .map_err(|e| PyValueError::new_err(format!("JournalSpec: {e}")))?;
            claims.allows(&spec)
        }
    };
    Ok((None, selects))
}

/// validate(type_name, message) -> None, or the reason `message` is invalid
///
/// Decodes the serialized `message` as the protocol type `type_name` (its protobuf
/// name, with or without the `protocol.` package: "ReplicateRequest", "Header.Etcd",
/// "protocol.ProcessSpec.ID") and validates it as the data plane does, giving the
/// text Python's `pb.validate` raises, word for word. Raises ValueError for a type
/// the data plane doesn't validate, or bytes that don't decode as it.
#[pyfunction]
fn validate(type_name: &str, message: &[u8]) -> PyResult<Option<String>> {
    use dataplane::validation as v;
    fn run<M: prost::Message + Default>(
        message: &[u8],
        check: fn(&M) -> v::Verdict,
    ) -> Result<v::Verdict, prost::DecodeError> {
        M::decode(message).map(|m| check(&m))
    }
    let name = type_name.strip_prefix("protocol.").unwrap_or(type_name);
    let verdict = match name {
        "ReplicateRequest" => run(message, v::validate_replicate_request),
        "ReplicateResponse" => run(message, v::validate_replicate_response),
        "AppendRequest" => run(message, v::validate_append_request),
        "AppendResponse" => run(message, v::validate_append_response),
        "ReadRequest" => run(message, v::validate_read_request),
        "Header" => run(message, v::validate_header),
        "Header.Etcd" => run(message, v::validate_etcd),
        "Route" => run(message, v::validate_route),
        "ProcessSpec.ID" => run(message, v::validate_process_id),
        "Fragment" => run(message, v::validate_fragment),
        "LabelSet" => run(message, v::validate_label_set),
        "Label" => run(message, v::validate_label),
        "LabelSelector" => run(message, v::validate_label_selector),
        _ => {
            return Err(PyValueError::new_err(format!(
                "no native validation of {type_name}"
            )))
        }
    };
    match verdict {
        Ok(verdict) => Ok(verdict.err().map(|e| e.to_string())),
        Err(e) => Err(PyValueError::new_err(format!("{type_name}: {e}"))),
    }
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    // The crate's warnings go to Python's logging (logger "dataplane.…"); they
    // are rare by design (throttled), so taking the GIL for them costs nothing.
    // The libraries under it log at debug level on every connection and stream:
    // filtered here, at Warn, their records never reach Python, so no runtime
    // thread takes the GIL to ask Python's level for a new logger of theirs.
    let mut logger = pyo3_log::Logger::default();
    for noisy in [
        "h2",
        "hyper",
        "hyper_util",
        "tonic",
        "tower",
        "rustls",
        "mio",
    ] {
        logger = logger.filter_target(noisy.to_owned(), log::LevelFilter::Warn);
    }
    let _ = logger.install();
    m.add_class::<FrontDoor>()?;
    m.add_class::<topology::Topology>()?;
    m.add_class::<plane::Plane>()?;
    m.add_class::<plane::SpoolHandle>()?;
    m.add_class::<client::ClientChannels>()?;
    m.add_class::<client::AppendCall>()?;
    m.add_class::<client::ReadCall>()?;
    m.add_function(wrap_pyfunction!(check_token, m)?)?;
    m.add_function(wrap_pyfunction!(validate, m)?)?;
    Ok(())
}

//! `Plane`: the native data plane of a broker, as its Python control plane runs it.
//!
//! Python makes one `Plane` beside the front door and the topology, tells it the
//! broker's local assignments after every keyspace update (before publishing the
//! update into the topology, so that a journal resolving here finds its replica),
//! publishes what appends check (store health, the lease, and each store listing
//! of a journal, into its replica's index: [`Plane::replace_stored`]), and drains
//! the plane's outbox whenever the plane writes a byte to the pipe it was given:
//! completed fragments for the persister, asks it answers with [`Plane::answer`],
//! and the stored fragments reads want, whose chunks it hands over with
//! [`Plane::stored_chunk`] (see the crate's `bridge`). The replicas' indexes are
//! the plane's: Python answers ListFragments from them ([`Plane::fragments`]).
//! The front door serves Append, Replicate and Read natively from
//! [`Plane::serve`] on.

use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use dataplane::{
    append::AppendContext,
    bridge::{reads::BridgeReads, Ask, Bridge, BridgeConfig, Event, PeerTls},
    flow::{FlowClock, FlowLimits},
    frontdoor::{Backends, NativeService},
    protocol::{journal_server::JournalServer, process_spec, Fragment},
    pulse::{self, PulseConfig},
    read::ReadContext,
    replica::{LocalAssignment, ReplicaConfig, ReplicaSet},
    replicate::Replicator,
    service::NativeJournal,
    spool::{files::SpoolFile, SpoolConfig},
};
use prost::Message;
use pyo3::{
    exceptions::{PyOSError, PyValueError},
    prelude::*,
    pybacked::PyBackedBytes,
    types::{PyBytes, PyTuple},
    IntoPyObjectExt,
};

use crate::{topology::Topology, FrontDoor};

/// A spool file of the data plane, lent to Python: `dup()` gives Python a
/// descriptor of its own (the index reads through it, the persister uploads it),
/// `serial` tells files apart, `path`/`record_path` name a recoverable file.
#[pyclass(module = "gazette.dataplane._native", frozen)]
pub struct SpoolHandle {
    file: Arc<SpoolFile>,
}

#[pymethods]
impl SpoolHandle {
    #[getter]
    fn serial(&self) -> u64 {
        self.file.serial()
    }

    /// A new descriptor of the file, Python's to close.
    fn dup(&self) -> PyResult<i32> {
        let fd = self.file.as_file().try_clone()?;
        Ok(std::os::fd::IntoRawFd::into_raw_fd(fd))
    }

    #[getter]
    fn path(&self) -> Option<String> {
        self.file.path().map(|p| p.to_string_lossy().into_owned())
    }

    #[getter]
    fn record_path(&self) -> Option<String> {
        self.file
            .record_path()
            .map(|p| p.to_string_lossy().into_owned())
    }

    /// Removes a recoverable file's names (its content is stored): readers keep it.
    fn unlink(&self, py: Python<'_>) -> PyResult<()> {
        let file = self.file.clone();
        py.detach(move || file.unlink()).map_err(PyErr::from)
    }
}

/// Plane(front, topology, wake_fd, **settings) — see the module documentation.
#[pyclass(module = "gazette.dataplane._native")]
pub struct Plane {
    runtime: tokio::runtime::Handle,
    backends: Arc<Backends>,
    bridge: Arc<Bridge>,
    replicas: Arc<ReplicaSet>,
    reads: ReadContext,
    service: NativeService,
    max_message_size: usize,
}

fn read_pem(path: Option<String>) -> PyResult<Option<Vec<u8>>> {
    path.map(|p| std::fs::read(&p).map_err(|e| PyOSError::new_err(format!("{p}: {e}"))))
        .transpose()
}

fn seconds(name: &str, v: f64) -> PyResult<Duration> {
    if v.is_finite() && v >= 0.0 {
        Ok(Duration::from_secs_f64(v))
    } else {
        Err(PyValueError::new_err(format!(
            "{name} must be a non-negative number of seconds, not {v}"
        )))
    }
}

#[pymethods]
impl Plane {
    #[new]
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (
        front, topology, wake_fd, *, spool_dir=None, recoverable=false, sync=false,
        write_timeout=10.0, max_append_rate=0, min_append_rate=None, max_replication=9,
        max_message_size=4<<20, recovery_delay=20.0, resume_head_gaps=true,
        pulse_interval=60.0, auto_suspend=false,
        peer_ca_file=None, peer_cert_file=None, peer_key_file=None,
    ))]
    fn new(
        front: &FrontDoor,
        topology: &Topology,
        wake_fd: i32,
        spool_dir: Option<String>,
        recoverable: bool,
        sync: bool,
        write_timeout: f64,
        max_append_rate: i64,
        min_append_rate: Option<i64>,
        max_replication: usize,
        max_message_size: usize,
        recovery_delay: f64,
        resume_head_gaps: bool,
        pulse_interval: f64,
        auto_suspend: bool,
        peer_ca_file: Option<String>,
        peer_cert_file: Option<String>,
        peer_key_file: Option<String>,
    ) -> PyResult<Self> {
        let runtime = front
            .runtime_handle()
            .ok_or_else(|| PyValueError::new_err("the front door is stopped"))?;
        let backends = front.backends();
        let mut flow_limits = FlowLimits {
            max_append_rate,
            ..FlowLimits::default()
        };
        if let Some(min) = min_append_rate {
            flow_limits.min_append_rate = min;
        }
        let peer_tls = if peer_ca_file.is_some() || peer_cert_file.is_some() {
            Some(PeerTls {
                ca: read_pem(peer_ca_file)?,
                cert: read_pem(peer_cert_file)?,
                key: read_pem(peer_key_file)?,
            })
        } else {
            None
        };
        let config = BridgeConfig {
            flow_limits,
            max_replication,
            max_message_size,
            peer_tls,
        };
        // The pipe is Python's; the plane writes to a descriptor of its own.
        let wake = std::fs::File::from(dup_fd(wake_fd)?);
        let wake = std::sync::Mutex::new(wake);
        let bridge = Arc::new(Bridge::new(
            config.clone(),
            backends.gate(),
            Box::new(move || {
                // Non-blocking: a full pipe already says "drain me".
                let _ = wake.lock().unwrap_or_else(|e| e.into_inner()).write(&[1]);
            }),
        ));
        let spool = SpoolConfig {
            directory: spool_dir.map(Into::into),
            recoverable,
            sync,
            write_timeout: seconds("write_timeout", write_timeout)?,
            ..SpoolConfig::default()
        };
        let replica_config = ReplicaConfig {
            spool: Arc::new(spool),
            recovery_delay: seconds("recovery_delay", recovery_delay)?,
            resume_head_gaps,
            ..ReplicaConfig::default()
        };
        let pulse = PulseConfig {
            interval: seconds("pulse_interval", pulse_interval)?,
            auto_suspend,
        };
        let replicas = Arc::new(ReplicaSet::new(bridge.clone(), replica_config));
        bridge.attach_replicas(&replicas);
        let registry = topology.registry.clone();
        let lease_bridge = bridge.clone();
        let appends = AppendContext {
            registry: registry.clone(),
            replicas: replicas.clone(),
            deps: bridge.clone(),
            flow_clock: FlowClock::new(),
        };
        // Every replica pulses: its primary writes the route into the assignments
        // (what makes the allocator see the journal consistent) before any append.
        pulse::install(&appends, pulse);
        let read_host = Arc::new(BridgeReads {
            bridge: bridge.clone(),
            registry: registry.clone(),
        });
        let reads = ReadContext::new(registry.clone(), replicas.clone(), read_host);
        let native = NativeJournal {
            replicator: Arc::new(Replicator {
                registry: registry.clone(),
                replicas: replicas.clone(),
                check_lease: Arc::new(move || lease_bridge.check_lease()),
            }),
            appends: Some(appends),
            gate: backends.gate(),
            reads: Some(reads.clone()),
        };
        // The door refuses larger messages itself (with Python's status and text);
        // tonic's own limit only backs it.
        let limit = max_message_size + (64 << 10);
        let service = JournalServer::new(native)
            .max_decoding_message_size(limit)
            .max_encoding_message_size(limit);
        Ok(Plane {
            runtime,
            backends,
            bridge,
            replicas,
            reads,
            service,
            max_message_size,
        })
    }

    /// The front door serves Append, Replicate and Read here from now on.
    fn serve(&self) {
        self.backends
            .serve_natively(Some((self.service.clone(), self.max_message_size)));
    }

    /// update_local(assignments) -> journals whose route members changed
    ///
    /// `assignments`: every journal assigned to this broker now, as
    /// (journal, primary, item create revision, assignment lease, route members
    /// [(zone, suffix)] in assignment order).
    #[allow(clippy::type_complexity)]
    fn update_local(
        &self,
        py: Python<'_>,
        assignments: Vec<(String, bool, i64, i64, Vec<(String, String)>)>,
    ) -> Vec<String> {
        let update = assignments
            .into_iter()
            .map(
                |(journal, primary, create_revision, lease, members)| LocalAssignment {
                    journal,
                    primary,
                    create_revision,
                    lease,
                    members: members
                        .into_iter()
                        .map(|(zone, suffix)| process_spec::Id { zone, suffix })
                        .collect(),
                },
            )
            .collect();
        let replicas = self.replicas.clone();
        let runtime = self.runtime.clone();
        py.detach(move || {
            let _guard = runtime.enter();
            replicas.update(update)
        })
    }

    /// Everything the plane has for Python, in order, as tuples:
    /// ("complete", journal, Fragment, SpoolHandle | None, compressed SpoolHandle | None,
    ///  compressed length, confirmed end, continued, at_once, held, LabelSet registers,
    ///  first append time (Unix seconds) | None);
    /// ("ask", id, kind, journal, a, b, JournalSpec | Fragment | str | None);
    /// ("read_stored", id, journal, Fragment, offset, credit); ("read_credit", id);
    /// ("read_cancel", id); ("list_now", journal). Messages are serialized.
    fn drain<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyTuple>>> {
        let events = self.bridge.drain();
        let mut out = Vec::with_capacity(events.len());
        for event in events {
            out.push(event_tuple(py, event)?);
        }
        Ok(out)
    }

    /// answer(id, value=None, error=None, text=None): Python's answer to ask `id`
    /// (`text` for an ask answered with one: "sign_url").
    #[pyo3(signature = (id, value=None, error=None, text=None))]
    fn answer(&self, id: u64, value: Option<i64>, error: Option<String>, text: Option<String>) {
        match (error, text) {
            (Some(error), _) => self.bridge.answer(id, Err(error)),
            (None, Some(text)) => self.bridge.answer_text(id, Ok(text)),
            (None, None) => self.bridge.answer(id, Ok(value)),
        }
    }

    /// stored_chunk(id, data) -> whether the read still wants chunks: the next
    /// decoded chunk of stored read `id` (the bytes are kept, not copied).
    fn stored_chunk(&self, id: u64, data: PyBackedBytes) -> bool {
        self.bridge.stored_chunk(id, bytes::Bytes::from_owner(data))
    }

    /// stored_end(id, error=None): stored read `id` reached the fragment's end, or
    /// failed with `error` (the text its Read RPC fails with).
    #[pyo3(signature = (id, error=None))]
    fn stored_end(&self, id: u64, error: Option<String>) {
        self.bridge.stored_end(id, error);
    }

    /// replace_stored(journal, fragments): a fresh listing of the journal's stores
    /// (serialized Fragments, with their backing store and mod time) replaces the
    /// stored fragments of its replica's index. False: no replica of it here.
    fn replace_stored(
        &self,
        py: Python<'_>,
        journal: &str,
        fragments: Vec<PyBackedBytes>,
    ) -> PyResult<bool> {
        let Some(replica) = self.replicas.get(journal) else {
            return Ok(false);
        };
        py.detach(move || {
            let listing = fragments
                .iter()
                .map(|f| Fragment::decode(&f[..]))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| PyValueError::new_err(format!("listing of {journal}: {e}")))?;
            replica
                .index()
                .replace_stored(listing)
                .map_err(|e| PyValueError::new_err(e.to_string()))
        })?;
        Ok(true)
    }

    /// fragments(journal) -> every fragment of the journal's index (serialized
    /// Fragments, local and stored, in offset order), or None without a replica.
    fn fragments<'py>(&self, py: Python<'py>, journal: &str) -> Option<Vec<Bound<'py, PyBytes>>> {
        let replica = self.replicas.get(journal)?;
        let fragments = replica.index().fragments();
        Some(
            fragments
                .iter()
                .map(|f| PyBytes::new(py, &f.spec.encode_to_vec()))
                .collect(),
        )
    }

    /// mark_skipped(journal, ranges): offset ranges [(begin, end)] the journal
    /// skipped for good; reads jump them once a later listing is applied.
    fn mark_skipped(&self, journal: &str, ranges: Vec<(i64, i64)>) -> bool {
        let Some(replica) = self.replicas.get(journal) else {
            return false;
        };
        replica.index().mark_skipped(&ranges);
        true
    }

    /// The last health check of the store at `url` (None: it passed).
    #[pyo3(signature = (url, failure=None))]
    fn set_store_health(&self, url: &str, failure: Option<String>) {
        self.bridge.set_store_health(url, failure);
    }

    /// Our etcd lease is surely valid for `valid_for` seconds from now (None: in
    /// doubt); `cut_off`: why no peer answers us, while that lasts.
    #[pyo3(signature = (valid_for, cut_off=None))]
    fn set_lease(&self, valid_for: Option<f64>, cut_off: Option<String>) {
        let valid_for = valid_for
            .filter(|v| v.is_finite() && *v > 0.0)
            .map(Duration::from_secs_f64);
        self.bridge.set_lease(valid_for, cut_off);
    }

    /// [(journal, write head)] of the journals this broker is primary of.
    fn write_heads(&self) -> Vec<(String, i64)> {
        self.replicas.write_heads()
    }

    /// Dial the peer at `endpoint` afresh from now on (it stopped answering).
    fn forget_peer(&self, endpoint: &str) {
        self.bridge.forget_peer(endpoint);
    }

    /// Every replica rolls its spool soon, handing what it holds to the persister
    /// (the lease is in doubt).
    fn flush_all(&self) {
        self.replicas.request_flush_all();
    }

    /// How many replicas serve here.
    fn __len__(&self) -> usize {
        self.replicas.len()
    }

    /// Stops every replica (each hands its last fragment over) within `timeout`
    /// seconds; then asks fail. Blocks without the GIL; Python must keep draining
    /// meanwhile from another thread, or call it with `asyncio.to_thread`.
    fn stop(&self, py: Python<'_>, timeout: f64) {
        // Proxied reads end now (their clients go on through another broker); reads
        // served here end as their replicas stop.
        self.reads.stop_proxy_reads();
        let replicas = self.replicas.clone();
        let runtime = self.runtime.clone();
        let timeout = Duration::from_secs_f64(timeout.max(0.0));
        py.detach(move || {
            let _ = runtime.block_on(async {
                tokio::time::timeout(
                    timeout,
                    runtime.spawn(async move { replicas.stop_all().await }),
                )
                .await
            });
        });
    }

    /// Asks fail from now on; nothing more reaches the outbox.
    fn close(&self) {
        self.backends.serve_natively(None);
        self.bridge.close();
    }
}

/// A descriptor of our own of Python's `fd` (Python may close its own meanwhile).
fn dup_fd(fd: i32) -> PyResult<std::os::fd::OwnedFd> {
    // SAFETY: Python keeps `fd` open for the duration of the call that passes it.
    let borrowed = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
    borrowed
        .try_clone_to_owned()
        .map_err(|e| PyOSError::new_err(format!("wake_fd {fd}: {e}")))
}

fn handle(file: Option<&Arc<SpoolFile>>) -> Option<SpoolHandle> {
    file.map(|f| SpoolHandle { file: f.clone() })
}

fn event_tuple<'py>(py: Python<'py>, event: Event) -> PyResult<Bound<'py, PyTuple>> {
    let bytes = |m: &dyn Fn() -> Vec<u8>| PyBytes::new(py, &m());
    match event {
        Event::Complete {
            journal,
            completed,
            at_once,
            held,
        } => {
            let spec = bytes(&|| completed.fragment.spec.encode_to_vec());
            let file = handle(completed.fragment.file.as_ref());
            let (compressed, compressed_len) = match &completed.compressed {
                Some((f, n)) => (handle(Some(f)), *n),
                None => (None, 0),
            };
            let registers = bytes(&|| completed.registers.encode_to_vec());
            let first = completed.first_append_time.and_then(|t| {
                t.duration_since(std::time::UNIX_EPOCH)
                    .ok()
                    .map(|d| d.as_secs_f64())
            });
            let tail = (
                completed.confirmed_end,
                completed.continued,
                at_once,
                held,
                registers,
                first,
            );
            let head = ("complete", journal, spec, file, compressed, compressed_len);
            let mut items: Vec<Bound<'py, PyAny>> = head.into_pyobject(py)?.iter().collect();
            items.extend(tail.into_pyobject(py)?.iter());
            PyTuple::new(py, items)
        }
        Event::Ask { id, ask } => {
            let none = || py.None().into_bound(py);
            let (kind, journal, a, b, spec) = match ask {
                Ask::RefreshListing { journal } => ("refresh_listing", journal, 0, 0, none()),
                Ask::ListingCovers {
                    journal,
                    begin,
                    end,
                } => ("listing_covers", journal, begin, end, none()),
                Ask::CheckpointHead { journal, offset } => {
                    ("checkpoint_head", journal, offset, 0, none())
                }
                Ask::UpdateAssignments { journal, revision } => {
                    ("update_assignments", journal, revision, 0, none())
                }
                Ask::UpdateJournalSpec {
                    journal,
                    revision,
                    spec,
                } => (
                    "update_journal_spec",
                    journal,
                    revision,
                    0,
                    PyBytes::new(py, &spec.encode_to_vec()).into_any(),
                ),
                Ask::AwaitStoreHealth { journal, store } => (
                    "await_store_health",
                    journal,
                    0,
                    0,
                    store.into_bound_py_any(py)?,
                ),
                Ask::HeadResumesAt { journal, index_end } => {
                    ("head_resumes_at", journal, index_end, 0, none())
                }
                Ask::CoverFence { journal, end } => ("cover_fence", journal, end, 0, none()),
                Ask::SignUrl {
                    journal,
                    fragment,
                    ttl,
                } => (
                    "sign_url",
                    journal,
                    ttl.as_secs() as i64,
                    0,
                    PyBytes::new(py, &fragment.encode_to_vec()).into_any(),
                ),
            };
            ("ask", id, kind, journal, a, b, spec).into_pyobject(py)
        }
        Event::ReadStored {
            id,
            fragment,
            offset,
            credit,
        } => {
            let spec = bytes(&|| fragment.encode_to_vec());
            ("read_stored", id, fragment.journal, spec, offset, credit).into_pyobject(py)
        }
        Event::ReadCredit { id } => ("read_credit", id).into_pyobject(py),
        Event::ReadCancel { id } => ("read_cancel", id).into_pyobject(py),
        Event::ListNow { journal } => ("list_now", journal).into_pyobject(py),
    }
}

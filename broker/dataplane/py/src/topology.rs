//! `Topology`: the registry of the native data plane, as Python publishes into it.
//!
//! The broker's keyspace observer calls [`Topology::publish`] after every update
//! with what changed; the data plane resolves journals against it on its own
//! threads. Specs and routes cross as serialized protobuf, decoded here once per
//! publication, never per RPC.

use std::sync::Arc;

use dataplane::{
    protocol::{header, process_spec, Header, JournalSpec, Route},
    registry::{self, Registry},
};
use prost::Message;
use pyo3::{exceptions::PyValueError, prelude::*, types::PyBytes};

/// Topology() — what the data plane knows of the cluster (see the crate's `registry`).
#[pyclass(module = "gazette.dataplane._native", frozen)]
pub struct Topology {
    pub(crate) registry: Arc<Registry>,
}

type Id = (String, String);

fn id((zone, suffix): Id) -> process_spec::Id {
    process_spec::Id { zone, suffix }
}

fn decode<M: Message + Default>(what: &str, bytes: &[u8]) -> PyResult<M> {
    M::decode(bytes).map_err(|e| PyValueError::new_err(format!("{what}: {e}")))
}

#[pymethods]
impl Topology {
    #[new]
    fn new() -> Self {
        Topology {
            registry: Arc::new(Registry::new()),
        }
    }

    /// publish(etcd, local_id, members, journals, removed)
    ///
    /// Applies one keyspace update: `etcd` is the serialized `Header.Etcd` read
    /// through; `local_id` this broker's (zone, suffix), None once its member key is
    /// gone; `members` every member's (zone, suffix, endpoint), or None when no member
    /// changed; `journals` the (name, JournalSpec, Route, consistent) of journals new
    /// or changed, spec and route serialized (the route without endpoints);
    /// `removed` journals gone.
    #[pyo3(signature = (etcd, local_id, members, journals, removed))]
    fn publish(
        &self,
        py: Python<'_>,
        etcd: &[u8],
        local_id: Option<Id>,
        members: Option<Vec<(String, String, String)>>,
        journals: Vec<(String, Vec<u8>, Vec<u8>, bool)>,
        removed: Vec<String>,
    ) -> PyResult<()> {
        let etcd: header::Etcd = decode("Header.Etcd", etcd)?;
        let mut decoded = Vec::with_capacity(journals.len());
        for (name, spec, route, consistent) in journals {
            let spec: JournalSpec = decode("JournalSpec", &spec)?;
            let route: Route = decode("Route", &route)?;
            decoded.push((
                name,
                registry::Journal {
                    spec: Arc::new(spec),
                    route,
                    consistent,
                },
            ));
        }
        let update = registry::Update {
            etcd,
            local_id: local_id.map(id),
            members: members.map(|ms| {
                ms.into_iter()
                    .map(|(zone, suffix, endpoint)| (id((zone, suffix)), endpoint))
                    .collect()
            }),
            journals: decoded,
            removed,
        };
        // Readers on the data plane's threads hold the lock for microseconds; the
        // GIL is let go anyway, so that Python never waits behind them.
        py.detach(|| self.registry.publish(update));
        Ok(())
    }

    /// The etcd revision published last.
    #[getter]
    fn revision(&self) -> i64 {
        self.registry.revision()
    }

    /// From now on, journals that resolve to this broker fail to resolve.
    fn stop_serving_local_replicas(&self) {
        self.registry.stop_serving_local_replicas();
    }

    /// resolve(journal, may_proxy, require_primary, proxy_header=None)
    ///     -> (status, header, consistent)
    ///
    /// Resolves `journal` against what is published now (no wait for a revision), as
    /// the data plane does: the `protocol.Status` value, the serialized `Header` and
    /// whether the assignments hold the route. Raises ValueError when the proxy header
    /// names another cluster or process, or the journal resolves to this broker after
    /// `stop_serving_local_replicas`. For tests and diagnostics.
    #[pyo3(signature = (journal, may_proxy, require_primary, proxy_header=None))]
    fn resolve<'py>(
        &self,
        py: Python<'py>,
        journal: &str,
        may_proxy: bool,
        require_primary: bool,
        proxy_header: Option<&[u8]>,
    ) -> PyResult<(i32, Bound<'py, PyBytes>, bool)> {
        let proxy_header: Option<Header> = proxy_header.map(|b| decode("Header", b)).transpose()?;
        let query = registry::Query {
            may_proxy,
            require_primary,
            proxy_header: proxy_header.as_ref(),
            ..Default::default()
        };
        let res = self
            .registry
            .resolve_now(journal, query)
            .map_err(|e| PyValueError::new_err(e.to_string()))?;
        let header = PyBytes::new(py, &res.header.encode_to_vec());
        Ok((res.status, header, res.consistent))
    }
}

//! What the native data plane knows of the cluster, and journal resolution against it.
//!
//! The Python broker owns the etcd keyspace: it watches it, decodes and validates
//! specs, and runs the allocator. After every keyspace update it *publishes* into a
//! [`Registry`] what the data plane needs to route an RPC without asking Python: the
//! etcd header it has read through, this broker's id, every member's endpoint, and each
//! journal's spec, route and whether its assignments are consistent. Publication is a
//! delta (the journals whose item or assignments changed) applied under one write
//! lock, so a reader sees a keyspace revision whole or not at all.
//!
//! [`Registry::resolve`] then answers what the Python resolver answers
//! (`gazette.broker.server.resolver`, after Gazette's `broker/resolver.go`): the
//! journal's route with endpoints, which process should serve, and a status, first
//! match wins:
//!
//! ```text
//!     no spec (or the caller's claims select none)   JOURNAL_NOT_FOUND
//!     suspended FULL                                 SUSPENDED
//!     require_primary and no primary                 NO_JOURNAL_PRIMARY_BROKER
//!     no members                                     INSUFFICIENT_JOURNAL_BROKERS
//!     not may_proxy and not ours                     NOT_JOURNAL_PRIMARY_BROKER / NOT_JOURNAL_BROKER
//!     otherwise                                      OK
//! ```
//!
//! A non-OK resolution names this broker as its process: it authored the error.
//! A resolution also carries a receiver of the journal's *invalidation*: it changes
//! once the journal's spec or route is published anew, which wakes whoever waits on
//! the journal's spool or pipeline so that they resolve again.

use std::{
    collections::HashMap,
    sync::{Arc, RwLock},
};

use tokio::sync::watch;

use crate::protocol::{header, journal_spec, process_spec, Header, JournalSpec, Route, Status};

/// A journal as published: its spec and the route of its assignments (no endpoints).
#[derive(Clone, Debug, PartialEq)]
pub struct Journal {
    /// The validated spec from etcd.
    pub spec: Arc<JournalSpec>,
    /// Members in assignment-key order, and the index of the primary (or -1).
    pub route: Route,
    /// Whether every assignment's value already holds this route (the primary writes
    /// it; until then the allocator does not count the journal as consistent).
    pub consistent: bool,
}

/// One keyspace update, as Python publishes it.
#[derive(Debug, Default)]
pub struct Update {
    /// The etcd header the keyspace has read through.
    pub etcd: header::Etcd,
    /// This broker's member id, or None once its member key is gone.
    pub local_id: Option<process_spec::Id>,
    /// Every member's endpoint, when any member changed (None: as before).
    pub members: Option<Vec<(process_spec::Id, String)>>,
    /// Journals that are new or whose spec, route or consistency changed.
    pub journals: Vec<(String, Journal)>,
    /// Journals whose spec is gone.
    pub removed: Vec<String>,
}

/// Why a journal could not be resolved at all.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ResolveError {
    /// A proxied request carried another cluster's or another process's header.
    #[error("{0}")]
    Header(String),
    /// The journal resolves to this broker, which no longer serves its replicas.
    #[error("resolver has stopped serving local replicas")]
    Stopped,
    /// The wait for the keyspace to reach the asked revision was given up.
    #[error("the registry was closed")]
    Closed,
}

impl ResolveError {
    /// The status an RPC ends with (the Python broker's `grpc_status_of`).
    pub fn to_status(&self) -> tonic::Status {
        match self {
            ResolveError::Header(text) => tonic::Status::unknown(text.clone()),
            ResolveError::Stopped | ResolveError::Closed => {
                tonic::Status::unavailable(self.to_string())
            }
        }
    }
}

/// How to resolve: Python's `Resolver.resolve` keywords.
#[derive(Clone, Copy, Default)]
pub struct Query<'a> {
    /// Whether another broker may serve the request (this one proxies to it).
    pub may_proxy: bool,
    /// Whether only the primary may serve it.
    pub require_primary: bool,
    /// Resolve no earlier than this etcd revision.
    pub min_etcd_revision: i64,
    /// The header of a request proxied by a peer, checked against ours.
    pub proxy_header: Option<&'a Header>,
    /// Whether the caller's claims select a journal (None: every journal).
    pub authorized: Option<&'a (dyn Fn(&JournalSpec) -> bool + Sync)>,
}

/// The outcome of resolving a journal.
#[derive(Clone, Debug)]
pub struct Resolution {
    /// A `protocol::Status` value.
    pub status: i32,
    /// Who serves (or authored the error), the route with endpoints, our etcd header.
    pub header: Header,
    /// This broker's id as resolved.
    pub local_id: process_spec::Id,
    /// The spec, when the journal exists and the caller may see it.
    pub spec: Option<Arc<JournalSpec>>,
    /// Whether every assignment already holds the route (true without assignments).
    pub consistent: bool,
    /// Changes once the journal is published anew after this resolution.
    pub invalidated: watch::Receiver<u64>,
}

impl Resolution {
    /// Whether this broker is the process that serves the request.
    pub fn is_local(&self) -> bool {
        self.header.process_id.as_ref() == Some(&self.local_id)
    }

    /// The status as the enum (unknown values read as `Ok`'s opposite: never here).
    pub fn status(&self) -> Status {
        Status::try_from(self.status).unwrap_or(Status::JournalNotFound)
    }
}

/// The id a broker resolves with once its member key is gone (Gazette's placeholder).
pub fn missing_id() -> process_spec::Id {
    process_spec::Id {
        zone: "local-BrokerSpec".into(),
        suffix: "missing-from-Etcd".into(),
    }
}

/// Whether two routes name the same members in the same order with the same primary
/// (endpoints aside), as `pb.route_equivalent` and Gazette's `Route.Equivalent`.
pub fn route_equivalent(a: &Route, b: &Route) -> bool {
    a.primary == b.primary && a.members == b.members
}

struct Inner {
    etcd: header::Etcd,
    local_id: Option<process_spec::Id>,
    endpoints: HashMap<process_spec::Id, String>,
    journals: HashMap<String, Arc<Journal>>,
    /// One invalidation counter per journal someone resolved, bumped on republication.
    signals: HashMap<String, watch::Sender<u64>>,
    stopped: bool,
}

/// The published state, shared by every RPC of the data plane.
pub struct Registry {
    inner: RwLock<Inner>,
    revision: watch::Sender<i64>,
}

impl Default for Registry {
    fn default() -> Self {
        Self::new()
    }
}

impl Registry {
    /// An empty registry: every journal resolves JOURNAL_NOT_FOUND until published.
    pub fn new() -> Self {
        Registry {
            inner: RwLock::new(Inner {
                etcd: header::Etcd::default(),
                local_id: None,
                endpoints: HashMap::new(),
                journals: HashMap::new(),
                signals: HashMap::new(),
                stopped: false,
            }),
            revision: watch::Sender::new(0),
        }
    }

    /// Applies one keyspace update, then wakes whoever waits for its revision.
    pub fn publish(&self, update: Update) {
        let revision = update.etcd.revision;
        {
            let mut inner = self.inner.write().unwrap_or_else(|e| e.into_inner());
            inner.etcd = update.etcd;
            inner.local_id = update.local_id;
            if let Some(members) = update.members {
                inner.endpoints = members.into_iter().collect();
            }
            for name in update.removed {
                inner.journals.remove(&name);
                if let Some(signal) = inner.signals.remove(&name) {
                    signal.send_modify(|n| *n += 1);
                }
            }
            for (name, journal) in update.journals {
                if let Some(signal) = inner.signals.get(&name) {
                    signal.send_modify(|n| *n += 1);
                }
                inner.journals.insert(name, Arc::new(journal));
            }
            // Signals nobody holds any more are dropped as journals are republished,
            // so the map tracks journals in use, not every journal ever resolved.
            inner.signals.retain(|_, s| s.receiver_count() > 0);
        }
        self.revision.send_if_modified(|r| {
            let newer = revision > *r;
            if newer {
                *r = revision;
            }
            newer
        });
    }

    /// From now on, a journal that resolves to this broker fails with
    /// [`ResolveError::Stopped`] (the broker is shutting down).
    pub fn stop_serving_local_replicas(&self) {
        self.inner
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .stopped = true;
    }

    /// The etcd revision published last.
    pub fn revision(&self) -> i64 {
        *self.revision.borrow()
    }

    /// The journal as published, if it exists.
    pub fn journal(&self, name: &str) -> Option<Arc<Journal>> {
        let inner = self.inner.read().unwrap_or_else(|e| e.into_inner());
        inner.journals.get(strip_meta(name)).cloned()
    }

    /// Waits until the published revision is at least `revision`.
    pub async fn wait_for_revision(&self, revision: i64) -> Result<(), ResolveError> {
        let mut rx = self.revision.subscribe();
        rx.wait_for(|r| *r >= revision)
            .await
            .map(|_| ())
            .map_err(|_| ResolveError::Closed)
    }

    /// Resolves `journal` (a `;meta` suffix is ignored), waiting first for the
    /// revision the query (or its proxy header) asks for.
    pub async fn resolve(
        &self,
        journal: &str,
        query: Query<'_>,
    ) -> Result<Resolution, ResolveError> {
        let mut min_revision = query.min_etcd_revision;
        if let Some(hdr) = query.proxy_header {
            self.check_proxy_header(hdr)?;
            min_revision = min_revision.max(hdr.etcd.as_ref().map_or(0, |e| e.revision));
        }
        if min_revision > self.revision() {
            self.wait_for_revision(min_revision).await?;
        }
        self.resolve_published(journal, query)
    }

    /// Resolves `journal` against what is published now, without waiting for a
    /// revision; the proxy header, if any, is checked.
    pub fn resolve_now(&self, journal: &str, query: Query<'_>) -> Result<Resolution, ResolveError> {
        if let Some(hdr) = query.proxy_header {
            self.check_proxy_header(hdr)?;
        }
        self.resolve_published(journal, query)
    }

    /// Resolution proper, once the proxy header (if any) was checked.
    fn resolve_published(
        &self,
        journal: &str,
        query: Query<'_>,
    ) -> Result<Resolution, ResolveError> {
        let name = strip_meta(journal);
        // A write lock only to create the journal's invalidation counter the first time.
        let invalidated = self.signal(name);
        let inner = self.inner.read().unwrap_or_else(|e| e.into_inner());
        let local_id = inner.local_id.clone().unwrap_or_else(missing_id);

        let found = inner
            .journals
            .get(name)
            .filter(|j| query.authorized.is_none_or(|allow| allow(&j.spec)));
        let mut route = found.map_or_else(
            || Route {
                primary: -1,
                ..Default::default()
            },
            |j| j.route.clone(),
        );
        route.endpoints = route
            .members
            .iter()
            .map(|m| inner.endpoints.get(m).cloned().unwrap_or_default())
            .collect();

        let primary = usize::try_from(route.primary)
            .ok()
            .and_then(|i| route.members.get(i));
        let mut process_id = if query.require_primary {
            primary.cloned()
        } else if route.members.contains(&local_id) {
            Some(local_id.clone())
        } else {
            None
        };
        let ours = process_id.as_ref() == Some(&local_id);
        if ours && inner.stopped {
            return Err(ResolveError::Stopped);
        }

        let suspended = |spec: &JournalSpec| {
            spec.suspend
                .as_ref()
                .is_some_and(|s| s.level == journal_spec::suspend::Level::Full as i32)
        };
        let status = match found {
            None => Status::JournalNotFound,
            Some(j) if suspended(&j.spec) => Status::Suspended,
            Some(_) if query.require_primary && primary.is_none() => Status::NoJournalPrimaryBroker,
            Some(_) if route.members.is_empty() => Status::InsufficientJournalBrokers,
            Some(_) if !query.may_proxy && !ours => {
                if query.require_primary {
                    Status::NotJournalPrimaryBroker
                } else {
                    Status::NotJournalBroker
                }
            }
            Some(_) => Status::Ok,
        };
        if status != Status::Ok {
            process_id = Some(local_id.clone());
        }
        Ok(Resolution {
            status: status as i32,
            header: Header {
                process_id,
                route: Some(route),
                etcd: Some(inner.etcd),
            },
            local_id,
            spec: found.map(|j| j.spec.clone()),
            // No assignments are vacuously consistent, as in Python.
            consistent: found.is_none_or(|j| j.consistent),
            invalidated,
        })
    }

    /// Completes once `journal`, resolved by `query` after each publication that
    /// touches it (`invalidated`: the receiver of the resolution the caller holds),
    /// no longer satisfies `same`, fails to resolve, or is removed. For RPCs that
    /// must stop waiting on a member once the journal's route or primary moved.
    pub async fn until_changed(
        &self,
        journal: &str,
        query: Query<'_>,
        mut invalidated: watch::Receiver<u64>,
        same: impl Fn(&Resolution) -> bool,
    ) {
        while invalidated.changed().await.is_ok() {
            match self.resolve_now(journal, query) {
                Ok(res) if same(&res) => invalidated = res.invalidated,
                _ => return,
            }
        }
    }

    fn signal(&self, name: &str) -> watch::Receiver<u64> {
        {
            let inner = self.inner.read().unwrap_or_else(|e| e.into_inner());
            if let Some(s) = inner.signals.get(name) {
                return s.subscribe();
            }
        }
        let mut inner = self.inner.write().unwrap_or_else(|e| e.into_inner());
        inner
            .signals
            .entry(name.to_string())
            .or_insert_with(|| watch::Sender::new(0))
            .subscribe()
    }

    /// A proxied request must come from our etcd cluster and be meant for us.
    fn check_proxy_header(&self, hdr: &Header) -> Result<(), ResolveError> {
        let inner = self.inner.read().unwrap_or_else(|e| e.into_inner());
        let theirs = hdr.etcd.as_ref().map_or(0, |e| e.cluster_id);
        if theirs != inner.etcd.cluster_id {
            return Err(ResolveError::Header(format!(
                "request Etcd ClusterId doesn't match our own ({theirs} vs {})",
                inner.etcd.cluster_id
            )));
        }
        let local = inner.local_id.clone().unwrap_or_else(missing_id);
        if let Some(pid) = hdr.process_id.as_ref() {
            if (!pid.zone.is_empty() || !pid.suffix.is_empty()) && *pid != local {
                return Err(ResolveError::Header(format!(
                    "request ProcessId doesn't match our own ({}#{} vs {}#{})",
                    pid.zone, pid.suffix, local.zone, local.suffix
                )));
            }
        }
        Ok(())
    }
}

fn strip_meta(journal: &str) -> &str {
    journal.split_once(';').map_or(journal, |(name, _)| name)
}

#[cfg(test)]
mod tests;

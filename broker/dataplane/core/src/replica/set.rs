//! The set of this broker's replicas, reconciled with its assignments.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use super::{lock, BoxFuture, Replica, ReplicaConfig, ReplicaHost};
use crate::protocol::process_spec;

/// One journal assigned to this broker, as the allocator's state says.
#[derive(Clone, Debug, PartialEq)]
pub struct LocalAssignment {
    pub journal: String,
    /// Whether this broker holds the primary slot.
    pub primary: bool,
    /// The journal item's etcd create revision.
    pub create_revision: i64,
    /// The etcd lease of this broker's assignment.
    pub lease: i64,
    /// The route's members (zone, suffix), in assignment order.
    pub members: Vec<process_spec::Id>,
}

/// What runs beside each replica from its start, given the replica: the pulse
/// daemon (see `crate::pulse::install`). Its future must end once the replica
/// stops, in its own time (it may have a pipeline to give back first): the set
/// waits for it as for the replica's shutdown.
pub type ReplicaDaemon = Arc<dyn Fn(Arc<Replica>) -> BoxFuture<()> + Send + Sync>;

/// Keeps one [`Replica`] per locally assigned journal.
pub struct ReplicaSet {
    host: Arc<dyn ReplicaHost>,
    config: ReplicaConfig,
    state: Mutex<SetState>,
}

struct SetState {
    replicas: HashMap<String, (Arc<Replica>, Vec<process_spec::Id>)>,
    stopped: bool,
    // Serving replicas (and their daemons), old ones included until they shut down.
    tasks: tokio::task::JoinSet<()>,
    daemon: Option<ReplicaDaemon>,
}

impl ReplicaSet {
    pub fn new(host: Arc<dyn ReplicaHost>, config: ReplicaConfig) -> ReplicaSet {
        ReplicaSet {
            host,
            config,
            state: Mutex::new(SetState {
                replicas: HashMap::new(),
                stopped: false,
                tasks: tokio::task::JoinSet::new(),
                daemon: None,
            }),
        }
    }

    /// Runs `daemon` beside every replica from now on, those serving already
    /// included. A hook rather than an argument of [`new`](Self::new): the pulse
    /// needs the broker's `AppendContext`, which holds this set.
    pub fn set_daemon(&self, daemon: ReplicaDaemon) {
        let mut state = lock(&self.state);
        if state.stopped {
            return;
        }
        let serving: Vec<_> = state.replicas.values().map(|(r, _)| r.clone()).collect();
        for rep in serving {
            state.tasks.spawn(daemon(rep));
        }
        state.daemon = Some(daemon);
    }

    /// The replica of `journal`, if this broker serves one.
    pub fn get(&self, journal: &str) -> Option<Arc<Replica>> {
        let state = lock(&self.state);
        if state.stopped {
            return None;
        }
        state.replicas.get(journal).map(|(r, _)| r.clone())
    }

    pub fn len(&self) -> usize {
        lock(&self.state).replicas.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Reconciles replicas with the journals now assigned to this broker; returns
    /// the journals whose route members changed (their streams re-resolve).
    ///
    /// A fresh replica is made when a journal is newly assigned, demoted from
    /// primary, deleted and re-created, or assigned under another lease (this
    /// broker lost its lease and announced again: what its spool holds from before
    /// may be a tail the journal did not keep; the old replica releases it as it
    /// stops). Must run on the async runtime.
    pub fn update(&self, local: Vec<LocalAssignment>) -> Vec<String> {
        let mut state = lock(&self.state);
        if state.stopped {
            return Vec::new();
        }
        let mut prev = std::mem::take(&mut state.replicas);
        let mut changed = Vec::new();
        for a in local {
            if state.replicas.contains_key(&a.journal) {
                continue;
            }
            let reuse = prev.remove(&a.journal).and_then(|(r, members)| {
                let demoted = r.is_primary() && !a.primary;
                let same = !demoted && r.create_revision == a.create_revision && r.lease == a.lease;
                if !same {
                    r.stop(); // Its successor starts now; it shuts down beside it.
                }
                same.then_some((r, members))
            });
            let rep = match reuse {
                Some((rep, members)) => {
                    rep.primary.store(a.primary, Ordering::Release);
                    if members != a.members {
                        rep.route_members(&a.members);
                        changed.push(a.journal.clone());
                    }
                    rep
                }
                None => {
                    self.host.replica_made(&a.journal);
                    let rep = Replica::new(
                        &a.journal,
                        a.primary,
                        a.create_revision,
                        a.lease,
                        self.host.clone(),
                        &self.config,
                    );
                    let serving = rep.clone().serve();
                    match state.daemon.as_ref().map(|d| d(rep.clone())) {
                        Some(daemon) => state.tasks.spawn(async move {
                            tokio::join!(serving, daemon);
                        }),
                        None => state.tasks.spawn(serving),
                    };
                    rep
                }
            };
            state.replicas.insert(a.journal, (rep, a.members));
        }
        for (journal, (rep, _)) in prev {
            rep.stop();
            self.host.replica_gone(&journal);
        }
        // Reap replicas that finished shutting down.
        while state.tasks.try_join_next().is_some() {}
        changed
    }

    /// (journal, write head) of each journal this broker is primary of: where its
    /// replica's index ends (its spool's last commit, or the stores' end).
    pub fn write_heads(&self) -> Vec<(String, i64)> {
        lock(&self.state)
            .replicas
            .values()
            .filter(|(rep, _)| rep.is_primary())
            .map(|(rep, _)| (rep.journal().to_owned(), rep.index().end_offset()))
            .collect()
    }

    /// Asks every replica to roll its spool soon, handing what it holds to the
    /// persister (the broker's lease is in doubt).
    pub fn request_flush_all(&self) {
        for (rep, _) in lock(&self.state).replicas.values() {
            rep.request_flush();
        }
    }

    /// Stops every replica and makes none from now on; returns once each has shut
    /// down (its last fragment handed to the persister).
    pub async fn stop_all(&self) {
        let mut tasks = {
            let mut state = lock(&self.state);
            state.stopped = true;
            for (rep, _) in state.replicas.values() {
                rep.stop();
            }
            state.replicas.clear();
            std::mem::take(&mut state.tasks)
        };
        while tasks.join_next().await.is_some() {}
    }
}

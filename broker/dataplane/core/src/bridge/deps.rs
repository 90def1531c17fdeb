//! [`AppendDeps`] of a running broker: what appends read of the bridge.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use tokio::sync::watch;
use tonic::metadata::{MetadataMap, MetadataValue};

use super::{journal_of, lock, revision_of, Ask, Bridge, FENCE_STEP};
use crate::append::{AppendDeps, IndexSummary};
use crate::flow::FlowLimits;
use crate::pipeline::Dial;
use crate::protocol::journal_client::JournalClient;
use crate::protocol::{journal_spec, process_spec, JournalSpec};
use crate::registry::Resolution;
use crate::replica::BoxFuture;

/// How a raise of the fence ended, for whoever waits on it (None: under way).
pub(super) type Raised = watch::Receiver<Option<Result<(), String>>>;

/// The acknowledgement fence of one journal as its primary has it.
pub(super) struct Fence {
    // Whose fence this is: a raise asked for by a replaced replica must not count
    // for its successor, which takes the fence over afresh.
    pub(super) generation: u64,
    // Acknowledgements may reach here without asking (-1: not owned yet).
    pub(super) covered: i64,
    // A raise under way: what it will cover, and its outcome for whoever waits.
    pub(super) raising: Option<(i64, Raised)>,
}

impl AppendDeps for Bridge {
    fn flow_limits(&self) -> FlowLimits {
        self.config.flow_limits
    }

    fn check_lease(&self) -> Result<(), String> {
        Bridge::check_lease(self)
    }

    fn dial(&self) -> Dial {
        let max = self.config.max_message_size + (64 << 10);
        let channels = self.channels.clone();
        Arc::new(move |_: &process_spec::Id, endpoint: &str| {
            if endpoint.is_empty() {
                return Err("peer has no endpoint (its BrokerSpec is missing)".into());
            }
            Ok(JournalClient::new(channels.get(endpoint)?)
                .max_decoding_message_size(max)
                .max_encoding_message_size(max))
        })
    }

    fn peer_metadata(&self, journal: &str, capability: u32) -> MetadataMap {
        let mut md = MetadataMap::new();
        if let Some(token) = self.peer_token(journal, capability) {
            if let Ok(v) = MetadataValue::try_from(format!("Bearer {token}")) {
                md.insert("authorization", v);
            }
        }
        md
    }

    fn desired_replication(&self, spec: &JournalSpec) -> usize {
        use journal_spec::suspend::Level;
        let r = match spec.suspend.as_ref().map(|s| s.level) {
            Some(l) if l == Level::Partial as i32 => 1,
            Some(l) if l == Level::Full as i32 => 0,
            _ => spec.replication.max(0) as usize,
        };
        r.min(self.config.max_replication)
    }

    fn update_assignments(&self, res: &Resolution) -> BoxFuture<Result<i64, String>> {
        self.ask_revision(Ask::UpdateAssignments {
            journal: journal_of(res),
            revision: revision_of(res),
        })
    }

    fn update_journal_spec(
        &self,
        res: &Resolution,
        spec: JournalSpec,
    ) -> BoxFuture<Result<i64, String>> {
        self.ask_revision(Ask::UpdateJournalSpec {
            journal: spec.name.clone(),
            revision: revision_of(res),
            spec: Box::new(spec),
        })
    }

    fn store_healthy(&self, spec: &JournalSpec) -> bool {
        let Some(store) = spec.fragment.as_ref().and_then(|f| f.stores.first()) else {
            return true;
        };
        let health = self.store_health.read().unwrap_or_else(|e| e.into_inner());
        matches!(health.get(store), Some(None))
    }

    fn await_store_health(&self, spec: &JournalSpec) -> BoxFuture<Option<String>> {
        let Some(store) = spec.fragment.as_ref().and_then(|f| f.stores.first()) else {
            return Box::pin(async { None });
        };
        let asked = self.ask(Ask::AwaitStoreHealth {
            journal: spec.name.clone(),
            store: store.clone(),
        });
        Box::pin(async move { asked.await.err() })
    }

    /// What the replica's own index says: its spool's commits, and the last store
    /// listing Python published into it.
    fn index(&self, journal: &str) -> IndexSummary {
        let Some(index) = self.replica_index(journal) else {
            return IndexSummary::default();
        };
        let (begin, end, mod_time) = index.summary();
        IndexSummary {
            first_refresh_done: index.first_refresh_done(),
            begin,
            end,
            mod_time,
        }
    }

    /// Until Python published a first store listing into the replica's index (at
    /// once without a replica: the append resolves again, and finds none).
    fn wait_first_refresh(&self, journal: &str) -> BoxFuture<()> {
        let index = self.replica_index(journal);
        Box::pin(async move {
            if let Some(index) = index {
                index.wait_first_refresh().await;
            }
        })
    }

    fn head_resumes_at(
        &self,
        journal: &str,
        index_end: i64,
    ) -> BoxFuture<Result<Option<i64>, String>> {
        self.ask(Ask::HeadResumesAt {
            journal: journal.to_owned(),
            index_end,
        })
    }

    fn cover_fence(&self, journal: &str, end: i64) -> Option<BoxFuture<Result<(), String>>> {
        let mut fences = lock(&self.fences);
        let fence = fences.entry(journal.to_owned()).or_insert_with(|| Fence {
            generation: self.fence_generations.fetch_add(1, Ordering::Relaxed),
            covered: -1,
            raising: None,
        });
        let generation = fence.generation;
        let covered = end <= fence.covered;
        // Raise ahead once half the step is used, so that an append never waits for
        // it unless appends outrun an etcd write by half a step.
        let early = covered && end > fence.covered - FENCE_STEP / 2;
        if covered && !early {
            return None;
        }
        let waiter = match &fence.raising {
            Some((target, rx)) if *target >= end => rx.clone(),
            _ => {
                let target = if covered { fence.covered + 1 } else { end };
                let (tx, rx) = watch::channel(None);
                fence.raising = Some((target, rx.clone()));
                let asked = self.ask(Ask::CoverFence {
                    journal: journal.to_owned(),
                    end: target,
                });
                let fences = self.fences.clone();
                let journal = journal.to_owned();
                tokio::spawn(async move {
                    let outcome = asked.await;
                    let mut all = lock(&fences);
                    let ours = all.get_mut(&journal).filter(|f| f.generation == generation);
                    if let Some(fence) = ours {
                        if let Ok(Some(now)) = &outcome {
                            fence.covered = fence.covered.max(*now);
                        }
                        if fence.raising.as_ref().is_some_and(|(t, _)| *t == target) {
                            fence.raising = None;
                        }
                    }
                    drop(all);
                    let outcome = match outcome {
                        Ok(Some(now)) if now >= target => Ok(()),
                        Ok(_) => Err(format!(
                            "the acknowledgement fence of {journal} does not reach {target}"
                        )),
                        Err(e) => Err(e),
                    };
                    let _ = tx.send(Some(outcome));
                });
                rx
            }
        };
        drop(fences);
        if covered {
            return None;
        }
        let mut waiter = waiter;
        Some(Box::pin(async move {
            match waiter.wait_for(|r| r.is_some()).await {
                Ok(r) => r.clone().unwrap_or(Ok(())),
                Err(_) => Err("the acknowledgement fence was not raised".into()),
            }
        }))
    }
}

//! The pulse daemon, behaviour by behaviour, after the Python pulse tests of
//! `broker/tests/server/test_replica.py`: this broker's registry and replica set
//! with the append tests' fake of the Python broker, and journals whose route is
//! this broker alone, so nothing leaves the process and tokio's paused clock
//! drives every interval.

use std::sync::Arc;
use std::time::Duration;

use super::*;
use crate::append::tests::{spec_of, FakeDeps};
use crate::append::IndexSummary;
use crate::flow::FlowClock;
use crate::protocol::{journal_spec, process_spec, Route};
use crate::registry::{Journal, Registry, Update};
use crate::replica::{LocalAssignment, ReplicaConfig, ReplicaSet};
use crate::replicate::tests::{etcd, local as peer_id, primary as local_id, Host, JOURNAL};

const INTERVAL: Duration = PULSE_INTERVAL;

struct Broker {
    registry: Arc<Registry>,
    replicas: Arc<ReplicaSet>,
    deps: Arc<FakeDeps>,
}

impl Broker {
    fn new() -> Broker {
        Broker {
            registry: Arc::new(Registry::new()),
            replicas: Arc::new(ReplicaSet::new(
                Arc::new(Host::default()),
                ReplicaConfig::default(),
            )),
            deps: Arc::default(),
        }
    }

    fn ctx(&self) -> AppendContext {
        AppendContext {
            registry: self.registry.clone(),
            replicas: self.replicas.clone(),
            deps: self.deps.clone(),
            flow_clock: FlowClock::new(),
        }
    }

    /// Publishes the journal at `revision` with `members`, `primary` the index of
    /// its primary, and replication of as many members.
    fn publish(
        &self,
        revision: i64,
        members: Vec<process_spec::Id>,
        primary: i32,
        consistent: bool,
    ) {
        self.replicas.update(vec![LocalAssignment {
            journal: JOURNAL.into(),
            primary: members[primary as usize] == local_id(),
            create_revision: 1,
            lease: 7,
            members: members.clone(),
        }]);
        self.registry.publish(Update {
            etcd: etcd(revision),
            local_id: Some(local_id()),
            members: Some(vec![
                (local_id(), "http://unused:1".into()),
                (peer_id(), "http://unused:2".into()),
            ]),
            journals: vec![(
                JOURNAL.into(),
                Journal {
                    spec: Arc::new(spec_of(members.len())),
                    route: Route {
                        members,
                        primary,
                        endpoints: vec![],
                    },
                    consistent,
                },
            )],
            removed: vec![],
        });
    }

    /// This broker alone, primary.
    fn publish_alone(&self, revision: i64, consistent: bool) {
        self.publish(revision, vec![local_id()], 0, consistent);
    }

    /// Pulses that got past resolution (each asks the replication it wants).
    fn pulses(&self) -> usize {
        *self.deps.replication_asked.lock().unwrap()
    }

    fn assignment_updates(&self) -> usize {
        *self.deps.assignment_updates.lock().unwrap()
    }

    /// The spool's end as the idle pipeline has it (None: no pipeline).
    fn pipeline_end(&self) -> Option<i64> {
        let slot = self.replicas.get(JOURNAL)?.try_hold_pipeline()?;
        slot.as_ref().map(|p| p.spool().end())
    }

    async fn stop(self) {
        tokio::time::timeout(Duration::from_secs(10), self.replicas.stop_all())
            .await
            .expect("replicas and their pulses stop without an abort grace");
    }
}

/// Lets the daemons run until `cond` holds (the clock stands still meanwhile).
async fn until(what: &str, cond: impl Fn() -> bool) {
    for _ in 0..10_000 {
        if cond() {
            return;
        }
        tokio::task::yield_now().await;
    }
    panic!("never came: {what}");
}

/// Lets the daemons run as far as they go without the clock moving.
async fn settle() {
    for _ in 0..1_000 {
        tokio::task::yield_now().await;
    }
}

/// Moves the clock `n` intervals on, letting the daemons run after each.
async fn intervals(n: u32) {
    for _ in 0..n {
        tokio::time::advance(INTERVAL).await;
        settle().await;
    }
}

#[tokio::test(start_paused = true)]
async fn a_primary_pulses_at_once_and_writes_its_route_into_the_assignments() {
    let b = Broker::new();
    *b.deps.next_revision.lock().unwrap() = 11;
    b.publish_alone(10, false);
    install(&b.ctx(), PulseConfig::default());
    // The pulse synchronised a pipeline, then found the assignments behind the
    // route: it writes them and reads through the revision of its write.
    until("the assignments are written", || {
        b.assignment_updates() == 1
    })
    .await;
    assert_eq!(b.pulses(), 0);
    b.publish_alone(11, true); // What the Python broker publishes after the write.
    until("the pulse completes", || b.pipeline_end() == Some(0)).await;
    assert_eq!((b.pulses(), b.assignment_updates()), (1, 1));
    settle().await;
    assert_eq!(b.pulses(), 1); // Its own write woke no second pulse.
    b.stop().await;
}

#[tokio::test(start_paused = true)]
async fn only_the_primary_pulses_past_resolution() {
    let b = Broker::new();
    b.publish(10, vec![peer_id(), local_id()], 0, false);
    install(&b.ctx(), PulseConfig::default());
    settle().await;
    intervals(2).await; // Pulsed three times, each ending at resolution.
    assert_eq!((b.pulses(), b.assignment_updates()), (0, 0));
    assert_eq!(b.pipeline_end(), None);
    // Promoted: the route change pulses at once, and this time it gets through.
    b.publish_alone(11, true);
    until("the new primary pulses", || b.pulses() == 1).await;
    until("its pipeline is built", || b.pipeline_end() == Some(0)).await;
    b.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_route_change_pulses_again_and_so_does_every_interval() {
    let b = Broker::new();
    b.publish_alone(10, true);
    install(&b.ctx(), PulseConfig::default());
    until("the first pulse", || b.pulses() == 1).await;
    b.publish_alone(11, true);
    until("a pulse after the route change", || b.pulses() == 2).await;
    tokio::time::advance(INTERVAL - Duration::from_secs(1)).await;
    settle().await;
    assert_eq!(b.pulses(), 2);
    tokio::time::advance(Duration::from_secs(1)).await;
    until("a pulse after the interval", || b.pulses() == 3).await;
    intervals(2).await;
    assert_eq!(b.pulses(), 5);
    b.stop().await;
}

/// Pulses `ticks` quiet intervals; how many suspensions were asked for.
async fn suspensions_after(b: &Broker, ticks: u32) -> Vec<journal_spec::Suspend> {
    intervals(ticks).await;
    let updates = b.deps.spec_updates.lock().unwrap().clone();
    updates.into_iter().filter_map(|s| s.suspend).collect()
}

#[tokio::test(start_paused = true)]
async fn quiet_intervals_turn_auto_suspend_on_and_a_route_change_starts_them_over() {
    let b = Broker::new();
    // The spec update's revision never comes: the pulse that asked gives up.
    *b.deps.next_revision.lock().unwrap() = 1000;
    b.publish_alone(10, true);
    let config = PulseConfig {
        auto_suspend: true,
        ..PulseConfig::default()
    };
    install(&b.ctx(), config);
    until("the first pulse", || b.pulses() == 1).await;
    assert_eq!(
        suspensions_after(&b, AUTO_SUSPEND_STABLE_TICKS - 1).await,
        []
    );
    b.publish_alone(11, true); // Unstable again.
    until("the pulse of the route change", || b.pulses() == 16).await;
    let ticks = AUTO_SUSPEND_STABLE_TICKS - 1;
    assert_eq!(suspensions_after(&b, ticks).await, []);
    // Quiet long enough: the journal's content is all persisted (an empty
    // index), so the pulse suspends it fully.
    let suspended = suspensions_after(&b, 1).await;
    assert_eq!(suspended.len(), 1);
    assert_eq!(
        suspended[0].level,
        journal_spec::suspend::Level::Full as i32
    );
    b.stop().await;
}

#[tokio::test(start_paused = true)]
async fn without_auto_suspend_quiet_journals_stay_as_they_are() {
    let b = Broker::new();
    b.publish_alone(10, true);
    install(&b.ctx(), PulseConfig::default());
    until("the first pulse", || b.pulses() == 1).await;
    let ticks = AUTO_SUSPEND_STABLE_TICKS + 1;
    assert_eq!(suspensions_after(&b, ticks).await, []);
    assert_eq!(b.pulses(), 1 + ticks as usize);
    b.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_pulse_that_outlasts_its_interval_is_given_up_and_tried_again() {
    let b = Broker::new();
    // The revision of the assignments' write is never published.
    *b.deps.next_revision.lock().unwrap() = 50;
    b.publish_alone(10, false);
    install(&b.ctx(), PulseConfig::default());
    until("the first write", || b.assignment_updates() == 1).await;
    intervals(1).await; // Given up: aborted while it waited, so at once.
    assert_eq!(b.assignment_updates(), 1);
    intervals(1).await; // The next interval pulses again.
    assert_eq!(b.assignment_updates(), 2);
    b.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_due_head_recovery_wakes_the_pulse_before_the_interval() {
    let b = Broker::new();
    // Stored through 100, spools at 0: a head gap, whose fence says 100.
    *b.deps.index.lock().unwrap() = IndexSummary {
        first_refresh_done: true,
        begin: 0,
        end: 100,
        mod_time: 1,
    };
    *b.deps.resumes_at.lock().unwrap() = Some(100);
    b.publish_alone(10, true);
    install(&b.ctx(), PulseConfig::default());
    until("the first pulse", || b.pulses() == 1).await;
    let replica = b.replicas.get(JOURNAL).unwrap();
    let due = replica.head_recovery_due().expect("the gap is timed");
    assert_eq!(b.pipeline_end(), Some(0)); // Refused: the gap is too young.

    // At the due time the pulse asks for a listing, and once it is applied,
    // pulses again and resumes the journal at the end of its stored fragments.
    tokio::time::advance(crate::replica::DEFAULT_RECOVERY_DELAY + RECOVERY_RECHECK).await;
    until("the journal resumes at 100", || {
        b.pipeline_end() == Some(100)
    })
    .await;
    assert!(tokio::time::Instant::now() < due + INTERVAL);
    assert_eq!(replica.head_recovery_due(), None);
    b.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_stopping_replica_ends_the_pulse_it_is_waiting_on() {
    let b = Broker::new();
    *b.deps.next_revision.lock().unwrap() = 50; // Never published.
    b.publish_alone(10, false);
    let ctx = b.ctx();
    let replica = ctx.replicas.get(JOURNAL).unwrap();
    let pulsing = tokio::spawn(run(ctx, replica.clone(), PulseConfig::default()));
    until("the pulse waits on its write", || {
        b.assignment_updates() == 1
    })
    .await;
    replica.stop();
    tokio::time::timeout(Duration::from_secs(1), pulsing)
        .await
        .expect("the pulse ends with its replica")
        .unwrap();
    b.stop().await;
}

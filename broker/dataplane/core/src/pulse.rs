//! The pulse daemon: one per local replica, after the Python
//! `Replica._pulse_daemon` and `Service.pulse` (Gazette's `pulseDaemon` in
//! `broker/replica.go`).
//!
//! A pulse is a zero-byte append through the append state machine, run without
//! a client: at once when the replica starts, again after every change of the
//! journal's route (its resolution's invalidation), and every
//! [`PULSE_INTERVAL`]. It is what keeps a journal consistent when nobody appends:
//!
//! - only the primary gets past resolution (a pulse never proxies, so the others
//!   end at NOT_JOURNAL_PRIMARY_BROKER at once);
//! - the primary's pulse builds the pipeline over the current route and
//!   synchronises every member's spool with it, which also settles tails that
//!   replicas held back;
//! - it writes the route into the journal's assignments (UpdateAssignments),
//!   without which the allocator does not see the journal as consistent;
//! - periodic pulses find a broken peer connection before an append does;
//! - it wakes when a head gap may recover ([`Replica::head_recovery_due`],
//!   [`Replica::head_gap_listed`]), since no client append may come to do it;
//! - with auto-suspend on, a pulse after [`AUTO_SUSPEND_STABLE_TICKS`] quiet
//!   intervals asks to suspend the journal once its content is persisted.
//!
//! A pulse that runs past the interval is aborted and, past the append's abort
//! grace, abandoned. [`install`] runs the daemon beside each replica of a
//! [`ReplicaSet`](crate::replica::ReplicaSet); [`run`] is the daemon itself.

use std::future::pending;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::{sleep, sleep_until, Instant};

use crate::append::{AppendContext, AppendFsm, State};
use crate::protocol::{append_request, AppendRequest, Status};
use crate::registry::ResolveError;
use crate::replica::Replica;

/// How often a journal is pulsed without a route change (Gazette's
/// `healthCheckInterval`).
pub const PULSE_INTERVAL: Duration = Duration::from_secs(60);

/// With auto-suspend on, how many intervals must pass without a route change
/// before a pulse asks to suspend a journal whose content is persisted. Not at
/// once: clients that resumed the journal may be about to append, a new primary
/// may not have listed fragments stored already, and a journal whose topology
/// keeps changing should not have its replication changed too.
pub const AUTO_SUSPEND_STABLE_TICKS: u32 = 15;

/// The least time between pulses woken for a head recovery: a pulse that ends
/// before it asks the replica (its pipeline fails, say) must not spin.
pub const RECOVERY_RECHECK: Duration = Duration::from_millis(100);

/// How the daemon pulses.
#[derive(Clone, Debug)]
pub struct PulseConfig {
    pub interval: Duration,
    /// `--broker.auto-suspend`: quiet journals are suspended once persisted.
    pub auto_suspend: bool,
}

impl Default for PulseConfig {
    fn default() -> Self {
        PulseConfig {
            interval: PULSE_INTERVAL,
            auto_suspend: false,
        }
    }
}

/// Runs the pulse daemon beside every replica of `ctx.replicas`, those serving
/// already included (see [`ReplicaSet::set_daemon`](crate::replica::ReplicaSet::set_daemon)).
///
/// A daemon's context holds the set, which holds the daemon's task until its
/// replica stops: [`ReplicaSet::stop_all`](crate::replica::ReplicaSet::stop_all)
/// ends them all (as it must run anyway, to hand the last fragments over).
pub fn install(ctx: &AppendContext, config: PulseConfig) {
    let set = Arc::downgrade(&ctx.replicas);
    let (registry, deps, flow_clock) = (ctx.registry.clone(), ctx.deps.clone(), ctx.flow_clock);
    ctx.replicas.set_daemon(Arc::new(move |replica| {
        let Some(replicas) = set.upgrade() else {
            return Box::pin(async {});
        };
        let ctx = AppendContext {
            registry: registry.clone(),
            replicas,
            deps: deps.clone(),
            flow_clock,
        };
        Box::pin(run(ctx, replica, config.clone()))
    }));
}

/// Pulses `replica`'s journal until the replica stops (see the module
/// documentation).
pub async fn run(ctx: AppendContext, replica: Arc<Replica>, config: PulseConfig) {
    let stopped = replica.stopped();
    tokio::pin!(stopped);
    // Intervals since the route last changed.
    let mut stable_ticks = 0;
    while !replica.is_stopping() {
        let invalidated = pulse(&ctx, &replica, &config, stable_ticks).await;
        let route_changed = async {
            match invalidated {
                // An error (the journal's signal is gone: it was removed) is a change too.
                Some(mut rx) => {
                    let _ = rx.changed().await;
                }
                None => pending().await,
            }
        };
        let recovery = replica.head_recovery_due();
        let recovery_due = async {
            match recovery {
                Some(due) => sleep_until(due.max(Instant::now()) + RECOVERY_RECHECK).await,
                None => pending().await,
            }
        };
        // Only full intervals count as stable: pulses woken for a head recovery
        // neither reset the count nor add to it (they may come every
        // RECOVERY_RECHECK, and a recovering journal is not a quiet one).
        tokio::select! {
            () = &mut stopped => return,
            () = sleep(config.interval) => stable_ticks += 1,
            () = route_changed => stable_ticks = 0,
            () = recovery_due => {}
            () = replica.head_gap_listed() => {}
        }
    }
}

/// One pulse; returns the invalidation of the journal's last resolution, if it
/// was resolved.
async fn pulse(
    ctx: &AppendContext,
    replica: &Replica,
    config: &PulseConfig,
    stable_ticks: u32,
) -> Option<watch::Receiver<u64>> {
    use append_request::Suspend;
    let suspend = if config.auto_suspend && stable_ticks >= AUTO_SUSPEND_STABLE_TICKS {
        Suspend::IfFlushed
    } else {
        Suspend::NoResume
    };
    let req = AppendRequest {
        journal: replica.journal().to_owned(),
        do_not_proxy: true,
        suspend: suspend as i32,
        ..AppendRequest::default()
    };
    let mut fsm = AppendFsm::new(ctx.clone(), req, None);
    let interval = config.interval;
    let stopped = replica.stopped();
    // A stopping replica aborts its pulse, as Gazette's replica context does: it
    // then hands back the pipeline the shutdown waits for.
    let give_up = async move {
        tokio::select! {
            () = sleep(interval) => {}
            () = stopped => {}
        }
    };
    let no_content = None::<futures_util::stream::Empty<_>>;
    fsm.run_bounded(no_content, give_up).await;
    if fsm.state != State::Finished && !expected_failure(&fsm, replica) {
        tracing::warn!(
            "journal pulse of {} failed (will retry): status {:?}, {}",
            replica.journal(),
            fsm.resolved.as_ref().map(|r| r.status()),
            fsm.err.as_ref().map_or("-", |e| e.message())
        );
    }
    fsm.resolved.map(|r| r.invalidated)
}

/// Whether a pulse ended as pulses of a healthy broker do: at a replica that is
/// not the primary, at a journal deleted or suspended, or because its replica or
/// the broker is stopping.
fn expected_failure(fsm: &AppendFsm, replica: &Replica) -> bool {
    let status = fsm.resolved.as_ref().map(|r| r.status());
    let expected_status = matches!(
        status,
        Some(
            Status::NotJournalPrimaryBroker
                | Status::NoJournalPrimaryBroker
                | Status::JournalNotFound
                | Status::Suspended
        )
    );
    let stopping = fsm.err.as_ref().is_some_and(|e| {
        e.code() == tonic::Code::Cancelled
            || [ResolveError::Stopped, ResolveError::Closed]
                .iter()
                .any(|r| e.message() == r.to_string())
    });
    expected_status || stopping || replica.is_stopping()
}

#[cfg(test)]
mod tests;

//! ValidatePreconditions: what must hold of the journal before an append streams
//! content (the Python `AppendFSM._on_validate_preconditions`): the index loaded and
//! the store healthy, registers as the client expects, the spools at the journal's
//! end (or a head gap recovered past), the client's explicit offset, and the
//! suspension modes.

use std::sync::Arc;

use tonic::Status as RpcStatus;

use super::{
    journal_may_write, now_seconds, AppendDeps, AppendFsm, State, DEFAULT_FLUSH_INTERVAL_S,
};
use crate::labels;
use crate::protocol::{append_request, journal_spec, JournalSpec, Status};

impl AppendFsm {
    pub(super) async fn on_validate_preconditions(&mut self) {
        let spec = self.spec();
        let journal = self.req.journal.clone();
        let deps = self.ctx.deps.clone();
        let index = deps.index(&journal);
        if !(index.first_refresh_done && deps.store_healthy(&spec) && !self.invalidated()) {
            let waited = self
                .race(await_index_and_store(&deps, &journal, &spec))
                .await;
            let Some(health_err) = waited else {
                self.state = State::Resolve;
                return;
            };
            if let Some(why) = health_err {
                self.set_status(Status::FragmentStoreUnhealthy);
                return self.fail(RpcStatus::unknown(why));
            }
        }
        let index = deps.index(&journal);
        let pln = self.pipeline();
        let suspend = spec.suspend.unwrap_or_default();
        let fragment = spec.fragment.clone().unwrap_or_default();
        let flush_s = fragment
            .flush_interval
            .as_ref()
            .map_or(0, |d| d.seconds)
            .max(0);
        let flush_s = if flush_s == 0 {
            DEFAULT_FLUSH_INTERVAL_S
        } else {
            flush_s
        };
        let index_dirty = index.mod_time == 0 || index.mod_time > now_seconds() - flush_s;
        let spool_spec = pln.spool().spec();
        let spool_end = spool_spec.end;
        let max_offset = spool_end.max(index.end);

        if let Some(check) = &self.req.check_registers {
            if !self.registers.labels.is_empty() && !labels::matches(check, &self.registers) {
                self.set_status(Status::RegisterMismatch);
                self.state = State::Error;
                return;
            }
        }
        if spool_end < suspend.offset {
            self.roll_to_offset = suspend.offset;
            self.state = State::SendPipelineSync;
            return;
        }
        let replica = self.the_replica().clone();
        if spool_end != max_offset && self.req.offset == 0 && journal_may_write(&spec) {
            if replica.head_recovery_ready(spool_end, index.end) {
                match deps.head_resumes_at(&journal, index.end).await {
                    Err(e) => return self.fail(RpcStatus::unknown(e)),
                    Ok(Some(resume)) => {
                        tracing::warn!(
                            "journal {journal} resumes at {resume} (its persisted fragments end \
                             at {}): content that was appended past them and never persisted \
                             is lost",
                            index.end
                        );
                        self.roll_to_offset = resume;
                        self.state = State::SendPipelineSync;
                        return;
                    }
                    Ok(None) => replica.refuse_head_gap(
                        spool_end,
                        index.end,
                        "its acknowledgement fence, which tells how far appends were \
                         acknowledged past them, can't be read (etcd denies it)",
                    ),
                }
            }
            self.set_status(Status::IndexHasGreaterOffset);
            self.state = State::Error;
            return;
        }
        if spool_end == max_offset {
            replica.head_gap_closed();
        }
        if self.req.offset != 0 && self.req.offset != max_offset {
            self.set_status(Status::WrongAppendOffset);
            self.state = State::Error;
            return;
        }
        if self.req.offset != 0 && spool_end != max_offset {
            self.roll_to_offset = max_offset;
            self.state = State::SendPipelineSync;
            return;
        }

        use append_request::Suspend as Mode;
        use journal_spec::suspend::Level;
        let level = suspend.level;
        let to = |level: Level| journal_spec::Suspend {
            level: level as i32,
            offset: spool_end,
        };
        let mode = self.req.suspend;
        if mode == Mode::Resume as i32 {
            if level != Level::None as i32 {
                self.next_suspend = Some(to(Level::None));
                self.state = State::UpdateSuspend;
                return;
            }
        } else if mode == Mode::NoResume as i32 {
            if level != Level::None as i32 {
                self.set_status(Status::Suspended);
                self.state = State::Error;
                return;
            }
        } else if mode == Mode::IfFlushed as i32 || mode == Mode::Now as i32 {
            if level != Level::Full as i32 && index.begin == index.end {
                self.next_suspend = Some(to(Level::Full));
                self.state = State::UpdateSuspend;
                return;
            }
            if level == Level::None as i32 && (!index_dirty || mode == Mode::Now as i32) {
                self.next_suspend = Some(to(Level::Partial));
                // Replication drops to one, yet we likely stay primary: roll the dirty
                // spool now so it's stored rather than held.
                self.roll_to_offset = spool_end;
                self.state = State::UpdateSuspend;
                return;
            }
            if level == Level::Partial as i32 {
                self.set_status(Status::Suspended);
            }
        }
        // (SUSPEND_KEEP: proceed and leave suspension as it is.)
        if spool_spec.begin == index.begin {
            // The spool holds the journal's first known write: roll it soon, so that
            // the stores show a "dirty" index to recovering brokers.
            self.roll_to_offset = spool_end;
        }
        self.state = State::StreamContent;
    }
}

/// Waits for the index's first store listing and a healthy primary store,
/// together; an unhealthy store fails at once (a store that can't be built can't
/// be listed either).
async fn await_index_and_store(
    deps: &Arc<dyn AppendDeps>,
    journal: &str,
    spec: &JournalSpec,
) -> Option<String> {
    let refresh = deps.wait_first_refresh(journal);
    let has_stores = spec.fragment.as_ref().is_some_and(|f| !f.stores.is_empty());
    if !has_stores {
        refresh.await;
        return None;
    }
    let health = deps.await_store_health(spec);
    tokio::pin!(refresh, health);
    let mut refreshed = false;
    loop {
        tokio::select! {
            () = &mut refresh, if !refreshed => refreshed = true,
            err = &mut health => {
                if err.is_some() {
                    return err;
                }
                if !refreshed {
                    refresh.await;
                }
                return None;
            }
        }
    }
}

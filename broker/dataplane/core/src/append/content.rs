//! The content phase of an append: the client's chunks, the commit and its
//! acknowledgements (the Python `gazette.broker.server.append_content`).
//!
//! Once the machine holds a synchronised pipeline and the journal's preconditions
//! hold (StreamContent), every client message goes through
//! [`AppendFsm::on_stream_content`]: content is hashed, coalesced into Replicate
//! messages of about [`REPLICATE_CONTENT_BYTES`](super::REPLICATE_CONTENT_BYTES)
//! and scattered; the empty chunk and the client's EOF commit it (a failure rolls
//! it back), and ReadAcknowledgements waits, in pipeline order, for every peer's
//! verdict.

use std::future::Future;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use futures_util::Stream;
use sha1::{Digest, Sha1};
use tonic::Status as RpcStatus;

use super::{journal_may_write, pipeline_error, AppendFsm, State, ABORT_GRACE};
use crate::flow::{FlowControl, FlowError};
use crate::labels;
use crate::pipeline::{describe_status, Pipeline};
use crate::protocol::{append_request, AppendRequest, Fragment, ReplicateRequest, Status};
use crate::spool::sha1sum_from_digest;

/// Ends the message of an append that failed after its commit went out: some
/// members may hold it, and the route's next primary goes on from their content.
pub(crate) const OUTCOME_UNKNOWN: &str =
    "; its commit was sent, so it may still be in the journal (a retry may append it twice)";
/// Ends the message of an append that failed before its commit went out.
pub(crate) const NOT_COMMITTED: &str = " (before the commit was sent)";

/// What the client's stream did wrong, as the Python broker words it.
fn stream_error(why: impl std::fmt::Display) -> RpcStatus {
    RpcStatus::unknown(format!("append stream: {why}"))
}

impl AppendFsm {
    /// Feeds the client's content through flow control until the append commits
    /// or fails; returns the client's (total, delayed) content chunks.
    pub async fn stream_client_content<S>(&mut self, requests: S) -> (i64, i64)
    where
        S: Stream<Item = Result<AppendRequest, RpcStatus>> + Send + 'static,
    {
        let replica = self.the_replica().clone();
        let spec = self.spec();
        let mut flow = replica.flow.lock().await;
        let clock = self.ctx.flow_clock;
        flow.reset(
            spec.max_append_rate,
            &self.ctx.deps.flow_limits(),
            clock.now_millis(),
        );
        let invalidated = self.res().invalidated.clone();
        let aborted = self.aborted.clone();
        let mut fc = FlowControl::new(&mut flow, requests, clock)
            .invalidated(move || invalidated.has_changed().unwrap_or(true))
            .aborted(move || aborted.is_set());
        while self.state == State::StreamContent {
            match fc.recv().await {
                Ok(msg) => self.on_stream_content(msg, None).await,
                Err(FlowError::Source(status)) => {
                    let why = describe_status(&status);
                    self.on_stream_content(None, Some(why)).await;
                }
                Err(e) => self.on_stream_content(None, Some(e.to_string())).await,
            }
        }
        let totals = (fc.state().total_chunks, fc.state().delayed_chunks);
        fc.close().await;
        totals
    }

    /// Consumes one client message; `(None, None)` is the client's EOF, and `err`
    /// the stream's failure.
    pub async fn on_stream_content(&mut self, req: Option<AppendRequest>, err: Option<String>) {
        assert_eq!(self.state, State::StreamContent);
        let pln = self.pipeline();
        let spec = self.spec();
        let eof = req.is_none() && err.is_none();
        let mut err = err;

        if self.client_fragment.is_none() {
            // First call: maybe roll ahead of this append. The pipeline is
            // synchronised, so peers agree and no acknowledgement is asked for.
            let fragment_spec = spec.fragment.clone().unwrap_or_default();
            let spool = pln.spool();
            let proposal = match spool.maybe_roll(
                self.roll_to_offset,
                &fragment_spec,
                std::time::SystemTime::now(),
            ) {
                Ok(p) => p,
                Err(e) => return self.fail(RpcStatus::unknown(e.to_string())),
            };
            if !crate::spool::fragments_equal(&proposal, &spool.spec()) {
                let roll = ReplicateRequest {
                    proposal: Some(proposal),
                    registers: Some(self.registers.clone()),
                    acknowledge: false,
                    ..ReplicateRequest::default()
                };
                scatter_proposal(&pln, &roll).await;
            }
            let frag = spool.spec();
            self.client_fragment = Some(Fragment {
                journal: frag.journal.clone(),
                begin: frag.end,
                end: frag.end,
                compression_codec: frag.compression_codec,
                ..Fragment::default()
            });
            self.client_summer = Sha1::default();
        }

        let mut content = Bytes::new();
        if let (Some(r), None) = (&req, &err) {
            if let Err(e) = crate::validation::validate_append_request(r) {
                err = Some(e.to_string());
            } else {
                if !r.journal.is_empty() {
                    err = Some("expected Content chunk".into());
                }
                content = r.content.clone();
            }
        }
        let message = req.is_some() && err.is_none();
        let suspend_without_content = [
            append_request::Suspend::IfFlushed,
            append_request::Suspend::Now,
            append_request::Suspend::Keep,
        ]
        .iter()
        .any(|m| *m as i32 == self.req.suspend);

        let mut eof = eof;
        if eof && !self.client_commit {
            eof = false;
            err = Some("unexpected EOF".into());
        } else if message && self.client_commit {
            err = Some("expected EOF after empty Content chunk".into());
        } else if message && content.is_empty() {
            self.client_commit = true; // EOF must follow, then we commit.
            self.flush_content(&pln).await;
            if pln.send_err().is_none() {
                return;
            }
        } else if message && (!journal_may_write(&spec) || suspend_without_content) {
            self.set_status(Status::NotAllowed);
        } else if message {
            let n = content.len();
            if self.pending_size > 0 && self.pending_size + n > self.replicate_content_bytes {
                self.flush_content(&pln).await;
            }
            self.client_summer.update(&content);
            self.pending_size += n;
            self.pending.push(content);
            if let Some(frag) = self.client_fragment.as_mut() {
                frag.end += n as i64;
            }
            if self.pending_size >= self.replicate_content_bytes {
                self.flush_content(&pln).await;
            }
            if pln.send_err().is_none() {
                return;
            }
        }

        // Errored, or at the end of input. Content still pending is dropped: only a
        // commit (whose marker flushed it) replicates it.
        self.pending.clear();
        self.pending_size = 0;
        let digest: [u8; 20] = self.client_summer.clone().finalize().into();
        let frag = self.client_fragment.as_mut().expect("set above");
        frag.sum = Some(sha1sum_from_digest(&digest));
        let registers_update =
            self.req.union_registers.is_some() || self.req.subtract_registers.is_some();
        if eof && frag.end == frag.begin && registers_update {
            eof = false;
            err = Some("register modification requires non-empty Append".into());
        }

        if eof {
            pln.note_ended_peers(); // A peer that failed already can't take the commit.
        }
        let failed = pln.failure().is_some();
        let committing = eof && !failed && self.status() == Status::Ok as i32;
        // At its end, but the pipeline already failed: only the rollback goes out.
        self.rolled_back = eof && !committing && failed;
        let proposal = if committing {
            if let Some(subtract) = &self.req.subtract_registers {
                self.registers = labels::subtract(&self.registers, subtract);
            }
            if let Some(union) = &self.req.union_registers {
                self.registers = labels::union(union, &self.registers);
            }
            pln.spool().next()
        } else {
            // Client or peer failure: the pipeline is sound, but partial content
            // rolls back.
            if let Some(why) = err {
                self.err = Some(stream_error(why));
            }
            pln.spool().spec()
        };
        self.proposal = Some(proposal.clone());
        let commit = ReplicateRequest {
            proposal: Some(proposal),
            registers: Some(self.registers.clone()),
            acknowledge: true,
            ..ReplicateRequest::default()
        };
        let sent = scatter_proposal(&pln, &commit).await;
        self.commit_sent = committing && sent;
        self.state = State::ReadAcknowledgements;
    }

    /// Scatters pending client content as one Replicate content message.
    async fn flush_content(&mut self, pln: &Pipeline) {
        if self.pending_size == 0 {
            return;
        }
        let size = self.pending_size as i64;
        let content = if self.pending.len() == 1 {
            self.pending.pop().expect("one")
        } else {
            let mut joined = BytesMut::with_capacity(self.pending_size);
            for part in self.pending.drain(..) {
                joined.extend_from_slice(&part);
            }
            joined.freeze()
        };
        self.pending.clear();
        self.pending_size = 0;
        let frag = self
            .client_fragment
            .as_ref()
            .expect("set on the first message");
        let req = ReplicateRequest {
            content,
            content_delta: frag.end - size - frag.begin,
            ..ReplicateRequest::default()
        };
        pln.scatter(&req).await;
    }

    pub(super) async fn on_read_acknowledgements(&mut self) {
        let pln = self.pipeline();
        let send_err = pln.send_err();
        let (wait_for, close_after) = pln.barrier();
        if send_err.is_some() {
            pln.close_send().await;
            self.pln = None; // A new pipeline is built by the next append.
        }
        self.release_pipeline(); // The next append may start sending now.

        let mut confirmed = None;
        wait_for.wait().await; // Our turn to read ordered acknowledgements.
        pln.gather_ok().await;
        if send_err.is_some() {
            pln.gather_eof().await;
        } else if pln.recv_err().is_none() {
            if let Some(proposal) = &self.proposal {
                // Every member committed it: it may be published whatever happens
                // next (before the next append may send its proposal).
                let spool = pln.spool();
                spool.confirm(proposal.end).await;
                confirmed = Some((spool.file(), proposal.end));
            }
        }
        close_after.open();

        if let Some((file, end)) = confirmed {
            pln.spool().record_confirmed(file, Some(end), true).await;
            let replica = self.the_replica().clone();
            replica.tell_confirmed_soon();
            if let Some(raising) = self.ctx.deps.cover_fence(&self.req.journal, end) {
                if let Err(why) = raising.await {
                    // Committed by every member: it stays in the journal, unanswered.
                    let span = self.client_fragment.as_ref().or(self.proposal.as_ref());
                    let (begin, end) = span.map_or((0, 0), |f| (f.begin, f.end));
                    self.err = Some(RpcStatus::unknown(format!(
                        "append to {} was committed at [{begin}, {end}) and is in the \
                         journal, but is not acknowledged: its acknowledgement fence could \
                         not be raised ({why})",
                        self.req.journal
                    )));
                }
            }
        }

        let recv_err = pln.recv_err();
        if send_err.is_some() || recv_err.is_some() {
            self.the_replica().request_flush(); // A member is failing: store our copy now.
        }
        if self.err.is_some() || self.status() != Status::Ok as i32 {
            self.state = State::Error;
        } else if send_err.is_some() || recv_err.is_some() {
            // The cause, not its consequences. Once the commit was sent, members
            // that took it keep it: the outcome is unknown.
            let mut why = pln.failure().map(|e| e.to_string()).unwrap_or_default();
            if self.commit_sent {
                why.push_str(OUTCOME_UNKNOWN);
            } else if self.rolled_back {
                why.push_str(NOT_COMMITTED);
            }
            self.fail(pipeline_error(why));
        } else {
            self.state = State::Finished;
        }
    }

    /// Runs to a terminal state; returns the client's (total, delayed) content
    /// chunks, and `requests` when the machine ended before reading them (a Proxy
    /// forwards them). `requests` are the client's messages after the first (None:
    /// a pulse, which commits zero bytes). The pipeline slot is always given back.
    pub async fn run<S>(&mut self, requests: Option<S>) -> ((i64, i64), Option<S>)
    where
        S: Stream<Item = Result<AppendRequest, RpcStatus>> + Send + 'static,
    {
        let mut totals = (0, 0);
        if !self.run_to(State::StreamContent).await {
            self.release_pipeline();
            return (totals, requests);
        }
        {
            match requests {
                None => {
                    // The intent to commit, then the commit. A pipeline that failed
                    // ends the content phase at the intent already.
                    self.on_stream_content(Some(AppendRequest::default()), None)
                        .await;
                    if self.state == State::StreamContent {
                        self.on_stream_content(None, None).await;
                    }
                }
                Some(requests) => totals = self.stream_client_content(requests).await,
            }
            self.run_to(State::Finished).await;
        }
        self.release_pipeline();
        (totals, None)
    }

    /// Runs as [`run`](Self::run) unless `give_up` completes first (None then).
    /// The machine is then aborted, which ends it at its next state but never
    /// half-way through content or acknowledgements, and given [`ABORT_GRACE`] to
    /// get there; past that it is abandoned (its pipeline torn down) and left in
    /// Error. The one driver of the Append RPC and of the pulse.
    pub async fn run_bounded<S>(
        &mut self,
        requests: Option<S>,
        give_up: impl Future<Output = ()>,
    ) -> Option<((i64, i64), Option<S>)>
    where
        S: Stream<Item = Result<AppendRequest, RpcStatus>> + Send + 'static,
    {
        let aborted = self.aborted.clone();
        let given_up = async move {
            give_up.await;
            aborted.abort();
            tokio::time::sleep(ABORT_GRACE).await;
        };
        let outcome = tokio::select! {
            out = self.run(requests) => Some(out),
            () = given_up => None,
        };
        if outcome.is_none() {
            tracing::warn!(
                "abandoning append of {} in state {:?}",
                self.req.journal,
                self.state
            );
            self.abandon().await;
            if !self.state.is_terminal() {
                self.fail(super::cancelled());
            }
        }
        outcome
    }
}

/// Scatters a proposal once every peer acknowledged the previous one (true: sent).
/// If one did not, nothing is sent (the pipeline breaks off, and the append fails
/// when it reads its acknowledgements): replicas read each proposal as confirming
/// the one before it.
async fn scatter_proposal(pln: &Arc<Pipeline>, req: &ReplicateRequest) -> bool {
    if let Some(err) = pln.acknowledged().await {
        pln.break_off(err);
        return false;
    }
    pln.scatter(req).await;
    true
}

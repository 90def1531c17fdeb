//! Appends this broker proxies to the journal's primary (the Python
//! `JournalServicer._proxy_append`, after Gazette's `broker/append_api.go`).
//!
//! The client's first message goes on with our resolution's header (so the primary
//! checks it is meant for it, at our revision), the rest as the client sends them,
//! and the primary's answer comes back as it is. A primary cut off by a partition
//! neither answers nor fails: once the registry gives the journal another primary,
//! the proxied call is dropped and the client told, so that it retries.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use futures_util::{stream, StreamExt};
use tonic::{Status, Streaming};

use super::content::{NOT_COMMITTED, OUTCOME_UNKNOWN};
use super::{AppendContext, AppendFsm};
use crate::claims::capability;
use crate::pipeline::id_str;
use crate::protocol::{process_spec, AppendRequest, AppendResponse};
use crate::registry::{Query, Resolution};

/// Forwards the append `fsm` resolved to its primary, with the client's `rest`.
pub async fn forward(
    ctx: &AppendContext,
    fsm: &AppendFsm,
    rest: Streaming<AppendRequest>,
) -> Result<AppendResponse, Status> {
    let res = fsm
        .resolved
        .as_ref()
        .expect("a proxied append was resolved");
    let route = res.header.route.clone().unwrap_or_default();
    let at = usize::try_from(route.primary).ok();
    let (Some(primary), Some(endpoint)) = (
        at.and_then(|i| route.members.get(i)).cloned(),
        at.and_then(|i| route.endpoints.get(i)).cloned(),
    ) else {
        return Err(Status::unavailable(format!(
            "{}: no primary endpoint to proxy to",
            fsm.req.journal
        )));
    };
    let journal = fsm.req.journal.clone();
    let mut client = (ctx.deps.dial())(&primary, &endpoint)
        .map_err(|e| Status::unavailable(format!("dialing {endpoint}: {e}")))?;

    let first = AppendRequest {
        header: Some(res.header.clone()),
        ..fsm.req.clone()
    };
    let committed = Arc::new(AtomicBool::new(false));
    let seen = committed.clone();
    // A failed client stream ends the forwarded one early: the primary then fails
    // the append (no commit came), as it would the client's own.
    let rest = rest
        .take_while(|r| std::future::ready(r.is_ok()))
        .filter_map(|r| std::future::ready(r.ok()))
        .inspect(move |r| {
            if r.content.is_empty() {
                seen.store(true, Ordering::Relaxed);
            }
        });
    let mut call = tonic::Request::new(stream::once(async { first }).chain(rest));
    *call.metadata_mut() = ctx.deps.peer_metadata(&journal, capability::APPEND);

    let query = Query {
        may_proxy: true,
        require_primary: true,
        ..Query::default()
    };
    let moved = ctx
        .registry
        .until_changed(&journal, query, res.invalidated.clone(), |r| {
            // The route's primary, not who resolved: a journal suspended by this
            // very append resolves SUSPENDED, with its primary where it was.
            primary_of(r) == Some(&primary)
        });
    tokio::select! {
        answered = client.append(call) => match answered {
            Ok(resp) => Ok(resp.into_inner()),
            // The broker proxied to cancelled it (it was stopping), not our client,
            // who would not retry a CANCELLED.
            Err(e) if e.code() == tonic::Code::Cancelled => {
                Err(Status::unavailable(e.message().to_owned()))
            }
            Err(e) => Err(Status::new(e.code(), e.message().to_owned())),
        },
        () = moved => {
            let tail = if committed.load(Ordering::Relaxed) {
                OUTCOME_UNKNOWN
            } else {
                NOT_COMMITTED
            };
            Err(Status::unavailable(format!(
                "the primary of {journal} moved away from {} while this append was proxied \
                 to it{tail}",
                id_str(&primary)
            )))
        }
    }
}

/// The member of the resolved route that is its primary.
fn primary_of(res: &Resolution) -> Option<&process_spec::Id> {
    let route = res.header.route.as_ref()?;
    usize::try_from(route.primary)
        .ok()
        .and_then(|i| route.members.get(i))
}

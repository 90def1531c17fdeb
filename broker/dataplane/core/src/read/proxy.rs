//! Reads this broker proxies to a member of the journal's route (the Python
//! `JournalServicer._proxy_read`, after Gazette's `broker/read_api.go` proxyRead).
//!
//! The client's request goes on with our resolution's header (no process: any
//! member may serve it, at no earlier revision than ours), under this broker's
//! token narrowed to the journal, and every answer comes back as it is. When the
//! broker shuts down ([`ReadContext::stop_proxy_reads`]) the relay ends with a
//! clean EOF, so that the client reads on through another broker.

use tonic::Status as RpcStatus;

use super::{send, Answers, ReadContext};
use crate::claims::capability;
use crate::pipeline::id_str;
use crate::protocol::{process_spec, ReadRequest};
use crate::registry::Resolution;

/// Relays `req` to a member of `res`'s route.
pub(super) async fn forward(
    ctx: &ReadContext,
    req: ReadRequest,
    res: &Resolution,
    out: &Answers,
) -> Result<(), RpcStatus> {
    ctx.host.check_reachable().map_err(RpcStatus::unavailable)?;
    let (member, endpoint) = pick_member(res)?;
    let mut client = (ctx.host.dial())(&member, &endpoint)
        .map_err(|e| RpcStatus::unavailable(format!("dialing {endpoint}: {e}")))?;
    let metadata = ctx.host.peer_metadata(&req.journal, capability::READ);
    let mut call = tonic::Request::new(ReadRequest {
        header: Some(res.header.clone()),
        ..req
    });
    *call.metadata_mut() = metadata;

    let stopped = ctx.proxies_stopped();
    tokio::pin!(stopped);
    let mut answers = tokio::select! {
        called = client.read(call) => called.map_err(relayed)?.into_inner(),
        () = &mut stopped => return Ok(()),
    };
    loop {
        tokio::select! {
            answer = answers.message() => match answer {
                Ok(Some(resp)) => send(out, resp).await?,
                Ok(None) => return Ok(()),
                Err(status) => return Err(relayed(status)),
            },
            () = &mut stopped => return Ok(()),
        }
    }
}

/// A failure of the proxied call, relayed with the peer's code and text.
fn relayed(status: RpcStatus) -> RpcStatus {
    tracing::warn!("proxied Read RPC failed: {}", status.message());
    if status.code() == tonic::Code::Cancelled {
        // The broker proxied to cancelled it (it was stopping), not our client,
        // who would not retry a CANCELLED.
        return RpcStatus::unavailable(status.message().to_owned());
    }
    RpcStatus::new(status.code(), status.message().to_owned())
}

/// The member (and its endpoint) a read resolved to `res` goes to: the resolved
/// process, if the resolution names one; else a member with an endpoint, one of
/// our own zone first (as Gazette's dispatcher prefers).
pub(super) fn pick_member(res: &Resolution) -> Result<(process_spec::Id, String), RpcStatus> {
    let route = res.header.route.clone().unwrap_or_default();
    let endpoint = |i: usize| route.endpoints.get(i).cloned().unwrap_or_default();
    let resolved = res.header.process_id.as_ref();
    if let Some(want) = resolved.filter(|p| !p.suffix.is_empty()) {
        let at = route.members.iter().position(|m| m == want);
        return at.map(|i| (want.clone(), endpoint(i))).ok_or_else(|| {
            RpcStatus::unavailable(format!(
                "resolved process {} is not a route member",
                id_str(want)
            ))
        });
    }
    let candidates: Vec<(process_spec::Id, String)> = (0..route.members.len())
        .map(|i| (route.members[i].clone(), endpoint(i)))
        .filter(|(_, ep)| !ep.is_empty())
        .collect();
    let same_zone = candidates.iter().find(|(m, _)| m.zone == res.local_id.zone);
    same_zone
        .or(candidates.first())
        .cloned()
        .ok_or_else(|| RpcStatus::unavailable("no route member has an endpoint"))
}

//! The RPCs the front door hands to the data plane's own service.

use http::{Request, Response};
use http_body_util::BodyExt;
use hyper::body::Incoming;

use super::{grpc_error, validate, Body, BoxError};

/// The `protocol.Journal` service the data plane serves itself.
pub type NativeService =
    crate::protocol::journal_server::JournalServer<crate::service::NativeJournal>;

/// RPCs the front door hands to the native service rather than to Python.
pub const NATIVE_PATHS: [&str; 3] = [
    "/protocol.Journal/Append",
    "/protocol.Journal/Replicate",
    "/protocol.Journal/Read",
];

/// Serves `req` with the native service. Its messages are checked on their way as
/// forwarded ones are (a malformed one is INVALID_ARGUMENT), and so are their sizes
/// (over `limit`: RESOURCE_EXHAUSTED, as the Python broker answers): a cut request
/// is answered once the client stopped sending.
pub(super) async fn serve_native(
    mut native: NativeService,
    limit: usize,
    req: Request<Incoming>,
) -> Response<Body> {
    use tonic::codegen::Service;
    let (parts, body) = req.into_parts();
    let path = parts.uri.path();
    // A Replicate carries a client's chunk plus a few bytes of framing: peers may
    // send up to the margin the Python broker's peers are dialed with.
    let (what, limit) = match path.rsplit('/').next() {
        Some("Append") => ("AppendRequest", limit),
        Some("Replicate") => ("ReplicateRequest", limit + (64 << 10)),
        _ => ("request message", limit),
    };
    let Some(decode) = validate::decoder_of(path) else {
        return grpc_error(12, "unknown method");
    };
    let verdict = validate::Verdict::default();
    let body = validate::Checked::new(body, decode, verdict.clone()).limited(
        limit,
        what,
        "--broker.max-grpc-recv-size",
    );
    let resp = match native.call(Request::from_parts(parts, body)).await {
        Ok(resp) => resp,
        Err(never) => match never {},
    };
    if let Some(cut) = verdict.get().cloned() {
        verdict.drained().await;
        return grpc_error(cut.code, &cut.why);
    }
    resp.map(|body| {
        validate::Answered::new(body, verdict)
            .map_err(BoxError::from)
            .boxed_unsync()
    })
}

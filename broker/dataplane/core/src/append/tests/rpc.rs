//! The Append RPC as a client sees it, served natively (and proxied to the
//! primary by a broker that is not it).

use super::*;

fn client_stream(
    first: AppendRequest,
    parts: &[&'static [u8]],
) -> impl Stream<Item = AppendRequest> + Send + 'static {
    let mut msgs = vec![first];
    msgs.extend(parts.iter().map(|p| AppendRequest {
        content: Bytes::from_static(p),
        ..AppendRequest::default()
    }));
    stream::iter(msgs)
}

#[tokio::test]
async fn the_append_rpc_answers_its_commit_or_its_status() {
    let p = Primary::start().await;
    let (mut client, _) = p.serve(p.ctx()).await;
    let resp = tokio::time::timeout(
        PROMPTLY,
        client.append(client_stream(append(JOURNAL), &[b"hello", b""])),
    )
    .await
    .unwrap()
    .unwrap()
    .into_inner();
    assert_eq!(resp.status, Status::Ok as i32);
    let commit = resp.commit.unwrap();
    assert_eq!((commit.begin, commit.end), (0, 5));
    assert_eq!(resp.header.unwrap().process_id, Some(local_id()));
    assert_eq!((resp.total_chunks, resp.delayed_chunks), (2, 0));

    let resp = client
        .append(client_stream(append("other/journal"), &[b"x", b""]))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(resp.status, Status::JournalNotFound as i32);

    let err = client
        .append(client_stream(append(JOURNAL), &[b"no commit"]))
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::Unknown);
    assert_eq!(err.message(), "append stream: unexpected EOF");
    let err = client
        .append(client_stream(append(""), &[b"x", b""]))
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::Unknown);
    p.stop().await;
}

#[tokio::test]
async fn a_broker_that_is_not_the_primary_proxies_the_append_to_it() {
    let p = Primary::start().await;
    // The primary serves, and publishes where (the proxy dials it there).
    let (_, primary_endpoint) = p.serve(p.ctx()).await;
    // A third broker, member of nothing: its registry knows the route.
    let other = Arc::new(Registry::new());
    let other_ctx = AppendContext {
        registry: other.clone(),
        replicas: Arc::new(ReplicaSet::new(
            Arc::new(Host::default()),
            ReplicaConfig::default(),
        )),
        deps: p.deps.clone(),
        flow_clock: FlowClock::new(),
    };
    let p_client_endpoint = primary_endpoint;
    *p.endpoint.lock().unwrap() = p_client_endpoint.clone();
    p.publish(11, vec![local_id(), peer_id()], 0, spec_of(2), true);
    other.publish(Update {
        etcd: etcd(11),
        local_id: Some(id("c", "other")),
        members: Some(vec![
            (local_id(), p_client_endpoint),
            (peer_id(), p.peer.endpoint.clone()),
        ]),
        journals: vec![(
            JOURNAL.into(),
            Journal {
                spec: Arc::new(spec_of(2)),
                route: crate::protocol::Route {
                    members: vec![local_id(), peer_id()],
                    primary: 0,
                    endpoints: vec![],
                },
                consistent: true,
            },
        )],
        removed: vec![],
    });
    let (mut client, _) = p.serve(other_ctx).await;
    let resp = tokio::time::timeout(
        PROMPTLY,
        client.append(client_stream(append(JOURNAL), &[b"via a proxy", b""])),
    )
    .await
    .unwrap()
    .unwrap()
    .into_inner();
    assert_eq!(resp.status, Status::Ok as i32);
    assert_eq!(resp.header.unwrap().process_id, Some(local_id())); // The primary's answer.
    assert_eq!(resp.commit.unwrap().end, 11);
    p.stop().await;
}

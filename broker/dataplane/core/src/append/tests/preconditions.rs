//! ValidatePreconditions, transition by transition: offsets and the index, head
//! gaps (timed by the replica), the store's health, flags and registers.

use super::*;

#[tokio::test]
async fn the_index_decides_offsets() {
    let p = Primary::start().await;
    p.stored_through(100);
    // Spools behind the stored fragments, and no recovery yet: refused, and the
    // replica starts timing the gap.
    let mut fsm = p.fsm(append(JOURNAL));
    run(&mut fsm, &[b"x", b""]).await;
    assert_eq!(fsm.status(), Status::IndexHasGreaterOffset as i32);
    let replica = p.replicas.get(JOURNAL).unwrap();
    assert!(replica.head_recovery_due().is_some());
    // An explicit offset other than the journal's end is wrong.
    let mut fsm = p.fsm(AppendRequest {
        offset: 50,
        ..append(JOURNAL)
    });
    run(&mut fsm, &[b"x", b""]).await;
    assert_eq!(fsm.status(), Status::WrongAppendOffset as i32);
    // The journal's end rolls every member there, then appends.
    let mut fsm = p.fsm(AppendRequest {
        offset: 100,
        ..append(JOURNAL)
    });
    run(&mut fsm, &[b"x", b""]).await;
    assert_eq!(fsm.state, State::Finished, "{:?}", fsm.err);
    assert_eq!(p.spool_end(), 101);
    // At the journal's end, the gap is closed: nothing is left to recover.
    assert_eq!(replica.head_recovery_due(), None);
    p.stop().await;
}

/// Appends to a journal stored through 100 whose spools are at 0, with no
/// recovery delay: the first sees the gap, the second starts the listing that
/// must still show it; returns the replica once that listing was applied.
async fn a_head_gap_listed(p: &Primary) -> Arc<Replica> {
    p.stored_through(100);
    let replica = p.replicas.get(JOURNAL).unwrap();
    for _ in 0..2 {
        let mut fsm = p.fsm(append(JOURNAL));
        run(&mut fsm, &[b"x", b""]).await;
        assert_eq!(fsm.status(), Status::IndexHasGreaterOffset as i32);
    }
    tokio::time::timeout(PROMPTLY, replica.head_gap_listed())
        .await
        .expect("the listing is applied");
    replica
}

#[tokio::test]
async fn a_head_gap_ready_to_recover_resumes_where_the_fence_says() {
    let p = Primary::start_with(Duration::ZERO).await;
    *p.deps.resumes_at.lock().unwrap() = Some(120);
    let replica = a_head_gap_listed(&p).await;
    let mut fsm = p.fsm(append(JOURNAL));
    run(&mut fsm, &[b"x", b""]).await;
    assert_eq!(fsm.state, State::Finished, "{:?}", fsm.err);
    assert_eq!(p.spool_end(), 121);
    assert_eq!(replica.head_recovery_due(), None);
    p.stop().await;
}

#[tokio::test]
async fn a_head_gap_the_fence_cannot_place_is_refused_until_reset() {
    let p = Primary::start_with(Duration::ZERO).await;
    *p.deps.resumes_at.lock().unwrap() = None; // etcd denies reading the fence.
    let replica = a_head_gap_listed(&p).await;
    for _ in 0..2 {
        let mut fsm = p.fsm(append(JOURNAL));
        run(&mut fsm, &[b"x", b""]).await;
        assert_eq!(fsm.status(), Status::IndexHasGreaterOffset as i32);
        // Refused for good: no new delay starts, nothing wakes the pulse.
        assert_eq!(replica.head_recovery_due(), None);
    }
    assert_eq!(p.spool_end(), 0);
    p.stop().await;
}

#[tokio::test]
async fn an_unhealthy_store_fails_the_append() {
    let p = Primary::start().await;
    let mut spec = spec_of(2);
    spec.fragment.as_mut().unwrap().stores = vec!["s3://bucket/".into()];
    p.publish(11, vec![local_id(), peer_id()], 0, spec, true);
    *p.deps.health_err.lock().unwrap() = Some("missing AWS region".into());
    let mut fsm = p.fsm(append(JOURNAL));
    run(&mut fsm, &[b"x", b""]).await;
    assert_eq!(fsm.status(), Status::FragmentStoreUnhealthy as i32);
    assert_eq!(fsm.err.as_ref().unwrap().message(), "missing AWS region");
    p.stop().await;
}

#[tokio::test]
async fn a_read_only_journal_takes_no_content() {
    let p = Primary::start().await;
    let mut spec = spec_of(2);
    spec.flags = journal_spec::Flag::ORdonly as u32;
    p.publish(11, vec![local_id(), peer_id()], 0, spec, true);
    let mut fsm = p.fsm(append(JOURNAL));
    run(&mut fsm, &[b"x", b""]).await;
    assert_eq!(fsm.status(), Status::NotAllowed as i32);
    assert_eq!(p.spool_end(), 0);
    p.stop().await;
}

#[tokio::test]
async fn registers_are_updated_by_commits_and_checked_by_appends() {
    let p = Primary::start().await;
    let owner = |v: &str| LabelSet {
        labels: vec![Label {
            name: "owner".into(),
            value: v.into(),
            prefix: false,
        }],
    };
    let mut fsm = p.fsm(AppendRequest {
        union_registers: Some(owner("me")),
        ..append(JOURNAL)
    });
    run(&mut fsm, &[b"x", b""]).await;
    assert_eq!(fsm.state, State::Finished, "{:?}", fsm.err);
    let check = |v: &str| LabelSelector {
        include: Some(owner(v)),
        exclude: None,
    };
    let mut fsm = p.fsm(AppendRequest {
        check_registers: Some(check("you")),
        ..append(JOURNAL)
    });
    run(&mut fsm, &[b"y", b""]).await;
    assert_eq!(fsm.status(), Status::RegisterMismatch as i32);
    let mut fsm = p.fsm(AppendRequest {
        check_registers: Some(check("me")),
        ..append(JOURNAL)
    });
    run(&mut fsm, &[b"y", b""]).await;
    assert_eq!(fsm.state, State::Finished, "{:?}", fsm.err);
    assert_eq!(p.spool_end(), 2);
    p.stop().await;
}

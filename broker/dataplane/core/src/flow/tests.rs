//! One test per behaviour, after the Python
//! `broker/tests/server/test_flow_control.py`: the arithmetic against Gazette's
//! vectors, then the driver. Driver tests run on tokio's paused clock where time
//! matters, and under a timeout either way.

use std::future::{pending, Future};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use futures_util::stream;
use tokio::sync::Notify;
use tokio::time::timeout;

use super::*;

/// 1 byte / ms.
const LIMITS: FlowLimits = FlowLimits {
    max_append_rate: 0,
    min_append_rate: 1000,
};
/// 10 bytes / ms.
const SPEC_RATE: i64 = 10_000;

/// (balance, spent, charge)
fn bsc(fc: &FlowState) -> (i64, i64, i64) {
    (fc.balance, fc.spent, fc.charge)
}

#[test]
fn over_then_underflow() {
    let mut fc = FlowState::default();
    fc.reset(SPEC_RATE, &LIMITS, 12345);
    assert_eq!(
        (fc.max_rate, fc.balance, fc.min_rate, fc.spent, fc.charge),
        (10_000, 10_000, 1000, 1000, 0)
    );

    fc.on_chunk(10_000 - 20);
    assert_eq!(bsc(&fc), (20, 1000, 0));
    fc.on_chunk(40); // Must wait for budget.
    assert_eq!(bsc(&fc), (0, 1000, 20));
    fc.on_tick(fc.last_millis + 1).unwrap();
    assert_eq!(bsc(&fc), (0, 1000, 10));
    // A late ticker: the remaining charge is paid after accrual, without underflow.
    fc.on_tick(fc.last_millis + 100_000).unwrap();
    assert_eq!(bsc(&fc), (10_000 * 10 - 10, 10, 0));
    fc.on_chunk(40);
    assert_eq!(bsc(&fc), (10_000 * 10 - 50, 50, 0));
    assert_eq!(fc.on_tick(fc.last_millis + 51), Err(FlowControlUnderflow));
    assert_eq!(bsc(&fc), (10_000 * 10, 0, 0));
    assert_eq!((fc.total_chunks, fc.delayed_chunks), (3, 1));
}

#[test]
fn one_chunk_many_ticks() {
    let mut fc = FlowState::default();
    fc.reset(1000, &LIMITS, 12345);
    fc.on_chunk(1000 * 11);
    for i in 0..10 {
        assert_eq!(bsc(&fc), (0, 1000, 1000 * (10 - i)));
        fc.on_tick(fc.last_millis + 1000).unwrap();
    }
    assert_eq!(bsc(&fc), (0, 1000, 0));
    assert_eq!((fc.total_chunks, fc.delayed_chunks), (1, 1));
}

#[test]
fn balance_carries_forward() {
    let mut fc = FlowState::default();
    fc.reset(SPEC_RATE, &LIMITS, 12345);
    fc.on_chunk(5000);
    assert_eq!(bsc(&fc), (5000, 1000, 0));
    fc.on_tick(fc.last_millis + 100).unwrap();
    assert_eq!((fc.balance, fc.spent), (6000, 900));
    fc.on_chunk(5000);
    assert_eq!(bsc(&fc), (1000, 1000, 0));
    assert_eq!((fc.total_chunks, fc.delayed_chunks), (2, 0));
    let later = fc.last_millis + 150;
    fc.reset(SPEC_RATE, &LIMITS, later);
    assert_eq!(fc.balance, 2500);
    assert_eq!(fc.total_chunks, 0);
}

#[test]
fn invalidate_then_chunk() {
    let mut fc = FlowState::default();
    fc.reset(SPEC_RATE, &LIMITS, 12345);
    fc.on_invalidate();
    assert_eq!(fc.max_rate, 0);
    fc.on_chunk(100_000); // Larger than the balance, yet admitted at once.
    assert_eq!(bsc(&fc), (0, 1000, 0));
}

#[test]
fn global_max_caps_only_non_zero_spec_rates() {
    let capped = FlowLimits {
        max_append_rate: 500,
        ..LIMITS
    };
    let mut fc = FlowState::default();
    fc.reset(SPEC_RATE, &capped, 1);
    assert_eq!(fc.max_rate, 500);
    let mut fc = FlowState::default();
    fc.reset(0, &capped, 1);
    assert_eq!(fc.max_rate, 0); // Gazette's quirk: unlimited specs stay unlimited.
}

#[derive(Debug, PartialEq)]
struct Msg(Vec<u8>);

impl Content for Msg {
    fn content_len(&self) -> usize {
        self.0.len()
    }
}

fn msg(content: &[u8]) -> Msg {
    Msg(content.to_vec())
}

#[derive(Clone, Debug, thiserror::Error)]
#[error("{0}")]
struct Garbage(&'static str);

type Item = Result<Msg, Garbage>;

/// Fails a test that would hang (on the paused clock, tokio skips ahead to it).
async fn bounded<T>(fut: impl Future<Output = T>) -> T {
    timeout(Duration::from_secs(10), fut)
        .await
        .expect("the test went past its time bound")
}

/// The content of a message `recv` returned.
fn content(got: Result<Option<Msg>, FlowError<Garbage>>) -> Vec<u8> {
    match got {
        Ok(Some(Msg(content))) => content,
        other => panic!("expected a message, got {other:?}"),
    }
}

#[tokio::test]
async fn driver_passes_messages_and_ends() {
    let mut state = FlowState::default();
    state.reset(0, &LIMITS, 1);
    let parts: Vec<Item> = vec![Ok(msg(b"ab")), Ok(msg(b"cd")), Ok(msg(b""))];
    let mut fc = FlowControl::new(&mut state, stream::iter(parts), FlowClock::new());
    let mut got = Vec::new();
    bounded(async {
        while let Some(Msg(m)) = fc.recv().await.unwrap() {
            got.push(m);
        }
    })
    .await;
    assert_eq!(got, [b"ab".to_vec(), b"cd".to_vec(), Vec::new()]);
    fc.close().await;
    assert_eq!(state.total_chunks, 3);
}

#[tokio::test(start_paused = true)]
async fn driver_underflows_on_a_stalled_client() {
    let clock = FlowClock::starting_at(1_000_000);
    let source = stream::unfold(0, |step| async move {
        if step > 0 {
            pending::<()>().await; // The client stalls.
        }
        let part: &[u8] = if step == 0 { b"x" } else { b"never" };
        Some((Item::Ok(msg(part)), step + 1))
    });
    let mut state = FlowState::default();
    state.reset(0, &LIMITS, clock.now_millis());
    let start = Instant::now();
    let mut fc = FlowControl::new(&mut state, source, clock);
    assert_eq!(content(bounded(fc.recv()).await), b"x");

    let err = bounded(fc.recv()).await.unwrap_err();
    assert!(matches!(err, FlowError::Underflow(FlowControlUnderflow)));
    assert_eq!(
        err.to_string(),
        "client stream didn't sustain the minimum append data rate"
    );
    // About one second, the burst allowance, had to pass.
    let waited = start.elapsed();
    assert!(waited >= Duration::from_millis(900), "{waited:?}");
    assert!(waited <= Duration::from_millis(1100), "{waited:?}");
    fc.close().await;
}

/// A source that records what it pulls: `parts`, then (once `gate` opens) "end".
fn recorded(
    parts: Vec<&'static [u8]>,
    pulled: Arc<Mutex<Vec<&'static [u8]>>>,
    gate: Arc<Notify>,
) -> impl Stream<Item = Item> + Send + 'static {
    stream::unfold(0, move |i| {
        let (parts, pulled, gate) = (parts.clone(), pulled.clone(), gate.clone());
        async move {
            if let Some(part) = parts.get(i) {
                pulled.lock().unwrap().push(part);
                return Some((Ok(msg(part)), i + 1));
            }
            gate.notified().await;
            pulled.lock().unwrap().push(b"end");
            None
        }
    })
}

/// Lets the reader task run while the test would be applying a chunk.
async fn let_others_run() {
    for _ in 0..5 {
        tokio::task::yield_now().await;
    }
}

#[tokio::test]
async fn driver_reads_ahead_while_a_chunk_is_applied() {
    // The next message is already being received when recv() hands one over,
    // so the transport's delivery overlaps the append's work on this one.
    let pulled = Arc::new(Mutex::new(Vec::new()));
    let gate = Arc::new(Notify::new());
    let source = recorded(vec![b"ab", b"cd"], pulled.clone(), gate.clone());
    let mut state = FlowState::default();
    state.reset(0, &LIMITS, 1);
    let mut fc = FlowControl::new(&mut state, source, FlowClock::new());
    assert_eq!(content(bounded(fc.recv()).await), b"ab");
    let_others_run().await;
    assert_eq!(*pulled.lock().unwrap(), [b"ab", b"cd"]);
    assert_eq!(content(bounded(fc.recv()).await), b"cd");
    let_others_run().await;
    // The read of the end is pending on the source.
    assert_eq!(*pulled.lock().unwrap(), [b"ab", b"cd"]);

    // An append that stops here (an error) drops the read in flight.
    fc.close().await;
    gate.notify_one();
    let_others_run().await;
    assert_eq!(*pulled.lock().unwrap(), [b"ab", b"cd"]);
    assert_eq!(state.total_chunks, 2);
}

#[tokio::test]
async fn driver_reads_ahead_a_bounded_number_of_messages() {
    let pulled = Arc::new(Mutex::new(Vec::new()));
    let gate = Arc::new(Notify::new());
    gate.notify_one(); // No wait at the end.
    let source = recorded(vec![b"x"; 20], pulled.clone(), gate);
    let mut state = FlowState::default();
    state.reset(0, &LIMITS, 1);
    let mut fc = FlowControl::new(&mut state, source, FlowClock::new());
    assert!(bounded(fc.recv()).await.unwrap().is_some());
    let_others_run().await;
    // The one handed over, and READ_AHEAD more: a slow append holds no more than that.
    assert_eq!(pulled.lock().unwrap().len(), 1 + READ_AHEAD);
    let mut got = 1;
    while bounded(fc.recv()).await.unwrap().is_some() {
        got += 1;
    }
    fc.close().await;
    assert_eq!((got, state.total_chunks), (20, 20));
}

#[tokio::test]
async fn an_end_or_failure_of_the_source_stays() {
    let mut state = FlowState::default();
    state.reset(0, &LIMITS, 1);

    let failing: Vec<Item> = vec![Ok(msg(b"ok")), Err(Garbage("the client sent garbage"))];
    let mut fc = FlowControl::new(&mut state, stream::iter(failing), FlowClock::new());
    assert_eq!(content(bounded(fc.recv()).await), b"ok");
    for _ in 0..2 {
        match bounded(fc.recv()).await {
            Err(FlowError::Source(e)) => assert!(e.to_string().contains("garbage")),
            other => panic!("expected the source's failure, got {other:?}"),
        }
    }
    fc.close().await;

    let one: Vec<Item> = vec![Ok(msg(b"only"))];
    let mut fc = FlowControl::new(&mut state, stream::iter(one), FlowClock::new());
    assert_eq!(content(bounded(fc.recv()).await), b"only");
    assert!(bounded(fc.recv()).await.unwrap().is_none());
    assert!(bounded(fc.recv()).await.unwrap().is_none());
    fc.close().await;
}

#[tokio::test]
async fn a_cancellation_raised_by_the_source_reaches_recv() {
    // tonic ends the request stream of a client that went away with a CANCELLED status.
    let items: Vec<Result<Msg, tonic::Status>> = vec![
        Ok(msg(b"first")),
        Err(tonic::Status::cancelled("the client went away")),
    ];
    let mut state = FlowState::default();
    state.reset(0, &LIMITS, 1);
    let mut fc = FlowControl::new(&mut state, stream::iter(items), FlowClock::new());
    assert_eq!(bounded(fc.recv()).await.unwrap(), Some(msg(b"first")));
    match bounded(fc.recv()).await {
        Err(FlowError::Source(status)) => assert_eq!(status.code(), tonic::Code::Cancelled),
        other => panic!("expected the cancellation, got {other:?}"),
    }
    fc.close().await;
}

// Beyond the Python file: the driver's side of the maximum rate, `aborted` and
// `invalidated`, which the Python suite covers only through whole appends.

#[tokio::test(start_paused = true)]
async fn driver_delays_a_chunk_past_the_balance_to_a_tick() {
    let clock = FlowClock::starting_at(1_000_000);
    let parts: Vec<Item> = vec![Ok(Msg(vec![0; 10_000 - 20])), Ok(Msg(vec![0; 40]))];
    let mut state = FlowState::default();
    state.reset(SPEC_RATE, &LIMITS, clock.now_millis());
    let start = Instant::now();
    let mut fc = FlowControl::new(&mut state, stream::iter(parts), clock);
    assert!(bounded(fc.recv()).await.unwrap().is_some());
    assert_eq!(start.elapsed(), Duration::ZERO);
    assert_eq!(content(bounded(fc.recv()).await).len(), 40);
    assert_eq!(start.elapsed(), QUANTUM); // Paid from the first tick's refill.
    assert!(bounded(fc.recv()).await.unwrap().is_none());
    fc.close().await;
    assert_eq!((state.total_chunks, state.delayed_chunks), (2, 1));
}

#[tokio::test(start_paused = true)]
async fn driver_is_cancelled_at_the_tick_after_an_abort() {
    let source = stream::pending::<Item>();
    let aborted = Arc::new(AtomicBool::new(false));
    let mut state = FlowState::default();
    let clock = FlowClock::new();
    state.reset(0, &LIMITS, clock.now_millis());
    let check = aborted.clone();
    let mut fc =
        FlowControl::new(&mut state, source, clock).aborted(move || check.load(Ordering::Relaxed));
    aborted.store(true, Ordering::Relaxed);
    let start = Instant::now();
    let err = bounded(fc.recv()).await.unwrap_err();
    assert!(matches!(err, FlowError::Cancelled));
    assert_eq!(err.to_string(), "context canceled");
    assert_eq!(start.elapsed(), QUANTUM);
    fc.close().await;
}

#[tokio::test(start_paused = true)]
async fn driver_lifts_the_maximum_rate_once_invalidated() {
    let parts: Vec<Item> = vec![Ok(Msg(vec![0; 100_000]))];
    let mut state = FlowState::default();
    let clock = FlowClock::new();
    state.reset(SPEC_RATE, &LIMITS, clock.now_millis());
    let start = Instant::now();
    let mut fc = FlowControl::new(&mut state, stream::iter(parts), clock).invalidated(|| true);
    // 9 s of the journal's rate, paid at the first tick instead.
    assert_eq!(content(bounded(fc.recv()).await).len(), 100_000);
    assert_eq!(start.elapsed(), QUANTUM);
    fc.close().await;
    assert_eq!((state.max_rate, state.delayed_chunks), (0, 1));
}

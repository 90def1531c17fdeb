//! When the primary rolls its spool to a new fragment (Gazette's `maybeRollFragment`,
//! `broker/replica.go`).

use std::time::{SystemTime, UNIX_EPOCH};

use super::{Spool, SpoolView};
use crate::protocol::{journal_spec, Fragment};

/// Go's zero `time.Time` as Unix seconds: where a spool that never committed
/// falls when flush intervals are bucketed (see [`maybe_roll`]).
const GO_ZERO_TIME_UNIX: i64 = -62_135_596_800;

/// `roll_to_offset` lies before the spool's end.
#[derive(Debug, thiserror::Error)]
#[error("invalid roll_to_offset {roll_to_offset} (< end {end})")]
pub struct InvalidRollToOffset {
    pub roll_to_offset: i64,
    pub end: i64,
}

/// The primary's next proposal for `spool` (Gazette's `maybeRollFragment`,
/// `broker/replica.go`).
///
/// A new empty fragment at `max(end, roll_to_offset)` under the spec's codec when
/// the spool is empty, longer than `spec.length`, asked to roll to an offset other
/// than its begin, or first committed to in an earlier flush interval (UTC epoch
/// buckets of `spec.flush_interval`, whole seconds); otherwise the spool's own
/// fragment.
pub fn maybe_roll(
    spool: &Spool,
    roll_to_offset: i64,
    spec: &journal_spec::Fragment,
    now: SystemTime,
) -> Result<Fragment, InvalidRollToOffset> {
    roll_of(
        &spool.spec,
        spool.first_append_time,
        roll_to_offset,
        spec,
        now,
    )
}

/// [`maybe_roll`] of a spool's snapshot.
pub fn maybe_roll_view(
    view: &SpoolView,
    roll_to_offset: i64,
    spec: &journal_spec::Fragment,
    now: SystemTime,
) -> Result<Fragment, InvalidRollToOffset> {
    roll_of(
        &view.spec,
        view.first_append_time,
        roll_to_offset,
        spec,
        now,
    )
}

fn roll_of(
    current: &Fragment,
    first_append_time: Option<SystemTime>,
    roll_to_offset: i64,
    spec: &journal_spec::Fragment,
    now: SystemTime,
) -> Result<Fragment, InvalidRollToOffset> {
    let cl = current.end - current.begin;
    let mut flush =
        cl == 0 || cl > spec.length || (roll_to_offset != 0 && roll_to_offset != current.begin);
    let interval = spec.flush_interval.as_ref().map_or(0, |d| d.seconds);
    if interval > 0 {
        let first = first_append_time.map_or(GO_ZERO_TIME_UNIX, unix_seconds);
        // Rust's `/` truncates toward zero, as Go's does: a never-committed spool's
        // negative bucket never equals today's.
        if first / interval != unix_seconds(now) / interval {
            flush = true;
        }
    }
    let mut next = current.clone();
    if !flush {
        return Ok(next);
    }
    if roll_to_offset != 0 {
        if next.end > roll_to_offset {
            return Err(InvalidRollToOffset {
                roll_to_offset,
                end: next.end,
            });
        }
        next.end = roll_to_offset;
    }
    next.begin = next.end;
    next.sum = None;
    next.compression_codec = spec.compression_codec;
    Ok(next)
}

/// Whole seconds since the Unix epoch, rounded down (Go's `Time.Unix`).
pub(super) fn unix_seconds(t: SystemTime) -> i64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => d.as_secs() as i64,
        Err(e) => {
            let d = e.duration();
            -(d.as_secs() as i64) - i64::from(d.subsec_nanos() > 0)
        }
    }
}

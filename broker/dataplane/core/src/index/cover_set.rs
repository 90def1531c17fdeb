//! The fragments of one journal that best cover its offsets: the Rust port of the
//! Python `gazette.broker.fragment.cover_set` (after Gazette's
//! `broker/fragment/cover_set.go`).
//!
//! A [`CoverSet`] is ordered on begin and end, and no member is wholly covered by
//! another (several may cover one together), so begins and ends both strictly
//! increase. Adding a larger fragment replaces every member it covers. The
//! algorithms decide which fragment serves a read, so they follow Python's step
//! for step, including its fix of Go's fast path (see [`CoverSet::add`]).

use crate::spool::LocalFragment;

/// A journal name that is not the set's.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("journal mismatch: {added:?} added to {held:?}")]
pub struct JournalMismatch {
    pub added: String,
    pub held: String,
}

/// See the module documentation. Members are [`LocalFragment`]s: a stored
/// fragment has no file.
#[derive(Clone, Debug, Default)]
pub struct CoverSet {
    frags: Vec<LocalFragment>,
}

fn begin(f: &LocalFragment) -> i64 {
    f.spec.begin
}

fn end(f: &LocalFragment) -> i64 {
    f.spec.end
}

impl CoverSet {
    pub fn new() -> CoverSet {
        CoverSet::default()
    }

    pub fn len(&self) -> usize {
        self.frags.len()
    }

    pub fn is_empty(&self) -> bool {
        self.frags.is_empty()
    }

    pub fn iter(&self) -> std::slice::Iter<'_, LocalFragment> {
        self.frags.iter()
    }

    /// The member at `i`.
    pub fn get(&self, i: usize) -> Option<&LocalFragment> {
        self.frags.get(i)
    }

    /// The lowest begin of any member, or 0 when empty.
    pub fn begin_offset(&self) -> i64 {
        self.frags.first().map_or(0, begin)
    }

    /// The highest end of any member, or 0 when empty.
    pub fn end_offset(&self) -> i64 {
        self.frags.last().map_or(0, end)
    }

    /// Adds `fragment` in place; Ok(true) when some offsets now map to it.
    pub fn add(&mut self, fragment: LocalFragment) -> Result<bool, JournalMismatch> {
        let s = &mut self.frags;
        let n = s.len();
        if let Some(first) = s.first() {
            if first.spec.journal != fragment.spec.journal {
                return Err(JournalMismatch {
                    added: fragment.spec.journal,
                    held: first.spec.journal.clone(),
                });
            }
        }
        let (fb, fe) = (begin(&fragment), end(&fragment));
        // Empty fragments cover nothing; an empty set takes anything else.
        if fb == fe {
            return Ok(false);
        }
        if n == 0 {
            s.push(fragment);
            return Ok(true);
        }
        // Ending past the last member, it follows or replaces that member.
        let last = &s[n - 1];
        if end(last) < fe {
            if begin(last) < fb {
                s.push(fragment);
                return Ok(true);
            }
            if n == 1 || begin(&s[n - 2]) < fb {
                s[n - 1] = fragment;
                return Ok(true);
            }
            // It covers earlier members as well. Go's fast path replaces the last
            // one alone and leaves a covered member behind; the general path below
            // replaces all of them.
        }
        // The run [from, to) of members it replaces.
        let mut from = s.partition_point(|e| end(e) <= fb);
        while from != n {
            let e = &s[from];
            // A member covering it, without being its very span, keeps its place.
            if (begin(e) <= fb && end(e) > fe) || (begin(e) < fb && end(e) >= fe) {
                return Ok(false);
            }
            if begin(e) >= fb {
                break;
            }
            from += 1;
        }
        let mut to = from;
        while to != n && end(&s[to]) <= fe {
            to += 1;
        }
        s.splice(from..to, [fragment]);
        Ok(true)
    }

    /// The index of the member covering `offset` that reaches furthest, and true;
    /// or, when none covers it, the index of the first member after it (maybe
    /// `len()`), and false.
    pub fn longest_overlapping(&self, offset: i64) -> (usize, bool) {
        longest_overlapping(&self.frags, offset, 0)
    }

    /// Members of `self` with an offset that no contiguous run of `other` covers.
    pub fn difference(&self, other: &CoverSet) -> CoverSet {
        let bs = &other.frags;
        let n = bs.len();
        let mut out = CoverSet::new();
        // No member of bs[..lo] reaches an offset at or past the current begin.
        let mut lo = 0;
        for f in &self.frags {
            lo = longest_overlapping(bs, begin(f), lo).0;
            let mut i = lo;
            // Contiguous or overlapping members of `other` cover it together.
            while i + 1 < n && end(&bs[i]) < end(f) && begin(&bs[i + 1]) <= end(&bs[i]) {
                i += 1;
            }
            if lo == n || begin(f) < begin(&bs[lo]) || end(f) > end(&bs[i]) {
                // A subset keeps the ordering of its set: no add() needed.
                out.frags.push(f.clone());
            }
        }
        out
    }
}

impl<'a> IntoIterator for &'a CoverSet {
    type Item = &'a LocalFragment;
    type IntoIter = std::slice::Iter<'a, LocalFragment>;
    fn into_iter(self) -> Self::IntoIter {
        self.frags.iter()
    }
}

fn longest_overlapping(s: &[LocalFragment], offset: i64, lo: usize) -> (usize, bool) {
    let mut ind = lo + s[lo..].partition_point(|e| end(e) <= offset);
    let found = ind < s.len() && begin(&s[ind]) <= offset;
    while ind + 1 < s.len() && begin(&s[ind + 1]) <= offset {
        ind += 1;
    }
    (ind, found)
}

#[cfg(test)]
mod tests;

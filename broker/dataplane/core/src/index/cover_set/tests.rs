//! Every branch of add, longest_overlapping and difference, and their invariants
//! over generated sets, after the Python `test_fragment_cover_set.py`.

use super::*;
use crate::protocol::{CompressionCodec, Fragment};

const JOURNAL: &str = "a/journal";

fn frag(begin: i64, end: i64) -> LocalFragment {
    LocalFragment {
        spec: Fragment {
            journal: JOURNAL.into(),
            begin,
            end,
            compression_codec: CompressionCodec::None as i32,
            ..Fragment::default()
        },
        file: None,
    }
}

fn spans(s: &CoverSet) -> Vec<(i64, i64)> {
    s.iter().map(|f| (f.spec.begin, f.spec.end)).collect()
}

fn build(pairs: &[(i64, i64)]) -> CoverSet {
    let mut s = CoverSet::new();
    for &(b, e) in pairs {
        assert!(s.add(frag(b, e)).unwrap(), "({b}, {e}) added");
    }
    s
}

#[test]
fn empty_fragments_are_ignored() {
    let mut s = CoverSet::new();
    assert!(!s.add(frag(5, 5)).unwrap());
    assert!(s.is_empty());
}

#[test]
fn another_journal_is_refused() {
    let mut s = build(&[(0, 10)]);
    let mut other = frag(10, 20);
    other.spec.journal = "other/journal".into();
    let err = s.add(other).unwrap_err();
    assert_eq!(
        err.to_string(),
        "journal mismatch: \"other/journal\" added to \"a/journal\""
    );
}

#[test]
fn adds_at_the_end() {
    let s = build(&[(100, 200), (200, 300), (201, 301)]);
    assert_eq!(spans(&s), [(100, 200), (200, 300), (201, 301)]);
    let s = build(&[(100, 200), (200, 300), (300, 400), (400, 500), (150, 500)]);
    assert_eq!(spans(&s), [(100, 200), (150, 500)]);
    let s = build(&[(100, 200), (200, 300), (199, 300)]);
    assert_eq!(spans(&s), [(100, 200), (199, 300)]);
    let s = build(&[(100, 200), (200, 300), (200, 301)]);
    assert_eq!(spans(&s), [(100, 200), (200, 301)]);
    // Go's fast path would leave (0, 1) behind, covered by (0, 3).
    assert_eq!(spans(&build(&[(0, 1), (1, 2), (0, 3)])), [(0, 3)]);
    let s = build(&[(0, 5), (5, 8), (8, 9), (5, 10)]);
    assert_eq!(spans(&s), [(0, 5), (5, 10)]);
}

#[test]
fn adds_in_the_middle_and_at_the_beginning() {
    let s = build(&[(100, 200), (200, 300), (300, 400), (400, 500), (150, 450)]);
    assert_eq!(spans(&s), [(100, 200), (150, 450), (400, 500)]);
    let s = build(&[(100, 200), (200, 300), (300, 400), (150, 350)]);
    assert_eq!(spans(&s), [(100, 200), (150, 350), (300, 400)]);
    let s = build(&[(100, 200), (300, 400), (200, 300)]);
    assert_eq!(spans(&s), [(100, 200), (200, 300), (300, 400)]);
    let s = build(&[(100, 200), (300, 400), (201, 299)]);
    assert_eq!(spans(&s), [(100, 200), (201, 299), (300, 400)]);
    let s = build(&[(100, 200), (200, 300), (300, 400), (100, 300)]);
    assert_eq!(spans(&s), [(100, 300), (300, 400)]);
    let s = build(&[(100, 200), (200, 300), (300, 400), (99, 200)]);
    assert_eq!(spans(&s), [(99, 200), (200, 300), (300, 400)]);
    let s = build(&[(200, 300), (300, 400), (199, 200)]);
    assert_eq!(spans(&s), [(199, 200), (200, 300), (300, 400)]);
    let s = build(&[
        (100, 150),
        (149, 201),
        (200, 250),
        (250, 300),
        (299, 351),
        (350, 400),
        (200, 300),
        (300, 400),
        (100, 200),
    ]);
    assert_eq!(
        spans(&s),
        [(100, 200), (149, 201), (200, 300), (299, 351), (300, 400)]
    );
}

#[test]
fn only_exact_spans_replace_covered_members() {
    let mut s = build(&[(100, 200), (200, 300), (300, 400)]);
    for (b, e) in [(100, 199), (200, 299), (101, 200), (201, 300), (301, 400)] {
        assert!(!s.add(frag(b, e)).unwrap(), "({b}, {e}) is covered");
    }
    let mut replacement = frag(200, 300);
    replacement.spec.mod_time = 7;
    assert!(s.add(replacement).unwrap());
    assert_eq!(s.get(1).unwrap().spec.mod_time, 7);
    assert_eq!(spans(&s), [(100, 200), (200, 300), (300, 400)]);
}

#[test]
fn offsets_of_the_set() {
    let mut s = CoverSet::new();
    assert_eq!((s.begin_offset(), s.end_offset()), (0, 0));
    s.add(frag(100, 150)).unwrap();
    s.add(frag(140, 250)).unwrap();
    assert_eq!((s.begin_offset(), s.end_offset()), (100, 250));
    s.add(frag(50, 100)).unwrap();
    assert_eq!((s.begin_offset(), s.end_offset()), (50, 250));
}

#[test]
fn longest_overlapping_fragments() {
    let s = build(&[
        (100, 200),
        (149, 201),
        (200, 300),
        (299, 351),
        (300, 400),
        (500, 600),
    ]);
    let table = [
        (0, 0, false),
        (100, 0, true),
        (148, 0, true),
        (149, 1, true),
        (199, 1, true),
        (200, 2, true),
        (298, 2, true),
        (299, 3, true),
        (300, 4, true),
        (399, 4, true),
        (400, 5, false),
        (499, 5, false),
        (500, 5, true),
        (599, 5, true),
        (600, 6, false),
    ];
    for (offset, ind, found) in table {
        assert_eq!(s.longest_overlapping(offset), (ind, found), "at {offset}");
    }
}

#[test]
fn differences() {
    let b = build(&[(100, 200), (150, 225), (225, 250), (250, 300), (301, 400)]);
    let a = build(&[
        (99, 105),  // Begins before b's first fragment.
        (100, 110), // Inside one of b's fragments.
        (110, 120),
        (130, 210), // Covered by two of b's together.
        (150, 225), // Exactly one of b's.
        (151, 300), // Covered by three together.
        (152, 301), // Not covered: a one-byte gap at 300.
        (300, 350), // Not covered, same gap.
        (301, 360), // Covered.
        (360, 401), // Runs past b's coverage.
        (400, 450), // Wholly after b.
    ]);
    let out = a.difference(&b);
    assert_eq!(
        spans(&out),
        [(99, 105), (152, 301), (300, 350), (360, 401), (400, 450)]
    );
    assert_eq!(spans(&a.difference(&CoverSet::new())), spans(&a));
    assert!(CoverSet::new().difference(&b).is_empty());
}

/// A small deterministic generator (no property-testing crate is a dependency).
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, n: u64) -> i64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 33) % n) as i64
    }
    fn spans(&mut self) -> Vec<(i64, i64)> {
        (0..self.below(40))
            .map(|_| {
                let b = self.below(200);
                (b, b + self.below(60))
            })
            .collect()
    }
}

fn covered(s: &CoverSet) -> std::collections::BTreeSet<i64> {
    s.iter().flat_map(|f| f.spec.begin..f.spec.end).collect()
}

#[test]
fn generated_sets_keep_their_invariants() {
    let mut rng = Lcg(7);
    for _ in 0..300 {
        let (a_pairs, b_pairs) = (rng.spans(), rng.spans());
        let mut a = CoverSet::new();
        let mut offsets = std::collections::BTreeSet::new();
        for &(b, e) in &a_pairs {
            let before = covered(&a);
            a.add(frag(b, e)).unwrap();
            offsets.extend(b..e);
            assert!(
                before.is_subset(&covered(&a)),
                "adding never loses coverage"
            );
            let s = spans(&a);
            assert!(s.windows(2).all(|w| w[0].0 < w[1].0 && w[0].1 < w[1].1));
            assert!(s.iter().all(|(b, e)| b < e));
        }
        assert_eq!(covered(&a), offsets);

        let offset = rng.below(302) - 1;
        let (ind, found) = a.longest_overlapping(offset);
        let s = spans(&a);
        let covering: Vec<usize> = (0..s.len())
            .filter(|&i| s[i].0 <= offset && offset < s[i].1)
            .collect();
        if covering.is_empty() {
            assert!(!found);
            let next = (0..s.len()).find(|&i| s[i].0 > offset).unwrap_or(s.len());
            assert_eq!(ind, next);
        } else {
            assert!(found);
            assert_eq!(Some(&ind), covering.iter().max_by_key(|&&i| s[i].1));
        }

        let b = {
            let mut b = CoverSet::new();
            for &(x, y) in &b_pairs {
                b.add(frag(x, y)).unwrap();
            }
            b
        };
        let out = spans(&a.difference(&b));
        let b_offsets = covered(&b);
        for &(x, y) in &s {
            let fully = (x..y).all(|o| b_offsets.contains(&o));
            assert_eq!(
                out.contains(&(x, y)),
                !fully,
                "({x}, {y}) against {b_pairs:?}"
            );
        }
    }
}

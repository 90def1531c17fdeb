//! Label selectors as journals are matched against them (Gazette's
//! `broker/protocol/label_extensions.go`; ours: `gazette.broker.protocol.selector`).
//!
//! A selector has an *include* and an *exclude* group. Within a group, labels of one
//! name are alternatives (any value matches), and names are combined: a journal is
//! selected when every name of *include* matches one of its labels and no name of
//! *exclude* does. A selector label with an empty value matches any value of its
//! name; a `prefix` label matches values that start with its value. Journals are
//! matched with their labels plus the meta-label `name` ([`label_set_ext`]).

use crate::protocol::{JournalSpec, Label, LabelSelector, LabelSet};

/// Whether `labels` is selected: no name of the exclude group matches, and every name
/// of the include group does.
pub fn matches(selector: &LabelSelector, labels: &LabelSet) -> bool {
    let include = selector.include.as_ref().map_or(&[][..], |s| &s.labels[..]);
    let exclude = selector.exclude.as_ref().map_or(&[][..], |s| &s.labels[..]);
    let labels = &labels.labels[..];
    if group_matches(exclude, labels, false) {
        return false;
    }
    group_matches(include, labels, true)
}

/// With `require_all`, whether every name of `group` matches a label of `labels`;
/// else whether any does. An empty group matches all (and, for `any`, none).
fn group_matches(group: &[Label], labels: &[Label], require_all: bool) -> bool {
    let mut i = 0;
    while i < group.len() {
        let name = &group[i].name;
        let end = i + group[i..].iter().take_while(|l| &l.name == name).count();
        let matched = group[i..end].iter().any(|want| {
            labels.iter().filter(|l| &l.name == name).any(|have| {
                want.value.is_empty()
                    || if want.prefix {
                        have.value.starts_with(&want.value)
                    } else {
                        have.value == want.value
                    }
            })
        });
        if matched != require_all {
            return matched;
        }
        i = end;
    }
    require_all
}

/// The labels a journal is matched with: its spec's and `name=<journal>`.
pub fn label_set_ext(spec: &JournalSpec) -> LabelSet {
    let mut labels = spec
        .labels
        .as_ref()
        .map_or_else(Vec::new, |l| l.labels.clone());
    labels.push(Label {
        name: "name".into(),
        value: spec.name.clone(),
        prefix: false,
    });
    labels.sort_by(|a, b| (&a.name, &a.value).cmp(&(&b.name, &b.value)));
    LabelSet { labels }
}

/// The runs of a name in two sorted label lists, joined on the name: each item is
/// (`lhs` run, `rhs` run), either empty where only the other has the name.
fn join<'a>(lhs: &'a [Label], rhs: &'a [Label]) -> Vec<(&'a [Label], &'a [Label])> {
    let (mut l, mut r) = (0, 0);
    let mut out = Vec::new();
    while l < lhs.len() || r < rhs.len() {
        let order = match (lhs.get(l), rhs.get(r)) {
            (None, _) => std::cmp::Ordering::Greater,
            (_, None) => std::cmp::Ordering::Less,
            (Some(a), Some(b)) => a.name.cmp(&b.name),
        };
        let run = |labels: &[Label], at: usize| {
            let name = &labels[at].name;
            at + labels[at..].iter().take_while(|x| &x.name == name).count()
        };
        let le = if order.is_le() { run(lhs, l) } else { l };
        let re = if order.is_ge() { run(rhs, r) } else { r };
        out.push((&lhs[l..le], &rhs[r..re]));
        (l, r) = (le, re);
    }
    out
}

fn values_equal(a: &[Label], b: &[Label]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.value == y.value)
}

/// Every name of `a` or `b`; where both have a name, `a`'s values win (an
/// append's `union_registers`).
pub fn union(a: &LabelSet, b: &LabelSet) -> LabelSet {
    let labels = join(&a.labels, &b.labels)
        .into_iter()
        .flat_map(|(l, r)| if l.is_empty() { r } else { l })
        .cloned()
        .collect();
    LabelSet { labels }
}

/// The names of `a` whose values are not exactly those of `b` (an append's
/// `subtract_registers`).
pub fn subtract(a: &LabelSet, b: &LabelSet) -> LabelSet {
    let labels = join(&a.labels, &b.labels)
        .into_iter()
        .filter(|(l, r)| !values_equal(l, r))
        .flat_map(|(l, _)| l)
        .cloned()
        .collect();
    LabelSet { labels }
}

/// Whether `selector` selects every journal (it names no label at all).
pub fn selects_all(selector: &LabelSelector) -> bool {
    let empty = |s: &Option<LabelSet>| s.as_ref().is_none_or(|s| s.labels.is_empty());
    empty(&selector.include) && empty(&selector.exclude)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(labels: &[(&str, &str, bool)]) -> LabelSet {
        LabelSet {
            labels: labels
                .iter()
                .map(|(n, v, p)| Label {
                    name: n.to_string(),
                    value: v.to_string(),
                    prefix: *p,
                })
                .collect(),
        }
    }

    fn sel(include: &[(&str, &str, bool)], exclude: &[(&str, &str, bool)]) -> LabelSelector {
        LabelSelector {
            include: Some(set(include)),
            exclude: Some(set(exclude)),
        }
    }

    #[test]
    fn names_are_all_required_and_values_of_a_name_are_alternatives() {
        let journal = set(&[("app", "web", false), ("topic", "logs", false)]);
        assert!(matches(&sel(&[], &[]), &journal));
        assert!(matches(&sel(&[("topic", "logs", false)], &[]), &journal));
        assert!(matches(
            &sel(&[("app", "api", false), ("app", "web", false)], &[]),
            &journal
        ));
        assert!(!matches(
            &sel(&[("app", "web", false), ("region", "", false)], &[]),
            &journal
        ));
        assert!(matches(
            &sel(&[("app", "", false), ("topic", "lo", true)], &[]),
            &journal
        ));
        assert!(!matches(&sel(&[("topic", "logz", true)], &[]), &journal));
    }

    #[test]
    fn any_excluded_name_that_matches_deselects() {
        let journal = set(&[("app", "web", false), ("topic", "logs", false)]);
        assert!(!matches(&sel(&[], &[("app", "", false)]), &journal));
        assert!(!matches(
            &sel(&[("topic", "logs", false)], &[("app", "w", true)]),
            &journal
        ));
        assert!(matches(
            &sel(&[], &[("app", "api", false), ("region", "", false)]),
            &journal
        ));
    }

    #[test]
    fn journals_carry_their_name() {
        let spec = JournalSpec {
            name: "a/b".into(),
            labels: Some(set(&[("topic", "logs", false)])),
            ..Default::default()
        };
        let ext = label_set_ext(&spec);
        assert_eq!(
            ext,
            set(&[("name", "a/b", false), ("topic", "logs", false)])
        );
        assert!(matches(&sel(&[("name", "a/", true)], &[]), &ext));
        assert!(selects_all(&LabelSelector::default()));
        assert!(!selects_all(&sel(&[], &[("x", "", false)])));
    }
}

#[cfg(test)]
mod set_tests {
    use super::*;

    fn set(pairs: &[(&str, &str)]) -> LabelSet {
        LabelSet {
            labels: pairs
                .iter()
                .map(|(n, v)| Label {
                    name: (*n).into(),
                    value: (*v).into(),
                    prefix: false,
                })
                .collect(),
        }
    }

    #[test]
    fn union_keeps_every_name_and_the_left_values() {
        let a = set(&[("a", "1"), ("c", "3"), ("c", "4")]);
        let b = set(&[("a", "9"), ("b", "2"), ("d", "5")]);
        let want = set(&[("a", "1"), ("b", "2"), ("c", "3"), ("c", "4"), ("d", "5")]);
        assert_eq!(union(&a, &b), want);
        assert_eq!(union(&LabelSet::default(), &b), b);
    }

    #[test]
    fn subtract_drops_names_whose_values_are_exactly_the_others() {
        let a = set(&[("a", "1"), ("b", "2"), ("c", "3"), ("c", "4")]);
        let b = set(&[("a", "1"), ("b", "9"), ("c", "3")]);
        // a=1 matches exactly; b differs; c has other values (a run of two vs one).
        assert_eq!(subtract(&a, &b), set(&[("b", "2"), ("c", "3"), ("c", "4")]));
        assert_eq!(subtract(&a, &a), LabelSet::default());
    }
}

//! A node storage's accesses since its last whole write, indexed by the
//! bytes they touch: finding the accesses a new one may overlap costs the
//! accesses found (and a lookup), not one comparison per access so far (a
//! concatenation into n slices of one buffer is n writes).

use super::effects::{Extent, Span};
use std::collections::BTreeMap;

/// Accesses (by node) of one storage, each with the bytes it touches.
#[derive(Default)]
pub(super) struct Accesses {
    /// Accesses anywhere in the storage (bytes unknown).
    anywhere: Vec<usize>,
    /// Accesses of known bytes, by first byte, then by arrival (keys are
    /// unique).
    spans: BTreeMap<(u64, u64), (usize, Span)>,
    /// The most bytes one span of `spans` covers (its end minus its
    /// start): a span that starts further than this before a byte ends
    /// before it.
    longest: u64,
    /// Arrivals so far (the second half of `spans`' keys).
    arrivals: u64,
    /// The last access recorded (a repeat of it is not recorded again).
    last: Option<(usize, Extent)>,
}

impl Accesses {
    /// Records that `node` touched `extent`.
    pub(super) fn push(&mut self, node: usize, extent: Extent) {
        if self.last == Some((node, extent)) {
            return;
        }
        self.last = Some((node, extent));
        match extent {
            None => self.anywhere.push(node),
            Some(span) => {
                self.longest = self.longest.max(span.end().saturating_sub(span.start()));
                self.spans.insert((span.start(), self.arrivals), (node, span));
                self.arrivals += 1;
            }
        }
    }

    /// Forgets every access.
    pub(super) fn clear(&mut self) {
        *self = Accesses::default();
    }

    /// Calls `f` with the node of every access that may share a byte with
    /// `extent` (`None`: anywhere), once per access.
    pub(super) fn overlapping(&self, extent: Extent, mut f: impl FnMut(usize)) {
        self.anywhere.iter().for_each(|&n| f(n));
        match extent {
            None => self.spans.values().for_each(|(n, _)| f(*n)),
            Some(x) => {
                let from = x.start().saturating_sub(self.longest);
                for (n, span) in self.spans.range((from, 0)..(x.end(), 0)).map(|(_, v)| v) {
                    if span.overlaps(&x) {
                        f(*n);
                    }
                }
            }
        }
    }

    /// Accesses recorded.
    pub(super) fn len(&self) -> usize {
        self.anywhere.len() + self.spans.len()
    }

    /// Moves every access of `other` into `self` (alias classes merged).
    pub(super) fn append(&mut self, other: &mut Accesses) {
        self.anywhere.append(&mut other.anywhere);
        for (_, (node, span)) in std::mem::take(&mut other.spans) {
            self.longest = self.longest.max(span.end().saturating_sub(span.start()));
            self.spans.insert((span.start(), self.arrivals), (node, span));
            self.arrivals += 1;
        }
        other.clear();
    }
}

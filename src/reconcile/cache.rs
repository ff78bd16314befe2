//! The proof cache of one check: each claim proven once per program, and
//! once per shape ([`Shape`]) where its facts allow, with time-limited
//! outcomes retried before they are kept.

use super::shape::{Shape, ShapeKey};
use crate::sym::egraph::{attempt_eq, Attempt, Interval, Limits};
use crate::sym::{Facts, Outcome, SymExpr, Symbol};
use indexmap::IndexMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// Shared, thread-safe cache of proofs under one set of [`Facts`].
///
/// Identical `(a, b)` pairs are proven once; the cache counts hits and misses.
/// The ranges of expressions ([`ProofCache::bounds`]) are kept likewise.
///
/// Below that, claims are proven up to the names of their symbols
/// ([`Shape`]): a claim that differs from one proven before only in its
/// symbols (renamed along with their ranges and definitions) takes that
/// outcome, its counterexample renamed back.
///
/// An attempt that the prover's wall-clock limit cut short
/// ([`Attempt::time_limited`]) is not kept as it is: the claim is proven
/// once more, and the second attempt's outcome is kept (and shared with
/// every later launch making the claim). A loaded machine can make one
/// attempt miss its deadline; the retry keeps that from deciding the
/// verdict of every launch sharing the claim. When the retry reaches the
/// limit too, its `unknown` is kept: trying again per launch would cost the
/// time limit once per launch.
pub struct ProofCache {
    facts: Facts,
    limits: Limits,
    /// Proof steps of outcomes found by shape are renamed back only when
    /// explaining.
    explain: bool,
    proofs: Mutex<IndexMap<(SymExpr, SymExpr), Arc<Outcome>, rustc_hash::FxBuildHasher>>,
    shapes: Mutex<IndexMap<ShapeKey, Arc<Outcome>, rustc_hash::FxBuildHasher>>,
    ranges: Mutex<IndexMap<SymExpr, Interval, rustc_hash::FxBuildHasher>>,
    hits: AtomicUsize,
    misses: AtomicUsize,
    retries: AtomicUsize,
    /// The prover (`attempt_eq`; tests substitute one whose attempts they control).
    prover: fn(&SymExpr, &SymExpr, &Facts, &Limits) -> Attempt,
}

/// A borrowed `(a, b)` key: looks a pair up without cloning its sides (it
/// hashes as the tuple does, each side in order).
#[derive(Hash)]
struct PairKey<'k>(&'k SymExpr, &'k SymExpr);

impl indexmap::Equivalent<(SymExpr, SymExpr)> for PairKey<'_> {
    fn equivalent(&self, key: &(SymExpr, SymExpr)) -> bool {
        *self.0 == key.0 && *self.1 == key.1
    }
}

impl ProofCache {
    /// An empty cache for proofs under `facts`.
    pub fn new(facts: Facts, limits: Limits) -> Self {
        ProofCache {
            facts,
            limits,
            explain: true,
            proofs: Mutex::new(IndexMap::default()),
            shapes: Mutex::new(IndexMap::default()),
            ranges: Mutex::new(IndexMap::default()),
            hits: AtomicUsize::new(0),
            misses: AtomicUsize::new(0),
            retries: AtomicUsize::new(0),
            prover: attempt_eq,
        }
    }

    /// This cache, keeping proofs' steps (`explain`, the default) or not
    /// (the outcomes are the same; proven ones may carry an empty proof).
    pub(super) fn explaining(mut self, explain: bool) -> Self {
        self.explain = explain;
        self
    }

    /// The facts every proof assumes.
    pub fn facts(&self) -> &Facts {
        &self.facts
    }

    /// [`crate::sym::prove_eq`] of `a == b`, from the cache when the same
    /// pair was proven before.
    pub fn prove(&self, a: &SymExpr, b: &SymExpr) -> Outcome {
        Outcome::clone(&self.prove_shared(a, b))
    }

    /// [`ProofCache::prove`] without copying the outcome (a proof's
    /// explanation can be long).
    pub(super) fn prove_shared(&self, a: &SymExpr, b: &SymExpr) -> Arc<Outcome> {
        // A poisoned lock only means another thread panicked mid-insert; the
        // map itself is still a valid cache.
        if let Some(o) = self
            .proofs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&PairKey(a, b))
        {
            self.hits.fetch_add(1, Ordering::Relaxed);
            return Arc::clone(o);
        }
        let outcome = Arc::new(match Shape::of(a, b, &self.facts) {
            Some(shape) => {
                let known = self
                    .shapes
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .get(&shape.key)
                    .cloned();
                let renamed = match known {
                    Some(o) => {
                        self.hits.fetch_add(1, Ordering::Relaxed);
                        o
                    }
                    None => {
                        let (ra, rb) = shape.sides();
                        let o = Arc::new(self.settle(ra, rb, &shape.facts()));
                        self.shapes
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .insert(shape.key.clone(), Arc::clone(&o));
                        o
                    }
                };
                shape.restore(&renamed, self.explain)
            }
            None => self.settle(a, b, &self.facts),
        });
        self.proofs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert((a.clone(), b.clone()), Arc::clone(&outcome));
        outcome
    }

    /// Proofs answered from the cache.
    pub fn hits(&self) -> usize {
        self.hits.load(Ordering::Relaxed)
    }

    /// Claims the prover was asked about (not found in the cache).
    pub fn misses(&self) -> usize {
        self.misses.load(Ordering::Relaxed)
    }

    /// Claims proven a second time because the first attempt reached the
    /// time limit.
    pub fn retries(&self) -> usize {
        self.retries.load(Ordering::Relaxed)
    }

    /// The outcome of `a == b` under `facts` to keep: the prover's, asked
    /// again once when its first attempt reached the time limit.
    fn settle(&self, a: &SymExpr, b: &SymExpr, facts: &Facts) -> Outcome {
        self.misses.fetch_add(1, Ordering::Relaxed);
        let first = (self.prover)(a, b, facts, &self.limits);
        if !first.time_limited {
            return first.outcome;
        }
        self.retries.fetch_add(1, Ordering::Relaxed);
        (self.prover)(a, b, facts, &self.limits).outcome
    }

    /// The range of an integer expression under the facts' symbol ranges
    /// (defined symbols are replaced by their definitions first); each
    /// expression's range is worked out once.
    pub fn bounds(&self, e: &SymExpr) -> Interval {
        if let Some(i) = self.ranges.lock().unwrap_or_else(|p| p.into_inner()).get(e) {
            return *i;
        }
        let range = self.bounds_uncached(e);
        self.ranges
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(e.clone(), range);
        range
    }

    fn bounds_uncached(&self, e: &SymExpr) -> Interval {
        let defs = self.facts.definitions();
        let mut e = std::borrow::Cow::Borrowed(e);
        // Definitions may refer to other defined symbols (`ks1 = 2*ks0`); a few
        // rounds reach the base symbols in practice, and stopping early only
        // loses precision.
        for _ in 0..8 {
            if defs.is_empty() || !e.free_symbols().iter().any(|s| defs.contains_key(s)) {
                break;
            }
            e = std::borrow::Cow::Owned(e.substitute(&|s: &Symbol| defs.get(s).cloned()));
        }
        crate::sym::egraph::bounds(&e, &self.facts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sym::egraph::Explanation;

    /// Two claims of one shape (`u0` and `u1` have the same range).
    fn claims() -> (Facts, [(SymExpr, SymExpr); 2]) {
        let mut facts = Facts::new();
        facts.restrict(Symbol::new("u0"), Some(0), Some(100));
        facts.restrict(Symbol::new("u1"), Some(0), Some(100));
        let claim = |s: &str| {
            (
                crate::sym::parse(&format!("2*{s} + {s}")).unwrap(),
                crate::sym::parse(&format!("3*{s}")).unwrap(),
            )
        };
        (facts, [claim("u0"), claim("u1")])
    }

    fn time_limited() -> Attempt {
        Attempt {
            outcome: Outcome::Unknown("time limit (2.000s) reached without proof".to_string()),
            time_limited: true,
        }
    }

    fn proven() -> Attempt {
        Attempt {
            outcome: Outcome::Proven(Explanation::from_steps(Vec::new())),
            time_limited: false,
        }
    }

    /// A first attempt cut short by the clock is not what later launches
    /// get: the claim is proven again, and that outcome is the one kept
    /// for every claim of its shape.
    #[test]
    fn a_time_limited_outcome_is_retried_before_it_is_kept() {
        static CALLS: AtomicUsize = AtomicUsize::new(0);
        fn slow_then_fast(_: &SymExpr, _: &SymExpr, _: &Facts, _: &Limits) -> Attempt {
            if CALLS.fetch_add(1, Ordering::SeqCst) == 0 {
                time_limited()
            } else {
                proven()
            }
        }
        let (facts, [(a0, b0), (a1, b1)]) = claims();
        let mut cache = ProofCache::new(facts, Limits::default());
        cache.prover = slow_then_fast;
        assert!(cache.prove(&a0, &b0).is_proven());
        assert_eq!(
            (CALLS.load(Ordering::SeqCst), cache.misses(), cache.retries()),
            (2, 1, 1)
        );
        // The other launch's claim (same shape) takes the retried outcome.
        assert!(cache.prove(&a1, &b1).is_proven());
        assert!(cache.prove(&a0, &b0).is_proven());
        assert_eq!(
            (CALLS.load(Ordering::SeqCst), cache.misses(), cache.retries()),
            (2, 1, 1)
        );
        assert_eq!(cache.hits(), 2);
    }

    /// An outcome the clock did not decide is kept at once; one that
    /// reaches the limit twice is kept after the retry (unknown: a guard).
    #[test]
    fn only_time_limited_outcomes_are_retried_and_only_once() {
        static SATURATED: AtomicUsize = AtomicUsize::new(0);
        fn saturated(_: &SymExpr, _: &SymExpr, _: &Facts, _: &Limits) -> Attempt {
            SATURATED.fetch_add(1, Ordering::SeqCst);
            Attempt {
                outcome: Outcome::Unknown("saturated without proving equality".to_string()),
                time_limited: false,
            }
        }
        static ALWAYS_SLOW: AtomicUsize = AtomicUsize::new(0);
        fn always_slow(_: &SymExpr, _: &SymExpr, _: &Facts, _: &Limits) -> Attempt {
            ALWAYS_SLOW.fetch_add(1, Ordering::SeqCst);
            time_limited()
        }
        let (facts, [(a0, b0), (a1, b1)]) = claims();
        let mut cache = ProofCache::new(facts.clone(), Limits::default());
        cache.prover = saturated;
        assert!(matches!(cache.prove(&a0, &b0), Outcome::Unknown(_)));
        assert!(matches!(cache.prove(&a1, &b1), Outcome::Unknown(_)));
        assert_eq!((SATURATED.load(Ordering::SeqCst), cache.retries()), (1, 0));

        let mut cache = ProofCache::new(facts, Limits::default());
        cache.prover = always_slow;
        match cache.prove(&a0, &b0) {
            Outcome::Unknown(why) => assert!(why.contains("time limit"), "{why}"),
            other => panic!("expected unknown, got {}", other.summary()),
        }
        assert!(matches!(cache.prove(&a1, &b1), Outcome::Unknown(_)));
        assert_eq!((ALWAYS_SLOW.load(Ordering::SeqCst), cache.retries()), (2, 1));
    }

    /// The real prover with no time at all: its `unknown` says it was cut
    /// short, and the cache asks twice.
    #[test]
    fn the_prover_reports_an_attempt_cut_short_by_its_time_limit() {
        let (facts, [(a0, b0), _]) = claims();
        let limits = Limits {
            time_limit: std::time::Duration::ZERO,
            ..Limits::default()
        };
        let attempt = attempt_eq(&a0, &b0, &facts, &limits);
        assert!(attempt.time_limited, "{}", attempt.outcome.summary());
        let cache = ProofCache::new(facts.clone(), limits);
        assert!(matches!(cache.prove(&a0, &b0), Outcome::Unknown(_)));
        assert_eq!((cache.misses(), cache.retries()), (1, 1));
        // With the default limits the claim is proven, not time-limited.
        let attempt = attempt_eq(&a0, &b0, &facts, &Limits::default());
        assert!(
            attempt.outcome.is_proven() && !attempt.time_limited,
            "{}",
            attempt.outcome.summary()
        );
    }
}

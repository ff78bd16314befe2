//! Proves 10,000 typical Triton launch-argument equalities (grid sizes, numels,
//! precomputed sizes) with a proof cache for identical pairs, in parallel with
//! rayon, and prints the total time and the p99 cost of a check.
//!
//! Run with `cargo bench --bench prove`.

use rayon::prelude::*;
use std::collections::HashMap;
use std::time::{Duration, Instant};
use wrapir::sym::egraph::{prove_eq, Facts, Outcome};
use wrapir::sym::{SymExpr, Symbol};

fn sym(name: &str) -> SymExpr {
    SymExpr::sym(name)
}
fn int(v: i64) -> SymExpr {
    SymExpr::Int(v)
}
fn add(a: SymExpr, b: SymExpr) -> SymExpr {
    SymExpr::Add(vec![a, b])
}
fn mul(a: SymExpr, b: SymExpr) -> SymExpr {
    SymExpr::Mul(vec![a, b])
}
fn fdiv(a: SymExpr, b: SymExpr) -> SymExpr {
    SymExpr::FloorDiv(Box::new(a), Box::new(b))
}
fn neg(a: SymExpr) -> SymExpr {
    mul(int(-1), a)
}

/// A deterministic generator (64-bit LCG).
struct Lcg(u64);
impl Lcg {
    fn next(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

/// One launch-argument check: the kernel's expected argument vs the wrapper's.
fn workload(count: usize) -> Vec<(SymExpr, SymExpr)> {
    let blocks = [16, 32, 64, 128, 256, 512, 1024];
    let syms = ["s0", "s1", "s2", "s3"];
    let mut rng = Lcg(7);
    let mut out = Vec::with_capacity(count);
    for _ in 0..count {
        let bsz = blocks[rng.next(blocks.len() as u64) as usize];
        let (i, j) = (rng.next(4) as usize, rng.next(4) as usize);
        let (x, y) = (sym(syms[i]), sym(syms[j]));
        let numel = match rng.next(3) {
            0 => mul(x.clone(), y.clone()),
            1 => mul(int(4), x.clone()),
            _ => x.clone(),
        };
        let pair = match rng.next(8) {
            // Triton grid: ceil-div as Inductor prints it vs the (n + B - 1) // B form.
            0 => (
                neg(fdiv(numel.clone(), int(-bsz))),
                fdiv(add(numel, int(bsz - 1)), int(bsz)),
            ),
            // Precomputed size used in the grid.
            1 => (
                fdiv(add(sym("ks0"), int(bsz - 1)), int(bsz)),
                neg(fdiv(mul(sym("s1"), sym("s0")), int(-bsz))),
            ),
            // xnumel with factors in another order.
            2 => (
                mul(mul(int(4), x.clone()), y.clone()),
                mul(y.clone(), mul(x.clone(), int(4))),
            ),
            // ModularIndexing vs Python modulo.
            3 => (
                SymExpr::ModularIndexing(Box::new(numel.clone()), Box::new(int(1)), Box::new(y.clone())),
                SymExpr::PythonMod(Box::new(numel), Box::new(y)),
            ),
            // Nested floor division.
            4 => (fdiv(fdiv(numel.clone(), int(bsz)), int(2)), fdiv(numel, int(2 * bsz))),
            // Exact division of a padded size.
            5 => (fdiv(mul(int(bsz), x.clone()), int(bsz)), x),
            // A wrong grid (missing round-up): disproved.
            6 => (fdiv(add(numel.clone(), int(bsz - 1)), int(bsz)), fdiv(numel, int(bsz))),
            // Identical arguments.
            _ => (numel.clone(), numel),
        };
        out.push(pair);
    }
    out
}

fn main() {
    let mut facts = Facts::new();
    for s in ["s0", "s1", "s2", "s3"] {
        facts.restrict(Symbol::new(s), Some(1), None);
    }
    facts.define(Symbol::new("ks0"), mul(sym("s0"), sym("s1")));
    let checks = workload(10_000);

    let start = Instant::now();
    // Proof cache: each distinct pair is proved once.
    let mut index: HashMap<(SymExpr, SymExpr), usize> = HashMap::new();
    let mut unique: Vec<(SymExpr, SymExpr)> = Vec::new();
    let slots: Vec<usize> = checks
        .iter()
        .map(|p| {
            *index.entry(p.clone()).or_insert_with(|| {
                unique.push(p.clone());
                unique.len() - 1
            })
        })
        .collect();
    let results: Vec<(&'static str, Duration)> = unique
        .par_iter()
        .map(|(a, b)| {
            let t = Instant::now();
            let kind = match prove_eq(a, b, &facts) {
                Outcome::Proven(_) => "proven",
                Outcome::Disproved(_) => "disproved",
                Outcome::Unknown(_) => "unknown",
            };
            (kind, t.elapsed())
        })
        .collect();
    let total = start.elapsed();

    let mut counts: HashMap<&str, usize> = HashMap::new();
    for slot in &slots {
        *counts.entry(results[*slot].0).or_default() += 1;
    }
    // Per-check cost: a cached check costs nothing extra; the first occurrence
    // of a pair costs its proof.
    let mut seen = vec![false; unique.len()];
    let mut per_check: Vec<Duration> = slots
        .iter()
        .map(|s| {
            if std::mem::replace(&mut seen[*s], true) {
                Duration::ZERO
            } else {
                results[*s].1
            }
        })
        .collect();
    per_check.sort();
    let mut proof_times: Vec<Duration> = results.iter().map(|r| r.1).collect();
    proof_times.sort();
    let p99 = |v: &[Duration]| v[(v.len() * 99 / 100).min(v.len().saturating_sub(1))];

    println!("checks:            {}", checks.len());
    println!("distinct pairs:    {}", unique.len());
    println!(
        "outcomes:          proven {}, disproved {}, unknown {}",
        counts.get("proven").copied().unwrap_or(0),
        counts.get("disproved").copied().unwrap_or(0),
        counts.get("unknown").copied().unwrap_or(0)
    );
    println!("threads:           {}", rayon::current_num_threads());
    println!("total time:        {:.3} s", total.as_secs_f64());
    println!("p99 per check:     {:.3} ms", p99(&per_check).as_secs_f64() * 1e3);
    println!(
        "p99 per proof:     {:.3} ms (uncached)",
        p99(&proof_times).as_secs_f64() * 1e3
    );
    println!(
        "max per proof:     {:.3} ms",
        proof_times.last().copied().unwrap_or_default().as_secs_f64() * 1e3
    );
}

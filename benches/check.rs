//! `reconcile::check_program` on a generated program with 10,000 Triton
//! launches (symbolic, unbacked and precomputed-size arguments, equal-to-1
//! constants, `None` args bound by name, Grid1D/2D/3D, Grid2DWithYZOverflow,
//! PrecomputedGrid and FixedGrid kernels).
//!
//! Prints the median whole-program time (parallel on rayon's pool, and
//! serial), and the per-launch cost of `reconcile_call` measured launch by
//! launch with a cold proof cache (so first uses pay for their proofs): p50,
//! p99 and max, each the median over several passes. Targets: whole program
//! under 1 s, no launch over 5 ms.
//!
//! Run with `cargo bench --bench check`.

mod common;

use common::{generate, median_time, thousands, validated, Size};
use std::time::{Duration, Instant};
use wrapir::ir::{Line, MAIN_GRAPH};
use wrapir::reconcile::{check_program, reconcile_call, Options, ProofCache, Verdict};

const LAUNCHES: usize = 10_000;
const WARMUP: usize = 1;
const REPEATS: usize = 5;

fn main() {
    let gen = generate(Size::launches(LAUNCHES), 23);
    let program = &gen.program;
    let info = validated(program);
    let parallel = Options::default();
    let serial = Options {
        parallel: false,
        ..Options::default()
    };

    let report = check_program(&info, &parallel);
    let t = report.totals;
    if t.failed > 0 {
        for e in report
            .entries
            .iter()
            .filter(|e| matches!(e.verdict, Verdict::Failed(_)))
            .take(5)
        {
            eprintln!("failed: {}:{} {}: {:?}", e.graph, e.line, e.kernel, e.verdict);
        }
        std::process::exit(1);
    }

    let par_time = median_time(WARMUP, REPEATS, || check_program(&info, &parallel).totals);
    let ser_time = median_time(WARMUP, REPEATS, || check_program(&info, &serial).totals);

    // Per-launch cost, serial, cold cache per pass.
    let graph = wrapir::ir::GraphName::new(MAIN_GRAPH);
    let calls: Vec<(usize, &wrapir::ir::KernelCall)> = program
        .main
        .lines
        .iter()
        .enumerate()
        .filter_map(|(i, l)| {
            if let Line::KernelCall(c) = l {
                Some((i, c))
            } else {
                None
            }
        })
        .collect();
    let mut p50s = Vec::new();
    let mut p99s = Vec::new();
    let mut maxes = Vec::new();
    let mut slowest = (Duration::ZERO, String::new());
    for _ in 0..REPEATS {
        let cache = ProofCache::new(wrapir::reconcile::program_facts(program), parallel.limits.clone());
        let mut times: Vec<Duration> = Vec::with_capacity(calls.len());
        for (line, call) in &calls {
            let start = Instant::now();
            let r = reconcile_call(program, &graph, *line, call, &cache);
            let dt = start.elapsed();
            std::hint::black_box(r.is_ok());
            if dt > slowest.0 {
                slowest = (dt, format!("main:{line} {}", call.kernel));
            }
            times.push(dt);
        }
        times.sort();
        let pick = |q: usize| times[(times.len() * q / 100).min(times.len() - 1)];
        p50s.push(pick(50));
        p99s.push(pick(99));
        maxes.push(*times.last().unwrap_or(&Duration::ZERO));
    }
    let med = |v: &mut Vec<Duration>| {
        v.sort();
        v[v.len() / 2]
    };
    let (p50, p99, max) = (med(&mut p50s), med(&mut p99s), med(&mut maxes));

    println!("command: cargo bench --bench check");
    println!(
        "program: {} main-graph lines, {} kernels, {} Triton launches",
        thousands(program.main.lines.len() as f64),
        program.kernels.len(),
        thousands(t.launches as f64)
    );
    println!(
        "verdicts: {} proven, {} guarded, {} failed; {} proofs computed, {} from cache",
        t.proven, t.guarded, t.failed, t.proofs, t.cached
    );
    println!(
        "threads: {}; median of {REPEATS} runs after {WARMUP} warm-up",
        rayon::current_num_threads()
    );
    println!();
    println!("| measure | median | target | ratio (target / measured) |");
    println!("|---|---:|---:|---:|");
    let row = |name: &str, d: Duration, target: Duration| {
        println!(
            "| {name} | {:.3} ms | {:.0} ms | {:.1}x |",
            d.as_secs_f64() * 1e3,
            target.as_secs_f64() * 1e3,
            target.as_secs_f64() / d.as_secs_f64()
        );
    };
    row("whole program, parallel", par_time, Duration::from_secs(1));
    row("whole program, serial", ser_time, Duration::from_secs(1));
    row("per launch p50 (cold cache)", p50, Duration::from_millis(5));
    row("per launch p99 (cold cache)", p99, Duration::from_millis(5));
    row("per launch max (cold cache)", max, Duration::from_millis(5));
    println!();
    println!(
        "slowest single launch seen: {} ({:.3} ms)",
        slowest.1,
        slowest.0.as_secs_f64() * 1e3
    );
}

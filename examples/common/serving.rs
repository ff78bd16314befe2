//! What the serving examples share (`serve_cpu.rs`, `serve.rs`): the
//! bundle's stored inputs and eager reference, threads that make timed
//! calls from a common start, and latency percentiles.

use indexmap::IndexMap;
use std::path::Path;
use std::sync::Barrier;
use std::time::{Duration, Instant};
use wrapir::exec::compare::{compare_leaves, output_leaves};
use wrapir::exec::{Tensor, Value};

/// The bundle's stored tensors for `names` (a model's inputs), in order.
pub fn stored_inputs(bundle: &Path, names: &[String]) -> Result<IndexMap<String, Tensor>, String> {
    let stored = wrapir::bundle::Bundle::open(bundle)
        .and_then(|b| b.inputs())
        .map_err(|e| e.to_string())?
        .ok_or("the bundle stores no inputs")?;
    names
        .iter()
        .map(|n| {
            stored
                .get(n)
                .map(|t| (n.clone(), t.clone()))
                .ok_or(format!("input `{n}` is not stored"))
        })
        .collect()
}

/// Compares `outputs` with the bundle's eager reference (within its
/// tolerance) and says so; a bundle without one passes.
pub fn check_against_eager(bundle: &Path, outputs: &[Value<Tensor>]) -> Result<(), String> {
    let opened = wrapir::bundle::Bundle::open(bundle).map_err(|e| e.to_string())?;
    if let Some(expected) = opened.expected().map_err(|e| e.to_string())? {
        let meta = opened.meta();
        let comparison = compare_leaves(
            &output_leaves(outputs),
            &expected,
            meta.int_outputs.as_deref(),
            meta.tolerance,
        );
        match comparison.first_error() {
            Some(e) => return Err(format!("outputs differ from eager: {e}")),
            None => println!("outputs match eager"),
        }
    }
    Ok(())
}

/// One thread's calls: one untimed `call` first (a session's first call
/// sets it up), then a wait at `ready` (whatever the untimed call gave, so
/// that no thread waits forever), then `calls` timed calls.
pub fn timed_calls(
    calls: usize,
    ready: &Barrier,
    mut call: impl FnMut() -> Result<(), String>,
) -> Result<Vec<Duration>, String> {
    let warm = call();
    ready.wait();
    warm?;
    (0..calls)
        .map(|_| {
            let t0 = Instant::now();
            call()?;
            Ok(t0.elapsed())
        })
        .collect()
}

/// Runs `worker` on `threads` threads, each given the start barrier (which it
/// must reach once: [`timed_calls`] does); returns every latency, sorted,
/// and the wall time from when all threads had arrived to the last call's end.
pub fn serve_threads(
    threads: usize,
    worker: impl Fn(&Barrier) -> Result<Vec<Duration>, String> + Sync,
) -> Result<(Vec<Duration>, Duration), String> {
    let ready = Barrier::new(threads + 1);
    let mut started = Instant::now();
    let mut latencies: Vec<Duration> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                let (worker, ready) = (&worker, &ready);
                scope.spawn(move || worker(ready))
            })
            .collect();
        ready.wait();
        started = Instant::now();
        workers
            .into_iter()
            .map(|w| w.join().map_err(|_| "a worker panicked".to_string())?)
            .collect::<Result<Vec<Vec<Duration>>, String>>()
            .map(|v| v.into_iter().flatten().collect())
    })?;
    let wall = started.elapsed();
    latencies.sort();
    Ok((latencies, wall))
}

/// `p50 .. us, p90 .. us, p99 .. us, .. calls/s` of sorted `latencies` over `wall`.
pub fn percentiles(latencies: &[Duration], wall: Duration) -> String {
    if latencies.is_empty() {
        return "no calls".to_string();
    }
    let pct = |p: f64| latencies[((latencies.len() - 1) as f64 * p).round() as usize].as_secs_f64() * 1e6;
    format!(
        "p50 {:.1} us, p90 {:.1} us, p99 {:.1} us, {:.0} calls/s",
        pct(0.5),
        pct(0.9),
        pct(0.99),
        latencies.len() as f64 / wall.as_secs_f64()
    )
}

//! What the serving examples share (`serve_cpu.rs`, `serve.rs`): their
//! command line, the bundle's stored inputs and eager reference, threads
//! that make timed calls from a common start, and latency percentiles.

use indexmap::IndexMap;
use std::path::{Path, PathBuf};
use std::sync::Barrier;
use std::time::{Duration, Instant};
use wrapir::exec::compare::{compare_leaves, output_leaves};
use wrapir::exec::{Tensor, Value};

/// Runs an example's `run`: its error is printed and the process exits with status 1.
pub fn exit_on_error(run: fn() -> Result<(), String>) {
    if let Err(e) = run() {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

/// A serving example's command line: `BUNDLE [--threads N] [--calls N]`.
pub struct ServeArgs {
    pub bundle: PathBuf,
    /// Threads (default 4).
    pub threads: usize,
    /// Calls a thread (default 200).
    pub calls: usize,
}

/// Reads the command line: the common flags, and those `extra` takes (it
/// is given the flag and a reader of the number after it; false: not one of
/// its flags); `usage` when no bundle is named.
pub fn serve_args(
    usage: &str,
    mut extra: impl FnMut(&str, &mut dyn FnMut() -> Result<usize, String>) -> Result<bool, String>,
) -> Result<ServeArgs, String> {
    let mut args = std::env::args().skip(1);
    let mut bundle: Option<PathBuf> = None;
    let (mut threads, mut calls) = (4usize, 200usize);
    while let Some(a) = args.next() {
        let mut number = || -> Result<usize, String> {
            args.next()
                .and_then(|v| v.parse().ok())
                .ok_or_else(|| format!("{a} takes a number"))
        };
        match a.as_str() {
            "--threads" => threads = number()?.max(1),
            "--calls" => calls = number()?.max(1),
            flag if extra(flag, &mut number)? => {}
            _ if bundle.is_none() => bundle = Some(PathBuf::from(&a)),
            _ => return Err(format!("unexpected argument `{a}`")),
        }
    }
    let bundle = bundle.ok_or(usage)?;
    Ok(ServeArgs { bundle, threads, calls })
}

/// The bundle's stored inputs for `names` after one timed call `run` of
/// them, whose outputs are checked against the bundle's eager reference.
pub fn first_call(
    bundle: &Path,
    names: &[String],
    run: impl FnOnce(&IndexMap<String, Tensor>) -> Result<Vec<Value<Tensor>>, String>,
) -> Result<IndexMap<String, Tensor>, String> {
    let inputs = stored_inputs(bundle, names)?;
    let first = Instant::now();
    let outputs = run(&inputs)?;
    println!("first call {:.2} ms", first.elapsed().as_secs_f64() * 1e3);
    check_against_eager(bundle, &outputs)?;
    Ok(inputs)
}

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

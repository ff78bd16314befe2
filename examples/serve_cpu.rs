//! Serves a CPU bundle or package from several threads and reports latency
//! percentiles; needs no feature flag.
//!
//! ```text
//! cargo run --release --example serve_cpu -- BUNDLE_OR_PACKAGE [--threads N] [--calls N]
//! ```
//!
//! Loads the model once on the CPU ([`Model::load`]: the program's plan, its
//! compiled C++ and Halide kernels, its weights), runs one call and checks
//! it against the bundle's eager reference, then lets `--threads` threads
//! (default 4) make `--calls` calls each (default 200) on the stored inputs
//! and prints the p50 / p90 / p99 latency of a call and the calls per
//! second of all threads together. A package's C++ kernels load from
//! memory; its Halide kernels are written to a private directory under the
//! system's temporary directory to be loaded
//! ([`ModelOptions::scratch_dir`]), removed once they are.
//!
//! ```text
//! cargo run --release --example serve_cpu -- fixtures/inductor/bundles_cpu/cpp/small_cnn --threads 2
//! ```

use indexmap::IndexMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use wrapir::exec::compare::{compare_leaves, output_leaves};
use wrapir::exec::Tensor;
use wrapir::runtime::{Model, ModelOptions};

fn main() {
    if let Err(e) = run() {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), String> {
    let mut args = std::env::args().skip(1);
    let mut bundle: Option<PathBuf> = None;
    let (mut threads, mut calls) = (4usize, 200usize);
    while let Some(a) = args.next() {
        let mut number = |flag: &str| -> Result<usize, String> {
            args.next()
                .and_then(|v| v.parse().ok())
                .ok_or_else(|| format!("{flag} takes a number"))
        };
        match a.as_str() {
            "--threads" => threads = number("--threads")?.max(1),
            "--calls" => calls = number("--calls")?.max(1),
            _ if bundle.is_none() => bundle = Some(PathBuf::from(a)),
            _ => return Err(format!("unexpected argument `{a}`")),
        }
    }
    let bundle = bundle.ok_or("usage: serve_cpu BUNDLE_OR_PACKAGE [--threads N] [--calls N]")?;
    let options = ModelOptions {
        scratch_dir: Some(std::env::temp_dir()),
        ..ModelOptions::default()
    };
    let model = Model::load(&bundle, &options).map_err(|e| e.to_string())?;
    let r = model.load_report();
    println!(
        "loaded {} on {}: {} kernels, {} weights ({:.1} MB), load {:.1} ms",
        bundle.display(),
        r.device,
        r.kernels,
        r.weights,
        r.weight_bytes as f64 / 1e6,
        r.total.as_secs_f64() * 1e3
    );
    let opened = wrapir::bundle::Bundle::open(&bundle).map_err(|e| e.to_string())?;
    let stored = opened
        .inputs()
        .map_err(|e| e.to_string())?
        .ok_or("the bundle stores no inputs")?;
    let inputs: IndexMap<String, Tensor> = model
        .input_names()
        .iter()
        .map(|n| {
            stored
                .get(n)
                .map(|t| (n.clone(), t.clone()))
                .ok_or(format!("input `{n}` is not stored"))
        })
        .collect::<Result<_, _>>()?;
    let first = Instant::now();
    let outputs = model.run(&inputs).map_err(|e| e.to_string())?;
    println!("first call {:.2} ms", first.elapsed().as_secs_f64() * 1e3);
    if let Some(expected) = opened.expected().map_err(|e| e.to_string())? {
        let meta = opened.meta();
        let comparison = compare_leaves(
            &output_leaves(&outputs),
            &expected,
            meta.int_outputs.as_deref(),
            meta.tolerance,
        );
        match comparison.first_error() {
            Some(e) => return Err(format!("outputs differ from eager: {e}")),
            None => println!("outputs match eager"),
        }
    }
    // Every thread makes one untimed call first (its session's); the timed
    // span starts when all of them have.
    let ready = std::sync::Barrier::new(threads + 1);
    let mut started = Instant::now();
    let mut latencies: Vec<Duration> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                let (model, inputs, ready) = (&model, &inputs, &ready);
                scope.spawn(move || -> Result<Vec<Duration>, String> {
                    // Waits on the barrier whatever the warm-up gave, so that no thread waits forever.
                    let warm = model.run(inputs).map(drop).map_err(|e| e.to_string());
                    ready.wait();
                    warm?;
                    (0..calls)
                        .map(|_| {
                            let t0 = Instant::now();
                            model.run(inputs).map_err(|e| e.to_string())?;
                            Ok(t0.elapsed())
                        })
                        .collect()
                })
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
    let pct = |p: f64| latencies[((latencies.len() - 1) as f64 * p).round() as usize].as_secs_f64() * 1e6;
    println!(
        "{threads} threads x {calls} calls: p50 {:.1} us, p90 {:.1} us, p99 {:.1} us, {:.0} calls/s",
        pct(0.5),
        pct(0.9),
        pct(0.99),
        latencies.len() as f64 / wall.as_secs_f64()
    );
    Ok(())
}

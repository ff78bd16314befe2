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

#[path = "common/serving.rs"]
mod serving;

use wrapir::runtime::{Model, ModelOptions};

fn main() {
    serving::exit_on_error(run);
}

fn run() -> Result<(), String> {
    let serving::ServeArgs { bundle, threads, calls } = serving::serve_args(
        "usage: serve_cpu BUNDLE_OR_PACKAGE [--threads N] [--calls N]",
        |_, _| Ok(false),
    )?;
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
    let inputs = serving::first_call(&bundle, model.input_names(), |inputs| {
        model.run(inputs).map_err(|e| e.to_string())
    })?;
    // Every thread makes one untimed call first (its session's); the timed
    // span starts when all of them have.
    let (latencies, wall) = serving::serve_threads(threads, |ready| {
        serving::timed_calls(calls, ready, || model.run(&inputs).map(drop).map_err(|e| e.to_string()))
    })?;
    println!(
        "{threads} threads x {calls} calls: {}",
        serving::percentiles(&latencies, wall)
    );
    Ok(())
}

//! Serves a bundle from several threads and reports latency percentiles.
//!
//! ```text
//! cargo run --release --features cuda --example serve -- BUNDLE_OR_PACKAGE [--threads N] [--calls N] [--device-inputs] [--plan-threads N]
//! ```
//!
//! Loads the model once ([`Model::load`]: kernels, weights, libraries), runs
//! one call to check the outputs against the bundle's eager reference, then
//! lets `--threads` threads (default 4) make `--calls` calls each (default
//! 200) on the stored inputs, and prints the load report and the p50 / p90 /
//! p99 latency of a call (host inputs in, host outputs out) and the calls per
//! second of all threads together, timed from when every thread has made
//! one untimed call (its session's recording) to the last call's end. With `--device-inputs` each thread copies
//! the inputs to the device once and calls [`Session::run_device`] on its own
//! stream instead, waiting for the stream after each call (outputs stay on the
//! device): the latency of a call whose data is already resident.
//! `--plan-threads N` sets [`ModelOptions::plan_threads`] (0: each
//! convolution plan is made at its first call).

#[path = "common/serving.rs"]
mod serving;

use indexmap::IndexMap;
use std::time::{Duration, Instant};
use wrapir::exec::Tensor;
use wrapir::runtime::cuda::{CudaPaths, DeviceInput, Model, ModelOptions, Session};

fn main() {
    serving::exit_on_error(run);
}

fn run() -> Result<(), String> {
    let mut device_inputs = false;
    let mut plan_threads = None;
    let usage = "usage: serve BUNDLE [--threads N] [--calls N] [--device-inputs] [--plan-threads N]";
    let serving::ServeArgs { bundle, threads, calls } = serving::serve_args(usage, |flag, number| {
        match flag {
            "--device-inputs" => device_inputs = true,
            "--plan-threads" => plan_threads = Some(number()?),
            _ => return Ok(false),
        }
        Ok(true)
    })?;
    // The CUDA libraries and the kernel cache where the environment says, as the CLI finds them.
    let defaults = ModelOptions::default();
    let options = ModelOptions {
        paths: CudaPaths::from_env(),
        plan_threads: plan_threads.unwrap_or(defaults.plan_threads),
        ..defaults
    };
    let model = Model::load(&bundle, &options).map_err(|e| e.to_string())?;
    let r = model.load_report();
    println!(
        "loaded {} on {}: {} kernels, {} weights ({:.1} MB at {:.2} GB/s), device open {:.1} ms, warm-up call {}, load {:.1} ms",
        bundle.display(),
        r.device,
        r.kernels,
        r.weights,
        r.weight_bytes as f64 / 1e6,
        r.weight_gbps(),
        r.device_open.as_secs_f64() * 1e3,
        r.warm_up.map_or("none".to_string(), |d| format!("{:.1} ms", d.as_secs_f64() * 1e3)),
        r.total.as_secs_f64() * 1e3
    );
    for (library, primed) in &r.primed {
        match primed {
            Ok(d) => println!("{library} started on its own thread in {:.1} ms", d.as_secs_f64() * 1e3),
            Err(e) => println!("{library} could not be started early: {e}"),
        }
    }
    if let Some(p) = &r.conv_plans {
        println!(
            "convolution plans made ahead: {} on {} threads in {:.1} ms (summed: heuristics {:.1} ms, finalize {:.1} ms; {} compiled at run time, {} of them restored from the package or the cache){}{}",
            p.made,
            p.threads,
            p.time.as_secs_f64() * 1e3,
            p.heuristics.as_secs_f64() * 1e3,
            p.finalize.as_secs_f64() * 1e3,
            p.runtime_compiled,
            p.restored,
            p.made_by_warm_up.map_or(String::new(), |n| format!(", {n} more by the warm-up call")),
            p.failed.first().map_or(String::new(), |f| format!(", {} failed: {f}", p.failed.len()))
        );
    }
    let inputs = serving::first_call(&bundle, model.input_names(), |inputs| {
        model.run(inputs).map_err(|e| e.to_string())
    })?;
    // Every thread makes one untimed call first (a session's first call
    // records its plan and captures its graph); the timed span starts when
    // all of them have, so calls/s is the steady state.
    let (latencies, wall) = serving::serve_threads(threads, |ready| {
        if device_inputs {
            return device_calls(&model, &bundle, &inputs, calls, ready);
        }
        serving::timed_calls(calls, ready, || model.run(&inputs).map(drop).map_err(|e| e.to_string()))
    })?;
    println!(
        "{}{threads} threads x {calls} calls: {}",
        if device_inputs { "device inputs, " } else { "" },
        serving::percentiles(&latencies, wall)
    );
    let in_use = model.device_memory_in_use().map_err(|e| e.to_string())?;
    println!(
        "device memory in use: {:.1} MB after loading, {:.1} MB after the calls",
        r.device_memory_in_use as f64 / 1e6,
        in_use as f64 / 1e6
    );
    Ok(())
}

/// A thread's place at the start barrier: it waits there once, on
/// [`Arrival::arrive`] or else when dropped, so that a thread whose set-up
/// fails still lets the others start.
struct Arrival<'a> {
    barrier: &'a std::sync::Barrier,
    arrived: bool,
}

impl Arrival<'_> {
    fn arrive(&mut self) {
        if !std::mem::replace(&mut self.arrived, true) {
            self.barrier.wait();
        }
    }
}

impl Drop for Arrival<'_> {
    fn drop(&mut self) {
        self.arrive();
    }
}

/// One thread's calls on device-resident inputs: its own stream and session,
/// one untimed call first (the session's recording), then `calls` calls,
/// each timed until the stream has passed it.
fn device_calls(
    model: &Model,
    bundle: &std::path::Path,
    inputs: &IndexMap<String, Tensor>,
    calls: usize,
    ready: &std::sync::Barrier,
) -> Result<Vec<Duration>, String> {
    let mut arrival = Arrival {
        barrier: ready,
        arrived: false,
    };
    use cudarc::driver::{CudaContext, DevicePtr};
    let ctx = CudaContext::new(0).map_err(|e| e.to_string())?;
    // SAFETY: this thread's buffers are used on its one stream only.
    unsafe { ctx.disable_event_tracking() };
    let stream = ctx.new_stream().map_err(|e| e.to_string())?;
    let mut device = IndexMap::new();
    let mut keep = Vec::new();
    // The stored inputs' raw bytes (safetensors holds them dense, little-endian).
    let opened = wrapir::bundle::Bundle::open(bundle).map_err(|e| e.to_string())?;
    let stored = opened
        .entry(wrapir::bundle::INPUTS)
        .map_err(|e| e.to_string())?
        .ok_or("the bundle stores no inputs")?;
    let tensors = safetensors::SafeTensors::deserialize(&stored).map_err(|e| e.to_string())?;
    for (name, t) in inputs {
        let view = tensors.tensor(name).map_err(|e| format!("input `{name}`: {e}"))?;
        let bytes = view.data();
        let slice = stream.clone_htod(bytes).map_err(|e| e.to_string())?;
        let ptr = {
            let (ptr, _sync) = slice.device_ptr(&stream);
            ptr
        };
        let spec = wrapir::exec::TensorSpec::contiguous(t.dtype(), t.spec().device, t.size());
        device.insert(
            name.clone(),
            DeviceInput {
                ptr,
                bytes: bytes.len(),
                spec,
            },
        );
        keep.push(slice);
    }
    let mut session: Session = model.session().map_err(|e| e.to_string())?;
    let mut call = || -> Result<Duration, String> {
        let t0 = Instant::now();
        // SAFETY: the inputs live in `keep` until this function returns and
        // nothing else writes them; the stream is synchronised after each call.
        unsafe { session.run_device(&device, stream.cu_stream() as u64) }.map_err(|e| e.to_string())?;
        stream.synchronize().map_err(|e| e.to_string())?;
        Ok(t0.elapsed())
    };
    let warm = call();
    arrival.arrive();
    warm?;
    let latencies = (0..calls).map(|_| call()).collect();
    drop(keep);
    latencies
}

//! [`super::bench_cuda`]'s measuring on the CUDA backend.

use super::{BenchError, BenchOptions, CudaBench, Direct, Graphs};
use crate::bench::{Timing, Workload};
use crate::bundle::Bundle;
use crate::exec::cuda::{launch_floor, place_inputs, to_host, CudaBackend, CudaOptions, CudaTensor, Prepared, Replay};
use crate::exec::{Backend, ExecError, Tensor, Value};
use crate::ir::Program;
use crate::sym::Bindings;
use indexmap::IndexMap;
use std::time::Instant;

/// [`super::bench_cuda`] (see there).
pub(super) fn measure(
    bundle: &Bundle,
    program: &Program,
    inputs: &IndexMap<String, Tensor>,
    bench: &BenchOptions,
) -> Result<CudaBench, BenchError> {
    let mut options = CudaOptions::for_bundle(bundle.kernel_images(), bundle.meta());
    options.paths = bench.paths.clone();
    options.host_fallback = bench.host_fallback;
    options.graph_reads = bench.graph_reads;
    options.graph_streams = bench.graph_streams;
    options.graph_branches = bench.graph_branches;
    let timing = bench.timing;
    let extern_ops = options.extern_ops.clone();
    let options = if bench.preload {
        options.preload_for(program)
    } else {
        options
    };
    let mut backend = CudaBackend::new(options).map_err(BenchError::Open)?;
    let t = Instant::now();
    let (plan, args, constants) = place_inputs(program, &mut backend, inputs).map_err(BenchError::Place)?;
    let place_inputs = t.elapsed();
    let input_bytes = backend.memory().current_bytes;
    let rng0 = backend.cuda_rng()?;
    let t = Instant::now();
    let first = plan
        .run(&mut backend, args.clone(), &constants)
        .map_err(BenchError::Run)?;
    let first_run = t.elapsed();
    let host_ops = extern_ops.host_ops();
    let t = Instant::now();
    let first_host = first
        .outputs
        .iter()
        .map(|v| to_host(&mut backend, v))
        .collect::<Result<Vec<_>, _>>()?;
    let copy_out = t.elapsed();
    let first_output = Instant::now();
    let load = backend.load_timings();
    let interp_peak_bytes = backend.memory().peak_bytes.saturating_sub(input_bytes);
    let meta_peak_bytes = meta_peak(program, &first.symbols).map(|p| p.saturating_sub(input_bytes));
    drop(first);
    let sync = |b: &CudaBackend| b.synchronize().map_err(BenchError::Cuda);
    let interp_us = timing.queued_us(&mut Workload {
        state: &mut backend,
        call: &mut |b| plan.run(b, args.clone(), &constants).map(drop).map_err(BenchError::Run),
        drain: &sync,
    })?;
    let interp_bits = output_bits(&first_host)?;
    let direct = match Prepared::record(&mut backend, &plan, args.clone(), &constants) {
        Err(e) => Err(e.to_string()),
        Ok((mut prepared, _)) => Ok(direct(&mut backend, &mut prepared, bench, rng0, &interp_bits)?),
    };
    let kernels = direct.as_ref().map_or(0, |d| d.kernels);
    let floor = launch_floor(&mut backend, kernels.max(1), timing.repeats).map_err(BenchError::Floor)?;
    Ok(CudaBench {
        interp_us,
        first_output,
        host_ops,
        input_bytes,
        interp_peak_bytes,
        meta_peak_bytes,
        load,
        place_inputs,
        first_run,
        copy_out,
        direct,
        floor,
    })
}

/// The meta backend's peak for the same symbol values (unbacked sizes as
/// the device run read them).
fn meta_peak(program: &Program, symbols: &Bindings) -> Option<u64> {
    crate::exec::meta::run_program(program, symbols)
        .map(|r| r.memory.peak_bytes)
        .ok()
}

/// The direct path's and (with [`BenchOptions::graphs`]) graph replay's
/// measures of a recording.
fn direct(
    backend: &mut CudaBackend,
    prepared: &mut Prepared,
    bench: &BenchOptions,
    rng0: crate::format::bundle_json::CudaRngState,
    interp_bits: &[u64],
) -> Result<Direct, BenchError> {
    let timing = bench.timing;
    let sync = |b: &CudaBackend| b.synchronize().map_err(BenchError::Cuda);
    let kernels = prepared.launches();
    let writes_inputs = prepared.writes_inputs().map(str::to_string);
    let mut diverged = false;
    let mut replay = |b: &mut CudaBackend| -> Result<(), BenchError> {
        diverged |= prepared.replay(b)? != Replay::Done;
        Ok(())
    };
    let mut workload = Workload {
        state: &mut *backend,
        call: &mut replay,
        drain: &sync,
    };
    let queued_us = timing.queued_us(&mut workload)?;
    let one_us = timing.one_call_us(&mut workload)?;
    let latency = timing.latency_us(&mut workload)?;
    let launches = kernels - prepared.library_calls();
    backend.set_cuda_rng(rng0)?;
    diverged |= prepared.replay(backend)? != Replay::Done;
    let direct_bits = device_output_bits(backend, prepared.outputs())?;
    let graphs = match bench.graphs {
        true => Some(graphs(backend, prepared, &timing, rng0, &direct_bits)?),
        false => None,
    };
    // Last: it runs the GEMMs alone, leaving the arena as no full call would.
    let library_costs = prepared.library_costs(backend, timing.iters.clamp(1, 50), timing.repeats)?;
    let library_floor_us = library_costs.iter().map(|c| c.us).sum();
    let bare_launches_us = prepared.bare_launch_floor_us(backend, timing.samples)?;
    Ok(Direct {
        kernels,
        launches,
        library_calls: prepared.library_calls(),
        reads: prepared.reads(),
        arena_bytes: prepared.arena_bytes(),
        single_stream_arena_bytes: prepared.single_stream_arena_bytes(),
        concurrent: prepared.is_concurrent(),
        single_stream_reason: prepared.single_stream_reason().map(str::to_string),
        writes_inputs,
        queued_us,
        one_us,
        latency,
        diverged,
        equals_interp: direct_bits == interp_bits,
        graphs,
        library_floor_us,
        library_costs,
        bare_launches_us,
    })
}

/// Graph replay's measures; a failure of the first timing is reported in
/// the result rather than ending the benchmark.
fn graphs(
    backend: &mut CudaBackend,
    prepared: &mut Prepared,
    timing: &Timing,
    rng0: crate::format::bundle_json::CudaRngState,
    direct_bits: &[u64],
) -> Result<Result<Graphs, String>, BenchError> {
    let sync = |b: &CudaBackend| b.synchronize().map_err(BenchError::Cuda);
    let mut diverged = false;
    let timed = timing.queued_us(&mut Workload {
        state: &mut *backend,
        call: &mut |b| replay_graphs(prepared, b, &mut diverged),
        drain: &sync,
    });
    let queued_us = match timed {
        Ok(us) => us,
        Err(e) => return Ok(Err(e.to_string())),
    };
    backend.set_cuda_rng(rng0)?;
    replay_graphs(prepared, backend, &mut diverged)?;
    let graph_bits = device_output_bits(backend, prepared.outputs())?;
    let captured = prepared.captured_graphs();
    // Divergence in the latency loops is not reported: the verdict stands
    // for the timed calls and the checked replay.
    let mut later = diverged;
    let latency = timing.latency_us(&mut Workload {
        state: &mut *backend,
        call: &mut |b| replay_graphs(prepared, b, &mut later),
        drain: &sync,
    })?;
    let device_us = prepared.graph_device_us(backend, timing.samples)?;
    // Last: each operation alone, leaving the arena as no full call would.
    let critical_path = prepared.critical_path(backend, timing.samples)?;
    Ok(Ok(Graphs {
        queued_us,
        graphs: captured,
        form: prepared.graph_form().unwrap_or_default(),
        device_us,
        critical_path,
        diverged,
        equals_direct: graph_bits == direct_bits,
        latency,
    }))
}

/// One graph replay, noting whether it diverged.
fn replay_graphs(prepared: &mut Prepared, backend: &CudaBackend, diverged: &mut bool) -> Result<(), BenchError> {
    *diverged |= prepared.replay_graphs(backend)? != Replay::Done;
    Ok(())
}

/// The bits of the tensor outputs, in order: floating values as `f64` bits,
/// integers as their two's complement, a complex tensor's as its parts'.
fn output_bits(outputs: &[Value<Tensor>]) -> Result<Vec<u64>, ExecError> {
    let mut bits = Vec::new();
    for v in outputs {
        if let Value::Tensor(t) = v {
            tensor_bits(t, &mut bits)?;
        }
    }
    Ok(bits)
}

/// [`output_bits`] of device outputs, copied to the host.
fn device_output_bits(backend: &mut CudaBackend, outputs: &[Value<CudaTensor>]) -> Result<Vec<u64>, ExecError> {
    let mut bits = Vec::new();
    for v in outputs {
        if let Value::Tensor(t) = v {
            tensor_bits(&backend.copy_out(t)?, &mut bits)?;
        }
    }
    Ok(bits)
}

fn tensor_bits(t: &Tensor, bits: &mut Vec<u64>) -> Result<(), ExecError> {
    let t = if t.dtype().is_complex() {
        t.view_as_real()?
    } else {
        t.clone()
    };
    if t.dtype().is_floating() {
        bits.extend(t.to_f64_vec()?.into_iter().map(f64::to_bits));
    } else {
        bits.extend(t.to_i64_vec()?.into_iter().map(|i| i as u64));
    }
    Ok(())
}

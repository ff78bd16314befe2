//! `wrapir bench`: timing a bundle on the GPU (interpreter, prepared direct
//! path, CUDA graphs) next to the floors measured in the same process.

use super::*;

/// The options of `wrapir bench`.
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
pub(crate) struct BenchOptions {
    pub(crate) graphs: bool,
    pub(crate) iters: usize,
    pub(crate) repeats: usize,
    pub(crate) preload: bool,
    pub(crate) allow_host_fallback: bool,
}

/// `bench --device cuda` (see `Command::Bench`).
#[cfg(feature = "cuda")]
pub(crate) fn bench_cuda(bundle: &Path, bench: &BenchOptions) -> Result<ExitCode> {
    let BenchOptions {
        graphs,
        iters,
        repeats,
        preload,
        allow_host_fallback,
    } = *bench;
    use std::time::Instant;
    use wrapir::exec::cuda::{launch_floor, place_inputs, CudaBackend, CudaOptions, Prepared, Replay};
    use wrapir::exec::{Backend, Value};
    let started = Instant::now();
    let before_main_ms = process_age_ms();
    let ms = |t: Instant| t.elapsed().as_secs_f64() * 1e3;
    let opened = open_bundle(bundle)?;
    let name = opened.name().to_string();
    let program = with_guards(opened.program().clone())?;
    let load_ms = ms(started);
    let t = Instant::now();
    let inputs = opened.inputs()?.ok_or_else(|| {
        anyhow::anyhow!(
            "{} has no {}: `bench` needs the bundle's inputs",
            bundle.display(),
            wrapir::bundle::INPUTS
        )
    })?;
    let read_inputs_ms = ms(t);
    super::kernels::require_kernel_images(&opened, true)?;
    let mut options = CudaOptions::for_bundle(opened.kernel_images(), opened.meta());
    options.host_fallback = allow_host_fallback;
    let extern_ops = options.extern_ops.clone();
    let options = if preload {
        options.preload_for(&program)
    } else {
        options
    };
    let mut backend = CudaBackend::new(options).map_err(|e| anyhow::anyhow!("opening the GPU: {e}"))?;
    let t = Instant::now();
    let (plan, args, constants) = place_inputs(&program, &mut backend, &inputs)
        .map_err(|e| anyhow::anyhow!("placing the inputs of {name}: {e}"))?;
    let place_ms = ms(t);
    let input_bytes = backend.memory().current_bytes;
    // Random draws advance the generator every call; the bit-for-bit checks
    // below replay once more from this state.
    let rng0 = backend.cuda_rng().map_err(|e| anyhow::anyhow!("{e}"))?;
    let t = Instant::now();
    let first = plan
        .run(&mut backend, args.clone(), &constants)
        .map_err(|e| anyhow::anyhow!("running {name}: {e}{}", exec_host_fallback_hint(&e)))?;
    let first_run_ms = ms(t);
    let first_host_ops = extern_ops.host_ops();
    let t = Instant::now();
    let first_host = first
        .outputs
        .iter()
        .map(|v| wrapir::exec::cuda::to_host(&mut backend, v))
        .collect::<Result<Vec<_>, _>>()?;
    let copy_out_ms = ms(t);
    let first_output_ms = ms(started);
    let lt = backend.load_timings();
    let d = |x: std::time::Duration| x.as_secs_f64() * 1e3;
    let startup = serde_json::json!({
        "before_main_ms": before_main_ms, "load_program_ms": load_ms, "read_inputs_ms": read_inputs_ms,
        "device_open_ms": d(lt.device_open), "place_inputs_ms": place_ms, "first_run_ms": first_run_ms,
        "module_load_ms": d(lt.module_load), "modules": lt.modules, "builtin_nvrtc_ms": d(lt.builtin_load),
        "cublas_first_call_ms": d(lt.blas_first_call), "copy_out_ms": copy_out_ms,
    });
    let interp_peak = backend.memory().peak_bytes.saturating_sub(input_bytes);
    // The meta backend's plan peak for the same symbol values (unbacked
    // sizes as this run read them), inputs excluded as above.
    let meta_peak = wrapir::exec::meta::run_program(&program, &first.symbols)
        .map(|r| r.memory.peak_bytes.saturating_sub(input_bytes))
        .ok();
    drop(first);
    let sync = |b: &CudaBackend| b.synchronize().map_err(|e| anyhow::anyhow!("{e}"));
    // Median over repeats of host µs per call, taken when the last call of a
    // repeat is queued; the stream is drained between repeats.
    let time = |backend: &mut CudaBackend, f: &mut dyn FnMut(&mut CudaBackend) -> Result<()>| -> Result<f64> {
        for _ in 0..iters.min(50) {
            f(backend)?;
        }
        sync(backend)?;
        let mut per_call = Vec::with_capacity(repeats);
        for _ in 0..repeats {
            let t0 = Instant::now();
            for _ in 0..iters {
                f(backend)?;
            }
            per_call.push(t0.elapsed().as_secs_f64() * 1e6 / iters as f64);
            sync(backend)?;
        }
        per_call.sort_by(f64::total_cmp);
        Ok(per_call[per_call.len() / 2])
    };
    let interp_us = time(&mut backend, &mut |b| {
        plan.run(b, args.clone(), &constants)
            .map(drop)
            .map_err(|e| anyhow::anyhow!("running {name}: {e}"))
    })?;
    let fingerprint = |backend: &mut CudaBackend, outs: &[Value<wrapir::exec::cuda::CudaTensor>]| -> Result<Vec<u64>> {
        let mut bits = Vec::new();
        for v in outs {
            if let Value::Tensor(t) = v {
                let host = backend.copy_out(t)?;
                // A complex tensor's bits are its parts'.
                let host = if host.dtype().is_complex() {
                    host.view_as_real()?
                } else {
                    host
                };
                if host.dtype().is_floating() {
                    bits.extend(host.to_f64_vec()?.into_iter().map(f64::to_bits));
                } else {
                    bits.extend(host.to_i64_vec()?.into_iter().map(|i| i as u64));
                }
            }
        }
        Ok(bits)
    };
    let host_bits = |outs: &[Value<wrapir::exec::Tensor>]| -> Result<Vec<u64>> {
        let mut bits = Vec::new();
        for v in outs {
            if let Value::Tensor(host) = v {
                let host = if host.dtype().is_complex() {
                    host.view_as_real()?
                } else {
                    host.clone()
                };
                if host.dtype().is_floating() {
                    bits.extend(host.to_f64_vec()?.into_iter().map(f64::to_bits));
                } else {
                    bits.extend(host.to_i64_vec()?.into_iter().map(|i| i as u64));
                }
            }
        }
        Ok(bits)
    };
    let interp_bits = host_bits(&first_host)?;
    let mut out = format!("bundle {name}: interpreter {interp_us:.2} us/call; first outputs {first_output_ms:.1} ms after `bench` began\n");
    let host_ops: Vec<serde_json::Value> = first_host_ops
        .into_iter()
        .map(|(op, n)| {
            out += &format!("host fallback: {op} x{n} (first run)\n");
            serde_json::json!({"op": op, "calls": n})
        })
        .collect();
    out += &format!(
        "memory (bytes, inputs excluded): interpreter peak {interp_peak}, meta plan peak with the same symbol values {}\n",
        meta_peak.map_or("unknown".to_string(), |m| m.to_string())
    );
    out += &format!(
        "start-up (ms): before main {}, load program {load_ms:.1}, read inputs {read_inputs_ms:.1}, cuInit+context+stream {:.1}, place inputs {place_ms:.1}, first run {first_run_ms:.1} (of which {} kernel images {:.1}, built-in kernels NVRTC {:.1}, cuBLAS first call {:.1}), copy out {copy_out_ms:.1}\n",
        before_main_ms.map_or("unknown".to_string(), |v| format!("{v:.0}")),
        d(lt.device_open),
        lt.modules,
        d(lt.module_load),
        d(lt.builtin_load),
        d(lt.blas_first_call),
    );
    let mut json = serde_json::json!({
        "bundle": name, "interp_us": interp_us, "first_output_ms": first_output_ms,
        "interp_peak_bytes": interp_peak, "input_bytes": input_bytes, "startup": startup,
        "meta_peak_same_symbols_bytes": meta_peak, "host_fallback_ops": host_ops,
    });
    // Host µs of one call alone (the stream drained before each), median of
    // `samples`: what the floors below measure, free of queue back-pressure.
    let samples = (repeats * 20).max(200);
    let time_one = |backend: &mut CudaBackend, f: &mut dyn FnMut(&mut CudaBackend) -> Result<()>| -> Result<f64> {
        for _ in 0..iters.min(50) {
            f(backend)?;
        }
        sync(backend)?;
        let mut per_call = Vec::with_capacity(samples);
        for _ in 0..samples {
            let t0 = Instant::now();
            f(backend)?;
            per_call.push(t0.elapsed().as_secs_f64() * 1e6);
            sync(backend)?;
        }
        per_call.sort_by(f64::total_cmp);
        Ok(per_call[per_call.len() / 2])
    };
    // Wall µs per call with the device's work included: `latency` times one
    // call and the wait for its results (median of `samples`); `drained`
    // times `iters` calls queued back to back and the wait for the last
    // (median of repeats, per call): the device-bound throughput.
    let latency =
        |backend: &mut CudaBackend, f: &mut dyn FnMut(&mut CudaBackend) -> Result<()>| -> Result<(f64, f64)> {
            for _ in 0..iters.min(50) {
                f(backend)?;
            }
            sync(backend)?;
            let mut one = Vec::with_capacity(samples);
            for _ in 0..samples {
                let t0 = Instant::now();
                f(backend)?;
                sync(backend)?;
                one.push(t0.elapsed().as_secs_f64() * 1e6);
            }
            let mut drained = Vec::with_capacity(repeats);
            for _ in 0..repeats {
                let t0 = Instant::now();
                for _ in 0..iters {
                    f(backend)?;
                }
                sync(backend)?;
                drained.push(t0.elapsed().as_secs_f64() * 1e6 / iters as f64);
            }
            one.sort_by(f64::total_cmp);
            drained.sort_by(f64::total_cmp);
            Ok((one[one.len() / 2], drained[drained.len() / 2]))
        };
    let mut kernels = 0usize;
    let mut launches = 0usize;
    let mut direct_one_us = None;
    let mut library_floor_us = 0.0;
    let mut reads = 0usize;
    match Prepared::record(&mut backend, &plan, args.clone(), &constants) {
        Err(e) => {
            out += &format!("direct: not prepared ({e})\n");
            json["direct_error"] = serde_json::json!(e.to_string());
        }
        Ok((mut prepared, _)) => {
            kernels = prepared.launches();
            if let Some(why) = prepared.writes_inputs() {
                out += &format!("note: the program writes its inputs ({why}); each timed call applies that write again, so outputs after the timed loops need not equal the first run's\n");
                json["writes_inputs"] = serde_json::json!(why);
            }
            let mut diverged = false;
            let direct_us = time(&mut backend, &mut |b| {
                diverged |= prepared.replay(b)? != Replay::Done;
                Ok(())
            })?;
            let one_us = time_one(&mut backend, &mut |b| {
                diverged |= prepared.replay(b)? != Replay::Done;
                Ok(())
            })?;
            direct_one_us = Some(one_us);
            let (lat, drained) = latency(&mut backend, &mut |b| {
                diverged |= prepared.replay(b)? != Replay::Done;
                Ok(())
            })?;
            out += &format!("direct with the device's work: {lat:.2} us latency per call, {drained:.2} us/call drained ({iters} queued)\n");
            json["direct_latency_us"] = serde_json::json!(lat);
            json["direct_drained_us"] = serde_json::json!(drained);
            launches = kernels - prepared.library_calls();
            reads = prepared.reads();
            backend.set_cuda_rng(rng0).map_err(|e| anyhow::anyhow!("{e}"))?;
            diverged |= prepared.replay(&backend).map_err(|e| anyhow::anyhow!("{e}"))? != Replay::Done;
            let direct_bits = fingerprint(&mut backend, prepared.outputs())?;
            let per = |us: f64| if kernels > 0 { us / kernels as f64 } else { f64::NAN };
            out += &format!(
                "direct: {direct_us:.2} us/call, {:.3} us/kernel ({kernels} launches, {} device reads, arena {} bytes){}; equal to the interpreter bit for bit: {}\n",
                per(direct_us),
                prepared.reads(),
                prepared.arena_bytes(),
                if diverged { ", DIVERGED" } else { "" },
                direct_bits == interp_bits
            );
            json["direct_us"] = serde_json::json!(direct_us);
            json["direct_one_us"] = serde_json::json!(one_us);
            json["launches"] = serde_json::json!(launches);
            json["library_calls"] = serde_json::json!(prepared.library_calls());

            json["kernels"] = serde_json::json!(kernels);
            json["reads"] = serde_json::json!(prepared.reads());
            json["arena_bytes"] = serde_json::json!(prepared.arena_bytes());
            json["direct_equals_interp"] = serde_json::json!(direct_bits == interp_bits);
            if graphs {
                let mut diverged = false;
                let graph_result = time(&mut backend, &mut |b| {
                    diverged |= prepared.replay_graphs(b)? != Replay::Done;
                    Ok(())
                });
                match graph_result {
                    Ok(graph_us) => {
                        backend.set_cuda_rng(rng0).map_err(|e| anyhow::anyhow!("{e}"))?;
                        diverged |=
                            prepared.replay_graphs(&backend).map_err(|e| anyhow::anyhow!("{e}"))? != Replay::Done;
                        let graph_bits = fingerprint(&mut backend, prepared.outputs())?;
                        out += &format!(
                            "graphs: {graph_us:.2} us/call, {:.3} us/kernel ({} graphs){}; equal to direct bit for bit: {}\n",
                            per(graph_us),
                            prepared.captured_graphs(),
                            if diverged { ", DIVERGED" } else { "" },
                            graph_bits == direct_bits
                        );
                        json["graph_us"] = serde_json::json!(graph_us);
                        let (lat, drained) = latency(&mut backend, &mut |b| {
                            diverged |= prepared.replay_graphs(b)? != Replay::Done;
                            Ok(())
                        })?;
                        out += &format!("graphs with the device's work: {lat:.2} us latency per call, {drained:.2} us/call drained ({iters} queued)\n");
                        json["graph_latency_us"] = serde_json::json!(lat);
                        json["graph_drained_us"] = serde_json::json!(drained);
                        json["graphs"] = serde_json::json!(prepared.captured_graphs());
                        json["graph_equals_direct"] = serde_json::json!(graph_bits == direct_bits);
                    }
                    Err(e) => {
                        out += &format!("graphs: failed ({e})\n");
                        json["graph_error"] = serde_json::json!(e.to_string());
                    }
                }
            }
            // Last: it runs the GEMMs alone, leaving the arena as no full call would.
            library_floor_us = prepared.library_floor_us(&backend, iters.clamp(1, 50), repeats)?;
            json["library_floor_us"] = serde_json::json!(library_floor_us);
            let bare = prepared.bare_launch_floor_us(&backend, samples)?;
            out += &format!(
                "the same {launches} launches in a bare cuLaunchKernel loop: {bare:.2} us ({:.3} us/launch)\n",
                bare / launches.max(1) as f64
            );
            json["bare_launches_us"] = serde_json::json!(bare);
        }
    }
    let floor =
        launch_floor(&mut backend, kernels.max(1), repeats).map_err(|e| anyhow::anyhow!("launch floor: {e}"))?;
    out += &format!(
        "floor ({}, {} launches): {:.3} us/launch, graph {:.3} us/kernel\n",
        floor.compiler, floor.kernels, floor.launch_us, floor.graph_us
    );
    if let Some(one) = direct_one_us {
        // Everything of one direct call but its launches: the call minus
        // the raw floor of its kernel launches, its device reads and cuBLAS's
        // own time.
        let floor_us = launches as f64 * floor.launch_us + reads as f64 * floor.read_us + library_floor_us;
        let fixed = one - floor_us;
        out += &format!(
            "direct, one call at a time: {one:.2} us/call; at the floor: {floor_us:.2} us ({launches} launches x {:.3} us, {reads} device reads x {:.3} us, libraries alone {library_floor_us:.2} us): {:.3}x the floor, fixed cost {fixed:.2} us/call\n",
            floor.launch_us,
            floor.read_us,
            one / floor_us
        );
        json["direct_floor_us"] = serde_json::json!(floor_us);
        json["direct_fixed_us"] = serde_json::json!(fixed);
    }
    json["floor_launch_us"] = serde_json::json!(floor.launch_us);
    json["floor_read_us"] = serde_json::json!(floor.read_us);
    json["floor_graph_us"] = serde_json::json!(floor.graph_us);
    json["floor_compiler"] = serde_json::json!(floor.compiler);
    out += &format!("bench-json {json}\n");
    write_output(None, &out)?;
    Ok(ExitCode::SUCCESS)
}

#[cfg(feature = "cuda")]
fn process_age_ms() -> Option<f64> {
    const USER_HZ: f64 = 100.0;
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name, which is in parentheses and may hold spaces.
    let rest = stat.rsplit_once(')')?.1;
    let start_ticks: f64 = rest.split_whitespace().nth(19)?.parse().ok()?;
    let uptime: f64 = std::fs::read_to_string("/proc/uptime")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    Some((uptime - start_ticks / USER_HZ) * 1e3)
}

/// `bench` in a build without the `cuda` feature.
#[cfg(not(feature = "cuda"))]
pub(crate) fn bench_cuda(_bundle: &Path, _bench: &BenchOptions) -> Result<ExitCode> {
    bail!("`bench --device cuda` needs wrapir built with the `cuda` feature (`cargo build --features cuda`)")
}

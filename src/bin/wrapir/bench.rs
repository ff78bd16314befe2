//! `wrapir bench`: opens the bundle, times it on the GPU
//! ([`wrapir::runtime::bench::bench_cuda`]) and prints the measures with this
//! process's start-up.

use super::*;
use serde_json::json;
use std::time::Instant;
use wrapir::runtime::bench::{bench_cuda, BenchError, BenchOptions, CudaBench};
use wrapir::runtime::cuda::CudaPaths;

/// The options of `wrapir bench`.
pub(crate) struct BenchArgs {
    pub(crate) graphs: bool,
    pub(crate) iters: usize,
    pub(crate) repeats: usize,
    pub(crate) preload: bool,
    pub(crate) graph_reads: wrapir::runtime::cuda::GraphReads,
    pub(crate) graph_streams: wrapir::runtime::cuda::GraphStreams,
    pub(crate) graph_branches: usize,
    pub(crate) allow_host_fallback: bool,
}

/// Start-up of this process before the device opens, in ms.
struct Startup {
    before_main: Option<f64>,
    load_program: f64,
    read_inputs: f64,
}

/// `bench --device cuda` (see `Command::Bench`).
pub(crate) fn bench_command(bundle: &Path, args: &BenchArgs) -> Result<ExitCode> {
    let started = Instant::now();
    let before_main = process_age_ms();
    let ms = |t: Instant| t.elapsed().as_secs_f64() * 1e3;
    let opened = open_bundle(bundle)?;
    let name = opened.name().to_string();
    let program = with_guards(&opened)?;
    let load_program = ms(started);
    let t = Instant::now();
    let inputs = opened.inputs()?.ok_or_else(|| {
        anyhow::anyhow!(
            "{} has no {}: `bench` needs the bundle's inputs",
            bundle.display(),
            wrapir::bundle::INPUTS
        )
    })?;
    let read_inputs = ms(t);
    super::kernels::require_kernel_images(&opened, true)?;
    let bench = BenchOptions {
        timing: wrapir::bench::Timing::new(args.iters, args.repeats),
        graphs: args.graphs,
        preload: args.preload,
        paths: CudaPaths::from_env(),
        host_fallback: args.allow_host_fallback,
        graph_reads: args.graph_reads,
        graph_streams: args.graph_streams,
        graph_branches: args.graph_branches,
    };
    let report = bench_cuda(&opened, &program, &inputs, &bench).map_err(|e| match e {
        BenchError::Place(e) => anyhow::anyhow!("placing the inputs of {name}: {e}"),
        BenchError::Run(e) => anyhow::anyhow!("running {name}: {e}{}", exec_host_fallback_hint(&e)),
        other => anyhow::anyhow!("{other}"),
    })?;
    let startup = Startup {
        before_main,
        load_program,
        read_inputs,
    };
    let first_output_ms = report.first_output.saturating_duration_since(started).as_secs_f64() * 1e3;
    write_output(None, &render(&name, &report, &startup, first_output_ms, &bench))?;
    Ok(ExitCode::SUCCESS)
}

/// The report: one line per measure, then the `bench-json` line.
fn render(name: &str, r: &CudaBench, startup: &Startup, first_output_ms: f64, bench: &BenchOptions) -> String {
    let iters = bench.timing.iters;
    let ms = |x: std::time::Duration| x.as_secs_f64() * 1e3;
    let lt = &r.load;
    let (place_ms, first_run_ms, copy_out_ms) = (ms(r.place_inputs), ms(r.first_run), ms(r.copy_out));
    let interp_us = r.interp_us;
    let mut out = format!("bundle {name}: interpreter {interp_us:.2} us/call; first outputs {first_output_ms:.1} ms after `bench` began\n");
    let mut host_ops = Vec::new();
    for (op, n) in &r.host_ops {
        out += &format!("host fallback: {op} x{n} (first run)\n");
        host_ops.push(json!({"op": op, "calls": n}));
    }
    out += &format!(
        "memory (bytes, inputs excluded): interpreter peak {}, meta plan peak with the same symbol values {}\n",
        r.interp_peak_bytes,
        r.meta_peak_bytes.map_or("unknown".to_string(), |m| m.to_string())
    );
    out += &format!(
        "start-up (ms): before main {}, load program {:.1}, read inputs {:.1}, cuInit+context+stream {:.1}, place inputs {place_ms:.1}, first run {first_run_ms:.1} (of which {} kernel images {:.1}, built-in kernels NVRTC {:.1}, cuBLAS first call {:.1}), copy out {copy_out_ms:.1}\n",
        startup.before_main.map_or("unknown".to_string(), |v| format!("{v:.0}")),
        startup.load_program,
        startup.read_inputs,
        ms(lt.device_open),
        lt.modules,
        ms(lt.module_load),
        ms(lt.builtin_load),
        ms(lt.blas_first_call),
    );
    let startup_json = json!({
        "before_main_ms": startup.before_main, "load_program_ms": startup.load_program,
        "read_inputs_ms": startup.read_inputs, "device_open_ms": ms(lt.device_open), "place_inputs_ms": place_ms,
        "first_run_ms": first_run_ms, "module_load_ms": ms(lt.module_load), "modules": lt.modules,
        "builtin_nvrtc_ms": ms(lt.builtin_load), "cublas_first_call_ms": ms(lt.blas_first_call),
        "copy_out_ms": copy_out_ms,
    });
    let mut json = json!({
        "bundle": name, "interp_us": interp_us, "first_output_ms": first_output_ms,
        "interp_peak_bytes": r.interp_peak_bytes, "input_bytes": r.input_bytes, "startup": startup_json,
        "meta_peak_same_symbols_bytes": r.meta_peak_bytes, "host_fallback_ops": host_ops,
    });
    let diverged = |d: bool| if d { ", DIVERGED" } else { "" };
    match &r.direct {
        Err(e) => {
            out += &format!("direct: not prepared ({e})\n");
            json["direct_error"] = json!(e);
        }
        Ok(d) => {
            if let Some(why) = &d.writes_inputs {
                out += &format!("note: the program writes its inputs ({why}); each timed call applies that write again, so outputs after the timed loops need not equal the first run's\n");
                json["writes_inputs"] = json!(why);
            }
            let (lat, p99, drained) = (d.latency.one_us, d.latency.one_p99_us, d.latency.drained_us);
            out += &format!("direct with the device's work: {lat:.2} us latency per call (p99 {p99:.2}), {drained:.2} us/call drained ({iters} queued)\n");
            extend(
                &mut json,
                json!({"direct_latency_us": lat, "direct_latency_p99_us": p99, "direct_drained_us": drained}),
            );
            out += &format!(
                "direct: {:.2} us/call, {:.3} us/kernel ({} launches, {} device reads, arena {} bytes){}; equal to the interpreter bit for bit: {}\n",
                d.queued_us,
                d.per_kernel(d.queued_us),
                d.kernels,
                d.reads,
                d.arena_bytes,
                diverged(d.diverged),
                d.equals_interp
            );
            extend(
                &mut json,
                json!({
                    "direct_us": d.queued_us, "direct_one_us": d.one_us, "launches": d.launches,
                    "library_calls": d.library_calls, "kernels": d.kernels, "reads": d.reads,
                    "arena_bytes": d.arena_bytes, "direct_equals_interp": d.equals_interp,
                    "single_stream_arena_bytes": d.single_stream_arena_bytes, "concurrent": d.concurrent,
                }),
            );
            if d.concurrent {
                out += &format!(
                    "concurrent graph replay: arena {} bytes, single-stream plan {} bytes\n",
                    d.arena_bytes, d.single_stream_arena_bytes
                );
            }
            if let Some(why) = &d.single_stream_reason {
                out += &format!("single stream: {why}\n");
            }
            match &d.graphs {
                None => {}
                Some(Ok(g)) => {
                    out += &format!(
                        "graphs: {:.2} us/call, {:.3} us/kernel ({}){}; equal to direct bit for bit: {}\n",
                        g.queued_us,
                        d.per_kernel(g.queued_us),
                        g.form,
                        diverged(g.diverged),
                        g.equals_direct
                    );
                    extend(&mut json, json!({"graph_us": g.queued_us, "graph_form": g.form}));
                    let (lat, p99, drained) = (g.latency.one_us, g.latency.one_p99_us, g.latency.drained_us);
                    out += &format!("graphs with the device's work: {lat:.2} us latency per call (p99 {p99:.2}), {drained:.2} us/call drained ({iters} queued)\n");
                    if let Some(dev) = g.device_us {
                        out += &format!(
                            "device floor (events around one replayed graph): {dev:.2} us; graph latency {:.3}x the floor, {:+.2} us over it\n",
                            lat / dev,
                            lat - dev
                        );
                    }
                    if let Some(c) = &g.critical_path {
                        out += &format!(
                            "operations one by one ({} timed with events, each as a graph of {} copies): {:.2} us summed, longest dependent chain (critical-path bound) {:.2} us ({:.2}x)\n",
                            c.ops,
                            wrapir::runtime::cuda::CriticalPath::REPEATS,
                            c.sum_us,
                            c.critical_us,
                            c.sum_us / c.critical_us.max(f64::MIN_POSITIVE)
                        );
                        out += &critical_path_profile(c, g.device_us);
                        let chain: Vec<_> = c
                            .chain
                            .iter()
                            .map(|s| json!({"op": s.op, "what": s.what, "us": s.us}))
                            .collect();
                        extend(
                            &mut json,
                            json!({"ops_sum_us": c.sum_us, "critical_path_us": c.critical_us,
                                   "chain_replay_us": c.chain_replay_us, "critical_chain": chain}),
                        );
                    }
                    extend(
                        &mut json,
                        json!({
                            "graph_device_us": g.device_us, "graph_latency_p99_us": p99, "graph_latency_us": lat,
                            "graph_drained_us": drained, "graphs": g.graphs, "graph_equals_direct": g.equals_direct,
                        }),
                    );
                }
                Some(Err(e)) => {
                    out += &format!("graphs: failed ({e})\n");
                    json["graph_error"] = json!(e);
                }
            }
            json["library_floor_us"] = json!(d.library_floor_us);
            for c in &d.library_costs {
                out += &format!(
                    "library {} {}: {} calls, {:.2} us ({:.2} us/call)\n",
                    c.library,
                    c.op,
                    c.calls,
                    c.us,
                    c.us / c.calls.max(1) as f64
                );
            }
            json["library_costs"] = json!(d
                .library_costs
                .iter()
                .map(|c| json!({"library": c.library, "op": c.op, "calls": c.calls, "us": c.us}))
                .collect::<Vec<_>>());
            out += &format!(
                "the same {} launches in a bare cuLaunchKernel loop: {:.2} us ({:.3} us/launch)\n",
                d.launches,
                d.bare_launches_us,
                d.bare_launches_us / d.launches.max(1) as f64
            );
            json["bare_launches_us"] = json!(d.bare_launches_us);
        }
    }
    let floor = &r.floor;
    out += &format!(
        "floor ({}, {} launches): {:.3} us/launch, graph {:.3} us/kernel\n",
        floor.compiler, floor.kernels, floor.launch_us, floor.graph_us
    );
    if let (Ok(d), Some(at)) = (&r.direct, r.at_floor()) {
        out += &format!(
            "direct, one call at a time: {:.2} us/call; at the floor: {:.2} us ({} launches x {:.3} us, {} device reads x {:.3} us, libraries alone {:.2} us): {:.3}x the floor, fixed cost {:.2} us/call\n",
            d.one_us,
            at.floor_us,
            d.launches,
            floor.launch_us,
            d.reads,
            floor.read_us,
            d.library_floor_us,
            d.one_us / at.floor_us,
            at.fixed_us
        );
        extend(
            &mut json,
            json!({"direct_floor_us": at.floor_us, "direct_fixed_us": at.fixed_us}),
        );
    }
    extend(
        &mut json,
        json!({
            "floor_launch_us": floor.launch_us, "floor_read_us": floor.read_us,
            "floor_graph_us": floor.graph_us, "floor_compiler": floor.compiler,
        }),
    );
    out += &format!("bench-json {json}\n");
    out
}

/// Adds `fields` (an object) to the object `json`, replacing keys it has.
fn extend(json: &mut serde_json::Value, fields: serde_json::Value) {
    if let (Some(json), serde_json::Value::Object(fields)) = (json.as_object_mut(), fields) {
        json.extend(fields);
    }
}

/// This process's age in ms, from `/proc/self/stat` and `/proc/uptime`
/// (`None` where they cannot be read).
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

/// Where the device time of a graph replay goes past the critical-path
/// bound: the chain's operations alone replayed as one graph (the bound plus
/// what each dependency costs), the rest (`device_us` over that) what the
/// operations off the chain took from it, and the chain's longest steps.
fn critical_path_profile(c: &wrapir::runtime::cuda::CriticalPath, device_us: Option<f64>) -> String {
    let steps = c.chain.len();
    let edges = steps.saturating_sub(1).max(1) as f64;
    let mut out = format!(
        "critical path: {steps} of {} operations; alone, as one graph: {:.2} us ({:+.2} us over the bound, {:.3} us per dependency)\n",
        c.ops,
        c.chain_replay_us,
        c.chain_replay_us - c.critical_us,
        (c.chain_replay_us - c.critical_us) / edges
    );
    if let Some(dev) = device_us {
        out += &format!(
            "replay over the bound: {:+.2} us = {:+.2} us dependencies along the chain {:+.2} us the operations off the chain did not hide\n",
            dev - c.critical_us,
            c.chain_replay_us - c.critical_us,
            dev - c.chain_replay_us
        );
    }
    let mut longest: Vec<_> = c.chain.iter().collect();
    longest.sort_by(|a, b| b.us.total_cmp(&a.us));
    let top: Vec<String> = longest
        .iter()
        .take(5)
        .map(|s| format!("#{} {} {:.2} us", s.op, s.what, s.us))
        .collect();
    out += &format!("critical path's longest steps: {}\n", top.join("; "));
    out
}

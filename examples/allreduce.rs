//! All-reduce bus bandwidth through wrapir's NCCL path, for comparison with
//! NCCL's own figure (PyTorch's `dist.all_reduce` on the same GPUs:
//! `fixtures/inductor/bench_allreduce.py`).
//!
//! ```text
//! cargo run --release --features cuda --example allreduce -- [--ranks N] [--iters N] [--sizes BYTES,BYTES,...]
//! ```
//!
//! Each rank (one thread and GPU each, default: every GPU) runs a program of
//! one `all_reduce` of an f32 buffer of each size, recorded once and then
//! replayed as a CUDA graph (`PreparedCache` with graphs). Every iteration
//! replays and waits for the stream; the figure is the median over the
//! iterations of the slowest rank's time. Printed per size: the time,
//! algorithm bandwidth (bytes / time) and bus bandwidth (algbw * 2(n-1)/n,
//! nccl-tests' definition; equal to 0 for one rank), as one JSON object
//! per line.

use indexmap::IndexMap;
use std::sync::{Arc, Barrier};
use std::time::Instant;
use wrapir::exec::collective::{CollectiveOptions, ProcessGroups};
use wrapir::exec::cuda::{self, CudaBackend, CudaOptions, NcclWorld, PreparedCache};
use wrapir::exec::Tensor;

fn main() {
    if let Err(e) = run() {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), String> {
    let mut ranks = (0..16).take_while(|&o| cuda::device_arch(o).is_ok()).count();
    let mut iters = 50usize;
    let mut sizes: Vec<usize> = vec![1 << 12, 1 << 16, 1 << 20, 1 << 24, 1 << 28];
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = || args.next().ok_or(format!("{a} needs a value"));
        match a.as_str() {
            "--ranks" => ranks = value()?.parse().map_err(|e| format!("--ranks: {e}"))?,
            "--iters" => iters = value()?.parse().map_err(|e| format!("--iters: {e}"))?,
            "--sizes" => {
                sizes = value()?
                    .split(',')
                    .map(|s| s.parse::<usize>().map_err(|e| format!("--sizes: {e}")))
                    .collect::<Result<_, _>>()?
            }
            other => return Err(format!("unknown argument {other}")),
        }
    }
    if ranks == 0 {
        return Err("no GPU".into());
    }
    let paths = wrapir::exec::cuda::CudaPaths::from_env();
    for bytes in sizes {
        let n = (bytes / 4).max(1);
        let text = |r: usize| {
            format!(
                "wrapir 1\n\ngraph main(x: f32[{n}][1]@cuda:{r}) -> (buf0) {{\n  buffer buf0: f32[{n}][1]@cuda:{r}\n  extern buf0 = torch.ops._c10d_functional.all_reduce.default(x, 'sum', '0')\n  extern torch.ops._c10d_functional.wait_tensor.default(buf0)\n}}\n"
            )
        };
        let programs: Vec<wrapir::ir::Program> = (0..ranks)
            .map(|r| wrapir::text::parse(&text(r)).map_err(|e| e.to_string()))
            .collect::<Result<_, _>>()?;
        let world = NcclWorld::new(ProcessGroups::world(ranks), CollectiveOptions::default(), &paths)
            .map_err(|e| e.to_string())?;
        let barrier = Arc::new(Barrier::new(ranks));
        let times: Vec<Vec<f64>> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..ranks)
                .map(|r| {
                    let (world, program, barrier, paths) = (&world, &programs[r], Arc::clone(&barrier), paths.clone());
                    scope.spawn(move || -> Result<Vec<f64>, String> {
                        let e = |e: &dyn std::fmt::Display| format!("rank {r}: {e}");
                        let mut backend = CudaBackend::new(CudaOptions {
                            ordinal: r,
                            paths,
                            ..CudaOptions::default()
                        })
                        .map_err(|x| e(&x))?;
                        backend.join_world(world, r).map_err(|x| e(&x))?;
                        let x = Tensor::from_f64(wrapir::ir::DType::Float32, &vec![1.0; n], &[n as i64])
                            .map_err(|x| e(&x))?;
                        let inputs: IndexMap<String, Tensor> = [("x".to_string(), x)].into_iter().collect();
                        let (plan, args, constants) =
                            cuda::place_inputs(program, &mut backend, &inputs).map_err(|x| e(&x))?;
                        let mut cache = PreparedCache::default();
                        // Record, capture, then a few warm-up launches.
                        for _ in 0..5 {
                            cache
                                .run(&mut backend, &plan, &args, &constants, true)
                                .map_err(|x| e(&x))?;
                        }
                        backend.synchronize().map_err(|x| e(&x))?;
                        let mut times = Vec::with_capacity(iters);
                        for _ in 0..iters {
                            barrier.wait();
                            let t0 = Instant::now();
                            cache
                                .run(&mut backend, &plan, &args, &constants, true)
                                .map_err(|x| e(&x))?;
                            backend.synchronize().map_err(|x| e(&x))?;
                            times.push(t0.elapsed().as_secs_f64());
                        }
                        Ok(times)
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().map_err(|_| "a rank panicked".to_string())?)
                .collect::<Result<Vec<_>, String>>()
        })?;
        let mut slowest: Vec<f64> = (0..iters)
            .map(|i| times.iter().map(|t| t[i]).fold(0.0, f64::max))
            .collect();
        slowest.sort_by(f64::total_cmp);
        let t = slowest[slowest.len() / 2];
        let bytes = (n * 4) as f64;
        let algbw = bytes / t / 1e9;
        let busbw = algbw * 2.0 * (ranks as f64 - 1.0) / ranks as f64;
        println!(
            "{{\"ranks\": {ranks}, \"bytes\": {}, \"median_us\": {:.2}, \"algbw_gbs\": {algbw:.2}, \"busbw_gbs\": {busbw:.2}}}",
            n * 4,
            t * 1e6
        );
    }
    Ok(())
}

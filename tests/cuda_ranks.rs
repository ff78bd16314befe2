#![cfg(feature = "cuda")]
//! Collectives on NCCL (`exec::collective::run_ranks` over `runtime::cuda::CudaRankJob`s): every collective against
//! the host communicator's result for the same programs, the prepared path
//! and CUDA graphs replaying them, and the ways a multi-rank GPU run fails
//! (two ranks on one GPU, a rank whose GPU does not exist, a collective
//! outside any run) as errors, not hangs.
//!
//! On a machine with `N` GPUs: `cargo test --features cuda --test cuda_ranks`
//! (the runs use as many GPUs as there are, at least one).

mod common;

use indexmap::IndexMap;
use std::time::{Duration, Instant};
use wrapir::exec::collective::{self, CollectiveOptions, ProcessGroups, RankJob};
use wrapir::exec::cuda::{self, CudaBackend, CudaOptions, CudaPaths, NcclWorld, PreparedCache};
use wrapir::exec::host::HostBackend;
use wrapir::exec::{Backend, Tensor};
use wrapir::ir::Program;
use wrapir::runtime::cuda::CudaRankJob;

fn program(text: &str) -> Program {
    wrapir::text::parse(text).unwrap_or_else(|e| panic!("{e}\n{text}"))
}

/// The GPUs of this machine.
fn gpus() -> usize {
    (0..8).take_while(|&o| cuda::device_arch(o).is_ok()).count()
}

/// A program of `x: <dtype>[n]` on `device` running `line` into `buf0: <dtype>[m]`.
fn collective_program(device: &str, dtype: &str, n: usize, m: usize, line: &str) -> Program {
    program(&format!(
        "wrapir 1\n\ngraph main(x: {dtype}[{n}][1]@{device}) -> (buf0) {{\n  buffer buf0: {dtype}[{m}][1]@{device}\n  {line}\n  extern torch.ops._c10d_functional.wait_tensor.default(buf0)\n}}\n"
    ))
}

/// The collective lines checked, with the output size for `n` inputs on `w` ranks.
fn lines(w: usize) -> Vec<(String, Box<dyn Fn(usize) -> usize>)> {
    vec![
        (
            "extern buf0 = torch.ops._c10d_functional.all_reduce.default(x, 'sum', '0')".into(),
            Box::new(|n| n),
        ),
        (
            "extern buf0 = torch.ops._c10d_functional.all_reduce.default(x, 'max', '0')".into(),
            Box::new(|n| n),
        ),
        (
            "extern buf0 = torch.ops._c10d_functional.all_reduce.default(x, 'avg', '0')".into(),
            Box::new(|n| n),
        ),
        (
            format!("extern buf0 = torch.ops._c10d_functional.all_gather_into_tensor.default(x, {w}, '0')"),
            Box::new(move |n| n * w),
        ),
        (
            format!("extern buf0 = torch.ops._c10d_functional.reduce_scatter_tensor.default(x, 'sum', {w}, '0')"),
            Box::new(move |n| n / w),
        ),
        (
            "extern buf0 = torch.ops._c10d_functional.broadcast.default(x, 0, '0')".into(),
            Box::new(|n| n),
        ),
    ]
}

fn inputs_for(rank: usize, n: usize, dtype: wrapir::ir::DType) -> IndexMap<String, Tensor> {
    let values: Vec<f64> = common::uniform_values(n, 7 + rank as u64)
        .into_iter()
        .map(|v| (v * 8.0).round() / 4.0)
        .collect();
    let t = Tensor::from_f64(dtype, &values, &[n as i64]).unwrap();
    [("x".to_string(), t)].into_iter().collect()
}

#[test]
fn collectives_on_nccl_match_the_host_communicator() {
    let w = gpus();
    assert!(w >= 1, "no GPU");
    let n = 8 * w;
    for dtype_name in ["f32", "bf16", "i64"] {
        let dtype: wrapir::ir::DType = dtype_name.parse().unwrap();
        for (line, out) in lines(w) {
            if dtype_name == "i64" && line.contains("'avg'") {
                continue;
            }
            let m = out(n);
            let gpu_programs: Vec<Program> = (0..w)
                .map(|r| collective_program(&format!("cuda:{r}"), dtype_name, n, m, &line))
                .collect();
            let host_programs: Vec<Program> = (0..w)
                .map(|_| collective_program("cpu", dtype_name, n, m, &line))
                .collect();
            let inputs: Vec<IndexMap<String, Tensor>> = (0..w).map(|r| inputs_for(r, n, dtype)).collect();
            let jobs = (0..w)
                .map(|r| CudaRankJob {
                    program: &gpu_programs[r],
                    backend: CudaOptions {
                        ordinal: r,
                        ..CudaOptions::from_env()
                    },
                    inputs: &inputs[r],
                })
                .collect();
            let gpu = collective::run_ranks(ProcessGroups::world(w), jobs, CollectiveOptions::default()).unwrap();
            let host_jobs = (0..w)
                .map(|r| RankJob {
                    program: &host_programs[r],
                    backend: HostBackend::default(),
                    inputs: &inputs[r],
                })
                .collect();
            let host = collective::run_ranks(ProcessGroups::world(w), host_jobs, CollectiveOptions::default()).unwrap();
            for (rank, (g, h)) in gpu.iter().zip(&host).enumerate() {
                let g = g
                    .as_ref()
                    .unwrap_or_else(|e| panic!("{dtype_name} `{line}` rank {rank} on NCCL: {e}"));
                let h = h
                    .as_ref()
                    .unwrap_or_else(|e| panic!("{dtype_name} `{line}` rank {rank} on the host: {e}"));
                let (g, h) = (g.outputs[0].as_tensor().unwrap(), h.outputs[0].as_tensor().unwrap());
                assert_eq!(g.size(), h.size(), "{dtype_name} `{line}` rank {rank}");
                // Inputs are multiples of 1/4 small enough that every sum is
                // exact in every dtype and order: results are equal.
                assert_eq!(
                    g.to_f64_vec().unwrap(),
                    h.to_f64_vec().unwrap(),
                    "{dtype_name} `{line}` rank {rank}"
                );
            }
        }
    }
}

#[test]
fn prepared_replays_and_graphs_hold_the_collectives() {
    let w = gpus();
    let n = 8 * w;
    let line = "extern buf0 = torch.ops._c10d_functional.all_reduce.default(x, 'sum', '0')";
    let programs: Vec<Program> = (0..w)
        .map(|r| collective_program(&format!("cuda:{r}"), "f32", n, n, line))
        .collect();
    let inputs: Vec<IndexMap<String, Tensor>> = (0..w).map(|r| inputs_for(r, n, wrapir::ir::DType::Float32)).collect();
    let world = NcclWorld::new(
        ProcessGroups::world(w),
        CollectiveOptions::default(),
        &CudaPaths::from_env(),
    )
    .unwrap();
    let results: Vec<(usize, Vec<f64>, Vec<f64>)> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..w)
            .map(|r| {
                let (world, program, inputs) = (&world, &programs[r], &inputs[r]);
                scope.spawn(move || {
                    let mut backend = CudaBackend::new(CudaOptions {
                        ordinal: r,
                        ..CudaOptions::from_env()
                    })
                    .unwrap();
                    backend.join_world(world, r).unwrap();
                    let (plan, args, constants) = cuda::place_inputs(program, &mut backend, inputs).unwrap();
                    let mut cache = PreparedCache::default();
                    let mut last = Vec::new();
                    // Records, then replays three times: the first replay
                    // captures the graph, the others launch it.
                    for _ in 0..4 {
                        let prepared = cache.run(&mut backend, &plan, &args, &constants, true).unwrap();
                        let out = prepared.outputs()[0].as_tensor().unwrap().clone();
                        last = backend.copy_out(&out).unwrap().to_f64_vec().unwrap();
                    }
                    let direct = wrapir::exec::run_program(program, &mut backend, inputs).unwrap();
                    let direct = backend
                        .copy_out(direct.outputs[0].as_tensor().unwrap())
                        .unwrap()
                        .to_f64_vec()
                        .unwrap();
                    assert_eq!(cache.recordings, 1, "rank {r}: one recording");
                    (r, last, direct)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let sum: Vec<f64> = (0..n)
        .map(|i| inputs.iter().map(|m| m["x"].to_f64_vec().unwrap()[i]).sum())
        .collect();
    for (r, replayed, direct) in results {
        assert_eq!(replayed, sum, "rank {r}: graph replay");
        assert_eq!(direct, sum, "rank {r}: direct run");
    }
}

#[test]
fn gpu_rank_errors_are_errors_not_hangs() {
    let line = "extern buf0 = torch.ops._c10d_functional.all_reduce.default(x, 'sum', '0')";
    let p = collective_program("cuda:0", "f32", 4, 4, line);
    let x = inputs_for(0, 4, wrapir::ir::DType::Float32);
    let job = |ordinal: usize| CudaRankJob {
        program: &p,
        backend: CudaOptions {
            ordinal,
            ..CudaOptions::from_env()
        },
        inputs: &x,
    };

    // Two ranks on one GPU: refused before anything starts.
    let e = collective::run_ranks(
        ProcessGroups::world(2),
        vec![job(0), job(0)],
        CollectiveOptions::default(),
    )
    .unwrap_err();
    assert!(e.to_string().contains("ranks 0 and 1 are both on cuda:0"), "{e}");

    // A rank whose GPU does not exist fails, and the rank waiting for it to
    // join fails at once naming it.
    let missing = gpus();
    let started = Instant::now();
    let got = collective::run_ranks(
        ProcessGroups::world(2),
        vec![job(0), job(missing)],
        CollectiveOptions {
            timeout: Duration::from_secs(30),
            ..Default::default()
        },
    )
    .unwrap();
    assert!(got[1].is_err(), "rank 1 on cuda:{missing} must fail");
    let e = got[0].as_ref().map(|_| ()).unwrap_err().to_string();
    assert!(e.contains("rank 1 failed"), "{e}");
    assert!(started.elapsed() < Duration::from_secs(20), "{:?}", started.elapsed());

    // A collective outside a multi-rank run.
    let e = cuda::run_program(&p, CudaOptions::from_env(), &x)
        .unwrap_err()
        .to_string();
    assert!(e.contains("a collective runs only in a multi-rank run"), "{e}");

    // A reduce op NCCL does not have.
    let band = collective_program(
        "cuda:0",
        "i64",
        4,
        4,
        "extern buf0 = torch.ops._c10d_functional.all_reduce.default(x, 'band', '0')",
    );
    let xi = inputs_for(0, 4, wrapir::ir::DType::Int64);
    let got = collective::run_ranks(
        ProcessGroups::world(1),
        vec![CudaRankJob {
            program: &band,
            backend: CudaOptions::from_env(),
            inputs: &xi,
        }],
        CollectiveOptions::default(),
    )
    .unwrap();
    let e = got[0].as_ref().map(|_| ()).unwrap_err().to_string();
    assert!(e.contains("reduce op `band`") && e.contains("NCCL"), "{e}");
}

#[test]
fn exported_nccl_rank_sets_match_eager() {
    let dir = common::root().join("fixtures/inductor/bundles_ranks_cuda");
    let mut failures = Vec::new();
    for case in ["sp_mlp", "tp_attention", "tp_mlp"] {
        let set = dir.join(case);
        let set = set.to_str().unwrap();
        let mut args = vec!["run", set, "--device", "cuda"];
        if case == "tp_attention" {
            args.push("--allow-host-fallback");
        }
        let r = common::wrapir(&args);
        if r.code != 0 || !r.stdout.contains("against eager: 1 outputs match") {
            failures.push(format!("{case}: exit {}\n{}{}", r.code, r.stdout, r.stderr));
        }
    }
    common::assert_no_failures(&failures);
}

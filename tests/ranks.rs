//! Multi-rank programs on the host: the committed rank sets (one program per
//! rank of a real two-process `torch.distributed` run, exported with
//! `export_ranks`) run as threads whose collectives meet in a
//! `HostCommunicator`, each rank matching its own eager outputs; the
//! collectives' results on hand-made inputs; and every way a multi-rank run
//! can go wrong ending in an error that names the rank, op and group, never
//! a hang.

mod common;

use indexmap::IndexMap;
use std::path::Path;
use std::time::{Duration, Instant};
use wrapir::bundle::RankSet;
use wrapir::exec::collective::{run_ranks, CollectiveOptions, ProcessGroups, RankJob};
use wrapir::exec::host::kernels as host_kernels;
use wrapir::exec::host::HostBackend;
use wrapir::exec::{Tensor, Value};
use wrapir::ir::Program;

const CASES: &[&str] = &["sp_mlp", "tp_attention", "tp_mlp"];

/// The rank sets directly under `rel` (relative to the crate root), sorted.
fn rank_sets_in(rel: &str) -> Vec<std::path::PathBuf> {
    let dir = common::root().join(rel);
    let mut v: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| RankSet::is_rank_set(p))
        .collect();
    v.sort();
    v
}

/// Runs every rank of the rank set at `dir` on the host and compares each
/// rank's outputs with its eager and compiled references.
fn check_rank_set(dir: &Path) -> Result<String, String> {
    let set = RankSet::open(dir, &Default::default()).map_err(|e| e.to_string())?;
    set.check()?;
    let mut inputs = Vec::new();
    let mut jobs = Vec::new();
    for bundle in set.ranks() {
        inputs.push(bundle.inputs().map_err(|e| e.to_string())?.ok_or("no inputs")?);
    }
    for (bundle, inputs) in set.ranks().iter().zip(&inputs) {
        let mut backend = HostBackend::default();
        host_kernels::load_kernels_from(&mut backend, bundle.program(), &bundle.kernel_images(), None)
            .map_err(|e| e.to_string())?;
        jobs.push(RankJob {
            program: bundle.program(),
            backend,
            inputs,
        });
    }
    let results = run_ranks(set.groups().clone(), jobs, CollectiveOptions::default()).map_err(|e| e.to_string())?;
    let mut report = String::new();
    for (rank, (bundle, result)) in set.ranks().iter().zip(results).enumerate() {
        let out = result.map_err(|e| format!("rank {rank}: {e}"))?;
        let c = common::compare_with_bundle(bundle, &out.outputs).map_err(|e| format!("rank {rank}: {e}"))?;
        if let Some(e) = c.first_error() {
            return Err(format!("rank {rank} differs {e}"));
        }
        let (eager, inductor) = (&c.eager, c.compiled.as_ref().expect("first_error reports its absence"));
        let worst =
            |c: &wrapir::exec::compare::Comparison| c.outputs.iter().filter_map(|o| o.max_abs).fold(0.0f64, f64::max);
        report += &format!(
            "rank {rank}: max abs error {:.2e} against eager, {:.2e} against Inductor\n",
            worst(eager),
            worst(inductor)
        );
    }
    Ok(report)
}

#[test]
fn every_rank_set_matches_eager_on_every_rank() {
    let sets = rank_sets();
    let names: Vec<String> = sets.iter().map(|p| common::name(p)).collect();
    assert_eq!(names, CASES, "committed rank sets");
    let mut failures = Vec::new();
    for dir in &sets {
        match check_rank_set(dir) {
            Ok(report) => eprintln!("{}:\n{report}", common::name(dir)),
            Err(e) => failures.push(format!("{}: {e}", common::name(dir))),
        }
    }
    common::assert_no_failures(&failures);
}

fn rank_sets() -> Vec<std::path::PathBuf> {
    rank_sets_in("fixtures/inductor/bundles_ranks")
}

/// The rank sets exported from a one-GPU `nccl` run (CUDA programs).
fn cuda_rank_sets() -> Vec<std::path::PathBuf> {
    rank_sets_in("fixtures/inductor/bundles_ranks_cuda")
}

#[test]
fn cuda_rank_sets_check_and_run_on_meta() {
    let sets = cuda_rank_sets();
    let names: Vec<String> = sets.iter().map(|p| common::name(p)).collect();
    assert_eq!(names, CASES, "committed CUDA rank sets");
    for dir in sets {
        let d = dir.to_str().unwrap();
        let r = common::wrapir(&["check", d]);
        assert_eq!(r.code, 0, "{d}: {}{}", r.stdout, r.stderr);
        assert!(
            r.stdout.contains("1 ranks issue the same collectives"),
            "{d}: {}",
            r.stdout
        );
        let r = common::wrapir(&["run", d, "--device", "meta"]);
        assert_eq!(r.code, 0, "{d}: {}{}", r.stdout, r.stderr);
    }
}

#[test]
fn every_rank_set_runs_on_meta_with_the_declared_layouts() {
    for dir in rank_sets() {
        let set = RankSet::open(&dir, &Default::default()).unwrap();
        for (rank, bundle) in set.ranks().iter().enumerate() {
            let out = wrapir::exec::meta::run_program(bundle.program(), &Default::default())
                .unwrap_or_else(|e| panic!("{} rank {rank}: {e}", common::name(&dir)));
            let declared = &bundle.program().main.outputs;
            assert_eq!(out.outputs.len(), declared.len(), "{} rank {rank}", common::name(&dir));
        }
    }
}

fn program(text: &str) -> Program {
    wrapir::text::parse(text).unwrap_or_else(|e| panic!("{e}\n{text}"))
}

/// A program of `x: f32[n]` running `line` into `buf0: f32[m]`.
fn collective_program(n: usize, m: usize, line: &str) -> Program {
    program(&format!(
        "wrapir 1\n\ngraph main(x: f32[{n}][1]@cpu) -> (buf0) {{\n  buffer buf0: f32[{m}][1]@cpu\n  {line}\n  extern torch.ops._c10d_functional.wait_tensor.default(buf0)\n}}\n"
    ))
}

/// Runs `programs[r]` with `x = inputs[r]` on ranks `0..n` of one world group.
fn run(programs: &[Program], inputs: &[Vec<f32>], timeout: Duration) -> Vec<Result<Vec<f64>, String>> {
    let inputs: Vec<IndexMap<String, Tensor>> = inputs
        .iter()
        .map(|v| {
            [("x".to_string(), Tensor::from_vec(v.clone(), &[v.len() as i64]).unwrap())]
                .into_iter()
                .collect()
        })
        .collect();
    let jobs = programs
        .iter()
        .zip(&inputs)
        .map(|(program, inputs)| RankJob {
            program,
            backend: HostBackend::default(),
            inputs,
        })
        .collect();
    let options = CollectiveOptions {
        timeout,
        ..Default::default()
    };
    run_ranks(ProcessGroups::world(programs.len()), jobs, options)
        .unwrap()
        .into_iter()
        .map(|r| match r {
            Ok(out) => match &out.outputs[0] {
                Value::Tensor(t) => Ok(t.to_f64_vec().unwrap()),
                other => Err(format!("not a tensor: {other:?}")),
            },
            Err(e) => Err(e.to_string()),
        })
        .collect()
}

const LONG: Duration = Duration::from_secs(30);

#[test]
fn collectives_compute_what_torch_distributed_computes() {
    let x = [
        vec![1.0f32, 2.0, 3.0, 4.0],
        vec![10.0, -20.0, 30.5, 0.25],
        vec![0.5, 7.0, -3.0, 8.0],
    ];
    let same = |line: &str, m: usize| vec![collective_program(4, m, line); 3];
    let check = |line: &str, m: usize, want: [&[f64]; 3]| {
        let got = run(&same(line, m), &x, LONG);
        for (rank, (g, w)) in got.iter().zip(want).enumerate() {
            assert_eq!(g.as_deref(), Ok(w), "{line}: rank {rank}");
        }
    };
    let sum: &[f64] = &[11.5, -11.0, 30.5, 12.25];
    check(
        "extern buf0 = torch.ops._c10d_functional.all_reduce.default(x, 'sum', '0')",
        4,
        [sum, sum, sum],
    );
    let max: &[f64] = &[10.0, 7.0, 30.5, 8.0];
    check(
        "extern buf0 = torch.ops._c10d_functional.all_reduce.default(x, 'max', '0')",
        4,
        [max, max, max],
    );
    let min: &[f64] = &[0.5, -20.0, -3.0, 0.25];
    check(
        "extern buf0 = torch.ops._c10d_functional.all_reduce.default(x, 'min', '0')",
        4,
        [min, min, min],
    );
    let avg: Vec<f64> = sum.iter().map(|v| ((*v as f32) / 3.0) as f64).collect();
    let avg = avg.as_slice();
    check(
        "extern buf0 = torch.ops._c10d_functional.all_reduce.default(x, 'avg', '0')",
        4,
        [avg, avg, avg],
    );
    let gathered: Vec<f64> = x.iter().flatten().map(|v| *v as f64).collect();
    let g = gathered.as_slice();
    check(
        "extern buf0 = torch.ops._c10d_functional.all_gather_into_tensor.default(x, 3, '0')",
        12,
        [g, g, g],
    );
    let from1: Vec<f64> = x[1].iter().map(|v| *v as f64).collect();
    let b = from1.as_slice();
    check(
        "extern buf0 = torch.ops._c10d_functional.broadcast.default(x, 1, '0')",
        4,
        [b, b, b],
    );

    // reduce_scatter over two ranks: each gets its half of the sum.
    let two = vec![
        collective_program(
            4,
            2,
            "extern buf0 = torch.ops._c10d_functional.reduce_scatter_tensor.default(x, 'sum', 2, '0')"
        );
        2
    ];
    let got = run(&two, &x[..2], LONG);
    assert_eq!(got[0].as_deref(), Ok(&[11.0, -18.0][..]));
    assert_eq!(got[1].as_deref(), Ok(&[33.5, 4.25][..]));
}

#[test]
fn in_place_all_reduce_writes_its_input() {
    let p = program(
        "wrapir 1\n\ngraph main(x: f32[2][1]@cpu) -> (x) {\n  extern torch.ops._c10d_functional.all_reduce_.default(x, 'sum', '0')\n  extern torch.ops._c10d_functional.wait_tensor.default(x)\n}\n",
    );
    let got = run(&[p.clone(), p], &[vec![1.0, 2.0], vec![0.5, 0.25]], LONG);
    assert_eq!(got[0].as_deref(), Ok(&[1.5, 2.25][..]));
    assert_eq!(got[1].as_deref(), Ok(&[1.5, 2.25][..]));
}

/// Every failure of a multi-rank run is an error on every rank, naming the
/// cause, well within the timeout when the cause is known at once.
#[test]
fn disagreeing_missing_and_failing_ranks_are_errors_not_hangs() {
    let reduce = |n: usize| {
        collective_program(
            n,
            n,
            "extern buf0 = torch.ops._c10d_functional.all_reduce.default(x, 'sum', '0')",
        )
    };
    let started = Instant::now();
    // Different sizes on the two ranks.
    let got = run(&[reduce(4), reduce(2)], &[vec![1.0; 4], vec![1.0; 2]], LONG);
    for r in &got {
        let e = r.as_ref().unwrap_err();
        assert!(e.contains("disagree at call 1 on process group `0`"), "{e}");
    }
    assert!(got
        .iter()
        .any(|r| r.as_ref().unwrap_err().contains("sizes [2] against [4]")
            || r.as_ref().unwrap_err().contains("sizes [4] against [2]")));
    // Different ops.
    let max = collective_program(
        4,
        4,
        "extern buf0 = torch.ops._c10d_functional.all_reduce.default(x, 'max', '0')",
    );
    let got = run(&[reduce(4), max], &[vec![1.0; 4], vec![1.0; 4]], LONG);
    assert!(
        got.iter()
            .all(|r| r.as_ref().is_err_and(|e| e.contains("all_reduce('max')"))),
        "{got:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "mismatches must fail at once"
    );

    // A rank that never calls the collective: the other times out naming it.
    let none = program("wrapir 1\n\ngraph main(x: f32[4][1]@cpu) -> (x) {\n}\n");
    let started = Instant::now();
    let got = run(
        &[reduce(4), none],
        &[vec![1.0; 4], vec![1.0; 4]],
        Duration::from_millis(300),
    );
    let e = got[0].as_ref().unwrap_err();
    assert!(
        e.contains("rank 0 waited 300ms at `torch.ops._c10d_functional.all_reduce.default`"),
        "{e}"
    );
    assert!(e.contains("for ranks [1], which never made it"), "{e}");
    assert_eq!(got[1].as_deref(), Ok(&[1.0; 4][..]));
    assert!(started.elapsed() < Duration::from_secs(10));

    // A rank whose program fails before the collective aborts the other.
    let bad = program(
        "wrapir 1\n\ngraph main(x: f32[4][1]@cpu) -> (buf0) {\n  buffer buf0: f32[4][1]@cpu\n  extern buf0 = torch.ops.aten.no_such_op.default(x)\n}\n",
    );
    let started = Instant::now();
    let got = run(&[reduce(4), bad], &[vec![1.0; 4], vec![1.0; 4]], LONG);
    let e0 = got[0].as_ref().unwrap_err();
    assert!(e0.contains("the run was aborted: rank 1 failed"), "{e0}");
    assert!(e0.contains("no_such_op"), "{e0}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "an abort must wake the waiting rank"
    );

    // An unknown group, and a group size that is not the group's: the
    // error of one rank running `line` into `buf0: f32[m]`.
    let lone_error = |m: usize, line: &str| {
        let got = run(&[collective_program(4, m, line)], &[vec![1.0; 4]], LONG);
        got[0].clone().expect_err("the rank fails")
    };
    let e = lone_error(
        4,
        "extern buf0 = torch.ops._c10d_functional.all_reduce.default(x, 'sum', '7')",
    );
    assert!(e.contains("unknown process group `7` (known: 0)"), "{e}");
    let e = lone_error(
        16,
        "extern buf0 = torch.ops._c10d_functional.all_gather_into_tensor.default(x, 4, '0')",
    );
    assert!(e.contains("group size 4, but process group `0` has 1 ranks"), "{e}");

    // A collective past the staging limit.
    let p = reduce(4);
    let inputs: IndexMap<String, Tensor> = [("x".to_string(), Tensor::from_vec(vec![1.0f32; 4], &[4]).unwrap())].into();
    let jobs = vec![RankJob {
        program: &p,
        backend: HostBackend::default(),
        inputs: &inputs,
    }];
    let options = CollectiveOptions {
        max_bytes: 16,
        ..Default::default()
    };
    let got = run_ranks(ProcessGroups::world(1), jobs, options).unwrap();
    let e = got[0].as_ref().unwrap_err().to_string();
    assert!(e.contains("more than the 16 bytes one collective may stage"), "{e}");
}

#[test]
fn rank_set_layout_errors_name_the_file_and_field() {
    let src = common::root().join("fixtures/inductor/bundles_ranks/tp_mlp");
    let cases: &[(&str, &str)] = &[
        (
            r#"{"format_version": 2, "world_size": 2, "ranks": ["rank0", "rank1"]}"#,
            "`format_version` is 2",
        ),
        (
            r#"{"format_version": 1, "world_size": 0, "ranks": []}"#,
            "`world_size` must be an integer from 1",
        ),
        (
            r#"{"format_version": 1, "world_size": 2, "ranks": ["rank0"]}"#,
            "lists 1 directories for a world of 2",
        ),
        (
            r#"{"format_version": 1, "world_size": 2, "ranks": ["rank0", "../tp_mlp/rank1"]}"#,
            "must be a plain name",
        ),
        (
            r#"{"format_version": 1, "world_size": 2, "ranks": ["rank0", "rank1"], "groups": {"0": [0, 2]}}"#,
            "names rank 2, outside the world of 2 ranks",
        ),
        (
            r#"{"format_version": 1, "world_size": 2, "ranks": ["rank0", "rank1"], "groups": {"1": [0, 1]}}"#,
            "names process group `0`, which ranks.json does not declare",
        ),
        ("[", "not JSON"),
    ];
    for (i, (json, want)) in cases.iter().enumerate() {
        let dir = common::scratch("ranks", &format!("layout{i}"));
        common::copy_dir(&src, &dir);
        std::fs::write(dir.join("ranks.json"), json).unwrap();
        let got = RankSet::open(&dir, &Default::default()).and_then(|s| {
            s.check().map_err(|message| wrapir::bundle::BundleError::Meta {
                name: "check".into(),
                message,
            })
        });
        let e = got.expect_err(json).to_string();
        assert!(e.contains(want), "{json}: `{e}` lacks `{want}`");
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[test]
fn cli_runs_and_checks_a_rank_set() {
    let set = "fixtures/inductor/bundles_ranks/tp_mlp";
    let r = common::wrapir(&["run", set, "--device", "cpu"]);
    r.assert_exit(0);
    assert!(
        r.stdout.starts_with("device: cpu (2 ranks, one thread each)\nrank 0 ("),
        "{}",
        r.stdout
    );
    assert_eq!(
        r.stdout.matches("against eager: 1 outputs match").count(),
        2,
        "{}",
        r.stdout
    );
    assert_eq!(
        r.stdout.matches("against inductor: 1 outputs match").count(),
        2,
        "{}",
        r.stdout
    );

    let r = common::wrapir(&["run", set, "--device", "meta"]);
    r.assert_exit(0);
    assert_eq!(
        r.stdout
            .matches("output 0: tensor f32[8, 16] stride [16, 1] offset 0 on cpu")
            .count(),
        2
    );

    // These ranks were compiled for the CPU; on a GPU build they fail
    // running (tests/cuda_ranks.rs runs GPU ranks), here at once.
    let r = common::wrapir(&["run", set, "--device", "cuda"]);
    assert_ne!(r.code, 0, "{}{}", r.stdout, r.stderr);
    if !cfg!(feature = "cuda") {
        common::assert_contains(&r.stderr, "built without the `cuda` feature");
    }

    let r = common::wrapir(&["check", set]);
    r.assert_exit(0);
    common::assert_contains(&r.stdout, "rank 0 (");
    common::assert_contains(&r.stdout, "rank 1 (");
    common::assert_contains(
        &r.stdout,
        "ranks: 2 ranks issue the same collectives in the same order, on the groups of ranks.json",
    );

    // Rank 1 from another program: its collectives differ from rank 0's.
    let dir = common::scratch("ranks", "mixed");
    common::copy_dir(&common::root().join(set), &dir);
    let _ = std::fs::remove_dir_all(dir.join("rank1"));
    common::copy_dir(
        &common::root().join("fixtures/inductor/bundles_ranks/sp_mlp/rank1"),
        &dir.join("rank1"),
    );
    let path = dir.to_str().unwrap();
    let r = common::wrapir(&["check", path]);
    r.assert_exit(1);
    common::assert_contains(
        &r.stdout,
        "ranks: ranks `rank0` and `rank1` disagree at collective 1: op",
    );
    let r = common::wrapir(&["run", path, "--device", "cpu"]);
    r.assert_exit(2);
    common::assert_contains(&r.stderr, "disagree at collective 1");
    let _ = std::fs::remove_dir_all(&dir);
}

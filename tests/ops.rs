//! Knowing before running: `wrapir ops` (the extern ops each backend runs),
//! `wrapir check --device` (the calls a backend cannot run, by line), the
//! program's extern calls against its FX lowering, and the README's table of
//! CUDA device ops against `cuda_ops()`. Every expectation is computed from the
//! tables, which other changes extend.

mod common;

use std::path::{Path, PathBuf};
use wrapir::exec::device_ops::{cuda_ops, markdown_table, runs_on_cuda};
use wrapir::exec::host::HostBackend;
use wrapir::exec::op::op_key;
use wrapir::exec::uses::extern_uses;
use wrapir::ir::Program;

use common::wrapir;

/// A fresh scratch directory for one test.
fn scratch(test: &str) -> PathBuf {
    common::scratch("ops", test)
}

/// Every committed program: the `.wir` fixtures and the bundles' `program.json`.
fn programs() -> Vec<(String, Program)> {
    let mut v: Vec<(String, Program)> = common::fixtures()
        .iter()
        .map(|p| (common::name(p), common::load(p)))
        .collect();
    let dir = common::root().join("fixtures/inductor/bundles");
    let mut bundles: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path().join("program.json")))
        .filter(|p| p.is_file())
        .collect();
    bundles.sort();
    for p in bundles {
        let program = Program::from_json(&std::fs::read_to_string(&p).unwrap()).unwrap();
        v.push((p.display().to_string(), program));
    }
    v
}

fn host_runs(op: &str) -> bool {
    HostBackend::default().has_op(op)
}

#[test]
fn ops_lists_each_backend() {
    // cuda: one line per row of the table, in table order: op, what runs it, dtypes.
    let r = wrapir(&["ops", "--device", "cuda"]);
    r.assert_exit(0);
    let lines: Vec<&str> = r.stdout.lines().collect();
    let rows = cuda_ops();
    assert_eq!(lines.len(), rows.len(), "{}", r.stdout);
    for (line, row) in lines.iter().zip(&rows) {
        let fields: Vec<&str> = line.split("  ").map(str::trim).filter(|f| !f.is_empty()).collect();
        assert_eq!(fields, [row.op, row.via, row.dtypes], "{line}");
    }
    // cpu: the host registry, one op per line.
    let r = wrapir(&["ops", "--device", "cpu"]);
    r.assert_exit(0);
    assert_eq!(
        r.stdout.lines().collect::<Vec<_>>(),
        HostBackend::default().op_names(),
        "{}",
        r.stdout
    );
    // meta: no list; every op runs on shapes.
    let r = wrapir(&["ops", "--device", "meta"]);
    r.assert_exit(0);
    assert!(r.stdout.starts_with("every extern op, shapes only"), "{}", r.stdout);
    // All: the three groups, each line of a group indented.
    let r = wrapir(&["ops"]);
    r.assert_exit(0);
    let headers: Vec<&str> = r.stdout.lines().filter(|l| !l.starts_with("  ")).collect();
    assert_eq!(headers.len(), 3, "{}", r.stdout);
    assert!(headers[0].starts_with("cuda (") && headers[1].starts_with("cpu (") && headers[2] == "meta:");
    let indented = r.stdout.lines().filter(|l| l.starts_with("  ")).count();
    assert_eq!(indented, cuda_ops().len() + HostBackend::default().op_names().len() + 1);
    // --markdown: the README table; not for other devices.
    let r = wrapir(&["ops", "--markdown"]);
    assert_eq!((r.code, r.stdout.as_str()), (0, markdown_table().as_str()));
    let r = wrapir(&["ops", "--device", "cpu", "--markdown"]);
    assert_eq!(r.code, 2);
    common::assert_contains(&r.stderr, "--markdown prints the cuda table");
}

/// `docs/OPS.md` is the coverage table `wrapir ops --all --markdown` prints
/// (every op Inductor can leave as an extern call, with each backend's
/// status); the plain table is `wrapir ops --all`.
#[test]
fn docs_ops_is_the_coverage_table() {
    use wrapir::exec::coverage::{coverage, markdown};
    let doc = std::fs::read_to_string(common::root().join("docs/OPS.md")).unwrap();
    assert!(
        doc == markdown(&coverage()),
        "docs/OPS.md differs from the coverage table; regenerate it with `cargo run -- ops --all --markdown > docs/OPS.md`"
    );
    let r = wrapir(&["ops", "--all", "--markdown"]);
    assert_eq!((r.code, r.stdout.as_str()), (0, doc.as_str()));
    let r = wrapir(&["ops", "--all"]);
    r.assert_exit(0);
    // Each op's row holds what each backend does with it.
    for (op, want) in [
        ("aten.sort", &["host code", "own kernel (built-in kernel)"][..]),
        ("aten._cudnn_rnn", &["host code", "vendor library (cuDNN)"]),
        ("aten._cudnn_rnn_backward", &["refused: not implemented"]),
    ] {
        let row = r
            .stdout
            .lines()
            .find(|l| l.starts_with(&format!("{op} ")))
            .unwrap_or_else(|| panic!("no row for {op}"));
        for w in want {
            assert!(row.contains(w), "{op}: `{w}` not in {row}");
        }
    }
    common::assert_contains(&r.stdout, " ops Inductor can leave as extern calls: ");
    let r = wrapir(&["ops", "--all", "--device", "cpu"]);
    assert_eq!(r.code, 2);
}

/// The README's table of CUDA device ops is `cuda_ops()`, row for row.
#[test]
fn readme_table_is_cuda_ops() {
    let readme = std::fs::read_to_string(common::root().join("README.md")).unwrap();
    let (begin, end) = ("<!-- cuda-ops:begin -->\n", "<!-- cuda-ops:end -->");
    let start = readme
        .find(begin)
        .expect("README.md has no `<!-- cuda-ops:begin -->` marker")
        + begin.len();
    let stop = start
        + readme[start..]
            .find(end)
            .expect("README.md has no `<!-- cuda-ops:end -->` marker");
    assert_eq!(
        &readme[start..stop],
        markdown_table(),
        "README.md's CUDA op table differs from exec::device_ops::cuda_ops(); replace the lines between the \
         cuda-ops markers with the output of `cargo run -- ops --markdown`"
    );
}

/// `extern_uses` finds every extern op a run calls: the same ops, as often,
/// as the FX lowering the interpreter runs (main graph and subgraphs), for
/// every fixture program and every committed bundle (CUDA, CPU, rank sets)
/// that the FX lowering lowers.
#[test]
fn extern_uses_are_the_fx_lowerings_extern_calls() {
    fn fx_externs(g: &wrapir::fx::Graph, out: &mut Vec<String>) {
        for (_, node) in g.iter() {
            if let wrapir::fx::Op::Extern { target, .. } = &node.op {
                out.push(target.clone());
            }
        }
        for sub in g.subgraphs.values() {
            fx_externs(sub, out);
        }
    }
    let mut programs: Vec<(String, Program)> = common::fixtures()
        .iter()
        .map(|p| (common::name(p), common::load(p)))
        .collect();
    for p in common::committed_bundle_programs() {
        let program = Program::from_json(&std::fs::read_to_string(&p).unwrap()).unwrap();
        programs.push((p.display().to_string(), program));
    }
    let (mut checked, mut calls) = (0, 0);
    let mut failures = Vec::new();
    for (name, program) in programs {
        let Ok(info) = wrapir::ir::validate(&program) else {
            continue;
        };
        let Ok(graph) = wrapir::lower::fx::lower(&info, &Default::default()) else {
            continue;
        };
        let mut lowered = Vec::new();
        fx_externs(&graph, &mut lowered);
        lowered.sort();
        let mut found: Vec<String> = extern_uses(&program).into_iter().map(|u| u.op).collect();
        found.sort();
        if lowered != found {
            failures.push(format!(
                "{name}: the FX lowering calls {lowered:?}, extern_uses found {found:?}"
            ));
        }
        checked += 1;
        calls += found.len();
    }
    assert!(
        checked > 200 && calls > 500,
        "only {checked} programs ({calls} op calls) lowered"
    );
    common::assert_no_failures(&failures);
}

/// `check --device` prints one `error in graph G, line N `...`` line per call
/// the backend cannot run, a summary, and exits 1 when there is one. On cpu
/// that includes every kernel call the host backend cannot run (Triton, CUDA
/// C, embedder kernels: it runs C++ and Halide kernels from their images).
#[test]
fn check_device_names_each_op_and_line_it_cannot_run() {
    let mut failures = Vec::new();
    for (device, runs) in [("cuda", runs_on_cuda as fn(&str) -> bool), ("cpu", host_runs)] {
        for (name, program) in programs() {
            if wrapir::ir::validate(&program).is_err() {
                continue;
            }
            let path = if name.contains('/') {
                name.clone()
            } else {
                format!("fixtures/{name}.wir")
            };
            let r = wrapir(&["check", &path, "--device", device, "--no-translation"]);
            let uses = extern_uses(&program);
            let missing: Vec<_> = uses.iter().filter(|u| !runs(&u.op)).collect();
            let errors: Vec<&str> = r
                .stdout
                .lines()
                .filter(|l| l.starts_with("error in ") && l.contains(" cannot run op `"))
                .collect();
            let kernel_errors: Vec<&str> = r
                .stdout
                .lines()
                .filter(|l| l.starts_with("error in ") && l.contains(" cannot run kernel `"))
                .collect();
            let kernels = wrapir::exec::uses::kernel_uses(&program);
            let host_refuses: Vec<_> = kernels.iter().filter(|k| device == "cpu" && !k.runs_on_host).collect();
            let kernels_ok = kernel_errors.len() == host_refuses.len()
                && host_refuses.iter().zip(&kernel_errors).all(|(k, line)| {
                    line.starts_with(&format!(
                        "error in graph {}, line {} `{}`: the cpu backend cannot run kernel `{}`",
                        k.graph, k.line, k.text, k.kernel
                    ))
                });
            let mut ok = errors.len() == missing.len()
                && missing.iter().zip(&errors).all(|(u, line)| {
                    line.starts_with(&format!("error in graph {}, line {} `{}`: ", u.graph, u.line, u.text))
                        && line.contains(&format!("the {device} backend cannot run op `"))
                        && (line.contains(&format!("`{}`", u.op)) || line.contains(&format!("`{}`", op_key(&u.op))))
                });
            let summary = if missing.is_empty() {
                format!("{device}: every extern op call runs")
            } else {
                format!("{device}: {} of {} ", missing.len(), uses.len())
            };
            ok &= r.stdout.contains(&summary) && kernels_ok;
            // Launch reconciliation may fail on its own (exit 1 either way).
            ok &= (missing.is_empty() && host_refuses.is_empty()) || r.code == 1;
            if !ok {
                failures.push(r.failure(format_args!(
                    "{path} --device {device} (want errors for {missing:?} and kernels {:?})",
                    host_refuses.iter().map(|k| &k.kernel).collect::<Vec<_>>()
                )));
            }
        }
    }
    common::assert_no_failures(&failures);
}

/// An op no backend has, in a subgraph: named with its graph and line on
/// cuda and cpu; `--allow-host-fallback` accepts the ops the host runs.
#[test]
fn check_device_reports_subgraph_lines_and_host_fallback() {
    let fixture = common::root().join("fixtures/cond_dynamic_branches.wir");
    let text = std::fs::read_to_string(&fixture).unwrap();
    let from = "torch.ops.aten.index.Tensor(false_graph_0_arg0_1";
    assert!(text.contains(from));
    let text = text.replace(from, "torch.ops.wrapir_test.no_such_op.default(false_graph_0_arg0_1");
    let dir = scratch("subgraph");
    let path = dir.join("p.wir");
    std::fs::write(&path, &text).unwrap();
    let program = common::load(&path);
    let fake = extern_uses(&program)
        .into_iter()
        .find(|u| u.op.contains("no_such_op"))
        .unwrap();
    assert_eq!(fake.graph, "false_graph_0");
    let p = path.to_str().unwrap();
    for device in ["cuda", "cpu"] {
        let r = wrapir(&["check", p, "--device", device]);
        r.assert_exit(1);
        let want = format!(
            "error in graph false_graph_0, line {} `{}`: the {device} backend cannot run op `wrapir_test.no_such_op` (`torch.ops.wrapir_test.no_such_op.default`)",
            fake.line, fake.text
        );
        common::assert_contains(&r.stdout, &want);
        // The launch report is there as without --device.
        assert!(
            r.stdout.contains(" launches: ") || r.stdout.contains(" launch"),
            "{}",
            r.stdout
        );
    }
    // Without --device, check does not look at extern ops.
    let r = wrapir(&["check", p]);
    r.assert_exit(0);
    assert!(!r.stdout.contains("cannot run op"), "{}", r.stdout);

    // A host op the device table lacks: an error that points at the flag,
    // and a note with `--allow-host-fallback`.
    let host_only = HostBackend::default()
        .op_names()
        .into_iter()
        .find(|o| !runs_on_cuda(o) && o.starts_with("aten.") && !o.ends_with('_'));
    if let Some(op) = host_only {
        let full = format!("torch.ops.{op}.default");
        let text = text.replace("torch.ops.wrapir_test.no_such_op.default", &full);
        std::fs::write(&path, &text).unwrap();
        let r = wrapir(&["check", p, "--device", "cuda", "--no-translation"]);
        r.assert_exit(1);
        assert!(
            r.stdout.contains(&format!("cannot run op `{op}` (`{full}`)"))
                && r.stdout.contains("; --allow-host-fallback runs it on the host"),
            "{}",
            r.stdout
        );
        let r = wrapir(&[
            "check",
            p,
            "--device",
            "cuda",
            "--no-translation",
            "--allow-host-fallback",
        ]);
        // Every op runs; the exit status is 1 only because the fixture's
        // Triton kernels have no cubins (text fixtures carry none).
        r.assert_exit(1);
        common::assert_contains(
            &r.stdout,
            &format!("op `{op}` (`{full}`) runs on the host (--allow-host-fallback)"),
        );
        common::assert_contains(&r.stdout, "on the host)\n");
        let errors: Vec<&str> = r.stdout.lines().filter(|l| l.starts_with("error")).collect();
        assert!(
            !errors.is_empty()
                && errors
                    .iter()
                    .all(|l| l.starts_with("error: kernel `") && l.contains("its metadata names no `cubin`")),
            "{}",
            r.stdout
        );
    }
    let r = wrapir(&["check", p, "--device", "cpu", "--allow-host-fallback"]);
    assert_eq!(r.code, 2);
    common::assert_contains(&r.stderr, "--allow-host-fallback is for `--device cuda`");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `check` takes a bundle directory as its program.
#[test]
fn check_takes_a_bundle_directory() {
    let bundle: &Path = Path::new("fixtures/inductor/bundles/nonzero");
    let r = wrapir(&[
        "check",
        bundle.to_str().unwrap(),
        "--device",
        "cuda",
        "--no-translation",
    ]);
    let program =
        Program::from_json(&std::fs::read_to_string(common::root().join(bundle).join("program.json")).unwrap())
            .unwrap();
    let missing = extern_uses(&program).iter().filter(|u| !runs_on_cuda(&u.op)).count();
    assert_eq!(r.code, i32::from(missing > 0), "{}{}", r.stdout, r.stderr);
    common::assert_contains(&r.stdout, ": valid");
}

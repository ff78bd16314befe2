//! Real Inductor bundles (`fixtures/inductor/bundles/<case>/`): every program
//! validates, lowers to every target, runs on meta, and (where the host
//! backend implements all its ops) runs on cpu and matches eager PyTorch.

mod common;

use common::read_tensors as tensors;
use std::path::{Path, PathBuf};
use wrapir::bundle::conventions::{self, reference_outputs};
use wrapir::exec::compare::{compare_leaves, output_leaves};
use wrapir::exec::host::HostBackend;
use wrapir::exec::meta::{run_program_on, MetaBackend};
use wrapir::exec::Value;
use wrapir::format::bundle_json::{BundleMeta, Tolerance};
use wrapir::fx::Op;
use wrapir::ir::Program;
use wrapir::lower::Target;

/// (bundle, target) pairs known to fail, with a substring of the error. The
/// test fails when one of them starts to pass, so the list cannot rot.
const KNOWN_FAILURES: &[(&str, &str, &str)] = &[];

/// Predicate sequences for bundles whose `cond` / `while_loop` reads device
/// data (meta cannot), one meta run per sequence (values read in turn, the
/// last repeating): both branches; a loop that never runs and one that runs twice.
const PREDICATES: &[(&str, &[&[bool]])] = &[
    ("cond_branches", &[&[true], &[false]]),
    ("cond_same_shape", &[&[true], &[false]]),
    ("feat_cond_dynamic", &[&[true], &[false]]),
    ("feat_cond_two_operands", &[&[true], &[false]]),
    ("feat_cond_unbacked", &[&[true], &[false]]),
    ("feat_while_loop", &[&[false], &[true, true, false]]),
    ("feat_while_loop_dynamic", &[&[false], &[true, true, false]]),
];

/// Values of unbacked symbols for bundles whose ranges give meta no usable
/// size (`[0, 2^63 - 2]`): the sizes of the eager run, in both branches.
const HINTS: &[(&str, &[(&str, i64)])] = &[("feat_cond_unbacked", &[("u12", 26), ("u13", 26)])];

fn load(dir: &Path) -> Program {
    let text = std::fs::read_to_string(dir.join("program.json")).unwrap();
    Program::from_json(&text).unwrap_or_else(|e| panic!("{}: {e}", common::case_name(dir)))
}

/// Every committed CUDA bundle: its directory, case name and program.
fn cuda_programs() -> impl Iterator<Item = (PathBuf, String, Program)> {
    common::cuda_bundles().into_iter().map(|dir| {
        let program = load(&dir);
        (dir.clone(), common::case_name(&dir), program)
    })
}

fn bundle_json(dir: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(dir.join(conventions::METADATA)).unwrap()).unwrap()
}

/// The outcome of lowering to one target.
fn lower(program: &Program, target: Target) -> Result<String, String> {
    let info = wrapir::ir::validate(program).map_err(|e| e.to_string())?;
    target.write_string(&info).map_err(|e| e.to_string())
}

#[test]
fn every_bundle_validates_and_lowers_to_every_target() {
    let mut failures = Vec::new();
    let mut known_seen = Vec::new();
    for (_, case, program) in cuda_programs() {
        if let Err(e) = wrapir::ir::validate(&program) {
            failures.push(format!("{case}: invalid:\n{e}"));
            continue;
        }
        for target in Target::ALL {
            let known = KNOWN_FAILURES
                .iter()
                .find(|(b, t, _)| *b == case && *t == target.name());
            match (lower(&program, target), known) {
                (Ok(text), None) if !text.trim().is_empty() => {}
                (Ok(_), None) => failures.push(format!("{case} -> {target}: empty output")),
                (Err(e), Some((_, _, want))) if e.contains(want) => known_seen.push((case.clone(), target.name())),
                (Err(e), _) => failures.push(format!("{case} -> {target}: {e}")),
                (Ok(_), Some(_)) => {
                    failures.push(format!("{case} -> {target}: listed as failing but lowers; remove it"))
                }
            }
        }
    }
    for (b, t, _) in KNOWN_FAILURES {
        if !known_seen.iter().any(|(kb, kt)| kb == b && kt == t)
            && !failures.iter().any(|f| f.starts_with(&format!("{b} -> {t}")))
        {
            failures.push(format!("KNOWN_FAILURES names ({b}, {t}), which is not a bundle/target"));
        }
    }
    common::assert_no_failures(&failures);
}

/// `bundle.json`'s `int_outputs`: the expected tensors that hold integer outputs.
fn int_outputs(dir: &Path) -> Option<Vec<String>> {
    let text = std::fs::read_to_string(dir.join(conventions::METADATA)).unwrap();
    wrapir::format::bundle_json::BundleMeta::from_json(&text)
        .unwrap()
        .int_outputs
}

/// A meta run's output as the references store it.
enum MetaLeaf<'a> {
    Tensor(&'a wrapir::exec::TensorSpec),
    Int(i64),
}

/// The tensor outputs of a meta run and, with `ints`, its integer outputs, in order.
fn meta_leaves(outputs: &[Value<wrapir::exec::TensorSpec>], ints: bool) -> Vec<MetaLeaf<'_>> {
    outputs
        .iter()
        .filter_map(|v| match v {
            Value::Tensor(t) => Some(MetaLeaf::Tensor(t)),
            other => other.as_int().filter(|_| ints).map(MetaLeaf::Int),
        })
        .collect()
}

/// Every Triton launch of every bundle reconciles with its kernel and, in
/// each lowering's emitted code, is proven or guarded (what `wrapir check`
/// does).
#[test]
fn every_bundle_reconciles_in_every_lowering() {
    use wrapir::reconcile::{check_lowerings, LaunchEmitter};
    let emitters: Vec<Box<dyn LaunchEmitter>> = Target::ALL.into_iter().map(wrapir::reconcile::emitter).collect();
    let refs: Vec<&dyn LaunchEmitter> = emitters.iter().map(|e| e.as_ref()).collect();
    let mut failures = Vec::new();
    let mut launches = 0;
    for (_, case, program) in cuda_programs() {
        let info = wrapir::ir::validate(&program).unwrap_or_else(|e| panic!("{case}: {e}"));
        let report = check_lowerings(&info, &Default::default(), &refs);
        launches += report.base.entries.len();
        if !report.is_ok() {
            failures.push(format!("{case}:\n{}", report.render(false)));
        }
    }
    common::assert_no_failures(&failures);
    assert!(launches > 100, "the bundles have only {launches} Triton launches");
}

/// Bundles whose lowered Python `call` is Inductor's own, line for line (their
/// kernel calls sit in subgraphs, so named arguments do not show): the
/// `while_loop` text, carried-value list, `.clone()`s and all.
const PYTHON_CALL_IS_INDUCTORS: &[&str] = &["feat_while_loop", "feat_while_loop_dynamic"];

#[test]
fn lowered_python_call_is_inductors_for_while_loop_bundles() {
    // `def call(self, args):` up to its `return (...)`, as Inductor 2.11 prints it.
    fn call_body(text: &str) -> Vec<&str> {
        let mut lines = text.lines().skip_while(|l| l.trim_start() != "def call(self, args):");
        let mut out: Vec<&str> = Vec::new();
        for l in lines.by_ref() {
            out.push(l);
            if l.trim_start().starts_with("return (") {
                break;
            }
        }
        out
    }
    let root = common::root().join("fixtures/inductor/bundles");
    for case in PYTHON_CALL_IS_INDUCTORS {
        let dir = root.join(case);
        let ours = lower(&load(&dir), Target::Python).unwrap_or_else(|e| panic!("{case}: {e}"));
        let theirs = std::fs::read_to_string(dir.join("inductor.py.txt")).unwrap();
        let (a, b) = (call_body(&ours), call_body(&theirs));
        assert!(b.len() > 20, "{case}: no `call` in inductor.py.txt");
        assert_eq!(a, b, "{case}: lowered Python `call` differs from Inductor's");
    }
}

#[test]
fn every_bundle_runs_on_meta_with_the_eager_shapes() {
    let mut failures = Vec::new();
    for (dir, case, program) in cuda_programs() {
        // Unbacked values the exporter recorded, if any; else the meta backend's range defaults.
        let mut recorded: Vec<(String, i64)> = bundle_json(&dir)["unbacked"]
            .as_object()
            .map(|m| m.iter().filter_map(|(k, v)| Some((k.clone(), v.as_i64()?))).collect())
            .unwrap_or_default();
        if let Some((_, hints)) = HINTS.iter().find(|(b, _)| *b == case) {
            recorded.extend(hints.iter().map(|(s, v)| (s.to_string(), *v)));
        }
        let int_outputs = int_outputs(&dir);
        let has_unbacked = program
            .symbols
            .values()
            .any(|d| d.kind == wrapir::ir::SymbolKind::Unbacked);
        let expected = tensors(&dir.join(conventions::EXPECTED));
        let expected = reference_outputs(&expected);
        let predicates: Vec<Option<&[bool]>> = match PREDICATES.iter().find(|(b, _)| *b == case) {
            Some((_, ps)) => ps.iter().map(|p| Some(*p)).collect(),
            None => vec![None],
        };
        for predicate in predicates {
            let mut backend = MetaBackend::new();
            for (s, v) in &recorded {
                backend = backend.with_hint(s.as_str(), *v);
            }
            if let Some(p) = predicate {
                backend = backend.with_predicates(p);
            }
            let report = match run_program_on(&program, &mut backend) {
                Ok(r) => r,
                Err(e) => {
                    failures.push(format!("{case} (predicate {predicate:?}): {e}"));
                    continue;
                }
            };
            // Tensors, and integer outputs where the bundle stores them.
            let got: Vec<MetaLeaf<'_>> = meta_leaves(&report.outputs, int_outputs.is_some());
            if got.len() != expected.len() {
                failures.push(format!("{case}: {} outputs, {} expected", got.len(), expected.len()));
                continue;
            }
            // Shapes depending on unbacked values are only as good as the hints.
            if has_unbacked && recorded.is_empty() {
                continue;
            }
            for (k, (g, (key, e))) in got.iter().zip(&expected).enumerate() {
                let is_int = int_outputs.as_ref().is_some_and(|n| n.iter().any(|n| n == *key));
                let g = match (g, is_int) {
                    (MetaLeaf::Tensor(g), false) => g,
                    (MetaLeaf::Int(v), true) => {
                        let want = e.to_i64_vec().unwrap();
                        if want != [*v] {
                            failures.push(format!("{case}: integer output {k} is {v}, eager `{key}` is {want:?}"));
                        }
                        continue;
                    }
                    _ => {
                        failures.push(format!("{case}: output {k} and eager `{key}` are of different kinds"));
                        continue;
                    }
                };
                if g.dtype != e.dtype() || g.size != e.size() {
                    failures.push(format!(
                        "{case}: output {k} is {}{:?}, eager `{key}` is {}{:?}",
                        g.dtype,
                        g.size,
                        e.dtype(),
                        e.size()
                    ));
                }
            }
        }
    }
    common::assert_no_failures(&failures);
}

/// `true` when the host backend can run every kernel and extern op of the
/// program's FX graph (its default registry has extern ops only).
fn host_can_run(graph: &wrapir::fx::Graph, host: &HostBackend) -> bool {
    let kernels = host.kernel_names();
    graph.iter().all(|(_, node)| match &node.op {
        Op::Extern { target, .. } => host.has_op(target),
        Op::TritonKernel { kernel, .. } | Op::KernelCall { kernel, .. } => kernels.iter().any(|k| k == kernel.as_str()),
        _ => true,
    }) && graph.subgraphs.values().all(|g| host_can_run(g, host))
}

#[test]
fn bundles_of_host_ops_match_eager_on_cpu() {
    let mut ran = Vec::new();
    let mut failures = Vec::new();
    for (dir, case, program) in cuda_programs() {
        let info = wrapir::ir::validate(&program).unwrap();
        let graph = wrapir::lower::fx::lower(&info, &Default::default()).unwrap();
        if !host_can_run(&graph, &HostBackend::default()) {
            continue;
        }
        ran.push(case.clone());
        let meta = BundleMeta::from_json(&std::fs::read_to_string(dir.join(conventions::METADATA)).unwrap())
            .unwrap_or_else(|e| panic!("{case}: {e}"));
        let tolerance = meta.tolerance.unwrap_or(Tolerance { rtol: 2e-2, atol: 2e-2 });
        let inputs = tensors(&dir.join(conventions::INPUTS));
        let expected = tensors(&dir.join(conventions::EXPECTED));
        let out = match wrapir::exec::run_program(&program, &mut wrapir::exec::host::HostBackend::default(), &inputs) {
            Ok(o) => o,
            Err(e) => {
                failures.push(format!("{case}: {e}"));
                continue;
            }
        };
        let got = output_leaves(&out.outputs);
        let comparison = compare_leaves(&got, &expected, meta.int_outputs.as_deref(), Some(tolerance));
        if let Some(e) = comparison.first_error() {
            failures.push(format!("{case}: {e}"));
        }
    }
    common::assert_no_failures(&failures);
    // Guard against the filter silently excluding everything: `cat_mm` is
    // `mm` on a `cat` view, all host ops.
    assert!(ran.iter().any(|c| c == "cat_mm"), "ran on cpu: {ran:?}");
}

//! The dependency DAG (`wrapir::exec::dag`): the printed DAG of small
//! programs (`cases/dag.txt`), and on every committed program, bundle and
//! CPU bundle: orders that respect it are topological and, run, give the
//! same results as the program's own order (the host backend, bit for bit,
//! on the CPU bundles; shapes and dtypes on the meta backend elsewhere).

mod common;
#[path = "../benches/common/dag_shapes.rs"]
mod dag_shapes;

use dag_shapes::COPY_KERNEL;
use wrapir::exec::dag::{reorder_graph, Dag};

/// The DAG of a program's text (without its `wrapir 1` header), printed.
fn printed(name: &str, input: &str) -> String {
    let program = wrapir::text::parse(&format!("wrapir 1\n{input}")).unwrap_or_else(|e| panic!("{name}: {e}"));
    let info = wrapir::ir::validate(&program).unwrap_or_else(|e| panic!("{name}: invalid program: {e}"));
    let graph = wrapir::lower::fx::lower(&info, &Default::default()).unwrap_or_else(|e| panic!("{name}: {e}"));
    Dag::build(&graph, &program.kernels)
        .unwrap_or_else(|e| panic!("{name}: {e}"))
        .to_string()
}

#[test]
fn printed_dags() {
    let failures: Vec<String> = common::text_cases(include_str!("cases/dag.txt"))
        .into_iter()
        .filter_map(|case| {
            let got = printed(&case.name, &case.input);
            (got.trim_end() != case.expect.join("\n").trim_end()).then(|| {
                format!(
                    "=== {} (line {}): printed DAG differs, got:\n{got}",
                    case.name, case.line
                )
            })
        })
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The orders a program is run in: its own, latest-ready-first (as far from
/// its own as the edges allow) and three seeded random ones.
fn orders(dag: &Dag) -> Vec<(String, Vec<usize>)> {
    let mut out = vec![
        ("program order".to_string(), (0..dag.len()).collect()),
        ("latest first".to_string(), dag.latest_first_order()),
    ];
    for seed in 1..=3u64 {
        out.push((format!("seed {seed}"), dag.seeded_order(seed)));
    }
    out
}

/// A value's bits, flattened (tensors element by element).
fn value_bits(v: &wrapir::exec::Value<wrapir::exec::Tensor>, out: &mut Vec<u64>) {
    use wrapir::exec::Value;
    match v {
        Value::Tensor(t) => {
            out.push(t.size().len() as u64);
            out.extend(t.size().iter().map(|s| *s as u64));
            out.extend(common::element_bits(t));
        }
        Value::Int(i) => out.push(*i as u64),
        Value::Float(f) => out.push(f.to_bits()),
        Value::Bool(b) => out.push(u64::from(*b)),
        Value::List(items) => items.iter().for_each(|i| value_bits(i, out)),
        Value::Dict(items) => items.values().for_each(|i| value_bits(i, out)),
        other => out.push(format!("{other:?}").len() as u64),
    }
}

/// The committed CPU bundles' sets (every directory of bundles under
/// `fixtures/inductor/bundles_cpu*`).
fn cpu_bundles() -> Vec<std::path::PathBuf> {
    let mut dirs = Vec::new();
    for set in ["bundles_cpu", "bundles_cpu_2.15"] {
        let root = common::root().join("fixtures/inductor").join(set);
        let mut kinds: Vec<_> = std::fs::read_dir(&root)
            .unwrap_or_else(|e| panic!("{}: {e}", root.display()))
            .map(|e| e.unwrap().path())
            .filter(|p| p.is_dir())
            .collect();
        kinds.sort();
        for kind in kinds {
            let rel = kind.strip_prefix(common::root()).unwrap().to_str().unwrap().to_string();
            dirs.extend(common::bundle_dirs(&rel));
        }
    }
    dirs
}

/// The custom op of `bundles_cpu_2.15/custom_ops` (`tests/custom_ops.rs`):
/// `out0 = x * scale`, `out1 = x + scale`, written in place.
fn register_pair_out(backend: &mut wrapir::exec::host::HostBackend) {
    use wrapir::exec::{ExecError, Value};
    backend.register_op(
        "torch.ops.wrapir_test.pair.out",
        std::sync::Arc::new(|args: &[Value<wrapir::exec::Tensor>], kwargs| {
            let (Some(Value::Tensor(x)), Some(Value::Float(scale))) = (args.first(), args.get(1)) else {
                return Err(ExecError::Type("pair.out: expected (tensor, float)".into()));
            };
            let (Some(Value::Tensor(out0)), Some(Value::Tensor(out1))) = (kwargs.get("out0"), kwargs.get("out1"))
            else {
                return Err(ExecError::Type("pair.out: expected out0= and out1= tensors".into()));
            };
            let x = x.to_f64_vec()?;
            out0.write_f64(&x.iter().map(|v| v * scale).collect::<Vec<_>>())?;
            out1.write_f64(&x.iter().map(|v| v + scale).collect::<Vec<_>>())?;
            Ok(Value::List(vec![
                Value::Tensor(out0.clone()),
                Value::Tensor(out1.clone()),
            ]))
        }),
    );
}

/// Runs the CPU bundle at `dir` on the host backend in every order of
/// [`orders`]; returns how many orders differed from the program's, or the
/// first difference of outputs or of inputs the program writes.
fn check_cpu_bundle(dir: &std::path::Path) -> Result<usize, String> {
    use wrapir::exec::host::{kernels as host_kernels, HostBackend};
    let bundle = wrapir::bundle::Bundle::open(dir).map_err(|e| e.to_string())?;
    let program = bundle.program().clone();
    let info = wrapir::ir::validate(&program).map_err(|e| format!("{e:?}"))?;
    let graph = wrapir::lower::fx::lower(&info, &Default::default()).map_err(|e| e.to_string())?;
    let dag = Dag::build(&graph, &program.kernels).map_err(|e| e.to_string())?;
    let mut backend = HostBackend::default();
    register_pair_out(&mut backend);
    host_kernels::load_kernels_from(&mut backend, &program, &bundle.kernel_images(), None)
        .map_err(|e| e.to_string())?;
    let inputs = bundle
        .inputs()
        .map_err(|e| e.to_string())?
        .ok_or("no inputs.safetensors")?;
    let mut reference: Option<(Vec<u64>, Vec<u64>)> = None;
    let mut reordered = 0;
    for (what, order) in orders(&dag) {
        let graph = reorder_graph(&graph, &dag, &order).map_err(|e| format!("{what}: {e}"))?;
        let plan = wrapir::exec::interp::compile(&graph, &program).map_err(|e| format!("{what}: {e}"))?;
        // Fresh inputs for every run: a program may write its inputs.
        let fresh: indexmap::IndexMap<String, wrapir::exec::Tensor> = inputs
            .iter()
            .map(|(k, t)| (k.clone(), t.contiguous_copy().expect("a copy of an input")))
            .collect();
        let refs = fresh.iter().map(|(k, t)| (k.clone(), t)).collect();
        let out = wrapir::exec::run_plan(&program, &plan, &mut backend, &refs).map_err(|e| format!("{what}: {e}"))?;
        let mut outputs = Vec::new();
        out.outputs.iter().for_each(|v| value_bits(v, &mut outputs));
        let after: Vec<u64> = fresh.values().flat_map(common::element_bits).collect();
        match &reference {
            None => reference = Some((outputs, after)),
            Some((o, a)) => {
                if *o != outputs {
                    return Err(format!("{what}: the outputs differ from program order's"));
                }
                if *a != after {
                    return Err(format!("{what}: the inputs after the call differ from program order's"));
                }
                if order.iter().enumerate().any(|(k, i)| k != *i) {
                    reordered += 1;
                }
            }
        }
    }
    Ok(reordered)
}

#[test]
fn every_cpu_bundle_gives_the_same_bits_in_any_topological_order() {
    let dirs = cpu_bundles();
    assert!(dirs.len() >= 60, "only {} CPU bundles found", dirs.len());
    let mut failures = Vec::new();
    let mut reordered = 0;
    for dir in &dirs {
        match check_cpu_bundle(dir) {
            Ok(n) => reordered += usize::from(n > 0),
            Err(e) => failures.push(format!("{}: {e}", dir.display())),
        }
    }
    common::assert_no_failures(&failures);
    // Not vacuous: most bundles run in other orders than their own.
    assert!(
        reordered * 2 > dirs.len(),
        "only {reordered} of {} bundles ran in an order other than the program's",
        dirs.len()
    );
}

/// Every committed GPU bundle (and every valid `.wir` fixture) runs on the
/// meta backend in each order of [`orders`], with the outputs (layouts,
/// integers) of its own order. A program the meta backend cannot run in
/// its own order (symbols without hints) is skipped; most run.
#[test]
fn every_program_runs_on_meta_in_any_topological_order() {
    use wrapir::exec::meta::{run_plan_on, MetaBackend};
    let mut programs: Vec<(String, wrapir::ir::Program)> = common::cuda_bundles()
        .iter()
        .map(|d| {
            let b = wrapir::bundle::Bundle::open(d).unwrap_or_else(|e| panic!("{}: {e}", d.display()));
            (d.display().to_string(), b.program().clone())
        })
        .collect();
    programs.extend(
        common::fixtures()
            .iter()
            .map(|p| (p.display().to_string(), common::load(p))),
    );
    let (mut failures, mut ran) = (Vec::new(), 0);
    for (name, program) in &programs {
        let Ok(info) = wrapir::ir::validate(program) else {
            continue;
        };
        let Ok(graph) = wrapir::lower::fx::lower(&info, &Default::default()) else {
            continue;
        };
        let dag = match Dag::build(&graph, &program.kernels) {
            Ok(d) => d,
            Err(e) => {
                failures.push(format!("{name}: {e}"));
                continue;
            }
        };
        let mut reference = None;
        for (what, order) in orders(&dag) {
            let run = reorder_graph(&graph, &dag, &order)
                .and_then(|g| wrapir::exec::interp::compile(&g, program))
                .map_err(|e| e.to_string())
                .and_then(|plan| run_plan_on(program, &plan, &mut MetaBackend::new()).map_err(|e| e.to_string()));
            let got = match (run, &reference) {
                (Ok(r), _) => {
                    // Symbols in any binding order.
                    let mut symbols: Vec<String> = r.symbols.iter().map(|(s, v)| format!("{s}={v}")).collect();
                    symbols.sort();
                    format!("{:?} {symbols:?}", r.outputs)
                }
                // Not runnable on shapes alone in its own order: skipped.
                (Err(_), None) => break,
                (Err(e), Some(_)) => {
                    failures.push(format!("{name}: {what}: {e}"));
                    break;
                }
            };
            match &reference {
                None => {
                    reference = Some(got);
                    ran += 1;
                }
                Some(want) if *want != got => failures.push(format!("{name}: {what}: outputs differ:\n{got}\n{want}")),
                Some(_) => {}
            }
        }
    }
    common::assert_no_failures(&failures);
    assert!(
        ran * 3 > programs.len() * 2,
        "only {ran} of {} programs ran",
        programs.len()
    );
}

/// `wrapir check --dag` prints the DAG after validation (and checks no
/// launches); the printout is `Dag`'s.
#[test]
fn check_dag_prints_the_dag() {
    let file = "fixtures/cat_reinterpret_reuse.wir";
    let run = common::wrapir(&["check", "--dag", file]);
    assert_eq!(run.code, 0, "{}{}", run.stdout, run.stderr);
    let program = common::load(&common::root().join(file));
    let info = wrapir::ir::validate(&program).unwrap();
    let graph = wrapir::lower::fx::lower(&info, &Default::default()).unwrap();
    let dag = Dag::build(&graph, &program.kernels).unwrap();
    assert_eq!(run.stdout, format!("{file}: valid\n{dag}"));
    // The two launches into disjoint slices of one buffer (nodes 6 and 8)
    // are independent; the reused buffer's last reader (node 12 reads buf3)
    // precedes the writer of its new name (node 14 writes buf5).
    assert!(!dag.predecessors(8).contains(&6), "{dag}");
    assert!(dag.predecessors(14).contains(&12), "{dag}");
    common::assert_contains(&run.stdout, "critical path 3 work nodes, width 3");
}

/// The DAG of a program's text (with its `wrapir 1` header).
fn dag_of(text: &str) -> Dag {
    dag_of_program(&wrapir::text::parse(text).unwrap_or_else(|e| panic!("{e}")))
}

/// The DAG of a program.
fn dag_of_program(program: &wrapir::ir::Program) -> Dag {
    let info = wrapir::ir::validate(program).unwrap_or_else(|e| panic!("invalid program: {e}"));
    let graph = wrapir::lower::fx::lower(&info, &Default::default()).unwrap();
    Dag::build(&graph, &program.kernels).unwrap()
}

/// Long chains build the DAG in linear time and memory (the test returning
/// at all shows it; these took minutes and gigabytes before): 20,000
/// unknown ops each on the previous result, whose footprint (the storages
/// the result may alias) grew by one storage a link; and 20,000 `item`s
/// and `cond`s in turn, each `cond` once ordered against every binder by
/// an edge of its own (n^2 edges), now through the runs between them; and
/// 20,000 launches, each into its own slice of one buffer (each access once
/// compared with every earlier one), independent of each other. The
/// programs are the scale benchmark's (`dag_shapes`).
#[test]
fn long_chains_build_a_dag_of_linear_size() {
    let n = 20_000;
    let summary = dag_of_program(&dag_shapes::aliases(n)).summary();
    assert_eq!((summary.work, summary.critical_path), (n, n), "{summary}");
    assert!(summary.edges < 2 * summary.nodes, "{summary}");

    let dag = dag_of_program(&dag_shapes::symbol_turns(n));
    let summary = dag.summary();
    assert_eq!(summary.critical_path, 2 * n, "{summary}");
    assert!(summary.edges < 4 * summary.nodes, "{summary}");

    // n binders, n `cond`s (on buffers of their own), n binders: every
    // pair ordered by an edge of its own took n^2 edges; joined through one
    // binder a run, the `cond`s stay independent of each other (one depth:
    // the width), the critical path an item, the joining item, a `cond`, the
    // joining item and an item.
    let summary = dag_of_program(&dag_shapes::symbol_runs(n)).summary();
    assert!(summary.edges < 4 * summary.nodes, "{summary}");
    assert_eq!((summary.width, summary.critical_path), (n, 5), "{summary}");

    let summary = dag_of_program(&dag_shapes::slices(n)).summary();
    assert_eq!(
        (summary.work, summary.critical_path, summary.width),
        (n, 1, n),
        "{summary}"
    );
    assert!(summary.edges < 2 * summary.nodes, "{summary}");
}

/// Every `item` precedes every later `cond` and follows every earlier one,
/// through the runs of binders and control flow between them (edges join
/// neighbouring runs only): checked on all pairs of a small program.
#[test]
fn binders_and_control_flow_stay_ordered_pairwise() {
    let kinds = ["item", "item", "cond", "cond", "cond", "item", "cond", "item", "item"];
    assert_binders_and_control_flow_ordered(&kinds);
}

/// Long runs of binders and control flow are joined through one binder
/// (`Reason::Join`): still every `item` precedes every later `cond` and
/// follows every earlier one (all pairs checked), the `cond`s of a run stay
/// independent of each other, and the `item`s of a run all but the joining
/// ones (the first, after a long run of `cond`s; the last, before one). Runs of 1 to 40 nodes of either kind, at and past the longest run
/// joined pair by pair (16).
#[test]
fn long_runs_of_binders_and_control_flow_stay_ordered_pairwise() {
    let runs: [(&str, usize); 9] = [
        ("item", 40),
        ("cond", 40),
        ("item", 17),
        ("cond", 1),
        ("item", 16),
        ("cond", 17),
        ("item", 1),
        ("cond", 16),
        ("item", 20),
    ];
    let kinds: Vec<&str> = runs
        .iter()
        .flat_map(|(kind, n)| std::iter::repeat_n(*kind, *n))
        .collect();
    let (dag, reach, position) = assert_binders_and_control_flow_ordered(&kinds);
    // Within a run: `cond`s pairwise independent, `item`s too but for the
    // (at most two) each run of `item`s is joined through.
    let mut start = 0;
    for (kind, n) in runs {
        let members: Vec<usize> = (start..start + n).map(|k| position[k]).collect();
        let ordered_pairs = members
            .iter()
            .flat_map(|a| members.iter().map(move |b| (*a, *b)))
            .filter(|(a, b)| reach[*a][*b])
            .count();
        let most = if kind == "cond" { 0 } else { 2 * (n - 1) };
        assert!(
            ordered_pairs <= most,
            "{n} {kind}s from {start}: {ordered_pairs} ordered pairs\n{dag}"
        );
        start += n;
    }
}

/// Builds the program of `kinds` (`item`: an `item` binding `u<k>`,
/// `cond`: a `cond` on a buffer of the graph's own) and checks that every
/// `item` and `cond` of different kinds are ordered by a path; returns the
/// DAG, its reachability and each unit's node position.
fn assert_binders_and_control_flow_ordered(kinds: &[&str]) -> (Dag, Vec<Vec<bool>>, Vec<usize>) {
    let mut text = String::from("wrapir 1\n\n");
    for k in 0..kinds.len() {
        text += &format!("symbol u{k}: unbacked [0, 50]\n");
    }
    // Each `cond` runs on a buffer of the graph's own, the `item`s read an
    // input: only the symbol rule orders one against the other (and
    // nothing orders two `cond`s).
    text += "\ngraph main(arg0_1: i64[][]@cpu, arg1_1: b8[][]@cpu) -> (arg1_1) {\n";
    let conds = || kinds.iter().enumerate().filter(|(_, kind)| **kind == "cond");
    for (k, _) in conds() {
        text += &format!("  buffer x{k}: f32[4][1]@cpu\n  buffer c{k}: multi\n");
    }
    for (k, _) in conds() {
        text += &format!("  alloc x{k}\n");
    }
    for (k, kind) in kinds.iter().enumerate() {
        text += &match *kind {
            "item" => format!("  item u{k} = arg0_1 node b{k}\n"),
            _ => format!("  cond c{k} = if arg1_1 then t else t (x{k})\n"),
        };
    }
    text += "}\n\ngraph t(t_arg0: f32[4][1]@cpu) -> (t_arg0) {\n}\n";
    let dag = dag_of(&text);
    let reach = reachability(&dag);
    let name = |k: usize| {
        if kinds[k] == "item" {
            format!("u{k}")
        } else {
            format!("c{k}")
        }
    };
    let position: Vec<usize> = (0..kinds.len())
        .map(|k| {
            let name = name(k);
            dag.nodes()
                .iter()
                .position(|n| n.name == name)
                .unwrap_or_else(|| panic!("no node `{name}`:\n{dag}"))
        })
        .collect();
    for a in 0..kinds.len() {
        for b in a + 1..kinds.len() {
            if kinds[a] != kinds[b] {
                assert!(
                    reach[position[a]][position[b]],
                    "{} before {}:\n{dag}",
                    name(a),
                    name(b)
                );
            }
        }
    }
    (dag, reach, position)
}

/// `reach[i][j]`: a path leads from node `i` to node `j`.
fn reachability(dag: &Dag) -> Vec<Vec<bool>> {
    let n = dag.len();
    let mut reach = vec![vec![false; n]; n];
    for j in 0..n {
        for &p in dag.predecessors(j) {
            reach[p][j] = true;
            for i in 0..n {
                if reach[i][p] {
                    reach[i][j] = true;
                }
            }
        }
    }
    reach
}

/// A `cond` over more operand storages than a footprint lists merges them
/// into one alias class: a write through its result still follows an
/// earlier read of one operand (the read counted against the class).
#[test]
fn merged_alias_classes_keep_their_accesses() {
    let n = 70;
    let mut text =
        format!("wrapir 1\n\n{COPY_KERNEL}\ngraph main(arg0_1: b8[][]@cuda:0, arg1_1: f32[4][1]@cuda:0) -> (r) {{\n");
    for k in 0..n {
        text += &format!("  buffer b{k}: f32[4][1]@cuda:0\n");
    }
    text += "  buffer c: multi\n  buffer g: f32[4][1]@cuda:0\n  buffer r: f32[4][1]@cuda:0\n  define k_copy\n";
    for k in 0..n {
        text += &format!("  alloc b{k}\n  call k_copy(in_ptr0=arg1_1, out_ptr0=b{k}, xnumel=4) @cuda:0\n");
    }
    let operands: Vec<String> = (0..n).map(|k| format!("b{k}")).collect();
    text += &format!("  cond c = if arg0_1 then t else t ({})\n", operands.join(", "));
    text += "  get g = c[list 0]\n  alloc r\n";
    text += "  call k_copy(in_ptr0=b3, out_ptr0=r, xnumel=4) @cuda:0\n";
    text += "  call k_copy(in_ptr0=arg1_1, out_ptr0=g, xnumel=4) @cuda:0\n}\n";
    let params: Vec<String> = (0..n).map(|k| format!("t{k}: f32[4][1]@cuda:0")).collect();
    text += &format!("\ngraph t({}) -> (t3) {{\n}}\n", params.join(", "));
    let dag = dag_of(&text);
    let last = dag.len() - 2; // the write through `g`; the output is last
    let read = last - 1; // the read of `b3`
    assert!(dag.nodes()[last].what.starts_with("triton"), "{dag}");
    assert!(dag.predecessors(last).contains(&read), "{dag}");
}

//! Shared helpers of the fuzz targets: small limits, inputs generated from a
//! program's declared layouts, "run every consumer of a valid program", and the
//! structured program generator ([`gen`]).

use indexmap::IndexMap;
use std::time::Duration;
use wrapir::exec::Tensor;
use wrapir::ir::{DType, GraphInput, Program, ProgramInfo};
use wrapir::sym::{Bindings, Symbol};
use wrapir::Limits;

pub mod gen;

/// Prover limits small enough for a 1 s libFuzzer timeout.
pub fn prover_limits() -> wrapir::sym::egraph::Limits {
    wrapir::sym::egraph::Limits {
        node_limit: 500,
        iter_limit: 4,
        time_limit: Duration::from_millis(20),
        samples_before: 8,
        samples_after: 16,
    }
}

/// The limits every target runs under: 1 MiB per allocation, 8 MiB per run,
/// shallow nesting, little `while_loop` fuel, a small prover.
pub fn limits() -> Limits {
    Limits {
        max_alloc_bytes: 1 << 20,
        max_run_bytes: 8 << 20,
        max_text_depth: 64,
        max_subgraph_depth: 16,
        loop_fuel: 64,
        max_diagnostics: 32,
        max_outputs: 256,
        max_inlined_subgraphs: 64,
        max_file_bytes: 1 << 20,
        prover: prover_limits(),
    }
}

/// Input bytes as a program: JSON when it starts with `{`, else the `.wir` text form.
pub fn parse_program(data: &[u8]) -> Option<Program> {
    let text = std::str::from_utf8(data).ok()?;
    if text.trim_start().starts_with('{') {
        Program::from_json(text).ok()
    } else {
        wrapir::text::parse_with_limits(text, &limits()).ok()
    }
}

/// Input bytes as a program ([`parse_program`]) that validates under
/// [`limits`]; `None` otherwise.
pub fn valid_program(data: &[u8]) -> Option<Program> {
    let program = parse_program(data)?;
    wrapir::ir::validate_with_limits(&program, &limits()).ok()?;
    Some(program)
}

/// Every lowering and the launch reconciliation of a valid program; none may panic.
pub fn lower_all(info: &ProgramInfo<'_>) {
    use wrapir::lower::{cpp, fx, python};
    let _ = python::write_string(info, &python::Options::default());
    for dialect in [cpp::Dialect::Aoti, cpp::Dialect::Standalone] {
        let _ = cpp::write_string(info, &cpp::Options::for_dialect(dialect));
    }
    let _ = fx::write_string(info, &fx::Options::default());
    let options = wrapir::reconcile::Options {
        limits: prover_limits(),
        parallel: false,
        explain: true,
    };
    let _ = wrapir::reconcile::check_program(info, &options);
    // What `wrapir check` runs: each launch reconciled once, every
    // lowering's launches validated against those records, one proof cache.
    let emitters: Vec<Box<dyn wrapir::reconcile::LaunchEmitter>> =
        wrapir::lower::Target::ALL.iter().map(|&t| wrapir::reconcile::emitter(t)).collect();
    let refs: Vec<&dyn wrapir::reconcile::LaunchEmitter> = emitters.iter().map(|e| e.as_ref()).collect();
    let _ = wrapir::reconcile::check_lowerings(info, &options, &refs).render(true);
    dag_all(info);
}

/// The dependency DAG of a valid program's FX graph (what `wrapir check
/// --dag` prints and concurrent replay orders by): it builds (the
/// lowering defines every value before its use), prints, the graph's own
/// order and the DAG's orders are topological, and the graph reordered by
/// one compiles wherever the graph does.
pub fn dag_all(info: &ProgramInfo<'_>) {
    use wrapir::exec::dag::{reorder_graph, Dag};
    let Ok(graph) = wrapir::lower::fx::lower(info, &Default::default()) else { return };
    let program = info.program();
    let dag = match Dag::build(&graph, &program.kernels) {
        Ok(dag) => dag,
        Err(e) => panic!("the DAG of a valid program's FX graph does not build: {e}"),
    };
    let _ = dag.to_string();
    let identity: Vec<usize> = (0..dag.len()).collect();
    assert!(dag.is_topological(&identity), "the graph's own order is not topological in its DAG");
    symbol_order(&graph, &dag);
    let compiles = wrapir::exec::interp::compile(&graph, program).is_ok();
    for order in [dag.latest_first_order(), dag.seeded_order(dag.len() as u64)] {
        assert!(dag.is_topological(&order), "a DAG order is not topological: {order:?}");
        let reordered = match reorder_graph(&graph, &dag, &order) {
            Ok(g) => g,
            Err(e) => panic!("a topological order does not reorder the graph: {e}"),
        };
        let again = wrapir::exec::interp::compile(&reordered, program);
        assert!(
            !compiles || again.is_ok(),
            "the graph compiles, reordered by its DAG it does not: {:?}",
            again.err()
        );
    }
}

/// The DAG's symbol rule, checked pair by pair on DAGs of up to 2,048
/// nodes (the DAG joins runs of binders and control flow, so most pairs
/// are ordered through other nodes): every binder and every `cond`,
/// `switch` or `while_loop` are ordered by a path, and an extern or
/// `getitem` whose declared layout reads a symbol is ordered against the
/// symbol's binders.
fn symbol_order(graph: &wrapir::fx::Graph, dag: &wrapir::exec::dag::Dag) {
    use wrapir::fx::{Op, Val};
    let n = dag.len();
    if n > 2048 {
        return;
    }
    // reach[i]: the nodes a path from `i` leads to, as bits.
    let words = n.div_ceil(64);
    let mut reach = vec![vec![0u64; words]; n];
    for i in (0..n).rev() {
        for &s in dag.successors(i) {
            let (head, tail) = reach.split_at_mut(s);
            let row = &mut head[i];
            row[s / 64] |= 1 << (s % 64);
            for (w, t) in row.iter_mut().zip(tail[0].iter()) {
                *w |= *t;
            }
        }
    }
    let ordered = |a: usize, b: usize| {
        let (a, b) = (a.min(b), a.max(b));
        reach[a][b / 64] & (1 << (b % 64)) != 0
    };
    let node = |i: usize| graph.node(dag.nodes()[i].id);
    let control = |i: usize| matches!(node(i).op, Op::Cond(_) | Op::Switch(_) | Op::WhileLoop(_));
    let binders: Vec<usize> = (0..n).filter(|&i| !node(i).binds.is_empty()).collect();
    for i in (0..n).filter(|&i| control(i)) {
        for &b in binders.iter().filter(|&&b| b != i) {
            assert!(
                ordered(b, i),
                "binder `{}` and control flow `{}` are not ordered in the DAG",
                dag.nodes()[b].name,
                dag.nodes()[i].name
            );
        }
    }
    for i in 0..n {
        let reader = node(i);
        if !matches!(reader.op, Op::Extern { .. } | Op::GetItem { .. }) {
            continue;
        }
        let Some(Val::Tensor(layout)) = &reader.val else { continue };
        let exprs = layout.size.iter().chain(layout.stride.iter()).chain([&layout.offset]);
        for s in exprs.flat_map(|e| e.free_symbols()) {
            for &b in binders.iter().filter(|&&b| b != i && node(b).binds.contains(&s)) {
                assert!(
                    ordered(b, i),
                    "`{}` binds `{s}`, which `{}`'s layout reads, and they are not ordered in the DAG",
                    dag.nodes()[b].name,
                    dag.nodes()[i].name
                );
            }
        }
    }
}

/// The value each symbol takes in a generated run: the declared hint clamped
/// to `0..=max`, else 2.
pub fn hints(program: &Program, max: i64) -> Bindings {
    let mut b = Bindings::new();
    for (s, decl) in &program.symbols {
        b.insert(s.clone(), decl.hint.map_or(2, |h| h.clamp(0, max)));
    }
    b
}

/// Most elements one generated input may have.
pub const MAX_INPUT_NUMEL: i64 = 4096;

/// Host inputs for `program`'s main graph and constants from their declared
/// layouts, sizes evaluated under `hints` (symbols without a value get 2);
/// `None` when a size cannot be evaluated or an input would exceed
/// [`MAX_INPUT_NUMEL`] elements.
pub fn host_inputs(program: &Program, hints: &Bindings) -> Option<IndexMap<String, Tensor>> {
    let mut env = hints.clone();
    for e in program
        .main
        .buffers
        .keys()
        .filter_map(|b| program.main.layout(b))
        .flat_map(|l| l.size.iter())
        .chain(program.constants.values().flat_map(|l| l.size.iter()))
    {
        for s in e.free_symbols() {
            env.entry(s).or_insert(2);
        }
    }
    let mut out = IndexMap::new();
    let mut tensor = |name: &str, layout: &wrapir::ir::Layout| -> Option<()> {
        let size = layout
            .size
            .iter()
            .map(|e| wrapir::sym::eval::eval_int(e, &env).ok())
            .collect::<Option<Vec<i64>>>()?;
        let mut numel: i64 = 1;
        for &d in &size {
            if d < 0 {
                return None;
            }
            numel = numel.checked_mul(d)?;
        }
        if numel > MAX_INPUT_NUMEL {
            return None;
        }
        let data: Vec<f64> = (0..numel).map(|i| ((i * 7) % 11) as f64 - 5.0).collect();
        out.insert(name.to_string(), Tensor::from_f64(layout.dtype, &data, &size).ok()?);
        Some(())
    };
    for input in &program.main.inputs {
        match input {
            GraphInput::Tensor { name } => {
                let layout = program.main.layout(name)?;
                tensor(name.as_str(), layout)?;
            }
            GraphInput::Symbol { .. } | GraphInput::SymExpr { .. } => {}
        }
    }
    for (name, layout) in &program.constants {
        tensor(name.as_str(), layout)?;
    }
    for input in &program.main.inputs {
        let v = match input {
            GraphInput::Symbol { symbol, .. } => *env.get(symbol).unwrap_or(&2),
            GraphInput::SymExpr { expr, .. } => wrapir::sym::eval::eval_int(expr, &env).ok()?,
            GraphInput::Tensor { .. } => continue,
        };
        out.insert(input.name().as_str().to_string(), Tensor::from_i64(DType::Int64, &[v], &[]).ok()?);
    }
    Some(out)
}

/// A symbol by name.
pub fn sym(name: &str) -> Symbol {
    Symbol::new(name)
}

/// CPU time (user plus system) of the calling thread so far, from
/// `/proc/thread-self/stat` (Linux; clock ticks at the usual 100 Hz, so
/// 10 ms resolution); `None` elsewhere. Targets that bound a run's time
/// check this beside the wall clock: a fuzzer at low priority on a loaded
/// machine can wait past a wall-clock bound without running.
pub fn thread_cpu_time() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/thread-self/stat").ok()?;
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    Some(Duration::from_millis(ticks.checked_mul(10)?))
}

//! FX interpreter dispatch cost per plan step on the meta backend: a program
//! is lowered to FX and compiled into a plan once; the plan is then run
//! repeatedly and the median run time is divided by the number of steps.
//!
//! Two plans: `asserts` (50,000 runtime asserts on symbolic sizes: integer
//! arithmetic and `_assert_scalar` steps, the cheapest kind) and `mixed` (the
//! generated 100,000-line program of the lowering benchmark: allocations,
//! Triton launches, extern calls, unbacked binds, frees). Target: under 100 ns
//! per step.
//!
//! Run with `cargo bench --bench interp` (`INTERP_PLAN=mixed` runs one plan).

mod common;

use common::{generate, median_time, thousands, Size};
use indexmap::IndexMap;
use wrapir::exec::interp::Plan;
use wrapir::exec::meta::MetaBackend;
use wrapir::exec::{TensorSpec, Value};
use wrapir::ir::{DType, Device, Program};

const WARMUP: usize = 2;
const REPEATS: usize = 9;
const TARGET_NS: f64 = 100.0;

fn plan_of(program: &Program) -> Plan {
    wrapir::exec::compile_program(program).unwrap_or_else(|e| panic!("benchmark program: {e}"))
}

fn run(plan: &Plan) -> usize {
    let mut backend = MetaBackend::new();
    let mut inputs = Vec::new();
    for name in plan.input_names() {
        let v = match name {
            "arg0_1" | "s0" => Value::Int(64),
            "arg1_1" | "s1" => Value::Int(32),
            "arg2_1" => Value::Tensor(
                backend
                    .tensor(&TensorSpec::contiguous(DType::Float32, Device::cuda(0), &[64, 32]))
                    .expect("meta tensor"),
            ),
            "arg3_1" => Value::Tensor(
                backend
                    .tensor(&TensorSpec::contiguous(DType::Float32, Device::cuda(0), &[32, 32]))
                    .expect("meta tensor"),
            ),
            other => panic!("unexpected plan input `{other}`"),
        };
        inputs.push(v);
    }
    let out = plan
        .run(&mut backend, inputs, &IndexMap::new())
        .unwrap_or_else(|e| panic!("run: {e}"));
    out.outputs.len()
}

fn main() {
    println!("command: cargo bench --bench interp");
    println!("median of {REPEATS} runs after {WARMUP} warm-up runs; target {TARGET_NS} ns/step");
    println!();
    println!("| plan | program lines | plan steps | median run | ns/step | ratio (target / measured) |");
    println!("|---|---:|---:|---:|---:|---:|");
    let mixed = generate(Size::lines(100_000), 11).program;
    // `INTERP_PLAN=mixed` (or `asserts`) runs one plan only, for profiling.
    let only = std::env::var("INTERP_PLAN").ok();
    for (name, program) in [("asserts", common::families::asserts(50_000)), ("mixed", mixed)] {
        if only.as_deref().is_some_and(|o| o != name) {
            continue;
        }
        let plan = plan_of(&program);
        let time = median_time(WARMUP, REPEATS, || run(&plan));
        let ns = time.as_secs_f64() * 1e9 / plan.len() as f64;
        println!(
            "| {name} | {} | {} | {:.2} ms | {:.1} | {:.2}x |",
            thousands(program.main.lines.len() as f64),
            thousands(plan.len() as f64),
            time.as_secs_f64() * 1e3,
            ns,
            TARGET_NS / ns
        );
    }
}

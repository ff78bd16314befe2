//! The FX interpreter's hot loop does not allocate: running an
//! already-compiled plan on the meta backend allocates a fixed number of
//! times per run, however many steps the plan has.
//!
//! A counting global allocator counts every allocation made by this test
//! binary while one run is in progress. Each plan is run once to warm up, then
//! counted on a second run with the same inputs. Plans of several lengths are
//! measured; the count must not grow with the number of steps and must stay
//! within `PER_RUN_BOUND`.
//!
//! The remaining per-run allocations (4 for symbol arithmetic and asserts,
//! none depending on length): the run's symbol bindings (one table and one
//! entry vector, sized once from the plan), the slots vector and the outputs
//! vector. (The inputs vector is converted in place; [`Backend::spec`]
//! borrows layouts.) Plans that allocate, launch Triton kernels and free
//! take 2 more: the two vectors of the layout that `empty_strided` steps
//! fill in (reused by every later one). A launch borrows its arguments from
//! the interpreter's slots, and the meta backend reuses the layouts and
//! storage records of freed tensors, so neither allocates per step.
//!
//! Plans with extern calls and multi-output elements take 2 more: the two
//! vectors of the declared result layout each one evaluates into (an
//! [`ExpectedLayout`], reused likewise); the meta backend builds their
//! results in pooled layouts.
//!
//! [`Backend::spec`]: wrapir::exec::Backend::spec
//! [`ExpectedLayout`]: wrapir::exec::ExpectedLayout

use indexmap::IndexMap;
use std::alloc::{GlobalAlloc, Layout as AllocLayout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use wrapir::exec::interp::Plan;
use wrapir::exec::meta::MetaBackend;
use wrapir::exec::{TensorSpec, Value};
use wrapir::ir::{
    ArgValue, BufName, CallArg, DType, Device, GridType, KernelCall, KernelName, MultiIndex, Program, ProgramBuilder,
    SigType, TritonMeta,
};
use wrapir::sym::{CmpOp, SymExpr, Symbol};

#[path = "../benches/common/families.rs"]
mod families;
use families::{asserts, cuda_f32, family};

/// Counts allocations (including reallocations) made by a thread while its
/// `COUNTING` flag is set; other test threads' allocations are not counted.
struct CountingAllocator;

thread_local! {
    static COUNTING: Cell<bool> = const { Cell::new(false) };
}
static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);
/// Serialises measurements: the counter is shared by the test threads.
static MEASURE: Mutex<()> = Mutex::new(());

fn count_one() {
    // `try_with`: the flag may be gone while the thread is being torn down.
    if COUNTING.try_with(Cell::get).unwrap_or(false) {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
    }
}

// SAFETY: every method forwards to `System` unchanged; counting has no effect
// on the memory handed out.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: AllocLayout) -> *mut u8 {
        count_one();
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: AllocLayout) -> *mut u8 {
        count_one();
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: AllocLayout, new_size: usize) -> *mut u8 {
        count_one();
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: AllocLayout) {
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: CountingAllocator = CountingAllocator;

/// Allocations made by the measured run, measured on the meta backend.
/// Everything in it is listed in the module documentation; none of it depends
/// on the plan's length.
const PER_RUN_BOUND: usize = 4;

/// [`PER_RUN_BOUND`] for plans that allocate tensors (plus the reused layout
/// `empty_strided` steps fill in).
const PER_RUN_BOUND_TENSORS: usize = PER_RUN_BOUND + 2;

/// [`PER_RUN_BOUND_TENSORS`] for plans with extern calls and multi-output
/// elements (plus the reused declared layout they evaluate).
const PER_RUN_BOUND_EXTERNS: usize = PER_RUN_BOUND_TENSORS + 2;

/// Plan lengths (program lines) each family is measured at.
const LENGTHS: [usize; 3] = [10, 200, 2_000];

/// `count` precomputed symbols `ks_i = (s0 + i) * s1 // 2` (arithmetic steps
/// whose results bind symbols) and an assert on each.
fn precomputed(count: usize) -> Program {
    family(
        |p| -> Vec<Symbol> { (0..count).map(|i| p.precomputed_symbol(&format!("ks{i}"))).collect() },
        |g, ks, s0, s1, _| {
            for (i, k) in ks.iter().enumerate() {
                let expr = SymExpr::floor_div(
                    SymExpr::mul(
                        SymExpr::add(SymExpr::Sym(s0.clone()), SymExpr::Int(i as i64)),
                        SymExpr::Sym(s1.clone()),
                    ),
                    SymExpr::Int(2),
                );
                g.let_symbol(k, expr);
                g.runtime_assert(
                    SymExpr::cmp(CmpOp::Ge, SymExpr::Sym(k.clone()), SymExpr::Int(0)),
                    &format!("ks{i} >= 0"),
                );
            }
        },
    )
}

/// The pointwise Triton kernel `buffers` launches: `out_ptr0 = in_ptr0`
/// over `xnumel`.
fn relu_kernel(p: &mut ProgramBuilder) -> KernelName {
    let signature = [
        ("in_ptr0", "*fp32"),
        ("out_ptr0", "*fp32"),
        ("xnumel", "i32"),
        ("XBLOCK", "constexpr"),
    ]
    .iter()
    .map(|(n, t)| (n.to_string(), t.parse().unwrap_or(SigType::Other(t.to_string()))))
    .collect();
    let meta = TritonMeta::new(
        signature,
        [("XBLOCK".to_string(), 256)].into_iter().collect(),
        GridType::Grid1D,
    );
    let name = "triton_poi_fused_relu_0";
    let source = format!(
        "@triton.jit\ndef {name}(in_ptr0, out_ptr0, xnumel, XBLOCK : tl.constexpr):\n    \
         xindex = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)[:]\n    \
         tl.store(out_ptr0 + (xindex), tl.load(in_ptr0 + (xindex), xindex < xnumel), xindex < xnumel)\n"
    );
    p.triton_kernel(name, &source, meta)
}

/// `count` rounds of: allocate `buf_i: f32[s0, s1]`, launch a pointwise Triton
/// kernel from the previous buffer into it (`xnumel = s0*s1`), free the
/// previous buffer.
fn buffers(count: usize) -> Program {
    family(relu_kernel, |g, kernel, s0, s1, x| {
        g.define_kernel(&kernel);
        let mut prev: Option<BufName> = None;
        for i in 0..count {
            let b = g.allocate(&format!("buf{i}"), cuda_f32(&[s0, s1]));
            let src = prev.clone().unwrap_or_else(|| x.clone());
            g.line(wrapir::ir::Line::KernelCall(KernelCall {
                kernel: kernel.clone(),
                args: vec![
                    CallArg::positional(ArgValue::Buffer(src)),
                    CallArg::positional(ArgValue::Buffer(b.clone())),
                    CallArg::positional(ArgValue::Expr(SymExpr::mul(
                        SymExpr::Sym(s0.clone()),
                        SymExpr::Sym(s1.clone()),
                    ))),
                ],
                device: Some(Device::cuda(0)),
            }));
            if let Some(old) = prev.replace(b) {
                g.free(&old);
            }
        }
        if let Some(last) = prev {
            g.free(&last);
        }
    })
}

/// `count` rounds of: an extern op with a declared result layout
/// `f32[s0, s1]` on the previous buffer, a multi-output extern op on its
/// result and an element of it with a declared layout, then frees.
fn externs(count: usize) -> Program {
    family(
        |_| (),
        |g, (), s0, s1, x| {
            let mut prev: Option<BufName> = None;
            for i in 0..count {
                let src = prev.clone().unwrap_or_else(|| x.clone());
                let b = g.extern_alloc(
                    &format!("buf{i}"),
                    cuda_f32(&[s0, s1]),
                    "torch.ops.aten.relu.default",
                    vec![ArgValue::Buffer(src)],
                );
                let m = g.extern_alloc_multi(
                    &format!("multi{i}"),
                    "torch.ops.aten.split.default",
                    vec![ArgValue::Buffer(b.clone())],
                );
                let part = g.multi_output(&format!("part{i}"), cuda_f32(&[s0, s1]), &m, &[MultiIndex::Tuple(0)]);
                g.free(&part);
                if let Some(old) = prev.replace(b) {
                    g.free(&old);
                }
            }
            if let Some(last) = prev {
                g.free(&last);
            }
        },
    )
}

fn plan_of(program: &Program) -> Plan {
    wrapir::exec::compile_program(program).unwrap_or_else(|e| panic!("test program: {e}"))
}

fn inputs(plan: &Plan, backend: &mut MetaBackend) -> Vec<Value<wrapir::exec::meta::MetaTensor>> {
    let tensor = |backend: &mut MetaBackend, size: &[i64]| {
        let spec = TensorSpec::contiguous(DType::Float32, Device::cuda(0), size);
        Value::Tensor(backend.tensor(&spec).unwrap_or_else(|e| panic!("meta tensor: {e}")))
    };
    plan.input_names()
        .into_iter()
        .map(|name| match name {
            // Symbol inputs are named after their symbols in the FX graph.
            "arg0_1" | "s0" => Value::Int(64),
            "arg1_1" | "s1" => Value::Int(32),
            "arg2_1" => tensor(backend, &[64, 32]),
            "arg3_1" => tensor(backend, &[32, 32]),
            other => panic!("unexpected plan input `{other}`"),
        })
        .collect()
}

/// Runs `plan` once to warm up, then again with the same inputs, counting the
/// second run's allocations.
fn allocations_of_second_run(plan: &Plan) -> usize {
    let _guard = MEASURE.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let mut backend = MetaBackend::new();
    let constants = IndexMap::new();
    let first = inputs(plan, &mut backend);
    let second = first.clone();
    plan.run(&mut backend, first, &constants)
        .unwrap_or_else(|e| panic!("first run: {e}"));
    ALLOCATIONS.store(0, Ordering::SeqCst);
    COUNTING.with(|c| c.set(true));
    let out = plan.run(&mut backend, second, &constants);
    COUNTING.with(|c| c.set(false));
    let count = ALLOCATIONS.load(Ordering::SeqCst);
    let out = out.unwrap_or_else(|e| panic!("second run: {e}"));
    assert_eq!(out.outputs.len(), 2, "the plan returns both tensor inputs");
    count
}

/// Measures `family` at every length in [`LENGTHS`]: the count must be the
/// same at each length and within `bound`.
fn check(family: &str, build: fn(usize) -> Program, bound: usize) {
    let mut counts = Vec::new();
    for lines in LENGTHS {
        let plan = plan_of(&build(lines));
        counts.push((lines, plan.len(), allocations_of_second_run(&plan)));
    }
    let (_, _, first) = counts[0];
    for &(lines, steps, count) in &counts {
        assert_eq!(
            count, first,
            "{family}: {count} allocations for {lines} lines ({steps} steps), {first} for {} lines: \
             the per-step loop allocates (all counts: {counts:?})",
            LENGTHS[0]
        );
        assert!(
            count <= bound,
            "{family}: {count} allocations for {lines} lines ({steps} steps), bound {bound}"
        );
    }
    let (_, longest_steps, _) = counts[counts.len() - 1];
    assert!(
        longest_steps > 10 * LENGTHS[1],
        "{family}: the longest plan has only {longest_steps} steps"
    );
}

/// One test per program family: `test_name => (family, builder, bound)`
/// ([`check`]).
macro_rules! family_tests {
    ($($name:ident => ($family:literal, $build:expr, $bound:expr)),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                check($family, $build, $bound);
            }
        )*
    };
}

family_tests! {
    runtime_asserts_allocate_a_constant_number_of_times => ("asserts", asserts, PER_RUN_BOUND),
    symbol_arithmetic_and_binds_allocate_a_constant_number_of_times => ("precomputed", precomputed, PER_RUN_BOUND),
    allocations_launches_and_frees_allocate_a_constant_number_of_times => ("buffers", buffers, PER_RUN_BOUND_TENSORS),
    extern_calls_and_multi_outputs_allocate_a_constant_number_of_times => ("externs", externs, PER_RUN_BOUND_EXTERNS),
}

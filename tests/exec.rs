//! The FX interpreter on the meta and host backends, including the jagged
//! <-> padded dense kernels.

use indexmap::IndexMap;
use wrapir::exec::host::{HostBackend, HostOptions};
use wrapir::exec::meta::MetaBackend;
use wrapir::exec::{Backend, Tensor, TensorSpec, Value};
use wrapir::ir::{ArgValue, DType, Device, KernelBackend, Layout, Program, ProgramBuilder};
use wrapir::sym::SymExpr;

mod common;

fn s(name: &str) -> SymExpr {
    SymExpr::sym(name)
}

fn i(v: i64) -> SymExpr {
    SymExpr::Int(v)
}

fn cpu(dtype: DType, size: &[SymExpr]) -> Layout {
    Layout::contiguous(dtype, Device::cpu(), size.iter().cloned())
}

fn lower(program: &Program) -> wrapir::exec::interp::Plan {
    wrapir::exec::compile_program(program).unwrap_or_else(|e| panic!("{e}"))
}

// ---- meta -----------------------------------------------------------------

fn two_buffers() -> Program {
    common::main_program(
        |p| {
            p.backed_symbol("s0", Some(8));
            p.kernel("cpp_fused_copy_0", KernelBackend::Host, "")
        },
        |g, k| {
            let x = g.tensor_input("arg0_1", cpu(DType::Float32, &[s("s0")]));
            g.define_kernel(&k);
            let b0 = g.allocate("buf0", cpu(DType::Float32, &[s("s0")]));
            g.call_kernel(&k, [ArgValue::Buffer(x.clone()), ArgValue::Buffer(b0.clone())]);
            g.free(&x);
            let b1 = g.allocate("buf1", cpu(DType::Float32, &[SymExpr::mul(i(2), s("s0"))]));
            g.call_kernel(&k, [ArgValue::Buffer(b0.clone()), ArgValue::Buffer(b1.clone())]);
            g.free_if_not_reused(&b0);
            g.output(&b1);
        },
    )
}

fn nonzero_program() -> Program {
    common::main_program(
        |p| p.unbacked_symbol("u0", Some(0), Some(100)),
        |g, u0| {
            let x = g.tensor_input("arg0_1", cpu(DType::Float32, &[i(100)]));
            let b1 = common::nonzero_of(g, x, &u0);
            let mut l = cpu(DType::Int64, &[s("u0"), i(1)]);
            l.stride = [i(1), s("u0")].into_iter().collect();
            let b2 = g.multi_output("buf2", l, &b1, &[]);
            g.output(&b2);
        },
    )
}

#[test]
fn meta_runs_report_peak_memory() {
    // (program, input size, hint for u0, expected peak bytes, expected u0)
    struct Case {
        name: &'static str,
        program: Program,
        input: Vec<i64>,
        hint: Option<i64>,
        peak: u64,
        u0: Option<i64>,
    }
    let cases = vec![
        // arg0_1 32 B + buf0 32 B; arg0_1 dies after the first call; + buf1 64 B => 96.
        Case {
            name: "two_buffers",
            program: two_buffers(),
            input: vec![8],
            hint: None,
            peak: 96,
            u0: None,
        },
        // 400 B input + nonzero result 10 x 1 int64 = 80 B.
        Case {
            name: "nonzero_hint",
            program: nonzero_program(),
            input: vec![100],
            hint: Some(10),
            peak: 480,
            u0: Some(10),
        },
        // Without a hint the range's upper bound (100) is the worst case: 400 + 800.
        Case {
            name: "nonzero_range",
            program: nonzero_program(),
            input: vec![100],
            hint: None,
            peak: 1200,
            u0: Some(100),
        },
    ];
    for c in cases {
        let plan = lower(&c.program);
        let mut meta = MetaBackend::new();
        if let Some(h) = c.hint {
            meta = meta.with_hint("u0", h);
        }
        let x = meta
            .tensor(&TensorSpec::contiguous(DType::Float32, Device::cpu(), &c.input))
            .unwrap();
        let out = plan
            .run(&mut meta, vec![Value::Tensor(x)], &IndexMap::new())
            .unwrap_or_else(|e| panic!("{}: {e}", c.name));
        assert_eq!(meta.memory().peak_bytes, c.peak, "{}", c.name);
        assert_eq!(
            out.symbols.get(&wrapir::sym::Symbol::new("u0")).copied(),
            c.u0,
            "{}",
            c.name
        );
    }
}

#[test]
fn meta_checks_runtime_asserts() {
    let mut p = ProgramBuilder::new();
    let _s0 = p.backed_symbol("s0", None);
    let mut g = p.main();
    let x = g.tensor_input("arg0_1", cpu(DType::Float32, &[s("s0")]));
    g.runtime_assert(SymExpr::cmp(wrapir::sym::CmpOp::Ge, s("s0"), i(4)), "s0 >= 4");
    g.output(&x);
    g.finish();
    let plan = lower(&p.finish());
    let mut meta = MetaBackend::new();
    let small = meta
        .tensor(&TensorSpec::contiguous(DType::Float32, Device::cpu(), &[2]))
        .unwrap();
    let err = plan
        .run(&mut meta, vec![Value::Tensor(small)], &IndexMap::new())
        .unwrap_err()
        .to_string();
    assert!(err.contains("assertion failed: s0 >= 4"), "{err}");
    let big = meta
        .tensor(&TensorSpec::contiguous(DType::Float32, Device::cpu(), &[6]))
        .unwrap();
    let run = plan
        .run(&mut meta, vec![Value::Tensor(big)], &IndexMap::new())
        .unwrap_or_else(|e| panic!("s0 = 6 satisfies the assertion: {e}"));
    assert_eq!(run.outputs.len(), 1);
}

// ---- host: jagged kernels ------------------------------------------------------

/// One extern op on host tensors, through a program; returns the result or the error text.
fn run_op(
    op: &str,
    inputs: Vec<Tensor>,
    args: Vec<ArgValue>,
    result: &[i64],
    dtype: DType,
    zero_fill: bool,
) -> Result<Tensor, String> {
    let mut p = ProgramBuilder::new();
    let mut g = p.main();
    for (k, t) in inputs.iter().enumerate() {
        let size: Vec<SymExpr> = t.size().iter().map(|v| i(*v)).collect();
        g.tensor_input(&format!("arg{k}_1"), cpu(t.dtype(), &size));
    }
    let size: Vec<SymExpr> = result.iter().map(|v| i(*v)).collect();
    let b = g.extern_alloc("buf0", cpu(dtype, &size), op, args);
    g.output(&b);
    g.finish();
    let plan = lower(&p.finish());
    let mut host = HostBackend::new(HostOptions {
        jagged_zero_fill: zero_fill,
        ..Default::default()
    });
    let out = plan
        .run(
            &mut host,
            inputs.into_iter().map(Value::Tensor).collect(),
            &IndexMap::new(),
        )
        .map_err(|e| e.to_string())?;
    match out.outputs.into_iter().next() {
        Some(Value::Tensor(t)) => Ok(t),
        other => Err(format!("unexpected output {other:?}")),
    }
}

fn arg(k: usize) -> ArgValue {
    ArgValue::Buffer(format!("arg{k}_1").as_str().into())
}

fn offsets_list(k: usize) -> ArgValue {
    ArgValue::List(vec![arg(k)])
}

fn ints(v: &[i64]) -> ArgValue {
    ArgValue::List(v.iter().map(|x| ArgValue::Expr(i(*x))).collect())
}

fn f32s(v: &[f64], size: &[i64]) -> Tensor {
    Tensor::from_f64(DType::Float32, v, size).unwrap()
}

fn offs(v: &[i64]) -> Tensor {
    Tensor::from_vec(v.to_vec(), &[v.len() as i64]).unwrap()
}

const J2PD: &str = "torch.ops.aten._jagged_to_padded_dense_forward.default";
const PD2J: &str = "torch.ops.aten._padded_dense_to_jagged_forward.default";

struct JaggedCase {
    name: &'static str,
    op: &'static str,
    inputs: Vec<Tensor>,
    args: Vec<ArgValue>,
    shape: Vec<i64>,
    dtype: DType,
    zero_fill: bool,
    /// Expected values (row-major), or a substring of the expected error.
    expect: Result<Vec<f64>, &'static str>,
}

fn same(a: f64, b: f64) -> bool {
    (a.is_nan() && b.is_nan()) || a == b || (a - b).abs() < 1e-6
}

#[test]
fn jagged_cases() {
    // Item 1: values[j][d] = 10*j + d; row map per (b, s): Some(j) = values row j, None = padding 1.3.
    let v1: Vec<f64> = (0..10).flat_map(|j| (0..5).map(move |d| (10 * j + d) as f64)).collect();
    let rows: [Option<i64>; 20] = [
        Some(0),
        None,
        None,
        None,
        None,
        Some(1),
        Some(2),
        None,
        None,
        None,
        Some(3),
        Some(4),
        Some(5),
        Some(6),
        Some(7),
        Some(8),
        Some(9),
        None,
        None,
        None,
    ];
    let e1: Vec<f64> = rows
        .iter()
        .flat_map(|r| (0..5).map(move |d| r.map_or(1.3, |j| (10 * j + d) as f64)))
        .collect();
    // Item 7: a row longer than the padded length, on the CPU's and CUDA's
    // convention (`zero_fill`).
    let long_row = |name, zero_fill, expect| JaggedCase {
        name,
        op: PD2J,
        inputs: vec![f32s(&[1., 2., 3., 4.], &[2, 2]), offs(&[0, 3, 4])],
        args: vec![arg(0), offsets_list(1)],
        shape: vec![4],
        dtype: DType::Float32,
        zero_fill,
        expect,
    };
    let cases = vec![
        JaggedCase {
            name: "1 basic",
            op: J2PD,
            inputs: vec![f32s(&v1, &[10, 5]), offs(&[0, 1, 3, 8, 10])],
            args: vec![arg(0), offsets_list(1), ints(&[5]), ArgValue::Float(1.3)],
            shape: vec![4, 5, 5],
            dtype: DType::Float32,
            zero_fill: false,
            expect: Ok(e1),
        },
        JaggedCase {
            name: "2 D-folded",
            op: J2PD,
            inputs: vec![f32s(&[5., 3., 7., 1.], &[4]), offs(&[0, 1, 4])],
            args: vec![arg(0), offsets_list(1), ints(&[3]), ArgValue::Float(0.0)],
            shape: vec![2, 3],
            dtype: DType::Float32,
            zero_fill: false,
            expect: Ok(vec![5., 0., 0., 3., 7., 1.]),
        },
        JaggedCase {
            name: "3 truncation",
            op: J2PD,
            inputs: vec![f32s(&[1., 2., 3., 4., 5.], &[5]), offs(&[0, 3, 5])],
            args: vec![arg(0), offsets_list(1), ints(&[2]), ArgValue::Float(-1.0)],
            shape: vec![2, 2],
            dtype: DType::Float32,
            zero_fill: false,
            expect: Ok(vec![1., 2., 4., 5.]),
        },
        JaggedCase {
            name: "4 empty rows",
            op: J2PD,
            inputs: vec![f32s(&[1., 2., 3., 4., 5.], &[5]), offs(&[0, 0, 2, 5])],
            args: vec![arg(0), offsets_list(1), ints(&[4]), ArgValue::Float(-1.0)],
            shape: vec![3, 4],
            dtype: DType::Float32,
            zero_fill: false,
            expect: Ok(vec![-1., -1., -1., -1., 1., 2., -1., -1., 3., 4., 5., -1.]),
        },
        JaggedCase {
            name: "5 zero rows j2pd",
            op: J2PD,
            inputs: vec![f32s(&[], &[0, 3]), offs(&[0])],
            args: vec![arg(0), offsets_list(1), ints(&[4]), ArgValue::Float(0.0)],
            shape: vec![0, 4, 3],
            dtype: DType::Float32,
            zero_fill: false,
            expect: Ok(vec![]),
        },
        JaggedCase {
            name: "5 zero rows pd2j",
            op: PD2J,
            inputs: vec![f32s(&[], &[0, 4, 3]), offs(&[0])],
            args: vec![arg(0), offsets_list(1), ArgValue::Expr(i(0))],
            shape: vec![0, 3],
            dtype: DType::Float32,
            zero_fill: false,
            expect: Ok(vec![]),
        },
        long_row(
            "7 long row raises (CPU)",
            false,
            Err("found batch item of length 3 (row 0) when max length is 2"),
        ),
        long_row("7 long row zero-fills (CUDA)", true, Ok(vec![1., 2., 0., 3.])),
        JaggedCase {
            name: "7 total_L mismatch raises",
            op: PD2J,
            inputs: vec![f32s(&[1., 2., 3., 4.], &[2, 2]), offs(&[0, 1, 2])],
            args: vec![arg(0), offsets_list(1), ArgValue::Expr(i(3))],
            shape: vec![3],
            dtype: DType::Float32,
            zero_fill: false,
            expect: Err("final offset 2 should match total_L value 3"),
        },
        JaggedCase {
            name: "8 inverse offsets",
            op: "wrapir.inverse_offsets",
            inputs: vec![offs(&[0, 3, 4, 9, 10])],
            args: vec![arg(0)],
            shape: vec![10],
            dtype: DType::Int64,
            zero_fill: false,
            expect: Ok(vec![0., 0., 0., 1., 2., 2., 2., 2., 2., 3.]),
        },
        JaggedCase {
            name: "11 grad values (truncated rows get 0)",
            op: "aten._jagged_to_padded_dense_backward",
            inputs: vec![f32s(&[1., 2., 3., 4.], &[2, 2]), offs(&[0, 3, 5])],
            args: vec![arg(0), offsets_list(1), ArgValue::Expr(i(5))],
            shape: vec![5],
            dtype: DType::Float32,
            zero_fill: false,
            expect: Ok(vec![1., 2., 0., 3., 4.]),
        },
        JaggedCase {
            name: "11 grad dense (padding 0)",
            op: "aten._padded_dense_to_jagged_backward",
            inputs: vec![f32s(&[1., 2., 3.], &[3]), offs(&[0, 1, 3])],
            args: vec![arg(0), offsets_list(1), ints(&[2])],
            shape: vec![2, 2],
            dtype: DType::Float32,
            zero_fill: false,
            expect: Ok(vec![1., 0., 2., 3.]),
        },
        JaggedCase {
            name: "12 f16, int32 offsets, -inf",
            op: J2PD,
            inputs: vec![
                Tensor::from_f64(DType::Float16, &[1., 2., 3.], &[3]).unwrap(),
                Tensor::from_vec(vec![0i32, 1, 3], &[3]).unwrap(),
            ],
            args: vec![arg(0), offsets_list(1), ints(&[2]), ArgValue::Float(f64::NEG_INFINITY)],
            shape: vec![2, 2],
            dtype: DType::Float16,
            zero_fill: false,
            expect: Ok(vec![1., f64::NEG_INFINITY, 2., 3.]),
        },
        JaggedCase {
            name: "12 bf16, nan",
            op: J2PD,
            inputs: vec![
                Tensor::from_f64(DType::Bfloat16, &[1.5, 2.5], &[2]).unwrap(),
                offs(&[0, 0, 2]),
            ],
            args: vec![arg(0), offsets_list(1), ints(&[2]), ArgValue::Float(f64::NAN)],
            shape: vec![2, 2],
            dtype: DType::Bfloat16,
            zero_fill: false,
            expect: Ok(vec![f64::NAN, f64::NAN, 1.5, 2.5]),
        },
        JaggedCase {
            name: "12 f64, 1.5",
            op: J2PD,
            inputs: vec![
                Tensor::from_f64(DType::Float64, &[7., 8.], &[2, 1]).unwrap(),
                offs(&[0, 1, 2]),
            ],
            args: vec![arg(0), offsets_list(1), ints(&[2]), ArgValue::Float(1.5)],
            shape: vec![2, 2, 1],
            dtype: DType::Float64,
            zero_fill: false,
            expect: Ok(vec![7., 1.5, 8., 1.5]),
        },
        JaggedCase {
            name: "12 int64 values, -inf saturates",
            op: J2PD,
            inputs: vec![offs(&[4, 5]), offs(&[0, 2])],
            args: vec![arg(0), offsets_list(1), ints(&[3]), ArgValue::Float(f64::NEG_INFINITY)],
            shape: vec![1, 3],
            dtype: DType::Int64,
            zero_fill: false,
            expect: Ok(vec![4., 5., i64::MIN as f64]),
        },
    ];
    let mut failures = Vec::new();
    for c in cases {
        let got = run_op(c.op, c.inputs, c.args, &c.shape, c.dtype, c.zero_fill);
        match (&got, &c.expect) {
            (Ok(t), Ok(want)) => {
                let vals = t.to_f64_vec().unwrap();
                if t.size() != c.shape.as_slice()
                    || t.dtype() != c.dtype
                    || vals.len() != want.len()
                    || !vals.iter().zip(want).all(|(a, b)| same(*a, *b))
                {
                    failures.push(format!(
                        "{}: got {:?} {:?} {vals:?}, want {:?} {want:?}",
                        c.name,
                        t.dtype(),
                        t.size(),
                        c.shape
                    ));
                }
            }
            (Err(e), Err(want)) if e.contains(want) => {}
            _ => failures.push(format!("{}: got {got:?}, want {:?}", c.name, c.expect)),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn jagged_round_trip() {
    // Item 6: pd2j(j2pd(v, o, [N], p), o, L) == v when every row fits.
    let mut p = ProgramBuilder::new();
    let mut g = p.main();
    let v = g.tensor_input("arg0_1", cpu(DType::Float32, &[i(5), i(2)]));
    let o = g.tensor_input("arg1_1", cpu(DType::Int64, &[i(4)]));
    let off = ArgValue::List(vec![ArgValue::Buffer(o.clone())]);
    let d = g.extern_alloc(
        "buf0",
        cpu(DType::Float32, &[i(3), i(3), i(2)]),
        J2PD,
        vec![ArgValue::Buffer(v), off.clone(), ints(&[3]), ArgValue::Float(9.0)],
    );
    let j = g.extern_alloc(
        "buf1",
        cpu(DType::Float32, &[i(5), i(2)]),
        PD2J,
        vec![ArgValue::Buffer(d), off, ArgValue::Expr(i(5))],
    );
    g.output(&j);
    g.finish();
    let plan = lower(&p.finish());
    let values: Vec<f64> = (1..=10).map(|x| x as f64).collect();
    let mut host = HostBackend::default();
    let out = plan
        .run(
            &mut host,
            vec![
                Value::Tensor(f32s(&values, &[5, 2])),
                Value::Tensor(offs(&[0, 2, 2, 5])),
            ],
            &IndexMap::new(),
        )
        .unwrap();
    let Some(Value::Tensor(t)) = out.outputs.first() else {
        panic!("no tensor output")
    };
    assert_eq!(t.to_f64_vec().unwrap(), values);
    // The intermediate [B, N, D] buffer was freed after its last use.
    assert_eq!(host.memory().current_bytes, 0);
}

#[test]
fn padded_to_jagged_without_total_binds_u0() {
    let mut p = ProgramBuilder::new();
    let u0 = p.unbacked_symbol("u0", Some(0), Some(6));
    let mut g = p.main();
    let dense = g.tensor_input("arg0_1", cpu(DType::Float32, &[i(2), i(3)]));
    let o = g.tensor_input("arg1_1", cpu(DType::Int64, &[i(3)]));
    let b0 = g.extern_alloc(
        "buf0",
        cpu(DType::Float32, &[s("u0")]),
        PD2J,
        vec![ArgValue::Buffer(dense), ArgValue::List(vec![ArgValue::Buffer(o)])],
    );
    g.bind_size(&b0, &u0, 0);
    let b1 = g.allocate("buf1", cpu(DType::Float32, &[s("u0")]));
    let mut kw = IndexMap::new();
    kw.insert("dim".to_string(), ArgValue::Expr(i(0)));
    g.extern_out(&b1, "torch.ops.aten.cumsum.out", vec![ArgValue::Buffer(b0.clone())], kw);
    g.free_if_not_reused(&b0);
    g.output(&b1);
    g.output_expr(SymExpr::mul(i(2), s("u0")));
    g.finish();
    let plan = lower(&p.finish());
    let mut host = HostBackend::default();
    let out = plan
        .run(
            &mut host,
            vec![
                Value::Tensor(f32s(&[1., 2., 3., 4., 5., 6.], &[2, 3])),
                Value::Tensor(offs(&[0, 2, 3])),
            ],
            &IndexMap::new(),
        )
        .unwrap();
    assert_eq!(out.symbols.get(&wrapir::sym::Symbol::new("u0")).copied(), Some(3));
    let Some(Value::Tensor(t)) = out.outputs.first() else {
        panic!("no tensor output")
    };
    // jagged = [1, 2, 4]; cumsum = [1, 3, 7]
    assert_eq!(t.to_f64_vec().unwrap(), vec![1., 3., 7.]);
    assert!(matches!(out.outputs.get(1), Some(Value::Int(6))));
}

#[test]
fn unknown_ops_and_kernels_are_named() {
    let err = run_op(
        "torch.ops.aten.frobnicate.default",
        vec![f32s(&[1.], &[1])],
        vec![arg(0)],
        &[1],
        DType::Float32,
        false,
    )
    .unwrap_err();
    assert!(
        err.contains("does not implement op `torch.ops.aten.frobnicate.default`")
            && err.contains("aten._jagged_to_padded_dense_forward"),
        "{err}"
    );
    let plan = lower(&two_buffers());
    let mut host = HostBackend::default();
    let err = plan
        .run(&mut host, vec![Value::Tensor(f32s(&[0.; 8], &[8]))], &IndexMap::new())
        .unwrap_err()
        .to_string();
    assert!(err.contains("has no kernel `cpp_fused_copy_0`"), "{err}");
    // A registered closure runs.
    host.register_kernel(
        "cpp_fused_copy_0",
        std::sync::Arc::new(|l: &wrapir::exec::KernelLaunch<'_, Tensor>| {
            let (Some(Value::Tensor(src)), Some(Value::Tensor(dst))) = (l.args.first(), l.args.get(1)) else {
                return Err(wrapir::exec::ExecError::Type("expected two tensors".into()));
            };
            let v = src.to_f64_vec()?;
            let n = dst.numel();
            dst.write_f64(&(0..n).map(|k| v[k % v.len()] + 1.0).collect::<Vec<_>>())
        }),
    );
    let out = plan
        .run(
            &mut host,
            vec![Value::Tensor(f32s(&[1., 2., 3., 4., 5., 6., 7., 8.], &[8]))],
            &IndexMap::new(),
        )
        .unwrap();
    let Some(Value::Tensor(t)) = out.outputs.first() else {
        panic!("no tensor output")
    };
    assert_eq!(
        t.to_f64_vec().unwrap(),
        vec![3., 4., 5., 6., 7., 8., 9., 10., 3., 4., 5., 6., 7., 8., 9., 10.]
    );
}

/// `Value::try_map_tensors` maps every tensor through lists and dicts, keeps
/// every other value, and stops at the first error.
#[test]
fn value_tensor_mapping_walks_lists_and_dicts() {
    let dict: IndexMap<String, Value<i64>> = [
        ("a".to_string(), Value::Tensor(3)),
        ("b".to_string(), Value::Str("s".into())),
    ]
    .into_iter()
    .collect();
    let v: Value<i64> = Value::List(vec![
        Value::Tensor(1),
        Value::Int(7),
        Value::Dict(Box::new(dict)),
        Value::None,
    ]);
    let doubled = v
        .try_map_tensors(&mut |t| Ok::<_, String>(format!("t{}", t * 2)))
        .unwrap();
    let want_dict: IndexMap<String, Value<String>> = [
        ("a".to_string(), Value::Tensor("t6".to_string())),
        ("b".to_string(), Value::Str("s".into())),
    ]
    .into_iter()
    .collect();
    let want = Value::List(vec![
        Value::Tensor("t2".to_string()),
        Value::Int(7),
        Value::Dict(Box::new(want_dict)),
        Value::None,
    ]);
    assert_eq!(format!("{doubled:?}"), format!("{want:?}"));
    let mut seen = Vec::new();
    let err = v.try_map_tensors(&mut |t| {
        seen.push(*t);
        if *t == 1 {
            Err("first")
        } else {
            Ok(*t)
        }
    });
    assert!(matches!(err, Err("first")));
    assert_eq!(seen, [1], "the walk stops at the first error");
}

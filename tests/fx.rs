//! FX lowering: exact printed graphs of small programs built in Rust.

mod common;

use indexmap::IndexMap;
use wrapir::ir::{
    ArgValue, CallArg, DType, Device, DynamicScalar, GridType, KernelCall, KeyEntry, Layout, Line, MultiIndex,
    Predicate, Program, ProgramBuilder, SigType, TensorMethod, TritonMeta,
};
use wrapir::sym::{CmpOp, SymExpr};

fn s(name: &str) -> SymExpr {
    SymExpr::sym(name)
}

fn i(v: i64) -> SymExpr {
    SymExpr::Int(v)
}

fn cuda(dtype: DType, size: Vec<SymExpr>) -> Layout {
    Layout::contiguous(dtype, Device::cuda(0), size)
}

fn buf(name: &str) -> ArgValue {
    ArgValue::Buffer(name.into())
}

fn path(entries: &[KeyEntry]) -> wrapir::ir::KeyPath {
    entries.iter().cloned().collect()
}

/// Lowers `program`; returns a message when the printed graph differs from `expect`.
fn check(name: &str, program: Program, expect: &str) -> Option<String> {
    let info = wrapir::ir::validate(&program).unwrap_or_else(|e| panic!("{name}: invalid program: {e}"));
    let got = wrapir::lower::fx::write_string(&info, &Default::default()).unwrap_or_else(|e| panic!("{name}: {e}"));
    (got.trim() != expect.trim()).then(|| format!("=== {name}: printed FX graph differs, got:\n{got}"))
}

fn nonzero_u0() -> Program {
    common::main_program(
        |p| p.unbacked_symbol("u0", Some(0), Some(100)),
        |g, u0| {
            let x = g.tensor_input("arg0_1", cuda(DType::Bool, vec![i(100)]));
            let b1 = common::nonzero_of(g, x, &u0);
            let mut l = cuda(DType::Int64, vec![s("u0"), i(1)]);
            l.stride = [i(1), s("u0")].into_iter().collect();
            let b2 = g.multi_output("buf2", l, &b1, &[]);
            g.runtime_assert(SymExpr::cmp(CmpOp::Ge, s("u0"), i(0)), "u0 >= 0");
            let b3 = g.allocate("buf3", cuda(DType::Float32, vec![s("u0"), i(1)]));
            g.output(&b2);
            g.output(&b3);
        },
    )
}

fn tuple_u1() -> Program {
    common::main_program(
        |p| p.unbacked_symbol("u1", Some(0), None),
        |g, u1| {
            let x = g.tensor_input("arg0_1", cuda(DType::Float32, vec![i(8)]));
            let b1 = g.extern_alloc_multi(
                "buf1",
                "torch.ops.aten._unique2.default",
                vec![ArgValue::Buffer(x.clone())],
            );
            g.bind_unbacked(
                &b1,
                &u1,
                path(&[
                    KeyEntry::Index(1),
                    KeyEntry::CallMethod(TensorMethod::Size),
                    KeyEntry::Index(0),
                ]),
            );
            let b2 = g.multi_output(
                "buf2",
                cuda(DType::Float32, vec![s("u1")]),
                &b1,
                &[MultiIndex::Tuple(0)],
            );
            let b3 = g.multi_output("buf3", cuda(DType::Int64, vec![s("u1")]), &b1, &[MultiIndex::Tuple(1)]);
            g.output(&b2);
            g.output(&b3);
        },
    )
}

fn divide_by_two() -> Program {
    common::main_program(
        |p| p.unbacked_symbol("u0", Some(0), None),
        |g, u0| {
            let x = g.tensor_input("arg0_1", cuda(DType::Float32, vec![i(8)]));
            let b1 = g.extern_alloc(
                "buf1",
                cuda(DType::Float32, vec![SymExpr::mul(i(2), s("u0"))]),
                "torch.ops.aten.repeat_interleave.Tensor",
                vec![ArgValue::Buffer(x)],
            );
            g.bind_unbacked(
                &b1,
                &u0,
                path(&[
                    KeyEntry::CallMethod(TensorMethod::Size),
                    KeyEntry::Index(0),
                    KeyEntry::DivideBy(2),
                ]),
            );
            let b2 = g.allocate("buf2", cuda(DType::Float32, vec![s("u0")]));
            g.output(&b1);
            g.output(&b2);
        },
    )
}

fn item_to_int() -> Program {
    common::main_program(
        |p| p.unbacked_symbol("u0", Some(0), Some(1)),
        |g, u0| {
            let x = g.tensor_input("arg0_1", cuda(DType::Bool, vec![]));
            g.line(Line::DynamicScalar(DynamicScalar {
                symbol: u0,
                source: x,
                keypath: path(&[KeyEntry::ConvertInt]),
                node: None,
            }));
            let b0 = g.allocate("buf0", cuda(DType::Float32, vec![SymExpr::add(s("u0"), i(3))]));
            g.output(&b0);
        },
    )
}

fn cond_program() -> Program {
    let mut p = ProgramBuilder::new();
    let s0 = p.backed_symbol("s0", Some(4));
    let _ = s0;
    let mut t = p.subgraph("true_graph_0");
    let a = t.tensor_input("arg1_1", cuda(DType::Float32, vec![i(4)]));
    let tb = t.allocate(
        "true_graph_0_buf0",
        cuda(DType::Float32, vec![SymExpr::mul(i(2), s("s0"))]),
    );
    t.free(&a);
    t.output(&tb);
    t.finish();
    let mut f = p.subgraph("false_graph_0");
    let a = f.tensor_input("arg1_1", cuda(DType::Float32, vec![i(4)]));
    let fb = f.extern_alloc(
        "false_graph_0_buf0",
        cuda(DType::Float32, vec![i(4)]),
        "torch.ops.aten.clone.default",
        vec![ArgValue::Buffer(a)],
    );
    f.output(&fb);
    f.finish();
    let mut g = p.main();
    let pred = g.tensor_input("arg0_1", cuda(DType::Bool, vec![]));
    let x = g.tensor_input("arg1_1", cuda(DType::Float32, vec![i(4)]));
    let _y = g.tensor_input("arg2_1", cuda(DType::Float32, vec![s("s0")]));
    g.conditional("buf0", Predicate::Tensor(pred), ("true_graph_0", "false_graph_0"), &[x]);
    let b1 = g.multi_output(
        "buf1",
        cuda(DType::Float32, vec![SymExpr::mul(i(2), s("s0"))]),
        &"buf0".into(),
        &[MultiIndex::List(0)],
    );
    g.output(&b1);
    g.finish();
    p.finish()
}

fn triton_named() -> Program {
    common::main_program(
        |p| {
            p.backed_symbol("s0", Some(64));
            let mut sig = IndexMap::new();
            sig.insert("in_ptr".to_string(), SigType::Pointer(DType::Float32));
            sig.insert("BLOCK_SIZE".to_string(), SigType::Constexpr);
            sig.insert("out_ptr".to_string(), SigType::Pointer(DType::Float32));
            sig.insert("n_elements".to_string(), "i32".parse::<SigType>().unwrap());
            sig.insert("scale".to_string(), "fp32".parse::<SigType>().unwrap());
            p.triton_kernel(
                "add_kernel_0",
                "",
                TritonMeta {
                    signature: sig,
                    constants: [("BLOCK_SIZE".to_string(), wrapir::ir::ConstValue::Int(16))]
                        .into_iter()
                        .collect(),
                    config: IndexMap::new(),
                    grid_type: GridType::FixedGrid,
                    num_warps: 4,
                    num_stages: 1,
                    shared_mem: 0,
                    global_scratch: None,
                    profile_scratch: None,
                    extra_launcher_args: vec!["_grid_0".into(), "_grid_1".into(), "_grid_2".into()],
                    mangled_name: None,
                    cubin: None,
                    user_defined: true,
                },
            )
        },
        |g, k| {
            let x = g.tensor_input("arg0_1", cuda(DType::Float32, vec![s("s0")]));
            g.define_kernel(&k);
            let b0 = g.allocate("buf0", cuda(DType::Float32, vec![s("s0")]));
            let named = |n: &str, v: ArgValue| CallArg {
                name: Some(n.into()),
                value: v,
            };
            let grid0 = SymExpr::floor_div(SymExpr::add(s("s0"), i(15)), i(16));
            g.line(Line::KernelCall(KernelCall {
                kernel: k.clone(),
                args: vec![
                    CallArg::positional(ArgValue::Buffer(x.clone())),
                    named("_grid_0", ArgValue::Expr(grid0)),
                    named("n_elements", ArgValue::Expr(s("s0"))),
                    named("out_ptr", buf("buf0")),
                    named("scale", ArgValue::Float(0.5)),
                    named("_grid_1", ArgValue::Expr(i(1))),
                    named("_grid_2", ArgValue::Expr(i(1))),
                ],
                device: Some(Device::cuda(0)),
            }));
            g.free(&x);
            g.output(&b0);
        },
    )
}

#[test]
fn printed_graphs() {
    let cases: Vec<(&str, Program, &str)> = vec![
        (
            "nonzero_u0",
            nonzero_u0(),
            r#"
def forward(self, arg0_1):
    assert_size_stride_1 = assert_size_stride(arg0_1, [100], [1]);  assert_size_stride_1 = None
    buf1 = torch.ops.aten.nonzero.default(arg0_1);  arg0_1 = None
    u0 = torch.ops.aten.sym_size.int(buf1, 0)
    ge = u0 >= 0
    _assert_scalar = torch.ops.aten._assert_scalar.default(ge, 'u0 >= 0');  ge = _assert_scalar = None
    buf3 = torch.empty_strided([u0, 1], [1, 1], dtype=torch.float32, device='cuda');  u0 = None
    return [buf1, buf3]
"#,
        ),
        (
            "tuple_u1",
            tuple_u1(),
            r#"
def forward(self, arg0_1):
    assert_size_stride_1 = assert_size_stride(arg0_1, [8], [1]);  assert_size_stride_1 = None
    buf1 = torch.ops.aten._unique2.default(arg0_1);  arg0_1 = None
    buf3 = buf1[1]
    u1 = torch.ops.aten.sym_size.int(buf3, 0);  u1 = None
    buf2 = buf1[0];  buf1 = None
    return [buf2, buf3]
"#,
        ),
        (
            "divide_by_two",
            divide_by_two(),
            r#"
def forward(self, arg0_1):
    assert_size_stride_1 = assert_size_stride(arg0_1, [8], [1]);  assert_size_stride_1 = None
    buf1 = torch.ops.aten.repeat_interleave.Tensor(arg0_1);  arg0_1 = None
    sym_size_int = torch.ops.aten.sym_size.int(buf1, 0)
    mod = sym_size_int % 2
    eq = mod == 0;  mod = None
    _assert_scalar = torch.ops.aten._assert_scalar.default(eq, 'u0: value is not a multiple of 2');  eq = _assert_scalar = None
    u0 = sym_size_int // 2;  sym_size_int = None
    buf2 = torch.empty_strided([u0], [1], dtype=torch.float32, device='cuda');  u0 = None
    return [buf1, buf2]
"#,
        ),
        (
            "item_to_int",
            item_to_int(),
            r#"
def forward(self, arg0_1):
    assert_size_stride_1 = assert_size_stride(arg0_1, [], []);  assert_size_stride_1 = None
    where = torch.ops.aten.where.Scalar(arg0_1, 1, 0);  arg0_1 = None
    u0 = torch.ops.aten.item.default(where);  where = None
    sym_sum = torch.sym_sum([u0, 3]);  u0 = None
    buf0 = torch.empty_strided([sym_sum], [1], dtype=torch.float32, device='cuda');  sym_sum = None
    return buf0
"#,
        ),
        (
            "cond",
            cond_program(),
            r#"
def forward(self, arg0_1, arg1_1, arg2_1):
    s0 = torch.ops.aten.sym_size.int(arg2_1, 0)
    assert_size_stride_1 = assert_size_stride(arg0_1, [], []);  assert_size_stride_1 = None
    assert_size_stride_2 = assert_size_stride(arg1_1, [4], [1]);  assert_size_stride_2 = None
    assert_size_stride_3 = assert_size_stride(arg2_1, [s0], [1]);  arg2_1 = assert_size_stride_3 = None
    true_graph_0 = self.true_graph_0
    false_graph_0 = self.false_graph_0
    buf0 = torch.ops.higher_order.cond(arg0_1, true_graph_0, false_graph_0, (arg1_1, s0));  arg0_1 = true_graph_0 = false_graph_0 = arg1_1 = s0 = None
    buf1 = buf0[0];  buf0 = None
    return buf1

class true_graph_0(torch.nn.Module):
    def forward(self, arg1_1, s0):
        assert_size_stride_1 = assert_size_stride(arg1_1, [4], [1]);  arg1_1 = assert_size_stride_1 = None
        mul = 2 * s0;  s0 = None
        true_graph_0_buf0 = torch.empty_strided([mul], [1], dtype=torch.float32, device='cuda');  mul = None
        return [true_graph_0_buf0]

class false_graph_0(torch.nn.Module):
    def forward(self, arg1_1, s0):
        assert_size_stride_1 = assert_size_stride(arg1_1, [4], [1]);  assert_size_stride_1 = None
        false_graph_0_buf0 = torch.ops.aten.clone.default(arg1_1);  arg1_1 = None
        return [false_graph_0_buf0]
"#,
        ),
        (
            "triton_named",
            triton_named(),
            r#"
def forward(self, arg0_1):
    s0 = torch.ops.aten.sym_size.int(arg0_1, 0)
    assert_size_stride_1 = assert_size_stride(arg0_1, [s0], [1]);  assert_size_stride_1 = None
    buf0 = torch.empty_strided([s0], [1], dtype=torch.float32, device='cuda')
    sym_sum = torch.sym_sum([s0, 15])
    floordiv = sym_sum // 16;  sym_sum = None
    triton_kernel_wrapper_mutation = torch.ops.higher_order.triton_kernel_wrapper_mutation(kernel='add_kernel_0', grid=[(floordiv, 1, 1)], kwargs={'in_ptr': arg0_1, 'BLOCK_SIZE': 16, 'out_ptr': buf0, 'n_elements': s0, 'scale': 0.5});  floordiv = arg0_1 = s0 = triton_kernel_wrapper_mutation = None
    return buf0
"#,
        ),
    ];
    let failures: Vec<String> = cases.into_iter().filter_map(|(n, p, e)| check(n, p, e)).collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

//! Invalid programs, one per rule, with the exact diagnostics.

use super::*;

const BUFFER_CASES: &[Case] = &[
    (
        "undeclared buffer",
        |p| {
            let mut g = p.main();
            g.line(Line::Allocate {
                buffer: BufName::new("buf9"),
            });
            g.finish();
        },
        &["main:0: buffer buf9 is not declared in the buffer table of this graph"],
    ),
    (
        "used before definition",
        |p| {
            let mut g = p.main();
            g.declare_tensor("buf0", f32n(8));
            g.line(Line::Free {
                buffer: BufName::new("buf0"),
            });
            g.line(Line::Allocate {
                buffer: BufName::new("buf0"),
            });
            g.finish();
        },
        &["main:0: buffer buf0 is used before it is defined (defined at line 1)"],
    ),
    (
        "use after free",
        |p| {
            let mut g = p.main();
            let x = input8(&mut g);
            g.free(&x);
            g.extern_alloc(
                "buf0",
                f32n(8),
                "torch.ops.aten.clone.default",
                vec![ArgValue::Buffer(x)],
            );
            g.finish();
        },
        &["main:1: buffer arg0_1 is used after it was freed at line 0"],
    ),
    (
        "double free",
        |p| {
            let mut g = p.main();
            let b = g.allocate("buf0", f32n(8));
            g.free_if_not_reused(&b);
            g.free_if_not_reused(&b);
            g.finish();
        },
        &["main:2: buffer buf0 is freed twice (first freed at line 1)"],
    ),
    (
        "defined twice",
        |p| {
            let mut g = p.main();
            let b = g.allocate("buf0", f32n(8));
            g.line(Line::Allocate { buffer: b });
            g.finish();
        },
        &["main:1: buffer buf0 is defined twice (first defined at line 0)"],
    ),
    (
        "input defined again",
        |p| {
            let mut g = p.main();
            let x = input8(&mut g);
            g.line(Line::Allocate { buffer: x });
            g.finish();
        },
        &["main:0: buffer arg0_1 is defined twice (first defined at input 0)"],
    ),
    (
        "multi-output value allocated",
        |p| {
            let mut g = p.main();
            let m = g.declare_multi("buf0");
            g.line(Line::Allocate { buffer: m });
            g.finish();
        },
        &["main:0: buffer buf0 is a multi-output value where a tensor is needed"],
    ),
    (
        "indexing a tensor as a multi-output value",
        |p| {
            let mut g = p.main();
            let x = input8(&mut g);
            g.multi_output("buf1", f32n(8), &x, &[wrapir::ir::MultiIndex::Tuple(0)]);
            g.finish();
        },
        &["main:0: buffer arg0_1 is a tensor where a multi-output value is needed"],
    ),
    (
        "graph output freed",
        |p| {
            let mut g = p.main();
            let b = g.allocate("buf0", f32n(8));
            g.free_if_not_reused(&b);
            g.output(&b);
            g.finish();
        },
        &["main:-: output buf0 is not live at the end of the graph (it ends at line 1)"],
    ),
    (
        "constant freed",
        |p| {
            p.constant("_tensor_constant0", f32n(4));
            let mut g = p.main();
            g.free(&BufName::new("_tensor_constant0"));
            g.finish();
        },
        &["main:0: constant _tensor_constant0 cannot be freed or reused"],
    ),
    (
        "buffer named like a symbol",
        |p| {
            p.backed_symbol("s0", None);
            let mut g = p.main();
            g.tensor_input("s0", f32s(&[sym("s0")]));
            g.finish();
        },
        &["main:-: s0 is both a buffer and a symbol"],
    ),
];

const STORAGE_CASES: &[Case] = &[
    ("reuse keeps a live buffer", |p| {
        let mut g = p.main();
        let b = g.allocate("buf0", f32n(8));
        g.declare_tensor("buf1", f32n(8));
        g.line(Line::Reuse { old: b, new: BufName::new("buf1"), delete_old: false });
        g.output(&BufName::new("buf1"));
        g.finish();
    }, &["main:1: buffer buf1 reuses the storage of buf0, but buf0 stays live (the reuse keeps it and no `free_if_not_reused buf0 reused` precedes it)"]),
    ("reuse across dtypes", |p| {
        let mut g = p.main();
        let b = g.allocate("buf0", f32n(8));
        let n = g.reuse(&b, "buf1", Layout::contiguous(DType::Int32, Device::cuda(0), [SymExpr::Int(8)]));
        g.output(&n);
        g.finish();
    }, &["main:1: buffer buf1 (i32) cannot reuse the storage of buf0 (f32): dtypes differ"]),
    ("reuse across devices", |p| {
        let mut g = p.main();
        let b = g.allocate("buf0", f32n(8));
        let n = g.reuse(&b, "buf1", Layout::contiguous(DType::Float32, Device::cuda(1), [SymExpr::Int(8)]));
        g.output(&n);
        g.finish();
    }, &["main:1: buffer buf1 (on cuda:1) cannot use the storage of buf0 (on cuda:0): devices differ"]),
    ("reuse into a smaller storage", |p| {
        let mut g = p.main();
        let b = g.allocate("buf0", f32n(8));
        g.reuse(&b, "buf1", f32n(16));
        g.finish();
    }, &["main:1: buffer buf1 needs storage for 16 elements but buf0 holds 8"]),
    ("reuse after the storage went to another buffer", |p| {
        let mut g = p.main();
        let b = g.allocate("buf0", f32n(8));
        g.line(Line::FreeIfNotReused { buffer: b.clone(), is_reused: true });
        g.reuse(&b, "buf1", f32n(8));
        g.reuse(&b, "buf2", f32n(8));
        g.finish();
    }, &["main:3: buffer buf0 is used after its storage was handed to buf1 at line 2"]),
    ("use after release for reuse", |p| {
        let (mut g, k, x, b) = kernel_main(p, 8);
        g.line(Line::FreeIfNotReused { buffer: b.clone(), is_reused: true });
        g.call_kernel(&k, add_args(x, b));
        g.finish();
    }, &["main:3: buffer buf0 is used after its storage was released for reuse at line 2"]),
    ("reuse of a view", |p| {
        let mut g = p.main();
        let b = g.allocate("buf0", f32n(16));
        let v = g.reinterpret(&b, "buf1", f32n(8));
        g.reuse(&v, "buf2", f32n(8));
        g.finish();
    }, &["main:2: buffer buf1 is a view of buf0's storage and has no storage of its own to hand on"]),
    ("view past the end of its storage", |p| {
        let mut g = p.main();
        let b = g.allocate("buf0", f32n(16));
        let mut l = f32n(8);
        l.offset = SymExpr::Int(12);
        g.reinterpret(&b, "buf1", l);
        g.finish();
    }, &["main:1: view buf1 needs 80 bytes of storage but the storage of buf0 holds 64"]),
    ("view used after its storage is freed", |p| {
        let (mut g, k, x, b) = kernel_main(p, 16);
        let v = g.reinterpret(&b, "buf1", f32n(8));
        g.free_if_not_reused(&b);
        g.call_kernel(&k, add_args(x, v));
        g.finish();
    }, &["main:4: view buf1 is used after the storage it views (owned by buf0) was freed at line 3"]),
];

const SYMBOL_CASES: &[Case] = &[
    ("undeclared symbol", |p| {
        let mut g = p.main();
        g.runtime_assert(SymExpr::cmp(CmpOp::Ge, sym("u7"), SymExpr::Int(0)), "u7 >= 0");
        g.finish();
    }, &["main:0: symbol u7 is not declared"]),
    ("backed symbol nothing binds", |p| {
        p.backed_symbol("s0", Some(4));
        p.backed_symbol("s3", Some(4));
        let mut g = p.main();
        g.tensor_input("arg0_1", f32s(&[sym("s0")]));
        g.finish();
    }, &["program:-: symbol s3 is never bound (no symbol input and no input size, stride or offset of graph main mentions it)"]),
    ("unbacked layout allocated before the bind", |p| {
        p.unbacked_symbol("u0", Some(0), Some(100));
        let mut g = p.main();
        let x = input8(&mut g);
        g.allocate("buf1", f32s(&[sym("u0")]));
        let m = g.extern_alloc_multi("buf0", "torch.ops.aten.nonzero.default", vec![ArgValue::Buffer(x)]);
        g.bind_size(&m, &Symbol::new("u0"), 0);
        g.finish();
    }, &["main:0: the layout of buffer buf1 mentions symbol u0, which is not bound here (bound at line 2)"]),
    ("unbacked symbol used before the bind", |p| {
        p.unbacked_symbol("u0", Some(0), None);
        let mut g = p.main();
        g.runtime_assert(SymExpr::cmp(CmpOp::Ge, sym("u0"), SymExpr::Int(0)), "u0 >= 0");
        g.finish();
    }, &["main:0: symbol u0 is used before it is bound (nothing in this graph binds it)"]),
    ("symbol bound twice", |p| {
        p.unbacked_symbol("u0", Some(0), None);
        let mut g = p.main();
        let x = g.tensor_input("arg0_1", Layout::contiguous(DType::Int64, Device::cuda(0), []));
        g.line(Line::DynamicScalar(DynamicScalar { symbol: Symbol::new("u0"), source: x.clone(), keypath: Default::default(), node: None }));
        g.line(Line::DynamicScalar(DynamicScalar { symbol: Symbol::new("u0"), source: x, keypath: Default::default(), node: None }));
        g.finish();
    }, &["main:1: symbol u0 is bound twice (first bound at line 0 of graph main)"]),
    ("precomputed symbol rebound to another expression", |p| {
        p.backed_symbol("s0", None);
        let ks0 = p.precomputed_symbol("ks0");
        let mut g = p.main();
        g.tensor_input("arg0_1", f32s(&[sym("s0")]));
        g.let_symbol(&ks0, SymExpr::Int(4));
        g.let_symbol(&ks0, sym("s0"));
        g.finish();
    }, &["main:1: symbol ks0 is bound twice (first bound at line 0 of graph main)"]),
    ("unbacked symbol bound by a let line", |p| {
        let u0 = p.unbacked_symbol("u0", None, None);
        let mut g = p.main();
        g.let_symbol(&u0, SymExpr::Int(4));
        g.finish();
    }, &["main:0: symbol u0 is declared unbacked but bound by a let line"]),
    ("empty value range", |p| {
        p.symbol("u0", SymbolKind::Unbacked, ValueRange::new(Some(5), Some(3)), None);
    }, &["program:-: symbol u0 has an empty value range [5, 3]"]),
    ("hint outside the range", |p| {
        p.symbol("s0", SymbolKind::Backed, ValueRange::new(Some(2), None), Some(1));
        let mut g = p.main();
        g.tensor_input("arg0_1", f32s(&[sym("s0")]));
        g.finish();
    }, &["program:-: symbol s0 has hint 1 outside its value range [2, inf]"]),
    ("size() without a dimension", |p| {
        let u0 = p.unbacked_symbol("u0", Some(0), None);
        let mut g = p.main();
        let x = input8(&mut g);
        g.bind_unbacked(&x, &u0, [KeyEntry::CallMethod(TensorMethod::Size)].into_iter().collect());
        g.finish();
    }, &["main:0: key path `.size()` of symbol u0 is malformed: .size() must be followed by a dimension index"]),
    ("dimension past the rank", |p| {
        let u0 = p.unbacked_symbol("u0", Some(0), None);
        let mut g = p.main();
        let x = input8(&mut g);
        g.bind_unbacked(&x, &u0, [KeyEntry::CallMethod(TensorMethod::Stride), KeyEntry::Index(1)].into_iter().collect());
        g.finish();
    }, &["main:0: key path `.stride()[1]` of symbol u0 is malformed: dimension 1 is out of range for a tensor of rank 1"]),
    ("divide by zero", |p| {
        let u0 = p.unbacked_symbol("u0", Some(0), None);
        let mut g = p.main();
        let x = input8(&mut g);
        g.bind_unbacked(&x, &u0, [KeyEntry::CallMethod(TensorMethod::Size), KeyEntry::Index(0), KeyEntry::DivideBy(0)].into_iter().collect());
        g.finish();
    }, &["main:0: key path `.size()[0]//0` of symbol u0 is malformed: divisor 0 is not positive"]),
    ("negative sequence index", |p| {
        let u0 = p.unbacked_symbol("u0", Some(0), None);
        let mut g = p.main();
        let x = input8(&mut g);
        let m = g.extern_alloc_multi("buf0", "torch.ops.mylib.f.default", vec![ArgValue::Buffer(x)]);
        g.bind_unbacked(&m, &u0, [KeyEntry::Index(-1), KeyEntry::CallMethod(TensorMethod::StorageOffset)].into_iter().collect());
        g.finish();
    }, &["main:1: key path `[-1].storage_offset()` of symbol u0 is malformed: index -1 is negative"]),
    ("item with a size path", |p| {
        p.unbacked_symbol("u0", Some(0), None);
        let mut g = p.main();
        let x = input8(&mut g);
        g.line(Line::DynamicScalar(DynamicScalar {
            symbol: Symbol::new("u0"),
            source: x,
            keypath: [KeyEntry::CallMethod(TensorMethod::Size), KeyEntry::Index(0)].into_iter().collect(),
            node: None,
        }));
        g.finish();
    }, &["main:0: key path `.size()[0]` of symbol u0 is malformed: an item line takes no path, `.to_int()` or `//d`"]),
    ("runtime assert on an integer", |p| {
        p.backed_symbol("s0", None);
        let mut g = p.main();
        g.tensor_input("arg0_1", f32s(&[sym("s0")]));
        g.runtime_assert(sym("s0"), "s0");
        g.finish();
    }, &["main:0: condition s0 is not a boolean expression"]),
];

const KERNEL_CASES: &[Case] = &[
    ("kernel missing from the table", |p| {
        let mut g = p.main();
        g.define_kernel(&KernelName::new("triton_poi_fused_add_0"));
        g.finish();
    }, &["main:0: kernel triton_poi_fused_add_0 is not in the kernel table"]),
    ("kernel called before its definition", |p| {
        let k = add_kernel(p);
        let mut g = p.main();
        let x = input8(&mut g);
        let b = g.allocate("buf0", f32n(8));
        g.call_kernel(&k, add_args(x, b));
        g.define_kernel(&k);
        g.finish();
    }, &["main:1: kernel triton_poi_fused_add_0 is called before it is defined (defined at line 2)"]),
    ("kernel defined twice", |p| {
        let k = add_kernel(p);
        let mut g = p.main();
        g.define_kernel(&k);
        g.define_kernel(&k);
        g.finish();
    }, &["main:1: kernel triton_poi_fused_add_0 is defined twice (first defined at line 0 of graph main)"]),
    ("too few positional arguments", |p| {
        let (mut g, k, x, b) = kernel_main(p, 8);
        g.call_kernel(&k, [ArgValue::Buffer(x), ArgValue::Buffer(b)]);
        g.finish();
    }, &["main:2: kernel triton_poi_fused_add_0 takes 3 arguments (in_ptr0, out_ptr0, xnumel) but the call passes 2"]),
    ("named argument naming nothing, parameter left out", |p| {
        let (mut g, k, x, b) = kernel_main(p, 8);
        g.line(raw_call(&k, vec![
            CallArg::positional(ArgValue::Buffer(x)),
            named("out_ptr0", ArgValue::Buffer(b)),
            named("ynumel", ArgValue::Expr(SymExpr::Int(8))),
        ]));
        g.finish();
    }, &[
        "main:2: kernel triton_poi_fused_add_0 has no parameter ynumel",
        "main:2: parameter xnumel of kernel triton_poi_fused_add_0 is not passed",
    ]),
    ("parameter bound positionally and by name", |p| {
        let (mut g, k, x, b) = kernel_main(p, 8);
        g.line(raw_call(&k, vec![
            CallArg::positional(ArgValue::Buffer(x.clone())),
            CallArg::positional(ArgValue::Buffer(b)),
            named("in_ptr0", ArgValue::Buffer(x)),
            named("xnumel", ArgValue::Expr(SymExpr::Int(8))),
        ]));
        g.finish();
    }, &["main:2: parameter in_ptr0 of kernel triton_poi_fused_add_0 is bound twice"]),
    ("pointer of the wrong dtype", |p| {
        let k = add_kernel(p);
        let mut g = p.main();
        let x = g.tensor_input("arg0_1", Layout::contiguous(DType::Int64, Device::cuda(0), [SymExpr::Int(8)]));
        g.define_kernel(&k);
        let b = g.allocate("buf0", f32n(8));
        g.call_kernel(&k, add_args(x, b));
        g.finish();
    }, &["main:2: parameter in_ptr0 of kernel triton_poi_fused_add_0 has type *fp32 but buffer arg0_1 is i64"]),
    ("pointer given a number, scalar given a buffer", |p| {
        let (mut g, k, x, b) = kernel_main(p, 8);
        g.call_kernel(&k, [ArgValue::Expr(SymExpr::Int(0)), ArgValue::Buffer(b), ArgValue::Buffer(x)]);
        g.finish();
    }, &[
        "main:2: parameter in_ptr0 of kernel triton_poi_fused_add_0 has pointer type *fp32 but is passed expression 0",
        "main:2: parameter xnumel of kernel triton_poi_fused_add_0 has scalar type i32 but is passed buffer arg0_1",
    ]),
];

const STRUCTURE_CASES: &[Case] = &[
    (
        "device exit without enter",
        |p| {
            let mut g = p.main();
            g.line(Line::ExitDeviceContext);
            g.finish();
        },
        &["main:0: device guard exit without a matching enter"],
    ),
    (
        "device guard never exited",
        |p| {
            let mut g = p.main();
            g.line(Line::EnterDeviceContext { device_index: 0 });
            g.finish();
        },
        &["main:0: device guard entered here is never exited"],
    ),
    (
        "assert_size_stride of the wrong rank",
        |p| {
            let mut g = p.main();
            let x = input8(&mut g);
            g.line(Line::AssertSizeStride(AssertSizeStride {
                buffer: x,
                size: [SymExpr::Int(8), SymExpr::Int(1)].into_iter().collect(),
                stride: [SymExpr::Int(1)].into_iter().collect(),
                context: None,
            }));
            g.finish();
        },
        &["main:0: assert_size_stride on arg0_1 gives 2 sizes and 1 strides but the buffer has rank 1"],
    ),
    (
        "alignment not a power of two",
        |p| {
            let mut g = p.main();
            let x = input8(&mut g);
            g.line(Line::AssertAlignment {
                buffer: x,
                alignment: 12,
                context: None,
            });
            g.finish();
        },
        &["main:0: alignment 12 is not a power of two"],
    ),
    (
        "cond on a missing subgraph",
        |p| {
            cond_main(p, ("true_graph_0", "false_graph_0"), &[]);
            branch(p, "true_graph_0", 0, 0);
        },
        &["main:0: subgraph false_graph_0 does not exist"],
    ),
    (
        "cond with the wrong operand count and unequal branches",
        |p| {
            cond_main(p, ("true_graph_0", "false_graph_0"), &[]);
            branch(p, "true_graph_0", 1, 1);
            branch(p, "false_graph_0", 0, 0);
        },
        &[
            "main:0: subgraph true_graph_0 takes 1 inputs but is passed 0",
            "main:0: branches return different numbers of values: true_graph_0 returns 1, false_graph_0 returns 0",
        ],
    ),
    (
        "subgraph naming its caller's buffer",
        |p| {
            cond_main(p, ("true_graph_0", "true_graph_0"), &[]);
            let mut t = p.subgraph("true_graph_0");
            t.free(&BufName::new("arg0_1"));
            t.finish();
        },
        &["true_graph_0:0: buffer arg0_1 belongs to graph main; a subgraph sees only its own inputs and buffers"],
    ),
    (
        "subgraph running itself",
        |p| {
            cond_main(p, ("true_graph_0", "true_graph_0"), &["arg0_1"]);
            let mut t = p.subgraph("true_graph_0");
            t.tensor_input("t_arg0", Layout::contiguous(DType::Bool, Device::cuda(0), []));
            t.declare_multi("t_buf0");
            t.line(cond_into(
                "t_buf0",
                "t_arg0",
                "true_graph_0",
                "true_graph_0",
                &["t_arg0"],
            ));
            t.finish();
        },
        &["true_graph_0:0: subgraph true_graph_0 runs itself (through true_graph_0 -> true_graph_0)"],
    ),
    (
        "subgraph using a symbol its caller has not bound",
        |p| {
            p.unbacked_symbol("u0", Some(0), None);
            cond_main(p, ("true_graph_0", "true_graph_0"), &[]);
            let mut t = p.subgraph("true_graph_0");
            t.runtime_assert(SymExpr::cmp(CmpOp::Ge, sym("u0"), SymExpr::Int(0)), "u0 >= 0");
            t.finish();
        },
        &["main:0: subgraph true_graph_0 uses symbol u0 (at its line 0), which is not bound here"],
    ),
    (
        "loop body returning too few values",
        |p| {
            let mut g = p.main();
            let x = g.tensor_input("arg0_1", f32n(8));
            g.while_loop("buf0", ("cond_graph_0", "body_graph_0"), &[x], &[]);
            g.finish();
            branch(p, "cond_graph_0", 1, 1);
            branch(p, "body_graph_0", 1, 0);
        },
        &["main:0: body graph body_graph_0 returns 0 values but the loop needs 1"],
    ),
    (
        "subgraph called main",
        |p| {
            let mut g = p.subgraph(MAIN_GRAPH);
            g.comment("nothing");
            g.finish();
        },
        &["main:-: a subgraph may not be called `main`"],
    ),
];

/// `main`: a bool input `arg0_1` whose value picks branch `t` or `f` of the
/// `cond` into `buf0`, run on `operands`.
fn cond_main(p: &mut ProgramBuilder, (t, f): (&str, &str), operands: &[&str]) {
    let mut g = p.main();
    g.tensor_input("arg0_1", Layout::contiguous(DType::Bool, Device::cuda(0), []));
    g.declare_multi("buf0");
    g.line(cond("arg0_1", t, f, operands));
    g.finish();
}

fn cond(pred: &str, t: &str, f: &str, operands: &[&str]) -> Line {
    cond_into("buf0", pred, t, f, operands)
}

fn cond_into(result: &str, pred: &str, t: &str, f: &str, operands: &[&str]) -> Line {
    Line::Conditional(Conditional {
        result: BufName::new(result),
        predicate: Predicate::Tensor(BufName::new(pred)),
        true_graph: GraphName::new(t),
        false_graph: GraphName::new(f),
        operands: operands.iter().map(|o| BufName::new(o)).collect(),
    })
}

/// A subgraph with `inputs` f32[8] inputs returning the first `outputs` of them.
fn branch(p: &mut ProgramBuilder, name: &str, inputs: usize, outputs: usize) {
    let mut g = p.subgraph(name);
    let ins: Vec<BufName> = (0..inputs)
        .map(|i| g.tensor_input(&format!("{name}_arg{i}"), f32n(8)))
        .collect();
    for b in ins.iter().take(outputs) {
        g.output(b);
    }
    g.finish();
}

#[test]
fn buffer_rules() {
    for (name, build, expect) in BUFFER_CASES {
        check(name, *build, expect);
    }
}

#[test]
fn storage_rules() {
    for (name, build, expect) in STORAGE_CASES {
        check(name, *build, expect);
    }
}

#[test]
fn symbol_rules() {
    for (name, build, expect) in SYMBOL_CASES {
        check(name, *build, expect);
    }
}

#[test]
fn kernel_rules() {
    for (name, build, expect) in KERNEL_CASES {
        check(name, *build, expect);
    }
}

#[test]
fn structure_rules() {
    for (name, build, expect) in STRUCTURE_CASES {
        check(name, *build, expect);
    }
}

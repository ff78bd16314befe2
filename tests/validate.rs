//! The validator: one invalid program per rule (built in Rust) with the exact
//! diagnostics it must produce, valid programs with what `ProgramInfo` reports
//! about them, and the `.wir` fixtures (valid ones validate; the diagnostics of
//! invalid ones are snapshots).

mod common;

use indexmap::IndexMap;
use wrapir::ir::{
    validate, ArgValue, BufName, CallArg, Conditional, DType, Device, GraphBuilder, GraphName, GridType, KernelCall,
    KernelName, KeyEntry, Layout, Line, Predicate, ProgramBuilder, SigType, Site, SymbolKind, TensorMethod, TritonMeta,
    ValidationErrors, ValueRange, WhileLoop, MAIN_GRAPH,
};
use wrapir::sym::{CmpOp, SymExpr, Symbol};

// ---------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------

fn f32s(sizes: &[SymExpr]) -> Layout {
    Layout::contiguous(DType::Float32, Device::cuda(0), sizes.iter().cloned())
}

fn f32n(n: i64) -> Layout {
    f32s(&[SymExpr::Int(n)])
}

fn sym(name: &str) -> SymExpr {
    SymExpr::sym(name)
}

/// `in_ptr0: *fp32, out_ptr0: *fp32, xnumel: i32, XBLOCK: constexpr`.
fn pointwise_meta() -> TritonMeta {
    let mut signature = IndexMap::new();
    signature.insert("in_ptr0".to_string(), SigType::Pointer(DType::Float32));
    signature.insert("out_ptr0".to_string(), SigType::Pointer(DType::Float32));
    signature.insert("xnumel".to_string(), "i32".parse().unwrap());
    signature.insert("XBLOCK".to_string(), SigType::Constexpr);
    TritonMeta {
        signature,
        constants: IndexMap::new(),
        config: [("XBLOCK".to_string(), 16)].into_iter().collect(),
        grid_type: GridType::Grid1D,
        num_warps: 1,
        num_stages: 1,
        shared_mem: 0,
        global_scratch: None,
        profile_scratch: None,
        extra_launcher_args: vec![],
        mangled_name: None,
        cubin: None,
        user_defined: false,
    }
}

fn add_kernel(p: &mut ProgramBuilder) -> KernelName {
    p.triton_kernel("triton_poi_fused_add_0", "", pointwise_meta())
}

/// `arg0_1: f32[8]` input.
fn input8(g: &mut GraphBuilder<'_>) -> BufName {
    g.tensor_input("arg0_1", f32n(8))
}

fn named(name: &str, value: ArgValue) -> CallArg {
    CallArg {
        name: Some(name.to_string()),
        value,
    }
}

fn raw_call(kernel: &KernelName, args: Vec<CallArg>) -> Line {
    Line::KernelCall(KernelCall {
        kernel: kernel.clone(),
        args,
        device: Some(Device::cuda(0)),
    })
}

/// One error per string: `graph:line: message` (`-` for the line of header
/// errors, `program` for table errors).
fn render(errors: &ValidationErrors) -> Vec<String> {
    errors
        .iter()
        .map(|e| {
            let graph = e.graph().map(|g| g.to_string()).unwrap_or_else(|| "program".into());
            let line = e.line().map(|l| l.to_string()).unwrap_or_else(|| "-".into());
            format!("{graph}:{line}: {}", e.kind)
        })
        .collect()
}

fn check(name: &str, build: fn(&mut ProgramBuilder), expect: &[&str]) {
    let mut p = ProgramBuilder::new();
    build(&mut p);
    let program = p.finish();
    let got = match validate(&program) {
        Ok(_) => vec![],
        Err(e) => render(&e),
    };
    assert_eq!(got, expect, "case `{name}`");
}

type Case = (&'static str, fn(&mut ProgramBuilder), &'static [&'static str]);

// ---------------------------------------------------------------------------
// Invalid programs, one per rule
// ---------------------------------------------------------------------------

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
        let k = add_kernel(p);
        let mut g = p.main();
        let x = input8(&mut g);
        g.define_kernel(&k);
        let b = g.allocate("buf0", f32n(8));
        g.line(Line::FreeIfNotReused { buffer: b.clone(), is_reused: true });
        g.call_kernel(&k, [ArgValue::Buffer(x), ArgValue::Buffer(b), ArgValue::Expr(SymExpr::Int(8))]);
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
        let k = add_kernel(p);
        let mut g = p.main();
        let x = input8(&mut g);
        g.define_kernel(&k);
        let b = g.allocate("buf0", f32n(16));
        let v = g.reinterpret(&b, "buf1", f32n(8));
        g.free_if_not_reused(&b);
        g.call_kernel(&k, [ArgValue::Buffer(x), ArgValue::Buffer(v), ArgValue::Expr(SymExpr::Int(8))]);
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
        g.bind_unbacked(&m, &Symbol::new("u0"), [KeyEntry::CallMethod(TensorMethod::Size), KeyEntry::Index(0)].into_iter().collect());
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
        g.line(Line::DynamicScalar { symbol: Symbol::new("u0"), source: x.clone(), keypath: Default::default(), node: None });
        g.line(Line::DynamicScalar { symbol: Symbol::new("u0"), source: x, keypath: Default::default(), node: None });
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
        g.line(Line::DynamicScalar {
            symbol: Symbol::new("u0"),
            source: x,
            keypath: [KeyEntry::CallMethod(TensorMethod::Size), KeyEntry::Index(0)].into_iter().collect(),
            node: None,
        });
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
        g.call_kernel(&k, [ArgValue::Buffer(x), ArgValue::Buffer(b), ArgValue::Expr(SymExpr::Int(8))]);
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
        let k = add_kernel(p);
        let mut g = p.main();
        let x = input8(&mut g);
        g.define_kernel(&k);
        let b = g.allocate("buf0", f32n(8));
        g.call_kernel(&k, [ArgValue::Buffer(x), ArgValue::Buffer(b)]);
        g.finish();
    }, &["main:2: kernel triton_poi_fused_add_0 takes 3 arguments (in_ptr0, out_ptr0, xnumel) but the call passes 2"]),
    ("named argument naming nothing, parameter left out", |p| {
        let k = add_kernel(p);
        let mut g = p.main();
        let x = input8(&mut g);
        g.define_kernel(&k);
        let b = g.allocate("buf0", f32n(8));
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
        let k = add_kernel(p);
        let mut g = p.main();
        let x = input8(&mut g);
        g.define_kernel(&k);
        let b = g.allocate("buf0", f32n(8));
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
        g.call_kernel(&k, [ArgValue::Buffer(x), ArgValue::Buffer(b), ArgValue::Expr(SymExpr::Int(8))]);
        g.finish();
    }, &["main:2: parameter in_ptr0 of kernel triton_poi_fused_add_0 has type *fp32 but buffer arg0_1 is i64"]),
    ("pointer given a number, scalar given a buffer", |p| {
        let k = add_kernel(p);
        let mut g = p.main();
        let x = input8(&mut g);
        g.define_kernel(&k);
        let b = g.allocate("buf0", f32n(8));
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
            g.line(Line::AssertSizeStride {
                buffer: x,
                size: [SymExpr::Int(8), SymExpr::Int(1)].into_iter().collect(),
                stride: [SymExpr::Int(1)].into_iter().collect(),
                context: None,
            });
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
            let mut g = p.main();
            g.tensor_input("arg0_1", Layout::contiguous(DType::Bool, Device::cuda(0), []));
            g.declare_multi("buf0");
            g.line(cond("arg0_1", "true_graph_0", "false_graph_0", &[]));
            g.finish();
            branch(p, "true_graph_0", 0, 0);
        },
        &["main:0: subgraph false_graph_0 does not exist"],
    ),
    (
        "cond with the wrong operand count and unequal branches",
        |p| {
            let mut g = p.main();
            g.tensor_input("arg0_1", Layout::contiguous(DType::Bool, Device::cuda(0), []));
            g.declare_multi("buf0");
            g.line(cond("arg0_1", "true_graph_0", "false_graph_0", &[]));
            g.finish();
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
            let mut g = p.main();
            g.tensor_input("arg0_1", Layout::contiguous(DType::Bool, Device::cuda(0), []));
            g.declare_multi("buf0");
            g.line(cond("arg0_1", "true_graph_0", "true_graph_0", &[]));
            g.finish();
            let mut t = p.subgraph("true_graph_0");
            t.free(&BufName::new("arg0_1"));
            t.finish();
        },
        &["true_graph_0:0: buffer arg0_1 belongs to graph main; a subgraph sees only its own inputs and buffers"],
    ),
    (
        "subgraph running itself",
        |p| {
            let mut g = p.main();
            g.tensor_input("arg0_1", Layout::contiguous(DType::Bool, Device::cuda(0), []));
            g.declare_multi("buf0");
            g.line(cond("arg0_1", "true_graph_0", "true_graph_0", &["arg0_1"]));
            g.finish();
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
            let mut g = p.main();
            g.tensor_input("arg0_1", Layout::contiguous(DType::Bool, Device::cuda(0), []));
            g.declare_multi("buf0");
            g.line(cond("arg0_1", "true_graph_0", "true_graph_0", &[]));
            g.finish();
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
            g.declare_multi("buf0");
            g.line(Line::WhileLoop(WhileLoop {
                result: BufName::new("buf0"),
                cond_graph: GraphName::new("cond_graph_0"),
                body_graph: GraphName::new("body_graph_0"),
                carried: vec![x],
                additional: vec![],
            }));
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

// ---------------------------------------------------------------------------
// Valid programs
// ---------------------------------------------------------------------------

const VALID_CASES: &[Case] = &[
    (
        "pointwise kernel",
        |p| {
            let k = add_kernel(p);
            let mut g = p.main();
            let x = input8(&mut g);
            g.define_kernel(&k);
            let b = g.allocate("buf0", f32n(8));
            g.call_kernel(
                &k,
                [
                    ArgValue::Buffer(x.clone()),
                    ArgValue::Buffer(b.clone()),
                    ArgValue::Expr(SymExpr::Int(8)),
                ],
            );
            g.free(&x);
            g.output(&b);
            g.finish();
        },
        &[],
    ),
    (
        "released storage reused by a smaller buffer",
        |p| {
            let mut g = p.main();
            let b = g.allocate("buf0", f32n(8));
            g.line(Line::FreeIfNotReused {
                buffer: b.clone(),
                is_reused: true,
            });
            let n = g.reuse(&b, "buf1", f32s(&[SymExpr::Int(2), SymExpr::Int(3)]));
            g.output(&n);
            g.finish();
        },
        &[],
    ),
    (
        "symbolic reuse of equal storage, view within storage",
        |p| {
            p.backed_symbol("s0", Some(4));
            let mut g = p.main();
            g.tensor_input("arg0_1", f32s(&[sym("s0")]));
            let b = g.allocate("buf0", f32s(&[sym("s0")]));
            let n = g.reuse(&b, "buf1", f32s(&[sym("s0")]));
            let v = g.reinterpret(&n, "buf2", f32n(1));
            g.output(&v);
            g.output(&n);
            g.finish();
        },
        &[],
    ),
    (
        "named Triton arguments",
        |p| {
            let k = add_kernel(p);
            let mut g = p.main();
            let x = input8(&mut g);
            g.define_kernel(&k);
            let b = g.allocate("buf0", f32n(8));
            g.line(raw_call(
                &k,
                vec![
                    named("in_ptr0", ArgValue::Buffer(x)),
                    named("out_ptr0", ArgValue::Buffer(b.clone())),
                    named("xnumel", ArgValue::Expr(SymExpr::Int(8))),
                    named("XBLOCK", ArgValue::Expr(SymExpr::Int(16))),
                ],
            ));
            g.output(&b);
            g.finish();
        },
        &[],
    ),
    (
        "same precomputed assignment twice",
        |p| {
            p.backed_symbol("s0", None);
            let ks0 = p.precomputed_symbol("ks0");
            let mut g = p.main();
            g.tensor_input("arg0_1", f32s(&[sym("s0")]));
            g.let_symbol(&ks0, SymExpr::mul(SymExpr::Int(2), sym("s0")));
            g.let_symbol(&ks0, SymExpr::mul(SymExpr::Int(2), sym("s0")));
            g.output_expr(sym("ks0"));
            g.finish();
        },
        &[],
    ),
];

#[test]
fn valid_programs() {
    for (name, build, expect) in VALID_CASES {
        check(name, *build, expect);
    }
}

// ---------------------------------------------------------------------------
// ProgramInfo and the error format
// ---------------------------------------------------------------------------

/// `nonzero`-style program: an extern op with a data-dependent size, a bind,
/// then a cond whose branches both bind `u1`, visible afterwards.
fn unbacked_program() -> wrapir::ir::Program {
    let mut p = ProgramBuilder::new();
    let u0 = p.unbacked_symbol("u0", Some(0), Some(8));
    let u1 = p.unbacked_symbol("u1", Some(0), None);
    let k = add_kernel(&mut p);
    let mut g = p.main();
    let x = input8(&mut g);
    let pred = g.tensor_input("arg1_1", Layout::contiguous(DType::Bool, Device::cuda(0), []));
    g.define_kernel(&k); // 0
    let m = g.extern_alloc_multi(
        "buf0",
        "torch.ops.aten.nonzero.default",
        vec![ArgValue::Buffer(x.clone())],
    ); // 1
    g.bind_unbacked(
        &m,
        &u0,
        [KeyEntry::CallMethod(TensorMethod::Size), KeyEntry::Index(0)]
            .into_iter()
            .collect(),
    ); // 2
    let r = g.multi_output("buf1", f32s(&[sym("u0")]), &m, &[]); // 3
    let out = g.allocate("buf2", f32s(&[sym("u0")])); // 4
    g.call_kernel(
        &k,
        [
            ArgValue::Buffer(r.clone()),
            ArgValue::Buffer(out.clone()),
            ArgValue::Expr(sym("u0")),
        ],
    ); // 5
    g.free_if_not_reused(&r); // 6
    g.declare_multi("buf3");
    g.line(Line::Conditional(Conditional {
        result: BufName::new("buf3"),
        predicate: Predicate::Tensor(pred),
        true_graph: GraphName::new("true_graph_0"),
        false_graph: GraphName::new("false_graph_0"),
        operands: vec![x],
    })); // 7
    g.runtime_assert(SymExpr::cmp(CmpOp::Ge, sym("u1"), SymExpr::Int(0)), "u1 >= 0"); // 8
    g.output(&out);
    g.finish();
    for name in ["true_graph_0", "false_graph_0"] {
        let mut s = p.subgraph(name);
        let a = s.tensor_input(&format!("{name}_arg0_1"), f32n(8));
        s.bind_unbacked(
            &a,
            &u1,
            [KeyEntry::CallMethod(TensorMethod::Stride), KeyEntry::Index(0)]
                .into_iter()
                .collect(),
        );
        // The kernel was defined by main before the cond runs this graph.
        let o = s.allocate(&format!("{name}_buf0"), f32n(8));
        s.call_kernel(
            &k,
            [
                ArgValue::Buffer(a),
                ArgValue::Buffer(o.clone()),
                ArgValue::Expr(SymExpr::Int(8)),
            ],
        );
        s.output(&o);
        s.finish();
    }
    p.finish()
}

#[test]
fn program_info_reports_definitions_uses_and_bindings() {
    let program = unbacked_program();
    let info = match validate(&program) {
        Ok(info) => info,
        Err(e) => panic!("expected a valid program:\n{e}"),
    };
    let main = info.main();
    assert_eq!(main.name().as_str(), MAIN_GRAPH);
    let b = |n: &str| main.buffer(&BufName::new(n)).cloned();

    let buf1 = b("buf1").expect("buf1 is defined");
    assert_eq!(
        (buf1.defined, buf1.last_use, buf1.ended),
        (Site::Line(3), Some(5), Some(6))
    );
    assert_eq!(buf1.storage_root, Some(BufName::new("buf1")));
    let arg0 = b("arg0_1").expect("arg0_1 is an input");
    assert_eq!(
        (arg0.defined, arg0.last_use, arg0.ended, arg0.is_output),
        (Site::Input(0), Some(7), None, false)
    );
    let buf2 = b("buf2").expect("buf2 is defined");
    assert!(buf2.is_output && main.is_output(&BufName::new("buf2")));
    assert_eq!(
        main.output_buffers().cloned().collect::<Vec<_>>(),
        vec![BufName::new("buf2")]
    );
    assert_eq!(
        b("buf0").and_then(|i| i.storage_root),
        None,
        "multi-output values own no storage"
    );

    assert_eq!(main.binds(2), &[Symbol::new("u0")]);
    assert_eq!(main.binds(7), &[Symbol::new("u1")], "both branches bind u1");
    assert!(main.binds(5).is_empty());

    let u0 = info.symbol_binding(&Symbol::new("u0")).expect("u0 is bound");
    assert_eq!((u0.graph.as_str(), u0.site), (MAIN_GRAPH, Site::Line(2)));
    let u1: Vec<String> = info
        .symbol_bindings(&Symbol::new("u1"))
        .iter()
        .map(|b| b.to_string())
        .collect();
    assert_eq!(u1, ["line 0 of graph true_graph_0", "line 0 of graph false_graph_0"]);

    let k = KernelName::new("triton_poi_fused_add_0");
    assert_eq!(
        info.kernel_definition_site(&k).map(|(g, i)| (g.as_str(), i)),
        Some((MAIN_GRAPH, 0))
    );
    assert!(info.kernel(&k).is_some());
    assert_eq!(info.defined_kernels().count(), 1);

    let t = info
        .graph(Some(&GraphName::new("true_graph_0")))
        .expect("subgraph info");
    assert_eq!(t.callers(), &[(GraphName::new(MAIN_GRAPH), 7)]);
    assert_eq!(t.binds(0), &[Symbol::new("u1")]);
    assert_eq!(info.graphs().count(), 3);
}

#[test]
fn backed_symbols_are_bound_by_the_input_that_mentions_them() {
    let mut p = ProgramBuilder::new();
    let s0 = p.backed_symbol("s0", Some(4));
    let s1 = p.backed_symbol("s1", Some(4));
    let mut g = p.main();
    g.tensor_input("arg0_1", f32n(8));
    g.symbol_input("arg1_1", &s1);
    g.tensor_input("arg2_1", f32s(&[SymExpr::mul(SymExpr::Int(2), sym("s0"))]));
    g.finish();
    let program = p.finish();
    let info = validate(&program).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(info.symbol_binding(&s0).map(|b| b.site), Some(Site::Input(2)));
    assert_eq!(info.symbol_binding(&s1).map(|b| b.site), Some(Site::Input(1)));
}

#[test]
fn errors_are_all_collected_and_display_one_per_line() {
    let mut p = ProgramBuilder::new();
    let mut g = p.main();
    let b = g.allocate("buf0", f32n(8));
    g.free_if_not_reused(&b);
    g.free_if_not_reused(&b);
    g.line(Line::ExitDeviceContext);
    g.finish();
    let program = p.finish();
    let errors = validate(&program).err().expect("invalid program");
    assert_eq!(errors.len(), 2);
    let text = errors.to_string();
    let expected = [
        format!(
            "error in graph main, line 2 `{}`: buffer buf0 is freed twice (first freed at line 1)",
            wrapir::text::print_line(&program.main.lines[2])
        ),
        format!(
            "error in graph main, line 3 `{}`: device guard exit without a matching enter",
            wrapir::text::print_line(&program.main.lines[3])
        ),
    ];
    assert_eq!(text, expected.join("\n"));
    assert_eq!(errors.errors[0].graph().map(|g| g.as_str()), Some(MAIN_GRAPH));
    assert_eq!(errors.errors[0].line(), Some(2));
}

// ---------------------------------------------------------------------------
// Fixtures
// ---------------------------------------------------------------------------

#[test]
fn valid_fixtures_validate() {
    let fixtures = common::fixtures();
    assert!(!fixtures.is_empty(), "no fixtures found");
    let mut failures = Vec::new();
    for path in fixtures {
        let program = common::load(&path);
        if let Err(e) = validate(&program) {
            failures.push(format!("{}:\n{e}", common::name(&path)));
        }
    }
    assert!(
        failures.is_empty(),
        "valid fixtures rejected:\n{}",
        failures.join("\n\n")
    );
}

#[test]
fn invalid_fixture_diagnostics() {
    let fixtures = common::invalid_fixtures();
    assert!(!fixtures.is_empty(), "no invalid fixtures found");
    for path in fixtures {
        let name = common::name(&path);
        let program = common::load(&path);
        // An invalid fixture is one `wrapir check` rejects: either the validator
        // or, for a structurally valid program, launch reconciliation.
        let text = match validate(&program) {
            Ok(info) => {
                let report = wrapir::reconcile::check_program(&info, &Default::default());
                assert!(
                    report.totals.failed > 0,
                    "invalid fixture {name} validates and reconciles"
                );
                report.render(false)
            }
            Err(e) => e.to_string(),
        };
        common::settings().bind(|| insta::assert_snapshot!(format!("validate@{name}"), text));
    }
}

//! Python lowering: exact lines per line kind, the module frame, errors, and
//! `python3 -m py_compile` over every program built here and every fixture.

mod common;

use indexmap::IndexMap;
use smallvec::smallvec;
use wrapir::ir::{
    ArgValue, CallArg, Conditional, CppMeta, DType, Device, ExternCall, GraphBuilder, GridType, HalideArg, HalideMeta,
    KernelBackend, KernelCall, KeyEntry, KeyPath, Layout, Line, MultiIndex, Predicate, Program, ProgramBuilder,
    ScatterFallback, SigType, TensorMethod, TritonMeta, WhileLoop,
};
use wrapir::lower::python::{write_string, CallForm, Error, Location, Options, StreamBinding};
use wrapir::sym::{CmpOp, SymExpr};

fn cuda() -> Device {
    Device::cuda(0)
}

fn f32(size: &[i64]) -> Layout {
    Layout::contiguous(DType::Float32, cuda(), size.iter().map(|&s| SymExpr::Int(s)))
}

fn sym(n: &str) -> SymExpr {
    SymExpr::sym(n)
}

fn buf(n: &str) -> ArgValue {
    ArgValue::Buffer(n.into())
}

fn triton_meta() -> TritonMeta {
    let mut sig = IndexMap::new();
    sig.insert("in_ptr0".to_string(), SigType::Pointer(DType::Float32));
    sig.insert("out_ptr0".to_string(), SigType::Pointer(DType::Float32));
    sig.insert("xnumel".to_string(), "i32".parse().unwrap());
    sig.insert("XBLOCK".to_string(), SigType::Constexpr);
    TritonMeta {
        signature: sig,
        constants: Default::default(),
        config: [("XBLOCK".to_string(), 128)].into_iter().collect(),
        grid_type: GridType::Grid1D,
        num_warps: 4,
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

const TRITON_SRC: &str = "import triton\nimport triton.language as tl\n\n@triton.jit\ndef k(in_ptr0, out_ptr0, xnumel, XBLOCK : tl.constexpr):\n    pass";

fn lower(p: &Program, options: &Options) -> Result<String, Error> {
    let info = wrapir::ir::validate(p).expect("test programs are valid");
    write_string(&info, options)
}

fn lower_ok(p: &Program) -> String {
    lower(p, &Options::default()).unwrap_or_else(|e| panic!("lowering failed: {e}"))
}

/// The body of `Runner.call`, each line without the two levels of indentation.
fn call_body(text: &str) -> Vec<String> {
    let start = text.find("    def call(self, args):\n").expect("call method") + "    def call(self, args):\n".len();
    let end = text.find("\nrunner = Runner(partitions=[])").expect("runner line");
    text[start..end]
        .lines()
        .filter(|l| !l.is_empty())
        .map(|l| l.strip_prefix("        ").unwrap_or(l).to_string())
        .collect()
}

/// Builds a one-graph program with an `f32[4]` input `arg0_1` on `cuda:0`, lets
/// `body` add lines, returns the program.
fn program(body: impl FnOnce(&mut GraphBuilder<'_>)) -> Program {
    let mut p = ProgramBuilder::new();
    p.unbacked_symbol("u0", Some(0), None);
    p.precomputed_symbol("ks0");
    let mut g = p.main();
    g.tensor_input("arg0_1", f32(&[4]));
    body(&mut g);
    g.finish();
    p.finish()
}

/// Lowers `p`, checks that `python3 -m py_compile` accepts it, and returns the
/// lines of `call` after the input preamble (`arg0_1, = args`, `args.clear()`,
/// the input assert).
fn lines_after_preamble(p: &Program) -> Vec<String> {
    let text = lower_ok(p);
    py_compile(&text);
    let body = call_body(&text);
    assert_eq!(
        body[..3],
        [
            "arg0_1, = args",
            "args.clear()",
            "assert_size_stride(arg0_1, (4, ), (1, ))"
        ]
    );
    body[3..].to_vec()
}

fn check(name: &str, p: Program, expect: &[&str]) {
    let got = lines_after_preamble(&p);
    assert_eq!(got, expect, "case `{name}`");
}

fn py_compile(text: &str) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static COUNTER: AtomicUsize = AtomicUsize::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let path = std::env::temp_dir().join(format!("wrapir_py_{}_{n}.py", std::process::id()));
    std::fs::write(&path, text).expect("write temp module");
    let out = common::run_tool(
        std::process::Command::new("python3")
            .args(["-m", "py_compile"])
            .arg(&path),
        "python3",
        "checking the lowered module with py_compile",
    );
    let _ = std::fs::remove_file(&path);
    let Some(out) = out else { return };
    assert!(
        out.status.success(),
        "py_compile rejected the module:\n{}\n---\n{text}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn memory_lines() {
    let cases: Vec<(&str, Program, Vec<&str>)> = vec![
        (
            "alloc",
            program(|g| {
                g.allocate("buf0", f32(&[4, 8]));
                g.output(&"buf0".into());
            }),
            vec![
                "buf0 = empty_strided_cuda((4, 8), (8, 1), torch.float32)",
                "return (buf0, )",
            ],
        ),
        (
            "alloc_scalar_and_cpu",
            program(|g| {
                g.allocate("buf0", Layout::contiguous(DType::Int64, Device::cpu(), []));
                g.free_if_not_reused(&"buf0".into());
            }),
            vec!["buf0 = empty_strided_cpu((), (), torch.int64)", "del buf0", "return ()"],
        ),
        (
            "alloc_padded",
            program(|g| {
                let mut l = f32(&[5]);
                l.alloc_numel = Some(SymExpr::Int(8));
                g.allocate("buf0", l);
                g.output(&"buf0".into());
            }),
            vec![
                "buf0 = empty_strided_cuda((8, ), (1, ), torch.float32).as_strided((5, ), (1, ))",
                "return (buf0, )",
            ],
        ),
        (
            "free_and_reused",
            program(|g| {
                g.allocate("buf0", f32(&[4]));
                g.line(Line::FreeIfNotReused {
                    buffer: "buf0".into(),
                    is_reused: true,
                });
                g.free(&"arg0_1".into());
            }),
            vec![
                "buf0 = empty_strided_cuda((4, ), (1, ), torch.float32)",
                "del arg0_1",
                "return ()",
            ],
        ),
        (
            "reuse_same_layout",
            program(|g| {
                let b0 = g.allocate("buf0", f32(&[4]));
                g.reuse(&b0, "buf1", f32(&[4]));
                g.output(&"buf1".into());
            }),
            vec![
                "buf0 = empty_strided_cuda((4, ), (1, ), torch.float32)",
                "buf1 = buf0; del buf0  # reuse",
                "return (buf1, )",
            ],
        ),
        (
            "reuse_reinterpret",
            program(|g| {
                let b0 = g.allocate("buf0", f32(&[4, 4]));
                g.reuse(&b0, "buf1", f32(&[16]));
                g.output(&"buf1".into());
            }),
            vec![
                "buf0 = empty_strided_cuda((4, 4), (4, 1), torch.float32)",
                "buf1 = reinterpret_tensor(buf0, (16, ), (1, ), 0); del buf0  # reuse",
                "return (buf1, )",
            ],
        ),
        (
            "reuse_keep_old",
            program(|g| {
                // A reuse that keeps the old name prints no `del` (its storage was
                // handed on by `free_if_not_reused ... reused`).
                g.allocate("buf0", f32(&[4]));
                g.line(Line::FreeIfNotReused {
                    buffer: "buf0".into(),
                    is_reused: true,
                });
                g.line(Line::Reuse {
                    old: "buf0".into(),
                    new: "buf1".into(),
                    delete_old: false,
                });
                g.declare_tensor("buf1", f32(&[4]));
                g.output(&"buf1".into());
            }),
            vec![
                "buf0 = empty_strided_cuda((4, ), (1, ), torch.float32)",
                "buf1 = buf0;  # reuse",
                "return (buf1, )",
            ],
        ),
        (
            "reinterpret",
            program(|g| {
                let b0 = g.allocate("buf0", f32(&[8]));
                let mut l = f32(&[4]);
                l.offset = SymExpr::Int(4);
                g.reinterpret(&b0, "buf1", l);
                g.reinterpret(&b0, "buf2", f32(&[8]));
                g.output(&"buf1".into());
            }),
            vec![
                "buf0 = empty_strided_cuda((8, ), (1, ), torch.float32)",
                "buf1 = reinterpret_tensor(buf0, (4, ), (1, ), 4)  # alias",
                "buf2 = buf0  # alias",
                "return (buf1, )",
            ],
        ),
    ];
    for (name, p, expect) in cases {
        check(name, p, &expect);
    }
}

#[test]
fn call_lines() {
    let with_kernel = |backend: KernelBackend, device: Option<Device>, guard: bool| {
        let named = matches!(backend, KernelBackend::Triton(_));
        let mut p = ProgramBuilder::new();
        let k = p.kernel("k0", backend, TRITON_SRC);
        let mut g = p.main();
        g.tensor_input("arg0_1", f32(&[4]));
        g.define_kernel(&k);
        if guard {
            g.line(Line::EnterDeviceContext { device_index: 0 });
        }
        g.allocate("buf0", f32(&[4]));
        g.line(Line::KernelCall(KernelCall {
            kernel: k.clone(),
            args: vec![
                CallArg::positional(buf("arg0_1")),
                CallArg::positional(buf("buf0")),
                CallArg {
                    name: named.then(|| "xnumel".to_string()),
                    value: ArgValue::Expr(SymExpr::Int(4)),
                },
            ],
            device,
        }));
        if guard {
            g.line(Line::ExitDeviceContext);
        }
        g.output(&"buf0".into());
        g.finish();
        p.finish()
    };
    let halide = |cuda_device| {
        KernelBackend::Halide(HalideMeta {
            argtypes: ["in_ptr0", "out_ptr0", "ks0"]
                .into_iter()
                .map(|n| {
                    // Buffers are pointers with a shape; `ks0` is a scalar size argument.
                    let scalar = n == "ks0";
                    HalideArg {
                        ctype: if scalar { "long" } else { "float*" }.into(),
                        name: n.into(),
                        shape: (!scalar).then(|| vec!["4L".into()]),
                        stride: (!scalar).then(|| vec!["1L".into()]),
                        offset: (!scalar).then(|| "0".into()),
                        alias_of: None,
                    }
                })
                .collect(),
            target: "host-strict_float-no_runtime-no_asserts".into(),
            scheduler: Some("Adams2019".into()),
            scheduler_flags: [("parallelism".to_string(), wrapir::ir::ConstValue::Int(8))]
                .into_iter()
                .collect(),
            cuda_device,
        })
    };
    let alloc = "buf0 = empty_strided_cuda((4, ), (1, ), torch.float32)";
    let cases: Vec<(&str, Program, Vec<&str>)> = vec![
        (
            "triton_in_guard",
            with_kernel(KernelBackend::Triton(triton_meta()), Some(cuda()), true),
            vec![
                "with torch.cuda._DeviceGuard(0):",
                "    torch.cuda.set_device(0)",
                "    buf0 = empty_strided_cuda((4, ), (1, ), torch.float32)",
                "    stream0 = get_raw_stream(0)",
                "    k0.run(arg0_1, buf0, xnumel=4, stream=stream0)",
                "return (buf0, )",
            ],
        ),
        (
            "halide_cpu",
            with_kernel(halide(None), None, false),
            vec![alloc, "k0(arg0_1, buf0, 4)", "return (buf0, )"],
        ),
        (
            "halide_cuda",
            with_kernel(halide(Some(0)), None, false),
            vec![
                alloc,
                "stream0 = get_raw_stream(0)",
                "k0(arg0_1, buf0, 4, stream0)",
                "return (buf0, )",
            ],
        ),
        (
            "cpp",
            with_kernel(
                KernelBackend::Cpp(CppMeta {
                    arg_types: vec!["const float*".into(), "float*".into(), "int64_t".into()],
                }),
                None,
                false,
            ),
            vec![alloc, "k0(arg0_1, buf0, 4)", "return (buf0, )"],
        ),
        (
            "cuda_c",
            with_kernel(KernelBackend::CudaC, Some(cuda()), false),
            vec![
                alloc,
                "stream0 = get_raw_stream(0)",
                "k0.k0(c_void_p(arg0_1.data_ptr()), c_void_p(buf0.data_ptr()), 4, c_void_p(stream0))",
                "return (buf0, )",
            ],
        ),
    ];
    for (name, p, expect) in cases {
        check(name, p, &expect);
    }
}

#[test]
fn kernel_definitions() {
    let p = {
        let mut p = ProgramBuilder::new();
        let t = p.triton_kernel("triton_poi_0", TRITON_SRC, triton_meta());
        let h = p.kernel(
            "halide_kernel_0",
            KernelBackend::Halide(HalideMeta {
                argtypes: vec![HalideArg {
                    ctype: "long".into(),
                    name: "ks0".into(),
                    shape: None,
                    stride: None,
                    offset: None,
                    alias_of: None,
                }],
                target: "host".into(),
                scheduler: None,
                scheduler_flags: Default::default(),
                cuda_device: None,
            }),
            "import halide as hl",
        );
        let c = p.kernel(
            "cpp_fused_0",
            KernelBackend::Cpp(CppMeta {
                arg_types: vec!["float*".into()],
            }),
            "extern \"C\" void kernel() {}",
        );
        let mut g = p.main();
        g.define_kernel(&t);
        g.define_kernel(&h);
        g.define_kernel(&c);
        g.finish();
        let mut p = p.finish();
        p.kernels[0].comments = vec!["kernel path: x.py".into(), "Source Nodes: [add]".into()];
        p
    };
    let text = lower_ok(&p);
    py_compile(&text);
    let expected = [
        "\n\n# kernel path: x.py\n# Source Nodes: [add]\ntriton_poi_0 = async_compile.triton('triton_poi_0', '''\nimport triton\n",
        "    pass\n''', device_str='cuda')\n",
        "from torch._inductor.runtime.hints import HalideMeta, HalideInputSpec\n\n\nhalide_kernel_0 = async_compile.halide(HalideMeta(argtypes=[HalideInputSpec(ctype='long', name='ks0', shape=None, stride=None, offset=None, alias_of=None)], target='host', scheduler=None, scheduler_flags=None, cuda_device=None), '''\nimport halide as hl\n''')\n",
        "\n\ncpp_fused_0 = async_compile.cpp_pybinding(['float*'], '''\nextern \"C\" void kernel() {}\n''')\n\n\nasync_compile.wait(globals())\ndel async_compile\n\nclass Runner:\n",
        "import triton\nimport triton.language as tl\nfrom torch._inductor.runtime.triton_heuristics import start_graph, end_graph\nfrom torch._C import _cuda_getCurrentRawStream as get_raw_stream\n\naten = torch.ops.aten\n",
    ];
    for e in expected {
        assert!(text.contains(e), "missing:\n{e}\n--- in:\n{text}");
    }
}

#[test]
fn extern_and_multi_output_lines() {
    let cases: Vec<(&str, Program, Vec<&str>)> = vec![
        (
            "extern_alloc_and_get",
            program(|g| {
                let b = g.extern_alloc_multi("buf1", "torch.ops.aten.topk.default", vec![buf("arg0_1"), ArgValue::Expr(SymExpr::Int(2))]);
                g.multi_output("buf2", f32(&[2]), &b, &[MultiIndex::Tuple(0)]);
                g.multi_output("buf3", f32(&[2]), &b, &[MultiIndex::List(1), MultiIndex::Dict("values".into())]);
                g.output(&"buf2".into());
            }),
            vec![
                "buf1 = torch.ops.aten.topk.default(arg0_1, 2)",
                "buf2 = buf1[0]",
                "buf3 = buf1[1]['values']",
                "return (buf2, )",
            ],
        ),
        (
            "extern_out_with_kwargs",
            program(|g| {
                let b0 = g.allocate("buf0", f32(&[4]));
                let kwargs: IndexMap<String, ArgValue> = [
                    ("alpha".to_string(), ArgValue::Expr(SymExpr::Int(1))),
                    ("beta".to_string(), ArgValue::Float(0.5)),
                ]
                .into_iter()
                .collect();
                g.extern_out(&b0, "extern_kernels.addmm", vec![buf("arg0_1"), buf("arg0_1"), buf("arg0_1")], kwargs);
                g.output(&b0);
            }),
            vec![
                "buf0 = empty_strided_cuda((4, ), (1, ), torch.float32)",
                "extern_kernels.addmm(arg0_1, arg0_1, arg0_1, alpha=1, beta=0.5, out=buf0)",
                "return (buf0, )",
            ],
        ),
        (
            "extern_no_result_all_arg_kinds",
            program(|g| {
                g.line(Line::ExternKernelAlloc(ExternCall {
                    result: None,
                    op: "torch.ops.test.op.default".into(),
                    args: vec![
                        buf("arg0_1"),
                        ArgValue::Bool(true),
                        ArgValue::None,
                        ArgValue::Str("it's".into()),
                        ArgValue::DType(DType::Bfloat16),
                        ArgValue::Device(cuda()),
                        ArgValue::List(vec![ArgValue::Float(f64::INFINITY), ArgValue::Expr(SymExpr::Int(-1))]),
                    ],
                    kwargs: IndexMap::new(),
                }));
            }),
            vec![
                "torch.ops.test.op.default(arg0_1, True, None, 'it\\'s', torch.bfloat16, device(type='cuda', index=0), [inf, -1])",
                "return ()",
            ],
        ),
        (
            "index_put_and_scatter",
            program(|g| {
                g.declare_tensor("idx", f32(&[4]));
                g.line(Line::IndexPutFallback {
                    target: "arg0_1".into(),
                    indices: vec![Some("arg0_1".into()), None],
                    values: "arg0_1".into(),
                    accumulate: true,
                });
                g.line(Line::ScatterFallback(ScatterFallback {
                    op: "aten.scatter_.src".into(),
                    target: "arg0_1".into(),
                    dim: 0,
                    index: "arg0_1".into(),
                    src: buf("arg0_1"),
                    reduce: Some("add".into()),
                    include_self: None,
                }));
                g.line(Line::ScatterFallback(ScatterFallback {
                    op: "aten.scatter_reduce_.two".into(),
                    target: "arg0_1".into(),
                    dim: 1,
                    index: "arg0_1".into(),
                    src: ArgValue::Float(1.0),
                    reduce: Some("sum".into()),
                    include_self: Some(false),
                }));
            }),
            vec![
                "aten.index_put_(arg0_1, [arg0_1, None], arg0_1, True)",
                "aten.scatter_.src(arg0_1,0,arg0_1,arg0_1, reduce='add')",
                "aten.scatter_reduce_.two(arg0_1,1,arg0_1,1.0, reduce='sum', include_self=False)",
                "return ()",
            ],
        ),
    ];
    for (name, p, expect) in cases {
        check(name, p, &expect);
    }
}

fn path(entries: &[KeyEntry]) -> KeyPath {
    entries.iter().cloned().collect()
}

#[test]
fn symbol_binding_lines() {
    use KeyEntry::*;
    let item = |keypath: KeyPath, node: Option<&str>| {
        program(|g| {
            g.line(Line::DynamicScalar {
                symbol: "u0".into(),
                source: "arg0_1".into(),
                keypath,
                node: node.map(Into::into),
            });
        })
    };
    let bind = |entries: &[KeyEntry]| {
        let p = path(entries);
        program(move |g| {
            g.declare_multi("buf1");
            g.line(Line::ExternKernelAlloc(ExternCall {
                result: Some("buf1".into()),
                op: "torch.ops.aten.nonzero.default".into(),
                args: vec![buf("arg0_1")],
                kwargs: IndexMap::new(),
            }));
            g.bind_unbacked(&"buf1".into(), &"u0".into(), p);
        })
    };
    let nz = "buf1 = torch.ops.aten.nonzero.default(arg0_1)";
    let cases: Vec<(&str, Program, Vec<&str>)> = vec![
        (
            "item",
            item(path(&[]), Some("buf0")),
            vec!["u0 = arg0_1.item()", "buf0 = None", "return ()"],
        ),
        (
            "item_convert_int",
            item(path(&[ConvertInt]), None),
            vec!["u0 = 1 if arg0_1.item() else 0", "return ()"],
        ),
        (
            "item_divide_by",
            item(path(&[DivideBy(2)]), Some("buf3")),
            vec![
                "u0_undivided = arg0_1.item()",
                "assert u0_undivided % 2 == 0, f'{u0_undivided} not divisible by 2'",
                "u0 = u0_undivided // 2",
                "buf3 = None",
                "return ()",
            ],
        ),
        (
            "bind_size",
            bind(&[CallMethod(TensorMethod::Size), Index(0)]),
            vec![nz, "u0 = buf1.size(0)", "return ()"],
        ),
        (
            "bind_tuple_stride",
            bind(&[Index(1), CallMethod(TensorMethod::Stride), Index(0)]),
            vec![nz, "u0 = buf1[1].stride(0)", "return ()"],
        ),
        (
            "bind_storage_offset",
            bind(&[CallMethod(TensorMethod::StorageOffset)]),
            vec![nz, "u0 = buf1.storage_offset()", "return ()"],
        ),
        (
            "bind_inner_tensor",
            bind(&[InnerTensor("values".into()), CallMethod(TensorMethod::Size), Index(0)]),
            vec![nz, "u0 = buf1.values.size(0)", "return ()"],
        ),
        (
            "bind_convert_int",
            bind(&[Index(0), ConvertInt]),
            vec![nz, "u0 = 1 if buf1[0] else 0", "return ()"],
        ),
        (
            "bind_divide_by_checked",
            bind(&[CallMethod(TensorMethod::Size), Index(0), DivideBy(4)]),
            vec![
                nz,
                "u0_undivided = buf1.size(0)",
                "if u0_undivided % 4 != 0:",
                "    raise RuntimeError(f'u0: {u0_undivided} (buf1.size(0)) is not divisible by 4')",
                "u0 = u0_undivided // 4",
                "return ()",
            ],
        ),
        (
            "runtime_assert_let_comment",
            program(|g| {
                g.line(Line::DynamicScalar {
                    symbol: "u0".into(),
                    source: "arg0_1".into(),
                    keypath: path(&[]),
                    node: None,
                });
                g.line(Line::RuntimeAssert {
                    cond: SymExpr::cmp(CmpOp::Ge, sym("u0"), SymExpr::Int(0)),
                    message: "u0 >= 0".into(),
                    node: Some("buf3".into()),
                });
                g.let_symbol(&"ks0".into(), SymExpr::mul(SymExpr::Int(2), sym("u0")));
                g.comment("Topologically Sorted Source Nodes: [gt]");
                g.comment("");
            }),
            vec![
                "u0 = arg0_1.item()",
                "if not (u0 >= 0):",
                "    raise RuntimeError('u0 >= 0')",
                "buf3 = None",
                "ks0 = 2*u0",
                "# Topologically Sorted Source Nodes: [gt]",
                "#",
                "return ()",
            ],
        ),
        (
            "asserts",
            program(|g| {
                // Inductor's nonzero: the result's size is bound, then checked.
                let mut nonzero = Layout::contiguous(DType::Int64, cuda(), [sym("u0"), SymExpr::Int(1)]);
                nonzero.stride = smallvec![SymExpr::Int(1), sym("u0")];
                let b1 = g.extern_alloc("buf1", nonzero, "torch.ops.aten.nonzero.default", vec![buf("arg0_1")]);
                g.bind_unbacked(
                    &b1,
                    &"u0".into(),
                    path(&[KeyEntry::CallMethod(TensorMethod::Size), KeyEntry::Index(0)]),
                );
                g.line(Line::AssertSizeStride {
                    buffer: b1.clone(),
                    size: smallvec![sym("u0"), SymExpr::Int(1)],
                    stride: smallvec![SymExpr::Int(1), sym("u0")],
                    context: Some("torch.ops.aten.nonzero.default".into()),
                });
                let b2 = g.allocate("buf2", Layout::contiguous(DType::Float32, cuda(), []));
                g.line(Line::AssertSizeStride {
                    buffer: b2.clone(),
                    size: smallvec![],
                    stride: smallvec![],
                    context: None,
                });
                g.line(Line::AssertAlignment {
                    buffer: "arg0_1".into(),
                    alignment: 16,
                    context: None,
                });
                g.output(&b1);
                g.output(&b2);
            }),
            vec![
                "buf1 = torch.ops.aten.nonzero.default(arg0_1)",
                "u0 = buf1.size(0)",
                "assert_size_stride(buf1, (u0, 1), (1, u0), 'torch.ops.aten.nonzero.default')",
                "buf2 = empty_strided_cuda((), (), torch.float32)",
                "assert_size_stride(buf2, (), ())",
                "assert_alignment(arg0_1, 16)",
                "return (buf1, buf2, )",
            ],
        ),
        (
            "comm_buffer",
            program(|g| {
                g.declare_tensor("buf0", f32(&[4]));
                g.line(Line::CommBufferAllocate {
                    buffer: "buf0".into(),
                    comm_kind: "symm_mem".into(),
                    group: "0".into(),
                });
                g.line(Line::CommBufferFree { buffer: "buf0".into() });
            }),
            vec![],
        ),
    ];
    for (name, p, expect) in cases {
        if name == "comm_buffer" {
            let got = lines_after_preamble(&p);
            assert!(got[0].starts_with(
                "buf0 = empty_strided_p2p((4, ), (1, ), torch.float32, torch.device(\"cuda:0\"), group_name=\"0\", alloc_id="
            ));
            assert_eq!(got[1..], ["del buf0 # symm_mem buffer free", "return ()"]);
            continue;
        }
        check(name, p, &expect);
    }
}

/// A program with a conditional over two subgraphs that each add a kernel.
fn cond_program(predicate: Predicate) -> Program {
    let mut p = ProgramBuilder::new();
    let k = p.triton_kernel("triton_poi_fused_add_0", TRITON_SRC, triton_meta());
    for name in ["true_graph_0", "false_graph_0"] {
        let mut g = p.subgraph(name);
        let x = g.tensor_input(&format!("{name}_arg0_1"), f32(&[4]));
        if name == "true_graph_0" {
            g.define_kernel(&k);
        }
        let b = g.allocate(&format!("{name}_buf0"), f32(&[4]));
        g.call_kernel(
            &k,
            [
                ArgValue::Buffer(x),
                ArgValue::Buffer(b.clone()),
                ArgValue::Expr(SymExpr::Int(4)),
            ],
        );
        g.output(&b);
        g.finish();
    }
    // A symbolic predicate reads backed symbols, bound here by symbol inputs.
    let predicate_symbols: Vec<_> = match &predicate {
        Predicate::Expr(e) => e.free_symbols().into_iter().collect(),
        Predicate::Tensor(_) => Vec::new(),
    };
    let predicate_symbols: Vec<_> = predicate_symbols
        .iter()
        .map(|s| p.backed_symbol(s.as_str(), Some(8)))
        .collect();
    let mut g = p.main();
    g.tensor_input("arg0_1", Layout::contiguous(DType::Bool, cuda(), []));
    g.tensor_input("arg1_1", f32(&[4]));
    for (i, s) in predicate_symbols.iter().enumerate() {
        g.symbol_input(&format!("arg{}_1", i + 2), s);
    }
    g.declare_multi("buf0");
    g.line(Line::Conditional(Conditional {
        result: "buf0".into(),
        predicate,
        true_graph: "true_graph_0".into(),
        false_graph: "false_graph_0".into(),
        operands: vec!["arg1_1".into()],
    }));
    g.multi_output("buf1", f32(&[4]), &"buf0".into(), &[MultiIndex::List(0)]);
    g.output(&"buf1".into());
    g.finish();
    p.finish()
}

#[test]
fn conditional_form() {
    let text = lower_ok(&cond_program(Predicate::Tensor("arg0_1".into())));
    py_compile(&text);
    assert_eq!(
        call_body(&text),
        [
            "arg0_1, arg1_1 = args",
            "args.clear()",
            "assert_size_stride(arg0_1, (), ())",
            "assert_size_stride(arg1_1, (4, ), (1, ))",
            "buf0 = [None] * 1",
            "if arg0_1.item():",
            "    # subgraph: true_graph_0",
            "    true_graph_0_args = [arg1_1,]",
            "    buf0 = true_graph_0(true_graph_0_args)",
            "else:",
            "    # subgraph: false_graph_0",
            "    false_graph_0_args = [arg1_1,]",
            "    buf0 = false_graph_0(false_graph_0_args)",
            "buf1 = buf0[0]",
            "return (buf1, )",
        ]
    );
    // The subgraph function follows its kernels; the kernel is defined once; the
    // subgraph repeats the stream import like 2.11.
    let expected_true = "empty_strided_p2p = torch._C._distributed_c10d._SymmetricMemory.empty_strided_p2p\nfrom torch._C import _cuda_getCurrentRawStream as get_raw_stream\n\n\n\ntriton_poi_fused_add_0 = async_compile.triton(";
    assert!(text.contains(expected_true), "{text}");
    assert!(text.contains(
        "''', device_str='cuda')\n\ndef true_graph_0(args):\n    true_graph_0_arg0_1, = args\n    args.clear()\n    assert_size_stride(true_graph_0_arg0_1, (4, ), (1, ))\n    true_graph_0_buf0 = empty_strided_cuda((4, ), (1, ), torch.float32)\n    stream0 = get_raw_stream(0)\n    triton_poi_fused_add_0.run(true_graph_0_arg0_1, true_graph_0_buf0, 4, stream=stream0)\n    return (true_graph_0_buf0, )\nfrom torch._C import _cuda_getCurrentRawStream as get_raw_stream\n\n\ndef false_graph_0(args):"
    ), "{text}");
    assert_eq!(text.matches("async_compile.triton(").count(), 1);

    let symbolic = lower_ok(&cond_program(Predicate::Expr(SymExpr::cmp(
        CmpOp::Gt,
        sym("s0"),
        SymExpr::Int(4),
    ))));
    py_compile(&symbolic);
    assert!(call_body(&symbolic).contains(&"if s0 > 4:".to_string()));
}

#[test]
fn while_loop_form() {
    let mut p = ProgramBuilder::new();
    let scalar = Layout::contiguous(DType::Int64, cuda(), []);
    {
        let mut g = p.subgraph("while_loop_cond_graph_0");
        let x = g.tensor_input("c_arg0_1", scalar.clone());
        g.tensor_input("c_arg1_1", f32(&[4]));
        g.output(&x);
        g.finish();
    }
    {
        let mut g = p.subgraph("while_loop_body_graph_0");
        let x = g.tensor_input("b_arg0_1", scalar.clone());
        g.output(&x);
        g.tensor_input("b_arg1_1", f32(&[4]));
        g.finish();
    }
    let mut g = p.main();
    g.tensor_input("arg0_1", scalar.clone());
    g.tensor_input("arg1_1", f32(&[4]));
    g.declare_multi("buf0");
    g.line(Line::WhileLoop(WhileLoop {
        result: "buf0".into(),
        cond_graph: "while_loop_cond_graph_0".into(),
        body_graph: "while_loop_body_graph_0".into(),
        carried: vec!["arg0_1".into()],
        additional: vec!["arg1_1".into()],
    }));
    g.multi_output("buf1", scalar, &"buf0".into(), &[MultiIndex::List(0)]);
    g.output(&"buf1".into());
    g.finish();
    let p = p.finish();
    let text = lower_ok(&p);
    py_compile(&text);
    assert_eq!(
        call_body(&text)[4..],
        [
            "buf0 = [None] * 1",
            "buf0[0] = arg0_1",
            "# subgraph: while_loop_cond_graph_0",
            "while_loop_cond_graph_0_args = [buf0[0], arg1_1]",
            "(buf0_cond_result,) = while_loop_cond_graph_0(while_loop_cond_graph_0_args)",
            "should_loop = buf0_cond_result",
            "if not should_loop:",
            "    buf0[0] = arg0_1.clone()",
            "while should_loop:",
            "    # subgraph: while_loop_body_graph_0",
            "    while_loop_body_graph_0_args = [buf0[0], arg1_1]",
            "    (buf0[0],) = while_loop_body_graph_0(while_loop_body_graph_0_args)",
            "    # subgraph: while_loop_cond_graph_0",
            "    while_loop_cond_graph_0_args = [buf0[0], arg1_1]",
            "    (buf0_cond_result,) = while_loop_cond_graph_0(while_loop_cond_graph_0_args)",
            "    should_loop = buf0_cond_result",
            "buf1 = buf0[0]",
            "return (buf1, )",
        ]
    );
}

#[test]
fn dynamic_inputs_frame_and_harness() {
    let mut p = ProgramBuilder::new();
    let s0 = p.backed_symbol("s0", Some(33));
    let s1 = p.backed_symbol("s1", Some(77));
    let s2 = p.backed_symbol("s2", Some(5));
    let mut g = p.main();
    g.symbol_input("arg0_1", &s0);
    g.tensor_input(
        "arg1_1",
        Layout::contiguous(
            DType::Float32,
            cuda(),
            [SymExpr::Sym(s0.clone()), SymExpr::Sym(s1.clone())],
        ),
    );
    g.tensor_input(
        "arg2_1",
        Layout::contiguous(DType::Int64, cuda(), [SymExpr::Sym(s2.clone()), SymExpr::Int(0)]),
    );
    g.output_expr(SymExpr::Sym(s1));
    g.finish();
    let p = p.finish();
    let text = lower_ok(&p);
    py_compile(&text);
    assert_eq!(
        call_body(&text),
        [
            "arg0_1, arg1_1, arg2_1 = args",
            "args.clear()",
            "s0 = arg0_1",
            "arg1_1_size = arg1_1.size()",
            "s1 = arg1_1_size[1]",
            "arg2_1_size = arg2_1.size()",
            "s2 = arg2_1_size[0]",
            "assert_size_stride(arg1_1, (s0, s1), (s1, 1))",
            "return (s1, )",
        ]
    );
    let tail = "\n\ndef get_args():\n    from torch._dynamo.testing import rand_strided\n    arg0_1 = 33\n    arg1_1 = rand_strided((33, 77), (77, 1), device='cuda:0', dtype=torch.float32)\n    arg2_1 = rand_strided((5, 0), (0, 1), device='cuda:0', dtype=torch.int64)\n    return [arg0_1, arg1_1, arg2_1]\n\n\ndef benchmark_compiled_module(args, times=10, repeat=10):\n";
    assert!(text.contains(tail), "{text}");
    assert!(text.ends_with("compiled_module_main('None', lambda times, repeat: benchmark_compiled_module(args, times=times, repeat=repeat))\n"));
    // No Triton kernels: no triton imports.
    assert!(!text.contains("import triton"));
}

/// Input checks come out in input order (as in Inductor's preamble): the checks
/// the lowering adds are merged into the graph's leading `assert_size_stride`
/// lines on inputs, which kernel definitions do not interrupt.
#[test]
fn input_asserts_follow_input_order() {
    let mut p = ProgramBuilder::new();
    let k = p.triton_kernel("k", TRITON_SRC, triton_meta());
    let mut g = p.main();
    for name in ["arg0_1", "arg1_1", "arg2_1", "arg3_1"] {
        g.tensor_input(name, f32(&[4]));
    }
    g.define_kernel(&k);
    for name in ["arg1_1", "arg3_1"] {
        g.line(Line::AssertSizeStride {
            buffer: name.into(),
            size: smallvec![SymExpr::Int(4)],
            stride: smallvec![SymExpr::Int(1)],
            context: Some("explicit".into()),
        });
    }
    g.comment("body");
    g.finish();
    let text = lower_ok(&p.finish());
    py_compile(&text);
    assert_eq!(
        call_body(&text),
        [
            "arg0_1, arg1_1, arg2_1, arg3_1 = args",
            "args.clear()",
            "assert_size_stride(arg0_1, (4, ), (1, ))",
            "assert_size_stride(arg1_1, (4, ), (1, ), 'explicit')",
            "assert_size_stride(arg2_1, (4, ), (1, ))",
            "assert_size_stride(arg3_1, (4, ), (1, ), 'explicit')",
            "# body",
            "return ()",
        ]
    );
}

#[test]
fn options_change_the_frame() {
    let p = program(|g| {
        g.allocate("buf0", f32(&[4]));
        g.output(&"buf0".into());
    });
    let options = Options {
        call_form: CallForm::Function,
        benchmark_harness: false,
        stream_binding: StreamBinding::OncePerGraph,
        input_size_asserts: false,
        aot_id: Some("0_inference".into()),
    };
    let text = lower(&p, &options).unwrap();
    py_compile(&text);
    assert!(text.starts_with("# AOT ID: ['0_inference']\nfrom ctypes import c_void_p, c_long, c_int\n"));
    assert!(text.ends_with(
        "async_compile.wait(globals())\ndel async_compile\n\ndef call(args):\n    arg0_1, = args\n    args.clear()\n    buf0 = empty_strided_cuda((4, ), (1, ), torch.float32)\n    return (buf0, )\n"
    ), "{text}");
}

#[test]
fn stream_binding_once_per_graph() {
    let mut p = ProgramBuilder::new();
    let k = p.triton_kernel("k", TRITON_SRC, triton_meta());
    let mut g = p.main();
    let x = g.tensor_input("arg0_1", f32(&[4]));
    g.define_kernel(&k);
    for _ in 0..2 {
        g.call_kernel(
            &k,
            [
                ArgValue::Buffer(x.clone()),
                ArgValue::Buffer(x.clone()),
                ArgValue::Expr(SymExpr::Int(4)),
            ],
        );
    }
    g.finish();
    let p = p.finish();
    let every = lower_ok(&p);
    assert_eq!(every.matches("stream0 = get_raw_stream(0)").count(), 2);
    let once = lower(
        &p,
        &Options {
            stream_binding: StreamBinding::OncePerGraph,
            ..Options::default()
        },
    )
    .unwrap();
    assert_eq!(once.matches("stream0 = get_raw_stream(0)").count(), 1);
    py_compile(&once);
}

/// Where a lowering error in the main graph points.
fn err_location(line: usize, kind: &'static str) -> Location {
    Location {
        graph: None,
        line,
        kind,
    }
}

#[test]
fn errors_name_the_culprit() {
    let bad_path = program(|g| {
        g.extern_alloc_multi("buf1", "torch.ops.aten.nonzero.default", vec![buf("arg0_1")]);
        g.bind_unbacked(
            &"buf1".into(),
            &"u0".into(),
            path(&[KeyEntry::DivideBy(2), KeyEntry::Index(0)]),
        );
    });
    let err = lower(&bad_path, &Options::default()).unwrap_err();
    assert!(matches!(err, Error::UnsupportedKeyPath { .. }), "{err}");
    assert!(err.to_string().contains("`u0`"), "{err}");

    // An unmatched guard exit never reaches the lowering: validation rejects it
    // and names the line.
    let unmatched = program(|g| {
        g.line(Line::ExitDeviceContext);
    });
    let errors = wrapir::ir::validate(&unmatched).unwrap_err();
    assert!(
        errors
            .to_string()
            .contains("device guard exit without a matching enter"),
        "{errors}"
    );

    let mut p = ProgramBuilder::new();
    let s0 = p.backed_symbol("s0", None);
    let mut g = p.main();
    g.symbol_input("arg0_1", &s0);
    g.finish();
    let err = lower(&p.finish(), &Options::default()).unwrap_err();
    assert_eq!(
        err,
        Error::MissingHint {
            symbol: s0,
            input: "arg0_1".into()
        }
    );

    // CUDA C kernels take the stream as a trailing positional argument, which
    // may not follow a named one.
    let mut p = ProgramBuilder::new();
    let k = p.kernel("k", KernelBackend::CudaC, "extern \"C\" void k(float* x, int n) {}");
    let mut g = p.main();
    let x = g.tensor_input("arg0_1", f32(&[4]));
    g.define_kernel(&k);
    g.line(Line::KernelCall(KernelCall {
        kernel: k.clone(),
        args: vec![
            CallArg::positional(ArgValue::Buffer(x)),
            CallArg {
                name: Some("n".into()),
                value: ArgValue::Expr(SymExpr::Int(4)),
            },
        ],
        device: Some(cuda()),
    }));
    g.finish();
    let err = lower(&p.finish(), &Options::default()).unwrap_err();
    assert_eq!(
        err,
        Error::PositionalAfterNamed {
            kernel: k,
            at: err_location(1, "call")
        }
    );

    let mut p = ProgramBuilder::new();
    let k = p.triton_kernel("k", "x = '''", triton_meta());
    let mut g = p.main();
    g.define_kernel(&k);
    g.finish();
    let err = lower(&p.finish(), &Options::default()).unwrap_err();
    assert_eq!(err, Error::SourceContainsTripleQuote { kernel: "k".into() });
}

/// Every fixture lowers (or fails with a clear error only if the fixture is
/// outside the Python form) and the module compiles.
#[test]
fn fixtures_lower_and_compile() {
    for path in common::fixtures() {
        let program = common::load(&path);
        let info = match wrapir::ir::validate(&program) {
            Ok(i) => i,
            Err(e) => panic!("{}: invalid: {e}", path.display()),
        };
        let text = write_string(&info, &Options::default())
            .unwrap_or_else(|e| panic!("{}: lowering failed: {e}", path.display()));
        py_compile(&text);
    }
}

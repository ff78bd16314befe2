//! Line by line: memory, calls, kernel definitions, extern and multi-output lines, symbol bindings.

use super::*;

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
    check_cases(cases);
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
            with_kernel(common::cpp_backend(&["const float*", "float*", "int64_t"]), None, false),
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
    check_cases(cases);
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
            common::cpp_backend(&["float*"]),
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
                g.line(Line::IndexPutFallback(IndexPutFallback {
                    target: "arg0_1".into(),
                    indices: vec![Some("arg0_1".into()), None],
                    values: "arg0_1".into(),
                    accumulate: true,
                }));
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
    check_cases(cases);
}

#[test]
fn symbol_binding_lines() {
    use KeyEntry::*;
    let item = |keypath: KeyPath, node: Option<&str>| {
        program(|g| {
            g.line(Line::DynamicScalar(DynamicScalar {
                symbol: "u0".into(),
                source: "arg0_1".into(),
                keypath,
                node: node.map(Into::into),
            }));
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
                g.line(Line::DynamicScalar(DynamicScalar {
                    symbol: "u0".into(),
                    source: "arg0_1".into(),
                    keypath: path(&[]),
                    node: None,
                }));
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
                g.bind_size(&b1, &"u0".into(), 0);
                g.line(Line::AssertSizeStride(AssertSizeStride {
                    buffer: b1.clone(),
                    size: smallvec![sym("u0"), SymExpr::Int(1)],
                    stride: smallvec![SymExpr::Int(1), sym("u0")],
                    context: Some("torch.ops.aten.nonzero.default".into()),
                }));
                let b2 = g.allocate("buf2", Layout::contiguous(DType::Float32, cuda(), []));
                g.line(Line::AssertSizeStride(AssertSizeStride {
                    buffer: b2.clone(),
                    size: smallvec![],
                    stride: smallvec![],
                    context: None,
                }));
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
    // The comm buffer's allocation id varies: its first line is checked by prefix.
    let (comm, exact): (Vec<_>, Vec<_>) = cases.into_iter().partition(|(name, _, _)| *name == "comm_buffer");
    check_cases(exact);
    for (_, p, _) in comm {
        let got = lines_after_preamble(&p);
        assert!(got[0].starts_with(
            "buf0 = empty_strided_p2p((4, ), (1, ), torch.float32, torch.device(\"cuda:0\"), group_name=\"0\", alloc_id="
        ));
        assert_eq!(got[1..], ["del buf0 # symm_mem buffer free", "return ()"]);
    }
}

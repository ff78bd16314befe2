//! Line by line: memory, calls, kernel definitions, extern and multi-output lines, symbol bindings.

use super::*;

#[test]
fn memory_lines() {
    check_file(include_str!("cases/memory.txt"));
}

#[test]
fn call_lines() {
    let with_kernel = |backend: KernelBackend, device: Option<Device>, guard: bool| {
        let named = matches!(backend, KernelBackend::Triton(_));
        // A C++ kernel runs on the host: its tensors are on the CPU.
        let layout = match backend {
            KernelBackend::Cpp(_) => Layout::contiguous(DType::Float32, Device::cpu(), [SymExpr::Int(4)]),
            _ => f32(&[4]),
        };
        let mut p = ProgramBuilder::new();
        let k = p.kernel("k0", backend, TRITON_SRC);
        let mut g = p.main();
        g.tensor_input("arg0_1", layout.clone());
        g.define_kernel(&k);
        if guard {
            g.line(Line::EnterDeviceContext {
                device_index: 0,
                streams: None,
            });
        }
        g.allocate("buf0", layout);
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
            argtypes: halide_args(&["in_ptr0", "out_ptr0", "ks0"]),
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
            vec![
                "buf0 = empty_strided_cpu((4, ), (1, ), torch.float32)",
                "k0(arg0_1, buf0, 4)",
                "return (buf0, )",
            ],
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
                argtypes: halide_args(&["ks0"]),
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
    check_file(include_str!("cases/extern.txt"));
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
    check_file(include_str!("cases/symbols.txt"));
    for (_, p, _) in comm {
        let got = lines_after_preamble(&p);
        assert!(got[0].starts_with(
            "buf0 = empty_strided_p2p((4, ), (1, ), torch.float32, torch.device(\"cuda:0\"), group_name=\"0\", alloc_id="
        ));
        assert_eq!(got[1..], ["del buf0 # symm_mem buffer free", "return ()"]);
    }
}

//! The module's frame: `cond` and `while_loop` forms, dynamic inputs, input asserts, options, streams, errors and fixtures.

use super::*;

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
        g.call_kernel(&k, common::pointwise_args(x, b.clone(), 4));
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
    g.conditional("buf0", predicate, ("true_graph_0", "false_graph_0"), &["arg1_1".into()]);
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
    common::assert_contains(&text, "empty_strided_p2p = torch._C._distributed_c10d._SymmetricMemory.empty_strided_p2p\nfrom torch._C import _cuda_getCurrentRawStream as get_raw_stream\n\n\n\ntriton_poi_fused_add_0 = async_compile.triton(");
    common::assert_contains(
        &text,
        "''', device_str='cuda')\n\ndef true_graph_0(args):\n    true_graph_0_arg0_1, = args\n    args.clear()\n    assert_size_stride(true_graph_0_arg0_1, (4, ), (1, ))\n    true_graph_0_buf0 = empty_strided_cuda((4, ), (1, ), torch.float32)\n    stream0 = get_raw_stream(0)\n    triton_poi_fused_add_0.run(true_graph_0_arg0_1, true_graph_0_buf0, 4, stream=stream0)\n    return (true_graph_0_buf0, )\nfrom torch._C import _cuda_getCurrentRawStream as get_raw_stream\n\n\ndef false_graph_0(args):",
    );
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
    g.while_loop(
        "buf0",
        ("while_loop_cond_graph_0", "while_loop_body_graph_0"),
        &["arg0_1".into()],
        &["arg1_1".into()],
    );
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
    common::assert_contains(&text, "\n\ndef get_args():\n    from torch._dynamo.testing import rand_strided\n    arg0_1 = 33\n    arg1_1 = rand_strided((33, 77), (77, 1), device='cuda:0', dtype=torch.float32)\n    arg2_1 = rand_strided((5, 0), (0, 1), device='cuda:0', dtype=torch.int64)\n    return [arg0_1, arg1_1, arg2_1]\n\n\ndef benchmark_compiled_module(args, times=10, repeat=10):\n");
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
        g.line(Line::AssertSizeStride(AssertSizeStride {
            buffer: name.into(),
            size: smallvec![SymExpr::Int(4)],
            stride: smallvec![SymExpr::Int(1)],
            dtype: None,
            context: Some("explicit".into()),
        }));
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
        g.call_kernel(&k, common::pointwise_args(x.clone(), x.clone(), 4));
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

/// Where a lowering error at line `line` of the main graph points: the
/// validator's location type, quoting the line.
fn err_location(program: &Program, line: usize) -> Location {
    Location::in_program(program, None, Some(line))
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
    assert!(matches!(err.kind, ErrorKind::UnsupportedKeyPath { .. }), "{err}");
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
        Error::of(ErrorKind::MissingHint {
            symbol: s0,
            input: "arg0_1".into()
        })
    );

    // A Halide kernel on CUDA takes the stream as a trailing positional
    // argument, which may not follow a named one.
    let halide_cuda = KernelBackend::Halide(HalideMeta {
        argtypes: halide_args(&["in_ptr0", "ks0"]),
        target: "host-cuda-cuda_capability_86-strict_float-no_runtime-no_asserts".into(),
        scheduler: Some("Anderson2021".into()),
        scheduler_flags: IndexMap::new(),
        cuda_device: Some(0),
    });
    let mut p = ProgramBuilder::new();
    let k = p.kernel("k", halide_cuda, "");
    let mut g = p.main();
    let x = g.tensor_input("arg0_1", f32(&[4]));
    g.define_kernel(&k);
    g.line(Line::KernelCall(KernelCall {
        kernel: k.clone(),
        args: vec![
            CallArg::positional(ArgValue::Buffer(x)),
            CallArg {
                name: Some("ks0".into()),
                value: ArgValue::Expr(SymExpr::Int(4)),
            },
        ],
        device: Some(cuda()),
    }));
    g.finish();
    let positional_after_named = p.finish();
    let err = lower(&positional_after_named, &Options::default()).unwrap_err();
    assert_eq!(
        err,
        Error::new(
            err_location(&positional_after_named, 1),
            ErrorKind::PositionalAfterNamed { kernel: k }
        )
    );
    assert!(err.to_string().starts_with("graph main, line 1 `call k("), "{err}");

    let mut p = ProgramBuilder::new();
    let k = p.triton_kernel("k", "x = '''", triton_meta());
    let mut g = p.main();
    g.define_kernel(&k);
    g.finish();
    let err = lower(&p.finish(), &Options::default()).unwrap_err();
    assert_eq!(
        err,
        Error::of(ErrorKind::SourceContainsTripleQuote { kernel: "k".into() })
    );
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

/// Every small valid program of `cases/lower.txt` lowers to a module Python
/// compiles (the lines each must hold are checked by `tests/lower.rs`).
#[test]
fn lowering_cases_compile() {
    for case in common::text_cases(include_str!("../cases/lower.txt")) {
        let program =
            wrapir::text::parse(&format!("wrapir 1\n{}", case.input)).unwrap_or_else(|e| panic!("{}: {e}", case.name));
        let text = lower(&program, &Options::default()).unwrap_or_else(|e| panic!("{}: {e}", case.name));
        py_compile(&text);
    }
}

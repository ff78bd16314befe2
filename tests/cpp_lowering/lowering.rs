//! Line kinds in both dialects, reuse, grids, constants and named arguments, options, errors.

use super::*;

#[test]
fn line_kinds_in_both_dialects() {
    for case in CASES {
        let program = (case.program)();
        let (_, standalone) = check_dialects(case.name, &program, case.aoti, case.standalone);
        // The standalone dialect never mentions libtorch.
        for fragment in ["aoti_torch", "AtenTensorHandle", "RAIIAtenTensorHandle", "torch/csrc"] {
            assert!(
                !standalone.contains(fragment),
                "case {}: `{fragment}` in standalone output",
                case.name
            );
        }
    }
}

#[test]
fn exact_reuse_moves_the_handle() {
    let mut p = ProgramBuilder::new();
    let mut g = p.main();
    g.tensor_input("arg0_1", f32(&[int(4)]));
    let b = g.extern_alloc("buf0", f32(&[int(4)]), "extern_kernels.relu", vec![buf("arg0_1")]);
    let r = g.reuse(&b, "buf1", f32(&[int(4)]));
    g.output(&r);
    g.finish();
    let program = p.finish();
    let moved = ["auto buf1 = std::move(buf0);  // reuse"];
    check_dialects("exact_reuse", &program, &moved, &moved);
}

/// A program launching the kernel `k0` of `meta` once, on the input
/// `arg0_1: f32[n]`.
fn one_launch(meta: TritonMeta, n: i64, args: Vec<CallArg>, device: Option<Device>) -> Program {
    let mut p = ProgramBuilder::new();
    let k = p.triton_kernel("k0", "", meta);
    let mut g = p.main();
    g.tensor_input("arg0_1", f32(&[int(n)]));
    g.define_kernel(&k);
    g.line(Line::KernelCall(KernelCall {
        kernel: k,
        args,
        device,
    }));
    g.finish();
    p.finish()
}

fn named(name: &str, value: ArgValue) -> CallArg {
    CallArg {
        name: Some(name.into()),
        value,
    }
}

/// One grid type: the wrapper's grid lines in both dialects, the kernel
/// launched on `arg0_1` twice (in and out) and the integers `ints`.
fn check_grid(name: &str, meta: TritonMeta, ints: &[i64], expected: &[&str]) {
    let args = [buf("arg0_1"), buf("arg0_1")]
        .into_iter()
        .chain(ints.iter().map(|v| ArgValue::Expr(int(*v))))
        .map(CallArg::positional)
        .collect();
    let program = one_launch(meta, 64, args, Some(Device::cuda(0)));
    check_dialects(&format!("grid_{name}"), &program, expected, expected);
}

#[test]
fn grids_per_grid_type() {
    let two_d = |grid_type| {
        let mut m = pointwise_meta(grid_type);
        m.signature.insert("ynumel".into(), "i32".parse().unwrap());
        m.signature.move_index(4, 2);
        m.config.insert("YBLOCK".into(), 16);
        m
    };
    check_grid(
        "2d",
        two_d(GridType::Grid2D),
        &[1000, 64],
        &[
            "uint32_t grid_0 = ((xnumel + (256 - 1)) / (256));",
            "uint32_t grid_1 = ((ynumel + (16 - 1)) / (16));",
            "uint32_t grid_2 = 1;",
        ],
    );
    check_grid(
        "yz_overflow",
        two_d(GridType::Grid2DWithYZOverflow { max_y_grid: 65535 }),
        &[1000, 64],
        &[
            "uint32_t y_grid_raw_ = ((ynumel + (16 - 1)) / (16));",
            "uint32_t y_grid_div_ = ((y_grid_raw_ + (65535 - 1)) / (65535));",
            "uint32_t grid_1 = ((y_grid_raw_ + (y_grid_div_ - 1)) / (y_grid_div_));",
            "uint32_t grid_2 = y_grid_div_;",
        ],
    );
    let mut coop = pointwise_meta(GridType::CooperativeReductionGrid);
    coop.config.insert("RSPLIT".into(), 8);
    check_grid(
        "cooperative",
        coop,
        &[64],
        &[
            "uint32_t grid_0 = 8;",
            "uint32_t grid_1 = ((xnumel + (256 - 1)) / (256));",
        ],
    );
    let mut scan = pointwise_meta(GridType::SplitScanGrid);
    scan.signature.insert("r0_numel".into(), "i32".parse().unwrap());
    scan.signature.move_index(4, 3);
    scan.config.insert("R0_BLOCK".into(), 1024);
    check_grid(
        "split_scan",
        scan,
        &[64, 4096],
        &[
            "uint32_t grid_0 = ((r0_numel + (1024 - 1)) / (1024));",
            "uint32_t grid_1 = xnumel;",
        ],
    );
    let mut fixed = pointwise_meta(GridType::FixedGrid);
    fixed.extra_launcher_args = vec!["_grid_0".into(), "_grid_1".into(), "_grid_2".into()];
    check_grid(
        "fixed",
        fixed,
        &[64, 3, 2, 1],
        &[
            "int64_t _grid_0,",
            "uint32_t grid_0 = _grid_0;",
            "uint32_t grid_2 = _grid_2;",
            "void* kernel_args_[] = {&var_0, &var_1, &var_2, &global_scratch_scratch_3};",
        ],
    );
}

#[test]
fn constants_are_stripped_and_named_args_bind_by_name() {
    let mut meta = pointwise_meta(GridType::Grid1D);
    meta.signature.insert("ks0".into(), "i64".parse().unwrap());
    meta.constants.insert("ks0".into(), ConstValue::Int(1));
    meta.global_scratch = Some(512);
    meta.profile_scratch = Some(0);
    meta.shared_mem = 65536;
    meta.num_warps = 8;
    let args = vec![
        named("out_ptr0", buf("arg0_1")),
        named("in_ptr0", buf("arg0_1")),
        named("ks0", ArgValue::Expr(int(1))),
        named("xnumel", ArgValue::Expr(int(64))),
    ];
    let program = one_launch(meta, 64, args, Some(Device::cuda(0)));
    let aoti = lower_ok(&program, Dialect::Aoti);
    check(
        "aoti-constants_and_named_args",
        &aoti,
        &[
            "call_k0(arg0_1, arg0_1, 64L, 0, stream0);",
            "CACHE_TORCH_DTYPE(uint8);",
            "const int64_t global_scratch_scratch_3_size[] = {static_cast<int64_t>(512) * grid_0 * grid_1 * grid_2};",
            "CUdeviceptr profile_scratch_scratch_4 = 0;",
            "void* kernel_args_[] = {&var_0, &var_1, &var_2, &global_scratch_scratch_3, &profile_scratch_scratch_4};",
            "launchKernel(k0, grid_0, grid_1, grid_2, 8, 65536, kernel_args_, stream_);",
        ],
    );
    check_absent(&aoti, "ks0");
    let standalone = lower_ok(&program, Dialect::Standalone);
    check(
        "standalone-constants_and_named_args",
        &standalone,
        &[
            "wrapir::Tensor global_scratch_scratch_3_tensor = wrapir::empty_bytes(static_cast<int64_t>(512) * grid_0 * grid_1 * grid_2, stream_);",
            "k0 = wrapir::load_kernel(WRAPIR_CUBIN_DIR, \"k.cubin\", \"k0\", 65536);",
        ],
    );
}

#[test]
fn options_suffix_cubin_dir_entry_name() {
    let program = pointwise_program(pointwise_meta(GridType::Grid1D), int(8192), &[int(64), int(128)]);
    let options = Options {
        dialect: Dialect::Aoti,
        int_suffix: IntSuffix::LL,
        cubin_dir: Some("/opt/cubins/".into()),
        ..Options::default()
    };
    let text = lower(&program, &options).unwrap();
    check(
        "aoti-ll_suffix_cubin_dir",
        &text,
        &[
            "static constexpr int64_t int_array_0[] = {64LL, 128LL};",
            "call_triton_poi_fused_add_0(arg0_1, buf0, 8192LL, 0, stream0);",
            "triton_poi_fused_add_0 = loadKernel(\"/opt/cubins/k.cubin\", \"triton_poi_fused_add_0\", 0, cubin_dir_);",
        ],
    );
    let options = Options {
        dialect: Dialect::Standalone,
        cubin_dir: Some("cubins".into()),
        entry_name: Some("model_run".into()),
        inline_runtime: true,
        ..Options::default()
    };
    let text = lower(&program, &options).unwrap();
    check_lines(
        &text,
        &[
            "#define WRAPIR_CUBIN_DIR \"cubins\"",
            "class Tensor {",
            "extern \"C\" const char* model_run_last_error() { return wrapir::last_error().c_str(); }",
        ],
    );
    check_absent(&text, "#include \"wrapir_runtime.h\"");
}

/// Each bad program fails with an error whose message mentions `expect`.
fn check_error(program: Program, dialect: Dialect, expect: &str) {
    match lower(&program, &Options::for_dialect(dialect)) {
        Ok(text) => panic!("expected an error mentioning `{expect}`, got:\n{text}"),
        Err(e) => assert!(
            e.to_string().contains(expect),
            "error `{e}` does not mention `{expect}`"
        ),
    }
}

#[test]
fn errors_name_the_problem() {
    // An extern op on an XPU: the runtime library runs extern ops on CUDA
    // devices and the host.
    let xpu = Device {
        kind: wrapir::ir::DeviceType::Xpu,
        index: Some(0),
    };
    let mut p = ProgramBuilder::new();
    p.unbacked_symbol("u0", Some(0), Some(100));
    let mut g = p.main();
    g.tensor_input("arg0_1", Layout::contiguous(DType::Bool, xpu, [int(100)]));
    let nz = g.extern_alloc(
        "buf0",
        Layout::contiguous(DType::Int64, xpu, [sym("u0"), int(1)]),
        "torch.ops.aten.nonzero.default",
        vec![buf("arg0_1")],
    );
    g.output(&nz);
    g.finish();
    check_error(
        p.finish(),
        Dialect::Standalone,
        "extern op `torch.ops.aten.nonzero.default` on xpu:0: the runtime runs extern ops on CUDA devices and the host",
    );
    // item() of a floating tensor binds no integer symbol, in either dialect
    // (one message, written by the walk, not the dialect).
    let float_item = wrapir::text::parse(
        "wrapir 1\nsymbol u0: unbacked [0, inf]\ngraph main(arg0_1: f32[][]@cuda:0) -> (u0) {\n  item u0 = arg0_1\n}\n",
    )
    .unwrap();
    for d in [Dialect::Aoti, Dialect::Standalone] {
        check_error(
            float_item.clone(),
            d,
            "item() of `arg0_1` (f32) cannot bind the integer symbol `u0`",
        );
    }
    // A key path that does not reach an integer.
    let mut p = ProgramBuilder::new();
    p.unbacked_symbol("u0", Some(0), None);
    let mut g = p.main();
    g.tensor_input("arg0_1", f32(&[int(4)]));
    let b = g.extern_alloc("buf0", f32(&[sym("u0")]), "aten.nonzero", vec![buf("arg0_1")]);
    g.bind_unbacked(
        &b,
        &"u0".into(),
        [
            KeyEntry::InnerTensor("values".into()),
            KeyEntry::CallMethod(TensorMethod::Size),
            KeyEntry::Index(0),
        ]
        .into_iter()
        .collect(),
    );
    g.finish();
    check_error(
        p.finish(),
        Dialect::Standalone,
        "binding `u0` from `buf0` through the key path `.values.size()[0]`",
    );
    // Grid operand missing from config, constants and parameters.
    let mut meta = pointwise_meta(GridType::Grid1D);
    meta.config.clear();
    let mut p = ProgramBuilder::new();
    let k = p.triton_kernel("k0", "", meta);
    let mut g = p.main();
    g.tensor_input("arg0_1", f32(&[int(4)]));
    g.define_kernel(&k);
    g.call_kernel(&k, [buf("arg0_1"), buf("arg0_1"), ArgValue::Expr(int(4))]);
    g.finish();
    check_error(p.finish(), Dialect::Aoti, "the Grid1D grid needs `XBLOCK`");
    // Dict multi-output indices.
    let mut p = ProgramBuilder::new();
    let mut g = p.main();
    g.tensor_input("arg0_1", f32(&[int(4)]));
    let r = g.extern_alloc_multi("buf0", "aten.split", vec![buf("arg0_1")]);
    g.multi_output("buf1", f32(&[int(2)]), &r, &[MultiIndex::Dict("values".into())]);
    g.finish();
    check_error(p.finish(), Dialect::Aoti, "by the dict key \"values\"");
    // A named constexpr argument that disagrees with the compiled constant.
    let mut meta = pointwise_meta(GridType::Grid1D);
    meta.constants.insert("XBLOCK".into(), ConstValue::Int(256));
    let args = vec![
        CallArg::positional(buf("arg0_1")),
        CallArg::positional(buf("arg0_1")),
        CallArg::positional(ArgValue::Expr(int(4))),
        named("XBLOCK", ArgValue::Expr(int(128))),
    ];
    check_error(
        one_launch(meta, 4, args, None),
        Dialect::Standalone,
        "kernel `k0` was compiled with `XBLOCK` = 256, but the call passes 128",
    );
    // A symbol operand passed to a subgraph input that binds another symbol:
    // the inlined subgraph would read the caller's `s27`.
    let fixture = std::fs::read_to_string(common::root().join("fixtures/cond_symbol_operands.wir")).unwrap();
    let swapped = fixture.replace("(arg2_1, s27, s77)", "(arg2_1, s77, s27)");
    assert_ne!(swapped, fixture);
    for d in [Dialect::Aoti, Dialect::Standalone] {
        check_error(
            wrapir::text::parse(&swapped).unwrap(),
            d,
            "symbol input `true_graph_0_arg1_1` of subgraph `true_graph_0` binds `s27` but is passed `s77`",
        );
    }
}

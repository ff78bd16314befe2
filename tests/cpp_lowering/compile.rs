//! The standalone dialect compiled against `cuda.h`, fixture forms, multi-outputs, embedder kernels.

use super::*;

#[test]
fn standalone_output_compiles_against_cuda_h() {
    let include = common::cuda_include();
    let dir = std::env::temp_dir().join(format!("wrapir_cpp_lowering_{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("wrapir_runtime.h"), cpp::runtime_header()).unwrap();
    let mut sources = Vec::new();
    for case in CASES {
        let text = lower_ok(&(case.program)(), Dialect::Standalone);
        // Each case is its own translation unit.
        let path = dir.join(format!("{}.cpp", case.name));
        std::fs::write(&path, text).unwrap();
        sources.push(path);
    }
    // Every valid fixture, as the standalone dialect prints it.
    for fixture in common::fixtures() {
        let text = lower_ok(&common::load(&fixture), Dialect::Standalone);
        let path = dir.join(format!("fixture_{}.cpp", common::name(&fixture)));
        std::fs::write(&path, text).unwrap();
        sources.push(path);
    }
    // Every small valid program of `cases/lower.txt` the standalone dialect
    // lowers (the others' refusals are checked by `tests/lower.rs`).
    for (i, case) in common::text_cases(include_str!("../cases/lower.txt"))
        .iter()
        .enumerate()
    {
        let program =
            wrapir::text::parse(&format!("wrapir 1\n{}", case.input)).unwrap_or_else(|e| panic!("{}: {e}", case.name));
        if let Ok(text) = lower(&program, &Options::for_dialect(Dialect::Standalone)) {
            let path = dir.join(format!("lower_case_{i}.cpp"));
            std::fs::write(&path, text).unwrap();
            sources.push(path);
        }
    }
    let inline = Options {
        inline_runtime: true,
        ..Options::for_dialect(Dialect::Standalone)
    };
    let path = dir.join("inline_runtime.cpp");
    std::fs::write(&path, lower(&(CASES[0].program)(), &inline).unwrap()).unwrap();
    sources.push(path);
    for src in &sources {
        let out = common::run_tool(
            Command::new("g++")
                .args(common::GXX_WARNINGS)
                .arg("-fsyntax-only")
                .arg("-I")
                .arg(&include)
                .arg("-I")
                .arg(&dir)
                .arg(src),
            "g++",
            "compiling the standalone C++",
        );
        assert!(
            out.status.success(),
            "{} does not compile:\n{}\n{}",
            src.display(),
            String::from_utf8_lossy(&out.stderr),
            std::fs::read_to_string(src).unwrap_or_default()
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A fixture and lines its lowering must contain in each dialect.
struct FixtureCase {
    fixture: &'static str,
    aoti: &'static [&'static str],
    standalone: &'static [&'static str],
}

const FIXTURE_CASES: &[FixtureCase] = &[
    // `get buf2 = buf1` (empty indices): the op's one output is `buf2`.
    FixtureCase {
        fixture: "nonzero",
        aoti: &[
            "AOTI_TORCH_ERROR_CODE_CHECK(aoti_torch_cuda_nonzero(buf0, &buf2_handle));",
            "RAIIAtenTensorHandle buf2(buf2_handle);",
            "auto u0 = buf2.size(0);",
            "call_triton_poi_fused__to_copy_add_mul_1(buf2, buf5, u0, 0, stream0);",
        ],
        standalone: &[
            "wrapir::Tensor* const results_[] = {&buf2};",
            "wrapir::call_op(0, \"torch.ops.aten.nonzero.default\", args_, 1, nullptr, results_, 1, stream);",
            "auto u0 = buf2.size(0);",
        ],
    },
    FixtureCase {
        fixture: "divide_by",
        aoti: &[
            "AOTI_TORCH_ERROR_CODE_CHECK(aoti_torch_cuda_mylib_pairs_above(arg0_1, 0.5, &buf1_handle));",
            "int64_t u0_undivided = buf1.size(0);",
        ],
        standalone: &[
            "wrapir::Tensor buf1;",
            "wrapir::call_op(0, \"torch.ops.mylib.pairs_above.default\", args_, 2, nullptr, results_, 1, stream);",
            "call_triton_poi_fused_add_0(buf1, 2L*u0, stream);",
        ],
    },
    FixtureCase {
        fixture: "cond_dynamic_branches",
        aoti: &[
            "RAIIAtenTensorHandle true_graph_0_buf2(true_graph_0_buf2_handle);",
            "auto u12 = true_graph_0_buf2.size(0);",
            "auto u4 = buf1.size(0);",
        ],
        standalone: &[
            "wrapir::Tensor* const results_[] = {&false_graph_0_buf2};",
            "auto u13 = false_graph_0_buf2.size(0);",
        ],
    },
    // C++ kernels: pointer arguments cast from `.data_ptr()` with `arg_types`;
    // the standalone wrapper calls the bundle's compiled image of the kernel.
    FixtureCase {
        fixture: "cpp_kernel_cpu",
        aoti: &[
            "extern \"C\" void cpp_fused_add_mul_0(const float*, const float*, float*);",
            "AOTI_TORCH_ERROR_CODE_CHECK(aoti_torch_empty_strided(1, int_array_0, int_array_1, cached_torch_dtype_float32, cached_torch_device_type_cpu,  0, &buf0_handle));",
            "cpp_fused_add_mul_0((const float*)(arg0_1.data_ptr()), (const float*)(arg1_1.data_ptr()), (float*)(buf0.data_ptr()));",
        ],
        standalone: &[
            "#define WRAPIR_HOST_ONLY",
            "static void cpp_fused_add_mul_0(const float* a0, const float* a1, float* a2) {",
            "    static const wrapir::HostKernel image_ = wrapir::host_kernel(WRAPIR_CUBIN_DIR, \"kernels/cpp_fused_add_mul_0.so\", \"cpp_fused_add_mul_0\", \"const float*;const float*;float*\");",
            "    image_.call(args_);",
            "wrapir::Tensor buf0 = wrapir::empty_strided_host(1, int_array_0, int_array_1, wrapir::DType::Float32, -1);",
            "cpp_fused_add_mul_0((const float*)(arg0_1.data_ptr()), (const float*)(arg1_1.data_ptr()), (float*)(buf0.data_ptr()));",
        ],
    },
    // Halide kernels: one halide_buffer_t per buffer argument, stream as user context on CUDA.
    FixtureCase {
        fixture: "halide_kernel",
        aoti: &[
            "#include \"HalideRuntime.h\"",
            "#include \"HalideRuntimeCuda.h\"",
            "extern \"C\" int halide_kernel_0(const void* user_context, halide_buffer_t* in_ptr0, halide_buffer_t* in_ptr1, halide_buffer_t* out_ptr0);",
            "extern \"C\" int halide_kernel_1(halide_buffer_t* in_ptr0, long ks0, halide_buffer_t* out_ptr0);",
            "if (int status_ = halide_kernel_0(stream0, &in_ptr0_buffer_, &in_ptr1_buffer_, &out_ptr0_buffer_)) { throw std::runtime_error(\"Halide kernel `halide_kernel_0` failed with status \" + std::to_string(status_)); }",
        ],
        standalone: &[
            "const uint64_t in_ptr0_address_ = (uint64_t)(arg0_1.data_ptr());",
            "halide_dimension_t in_ptr0_dim_[] = {{0, static_cast<int32_t>(1024L), static_cast<int32_t>(1L), 0}};",
            "halide_buffer_t in_ptr0_buffer_ = wrapir_halide_buffer(in_ptr0_address_, static_cast<int64_t>(0), 4, halide_cuda_device_interface(), 2, 32, 1, in_ptr0_dim_);",
            "if (int status_ = halide_kernel_0(stream, &in_ptr0_buffer_, &in_ptr1_buffer_, &out_ptr0_buffer_)) { throw std::runtime_error(\"Halide kernel `halide_kernel_0` failed with status \" + std::to_string(status_)); }",
            "const long ks0_value_ = s0;",
            "const long ks0 = ks0_value_;",
            "halide_dimension_t in_ptr0_dim_[] = {{0, static_cast<int32_t>(ks0), static_cast<int32_t>(1L), 0}};",
            "halide_buffer_t out_ptr0_buffer_ = wrapir_halide_buffer(out_ptr0_address_, static_cast<int64_t>(0), 4, nullptr, 2, 32, 1, out_ptr0_dim_);",
            "if (int status_ = halide_kernel_1(&in_ptr0_buffer_, ks0, &out_ptr0_buffer_)) { throw std::runtime_error(\"Halide kernel `halide_kernel_1` failed with status \" + std::to_string(status_)); }",
            // The CPU kernel: through `<kernel>_argv` in its compiled image.
            "static int halide_kernel_1(halide_buffer_t* in_ptr0, long ks0, halide_buffer_t* out_ptr0) {",
            "    int64_t ks0_slot_ = static_cast<int64_t>(ks0);",
            "    void* args_[] = {in_ptr0, &ks0_slot_, out_ptr0};",
        ],
    },
    // Communication buffers are ordinary allocations.
    FixtureCase {
        fixture: "comm_buffer",
        aoti: &[
            "// symm_mem communication buffer buf0 of group \"0\": allocated as an ordinary buffer",
            "RAIIAtenTensorHandle buf0(buf0_handle);",
            "buf0.reset();  // communication buffer",
        ],
        standalone: &[
            "// symm_mem communication buffer buf0 of group \"0\": allocated as an ordinary buffer",
            "wrapir::Tensor buf0 = wrapir::empty_strided(1, int_array_0, int_array_1, wrapir::DType::Bfloat16, -1, stream);",
            "buf0.reset();  // communication buffer",
        ],
    },
    // A named constexpr argument is dropped; `_grid_*` give the FixedGrid grid.
    FixtureCase {
        fixture: "user_triton_constexpr",
        aoti: &[
            "call_add_kernel_0(arg1_1, arg2_1, buf0, s0, c10::div_floor_integer(static_cast<int64_t>(s0 + 15L), static_cast<int64_t>(16L)), 1L, 1L, 0, stream0);",
            "uint32_t grid_0 = _grid_0;",
            "void* kernel_args_[] = {&var_0, &var_1, &var_2, &var_3};",
        ],
        standalone: &[
            "call_add_kernel_0(arg1_1, arg2_1, buf0, s0, wrapir::div_floor_integer(static_cast<int64_t>(s0 + 15L), static_cast<int64_t>(16L)), 1L, 1L, stream);",
        ],
    },
];

#[test]
fn fixture_forms_in_both_dialects() {
    for case in FIXTURE_CASES {
        let program = common::load(&common::root().join("fixtures").join(format!("{}.wir", case.fixture)));
        // The whole text of each fixture is its `cpp@`/`cpp-standalone@` snapshot (tests/lower.rs).
        check_lines(&lower_ok(&program, Dialect::Aoti), case.aoti);
        check_lines(&lower_ok(&program, Dialect::Standalone), case.standalone);
    }
}

#[test]
fn nested_and_whole_multi_outputs() {
    // `buf0` is a list whose first element is a list: `[[a, b], c]`.
    let mut p = ProgramBuilder::new();
    p.unbacked_symbol("u0", Some(0), None);
    let mut g = p.main();
    g.tensor_input("arg0_1", f32(&[int(4)]));
    let r = g.extern_alloc_multi("buf0", "torch.ops.mylib.nest.default", vec![buf("arg0_1")]);
    g.multi_output("buf1", f32(&[int(2)]), &r, &[MultiIndex::List(0), MultiIndex::List(1)]);
    g.declare_multi("buf2");
    g.line(Line::MultiOutput(MultiOutput {
        result: "buf2".into(),
        source: "buf0".into(),
        indices: [MultiIndex::List(1)].into_iter().collect(),
    }));
    let c = g.multi_output("buf3", f32(&[sym("u0")]), &"buf2".into(), &[MultiIndex::Tuple(0)]);
    g.bind_unbacked(
        &r,
        &"u0".into(),
        [
            KeyEntry::Index(1),
            KeyEntry::Index(0),
            KeyEntry::CallMethod(TensorMethod::Size),
            KeyEntry::Index(0),
        ]
        .into_iter()
        .collect(),
    );
    // The whole of a tensor under a new name is a new reference.
    let whole = g.multi_output("buf4", f32(&[int(4)]), &"arg0_1".into(), &[]);
    g.output(&c);
    g.output(&whole);
    g.finish();
    let program = p.finish();
    check_dialects(
        "nested_and_whole_multi_outputs",
        &program,
        &[
            "AOTI_TORCH_ERROR_CODE_CHECK(aoti_torch_cuda_mylib_nest(arg0_1, &buf0_0_0_handle, &buf1_handle, &buf3_handle));",
            "RAIIAtenTensorHandle buf0_0_0(buf0_0_0_handle);",
            "auto u0 = buf3.size(0);",
            "AOTI_TORCH_ERROR_CODE_CHECK(aoti_torch_new_tensor_handle(arg0_1, &buf4_handle));",
        ],
        &[
            "wrapir::Tensor* const results_[] = {&buf0_0_0, &buf1, &buf3};",
            "auto u0 = buf3.size(0);",
            "wrapir::Tensor buf4 = arg0_1;",
        ],
    );
}

#[test]
fn cuda_c_and_host_kernels_call_embedder_functions() {
    let mut p = ProgramBuilder::new();
    let cuda = p.kernel("cuda_fused_0", KernelBackend::CudaC, "");
    let host = p.kernel("host_fn_0", KernelBackend::Host, "");
    let mut g = p.main();
    g.tensor_input("arg0_1", f32(&[int(4)]));
    g.define_kernel(&cuda);
    g.define_kernel(&host);
    g.call_kernel(&cuda, [buf("arg0_1"), ArgValue::Expr(int(4)), ArgValue::Float(0.5)]);
    g.call_kernel(&host, [ArgValue::Bool(true)]);
    g.finish();
    let program = p.finish();
    check_dialects(
        "embedder_functions",
        &program,
        &[
            "extern \"C\" int cuda_fused_0(void*, int64_t, double, void* stream);",
            "extern \"C\" int host_fn_0(bool);",
            "if (int status_ = cuda_fused_0((void*)(arg0_1.data_ptr()), 4L, 0.5, stream0)) { throw std::runtime_error(\"CUDA C kernel `cuda_fused_0` failed with status \" + std::to_string(status_)); }",
            "if (int status_ = host_fn_0(true)) { throw std::runtime_error(\"host kernel `host_fn_0` failed with status \" + std::to_string(status_)); }",
        ],
        &["if (int status_ = cuda_fused_0((void*)(arg0_1.data_ptr()), 4L, 0.5, stream)) { throw std::runtime_error(\"CUDA C kernel `cuda_fused_0` failed with status \" + std::to_string(status_)); }"],
    );
}

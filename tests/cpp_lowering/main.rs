//! C++ lowering: the whole text per line kind in both dialects (snapshots
//! `snapshots/cpp-case@<dialect>-<case>.snap`, with the lines each case is
//! about checked by name), error cases, and a compile check of the standalone dialect against a real
//! `cuda.h` (set `WRAPIR_CUDA_INCLUDE`, or install the header with
//! `python3 -m pip install --no-deps nvidia-cuda-runtime-cu12`).

#[path = "../common/mod.rs"]
mod common;

use indexmap::IndexMap;
use std::process::Command;
use wrapir::ir::{
    ArgValue, CallArg, ConstValue, DType, Device, GridType, KernelBackend, KernelCall, KeyEntry, Layout, Line,
    MultiIndex, MultiOutput, Program, ProgramBuilder, TensorMethod, TritonMeta,
};
use wrapir::lower::cpp::{self, Dialect, IntSuffix, Options};
use wrapir::sym::SymExpr;

mod compile;
mod lowering;

fn f32(size: &[SymExpr]) -> Layout {
    Layout::contiguous(DType::Float32, Device::cuda(0), size.iter().cloned())
}

fn int(v: i64) -> SymExpr {
    SymExpr::Int(v)
}

fn sym(s: &str) -> SymExpr {
    SymExpr::sym(s)
}

fn buf(s: &str) -> ArgValue {
    ArgValue::Buffer(s.into())
}

/// A pointwise Triton kernel `in_ptr0 -> out_ptr0` over `xnumel`.
fn pointwise_meta(grid_type: GridType) -> TritonMeta {
    TritonMeta {
        signature: common::pointwise_signature(),
        constants: IndexMap::new(),
        config: [("XBLOCK".to_string(), 256)].into_iter().collect(),
        grid_type,
        num_warps: 4,
        num_stages: 1,
        shared_mem: 0,
        global_scratch: Some(0),
        profile_scratch: None,
        extra_launcher_args: vec![],
        mangled_name: None,
        cubin: Some("k.cubin".into()),
        user_defined: false,
    }
}

/// `arg0_1 -> buf0` through one kernel launch.
fn pointwise_program(meta: TritonMeta, numel: SymExpr, size: &[SymExpr]) -> Program {
    let mut p = ProgramBuilder::new();
    for s in size {
        if let SymExpr::Sym(s) = s {
            p.backed_symbol(s.as_str(), Some(8));
        }
    }
    let k = p.triton_kernel("triton_poi_fused_add_0", "", meta);
    let mut g = p.main();
    let x = g.tensor_input("arg0_1", f32(size));
    g.define_kernel(&k);
    let b = g.allocate("buf0", f32(size));
    g.call_kernel(&k, [buf("arg0_1"), buf("buf0"), ArgValue::Expr(numel)]);
    g.free(&x);
    g.output(&b);
    g.finish();
    p.finish()
}

fn lower(program: &Program, options: &Options) -> Result<String, cpp::Error> {
    let info = wrapir::ir::validate(program).expect("valid program");
    cpp::write_string(&info, options)
}

fn lower_ok(program: &Program, dialect: Dialect) -> String {
    lower(program, &Options::for_dialect(dialect)).unwrap_or_else(|e| panic!("lowering failed: {e}"))
}

/// Every expected line occurs, trimmed, as a whole line of the output.
fn check_lines(text: &str, expected: &[&str]) {
    let lines: Vec<&str> = text.lines().map(str::trim).collect();
    for e in expected {
        assert!(lines.contains(&e.trim()), "missing line `{e}` in:\n{text}");
    }
}

/// The whole output is the snapshot `snapshots/cpp-case@<name>.snap`, and
/// the lines the test is about are in it ([`check_lines`]).
fn check(name: &str, text: &str, expected: &[&str]) {
    check_lines(text, expected);
    common::settings().bind(|| insta::assert_snapshot!(format!("cpp-case@{name}"), text));
}

/// `program`'s wrapper in both dialects, each [`check`]ed as the case
/// `name` of its dialect ([`case_name`]) for its lines; returns the AOTI
/// and the standalone text.
fn check_dialects(name: &str, program: &Program, aoti: &[&str], standalone: &[&str]) -> (String, String) {
    let texts = [(Dialect::Aoti, aoti), (Dialect::Standalone, standalone)].map(|(dialect, expected)| {
        let text = lower_ok(program, dialect);
        check(&case_name(dialect, name), &text, expected);
        text
    });
    let [aoti, standalone] = texts;
    (aoti, standalone)
}

/// The snapshot name of a case in a dialect.
fn case_name(dialect: Dialect, name: &str) -> String {
    match dialect {
        Dialect::Aoti => format!("aoti-{name}"),
        Dialect::Standalone => format!("standalone-{name}"),
    }
}

/// No line of the output contains `fragment`.
fn check_absent(text: &str, fragment: &str) {
    assert!(!text.contains(fragment), "unexpected `{fragment}` in:\n{text}");
}

/// Parses a program of `programs/*.wir`, panicking with the error.
fn program_text(text: &str) -> Program {
    wrapir::text::parse(text).unwrap_or_else(|e| panic!("{e}"))
}

struct Case {
    name: &'static str,
    program: fn() -> Program,
    aoti: &'static [&'static str],
    standalone: &'static [&'static str],
}

const CASES: &[Case] = &[
    Case {
        name: "pointwise",
        program: || pointwise_program(pointwise_meta(GridType::Grid1D), int(8192), &[int(64), int(128)]),
        aoti: &[
            "#include <torch/csrc/inductor/cpp_wrapper/cuda.h>",
            "CACHE_TORCH_DTYPE(float32);",
            "CACHE_TORCH_DEVICE(cuda);",
            "static CUfunction triton_poi_fused_add_0 = nullptr;",
            "template <typename in_ptr0_type_, typename out_ptr0_type_>",
            "static inline void call_triton_poi_fused_add_0(",
            "const in_ptr0_type_& in_ptr0,",
            "int64_t xnumel,",
            "int32_t device_idx_,",
            "cudaStream_t stream_,",
            "const std::optional<std::string>& cubin_dir_ = std::nullopt",
            "uint32_t grid_0 = ((xnumel + (256 - 1)) / (256));",
            "uint32_t grid_1 = 1;",
            "uint32_t grid_2 = 1;",
            "if (grid_0 == 0 || grid_1 == 0 || grid_2 == 0) return;",
            "if (triton_poi_fused_add_0 == nullptr) {",
            "triton_poi_fused_add_0 = loadKernel(\"k.cubin\", \"triton_poi_fused_add_0\", 0, cubin_dir_);",
            "CUdeviceptr var_0 = reinterpret_cast<CUdeviceptr>(in_ptr0.data_ptr());",
            "CUdeviceptr var_1 = reinterpret_cast<CUdeviceptr>(out_ptr0.data_ptr());",
            "int32_t var_2 = xnumel;",
            "CUdeviceptr global_scratch_scratch_3 = 0;",
            "void* kernel_args_[] = {&var_0, &var_1, &var_2, &global_scratch_scratch_3};",
            "launchKernel(triton_poi_fused_add_0, grid_0, grid_1, grid_2, 4, 0, kernel_args_, stream_);",
            "void inductor_entry_impl(",
            "AtenTensorHandle* input_handles,  // handles are stolen; the array is borrowed",
            "py::gil_scoped_release_simple release;",
            "auto inputs = steal_from_raw_handles_to_raii_handles(input_handles, 1);",
            "auto arg0_1 = std::move(inputs[0]);",
            "static constexpr int64_t int_array_0[] = {64L, 128L};",
            "static constexpr int64_t int_array_1[] = {128L, 1L};",
            "AtenTensorHandle buf0_handle;",
            "AOTI_TORCH_ERROR_CODE_CHECK(aoti_torch_empty_strided(2, int_array_0, int_array_1, cached_torch_dtype_float32, cached_torch_device_type_cuda,  0, &buf0_handle));",
            "RAIIAtenTensorHandle buf0(buf0_handle);",
            "cudaStream_t stream0;",
            "AOTI_TORCH_ERROR_CODE_CHECK(aoti_torch_get_current_cuda_stream(0, (void**)&stream0));",
            "call_triton_poi_fused_add_0(arg0_1, buf0, 8192L, 0, stream0);",
            "arg0_1.reset();",
            "output_handles[0] = buf0.release();",
            "} // inductor_entry_impl",
        ],
        standalone: &[
            "#include \"wrapir_runtime.h\"",
            "#define WRAPIR_CUBIN_DIR \".\"",
            "static CUfunction triton_poi_fused_add_0 = nullptr;",
            "const wrapir::Tensor& in_ptr0,",
            "CUstream stream_",
            "uint32_t grid_0 = ((xnumel + (256 - 1)) / (256));",
            "triton_poi_fused_add_0 = wrapir::load_kernel(WRAPIR_CUBIN_DIR, \"k.cubin\", \"triton_poi_fused_add_0\", 0);",
            "CUdeviceptr var_0 = in_ptr0.data_ptr();",
            "wrapir::launch_kernel(triton_poi_fused_add_0, grid_0, grid_1, grid_2, 4, 0, kernel_args_, stream_);",
            "wrapir::Tensor arg0_1 = inputs[0];",
            "wrapir::Tensor buf0 = wrapir::empty_strided(2, int_array_0, int_array_1, wrapir::DType::Float32, -1, stream);",
            "call_triton_poi_fused_add_0(arg0_1, buf0, 8192L, stream);",
            "arg0_1.reset();",
            "outputs[0] = std::move(buf0);",
            "extern \"C\" int wrapir_entry(const wrapir::Tensor* inputs, const int64_t* scalar_inputs, wrapir::Tensor* outputs, CUstream stream) noexcept {",
            "extern \"C\" const char* wrapir_entry_last_error() { return wrapir::last_error().c_str(); }",
        ],
    },
    Case {
        name: "nonzero_unbacked_assert_views",
        program: || program_text(include_str!("programs/nonzero.wir")),
        aoti: &[
            "AtenTensorHandle buf2_handle;",
            "AOTI_TORCH_ERROR_CODE_CHECK(aoti_torch_cuda_nonzero(arg0_1, &buf2_handle));",
            "RAIIAtenTensorHandle buf2(buf2_handle);",
            "auto u0 = buf2.size(0);",
            "if (!(u0 <= 100L)) { throw std::runtime_error(\"Expected u0 <= 100\"); }",
            "const int64_t int_array_0[] = {u0, };",
            "static constexpr int64_t int_array_1[] = {1L, };",
            "auto buf3 = wrap_with_raii_handle_if_needed(reinterpret_tensor_wrapper(buf2, 1, int_array_0, int_array_1, 0L));  // alias",
            "AOTI_TORCH_ERROR_CODE_CHECK(aoti_torch_new_tensor_handle(buf2, &buf4_handle));",
            "buf4.reset();",
            "output_handles[0] = buf3.release();",
        ],
        standalone: &[
            "wrapir::Tensor buf2;",
            "const wrapir::ExternArg args_[] = {wrapir::ExternArg::of_tensor(arg0_1)};",
            "wrapir::Tensor* const results_[] = {&buf2};",
            "wrapir::call_op(0, \"torch.ops.aten.nonzero.default\", args_, 1, nullptr, results_, 1, stream);",
            "auto u0 = buf2.size(0);",
            "if (!(u0 <= 100L)) { throw std::runtime_error(\"Expected u0 <= 100\"); }",
            "auto buf3 = buf2.reinterpret(1, int_array_0, int_array_1, 0L, wrapir::DType::Int64);  // alias",
            "wrapir::Tensor buf4 = buf2;",
            "outputs[0] = std::move(buf3);",
        ],
    },
    Case {
        name: "item_divide_convert",
        program: || program_text(include_str!("programs/item.wir")),
        aoti: &[
            "int64_t u0_raw;",
            "AOTI_TORCH_ERROR_CODE_CHECK(aoti_torch_item_int64(arg0_1, &u0_raw));",
            "if (u0_raw % 4 != 0) { throw std::runtime_error(\"u0: arg0_1.item() = \" + std::to_string(u0_raw) + \" is not divisible by 4\"); }",
            "int64_t u0 = u0_raw / 4;",
            "AOTI_TORCH_ERROR_CODE_CHECK(aoti_torch_item_int64(arg0_1, &u1_raw));",
            "int64_t u1 = u1_raw ? 1 : 0;",
            "RAIIAtenTensorHandle scalar_to_tensor_0 = scalar_to_tensor_handle(u0);",
            "output_handles[0] = scalar_to_tensor_0.release();",
        ],
        standalone: &[
            "int64_t u0_raw = wrapir::item_int64(arg0_1, stream);",
            "int64_t u0 = u0_raw / 4;",
            "int64_t u1 = u1_raw ? 1 : 0;",
            "outputs[0] = wrapir::scalar_to_tensor(u0, stream);",
        ],
    },
    Case {
        name: "multi_output_extern_out_asserts",
        program: || program_text(include_str!("programs/topk.wir")),
        aoti: &[
            "AtenTensorHandle buf2_handle;",
            "AtenTensorHandle buf3_handle;",
            "AOTI_TORCH_ERROR_CODE_CHECK(aoti_torch_cuda_topk(arg0_1, 2L, -1L, 1, 1, &buf2_handle, &buf3_handle));",
            "RAIIAtenTensorHandle buf2(buf2_handle);",
            "RAIIAtenTensorHandle buf3(buf3_handle);",
            "int64_t u2_undivided = buf3.size(0);",
            "if (u2_undivided % 2 != 0) { throw std::runtime_error(\"u2: buf1[1].size()[0] = \" + std::to_string(u2_undivided) + \" is not divisible by 2\"); }",
            "int64_t u2 = u2_undivided / 2;",
            "auto u3 = buf3.stride(0);",
            "AOTI_TORCH_ERROR_CODE_CHECK(aoti_torch_cuda_add_out(buf4, buf2, 0.5, 1L));",
            "// Topologically Sorted Source Nodes: [topk]",
            "if (reinterpret_cast<uintptr_t>(buf4.data_ptr()) % 16 != 0) { throw std::runtime_error(\"buf4 is not aligned to 16 bytes\"); }",
            "if (!(buf4.size(0) == 2L && buf4.stride(0) == 1L)) { throw std::runtime_error(\"assert_size_stride failed for buf4: expected size [2] and stride [1] (add)\"); }",
            "output_handles[0] = buf2.release();",
            "output_handles[1] = buf4.release();",
            "AOTI_TORCH_ERROR_CODE_CHECK(aoti_torch_new_tensor_handle(output_handles[0], &output_handles[2]));",
        ],
        standalone: &[
            "wrapir::Tensor buf2;",
            "wrapir::Tensor buf3;",
            "wrapir::Tensor* const results_[] = {&buf2, &buf3};",
            "wrapir::call_op(0, \"torch.ops.aten.topk.default\", args_, 2, nullptr, results_, 2, stream);",
            "const wrapir::ExternArg args_[] = {wrapir::ExternArg::of_tensor(buf4, \"out\"), wrapir::ExternArg::of_tensor(buf2), wrapir::ExternArg::of_float(0.5), wrapir::ExternArg::of_int(1L, \"alpha\")};",
            "wrapir::call_op(0, \"extern_kernels.add\", args_, 4, nullptr, results_, 0, stream);",
            "if (!(buf4.dim() == 1 && buf4.size(0) == 2L && buf4.stride(0) == 1L)) { throw std::runtime_error(\"assert_size_stride failed for buf4: expected size [2] and stride [1] (add)\"); }",
            "if (buf4.data_ptr() % 16 != 0) { throw std::runtime_error(\"buf4 is not aligned to 16 bytes\"); }",
            "outputs[2] = outputs[0];",
        ],
    },
    Case {
        name: "size_one_strides",
        program: || program_text(include_str!("programs/size_one_strides.wir")),
        aoti: &[
            "if (!(arg0_1.size(0) == s0 && arg0_1.size(1) == 32L && arg0_1.size(2) == 1L && arg0_1.size(3) == 1L && (arg0_1.size(0) <= 1 || arg0_1.stride(0) == 32L) && arg0_1.stride(1) == 1L)) { throw std::runtime_error(\"assert_size_stride failed for arg0_1: expected size [s0, 32, 1, 1] and stride [32, 1, 32, 32] (convolution)\"); }",
        ],
        standalone: &[
            "if (!(arg0_1.dim() == 4 && arg0_1.size(0) == s0 && arg0_1.size(1) == 32L && arg0_1.size(2) == 1L && arg0_1.size(3) == 1L && (arg0_1.size(0) <= 1 || arg0_1.stride(0) == 32L) && arg0_1.stride(1) == 1L)) { throw std::runtime_error(\"assert_size_stride failed for arg0_1: expected size [s0, 32, 1, 1] and stride [32, 1, 32, 32] (convolution)\"); }",
        ],
    },
    Case {
        name: "conditional",
        program: || program_text(include_str!("programs/cond.wir")),
        aoti: &[
            "AOTICudaGuard device_guard(0);",
            "RAIIAtenTensorHandle buf1;",
            "bool arg0_1_scalar;",
            "AOTI_TORCH_ERROR_CODE_CHECK(aoti_torch_item_bool(arg0_1, &arg0_1_scalar));",
            "if (arg0_1_scalar) {",
            "// subgraph: true_graph_0",
            "AtenTensorHandle true_graph_0_arg0_1_handle;",
            "AOTI_TORCH_ERROR_CODE_CHECK(aoti_torch_assign_tensors_out(arg1_1, &true_graph_0_arg0_1_handle));",
            "RAIIAtenTensorHandle true_graph_0_arg0_1(true_graph_0_arg0_1_handle);",
            "RAIIAtenTensorHandle true_graph_0_buf0(true_graph_0_buf0_handle);",
            "call_triton_poi_fused_add_0(true_graph_0_arg0_1, true_graph_0_buf0, 40L, 0, stream0);",
            "buf1.reset();",
            "buf1 = std::move(true_graph_0_buf0);",
            "} else {",
            "// subgraph: false_graph_0",
            "buf1 = std::move(false_graph_0_buf0);",
            "output_handles[0] = buf1.release();",
        ],
        standalone: &[
            "wrapir::set_device(0);",
            "wrapir::Tensor buf1;",
            "bool arg0_1_scalar = wrapir::item_bool(arg0_1, stream);",
            "if (arg0_1_scalar) {",
            "wrapir::Tensor true_graph_0_arg0_1 = arg1_1;",
            "call_triton_poi_fused_add_0(true_graph_0_arg0_1, true_graph_0_buf0, 40L, stream);",
            "buf1 = std::move(true_graph_0_buf0);",
            "} else {",
            "buf1 = std::move(false_graph_0_buf0);",
        ],
    },
    Case {
        name: "while_loop",
        program: || program_text(include_str!("programs/while.wir")),
        aoti: &[
            "AtenTensorHandle buf3_handle;",
            "AOTI_TORCH_ERROR_CODE_CHECK(aoti_torch_assign_tensors_out(arg0_1, &buf3_handle));",
            "RAIIAtenTensorHandle buf3(buf3_handle);",
            "RAIIAtenTensorHandle buf2_cond_result;",
            "while (1) {",
            "// subgraph: cond_graph_0",
            "AOTI_TORCH_ERROR_CODE_CHECK(aoti_torch_assign_tensors_out(buf3, &cond_graph_0_arg0_1_handle));",
            "AOTI_TORCH_ERROR_CODE_CHECK(aoti_torch_assign_tensors_out(arg1_1, &cond_graph_0_arg1_1_handle));",
            "AOTI_TORCH_ERROR_CODE_CHECK(aoti_torch_cuda_any(cond_graph_0_arg0_1, &cond_graph_0_buf0_handle));",
            "buf2_cond_result = std::move(cond_graph_0_buf0);",
            "bool buf2_cond_result_scalar;",
            "if (!buf2_cond_result_scalar) break;",
            "// subgraph: body_graph_0",
            "AOTI_TORCH_ERROR_CODE_CHECK(aoti_torch_cuda_sub_Tensor(body_graph_0_arg0_1, body_graph_0_arg1_1, &body_graph_0_buf0_handle));",
            "buf3.reset();",
            "buf3 = std::move(body_graph_0_buf0);",
            "output_handles[0] = buf3.release();",
        ],
        standalone: &[
            "wrapir::Tensor buf3 = arg0_1;",
            "wrapir::Tensor buf2_cond_result;",
            "while (1) {",
            "wrapir::Tensor cond_graph_0_arg0_1 = buf3;",
            "bool buf2_cond_result_scalar = wrapir::item_bool(buf2_cond_result, stream);",
            "if (!buf2_cond_result_scalar) break;",
            "wrapir::call_op(0, \"torch.ops.aten.sub.Tensor\", args_, 2, &body_graph_0_buf0_expected_, results_, 1, stream);",
            "buf3 = std::move(body_graph_0_buf0);",
        ],
    },
    Case {
        name: "dynamic_reuse",
        program: || program_text(include_str!("programs/dynamic.wir")),
        aoti: &[
            "auto arg0_1_size = arg0_1.sizes();",
            "int64_t s0 = arg0_1_size[0];",
            "const int64_t int_array_0[] = {s0, 4L};",
            "int64_t triton_poi_fused_add_0_xnumel = 4L*s0;",
            "call_triton_poi_fused_add_0(arg0_1, buf0, triton_poi_fused_add_0_xnumel, 0, stream0);",
            "auto buf1 = wrap_with_raii_handle_if_needed(reinterpret_tensor_wrapper(buf0, 1, int_array_2, int_array_3, 0L)); buf0.reset();  // reuse",
        ],
        standalone: &[
            "int64_t s0 = arg0_1.size(0);",
            "auto buf1 = buf0.reinterpret(1, int_array_2, int_array_3, 0L, wrapir::DType::Float32); buf0.reset();  // reuse",
        ],
    },
];

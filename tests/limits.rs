//! Bad input never crashes, hangs or eats the machine: each reproducer of a
//! fuzz pass (issue 13) is a clear error naming the limit, line, buffer or
//! symbol, and the test returning at all shows it is bounded. The programs are
//! generated here (some are megabytes of text).

mod common;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use wrapir::ir::{ArgValue, ExternCall, Line, ValidationErrorKind};
use wrapir::{Limit, Limits};

/// A 2x2 f32 safetensors file holding `name`.
fn safetensors_2x2(name: &str) -> Vec<u8> {
    let header = format!(r#"{{"{name}":{{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]}}}}"#);
    let mut out = (header.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(header.as_bytes());
    for v in [1f32, 2.0, 3.0, 4.0] {
        out.extend_from_slice(&v.to_le_bytes());
    }
    out
}

/// A safetensors file of empty f32 tensors with these shapes.
fn safetensors_empty(tensors: &[(&str, &[u64])]) -> Vec<u8> {
    let entries: Vec<String> = tensors
        .iter()
        .map(|(n, shape)| format!(r#""{n}":{{"dtype":"F32","shape":{shape:?},"data_offsets":[0,0]}}"#))
        .collect();
    let header = format!("{{{}}}", entries.join(","));
    let mut out = (header.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(header.as_bytes());
    out
}

/// Issue 13, item 1: a negative stride, which validation rejects.
const NEGATIVE_STRIDES: &str = "wrapir 1\n\ngraph main(arg0_1: f32[2, 2][-1, 2]@cpu) -> (arg0_1) {\n}\n";
const NEGATIVE_STRIDES_ERROR: &str = "error in graph main: buffer arg0_1: the stride of dimension 0 is -1; sizes, strides and storage offsets must be non-negative (PyTorch tensors have no negative strides)";

fn one_buffer(layout: &str) -> String {
    format!("wrapir 1\n\ngraph main() -> (buf0) {{\n  buffer buf0: {layout}\n  alloc buf0\n}}\n")
}

/// Issue 13, item 9: one multi-output index of 10^8.
const TUPLE_INDEX: &str = "wrapir 1\n\ngraph main(arg0_1: f32[2][1]@cpu) -> (buf2) {\n  buffer buf1: multi\n  buffer buf2: f32[2][1]@cpu\n  extern buf1 = torch.ops.aten.foo.default(arg0_1)\n  get buf2 = buf1[tuple 100000000]\n}\n";

fn nested_list(depth: usize) -> String {
    format!(
        "wrapir 1\n\ngraph main() -> (buf0) {{\n  buffer buf0: f32[2][1]@cpu\n  extern buf0 = torch.ops.aten.foo.default({}{})\n}}\n",
        "[".repeat(depth),
        "]".repeat(depth)
    )
}

/// `main` runs `g0` in both branches of a `cond`, `g<i>` runs `g<i+1>`: a chain
/// `n` subgraphs long in which every subgraph is shared by two branches.
fn cond_chain(n: usize) -> String {
    let mut s = String::from(
        "wrapir 1\n\ngraph main(arg0_1: b8[][]@cpu, arg1_1: f32[2][1]@cpu) -> (buf1) {\n  buffer buf0: multi\n  buffer buf1: f32[2][1]@cpu\n  cond buf0 = if arg0_1 then g0 else g0 (arg0_1, arg1_1)\n  get buf1 = buf0[list 0]\n}\n",
    );
    for i in 0..n {
        let (body, result) = if i + 1 < n {
            (
                format!(
                    "  buffer g{i}_buf0: multi\n  buffer g{i}_buf1: f32[2][1]@cpu\n  cond g{i}_buf0 = if g{i}_arg0_1 then g{j} else g{j} (g{i}_arg0_1, g{i}_arg1_1)\n  get g{i}_buf1 = g{i}_buf0[list 0]\n",
                    j = i + 1
                ),
                format!("g{i}_buf1"),
            )
        } else {
            (String::new(), format!("g{i}_arg1_1"))
        };
        let _ = write!(
            s,
            "\ngraph g{i}(g{i}_arg0_1: b8[][]@cpu, g{i}_arg1_1: f32[2][1]@cpu) -> ({result}) {{\n{body}}}\n"
        );
    }
    s
}

const KERNEL: &str = r#"kernel triton_poi_fused_add_0: triton {
  signature in_ptr0: *fp32, out_ptr0: *fp32, xnumel: i32, XBLOCK: constexpr
  config XBLOCK: 16
  grid Grid1D
  num_warps 1
  source
"""
@triton.jit
def triton_poi_fused_add_0(in_ptr0, out_ptr0, xnumel, XBLOCK : tl.constexpr):
    pass
"""
}
"#;

fn kernel_call(extra_args: &str) -> String {
    format!(
        "wrapir 1\n\n{KERNEL}\ngraph main(arg0_1: f32[8][1]@cuda:0) -> (buf0) {{\n  buffer buf0: f32[8][1]@cuda:0\n  define triton_poi_fused_add_0\n  alloc buf0\n  call triton_poi_fused_add_0(in_ptr0=arg0_1, out_ptr0=buf0, {extra_args}) @cuda:0\n}}\n"
    )
}

/// One reproducer: files to write, the command (`{dir}` is the scratch
/// directory), the exit code and what its output must contain.
struct Case {
    name: &'static str,
    files: Vec<(&'static str, Vec<u8>)>,
    /// The arguments of `wrapir`, separated by spaces.
    command: &'static str,
    code: i32,
    contains: &'static [&'static str],
    /// Most bytes of stdout plus stderr.
    max_output: usize,
}

impl Case {
    /// `wrapir <command>` exiting `code`: no files written, nothing wanted
    /// in the output, at most 1000 bytes of it.
    fn new(name: &'static str, code: i32, command: &'static str) -> Case {
        Case {
            name,
            files: Vec::new(),
            command,
            code,
            contains: &[],
            max_output: 1000,
        }
    }

    /// The same case with `{dir}/p.wir` holding `text` first.
    fn program(mut self, text: impl AsRef<[u8]>) -> Case {
        self.files.push(("p.wir", text.as_ref().to_vec()));
        self
    }

    /// The same case with `{dir}/x.safetensors` holding `bytes` first.
    fn inputs(mut self, bytes: impl AsRef<[u8]>) -> Case {
        self.files.push(("x.safetensors", bytes.as_ref().to_vec()));
        self
    }

    /// The same case, its output containing each of `contains`.
    fn wants(self, contains: &'static [&'static str]) -> Case {
        Case { contains, ..self }
    }

    /// The same case, allowing `max_output` bytes of output.
    fn max_output(self, max_output: usize) -> Case {
        Case { max_output, ..self }
    }
}

fn cases() -> Vec<Case> {
    let jagged = "wrapir 1\n\ngraph main(arg0_1: f32[2, 2][2, 1]@cpu, arg1_1: i64[2][1]@cpu) -> (buf0) {\n  buffer buf0: f32[1, 3689348814741910324, 2][7378697629483820648, 2, 1]@cpu\n  extern buf0 = torch.ops.aten._jagged_to_padded_dense_forward.default(arg0_1, [arg1_1], [3689348814741910324], 0.0)\n}\n";
    let jagged_inputs = {
        let header = r#"{"arg0_1":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]},"arg1_1":{"dtype":"I64","shape":[2],"data_offsets":[16,32]}}"#;
        let mut out = (header.len() as u64).to_le_bytes().to_vec();
        out.extend_from_slice(header.as_bytes());
        for v in [1f32, 2.0, 3.0, 4.0] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        for v in [0i64, 2] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        out
    };
    let mm = "wrapir 1\n\ngraph main(arg0_1: f32[4294967296, 0][0, 1]@cpu, arg1_1: f32[0, 4294967296][4294967296, 1]@cpu) -> (buf0) {\n  buffer buf0: f32[4294967296, 4294967296][4294967296, 1]@cpu\n  extern buf0 = extern_kernels.mm(arg0_1, arg1_1)\n}\n";
    let mm_inputs = safetensors_empty(&[("arg0_1", &[4294967296, 0]), ("arg1_1", &[0, 4294967296])]);
    let mm_small = "wrapir 1\n\ngraph main(arg0_1: f32[4096, 0][0, 1]@cpu, arg1_1: f32[0, 4096][4096, 1]@cpu) -> (buf0) {\n  buffer buf0: f32[4096, 4096][4096, 1]@cpu\n  extern buf0 = extern_kernels.mm(arg0_1, arg1_1)\n}\n";
    let mm_small_inputs = safetensors_empty(&[("arg0_1", &[4096, 0]), ("arg1_1", &[0, 4096])]);
    let duplicated = vec!["xnumel=8"; 7000].join(", ");
    let unknown = (0..7000).map(|i| format!("y{i}=8")).collect::<Vec<_>>().join(", ");
    let devices = format!(
        "wrapir 1\n\ngraph main() -> () {{\n{}{}}}\n",
        "device 0 {\n".repeat(20_000),
        "}\n".repeat(20_001)
    );
    vec![
        // Rejected by validation: `check` and every `run` agree.
        Case::new("negative_strides_check", 1, "check {dir}/p.wir")
            .program(NEGATIVE_STRIDES)
            .wants(&[NEGATIVE_STRIDES_ERROR]),
        Case::new("negative_strides_run_cpu", 2, "run {dir}/p.wir --device cpu --inputs {dir}/x.safetensors")
            .program(NEGATIVE_STRIDES)
            .inputs(safetensors_2x2("arg0_1"))
            .wants(&["the program is invalid", NEGATIVE_STRIDES_ERROR]),
        Case::new("negative_strides_run_meta", 2, "run {dir}/p.wir --device meta")
            .program(NEGATIVE_STRIDES)
            .wants(&[NEGATIVE_STRIDES_ERROR]),
        Case::new("negative_offset_and_size", 1, "check {dir}/p.wir")
            .program(b"wrapir 1\n\ngraph main(arg0_1: f32[-2, 2][2, 1]+(-3)@cpu) -> (arg0_1) {\n}\n")
            .wants(&[
                "buffer arg0_1: the size of dimension 0 is -2;",
                "buffer arg0_1: the storage offset is -3;",
            ]),
        // Input placement lays a 2x2 input out with the declared strides:
        // the storage it needs is bounded like any allocation.
        Case::new("input_placement_over_memory", 2, "run {dir}/p.wir --device cpu --inputs {dir}/x.safetensors")
            .program(b"wrapir 1\n\ngraph main(arg0_1: f32[2, 2][1099511627776, 1]@cpu) -> (arg0_1) {\n}\n")
            .inputs(safetensors_2x2("arg0_1"))
            .wants(&["input `arg0_1`", "exceeds the limit max_alloc_bytes", "--max-alloc-bytes"]),
        Case::new("capacity_overflow", 2, "run {dir}/p.wir --device cpu")
            .program(one_buffer("f32[2305843009213693952][1]@cpu"))
            .wants(&[
                "node `buf0`: allocating f32 [2305843009213693952] strides [1]: 9223372036854775808 exceeds the limit max_alloc_bytes = ",
                "(raise it with --max-alloc-bytes)",
            ]),
        Case::new("allocation_over_memory_cpu", 2, "run {dir}/p.wir --device cpu")
            .program(one_buffer("f32[1099511627776][1]@cpu"))
            .wants(&["allocating f32 [1099511627776] strides [1]: 4398046511104 exceeds the limit max_alloc_bytes = "]),
        Case::new("allocation_over_memory_meta", 2, "run {dir}/p.wir --device meta --max-alloc-bytes 1000000")
            .program(one_buffer("f32[1099511627776][1]@cpu"))
            .wants(&["4398046511104 exceeds the limit max_alloc_bytes = 1000000 (raise it with --max-alloc-bytes)"]),
        Case::new("run_total_over_limit", 2, "run {dir}/p.wir --device meta --max-run-bytes 3999")
            .program(one_buffer("f32[1000][1]@cpu"))
            .wants(&["(live bytes of the run): 4000 exceeds the limit max_run_bytes = 3999 (raise it with --max-run-bytes)"]),
        Case::new("mm_numel_overflow", 2, "run {dir}/p.wir --device cpu --inputs {dir}/x.safetensors")
            .program(mm)
            .inputs(mm_inputs)
            .wants(&["the result [4294967296, 4294967296] has more elements than fit in 64 bits"]),
        // An op's result follows `--max-alloc-bytes` too, not only the buffers.
        Case::new("op_result_over_max_alloc_bytes", 2, "run {dir}/p.wir --device cpu --inputs {dir}/x.safetensors --max-alloc-bytes 100000000")
            .program(mm_small)
            .inputs(mm_small_inputs)
            .wants(&["the result [4096, 4096]", "exceeds the limit max_alloc_bytes = 100000000", "--max-alloc-bytes"]),
        Case::new("parse_error_past_column_65536", 2, "check {dir}/p.wir")
            .program(format!("wrapir 1\n{}x\n", " ".repeat(65_536)))
            .wants(&["(line 2, column 65537): unknown item `x`"]),
        Case::new("list_nested_30000_deep", 2, "check {dir}/p.wir")
            .program(nested_list(30_000))
            .wants(&["(line 5, column 300): list arguments of `torch.ops.aten.foo.default` nested too deep: 257 exceeds the limit max_text_depth = 256 (raise it with --max-depth)"]),
        Case::new("list_nested_10000_deep_lower_fx", 2, "lower {dir}/p.wir --target fx")
            .program(nested_list(10_000))
            .wants(&["exceeds the limit max_text_depth = 256"]),
        Case::new("subgraph_chain_5000", 1, "check {dir}/p.wir")
            .program(cond_chain(5000))
            .wants(&["error in graph g63, line 0 `cond g63_buf0 = if g63_arg0_1 then g64 else g64 (g63_arg0_1, g63_arg1_1)`: subgraph `g64` is called through a chain of subgraphs too long: 65 exceeds the limit max_subgraph_depth = 64 (raise it with --max-subgraph-depth)"])
            .max_output(100_000),
        Case::new("jagged_product_overflow", 2, "run {dir}/p.wir --device cpu --inputs {dir}/x.safetensors")
            .program(jagged)
            .inputs(jagged_inputs)
            .wants(&["_jagged_to_padded_dense_forward"])
            .max_output(2000),
        Case::new("while_loop_meta_predicate_true", 2, "run fixtures/while_loop.wir --device meta --predicate true --loop-fuel 1000")
            .wants(&["node `buf0`: while_loop `while_loop_cond_graph_0`/`while_loop_body_graph_0` iterations: 1001 exceeds the limit loop_fuel = 1000 (raise it with --loop-fuel)"]),
        Case::new("tuple_index_100000000", 1, "check {dir}/p.wir")
            .program(TUPLE_INDEX)
            .wants(&["error in graph main, line 1 `get buf2 = buf1[tuple 100000000]`: `buf1` indexed at 100000000: outputs of one value: 100000001 exceeds the limit max_outputs = 65536 (raise it with --max-outputs)"]),
        Case::new("duplicated_named_arguments", 1, "check {dir}/p.wir")
            .program(kernel_call(&duplicated))
            .wants(&["x…`: parameter xnumel of kernel triton_poi_fused_add_0 is bound twice\n"]),
        Case::new("unknown_named_arguments", 1, "check {dir}/p.wir")
            .program(kernel_call(&unknown))
            .wants(&[
                "kernel triton_poi_fused_add_0 has no parameter y999\n",
                "error in program: 6001 more errors not shown (max_diagnostics = 1000; raise it with --max-diagnostics)",
            ])
            .max_output(400_000),
        Case::new("shared_branches_depth_20_check", 1, "check {dir}/p.wir")
            .program(cond_chain(20))
            .wants(&["error    cpp: graph main: the C++ wrapper inlines a subgraph at every line that runs it: inlined subgraph bodies: 2097150 exceeds the limit max_inlined_subgraphs = 4096 (raise it with --max-inlined-subgraphs)"])
            .max_output(2000),
        Case::new("shared_branches_depth_20_lower_fx", 0, "lower {dir}/p.wir --target fx")
            .program(cond_chain(20))
            .wants(&["class g19(torch.nn.Module):"])
            .max_output(100_000),
        Case::new("list_nested_10000_deep_run_meta", 2, "run {dir}/p.wir --device meta")
            .program(nested_list(10_000))
            .wants(&["exceeds the limit max_text_depth = 256"]),
        Case::new("while_loop_meta_default_fuel", 2, "run fixtures/while_loop.wir --device meta --predicate true")
            .wants(&["iterations: 100001 exceeds the limit loop_fuel = 100000 (raise it with --loop-fuel)"]),
        Case::new("tuple_index_100000000_lower_cpp", 2, "lower {dir}/p.wir --target cpp")
            .program(TUPLE_INDEX)
            .wants(&["exceeds the limit max_outputs = 65536 (raise it with --max-outputs)"]),
        Case::new("shared_branches_depth_16_lower_cpp", 2, "lower {dir}/p.wir --target cpp")
            .program(cond_chain(16))
            .wants(&["exceeds the limit max_inlined_subgraphs = 4096 (raise it with --max-inlined-subgraphs)"])
            .max_output(2000),
        Case::new("device_blocks_20000_deep_check", 2, "check {dir}/p.wir")
            .program(devices.clone())
            .wants(&["`device` blocks in graph `main` nested too deep: 257 exceeds the limit"])
            .max_output(2000),
        Case::new("device_blocks_20000_deep", 2, "lower {dir}/p.wir --target python")
            .program(devices)
            .wants(&[
                "(line 260, column 1)",
                "`device` blocks in graph `main` nested too deep: 257 exceeds the limit",
            ])
            .max_output(2000),
    ]
}

/// Most seconds one reproducer may take in a test build (unoptimised, on a
/// loaded machine; an optimised build takes well under a second for each).
const MAX_SECONDS: f64 = 10.0;

#[test]
fn reproducers_are_bounded_errors() {
    let dir = common::scratch("limits", "reproducers");
    let mut failures = Vec::new();
    for case in cases() {
        let case_dir = dir.join(case.name);
        std::fs::create_dir_all(&case_dir).unwrap();
        for (file, bytes) in &case.files {
            std::fs::write(case_dir.join(file), bytes).unwrap();
        }
        let args: Vec<String> = case
            .command
            .split(' ')
            .map(|a| a.replace("{dir}", &path(&case_dir)))
            .collect();
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        let started = std::time::Instant::now();
        let run = common::wrapir(&refs);
        let secs = started.elapsed().as_secs_f64();
        eprintln!("{}: {secs:.3} s", case.name);
        let output = format!("{}{}", run.stdout, run.stderr);
        let mut problems = Vec::new();
        if secs > MAX_SECONDS {
            problems.push(format!("took {secs:.1} s (at most {MAX_SECONDS} s)"));
        }
        if run.code != case.code {
            problems.push(format!("exit {} (want {})", run.code, case.code));
        }
        for want in case.contains {
            if !output.contains(want) {
                problems.push(format!("missing `{want}`"));
            }
        }
        if output.len() > case.max_output {
            problems.push(format!(
                "{} bytes of output (at most {})",
                output.len(),
                case.max_output
            ));
        }
        if output.contains("panicked") || output.contains("overflow, aborting") {
            problems.push("crashed".into());
        }
        if !problems.is_empty() {
            let head: String = output.chars().take(800).collect();
            failures.push(format!("{}: {}\n{head}", case.name, problems.join("; ")));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    let _ = std::fs::remove_dir_all(&dir);
}

fn path(p: &Path) -> String {
    PathBuf::from(p).display().to_string()
}

/// Limits are named in one place, with the flag that raises each.
#[test]
fn limits_name_their_flags() {
    let e = Limits::check(Limit::LoopFuel, 11, 10, "loop").unwrap_err();
    assert_eq!(
        e.to_string(),
        "loop: 11 exceeds the limit loop_fuel = 10 (raise it with --loop-fuel)"
    );
    let d = Limits::default();
    assert_eq!(
        (
            d.max_text_depth,
            d.max_subgraph_depth,
            d.loop_fuel,
            d.max_diagnostics,
            d.max_outputs
        ),
        (256, 64, 100_000, 1_000, 65_536)
    );
    assert_eq!(d.max_alloc_bytes, Limits::DEFAULT_MEMORY_BYTES);
    assert_eq!(d.prover, wrapir::sym::egraph::Limits::default());
}

/// Values nested deeper than the limit that no parser made (built in Rust)
/// are refused by validation, so no lowering walks them.
#[test]
fn validation_bounds_nesting_built_in_rust() {
    let text = "wrapir 1\n\ngraph main() -> (buf0) {\n  buffer buf0: f32[2][1]@cpu\n  extern buf0 = torch.ops.aten.foo.default([])\n}\n";
    let mut program = wrapir::text::parse(text).unwrap();
    let mut value = ArgValue::List(vec![]);
    for _ in 0..1000 {
        value = ArgValue::List(vec![value]);
    }
    let Line::ExternKernelAlloc(ExternCall { args, .. }) = &mut program.main.lines[0] else {
        panic!("not an extern line")
    };
    args[0] = value;
    let errors = wrapir::ir::validate(&program).unwrap_err();
    let limit = errors.iter().find_map(|e| match &e.kind {
        ValidationErrorKind::Limit(l) => Some(l.clone()),
        _ => None,
    });
    let limit = limit.expect("a limit error");
    assert_eq!((limit.limit, limit.value, limit.max), (Limit::TextDepth, 1001, 256));

    // Device guards: 300 deep (as JSON or a builder could give) is an error at the 257th.
    let mut program = wrapir::text::parse("wrapir 1\n\ngraph main() -> () {\n}\n").unwrap();
    for _ in 0..300 {
        program.main.lines.push(Line::EnterDeviceContext { device_index: 0 });
    }
    for _ in 0..300 {
        program.main.lines.push(Line::ExitDeviceContext);
    }
    let errors = wrapir::ir::validate(&program).unwrap_err();
    assert_eq!(errors.len(), 44, "{errors}");
    assert!(errors.errors[0].to_string().starts_with(
        "error in graph main, line 256 `device 0 {`: device guards nested too deep: 257 exceeds the limit max_text_depth = 256"
    ), "{errors}");
    let relaxed = Limits {
        max_text_depth: 300,
        ..Limits::default()
    };
    let info = wrapir::ir::validate_with_limits(&program, &relaxed).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(info.limits().max_text_depth, 300);
}

/// The prover's limits bound its fact preprocessing too: a chain of 2,000
/// assumptions is linear work, and sides and facts over the node limit stop
/// before an e-graph that large is built (an `unknown`, never a wrong answer).
#[test]
fn prover_limits_bound_preprocessing() {
    let mut args: Vec<String> = vec!["sym".into(), "prove".into(), "s0".into(), "s2000".into()];
    for i in 0..2000 {
        args.push("--assume".into());
        args.push(format!("s{i} == s{}", i + 1));
    }
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let started = std::time::Instant::now();
    let run = common::wrapir(&refs);
    assert_eq!((run.code, run.stdout.as_str()), (0, "proven\n"), "{}", run.stderr);
    assert!(started.elapsed().as_secs_f64() < MAX_SECONDS, "{:?}", started.elapsed());

    // Within the prover's time limit (2 s), the sampling before saturation included.
    let sum = (0..12_000).map(|i| format!("s{i}")).collect::<Vec<_>>().join(" + ");
    let started = std::time::Instant::now();
    let run = common::wrapir(&["sym", "prove", &sum, &sum]);
    assert!(started.elapsed().as_secs_f64() < MAX_SECONDS, "{:?}", started.elapsed());
    assert_eq!(
        (run.code, run.stdout.as_str()),
        (
            2,
            "unknown: node limit (20000) reached without proof: the sides and facts have 47998 nodes\n"
        ),
        "{}",
        run.stderr
    );
}

/// Host tensors never index outside their storage: views with a negative
/// stride, size or offset, or reaching past the storage, are errors, and
/// reads and writes of valid views stay inside it.
#[test]
fn host_views_stay_inside_their_storage() {
    use wrapir::exec::Tensor;
    use wrapir::ir::DType;
    let t = Tensor::from_f64(DType::Float32, &[1.0, 2.0, 3.0, 4.0], &[2, 2]).unwrap();
    for (size, stride, offset) in [
        (&[2i64, 2][..], &[-1i64, 2][..], 1i64),
        (&[2, 2], &[2, 1], -1),
        (&[-2, 2], &[2, 1], 0),
        (&[2, 2], &[2, 1], 1),
        (&[2, 2], &[i64::MAX, 1], 0),
        (&[i64::MAX, 2], &[2, 1], 0),
    ] {
        let err = match t.view(size, stride, offset) {
            Ok(_) => panic!("{size:?} / {stride:?} + {offset} is a view"),
            Err(e) => e.to_string(),
        };
        assert!(
            ["storage", "negative", "overflows"].iter().any(|w| err.contains(w)),
            "{size:?} / {stride:?} + {offset}: {err}"
        );
    }
    // A strided (transposed) view reads and writes inside the storage.
    let v = t.view(&[2, 2], &[1, 2], 0).unwrap();
    assert_eq!(v.to_f64_vec().unwrap(), [1.0, 3.0, 2.0, 4.0]);
    v.write_f64(&[5.0, 6.0, 7.0, 8.0]).unwrap();
    assert_eq!(t.to_f64_vec().unwrap(), [5.0, 7.0, 6.0, 8.0]);
    let err = v.write_f64(&[1.0]).unwrap_err().to_string();
    assert!(err.contains('1') && err.contains('4'), "{err}");
}

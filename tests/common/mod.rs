//! Shared test helpers: fixture loading and insta settings bound to the
//! top-level `snapshots/` folder.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use wrapir::ir::Program;

/// Committed CUDA bundles whose recordings read device values: an
/// `item()`, `cond` and `while_loop` predicates, compactions' counts, an
/// unbacked size.
pub const DEVICE_READ_BUNDLES: &[&str] = &[
    "item_slice",
    "cond_branches",
    "feat_while_loop",
    "nonzero",
    "feat_cond_unbacked",
    "masked_select",
];

/// The crate root: `CARGO_MANIFEST_DIR` at run time when set (test binaries
/// built here and run from a copy of the tree elsewhere, as the GPU tests
/// are), else the directory they were built in.
pub fn root() -> PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")))
}

/// insta settings that store snapshots in `<root>/snapshots`, without the
/// input file path in the metadata (stable across machines).
pub fn settings() -> insta::Settings {
    let mut s = insta::Settings::clone_current();
    s.set_snapshot_path(root().join("snapshots"));
    s.set_prepend_module_to_snapshot(false);
    s.set_omit_expression(true);
    s
}

/// Valid fixtures: every `fixtures/*.wir` file, sorted by name.
pub fn fixtures() -> Vec<PathBuf> {
    list(&root().join("fixtures"), "wir")
}

/// Invalid fixtures: every `fixtures/invalid/*.wir` file, sorted by name.
pub fn invalid_fixtures() -> Vec<PathBuf> {
    list(&root().join("fixtures/invalid"), "wir")
}

fn list(dir: &Path, ext: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == ext))
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// The fixture's name without extension (used as snapshot suffix).
pub fn name(path: &Path) -> String {
    path.file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// A bundle's case name: its directory's last component.
pub fn case_name(dir: &Path) -> String {
    dir.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// The bundle directories (those holding a `program.json`) directly under
/// `rel` (relative to the crate root), sorted; panics when there are none.
pub fn bundle_dirs(rel: &str) -> Vec<PathBuf> {
    let dir = root().join(rel);
    let mut v: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.join("program.json").is_file())
        .collect();
    v.sort();
    assert!(!v.is_empty(), "no bundles in {}", dir.display());
    v
}

/// Every committed bundle's `program.json` under `fixtures/inductor/bundles*`
/// (CUDA, CPU and rank-set bundles, at any depth), sorted.
pub fn committed_bundle_programs() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        for path in entries.filter_map(|e| e.ok().map(|e| e.path())) {
            if path.is_dir() {
                walk(&path, out);
            } else if path.file_name().is_some_and(|n| n == "program.json") {
                out.push(path);
            }
        }
    }
    let inductor = root().join("fixtures/inductor");
    let mut v = Vec::new();
    for entry in std::fs::read_dir(&inductor).unwrap_or_else(|e| panic!("{}: {e}", inductor.display())) {
        let path = entry.unwrap_or_else(|e| panic!("{}: {e}", inductor.display())).path();
        if path.is_dir()
            && path
                .file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("bundles"))
        {
            walk(&path, &mut v);
        }
    }
    v.sort();
    v
}

/// The committed CUDA bundles, `fixtures/inductor/bundles/*`.
pub fn cuda_bundles() -> Vec<PathBuf> {
    bundle_dirs("fixtures/inductor/bundles")
}

/// The names in `dir`, sorted (to show that a failed command left nothing behind).
pub fn listing(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// Reads a safetensors file, panicking with the path and the error (tests only).
pub fn read_tensors(path: &Path) -> indexmap::IndexMap<String, wrapir::exec::Tensor> {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    wrapir::exec::safetensors::parse(&bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// `n` deterministic values in [-1, 1) (a 64-bit LCG seeded by `seed`).
pub fn uniform_values(n: usize, seed: u64) -> Vec<f64> {
    uniform_values_bits(n, seed, 53)
}

/// [`uniform_values`] with `bits` random bits a value (at most 53): 24 or
/// fewer make values exact in `float32`.
pub fn uniform_values_bits(n: usize, seed: u64, bits: u32) -> Vec<f64> {
    let mut x = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((x >> (64 - bits)) as f64 / (1u64 << bits) as f64) * 2.0 - 1.0
        })
        .collect()
}

/// `Err` naming `what` when `got` and `want` differ in dtype or sizes.
pub fn same_dtype_and_size(what: &str, got: &wrapir::exec::Tensor, want: &wrapir::exec::Tensor) -> Result<(), String> {
    if got.size() != want.size() || got.dtype() != want.dtype() {
        return Err(format!(
            "{what}: got {}{:?}, expected {}{:?}",
            got.dtype(),
            got.size(),
            want.dtype(),
            want.size()
        ));
    }
    Ok(())
}

/// A call's host arguments and keyword arguments with their tensors copied
/// into `backend` (a device backend), in order; the other values as they are.
#[allow(clippy::type_complexity)]
pub fn copy_call_in<B: wrapir::exec::Backend>(
    backend: &mut B,
    args: &[wrapir::exec::Value<wrapir::exec::Tensor>],
    kwargs: &indexmap::IndexMap<String, wrapir::exec::Value<wrapir::exec::Tensor>>,
) -> (
    Vec<wrapir::exec::Value<B::Tensor>>,
    indexmap::IndexMap<String, wrapir::exec::Value<B::Tensor>>,
) {
    let mut copy = |v: &wrapir::exec::Value<wrapir::exec::Tensor>| {
        v.try_map_tensors(&mut |t| backend.copy_in(t)).expect("copy in")
    };
    let args = args.iter().map(&mut copy).collect();
    let kwargs = kwargs.iter().map(|(k, v)| (k.clone(), copy(v))).collect();
    (args, kwargs)
}

/// A CUDA backend that runs every extern op on the device (no host
/// fallback: an op the device does not run is an error) with the math modes
/// `math`, and the log of the ops it ran there.
#[cfg(feature = "cuda")]
pub fn device_only_backend(
    math: wrapir::format::bundle_json::MathModes,
) -> Result<(wrapir::exec::cuda::CudaBackend, wrapir::exec::cuda::ExternOpLog), String> {
    let options = wrapir::exec::cuda::CudaOptions {
        host_fallback: false,
        math,
        ..wrapir::exec::cuda::CudaOptions::from_env()
    };
    let log = options.extern_ops.clone();
    let backend = wrapir::exec::cuda::CudaBackend::new(options).map_err(|e| e.to_string())?;
    Ok((backend, log))
}

/// Every tensor of `v`, in order (a list's items in turn).
pub fn tensors_of<T: Clone>(v: &wrapir::exec::Value<T>) -> Vec<T> {
    fn collect<T: Clone>(v: &wrapir::exec::Value<T>, out: &mut Vec<T>) {
        match v {
            wrapir::exec::Value::Tensor(t) => out.push(t.clone()),
            wrapir::exec::Value::List(items) => items.iter().for_each(|i| collect(i, out)),
            _ => {}
        }
    }
    let mut out = Vec::new();
    collect(v, &mut out);
    out
}

/// `op` called once on a CUDA backend that runs it on the device (no host
/// fallback; options otherwise from the environment), the call's tensors
/// copied in: every tensor of its result, copied out. An error if the op
/// failed or ran on the host.
#[cfg(feature = "cuda")]
pub fn extern_on_device(
    op: &str,
    args: &[wrapir::exec::Value<wrapir::exec::Tensor>],
    kwargs: &indexmap::IndexMap<String, wrapir::exec::Value<wrapir::exec::Tensor>>,
) -> Result<Vec<wrapir::exec::Tensor>, String> {
    use wrapir::exec::Backend;
    let options = wrapir::exec::cuda::CudaOptions {
        host_fallback: false,
        ..wrapir::exec::cuda::CudaOptions::from_env()
    };
    let log = options.extern_ops.clone();
    let mut backend = wrapir::exec::cuda::CudaBackend::new(options).map_err(|e| format!("no GPU: {e}"))?;
    let (dev_args, dev_kwargs) = copy_call_in(&mut backend, args, kwargs);
    let result = backend
        .call_extern(wrapir::exec::ExternCall::new(op, &dev_args, &dev_kwargs))
        .map_err(|e| e.to_string())?;
    if !log.host_ops().is_empty() {
        return Err(format!("ran on the host fallback: {:?}", log.host_ops()));
    }
    tensors_of(&result)
        .iter()
        .map(|t| backend.copy_out(t).map_err(|e| e.to_string()))
        .collect()
}

/// The bits of a host tensor's elements, for bit-for-bit comparison:
/// floating elements widened to f64 exactly, integers to i64, complex
/// elements as their parts.
pub fn element_bits(t: &wrapir::exec::Tensor) -> Vec<u64> {
    if t.dtype().is_complex() {
        return element_bits(&t.view_as_real().expect("complex parts"));
    }
    if t.dtype().is_floating() {
        t.to_f64_vec()
            .expect("floating tensor")
            .into_iter()
            .map(f64::to_bits)
            .collect()
    } else {
        t.to_i64_vec()
            .expect("integer tensor")
            .into_iter()
            .map(|i| i as u64)
            .collect()
    }
}

/// Passes when `failures` is empty; otherwise fails listing them, one a line.
#[track_caller]
pub fn assert_no_failures(failures: &[String]) {
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// Passes when `text` (a run's stdout or stderr) contains `want`;
/// otherwise fails showing both.
#[track_caller]
pub fn assert_contains(text: &str, want: &str) {
    assert!(text.contains(want), "want `{want}` in:\n{text}");
}

/// The signature of the pointwise Triton kernel the builder tests use:
/// `in_ptr0: *fp32, out_ptr0: *fp32, xnumel: i32, XBLOCK: constexpr`.
pub fn pointwise_signature() -> indexmap::IndexMap<String, wrapir::ir::SigType> {
    use wrapir::ir::{DType, SigType};
    [
        ("in_ptr0", SigType::Pointer(DType::Float32)),
        ("out_ptr0", SigType::Pointer(DType::Float32)),
        ("xnumel", "i32".parse().unwrap()),
        ("XBLOCK", SigType::Constexpr),
    ]
    .into_iter()
    .map(|(name, ty)| (name.to_string(), ty))
    .collect()
}

/// The pointwise kernel's arguments ([`pointwise_signature`]): `in_ptr0`,
/// `out_ptr0` and `xnumel`.
pub fn pointwise_args(
    input: wrapir::ir::BufName,
    output: wrapir::ir::BufName,
    numel: i64,
) -> [wrapir::ir::ArgValue; 3] {
    use wrapir::ir::ArgValue;
    [
        ArgValue::Buffer(input),
        ArgValue::Buffer(output),
        ArgValue::Expr(wrapir::sym::SymExpr::Int(numel)),
    ]
}

/// A program of one graph, `main`: `setup` declares what the program holds
/// besides (symbols, constants, kernels) and hands what `body` needs to it;
/// `body` builds the main graph's inputs, lines and outputs.
pub fn main_program<S>(
    setup: impl FnOnce(&mut wrapir::ir::ProgramBuilder) -> S,
    body: impl FnOnce(&mut wrapir::ir::GraphBuilder<'_>, S),
) -> Program {
    let mut p = wrapir::ir::ProgramBuilder::new();
    let declared = setup(&mut p);
    let mut g = p.main();
    body(&mut g, declared);
    g.finish();
    p.finish()
}

/// `buf1 = torch.ops.aten.nonzero.default(x)` (a multi-output extern op)
/// with `u0` bound to its size 0, then `x` freed: how Inductor's wrappers
/// read back a nonzero count. Returns `buf1`.
pub fn nonzero_of(
    g: &mut wrapir::ir::GraphBuilder<'_>,
    x: wrapir::ir::BufName,
    u0: &wrapir::sym::Symbol,
) -> wrapir::ir::BufName {
    let b1 = g.extern_alloc_multi(
        "buf1",
        "torch.ops.aten.nonzero.default",
        vec![wrapir::ir::ArgValue::Buffer(x.clone())],
    );
    g.bind_size(&b1, u0, 0);
    g.free(&x);
    b1
}

/// The backend of a C++ (host) kernel taking `arg_types`.
pub fn cpp_backend(arg_types: &[&str]) -> wrapir::ir::KernelBackend {
    wrapir::ir::KernelBackend::Cpp(wrapir::ir::CppMeta {
        arg_types: arg_types.iter().map(|t| t.to_string()).collect(),
        isa: None,
    })
}

/// Reads and parses a `.wir` fixture, panicking with the parse error (tests only).
pub fn load(path: &Path) -> Program {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    wrapir::text::parse(&text).unwrap_or_else(|e| panic!("parse {}: {e}", path.display()))
}

/// What a run of the `wrapir` binary gave: exit code (-1 for a signal), stdout, stderr.
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    /// Whether the run exited with `code`, its stdout holding every text of
    /// `stdout` and its stderr holding `stderr` (`""`: anything).
    pub fn matches(&self, code: i32, stdout: &[&str], stderr: &str) -> bool {
        self.code == code && stdout.iter().all(|s| self.stdout.contains(s)) && self.stderr.contains(stderr)
    }

    /// Passes when the run exited with `code`; otherwise fails showing both
    /// outputs.
    #[track_caller]
    pub fn assert_exit(&self, code: i32) {
        assert_eq!(self.code, code, "stdout:\n{}stderr:\n{}", self.stdout, self.stderr);
    }

    /// A failure line for a run that did not give what `what` wanted: its
    /// exit code and both outputs.
    pub fn failure(&self, what: std::fmt::Arguments<'_>) -> String {
        format!(
            "{what}: exit {}\nstdout:\n{}stderr:\n{}",
            self.code, self.stdout, self.stderr
        )
    }
}

/// A path as the `&str` a command line takes (test paths are UTF-8).
pub fn path_str(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// One command line and what it must print ([`run_cli_cases`]).
pub struct CliCase<'a> {
    pub args: Vec<&'a str>,
    pub code: i32,
    /// Texts stdout must contain.
    pub stdout: Vec<&'a str>,
    /// Texts stderr must contain.
    pub stderr: Vec<&'a str>,
    /// Text neither stream may contain (`""`: no such text).
    pub neither: &'a str,
}

impl<'a> CliCase<'a> {
    /// `args` exiting with `code`, printing `stdout` and `stderr`.
    pub fn new(args: &[&'a str], code: i32, stdout: &[&'a str], stderr: &[&'a str]) -> Self {
        CliCase {
            args: args.to_vec(),
            code,
            stdout: stdout.to_vec(),
            stderr: stderr.to_vec(),
            neither: "",
        }
    }

    /// The same case, where neither stream may contain `text`.
    pub fn without(self, text: &'a str) -> Self {
        CliCase { neither: text, ..self }
    }
}

/// Runs every case with [`wrapir`] and fails once, listing each case whose
/// run did not give what it wants.
pub fn run_cli_cases(cases: Vec<CliCase<'_>>) {
    let mut failures = Vec::new();
    for c in cases {
        let r = wrapir(&c.args);
        let clean = c.neither.is_empty() || !(r.stdout.contains(c.neither) || r.stderr.contains(c.neither));
        let ok = r.code == c.code
            && c.stdout.iter().all(|s| r.stdout.contains(s))
            && c.stderr.iter().all(|s| r.stderr.contains(s));
        if !ok || !clean {
            failures.push(r.failure(format_args!("{:?} (want exit {})", c.args, c.code)));
        }
    }
    assert_no_failures(&failures);
}

/// Runs the `wrapir` binary (`WRAPIR_BIN` when set: a test binary run on
/// another machine than the one that built it) with `args` in the crate root.
pub fn wrapir(args: &[&str]) -> Run {
    wrapir_with_env(args, &[])
}

/// [`wrapir`] with environment variables set for the process.
pub fn wrapir_with_env(args: &[&str], env: &[(&str, &Path)]) -> Run {
    let bin = std::env::var_os("WRAPIR_BIN").unwrap_or_else(|| env!("CARGO_BIN_EXE_wrapir").into());
    let out = std::process::Command::new(bin)
        .args(args)
        .envs(env.iter().copied())
        .current_dir(root())
        .output()
        .unwrap();
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// `wrapir lower <program> --target cpp-standalone --package <package>`.
pub fn lower_package(program: &Path, package: &Path) -> Run {
    wrapir(&[
        "lower",
        &program.to_string_lossy(),
        "--target",
        "cpp-standalone",
        "--package",
        &package.to_string_lossy(),
    ])
}

/// Writes `dir/<file>`, a program of one extern call, `buf0 = op(arg0_1)`
/// on an `f32[4]` tensor on `device` (`cpu`, `xpu:0`), and returns its path.
pub fn write_one_op_program(dir: &Path, file: &str, op: &str, device: &str) -> PathBuf {
    let path = dir.join(file);
    let text = format!(
        "wrapir 1\n\ngraph main(arg0_1: f32[4][1]@{device}) -> (buf0) {{\n  buffer buf0: f32[4][1]@{device}\n  extern buf0 = {op}(arg0_1)\n}}\n"
    );
    std::fs::write(&path, text).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
    path
}

/// A fresh scratch directory `wrapir-<suite>-<test>-<pid>` for one test.
pub fn scratch(suite: &str, test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("wrapir-{suite}-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Copies the directory `src` into `dst`, recursively (test bundles to mutate).
pub fn copy_dir(src: &Path, dst: &Path) {
    std::fs::create_dir_all(dst).unwrap();
    for e in std::fs::read_dir(src).unwrap() {
        let e = e.unwrap();
        let to = dst.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &to);
        } else {
            std::fs::copy(e.path(), &to).unwrap();
        }
    }
}

/// Copies the committed bundle `fixtures/inductor/bundles/<name>` into
/// `dir` (as `dir/<name>`), for a test that edits it; returns the copy.
pub fn copy_bundle(name: &str, dir: &Path) -> PathBuf {
    let copy = dir.join(name);
    copy_dir(&root().join("fixtures/inductor/bundles").join(name), &copy);
    copy
}

/// Runs an external tool a test needs (`python3`, `g++`: CI installs them,
/// so a missing one fails the test rather than skipping it). Panics naming
/// the tool and what needed it when it is not installed or cannot start.
pub fn run_tool(command: &mut std::process::Command, tool: &str, purpose: &str) -> std::process::Output {
    match command.output() {
        Ok(out) => out,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            panic!("`{tool}` is not installed: {purpose} needs it on PATH")
        }
        Err(e) => panic!("cannot run `{tool}` ({purpose}): {e}"),
    }
}

/// Passes when the external tool that gave `out` succeeded; otherwise
/// fails saying `what` went wrong, with the tool's stderr.
#[track_caller]
pub fn assert_tool_ok(out: &std::process::Output, what: std::fmt::Arguments<'_>) {
    assert!(
        out.status.success(),
        "{what}:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The include directory holding `cuda.h`: `WRAPIR_CUDA_INCLUDE`, the CUDA
/// toolkit's (`CUDA_HOME`, `/usr/local/cuda`), else the
/// `nvidia-cuda-runtime-cu12` wheel's include directory. Panics saying how
/// to install the header when there is none (CI installs the wheel).
pub fn cuda_include() -> PathBuf {
    const HOW: &str = "install it with `python3 -m venv .venv && .venv/bin/pip install --no-deps \
                       nvidia-cuda-runtime-cu12` (the README's test command) or point \
                       WRAPIR_CUDA_INCLUDE at a directory containing cuda.h";
    if let Ok(dir) = std::env::var("WRAPIR_CUDA_INCLUDE") {
        let dir = PathBuf::from(dir);
        assert!(
            dir.join("cuda.h").is_file(),
            "WRAPIR_CUDA_INCLUDE={} has no cuda.h; {HOW}",
            dir.display()
        );
        return dir;
    }
    let toolkit = std::env::var_os("CUDA_HOME")
        .map(|h| PathBuf::from(h).join("include"))
        .into_iter()
        .chain(std::iter::once(PathBuf::from("/usr/local/cuda/include")));
    if let Some(dir) = toolkit.into_iter().find(|d| d.join("cuda.h").is_file()) {
        return dir;
    }
    // NVIDIA's wheel, in the checkout's virtual environment (where the
    // README's test command installs it: stock Pythons refuse installs
    // into themselves, PEP 668) or in the `python3` on PATH.
    let venv_python = root().join(".venv/bin/python");
    let pythons = [venv_python.as_os_str(), std::ffi::OsStr::new("python3")];
    for python in pythons {
        let Ok(probe) = Command::new(python)
            .args([
                "-c",
                "import os, nvidia.cuda_runtime as m; print(os.path.join(list(m.__path__)[0], 'include'))",
            ])
            .output()
        else {
            continue;
        };
        let dir = PathBuf::from(String::from_utf8_lossy(&probe.stdout).trim());
        if probe.status.success() && dir.join("cuda.h").is_file() {
            return dir;
        }
    }
    panic!("cuda.h not found; {HOW}")
}

/// A CPU bundle's outputs compared with its references: eager PyTorch's
/// (`expected.safetensors`, within the bundle's tolerance) and Inductor's
/// compiled ones (`compiled.safetensors`, within the compiled tolerance;
/// `None` when the bundle has none). The rule the host backend's runs and
/// the standalone wrapper's runs are held to.
pub struct BundleComparison {
    pub eager: wrapir::exec::compare::Comparison,
    pub compiled: Option<wrapir::exec::compare::Comparison>,
}

impl BundleComparison {
    /// The first failed comparison, saying against which reference.
    pub fn first_error(&self) -> Option<String> {
        if let Some(e) = self.eager.first_error() {
            return Some(format!("against eager: {e}"));
        }
        match &self.compiled {
            None => Some("no compiled.safetensors".to_string()),
            Some(c) => c.first_error().map(|e| format!("against inductor: {e}")),
        }
    }
}

/// Compares `outputs` (a run's outputs of `bundle`'s program) with the
/// bundle's references ([`BundleComparison`]), as the library judges a run
/// (`wrapir::bundle::judge`).
pub fn compare_with_bundle(
    bundle: &wrapir::bundle::Bundle,
    outputs: &[wrapir::exec::Value<wrapir::exec::Tensor>],
) -> Result<BundleComparison, String> {
    use wrapir::bundle::judge::{judge_run, After, References};
    let references = References::of(bundle, &Default::default()).map_err(|e| e.to_string())?;
    let judgement = judge_run(bundle, &references, outputs, After::Device).map_err(|e| e.to_string())?;
    let eager = judgement
        .against("eager")
        .and_then(|v| v.comparison.clone())
        .ok_or("no expected.safetensors")?;
    let compiled = judgement.against("inductor").and_then(|v| v.comparison.clone());
    Ok(BundleComparison { eager, compiled })
}

/// Compares the values a run of `bundle`'s program left in its inputs
/// (`after`, by graph input name) with eager's after the call
/// (`mutated.safetensors`) for each input `bundle.json` lists in
/// `mutated_inputs`; `None` when the bundle records none.
pub fn compare_mutated_with_bundle(
    bundle: &wrapir::bundle::Bundle,
    after: &indexmap::IndexMap<String, wrapir::exec::Tensor>,
) -> Result<Option<wrapir::exec::compare::MutationComparison>, String> {
    use wrapir::bundle::judge::{judge_run, After, MutatedVerdict, References};
    let references = References::of(bundle, &Default::default()).map_err(|e| e.to_string())?;
    let judgement = judge_run(bundle, &references, &[], After::Host(after)).map_err(|e| e.to_string())?;
    match judgement.mutated {
        MutatedVerdict::NotRecorded => Ok(None),
        MutatedVerdict::Compared { comparison, .. } => Ok(Some(comparison)),
        _ => Err("bundle.json lists mutated inputs, but there is no mutated.safetensors".to_string()),
    }
}

/// The directory of the runtime library (`libwrapir_runtime.so`, the
/// `wrapir-runtime` crate): `WRAPIR_RUNTIME_DIR`, else the profile directory
/// the running test was built into (`target/<profile>`, where
/// `cargo build -p wrapir-runtime` puts it).
pub fn runtime_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("WRAPIR_RUNTIME_DIR") {
        return PathBuf::from(dir);
    }
    let exe = std::env::current_exe().unwrap();
    // target/<profile>/deps/<test>-<hash>
    exe.parent().and_then(|p| p.parent()).map(PathBuf::from).unwrap()
}

/// The warnings every generated C++ wrapper is compiled with (C++17, all
/// warnings as errors but the unused names and OpenMP pragmas generated
/// code has), for the tests that compile wrappers with `g++`.
pub const GXX_WARNINGS: &[&str] = &[
    "-std=c++17",
    "-Wall",
    "-Wextra",
    "-Werror",
    "-Wno-unused-parameter",
    "-Wno-unused-variable",
    "-Wno-unused-but-set-variable",
    "-Wno-unknown-pragmas",
];

/// One case of a case file ([`text_cases`]): its name, its input (a
/// program's text) and the lines it must give.
pub struct TextCase {
    pub name: String,
    pub input: String,
    pub expect: Vec<String>,
    /// The 1-based line of the case file where its input starts.
    pub line: usize,
}

/// The cases of a case file, test data written as text: after `;` comment
/// lines, each case is a `== name` line, its input, then a `-- expect` line
/// and the expected lines, one a line (blank lines before the next case are
/// not part of it). Panics on text before the first case and on a file
/// without cases.
pub fn text_cases(file: &str) -> Vec<TextCase> {
    let mut cases: Vec<TextCase> = Vec::new();
    let mut in_expect = false;
    for (index, line) in file.lines().enumerate() {
        if let Some(name) = line.strip_prefix("== ") {
            cases.push(TextCase {
                name: name.to_string(),
                input: String::new(),
                expect: Vec::new(),
                line: index + 2,
            });
            in_expect = false;
            continue;
        }
        let Some(case) = cases.last_mut() else {
            assert!(
                line.is_empty() || line.starts_with(';'),
                "text before the first case: {line}"
            );
            continue;
        };
        if line == "-- expect" {
            in_expect = true;
        } else if in_expect {
            case.expect.push(line.to_string());
        } else {
            case.input.push_str(line);
            case.input.push('\n');
        }
    }
    for case in &mut cases {
        while case.expect.last().is_some_and(|l| l.is_empty()) {
            case.expect.pop();
        }
    }
    assert!(!cases.is_empty(), "a case file without cases");
    cases
}

/// The RNN of an `aten._cudnn_rnn` call: cell (`mode`, cuDNN's: 0 ReLU RNN,
/// 1 tanh RNN, 2 LSTM, 3 GRU), biases, sizes and layout.
pub struct CudnnRnn {
    pub mode: i64,
    pub bias: bool,
    pub hidden: i64,
    pub layers: i64,
    pub batch_first: bool,
    pub bidirectional: bool,
}

impl CudnnRnn {
    /// `_cudnn_rnn`'s 16 arguments in PyTorch's order for an inference call
    /// (no projection, no dropout, no packed batch sizes, no dropout state).
    pub fn args<T>(
        &self,
        x: wrapir::exec::Value<T>,
        weights: Vec<wrapir::exec::Value<T>>,
        weight_buf: wrapir::exec::Value<T>,
        hx: wrapir::exec::Value<T>,
        cx: wrapir::exec::Value<T>,
    ) -> Vec<wrapir::exec::Value<T>> {
        use wrapir::exec::Value;
        vec![
            x,
            Value::List(weights),
            // Weights per layer and direction.
            Value::Int(if self.bias { 4 } else { 2 }),
            weight_buf,
            hx,
            cx,
            Value::Int(self.mode),
            Value::Int(self.hidden),
            Value::Int(0),
            Value::Int(self.layers),
            Value::Bool(self.batch_first),
            Value::Float(0.0),
            Value::Bool(false),
            Value::Bool(self.bidirectional),
            Value::List(vec![]),
            Value::None,
        ]
    }
}

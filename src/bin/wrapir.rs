//! The `wrapir` command-line tool: a thin shell over the library.

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand, ValueEnum};
use miette::{miette, LabeledSpan, NamedSource};
use std::borrow::Cow;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use wrapir::ir::{self, Program};

#[path = "wrapir/bench.rs"]
mod bench;
#[path = "wrapir/dag.rs"]
mod dag;
#[path = "wrapir/diagnostics.rs"]
mod diagnostics;
#[path = "wrapir/info.rs"]
mod info;
#[path = "wrapir/kernels.rs"]
mod kernels;
#[path = "wrapir/ops.rs"]
mod ops;
#[path = "wrapir/package.rs"]
mod package;
#[path = "wrapir/run.rs"]
mod run;
#[path = "wrapir/version.rs"]
mod version;
use bench::{bench_command, BenchArgs};
use run::exec_host_fallback_hint;
use run::{run_command, RunArgs};
use wrapir::bundle::{Bundle, BundleError};

#[derive(Parser)]
#[command(
    name = "wrapir",
    disable_version_flag = true,
    arg_required_else_help = true,
    about = "PyTorch Inductor wrapper code as typed data: validate, lower, prove, run",
    after_help = "`wrapir help VERB` (or `wrapir VERB --help`) explains a verb and its flags."
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    /// Print the version and the features built in (with `cuda`, also the
    /// CUDA driver, cuBLAS, cuDNN and NCCL versions found on this machine).
    #[arg(short = 'V', long)]
    version: bool,
    #[command(
        flatten,
        next_help_heading = "Limits (every verb; exceeding one is an error naming it)"
    )]
    limits: LimitArgs,
}

/// Resource limits (every command): exceeding one is an error naming it and
/// the flag that raises it.
#[derive(clap::Args)]
struct LimitArgs {
    /// Most bytes one tensor allocation may take on the cpu and meta backends
    /// [default: the host's physical memory].
    #[arg(long, global = true, value_name = "BYTES")]
    max_alloc_bytes: Option<u64>,
    /// Most bytes a whole cpu or meta run may hold at once [default: the
    /// host's physical memory].
    #[arg(long, global = true, value_name = "BYTES")]
    max_run_bytes: Option<u64>,
    /// Deepest nesting of the text form: list arguments, `device` blocks
    /// (at most 20,000: the stack is sized for it).
    #[arg(long, global = true, value_name = "N", default_value_t = wrapir::Limits::default().max_text_depth)]
    max_depth: usize,
    /// Longest chain of subgraphs calling subgraphs (`cond`, `while_loop`;
    /// at most 10,000: the stack is sized for it).
    #[arg(long, global = true, value_name = "N", default_value_t = wrapir::Limits::default().max_subgraph_depth)]
    max_subgraph_depth: usize,
    /// Most iterations one `while_loop` may run.
    #[arg(long, global = true, value_name = "N", default_value_t = wrapir::Limits::default().loop_fuel)]
    loop_fuel: u64,
    /// Most diagnostics one validation reports (the rest are counted).
    #[arg(long, global = true, value_name = "N", default_value_t = wrapir::Limits::default().max_diagnostics)]
    max_diagnostics: usize,
    /// Most outputs of one multi-output value (`get` indices below it).
    #[arg(long, global = true, value_name = "N", default_value_t = wrapir::Limits::default().max_outputs)]
    max_outputs: usize,
    /// Most subgraph bodies the C++ lowerings may inline (one per line that runs a subgraph, nested).
    #[arg(long, global = true, value_name = "N", default_value_t = wrapir::Limits::default().max_inlined_subgraphs)]
    max_inlined_subgraphs: usize,
    /// Most bytes one file read may hold (programs, stdin, bundle files, safetensors, kernel images, packages).
    #[arg(long, global = true, value_name = "BYTES", default_value_t = wrapir::Limits::default().max_file_bytes)]
    max_file_bytes: u64,
}

impl LimitArgs {
    /// The limits: memory defaults to the host's physical memory (never more),
    /// the prover's limits come from `WRAPIR_PROVE_*`.
    fn limits(&self) -> wrapir::Limits {
        let physical = physical_memory().unwrap_or(wrapir::Limits::DEFAULT_MEMORY_BYTES);
        wrapir::Limits {
            max_alloc_bytes: self.max_alloc_bytes.unwrap_or(physical),
            max_run_bytes: self.max_run_bytes.unwrap_or(physical),
            max_text_depth: self.max_depth,
            max_subgraph_depth: self.max_subgraph_depth,
            loop_fuel: self.loop_fuel,
            max_diagnostics: self.max_diagnostics,
            max_outputs: self.max_outputs,
            max_inlined_subgraphs: self.max_inlined_subgraphs,
            max_file_bytes: self.max_file_bytes,
            prover: prover_limits_from_env(),
        }
    }
}

/// The prover's default limits, overridden by `WRAPIR_PROVE_NODE_LIMIT`,
/// `WRAPIR_PROVE_ITER_LIMIT` and `WRAPIR_PROVE_TIME_LIMIT_MS` when set to a
/// number (other values are ignored).
fn prover_limits_from_env() -> wrapir::sym::egraph::Limits {
    let num = |k: &str| std::env::var(k).ok().and_then(|v| v.trim().parse::<u64>().ok());
    let mut l = wrapir::sym::egraph::Limits::default();
    if let Some(v) = num("WRAPIR_PROVE_NODE_LIMIT") {
        l.node_limit = usize::try_from(v).unwrap_or(usize::MAX);
    }
    if let Some(v) = num("WRAPIR_PROVE_ITER_LIMIT") {
        l.iter_limit = usize::try_from(v).unwrap_or(usize::MAX);
    }
    if let Some(v) = num("WRAPIR_PROVE_TIME_LIMIT_MS") {
        l.time_limit = std::time::Duration::from_millis(v);
    }
    l
}

/// `MemTotal` of `/proc/meminfo`, in bytes.
fn physical_memory() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

/// The limits of this invocation (set once in `main`).
static LIMITS: std::sync::OnceLock<wrapir::Limits> = std::sync::OnceLock::new();

fn limits() -> wrapir::Limits {
    LIMITS.get().copied().unwrap_or_default()
}

#[derive(Subcommand)]
enum Command {
    /// Lower a program to wrapper code: Python, C++, standalone C++ or FX.
    ///
    /// No `--device`: a lowering writes code, it runs nothing; the program's
    /// own devices are written into the code.
    Lower {
        /// A `.json` or `.wir` program, a bundle directory, a `.wirpkg` package, or `-` for stdin.
        program: PathBuf,
        /// The back end.
        #[arg(long, value_enum, default_value_t = Target::Python)]
        target: Target,
        /// Write here instead of stdout.
        #[arg(short, long)]
        output: Option<PathBuf>,
        /// With `--target cpp-standalone`: also write the runtime header the
        /// generated file includes (`wrapir_runtime.h`) to this file.
        #[arg(long, value_name = "FILE")]
        runtime_header: Option<PathBuf>,
        /// With `--target cpp-standalone`: write a buildable CMake project
        /// into this directory instead (the wrapper, the runtime header, a
        /// `main.cpp` that runs it on a safetensors file of inputs, the
        /// program, its kernels, and the runtime library when it lies next
        /// to this binary); see the README's "Standalone C++ package". It is
        /// built beside DIR and renamed to DIR when complete; DIR may be
        /// absent, empty or an earlier package (replaced).
        #[arg(long, value_name = "DIR")]
        package: Option<PathBuf>,
        /// Lower the program exactly as given, without the run-time guards
        /// (`RuntimeAssert`s) that launch reconciliation adds for facts it
        /// could not prove (see `wrapir check`). A launch whose reconciliation
        /// fails is an error unless this is given.
        #[arg(long)]
        no_guards: bool,
    },
    /// Show what a bundle, package or program holds: inputs, outputs, kernels, ops, weights, versions.
    ///
    /// Inputs and outputs with the user's names where `bundle.json` records
    /// them (the exporter does), dtypes and shapes; the symbols with their
    /// kinds, ranges and hints; the kernels by kind and the device that runs
    /// each; every extern op once with its calls and the devices that run it
    /// (as `wrapir ops` lists them); the weights' size; the program and
    /// package format versions and the PyTorch and Triton versions that
    /// compiled it. No `--device`: it describes every device.
    Info {
        /// A `.json` or `.wir` program, a bundle directory, a `.wirpkg` package, or `-` for stdin.
        program: PathBuf,
    },
    /// Print a program in the canonical text form (or JSON).
    ///
    /// No `--device`: printing runs nothing.
    Print {
        /// A `.json` or `.wir` program, a bundle directory, a `.wirpkg` package, or `-` for stdin.
        program: PathBuf,
        /// Print JSON instead of the text form.
        #[arg(long)]
        json: bool,
    },
    /// Validate a program and prove its Triton launches and each lowering's launches.
    ///
    /// Validates the program, reconciles every Triton launch with its kernel,
    /// and proves the launches each lowering emits (Python, C++ in both
    /// dialects, FX) equal to the reconciled ones.
    ///
    /// Prints one line per launch (`proven`, `guarded` with the run-time checks
    /// it needs, or `failed`), then per lowering whether its emitted launch was
    /// proven, and totals; exits 1 when the program is invalid, any launch
    /// failed, or a lowering could not report its launches.
    Check {
        /// A `.json` or `.wir` program, a bundle directory, a `.wirpkg` package, or `-` for stdin.
        program: PathBuf,
        /// Print the proof of each equality and the counterexample of each disproof.
        #[arg(long)]
        explain: bool,
        /// Do not check any lowering's launches (validation and reconciliation only).
        #[arg(long)]
        no_translation: bool,
        /// The lowerings whose launches are checked (comma-separated; default all).
        #[arg(long, value_enum, value_delimiter = ',')]
        lowering: Vec<Target>,
        /// Also list every extern op call (main graph and subgraphs) and every
        /// kernel this backend cannot run, by graph and line; exits 1 when
        /// there is one. For cpu, a kernel it cannot run is a Triton (GPU) or
        /// CUDA C kernel (the host runs C++ and Halide kernels). For cuda, also every kernel whose image cannot load: absent from
        /// the bundle, not a cubin or PTX, truncated, no image at all, or
        /// compiled for another GPU architecture than `--arch` (else, in a
        /// build with the `cuda` feature, the GPU present). No `meta`: the
        /// meta backend runs every op and kernel on shapes alone.
        #[arg(long, value_enum)]
        device: Option<CheckDevice>,
        /// With `--device cuda`: the GPU architecture the kernel images must
        /// run on (`sm_90`, `90` or `9.0`), instead of the GPU present.
        #[arg(long, value_name = "SM", value_parser = kernels::parse_arch)]
        arch: Option<u32>,
        /// With `--device cuda`: accept the ops the host fallback runs (as
        /// `run --device cuda --allow-host-fallback` would), listing them.
        #[arg(long)]
        allow_host_fallback: bool,
        /// Print the dependency DAG of the main graph's nodes (each edge
        /// with its reason, the critical path and width) instead of
        /// checking the launches.
        #[arg(long)]
        dag: bool,
    },
    /// List the extern ops each backend runs.
    ///
    /// One per line: for cuda the op key, what runs it (cuBLAS, cuBLASLt, cuDNN or a built-in kernel) and
    /// its dtypes; for cpu the host op registry; meta runs every op on
    /// shapes only. Without `--device`, every backend, grouped. With `--all`,
    /// every op Inductor can leave as an extern call and what cpu and cuda
    /// do with it (implemented, and how, or refused, and why).
    Ops {
        /// Only this backend.
        #[arg(long, value_enum)]
        device: Option<RunDevice>,
        /// Print the cuda table as the README's Markdown table (with
        /// `--all`: the coverage table as docs/OPS.md).
        #[arg(long)]
        markdown: bool,
        /// Every op Inductor 2.11 and 2.15 can leave as an extern call, with
        /// each backend's status.
        #[arg(long, conflicts_with = "device")]
        all: bool,
    },
    /// Run a program on the meta, cpu or cuda backend and compare with its references.
    ///
    /// meta runs shapes only, cpu on the host, cuda on the GPU. Prints each output's layout (and values with `--print`), the symbols
    /// bound during the run, and the peak memory (meta). With `--expect`
    /// (cpu, cuda), compares the tensor outputs in order with the tensors of a
    /// safetensors file, in file order (the `graph_out<k>` tensors when the file
    /// has any, as bundles store them); exits 1 on a mismatch, 2 on errors.
    /// Default tolerances are those of `torch.testing.assert_close`:
    /// |got - expected| <= atol + rtol * |expected| with (rtol, atol) f64
    /// (1e-7, 1e-7), f32 (1.3e-6, 1e-5), f16 (1e-3, 1e-5), bf16 (1.6e-2, 1e-5);
    /// NaN matches NaN; integers and booleans must be equal; a bundle's
    /// `bundle.json` tolerance replaces the defaults for all floating dtypes.
    ///
    /// A bundle run is compared with two references, each reported with the
    /// largest absolute and relative error of every output: eager PyTorch's
    /// outputs (`expected.safetensors`, within `bundle.json`'s `tolerance`)
    /// and Inductor's compiled outputs (`compiled.safetensors`, within
    /// `compiled_tolerance`; reported as absent when the bundle has none).
    /// The run fails (exit 1) when either comparison fails.
    Run(RunArgs),
    /// Compare outputs another runner wrote with a bundle's references.
    ///
    /// The outputs are those of a standalone package's `main`: `out<i>` for
    /// program output `i`, sizes as 0-d integer tensors. They are compared as
    /// `run --device cuda` compares its own (eager within `tolerance`,
    /// Inductor's within `compiled_tolerance`). Exits 1 when a comparison
    /// fails. No `--device`: the outputs were computed elsewhere.
    Compare {
        /// A bundle directory or `.wirpkg` package.
        bundle: PathBuf,
        /// The outputs (safetensors).
        outputs: PathBuf,
        /// Relative tolerance for floating outputs (overrides the defaults).
        #[arg(long)]
        rtol: Option<f64>,
        /// Absolute tolerance for floating outputs (overrides the defaults).
        #[arg(long)]
        atol: Option<f64>,
    },
    /// Write a bundle as one `.wirpkg` package file.
    ///
    /// The package holds the program, kernel images, inputs (weights included), eager and compiled outputs and
    /// `bundle.json`, with a table of contents recording the PyTorch and
    /// Triton versions, the tolerances and the cubins' GPU architectures.
    /// Every command takes the package where it takes the bundle. No
    /// `--device`: packing runs nothing (except `--cudnn-plans`, on CUDA device 0).
    Pack {
        /// A bundle directory (or a package, or a program file).
        bundle: PathBuf,
        /// The package to write (replaced if it exists).
        #[arg(short, long, value_name = "FILE")]
        output: PathBuf,
        /// Also carry the model's cuDNN convolution plans for this machine's
        /// GPU: the model is loaded and run once on CUDA device 0, and the
        /// plans whose engines compile kernels at run time are stored, so
        /// that a process on the same GPU model, cuDNN and driver restores
        /// them instead of compiling (a different GPU or version makes them
        /// as usual). Needs a build with the `cuda` feature.
        #[arg(long)]
        cudnn_plans: bool,
    },
    /// Prove equalities of symbolic size expressions.
    ///
    /// No `--device`: the prover works on expressions alone.
    Sym {
        #[command(subcommand)]
        command: SymCommand,
    },
    /// Time a bundle on the GPU.
    ///
    /// Times the interpreter, the prepared direct launch path and (with `--graphs`) CUDA graph replay, next to the raw launch
    /// floor measured in the same process (an empty kernel launched as many
    /// times as the bundle launches kernels, and one graph of those launches).
    ///
    /// Prints host µs per call and per kernel (median of repeats after
    /// warm-up), whether graph outputs equal direct outputs bit for bit, the
    /// device memory of each path, and a last `bench-json` line.
    Bench {
        /// A bundle directory or a `.wirpkg` package (with inputs and kernel images).
        bundle: PathBuf,
        /// The device: only `cuda` (or its alias `gpu`); the timed paths
        /// (prepared launches, CUDA graphs) exist on the GPU alone.
        #[arg(long, default_value = "cuda")]
        device: String,
        /// Also time CUDA graph replay.
        #[arg(long)]
        graphs: bool,
        /// Calls per repeat.
        #[arg(long, default_value_t = 200)]
        iters: usize,
        /// Timed repeats (the median is reported).
        #[arg(long, default_value_t = 11)]
        repeats: usize,
        /// Load cuBLAS and compile the built-in kernels at their first use
        /// instead of in the background during start-up.
        #[arg(long)]
        no_preload: bool,
        /// How graph replay treats a recording's device reads: `one-graph`
        /// (checked on the device under conditional nodes), `segments` (host
        /// reads between segment graphs) or `auto` (one graph from 3 reads).
        #[arg(long, default_value = "auto")]
        graph_reads: wrapir::runtime::cuda::GraphReads,
        /// How graph replay orders the operations: `single` (one chain, as
        /// the program lists them), `concurrent` (by the program's
        /// dependency DAG, independent kernels at once; `check --dag` prints it)
        /// or `auto` (each graph segment both ways, timed, the faster kept;
        /// the serving API's default).
        #[arg(long, default_value = "single")]
        graph_streams: wrapir::runtime::cuda::GraphStreams,
        /// With `--graph-streams concurrent` or `auto`: the most branches a
        /// graph runs at once (operations laid on at most this many chains;
        /// 1: one chain captured operation by operation; 0: as the DAG allows).
        #[arg(long, default_value_t = 0)]
        graph_branches: usize,
        /// Run the extern ops the device does not implement on the host
        /// (reported; such a bundle's timings include the copies). Without
        /// it such an op is an error naming it.
        #[arg(long)]
        allow_host_fallback: bool,
    },
}

#[derive(Subcommand)]
enum SymCommand {
    /// Prove `A == B`. Prints `proven`, `disproved` (with an assignment) or `unknown`
    /// on the first line; exits 0, 1 or 2 respectively.
    Prove {
        /// Left side, in Inductor's Python syntax (may start with `-`).
        #[arg(allow_hyphen_values = true)]
        a: String,
        /// Right side.
        #[arg(allow_hyphen_values = true)]
        b: String,
        /// A fact such as `s0 >= 1`, `u0 <= 100`, `ks0 == s0*s1` (repeatable).
        #[arg(long = "assume")]
        assume: Vec<String>,
        /// Print the proof or the counterexample's evaluation.
        #[arg(long)]
        explain: bool,
    },
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum RunDevice {
    /// Shapes, strides and dtypes only.
    Meta,
    /// Real tensors in host memory.
    Cpu,
    /// A CUDA GPU (needs wrapir built with the `cuda` feature).
    #[value(alias = "gpu")]
    Cuda,
}

/// The backends `check --device` knows the extern ops of.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum CheckDevice {
    /// The host backend's op registry.
    Cpu,
    /// The CUDA backend's device op table.
    #[value(alias = "gpu")]
    Cuda,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Target {
    /// Inductor's Python wrapper module.
    Python,
    /// Inductor's C++ wrapper (`cpp_wrapper=True`, AOTI shim style).
    Cpp,
    /// A C++17 wrapper that needs only the CUDA driver API and wrapir's runtime header.
    CppStandalone,
    /// The FX graph, printed in torch.fx's readable style.
    Fx,
}

impl From<Target> for wrapir::lower::Target {
    fn from(t: Target) -> Self {
        match t {
            Target::Python => wrapir::lower::Target::Python,
            Target::Cpp => wrapir::lower::Target::Cpp,
            Target::CppStandalone => wrapir::lower::Target::CppStandalone,
            Target::Fx => wrapir::lower::Target::Fx,
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let limits = cli.limits.limits();
    let _ = LIMITS.set(limits);
    let result = on_sized_stack(&limits, move || run(cli));
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// Runs `command` on a thread whose stack, and rayon workers' stacks, are
/// sized for the depth limits ([`wrapir::Limits::stack_bytes`]): the
/// recursive walks of a program nested as deep as the limits allow never
/// overflow it. A depth limit above its ceiling is an error naming it.
fn on_sized_stack(
    limits: &wrapir::Limits,
    command: impl FnOnce() -> Result<ExitCode> + Send + 'static,
) -> Result<ExitCode> {
    let stack = limits.stack_bytes()?;
    rayon::ThreadPoolBuilder::new()
        .stack_size(stack)
        .build_global()
        .with_context(|| format!("starting the worker threads with {stack} bytes of stack each"))?;
    let worker = std::thread::Builder::new()
        .name("wrapir".into())
        .stack_size(stack)
        .spawn(command)
        .with_context(|| format!("starting a thread with {stack} bytes of stack (for the depth limits)"))?;
    match worker.join() {
        Ok(result) => result,
        // A panic was reported by the thread's hook; end as a panic of the main thread would.
        Err(panic) => std::panic::resume_unwind(panic),
    }
}

fn run(cli: Cli) -> Result<ExitCode> {
    let Some(command) = cli.command else {
        // `arg_required_else_help`: without a verb, only `--version` gets here.
        write_output(None, &version::report())?;
        return Ok(ExitCode::SUCCESS);
    };
    match command {
        Command::Lower {
            program,
            target,
            output,
            runtime_header,
            package,
            no_guards,
        } => {
            if runtime_header.is_some() && !matches!(target, Target::CppStandalone) {
                bail!("--runtime-header needs --target cpp-standalone (only that dialect includes the runtime header)");
            }
            if package.is_some() && !matches!(target, Target::CppStandalone) {
                bail!("--package needs --target cpp-standalone (the package builds the standalone wrapper)");
            }
            if package.is_some() && (output.is_some() || runtime_header.is_some()) {
                bail!("--package writes its own files; leave out --output and --runtime-header");
            }
            let source = program;
            let bundle = open_bundle(&source)?;
            let program = if no_guards {
                Cow::Borrowed(bundle.program())
            } else {
                with_guards(&bundle)?
            };
            let info = match ir::validate_with_limits(&program, &limits()) {
                Ok(info) => info,
                Err(e) => bail!(
                    "the program is invalid; run `wrapir check` for details:\n{}",
                    diagnostics::render_validation_errors(&bundle, &e)
                ),
            };
            if let Some(dir) = package {
                package::write_package(&bundle, &source, &program, &info, &dir)?;
                return Ok(ExitCode::SUCCESS);
            }
            if target == Target::CppStandalone {
                package::warn_missing_runtime_ops(&program);
            }
            let text = wrapir::lower::Target::from(target).write_string(&info)?;
            write_output(output.as_deref(), &text)?;
            if let Some(path) = runtime_header {
                write_output(Some(&path), wrapir::lower::cpp::runtime_header())?;
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Info { program } => info::info_command(&program),
        Command::Print { program, json } => {
            let bundle = open_bundle(&program)?;
            let program = bundle.program();
            let text = if json {
                program.to_json() + "\n"
            } else {
                wrapir::text::print(program)
            };
            write_output(None, &text)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Check {
            program,
            explain,
            no_translation,
            lowering,
            device,
            arch,
            allow_host_fallback,
            dag,
        } => {
            if allow_host_fallback && device != Some(CheckDevice::Cuda) {
                bail!("--allow-host-fallback is for `--device cuda`");
            }
            if arch.is_some() && device != Some(CheckDevice::Cuda) {
                bail!("--arch is for `--device cuda`");
            }
            if wrapir::bundle::RankSet::is_rank_set(&program) {
                if explain || no_translation || !lowering.is_empty() || device.is_some() {
                    bail!("a rank set is checked as a whole; for --explain, --no-translation, --lowering or --device check one rank's directory");
                }
                return run::check_rank_set(&program);
            }
            let bundle = open_bundle(&program)?;
            let (program, name) = (bundle.program(), bundle.name());
            let info = match ir::validate_with_limits(program, &limits()) {
                Ok(info) => info,
                Err(e) => {
                    eprintln!(
                        "{name}: invalid\n{}",
                        diagnostics::render_validation_errors(&bundle, &e)
                    );
                    return Ok(ExitCode::from(1));
                }
            };
            use wrapir::reconcile::LaunchEmitter;
            let options = wrapir::reconcile::Options {
                limits: limits().prover,
                explain,
                ..Default::default()
            };
            println!("{name}: valid");
            if dag {
                return dag::print_dag(&info);
            }
            match ir::collectives::collectives(program) {
                Ok(calls) if calls.is_empty() => {}
                Ok(calls) => println!(
                    "collectives: {} well formed (arguments, result dtypes and sizes, group sizes)",
                    calls.len()
                ),
                Err(e) => {
                    println!("{name}: {e}");
                    return Ok(ExitCode::from(1));
                }
            }
            // After the launch report: the extern ops the chosen backend cannot run.
            let device_ok = || match device {
                Some(d) => {
                    let ops = check_device_ops(program, d, allow_host_fallback);
                    let kernels = d != CheckDevice::Cuda || kernels::check_kernel_images(&bundle, arch);
                    ops && kernels
                }
                None => true,
            };
            if no_translation {
                let report = wrapir::reconcile::check_program(&info, &options);
                print!("{}", report.render(explain));
                let device_ok = device_ok();
                return Ok(if report.is_ok() && device_ok {
                    ExitCode::SUCCESS
                } else {
                    ExitCode::from(1)
                });
            }
            // Lowerings named with --lowering must support the program; of
            // all of them (the default), one that does not is reported only.
            let named = !lowering.is_empty();
            let selected: Vec<wrapir::lower::Target> = if lowering.is_empty() {
                wrapir::lower::Target::ALL.to_vec()
            } else {
                lowering.into_iter().map(Into::into).collect()
            };
            let mut emitters: Vec<Box<dyn LaunchEmitter>> = Vec::new();
            for t in selected {
                let e = wrapir::reconcile::emitter(t);
                if !emitters.iter().any(|x| x.name() == e.name()) {
                    emitters.push(e);
                }
            }
            let refs: Vec<&dyn LaunchEmitter> = emitters.iter().map(|e| e.as_ref()).collect();
            let report = wrapir::reconcile::check_lowerings(&info, &options, &refs);
            print!("{}", report.render(explain));
            if explain {
                // The canonical records, their proofs and counterexamples.
                print!("{}", report.base.render(true));
            }
            let device_ok = device_ok();
            let ok = if named {
                report.is_ok()
            } else {
                report.is_ok_where_supported()
            };
            // Left to the process's exit: freeing a million-line program's
            // records one by one takes most of a second.
            std::mem::forget(report);
            Ok(if ok && device_ok {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            })
        }
        Command::Ops { device, markdown, all } => {
            write_output(None, &ops::output(device, markdown, all)?)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Sym {
            command: SymCommand::Prove { a, b, assume, explain },
        } => sym_prove(&a, &b, &assume, explain),
        Command::Run(args) => run_command(&args),
        Command::Compare {
            bundle,
            outputs,
            rtol,
            atol,
        } => run::compare_command(&bundle, &outputs, rtol, atol),
        Command::Bench {
            bundle,
            device,
            graphs,
            iters,
            repeats,
            no_preload,
            graph_reads,
            graph_streams,
            graph_branches,
            allow_host_fallback,
        } => {
            if device != "cuda" && device != "gpu" {
                bail!("`bench` times the cuda device only (prepared launches and CUDA graphs), not `{device}`; pass `--device cuda`");
            }
            let args = BenchArgs {
                graphs,
                iters,
                repeats,
                preload: !no_preload,
                graph_reads,
                graph_streams,
                graph_branches,
                allow_host_fallback,
            };
            bench_command(&bundle, &args)
        }
        Command::Pack {
            bundle,
            output,
            cudnn_plans,
        } => package::pack(&bundle, &output, cudnn_plans),
    }
}

// ---- `wrapir ops` and `wrapir check --device` ----------------------------------
/// `check --device`: prints one `error in ...` line per extern op call the
/// backend cannot run (and, with the host fallback allowed, a `note` per op
/// it would run on the host), then a summary; `false` when any cannot run.
fn check_device_ops(program: &Program, device: CheckDevice, allow_host_fallback: bool) -> bool {
    use wrapir::exec::device_ops::{cuda_support, CudaSupport};
    use wrapir::exec::uses::extern_uses;
    let host = wrapir::exec::host::HostBackend::default();
    let uses = extern_uses(program);
    let (backend, list) = match device {
        CheckDevice::Cuda => ("cuda", "wrapir ops --device cuda"),
        CheckDevice::Cpu => ("cpu", "wrapir ops --device cpu"),
    };
    let mut out = String::new();
    let mut missing = 0usize;
    let mut on_host = 0usize;
    for u in &uses {
        let key = wrapir::exec::op::op_key(&u.op);
        let keyed = ["torch.ops.", "extern_kernels."].iter().any(|p| u.op.starts_with(p));
        let op = if keyed && key != u.op {
            format!("`{key}` (`{}`)", u.op)
        } else {
            format!("`{}`", u.op)
        };
        let at = format!("graph {}, line {} `{}`", u.graph, u.line, u.text);
        match device {
            CheckDevice::Cuda => match cuda_support(&u.op, &host, allow_host_fallback) {
                CudaSupport::Device => {}
                CudaSupport::HostFallback => {
                    on_host += 1;
                    out += &format!("note in {at}: op {op} runs on the host (--allow-host-fallback)\n");
                }
                CudaSupport::Missing { fallback } => {
                    missing += 1;
                    let hint = if fallback {
                        "; --allow-host-fallback runs it on the host"
                    } else {
                        ""
                    };
                    out += &format!(
                        "error in {at}: the cuda backend cannot run op {op}: it has no device implementation (see `{list}`){hint}\n"
                    );
                }
            },
            CheckDevice::Cpu if host.has_op(&u.op) => {}
            CheckDevice::Cpu => {
                missing += 1;
                out += &format!("error in {at}: the cpu backend cannot run op {op}: it is not in the host op registry (see `{list}`)\n");
            }
        }
    }
    let calls = match uses.len() {
        1 => "1 call".to_string(),
        n => format!("{n} calls"),
    };
    out += &if missing > 0 {
        format!("{backend}: {missing} of {calls} to extern ops cannot run\n")
    } else if on_host > 0 {
        format!("{backend}: every extern op call runs ({calls}, {on_host} on the host)\n")
    } else {
        format!("{backend}: every extern op call runs ({calls})\n")
    };
    let kernels_ok = device != CheckDevice::Cpu || host_kernels_report(program, &mut out);
    print!("{out}");
    missing == 0 && kernels_ok
}

/// `check --device cpu`: one `error in ...` line per kernel call the host
/// backend cannot run (a Triton, CUDA C or embedder kernel: it runs only C++
/// and CPU Halide kernels from the bundle's images), then a summary when
/// the program calls kernels; `false` when any cannot run.
fn host_kernels_report(program: &Program, out: &mut String) -> bool {
    let uses = wrapir::exec::uses::kernel_uses(program);
    if uses.is_empty() {
        return true;
    }
    let mut refused = std::collections::BTreeMap::<&str, usize>::new();
    for u in uses.iter().filter(|u| !u.runs_on_host) {
        let backend = u.backend.unwrap_or("undefined");
        *refused.entry(backend).or_default() += 1;
        let why = match u.backend {
            Some("triton") => "a Triton kernel runs on the GPU (--device cuda)",
            Some("cuda_c") => "a CUDA C kernel runs on the GPU",
            Some("host") => "an embedder's host kernel must be registered from Rust (HostBackend::register_kernel)",
            Some(_) => "a GPU Halide pipeline runs on the GPU",
            None => "the program does not define it",
        };
        *out += &format!(
            "error in graph {}, line {} `{}`: the cpu backend cannot run kernel `{}`: {why}\n",
            u.graph, u.line, u.text, u.kernel
        );
    }
    // C++ kernels compiled for a vector ISA this CPU lacks: refused when loaded.
    for def in program.kernels.values() {
        if let wrapir::ir::KernelBackend::Cpp(wrapir::ir::CppMeta { isa: Some(isa), .. }) = &def.backend {
            let n = uses.iter().filter(|u| u.kernel == def.name.as_str()).count();
            if let (Err(why), true) = (wrapir::exec::host::kernels::isa::check_isa(*isa), n > 0) {
                *refused.entry("cpp (vector ISA)").or_default() += n;
                *out += &format!(
                    "error: the cpu backend cannot load kernel `{}` ({}): {why}\n",
                    def.name.as_str(),
                    wrapir::exec::host::kernels::image_path(def.name.as_str())
                );
            }
        }
    }
    let calls = uses.len();
    let failed: usize = refused.values().sum();
    *out += &if failed == 0 {
        format!("cpu: every kernel call runs ({calls} of C++ and Halide kernels, from the bundle's images)\n")
    } else {
        let kinds: Vec<String> = refused.iter().map(|(k, n)| format!("{n} {k}")).collect();
        let hint = if refused.contains_key("triton") {
            "; run it with --device cuda"
        } else {
            ""
        };
        format!(
            "cpu: {failed} of {calls} kernel calls cannot run ({}){hint}\n",
            kinds.join(", ")
        )
    };
    failed == 0
}

/// Reconciles every Triton launch and inserts the run-time guards it needs;
/// a launch that cannot be reconciled is an error.
/// [`wrapir::reconcile::guarded`] within this invocation's limits, on
/// `bundle`'s program; validation errors point at its file.
/// The bundle's program with the run-time guards its launches need
/// (`reconcile::guarded`'s policy), copied only when some launch needs one.
fn with_guards(bundle: &Bundle) -> Result<Cow<'_, Program>> {
    use wrapir::reconcile::GuardError;
    let options = wrapir::reconcile::Options {
        limits: limits().prover,
        ..Default::default()
    };
    let report = wrapir::reconcile::reconciled(bundle.program(), &limits(), &options).map_err(|e| match e {
        GuardError::Invalid(e) => anyhow::anyhow!(
            "the program is invalid; run `wrapir check` for details:\n{}",
            diagnostics::render_validation_errors(bundle, &e)
        ),
        GuardError::Reconcile(report) => {
            anyhow::anyhow!("launch reconciliation failed; run `wrapir check` for details:\n{report}")
        }
    })?;
    if !wrapir::reconcile::needs_guards(&report) {
        return Ok(Cow::Borrowed(bundle.program()));
    }
    let mut program = bundle.program().clone();
    wrapir::reconcile::insert_guards_in(&mut program, &report);
    Ok(Cow::Owned(program))
}

fn sym_prove(a: &str, b: &str, assume: &[String], explain: bool) -> Result<ExitCode> {
    use wrapir::sym::Outcome;
    let (outcome, text) = wrapir::sym::egraph::prove_text_with(a, b, assume, explain, &limits().prover)?;
    print!("{text}");
    Ok(match outcome {
        Outcome::Proven(_) => ExitCode::SUCCESS,
        Outcome::Disproved(_) => ExitCode::from(1),
        Outcome::Unknown(_) => ExitCode::from(2),
    })
}

/// Opens a program file, bundle directory or package ([`Bundle::open`]), or
/// program text from stdin (`-`), within this invocation's limits. Parse
/// errors are rendered with the offending source line.
fn open_bundle(path: &Path) -> Result<Bundle> {
    let opened = if path.as_os_str() == "-" {
        let stdin = Path::new("<stdin>");
        let bytes = wrapir::limits::files::read_capped(std::io::stdin().lock(), stdin, limits().max_file_bytes)?;
        let s = String::from_utf8(bytes).context("reading stdin: not UTF-8 text")?;
        Bundle::from_text("<stdin>", s, &limits())
    } else {
        Bundle::open_with_limits(path, &limits())
    };
    let bundle = opened.map_err(render_bundle_error)?;
    if bundle.package_verified() == Some(false) {
        eprintln!(
            "note: {} is a version-1 package, which records no checksums: its entries are used unverified \
             (`wrapir pack {} -o NEW.wirpkg` writes it with them)",
            path.display(),
            path.display()
        );
    }
    Ok(bundle)
}

/// A bundle error for the terminal: a parse error shows the source line.
fn render_bundle_error(e: BundleError) -> anyhow::Error {
    let BundleError::Parse { name, text, error: e } = e else {
        return anyhow::Error::new(e);
    };
    // The graphical renderer cannot show a line this long (nor should it):
    // name the place without the snippet.
    let line_len = text.split('\n').nth(e.line.saturating_sub(1)).map_or(0, str::len);
    if e.column > MAX_SNIPPET_COLUMNS || line_len > MAX_SNIPPET_COLUMNS {
        return anyhow::anyhow!(
            "cannot parse {name} (line {}, column {}): {}",
            e.line,
            e.column,
            e.message
        );
    }
    let offset = byte_offset(&text, e.line, e.column);
    let report = miette!(labels = vec![LabeledSpan::at_offset(offset, "here")], "{}", e.message)
        .with_source_code(NamedSource::new(name.clone(), text.to_string()));
    anyhow::anyhow!(
        "cannot parse {name} (line {}, column {}):\n{report:?}",
        e.line,
        e.column
    )
}

/// The tensors of a safetensors file given on the command line (mapped).
fn read_tensors(path: &Path) -> Result<indexmap::IndexMap<String, wrapir::exec::Tensor>> {
    Ok(wrapir::bundle::read_safetensors(path, &limits())?.tensors)
}

/// Longest source line a parse error is shown with (miette's renderer handles
/// at most 65,535 columns).
const MAX_SNIPPET_COLUMNS: usize = 4096;

fn byte_offset(text: &str, line: usize, column: usize) -> usize {
    let mut offset = 0;
    for (i, l) in text.split_inclusive('\n').enumerate() {
        if i + 1 == line {
            let col_bytes: usize = l.chars().take(column.saturating_sub(1)).map(char::len_utf8).sum();
            return offset + col_bytes.min(l.len());
        }
        offset += l.len();
    }
    text.len()
}

fn write_output(path: Option<&Path>, text: &str) -> Result<()> {
    match path {
        Some(p) => std::fs::write(p, text).with_context(|| format!("writing {}", p.display())),
        None => {
            let mut out = std::io::stdout().lock();
            out.write_all(text.as_bytes()).context("writing stdout")
        }
    }
}

//! The `wrapir` command-line tool: a thin shell over the library.

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand, ValueEnum};
use miette::{miette, LabeledSpan, NamedSource};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use wrapir::ir::{self, Program};

#[path = "wrapir/bench.rs"]
mod bench;
use bench::{bench_cuda, BenchOptions};

#[derive(Parser)]
#[command(
    name = "wrapir",
    version,
    about = "PyTorch Inductor wrapper code as typed data: validate, lower, prove"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    #[command(flatten)]
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
    /// Deepest nesting of the text form: list arguments, `device` blocks.
    #[arg(long, global = true, value_name = "N", default_value_t = wrapir::Limits::default().max_text_depth)]
    max_depth: usize,
    /// Longest chain of subgraphs calling subgraphs (`cond`, `while_loop`).
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
            ..wrapir::Limits::from_env()
        }
    }
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
    /// Lower a program to wrapper code.
    Lower {
        /// A `.json` or `.wir` program, a bundle directory (its `program.json`), or `-` for stdin.
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
        /// Lower the program exactly as given, without the run-time guards
        /// (`RuntimeAssert`s) that launch reconciliation adds for facts it
        /// could not prove (see `wrapir check`). A launch whose reconciliation
        /// fails is an error unless this is given.
        #[arg(long)]
        no_guards: bool,
    },
    /// Print a program in the canonical text form (or JSON).
    Print {
        /// A `.json` or `.wir` program, a bundle directory (its `program.json`), or `-` for stdin.
        program: PathBuf,
        /// Print JSON instead of the text form.
        #[arg(long)]
        json: bool,
    },
    /// Validate a program, reconcile every Triton launch with its kernel, and
    /// prove the launches each lowering emits (Python, C++ in both dialects,
    /// FX) equal to the reconciled ones.
    ///
    /// Prints one line per launch (`proven`, `guarded` with the run-time checks
    /// it needs, or `failed`), then per lowering whether its emitted launch was
    /// proven, and totals; exits 1 when the program is invalid, any launch
    /// failed, or a lowering could not report its launches.
    Check {
        /// A `.json` or `.wir` program, a bundle directory (its `program.json`), or `-` for stdin.
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
        /// Also list every extern op call (main graph and subgraphs) that this
        /// backend cannot run, by graph and line; exits 1 when there is one.
        /// Kernels are not checked.
        #[arg(long, value_enum)]
        device: Option<CheckDevice>,
        /// With `--device cuda`: accept the ops the host fallback runs (as
        /// `run --device cuda --allow-host-fallback` would), listing them.
        #[arg(long)]
        allow_host_fallback: bool,
    },
    /// List the extern ops each backend runs, one per line: for cuda the op
    /// key, what runs it (cuBLAS, cuBLASLt, cuDNN or a built-in kernel) and
    /// its dtypes; for cpu the host op registry; meta runs every op on
    /// shapes only. Without `--device`, every backend, grouped.
    Ops {
        /// Only this backend.
        #[arg(long, value_enum)]
        device: Option<RunDevice>,
        /// Print the cuda table as the README's Markdown table.
        #[arg(long)]
        markdown: bool,
    },
    /// Run a program on the meta (shapes only), cpu (host) or cuda (GPU) backend.
    ///
    /// Prints each output's layout (and values with `--print`), the symbols
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
    Run {
        /// A `.json` or `.wir` program, `-` for stdin, or a bundle directory
        /// (its `program.json`; inputs and expected outputs default to its
        /// `inputs.safetensors` and, on cpu and cuda, `expected.safetensors`).
        program: PathBuf,
        /// The backend.
        #[arg(long, value_enum, default_value_t = RunDevice::Meta)]
        device: RunDevice,
        /// Inputs by graph input name (symbol inputs as 0-d integer tensors).
        /// On meta, only their sizes are used, as hints.
        #[arg(long)]
        inputs: Option<PathBuf>,
        /// Expected outputs (cpu, cuda).
        #[arg(long)]
        expect: Option<PathBuf>,
        /// A symbol value such as `u0=7` (repeatable): backed symbols of the
        /// meta inputs, and unbacked symbols on meta.
        #[arg(long = "hint", value_name = "SYMBOL=VALUE")]
        hints: Vec<String>,
        /// Meta: the values of data-dependent `cond`/`while_loop` predicates, read
        /// in turn, the last one repeating (`true,true,false`: a loop runs twice).
        #[arg(long, value_delimiter = ',')]
        predicate: Vec<bool>,
        /// Print output values (cpu, cuda).
        #[arg(long)]
        print: bool,
        /// Relative tolerance for floating outputs (overrides the defaults).
        #[arg(long)]
        rtol: Option<f64>,
        /// Absolute tolerance for floating outputs (overrides the defaults).
        #[arg(long)]
        atol: Option<f64>,
        /// cuda: run the extern ops the device does not implement on the
        /// host (copying through host memory), reporting each one. Without
        /// it such an op is an error naming it.
        #[arg(long)]
        allow_host_fallback: bool,
    },
    /// Symbolic size expressions.
    Sym {
        #[command(subcommand)]
        command: SymCommand,
    },
    /// Time a bundle on the GPU: the interpreter, the prepared direct launch
    /// path and (with `--graphs`) CUDA graph replay, next to the raw launch
    /// floor measured in the same process (an empty kernel launched as many
    /// times as the bundle launches kernels, and one graph of those launches).
    ///
    /// Prints host µs per call and per kernel (median of repeats after
    /// warm-up), whether graph outputs equal direct outputs bit for bit, the
    /// device memory of each path, and a last `bench-json` line.
    Bench {
        /// A bundle directory (`program.json`, `inputs.safetensors`, `kernels/`).
        bundle: PathBuf,
        /// The device (only `cuda`).
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
    Cuda,
}

/// The backends `check --device` knows the extern ops of.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum CheckDevice {
    /// The host backend's op registry.
    Cpu,
    /// The CUDA backend's device op table.
    Cuda,
}

#[derive(Clone, Copy, ValueEnum)]
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

fn main() -> ExitCode {
    let cli = Cli::parse();
    let _ = LIMITS.set(cli.limits.limits());
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn run(cli: Cli) -> Result<ExitCode> {
    match cli.command {
        Command::Lower {
            program,
            target,
            output,
            runtime_header,
            no_guards,
        } => {
            if runtime_header.is_some() && !matches!(target, Target::CppStandalone) {
                bail!("--runtime-header needs --target cpp-standalone (only that dialect includes the runtime header)");
            }
            let (program, _) = load(&program)?;
            let program = if no_guards { program } else { with_guards(program)? };
            let info = match ir::validate_with_limits(&program, &limits()) {
                Ok(info) => info,
                Err(e) => bail!("the program is invalid; run `wrapir check` for details:\n{e}"),
            };
            let text = match target {
                Target::Python => wrapir::lower::python::write_string(&info, &Default::default())?,
                Target::Cpp => cpp(&info, wrapir::lower::cpp::Dialect::Aoti)?,
                Target::CppStandalone => cpp(&info, wrapir::lower::cpp::Dialect::Standalone)?,
                Target::Fx => wrapir::lower::fx::write_string(&info, &Default::default())?,
            };
            write_output(output.as_deref(), &text)?;
            if let Some(path) = runtime_header {
                write_output(Some(&path), wrapir::lower::cpp::runtime_header())?;
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Print { program, json } => {
            let (program, _) = load(&program)?;
            let text = if json {
                program.to_json() + "\n"
            } else {
                wrapir::text::print(&program)
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
            allow_host_fallback,
        } => {
            if allow_host_fallback && device != Some(CheckDevice::Cuda) {
                bail!("--allow-host-fallback is for `--device cuda`");
            }
            let (program, name) = load(&program)?;
            let info = match ir::validate_with_limits(&program, &limits()) {
                Ok(info) => info,
                Err(e) => {
                    eprintln!("{name}: invalid\n{e}");
                    return Ok(ExitCode::from(1));
                }
            };
            use wrapir::reconcile::{CppLaunches, FxLaunches, LaunchEmitter, PythonLaunches};
            let options = wrapir::reconcile::Options::default();
            println!("{name}: valid");
            // After the launch report: the extern ops the chosen backend cannot run.
            let device_ok = || match device {
                Some(d) => check_device_ops(&program, d, allow_host_fallback),
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
            let selected = if lowering.is_empty() {
                vec![Target::Python, Target::Cpp, Target::CppStandalone, Target::Fx]
            } else {
                lowering
            };
            let mut emitters: Vec<Box<dyn LaunchEmitter>> = Vec::new();
            for t in selected {
                let e: Box<dyn LaunchEmitter> = match t {
                    Target::Python => Box::new(PythonLaunches::default()),
                    Target::Cpp => Box::new(CppLaunches {
                        dialect: wrapir::lower::cpp::Dialect::Aoti,
                    }),
                    Target::CppStandalone => Box::new(CppLaunches {
                        dialect: wrapir::lower::cpp::Dialect::Standalone,
                    }),
                    Target::Fx => Box::new(FxLaunches::default()),
                };
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
            Ok(if report.is_ok() && device_ok {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            })
        }
        Command::Ops { device, markdown } => {
            if markdown {
                if !matches!(device, None | Some(RunDevice::Cuda)) {
                    bail!("--markdown prints the cuda table; leave out --device or give `--device cuda`");
                }
                write_output(None, &wrapir::exec::device_ops::markdown_table())?;
            } else {
                write_output(None, &ops_listing(device))?;
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Sym {
            command: SymCommand::Prove { a, b, assume, explain },
        } => sym_prove(&a, &b, &assume, explain),
        Command::Run {
            program,
            device,
            inputs,
            expect,
            hints,
            predicate,
            print,
            rtol,
            atol,
            allow_host_fallback,
        } => {
            let args = RunArgs {
                program,
                device,
                inputs,
                expect,
                hints,
                predicate,
                print,
                rtol,
                atol,
                allow_host_fallback,
            };
            run_command(&args)
        }
        Command::Bench {
            bundle,
            device,
            graphs,
            iters,
            repeats,
            no_preload,
            allow_host_fallback,
        } => {
            if device != "cuda" {
                bail!("`bench` times the cuda device only, not `{device}`");
            }
            let options = BenchOptions {
                graphs,
                iters: iters.max(1),
                repeats: repeats.max(1),
                preload: !no_preload,
                allow_host_fallback,
            };
            bench_cuda(&bundle, &options)
        }
    }
}

// ---- `wrapir ops` and `wrapir check --device` ----------------------------------

/// Whether the host backend's registry has `op`, as its `call_extern` looks
/// ops up: by the op string, then by its key.
fn host_runs(host_ops: &[String], op: &str) -> bool {
    let key = wrapir::exec::host::op_key(op);
    host_ops.iter().any(|o| o == op || *o == key)
}

/// `check --device`: prints one `error in ...` line per extern op call the
/// backend cannot run (and, with the host fallback allowed, a `note` per op
/// it would run on the host), then a summary; `false` when any cannot run.
fn check_device_ops(program: &Program, device: CheckDevice, allow_host_fallback: bool) -> bool {
    use wrapir::exec::device_ops::{extern_uses, runs_on_cuda};
    let host_ops = wrapir::exec::host::HostBackend::default().op_names();
    let uses = extern_uses(program);
    let (backend, list) = match device {
        CheckDevice::Cuda => ("cuda", "wrapir ops --device cuda"),
        CheckDevice::Cpu => ("cpu", "wrapir ops --device cpu"),
    };
    let mut out = String::new();
    let mut missing = 0usize;
    let mut on_host = 0usize;
    for u in &uses {
        let key = wrapir::exec::host::op_key(&u.op);
        let keyed = ["torch.ops.", "extern_kernels."].iter().any(|p| u.op.starts_with(p));
        let op = if keyed && key != u.op {
            format!("`{key}` (`{}`)", u.op)
        } else {
            format!("`{}`", u.op)
        };
        let at = format!("graph {}, line {} `{}`", u.graph, u.line, u.text);
        match device {
            CheckDevice::Cuda if runs_on_cuda(&u.op) => {}
            CheckDevice::Cuda if allow_host_fallback && host_runs(&host_ops, &u.op) => {
                on_host += 1;
                out += &format!("note in {at}: op {op} runs on the host (--allow-host-fallback)\n");
            }
            CheckDevice::Cuda => {
                missing += 1;
                let hint = if host_runs(&host_ops, &u.op) {
                    "; --allow-host-fallback runs it on the host"
                } else {
                    ""
                };
                out += &format!(
                    "error in {at}: the cuda backend cannot run op {op}: it has no device implementation (see `{list}`){hint}\n"
                );
            }
            CheckDevice::Cpu if host_runs(&host_ops, &u.op) => {}
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
    print!("{out}");
    missing == 0
}

/// `wrapir ops`: the extern ops of one backend (`Some`), one per line, or of
/// every backend, grouped under a header each (`None`).
fn ops_listing(device: Option<RunDevice>) -> String {
    let cuda = || {
        let rows = wrapir::exec::device_ops::CUDA_OPS;
        let w_op = rows.iter().map(|r| r.op.len()).max().unwrap_or(0);
        let w_via = rows.iter().map(|r| r.via.len()).max().unwrap_or(0);
        rows.iter()
            .map(|r| format!("{:<w_op$}  {:<w_via$}  {}", r.op, r.via, r.dtypes))
            .collect::<Vec<_>>()
    };
    let cpu = || wrapir::exec::host::HostBackend::default().op_names();
    let meta = || {
        vec![
            "every extern op, shapes only: a result takes its declared layout, an `out=` or in-place op writes \
nothing, an op with no declared result gives an opaque value"
                .to_string(),
        ]
    };
    let lines = |v: Vec<String>, indent: &str| v.iter().map(|l| format!("{indent}{l}\n")).collect::<String>();
    match device {
        Some(RunDevice::Cuda) => lines(cuda(), ""),
        Some(RunDevice::Cpu) => lines(cpu(), ""),
        Some(RunDevice::Meta) => lines(meta(), ""),
        None => format!(
            "cuda (on the device; any other op is an error unless --allow-host-fallback runs it on the host):\n{}\
             cpu (the host op registry):\n{}\
             meta:\n{}",
            lines(cuda(), "  "),
            lines(cpu(), "  "),
            lines(meta(), "  ")
        ),
    }
}

/// Reconciles every Triton launch and inserts the run-time guards it needs;
/// a launch that cannot be reconciled is an error.
fn with_guards(program: Program) -> Result<Program> {
    let info = match ir::validate_with_limits(&program, &limits()) {
        Ok(info) => info,
        Err(e) => bail!("the program is invalid; run `wrapir check` for details:\n{e}"),
    };
    let report = wrapir::reconcile::check_program(&info, &Default::default());
    if report.totals.failed > 0 {
        bail!(
            "launch reconciliation failed; run `wrapir check` for details:\n{}",
            report.render(false)
        );
    }
    Ok(wrapir::reconcile::insert_guards(&program, &report))
}

fn cpp(info: &ir::ProgramInfo<'_>, dialect: wrapir::lower::cpp::Dialect) -> Result<String> {
    let options = wrapir::lower::cpp::Options {
        dialect,
        ..Default::default()
    };
    Ok(wrapir::lower::cpp::write_string(info, &options)?)
}

fn sym_prove(a: &str, b: &str, assume: &[String], explain: bool) -> Result<ExitCode> {
    use wrapir::sym::Outcome;
    let (outcome, text) = wrapir::sym::egraph::prove_text(a, b, assume, explain)?;
    print!("{text}");
    Ok(match outcome {
        Outcome::Proven(_) => ExitCode::SUCCESS,
        Outcome::Disproved(_) => ExitCode::from(1),
        Outcome::Unknown(_) => ExitCode::from(2),
    })
}

/// Reads a program from a `.json`/`.wir` file, a bundle directory (its
/// `program.json`) or stdin (`-`); JSON is detected by a leading `{`. Parse
/// errors are rendered with the offending source line.
fn load(path: &Path) -> Result<(Program, String)> {
    if path.is_dir() {
        return load(&path.join("program.json"));
    }
    let (text, name) = if path.as_os_str() == "-" {
        let mut s = String::new();
        std::io::stdin().read_to_string(&mut s).context("reading stdin")?;
        (s, "<stdin>".to_string())
    } else {
        let s = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        (s, path.display().to_string())
    };
    let program = if text.trim_start().starts_with('{') {
        Program::from_json(&text).with_context(|| format!("in {name}"))?
    } else {
        match wrapir::text::parse_with_limits(&text, &limits()) {
            Ok(p) => p,
            Err(e) => {
                // The graphical renderer cannot show a line this long (nor
                // should it): name the place without the snippet.
                let line_len = text.split('\n').nth(e.line.saturating_sub(1)).map_or(0, str::len);
                if e.column > MAX_SNIPPET_COLUMNS || line_len > MAX_SNIPPET_COLUMNS {
                    bail!(
                        "cannot parse {name} (line {}, column {}): {}",
                        e.line,
                        e.column,
                        e.message
                    );
                }
                let offset = byte_offset(&text, e.line, e.column);
                let report = miette!(labels = vec![LabeledSpan::at_offset(offset, "here")], "{}", e.message)
                    .with_source_code(NamedSource::new(name.clone(), text.clone()));
                bail!(
                    "cannot parse {name} (line {}, column {}):\n{report:?}",
                    e.line,
                    e.column
                );
            }
        }
    };
    Ok((program, name))
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

// ---- `wrapir run` ---------------------------------------------------------------

/// The arguments of `wrapir run`.
struct RunArgs {
    program: PathBuf,
    device: RunDevice,
    inputs: Option<PathBuf>,
    expect: Option<PathBuf>,
    hints: Vec<String>,
    predicate: Vec<bool>,
    print: bool,
    rtol: Option<f64>,
    atol: Option<f64>,
    allow_host_fallback: bool,
}

use wrapir::exec::compare::{BundleMeta, Tolerance};

/// The references a run's outputs are compared with.
struct References {
    /// Eager PyTorch's outputs (`--expect`, or a bundle's `expected.safetensors`) and their tolerance.
    eager: Option<(PathBuf, Option<Tolerance>)>,
    /// For a bundle: Inductor's compiled outputs (`compiled.safetensors`,
    /// which may be absent) and their tolerance.
    compiled: Option<(PathBuf, Option<Tolerance>)>,
    /// For a bundle: which reference tensors hold integer outputs
    /// (`bundle.json`'s `int_outputs`; `None`: integer outputs are not compared).
    int_outputs: Option<Vec<String>>,
}

/// Reads a bundle directory's `bundle.json` (the defaults when it has none):
/// the one place the CLI reads it.
fn read_bundle_meta(dir: &Path) -> Result<BundleMeta> {
    let path = dir.join(BundleMeta::FILE);
    if !path.is_file() {
        return Ok(BundleMeta::default());
    }
    let text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    BundleMeta::from_json(&text).with_context(|| format!("in {}", path.display()))
}

fn run_command(args: &RunArgs) -> Result<ExitCode> {
    let bundle = args.program.is_dir().then(|| args.program.clone());
    let (program, name) = match &bundle {
        Some(dir) => load(&dir.join("program.json"))?,
        None => load(&args.program)?,
    };
    if args.allow_host_fallback && args.device != RunDevice::Cuda {
        bail!("--allow-host-fallback is for `--device cuda` (the other devices have no fallback)");
    }
    // Run-time guards from launch reconciliation are checked like any other assert.
    let program = with_guards(program)?;
    let from_bundle = |file: &str| bundle.as_ref().map(|d| d.join(file)).filter(|p| p.is_file());
    let inputs_path = args.inputs.clone().or_else(|| from_bundle("inputs.safetensors"));
    let inputs = match &inputs_path {
        Some(p) => Some(read_safetensors(p)?),
        None => None,
    };
    let meta = match &bundle {
        Some(dir) => read_bundle_meta(dir)?,
        None => BundleMeta::default(),
    };
    // `--rtol` / `--atol` override the tolerance of both references.
    let overridden = |tolerance: Option<Tolerance>| {
        if args.rtol.is_none() && args.atol.is_none() {
            return tolerance;
        }
        let base = tolerance.unwrap_or(Tolerance { rtol: 0.0, atol: 0.0 });
        Some(Tolerance {
            rtol: args.rtol.unwrap_or(base.rtol),
            atol: args.atol.unwrap_or(base.atol),
        })
    };
    let references = References {
        eager: args
            .expect
            .clone()
            .or_else(|| from_bundle(BundleMeta::EXPECTED))
            .map(|p| (p, overridden(meta.tolerance))),
        compiled: bundle
            .as_ref()
            .map(|dir| (dir.join(BundleMeta::COMPILED), overridden(meta.compiled_tolerance))),
        int_outputs: meta.int_outputs.clone(),
    };
    let mut hints = wrapir::sym::Bindings::new();
    for h in &args.hints {
        let (s, v) = parse_hint(h)?;
        hints.insert(s, v);
    }
    match args.device {
        RunDevice::Meta => {
            if args.expect.is_some() {
                bail!("`--expect` needs `--device cpu`: meta tensors hold no values");
            }
            if let Some(inputs) = &inputs {
                for (s, v) in hints_from_inputs(&program, inputs)? {
                    hints.entry(s).or_insert(v);
                }
            }
            let mut backend = wrapir::exec::meta::MetaBackend::new().with_limits(limits());
            for (s, v) in &hints {
                backend = backend.with_hint(s.clone(), *v);
            }
            if !args.predicate.is_empty() {
                backend = backend.with_predicates(&args.predicate);
            }
            let report = wrapir::exec::meta::run_program_on(&program, &mut backend)
                .map_err(|e| anyhow::anyhow!("running {name} on meta: {e}"))?;
            let mut out = String::new();
            for (k, v) in report.outputs.iter().enumerate() {
                out += &format!("output {k}: {}\n", describe_value(v, &|t| describe_spec(t)));
            }
            out += &describe_symbols(&program, &report.symbols);
            out += &format!("peak memory: {} bytes\n", report.memory.peak_bytes);
            write_output(None, &out)?;
            Ok(ExitCode::SUCCESS)
        }
        RunDevice::Cpu => {
            if !args.predicate.is_empty() {
                bail!("`--predicate` is for `--device meta`; cpu runs read predicates from the data");
            }
            if !hints.is_empty() {
                bail!("`--hint` is for `--device meta`; cpu runs bind symbols from the inputs");
            }
            let inputs = inputs.unwrap_or_default();
            let mut backend = wrapir::exec::host::HostBackend::default().with_limits(limits());
            if let Some(state) = meta.cuda_rng {
                backend.set_cuda_rng(state);
            }
            let result = wrapir::exec::host::run_program_on(&program, &mut backend, &inputs)
                .map_err(|e| anyhow::anyhow!("running {name} on cpu: {e}"))?;
            let mut out = describe_host_outputs(&result.outputs, args.print);
            out += &describe_symbols(&program, &result.symbols);
            write_output(None, &out)?;
            compare_with_references(&result.outputs, &references)
        }
        RunDevice::Cuda => {
            if !args.predicate.is_empty() {
                bail!("`--predicate` is for `--device meta`; cuda runs read predicates from the data");
            }
            if !hints.is_empty() {
                bail!("`--hint` is for `--device meta`; cuda runs bind symbols from the inputs");
            }
            let kernel_dir = match &bundle {
                Some(dir) => dir.clone(),
                None => args.program.parent().map(Path::to_path_buf).unwrap_or_default(),
            };
            let outputs = run_cuda(args, &program, &name, kernel_dir, &meta, inputs.unwrap_or_default())?;
            let references = inductor_reference_for(references, &program, &meta);
            compare_with_references(&outputs, &references)
        }
    }
}

/// The references of a cuda run, with the comparison against Inductor's
/// outputs at the eager tolerance (when looser) where the run cannot compute
/// what Inductor computed: when an extern op runs on wrapir's own kernels
/// rather than PyTorch's library (attention). Says why on stdout.
fn inductor_reference_for(mut references: References, program: &Program, meta: &BundleMeta) -> References {
    let Some((_, Some(tight))) = references.compiled.as_ref() else {
        return references;
    };
    let tight = *tight;
    let uses = wrapir::exec::device_ops::extern_uses(program);
    let differing: std::collections::BTreeSet<String> = uses
        .iter()
        .filter(|u| wrapir::exec::device_ops::cuda_op(&u.op).is_some_and(|row| !row.same_numerics_as_pytorch()))
        .map(|u| wrapir::exec::host::op_key(&u.op))
        .collect();
    let eager = references.eager.as_ref().and_then(|(_, t)| *t).or(meta.tolerance);
    if differing.is_empty() {
        return references;
    }
    if let (Some(e), Some((_, tolerance))) = (eager, references.compiled.as_mut()) {
        let wide = Tolerance {
            rtol: tight.rtol.max(e.rtol),
            atol: tight.atol.max(e.atol),
        };
        *tolerance = Some(wide);
        let ops: Vec<&str> = differing.iter().map(String::as_str).collect();
        println!(
            "note: {} {} on wrapir's own kernels, not PyTorch's library, so the comparison with Inductor's outputs uses the eager tolerance",
            ops.join(", "),
            if ops.len() == 1 { "runs" } else { "run" },
        );
    }
    references
}

/// Compares `outputs` with each reference, printing per reference a summary
/// line and the largest errors of every output (a mismatch also goes to
/// stderr); exit 1 when any comparison fails.
fn compare_with_references(
    outputs: &[wrapir::exec::Value<wrapir::exec::Tensor>],
    references: &References,
) -> Result<ExitCode> {
    let got = wrapir::exec::compare::output_leaves(outputs);
    let mut ok = true;
    let mut out = String::new();
    let mut err = String::new();
    let refs = [("eager", &references.eager), ("inductor", &references.compiled)];
    for (what, reference) in refs {
        let Some((path, tolerance)) = reference else { continue };
        if !path.is_file() {
            out += &format!("against {what}: absent (no {})\n", path.display());
            continue;
        }
        let expected = read_safetensors(path)?;
        let comparison =
            wrapir::exec::compare::compare_leaves(&got, &expected, references.int_outputs.as_deref(), *tolerance);
        let compared = got.len() - comparison.ints_not_compared;
        let tol = match tolerance {
            Some(t) => format!("rtol {}, atol {}", t.rtol, t.atol),
            None => "dtype default tolerances".to_string(),
        };
        let failed = comparison.outputs.iter().filter(|o| o.mismatch.is_some()).count();
        out += &match comparison.count_mismatch {
            Some((n, m)) => format!(
                "against {what}: the program returned {n} {}, {m} are expected in {}\n",
                if comparison.with_ints { "outputs" } else { "tensors" },
                path.display()
            ),
            None if failed == 0 => format!("against {what}: {compared} outputs match {} ({tol})\n", path.display()),
            None => format!(
                "against {what}: {failed} of {compared} outputs differ from {} ({tol})\n",
                path.display()
            ),
        };
        if comparison.ints_not_compared > 0 {
            out += &format!(
                "  {} integer output(s) not compared: the bundle does not store integer outputs (no `int_outputs` in bundle.json; re-export it)\n",
                comparison.ints_not_compared
            );
        }
        for o in &comparison.outputs {
            let errors = match (o.int, o.max_abs, o.max_rel) {
                (Some(v), _, _) => format!("integer {v}"),
                (None, Some(a), Some(r)) => {
                    format!("max abs error {}, max rel error {}", error_text(a), error_text(r))
                }
                _ => "errors not measured".to_string(),
            };
            let verdict = match &o.mismatch {
                None => "match".to_string(),
                Some(m) => format!("MISMATCH: {m}"),
            };
            out += &format!("  output {} (`{}`): {errors}; {verdict}\n", o.index, o.name);
        }
        if let Some(message) = comparison.first_error() {
            ok = false;
            err += &format!("mismatch against {} ({what}): {message}\n", path.display());
        }
    }
    write_output(None, &out)?;
    eprint!("{err}");
    Ok(if ok { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

/// An error magnitude for reports: `0`, or three significant digits.
fn error_text(x: f64) -> String {
    if x == 0.0 {
        "0".to_string()
    } else if x.is_finite() {
        format!("{x:.3e}")
    } else {
        format!("{x}")
    }
}

/// Explains a cuda run's error when an op had no device implementation and
/// the host fallback was off: names the op and `--allow-host-fallback`.
#[cfg(feature = "cuda")]
fn host_fallback_hint(e: &wrapir::exec::RunError) -> String {
    match e {
        wrapir::exec::RunError::Exec(e) => exec_host_fallback_hint(e),
        _ => String::new(),
    }
}

/// [`host_fallback_hint`] for an execution error.
#[cfg(feature = "cuda")]
fn exec_host_fallback_hint(mut e: &wrapir::exec::ExecError) -> String {
    use wrapir::exec::ExecError;
    while let ExecError::AtNode { source, .. } = e {
        e = source;
    }
    match e {
        ExecError::UnknownOp { op, .. } => {
            let host_ops = wrapir::exec::host::HostBackend::default().op_names();
            if host_runs(&host_ops, op.as_str()) {
                format!("\n`{op}` has no device implementation; --allow-host-fallback runs it on the host")
            } else {
                format!("\n`{op}` has no device implementation, and the host fallback has none either")
            }
        }
        _ => String::new(),
    }
}

/// `run --device cuda`: runs on the GPU with the bundle's math modes and
/// prints the outputs, the symbols bound and the extern ops that ran on the
/// device and (with `--allow-host-fallback`) on the host; returns the outputs.
#[cfg(feature = "cuda")]
fn run_cuda(
    args: &RunArgs,
    program: &Program,
    name: &str,
    kernel_dir: PathBuf,
    meta: &BundleMeta,
    inputs: indexmap::IndexMap<String, wrapir::exec::Tensor>,
) -> Result<Vec<wrapir::exec::Value<wrapir::exec::Tensor>>> {
    let mut options = wrapir::exec::cuda::CudaOptions::for_bundle(kernel_dir, meta);
    options.host_fallback = args.allow_host_fallback;
    let options = options.preload_for(program);
    let extern_ops = options.extern_ops.clone();
    let result = wrapir::exec::cuda::run_program(program, options, &inputs)
        .map_err(|e| anyhow::anyhow!("running {name} on cuda: {e}{}", host_fallback_hint(&e)))?;
    let mut out = describe_host_outputs(&result.outputs, args.print);
    out += &describe_symbols(program, &result.symbols);
    for (op, n) in extern_ops.device_ops() {
        out += &format!("cuda op: {op} x{n}\n");
    }
    for (op, n) in extern_ops.host_ops() {
        out += &format!("host fallback: {op} x{n}\n");
    }
    write_output(None, &out)?;
    Ok(result.outputs)
}

/// `run --device cuda` in a build without the `cuda` feature.
#[cfg(not(feature = "cuda"))]
fn run_cuda(
    _args: &RunArgs,
    _program: &Program,
    _name: &str,
    _kernel_dir: PathBuf,
    _meta: &BundleMeta,
    _inputs: indexmap::IndexMap<String, wrapir::exec::Tensor>,
) -> Result<Vec<wrapir::exec::Value<wrapir::exec::Tensor>>> {
    bail!("`--device cuda` needs wrapir built with the `cuda` feature (`cargo build --features cuda`)")
}

fn read_safetensors(path: &Path) -> Result<indexmap::IndexMap<String, wrapir::exec::Tensor>> {
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    wrapir::exec::safetensors::parse(&bytes).with_context(|| format!("in {}", path.display()))
}

fn parse_hint(text: &str) -> Result<(wrapir::sym::Symbol, i64)> {
    let Some((s, v)) = text.split_once('=') else {
        bail!("hint `{text}` is not SYMBOL=VALUE");
    };
    let v: i64 = v
        .trim()
        .parse()
        .with_context(|| format!("hint `{text}`: `{v}` is not an integer"))?;
    let s = s.trim();
    if s.is_empty() {
        bail!("hint `{text}` has no symbol name");
    }
    Ok((wrapir::sym::Symbol::new(s), v))
}

/// Symbol values the inputs imply: symbol inputs, and input sizes declared as a plain symbol.
fn hints_from_inputs(
    program: &Program,
    inputs: &indexmap::IndexMap<String, wrapir::exec::Tensor>,
) -> Result<wrapir::sym::Bindings> {
    let mut hints = wrapir::sym::Bindings::new();
    for input in &program.main.inputs {
        let Some(t) = inputs.get(input.name().as_str()) else {
            bail!("the inputs have no tensor `{}`", input.name());
        };
        match input {
            ir::GraphInput::Symbol { symbol, .. } => {
                if let [v] = t.to_i64_vec()?.as_slice() {
                    hints.insert(symbol.clone(), *v);
                }
            }
            ir::GraphInput::Tensor { name } => {
                if let Some(layout) = program.main.layout(name) {
                    for (e, v) in layout.size.iter().zip(t.size()) {
                        if let wrapir::sym::SymExpr::Sym(s) = e {
                            hints.insert(s.clone(), *v);
                        }
                    }
                }
            }
        }
    }
    Ok(hints)
}

fn describe_spec(t: &wrapir::exec::TensorSpec) -> String {
    format!(
        "tensor {}{:?} stride {:?} offset {} on {}",
        t.dtype, t.size, t.stride, t.offset, t.device
    )
}

fn describe_value<T>(v: &wrapir::exec::Value<T>, tensor: &dyn Fn(&T) -> String) -> String {
    use wrapir::exec::Value;
    match v {
        Value::Tensor(t) => tensor(t),
        Value::Int(i) => format!("int {i}"),
        Value::Float(f) => format!("float {f}"),
        Value::Bool(b) => format!("bool {b}"),
        Value::List(items) => {
            let parts: Vec<String> = items.iter().map(|i| describe_value(i, tensor)).collect();
            format!("({})", parts.join(", "))
        }
        other => other.kind().to_string(),
    }
}

/// The values of symbols bound during the run other than backed ones (unbacked and precomputed).
fn describe_symbols(program: &Program, symbols: &wrapir::sym::Bindings) -> String {
    let bound: Vec<String> = symbols
        .iter()
        .filter(|(s, _)| !matches!(program.symbols.get(*s), Some(d) if d.kind == ir::SymbolKind::Backed))
        .map(|(s, v)| format!("{s} = {v}"))
        .collect();
    if bound.is_empty() {
        "bound symbols: none\n".to_string()
    } else {
        format!("bound symbols: {}\n", bound.join(", "))
    }
}

fn format_values(t: &wrapir::exec::Tensor) -> String {
    let parts: Vec<String> = if t.dtype().is_complex() {
        // Python's spelling of a complex number: `(1+2j)`.
        t.to_complex_vec()
            .map(|v| v.iter().map(|(re, im)| format!("({re}{im:+}j)")).collect())
            .unwrap_or_default()
    } else if t.dtype().is_floating() {
        t.to_f64_vec()
            .map(|v| v.iter().map(|x| format!("{x}")).collect())
            .unwrap_or_default()
    } else {
        t.to_i64_vec()
            .map(|v| v.iter().map(|x| format!("{x}")).collect())
            .unwrap_or_default()
    };
    format!("[{}]", parts.join(", "))
}

/// Milliseconds from this process's start (its `starttime` in
/// `/proc/self/stat`) to now (`/proc/uptime`): both count from boot, at the
/// kernel's clock-tick resolution (10 ms at the usual 100 Hz `USER_HZ`).
/// `None` where `/proc` is not there.
/// `output K: LAYOUT` lines for host outputs, with their values when `print`.
fn describe_host_outputs(outputs: &[wrapir::exec::Value<wrapir::exec::Tensor>], print: bool) -> String {
    let mut out = String::new();
    for (k, v) in outputs.iter().enumerate() {
        let text = describe_value(v, &|t| {
            let mut s = describe_spec(t.spec());
            if print {
                s += &format!("\n  values: {}", format_values(t));
            }
            s
        });
        out += &format!("output {k}: {text}\n");
    }
    out
}

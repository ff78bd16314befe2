//! `wrapir run`: a program, bundle or package on the meta, cpu or cuda
//! backend, compared with the references the bundle (or `--expect`) holds.

use super::*;
use indexmap::IndexMap;
use wrapir::bundle::judge::{judge_run, After, JudgeOptions, Judgement, MutatedVerdict, References};
use wrapir::bundle::{conventions, Bundle};
use wrapir::exec::{Tensor, Value};
use wrapir::format::bundle_json::{BundleMeta, Tolerance};

mod ranks;
pub(crate) use ranks::check_rank_set;

// The arguments of `wrapir run` (their help is the command's; the
// command's own is `Command::Run`'s).
#[derive(clap::Args)]
pub(crate) struct RunArgs {
    /// A `.json` or `.wir` program, `-` for stdin, a bundle directory or a
    /// `.wirpkg` package (inputs and expected outputs default to its
    /// `inputs.safetensors` and, on cpu and cuda, `expected.safetensors`).
    pub(crate) program: PathBuf,
    /// The backend.
    #[arg(long, value_enum, default_value_t = RunDevice::Meta)]
    pub(crate) device: RunDevice,
    /// Inputs by graph input name or by the user's name `bundle.json`
    /// records (`wrapir info` lists both); symbol inputs as 0-d integer
    /// tensors. A bundle's weights the file leaves out are taken from the
    /// bundle. On meta, only their sizes are used, as hints.
    #[arg(long)]
    pub(crate) inputs: Option<PathBuf>,
    /// Expected outputs (cpu, cuda).
    #[arg(long)]
    pub(crate) expect: Option<PathBuf>,
    /// A symbol value such as `u0=7` (repeatable): backed symbols of the
    /// meta inputs, and unbacked symbols on meta.
    #[arg(long = "hint", value_name = "SYMBOL=VALUE")]
    pub(crate) hints: Vec<String>,
    /// Meta: the values of data-dependent `cond`/`while_loop` predicates, read
    /// in turn, the last one repeating (`true,true,false`: a loop runs twice).
    #[arg(long, value_delimiter = ',')]
    pub(crate) predicate: Vec<bool>,
    /// Print output values (cpu, cuda).
    #[arg(long)]
    pub(crate) print: bool,
    /// cpu, cuda: write the outputs to this safetensors file, output `i` as
    /// `out<i>` (integer outputs as 0-d int64 tensors), which `wrapir
    /// compare` reads back.
    #[arg(long, value_name = "FILE")]
    pub(crate) save_outputs: Option<PathBuf>,
    /// Relative tolerance for floating outputs (overrides the defaults).
    #[arg(long)]
    pub(crate) rtol: Option<f64>,
    /// Absolute tolerance for floating outputs (overrides the defaults).
    #[arg(long)]
    pub(crate) atol: Option<f64>,
    /// cuda: run the extern ops the device does not implement on the
    /// host (copying through host memory), reporting each one. Without
    /// it such an op is an error naming it.
    #[arg(long)]
    pub(crate) allow_host_fallback: bool,
    /// cpu, cuda: skip the program's tensor asserts (sizes, strides,
    /// dtypes, alignments), which guard against inputs other than those
    /// Inductor compiled for. Symbolic runtime asserts are still checked.
    #[arg(long)]
    pub(crate) skip_asserts: bool,
}

/// The inputs of a run and where they came from.
struct Inputs {
    tensors: Option<IndexMap<String, Tensor>>,
    /// `--inputs PATH`, or the bundle's entry; `None`: no inputs at all.
    source: Option<String>,
}

pub(crate) fn run_command(args: &RunArgs) -> Result<ExitCode> {
    if args.allow_host_fallback && args.device != RunDevice::Cuda {
        bail!("--allow-host-fallback is for `--device cuda` (the other devices have no fallback)");
    }
    if args.skip_asserts && args.device == RunDevice::Meta {
        bail!("--skip-asserts is for `--device cpu` and `--device cuda` (a meta run checks shapes only)");
    }
    if args.device != RunDevice::Meta {
        let device = if args.device == RunDevice::Cpu { "cpu" } else { "cuda" };
        if !args.predicate.is_empty() {
            bail!("`--predicate` is for `--device meta`; {device} runs read predicates from the data");
        }
        if !args.hints.is_empty() {
            bail!("`--hint` is for `--device meta`; {device} runs bind symbols from the inputs");
        }
    } else if args.expect.is_some() {
        bail!("`--expect` needs `--device cpu`: meta tensors hold no values");
    } else if args.save_outputs.is_some() {
        bail!("`--save-outputs` needs `--device cpu` or `--device cuda`: meta tensors hold no values");
    }
    if wrapir::bundle::RankSet::is_rank_set(&args.program) {
        if args.save_outputs.is_some() {
            bail!("`--save-outputs` runs one program; give one rank's directory");
        }
        return ranks::run_rank_set(args);
    }
    let bundle = open_bundle(&args.program)?;
    // Run-time guards from launch reconciliation are checked like any other assert.
    let program = with_guards(&bundle)?;
    let name = bundle.name().to_string();
    let inputs = match &args.inputs {
        Some(p) => Inputs {
            tensors: Some(supplied_inputs(&bundle, p)?),
            source: Some(format!("--inputs {}", p.display())),
        },
        None => Inputs {
            tensors: bundle.inputs()?,
            source: bundle
                .has(wrapir::bundle::INPUTS)
                .then(|| bundle.display(wrapir::bundle::INPUTS)),
        },
    };
    let meta = bundle.meta().clone();
    match args.device {
        RunDevice::Meta => run_meta(args, &program, &name, &inputs),
        RunDevice::Cpu => {
            let references = references(args, &bundle, false)?;
            let mut backend = wrapir::exec::host::HostBackend::new(wrapir::exec::host::HostOptions {
                skip_tensor_asserts: args.skip_asserts,
                ..Default::default()
            })
            .with_limits(limits());
            if let Some(state) = meta.cuda_rng {
                backend.set_cuda_rng(state);
            }
            // A package's host kernels are written to a private scratch directory to
            // be loaded (removed when the run ends; the loaded objects stay mapped).
            let scratch = wrapir::exec::host::kernels::ScratchDir::new_in(&std::env::temp_dir(), "wrapir-host-kernels")
                .map_err(|e| anyhow::anyhow!("running {name} on cpu: creating a scratch directory: {e}"))?;
            let loaded = wrapir::exec::host::kernels::load_kernels_from(
                &mut backend,
                &program,
                &bundle.kernel_images(),
                Some(&scratch.path().join("images")),
            );
            drop(scratch);
            loaded.map_err(|e| anyhow::anyhow!("running {name} on cpu: {e}"))?;
            let result = wrapir::exec::run_program(
                &program,
                &mut backend,
                inputs.tensors.as_ref().unwrap_or(&IndexMap::new()),
            )
            .map_err(|e| {
                anyhow::anyhow!(
                    "running {name} on cpu: {e}{}{}",
                    no_inputs_hint(&inputs),
                    gpu_kernel_hint(&e, &program)
                )
            })?;
            let mut out = "device: cpu\n".to_string();
            out += &describe_host_outputs(&result.outputs, args.print, "cpu");
            out += &describe_symbols(&program, &result.symbols);
            write_output(None, &out)?;
            save_outputs(args, &result.outputs)?;
            // The host run left the mutated inputs' new values in the input tensors.
            let after = match (&inputs.tensors, &args.inputs) {
                (Some(tensors), None) => After::Host(tensors),
                _ => After::Supplied,
            };
            let judgement = judge_run(&bundle, &references, &result.outputs, after)?;
            let outputs_ok = print_output_verdicts(&result.outputs, &judgement)?;
            let mutated_ok = print_mutated_verdict(&bundle, &judgement)?;
            Ok(if mutated_ok { outputs_ok } else { ExitCode::from(1) })
        }
        RunDevice::Cuda => {
            // The bundle's kernel images and the inputs, before any device work.
            super::kernels::require_kernel_images(&bundle, false)?;
            let references = references(args, &bundle, true)?;
            if let Some(tensors) = &inputs.tensors {
                wrapir::exec::check_inputs(&program, tensors)
                    .map_err(|e| anyhow::anyhow!("running {name} on cuda: {e}"))?;
            }
            let tensors = inputs.tensors.clone().unwrap_or_default();
            let outputs = run_cuda(args, &program, &name, &bundle, &meta, tensors)
                .map_err(|e| anyhow::anyhow!("{e:#}{}", no_inputs_hint(&inputs)))?;
            report_loosened(&references);
            save_outputs(args, &outputs)?;
            let judgement = judge_run(&bundle, &references, &outputs, After::Device)?;
            print_mutated_verdict(&bundle, &judgement)?;
            print_output_verdicts(&outputs, &judgement)
        }
    }
}

/// `--inputs FILE`: its tensors by graph input name (the user's names that
/// `bundle.json` records are translated), with the bundle's weights and
/// constants the file leaves out taken from the bundle (reported).
fn supplied_inputs(bundle: &Bundle, path: &Path) -> Result<IndexMap<String, Tensor>> {
    let tensors = bundle
        .meta()
        .by_graph_input(read_tensors(path)?)
        .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    let program = bundle.program();
    let stored_names: Vec<&str> = bundle
        .meta()
        .weights
        .iter()
        .map(String::as_str)
        .chain(program.constants.keys().map(|c| c.as_str()))
        .filter(|name| !tensors.contains_key(*name))
        .collect();
    if stored_names.is_empty() {
        return Ok(tensors);
    }
    let Some(stored) = bundle.inputs()? else {
        return Ok(tensors);
    };
    let mut tensors = tensors;
    let mut taken = 0usize;
    for name in stored_names {
        if let Some(t) = stored.get(name) {
            tensors.insert(name.to_string(), t.clone());
            taken += 1;
        }
    }
    if taken > 0 {
        println!(
            "note: {taken} weights and constants not in {} taken from {}",
            path.display(),
            bundle.display(wrapir::bundle::INPUTS)
        );
    }
    Ok(tensors)
}

/// `--save-outputs FILE`: the outputs as a runner stores them
/// ([`conventions::runner_tensors`]), written as safetensors.
fn save_outputs(args: &RunArgs, outputs: &[Value<Tensor>]) -> Result<()> {
    let Some(path) = &args.save_outputs else {
        return Ok(());
    };
    let stored =
        conventions::runner_tensors(outputs).with_context(|| format!("saving outputs to {}", path.display()))?;
    let bytes = wrapir::exec::safetensors::write(&stored)
        .map_err(|e| anyhow::anyhow!("saving outputs to {}: {e}", path.display()))?;
    std::fs::write(path, bytes).with_context(|| format!("writing {}", path.display()))?;
    println!("saved {} outputs to {}", stored.len(), path.display());
    Ok(())
}

/// `run --device meta`.
fn run_meta(args: &RunArgs, program: &Program, name: &str, inputs: &Inputs) -> Result<ExitCode> {
    let mut hints = wrapir::sym::Bindings::new();
    for h in &args.hints {
        let (s, v) = parse_hint(h, program)?;
        hints.insert(s, v);
    }
    if let Some(tensors) = &inputs.tensors {
        // The inputs must fit the program as on the other devices.
        let bound = wrapir::exec::input_symbols(program, tensors)
            .map_err(|e| anyhow::anyhow!("running {name} on meta: {e}"))?;
        for (s, v) in bound {
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
    let report = wrapir::exec::meta::run_program_on(program, &mut backend)
        .map_err(|e| anyhow::anyhow!("running {name} on meta: {e}{}", upper_bound_hint(program, &backend)))?;
    let mut out = "device: meta\n".to_string();
    for (k, v) in report.outputs.iter().enumerate() {
        out += &format!("output {k}: {}\n", describe_value(v, &|t| describe_spec(t)));
    }
    out += &describe_symbols(program, &report.symbols);
    for d in &report.defaulted {
        let kind = match program.symbols.get(&d.symbol).map(|decl| &decl.kind) {
            Some(ir::SymbolKind::Unbacked) => "unbacked symbol",
            Some(ir::SymbolKind::Precomputed) => "precomputed symbol",
            _ => "symbol",
        };
        let bound = if d.upper { "upper" } else { "lower" };
        out += &format!(
            "note: {kind} `{}` has no hint: took its {bound} bound {} (set it with --hint {}=N)\n",
            d.symbol, d.value, d.symbol
        );
    }
    out += &format!("peak memory: {} bytes\n", report.memory.peak_bytes);
    write_output(None, &out)?;
    Ok(ExitCode::SUCCESS)
}

/// After a failed meta run: the symbols that took their upper bound for want
/// of a hint (an unbacked symbol's bound is often far above any real value,
/// and sizes made from it overflow or exceed the limits), each with the
/// `--hint` that gives it a value; empty when none did.
fn upper_bound_hint(program: &Program, backend: &wrapir::exec::meta::MetaBackend) -> String {
    let mut out = String::new();
    for d in backend.defaulted().iter().filter(|d| d.upper) {
        let kind = match program.symbols.get(&d.symbol).map(|decl| &decl.kind) {
            Some(ir::SymbolKind::Unbacked) => "unbacked symbol",
            Some(ir::SymbolKind::Precomputed) => "precomputed symbol",
            _ => "symbol",
        };
        out += &format!(
            "\n{kind} `{}` had no hint and took its upper bound {}, which sizes above may come from: \
             give it a realistic value with --hint {}=N",
            d.symbol, d.value, d.symbol
        );
    }
    out
}

/// After a cpu run failed at a kernel the host backend has none of: what
/// kind of kernel it is and the device that runs it.
fn gpu_kernel_hint(e: &wrapir::exec::RunError, program: &Program) -> String {
    use wrapir::exec::{ExecError, RunError};
    let RunError::Exec(e) = e else {
        return String::new();
    };
    let mut e = e;
    while let ExecError::AtNode { source, .. } = e {
        e = source.as_ref();
    }
    let ExecError::UnknownKernel { name, .. } = e else {
        return String::new();
    };
    let backend = program
        .kernels
        .iter()
        .find(|(k, _)| k.as_str() == name)
        .map(|(_, def)| def.backend.keyword());
    match backend {
        Some("triton") => format!(
            "\n`{name}` is a Triton kernel, which runs on the GPU: run with --device cuda \
             (`wrapir check --device cpu` lists every kernel the cpu cannot run)"
        ),
        Some("cuda_c") => format!("\n`{name}` is a CUDA C kernel, which runs on the GPU: run with --device cuda"),
        _ => String::new(),
    }
}

/// After a failed cpu or cuda run that had no inputs at all: where they come from.
fn no_inputs_hint(inputs: &Inputs) -> &'static str {
    if inputs.source.is_none() {
        "\n(no inputs were given: pass --inputs FILE.safetensors, or run a bundle, which carries its inputs.safetensors)"
    } else {
        ""
    }
}

/// The references of a cpu or cuda run ([`References::of`]): `--expect`
/// or the bundle's eager outputs, and a bundle's (or package's) compiled
/// outputs; `--rtol` / `--atol` override the tolerance of both. On cuda,
/// says on stdout when the comparison with Inductor's outputs uses the
/// eager tolerance.
fn references(args: &RunArgs, bundle: &Bundle, on_cuda: bool) -> Result<References> {
    let expect = match &args.expect {
        Some(path) => Some((path.display().to_string(), read_tensors(path)?)),
        None => None,
    };
    let options = JudgeOptions {
        expect,
        rtol: args.rtol,
        atol: args.atol,
        on_cuda,
    };
    Ok(References::of(bundle, &options)?)
}

/// On cuda: says on stdout when the comparison with Inductor's outputs
/// uses the eager tolerance, because ops run on wrapir's own kernels
/// rather than PyTorch's library (attention).
fn report_loosened(references: &References) {
    if let Some(loosened) = &references.loosened {
        println!(
            "note: {} {} on wrapir's own kernels, not PyTorch's library, so the comparison with Inductor's outputs uses the eager tolerance",
            loosened.ops.join(", "),
            if loosened.ops.len() == 1 { "runs" } else { "run" },
        );
    }
}

/// The tolerance of a report line.
fn tolerance_text(tolerance: Option<Tolerance>) -> String {
    match tolerance {
        Some(t) => format!("rtol {}, atol {}", t.rtol, t.atol),
        None => "dtype default tolerances".to_string(),
    }
}

/// Prints the judgement of `outputs` against each reference: a summary
/// line and the largest errors of every output per reference (a mismatch
/// also goes to stderr); exit 1 when any comparison fails.
fn print_output_verdicts(outputs: &[Value<Tensor>], judgement: &Judgement) -> Result<ExitCode> {
    let got = wrapir::exec::compare::output_leaves(outputs).len();
    let mut ok = true;
    let mut out = String::new();
    let mut err = String::new();
    for verdict in &judgement.outputs {
        let (what, name) = (verdict.what, &verdict.name);
        let Some(comparison) = &verdict.comparison else {
            out += &format!("against {what}: absent (no {name}), not compared\n");
            continue;
        };
        let compared = got - comparison.ints_not_compared;
        let tol = tolerance_text(verdict.tolerance);
        let failed = comparison.outputs.iter().filter(|o| o.mismatch.is_some()).count();
        out += &match comparison.count_mismatch {
            Some((n, m)) => format!(
                "against {what}: the program returned {n} {}, {m} are expected in {name}\n",
                if comparison.with_ints { "outputs" } else { "tensors" },
            ),
            None if failed == 0 => format!("against {what}: {compared} outputs match {name} ({tol})\n"),
            None => format!("against {what}: {failed} of {compared} outputs differ from {name} ({tol})\n"),
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
            err += &format!("mismatch against {name} ({what}): {message}\n");
        }
    }
    write_output(None, &out)?;
    eprint!("{err}");
    Ok(if ok { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

/// Prints the judgement of the inputs the program writes
/// (`bundle.json`'s `mutated_inputs`) against eager PyTorch's values after
/// the call (`mutated.safetensors`), one line per input, or why they were
/// not compared; nothing for a bundle that does not record mutations
/// (exported before they were recorded). Returns whether they match.
fn print_mutated_verdict(bundle: &Bundle, judgement: &Judgement) -> Result<bool> {
    let (file, tolerance, comparison) = match &judgement.mutated {
        MutatedVerdict::NotRecorded => return Ok(true),
        MutatedVerdict::Supplied { count, file } => {
            write_output(
                None,
                &format!(
                    "mutated inputs: {count} not compared: eager's values in {file} are for the bundle's own inputs\n"
                ),
            )?;
            return Ok(true);
        }
        MutatedVerdict::OnDevice { count } => {
            // The device run's inputs stay on the device; the host run reads them back.
            println!("mutated inputs: {count} not compared on cuda (`--device cpu` compares them)");
            return Ok(true);
        }
        MutatedVerdict::Absent { file } => {
            write_output(None, &format!("mutated inputs: absent (no {file}), not compared\n"))?;
            return Ok(true);
        }
        MutatedVerdict::Compared {
            file,
            tolerance,
            comparison,
        } => (file, *tolerance, comparison),
    };
    let count = comparison.inputs.len();
    let failed = comparison.inputs.iter().filter(|i| i.mismatch.is_some()).count();
    let tol = tolerance_text(tolerance);
    let mut out = if failed == 0 {
        format!("mutated inputs against eager: {count} match {file} ({tol})\n")
    } else {
        format!("mutated inputs against eager: {failed} of {count} differ from {file} ({tol})\n")
    };
    for i in &comparison.inputs {
        let user = bundle
            .meta()
            .input_names
            .get(&i.name)
            .map(|u| format!(" (`{u}`)"))
            .unwrap_or_default();
        let errors = match (i.max_abs, i.max_rel) {
            (Some(a), Some(r)) => format!("max abs error {}, max rel error {}", error_text(a), error_text(r)),
            _ => "errors not measured".to_string(),
        };
        let verdict = match &i.mismatch {
            None => "match".to_string(),
            Some(m) => format!("MISMATCH: {m}"),
        };
        out += &format!("  input `{}`{user} after the call: {errors}; {verdict}\n", i.name);
    }
    write_output(None, &out)?;
    if let Some(message) = comparison.first_error() {
        eprintln!("mismatch against {file} (eager): {message}");
        return Ok(false);
    }
    Ok(true)
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

/// `host_fallback_hint` for an execution error.
pub(crate) fn exec_host_fallback_hint(mut e: &wrapir::exec::ExecError) -> String {
    use wrapir::exec::ExecError;
    while let ExecError::AtNode { source, .. } = e {
        e = source;
    }
    match e {
        ExecError::UnknownOp { op, .. } => {
            if wrapir::exec::host::HostBackend::default().has_op(op) {
                format!("\n`{op}` has no device implementation; --allow-host-fallback runs it on the host")
            } else {
                format!("\n`{op}` has no device implementation, and the host fallback has none either")
            }
        }
        _ => String::new(),
    }
}

/// `run --device cuda`: runs on the GPU with the bundle's math modes and
/// prints the device, the outputs, the symbols bound and the extern ops that
/// ran on the device and (with `--allow-host-fallback`) on the host; returns
/// the outputs. In a build without the `cuda` feature: after the checks
/// that need no GPU, an error saying so.
fn run_cuda(
    args: &RunArgs,
    program: &Program,
    name: &str,
    bundle: &Bundle,
    meta: &BundleMeta,
    inputs: IndexMap<String, Tensor>,
) -> Result<Vec<Value<Tensor>>> {
    #[cfg(not(feature = "cuda"))]
    {
        let _ = (args, program, meta, inputs);
        super::kernels::require_kernel_images(bundle, true)?;
        bail!(
            "running {name} on cuda: opening the GPU: {}",
            wrapir::runtime::cuda::CudaError::NotBuilt
        )
    }
    #[cfg(feature = "cuda")]
    {
        use wrapir::exec::cuda::{self, CudaBackend, CudaOptions};
        let mut options = CudaOptions::for_bundle(bundle.kernel_images(), meta);
        options.host.skip_tensor_asserts = args.skip_asserts;
        options.paths = cuda::CudaPaths::from_env();
        options.host_fallback = args.allow_host_fallback;
        let options = options.preload_for(program);
        let extern_ops = options.extern_ops.clone();
        // Kernels the backend cannot launch from an image, before the device opens.
        super::kernels::require_kernel_images(bundle, true)?;
        let mut backend =
            CudaBackend::new(options).map_err(|e| anyhow::anyhow!("running {name} on cuda: opening the GPU: {e}"))?;
        // Every image loads (checked for this GPU's architecture) before the first launch.
        backend
            .preload_kernels(program)
            .map_err(|e| anyhow::anyhow!("running {name} on cuda: {e}"))?;
        let device = match backend.device_name() {
            Ok(gpu) => format!("cuda:{} ({gpu})", backend.ordinal()),
            Err(_) => format!("cuda:{}", backend.ordinal()),
        };
        let failed =
            |e: wrapir::exec::RunError| anyhow::anyhow!("running {name} on cuda: {e}{}", host_fallback_hint(&e));
        let result = wrapir::exec::run_program(program, &mut backend, &inputs).map_err(failed)?;
        let outputs = result
            .outputs
            .iter()
            .map(|v| cuda::to_host(&mut backend, v))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| failed(e.into()))?;
        backend
            .synchronize()
            .map_err(|e| anyhow::anyhow!("running {name} on cuda: {e}"))?;
        let mut out = format!("device: {device}\n");
        let ran_on = format!("cuda:{}", backend.ordinal());
        out += &describe_host_outputs(&outputs, args.print, &ran_on);
        out += &describe_symbols(program, &result.symbols);
        for (op, n) in extern_ops.device_ops() {
            out += &format!("cuda op: {op} x{n}\n");
        }
        for (op, n) in extern_ops.host_ops() {
            out += &format!("host fallback: {op} x{n}\n");
        }
        write_output(None, &out)?;
        Ok(outputs)
    }
}

/// Parses `--hint SYMBOL=VALUE`; the symbol must be one of the program's.
fn parse_hint(text: &str, program: &Program) -> Result<(wrapir::sym::Symbol, i64)> {
    let Some((s, v)) = text.split_once('=') else {
        bail!("--hint `{text}` is not SYMBOL=VALUE");
    };
    let v: i64 = v
        .trim()
        .parse()
        .with_context(|| format!("--hint `{text}`: `{v}` is not an integer"))?;
    let s = s.trim();
    if s.is_empty() {
        bail!("--hint `{text}` has no symbol name");
    }
    let symbol = wrapir::sym::Symbol::new(s);
    if !program.symbols.contains_key(&symbol) {
        let known: Vec<String> = program.symbols.keys().map(|s| s.to_string()).collect();
        let known = if known.is_empty() {
            "it has no symbols".to_string()
        } else {
            format!("its symbols: {}", known.join(", "))
        };
        bail!("--hint `{text}`: the program has no symbol `{s}` ({known})");
    }
    Ok((symbol, v))
}

fn describe_spec(t: &wrapir::exec::TensorSpec) -> String {
    format!(
        "tensor {}{:?} stride {:?} offset {} on {}",
        t.dtype, t.size, t.stride, t.offset, t.device
    )
}

fn describe_value<T>(v: &Value<T>, tensor: &dyn Fn(&T) -> String) -> String {
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

fn format_values(t: &Tensor) -> String {
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

/// `output K: LAYOUT` lines for outputs computed on the device `ran_on`
/// (held in host memory), with their values when `print`. Each names the
/// device that computed it, and the program's declared device where that
/// differs (a cuda program run on the cpu backend).
fn describe_host_outputs(outputs: &[Value<Tensor>], print: bool, ran_on: &str) -> String {
    let mut out = String::new();
    for (k, v) in outputs.iter().enumerate() {
        let text = describe_value(v, &|t| {
            let spec = t.spec();
            let mut s = format!(
                "tensor {}{:?} stride {:?} offset {} on {ran_on}",
                spec.dtype, spec.size, spec.stride, spec.offset
            );
            let declared = spec.device.to_string();
            let same_kind = ran_on.split(':').next() == Some(spec.device.kind.as_str());
            if !same_kind {
                s += &format!(" (declared {declared})");
            }
            if print {
                s += &format!("\n  values: {}", format_values(t));
            }
            s
        });
        out += &format!("output {k}: {text}\n");
    }
    out
}

/// `wrapir compare`: outputs another runner wrote (`out<i>` for program
/// output `i`, as a standalone package's `main` writes them: tensors, sizes
/// as 0-d integer tensors, `None` outputs left out) compared with the
/// bundle's references exactly as `wrapir run --device cuda` compares its
/// own outputs (tolerances, integer outputs, the eager tolerance for ops on
/// wrapir's own kernels). Exit 1 when a comparison fails.
pub(crate) fn compare_command(
    program: &Path,
    outputs: &Path,
    rtol: Option<f64>,
    atol: Option<f64>,
) -> Result<ExitCode> {
    let bundle = open_bundle(program)?;
    let prog = bundle.program();
    let stored = read_tensors(outputs)?;
    let values = match conventions::runner_outputs(prog, &stored) {
        Ok(values) => values,
        Err(conventions::RunnerOutputError::Exec(e)) => return Err(e.into()),
        Err(e) => bail!("{}: {e}", outputs.display()),
    };
    let args = RunArgs {
        program: program.to_path_buf(),
        device: RunDevice::Cuda,
        inputs: None,
        expect: None,
        hints: Vec::new(),
        predicate: Vec::new(),
        print: false,
        save_outputs: None,
        rtol,
        atol,
        allow_host_fallback: false,
        skip_asserts: false,
    };
    let references = references(&args, &bundle, true)?;
    report_loosened(&references);
    let judgement = judge_run(&bundle, &references, &values, After::Device)?;
    print_output_verdicts(&values, &judgement)
}

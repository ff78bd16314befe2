//! `wrapir info`: what a bundle, package or program holds, for a person:
//! its inputs and outputs (the user's names where `bundle.json` records
//! them, dtypes, shapes with their symbols and ranges), its kernels by
//! kind, its extern ops and the devices that run each, its weights, and the
//! versions that made it.

use super::*;
use wrapir::bundle::BundleKind;
use wrapir::ir::{BufferKind, GraphInput, GraphOutput, Layout, SymbolKind};

/// `wrapir info PROGRAM`.
pub(crate) fn info_command(path: &Path) -> Result<ExitCode> {
    let bundle = open_bundle(path)?;
    let mut out = String::new();
    describe_source(&bundle, &mut out);
    describe_inputs(&bundle, &mut out)?;
    describe_outputs(&bundle, &mut out);
    describe_symbols(bundle.program(), &mut out);
    describe_kernels(bundle.program(), &mut out);
    describe_extern_ops(bundle.program(), &mut out);
    write_output(None, &out)?;
    Ok(ExitCode::SUCCESS)
}

/// What was opened, and the versions: the program's format, the package's,
/// and the PyTorch and Triton that compiled it.
fn describe_source(bundle: &Bundle, out: &mut String) {
    let kind = match bundle.kind() {
        BundleKind::ProgramFile => "program file",
        BundleKind::Directory => "bundle directory",
        BundleKind::Package => "package",
    };
    *out += &format!("{}: {kind}\n", bundle.path().display());
    *out += &format!(
        "  program: {} (format version {})\n",
        bundle.name(),
        bundle.program().format_version
    );
    if let (Some(manifest), Some(version)) = (bundle.manifest(), bundle.package_version()) {
        let verified = if bundle.package_verified() == Some(true) {
            "entries verified against their checksums"
        } else {
            "no checksums (re-pack it to have them)"
        };
        *out += &format!(
            "  package: format version {version} ({verified}), written by {}\n",
            if manifest.writer.is_empty() {
                "an unnamed writer"
            } else {
                &manifest.writer
            }
        );
    }
    let p = &bundle.meta().provenance;
    let known = |v: &Option<String>| v.clone().unwrap_or_else(|| "unknown".to_string());
    if bundle.kind() != BundleKind::ProgramFile {
        *out += &format!(
            "  compiled by: PyTorch {}, Triton {}, on {}\n",
            known(&p.torch),
            known(&p.triton),
            known(&p.device)
        );
        if let Some(case) = &p.case {
            *out += &format!("  case: {case}\n");
        }
    }
}

/// A layout as `f32[s0, 4] stride [4, 1] on cuda:0`.
fn layout_text(l: &Layout) -> String {
    let dims = |d: &[wrapir::sym::SymExpr]| d.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ");
    format!(
        "{}[{}] stride [{}] on {}",
        l.dtype,
        dims(&l.size),
        dims(&l.stride),
        l.device
    )
}

/// `inputs (N):` one line per main-graph input: its graph name, the user's
/// name, whether it is a weight (and its module name), its layout.
fn describe_inputs(bundle: &Bundle, out: &mut String) -> Result<()> {
    let program = bundle.program();
    let info = bundle.meta();
    let graph = &program.main;
    *out += &format!("inputs ({}):\n", graph.inputs.len());
    if !info.signature.is_empty() {
        *out += &format!("  signature: ({})\n", info.signature.join(", "));
    }
    for input in &graph.inputs {
        match input {
            GraphInput::Symbol { name, symbol } => {
                *out += &format!("  {name}: the value of symbol {symbol}\n");
            }
            GraphInput::SymExpr { name, expr } => {
                *out += &format!("  {name}: the integer {expr}\n");
            }
            GraphInput::Tensor { name } => {
                let mut label = name.to_string();
                if let Some(user) = info.input_names.get(name.as_str()) {
                    label += &format!(" `{user}`");
                }
                if info.weights.iter().any(|w| w == name.as_str()) {
                    label += &match info.weight_names.get(name.as_str()) {
                        Some(module) => format!(" (weight `{module}`)"),
                        None => " (weight)".to_string(),
                    };
                }
                let what = match graph.buffers.get(name).map(|d| &d.kind) {
                    Some(BufferKind::Tensor(l)) => layout_text(l),
                    Some(BufferKind::Multi) => "a multi-output value".to_string(),
                    None => "undeclared".to_string(),
                };
                *out += &format!("  {label}: {what}\n");
            }
        }
    }
    // The weights' bytes, from the stored inputs (a program file has none).
    if !info.weights.is_empty() {
        let stored = bundle.inputs()?.unwrap_or_default();
        let mut bytes: u64 = 0;
        let mut counted = 0usize;
        for w in &info.weights {
            if let Some(t) = stored.get(w) {
                let n = (t.numel() as u64).checked_mul(t.dtype().size_bytes());
                bytes = n.and_then(|n| bytes.checked_add(n)).unwrap_or(u64::MAX);
                counted += 1;
            }
        }
        *out += &format!(
            "weights: {} of the inputs, {} ({counted} stored in {})\n",
            info.weights.len(),
            byte_size(bytes),
            bundle.display(wrapir::bundle::INPUTS)
        );
    }
    Ok(())
}

/// `outputs (N):` one line per main-graph output: index, the user's name,
/// the buffer and its layout (or the size expression).
fn describe_outputs(bundle: &Bundle, out: &mut String) {
    let program = bundle.program();
    let info = bundle.meta();
    let graph = &program.main;
    *out += &format!("outputs ({}):\n", graph.outputs.len());
    // The user's names are per stored output, in order: they line up with the
    // program's outputs when there are as many non-`None` ones.
    let stored: Vec<usize> = (0..graph.outputs.len())
        .filter(|&k| !matches!(graph.outputs[k], GraphOutput::None))
        .collect();
    let user_name = |k: usize| {
        (info.output_names.len() == stored.len())
            .then(|| stored.iter().position(|&s| s == k))
            .flatten()
            .and_then(|i| info.output_names.get(i))
    };
    for (k, output) in graph.outputs.iter().enumerate() {
        let name = user_name(k).map(|n| format!(" `{n}`")).unwrap_or_default();
        let what = match output {
            GraphOutput::Buffer(b) => match graph.buffers.get(b).map(|d| &d.kind) {
                Some(BufferKind::Tensor(l)) => format!("{b}: {}", layout_text(l)),
                _ => match program.constants.get(b) {
                    Some(l) => format!("constant {b}: {}", layout_text(l)),
                    None => format!("{b}"),
                },
            },
            GraphOutput::Expr(e) => format!("the integer {e}"),
            GraphOutput::None => "None".to_string(),
        };
        *out += &format!("  {k}{name}: {what}\n");
    }
}

/// `symbols:` each symbol's kind, range and hint.
fn describe_symbols(program: &Program, out: &mut String) {
    if program.symbols.is_empty() {
        return;
    }
    *out += &format!("symbols ({}):\n", program.symbols.len());
    for (s, decl) in &program.symbols {
        let kind = match decl.kind {
            SymbolKind::Backed => "backed (from input sizes)",
            SymbolKind::Unbacked => "unbacked (data-dependent)",
            SymbolKind::Precomputed => "precomputed",
            SymbolKind::UnbackedFloat => "unbacked float (a tensor's value)",
        };
        let hint = decl.hint.map(|h| format!(", hint {h}")).unwrap_or_default();
        *out += &format!("  {s}: {kind}, range {}{hint}\n", decl.range);
    }
}

/// `kernels (N): 3 triton, 1 cpp`, then each kernel with the devices that run it.
fn describe_kernels(program: &Program, out: &mut String) {
    if program.kernels.is_empty() {
        *out += "kernels: none\n";
        return;
    }
    let mut kinds = std::collections::BTreeMap::<&str, usize>::new();
    for k in program.kernels.values() {
        *kinds.entry(k.backend.keyword()).or_default() += 1;
    }
    let kinds: Vec<String> = kinds.iter().map(|(k, n)| format!("{n} {k}")).collect();
    *out += &format!("kernels ({}): {}\n", program.kernels.len(), kinds.join(", "));
    for (name, def) in &program.kernels {
        let runs_on = match def.backend.keyword() {
            "triton" => "cuda (its image from the bundle)",
            "cpp" => "cpu (its image from the bundle)",
            "halide" if wrapir::exec::uses::is_host_image_kernel(&def.backend) => "cpu (its image from the bundle)",
            "halide" => "none (GPU Halide kernels are not run)",
            _ => "none (a kernel the embedder registers)",
        };
        *out += &format!("  {name} ({}): runs on {runs_on}\n", def.backend.keyword());
    }
}

/// `extern ops (N calls):` each op once, with its calls and the devices
/// that run it (the tables behind `wrapir ops` and `check --device`).
fn describe_extern_ops(program: &Program, out: &mut String) {
    use wrapir::exec::device_ops::cuda_op;
    use wrapir::exec::uses::extern_uses;
    let uses = extern_uses(program);
    if uses.is_empty() {
        *out += "extern ops: none\n";
        return;
    }
    let mut by_op: indexmap::IndexMap<String, usize> = indexmap::IndexMap::new();
    for u in &uses {
        *by_op.entry(u.op.clone()).or_default() += 1;
    }
    *out += &format!(
        "extern ops ({} of {}):\n",
        counted(uses.len(), "call"),
        counted(by_op.len(), "op")
    );
    let host = wrapir::exec::host::HostBackend::default();
    for (op, calls) in &by_op {
        let mut devices = Vec::new();
        match cuda_op(op) {
            Some(row) => devices.push(format!("cuda ({})", row.via)),
            None if host.has_op(op) => devices.push("cuda with --allow-host-fallback (on the host)".to_string()),
            None => {}
        }
        if host.has_op(op) {
            devices.push("cpu".to_string());
        }
        let devices = if devices.is_empty() {
            "no backend".to_string()
        } else {
            devices.join(", ")
        };
        let key = wrapir::exec::op::op_key(op);
        *out += &format!("  {key} x{calls}: runs on {devices}\n");
    }
}

/// `1 call`, `2 calls`.
fn counted(n: usize, what: &str) -> String {
    if n == 1 {
        format!("1 {what}")
    } else {
        format!("{n} {what}s")
    }
}

/// Bytes for people: `52.7 MB`, `812 B`.
fn byte_size(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["kB", "MB", "GB", "TB"];
    if bytes < 1000 {
        return format!("{bytes} B");
    }
    let mut value = bytes as f64;
    let mut unit = "B";
    for u in UNITS {
        if value < 1000.0 {
            break;
        }
        value /= 1000.0;
        unit = u;
    }
    format!("{value:.1} {unit}")
}

#[cfg(test)]
mod tests {
    use super::byte_size;

    #[test]
    fn byte_sizes_read_as_people_write_them() {
        assert_eq!(byte_size(812), "812 B");
        assert_eq!(byte_size(52_700_000), "52.7 MB");
        assert_eq!(byte_size(1_500), "1.5 kB");
        assert_eq!(byte_size(u64::MAX), "18446744.1 TB");
    }
}

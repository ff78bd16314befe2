//! Kernel definitions in the module header.

use super::{Code, Error, Location};
use crate::ir::{ConstValue, DeviceType, HalideArg, HalideMeta, KernelBackend, KernelDef, PyStr};
use std::fmt::Write;

/// Writes one definition: two blank lines, the kernel's comment lines, then
/// `name = async_compile.<backend>(...)`.
pub(super) fn definition(code: &mut Code, def: &KernelDef, device: DeviceType, at: Location) -> Result<(), Error> {
    if def.source.contains("'''") {
        return Err(Error::SourceContainsTripleQuote { kernel: def.name.clone() });
    }
    code.blank();
    code.blank();
    for c in &def.comments {
        code.line(&comment(c));
    }
    let name = &def.name;
    let source = source_block(&def.source);
    let text = match &def.backend {
        KernelBackend::Triton(_) => format!(
            "{name} = async_compile.triton({}, '''{source}''', device_str={})",
            PyStr(name.as_str()),
            PyStr(device.as_str())
        ),
        KernelBackend::Halide(meta) => {
            format!("{name} = async_compile.halide({}, '''{source}''')", halide_meta(meta))
        }
        KernelBackend::Cpp(meta) => {
            let types: Vec<String> = meta.arg_types.iter().map(|t| PyStr(t).to_string()).collect();
            format!("{name} = async_compile.cpp_pybinding([{}], '''{source}''')", types.join(", "))
        }
        KernelBackend::CudaC => format!("{name} = async_compile.cuda(r'''{source}''', 'so', aot_compile=False)"),
        KernelBackend::Host => return Err(Error::HostKernel { kernel: name.clone(), at }),
    };
    // Multi-line text: written as-is (the source must not be indented).
    code.text.push_str(&text);
    code.text.push('\n');
    Ok(())
}

/// `# text`, or `#` alone for empty text.
pub(super) fn comment(text: &str) -> String {
    if text.is_empty() {
        "#".to_string()
    } else {
        format!("# {text}")
    }
}

/// The source between the quotes: a newline, the source without leading and
/// trailing blank lines, a newline (Inductor's layout).
fn source_block(source: &str) -> String {
    let trimmed = source.trim_start_matches(['\n', '\r']).trim_end();
    if trimmed.is_empty() {
        "\n".to_string()
    } else {
        format!("\n{trimmed}\n")
    }
}

/// `repr(HalideMeta(...))`.
fn halide_meta(meta: &HalideMeta) -> String {
    let args: Vec<String> = meta.argtypes.iter().map(halide_arg).collect();
    let mut s = format!("HalideMeta(argtypes=[{}], target={}, scheduler=", args.join(", "), PyStr(&meta.target));
    opt_str(&mut s, meta.scheduler.as_deref());
    s.push_str(", scheduler_flags=");
    if meta.scheduler_flags.is_empty() {
        s.push_str("None");
    } else {
        let items: Vec<String> = meta
            .scheduler_flags
            .iter()
            .map(|(k, v)| format!("{}: {}", PyStr(k), const_repr(v)))
            .collect();
        let _ = write!(s, "{{{}}}", items.join(", "));
    }
    s.push_str(", cuda_device=");
    match meta.cuda_device {
        Some(d) => {
            let _ = write!(s, "{d}");
        }
        None => s.push_str("None"),
    }
    s.push(')');
    s
}

/// `repr(HalideInputSpec(...))`: every field, `None` when absent.
fn halide_arg(a: &HalideArg) -> String {
    let mut s = format!("HalideInputSpec(ctype={}, name={}, shape=", PyStr(&a.ctype), PyStr(&a.name));
    opt_list(&mut s, a.shape.as_deref());
    s.push_str(", stride=");
    opt_list(&mut s, a.stride.as_deref());
    s.push_str(", offset=");
    opt_str(&mut s, a.offset.as_deref());
    s.push_str(", alias_of=");
    opt_str(&mut s, a.alias_of.as_deref());
    s.push(')');
    s
}

fn opt_str(s: &mut String, v: Option<&str>) {
    match v {
        Some(v) => {
            let _ = write!(s, "{}", PyStr(v));
        }
        None => s.push_str("None"),
    }
}

fn opt_list(s: &mut String, v: Option<&[String]>) {
    match v {
        Some(items) => {
            let items: Vec<String> = items.iter().map(|i| PyStr(i).to_string()).collect();
            let _ = write!(s, "[{}]", items.join(", "));
        }
        None => s.push_str("None"),
    }
}

fn const_repr(v: &ConstValue) -> String {
    v.to_string()
}

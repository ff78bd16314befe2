//! Kernel definitions in the module header.

use super::{Code, Error, ErrorKind};
use crate::ir::LineAt;
use crate::ir::{ConstValue, DeviceType, HalideArg, HalideMeta, KernelBackend, KernelDef, PyStr};
use std::fmt::Write;

/// Writes one definition: two blank lines, the kernel's comment lines, then
/// `name = async_compile.<backend>(...)`.
pub(super) fn definition(code: &mut Code, def: &KernelDef, device: DeviceType, at: LineAt<'_>) -> Result<(), Error> {
    if def.source.contains("'''") {
        return Err(Error::of(ErrorKind::SourceContainsTripleQuote {
            kernel: def.name.clone(),
        }));
    }
    code.blank();
    code.blank();
    for c in &def.comments {
        code.line(&comment(c));
    }
    let name = &def.name;
    let source = source_block(&def.source);
    let text = match &def.backend {
        KernelBackend::Triton(meta) => format!(
            "{name} = async_compile.triton({}, '''{source}''', device_str={})",
            PyStr(triton_function_name(def, meta.mangled_name.as_deref())),
            PyStr(device.as_str())
        ),
        KernelBackend::Halide(meta) => {
            format!("{name} = async_compile.halide({}, '''{source}''')", halide_meta(meta))
        }
        KernelBackend::Cpp(meta) => {
            let types: Vec<String> = meta.arg_types.iter().map(|t| PyStr(t).to_string()).collect();
            let compile = format!(
                "{name} = async_compile.cpp_pybinding([{}], '''{source}''')",
                types.join(", ")
            );
            match meta.isa {
                None => compile,
                // Inductor compiles the source for the ISA `cpp.simdlen` picks
                // (by default the best this CPU has); the source was generated
                // for its image's ISA, whose vector width it assumes.
                Some(isa) => format!(
                    "with torch._inductor.config.patch({{'cpp.simdlen': {}}}):  # its image's ISA, {isa}\n    {compile}",
                    isa.simdlen()
                ),
            }
        }
        KernelBackend::CudaC => format!("{name} = async_compile.cuda(r'''{source}''', 'so', aot_compile=False)"),
        KernelBackend::Host => {
            return Err(Error::new(
                at.location(),
                ErrorKind::HostKernel { kernel: name.clone() },
            ))
        }
    };
    // Multi-line text: written as-is (the source must not be indented).
    code.text.push_str(&text);
    code.text.push('\n');
    Ok(())
}

/// The name `async_compile.triton` looks up in the loaded source: the function
/// the source defines. Inductor names its own kernels after the wrapper variable
/// (`triton_poi_fused_add_0`), but a user-defined kernel keeps its function's
/// name (`add_scale_kernel`) while the variable gets a suffix
/// (`add_scale_kernel_0`); Triton's mangled name is that function name. Falls
/// back to the kernel's name when the source defines neither.
fn triton_function_name<'a>(def: &'a KernelDef, mangled_name: Option<&'a str>) -> &'a str {
    if defines_function(&def.source, def.name.as_str()) {
        return def.name.as_str();
    }
    match mangled_name {
        Some(mangled) if defines_function(&def.source, mangled) => mangled,
        _ => def.name.as_str(),
    }
}

/// Whether `source` has a top-level `def <name>(`.
fn defines_function(source: &str, name: &str) -> bool {
    source.lines().any(|line| {
        line.strip_prefix("def ")
            .and_then(|rest| rest.strip_prefix(name))
            .is_some_and(|rest| rest.trim_start().starts_with('('))
    })
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
    let mut s = format!(
        "HalideMeta(argtypes=[{}], target={}, scheduler=",
        args.join(", "),
        PyStr(&meta.target)
    );
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
    let mut s = format!(
        "HalideInputSpec(ctype={}, name={}, shape=",
        PyStr(&a.ctype),
        PyStr(&a.name)
    );
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

#[cfg(test)]
mod tests {
    use super::defines_function;

    #[test]
    fn finds_top_level_function_definitions() {
        let source =
            "@triton.jit\ndef add_scale_kernel(x_ptr, n, BLOCK: tl.constexpr):\n    def inner(a):\n        pass\n";
        let table = [
            ("add_scale_kernel", true),
            ("add_scale_kernel_0", false),
            ("add_scale", false),
            ("inner", false),
            ("x_ptr", false),
        ];
        for (name, expect) in table {
            assert_eq!(defines_function(source, name), expect, "{name}");
        }
        assert!(defines_function("def k (a):\n", "k"), "a space before the parenthesis");
    }
}

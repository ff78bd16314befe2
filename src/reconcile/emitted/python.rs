//! The Python lowering's launches: printed `.run(...)` calls and the launcher's grid.

use super::*;

/// The launches of the Python lowering ([`crate::lower::python`]): each
/// `kernel.run(...)`'s arguments as printed, bound to parameters the way
/// Inductor's launcher binds them, and the grid the launcher computes from them.
///
/// `kernel.run(*args, **kwargs, stream=...)` calls a generated
/// `def launcher(<def_args>, stream)` whose parameters are the kernel's call
/// parameters ([`crate::ir::TritonMeta::call_params`]): positional arguments
/// bind to them in order, named ones by name. The launcher then evaluates the
/// grid type's Python grid expressions over those values and the chosen
/// config's kwargs, with `-((numel) // -(BLOCK))` for each ceiling division
/// and `numel` itself when the config has no such block size or it is 1
/// (spec 4.3, 6.1). The kernel source's heuristics are taken to carry the
/// config and grid type of the kernel's metadata; the launcher allocates
/// scratch itself, so none is reported.
#[derive(Clone, Debug, Default)]
pub struct PythonLaunches {
    /// Options of the Python lowering.
    pub options: crate::lower::python::Options,
}

impl LaunchEmitter for PythonLaunches {
    fn name(&self) -> &str {
        "python"
    }

    fn emitted_launches(&self, info: &ProgramInfo<'_>) -> Result<Vec<EmittedLaunch>, EmitError> {
        let unsupported = |e: &crate::lower::Error| matches!(e.kind, crate::lower::ErrorKind::HostKernel { .. });
        printed_launches(self.name(), info, &self.options, unsupported, |p| {
            python_launch(info, p)
        })
    }
}

/// A printed `kernel.run(...)` as the launcher runs it.
pub(super) fn python_launch(info: &ProgramInfo<'_>, p: PrintedLaunch) -> Result<EmittedLaunch, String> {
    let at = format!("graph `{}`, line {}, kernel `{}`", p.graph, p.line, p.kernel);
    let meta = match info.program().kernels.get(&p.kernel).map(|d| &d.backend) {
        Some(KernelBackend::Triton(m)) => m,
        _ => return Err(format!("{at}: not a Triton kernel of the program")),
    };
    let def_args = meta.call_params();
    let mut args: Vec<(String, EmittedValue)> = Vec::with_capacity(p.args.len());
    let mut positional = 0usize;
    for PrintedArg { param, value } in p.args {
        let param = match param {
            Some(n) => n,
            None => {
                let n = def_args.get(positional).ok_or_else(|| {
                    format!(
                        "{at}: {} positional arguments but the launcher takes {}",
                        positional + 1,
                        def_args.len()
                    )
                })?;
                positional += 1;
                (*n).to_string()
            }
        };
        if args.iter().any(|(n, _)| *n == param) {
            return Err(format!("{at}: the launcher gets `{param}` twice"));
        }
        let value = emitted_value(value).map_err(|m| format!("{at}, `{param}`: {m}"))?;
        args.push((param, value));
    }
    let mut scope: std::collections::HashMap<&str, SymExpr> = std::collections::HashMap::new();
    for (n, v) in &args {
        match v {
            EmittedValue::Expr(e) => {
                scope.insert(n.as_str(), e.clone());
            }
            EmittedValue::Const(ConstValue::Bool(b)) => {
                scope.insert(n.as_str(), SymExpr::Int(i64::from(*b)));
            }
            _ => {}
        }
    }
    let grid = launcher_grid(meta, &scope).map_err(|m| format!("{at}: {m}"))?;
    Ok(EmittedLaunch {
        kernel: p.kernel,
        graph: p.graph,
        line: p.line,
        args,
        grid: Some(grid),
        scratch: None,
        ranges: Vec::new(),
    })
}

/// The grid Inductor's Python launcher computes from its arguments (`scope`)
/// and the config's kwargs ([`crate::ir::GridForm::Launcher`]).
pub(super) fn launcher_grid(
    meta: &crate::ir::TritonMeta,
    scope: &std::collections::HashMap<&str, SymExpr>,
) -> Result<[SymExpr; 3], String> {
    let value = |n: &str| {
        scope
            .get(n)
            .cloned()
            .or_else(|| meta.config.get(n).map(|v| SymExpr::Int(*v)))
    };
    meta.grid_in(crate::ir::GridForm::Launcher, &value)
        .map_err(|e| e.to_string())
}

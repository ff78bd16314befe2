//! The C++ lowerings' launches: `call_<kernel>` arguments, grids and scratch.

use super::*;

/// The launches of the C++ lowering ([`crate::lower::cpp`]) in one dialect:
/// for each call site, the values it passes into its `call_<kernel>`
/// wrapper's `kernel_args_` (constants stripped), the wrapper's `grid_0..2`
/// and scratch sizes with its parameters bound to those values, and the
/// ranges under which the printed C++ (`/` truncating, `uint32_t` grid
/// variables) computes them.
#[derive(Clone, Copy, Debug, Default)]
pub struct CppLaunches {
    /// The dialect.
    pub dialect: crate::lower::cpp::Dialect,
}

impl LaunchEmitter for CppLaunches {
    fn name(&self) -> &str {
        match self.dialect {
            crate::lower::cpp::Dialect::Aoti => "cpp",
            crate::lower::cpp::Dialect::Standalone => "cpp-standalone",
        }
    }

    fn emitted_launches(&self, info: &ProgramInfo<'_>) -> Result<Vec<EmittedLaunch>, EmitError> {
        let options = crate::lower::cpp::Options::for_dialect(self.dialect);
        let unsupported = |e: &crate::lower::Error| {
            matches!(
                e.kind,
                crate::lower::ErrorKind::NotSupported { .. } | crate::lower::ErrorKind::MultiOutputArgument { .. }
            )
        };
        printed_launches(self.name(), info, &options, unsupported, cpp_launch)
    }
}

pub(super) fn cpp_launch(p: PrintedLaunch) -> Result<EmittedLaunch, String> {
    let at = format!("graph `{}`, line {}, kernel `{}`", p.graph, p.line, p.kernel);
    let mut args = Vec::with_capacity(p.args.len());
    for a in p.args {
        let param = a
            .param
            .ok_or_else(|| format!("{at}: an argument without its parameter"))?;
        let value = emitted_value(a.value).map_err(|m| format!("{at}, `{param}`: {m}"))?;
        args.push((param, value));
    }
    let scratch = p.scratch.map(|list| {
        list.into_iter()
            .map(|s| EmittedScratch {
                kind: match s.pointer {
                    ScratchPointer::Global => ScratchKind::Global,
                    ScratchPointer::Profile => ScratchKind::Profile,
                },
                bytes: s.bytes,
            })
            .collect()
    });
    let ranges = p
        .ranges
        .into_iter()
        .map(|r| EmittedRange {
            what: r.what,
            value: r.value,
            lo: r.lo,
            hi: r.hi,
        })
        .collect();
    Ok(EmittedLaunch {
        kernel: p.kernel,
        graph: p.graph,
        line: p.line,
        args,
        grid: p.grid,
        scratch,
        ranges,
    })
}

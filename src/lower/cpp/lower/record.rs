//! Triton launches recorded while lowering, composed with their wrappers.

use super::*;

/// Launches recorded while lowering (see [`lower_recording_launches`]).
#[derive(Debug, Default)]
pub(super) struct Recorded {
    /// Each Triton call site, in lowering order.
    pub(super) calls: Vec<RecordedCall>,
    /// What each kernel's launch wrapper launches.
    pub(super) wrappers: HashMap<KernelName, launch::WrapperLaunch>,
}

/// One `call_<kernel>(...)` as printed.
#[derive(Debug)]
pub(super) struct RecordedCall {
    pub(super) kernel: KernelName,
    pub(super) graph: GraphName,
    pub(super) line: usize,
    /// Wrapper parameter -> the value printed for it.
    pub(super) args: Vec<(String, ArgValue)>,
}

impl RecordedCall {
    /// The call's line.
    pub(super) fn location(&self, program: &Program) -> Location {
        let graph = (self.graph.as_str() != MAIN_GRAPH).then_some(&self.graph);
        Location::in_program(program, graph, Some(self.line))
    }

    /// The launch: the wrapper's `kernel_args_`, grid and scratch with its
    /// parameters bound to the values this call passes.
    pub(super) fn compose(self, w: &launch::WrapperLaunch, program: &Program) -> Result<PrintedLaunch, Error> {
        let value = |name: &str| self.args.iter().find(|(p, _)| p == name).map(|(_, v)| v);
        let bound: HashMap<&str, SymExpr> = self
            .args
            .iter()
            .filter_map(|(p, v)| match v {
                ArgValue::Expr(e) => Some((p.as_str(), e.clone())),
                ArgValue::Bool(b) => Some((p.as_str(), SymExpr::Int(i64::from(*b)))),
                _ => None,
            })
            .collect();
        let subst = |e: &SymExpr| e.substitute(&|s: &Symbol| bound.get(s.as_str()).cloned());
        let mut args = Vec::with_capacity(w.kernel_args.len());
        for p in &w.kernel_args {
            // Internal: every wrapper parameter is one the call site passes
            // (both come from `launch::bind_call_args`).
            let v = value(p).ok_or_else(|| {
                Error::invalid(
                    self.location(program),
                    format!("call of `{}` passes nothing for wrapper parameter `{p}`", self.kernel),
                )
            })?;
            args.push(PrintedArg {
                param: Some(p.clone()),
                value: v.clone(),
            });
        }
        let [g0, g1, g2] = &w.grid;
        Ok(PrintedLaunch {
            kernel: self.kernel.clone(),
            graph: self.graph.clone(),
            line: self.line,
            args,
            grid: Some([subst(g0), subst(g1), subst(g2)]),
            scratch: Some(
                w.scratch
                    .iter()
                    .map(|s| PrintedScratch {
                        pointer: s.pointer,
                        bytes: s.bytes.as_ref().map(subst),
                    })
                    .collect(),
            ),
            ranges: w
                .ranges
                .iter()
                .map(|r| PrintedRange {
                    what: r.what.clone(),
                    value: subst(&r.value),
                    lo: r.lo,
                    hi: r.hi,
                })
                .collect(),
        })
    }
}

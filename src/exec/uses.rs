//! What a program calls, known before it runs: every extern-op call
//! ([`extern_uses`]) and kernel call ([`kernel_uses`]) with its graph and
//! line, so that a caller (`wrapir check --device`, `HostBackend::check_runs`,
//! the packer) can tell which of them a backend lacks.

use crate::ir::KernelBackend;

/// One extern-op call of a program: where it is and what it calls.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExternUse {
    /// The graph (`main` for the main graph, as the validator's errors name it).
    pub graph: String,
    /// The line's index in [`crate::ir::Graph::lines`], from 0.
    pub line: usize,
    /// The line's text form, as diagnostics quote it.
    pub text: String,
    /// The op as the run calls it (`extern_kernels.mm`, `torch.ops.aten.index_put_.default`).
    pub op: String,
    /// The line is an op call in every lowering ([`crate::ir::LineOp::named`]).
    pub named: bool,
}

impl std::fmt::Display for ExternUse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "graph {}, line {} `{}`: op `{}`",
            self.graph, self.line, self.text, self.op
        )
    }
}

/// Every extern op a run of `program` calls, main graph first, then the
/// subgraphs in program order, each in line order: the lines whose
/// [`Line::runtime_op`](crate::ir::Line::runtime_op) is an op, the rule the
/// FX lowering (whose graph the interpreter runs) takes its op calls from.
pub fn extern_uses(program: &crate::ir::Program) -> Vec<ExternUse> {
    let mut uses = Vec::new();
    for (name, graph, index, line) in lines(program) {
        let dtype = |b: &crate::ir::BufName| graph.layout(b).or_else(|| program.constants.get(b)).map(|l| l.dtype);
        let Some(call) = line.runtime_op(dtype) else {
            continue;
        };
        uses.push(ExternUse {
            graph: name.to_string(),
            line: index,
            text: crate::text::print_line(line),
            op: call.op,
            named: call.named,
        });
    }
    uses
}

/// One kernel call of a program: where it is and the kernel's backend.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelUse {
    /// The graph (`main` for the main graph, as the validator's errors name it).
    pub graph: String,
    /// The line's index in [`crate::ir::Graph::lines`], from 0.
    pub line: usize,
    /// The line's text form, as diagnostics quote it.
    pub text: String,
    /// The kernel.
    pub kernel: String,
    /// Its backend's keyword (`triton`, `cpp`, `halide`, `cuda_c`, `host`;
    /// `None` when the program does not define it).
    pub backend: Option<&'static str>,
    /// The host backend runs it from the bundle's image (a C++ or CPU Halide
    /// kernel, [`is_host_image_kernel`]).
    pub runs_on_host: bool,
}

/// Every kernel call of `program`, main graph first, then the subgraphs in
/// program order, each in line order.
pub fn kernel_uses(program: &crate::ir::Program) -> Vec<KernelUse> {
    let mut uses = Vec::new();
    for (name, _, index, line) in lines(program) {
        let crate::ir::Line::KernelCall(call) = line else {
            continue;
        };
        let def = program.kernels.get(&call.kernel);
        uses.push(KernelUse {
            graph: name.to_string(),
            line: index,
            text: crate::text::print_line(line),
            kernel: call.kernel.to_string(),
            backend: def.map(|d| d.backend.keyword()),
            runs_on_host: def.is_some_and(|d| is_host_image_kernel(&d.backend)),
        });
    }
    uses
}

/// Whether the host backend runs a kernel of this backend from a bundle's image:
/// C++ kernels and CPU Halide pipelines (`kernels/<kernel>.so`).
pub fn is_host_image_kernel(backend: &KernelBackend) -> bool {
    match backend {
        KernelBackend::Cpp(_) => true,
        KernelBackend::Halide(m) => !m.is_cuda(),
        _ => false,
    }
}

/// Every line of `program` with its graph's name (`main` first, then the
/// subgraphs in program order) and its index, in line order.
fn lines(program: &crate::ir::Program) -> impl Iterator<Item = (&str, &crate::ir::Graph, usize, &crate::ir::Line)> {
    std::iter::once((crate::ir::MAIN_GRAPH, &program.main))
        .chain(program.subgraphs.iter().map(|(name, g)| (name.as_str(), g)))
        .flat_map(|(name, graph)| {
            graph
                .lines
                .iter()
                .enumerate()
                .map(move |(index, line)| (name, graph, index, line))
        })
}

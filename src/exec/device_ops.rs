//! The extern ops the CUDA backend runs on the device, known without a GPU
//! or the `cuda` feature, so that `wrapir ops` and `wrapir check --device
//! cuda` can answer anywhere.
//!
//! Ops are named by [`super::host::op_key`] (`aten.addmm` for both
//! `extern_kernels.addmm` and `torch.ops.aten.addmm.default`). The CUDA
//! backend's dispatch covers exactly these keys (a GPU test checks it); a
//! row may still refuse a call it cannot take (a dtype or layout the
//! library does not support), which is an error naming the op and the reason.
//!
//! [`extern_uses`] lists every extern op a program calls, with its graph and
//! line, so a caller can tell before running which of them a backend lacks;
//! [`markdown_table`] renders the table as the README shows it.

/// One row of the table: an op and what runs it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceOp {
    /// The op key (`aten.mm`).
    pub op: &'static str,
    /// What runs it: `cuBLAS`, `cuBLASLt`, `cuDNN` (the library call PyTorch
    /// makes), `built-in kernel` (wrapir's NVRTC kernels for index, scatter,
    /// jagged, top-k, segment, random and complex ops, which compute what
    /// ATen's kernels compute), [`VIEW`] (a view: no device work), or
    /// [`OWN_ATTENTION`] (wrapir's flash-attention kernels, whose summation
    /// order differs from the library PyTorch calls).
    pub via: &'static str,
    /// The dtypes it takes, as the README lists them.
    pub dtypes: &'static str,
}

const FLOAT: &str = "f32, f16, bf16";

/// The `dtypes` of the complex pointwise ops (Inductor leaves them to ATen:
/// Triton has no complex types).
const COMPLEX: &str = "c64, c128 (two tensors, one complex)";

/// The `via` of the view ops: no kernel, the result aliases its input.
pub const VIEW: &str = "view (aliases its input)";

/// The `via` of the attention ops: wrapir's own kernels, not PyTorch's
/// (cuDNN, FlashAttention or the memory-efficient CUTLASS kernels).
pub const OWN_ATTENTION: &str = "flash-attention kernel";

impl DeviceOp {
    /// Whether the device runs this op as PyTorch does (the same library
    /// call, or a kernel computing the same values), so that a program's
    /// results can be compared with Inductor's own at a tight tolerance;
    /// false for ops on wrapir's own kernels whose rounding differs.
    pub fn same_numerics_as_pytorch(&self) -> bool {
        self.via != OWN_ATTENTION
    }
}

/// Every extern op the CUDA backend runs on the device, by op key.
pub const CUDA_OPS: &[DeviceOp] = &[
    DeviceOp {
        op: "aten.mm",
        via: "cuBLAS",
        dtypes: FLOAT,
    },
    DeviceOp {
        op: "aten.bmm",
        via: "cuBLAS",
        dtypes: FLOAT,
    },
    DeviceOp {
        op: "aten.addmm",
        via: "cuBLASLt",
        dtypes: FLOAT,
    },
    DeviceOp {
        op: "aten._addmm_activation",
        via: "cuBLASLt",
        dtypes: FLOAT,
    },
    DeviceOp {
        op: "aten.baddbmm",
        via: "cuBLAS",
        dtypes: FLOAT,
    },
    DeviceOp {
        op: "aten.addbmm",
        via: "cuBLAS",
        dtypes: FLOAT,
    },
    DeviceOp {
        op: "aten.convolution",
        via: "cuDNN",
        dtypes: FLOAT,
    },
    DeviceOp {
        op: "aten.nonzero",
        via: "built-in kernel",
        dtypes: "all",
    },
    DeviceOp {
        op: "aten.masked_select",
        via: "built-in kernel",
        dtypes: "all",
    },
    DeviceOp {
        op: "aten.index",
        via: "built-in kernel",
        dtypes: "all (boolean mask index)",
    },
    DeviceOp {
        op: "aten._jagged_to_padded_dense_forward",
        via: "built-in kernel",
        dtypes: "f32, f64, f16, bf16",
    },
    DeviceOp {
        op: "aten._jagged_to_padded_dense_backward",
        via: "built-in kernel",
        dtypes: "f32, f64, f16, bf16",
    },
    DeviceOp {
        op: "aten._padded_dense_to_jagged_forward",
        via: "built-in kernel",
        dtypes: "f32, f64, f16, bf16",
    },
    DeviceOp {
        op: "aten._padded_dense_to_jagged_backward",
        via: "built-in kernel",
        dtypes: "f32, f64, f16, bf16",
    },
    DeviceOp {
        op: "aten.scatter_",
        via: "built-in kernel",
        dtypes: "all",
    },
    DeviceOp {
        op: "aten.scatter_add_",
        via: "built-in kernel",
        dtypes: "all",
    },
    DeviceOp {
        op: "aten.scatter_reduce_",
        via: "built-in kernel",
        dtypes: "all",
    },
    DeviceOp {
        op: "aten.index_put_",
        via: "built-in kernel",
        dtypes: "all",
    },
    DeviceOp {
        op: "aten.topk",
        via: "built-in kernel",
        dtypes: "all",
    },
    DeviceOp {
        op: "aten.segment_reduce",
        via: "built-in kernel",
        dtypes: "f32, f64, f16, bf16",
    },
    DeviceOp {
        op: "aten.randint",
        via: "built-in kernel",
        dtypes: "i64 (PyTorch's Philox values)",
    },
    DeviceOp {
        op: "aten.view_as_complex",
        via: VIEW,
        dtypes: "f32, f64, f16",
    },
    DeviceOp {
        op: "aten.view_as_real",
        via: VIEW,
        dtypes: "c64, c128, c32",
    },
    DeviceOp {
        op: "aten.view",
        via: VIEW,
        dtypes: "view(dtype): same width, or complex <-> its parts",
    },
    DeviceOp {
        op: "aten.mul",
        via: "built-in kernel",
        dtypes: COMPLEX,
    },
    DeviceOp {
        op: "aten.add",
        via: "built-in kernel",
        dtypes: COMPLEX,
    },
    DeviceOp {
        op: "aten.sub",
        via: "built-in kernel",
        dtypes: COMPLEX,
    },
    DeviceOp {
        op: "aten.div",
        via: "built-in kernel",
        dtypes: COMPLEX,
    },
    DeviceOp {
        op: "aten._scaled_dot_product_efficient_attention",
        via: OWN_ATTENTION,
        dtypes: FLOAT,
    },
    DeviceOp {
        op: "aten._scaled_dot_product_flash_attention",
        via: OWN_ATTENTION,
        dtypes: FLOAT,
    },
    DeviceOp {
        op: "aten._scaled_dot_product_cudnn_attention",
        via: "cuDNN",
        dtypes: "f16, bf16 (f32: flash-attention kernel)",
    },
];

/// The row of `op` (any spelling [`super::host::op_key`] accepts).
pub fn cuda_op(op: &str) -> Option<&'static DeviceOp> {
    let key = super::host::op_key(op);
    CUDA_OPS.iter().find(|row| row.op == key)
}

/// Whether the CUDA backend runs `op` on the device (any spelling
/// [`super::host::op_key`] accepts). Without host fallback
/// (`CudaOptions::host_fallback` off, the default) every other extern op is
/// an error naming it.
/// The `torch.ops.streams.*` event ops count as run: they have no device
/// work when every line runs in program order on one stream
/// ([`super::stream_ops`]).
pub fn runs_on_cuda(op: &str) -> bool {
    cuda_op(op).is_some() || super::stream_ops::is_stream_op(&super::host::op_key(op))
}

/// Where the CUDA backend runs an extern op, as far as the op's name tells
/// (a device row may still refuse some operands at run time).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CudaSupport {
    /// On the device: the op has a row of [`CUDA_OPS`].
    Device,
    /// On the host, through the allowed host fallback.
    HostFallback,
    /// Nowhere in this configuration; `fallback`: the host fallback would
    /// run it (`CudaOptions::host_fallback`, the CLI's `--allow-host-fallback`).
    Missing {
        /// The host backend `host` has the op.
        fallback: bool,
    },
}

/// Where the CUDA backend runs `op` when its host fallback is `allowed`,
/// with `host` the fallback's registry ([`super::host::HostBackend::has_op`]).
pub fn cuda_support(op: &str, host: &super::host::HostBackend, allowed: bool) -> CudaSupport {
    match (runs_on_cuda(op), host.has_op(op)) {
        (true, _) => CudaSupport::Device,
        (false, true) if allowed => CudaSupport::HostFallback,
        (false, fallback) => CudaSupport::Missing { fallback },
    }
}

/// The Markdown table of [`CUDA_OPS`] the README shows (`| op | runs on |
/// dtypes |`, one row per op in table order), so that the README can be
/// checked against the table.
pub fn markdown_table() -> String {
    let mut out = String::from("| op | runs on | dtypes |\n|---|---|---|\n");
    for row in CUDA_OPS {
        out += &format!("| `{}` | {} | {} |\n", row.op, row.via, row.dtypes);
    }
    out
}

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
    /// The line is an op call in every lowering (extern lines, index_put
    /// and scatter fallbacks: the calls a standalone C++ wrapper makes in
    /// wrapir's runtime library); `false` for the calls only the FX
    /// lowering makes (a dtype-changing reinterpret, `ConvertInt`,
    /// communication buffers), which the C++ wrappers do themselves.
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
/// subgraphs in program order, each in line order: the lines that name an
/// op (`ExternKernelAlloc`, `ExternKernelOut`, `ExternKernelMultiOut`,
/// `ScatterFallback`), and those
/// the FX lowering turns into an op call: `IndexPutFallback`
/// (`aten.index_put_`), a `Reinterpret` that changes the dtype
/// (`aten.view.dtype`), a `DynamicScalar` with `ConvertInt` (`aten.where`) and
/// `CommBufferAllocate` (the symmetric-memory allocator).
pub fn extern_uses(program: &crate::ir::Program) -> Vec<ExternUse> {
    use crate::ir::{KeyEntry, Line};
    let graphs = std::iter::once((crate::ir::MAIN_GRAPH.to_string(), &program.main))
        .chain(program.subgraphs.iter().map(|(name, g)| (name.to_string(), g)));
    let mut uses = Vec::new();
    for (name, graph) in graphs {
        for (index, line) in graph.lines.iter().enumerate() {
            let named = line.extern_call().is_some()
                || matches!(line, Line::IndexPutFallback { .. } | Line::ScatterFallback(_));
            let op = if let Some(call) = line.extern_call() {
                call.op.clone()
            } else {
                match line {
                    Line::IndexPutFallback { .. } => crate::ir::IndexPutFallback::OP.to_string(),
                    Line::ScatterFallback(s) => s.op.clone(),
                    Line::Reinterpret { base, alias } => {
                        let dtype = |b| graph.layout(b).or_else(|| program.constants.get(b)).map(|l| l.dtype);
                        match (dtype(base), dtype(alias)) {
                            (Some(a), Some(b)) if a != b => "torch.ops.aten.view.dtype".to_string(),
                            _ => continue,
                        }
                    }
                    Line::DynamicScalar(d) if d.keypath.as_slice() == [KeyEntry::ConvertInt] => {
                        "torch.ops.aten.where.Scalar".to_string()
                    }
                    Line::CommBufferAllocate { .. } => crate::lower::fx::COMM_ALLOCATOR.to_string(),
                    _ => continue,
                }
            };
            uses.push(ExternUse {
                graph: name.clone(),
                line: index,
                text: crate::text::print_line(line),
                op,
                named,
            });
        }
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
    /// kernel, [`crate::exec::host_kernels::is_host_image_kernel`]).
    pub runs_on_host: bool,
}

/// Every kernel call of `program`, main graph first, then the subgraphs in
/// program order, each in line order.
pub fn kernel_uses(program: &crate::ir::Program) -> Vec<KernelUse> {
    let graphs = std::iter::once((crate::ir::MAIN_GRAPH.to_string(), &program.main))
        .chain(program.subgraphs.iter().map(|(name, g)| (name.to_string(), g)));
    let mut uses = Vec::new();
    for (name, graph) in graphs {
        for (index, line) in graph.lines.iter().enumerate() {
            let crate::ir::Line::KernelCall(call) = line else {
                continue;
            };
            let def = program.kernels.get(&call.kernel);
            uses.push(KernelUse {
                graph: name.clone(),
                line: index,
                text: crate::text::print_line(line),
                kernel: call.kernel.to_string(),
                backend: def.map(|d| d.backend.keyword()),
                runs_on_host: def.is_some_and(|d| crate::exec::host_kernels::is_host_image_kernel(&d.backend)),
            });
        }
    }
    uses
}

//! The extern ops the CUDA backend runs on the device, known without a GPU
//! or the `cuda` feature, so that `wrapir ops` and `wrapir check --device
//! cuda` can answer anywhere.
//!
//! The rows are a view of the extern-op catalogue ([`super::op::CATALOGUE`]):
//! its entries with a CUDA implementation, named by registry key
//! (`aten.addmm` for both `extern_kernels.addmm` and
//! `torch.ops.aten.addmm.default`). The CUDA backend's dispatch routes by the
//! same entries, so it covers exactly these rows; a row may still refuse a
//! call it cannot take (a dtype or layout the library does not support),
//! which is an error naming the op and the reason.
//!
//! [`markdown_table`] renders the table as the README shows it; which ops a
//! program calls is [`super::uses::extern_uses`].

use super::op::{Entry, ExternOp, CATALOGUE, OWN_ATTENTION};

/// One row of the table: an op and what runs it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceOp {
    /// The op key (`aten.mm`).
    pub op: &'static str,
    /// What runs it: `cuBLAS`, `cuBLASLt`, `cuDNN` (the library call PyTorch
    /// makes), `built-in kernel` (wrapir's NVRTC kernels for index, scatter,
    /// jagged, top-k, segment, random and complex ops, which compute what
    /// ATen's kernels compute), [`super::op::VIEW`] (a view: no device work), or
    /// [`OWN_ATTENTION`] (wrapir's flash-attention kernels, whose summation
    /// order differs from the library PyTorch calls).
    pub via: &'static str,
    /// The dtypes it takes, as the README lists them.
    pub dtypes: &'static str,
}

impl DeviceOp {
    /// Whether the device runs this op as PyTorch does (the same library
    /// call, or a kernel computing the same values), so that a program's
    /// results can be compared with Inductor's own at a tight tolerance;
    /// false for ops on wrapir's own kernels whose rounding differs.
    pub fn same_numerics_as_pytorch(&self) -> bool {
        self.via != OWN_ATTENTION
    }

    /// The row of a catalogue entry the CUDA backend runs on the device.
    fn of(entry: &'static Entry) -> Option<DeviceOp> {
        entry.cuda.map(|on| DeviceOp {
            op: entry.key,
            via: on.via,
            dtypes: on.dtypes,
        })
    }
}

/// Every extern op the CUDA backend runs on the device, in catalogue order:
/// the entries of [`super::op::CATALOGUE`] with a CUDA implementation.
pub fn cuda_ops() -> Vec<DeviceOp> {
    CATALOGUE.iter().filter_map(DeviceOp::of).collect()
}

/// The row of `op` (any spelling [`super::op::op_key`] accepts).
pub fn cuda_op(op: &str) -> Option<DeviceOp> {
    ExternOp::of(op).entry().and_then(DeviceOp::of)
}

/// Whether the CUDA backend runs `op` on the device (any spelling
/// [`super::op::op_key`] accepts). Without host fallback
/// (`CudaOptions::host_fallback` off, the default) every other extern op is
/// an error naming it.
/// The `torch.ops.streams.*` event ops count as run: they have no device
/// work when every line runs in program order on one stream
/// ([`super::op::stream`]).
pub fn runs_on_cuda(op: &str) -> bool {
    cuda_op(op).is_some() || super::op::stream::is_stream_op(&super::op::op_key(op))
}

/// Where the CUDA backend runs an extern op, as far as the op's name tells
/// (a device row may still refuse some operands at run time).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CudaSupport {
    /// On the device: the op has a row of [`cuda_ops`].
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

/// The Markdown table of [`cuda_ops`] the README shows (`| op | runs on |
/// dtypes |`, one row per op in table order), so that the README can be
/// checked against the table.
pub fn markdown_table() -> String {
    let mut out = String::from("| op | runs on | dtypes |\n|---|---|---|\n");
    for row in cuda_ops() {
        out += &format!("| `{}` | {} | {} |\n", row.op, row.via, row.dtypes);
    }
    out
}

#[cfg(test)]
mod tests {
    //! The views of the extern-op catalogue agree with it; none needs a GPU.

    use super::*;
    use crate::exec::host::HostBackend;
    use crate::exec::op::{CudaRoute, CATALOGUE, VIEW};
    use std::collections::BTreeSet;

    #[test]
    fn the_host_registry_is_the_host_column() {
        for entry in CATALOGUE {
            assert_eq!(
                crate::exec::host::ops::builtin(&entry.op).is_some(),
                entry.host,
                "`{}`: the host's built-ins and the catalogue's host column differ",
                entry.key
            );
        }
        let registered: BTreeSet<String> = HostBackend::default().op_names().into_iter().collect();
        // The catalogue's host column, and the stream ops every backend runs in order.
        let host: BTreeSet<String> = CATALOGUE
            .iter()
            .filter(|e| e.host)
            .map(|e| e.key)
            .chain(crate::exec::op::stream::STREAM_OPS)
            .map(str::to_string)
            .collect();
        assert_eq!(registered, host);
    }

    #[test]
    fn the_cuda_table_is_the_cuda_column() {
        let rows = cuda_ops();
        let column: Vec<&str> = CATALOGUE.iter().filter(|e| e.cuda.is_some()).map(|e| e.key).collect();
        assert_eq!(rows.iter().map(|r| r.op).collect::<Vec<_>>(), column);
        for entry in CATALOGUE {
            let row = cuda_op(&format!("torch.ops.{}.default", entry.key));
            assert_eq!(
                row.map(|r| (r.via, r.dtypes)),
                entry.cuda.map(|c| (c.via, c.dtypes)),
                "{}",
                entry.key
            );
        }
        // The views and the catalogue's route: attention ops run in the
        // attention module, GEMMs on the BLAS libraries, views alias.
        for entry in CATALOGUE.iter().filter_map(|e| e.cuda.map(|c| (e, c))) {
            let (entry, on) = entry;
            let expected = match on.route {
                CudaRoute::Blas => matches!(on.via, "cuBLAS" | "cuBLASLt"),
                CudaRoute::Conv | CudaRoute::Rnn => on.via == "cuDNN",
                CudaRoute::Attention => matches!(on.via, OWN_ATTENTION | "cuDNN"),
                CudaRoute::Kernel => on.via == "built-in kernel",
                CudaRoute::Extra => matches!(on.via, "built-in kernel" | VIEW),
            };
            assert!(expected, "`{}` runs via {} on route {:?}", entry.key, on.via, on.route);
        }
    }
}

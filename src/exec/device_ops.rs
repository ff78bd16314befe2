//! The extern ops the CUDA backend runs on the device, known without a GPU
//! or the `cuda` feature, so that `wrapir ops` and `wrapir check --device
//! cuda` can answer anywhere.
//!
//! Ops are named by [`super::host::op_key`] (`aten.addmm` for both
//! `extern_kernels.addmm` and `torch.ops.aten.addmm.default`). The CUDA
//! backend's dispatch covers exactly these keys (a GPU test checks it); a
//! row may still refuse a call it cannot take (a dtype or layout the
//! library does not support), which is an error naming the op and the reason.

/// One row of the table: an op and what runs it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceOp {
    /// The op key (`aten.mm`).
    pub op: &'static str,
    /// What runs it: `cuBLAS`, `cuBLASLt`, `cuDNN`, or `built-in kernel` (NVRTC).
    pub via: &'static str,
    /// The dtypes it takes, as the README lists them.
    pub dtypes: &'static str,
}

const FLOAT: &str = "f32, f16, bf16";

/// Every extern op the CUDA backend runs on the device, by op key.
pub const CUDA_OPS: &[DeviceOp] = &[
    DeviceOp { op: "aten.mm", via: "cuBLAS", dtypes: FLOAT },
    DeviceOp { op: "aten.bmm", via: "cuBLAS", dtypes: FLOAT },
    DeviceOp { op: "aten.nonzero", via: "built-in kernel", dtypes: "all" },
    DeviceOp { op: "aten.masked_select", via: "built-in kernel", dtypes: "all" },
    DeviceOp { op: "aten.index", via: "built-in kernel", dtypes: "all (boolean mask index)" },
    DeviceOp { op: "aten._jagged_to_padded_dense_forward", via: "built-in kernel", dtypes: "f32, f64, f16, bf16" },
    DeviceOp { op: "aten._jagged_to_padded_dense_backward", via: "built-in kernel", dtypes: "f32, f64, f16, bf16" },
    DeviceOp { op: "aten._padded_dense_to_jagged_forward", via: "built-in kernel", dtypes: "f32, f64, f16, bf16" },
    DeviceOp { op: "aten._padded_dense_to_jagged_backward", via: "built-in kernel", dtypes: "f32, f64, f16, bf16" },
    DeviceOp { op: "aten.scatter_", via: "built-in kernel", dtypes: "all" },
    DeviceOp { op: "aten.scatter_add_", via: "built-in kernel", dtypes: "all" },
    DeviceOp { op: "aten.scatter_reduce_", via: "built-in kernel", dtypes: "all" },
    DeviceOp { op: "aten.index_put_", via: "built-in kernel", dtypes: "all" },
    DeviceOp { op: "aten.topk", via: "built-in kernel", dtypes: "all" },
];

/// The row of `op` (any spelling [`super::host::op_key`] accepts).
pub fn cuda_op(op: &str) -> Option<&'static DeviceOp> {
    let key = super::host::op_key(op);
    CUDA_OPS.iter().find(|row| row.op == key)
}

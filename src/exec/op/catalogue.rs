//! The extern-op catalogue: one [`ExternOp`] per op family that a backend
//! runs itself, each with its registry key (the one place an op's name is
//! written) and what runs it on each backend. A program's op strings are
//! resolved to an [`ExternOp`] once, when the interpreter compiles its plan
//! ([`ExternOp::of`]); an op the catalogue does not know stays
//! [`ExternOp::Other`] and runs where a user registered it
//! (`HostBackend::register_op`).
//!
//! The host backend's built-ins, the CUDA backend's device dispatch,
//! [`crate::exec::device_ops::cuda_ops`] (`wrapir ops`) and
//! `wrapir check --device` are views of [`CATALOGUE`]; tests without a
//! GPU check that they agree: the host's built-ins are its host column, and
//! (with the `cuda` feature) every CUDA claim has a function in the table of
//! the backend module its route names, the table that module's dispatch reads.

/// The `dtypes` of the GEMM, convolution and attention rows.
const FLOAT: &str = "f32, f16, bf16";

/// The `dtypes` of the complex pointwise ops (Inductor leaves them to ATen:
/// Triton has no complex types).
const COMPLEX: &str = "c64, c128 (two tensors, one complex)";

/// The `dtypes` of the jagged <-> padded dense conversions.
const JAGGED: &str = "f32, f64, f16, bf16";

/// The `via` of the view ops: no kernel, the result aliases its input.
pub const VIEW: &str = "view (aliases its input)";

/// The `via` of the attention ops: wrapir's own kernels, not PyTorch's
/// (cuDNN, FlashAttention or the memory-efficient CUTLASS kernels).
pub const OWN_ATTENTION: &str = "flash-attention kernel";

/// wrapir's NVRTC kernels for index, scatter, jagged, top-k, sort, segment,
/// random and complex ops, which compute what ATen's kernels compute.
const KERNEL: &str = "built-in kernel";

/// Which part of the CUDA backend runs an op on the device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CudaRoute {
    /// cuBLAS / cuBLASLt GEMMs (`exec::cuda::matmul`).
    Blas,
    /// cuDNN convolutions (`exec::cuda::conv`).
    Conv,
    /// The attention ops (`exec::cuda::attention`).
    Attention,
    /// The built-in index, scatter, jagged, top-k and sort kernels (`exec::cuda::kernels::ops`).
    Kernel,
    /// Views, complex pointwise ops, segment reductions and random numbers
    /// (`exec::cuda::kernels::extra`).
    Extra,
}

/// How the CUDA backend runs an op on the device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OnCuda {
    /// The part of the backend that runs it.
    pub route: CudaRoute,
    /// What runs it: `cuBLAS`, `cuBLASLt`, `cuDNN` (the library call PyTorch
    /// makes), `built-in kernel` (wrapir's NVRTC kernels, which compute what
    /// ATen's kernels compute), [`VIEW`] (a view: no device work), or
    /// [`OWN_ATTENTION`] (wrapir's flash-attention kernels, whose summation
    /// order differs from the library PyTorch calls).
    pub via: &'static str,
    /// The dtypes it takes, as the README lists them.
    pub dtypes: &'static str,
}

/// One op family of the catalogue and the backends that run it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    /// The op.
    pub op: ExternOp,
    /// Its registry key (`aten.mm`).
    pub key: &'static str,
    /// The host backend has it built in.
    pub host: bool,
    /// The CUDA backend runs it on the device (`None`: only through its host
    /// fallback, where that is allowed).
    pub cuda: Option<OnCuda>,
}

macro_rules! catalogue {
    ($(
        $(#[$doc:meta])*
        $variant:ident($konst:ident) = $key:literal, host: $host:literal, cuda: $cuda:expr;
    )*) => {
        /// An extern op, by family: every overload of `aten.mm`
        /// (`extern_kernels.mm`, `torch.ops.aten.mm.default`, `aten.mm.out`)
        /// is [`ExternOp::Mm`]. An op the catalogue does not know is
        /// [`ExternOp::Other`]: the call's op string names it.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum ExternOp {
            $(
                #[doc = concat!("`", $key, "`.")]
                #[doc = ""]
                $(#[$doc])*
                $variant,
            )*
            /// An op the catalogue does not know (`mylib.fused`): it runs
            /// where a user registered it, by the call's op string.
            Other,
        }

        /// Each known op's registry key, for code that needs the name as a
        /// constant (an error's op, a library call's label).
        pub mod key {
            $(
                #[doc = concat!("`", $key, "`.")]
                pub const $konst: &str = $key;
            )*
        }

        impl ExternOp {
            /// The registry key (`aten.mm`): namespace and name without
            /// overload; `None` for [`ExternOp::Other`].
            pub fn key(self) -> Option<&'static str> {
                match self {
                    $(ExternOp::$variant => Some(key::$konst),)*
                    ExternOp::Other => None,
                }
            }

            /// Its catalogue entry (`None` for [`ExternOp::Other`]).
            pub fn entry(self) -> Option<&'static Entry> {
                /// Each known op's position in [`CATALOGUE`].
                enum Position {
                    $($variant,)*
                }
                match self {
                    $(ExternOp::$variant => Some(&CATALOGUE[Position::$variant as usize]),)*
                    ExternOp::Other => None,
                }
            }

            /// The op of a registry key.
            pub fn from_key(k: &str) -> ExternOp {
                match k {
                    $(key::$konst => ExternOp::$variant,)*
                    _ => ExternOp::Other,
                }
            }
        }

        /// Every op family the catalogue knows, in the order `wrapir ops`
        /// lists the CUDA rows, with what runs it.
        pub static CATALOGUE: &[Entry] = &[
            $(Entry { op: ExternOp::$variant, key: key::$konst, host: $host, cuda: $cuda },)*
        ];
    };
}

const fn cuda(route: CudaRoute, via: &'static str, dtypes: &'static str) -> Option<OnCuda> {
    Some(OnCuda { route, via, dtypes })
}

use CudaRoute::{Attention, Blas, Conv, Extra, Kernel};

catalogue! {
    Mm(MM) = "aten.mm", host: true, cuda: cuda(Blas, "cuBLAS", FLOAT);
    Bmm(BMM) = "aten.bmm", host: true, cuda: cuda(Blas, "cuBLAS", FLOAT);
    Addmm(ADDMM) = "aten.addmm", host: true, cuda: cuda(Blas, "cuBLASLt", FLOAT);
    /// Bias, then ReLU or GELU.
    AddmmActivation(ADDMM_ACTIVATION) = "aten._addmm_activation", host: true, cuda: cuda(Blas, "cuBLASLt", FLOAT);
    Baddbmm(BADDBMM) = "aten.baddbmm", host: true, cuda: cuda(Blas, "cuBLAS", FLOAT);
    Addbmm(ADDBMM) = "aten.addbmm", host: true, cuda: cuda(Blas, "cuBLAS", FLOAT);
    /// Int8 x int8 with int32 results.
    IntMm(INT_MM) = "aten._int_mm", host: true, cuda: cuda(Blas, "cuBLASLt", "i8 x i8 -> i32");
    /// `aten._scaled_mm`: fp8 x fp8 with tensor-wise scales.
    ScaledMm(SCALED_MM) = "aten._scaled_mm", host: false, cuda: cuda(Blas, "cuBLASLt", "f8e4m3fn, f8e5m2 -> f32, f16, bf16 (tensor-wise scales, sm_89+)");
    Convolution(CONVOLUTION) = "aten.convolution", host: true, cuda: cuda(Conv, "cuDNN", FLOAT);
    Nonzero(NONZERO) = "aten.nonzero", host: true, cuda: cuda(Kernel, KERNEL, "all");
    MaskedSelect(MASKED_SELECT) = "aten.masked_select", host: true, cuda: cuda(Kernel, KERNEL, "all");
    /// A boolean mask index on the device.
    Index(INDEX) = "aten.index", host: false, cuda: cuda(Kernel, KERNEL, "all (boolean mask index)");
    JaggedToPaddedDenseForward(JAGGED_TO_PADDED_DENSE_FORWARD) = "aten._jagged_to_padded_dense_forward", host: true, cuda: cuda(Kernel, KERNEL, JAGGED);
    JaggedToPaddedDenseBackward(JAGGED_TO_PADDED_DENSE_BACKWARD) = "aten._jagged_to_padded_dense_backward", host: true, cuda: cuda(Kernel, KERNEL, JAGGED);
    PaddedDenseToJaggedForward(PADDED_DENSE_TO_JAGGED_FORWARD) = "aten._padded_dense_to_jagged_forward", host: true, cuda: cuda(Kernel, KERNEL, JAGGED);
    PaddedDenseToJaggedBackward(PADDED_DENSE_TO_JAGGED_BACKWARD) = "aten._padded_dense_to_jagged_backward", host: true, cuda: cuda(Kernel, KERNEL, JAGGED);
    Scatter(SCATTER) = "aten.scatter_", host: true, cuda: cuda(Kernel, KERNEL, "all");
    ScatterAdd(SCATTER_ADD) = "aten.scatter_add_", host: false, cuda: cuda(Kernel, KERNEL, "all");
    ScatterReduce(SCATTER_REDUCE) = "aten.scatter_reduce_", host: true, cuda: cuda(Kernel, KERNEL, "all");
    IndexPut(INDEX_PUT) = "aten.index_put_", host: true, cuda: cuda(Kernel, KERNEL, "all");
    Topk(TOPK) = "aten.topk", host: true, cuda: cuda(Kernel, KERNEL, "all");
    Sort(SORT) = "aten.sort", host: true, cuda: cuda(Kernel, KERNEL, "f32, f64, f16, bf16, i64, i32, i16, i8, u8, bool (stable order)");
    SegmentReduce(SEGMENT_REDUCE) = "aten.segment_reduce", host: true, cuda: cuda(Extra, KERNEL, "f32, f64, f16, bf16");
    /// PyTorch's CUDA values on every backend.
    Randint(RANDINT) = "aten.randint", host: true, cuda: cuda(Extra, KERNEL, "i64 (PyTorch's Philox values)");
    ViewAsComplex(VIEW_AS_COMPLEX) = "aten.view_as_complex", host: true, cuda: cuda(Extra, VIEW, "f32, f64, f16");
    ViewAsReal(VIEW_AS_REAL) = "aten.view_as_real", host: true, cuda: cuda(Extra, VIEW, "c64, c128, c32");
    /// `view(dtype)`.
    View(VIEW) = "aten.view", host: true, cuda: cuda(Extra, VIEW, "view(dtype): same width, or complex <-> its parts");
    Mul(MUL) = "aten.mul", host: true, cuda: cuda(Extra, KERNEL, COMPLEX);
    Add(ADD) = "aten.add", host: true, cuda: cuda(Extra, KERNEL, COMPLEX);
    Sub(SUB) = "aten.sub", host: true, cuda: cuda(Extra, KERNEL, COMPLEX);
    Div(DIV) = "aten.div", host: true, cuda: cuda(Extra, KERNEL, COMPLEX);
    SdpaEfficient(SDPA_EFFICIENT) = "aten._scaled_dot_product_efficient_attention", host: true, cuda: cuda(Attention, OWN_ATTENTION, FLOAT);
    SdpaFlash(SDPA_FLASH) = "aten._scaled_dot_product_flash_attention", host: true, cuda: cuda(Attention, OWN_ATTENTION, FLOAT);
    SdpaCudnn(SDPA_CUDNN) = "aten._scaled_dot_product_cudnn_attention", host: true, cuda: cuda(Attention, "cuDNN", "f16, bf16 (f32: flash-attention kernel)");
    SdpaFlashCpu(SDPA_FLASH_CPU) = "aten._scaled_dot_product_flash_attention_for_cpu", host: true, cuda: None;
    /// The row of each jagged value (wrapir's own op).
    InverseOffsets(INVERSE_OFFSETS) = "wrapir.inverse_offsets", host: true, cuda: None;
    Item(ITEM) = "aten.item", host: true, cuda: None;
    Cumsum(CUMSUM) = "aten.cumsum", host: true, cuda: None;
    /// One layer and direction of an LSTM.
    MkldnnRnnLayer(MKLDNN_RNN_LAYER) = "aten.mkldnn_rnn_layer", host: true, cuda: None;
    Copy(COPY) = "aten.copy_", host: true, cuda: None;
    Clone(CLONE) = "aten.clone", host: true, cuda: None;
    Permute(PERMUTE) = "aten.permute", host: true, cuda: None;
    Neg(NEG) = "aten.neg", host: true, cuda: None;
    Relu(RELU) = "aten.relu", host: true, cuda: None;
    Exp(EXP) = "aten.exp", host: true, cuda: None;
    Sin(SIN) = "aten.sin", host: true, cuda: None;
    Where(WHERE) = "aten.where", host: true, cuda: None;
    /// Run by neither backend, named so that the CUDA backend's cuDNN plans
    /// are made ahead for it as for `aten.convolution`.
    ConvolutionInternal(CONVOLUTION_INTERNAL) = "aten._convolution", host: false, cuda: None;
}

/// The op string of one overload of the op whose registry key is `key`
/// (`torch.ops.aten.view.dtype` for [`key::VIEW`] and `dtype`), as programs
/// and the FX lowering name it.
pub fn target(key: &str, overload: &str) -> String {
    format!("torch.ops.{key}.{overload}")
}

impl ExternOp {
    /// The op a program's op string calls (`extern_kernels.mm`,
    /// `torch.ops.aten.mm.default`: [`ExternOp::Mm`]).
    pub fn of(op: &str) -> ExternOp {
        ExternOp::from_key(&op_key(op))
    }

    /// How the CUDA backend runs it on the device, if it does.
    pub fn on_cuda(self) -> Option<OnCuda> {
        self.entry().and_then(|e| e.cuda)
    }
}

/// The name part of [`op_key`] (`relu_` for `torch.ops.aten.relu_.default`),
/// without allocating.
pub fn op_name(op: &str) -> &str {
    let s = op.strip_prefix("torch.ops.").unwrap_or(op);
    if let Some(rest) = s.strip_prefix("extern_kernels.") {
        return rest.split('.').next().unwrap_or(rest);
    }
    let mut parts = s.split('.');
    match (parts.next(), parts.next()) {
        (Some(_), Some(name)) => name,
        (Some(name), None) => name,
        _ => s,
    }
}

/// The registry key of an op: namespace and name without overload
/// (`torch.ops.aten.nonzero.default` -> `aten.nonzero`, `extern_kernels.mm` -> `aten.mm`).
pub fn op_key(op: &str) -> String {
    let s = op.strip_prefix("torch.ops.").unwrap_or(op);
    if let Some(rest) = s.strip_prefix("extern_kernels.") {
        return format!("aten.{}", rest.split('.').next().unwrap_or(rest));
    }
    let mut parts = s.split('.');
    match (parts.next(), parts.next()) {
        (Some(ns), Some(name)) => format!("{ns}.{name}"),
        (Some(name), None) => name.to_string(),
        _ => s.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    #[test]
    fn each_entry_is_its_own_op_once() {
        let mut keys = BTreeSet::new();
        for entry in CATALOGUE {
            assert!(keys.insert(entry.key), "`{}` is in the catalogue twice", entry.key);
            assert_eq!(ExternOp::from_key(entry.key), entry.op);
            assert_eq!(entry.op.key(), Some(entry.key));
            assert!(
                std::ptr::eq(entry.op.entry().expect("a known op"), entry),
                "{}",
                entry.key
            );
        }
        // Every spelling of an op resolves to its family; other ops stay themselves.
        assert_eq!(ExternOp::of("extern_kernels.mm"), ExternOp::Mm);
        assert_eq!(ExternOp::of("torch.ops.aten.mm.default"), ExternOp::Mm);
        assert_eq!(ExternOp::of("torch.ops.aten.view.dtype"), ExternOp::View);
        assert_eq!(target(key::VIEW, "dtype"), "torch.ops.aten.view.dtype");
        let other = ExternOp::of("torch.ops.mylib.fused.default");
        assert_eq!(other, ExternOp::Other);
        assert_eq!((other.key(), other.entry()), (None, None));
    }
}

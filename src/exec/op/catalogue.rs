//! The extern-op catalogue: for every [`ExternOp`] (named in `ir::op`, the
//! one place an op's name is written), what runs it on each backend. A
//! program's op strings are resolved to an [`ExternOp`] once, when the
//! interpreter compiles its plan ([`ExternOp::of`]); an op the table does
//! not know stays [`ExternOp::Other`] and runs where a user registered it
//! (`HostBackend::register_op`). Every op has its row here: a missing one
//! does not compile.
//!
//! The host backend's built-ins, the CUDA backend's device dispatch,
//! [`crate::exec::device_ops::cuda_ops`] (`wrapir ops`) and
//! `wrapir check --device` are views of [`CATALOGUE`]; tests without a
//! GPU check that they agree: the host's built-ins are its host column, and
//! (with the `cuda` feature) every CUDA claim has a function in the table of
//! the backend module its route names, the table that module's dispatch reads.

use crate::ir::op::{key, ExternOp};

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

/// wrapir's NVRTC kernels for index, scatter, jagged, top-k, sort, histogram,
/// detection, segment, random and complex ops, which compute what ATen's (or
/// torchvision's) kernels compute.
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
    /// The built-in index, scatter, jagged, top-k, sort, histogram and
    /// detection kernels (`exec::cuda::kernels::ops`).
    Kernel,
    /// Views, complex pointwise ops, segment reductions and random numbers
    /// (`exec::cuda::kernels::extra`).
    Extra,
    /// cuDNN's recurrent layers (`exec::cuda::rnn`).
    Rnn,
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
        $variant:ident($konst:ident), host: $host:literal, cuda: $cuda:expr;
    )*) => {
        /// Every op family the catalogue knows, in the order `wrapir ops`
        /// lists the CUDA rows, with what runs it.
        pub static CATALOGUE: &[Entry] = &[
            $(Entry { op: ExternOp::$variant, key: key::$konst, host: $host, cuda: $cuda },)*
        ];

        /// An op's position in [`CATALOGUE`]; the match is exhaustive, so
        /// an op of `ir::op` without a row does not compile.
        fn position(op: ExternOp) -> Option<usize> {
            enum Position {
                $($variant,)*
            }
            match op {
                $(ExternOp::$variant => Some(Position::$variant as usize),)*
                ExternOp::Other => None,
            }
        }
    };
}

const fn cuda(route: CudaRoute, via: &'static str, dtypes: &'static str) -> Option<OnCuda> {
    Some(OnCuda { route, via, dtypes })
}

use CudaRoute::{Attention, Blas, Conv, Extra, Kernel, Rnn};

catalogue! {
    Mm(MM), host: true, cuda: cuda(Blas, "cuBLAS", FLOAT);
    Bmm(BMM), host: true, cuda: cuda(Blas, "cuBLAS", FLOAT);
    Addmm(ADDMM), host: true, cuda: cuda(Blas, "cuBLASLt", FLOAT);
    AddmmActivation(ADDMM_ACTIVATION), host: true, cuda: cuda(Blas, "cuBLASLt", FLOAT);
    Baddbmm(BADDBMM), host: true, cuda: cuda(Blas, "cuBLAS", FLOAT);
    Addbmm(ADDBMM), host: true, cuda: cuda(Blas, "cuBLAS", FLOAT);
    BiasAddmm(BIAS_ADDMM), host: true, cuda: cuda(Blas, "cuBLASLt", FLOAT);
    IntMm(INT_MM), host: true, cuda: cuda(Blas, "cuBLASLt", "i8 x i8 -> i32");
    ScaledMm(SCALED_MM), host: true, cuda: cuda(Blas, "cuBLASLt", "f8e4m3fn, f8e5m2 -> f32, f16, bf16 (tensor-wise scales, sm_89+)");
    GroupedMmFallback(GROUPED_MM_FALLBACK), host: true, cuda: cuda(Blas, "cuBLAS", FLOAT);
    GroupedMm(GROUPED_MM), host: true, cuda: cuda(Blas, "cuBLAS", "bf16, f16, f32 (2-D x 3-D: a GEMM per group, PyTorch's fallback path)");
    Convolution(CONVOLUTION), host: true, cuda: cuda(Conv, "cuDNN", FLOAT);
    Nonzero(NONZERO), host: true, cuda: cuda(Kernel, KERNEL, "all");
    MaskedSelect(MASKED_SELECT), host: true, cuda: cuda(Kernel, KERNEL, "all");
    Index(INDEX), host: true, cuda: cuda(Kernel, KERNEL, "all (boolean mask index)");
    JaggedToPaddedDenseForward(JAGGED_TO_PADDED_DENSE_FORWARD), host: true, cuda: cuda(Kernel, KERNEL, JAGGED);
    JaggedToPaddedDenseBackward(JAGGED_TO_PADDED_DENSE_BACKWARD), host: true, cuda: cuda(Kernel, KERNEL, JAGGED);
    PaddedDenseToJaggedForward(PADDED_DENSE_TO_JAGGED_FORWARD), host: true, cuda: cuda(Kernel, KERNEL, JAGGED);
    PaddedDenseToJaggedBackward(PADDED_DENSE_TO_JAGGED_BACKWARD), host: true, cuda: cuda(Kernel, KERNEL, JAGGED);
    Scatter(SCATTER), host: true, cuda: cuda(Kernel, KERNEL, "all");
    ScatterAdd(SCATTER_ADD), host: false, cuda: cuda(Kernel, KERNEL, "all");
    ScatterReduce(SCATTER_REDUCE), host: true, cuda: cuda(Kernel, KERNEL, "all");
    IndexPut(INDEX_PUT), host: true, cuda: cuda(Kernel, KERNEL, "all");
    Topk(TOPK), host: true, cuda: cuda(Kernel, KERNEL, "all");
    Sort(SORT), host: true, cuda: cuda(Kernel, KERNEL, "f32, f64, f16, bf16, i64, i32, i16, i8, u8, bool (stable order)");
    Histc(HISTC), host: true, cuda: cuda(Kernel, KERNEL, "f32, f64, i64, i32, i16, i8, u8 (PyTorch's CUDA binning)");
    RoiAlign(ROI_ALIGN), host: true, cuda: cuda(Kernel, KERNEL, "f32, f64 (torchvision's CUDA kernel)");
    Nms(NMS), host: true, cuda: cuda(Kernel, KERNEL, "f32, f64 (stable score order, greedy pass on the device)");
    SegmentReduce(SEGMENT_REDUCE), host: true, cuda: cuda(Extra, KERNEL, "f32, f64, f16, bf16");
    Randint(RANDINT), host: true, cuda: cuda(Extra, KERNEL, "i64 (PyTorch's Philox values)");
    ViewAsComplex(VIEW_AS_COMPLEX), host: true, cuda: cuda(Extra, VIEW, "f32, f64, f16");
    ViewAsReal(VIEW_AS_REAL), host: true, cuda: cuda(Extra, VIEW, "c64, c128, c32");
    View(VIEW), host: true, cuda: cuda(Extra, VIEW, "view(dtype): same width, or complex <-> its parts");
    Mul(MUL), host: true, cuda: cuda(Extra, KERNEL, COMPLEX);
    Add(ADD), host: true, cuda: cuda(Extra, KERNEL, COMPLEX);
    Sub(SUB), host: true, cuda: cuda(Extra, KERNEL, COMPLEX);
    Div(DIV), host: true, cuda: cuda(Extra, KERNEL, COMPLEX);
    SdpaEfficient(SDPA_EFFICIENT), host: true, cuda: cuda(Attention, OWN_ATTENTION, FLOAT);
    SdpaFlash(SDPA_FLASH), host: true, cuda: cuda(Attention, OWN_ATTENTION, FLOAT);
    SdpaCudnn(SDPA_CUDNN), host: true, cuda: cuda(Attention, "cuDNN", "f16, bf16 (f32: flash-attention kernel)");
    SdpaFlashCpu(SDPA_FLASH_CPU), host: true, cuda: None;
    InverseOffsets(INVERSE_OFFSETS), host: true, cuda: None;
    Item(ITEM), host: true, cuda: None;
    Cumsum(CUMSUM), host: true, cuda: None;
    MkldnnRnnLayer(MKLDNN_RNN_LAYER), host: true, cuda: None;
    CudnnRnn(CUDNN_RNN), host: true, cuda: cuda(Rnn, "cuDNN", "f32, f16, bf16, f64 (LSTM, GRU, tanh/ReLU RNN; inference, unpacked)");
    Copy(COPY), host: true, cuda: None;
    Clone(CLONE), host: true, cuda: None;
    Permute(PERMUTE), host: true, cuda: None;
    Neg(NEG), host: true, cuda: None;
    Relu(RELU), host: true, cuda: None;
    Exp(EXP), host: true, cuda: None;
    Sin(SIN), host: true, cuda: None;
    Where(WHERE), host: true, cuda: None;
    ConvolutionInternal(CONVOLUTION_INTERNAL), host: false, cuda: None;
}

impl ExternOp {
    /// Its catalogue entry (`None` for [`ExternOp::Other`]).
    pub fn entry(self) -> Option<&'static Entry> {
        position(self).map(|i| &CATALOGUE[i])
    }

    /// How the CUDA backend runs it on the device, if it does.
    pub fn on_cuda(self) -> Option<OnCuda> {
        self.entry().and_then(|e| e.cuda)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_op_has_one_entry_of_its_own() {
        assert_eq!(CATALOGUE.len(), ExternOp::ALL.len());
        for entry in CATALOGUE {
            assert_eq!(entry.op.key(), Some(entry.key));
            assert!(
                std::ptr::eq(entry.op.entry().expect("a known op"), entry),
                "{}",
                entry.key
            );
        }
        assert_eq!(ExternOp::Other.entry(), None);
    }
}

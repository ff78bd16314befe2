//! Extern ops by name: one [`ExternOp`] per op family that a backend runs
//! itself, each with its registry key, and the aten ops of an FX graph
//! itself ([`primitive`]). This is the one place an op's name is written:
//! the lowerings, the FX printer and `exec` (whose catalogue,
//! `exec::op::CATALOGUE`, says what runs each op on each backend) name an
//! op through it, which `tests/tidy.rs` checks. A program's op strings are
//! resolved to an [`ExternOp`] ([`ExternOp::of`]); an op the table does not
//! know is [`ExternOp::Other`] and runs where a user registered it.

macro_rules! extern_ops {
    ($(
        $(#[$doc:meta])*
        $variant:ident($konst:ident) = $key:literal;
    )*) => {
        /// An extern op, by family: every overload of `aten.mm`
        /// (`extern_kernels.mm`, `torch.ops.aten.mm.default`, `aten.mm.out`)
        /// is [`ExternOp::Mm`]. An op the table does not know is
        /// [`ExternOp::Other`]: the call's op string names it.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum ExternOp {
            $(
                #[doc = concat!("`", $key, "`.")]
                #[doc = ""]
                $(#[$doc])*
                $variant,
            )*
            /// An op the table does not know (`mylib.fused`): it runs
            /// where a user registered it, by the call's op string.
            Other,
        }

        /// Each known op's registry key, for code that needs the name as a
        /// constant (an error's op, a library call's label, a lowering's call).
        pub mod key {
            $(
                #[doc = concat!("`", $key, "`.")]
                pub const $konst: &str = $key;
            )*
        }

        impl ExternOp {
            /// Every known op, in table order.
            pub const ALL: &'static [ExternOp] = &[$(ExternOp::$variant,)*];

            /// The registry key (`aten.mm`): namespace and name without
            /// overload; `None` for [`ExternOp::Other`].
            pub fn key(self) -> Option<&'static str> {
                match self {
                    $(ExternOp::$variant => Some(key::$konst),)*
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
    };
}

extern_ops! {
    Mm(MM) = "aten.mm";
    Bmm(BMM) = "aten.bmm";
    Addmm(ADDMM) = "aten.addmm";
    /// Bias, then ReLU or GELU.
    AddmmActivation(ADDMM_ACTIVATION) = "aten._addmm_activation";
    Baddbmm(BADDBMM) = "aten.baddbmm";
    Addbmm(ADDBMM) = "aten.addbmm";
    /// `extern_kernels.bias_addmm`: Inductor's wrapper (max-autotune on CUDA)
    /// that calls `addmm` on the first row of a row-broadcast bias.
    BiasAddmm(BIAS_ADDMM) = "aten.bias_addmm";
    /// Int8 x int8 with int32 results.
    IntMm(INT_MM) = "aten._int_mm";
    /// `aten._scaled_mm`: fp8 x fp8 with tensor-wise scales.
    ScaledMm(SCALED_MM) = "aten._scaled_mm";
    /// Transformers' own op (`transformers::grouped_mm_fallback`, the
    /// `grouped_mm` experts of its mixture-of-experts models under
    /// `torch.compile` when `torch._grouped_mm` does not apply): one `mm`
    /// per group of rows into a zeroed result.
    GroupedMmFallback(GROUPED_MM_FALLBACK) = "transformers.grouped_mm_fallback";
    /// Groups of GEMMs by offsets (`torch._grouped_mm`, `F.grouped_mm`).
    GroupedMm(GROUPED_MM) = "aten._grouped_mm";
    Convolution(CONVOLUTION) = "aten.convolution";
    Nonzero(NONZERO) = "aten.nonzero";
    MaskedSelect(MASKED_SELECT) = "aten.masked_select";
    /// A boolean mask index on the device.
    Index(INDEX) = "aten.index";
    JaggedToPaddedDenseForward(JAGGED_TO_PADDED_DENSE_FORWARD) = "aten._jagged_to_padded_dense_forward";
    JaggedToPaddedDenseBackward(JAGGED_TO_PADDED_DENSE_BACKWARD) = "aten._jagged_to_padded_dense_backward";
    PaddedDenseToJaggedForward(PADDED_DENSE_TO_JAGGED_FORWARD) = "aten._padded_dense_to_jagged_forward";
    PaddedDenseToJaggedBackward(PADDED_DENSE_TO_JAGGED_BACKWARD) = "aten._padded_dense_to_jagged_backward";
    Scatter(SCATTER) = "aten.scatter_";
    ScatterAdd(SCATTER_ADD) = "aten.scatter_add_";
    ScatterReduce(SCATTER_REDUCE) = "aten.scatter_reduce_";
    IndexPut(INDEX_PUT) = "aten.index_put_";
    Topk(TOPK) = "aten.topk";
    Sort(SORT) = "aten.sort";
    /// A histogram of equal-width bins (`torch.histc`).
    Histc(HISTC) = "aten.histc";
    SegmentReduce(SEGMENT_REDUCE) = "aten.segment_reduce";
    /// PyTorch's CUDA values on every backend.
    Randint(RANDINT) = "aten.randint";
    ViewAsComplex(VIEW_AS_COMPLEX) = "aten.view_as_complex";
    ViewAsReal(VIEW_AS_REAL) = "aten.view_as_real";
    /// `view(dtype)`.
    View(VIEW) = "aten.view";
    Mul(MUL) = "aten.mul";
    Add(ADD) = "aten.add";
    Sub(SUB) = "aten.sub";
    Div(DIV) = "aten.div";
    SdpaEfficient(SDPA_EFFICIENT) = "aten._scaled_dot_product_efficient_attention";
    SdpaFlash(SDPA_FLASH) = "aten._scaled_dot_product_flash_attention";
    SdpaCudnn(SDPA_CUDNN) = "aten._scaled_dot_product_cudnn_attention";
    SdpaFlashCpu(SDPA_FLASH_CPU) = "aten._scaled_dot_product_flash_attention_for_cpu";
    /// The row of each jagged value (wrapir's own op).
    InverseOffsets(INVERSE_OFFSETS) = "wrapir.inverse_offsets";
    Item(ITEM) = "aten.item";
    Cumsum(CUMSUM) = "aten.cumsum";
    /// One layer and direction of an LSTM.
    MkldnnRnnLayer(MKLDNN_RNN_LAYER) = "aten.mkldnn_rnn_layer";
    /// cuDNN's RNN forward (LSTM, GRU, tanh and ReLU RNNs): every layer and
    /// direction in one call.
    CudnnRnn(CUDNN_RNN) = "aten._cudnn_rnn";
    Copy(COPY) = "aten.copy_";
    Clone(CLONE) = "aten.clone";
    Permute(PERMUTE) = "aten.permute";
    Neg(NEG) = "aten.neg";
    Relu(RELU) = "aten.relu";
    Exp(EXP) = "aten.exp";
    Sin(SIN) = "aten.sin";
    Where(WHERE) = "aten.where";
    /// torchvision's RoIAlign (`torchvision.ops.roi_align`): bilinear
    /// samples of each region, averaged per output bin.
    RoiAlign(ROI_ALIGN) = "torchvision.roi_align";
    /// torchvision's non-maximum suppression (`torchvision.ops.nms`): the
    /// indices of the kept boxes, a data-dependent count.
    Nms(NMS) = "torchvision.nms";
    /// Run by neither backend, named so that the CUDA backend's cuDNN plans
    /// are made ahead for it as for `aten.convolution`.
    ConvolutionInternal(CONVOLUTION_INTERNAL) = "aten._convolution";
}

/// The aten ops an FX graph calls for its own nodes (sizes, strides,
/// storage offsets, scalar asserts, finite checks), which no backend runs as
/// an extern op: by registry key, as [`key`] names the extern ops.
pub mod primitive {
    /// `aten.sym_size` (`.int`: one dimension's size).
    pub const SYM_SIZE: &str = "aten.sym_size";
    /// `aten.sym_stride` (`.int`: one dimension's stride).
    pub const SYM_STRIDE: &str = "aten.sym_stride";
    /// `aten.sym_storage_offset`.
    pub const SYM_STORAGE_OFFSET: &str = "aten.sym_storage_offset";
    /// `aten._assert_scalar`.
    pub const ASSERT_SCALAR: &str = "aten._assert_scalar";
    /// `aten.any`.
    pub const ANY: &str = "aten.any";
    /// `aten.isnan`.
    pub const ISNAN: &str = "aten.isnan";
    /// `aten.isinf`.
    pub const ISINF: &str = "aten.isinf";
}

/// The allocator of symmetric-memory (communication) buffers, as Inductor's
/// Python wrapper calls it.
pub const COMM_ALLOCATOR: &str = "torch._C._distributed_c10d._SymmetricMemory.empty_strided_p2p";

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
    fn each_op_has_its_own_key() {
        let mut keys = BTreeSet::new();
        for &op in ExternOp::ALL {
            let k = op.key().expect("a known op has a key");
            assert!(keys.insert(k), "`{k}` is in the table twice");
            assert_eq!(ExternOp::from_key(k), op);
        }
        // Every spelling of an op resolves to its family; other ops stay themselves.
        assert_eq!(ExternOp::of("extern_kernels.mm"), ExternOp::Mm);
        assert_eq!(ExternOp::of(&target(key::MM, "default")), ExternOp::Mm);
        assert_eq!(ExternOp::of(&target(key::VIEW, "dtype")), ExternOp::View);
        let other = ExternOp::of("torch.ops.mylib.fused.default");
        assert_eq!((other, other.key()), (ExternOp::Other, None));
    }
}

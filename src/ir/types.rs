//! Element types, devices, names and tensor layouts.

use crate::sym::SymExpr;
use serde::{Deserialize, Serialize};
use smallvec::SmallVec;
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

macro_rules! name_type {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(Arc<str>);

        impl $name {
            /// Makes the name; the validator checks that it is an identifier.
            pub fn new(name: impl AsRef<str>) -> Self {
                $name(Arc::from(name.as_ref()))
            }

            /// The name as text.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl From<&str> for $name {
            fn from(s: &str) -> Self {
                $name::new(s)
            }
        }

        impl std::borrow::Borrow<str> for $name {
            fn borrow(&self) -> &str {
                &self.0
            }
        }
    };
}

name_type!(
    /// A buffer or value name (`arg0_1`, `buf3`, `workspace_0`, `true_graph_0_buf1`).
    /// Its `Display` is its token in every text form.
    BufName
);
name_type!(
    /// A kernel name (`triton_poi_fused_add_0`, `halide_kernel_0`).
    KernelName
);
name_type!(
    /// A subgraph name (`true_graph_0`, `while_loop_body_graph_0`).
    GraphName
);

/// Tensor element types, with Inductor's short names as their text form.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DType {
    /// `torch.bool` (`b8`)
    Bool,
    /// `torch.int8` (`i8`)
    Int8,
    /// `torch.int16` (`i16`)
    Int16,
    /// `torch.int32` (`i32`)
    Int32,
    /// `torch.int64` (`i64`)
    Int64,
    /// `torch.uint8` (`u8`)
    Uint8,
    /// `torch.float16` (`f16`)
    Float16,
    /// `torch.bfloat16` (`bf16`)
    Bfloat16,
    /// `torch.float32` (`f32`)
    Float32,
    /// `torch.float64` (`f64`)
    Float64,
    /// `torch.float8_e4m3fn` (`f8e4m3fn`)
    Float8E4m3fn,
    /// `torch.float8_e5m2` (`f8e5m2`)
    Float8E5m2,
    /// `torch.float8_e4m3fnuz` (`f8e4m3fnuz`)
    Float8E4m3fnuz,
    /// `torch.float8_e5m2fnuz` (`f8e5m2fnuz`)
    Float8E5m2fnuz,
    /// `torch.complex32` (`c32`, also `torch.chalf`): two `float16` parts
    Complex32,
    /// `torch.complex64` (`c64`, also `torch.cfloat`): two `float32` parts
    Complex64,
    /// `torch.complex128` (`c128`, also `torch.cdouble`): two `float64` parts
    Complex128,
}

impl DType {
    /// Every dtype, in declaration order.
    pub const ALL: [DType; 17] = [
        DType::Bool,
        DType::Int8,
        DType::Int16,
        DType::Int32,
        DType::Int64,
        DType::Uint8,
        DType::Float16,
        DType::Bfloat16,
        DType::Float32,
        DType::Float64,
        DType::Float8E4m3fn,
        DType::Float8E5m2,
        DType::Float8E4m3fnuz,
        DType::Float8E5m2fnuz,
        DType::Complex32,
        DType::Complex64,
        DType::Complex128,
    ];

    /// Bytes per element.
    pub fn size_bytes(self) -> u64 {
        match self {
            DType::Bool | DType::Int8 | DType::Uint8 => 1,
            DType::Float8E4m3fn | DType::Float8E5m2 | DType::Float8E4m3fnuz | DType::Float8E5m2fnuz => 1,
            DType::Int16 | DType::Float16 | DType::Bfloat16 => 2,
            DType::Int32 | DType::Float32 | DType::Complex32 => 4,
            DType::Int64 | DType::Float64 | DType::Complex64 => 8,
            DType::Complex128 => 16,
        }
    }

    /// The element type as DLPack's `DLDataType` code and bits (`kDLInt` 0,
    /// `kDLUInt` 1, `kDLFloat` 2, `kDLBfloat` 4, `kDLComplex` 5, `kDLBool`
    /// 6), for the dtypes wrapir exchanges through DLPack.
    pub fn dlpack_type(self) -> Option<(u8, u8)> {
        let code = match self {
            DType::Int8 | DType::Int16 | DType::Int32 | DType::Int64 => 0,
            DType::Uint8 => 1,
            DType::Float16 | DType::Float32 | DType::Float64 => 2,
            DType::Bfloat16 => 4,
            DType::Complex64 | DType::Complex128 => 5,
            DType::Bool => 6,
            _ => return None,
        };
        // Whole bytes (bool too), at most 16 of them.
        let bits = u8::try_from(self.size_bytes() * 8).ok()?;
        Some((code, bits))
    }

    /// The element type as Halide's `halide_type_t` code and bits
    /// (`halide_type_of<T>()`): DLPack's integer and float codes, which
    /// `halide_type_code_t` shares, and bool as a 1-bit uint; Halide has no
    /// complex type.
    pub fn halide_type(self) -> Option<(u8, u8)> {
        match self {
            DType::Bool => Some((1, 1)),
            DType::Complex32 | DType::Complex64 | DType::Complex128 => None,
            d => d.dlpack_type(),
        }
    }

    /// The short name used in wrapir's text form and in Inductor's FX metadata (`f32`).
    pub fn short_name(self) -> &'static str {
        match self {
            DType::Bool => "b8",
            DType::Int8 => "i8",
            DType::Int16 => "i16",
            DType::Int32 => "i32",
            DType::Int64 => "i64",
            DType::Uint8 => "u8",
            DType::Float16 => "f16",
            DType::Bfloat16 => "bf16",
            DType::Float32 => "f32",
            DType::Float64 => "f64",
            DType::Float8E4m3fn => "f8e4m3fn",
            DType::Float8E5m2 => "f8e5m2",
            DType::Float8E4m3fnuz => "f8e4m3fnuz",
            DType::Float8E5m2fnuz => "f8e5m2fnuz",
            DType::Complex32 => "c32",
            DType::Complex64 => "c64",
            DType::Complex128 => "c128",
        }
    }

    /// The name after `torch.` (`float32`).
    pub fn torch_name(self) -> &'static str {
        match self {
            DType::Bool => "bool",
            DType::Int8 => "int8",
            DType::Int16 => "int16",
            DType::Int32 => "int32",
            DType::Int64 => "int64",
            DType::Uint8 => "uint8",
            DType::Float16 => "float16",
            DType::Bfloat16 => "bfloat16",
            DType::Float32 => "float32",
            DType::Float64 => "float64",
            DType::Float8E4m3fn => "float8_e4m3fn",
            DType::Float8E5m2 => "float8_e5m2",
            DType::Float8E4m3fnuz => "float8_e4m3fnuz",
            DType::Float8E5m2fnuz => "float8_e5m2fnuz",
            DType::Complex32 => "complex32",
            DType::Complex64 => "complex64",
            DType::Complex128 => "complex128",
        }
    }

    /// Triton's pointer element name in kernel signatures (`fp32` in `*fp32`).
    /// Triton has no complex types (Inductor never hands a complex tensor to a
    /// Triton kernel: it passes the `view_as_real` view), so the complex
    /// dtypes answer their short name, which no signature contains.
    pub fn triton_name(self) -> &'static str {
        match self {
            DType::Bool => "i1",
            DType::Int8 => "i8",
            DType::Int16 => "i16",
            DType::Int32 => "i32",
            DType::Int64 => "i64",
            DType::Uint8 => "u8",
            DType::Float16 => "fp16",
            DType::Bfloat16 => "bf16",
            DType::Float32 => "fp32",
            DType::Float64 => "fp64",
            DType::Float8E4m3fn => "fp8e4nv",
            DType::Float8E5m2 => "fp8e5",
            DType::Float8E4m3fnuz => "fp8e4b8",
            DType::Float8E5m2fnuz => "fp8e5b16",
            DType::Complex32 | DType::Complex64 | DType::Complex128 => self.short_name(),
        }
    }

    /// The dtype for a Triton signature element name.
    pub fn from_triton_name(s: &str) -> Option<DType> {
        DType::ALL.into_iter().find(|d| d.triton_name() == s)
    }

    /// `true` for real floating-point dtypes (`torch.is_floating_point`:
    /// false for the complex dtypes).
    pub fn is_floating(self) -> bool {
        !self.is_complex()
            && !matches!(
                self,
                DType::Bool | DType::Int8 | DType::Int16 | DType::Int32 | DType::Int64 | DType::Uint8
            )
    }

    /// `true` for the complex dtypes.
    pub fn is_complex(self) -> bool {
        matches!(self, DType::Complex32 | DType::Complex64 | DType::Complex128)
    }

    /// The dtype of one part (real or imaginary) of a complex dtype
    /// (`complex64` -> `float32`, as `torch.view_as_real` gives); `None`
    /// for the other dtypes.
    pub fn complex_part(self) -> Option<DType> {
        match self {
            DType::Complex32 => Some(DType::Float16),
            DType::Complex64 => Some(DType::Float32),
            DType::Complex128 => Some(DType::Float64),
            _ => None,
        }
    }

    /// The complex dtype whose parts are `self` (`float32` -> `complex64`,
    /// as `torch.view_as_complex` gives); `None` for dtypes without one.
    pub fn complex_of(self) -> Option<DType> {
        match self {
            DType::Float16 => Some(DType::Complex32),
            DType::Float32 => Some(DType::Complex64),
            DType::Float64 => Some(DType::Complex128),
            _ => None,
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.short_name())
    }
}

impl FromStr for DType {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let s = s.strip_prefix("torch.").unwrap_or(s);
        DType::ALL
            .into_iter()
            .find(|d| d.short_name() == s || d.torch_name() == s)
            .ok_or_else(|| format!("unknown dtype `{s}`"))
    }
}

/// The kind of a device.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeviceType {
    /// Host memory.
    Cpu,
    /// An NVIDIA (or ROCm-through-CUDA) GPU.
    Cuda,
    /// Intel GPU.
    Xpu,
    /// Meta's accelerator.
    Mtia,
    /// Shapes only.
    Meta,
}

impl DeviceType {
    /// The torch name (`cuda`).
    pub fn as_str(self) -> &'static str {
        match self {
            DeviceType::Cpu => "cpu",
            DeviceType::Cuda => "cuda",
            DeviceType::Xpu => "xpu",
            DeviceType::Mtia => "mtia",
            DeviceType::Meta => "meta",
        }
    }
}

/// A device: type and optional index. Text (and JSON) form `cuda:0`, `cpu`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(into = "String", try_from = "String")]
pub struct Device {
    /// The device type.
    pub kind: DeviceType,
    /// The device index, if any.
    pub index: Option<u32>,
}

/// `From<T> for String` and `TryFrom<String> for T` through `T`'s `Display`
/// and `FromStr` (whose error is a `String`): what
/// `#[serde(into = "String", try_from = "String")]` needs of a type written
/// as its text form.
macro_rules! text_form_conversions {
    ($t:ty) => {
        impl From<$t> for String {
            fn from(v: $t) -> String {
                v.to_string()
            }
        }

        impl TryFrom<String> for $t {
            type Error = String;
            fn try_from(s: String) -> Result<Self, String> {
                s.parse()
            }
        }
    };
}
pub(crate) use text_form_conversions;

text_form_conversions!(Device);

impl Device {
    /// `cuda:<index>`.
    pub fn cuda(index: u32) -> Self {
        Device {
            kind: DeviceType::Cuda,
            index: Some(index),
        }
    }

    /// `cpu`.
    pub fn cpu() -> Self {
        Device {
            kind: DeviceType::Cpu,
            index: None,
        }
    }
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.index {
            Some(i) => write!(f, "{}:{}", self.kind.as_str(), i),
            None => f.write_str(self.kind.as_str()),
        }
    }
}

impl FromStr for Device {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let (kind, index) = match s.split_once(':') {
            Some((k, i)) => (
                k,
                Some(i.parse::<u32>().map_err(|_| format!("bad device index in `{s}`"))?),
            ),
            None => (s, None),
        };
        let kind = match kind {
            "cpu" => DeviceType::Cpu,
            "cuda" => DeviceType::Cuda,
            "xpu" => DeviceType::Xpu,
            "mtia" => DeviceType::Mtia,
            "meta" => DeviceType::Meta,
            _ => return Err(format!("unknown device `{s}`")),
        };
        Ok(Device { kind, index })
    }
}

/// A shape or stride list; most tensors have at most four dimensions.
pub type Dims = SmallVec<[SymExpr; 4]>;

/// A strided tensor layout with symbolic sizes.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Layout {
    /// Element type.
    pub dtype: DType,
    /// Device the storage lives on.
    pub device: Device,
    /// Logical sizes, outermost first.
    pub size: Dims,
    /// Strides in elements.
    pub stride: Dims,
    /// Storage offset in elements.
    #[serde(default = "zero", skip_serializing_if = "is_zero")]
    pub offset: SymExpr,
    /// Allocation size in elements when padding makes it differ from what
    /// size/stride need (Inductor allocates this much, then `as_strided`s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alloc_numel: Option<SymExpr>,
}

fn zero() -> SymExpr {
    SymExpr::Int(0)
}

fn is_zero(e: &SymExpr) -> bool {
    *e == SymExpr::Int(0)
}

impl Layout {
    /// A contiguous (row-major) layout.
    pub fn contiguous(dtype: DType, device: Device, size: impl IntoIterator<Item = SymExpr>) -> Self {
        let size: Dims = size.into_iter().collect();
        let mut stride: Dims = SmallVec::with_capacity(size.len());
        let mut running = SymExpr::Int(1);
        for s in size.iter().rev() {
            stride.push(running.clone());
            running = SymExpr::mul(running, s.clone());
        }
        stride.reverse();
        Layout {
            dtype,
            device,
            size,
            stride,
            offset: SymExpr::Int(0),
            alloc_numel: None,
        }
    }

    /// Number of dimensions.
    pub fn rank(&self) -> usize {
        self.size.len()
    }

    /// Elements the storage must hold: `offset + 1 + sum((size_i - 1) * stride_i)`,
    /// or 0 when some size is 0 (folded symbolically as far as constructors allow;
    /// a zero-size dimension is decided at evaluation time by [`Layout::storage_numel_eval`]).
    pub fn storage_numel_expr(&self) -> SymExpr {
        if let Some(n) = &self.alloc_numel {
            return n.clone();
        }
        let mut total = SymExpr::add(self.offset.clone(), SymExpr::Int(1));
        for (s, st) in self.size.iter().zip(&self.stride) {
            total = SymExpr::add(
                total,
                SymExpr::mul(SymExpr::sub(s.clone(), SymExpr::Int(1)), st.clone()),
            );
        }
        total
    }

    /// Storage elements needed under concrete bindings (0 when any size is 0).
    pub fn storage_numel_eval(&self, b: &crate::sym::Bindings) -> Result<i64, crate::sym::EvalError> {
        if let Some(n) = &self.alloc_numel {
            return crate::sym::eval::eval_int(n, b);
        }
        let mut total: i64 = 1;
        for (s, st) in self.size.iter().zip(&self.stride) {
            let s = crate::sym::eval::eval_int(s, b)?;
            let st = crate::sym::eval::eval_int(st, b)?;
            if s == 0 {
                return Ok(0);
            }
            let extent =
                (s - 1)
                    .checked_mul(st)
                    .and_then(|v| total.checked_add(v))
                    .ok_or(crate::sym::EvalError::Overflow {
                        expr: format!("storage of layout {self}"),
                    })?;
            total = extent;
        }
        let off = crate::sym::eval::eval_int(&self.offset, b)?;
        total.checked_add(off).ok_or(crate::sym::EvalError::Overflow {
            expr: format!("storage of layout {self}"),
        })
    }

    /// Number of elements: the product of the sizes.
    pub fn numel_expr(&self) -> SymExpr {
        self.size.iter().cloned().fold(SymExpr::Int(1), SymExpr::mul)
    }
}

/// Text form: `f32[s0, 4][4, 1]@cuda:0`, with `+offset` after the strides when
/// non-zero and `alloc N` when padded.
impl fmt::Display for Layout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}[", self.dtype)?;
        write_list(f, &self.size)?;
        f.write_str("][")?;
        write_list(f, &self.stride)?;
        f.write_str("]")?;
        if !is_zero(&self.offset) {
            write!(f, "+{}", ParenIfCompound(&self.offset))?;
        }
        write!(f, "@{}", self.device)?;
        if let Some(n) = &self.alloc_numel {
            write!(f, " alloc {}", ParenIfCompound(n))?;
        }
        Ok(())
    }
}

/// Writes an expression, parenthesised unless it is an atom.
pub struct ParenIfCompound<'a>(pub &'a SymExpr);

impl fmt::Display for ParenIfCompound<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            SymExpr::Int(v) if *v >= 0 => write!(f, "{v}"),
            SymExpr::Sym(s) => write!(f, "{s}"),
            other => write!(f, "({other})"),
        }
    }
}

fn write_list(f: &mut fmt::Formatter<'_>, items: &[SymExpr]) -> fmt::Result {
    for (i, e) in items.iter().enumerate() {
        if i > 0 {
            f.write_str(", ")?;
        }
        write!(f, "{e}")?;
    }
    Ok(())
}

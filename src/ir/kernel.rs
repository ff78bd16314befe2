//! Kernel definitions: backend, source and launch metadata.

use super::types::{DType, KernelName};
use crate::sym::SymExpr;
use indexmap::IndexMap;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// A kernel the wrapper defines and later calls.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct KernelDef {
    /// The kernel's name in the wrapper.
    pub name: KernelName,
    /// Which compiler produced it, with backend-specific metadata.
    pub backend: KernelBackend,
    /// Source text (Triton Python, Halide generator, C++, CUDA C). May be empty
    /// when only the compiled binary is known.
    #[serde(default)]
    pub source: String,
    /// Comment lines Inductor prints above the definition (kernel path, source
    /// nodes), without the leading `# `.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub comments: Vec<String>,
}

/// The code generator of a kernel.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum KernelBackend {
    /// A Triton kernel, launched with a grid.
    Triton(TritonMeta),
    /// A Halide kernel: a direct call; grid and stream handled inside Halide.
    Halide(HalideMeta),
    /// A C++ kernel (`async_compile.cpp_pybinding`): a direct call.
    Cpp(CppMeta),
    /// A CUDA C kernel (`k.k(args, c_void_p(stream))`).
    CudaC,
    /// A host function supplied by the embedder.
    Host,
}

impl KernelBackend {
    /// The backend's keyword in the text form.
    pub fn keyword(&self) -> &'static str {
        match self {
            KernelBackend::Triton(_) => "triton",
            KernelBackend::Halide(_) => "halide",
            KernelBackend::Cpp(_) => "cpp",
            KernelBackend::CudaC => "cuda_c",
            KernelBackend::Host => "host",
        }
    }
}

/// Metadata of a C++ kernel.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CppMeta {
    /// C types of the arguments (`const float*`, `int64_t`), in call order.
    #[serde(default)]
    pub arg_types: Vec<String>,
    /// The vector ISA the kernel's image was compiled for (Inductor's
    /// vectorised C++ for that ISA, which the CPU that loads it must have);
    /// `None`: the baseline x86-64 ISA.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub isa: Option<super::VecIsa>,
}

/// A Triton kernel parameter's type, from `triton_meta["signature"]`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(into = "String", try_from = "String")]
pub enum SigType {
    /// `*fp32`: a pointer to elements of a dtype.
    Pointer(DType),
    /// A scalar: `i1`, `i8`, `i16`, `i32`, `i64`, `u8`..`u64`, `fp16`, `bf16`, `fp32`, `fp64`.
    Scalar(ScalarType),
    /// `constexpr`: baked into the compiled kernel.
    Constexpr,
    /// Anything else (`nvTmaDesc`, `tensordesc<fp16[64, 64]>`), kept verbatim.
    Other(String),
}

/// Scalar parameter types of Triton signatures.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[allow(missing_docs)]
pub enum ScalarType {
    I1,
    I8,
    I16,
    I32,
    I64,
    U8,
    U16,
    U32,
    U64,
    Fp16,
    Bf16,
    Fp32,
    Fp64,
}

impl ScalarType {
    const ALL: [(ScalarType, &'static str); 13] = [
        (ScalarType::I1, "i1"),
        (ScalarType::I8, "i8"),
        (ScalarType::I16, "i16"),
        (ScalarType::I32, "i32"),
        (ScalarType::I64, "i64"),
        (ScalarType::U8, "u8"),
        (ScalarType::U16, "u16"),
        (ScalarType::U32, "u32"),
        (ScalarType::U64, "u64"),
        (ScalarType::Fp16, "fp16"),
        (ScalarType::Bf16, "bf16"),
        (ScalarType::Fp32, "fp32"),
        (ScalarType::Fp64, "fp64"),
    ];

    /// The signature token.
    pub fn as_str(self) -> &'static str {
        ScalarType::ALL
            .iter()
            .find(|(t, _)| *t == self)
            .map(|(_, s)| *s)
            .unwrap_or("?")
    }

    /// `true` for integer types (including `i1`).
    pub fn is_integer(self) -> bool {
        !matches!(
            self,
            ScalarType::Fp16 | ScalarType::Bf16 | ScalarType::Fp32 | ScalarType::Fp64
        )
    }

    /// Inclusive value range of an integer type.
    pub fn int_range(self) -> Option<(i128, i128)> {
        Some(match self {
            ScalarType::I1 => (0, 1),
            ScalarType::I8 => (i8::MIN as i128, i8::MAX as i128),
            ScalarType::I16 => (i16::MIN as i128, i16::MAX as i128),
            ScalarType::I32 => (i32::MIN as i128, i32::MAX as i128),
            ScalarType::I64 => (i64::MIN as i128, i64::MAX as i128),
            ScalarType::U8 => (0, u8::MAX as i128),
            ScalarType::U16 => (0, u16::MAX as i128),
            ScalarType::U32 => (0, u32::MAX as i128),
            ScalarType::U64 => (0, u64::MAX as i128),
            _ => return None,
        })
    }
}

impl fmt::Display for SigType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SigType::Pointer(d) => write!(f, "*{}", d.triton_name()),
            SigType::Scalar(s) => f.write_str(s.as_str()),
            SigType::Constexpr => f.write_str("constexpr"),
            SigType::Other(s) => f.write_str(s),
        }
    }
}

impl FromStr for SigType {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        if s == "constexpr" {
            return Ok(SigType::Constexpr);
        }
        if let Some(elem) = s.strip_prefix('*') {
            return DType::from_triton_name(elem)
                .map(SigType::Pointer)
                .ok_or_else(|| format!("unknown pointer element type `{elem}` in signature type `{s}`"));
        }
        if let Some((t, _)) = ScalarType::ALL.iter().find(|(_, n)| *n == s) {
            return Ok(SigType::Scalar(*t));
        }
        if s.is_empty() {
            return Err("empty signature type".into());
        }
        Ok(SigType::Other(s.to_string()))
    }
}

super::types::text_form_conversions!(SigType);

/// A value baked into a Triton kernel (`triton_meta["constants"]`, config kwargs).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ConstValue {
    /// `None`.
    None,
    /// A boolean.
    Bool(bool),
    /// An integer.
    Int(i64),
    /// A float (`inf`, `-inf`, `nan` are strings in JSON).
    Float(#[serde(with = "crate::ir::line::json_float")] f64),
    /// A string (dtype names and similar).
    Str(String),
}

impl fmt::Display for ConstValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConstValue::None => f.write_str("None"),
            ConstValue::Bool(true) => f.write_str("True"),
            ConstValue::Bool(false) => f.write_str("False"),
            ConstValue::Int(v) => write!(f, "{v}"),
            ConstValue::Float(v) => crate::ir::line::write_float(f, *v),
            ConstValue::Str(s) => write!(f, "{}", crate::ir::line::PyStr(s)),
        }
    }
}

/// How a Triton kernel's launch grid is computed (`inductor_meta["grid_type"]`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type")]
pub enum GridType {
    /// x = ceildiv(xnumel, XBLOCK).
    Grid1D,
    /// Adds y = ceildiv(ynumel, YBLOCK).
    Grid2D,
    /// Adds z = ceildiv(znumel, ZBLOCK).
    Grid3D,
    /// y split into (y, z) when it overflows the y limit.
    Grid2DWithYZOverflow {
        /// The y-dimension limit (65535 on CUDA).
        #[serde(default = "default_max_y_grid")]
        max_y_grid: i64,
    },
    /// x = RSPLIT, y = ceildiv(xnumel, XBLOCK).
    CooperativeReductionGrid,
    /// x = ceildiv(r0_numel, R0_BLOCK), y = xnumel.
    SplitScanGrid,
    /// The grid is passed as extra launcher args `_grid_0`, `_grid_1`, `_grid_2`.
    FixedGrid,
    /// Precomputed grids, one per config.
    PrecomputedGrid {
        /// Candidates; the first whose config matches the launch config is used.
        grids: Vec<PrecomputedGridEntry>,
    },
}

fn default_max_y_grid() -> i64 {
    65535
}

impl GridType {
    /// The name Inductor uses.
    pub fn name(&self) -> &'static str {
        match self {
            GridType::Grid1D => "Grid1D",
            GridType::Grid2D => "Grid2D",
            GridType::Grid3D => "Grid3D",
            GridType::Grid2DWithYZOverflow { .. } => "Grid2DWithYZOverflow",
            GridType::CooperativeReductionGrid => "CooperativeReductionGrid",
            GridType::SplitScanGrid => "SplitScanGrid",
            GridType::FixedGrid => "FixedGrid",
            GridType::PrecomputedGrid { .. } => "PrecomputedGrid",
        }
    }
}

/// One precomputed grid candidate.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PrecomputedGridEntry {
    /// The config kwargs this grid belongs to.
    pub config: IndexMap<String, i64>,
    /// Grid x, y, z in terms of kernel parameters.
    pub grid: [SymExpr; 3],
}

/// Launch metadata of a Triton kernel (`triton_meta`, `inductor_meta`, chosen config).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TritonMeta {
    /// Parameter name -> type, in kernel parameter order.
    pub signature: IndexMap<String, SigType>,
    /// Parameters fixed at compile time (equal-to-1 sizes, None args, explicit constexprs).
    #[serde(default, skip_serializing_if = "IndexMap::is_empty")]
    pub constants: IndexMap<String, ConstValue>,
    /// The chosen config's kwargs (`XBLOCK`, `R0_BLOCK`, ...).
    #[serde(default, skip_serializing_if = "IndexMap::is_empty")]
    pub config: IndexMap<String, i64>,
    /// How the grid is computed.
    pub grid_type: GridType,
    /// Warps per block; blocks have `32 * num_warps` threads.
    pub num_warps: u32,
    /// Software pipelining stages (informational).
    #[serde(default = "default_num_stages")]
    pub num_stages: u32,
    /// Dynamic shared memory in bytes.
    #[serde(default)]
    pub shared_mem: u32,
    /// Global scratch bytes per CTA; `None` when the kernel takes no such argument.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub global_scratch: Option<u64>,
    /// Profile scratch bytes per CTA; `None` when the kernel takes no such argument.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile_scratch: Option<u64>,
    /// Extra launcher arguments appended after the kernel's own (FixedGrid: `_grid_0..2`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extra_launcher_args: Vec<String>,
    /// The compiled function's mangled name, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mangled_name: Option<String>,
    /// Path of the compiled cubin, relative to the program file, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cubin: Option<String>,
    /// `true` for user-defined (`@triton.jit`) kernels.
    #[serde(default, skip_serializing_if = "is_false")]
    pub user_defined: bool,
}

fn default_num_stages() -> u32 {
    1
}

fn is_false(b: &bool) -> bool {
    !*b
}

impl TritonMeta {
    /// Launch metadata with the given signature, chosen config and grid, and
    /// Triton's defaults for the rest: 4 warps, 1 stage, no shared memory, no
    /// scratch, no constants, no extra launcher arguments, not user-defined.
    /// Set other fields with struct update syntax:
    /// `TritonMeta { num_warps: 8, ..TritonMeta::new(sig, config, grid) }`.
    pub fn new(signature: IndexMap<String, SigType>, config: IndexMap<String, i64>, grid_type: GridType) -> TritonMeta {
        TritonMeta {
            signature,
            constants: IndexMap::new(),
            config,
            grid_type,
            num_warps: 4,
            num_stages: default_num_stages(),
            shared_mem: 0,
            global_scratch: None,
            profile_scratch: None,
            extra_launcher_args: Vec::new(),
            mangled_name: None,
            cubin: None,
            user_defined: false,
        }
    }

    /// Parameters the launcher passes at run time: signature entries that are
    /// neither `constexpr` nor fixed in `constants`, in parameter order.
    pub fn runtime_params(&self) -> impl Iterator<Item = (&str, &SigType)> {
        self.signature
            .iter()
            .filter(|(n, t)| **t != SigType::Constexpr && !self.constants.contains_key(n.as_str()))
            .map(|(n, t)| (n.as_str(), t))
    }

    /// Parameters a call site supplies positionally (Inductor's `call_args`
    /// shape): every signature entry except *declared* constexprs, then the extra
    /// launcher args.
    ///
    /// Triton >= 3.3 types three kinds of parameters `constexpr`: declared block
    /// sizes and user `tl.constexpr`s (never passed), and sizes equal to 1 and
    /// `None` args, which Triton specialises but Inductor still passes (as `1` and
    /// as a placeholder). The latter are recognised by their `constants` entry
    /// being `1` or `None` while not being a config kwarg. A user constexpr
    /// explicitly set to 1 is indistinguishable from an equal-to-1 size here;
    /// producers bind such calls by name.
    pub fn call_params(&self) -> Vec<&str> {
        self.signature
            .iter()
            .filter(|(n, t)| **t != SigType::Constexpr || self.is_specialized_runtime_arg(n))
            .map(|(n, _)| n.as_str())
            .chain(self.extra_launcher_args.iter().map(|s| s.as_str()))
            .collect()
    }

    /// `true` for a `constexpr`-typed parameter that Triton specialised (an
    /// equal-to-1 size or a `None` arg) rather than one declared `tl.constexpr`.
    pub fn is_specialized_runtime_arg(&self, name: &str) -> bool {
        !self.config.contains_key(name)
            && matches!(
                self.constants.get(name),
                Some(ConstValue::Int(1)) | Some(ConstValue::None)
            )
    }
}

/// One argument of a Halide kernel (`HalideInputSpec`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HalideArg {
    /// C type: `float*`, `long`, ...
    pub ctype: String,
    /// Parameter name (`in_ptr0`, `ks0`, `out_ptr0`).
    pub name: String,
    /// Sizes as C expressions; `None` for scalars.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shape: Option<Vec<String>>,
    /// Strides as C expressions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stride: Option<Vec<String>>,
    /// Offset as a C expression.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offset: Option<String>,
    /// Name of the argument this one aliases.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alias_of: Option<String>,
}

/// Launch metadata of a Halide kernel (`HalideMeta`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HalideMeta {
    /// Arguments in call order: inputs, scalars, outputs.
    pub argtypes: Vec<HalideArg>,
    /// Halide target string (`host-strict_float-no_runtime-no_asserts`).
    pub target: String,
    /// Autoscheduler name (`Adams2019`), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduler: Option<String>,
    /// Autoscheduler flags.
    #[serde(default, skip_serializing_if = "IndexMap::is_empty")]
    pub scheduler_flags: IndexMap<String, ConstValue>,
    /// CUDA device index; `None` for CPU kernels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cuda_device: Option<u32>,
}

/// Where a bundle keeps the compiled image of host (C++ or CPU Halide)
/// kernel `kernel`: `kernels/<kernel>.so`, relative to the bundle. The host
/// backend loads it from there and the standalone C++ wrapper calls it there.
pub fn host_image_path(kernel: &str) -> String {
    format!("kernels/{kernel}.so")
}

/// Whether a kernel image path stays inside its bundle: relative, with only
/// plain components (no `.`, `..`, empty ones, backslashes or NULs). The one
/// rule the validator, bundles and packages hold image paths to.
pub fn is_plain_relative_path(path: &str) -> bool {
    !path.is_empty()
        && !path.contains(['\\', '\0'])
        && path.split('/').all(|c| !c.is_empty() && c != "." && c != "..")
        && !std::path::Path::new(path).has_root()
}

impl HalideMeta {
    /// `true` when the kernel runs on a GPU (takes a trailing stream argument).
    pub fn is_cuda(&self) -> bool {
        self.cuda_device.is_some()
    }
}

/// Why a Triton launch grid cannot be computed from a call.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum GridError {
    /// The grid formula needs a parameter the call does not bind.
    #[error("grid {grid} needs parameter `{param}`")]
    MissingParam {
        /// The grid type.
        grid: &'static str,
        /// The parameter.
        param: String,
    },
    /// A block size (or `max_y_grid`) is not a positive integer.
    #[error("grid {grid} needs `{param}` to be a positive integer, found {found}")]
    BlockSize {
        /// The grid type.
        grid: &'static str,
        /// The block-size parameter.
        param: String,
        /// What was found instead.
        found: String,
    },
    /// No precomputed grid candidate matches the chosen config.
    #[error("no precomputed grid matches the chosen config ({config})")]
    NoPrecomputedGrid {
        /// The chosen config, as `K: V` pairs (kwargs, then `num_warps`, `num_stages`).
        config: String,
    },
    /// A candidate before the match names a setting wrapir does not record,
    /// so which candidate Inductor's launcher takes cannot be decided.
    #[error(
        "precomputed grid candidate {index} matches on `{key}`, a setting the kernel's metadata does not record, so the candidate Inductor's launcher takes cannot be decided"
    )]
    UndecidablePrecomputedGrid {
        /// The candidate's position in `grids`.
        index: usize,
        /// The unknown key.
        key: String,
    },
}

/// `ceil(a / b)` for a positive literal `b`, as `(a + b - 1) // b`; folded
/// when `a` is a literal, and `a` itself when `b` is 1.
pub fn ceil_div(a: SymExpr, b: i64) -> SymExpr {
    if b == 1 {
        return a;
    }
    if let SymExpr::Int(x) = a {
        if let Some(v) = x.checked_add(b - 1).and_then(|n| n.checked_div_euclid(b)) {
            return SymExpr::Int(v);
        }
    }
    SymExpr::floor_div(SymExpr::add(a, SymExpr::Int(b - 1)), SymExpr::Int(b))
}

/// `ceil(a / b)` for a symbolic (positive) divisor.
pub fn ceil_div_expr(a: SymExpr, b: SymExpr) -> SymExpr {
    match b {
        SymExpr::Int(v) if v > 0 => ceil_div(a, v),
        b => SymExpr::floor_div(SymExpr::add(a, SymExpr::sub(b.clone(), SymExpr::Int(1))), b),
    }
}

impl TritonMeta {
    /// The settings of the chosen config that Inductor's `PrecomputedGrid`
    /// matches candidates against: `config_to_dict(cfg)`, i.e. the config
    /// kwargs plus `num_warps` and `num_stages`.
    pub fn config_setting(&self, key: &str) -> Option<i64> {
        match key {
            "num_warps" => Some(i64::from(self.num_warps)),
            "num_stages" => Some(i64::from(self.num_stages)),
            _ => self.config.get(key).copied(),
        }
    }

    /// The `PrecomputedGrid` candidate the launcher uses: the first whose every
    /// `config` entry equals the chosen config's setting (Inductor's
    /// `all(meta.get(k) == v for k, v in candidate["config"].items())` with
    /// `meta = config_to_dict(cfg)`). A key the chosen config lacks is a
    /// mismatch when it is a kernel parameter (the chosen config simply does not
    /// set it, as in Inductor); any other key is a setting wrapir does not
    /// record (e.g. warp-specialisation knobs), and the choice is refused
    /// rather than guessed. The one place candidates are matched.
    pub fn precomputed_grid(&self) -> Result<&PrecomputedGridEntry, GridError> {
        let GridType::PrecomputedGrid { grids } = &self.grid_type else {
            return Err(GridError::NoPrecomputedGrid {
                config: self.describe_config(),
            });
        };
        'candidates: for (index, g) in grids.iter().enumerate() {
            for (k, v) in &g.config {
                match self.config_setting(k) {
                    Some(have) if have == *v => {}
                    Some(_) => continue 'candidates,
                    None if self.signature.contains_key(k) => continue 'candidates,
                    None => return Err(GridError::UndecidablePrecomputedGrid { index, key: k.clone() }),
                }
            }
            return Ok(g);
        }
        Err(GridError::NoPrecomputedGrid {
            config: self.describe_config(),
        })
    }

    /// The chosen config as `K: V` pairs, `num_warps` and `num_stages` last.
    fn describe_config(&self) -> String {
        self.config
            .iter()
            .map(|(k, v)| format!("{k}: {v}"))
            .chain([
                format!("num_warps: {}", self.num_warps),
                format!("num_stages: {}", self.num_stages),
            ])
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// How a grid formula writes `ceil(numel / block)`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum GridForm {
    /// `(numel + block - 1) // block` ([`ceil_div`]), what wrapir's lowerings
    /// emit; block sizes must be positive integers.
    #[default]
    Lowered,
    /// Inductor's Python launcher: `-((numel) // -(block))` (folded for
    /// literals), the numel itself when the config has no such block size or
    /// it is 1 (spec 4.3, 6.1).
    Launcher,
}

impl TritonMeta {
    /// The launch grid (x, y, z) of this kernel per its grid type (the formulas
    /// of Inductor's launcher, spec section 6.1) in [`GridForm::Lowered`],
    /// where `value(name)` gives the expression bound to a kernel parameter,
    /// constant, config kwarg or extra launcher arg.
    pub fn grid(&self, value: &dyn Fn(&str) -> Option<SymExpr>) -> Result<[SymExpr; 3], GridError> {
        self.grid_in(GridForm::Lowered, value)
    }

    /// [`TritonMeta::grid`] written in `form`: [`TritonMeta::grid_with`] over
    /// symbolic expressions. The FX lowering emits it, translation validation
    /// reads the Python launcher's.
    pub fn grid_in(&self, form: GridForm, value: &dyn Fn(&str) -> Option<SymExpr>) -> Result<[SymExpr; 3], GridError> {
        self.grid_with(&mut SymGrid {
            form,
            grid: self.grid_type.name(),
            value,
        })
    }

    /// The launch grid (x, y, z) per the grid type, in the arithmetic of
    /// `algebra`. The one place the grid formulas live (which operands, how
    /// they combine, in which order they are read): [`TritonMeta::grid_in`]
    /// evaluates them as expressions, the C++ launch wrappers as C++ text.
    pub fn grid_with<A: GridAlgebra>(&self, a: &mut A) -> Result<[A::Value; 3], A::Error> {
        Ok(match &self.grid_type {
            GridType::Grid1D => [a.ceil_div_block("xnumel", "XBLOCK")?, a.int(1), a.int(1)],
            GridType::Grid2D => [
                a.ceil_div_block("xnumel", "XBLOCK")?,
                a.ceil_div_block("ynumel", "YBLOCK")?,
                a.int(1),
            ],
            GridType::Grid3D => [
                a.ceil_div_block("xnumel", "XBLOCK")?,
                a.ceil_div_block("ynumel", "YBLOCK")?,
                a.ceil_div_block("znumel", "ZBLOCK")?,
            ],
            GridType::Grid2DWithYZOverflow { max_y_grid } => {
                // y blocks beyond `max_y_grid` spill into z.
                let raw = a.ceil_div_block("ynumel", "YBLOCK")?;
                let raw = a.named("y_grid_raw_", raw);
                let max = a.int(*max_y_grid);
                let div = a.ceil_div(raw.clone(), max, true)?;
                let div = a.named("y_grid_div_", div);
                let y = a.ceil_div(raw, div.clone(), false)?;
                [a.ceil_div_block("xnumel", "XBLOCK")?, y, div]
            }
            GridType::CooperativeReductionGrid => {
                [a.operand("RSPLIT")?, a.ceil_div_block("xnumel", "XBLOCK")?, a.int(1)]
            }
            GridType::SplitScanGrid => [
                a.ceil_div_block("r0_numel", "R0_BLOCK")?,
                a.operand("xnumel")?,
                a.int(1),
            ],
            GridType::FixedGrid => [a.operand("_grid_0")?, a.operand("_grid_1")?, a.operand("_grid_2")?],
            GridType::PrecomputedGrid { .. } => {
                let entry = self.precomputed_grid().map_err(|e| a.grid_error(e))?;
                [
                    a.precomputed(&entry.grid[0])?,
                    a.precomputed(&entry.grid[1])?,
                    a.precomputed(&entry.grid[2])?,
                ]
            }
        })
    }
}

/// The arithmetic [`TritonMeta::grid_with`] writes a grid formula in: what
/// each user of the formulas supplies (values of operands, integer literals,
/// ceiling division, named temporaries, precomputed expressions).
pub trait GridAlgebra {
    /// A grid operand or result.
    type Value: Clone;
    /// Why a formula cannot be written.
    type Error;
    /// The value bound to a kernel parameter, constant, config entry or
    /// extra launcher argument.
    fn operand(&mut self, name: &str) -> Result<Self::Value, Self::Error>;
    /// An integer literal.
    fn int(&mut self, v: i64) -> Self::Value;
    /// `ceil(numel / block)` of the operands named `numel` and `block` (a
    /// block size).
    fn ceil_div_block(&mut self, numel: &str, block: &str) -> Result<Self::Value, Self::Error>;
    /// `ceil(a / b)`; `by_max_y_grid`: `b` is the `max_y_grid` literal (a
    /// block size) rather than a computed divisor.
    fn ceil_div(&mut self, a: Self::Value, b: Self::Value, by_max_y_grid: bool) -> Result<Self::Value, Self::Error>;
    /// `v`, computed once under `name` (the overflow grid's temporaries).
    fn named(&mut self, name: &'static str, v: Self::Value) -> Self::Value;
    /// One dimension of the chosen precomputed grid, over the kernel's parameters.
    fn precomputed(&mut self, e: &SymExpr) -> Result<Self::Value, Self::Error>;
    /// A [`GridError`] (no precomputed grid matches) as this algebra's error.
    fn grid_error(&mut self, e: GridError) -> Self::Error;
}

/// [`GridAlgebra`] over [`SymExpr`]s in a [`GridForm`].
struct SymGrid<'v> {
    form: GridForm,
    grid: &'static str,
    value: &'v dyn Fn(&str) -> Option<SymExpr>,
}

impl SymGrid<'_> {
    fn block(&self, n: &str) -> Result<i64, GridError> {
        match (self.value)(n) {
            Some(SymExpr::Int(v)) if v > 0 => Ok(v),
            Some(other) => Err(GridError::BlockSize {
                grid: self.grid,
                param: n.to_string(),
                found: format!("`{other}`"),
            }),
            None => Err(GridError::BlockSize {
                grid: self.grid,
                param: n.to_string(),
                found: "nothing".into(),
            }),
        }
    }
}

impl GridAlgebra for SymGrid<'_> {
    type Value = SymExpr;
    type Error = GridError;

    fn operand(&mut self, name: &str) -> Result<SymExpr, GridError> {
        (self.value)(name).ok_or_else(|| GridError::MissingParam {
            grid: self.grid,
            param: name.to_string(),
        })
    }

    fn int(&mut self, v: i64) -> SymExpr {
        SymExpr::Int(v)
    }

    fn ceil_div_block(&mut self, numel: &str, block: &str) -> Result<SymExpr, GridError> {
        match self.form {
            GridForm::Lowered => Ok(ceil_div(self.operand(numel)?, self.block(block)?)),
            GridForm::Launcher => {
                let n = self.operand(numel)?;
                launcher_ceil_div(self.grid, block, n, (self.value)(block))
            }
        }
    }

    fn ceil_div(&mut self, a: SymExpr, b: SymExpr, by_max_y_grid: bool) -> Result<SymExpr, GridError> {
        match (self.form, by_max_y_grid, b) {
            (GridForm::Lowered, true, SymExpr::Int(v)) if v > 0 => Ok(ceil_div(a, v)),
            (GridForm::Lowered, true, b) => Err(GridError::BlockSize {
                grid: self.grid,
                param: "max_y_grid".into(),
                found: b.to_string(),
            }),
            (GridForm::Lowered, false, b) => Ok(ceil_div_expr(a, b)),
            (GridForm::Launcher, _, b) => launcher_ceil_div(self.grid, "max_y_grid", a, Some(b)),
        }
    }

    fn named(&mut self, _name: &'static str, v: SymExpr) -> SymExpr {
        v
    }

    fn precomputed(&mut self, e: &SymExpr) -> Result<SymExpr, GridError> {
        if self.form == GridForm::Launcher {
            // The launcher evaluates the expression: every name must have a value.
            if let Some(s) = e
                .free_symbols()
                .into_iter()
                .find(|s| (self.value)(s.as_str()).is_none())
            {
                return Err(GridError::MissingParam {
                    grid: self.grid,
                    param: s.to_string(),
                });
            }
        }
        Ok(e.substitute(&|s: &crate::sym::Symbol| (self.value)(s.as_str())))
    }

    fn grid_error(&mut self, e: GridError) -> GridError {
        e
    }
}

/// `ceil(numel / block)` as Inductor's Python launcher writes it
/// ([`GridForm::Launcher`]); `param` names the block size in errors.
fn launcher_ceil_div(
    grid: &'static str,
    param: &str,
    numel: SymExpr,
    block: Option<SymExpr>,
) -> Result<SymExpr, GridError> {
    match block {
        None | Some(SymExpr::Int(1)) => Ok(numel),
        Some(SymExpr::Int(0)) => Err(GridError::BlockSize {
            grid,
            param: param.to_string(),
            found: "0".into(),
        }),
        Some(b) => {
            if let (SymExpr::Int(n), SymExpr::Int(k)) = (&numel, &b) {
                let folded = k
                    .checked_neg()
                    .and_then(|nk| crate::sym::eval::floor_div(*n, nk))
                    .and_then(i64::checked_neg);
                if let Some(v) = folded {
                    return Ok(SymExpr::Int(v));
                }
            }
            Ok(SymExpr::neg(SymExpr::floor_div(numel, SymExpr::neg(b))))
        }
    }
}

/// A call's arguments by parameter name, in argument order
/// ([`TritonMeta::bind_args_to`]); the names live as long as both the
/// parameter list and the call (`'n`), the values as long as the call (`'v`).
pub type BoundArgs<'n, 'v> = Vec<(&'n str, &'v super::line::ArgValue)>;

/// The one walk that matches a call's arguments to parameter names:
/// positional arguments fill `params` in order, then named arguments bind the
/// name they give when `known(name)`. Every problem goes to `issue`, in
/// argument order, and the walk goes on: a positional argument after a named
/// one, one past `params` (reported once) or an unknown name is left
/// unbound, a name given twice keeps its last value. [`TritonMeta::bind_args`]
/// stops at the first problem; the validator reports each one, for every
/// kernel backend.
pub fn bind_call_args<'n, 'v: 'n>(
    params: &[&'n str],
    known: &dyn Fn(&str) -> bool,
    args: &'v [super::line::CallArg],
    issue: &mut dyn FnMut(ArgBindError),
) -> BoundArgs<'n, 'v> {
    let mut bound = BoundArgs::with_capacity(args.len());
    let mut positional = 0usize;
    let mut seen_named = false;
    let mut too_many = false;
    for (i, a) in args.iter().enumerate() {
        let name: &str = match &a.name {
            None if seen_named => {
                issue(ArgBindError::PositionalAfterNamed { position: i });
                continue;
            }
            None => {
                let Some(p) = params.get(positional) else {
                    if !too_many {
                        too_many = true;
                        issue(ArgBindError::TooManyArguments {
                            given: args.iter().filter(|a| a.name.is_none()).count(),
                            params: params.iter().map(|p| p.to_string()).collect(),
                        });
                    }
                    continue;
                };
                positional += 1;
                p
            }
            Some(n) => {
                seen_named = true;
                if !known(n) {
                    issue(ArgBindError::UnknownParameter { param: n.clone() });
                    continue;
                }
                n
            }
        };
        match bound.iter_mut().find(|(n, _)| *n == name) {
            Some(slot) => {
                issue(ArgBindError::BoundTwice {
                    param: name.to_string(),
                });
                slot.1 = &a.value;
            }
            None => bound.push((name, &a.value)),
        }
    }
    bound
}

/// Why a Triton call's arguments do not match its kernel's parameters.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ArgBindError {
    /// A positional argument follows a named one.
    #[error("positional argument {position} follows a named argument")]
    PositionalAfterNamed {
        /// Its index in the call.
        position: usize,
    },
    /// More positional arguments than call parameters.
    #[error("{given} positional arguments given, but the kernel takes {} ({})", params.len(), params.join(", "))]
    TooManyArguments {
        /// Positional arguments given.
        given: usize,
        /// The call parameters.
        params: Vec<String>,
    },
    /// A named argument that is not a parameter, constant or extra launcher arg.
    #[error("`{param}` is not a parameter of the kernel")]
    UnknownParameter {
        /// The name.
        param: String,
    },
    /// A parameter bound twice.
    #[error("parameter `{param}` is given twice")]
    BoundTwice {
        /// The parameter.
        param: String,
    },
}

impl TritonMeta {
    /// Matches a call's arguments to parameters: positional arguments fill
    /// [`TritonMeta::call_params`] in order, then named arguments bind the
    /// parameter (or constexpr, or extra launcher arg) they name. Returns
    /// parameter -> value in call order. Whether every required parameter is
    /// bound, and whether a value given for a baked-in parameter agrees with
    /// it, is the caller's business.
    pub fn bind_args<'c>(
        &self,
        args: &'c [super::line::CallArg],
    ) -> Result<IndexMap<String, &'c super::line::ArgValue>, ArgBindError> {
        let params = self.call_params();
        let bound = self.bind_args_to(&params, args)?;
        Ok(bound.into_iter().map(|(n, v)| (n.to_string(), v)).collect())
    }

    /// [`TritonMeta::bind_args`] over `params`, this kernel's
    /// [`TritonMeta::call_params`] (which a caller binding many launches keeps),
    /// without allocating a name per argument; the first problem
    /// [`bind_call_args`] finds is the error. The FX lowering binds every
    /// launch through it.
    pub fn bind_args_to<'n, 'v: 'n>(
        &self,
        params: &[&'n str],
        args: &'v [super::line::CallArg],
    ) -> Result<BoundArgs<'n, 'v>, ArgBindError> {
        let known = |n: &str| self.signature.contains_key(n) || self.extra_launcher_args.iter().any(|x| x == n);
        let mut first = None;
        let bound = bind_call_args(params, &known, args, &mut |e| {
            first.get_or_insert(e);
        });
        match first {
            Some(e) => Err(e),
            None => Ok(bound),
        }
    }

    /// The value compiled into the kernel for `name`: its `constants` entry,
    /// else its config kwarg.
    pub fn baked_value(&self, name: &str) -> Option<ConstValue> {
        self.constants
            .get(name)
            .cloned()
            .or_else(|| self.config.get(name).map(|v| ConstValue::Int(*v)))
    }

    /// `true` when `name` is baked into the kernel rather than passed at launch
    /// (a declared constexpr, or a `constants` entry that is not a call parameter).
    pub fn is_baked(&self, name: &str) -> bool {
        matches!(self.signature.get(name), Some(SigType::Constexpr)) || self.constants.contains_key(name)
    }
}

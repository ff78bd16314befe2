//! Triton launch wrappers (`call_<kernel>`): parameters, grids, argument
//! marshalling and the driver launch (spec 6.3).

use super::{cexpr_text, CStyle, Cx, Lowering};
use crate::ir::{
    ArgValue, ConstValue, DType, GridAlgebra, GridError, KernelCall, KernelName, Location, ScalarType, SigType,
    TritonMeta,
};
use crate::lower::cpp::{Error, ErrorKind};
use crate::lower::launches::{PrintedRange, PrintedScratch, ScratchPointer};
use crate::sym::SymExpr;
use smallvec::SmallVec;
use std::fmt::Write as _;

/// What a launch wrapper parameter holds.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum ParamKind {
    /// A tensor whose data pointer is passed.
    Pointer(DType),
    /// A scalar of a Triton signature type.
    Scalar(ScalarType),
    /// An extra launcher argument (FixedGrid `_grid_0..2`), an `int64_t`.
    Extra,
}

/// One parameter of a `call_<kernel>` wrapper.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Param {
    pub(super) name: String,
    pub(super) kind: ParamKind,
}

impl Param {
    pub(super) fn is_pointer(&self) -> bool {
        matches!(self.kind, ParamKind::Pointer(_))
    }

    pub(super) fn kind_text(&self) -> String {
        match &self.kind {
            ParamKind::Pointer(d) => format!("*{}", d.triton_name()),
            ParamKind::Scalar(s) => s.as_str().to_string(),
            ParamKind::Extra => "launcher argument".to_string(),
        }
    }
}

/// The wrapper's parameters: every runtime signature entry (neither
/// `constexpr` nor fixed in `constants`), then the extra launcher arguments.
pub(super) fn wrapper_params(kernel: &KernelName, meta: &TritonMeta) -> Result<Vec<Param>, Error> {
    let mut params = Vec::new();
    for (name, ty) in meta.runtime_params() {
        let kind = match ty {
            SigType::Pointer(d) => ParamKind::Pointer(*d),
            SigType::Scalar(s) => ParamKind::Scalar(*s),
            SigType::Constexpr => continue,
            SigType::Other(t) => {
                return Err({
                    // A wrapper belongs to the program's kernel table, not to a line.
                    Error::new(
                        Location::Program,
                        ErrorKind::NotSupported {
                            dialect: "both dialects",
                            what: format!("kernel `{kernel}`: parameter `{name}` of signature type `{t}`"),
                        },
                    )
                });
            }
        };
        params.push(Param {
            name: name.to_string(),
            kind,
        });
    }
    for extra in &meta.extra_launcher_args {
        params.push(Param {
            name: extra.clone(),
            kind: ParamKind::Extra,
        });
    }
    Ok(params)
}

/// Matches a call's arguments (positional, then named) to the kernel's call
/// parameters and returns the ones the wrapper takes, in parameter order.
pub(super) fn bind_call_args<'c>(
    kernel: &KernelName,
    meta: &TritonMeta,
    call: &'c KernelCall,
    cx: &Cx<'_>,
) -> Result<Vec<(Param, &'c ArgValue)>, Error> {
    let names = meta.call_params();
    // Kept: validation binds the same way (`bind_call_args`) but checks no
    // literal against the value `constants` or the config bakes in
    // (`check_baked_arg`), and its arity and missing-argument checks are not
    // shown to cover every wrapper parameter.
    let invalid = |message: String| Error::invalid(cx, message);
    let bound = meta
        .bind_args(&call.args)
        .map_err(|e| invalid(format!("kernel `{kernel}`: {e}")))?;
    for (name, value) in &bound {
        if !names.contains(&name.as_str()) {
            check_baked_arg(kernel, meta, name, value).map_err(invalid)?;
        }
    }
    let params = wrapper_params(kernel, meta)?;
    let mut out = Vec::with_capacity(params.len());
    for p in params {
        let value = bound
            .get(p.name.as_str())
            .copied()
            .ok_or_else(|| invalid(format!("kernel `{kernel}` call is missing parameter `{}`", p.name)))?;
        out.push((p, value));
    }
    Ok(out)
}

/// A kernel's wrapper parameters and how an all-positional call binds them,
/// computed once per kernel.
#[derive(Debug)]
pub(super) struct CallPlan {
    /// [`wrapper_params`].
    pub(super) params: Vec<Param>,
    /// How many call parameters a positional call passes.
    call_params: usize,
    /// For each wrapper parameter, its position among the call parameters;
    /// `None` when a call of all positional arguments does not bind every
    /// wrapper parameter (or call parameters repeat): such calls take the
    /// general path.
    positions: Option<Vec<usize>>,
}

impl CallPlan {
    pub(super) fn new(kernel: &KernelName, meta: &TritonMeta) -> Result<Self, Error> {
        let params = wrapper_params(kernel, meta)?;
        let names = meta.call_params();
        let distinct = names.iter().enumerate().all(|(i, n)| !names[..i].contains(n));
        let positions = if distinct {
            params
                .iter()
                .map(|p| names.iter().position(|n| *n == p.name))
                .collect::<Option<Vec<usize>>>()
        } else {
            None
        };
        Ok(CallPlan {
            params,
            call_params: names.len(),
            positions,
        })
    }

    /// [`bind_call_args`] with the parameters borrowed from the plan: the
    /// index of each wrapper parameter in [`CallPlan::params`] and its value.
    pub(super) fn bind<'c>(
        &self,
        kernel: &KernelName,
        meta: &TritonMeta,
        call: &'c KernelCall,
        cx: &Cx<'_>,
    ) -> Result<SmallVec<[(usize, &'c ArgValue); 8]>, Error> {
        if let Some(positions) = &self.positions {
            // Every argument positional and one per call parameter: each binds
            // the call parameter at its position, and none is baked in.
            if call.args.len() == self.call_params && call.args.iter().all(|a| a.name.is_none()) {
                return Ok(positions
                    .iter()
                    .enumerate()
                    .map(|(i, &at)| (i, &call.args[at].value))
                    .collect());
            }
        }
        let bound = bind_call_args(kernel, meta, call, cx)?;
        // `bind_call_args` returns the wrapper parameters in order.
        Ok(bound.into_iter().enumerate().map(|(i, (_, v))| (i, v)).collect())
    }
}

/// A named call argument for a parameter baked into the compiled kernel (a
/// `constexpr` or an entry of `constants`): it is not passed at launch, but a
/// literal must agree with the value the kernel was compiled with (its
/// `constants` entry, else its `config` entry, when one is known).
fn check_baked_arg(kernel: &KernelName, meta: &TritonMeta, name: &str, value: &ArgValue) -> Result<(), String> {
    let constexpr = meta.signature.get(name) == Some(&SigType::Constexpr);
    let baked = match meta.constants.get(name) {
        Some(c) => Some(c.clone()),
        None => meta.config.get(name).map(|v| ConstValue::Int(*v)),
    };
    if !constexpr && !meta.constants.contains_key(name) {
        return Err(format!("kernel `{kernel}` has no call parameter `{name}`"));
    }
    let given = match value {
        ArgValue::Expr(SymExpr::Int(v)) => Some(ConstValue::Int(*v)),
        ArgValue::Bool(b) => Some(ConstValue::Bool(*b)),
        ArgValue::Float(f) => Some(ConstValue::Float(*f)),
        ArgValue::None => Some(ConstValue::None),
        ArgValue::Str(s) => Some(ConstValue::Str(s.clone())),
        // A symbolic value cannot be compared here; the compiled value wins.
        _ => None,
    };
    let agree = |a: &ConstValue, b: &ConstValue| match (a, b) {
        (ConstValue::Int(x), ConstValue::Bool(y)) | (ConstValue::Bool(y), ConstValue::Int(x)) => *x == i64::from(*y),
        (ConstValue::Int(x), ConstValue::Float(y)) | (ConstValue::Float(y), ConstValue::Int(x)) => (*x as f64) == *y,
        _ => a == b,
    };
    match (given, baked) {
        (Some(g), Some(b)) if !agree(&g, &b) => Err(format!(
            "kernel `{kernel}` was compiled with `{name}` = {b}, but the call passes {g}"
        )),
        _ => Ok(()),
    }
}

/// The generated launch wrappers.
pub(super) struct KernelWrappers {
    pub(super) text: String,
}

/// A grid operand: a folded integer, or C++ text with the value it computes
/// (an expression over the wrapper's parameters, each a symbol named after it).
#[derive(Clone, Debug)]
enum GridVal {
    Int(i64),
    /// An `int64_t` parameter or expression.
    Text(String, SymExpr),
    /// A `uint32_t` prefix temporary (`y_grid_raw_`): arithmetic on it is unsigned 32-bit.
    Temp(String, SymExpr),
}

impl GridVal {
    fn text(&self) -> String {
        match self {
            GridVal::Int(v) => v.to_string(),
            GridVal::Text(t, _) | GridVal::Temp(t, _) => t.clone(),
        }
    }

    fn expr(&self) -> SymExpr {
        match self {
            GridVal::Int(v) => SymExpr::Int(*v),
            GridVal::Text(_, e) | GridVal::Temp(_, e) => e.clone(),
        }
    }
}

/// The wrapper's grid, prefix temporaries first, with what each printed value computes.
struct BuiltGrid {
    /// `(name, C++ text)` of each `uint32_t` prefix temporary.
    prefix: Vec<(String, String)>,
    /// The `grid_0..2` C++ texts.
    text: [String; 3],
    /// The `grid_0..2` values over the wrapper's parameters.
    exprs: [SymExpr; 3],
    /// Ranges the values must lie in for the text to compute `exprs`.
    ranges: Vec<PrintedRange>,
}

struct GridBuilder<'m> {
    kernel: &'m KernelName,
    meta: &'m TritonMeta,
    params: &'m [Param],
    /// How expressions print (precomputed grids).
    style: CStyle,
    /// `(name, C++ text)` of each `uint32_t` prefix temporary.
    prefix: Vec<(String, String)>,
    ranges: Vec<PrintedRange>,
}

const U32_MAX: i64 = u32::MAX as i64;

impl GridBuilder<'_> {
    /// Kept, reachable: validation does not evaluate launch grids, so a
    /// grid operand that is no runtime parameter, integer constant or config
    /// value reaches the lowering.
    fn err(&self, message: String) -> Error {
        Error::invalid(Location::Program, format!("kernel `{}`: {message}", self.kernel))
    }

    fn lookup(&self, name: &str) -> Result<GridVal, Error> {
        if let Some(v) = self.meta.config.get(name) {
            return Ok(GridVal::Int(*v));
        }
        match self.meta.constants.get(name) {
            Some(ConstValue::Int(v)) => return Ok(GridVal::Int(*v)),
            Some(other) => return Err(self.err(format!("grid operand `{name}` is the non-integer constant {other}"))),
            None => {}
        }
        if self.params.iter().any(|p| p.name == name) {
            return Ok(GridVal::Text(name.to_string(), SymExpr::sym(name)));
        }
        Err(self.err(format!(
            "the {} grid needs `{name}`, which is neither a runtime parameter, an integer constant nor a config value",
            self.meta.grid_type.name()
        )))
    }

    /// `((a + (b - 1)) / (b))`. C's `/` truncates, so it equals `//` only for
    /// a non-negative numerator and a positive divisor: both are recorded as ranges.
    fn ceildiv(&mut self, a: GridVal, b: GridVal) -> Result<GridVal, Error> {
        match (a, b) {
            (_, GridVal::Int(b)) if b <= 0 => Err(self.err(format!("grid block size {b} is not positive"))),
            (a, GridVal::Int(1)) => Ok(a),
            (GridVal::Int(a), GridVal::Int(b)) => Ok(GridVal::Int(a.div_euclid(b) + i64::from(a.rem_euclid(b) != 0))),
            (a, b) => {
                let unsigned = matches!(a, GridVal::Temp(..)) || matches!(b, GridVal::Temp(..));
                let numerator = SymExpr::add(a.expr(), SymExpr::sub(b.expr(), SymExpr::Int(1)));
                let text = format!("(({} + ({} - 1)) / ({}))", a.text(), b.text(), b.text());
                self.ranges.push(PrintedRange {
                    what: format!("numerator of `{text}`"),
                    value: numerator.clone(),
                    lo: 0,
                    hi: if unsigned { U32_MAX } else { i64::MAX },
                });
                if !matches!(b, GridVal::Int(_)) {
                    self.ranges.push(PrintedRange {
                        what: format!("divisor of `{text}`"),
                        value: b.expr(),
                        lo: 1,
                        hi: i64::MAX,
                    });
                }
                Ok(GridVal::Text(text, SymExpr::floor_div(numerator, b.expr())))
            }
        }
    }

    fn numel_over_block(&mut self, numel: &str, block: &str) -> Result<GridVal, Error> {
        let n = self.lookup(numel)?;
        let b = self.lookup(block)?;
        self.ceildiv(n, b)
    }

    /// A `uint32_t` temporary holding `value`.
    fn temp(&mut self, name: &str, value: &GridVal) -> GridVal {
        self.ranges.push(PrintedRange {
            what: format!("uint32_t {name}"),
            value: value.expr(),
            lo: 0,
            hi: U32_MAX,
        });
        GridVal::Temp(name.to_string(), value.expr())
    }

    /// Prefix temporaries and the three grid expressions: the formulas of
    /// [`TritonMeta::grid_with`] in C++.
    fn build(mut self) -> Result<BuiltGrid, Error> {
        let meta = self.meta;
        let [x, y, z] = meta.grid_with(&mut self)?;
        for (i, g) in [&x, &y, &z].into_iter().enumerate() {
            self.ranges.push(PrintedRange {
                what: format!("uint32_t grid_{i}"),
                value: g.expr(),
                lo: 0,
                hi: U32_MAX,
            });
        }
        Ok(BuiltGrid {
            prefix: self.prefix,
            text: [x.text(), y.text(), z.text()],
            exprs: [x.expr(), y.expr(), z.expr()],
            ranges: self.ranges,
        })
    }
}

impl GridAlgebra for GridBuilder<'_> {
    type Value = GridVal;
    type Error = Error;

    fn operand(&mut self, name: &str) -> Result<GridVal, Error> {
        self.lookup(name)
    }

    fn int(&mut self, v: i64) -> GridVal {
        GridVal::Int(v)
    }

    fn ceil_div_block(&mut self, numel: &str, block: &str) -> Result<GridVal, Error> {
        self.numel_over_block(numel, block)
    }

    fn ceil_div(&mut self, a: GridVal, b: GridVal, _by_max_y_grid: bool) -> Result<GridVal, Error> {
        self.ceildiv(a, b)
    }

    /// A `uint32_t` prefix temporary.
    fn named(&mut self, name: &'static str, v: GridVal) -> GridVal {
        self.prefix.push((name.to_string(), v.text()));
        self.temp(name, &v)
    }

    fn precomputed(&mut self, e: &SymExpr) -> Result<GridVal, Error> {
        let folded = e.substitute(&|s| match self.lookup(s.as_str()) {
            Ok(GridVal::Int(v)) => Some(SymExpr::Int(v)),
            _ => None,
        });
        // Every symbol left must be a runtime parameter of the wrapper.
        for s in folded.free_symbols() {
            self.lookup(s.as_str())?;
        }
        Ok(match folded {
            SymExpr::Int(v) => GridVal::Int(v),
            other => GridVal::Text(cexpr_text(&other, self.style), other),
        })
    }

    fn grid_error(&mut self, e: GridError) -> Error {
        self.err(e.to_string())
    }
}

/// The C type of a scalar kernel argument as the compiled kernel reads it.
fn scalar_ctype(s: ScalarType) -> &'static str {
    match s {
        ScalarType::I1 | ScalarType::I32 => "int32_t",
        ScalarType::I8 => "int8_t",
        ScalarType::I16 => "int16_t",
        ScalarType::I64 => "int64_t",
        ScalarType::U8 => "uint8_t",
        ScalarType::U16 => "uint16_t",
        ScalarType::U32 => "uint32_t",
        ScalarType::U64 => "uint64_t",
        ScalarType::Fp16 | ScalarType::Bf16 | ScalarType::Fp32 => "float",
        ScalarType::Fp64 => "double",
    }
}

/// The C type of a scalar wrapper parameter.
fn param_ctype(s: ScalarType) -> &'static str {
    match s {
        ScalarType::Fp16 | ScalarType::Bf16 | ScalarType::Fp32 => "float",
        ScalarType::Fp64 => "double",
        ScalarType::U64 => "uint64_t",
        _ => "int64_t",
    }
}

/// Writes one `call_<kernel>` wrapper per called Triton kernel, in definition order.
pub(super) fn kernel_wrappers(l: &mut Lowering<'_>, called: &[KernelName]) -> Result<KernelWrappers, Error> {
    let mut text = String::new();
    let mut var = 0usize;
    let program = l.program;
    for (name, def) in &program.kernels {
        if !called.contains(name) {
            continue;
        }
        let crate::ir::KernelBackend::Triton(meta) = &def.backend else {
            continue;
        };
        write_wrapper(l, &mut text, name, meta, &mut var)?;
    }
    Ok(KernelWrappers { text })
}

fn write_wrapper(
    l: &mut Lowering<'_>,
    out: &mut String,
    kernel: &KernelName,
    meta: &TritonMeta,
    var: &mut usize,
) -> Result<(), Error> {
    let d = l.dialect();
    let params = wrapper_params(kernel, meta)?;
    writeln!(out, "static CUfunction {kernel} = nullptr;")?;
    let pointers: Vec<&str> = params
        .iter()
        .filter(|p| p.is_pointer())
        .map(|p| p.name.as_str())
        .collect();
    if let Some(template) = d.wrapper_template(&pointers) {
        writeln!(out, "{template}")?;
    }
    writeln!(out, "static inline void call_{kernel}(")?;
    let mut decls: Vec<String> = params
        .iter()
        .map(|p| match &p.kind {
            ParamKind::Pointer(_) => d.wrapper_pointer_param(&p.name),
            ParamKind::Scalar(s) => format!("{} {}", param_ctype(*s), p.name),
            ParamKind::Extra => format!("int64_t {}", p.name),
        })
        .collect();
    decls.extend(d.wrapper_tail_params().iter().map(|p| p.to_string()));
    writeln!(out, "    {}", decls.join(",\n    "))?;
    writeln!(out, "){{")?;
    let grid = GridBuilder {
        kernel,
        meta,
        params: &params,
        style: l.cstyle(),
        prefix: Vec::new(),
        ranges: Vec::new(),
    }
    .build()?;
    for (name, value) in &grid.prefix {
        writeln!(out, "    uint32_t {name} = {value};")?;
    }
    let [g0, g1, g2] = &grid.text;
    writeln!(out, "    uint32_t grid_0 = {g0};")?;
    writeln!(out, "    uint32_t grid_1 = {g1};")?;
    writeln!(out, "    uint32_t grid_2 = {g2};")?;
    writeln!(out, "    if (grid_0 == 0 || grid_1 == 0 || grid_2 == 0) return;")?;
    let mangled = meta.mangled_name.clone().unwrap_or_else(|| kernel.to_string());
    let cubin = meta.cubin.clone().unwrap_or_else(|| format!("{kernel}.cubin"));
    writeln!(out, "    if ({kernel} == nullptr) {{")?;
    writeln!(out, "{}", d.load_kernel(l, kernel, &cubin, &mangled, meta.shared_mem))?;
    writeln!(out, "    }}")?;
    let mut arg_vars = Vec::new();
    // Parameters behind `arg_vars`, in order (for recording).
    let mut kernel_args = Vec::new();
    let mut scratch = Vec::new();
    for p in &params {
        let v = format!("var_{var}");
        match &p.kind {
            ParamKind::Pointer(_) => writeln!(out, "    CUdeviceptr {v} = {};", d.wrapper_pointer(&p.name))?,
            ParamKind::Scalar(s) => writeln!(out, "    {} {v} = {};", scalar_ctype(*s), p.name)?,
            // Launcher-only arguments are not kernel parameters.
            ParamKind::Extra => continue,
        }
        *var += 1;
        arg_vars.push(v);
        kernel_args.push(p.name.clone());
    }
    for (prefix, size) in [
        ("global_scratch", meta.global_scratch),
        ("profile_scratch", meta.profile_scratch),
    ] {
        let Some(size) = size else { continue };
        let v = format!("{prefix}_scratch_{var}");
        *var += 1;
        scratch.push(PrintedScratch {
            pointer: if prefix == "global_scratch" {
                ScratchPointer::Global
            } else {
                ScratchPointer::Profile
            },
            // `static_cast<int64_t>(size) * grid_0 * grid_1 * grid_2` bytes.
            bytes: (size > 0).then(|| {
                let per_cta = i64::try_from(size).map_or(SymExpr::Int(i64::MAX), SymExpr::Int);
                grid.exprs.iter().cloned().fold(per_cta, SymExpr::mul)
            }),
        });
        if size == 0 {
            writeln!(out, "    CUdeviceptr {v} = 0;")?;
        } else {
            d.wrapper_scratch(l, out, &v, size)?;
        }
        arg_vars.push(v);
    }
    if arg_vars.is_empty() {
        writeln!(out, "    void** kernel_args_ = nullptr;")?;
    } else {
        let refs: Vec<String> = arg_vars.iter().map(|v| format!("&{v}")).collect();
        writeln!(out, "    void* kernel_args_[] = {{{}}};", refs.join(", "))?;
    }
    let launch = d.launch_fn();
    writeln!(
        out,
        "    {launch}({kernel}, grid_0, grid_1, grid_2, {}, {}, kernel_args_, stream_);",
        meta.num_warps, meta.shared_mem
    )?;
    writeln!(out, "}}\n")?;
    if let Some(r) = l.recorded.as_mut() {
        r.wrappers.insert(
            kernel.clone(),
            WrapperLaunch {
                kernel_args,
                grid: grid.exprs,
                scratch,
                ranges: grid.ranges,
            },
        );
    }
    Ok(())
}

/// What one `call_<kernel>` wrapper launches, over its parameters (each a
/// symbol named after it), recorded from the values it prints.
#[derive(Debug)]
pub(super) struct WrapperLaunch {
    /// The parameters behind `kernel_args_`, in order (scratch pointers follow).
    pub(super) kernel_args: Vec<String>,
    /// `grid_0..2`.
    pub(super) grid: [SymExpr; 3],
    /// The scratch pointers at the end of `kernel_args_`.
    pub(super) scratch: Vec<PrintedScratch>,
    /// Ranges the printed values must lie in.
    pub(super) ranges: Vec<PrintedRange>,
}

//! A deterministic generator of large, realistic wrapper programs for the
//! benchmarks: pointwise, in-place, 2-D/3-D, reduction, precomputed-grid and
//! user-defined (FixedGrid, named arguments) Triton launches with symbolic
//! arguments; allocations, frees and reuses; `extern_kernels.mm` calls;
//! `nonzero` with unbacked binds and runtime asserts; precomputed symbols;
//! comments and `assert_size_stride` checks.
#![allow(dead_code)]

pub mod dag_shapes;
pub mod families;
pub mod subgraphs;

use families::{cuda_f32, matmul_inputs};

use indexmap::IndexMap;
use wrapir::ir::{
    ArgValue, AssertSizeStride, BufName, CallArg, ConstValue, DType, Device, GraphBuilder, GridType, KernelCall,
    KernelName, Layout, Line, PrecomputedGridEntry, Program, ProgramBuilder, SigType, TritonMeta,
};
use wrapir::sym::{CmpOp, SymExpr, Symbol};

/// A deterministic generator (64-bit LCG).
pub struct Lcg(pub u64);

impl Lcg {
    /// A number in `0..n`.
    pub fn next(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

/// How big to make a program.
#[derive(Clone, Copy, Debug)]
pub struct Size {
    /// Stop after at least this many main-graph lines...
    pub lines: usize,
    /// ...or after at least this many kernel launches, whichever comes first.
    pub launches: usize,
    /// Kernels of each family (there are 10 families).
    pub kernels_per_family: usize,
}

impl Size {
    /// A program of at least `lines` main-graph lines, 4 kernels a family.
    pub fn lines(lines: usize) -> Size {
        Size {
            lines,
            launches: usize::MAX,
            kernels_per_family: 4,
        }
    }

    /// A program of at least `launches` kernel launches, 4 kernels a family.
    pub fn launches(launches: usize) -> Size {
        Size {
            lines: usize::MAX,
            launches,
            kernels_per_family: 4,
        }
    }
}

/// The generated `program`'s validation; exits the benchmark (status 1)
/// saying why when it is invalid.
pub fn validated(program: &Program) -> wrapir::ir::ProgramInfo<'_> {
    match wrapir::ir::validate(program) {
        Ok(info) => info,
        Err(e) => {
            eprintln!("generated program is invalid:\n{e}");
            std::process::exit(1);
        }
    }
}

/// What the generator made.
pub struct Generated {
    /// The program.
    pub program: Program,
    /// Triton launches in it.
    pub launches: usize,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Family {
    /// (in_ptr0, out_ptr0, xnumel) Grid1D.
    Pointwise,
    /// (in_out_ptr0, in_ptr0, xnumel) Grid1D.
    InPlace,
    /// (in_ptr0, in_ptr1, out_ptr0, xnumel) Grid1D.
    Binary,
    /// (in_ptr0, out_ptr0, ynumel, xnumel) Grid2D; even ones specialise ynumel to 1.
    Tile2D,
    /// (in_ptr0, out_ptr0, ynumel, xnumel) Grid2DWithYZOverflow.
    Overflow2D,
    /// (in_ptr0, out_ptr0, znumel, ynumel, xnumel) Grid3D.
    Tile3D,
    /// (in_ptr0, out_ptr0, xnumel, r0_numel) Grid1D reduction.
    Reduction,
    /// (arg_A, arg_B, out_ptr0, ks0) PrecomputedGrid template.
    Template,
    /// (in_ptr0, mask_ptr=None, out_ptr, n_elements, BLOCK_SIZE) FixedGrid user kernel.
    UserFixed,
    /// (in_ptr0: *i64, out_ptr0, xnumel) Grid1D conversion.
    Convert,
}

const FAMILIES: [Family; 10] = [
    Family::Pointwise,
    Family::InPlace,
    Family::Binary,
    Family::Tile2D,
    Family::Overflow2D,
    Family::Tile3D,
    Family::Reduction,
    Family::Template,
    Family::UserFixed,
    Family::Convert,
];

fn sig(entries: &[(&str, &str)]) -> IndexMap<String, SigType> {
    entries
        .iter()
        .map(|(n, t)| (n.to_string(), t.parse().unwrap_or(SigType::Other(t.to_string()))))
        .collect()
}

fn cfg(entries: &[(&str, i64)]) -> IndexMap<String, i64> {
    entries.iter().map(|(n, v)| (n.to_string(), *v)).collect()
}

/// A 1-D pointwise kernel: the pointer parameters `pointers`, then
/// `xnumel: i32` and `XBLOCK` (configured to `xblock`).
fn pointwise_1d(pointers: &[(&str, &str)], xblock: i64) -> TritonMeta {
    let mut params = pointers.to_vec();
    params.extend([("xnumel", "i32"), ("XBLOCK", "constexpr")]);
    TritonMeta::new(sig(&params), cfg(&[("XBLOCK", xblock)]), GridType::Grid1D)
}

fn kernel_meta(family: Family, i: usize) -> (String, TritonMeta) {
    let xblock = [128, 256, 512, 1024][i % 4];
    // The 2-D families' signature.
    let tile_2d = || {
        sig(&[
            ("in_ptr0", "*fp32"),
            ("out_ptr0", "*fp32"),
            ("ynumel", "i32"),
            ("xnumel", "i32"),
            ("YBLOCK", "constexpr"),
            ("XBLOCK", "constexpr"),
        ])
    };
    match family {
        Family::Pointwise => (
            format!("triton_poi_fused_relu_{i}"),
            pointwise_1d(&[("in_ptr0", "*fp32"), ("out_ptr0", "*fp32")], xblock),
        ),
        Family::InPlace => (
            format!("triton_poi_fused_add_mul_{i}"),
            pointwise_1d(&[("in_out_ptr0", "*fp32"), ("in_ptr0", "*fp32")], xblock),
        ),
        Family::Binary => (
            format!("triton_poi_fused_div_sub_{i}"),
            pointwise_1d(
                &[("in_ptr0", "*fp32"), ("in_ptr1", "*fp32"), ("out_ptr0", "*fp32")],
                xblock,
            ),
        ),
        Family::Tile2D => {
            let mut m = TritonMeta::new(
                tile_2d(),
                cfg(&[("YBLOCK", [1, 16, 32][i % 3]), ("XBLOCK", 64)]),
                GridType::Grid2D,
            );
            if i % 2 == 0 {
                m.constants.insert("ynumel".into(), ConstValue::Int(1));
            }
            (format!("triton_poi_fused_transpose_{i}"), m)
        }
        Family::Overflow2D => (
            format!("triton_poi_fused_permute_{i}"),
            TritonMeta::new(
                tile_2d(),
                cfg(&[("YBLOCK", 1), ("XBLOCK", 64)]),
                GridType::Grid2DWithYZOverflow { max_y_grid: 65535 },
            ),
        ),
        Family::Tile3D => (
            format!("triton_poi_fused_cat_{i}"),
            TritonMeta::new(
                sig(&[
                    ("in_ptr0", "*fp32"),
                    ("out_ptr0", "*fp32"),
                    ("znumel", "i32"),
                    ("ynumel", "i32"),
                    ("xnumel", "i32"),
                    ("ZBLOCK", "constexpr"),
                    ("YBLOCK", "constexpr"),
                    ("XBLOCK", "constexpr"),
                ]),
                cfg(&[("ZBLOCK", 1), ("YBLOCK", 16), ("XBLOCK", 16)]),
                GridType::Grid3D,
            ),
        ),
        Family::Reduction => (
            format!("triton_red_fused_sum_{i}"),
            TritonMeta::new(
                sig(&[
                    ("in_ptr0", "*fp32"),
                    ("out_ptr0", "*fp32"),
                    ("xnumel", "i32"),
                    ("r0_numel", "i32"),
                    ("XBLOCK", "constexpr"),
                    ("R0_BLOCK", "constexpr"),
                ]),
                cfg(&[("XBLOCK", 1), ("R0_BLOCK", [256, 512, 1024][i % 3])]),
                GridType::Grid1D,
            ),
        ),
        Family::Template => {
            let cand = |bm: i64| PrecomputedGridEntry {
                config: cfg(&[("BLOCK_M", bm), ("BLOCK_N", 64)]),
                grid: [
                    SymExpr::floor_div(
                        SymExpr::add(SymExpr::sym("ks0"), SymExpr::Int(bm - 1)),
                        SymExpr::Int(bm),
                    ),
                    SymExpr::Int(1),
                    SymExpr::Int(1),
                ],
            };
            let bm = [64, 128][i % 2];
            let mut m = TritonMeta::new(
                sig(&[
                    ("arg_A", "*fp32"),
                    ("arg_B", "*fp32"),
                    ("out_ptr0", "*fp32"),
                    ("ks0", "i64"),
                    ("BLOCK_M", "constexpr"),
                    ("BLOCK_N", "constexpr"),
                ]),
                cfg(&[("BLOCK_M", bm), ("BLOCK_N", 64)]),
                GridType::PrecomputedGrid {
                    grids: vec![cand(64), cand(128)],
                },
            );
            m.num_stages = 3;
            m.shared_mem = 65536;
            (format!("triton_tem_fused_mm_{i}"), m)
        }
        Family::Convert => (
            format!("triton_poi_fused__to_copy_{i}"),
            pointwise_1d(&[("in_ptr0", "*i64"), ("out_ptr0", "*fp32")], xblock),
        ),
        Family::UserFixed => {
            let mut m = TritonMeta::new(
                sig(&[
                    ("in_ptr0", "*fp32"),
                    ("mask_ptr", "constexpr"),
                    ("out_ptr", "*fp32"),
                    ("n_elements", "i32"),
                    ("BLOCK_SIZE", "constexpr"),
                ]),
                IndexMap::new(),
                GridType::FixedGrid,
            );
            m.constants.insert("mask_ptr".into(), ConstValue::None);
            m.constants.insert("BLOCK_SIZE".into(), ConstValue::Int(64));
            m.extra_launcher_args = vec!["_grid_0".into(), "_grid_1".into(), "_grid_2".into()];
            m.user_defined = true;
            (format!("masked_kernel_{i}"), m)
        }
    }
}

fn triton_source(name: &str) -> String {
    format!(
        "@triton.jit\ndef {name}(in_ptr0, out_ptr0, xnumel, XBLOCK : tl.constexpr):\n    xoffset = tl.program_id(0) * XBLOCK\n    xindex = xoffset + tl.arange(0, XBLOCK)[:]\n    xmask = xindex < xnumel\n    tmp0 = tl.load(in_ptr0 + (xindex), xmask)\n    tl.store(out_ptr0 + (xindex), tmp0, xmask)\n"
    )
}

fn s(name: &str) -> SymExpr {
    SymExpr::sym(name)
}

fn buf(b: &BufName) -> ArgValue {
    ArgValue::Buffer(b.clone())
}

fn expr(e: SymExpr) -> ArgValue {
    ArgValue::Expr(e)
}

struct Writer<'g, 'p> {
    g: &'g mut GraphBuilder<'p>,
    rng: Lcg,
    kernels: Vec<(Family, KernelName)>,
    next_buf: usize,
    lines: usize,
    launches: usize,
    /// The current activation `f32[s0, s1]` and whether the graph owns it.
    cur: BufName,
    owned: bool,
    x: Layout,
    weight: BufName,
    input: BufName,
    unbacked: Vec<Symbol>,
    precomputed: Vec<Symbol>,
}

impl Writer<'_, '_> {
    fn name(&mut self) -> String {
        self.next_buf += 1;
        format!("buf{}", self.next_buf - 1)
    }

    fn kernel(&mut self, family: Family) -> KernelName {
        let of: Vec<&KernelName> = self
            .kernels
            .iter()
            .filter(|(f, _)| *f == family)
            .map(|(_, k)| k)
            .collect();
        of[self.rng.next(of.len() as u64) as usize].clone()
    }

    fn line(&mut self, line: Line) {
        self.g.line(line);
        self.lines += 1;
    }

    fn maybe_comment(&mut self, what: &str) {
        if self.rng.next(2) == 0 {
            self.line(Line::Comment {
                text: format!("Topologically Sorted Source Nodes: [{what}], Original ATen: [aten.{what}]"),
            });
        }
    }

    fn call(&mut self, kernel: KernelName, args: Vec<CallArg>) {
        self.line(Line::KernelCall(KernelCall {
            kernel,
            args,
            device: Some(Device::cuda(0)),
        }));
        self.launches += 1;
    }

    fn call_pos(&mut self, kernel: KernelName, args: Vec<ArgValue>) {
        self.call(kernel, args.into_iter().map(CallArg::positional).collect());
    }

    fn alloc(&mut self, layout: Layout) -> BufName {
        let n = self.name();
        self.lines += 1;
        self.g.allocate(&n, layout)
    }

    fn release_cur(&mut self) {
        if self.owned {
            let c = self.cur.clone();
            self.g.free_if_not_reused(&c);
            self.lines += 1;
        }
    }

    fn set_cur(&mut self, b: BufName) {
        self.cur = b;
        self.owned = true;
    }

    fn numel(&self) -> SymExpr {
        SymExpr::mul(s("s0"), s("s1"))
    }

    /// One block of lines: what Inductor emits for one fused node.
    fn block(&mut self) {
        let x = self.x.clone();
        let cur = self.cur.clone();
        match self.rng.next(20) {
            0..=4 => {
                let k = self.kernel(Family::Pointwise);
                let b = self.alloc(x);
                self.maybe_comment("relu");
                self.call_pos(k, vec![buf(&cur), buf(&b), expr(self.numel())]);
                self.release_cur();
                self.set_cur(b);
            }
            5..=6 if self.owned => {
                let k = self.kernel(Family::InPlace);
                let input = self.input.clone();
                self.maybe_comment("add");
                self.call_pos(k, vec![buf(&cur), buf(&input), expr(self.numel())]);
            }
            7 if self.owned => {
                let n = self.name();
                let b = self.g.reuse(&cur, &n, x);
                self.lines += 1;
                let k = self.kernel(Family::InPlace);
                let input = self.input.clone();
                self.call_pos(k, vec![buf(&b), buf(&input), expr(self.numel())]);
                self.cur = b;
            }
            8 => {
                let k = self.kernel(Family::Tile2D);
                let specialized = self.kernels.iter().position(|(_, n)| *n == k).unwrap_or(0) % 2 == 0;
                let b = self.alloc(x);
                self.maybe_comment("permute");
                let y = if specialized { SymExpr::Int(1) } else { s("s0") };
                let xn = if specialized { self.numel() } else { s("s1") };
                self.call_pos(k, vec![buf(&cur), buf(&b), expr(y), expr(xn)]);
                self.release_cur();
                self.set_cur(b);
            }
            9 => {
                let k = self.kernel(Family::Overflow2D);
                let b = self.alloc(x);
                self.call_pos(k, vec![buf(&cur), buf(&b), expr(s("s1")), expr(s("s0"))]);
                self.release_cur();
                self.set_cur(b);
            }
            10 => {
                let k = self.kernel(Family::Tile3D);
                let b = self.alloc(x);
                self.call_pos(
                    k,
                    vec![buf(&cur), buf(&b), expr(SymExpr::Int(1)), expr(s("s0")), expr(s("s1"))],
                );
                self.release_cur();
                self.set_cur(b);
            }
            11 | 12 => {
                let red = self.kernel(Family::Reduction);
                let bin = self.kernel(Family::Binary);
                let r = self.alloc(Layout::contiguous(DType::Float32, Device::cuda(0), [s("s0")]));
                self.maybe_comment("sum");
                self.call_pos(red, vec![buf(&cur), buf(&r), expr(s("s0")), expr(s("s1"))]);
                let b = self.alloc(x);
                self.call_pos(bin, vec![buf(&cur), buf(&r), buf(&b), expr(self.numel())]);
                self.g.free_if_not_reused(&r);
                self.lines += 1;
                self.release_cur();
                self.set_cur(b);
            }
            13 => {
                let b = self.alloc(x.clone());
                self.maybe_comment("mm");
                let w = self.weight.clone();
                self.g
                    .extern_out(&b, "extern_kernels.mm", vec![buf(&cur), buf(&w)], IndexMap::new());
                self.lines += 1;
                self.line(Line::AssertSizeStride(AssertSizeStride {
                    buffer: b.clone(),
                    size: x.size.clone(),
                    stride: x.stride.clone(),
                    dtype: None,
                    context: Some("extern_kernels.mm".into()),
                }));
                self.release_cur();
                self.set_cur(b);
            }
            14 | 15 => {
                // Data-dependent output size: nonzero, an unbacked bind, asserts.
                let u = Symbol::new(format!("u{}", self.unbacked.len()));
                self.unbacked.push(u.clone());
                let m = self.name();
                let m = self
                    .g
                    .extern_alloc_multi(&m, "torch.ops.aten.nonzero.default", vec![buf(&cur)]);
                self.lines += 1;
                self.g.bind_size(&m, &u, 0);
                self.lines += 1;
                let gname = self.name();
                let idx_layout = Layout::contiguous(
                    DType::Int64,
                    Device::cuda(0),
                    [SymExpr::Sym(u.clone()), SymExpr::Int(2)],
                );
                let gb = self.g.multi_output(&gname, idx_layout, &m, &[]);
                self.lines += 1;
                self.line(Line::RuntimeAssert {
                    cond: SymExpr::cmp(CmpOp::Ge, SymExpr::Sym(u.clone()), SymExpr::Int(0)),
                    message: format!("{u} >= 0"),
                    node: None,
                });
                self.line(Line::RuntimeAssert {
                    cond: SymExpr::cmp(CmpOp::Le, SymExpr::Sym(u.clone()), SymExpr::Int(16777216)),
                    message: format!("{u} <= 16777216"),
                    node: None,
                });
                let k = self.kernel(Family::Convert);
                let h = self.alloc(Layout::contiguous(
                    DType::Float32,
                    Device::cuda(0),
                    [SymExpr::Sym(u.clone()), SymExpr::Int(2)],
                ));
                self.call_pos(
                    k,
                    vec![buf(&gb), buf(&h), expr(SymExpr::mul(SymExpr::Int(2), SymExpr::Sym(u)))],
                );
                self.g.free_if_not_reused(&gb);
                self.g.free_if_not_reused(&h);
                self.lines += 2;
            }
            16 | 17 => {
                let ks = Symbol::new(format!("ks{}", self.precomputed.len()));
                self.precomputed.push(ks.clone());
                self.g.let_symbol(&ks, self.numel());
                self.lines += 1;
                let k = self.kernel(Family::Template);
                let b = self.alloc(x);
                self.maybe_comment("mm");
                let w = self.weight.clone();
                self.call_pos(k, vec![buf(&cur), buf(&w), buf(&b), expr(SymExpr::Sym(ks))]);
                self.release_cur();
                self.set_cur(b);
            }
            _ => {
                let k = self.kernel(Family::UserFixed);
                let b = self.alloc(x);
                let n = self.numel();
                let named = |name: &str, value: ArgValue| CallArg {
                    name: Some(name.to_string()),
                    value,
                };
                let grid0 = SymExpr::floor_div(SymExpr::add(n.clone(), SymExpr::Int(63)), SymExpr::Int(64));
                self.call(
                    k,
                    vec![
                        named("out_ptr", buf(&b)),
                        named("in_ptr0", buf(&cur)),
                        named("n_elements", expr(n)),
                        named("mask_ptr", ArgValue::None),
                        named("BLOCK_SIZE", expr(SymExpr::Int(64))),
                        named("_grid_0", expr(grid0)),
                        named("_grid_1", expr(SymExpr::Int(1))),
                        named("_grid_2", expr(SymExpr::Int(1))),
                    ],
                );
                self.release_cur();
                self.set_cur(b);
            }
        }
    }
}

/// Generates a program (deterministic for a given `size` and `seed`).
pub fn generate(size: Size, seed: u64) -> Generated {
    let mut p = ProgramBuilder::new();
    let s0 = p.symbol(
        "s0",
        wrapir::ir::SymbolKind::Backed,
        wrapir::ir::ValueRange::new(Some(2), Some(4096)),
        Some(64),
    );
    let s1 = p.symbol(
        "s1",
        wrapir::ir::SymbolKind::Backed,
        wrapir::ir::ValueRange::new(Some(2), Some(4096)),
        Some(32),
    );
    let mut kernels = Vec::new();
    for (fi, family) in FAMILIES.iter().enumerate() {
        for j in 0..size.kernels_per_family {
            let (name, meta) = kernel_meta(*family, fi * size.kernels_per_family + j);
            let k = p.triton_kernel(&name, &triton_source(&name), meta);
            kernels.push((*family, k));
        }
    }
    // Unbacked and precomputed symbols are declared after the graph is written
    // (the writer names them as it goes).
    let (unbacked, precomputed, launches) = {
        let mut g = p.main();
        let (input, weight) = matmul_inputs(&mut g, &s0, &s1);
        let x = cuda_f32(&[&s0, &s1]);
        let mut lines = 0;
        for (_, k) in &kernels {
            g.define_kernel(k);
            lines += 1;
        }
        g.line(Line::EnterDeviceContext {
            device_index: 0,
            streams: None,
        });
        lines += 1;
        let mut w = Writer {
            g: &mut g,
            rng: Lcg(seed),
            kernels: kernels.clone(),
            next_buf: 0,
            lines,
            launches: 0,
            cur: input.clone(),
            owned: false,
            x,
            weight,
            input,
            unbacked: Vec::new(),
            precomputed: Vec::new(),
        };
        while w.lines + 1 < size.lines && w.launches < size.launches {
            w.block();
        }
        let out = w.cur.clone();
        let (unbacked, precomputed, launches) = (w.unbacked, w.precomputed, w.launches);
        g.line(Line::ExitDeviceContext);
        g.output(&out);
        g.finish();
        (unbacked, precomputed, launches)
    };
    for u in &unbacked {
        p.unbacked_symbol(u.as_str(), Some(0), Some(16777216));
    }
    for k in &precomputed {
        p.precomputed_symbol(k.as_str());
    }
    Generated {
        program: p.finish(),
        launches,
    }
}

#[allow(unused_imports)] // Not every benchmark times in-process.
pub use wrapir::bench::median_time;

/// `n` with thousands separators.
pub fn thousands(n: f64) -> String {
    let s = format!("{:.0}", n);
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

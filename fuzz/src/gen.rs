//! A structured program generator: fuzzer bytes drive [`ProgramBuilder`], so
//! every input is a well-formed [`Program`] (names resolve, lines are of real
//! kinds) that reaches the validator and the lowerings without the parser.
//! Most programs are still invalid (wrong dtypes, use after free, shapes that
//! disagree); the validator must say so, never panic.

use arbitrary::{Result, Unstructured};
use indexmap::IndexMap;
use wrapir::ir::{
    ArgValue, BufName, Conditional, DType, Device, DynamicScalar, GridType, KernelName, Layout, Line, MultiIndex,
    Predicate, Program, ProgramBuilder, SigType, TritonMeta,
};
use wrapir::sym::{CmpOp, SymExpr, Symbol};

const EXTERN_OPS: &[&str] = &[
    "torch.ops.aten.add.Tensor",
    "torch.ops.aten.mul.Tensor",
    "torch.ops.aten.relu.default",
    "torch.ops.aten.clone.default",
    "torch.ops.aten.nonzero.default",
    "torch.ops.aten.cumsum.default",
    "torch.ops.aten.index.Tensor",
    "torch.ops.aten.zeros_like.default",
    "torch.ops.aten.where.self",
    "torch.ops.aten.mm.default",
    "torch.ops.aten._jagged_to_padded_dense_forward.default",
    "torch.ops.aten._padded_dense_to_jagged_forward.default",
    "torch.ops.mylib.custom.default",
];
const OUT_OPS: &[&str] = &["extern_kernels.mm", "extern_kernels.addmm", "extern_kernels.bmm"];
const MULTI_OPS: &[&str] = &["torch.ops.aten.topk.default", "torch.ops.mylib.split_by_mask.default"];

/// Unbacked symbols a program's `item` lines may bind.
const ITEM_SYMBOLS: usize = 48;
/// The longest run of `item` or `cond` lines one choice writes (past the
/// DAG's longest run joined pair by pair, 16).
const MAX_RUN: usize = 24;

struct Gen<'u, 'a> {
    u: &'u mut Unstructured<'a>,
    symbols: Vec<Symbol>,
}

impl Gen<'_, '_> {
    fn expr(&mut self, depth: u32) -> Result<SymExpr> {
        let leaf = depth == 0 || self.u.ratio(1, 2)?;
        if leaf {
            if !self.symbols.is_empty() && self.u.ratio(1, 2)? {
                return Ok(SymExpr::Sym(self.u.choose(&self.symbols)?.clone()));
            }
            return Ok(SymExpr::Int(self.u.int_in_range(-2..=8)?));
        }
        let a = self.expr(depth - 1)?;
        let b = self.expr(depth - 1)?;
        Ok(match self.u.int_in_range(0..=6)? {
            0 => SymExpr::add(a, b),
            1 => SymExpr::mul(a, b),
            2 => SymExpr::floor_div(a, b),
            3 => SymExpr::sub(a, b),
            4 => SymExpr::Mod(Box::new(a), Box::new(b)),
            5 => SymExpr::Max(vec![a, b]),
            _ => SymExpr::Min(vec![a, b]),
        })
    }

    fn cond(&mut self) -> Result<SymExpr> {
        let a = self.expr(2)?;
        let b = self.expr(2)?;
        let op = *self.u.choose(&[CmpOp::Eq, CmpOp::Ne, CmpOp::Lt, CmpOp::Le, CmpOp::Gt, CmpOp::Ge])?;
        Ok(SymExpr::cmp(op, a, b))
    }

    fn dtype(&mut self) -> Result<DType> {
        // Mostly f32/i64/bool so that dtypes agree often enough to get further.
        if self.u.ratio(3, 4)? {
            Ok(*self.u.choose(&[DType::Float32, DType::Int64, DType::Bool])?)
        } else {
            Ok(*self.u.choose(&DType::ALL)?)
        }
    }

    fn device(&mut self) -> Result<Device> {
        Ok(if self.u.ratio(3, 4)? { Device::cpu() } else { Device::cuda(self.u.int_in_range(0..=1)?) })
    }

    fn layout(&mut self) -> Result<Layout> {
        let dtype = self.dtype()?;
        let device = self.device()?;
        let rank = self.u.int_in_range(0..=3)?;
        let size: Vec<SymExpr> = (0..rank).map(|_| self.expr(1)).collect::<Result<_>>()?;
        let mut l = Layout::contiguous(dtype, device, size);
        if self.u.ratio(1, 4)? {
            for s in l.stride.iter_mut() {
                *s = self.expr(1)?;
            }
        }
        if self.u.ratio(1, 8)? {
            l.offset = self.expr(1)?;
        }
        if self.u.ratio(1, 8)? {
            l.alloc_numel = Some(self.expr(1)?);
        }
        Ok(l)
    }

    fn arg(&mut self, live: &[BufName], depth: u32) -> Result<ArgValue> {
        Ok(match self.u.int_in_range(0..=7)? {
            0..=2 if !live.is_empty() => ArgValue::Buffer(self.u.choose(live)?.clone()),
            3 => ArgValue::Float(f64::from(self.u.int_in_range(-4i32..=4)?) * 0.5),
            4 => ArgValue::Bool(self.u.arbitrary()?),
            5 if depth > 0 => {
                let n = self.u.int_in_range(0..=3)?;
                ArgValue::List((0..n).map(|_| self.arg(live, depth - 1)).collect::<Result<_>>()?)
            }
            6 => ArgValue::None,
            _ => ArgValue::Expr(self.expr(1)?),
        })
    }

    fn kernel(&mut self, p: &mut ProgramBuilder, i: usize) -> Result<(KernelName, Vec<Option<DType>>)> {
        let nptr = self.u.int_in_range(1..=3)?;
        let mut signature = IndexMap::new();
        let mut params = Vec::new();
        for j in 0..nptr {
            let d = self.dtype()?;
            signature.insert(format!("in_out_ptr{j}"), SigType::Pointer(d));
            params.push(Some(d));
        }
        signature.insert("xnumel".to_string(), "i32".parse().unwrap());
        params.push(None);
        signature.insert("XBLOCK".to_string(), SigType::Constexpr);
        let grid_type = self.u.choose(&[GridType::Grid1D, GridType::Grid2D, GridType::Grid3D])?.clone();
        let meta = TritonMeta::new(signature, [("XBLOCK".to_string(), 1i64 << self.u.int_in_range(0..=10)?)].into_iter().collect(), grid_type);
        let name = format!("triton_poi_fused_{i}");
        Ok((p.triton_kernel(&name, "# source", meta), params))
    }
}

/// A program from fuzzer bytes.
pub fn program(u: &mut Unstructured<'_>) -> Result<Program> {
    let mut p = ProgramBuilder::new();
    let mut g = Gen { u, symbols: vec![] };
    let nsyms = g.u.int_in_range(0..=3)?;
    let mut backed = vec![];
    for i in 0..nsyms {
        if g.u.ratio(1, 4)? {
            let hi = g.u.int_in_range(0..=16)?;
            g.symbols.push(p.unbacked_symbol(&format!("u{i}"), Some(0), Some(hi)));
        } else {
            let hint = g.u.int_in_range(0..=8)?;
            let s = p.backed_symbol(&format!("s{i}"), Some(hint));
            backed.push(s.clone());
            g.symbols.push(s);
        }
    }
    // Unbacked symbols for runs of `item` lines (each bound once, from a
    // one-element input): long runs of binders next to runs of `cond`s are
    // what the dependency DAG joins through one binder.
    let item_symbols: Vec<Symbol> = if g.u.ratio(1, 3)? {
        (0..ITEM_SYMBOLS).map(|i| p.unbacked_symbol(&format!("v{i}"), Some(0), Some(16))).collect()
    } else {
        Vec::new()
    };
    let mut next_item = 0usize;
    let nkernels = g.u.int_in_range(0..=2)?;
    let kernels: Vec<_> = (0..nkernels).map(|i| g.kernel(&mut p, i)).collect::<Result<_>>()?;

    // Two branch subgraphs for `cond` lines: one input, one output.
    let with_cond = g.u.ratio(1, 3)?;
    let branch_layout = g.layout()?;
    if with_cond {
        for name in ["true_graph_0", "false_graph_0"] {
            let mut sg = p.subgraph(name);
            let x = sg.tensor_input(&format!("{name}_arg0_1"), branch_layout.clone());
            if g.u.ratio(1, 2)? {
                let y = sg.extern_alloc(
                    &format!("{name}_buf0"),
                    branch_layout.clone(),
                    "torch.ops.aten.clone.default",
                    vec![ArgValue::Buffer(x)],
                );
                sg.output(&y);
            } else {
                sg.output(&x);
            }
            sg.finish();
        }
    }

    let mut m = p.main();
    let mut live: Vec<BufName> = vec![];
    let ninputs = g.u.int_in_range(0..=3)?;
    for i in 0..ninputs {
        let l = g.layout()?;
        live.push(m.tensor_input(&format!("arg{i}_1"), l));
    }
    for s in &backed {
        if g.u.ratio(1, 4)? {
            m.symbol_input(s.as_str(), s);
        }
    }
    let item_source = if item_symbols.is_empty() {
        None
    } else {
        let device = g.device()?;
        Some(m.tensor_input("item_src", Layout::contiguous(DType::Int64, device, Vec::new())))
    };
    let mut defined = vec![false; kernels.len()];
    let mut next = 0usize;
    let fresh = |next: &mut usize| {
        *next += 1;
        format!("buf{}", *next - 1)
    };
    let nlines = g.u.int_in_range(0..=12)?;
    for _ in 0..nlines {
        match g.u.int_in_range(0..=14)? {
            0 => {
                let l = g.layout()?;
                live.push(m.allocate(&fresh(&mut next), l));
            }
            1 if !live.is_empty() => {
                let i = g.u.choose_index(live.len())?;
                let b = live.remove(i);
                if g.u.ratio(1, 2)? {
                    m.free(&b);
                } else {
                    m.free_if_not_reused(&b);
                }
            }
            2 if !live.is_empty() => {
                let i = g.u.choose_index(live.len())?;
                let old = live.remove(i);
                let l = g.layout()?;
                live.push(m.reuse(&old, &fresh(&mut next), l));
            }
            3 if !live.is_empty() => {
                let base = g.u.choose(&live)?.clone();
                let l = g.layout()?;
                live.push(m.reinterpret(&base, &fresh(&mut next), l));
            }
            4 if !kernels.is_empty() => {
                let k = g.u.choose_index(kernels.len())?;
                if !defined[k] || g.u.ratio(1, 8)? {
                    m.define_kernel(&kernels[k].0);
                    defined[k] = true;
                }
                let params = kernels[k].1.clone();
                let mut args = vec![];
                for p in params {
                    args.push(match p {
                        Some(_) if !live.is_empty() && g.u.ratio(7, 8)? => ArgValue::Buffer(g.u.choose(&live)?.clone()),
                        _ => ArgValue::Expr(g.expr(2)?),
                    });
                }
                m.call_kernel(&kernels[k].0, args);
            }
            5 => {
                let op = *g.u.choose(EXTERN_OPS)?;
                let n = g.u.int_in_range(0..=3)?;
                let args = (0..n).map(|_| g.arg(&live, 2)).collect::<Result<_>>()?;
                let l = g.layout()?;
                live.push(m.extern_alloc(&fresh(&mut next), l, op, args));
            }
            6 if !live.is_empty() => {
                let op = *g.u.choose(OUT_OPS)?;
                let out = g.u.choose(&live)?.clone();
                let n = g.u.int_in_range(0..=3)?;
                let args = (0..n).map(|_| g.arg(&live, 1)).collect::<Result<_>>()?;
                let mut kwargs = IndexMap::new();
                if g.u.ratio(1, 4)? {
                    kwargs.insert("alpha".to_string(), ArgValue::Expr(SymExpr::Int(1)));
                }
                m.extern_out(&out, op, args, kwargs);
            }
            7 => {
                let name = format!("ps{next}");
                next += 1;
                let s = Symbol::new(&name);
                let e = g.expr(2)?;
                m.let_symbol(&s, e);
                g.symbols.push(s);
            }
            8 => {
                let c = g.cond()?;
                m.runtime_assert(c, "fuzz assert");
            }
            9 => m.comment("# fuzz"),
            10 => {
                let op = *g.u.choose(MULTI_OPS)?;
                let n = g.u.int_in_range(0..=2)?;
                let args = (0..n).map(|_| g.arg(&live, 1)).collect::<Result<_>>()?;
                let multi = m.extern_alloc_multi(&fresh(&mut next), op, args);
                let k = g.u.int_in_range(1..=2)?;
                for _ in 0..k {
                    let idx = match g.u.int_in_range(0..=2)? {
                        0 => MultiIndex::Tuple(g.u.int_in_range(-1..=3)?),
                        1 => MultiIndex::List(g.u.int_in_range(-1..=3)?),
                        _ => MultiIndex::Dict("values".to_string()),
                    };
                    let l = g.layout()?;
                    live.push(m.multi_output(&fresh(&mut next), l, &multi, &[idx]));
                }
            }
            11 if with_cond && !live.is_empty() => {
                let operand = g.u.choose(&live)?.clone();
                let predicate = if g.u.ratio(1, 2)? {
                    Predicate::Expr(g.cond()?)
                } else {
                    Predicate::Tensor(g.u.choose(&live)?.clone())
                };
                let result = m.declare_multi(&fresh(&mut next));
                m.line(Line::Conditional(Conditional {
                    result: result.clone(),
                    predicate,
                    true_graph: wrapir::ir::GraphName::new("true_graph_0"),
                    false_graph: wrapir::ir::GraphName::new("false_graph_0"),
                    operands: vec![operand],
                }));
                live.push(m.multi_output(&fresh(&mut next), branch_layout.clone(), &result, &[MultiIndex::Tuple(0)]));
            }
            12 if item_source.is_some() => {
                // A run of `item`s, each binding the next unbound symbol.
                let run = g.u.int_in_range(1..=MAX_RUN)?;
                for _ in 0..run {
                    let (Some(source), Some(symbol)) = (&item_source, item_symbols.get(next_item)) else { break };
                    next_item += 1;
                    m.line(Line::DynamicScalar(DynamicScalar {
                        symbol: symbol.clone(),
                        source: source.clone(),
                        keypath: Default::default(),
                        node: None,
                    }));
                    g.symbols.push(symbol.clone());
                }
            }
            13 if with_cond && !live.is_empty() => {
                // A run of `cond`s on one operand, their results unused.
                let operand = g.u.choose(&live)?.clone();
                let run = g.u.int_in_range(1..=MAX_RUN)?;
                for _ in 0..run {
                    let result = m.declare_multi(&fresh(&mut next));
                    m.line(Line::Conditional(Conditional {
                        result,
                        predicate: Predicate::Expr(g.cond()?),
                        true_graph: wrapir::ir::GraphName::new("true_graph_0"),
                        false_graph: wrapir::ir::GraphName::new("false_graph_0"),
                        operands: vec![operand.clone()],
                    }));
                }
            }
            _ => {
                if !live.is_empty() && g.u.ratio(1, 2)? {
                    let b = g.u.choose(&live)?.clone();
                    m.output(&b);
                } else {
                    let e = g.expr(1)?;
                    m.output_expr(e);
                }
            }
        }
    }
    let nout = g.u.int_in_range(0..=2)?;
    for _ in 0..nout {
        if live.is_empty() {
            break;
        }
        let b = g.u.choose(&live)?.clone();
        m.output(&b);
    }
    m.finish();
    Ok(p.finish())
}

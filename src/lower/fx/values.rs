//! Values: buffers, layouts, symbols and expressions as FX arguments.

use super::*;

impl<'p> GraphLowering<'p> {
    /// Operand `index` passed to subgraph `sub`: a symbol where the subgraph
    /// takes a symbol input (the validator checks the operand names a declared
    /// symbol; under `dynamic=True` Inductor passes sizes such as `s27`), else a
    /// buffer.
    pub(super) fn operand(&mut self, sub: &GraphName, index: usize, b: &BufName) -> Res<Arg> {
        let takes_symbol = self
            .program
            .subgraphs
            .get(sub)
            .and_then(|g| g.inputs.get(index))
            .is_some_and(GraphInput::is_integer);
        if takes_symbol {
            self.symbol(&Symbol::new(b.as_str()))
        } else {
            Ok(Arg::Node(self.buffer(b)?))
        }
    }

    pub(super) fn is_output(&self, b: &BufName) -> bool {
        self.ir
            .outputs
            .iter()
            .any(|o| matches!(o, GraphOutput::Buffer(x) if x == b))
    }

    /// The node of buffer `b`'s live value. The error is kept, not shown
    /// redundant: this lowering tracks live values by its own walk (frees,
    /// reuses, views, a subgraph's constants), which the validator's
    /// liveness rules are not shown to match everywhere.
    pub(super) fn buffer(&self, b: &BufName) -> Res<NodeId> {
        self.buffers
            .get(b)
            .copied()
            .ok_or_else(|| ErrorKind::UnknownBuffer(b.clone()))
    }

    /// The layout of `b` when it is a tensor: declared in the graph's table
    /// (which shadows the constants, as in validation), or a constant.
    pub(super) fn tensor_layout(&self, b: &BufName) -> Option<&'p Layout> {
        match self.decls.get(b.as_str()).copied() {
            Some(BufferKind::Tensor(l)) => Some(l),
            Some(BufferKind::Multi) => None,
            None => self.program.constants.get(b),
        }
    }

    /// The layout of tensor buffer `b`, which validation makes a tensor
    /// wherever a line asks: tensor inputs, allocations, reuses, views and
    /// communication buffers name tensors (`Need::Tensor`).
    pub(super) fn layout_of(&self, b: &BufName) -> &'p Layout {
        self.tensor_layout(b)
            .expect("validated: a line needing a layout names a tensor of the graph or a constant")
    }

    /// `layout` as a shared value: one `Arc` per distinct layout of the
    /// graph, however many nodes have it.
    pub(super) fn shared_layout(&mut self, layout: &'p Layout) -> Arc<Layout> {
        let same = self.layouts.entry(layout_key(layout)).or_default();
        if let Some(l) = same.iter().find(|l| ***l == *layout) {
            return l.clone();
        }
        let l = Arc::new(layout.clone());
        // A bounded bucket: many distinct layouts with one key (sizes that
        // differ only inside compound expressions) are not shared rather than
        // scanned.
        if same.len() < SHARED_LAYOUTS_PER_KEY {
            same.push(l.clone());
        }
        l
    }

    /// The sizes and strides of `layout` as node arguments, lowered once
    /// per layout handle and shared by every node that has it (the lists
    /// of [`GraphLowering::shared_layout`]'s handles are shared by every
    /// node of that layout). Lowering them again would give the same
    /// arguments: expressions are hash-consed and a symbol keeps the value
    /// it is first bound to.
    pub(super) fn layout_args(&mut self, layout: &Arc<Layout>) -> Res<(fx::Args, fx::Args)> {
        // The memo holds the handle, so no other layout takes its address
        // while the entry exists.
        let key = Arc::as_ptr(layout) as usize;
        if let Some((_, size, stride)) = self.layout_args.get(&key) {
            return Ok((size.clone(), stride.clone()));
        }
        let size: fx::Args = self.exprs_of(&layout.size)?.into();
        let stride: fx::Args = self.exprs_of(&layout.stride)?.into();
        self.layout_args
            .insert(key, (layout.clone(), size.clone(), stride.clone()));
        Ok((size, stride))
    }

    /// The value a line's result `b` has: its declared layout, or a
    /// multi-output value. Validation declares every line's result in its
    /// graph's table (a constant's name is no line's result).
    pub(super) fn val_of(&mut self, b: &BufName) -> Val {
        match self.decls.get(b.as_str()).copied() {
            Some(BufferKind::Tensor(l)) => Val::Tensor(self.shared_layout(l)),
            Some(BufferKind::Multi) => Val::Multi,
            None => unreachable!("validated: the result `{b}` of a line is declared by its graph"),
        }
    }

    pub(super) fn symbol(&mut self, s: &Symbol) -> Res<Arg> {
        if let Some(a) = self.symbols.get(s) {
            return Ok(a.clone());
        }
        // A symbol the subgraphs of an earlier line of this graph bind
        // (validation makes it visible after that line): FX returns values
        // from a subgraph only through its outputs.
        let before = self.line.unwrap_or(self.ir.lines.len());
        if let Some(at) = (0..before).find(|&i| {
            self.ir.lines[i].subgraphs().next().is_some() && self.graph_info.is_some_and(|gi| gi.binds(i).contains(s))
        }) {
            return Err(ErrorKind::Unsupported(format!(
                "symbol `{s}` is bound inside the subgraphs line {at} runs and used after it; the FX graph takes values out of a subgraph only through its outputs (return `{s}` from each)"
            )));
        }
        if !self.is_subgraph {
            // Kept, not proven redundant: this lowering binds symbols by its
            // own walk (input sizes it solves, key paths), which the
            // validator's binding rules are not shown to match everywhere.
            return Err(ErrorKind::UnboundSymbol(s.clone()));
        }
        // A subgraph reads a parent symbol: lift it into a trailing placeholder.
        let id = self
            .out
            .push(s.as_str(), Op::Placeholder(Placeholder::Symbol(s.clone())), None);
        self.out.bind_symbol(id, s.clone());
        self.lifted.push(s.clone());
        self.symbols.insert(s.clone(), Arg::Node(id));
        Ok(Arg::Node(id))
    }

    pub(super) fn exprs_of(&mut self, es: &[SymExpr]) -> Res<Vec<Arg>> {
        es.iter().map(|e| self.expr(e)).collect()
    }

    /// A symbolic expression as an argument: literals stay literals, symbols
    /// give their node, anything else becomes arithmetic nodes, hash-consed
    /// (the same expression gives the same node).
    pub(super) fn expr(&mut self, e: &SymExpr) -> Res<Arg> {
        let hash = match self.known_expr(e) {
            Known::Arg(a) => return a,
            Known::Miss(hash) => hash,
        };
        let a = self.expr_nodes(e)?;
        self.exprs.entry(hash).or_default().push((e.clone(), a.clone()));
        Ok(a)
    }

    /// [`GraphLowering::expr`] of an expression the caller gives up (a
    /// kernel's grid): kept as the table's key without a copy.
    pub(super) fn expr_owned(&mut self, e: SymExpr) -> Res<Arg> {
        let hash = match self.known_expr(&e) {
            Known::Arg(a) => return a,
            Known::Miss(hash) => hash,
        };
        let a = self.expr_nodes(&e)?;
        self.exprs.entry(hash).or_default().push((e, a.clone()));
        Ok(a)
    }

    /// An atom's argument, or a hash-consed expression's, or (not lowered
    /// yet) the expression's hash.
    fn known_expr(&mut self, e: &SymExpr) -> Known {
        match e {
            SymExpr::Int(v) => return Known::Arg(Ok(Arg::Int(*v))),
            SymExpr::Bool(b) => return Known::Arg(Ok(Arg::Bool(*b))),
            SymExpr::Sym(s) => return Known::Arg(self.symbol(s)),
            _ => {}
        }
        let hash = {
            let mut h = rustc_hash::FxHasher::default();
            e.hash(&mut h);
            h.finish()
        };
        let known = self.exprs.get(&hash).and_then(|same| same.iter().find(|(x, _)| x == e));
        match known {
            Some((_, a)) => Known::Arg(Ok(a.clone())),
            None => Known::Miss(hash),
        }
    }

    /// The nodes of a compound expression not lowered yet (its operands
    /// through [`GraphLowering::expr`]).
    fn expr_nodes(&mut self, e: &SymExpr) -> Res<Arg> {
        Ok(match e {
            SymExpr::Add(ts) => {
                let args = ts.iter().map(|t| self.expr(t)).collect::<Res<fx::SymArgs>>()?;
                self.sym(SymOp::Sum, args)?
            }
            SymExpr::Mul(fs) => self.chain(SymOp::Mul, fs)?,
            SymExpr::Min(xs) => self.chain(SymOp::Min, xs)?,
            SymExpr::Max(xs) => self.chain(SymOp::Max, xs)?,
            SymExpr::And(xs) => self.chain(SymOp::And, xs)?,
            SymExpr::Or(xs) => self.chain(SymOp::Or, xs)?,
            SymExpr::FloorDiv(a, b) | SymExpr::CleanDiv(a, b) => self.binary(SymOp::FloorDiv, a, b)?,
            SymExpr::Mod(a, b) => self.binary(SymOp::CMod, a, b)?,
            SymExpr::PythonMod(a, b) => self.binary(SymOp::PyMod, a, b)?,
            SymExpr::ModularIndexing(x, d, m) => {
                let q = if **d == SymExpr::Int(1) {
                    self.expr(x)?
                } else {
                    self.binary(SymOp::FloorDiv, x, d)?
                };
                let m = self.expr(m)?;
                self.sym(SymOp::PyMod, smallvec::smallvec![q, m])?
            }
            SymExpr::Pow(b, n) => {
                let b = self.expr(b)?;
                self.sym(SymOp::Pow, smallvec::smallvec![b, Arg::Int(*n as i64)])?
            }
            SymExpr::Cmp(op, a, b) => {
                let op = SymOp::from(*op);
                self.binary(op, a, b)?
            }
            SymExpr::Not(a) => {
                let a = self.expr(a)?;
                self.sym(SymOp::Not, smallvec::smallvec![a])?
            }
            SymExpr::Int(_) | SymExpr::Bool(_) | SymExpr::Sym(_) => return Err(ErrorKind::Unsupported("atom".into())),
        })
    }

    pub(super) fn binary(&mut self, op: SymOp, a: &SymExpr, b: &SymExpr) -> Res<Arg> {
        let a = self.expr(a)?;
        let b = self.expr(b)?;
        self.sym(op, smallvec::smallvec![a, b])
    }

    pub(super) fn chain(&mut self, op: SymOp, xs: &[SymExpr]) -> Res<Arg> {
        let mut it = xs.iter();
        let Some(first) = it.next() else {
            return Err(ErrorKind::Unsupported(format!("empty `{}`", op.node_name())));
        };
        let mut acc = self.expr(first)?;
        for x in it {
            let v = self.expr(x)?;
            acc = self.sym(op, smallvec::smallvec![acc, v])?;
        }
        Ok(acc)
    }

    /// `value // d` after asserting at run time that `d` (non-zero) divides
    /// `value`; `message` is the assert's.
    pub(super) fn exact_div(&mut self, value: Arg, d: i64, message: String) -> Res<Arg> {
        let m = self.sym(SymOp::PyMod, smallvec::smallvec![value.clone(), Arg::Int(d)])?;
        let ok = self.sym(SymOp::Cmp(CmpOp::Eq), smallvec::smallvec![m, Arg::Int(0)])?;
        self.out
            .push_static("_assert_scalar", Op::AssertScalar { cond: ok, message }, None);
        self.sym(SymOp::FloorDiv, smallvec::smallvec![value, Arg::Int(d)])
    }

    /// An arithmetic node, or its value when every operand is a literal.
    pub(super) fn sym(&mut self, op: SymOp, args: fx::SymArgs) -> Res<Arg> {
        // Literal operands only: no list is built unless every one is.
        let literal = |a: &Arg| match a {
            Arg::Int(v) => Some(fx::Scalar::Int(*v)),
            Arg::Bool(b) => Some(fx::Scalar::Bool(*b)),
            _ => None,
        };
        let literals: Option<smallvec::SmallVec<[fx::Scalar; 4]>> = match args.iter().all(|a| literal(a).is_some()) {
            true => args.iter().map(literal).collect(),
            false => None,
        };
        if let Some(l) = literals {
            return match op.eval(&l) {
                Ok(fx::Scalar::Int(v)) => Ok(Arg::Int(v)),
                Ok(fx::Scalar::Bool(b)) => Ok(Arg::Bool(b)),
                Err(e) => Err(ErrorKind::Fold {
                    expr: op.node_name().into(),
                    message: e.to_string(),
                }),
            };
        }
        Ok(Arg::Node(self.out.push_static(
            op.node_name(),
            Op::Sym { op, args },
            None,
        )))
    }

    pub(super) fn arg(&mut self, v: &ArgValue) -> Res<Arg> {
        Ok(match v {
            ArgValue::Buffer(b) => Arg::Node(self.buffer(b)?),
            ArgValue::Expr(e) => self.expr(e)?,
            ArgValue::Float(f) => Arg::Float(*f),
            ArgValue::Bool(b) => Arg::Bool(*b),
            ArgValue::None => Arg::None,
            ArgValue::Str(s) => Arg::Str(s.clone()),
            ArgValue::DType(d) => Arg::DType(*d),
            ArgValue::Device(d) => Arg::Device(*d),
            ArgValue::List(items) => Arg::List(items.iter().map(|i| self.arg(i)).collect::<Res<_>>()?),
        })
    }

    pub(super) fn call_args(
        &mut self,
        args: &[ArgValue],
        kwargs: &IndexMap<String, ArgValue>,
    ) -> Res<(Vec<Arg>, Kwargs)> {
        let a = args.iter().map(|x| self.arg(x)).collect::<Res<Vec<_>>>()?;
        let mut k = Kwargs::new();
        for (n, v) in kwargs {
            k.insert(n, self.arg(v)?);
        }
        Ok((a, k))
    }
}

/// What [`GraphLowering::known_expr`] finds.
enum Known {
    /// The argument (or the error of an unbound symbol).
    Arg(Res<Arg>),
    /// Not lowered yet: the expression's hash.
    Miss(u64),
}

/// The most layouts [`GraphLowering::shared_layout`] keeps per [`layout_key`].
const SHARED_LAYOUTS_PER_KEY: usize = 8;

/// A cheap hash of a layout for [`GraphLowering::shared_layout`]: dtype,
/// device, and each size, stride and offset to its first level (integers,
/// symbol names, the kind of anything compound). Equal layouts have equal
/// keys; layouts with one key are told apart by comparing them.
pub(super) fn layout_key(l: &Layout) -> u64 {
    fn shallow(e: &SymExpr, h: &mut rustc_hash::FxHasher) {
        std::mem::discriminant(e).hash(h);
        match e {
            SymExpr::Int(v) => v.hash(h),
            SymExpr::Sym(s) => s.as_str().hash(h),
            _ => {}
        }
    }
    let mut h = rustc_hash::FxHasher::default();
    l.dtype.hash(&mut h);
    l.device.hash(&mut h);
    l.size.len().hash(&mut h);
    for e in l.size.iter().chain(l.stride.iter()) {
        shallow(e, &mut h);
    }
    shallow(&l.offset, &mut h);
    l.alloc_numel.is_some().hash(&mut h);
    h.finish()
}

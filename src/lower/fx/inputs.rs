//! Graph inputs: placeholders, constants, symbols solved from input layouts, input asserts.

use super::*;
use rustc_hash::FxHashSet as HashSet;

impl<'p> GraphLowering<'p> {
    pub(super) fn inputs(&mut self) -> Res<()> {
        let mut tensor_inputs = Vec::new();
        let mut integer_inputs = Vec::new();
        for input in &self.ir.inputs {
            match input {
                GraphInput::Tensor { name } => {
                    let decl = self.layout_of(name);
                    let layout = decl.clone();
                    let shared = self.shared_layout(decl);
                    let val = Some(Val::Tensor(shared.clone()));
                    let id = self
                        .out
                        .push(name.as_str(), Op::Placeholder(Placeholder::Tensor(shared)), val);
                    self.buffers.insert(name.clone(), id);
                    tensor_inputs.push((name.clone(), id, layout));
                }
                GraphInput::Symbol { symbol, .. } => {
                    let id = self.out.push(
                        symbol.as_str(),
                        Op::Placeholder(Placeholder::Symbol(symbol.clone())),
                        None,
                    );
                    self.out.bind_symbol(id, symbol.clone());
                    self.symbols.insert(symbol.clone(), Arg::Node(id));
                }
                GraphInput::SymExpr { name, expr } => {
                    let id = self
                        .out
                        .push(name.as_str(), Op::Placeholder(Placeholder::Integer(expr.clone())), None);
                    integer_inputs.push((name.clone(), id, expr));
                }
            }
        }
        // Constants are `self.<name>` attributes, created up front like FX's
        // get_attr: every one in main, those a subgraph names in a subgraph
        // (a branch or loop body reads them as main does; its own buffers
        // shadow them).
        let (program, ir) = (self.program, self.ir);
        let named: Option<HashSet<&BufName>> = (self.is_subgraph && !program.constants.is_empty()).then(|| {
            let outputs = ir.outputs.iter().filter_map(|o| match o {
                GraphOutput::Buffer(b) => Some(b),
                _ => None,
            });
            ir.lines.iter().flat_map(Line::uses).chain(outputs).collect()
        });
        for (name, layout) in &program.constants {
            let here = match &named {
                None => true,
                Some(named) => named.contains(name) && !self.decls.contains_key(name.as_str()),
            };
            if !here {
                continue;
            }
            let val = Some(Val::Tensor(self.shared_layout(layout)));
            let id = self
                .out
                .push(name.as_str(), Op::Constant { name: name.to_string() }, val);
            self.buffers.insert(name.clone(), id);
        }
        // Bind symbols from input sizes, strides and offsets.
        for (name, id, layout) in &tensor_inputs {
            let entries = layout
                .size
                .iter()
                .enumerate()
                .map(|(d, e)| (TensorMethod::Size, d as i64, e))
                .chain(
                    layout
                        .stride
                        .iter()
                        .enumerate()
                        .map(|(d, e)| (TensorMethod::Stride, d as i64, e)),
                )
                .chain(std::iter::once((TensorMethod::StorageOffset, 0, &layout.offset)));
            for (method, dim, e) in entries {
                match self.unbound_symbols(e).as_slice() {
                    [] => {}
                    [s] => {
                        let read = self.read_dim(*id, method, dim);
                        self.bind_solved(name, e, s, read)?;
                    }
                    many => {
                        return Err(ErrorKind::Input {
                            input: name.clone(),
                            message: format!(
                                "Compound input {e} leaves these symbols undefined: [{}]",
                                many.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ")
                            ),
                        })
                    }
                }
            }
        }
        // Integer inputs that are expressions (`2*s0 + 1`) solve for the one
        // symbol the inputs above left unbound, as upstream's FX backend
        // does; in a subgraph, symbols they leave otherwise are the caller's
        // (lifted when read), in main validation has refused them.
        for (name, id, expr) in integer_inputs {
            let unbound = self.unbound_symbols(expr);
            let [s] = unbound.as_slice() else { continue };
            if crate::sym::solve::affine_in(expr, s).is_none() && self.is_subgraph {
                continue;
            }
            self.bind_solved(&name, expr, s, id)?;
        }
        if self.options.assert_inputs {
            // Inputs the program already checks with its own `assert_size_stride` line are not checked twice.
            let checked: Vec<&BufName> = self.ir.asserted_buffers().collect();
            for (name, id, layout) in &tensor_inputs {
                if checked.iter().any(|b| b.as_str() == name.as_str()) {
                    continue;
                }
                let size: fx::Args = self.exprs_of(&layout.size)?.into();
                let stride: fx::Args = self.exprs_of(&layout.stride)?.into();
                self.out.push(
                    "assert_size_stride",
                    Op::AssertSizeStride(fx::AssertSizeStride {
                        tensor: *id,
                        size,
                        stride,
                        dtype: None,
                        context: None,
                    }),
                    None,
                );
            }
        }
        Ok(())
    }

    /// The symbols of `e` no input has bound yet.
    fn unbound_symbols(&self, e: &SymExpr) -> Vec<Symbol> {
        e.free_symbols()
            .into_iter()
            .filter(|s| !self.symbols.contains_key(s))
            .collect()
    }

    /// Binds `s` by solving `e == value` (the value node of input `input`).
    fn bind_solved(&mut self, input: &BufName, e: &SymExpr, s: &Symbol, value: NodeId) -> Res<()> {
        let solved = self.solve(e, s, value).map_err(|message| ErrorKind::Input {
            input: input.clone(),
            message,
        })?;
        if let Arg::Node(n) = solved {
            self.out.try_rename(n, s.as_str());
            self.out.bind_symbol(n, s.clone());
        }
        self.symbols.insert(s.clone(), solved);
        Ok(())
    }

    pub(super) fn read_dim(&mut self, tensor: NodeId, method: TensorMethod, dim: i64) -> NodeId {
        match method {
            TensorMethod::Size => self.out.push_static("sym_size_int", Op::SymSize { tensor, dim }, None),
            TensorMethod::Stride => self
                .out
                .push_static("sym_stride_int", Op::SymStride { tensor, dim }, None),
            TensorMethod::StorageOffset => self
                .out
                .push("sym_storage_offset", Op::SymStorageOffset { tensor }, None),
        }
    }

    /// Solves `e == value` for `s`, the one unbound symbol of `e`, when `e` is
    /// `a*s + rest` with a non-zero integer `a` (the affine case Inductor's
    /// `try_solve` handles for sizes). Emits a divisibility check when `a != 1`.
    pub(super) fn solve(&mut self, e: &SymExpr, s: &Symbol, value: NodeId) -> Result<Arg, String> {
        let crate::sym::solve::Affine { coeff: a, rest } =
            crate::sym::solve::affine_in(e, s).ok_or_else(|| format!("Cannot solve input expression {e} for {s}"))?;
        if a == 1 && rest == SymExpr::Int(0) {
            return Ok(Arg::Node(value));
        }
        let rest = self.expr(&rest).map_err(|k| k.to_string())?;
        let neg = self
            .sym(SymOp::Mul, smallvec::smallvec![Arg::Int(-1), rest])
            .map_err(|k| k.to_string())?;
        let diff = self
            .sym(SymOp::Sum, smallvec::smallvec![Arg::Node(value), neg])
            .map_err(|k| k.to_string())?;
        if a == 1 {
            return Ok(diff);
        }
        self.exact_div(diff, a, format!("`{e}` is not divisible by {a} when solving for `{s}`"))
            .map_err(|k| k.to_string())
    }
}

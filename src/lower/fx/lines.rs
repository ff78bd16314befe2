//! One IR line as FX nodes: allocations, views, frees, extern calls, asserts, unbacked symbols and key paths.

use super::*;

impl<'p> GraphLowering<'p> {
    /// An extern call with a fresh result (the op's own outputs, if any,
    /// are among its keyword arguments).
    fn extern_alloc(&mut self, call: &crate::ir::ExternCall) -> Res<()> {
        let (args, kwargs) = self.call_args(&call.args, &call.kwargs)?;
        let (name, val) = match &call.result {
            Some(r) => (r.to_string(), Some(self.val_of(r))),
            None => (extern_node_name(&call.op), None),
        };
        let id = self.out.push(
            &name,
            Op::Extern {
                target: call.op.clone(),
                args,
                kwargs,
            },
            val,
        );
        if let Some(r) = &call.result {
            self.buffers.insert(r.clone(), id);
        }
        Ok(())
    }

    /// The extern op `line` calls when it runs ([`Line::runtime_op`] with
    /// this graph's declarations): what decides whether a reinterpret or a
    /// dynamic scalar is an op call, and which.
    fn runtime_op(&self, line: &Line) -> Option<crate::ir::LineOp> {
        line.runtime_op(|b| self.tensor_layout(b).map(|l| l.dtype))
    }

    pub(super) fn lower_line(&mut self, line: &Line) -> Res<()> {
        match line {
            Line::Allocate { buffer } => {
                let layout = self.layout_of(buffer);
                let id = self.allocate(buffer.as_str(), layout)?;
                self.buffers.insert(buffer.clone(), id);
            }
            // A free whose storage a later `reuse` takes over keeps the name alive until then.
            Line::FreeIfNotReused { is_reused: true, .. } => {}
            Line::FreeIfNotReused { buffer, .. } | Line::Free { buffer } => {
                // FX frees are liveness, not ops: forget the name.
                if !self.is_output(buffer) {
                    self.buffers.remove(buffer);
                }
            }
            Line::Reuse { old, new, delete_old } => {
                let old_id = self.buffer(old)?;
                let new_layout = self.layout_of(new);
                let same = match self.out.node(old_id).val.as_ref() {
                    Some(Val::Tensor(l)) => {
                        l.size == new_layout.size
                            && l.stride == new_layout.stride
                            && l.offset == new_layout.offset
                            && l.dtype == new_layout.dtype
                    }
                    _ => false,
                };
                let id = if same {
                    old_id
                } else {
                    let val = self.shared_layout(new_layout);
                    self.as_strided(new.as_str(), old_id, val)?
                };
                self.buffers.insert(new.clone(), id);
                if *delete_old && !same && !self.is_output(old) {
                    self.buffers.remove(old);
                }
            }
            Line::Reinterpret { base, alias } => {
                let base_id = self.buffer(base)?;
                let layout = self.layout_of(alias);
                let id = match self.runtime_op(line) {
                    // Another dtype: a view of the base's dtype, then `aten.view.dtype`.
                    Some(view_dtype) => {
                        let view_name = format!("{alias}_view");
                        let mut view_layout = layout.clone();
                        view_layout.dtype = self.layout_of(base).dtype;
                        let view = self.as_strided(&view_name, base_id, Arc::new(view_layout))?;
                        let val = Some(Val::Tensor(self.shared_layout(layout)));
                        self.out.push(
                            alias.as_str(),
                            Op::Extern {
                                target: view_dtype.op,
                                args: vec![Arg::Node(view), Arg::DType(layout.dtype)],
                                kwargs: Kwargs::new(),
                            },
                            val,
                        )
                    }
                    None => {
                        let val = self.shared_layout(layout);
                        self.as_strided(alias.as_str(), base_id, val)?
                    }
                };
                self.buffers.insert(alias.clone(), id);
            }
            // Validation checked the kernel table; a definition emits nothing.
            Line::KernelDefinition { .. } => {}
            Line::KernelCall(call) => self.kernel_call(call)?,
            Line::SymbolicCallArg { symbol, expr } => {
                let v = self.expr(expr)?;
                if let Arg::Node(n) = v {
                    self.out.bind_symbol(n, symbol.clone());
                }
                self.symbols.insert(symbol.clone(), v);
            }
            Line::ExternKernelAlloc(call) => self.extern_alloc(call)?,
            Line::ExternKernelMultiOut(m) => self.extern_alloc(&m.call_with_outs())?,
            Line::ExternKernelOut { call, out } => {
                let (args, mut kwargs) = self.call_args(&call.args, &call.kwargs)?;
                kwargs.insert("out", Arg::Node(self.buffer(out)?));
                self.out.push(
                    &extern_node_name(&call.op),
                    Op::Extern {
                        target: call.op.clone(),
                        args,
                        kwargs,
                    },
                    None,
                );
            }
            Line::MultiOutput(m) => {
                let (result, indices) = (&m.result, &m.indices);
                let src = self.buffer(&m.source)?;
                let val = Some(self.val_of(result));
                if indices.is_empty() {
                    // An alias; a multi-output op that really returns one tensor gets its layout.
                    if matches!(self.out.node(src).val, Some(Val::Multi) | None) {
                        self.out.set_val(src, val);
                    }
                    self.buffers.insert(result.clone(), src);
                } else {
                    let mut cur = src;
                    for (i, index) in indices.iter().enumerate() {
                        let last = i + 1 == indices.len();
                        let key = match index {
                            MultiIndex::List(k) | MultiIndex::Tuple(k) => IndexKey::Int(*k),
                            MultiIndex::Dict(k) => IndexKey::Str(k.clone()),
                        };
                        cur = self.getitem(cur, key, if last { Some(result.as_str()) } else { None });
                        if last {
                            self.out.set_val(cur, val.clone());
                        } else if self.out.node(cur).val.is_none() {
                            self.out.set_val(cur, Some(Val::Multi));
                        }
                    }
                    self.buffers.insert(result.clone(), cur);
                }
            }
            Line::IndexPutFallback(p) => {
                let t = self.buffer(&p.target)?;
                let mut idx = Vec::new();
                for i in &p.indices {
                    idx.push(match i {
                        Some(b) => Arg::Node(self.buffer(b)?),
                        None => Arg::None,
                    });
                }
                let v = self.buffer(&p.values)?;
                self.out.push(
                    "index_put_",
                    Op::Extern {
                        target: IndexPutFallback::op().into(),
                        args: vec![Arg::Node(t), Arg::List(idx), Arg::Node(v), Arg::Bool(p.accumulate)],
                        kwargs: Kwargs::new(),
                    },
                    None,
                );
            }
            Line::ScatterFallback(s) => {
                let t = self.buffer(&s.target)?;
                let index = self.buffer(&s.index)?;
                let src = self.arg(&s.src)?;
                let mut kwargs = Kwargs::new();
                if let Some(r) = &s.reduce {
                    kwargs.insert("reduce", Arg::Str(r.clone()));
                }
                if let Some(b) = s.include_self {
                    kwargs.insert("include_self", Arg::Bool(b));
                }
                self.out.push(
                    &extern_node_name(&s.op),
                    Op::Extern {
                        target: s.op.clone(),
                        args: vec![Arg::Node(t), Arg::Int(s.dim), Arg::Node(index), src],
                        kwargs,
                    },
                    None,
                );
            }
            Line::DynamicScalar(d) => {
                let op = self.runtime_op(line);
                self.dynamic_scalar(&d.symbol, &d.source, &d.keypath, op)?
            }
            Line::UnbackedSymbolDefs { source, bindings } => {
                if bindings.is_empty() {
                    return Ok(());
                }
                let root = self.buffer(source)?;
                for (symbol, path) in bindings {
                    if self.symbols.contains_key(symbol) {
                        continue;
                    }
                    let value = self.follow_path(root, path, symbol)?;
                    if let Arg::Node(n) = value {
                        self.out.try_rename(n, symbol.as_str());
                        self.out.bind_symbol(n, symbol.clone());
                    }
                    self.symbols.insert(symbol.clone(), value);
                }
            }
            Line::Conditional(c) => {
                let pred = match &c.predicate {
                    Predicate::Tensor(b) => Arg::Node(self.buffer(b)?),
                    Predicate::Expr(e) => self.expr(e)?,
                };
                let mut operands = Vec::new();
                for (i, b) in c.operands.iter().enumerate() {
                    operands.push(self.operand(&c.true_graph, i, b)?);
                }
                let [t, f] = self.subgraph_pair([&c.true_graph, &c.false_graph], &mut operands)?;
                let op = Op::Cond(fx::Cond {
                    pred,
                    true_graph: t,
                    false_graph: f,
                    operands,
                });
                self.push_subgraph_result(&c.result, op)?;
            }
            Line::Switch(sw) => {
                let selector = match &sw.selector {
                    Predicate::Tensor(b) => Arg::Node(self.buffer(b)?),
                    Predicate::Expr(e) => self.expr(e)?,
                };
                let mut operands = Vec::new();
                if let Some(first) = sw.branches.first() {
                    for (i, b) in sw.operands.iter().enumerate() {
                        operands.push(self.operand(first, i, b)?);
                    }
                }
                let names: Vec<&GraphName> = sw.branches.iter().collect();
                let branches = self.subgraph_list(&names, &mut operands)?;
                // As upstream's FX converter: a cond's switch (branches false,
                // true) is `higher_order.cond`, any other `higher_order.switch`.
                let op = match branches.as_slice() {
                    [f, t] if sw.cond => Op::Cond(fx::Cond {
                        pred: selector,
                        true_graph: *t,
                        false_graph: *f,
                        operands,
                    }),
                    _ => Op::Switch(fx::Switch {
                        index: selector,
                        branches,
                        operands,
                    }),
                };
                self.push_subgraph_result(&sw.result, op)?;
            }
            Line::WhileLoop(w) => {
                let mut carried = Vec::new();
                for (i, b) in w.carried.iter().enumerate() {
                    carried.push(self.operand(&w.body_graph, i, b)?);
                }
                let mut additional = Vec::new();
                for (i, b) in w.additional.iter().enumerate() {
                    additional.push(self.operand(&w.body_graph, w.carried.len() + i, b)?);
                }
                let [c, b] = self.subgraph_pair([&w.cond_graph, &w.body_graph], &mut additional)?;
                let op = Op::WhileLoop(fx::WhileLoop {
                    cond_graph: c,
                    body_graph: b,
                    carried,
                    additional,
                });
                self.push_subgraph_result(&w.result, op)?;
            }
            Line::EnterDeviceContext { .. } | Line::ExitDeviceContext | Line::Comment { .. } => {}
            Line::AssertSizeStride(a) => {
                self.assert_size_stride(&a.buffer, (&a.size, &a.stride), a.dtype, &a.context)?
            }
            Line::AssertSizeStrideGrouped(group) => {
                for a in &group.asserts {
                    self.assert_size_stride(&a.buffer, (&a.size, &a.stride), None, &group.context)?;
                }
            }
            Line::AssertDivByZero { divisor, context } => {
                let nonzero = SymExpr::cmp(crate::sym::CmpOp::Ne, divisor.clone(), SymExpr::Int(0));
                let (cond, message) = (self.expr(&nonzero)?, format!("Integer {context} by zero"));
                self.out
                    .push_static("_assert_scalar", Op::AssertScalar { cond, message }, None);
            }
            Line::AssertAlignment { buffer, alignment, .. } => {
                let (tensor, alignment) = (self.buffer(buffer)?, *alignment);
                self.out
                    .push_static("assert_alignment", Op::AssertAlignment { tensor, alignment }, None);
            }
            Line::AssertFinite { buffer } => {
                let tensor = self.buffer(buffer)?;
                self.out.push_static("assert_finite", Op::AssertFinite { tensor }, None);
            }
            // The graph orders every node; program order is a schedule the
            // program's stream events allow, so stream, memory-pool and
            // profile scopes leave no node (upstream's FX converter has none).
            Line::EnterScope(_) | Line::ExitScope { .. } => {}
            Line::RuntimeAssert { cond, message, .. } => {
                let (cond, message) = (self.expr(cond)?, message.clone());
                self.out
                    .push_static("_assert_scalar", Op::AssertScalar { cond, message }, None);
            }
            // Upstream's FX converter rejects symmetric-memory buffers; here they are an
            // explicit allocator call (the same one Inductor's Python wrapper uses), so
            // the graph stays complete and a backend without the allocator says so.
            Line::CommBufferAllocate {
                buffer,
                comm_kind,
                group,
            } => {
                let layout = self.layout_of(buffer).clone();
                let size = self.exprs_of(&layout.size)?;
                let stride = self.exprs_of(&layout.stride)?;
                let mut kwargs = Kwargs::new();
                kwargs.insert("dtype", Arg::DType(layout.dtype));
                kwargs.insert("device", Arg::Device(layout.device));
                kwargs.insert("group_name", Arg::Str(group.clone()));
                kwargs.insert("comm_kind", Arg::Str(comm_kind.clone()));
                let id = self.out.push(
                    buffer.as_str(),
                    Op::Extern {
                        target: crate::ir::op::COMM_ALLOCATOR.to_string(),
                        args: vec![Arg::List(size), Arg::List(stride)],
                        kwargs,
                    },
                    Some(Val::Tensor(Arc::new(layout))),
                );
                self.buffers.insert(buffer.clone(), id);
            }
            Line::CommBufferFree { buffer } => {
                if !self.is_output(buffer) {
                    self.buffers.remove(buffer);
                }
            }
        }
        Ok(())
    }

    pub(super) fn allocate(&mut self, name: &str, layout: &'p Layout) -> Res<NodeId> {
        let needs_view = layout.alloc_numel.is_some() || layout.offset != SymExpr::Int(0);
        if !needs_view {
            let shared = self.shared_layout(layout);
            let (size, stride) = self.layout_args(&shared)?;
            let val = Some(Val::Tensor(shared));
            return Ok(self.out.push(
                name,
                Op::EmptyStrided(fx::EmptyStrided {
                    size,
                    stride,
                    dtype: layout.dtype,
                    device: layout.device.kind,
                }),
                val,
            ));
        }
        // Padded or offset allocation: a flat storage, then the strided view.
        let numel = self.expr(&layout.storage_numel_expr())?;
        let flat = self.out.push_static(
            "empty_strided",
            Op::EmptyStrided(fx::EmptyStrided {
                size: Arc::new([numel]),
                stride: Arc::new([Arg::Int(1)]),
                dtype: layout.dtype,
                device: layout.device.kind,
            }),
            None,
        );
        let val = self.shared_layout(layout);
        self.as_strided(name, flat, val)
    }

    /// `torch.as_strided(base, ...)` with `layout`, which the node keeps as its value.
    pub(super) fn as_strided(&mut self, name: &str, base: NodeId, layout: Arc<Layout>) -> Res<NodeId> {
        let (size, stride) = self.layout_args(&layout)?;
        let offset = self.expr(&layout.offset)?;
        Ok(self.out.push(
            name,
            Op::AsStrided(fx::AsStrided {
                base,
                size,
                stride,
                offset,
            }),
            Some(Val::Tensor(layout)),
        ))
    }

    pub(super) fn getitem(&mut self, source: NodeId, key: IndexKey, name: Option<&str>) -> NodeId {
        if let Some(id) = self.getitems.get(&(source, key.clone())) {
            if let Some(n) = name {
                self.out.try_rename(*id, n);
            }
            return *id;
        }
        let index = match &key {
            IndexKey::Int(i) => Arg::Int(*i),
            IndexKey::Str(s) => Arg::Str(s.clone()),
        };
        let id = self
            .out
            .push(name.unwrap_or("getitem"), Op::GetItem { source, index }, None);
        self.getitems.insert((source, key), id);
        id
    }

    /// `symbol = source.item()` along `keypath`; `op`: the line's
    /// [`Line::runtime_op`] (`aten.where.Scalar` for `.to_int()`).
    pub(super) fn dynamic_scalar(
        &mut self,
        symbol: &Symbol,
        source: &BufName,
        keypath: &[KeyEntry],
        op: Option<crate::ir::LineOp>,
    ) -> Res<()> {
        let t = self.buffer(source)?;
        let value = match (keypath, op) {
            ([], _) => {
                let id = self.out.push(
                    symbol.as_str(),
                    Op::Item {
                        tensor: t,
                        symbol: Some(symbol.clone()),
                        multiplier: 1,
                    },
                    None,
                );
                Arg::Node(id)
            }
            ([KeyEntry::ConvertInt], Some(to_int)) => {
                let as_int = self.out.push(
                    "where",
                    Op::Extern {
                        target: to_int.op,
                        args: vec![Arg::Node(t), Arg::Int(1), Arg::Int(0)],
                        kwargs: Kwargs::new(),
                    },
                    self.int64_like(t),
                );
                Arg::Node(self.out.push(
                    symbol.as_str(),
                    Op::Item {
                        tensor: as_int,
                        symbol: Some(symbol.clone()),
                        multiplier: 1,
                    },
                    None,
                ))
            }
            ([KeyEntry::DivideBy(d)], _) => {
                let raw = self.out.push(
                    &format!("{symbol}_undivided"),
                    Op::Item {
                        tensor: t,
                        symbol: Some(symbol.clone()),
                        multiplier: *d,
                    },
                    None,
                );
                let q = self.key_path_div(Arg::Node(raw), *d, symbol)?;
                if let Arg::Node(n) = q {
                    self.out.try_rename(n, symbol.as_str());
                }
                q
            }
            (other, _) => {
                return Err(ErrorKind::KeyPath {
                    symbol: symbol.clone(),
                    message: format!(
                        "`item()` takes an empty key path, `.to_int()` or `//d`, not `{}`",
                        crate::ir::KeyPathText(other)
                    ),
                })
            }
        };
        if let Arg::Node(n) = value {
            self.out.bind_symbol(n, symbol.clone());
        }
        self.symbols.insert(symbol.clone(), value);
        Ok(())
    }

    /// A key path's `//d` step binding `symbol`: `value // d` after checking
    /// at run time that `d` divides `value`.
    pub(super) fn key_path_div(&mut self, value: Arg, d: i64, symbol: &Symbol) -> Res<Arg> {
        if d == 0 {
            return Err(ErrorKind::KeyPath {
                symbol: symbol.clone(),
                message: "division by 0".into(),
            });
        }
        self.exact_div(value, d, format!("{symbol}: value is not a multiple of {d}"))
    }

    pub(super) fn int64_like(&self, t: NodeId) -> Option<Val> {
        match &self.out.node(t).val {
            Some(Val::Tensor(l)) => Some(Val::Tensor(Arc::new(Layout::contiguous(
                crate::ir::DType::Int64,
                l.device,
                l.size.iter().cloned(),
            )))),
            _ => None,
        }
    }

    /// Follows a key path from an op's output. Each step consumes exactly the
    /// entries it uses: a `.size()`/`.stride()` with its index (two), a lone
    /// `.storage_offset()` (one), an index, a division, a conversion or an
    /// inner-tensor attribute (one each).
    pub(super) fn follow_path(&mut self, root: NodeId, path: &[KeyEntry], symbol: &Symbol) -> Res<Arg> {
        let err = |message: String| ErrorKind::KeyPath {
            symbol: symbol.clone(),
            message,
        };
        let mut cur = Arg::Node(root);
        let mut i = 0;
        while i < path.len() {
            let node = |cur: &Arg| match cur {
                Arg::Node(n) => Ok(*n),
                _ => Err(err(format!(
                    "step {} `{}` applies to an integer",
                    i,
                    crate::ir::KeyPathText(&path[i..=i])
                ))),
            };
            match &path[i] {
                KeyEntry::CallMethod(m @ (TensorMethod::Size | TensorMethod::Stride)) => {
                    let dim = match path.get(i + 1) {
                        Some(KeyEntry::Index(d)) => *d,
                        _ => {
                            return Err(err(format!(
                                "`.{}()` must be followed by a dimension index",
                                m.as_str()
                            )))
                        }
                    };
                    let t = node(&cur)?;
                    cur = Arg::Node(self.read_dim(t, *m, dim));
                    i += 2;
                }
                KeyEntry::CallMethod(TensorMethod::StorageOffset) => {
                    let t = node(&cur)?;
                    cur = Arg::Node(self.read_dim(t, TensorMethod::StorageOffset, 0));
                    i += 1;
                }
                KeyEntry::Index(k) => {
                    let s = node(&cur)?;
                    cur = Arg::Node(self.getitem(s, IndexKey::Int(*k), None));
                    i += 1;
                }
                KeyEntry::DivideBy(d) => {
                    cur = self.key_path_div(cur, *d, symbol)?;
                    i += 1;
                }
                KeyEntry::ConvertInt => {
                    cur = self.sym(SymOp::Ite, smallvec::smallvec![cur, Arg::Int(1), Arg::Int(0)])?;
                    i += 1;
                }
                KeyEntry::InnerTensor(attr) => {
                    let s = node(&cur)?;
                    cur = Arg::Node(self.out.push(
                        attr,
                        Op::InnerTensor {
                            source: s,
                            attr: attr.clone(),
                        },
                        None,
                    ));
                    i += 1;
                }
            }
        }
        Ok(cur)
    }

    /// `assert_size_stride(t, size, stride, context)`, with `dtype=` when
    /// the check includes the dtype.
    fn assert_size_stride(
        &mut self,
        buffer: &BufName,
        (size, stride): (&[SymExpr], &[SymExpr]),
        dtype: Option<crate::ir::DType>,
        context: &Option<String>,
    ) -> Res<()> {
        let tensor = self.buffer(buffer)?;
        let size: fx::Args = self.exprs_of(size)?.into();
        let stride: fx::Args = self.exprs_of(stride)?.into();
        self.out.push_static(
            "assert_size_stride",
            Op::AssertSizeStride(fx::AssertSizeStride {
                tensor,
                size,
                stride,
                dtype,
                context: context.clone(),
            }),
            None,
        );
        Ok(())
    }
}

pub(super) fn extern_node_name(op: &str) -> String {
    let s = op.strip_prefix("torch.ops.").unwrap_or(op);
    let s = s.strip_prefix("extern_kernels.").unwrap_or(s);
    let s = s.strip_prefix("aten.").unwrap_or(s);
    s.split('.')
        .next()
        .filter(|s| !s.is_empty())
        .unwrap_or("extern")
        .to_string()
}

//! Running a [`Plan`] over a [`Backend`].

use super::*;

impl Plan {
    /// Number of steps.
    pub fn len(&self) -> usize {
        self.steps.len()
    }

    /// `true` when the plan has no steps.
    pub fn is_empty(&self) -> bool {
        self.steps.is_empty()
    }

    /// Input names, in order.
    pub fn input_names(&self) -> Vec<&str> {
        self.inputs.iter().map(|(n, _)| n.as_str()).collect()
    }

    /// Runs the plan. `inputs` are in placeholder order (tensors for tensor
    /// inputs, `Value::Int` for symbol inputs); `constants` by name.
    pub fn run<B: Backend>(
        &self,
        backend: &mut B,
        inputs: Vec<Value<B::Tensor>>,
        constants: &IndexMap<String, B::Tensor>,
    ) -> Result<RunOutput<B::Tensor>, ExecError> {
        let mut env = self.bound.clone();
        let outputs = self.exec(backend, inputs, constants, &Bindings::new(), &mut env, true)?;
        Ok(RunOutput { outputs, symbols: env })
    }

    /// Runs the steps. `outer`: the symbols bound outside this (sub)plan;
    /// `env`: a copy of [`Plan::bound`], whose values the binds write;
    /// `top`: this is the top-level graph, whose steps the backend is told
    /// of ([`Backend::begin_node`]).
    fn exec<B: Backend>(
        &self,
        backend: &mut B,
        inputs: Vec<Value<B::Tensor>>,
        constants: &IndexMap<String, B::Tensor>,
        outer: &Bindings,
        env: &mut Bindings,
        top: bool,
    ) -> Result<Vec<Value<B::Tensor>>, ExecError> {
        if inputs.len() != self.inputs.len() {
            return Err(ExecError::Input(format!(
                "graph `{}` takes {} inputs ({}), got {}",
                self.graph,
                self.inputs.len(),
                self.input_names().join(", "),
                inputs.len()
            )));
        }
        let mut inputs: Vec<Option<Value<B::Tensor>>> = inputs.into_iter().map(Some).collect();
        let mut slots: Vec<Option<Value<B::Tensor>>> = vec![None; self.slots + self.lits.len()];
        for (slot, lit) in slots.iter_mut().skip(self.slots).zip(&self.lits) {
            *slot = Some(lit_value(lit));
        }
        // The layout `empty_strided` steps fill in (its vectors are reused:
        // no allocation per step).
        let mut layout = TensorSpec::contiguous(DType::Float32, Device::cpu(), &[]);
        // The declared layout of an extern call's result, evaluated (reused
        // likewise).
        let mut exp_buf = ExpectedLayout {
            dtype: DType::Float32,
            device: Device::cpu(),
            size: Vec::new(),
            stride: Vec::new(),
            offset: None,
        };
        for (step, info) in self.steps.iter().zip(&self.infos) {
            if top {
                backend.begin_node(info.position as usize);
            }
            let value = self
                .step(
                    step,
                    info,
                    backend,
                    &mut inputs,
                    constants,
                    &slots,
                    &mut layout,
                    &mut exp_buf,
                    outer,
                    env,
                )
                .map_err(|e| ExecError::AtNode {
                    graph: self.graph.clone(),
                    node: info.node.clone(),
                    source: Box::new(e),
                })?;
            if !step.binds.is_empty() {
                let v = &value;
                let binds = self.binds.get(step.binds.start as usize..step.binds.end as usize);
                for bind in binds.unwrap_or_default() {
                    let x = match v.as_int() {
                        Some(x) if bind.range.is_none_or(|r| r.contains(x)) => x,
                        _ => return Err(self.bind_error(info, bind, v)),
                    };
                    match env.get_index_mut(bind.id as usize) {
                        Some((_, slot)) => *slot = x,
                        // `bound` holds every symbol of `binds`: only a
                        // malformed plan gets here.
                        None => {
                            env.insert(bind.symbol.clone(), x);
                        }
                    }
                }
            }
            if let Some(o) = step.out {
                let v = value;
                if let Some(slot) = slots.get_mut(o) {
                    // The slot is empty in a well-formed plan (its previous
                    // value was freed): test inline, drop only when it is not.
                    if let Some(old) = slot.replace(v) {
                        drop(old);
                    }
                }
            } else {
                drop_value(value);
            }
            for f in self
                .frees
                .get(step.frees.start as usize..step.frees.end as usize)
                .unwrap_or_default()
            {
                match slots.get_mut(*f).and_then(Option::take) {
                    Some(Value::Tensor(t)) => backend.free(t),
                    Some(v @ (Value::List(_) | Value::Dict(_))) => release(backend, v),
                    Some(v) => drop_value(v),
                    None => {}
                }
            }
        }
        self.outputs.iter().map(|o| read(o, &slots)).collect()
    }

    // The run loop's state is passed piecewise (not bundled in a struct) so the
    // borrow of `slots` stays shared while `inputs` is taken from.
    // Inlined into the run loop, its one caller: no call, and no result moved
    // through memory, per step.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn step<B: Backend>(
        &self,
        step: &Step,
        info: &StepInfo,
        backend: &mut B,
        inputs: &mut [Option<Value<B::Tensor>>],
        constants: &IndexMap<String, B::Tensor>,
        slots: &[Option<Value<B::Tensor>>],
        layout: &mut TensorSpec,
        exp_buf: &mut ExpectedLayout,
        outer: &Bindings,
        env: &mut Bindings,
    ) -> Result<Value<B::Tensor>, ExecError> {
        let rd = |o: &Operand| read(o, slots);
        let int = |o: &Operand| read_int(o, slots);
        let small_ints = |xs: &[Operand]| xs.iter().map(int).collect::<Result<Ints, _>>();
        let tensor = |s: usize| -> Result<&B::Tensor, ExecError> {
            match slot(s, slots)? {
                Value::Tensor(t) => Ok(t),
                other => Err(ExecError::Type(format!("expected a tensor, got {}", other.kind()))),
            }
        };
        Ok(match &step.kind {
            StepKind::Input(i) => {
                let v = inputs
                    .get_mut(*i)
                    .and_then(Option::take)
                    .ok_or_else(|| ExecError::Input("input used twice".into()))?;
                if let (Some(Val::Tensor(layout)), Value::Tensor(t)) = (&info.val, &v) {
                    let spec = backend.spec(t);
                    if spec.dtype != layout.dtype || spec.size.len() != layout.size.len() {
                        return Err(ExecError::Input(format!(
                            "input `{}` is {}{:?}, the graph declares {layout}",
                            info.node, spec.dtype, spec.size
                        )));
                    }
                }
                v
            }
            StepKind::Constant(name) => Value::Tensor(
                constants
                    .get(name)
                    .cloned()
                    .ok_or_else(|| ExecError::Input(format!("constant `{name}` was not supplied")))?,
            ),
            StepKind::EmptyStrided {
                size,
                stride,
                dtype,
                device,
            } => {
                layout.dtype = *dtype;
                layout.device = Device {
                    kind: *device,
                    index: None,
                };
                layout.offset = 0;
                layout.size.clear();
                for o in self.list(size) {
                    layout.size.push(int(o)?);
                }
                layout.stride.clear();
                for o in self.list(stride) {
                    layout.stride.push(int(o)?);
                }
                Value::Tensor(backend.allocate(layout)?)
            }
            StepKind::AsStrided(a) => {
                let b = tensor(a.base)?;
                Value::Tensor(backend.view(b, &small_ints(&a.size)?, &small_ints(&a.stride)?, int(&a.offset)?)?)
            }
            StepKind::Triton { packed: Some(p), t } => {
                let def = self.kernel_at(p, &t.kernel)?;
                let g = match self.operands.get(p.grid as usize..p.grid as usize + 3) {
                    Some([a, b, c]) => [int(a)?, int(b)?, int(c)?],
                    _ => return Err(unpacked()),
                };
                self.launch_packed(p, def, Some(g), backend, slots)?;
                Value::None
            }
            StepKind::KernelCall { packed: Some(p), c } => {
                let def = self.kernel_at(p, &c.kernel)?;
                self.launch_packed(p, def, None, backend, slots)?;
                Value::None
            }
            StepKind::Triton { t, packed: None } => {
                let TritonStep { kernel, grid, kwargs } = &**t;
                let def = self.kernel(kernel)?;
                let g = [int(&grid[0])?, int(&grid[1])?, int(&grid[2])?];
                with_call(&[], kwargs, slots, |args, kwargs| {
                    backend.launch(KernelLaunch {
                        kernel: def,
                        grid: Some(g),
                        args,
                        kwargs,
                    })
                })?;
                Value::None
            }
            StepKind::KernelCall { c, packed: None } => {
                let CallStep { kernel, args, kwargs } = &**c;
                let def = self.kernel(kernel)?;
                with_call(args, kwargs, slots, |args, kwargs| {
                    backend.launch(KernelLaunch {
                        kernel: def,
                        grid: None,
                        args,
                        kwargs,
                    })
                })?;
                Value::None
            }
            StepKind::Extern(c) => with_call(&c.args, &c.kwargs, slots, |args, kwargs| {
                let expected = match &c.layout {
                    Some(layout) => {
                        let envs = Envs {
                            outer,
                            env,
                            bound: info.bound_before,
                        };
                        self.eval_layout_into(layout, &c.syms, backend, &envs, exp_buf)?;
                        Some(&*exp_buf)
                    }
                    _ => None,
                };
                let result = backend.call_extern(ExternCall {
                    op: &c.target,
                    family: c.family,
                    args,
                    kwargs,
                    expected,
                })?;
                if let (Some(exp), Value::Tensor(t)) = (expected, &result) {
                    check_layout(backend.spec(t), exp)?;
                }
                Ok(result)
            })?,
            StepKind::SymSize { tensor: t, dim } => Value::Int(dim_of(&backend.spec(tensor(*t)?).size, *dim, "size")?),
            StepKind::SymStride { tensor: t, dim } => {
                Value::Int(dim_of(&backend.spec(tensor(*t)?).stride, *dim, "stride")?)
            }
            StepKind::SymStorageOffset { tensor: t } => Value::Int(backend.spec(tensor(*t)?).offset),
            StepKind::GetItem { source, index } => {
                let src = slot(*source, slots)?;
                let idx = read_ref(index, slots)?;
                match (src, idx.as_ref()) {
                    (Value::List(items), Value::Int(i)) => {
                        let n = items.len() as i64;
                        let k = if *i < 0 { i + n } else { *i };
                        items
                            .get(usize::try_from(k).unwrap_or(usize::MAX))
                            .cloned()
                            .ok_or_else(|| ExecError::Type(format!("index {i} is out of range for {n} outputs")))?
                    }
                    (Value::Dict(items), Value::Str(k)) => items
                        .get(k)
                        .cloned()
                        .ok_or_else(|| ExecError::Type(format!("no output named '{k}'")))?,
                    (Value::Opaque, _) => match &info.val {
                        Some(Val::Multi) => Value::Opaque,
                        Some(Val::Tensor(declared)) => {
                            // Evaluated into the reused buffers: no allocation
                            // here.
                            let envs = Envs {
                                outer,
                                env,
                                bound: info.bound_before,
                            };
                            self.eval_layout_into(declared, &info.syms, backend, &envs, exp_buf)?;
                            let unknown =
                                || ExecError::NoValue("element layout depends on a symbol with no hint".into());
                            layout.dtype = exp_buf.dtype;
                            layout.device = exp_buf.device;
                            layout.size.clear();
                            for d in &exp_buf.size {
                                layout.size.push(d.ok_or_else(unknown)?);
                            }
                            layout.stride.clear();
                            for d in &exp_buf.stride {
                                layout.stride.push(d.ok_or_else(unknown)?);
                            }
                            layout.offset = exp_buf.offset.ok_or_else(unknown)?;
                            Value::Tensor(backend.allocate(layout)?)
                        }
                        _ => {
                            return Err(ExecError::NoValue(
                                "element of a multi-output value without a declared layout".into(),
                            ))
                        }
                    },
                    (s, i) => {
                        return Err(ExecError::Type(format!(
                            "cannot index a {} with a {}",
                            s.kind(),
                            i.kind()
                        )))
                    }
                }
            }
            StepKind::InnerTensor { source, attr } => match slot(*source, slots)? {
                Value::Dict(items) => items
                    .get(attr)
                    .cloned()
                    .ok_or_else(|| ExecError::Type(format!("value has no inner tensor `{attr}`")))?,
                other => {
                    return Err(ExecError::Unsupported(format!(
                        "inner tensor `.{attr}` of a {}: the {} backend has no tensor subclasses",
                        other.kind(),
                        backend.name()
                    )))
                }
            },
            StepKind::Item {
                tensor: t,
                symbol,
                decl,
                multiplier,
            } => {
                let t = tensor(*t)?;
                let decl = match decl {
                    Some(i) => self.symbols.get_index(*i as usize).map(|(_, d)| d),
                    None => None,
                };
                let req = ScalarRequest {
                    symbol: symbol.as_ref(),
                    decl,
                    multiplier: *multiplier,
                };
                match backend.read_scalar(t, &req)? {
                    ScalarValue::Int(v) => Value::Int(v),
                    ScalarValue::Bool(b) => Value::Bool(b),
                    ScalarValue::Float(f) => Value::Float(f),
                }
            }
            StepKind::Sym { op, args } => {
                // Two integers (most steps): no operand list, no call.
                if let [a, b] = args.as_slice() {
                    if let (Some(x), Some(y)) = (plain_int(a, slots), plain_int(b, slots)) {
                        match op.eval_ints(x, y) {
                            Some(Scalar::Int(v)) => return Ok(Value::Int(v)),
                            Some(Scalar::Bool(v)) => return Ok(Value::Bool(v)),
                            None => {}
                        }
                    }
                }
                let mut vals: SmallVec<[Scalar; 4]> = SmallVec::new();
                for a in args {
                    vals.push(read_scalar(a, slots, *op)?);
                }
                match op.eval(&vals).map_err(|e| ExecError::Type(e.to_string()))? {
                    Scalar::Int(v) => Value::Int(v),
                    Scalar::Bool(b) => Value::Bool(b),
                }
            }
            StepKind::AssertScalar { cond, message } => {
                if !truthy(read_ref(cond, slots)?.as_ref())? {
                    return Err(ExecError::Assert(message.to_string()));
                }
                Value::None
            }
            StepKind::AssertSizeStride {
                tensor: t,
                size,
                stride,
                dtype,
                context,
            } => {
                if backend.checks_tensor_asserts() {
                    let spec = backend.spec(tensor(*t)?);
                    let (size, stride) = (small_ints(self.list(size))?, small_ints(self.list(stride))?);
                    check_sizes_strides(
                        spec,
                        dtype.unwrap_or(spec.dtype),
                        size.iter().copied().map(Some),
                        stride.iter().copied().map(Some),
                    )
                    .map_err(|e| match context {
                        Some(c) => ExecError::Assert(format!("{e} ({c})")),
                        None => e,
                    })?;
                }
                Value::None
            }
            StepKind::AssertAlignment { tensor: t, alignment } => {
                if backend.checks_tensor_asserts() {
                    backend.check_alignment(tensor(*t)?, *alignment)?;
                }
                Value::None
            }
            StepKind::AssertFinite { tensor: t, name } => {
                if backend.checks_tensor_asserts() {
                    let t = tensor(*t)?.clone();
                    backend.check_finite(&t).map_err(|e| match e {
                        ExecError::Assert(m) => ExecError::Assert(format!("`{name}` {m}")),
                        other => other,
                    })?;
                }
                Value::None
            }
            StepKind::Branch(b) => {
                let BranchStep {
                    selector,
                    branches,
                    operands,
                    truthy: by_truth,
                } = &**b;
                let request = ScalarRequest {
                    symbol: None,
                    decl: None,
                    multiplier: 1,
                };
                // A cond picks by truth (`if pred:`), a switch by index.
                let k = match (rd(selector)?, by_truth) {
                    (Value::Tensor(t), true) => i64::from(scalar_truthy(backend.read_scalar(&t, &request)?)),
                    (Value::Tensor(t), false) => scalar_index(backend.read_scalar(&t, &request)?)?,
                    (other, true) => i64::from(truthy(&other)?),
                    (other, false) => value_index(&other)?,
                };
                let graph = branches
                    .get(crate::ir::switch_branch(branches.len(), k))
                    .ok_or_else(|| ExecError::Type("a switch without branches".to_string()))?;
                let args = operands.iter().map(rd).collect::<Result<Vec<_>, _>>()?;
                let sub = self.subplan(graph)?;
                let sub_outer = Envs {
                    outer,
                    env,
                    bound: info.bound_before,
                }
                .merged();
                let mut sub_env = sub.bound.clone();
                Value::List(sub.exec(backend, args, constants, &sub_outer, &mut sub_env, false)?)
            }
            StepKind::While(w) => {
                let WhileStep {
                    cond_graph,
                    body_graph,
                    carried,
                    additional,
                } = &**w;
                let mut state = carried.iter().map(rd).collect::<Result<Vec<_>, _>>()?;
                let extra = additional.iter().map(rd).collect::<Result<Vec<_>, _>>()?;
                let cond = self.subplan(cond_graph)?;
                let body = self.subplan(body_graph)?;
                let fuel = backend.limits().loop_fuel;
                let sub_outer = Envs {
                    outer,
                    env,
                    bound: info.bound_before,
                }
                .merged();
                let mut iterations: u64 = 0;
                loop {
                    if iterations >= fuel {
                        crate::Limits::check(
                            crate::Limit::LoopFuel,
                            iterations + 1,
                            fuel,
                            format!("while_loop `{cond_graph}`/`{body_graph}` iterations"),
                        )?;
                    }
                    iterations += 1;
                    let args: Vec<_> = state.iter().cloned().chain(extra.iter().cloned()).collect();
                    let mut sub_env = cond.bound.clone();
                    let c = cond.exec(backend, args.clone(), constants, &sub_outer, &mut sub_env, false)?;
                    let go = match c.first() {
                        Some(Value::Tensor(t)) => scalar_truthy(backend.read_scalar(
                            t,
                            &ScalarRequest {
                                symbol: None,
                                decl: None,
                                multiplier: 1,
                            },
                        )?),
                        Some(other) => truthy(other)?,
                        None => {
                            return Err(ExecError::Type(format!(
                                "loop condition `{cond_graph}` returned nothing"
                            )))
                        }
                    };
                    if !go {
                        break;
                    }
                    let mut body_env = body.bound.clone();
                    let next = body.exec(backend, args, constants, &sub_outer, &mut body_env, false)?;
                    if next.len() != state.len() {
                        return Err(ExecError::Type(format!(
                            "loop body `{body_graph}` returned {} values for {} carried",
                            next.len(),
                            state.len()
                        )));
                    }
                    state = next;
                }
                Value::List(state)
            }
        })
    }

    /// The kernel of a packed launch.
    #[inline(always)]
    fn kernel_at(&self, p: &PackedLaunch, kernel: &KernelRef) -> Result<&KernelDef, ExecError> {
        match self.kernels.get_index(p.kernel as usize) {
            Some((_, def)) => Ok(def),
            None => self.kernel(kernel),
        }
    }

    /// Launches a packed launch, its arguments borrowed from the slots.
    #[inline(always)]
    fn launch_packed<B: Backend>(
        &self,
        p: &PackedLaunch,
        kernel: &KernelDef,
        grid: Option<[i64; 3]>,
        backend: &mut B,
        slots: &[Option<Value<B::Tensor>>],
    ) -> Result<(), ExecError> {
        let range = p.args as usize..p.args_end as usize;
        let (Some(index), Some(names)) = (self.call_slots.get(range.clone()), self.call_names.get(range)) else {
            return Err(unpacked());
        };
        for s in index {
            slot(*s, slots)?;
        }
        let split = (p.positional as usize).min(index.len());
        let (pos, kw) = index.split_at(split);
        backend.launch(KernelLaunch {
            kernel,
            grid,
            args: ArgList::slots(pos, slots),
            kwargs: Kwargs::slots(names.get(split..).unwrap_or_default(), kw, slots),
        })
    }

    /// The operands of a list (packed ones from [`Plan::operands`]).
    #[inline(always)]
    fn list<'a>(&'a self, list: &'a OperandList) -> &'a [Operand] {
        match list {
            OperandList::Packed(r) => self.operands.get(r.start as usize..r.end as usize).unwrap_or_default(),
            OperandList::Owned(xs) => xs,
        }
    }

    /// Why `value` cannot bind `bind` (not an integer, or out of the
    /// symbol's range).
    #[cold]
    #[inline(never)]
    fn bind_error<T>(&self, info: &StepInfo, bind: &Bind, value: &Value<T>) -> ExecError {
        let source = match (value.as_int(), bind.range) {
            (None, _) => ExecError::Type(format!("symbol `{}` bound to a {}", bind.symbol, value.kind())),
            (Some(x), Some(range)) => ExecError::OutOfRange {
                symbol: bind.symbol.clone(),
                value: x,
                range,
            },
            (Some(x), None) => ExecError::Input(format!("symbol `{}` cannot be bound to {x}", bind.symbol)),
        };
        ExecError::AtNode {
            graph: self.graph.clone(),
            node: info.node.clone(),
            source: Box::new(source),
        }
    }

    fn kernel(&self, kernel: &KernelRef) -> Result<&KernelDef, ExecError> {
        kernel
            .index
            .and_then(|i| self.kernels.get_index(i))
            .map(|(_, def)| def)
            .ok_or_else(|| ExecError::Input(format!("kernel `{}` is not defined", kernel.name)))
    }

    fn subplan(&self, name: &str) -> Result<&Plan, ExecError> {
        self.subplans
            .get(name)
            .ok_or_else(|| ExecError::Input(format!("subgraph `{name}` is not defined")))
    }

    /// The declared layout of a result, evaluated into `out` (its vectors
    /// reused) with the bound symbols, and backend hints for unbound ones;
    /// still-unknown entries are `None`.
    fn eval_layout_into<B: Backend>(
        &self,
        layout: &Layout,
        syms: &[LayoutSym],
        backend: &mut B,
        envs: &Envs<'_>,
        out: &mut ExpectedLayout,
    ) -> Result<(), ExecError> {
        let symbols = &self.symbols;
        let mut lookup = |s: &Symbol| {
            // Resolved at compile time (a symbol missing from `syms` only in
            // a malformed plan: then looked up by name).
            let (id, decl) = match syms.iter().find(|l| l.symbol == *s) {
                Some(l) => (
                    l.id.map(|i| i as usize),
                    l.decl.and_then(|i| symbols.get_index(i as usize)).map(|(_, d)| d),
                ),
                None => (
                    envs.env.get_index_of(s).filter(|i| *i < envs.bound as usize),
                    symbols.get(s),
                ),
            };
            id.and_then(|i| envs.env.get_index(i))
                .map(|(_, v)| *v)
                .or_else(|| envs.outer_value(s))
                .or_else(|| backend.hint(s, decl))
        };
        out.dtype = layout.dtype;
        out.device = layout.device;
        out.size.clear();
        for e in &layout.size {
            out.size.push(eval_dim(e, &mut lookup)?);
        }
        out.stride.clear();
        for e in &layout.stride {
            out.stride.push(eval_dim(e, &mut lookup)?);
        }
        out.offset = eval_dim(&layout.offset, &mut lookup)?;
        Ok(())
    }
}

/// The symbols a step sees: those bound outside the plan, and the first
/// `bound` entries of the plan's own bindings (those earlier steps bound).
struct Envs<'a> {
    outer: &'a Bindings,
    env: &'a Bindings,
    bound: u32,
}

impl Envs<'_> {
    #[inline]
    fn outer_value(&self, s: &Symbol) -> Option<i64> {
        if self.outer.is_empty() {
            None
        } else {
            self.outer.get(s).copied()
        }
    }

    /// One map of what a step sees (a subgraph's outer symbols): the plan's
    /// own values win, as they were bound last.
    fn merged(&self) -> Bindings {
        let mut all = self.outer.clone();
        for (s, v) in self.env.iter().take(self.bound as usize) {
            all.insert(s.clone(), *v);
        }
        all
    }
}

//! Kernel calls: Triton launches (argument binding, kwargs templates, grids) and other backends.

use super::*;

impl<'p> GraphLowering<'p> {
    pub(super) fn kernel_call(&mut self, call: &KernelCall) -> Res<()> {
        let def = match self.kernels.get(&call.kernel) {
            Some(def) => *def,
            None => {
                let def = self.info.line_kernel(&call.kernel);
                self.kernels.insert(call.kernel.clone(), def);
                def
            }
        };
        match &def.backend {
            KernelBackend::Triton(meta) => self.triton_call(call, meta),
            _ => {
                let mut args = Vec::new();
                let mut kwargs = Kwargs::new();
                for a in &call.args {
                    let v = self.arg(&a.value)?;
                    match &a.name {
                        Some(n) => {
                            if kwargs.insert(n, v).is_some() {
                                return Err(ErrorKind::KernelArgs {
                                    kernel: call.kernel.to_string(),
                                    message: format!("parameter `{n}` is given twice"),
                                });
                            }
                        }
                        None if !kwargs.is_empty() => {
                            return Err(ErrorKind::KernelArgs {
                                kernel: call.kernel.to_string(),
                                message: "positional argument after a named one".into(),
                            })
                        }
                        None => args.push(v),
                    }
                }
                self.out.push_static(
                    "call_kernel",
                    Op::KernelCall {
                        kernel: call.kernel.clone(),
                        args,
                        kwargs,
                    },
                    None,
                );
                Ok(())
            }
        }
    }

    pub(super) fn triton_call(&mut self, call: &KernelCall, meta: &'p TritonMeta) -> Res<()> {
        let err = |message: String| ErrorKind::KernelArgs {
            kernel: call.kernel.to_string(),
            message,
        };
        let plan = self.triton_plan(meta);
        let params = &plan.params;
        // An all-positional call binds parameter `i` to argument `i`: a name
        // whose parameter index is known is found without a scan.
        let positional = call.args.iter().all(|a| a.name.is_none());
        // With distinct parameters, a call that binds without error binds
        // argument `i` to parameter `i` when it is all positional, and
        // otherwise each named argument to a parameter found by index, or to
        // a baked-in name (see [`bind_by_index`]): then no binding table is
        // built or scanned.
        let by_index = match plan.distinct {
            true if positional && call.args.len() <= params.len() => Some(None),
            true if !positional => bind_by_index(meta, params, &call.args).map(Some),
            _ => None,
        };
        let direct = by_index.is_some();
        let bound = if direct {
            Vec::new()
        } else {
            meta.bind_args_to(params, &call.args).map_err(|e| err(e.to_string()))?
        };
        let nth = |i: usize| -> Option<&ArgValue> {
            match &by_index {
                Some(Some(b)) => b.params.get(i).copied().flatten(),
                _ => call.args.get(i).map(|a| &a.value),
            }
        };
        // A bound name that is not a call parameter.
        let other = |name: &str| -> Option<&ArgValue> {
            match &by_index {
                Some(Some(b)) => b.others.iter().find(|(n, _)| *n == name).map(|(_, v)| *v),
                _ => None,
            }
        };
        let get = |name: &str| -> Option<&ArgValue> {
            if direct {
                return match params.iter().position(|p| *p == name) {
                    Some(i) => nth(i),
                    None => other(name),
                };
            }
            bound.iter().find(|(n, _)| *n == name).map(|(_, v)| *v)
        };
        let get_at = |name: &str, index: Option<usize>| -> Option<&ArgValue> {
            if direct {
                return match index {
                    Some(i) => nth(i),
                    None => other(name),
                };
            }
            if !positional {
                return get(name);
            }
            match index {
                // Not a call parameter: not bound by a positional argument.
                None => None,
                Some(i) => match bound.get(i) {
                    Some((n, v)) if *n == name => Some(*v),
                    _ => get(name),
                },
            }
        };
        // A named argument for a baked-in parameter must repeat the baked value
        // when both are literals (anything symbolic is reconciliation's to prove).
        // Positional arguments bind call parameters only: nothing to check
        // (nor when every argument binds one, `direct`: `bound` is empty).
        let others = match &by_index {
            Some(Some(b)) => &b.others[..],
            _ => &[],
        };
        for (name, value) in bound.iter().filter(|_| !positional).chain(others.iter()) {
            if params.contains(name) || !meta.is_baked(name) {
                continue;
            }
            match (meta.baked_value(name), value) {
                (Some(ConstValue::Int(c)), ArgValue::Expr(SymExpr::Int(v))) if c != *v => {
                    return Err(err(format!(
                        "named argument `{name}` passes {v} but the kernel is compiled with {name} = {c}"
                    )))
                }
                (Some(ConstValue::Bool(c)), ArgValue::Bool(v)) if c != *v => {
                    return Err(err(format!(
                        "named argument `{name}` passes {v} but the kernel is compiled with {name} = {c}"
                    )))
                }
                (None, _) => {
                    return Err(err(format!(
                        "named argument `{name}` is a constexpr without a value in `constants` or the config"
                    )))
                }
                _ => {}
            }
        }
        let kwargs = match &plan.kwargs {
            Some(kp) => match self.planned_kwargs(kp, &get_at)? {
                Some(kwargs) => kwargs,
                None => self.triton_kwargs(meta, &get, &err)?,
            },
            None => self.triton_kwargs(meta, &get, &err)?,
        };
        for (extra, index) in meta.extra_launcher_args.iter().zip(plan.extra_index.iter()) {
            let given = if direct { (*index).and_then(nth) } else { get(extra) };
            let Some(given) = given else {
                return Err(err(format!("missing launcher argument `{extra}`")));
            };
            if !matches!(given, ArgValue::Expr(_)) {
                return Err(err(format!(
                    "launcher argument `{extra}` must be an integer, got {given:?}"
                )));
            }
        }
        // The expression each parameter stands for (for the grid): an extra
        // launcher argument, else a signature entry (an integer constant, a
        // config constexpr, or the expression passed), else a config kwarg.
        let param_expr = |n: &str| -> Option<Cow<'_, SymExpr>> {
            if meta.extra_launcher_args.iter().any(|x| x == n) {
                if let Some(ArgValue::Expr(e)) = get(n) {
                    return Some(Cow::Borrowed(e));
                }
            }
            let from_signature = match meta.signature.get(n) {
                Some(ty) => match meta.constants.get(n) {
                    Some(ConstValue::Int(v)) => Some(Cow::Owned(SymExpr::Int(*v))),
                    Some(_) => None,
                    None if *ty == crate::ir::SigType::Constexpr => {
                        meta.config.get(n).map(|v| Cow::Owned(SymExpr::Int(*v)))
                    }
                    None => match get(n) {
                        Some(ArgValue::Expr(e)) => Some(Cow::Borrowed(e)),
                        _ => None,
                    },
                },
                None => None,
            };
            from_signature.or_else(|| meta.config.get(n).map(|v| Cow::Owned(SymExpr::Int(*v))))
        };
        let key = meta as *const TritonMeta as usize;
        // A grid is a function of the parameter values it reads (in order):
        // the same values give the same lowered grid.
        let known = plan.grid_params.borrow().clone();
        let memo = known.as_ref().map(|params| {
            let values: smallvec::SmallVec<[Option<Cow<'_, SymExpr>>; 4]> =
                params.iter().map(|p| p.value(&get_at)).collect();
            let mut h = rustc_hash::FxHasher::default();
            key.hash(&mut h);
            values.hash(&mut h);
            (h.finish(), values)
        });
        if let Some((h, values)) = &memo {
            let hit = self.grids.get(h).and_then(|entries| {
                entries.iter().find(|(k, vs, _)| {
                    *k == key
                        && vs.len() == values.len()
                        && vs.iter().zip(values).all(|(a, b)| a.as_ref() == b.as_deref())
                })
            });
            if let Some((_, _, grid)) = hit {
                let grid = grid.clone();
                return self.push_triton(call, grid, kwargs);
            }
        }
        // The parameters the grid reads, in order: checked against the known
        // list as they are read (no names kept), collected only the first
        // time (no list yet).
        let read = std::cell::RefCell::new(Vec::new());
        let reads = std::cell::Cell::new(0usize);
        let same = std::cell::Cell::new(true);
        let grid = meta
            .grid(&|n: &str| {
                match &known {
                    Some(params) => {
                        let k = reads.get();
                        if params.get(k).map(|p| p.name.as_str()) != Some(n) {
                            same.set(false);
                        }
                        reads.set(k.saturating_add(1));
                    }
                    None => read.borrow_mut().push(n.to_string()),
                }
                param_expr(n).map(Cow::into_owned)
            })
            .map_err(|e| err(e.to_string()))?;
        let [g0, g1, g2] = grid;
        let lowered = [self.expr_owned(g0)?, self.expr_owned(g1)?, self.expr_owned(g2)?];
        // Lone symbols included: a symbol is bound once per graph (validation
        // rejects a second binding) and keeps its value, like the
        // hash-consed expressions.
        let read = read.into_inner();
        match (&memo, &known) {
            (Some((h, values)), Some(params)) if same.get() && reads.get() == params.len() => {
                let values = values.iter().map(|v| v.as_ref().map(|v| v.as_ref().clone())).collect();
                self.grids.entry(*h).or_default().push((key, values, lowered.clone()));
            }
            (_, None) => {
                let params: Vec<GridParam> = read
                    .into_iter()
                    .map(|n| GridParam::new(meta, &plan.params, n))
                    .collect();
                *plan.grid_params.borrow_mut() = Some(params.into());
            }
            _ => {}
        }
        self.push_triton(call, lowered, kwargs)
    }

    pub(super) fn push_triton(&mut self, call: &KernelCall, grid: [Arg; 3], kwargs: Kwargs) -> Res<()> {
        self.out.push_static(
            "triton_kernel_wrapper_mutation",
            Op::TritonKernel {
                kernel: call.kernel.clone(),
                grid,
                kwargs,
            },
            None,
        );
        Ok(())
    }

    /// The [`TritonPlan`] of a kernel, computed once per lowering.
    pub(super) fn triton_plan(&mut self, meta: &'p TritonMeta) -> Rc<TritonPlan<'p>> {
        let key = meta as *const TritonMeta as usize;
        self.triton_plans
            .entry(key)
            .or_insert_with(|| {
                let params: Rc<[&'p str]> = meta.call_params().into();
                let distinct = params.iter().enumerate().all(|(i, p)| !params[..i].contains(p));
                let extra_index = meta
                    .extra_launcher_args
                    .iter()
                    .map(|x| params.iter().position(|p| *p == x))
                    .collect();
                Rc::new(TritonPlan {
                    kwargs: kwargs_plan(meta, &params),
                    distinct,
                    extra_index,
                    params,
                    grid_params: std::cell::RefCell::new(None),
                })
            })
            .clone()
    }

    /// A launch's kwargs from the kernel's template; `None` when an argument
    /// is missing or conflicts (the general path reports it).
    pub(super) fn planned_kwargs<'a>(
        &mut self,
        plan: &KwargsPlan<'p>,
        get: &impl Fn(&str, Option<usize>) -> Option<&'a ArgValue>,
    ) -> Res<Option<Kwargs>> {
        let mut values = plan.template.clone();
        for (i, slot, param) in &plan.slots {
            match slot {
                Slot::CheckInt(name, c) => {
                    if let Some(ArgValue::Expr(SymExpr::Int(v))) = get(name, *param) {
                        if v != c {
                            return Ok(None);
                        }
                    }
                }
                Slot::Runtime(name) => {
                    let Some(given) = get(name, *param) else {
                        return Ok(None);
                    };
                    let value = self.arg(given)?;
                    // The template has an entry for every slot.
                    if let Some(v) = values.get_mut(*i) {
                        *v = value;
                    }
                }
            }
        }
        // As many values as names: the template has one per name.
        Ok(Kwargs::with_names(&plan.names, values))
    }

    /// A launch's kwargs, checked entry by entry: every signature parameter
    /// (constants, config constexprs, arguments), then the other config keys.
    pub(super) fn triton_kwargs<'a>(
        &mut self,
        meta: &'p TritonMeta,
        get: &dyn Fn(&str) -> Option<&'a ArgValue>,
        err: &dyn Fn(String) -> ErrorKind,
    ) -> Res<Kwargs> {
        let mut kwargs = Kwargs::new();
        for (name, ty) in &meta.signature {
            let value = if let Some(c) = meta.constants.get(name) {
                if let (Some(ArgValue::Expr(SymExpr::Int(v))), ConstValue::Int(cv)) = (get(name), c) {
                    if v != cv {
                        return Err(err(format!(
                            "argument `{name}` = {v} conflicts with its constant value {cv}"
                        )));
                    }
                }
                const_arg(c)
            } else if *ty == crate::ir::SigType::Constexpr {
                if let Some(v) = meta.config.get(name) {
                    Arg::Int(*v)
                } else {
                    return Err(err(format!(
                        "constexpr parameter `{name}` has no value in `constants` or the config"
                    )));
                }
            } else {
                let Some(given) = get(name) else {
                    return Err(err(format!("missing argument for parameter `{name}`")));
                };
                self.arg(given)?
            };
            kwargs.insert(name, value);
        }
        for (k, v) in &meta.config {
            if meta
                .signature
                .get(k)
                .is_some_and(|t| *t != crate::ir::SigType::Constexpr)
            {
                return Err(err(format!("config key `{k}` names a runtime parameter")));
            }
            if !kwargs.contains_key(k) {
                kwargs.insert(k, Arg::Int(*v));
            }
        }
        Ok(kwargs)
    }
}

/// A call's arguments bound to a Triton kernel's parameters by index.
pub(super) struct ByIndex<'n, 'v> {
    /// The argument of each call parameter, by the parameter's index.
    pub(super) params: smallvec::SmallVec<[Option<&'v ArgValue>; 12]>,
    /// Named arguments of signature entries that are not call parameters.
    pub(super) others: smallvec::SmallVec<[(&'n str, &'v ArgValue); 2]>,
}

/// The arguments of a call as [`TritonMeta::bind_args_to`] binds them to
/// `params` (distinct names): positional arguments first, then named ones.
/// `None` unless that binding succeeds (the caller then takes the general
/// path, which reports the error).
pub(super) fn bind_by_index<'v>(
    meta: &TritonMeta,
    params: &[&str],
    args: &'v [crate::ir::CallArg],
) -> Option<ByIndex<'v, 'v>> {
    let mut b = ByIndex {
        params: smallvec::smallvec![None; params.len()],
        others: smallvec::SmallVec::new(),
    };
    let mut seen_named = false;
    for (i, a) in args.iter().enumerate() {
        let slot = match &a.name {
            None if seen_named => return None,
            // Positional arguments come first: argument `i` binds parameter `i`.
            None => b.params.get_mut(i)?,
            Some(n) => {
                seen_named = true;
                match params.iter().position(|p| *p == n) {
                    Some(j) => b.params.get_mut(j)?,
                    None if meta.signature.contains_key(n.as_str()) => {
                        if b.others.iter().any(|(o, _)| *o == n) {
                            return None;
                        }
                        b.others.push((n.as_str(), &a.value));
                        continue;
                    }
                    None => return None,
                }
            }
        };
        if slot.is_some() {
            return None;
        }
        *slot = Some(&a.value);
    }
    Some(b)
}

/// The kwargs template of a Triton kernel: the same entries, in the same
/// order, as [`GraphLowering::triton_kwargs`] gives; `None` when that would
/// fail whatever the arguments.
pub(super) fn kwargs_plan<'p>(meta: &'p TritonMeta, params: &[&str]) -> Option<KwargsPlan<'p>> {
    let index = |name: &str| params.iter().position(|p| *p == name);
    let mut names: Vec<Name> = Vec::with_capacity(meta.signature.len() + meta.config.len());
    let mut template: Vec<Arg> = Vec::with_capacity(names.capacity());
    let mut slots = Vec::new();
    for (name, ty) in &meta.signature {
        let i = template.len();
        let value = if let Some(c) = meta.constants.get(name) {
            if let ConstValue::Int(cv) = c {
                slots.push((i, Slot::CheckInt(name.as_str(), *cv), index(name)));
            }
            const_arg(c)
        } else if *ty == crate::ir::SigType::Constexpr {
            Arg::Int(*meta.config.get(name)?)
        } else {
            slots.push((i, Slot::Runtime(name.as_str()), index(name)));
            Arg::None
        };
        if names.iter().any(|n| n == name) {
            return None;
        }
        names.push(Name::new(name));
        template.push(value);
    }
    for (k, v) in &meta.config {
        if meta
            .signature
            .get(k)
            .is_some_and(|t| *t != crate::ir::SigType::Constexpr)
        {
            return None;
        }
        if !names.iter().any(|n| n == k) {
            names.push(Name::new(k));
            template.push(Arg::Int(*v));
        }
    }
    Some(KwargsPlan {
        names: KwargNames::new(names)?,
        template,
        slots,
    })
}

impl GridParam {
    /// Where parameter `name` of `meta` takes its value from.
    pub(super) fn new(meta: &TritonMeta, params: &[&str], name: String) -> Self {
        let signature = match meta.signature.get(&name) {
            None => ParamSource::Absent,
            Some(ty) => match meta.constants.get(&name) {
                Some(ConstValue::Int(v)) => ParamSource::Fixed(Some(*v)),
                Some(_) => ParamSource::Fixed(None),
                None if *ty == crate::ir::SigType::Constexpr => ParamSource::Fixed(meta.config.get(&name).copied()),
                None => ParamSource::Runtime,
            },
        };
        GridParam {
            index: params.iter().position(|p| *p == name),
            extra: meta.extra_launcher_args.contains(&name),
            config: meta.config.get(&name).copied(),
            signature,
            name,
        }
    }

    /// The expression the parameter stands for in a launch whose bound
    /// arguments `get` gives: what `param_expr` in
    /// [`GraphLowering::triton_call`] computes, without its lookups.
    pub(super) fn value<'a>(
        &self,
        get: &impl Fn(&str, Option<usize>) -> Option<&'a ArgValue>,
    ) -> Option<Cow<'a, SymExpr>> {
        if self.extra {
            if let Some(ArgValue::Expr(e)) = get(&self.name, self.index) {
                return Some(Cow::Borrowed(e));
            }
        }
        let from_signature = match self.signature {
            ParamSource::Absent => None,
            ParamSource::Fixed(v) => v.map(|v| Cow::Owned(SymExpr::Int(v))),
            ParamSource::Runtime => match get(&self.name, self.index) {
                Some(ArgValue::Expr(e)) => Some(Cow::Borrowed(e)),
                _ => None,
            },
        };
        from_signature.or_else(|| self.config.map(|v| Cow::Owned(SymExpr::Int(v))))
    }
}

pub(super) fn const_arg(c: &ConstValue) -> Arg {
    match c {
        ConstValue::None => Arg::None,
        ConstValue::Bool(b) => Arg::Bool(*b),
        ConstValue::Int(v) => Arg::Int(*v),
        ConstValue::Float(f) => Arg::Float(*f),
        ConstValue::Str(s) => Arg::Str(s.clone()),
    }
}

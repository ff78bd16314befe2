//! Kernel calls: parameters, argument binding and types.

use super::*;

impl<'a> Validator<'a> {
    /// The one rule of a kernel definition at line `at` of `g`, made by
    /// graph `by` (`g` itself, or the subgraph a cond or while loop runs
    /// there): a second definition is reported, a first one recorded;
    /// whether it was recorded.
    pub(super) fn define_kernel(
        &mut self,
        g: &mut GraphState<'a>,
        at: usize,
        kernel: &KernelName,
        by: GraphName,
    ) -> bool {
        if let Some((graph, first)) = g.defined_kernels.get(kernel).cloned() {
            self.err(
                Self::at(g, at),
                ValidationErrorKind::KernelDefinedTwice {
                    kernel: kernel.clone(),
                    graph,
                    first,
                },
            );
            return false;
        }
        g.defined_kernels.insert(kernel.clone(), (by, at));
        true
    }
}

impl<'a> Validator<'a> {
    /// What a C++, CUDA C or host kernel's call must be: positional (they are
    /// called as C functions, by position, in every wrapper and on the host),
    /// and for a C++ kernel, which runs on the host, its tensors on the CPU.
    fn host_call_rules(&mut self, g: &mut GraphState<'a>, at: usize, call: &KernelCall, def: &KernelDef) {
        let backend = match &def.backend {
            KernelBackend::Cpp(_) => "C++",
            KernelBackend::CudaC => "CUDA C",
            KernelBackend::Host => "host",
            KernelBackend::Triton(_) | KernelBackend::Halide(_) => return,
        };
        if let Some(param) = call.args.iter().find_map(|a| a.name.as_ref()) {
            self.err(
                Self::at(g, at),
                ValidationErrorKind::NamedArgument {
                    kernel: call.kernel.clone(),
                    backend,
                    param: param.clone(),
                },
            );
        }
        if !matches!(def.backend, KernelBackend::Cpp(_)) {
            return;
        }
        for a in &call.args {
            let ArgValue::Buffer(b) = &a.value else { continue };
            if let Some(l) = g
                .layout(self.program, b)
                .filter(|l| l.device.kind != crate::ir::DeviceType::Cpu)
            {
                self.err(
                    Self::at(g, at),
                    ValidationErrorKind::HostKernelDevice {
                        kernel: call.kernel.clone(),
                        buffer: b.clone(),
                        device: l.device,
                    },
                );
            }
        }
    }
}

/// A kernel parameter as the checker sees it.
pub(super) struct Param<'a> {
    pub(super) name: String,
    /// `Some(dtype)` for typed pointers, checked against the buffer.
    pub(super) pointer: Option<Option<DType>>,
    /// The type, printed only for diagnostics.
    pub(super) ty: ParamType<'a>,
    /// The parameter may be left out (fixed by `constants`).
    pub(super) optional: bool,
}

/// Parameter -> value of one call ([`crate::ir::bind_call_args`]); a handful
/// of entries, searched linearly.
pub(super) type Bound<'n, 'v> = crate::ir::BoundArgs<'n, 'v>;

pub(super) fn bound_get<'v>(bound: &Bound<'_, 'v>, name: &str) -> Option<&'v ArgValue> {
    bound.iter().find(|(n, _)| *n == name).map(|(_, v)| *v)
}

/// A parameter's type as diagnostics print it.
pub(super) enum ParamType<'a> {
    /// A Triton signature type; `None` for launcher arguments.
    Triton(Option<&'a SigType>),
    /// A C type.
    C(&'a str),
}

impl ParamType<'_> {
    pub(super) fn text(&self) -> String {
        match self {
            ParamType::Triton(Some(t)) => t.to_string(),
            ParamType::Triton(None) => "launcher argument".into(),
            ParamType::C(t) => (*t).to_string(),
        }
    }
}

impl<'a> Validator<'a> {
    pub(super) fn kernel_call(&mut self, g: &mut GraphState<'a>, at: usize, call: &'a KernelCall) {
        for a in &call.args {
            match &a.value {
                // A kernel takes a tensor's data pointer: a multi-output value has none.
                ArgValue::Buffer(b) => {
                    self.use_buffer(g, at, b, Need::Tensor, true);
                }
                other => self.use_arg(g, at, other),
            }
        }
        let program = self.program;
        let Some((kernel_index, def)) = self
            .kernel_index
            .get(call.kernel.as_str())
            .and_then(|&i| program.kernels.get_index(i).map(|(_, d)| (i, d)))
        else {
            self.err(
                Self::at(g, at),
                ValidationErrorKind::UnknownKernel {
                    kernel: call.kernel.clone(),
                },
            );
            return;
        };
        self.host_call_rules(g, at, call, def);
        if !g.defined_kernels.contains_key(&call.kernel) {
            Self::prescan(g);
            let later = g.later_kernels.get(&call.kernel).copied().filter(|&i| i > at);
            if g.is_main || later.is_some() {
                if g.reported.insert(format!("undefined-kernel {}", call.kernel)) {
                    self.err(
                        Self::at(g, at),
                        ValidationErrorKind::KernelNotDefined {
                            kernel: call.kernel.clone(),
                            defined_at: later,
                        },
                    );
                }
            } else {
                g.external_kernels.entry(call.kernel.clone()).or_insert(at);
            }
        }
        let cached = match &self.call_params[kernel_index] {
            Some(p) => p.clone(),
            None => {
                let p = self
                    .kernel_params(def)
                    .map(|params| -> Rc<[Param<'a>]> { params.into_iter().filter(|p| !p.name.is_empty()).collect() });
                self.call_params[kernel_index] = Some(p.clone());
                p
            }
        };
        let Some(call_params) = cached else { return };
        let kernel = &call.kernel;
        let positional = call.args.iter().take_while(|a| a.name.is_none()).count();
        let any_named = positional < call.args.len();
        // One binding walk (shared with `TritonMeta::bind_args`); its problems
        // are reported below in the validator's order.
        let names: SmallVec<[&str; 16]> = call_params.iter().map(|p| p.name.as_str()).collect();
        let mut issues: SmallVec<[crate::ir::ArgBindError; 2]> = SmallVec::new();
        let bound = crate::ir::bind_call_args(
            &names,
            &|n: &str| self.named_param_exists(def, n),
            &call.args,
            &mut |e| issues.push(e),
        );
        if issues
            .iter()
            .any(|e| matches!(e, crate::ir::ArgBindError::PositionalAfterNamed { .. }))
        {
            self.err(
                Self::at(g, at),
                ValidationErrorKind::PositionalAfterNamed { kernel: kernel.clone() },
            );
        }
        if (!any_named && positional != call_params.len()) || positional > call_params.len() {
            self.err(
                Self::at(g, at),
                ValidationErrorKind::ArityMismatch {
                    kernel: kernel.clone(),
                    expected: call_params.len(),
                    params: call_params
                        .iter()
                        .map(|p| p.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", "),
                    found: positional,
                },
            );
        }
        // Each unknown or twice-bound name is reported once, however often it
        // repeats (too many positional arguments is the arity error above).
        let mut reported: rustc_hash::FxHashSet<String> = Default::default();
        for issue in issues {
            let kind = match issue {
                crate::ir::ArgBindError::UnknownParameter { param } if reported.insert(param.clone()) => {
                    ValidationErrorKind::UnknownParameter {
                        kernel: kernel.clone(),
                        param,
                    }
                }
                crate::ir::ArgBindError::BoundTwice { param } if reported.insert(param.clone()) => {
                    ValidationErrorKind::ParameterBoundTwice {
                        kernel: kernel.clone(),
                        param,
                    }
                }
                _ => continue,
            };
            self.err(Self::at(g, at), kind);
        }
        if any_named {
            for p in call_params.iter() {
                if !p.optional && bound_get(&bound, p.name.as_str()).is_none() {
                    self.err(
                        Self::at(g, at),
                        ValidationErrorKind::MissingArgument {
                            kernel: kernel.clone(),
                            param: p.name.clone(),
                        },
                    );
                }
            }
        }
        for p in call_params.iter() {
            let Some(value) = bound_get(&bound, p.name.as_str()) else {
                continue;
            };
            if p.optional {
                continue;
            }
            match (&p.pointer, value) {
                (Some(expected), ArgValue::Buffer(b)) => {
                    if let (Some(dt), Some(l)) = (expected, g.layout(self.program, b)) {
                        if l.dtype != *dt {
                            self.err(
                                Self::at(g, at),
                                ValidationErrorKind::PointerDtypeMismatch {
                                    kernel: kernel.clone(),
                                    param: p.name.clone(),
                                    expected: SigType::Pointer(*dt),
                                    buffer: b.clone(),
                                    found: l.dtype,
                                },
                            );
                        }
                    }
                }
                (Some(_), other) => self.err(
                    Self::at(g, at),
                    ValidationErrorKind::PointerArgNotBuffer {
                        kernel: kernel.clone(),
                        param: p.name.clone(),
                        expected: p.ty.text(),
                        found: describe_arg(other),
                    },
                ),
                (None, ArgValue::Buffer(b)) => {
                    // A 0-d tensor may stand for its value (Inductor's `.item()` args).
                    let is_scalar_tensor = g.layout(self.program, b).is_some_and(|l| l.rank() == 0);
                    if !is_scalar_tensor {
                        self.err(
                            Self::at(g, at),
                            ValidationErrorKind::BufferArgNotPointer {
                                kernel: kernel.clone(),
                                param: p.name.clone(),
                                expected: p.ty.text(),
                                buffer: b.clone(),
                            },
                        );
                    }
                }
                (None, _) => {}
            }
        }
    }

    /// The parameters a call site binds, or `None` when the backend's
    /// parameters are unknown (CUDA C, host, C++ without `arg_types`).
    pub(super) fn kernel_params(&self, def: &'a KernelDef) -> Option<Vec<Param<'a>>> {
        match &def.backend {
            KernelBackend::Triton(meta) => Some(
                meta.call_params()
                    .into_iter()
                    .map(|name| {
                        let ty = meta.signature.get(name);
                        Param {
                            name: name.to_string(),
                            pointer: match ty {
                                Some(SigType::Pointer(d)) => Some(Some(*d)),
                                _ => None,
                            },
                            ty: ParamType::Triton(ty),
                            optional: meta.constants.contains_key(name),
                        }
                    })
                    .collect(),
            ),
            KernelBackend::Halide(meta) => Some(
                meta.argtypes
                    .iter()
                    .map(|a| Param {
                        name: a.name.clone(),
                        pointer: a.ctype.trim_end().ends_with('*').then_some(None),
                        ty: ParamType::C(&a.ctype),
                        optional: false,
                    })
                    .collect(),
            ),
            KernelBackend::Cpp(meta) if !meta.arg_types.is_empty() => Some(
                meta.arg_types
                    .iter()
                    .enumerate()
                    .map(|(i, t)| Param {
                        name: format!("arg{i}"),
                        pointer: t.trim_end().ends_with('*').then_some(None),
                        ty: ParamType::C(t),
                        optional: false,
                    })
                    .collect(),
            ),
            _ => None,
        }
    }

    pub(super) fn named_param_exists(&self, def: &KernelDef, name: &str) -> bool {
        match &def.backend {
            KernelBackend::Triton(meta) => {
                meta.signature.contains_key(name) || meta.extra_launcher_args.iter().any(|a| a == name)
            }
            KernelBackend::Halide(meta) => meta.argtypes.iter().any(|a| a.name == name),
            KernelBackend::Cpp(meta) => (0..meta.arg_types.len()).any(|i| format!("arg{i}") == name),
            _ => true,
        }
    }

    // -- subgraphs ----------------------------------------------------------------
}

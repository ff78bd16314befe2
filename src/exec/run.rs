//! Whole-program runs: validate, lower to FX, compile, match the inputs and
//! turn their declared layouts into concrete ones, then run. [`run_program`]
//! and [`run_plan`] are the one whole-program run of every backend that takes
//! real inputs (the meta backend makes its own from the declared layouts,
//! `meta::run_program`).

use super::interp::RunOutput;
use super::{Backend, ExecError, Tensor, TensorSpec};
use crate::exec::interp::{compile, Plan};
use crate::ir::{Layout, Program, ValidationErrors};
use crate::sym::{eval::eval_int, Bindings, EvalError, SymExpr};
use indexmap::IndexMap;

/// Why a whole-program run failed.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum RunError {
    /// The program does not validate.
    #[error("the program is invalid:\n{0}")]
    Invalid(ValidationErrors),
    /// The program could not be lowered to FX.
    #[error("lowering to FX: {0}")]
    Lower(crate::lower::fx::Error),
    /// Building the inputs or executing failed.
    #[error(transparent)]
    Exec(#[from] ExecError),
}

/// Validates `program`, lowers it to FX and compiles the graph: the plan
/// every backend's whole-program run executes.
pub fn compile_program(program: &Program) -> Result<Plan, RunError> {
    compile_program_with_limits(program, &crate::Limits::default())
}

/// [`compile_program`] validating within `limits`.
pub(crate) fn compile_program_with_limits(program: &Program, limits: &crate::Limits) -> Result<Plan, RunError> {
    let info = crate::ir::validate_with_limits(program, limits).map_err(RunError::Invalid)?;
    let graph = crate::lower::fx::lower(&info, &Default::default()).map_err(RunError::Lower)?;
    Ok(compile(&graph, program)?)
}

/// [`compile_program`] with the graph's dependency DAG
/// ([`crate::exec::dag::Dag`]) attached to the plan ([`Plan::dag`]): what
/// concurrent CUDA graph replay needs.
pub fn compile_program_with_dag(program: &Program, limits: &crate::Limits) -> Result<Plan, RunError> {
    let info = crate::ir::validate_with_limits(program, limits).map_err(RunError::Invalid)?;
    let graph = crate::lower::fx::lower(&info, &Default::default()).map_err(RunError::Lower)?;
    let dag = crate::exec::dag::Dag::build(&graph, &program.kernels)?;
    Ok(compile(&graph, program)?.with_dag(std::sync::Arc::new(dag)))
}

/// Runs `program` on `backend`: validates it within the backend's limits,
/// lowers it to FX, compiles it and runs it with `inputs`, keyed by graph
/// input name (a symbol input is a one-element integer tensor) or constant
/// name.
///
/// Backed symbols are bound from the sizes of the tensors given; each tensor
/// is then laid out with its input's declared strides, storage offset and
/// device ([`Backend::place`]: row-major data such as a safetensors file
/// holds becomes the strided tensor the program expects). A missing input,
/// an unknown name, or sizes that contradict the declaration are errors
/// naming the input.
pub fn run_program<B: Backend>(
    program: &Program,
    backend: &mut B,
    inputs: &IndexMap<String, Tensor>,
) -> Result<RunOutput<B::Tensor>, RunError> {
    let plan = compile_program_with_limits(program, &backend.limits())?;
    run_placed(program, &plan, backend, inputs)
}

/// [`run_program`] with `program`'s plan compiled already
/// ([`compile_program`]), on inputs the caller lends: they are matched and
/// laid out the same way, and a tensor already in its declared layout (a
/// model's weights, placed once) is used without a copy where the backend
/// can ([`Backend::place`]).
pub fn run_plan<B: Backend>(
    program: &Program,
    plan: &Plan,
    backend: &mut B,
    inputs: &IndexMap<String, &Tensor>,
) -> Result<RunOutput<B::Tensor>, RunError> {
    run_placed(program, plan, backend, inputs)
}

/// Matches and lays out `inputs` on `backend`, then runs `plan`.
fn run_placed<B: Backend, I: SuppliedInput + std::borrow::Borrow<Tensor>>(
    program: &Program,
    plan: &Plan,
    backend: &mut B,
    inputs: &IndexMap<String, I>,
) -> Result<RunOutput<B::Tensor>, RunError> {
    // The inputs to hand back after the run, where the backend takes them back.
    let hands_back = backend.returns_inputs();
    let mut placed: Vec<(Tensor, B::Tensor)> = Vec::new();
    let (args, constants) = place_inputs(program, inputs, &mut |_, t, spec| {
        let on_backend = backend.place(t.borrow(), spec)?;
        if hands_back {
            placed.push((t.borrow().clone(), on_backend.clone()));
        }
        Ok(on_backend)
    })?;
    let out = plan.run(backend, args, &constants)?;
    for (supplied, on_backend) in &placed {
        backend.return_input(supplied, on_backend)?;
    }
    Ok(out)
}

/// The concrete layout of `layout` under `env`; `what` names the tensor in
/// errors. An unbound symbol is reported with `unbound`'s message.
pub(crate) fn concrete_layout(
    layout: &Layout,
    env: &Bindings,
    what: &str,
    unbound: &dyn Fn(&crate::sym::Symbol) -> String,
) -> Result<TensorSpec, ExecError> {
    let one = |e: &SymExpr| -> Result<i64, ExecError> {
        eval_int(e, env).map_err(|err| match err {
            EvalError::Unbound { symbol } => ExecError::Input(format!("{what}: {}", unbound(&symbol))),
            other => ExecError::Input(format!("{what}: evaluating `{e}`: {other}")),
        })
    };
    Ok(TensorSpec {
        dtype: layout.dtype,
        device: layout.device,
        size: layout.size.iter().map(one).collect::<Result<_, _>>()?,
        stride: layout.stride.iter().map(one).collect::<Result<_, _>>()?,
        offset: one(&layout.offset)?,
    })
}

/// Checks `inputs` against `program` as every backend's run matches them
/// (names, dtypes, ranks, sizes, symbol inputs, symbol ranges) without
/// placing any: for the meta backend, which runs on the
/// declared layouts and takes only symbol values from real inputs. An error
/// names the input.
pub fn check_inputs(program: &Program, inputs: &indexmap::IndexMap<String, super::Tensor>) -> Result<(), RunError> {
    place_inputs(program, inputs, &mut |_, _, _| Ok(()))?;
    Ok(())
}

/// The symbol values `inputs` give `program` (the backed symbols that input
/// sizes name, and the symbol inputs), after checking them as
/// [`check_inputs`] does: the hints a shapes-only run takes from real inputs.
pub fn input_symbols(
    program: &Program,
    inputs: &indexmap::IndexMap<String, super::Tensor>,
) -> Result<Bindings, RunError> {
    let (_, _, symbols) = bind_and_place(program, inputs, &mut |_, _, _| Ok(()))?;
    Ok(symbols)
}

/// What [`place_inputs`] needs to know of one supplied input: a host
/// tensor, or a tensor that already lives on a device.
pub(crate) trait SuppliedInput {
    /// Element type.
    fn dtype(&self) -> crate::ir::DType;
    /// Sizes.
    fn size(&self) -> &[i64];
    /// The value of a one-element integer tensor given for a symbol input
    /// (`None` when it is not one, or its value is not readable here).
    fn symbol_value(&self) -> Result<Option<i64>, ExecError>;
}

impl SuppliedInput for super::Tensor {
    fn dtype(&self) -> crate::ir::DType {
        super::Tensor::dtype(self)
    }
    fn size(&self) -> &[i64] {
        super::Tensor::size(self)
    }
    fn symbol_value(&self) -> Result<Option<i64>, ExecError> {
        Ok(match self.to_i64_vec()?.as_slice() {
            [v] if !self.dtype().is_floating() => Some(*v),
            _ => None,
        })
    }
}

impl SuppliedInput for &super::Tensor {
    fn dtype(&self) -> crate::ir::DType {
        super::Tensor::dtype(self)
    }
    fn size(&self) -> &[i64] {
        super::Tensor::size(self)
    }
    fn symbol_value(&self) -> Result<Option<i64>, ExecError> {
        (**self).symbol_value()
    }
}

/// Matches `inputs` (keyed by graph input or constant name; a symbol input
/// is a one-element integer tensor, and may be left out when an input size
/// binds its symbol) to `program`'s main graph: checks names, dtypes and
/// ranks, binds the backed symbols that input sizes name and the symbol
/// inputs, checks every bound symbol against its declared range, computes
/// each tensor's concrete declared layout, and calls `place(name, input,
/// layout)` to put it where a backend wants it. Returns the graph inputs in
/// placeholder order and the constants by name. The one place inputs are
/// matched, for every backend.
#[allow(clippy::type_complexity)]
pub(crate) fn place_inputs<I: SuppliedInput, T>(
    program: &Program,
    inputs: &indexmap::IndexMap<String, I>,
    place: &mut dyn FnMut(&str, &I, &TensorSpec) -> Result<T, ExecError>,
) -> Result<(Vec<super::Value<T>>, indexmap::IndexMap<String, T>), RunError> {
    let (args, constants, _) = bind_and_place(program, inputs, place)?;
    Ok((args, constants))
}

/// [`place_inputs`], also returning the symbols the inputs bound.
#[allow(clippy::type_complexity)]
fn bind_and_place<I: SuppliedInput, T>(
    program: &Program,
    inputs: &indexmap::IndexMap<String, I>,
    place: &mut dyn FnMut(&str, &I, &TensorSpec) -> Result<T, ExecError>,
) -> Result<(Vec<super::Value<T>>, indexmap::IndexMap<String, T>, Bindings), RunError> {
    use crate::ir::GraphInput;
    use crate::sym::Symbol;
    for name in inputs.keys() {
        let known = program.main.inputs.iter().any(|i| i.name().as_str() == name)
            || program.constants.keys().any(|c| c.as_str() == name);
        if !known {
            return Err(ExecError::Input(format!("`{name}` is neither a graph input nor a constant")).into());
        }
    }
    let get = |name: &str| {
        inputs
            .get(name)
            .ok_or_else(|| ExecError::Input(format!("graph input or constant `{name}` was not supplied")))
    };
    // Bind sizes that are plain symbols, then symbol inputs; remember what
    // bound each symbol for the range check.
    let mut env = Bindings::new();
    let mut bound_by: Vec<(Symbol, String)> = Vec::new();
    let mut bind = |env: &mut Bindings, s: &Symbol, v: i64, what: String| -> Result<(), ExecError> {
        match env.get(s) {
            Some(old) if *old != v => Err(ExecError::Input(format!(
                "{what} is {v}, but `{s}` = {old} from an earlier input"
            ))),
            Some(_) => Ok(()),
            None => {
                env.insert(s.clone(), v);
                bound_by.push((s.clone(), what));
                Ok(())
            }
        }
    };
    let mut tensor_inputs: Vec<(&str, &Layout)> = Vec::new();
    for name in program.main.tensor_inputs() {
        let layout = program
            .main
            .layout(name)
            .ok_or_else(|| ExecError::Input(format!("input `{name}` has no tensor layout")))?;
        tensor_inputs.push((name.as_str(), layout));
    }
    let supplied_constants = program
        .constants
        .iter()
        .filter(|(c, _)| inputs.contains_key(c.as_str()));
    for (name, layout) in tensor_inputs
        .iter()
        .copied()
        .chain(supplied_constants.map(|(c, l)| (c.as_str(), l)))
    {
        let t = get(name)?;
        if t.size().len() != layout.size.len() || t.dtype() != layout.dtype {
            return Err(ExecError::Input(format!(
                "`{name}` is {}{:?}, the program declares {layout}",
                t.dtype(),
                t.size()
            ))
            .into());
        }
        for (d, (e, v)) in layout.size.iter().zip(t.size()).enumerate() {
            if let SymExpr::Sym(s) = e {
                bind(&mut env, s, *v, format!("size {d} of `{name}`"))?;
            }
        }
    }
    for input in &program.main.inputs {
        if let GraphInput::Symbol { name, symbol } = input {
            let Some(t) = inputs.get(name.as_str()) else {
                if env.contains_key(symbol) {
                    continue;
                }
                return Err(ExecError::Input(format!(
                    "symbol input `{name}` (`{symbol}`) was not supplied and no input size binds `{symbol}`"
                ))
                .into());
            };
            let v = one_integer(
                t.symbol_value()?,
                &format!("symbol input `{name}`"),
                t.dtype(),
                t.size(),
            )?;
            bind(&mut env, symbol, v, format!("symbol input `{name}`"))?;
        }
    }
    // Sizes that are expressions (`2*s0 + 1`, a torch.export derived
    // dimension) and integer inputs that are (`GraphInput::SymExpr`) bind
    // the one symbol they leave unbound, solved exactly (`sym::solve`),
    // until no equation binds another.
    let mut equations: Vec<(String, &SymExpr, i64)> = Vec::new();
    let mut integer_inputs = Vec::new();
    for (name, layout) in &tensor_inputs {
        let t = get(name)?;
        for (d, (e, v)) in layout.size.iter().zip(t.size()).enumerate() {
            if !matches!(e, SymExpr::Sym(_)) {
                equations.push((format!("size {d} of `{name}`"), e, *v));
            }
        }
    }
    for input in &program.main.inputs {
        let GraphInput::SymExpr { name, expr } = input else {
            continue;
        };
        let Some(t) = inputs.get(name.as_str()) else {
            return Err(ExecError::Input(format!("integer input `{name}` (`{expr}`) was not supplied")).into());
        };
        let what = format!("integer input `{name}`");
        let v = one_integer(t.symbol_value()?, &what, t.dtype(), t.size())?;
        integer_inputs.push((name, expr, v));
        equations.push((what, expr, v));
    }
    let mut progress = true;
    while progress {
        progress = false;
        for (what, e, v) in &equations {
            let free = e.free_symbols();
            let unbound: Vec<&Symbol> = free.iter().filter(|s| !env.contains_key(*s)).collect();
            let [s] = unbound.as_slice() else { continue };
            let Some(affine) = crate::sym::solve::affine_in(e, s) else {
                continue;
            };
            let rest = crate::sym::eval::eval_int(&affine.rest, &env)
                .map_err(|err| ExecError::Input(format!("{what} (`{e}`): {err}")))?;
            let value = affine
                .solve(*v, rest)
                .ok_or_else(|| ExecError::Input(format!("{what} is {v}, which `{e}` equals for no integer `{s}`")))?;
            bind(&mut env, s, value, format!("{what} (`{e}` = {v})"))?;
            progress = true;
        }
    }
    // An integer input's value must be its expression's (a size's is checked
    // when the tensor is placed).
    for (name, expr, v) in &integer_inputs {
        let want = crate::sym::eval::eval_int(expr, &env)
            .map_err(|err| ExecError::Input(format!("integer input `{name}` (`{expr}`): {err}")))?;
        if want != *v {
            return Err(ExecError::Input(format!(
                "integer input `{name}` is {v}, but `{expr}` is {want} for the symbols the other inputs bind"
            ))
            .into());
        }
    }
    for (s, what) in &bound_by {
        let (Some(decl), Some(v)) = (program.symbols.get(s), env.get(s)) else {
            continue;
        };
        if !decl.range.contains(*v) {
            return Err(ExecError::Input(format!(
                "{what} is {v}, which binds `{s}` outside its range {} (the sizes the program was compiled for)",
                decl.range
            ))
            .into());
        }
    }
    let unbound = |s: &Symbol| format!("symbol `{s}` is not bound by any input size");
    let mut placed = |name: &str, layout: &Layout| -> Result<T, ExecError> {
        let t = get(name)?;
        let spec = concrete_layout(layout, &env, &format!("`{name}`"), &unbound)?;
        if spec.size != t.size() {
            return Err(ExecError::Input(format!(
                "`{name}` has sizes {:?}, the program declares {layout} = {:?}",
                t.size(),
                spec.size
            )));
        }
        place(name, t, &spec).map_err(|e| match e {
            ExecError::Input(m) => ExecError::Input(format!("input `{name}`: {m}")),
            ExecError::Limit(mut l) => {
                l.what = format!("input `{name}`: {}", l.what);
                ExecError::Limit(l)
            }
            e => e,
        })
    };
    let mut args = Vec::new();
    let mut tensors = tensor_inputs.into_iter();
    for input in &program.main.inputs {
        match input {
            GraphInput::Symbol { symbol, .. } => {
                // Bound above, from this input or from a size.
                args.push(super::Value::Int(env.get(symbol).copied().unwrap_or_default()));
            }
            GraphInput::SymExpr { expr, .. } => {
                // Checked above against the symbols it binds.
                let v = crate::sym::eval::eval_int(expr, &env).map_err(|e| ExecError::Input(e.to_string()))?;
                args.push(super::Value::Int(v));
            }
            GraphInput::Tensor { .. } => {
                let Some((name, layout)) = tensors.next() else {
                    return Err(ExecError::Input("graph inputs changed while binding".into()).into());
                };
                args.push(super::Value::Tensor(placed(name, layout)?));
            }
        }
    }
    let mut constants = indexmap::IndexMap::new();
    for (name, layout) in &program.constants {
        constants.insert(name.to_string(), placed(name.as_str(), layout)?);
    }
    Ok((args, constants, env))
}

/// The value of an integer graph input (`what`), which must be a
/// one-element integer tensor (`value` is its `symbol_value`).
fn one_integer(value: Option<i64>, what: &str, dtype: crate::ir::DType, size: &[i64]) -> Result<i64, ExecError> {
    value.ok_or_else(|| {
        ExecError::Input(format!(
            "{what} must be a one-element integer tensor, got {dtype}{size:?}"
        ))
    })
}

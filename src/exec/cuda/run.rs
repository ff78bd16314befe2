//! Whole-program runs on the CUDA backend.

use super::{CudaBackend, CudaOptions, CudaTensor};
use crate::exec::run::{compile_program, concrete_layout};
use crate::exec::{Backend, ExecError, RunError, Tensor, Value};
use crate::fx::interp::RunOutput;
use crate::ir::{GraphInput, Program};
use crate::sym::{Bindings, SymExpr, Symbol};
use indexmap::IndexMap;

/// Runs `program` on a new [`CudaBackend`] with `options` and copies the
/// outputs back to the host (see [`run_program_on`]).
pub fn run_program(
    program: &Program,
    options: CudaOptions,
    inputs: &IndexMap<String, Tensor>,
) -> Result<RunOutput<Tensor>, RunError> {
    let mut backend = CudaBackend::new(options).map_err(ExecError::from)?;
    let out = run_program_on(program, &mut backend, inputs)?;
    let outputs = out
        .outputs
        .iter()
        .map(|v| to_host(&mut backend, v))
        .collect::<Result<Vec<_>, _>>()?;
    backend.synchronize().map_err(ExecError::from)?;
    Ok(RunOutput {
        outputs,
        symbols: out.symbols,
    })
}

/// Runs `program` on `backend` with host `inputs` keyed by graph input name
/// (a symbol input is a one-element integer tensor) or constant name, as
/// [`crate::exec::host::run_program_on`] does: backed symbols are bound from
/// the inputs' sizes, each tensor is laid out with its input's declared
/// strides and storage offset, then copied to the device.
pub fn run_program_on(
    program: &Program,
    backend: &mut CudaBackend,
    inputs: &IndexMap<String, Tensor>,
) -> Result<RunOutput<CudaTensor>, RunError> {
    let (plan, args, constants) = place_inputs(program, backend, inputs)?;
    Ok(plan.run(backend, args, &constants)?)
}

/// Compiles `program` and places `inputs` on the device as
/// [`run_program_on`] does, without running it: returns the plan, the graph
/// inputs in placeholder order and the constants, ready for
/// [`Plan::run`](crate::fx::interp::Plan::run) or a prepared plan.
#[allow(clippy::type_complexity)]
pub fn place_inputs(
    program: &Program,
    backend: &mut CudaBackend,
    inputs: &IndexMap<String, Tensor>,
) -> Result<
    (
        crate::fx::interp::Plan,
        Vec<Value<CudaTensor>>,
        IndexMap<String, CudaTensor>,
    ),
    RunError,
> {
    let plan = compile_program(program)?;
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
    let mut env = Bindings::new();
    let bind = |env: &mut Bindings, s: &Symbol, v: i64, what: String| -> Result<(), ExecError> {
        match env.get(s) {
            Some(old) if *old != v => Err(ExecError::Input(format!(
                "{what} is {v}, but `{s}` = {old} from an earlier input"
            ))),
            _ => {
                env.insert(s.clone(), v);
                Ok(())
            }
        }
    };
    let mut named = Vec::new();
    for input in &program.main.inputs {
        match input {
            GraphInput::Symbol { name, symbol } => {
                let t = get(name.as_str())?;
                let v = match t.to_i64_vec()?.as_slice() {
                    [v] if !t.dtype().is_floating() => *v,
                    _ => {
                        return Err(ExecError::Input(format!(
                            "symbol input `{name}` must be a one-element integer tensor, got {}{:?}",
                            t.dtype(),
                            t.size()
                        ))
                        .into())
                    }
                };
                bind(&mut env, symbol, v, format!("symbol input `{name}`"))?;
            }
            GraphInput::Tensor { name } => {
                let layout = program
                    .main
                    .layout(name)
                    .ok_or_else(|| ExecError::Input(format!("input `{name}` has no tensor layout")))?;
                named.push((name.as_str(), layout));
            }
        }
    }
    let graph_inputs = named.len();
    named.extend(
        program
            .constants
            .iter()
            .filter(|(c, _)| inputs.contains_key(c.as_str()))
            .map(|(c, l)| (c.as_str(), l)),
    );
    for (name, layout) in &named {
        let t = get(name)?;
        if t.dim() != layout.size.len() || t.dtype() != layout.dtype {
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
    let unbound = |s: &Symbol| format!("symbol `{s}` is not bound by any input size");
    let place = |backend: &mut CudaBackend, name: &str, layout: &crate::ir::Layout| -> Result<CudaTensor, ExecError> {
        let t = get(name)?;
        let spec = concrete_layout(layout, &env, &format!("`{name}`"), &unbound)?;
        if spec.size != t.size() {
            return Err(ExecError::Input(format!(
                "`{name}` has sizes {:?}, the program declares {layout} = {:?}",
                t.size(),
                spec.size
            )));
        }
        let (same_layout, host) = (
            t.stride() == spec.stride.as_slice() && t.spec().offset == spec.offset,
            t,
        );
        if same_layout {
            return backend.copy_in(host);
        }
        let placed = Tensor::zeros_like_spec(&spec)?;
        placed.copy_from(host)?;
        backend.copy_in(&placed)
    };
    let mut args = Vec::new();
    let mut tensors = named.iter().take(graph_inputs);
    for input in &program.main.inputs {
        match input {
            GraphInput::Symbol { symbol, .. } => {
                // Bound above from this very input.
                args.push(Value::Int(env.get(symbol).copied().unwrap_or_default()));
            }
            GraphInput::Tensor { .. } => {
                let Some((name, layout)) = tensors.next() else {
                    return Err(ExecError::Input("graph inputs changed while binding".into()).into());
                };
                args.push(Value::Tensor(place(backend, name, layout)?));
            }
        }
    }
    let mut constants = IndexMap::new();
    for (name, layout) in &program.constants {
        constants.insert(name.to_string(), place(backend, name.as_str(), layout)?);
    }
    Ok((plan, args, constants))
}

/// Copies every tensor of `v` to the host.
pub fn to_host(backend: &mut CudaBackend, v: &Value<CudaTensor>) -> Result<Value<Tensor>, ExecError> {
    Ok(match v {
        Value::Tensor(t) => Value::Tensor(backend.copy_out(t)?),
        Value::Int(i) => Value::Int(*i),
        Value::Float(f) => Value::Float(*f),
        Value::Bool(b) => Value::Bool(*b),
        Value::None => Value::None,
        Value::Str(s) => Value::Str(s.clone()),
        Value::DType(d) => Value::DType(*d),
        Value::Device(d) => Value::Device(*d),
        Value::List(items) => Value::List(items.iter().map(|i| to_host(backend, i)).collect::<Result<_, _>>()?),
        Value::Dict(items) => Value::Dict(
            items
                .iter()
                .map(|(k, i)| Ok((k.clone(), to_host(backend, i)?)))
                .collect::<Result<_, ExecError>>()?,
        ),
        Value::Opaque => Value::Opaque,
    })
}

//! Whole-program runs shared by [`super::meta::run_program`] and
//! [`super::host::run_program`]: validate, lower to FX, compile, and turn
//! declared input layouts into concrete ones.

use super::{ExecError, TensorSpec};
use crate::fx::interp::{compile, Plan};
use crate::ir::{Layout, Program, ValidationErrors};
use crate::sym::{eval::eval_int, Bindings, EvalError, SymExpr};

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

/// Validates `program`, lowers it to FX and compiles the graph.
pub(crate) fn compile_program(program: &Program) -> Result<Plan, RunError> {
    let info = crate::ir::validate(program).map_err(RunError::Invalid)?;
    let graph = crate::lower::fx::lower(&info, &Default::default()).map_err(RunError::Lower)?;
    Ok(compile(&graph, program)?)
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

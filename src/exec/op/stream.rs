//! `torch.ops.streams.*`: the event and synchronisation ops Inductor 2.12+
//! keeps as extern calls in programs with user streams (`record_event`,
//! `wait_event`, `synchronize_event`, `synchronize_stream`,
//! `synchronize_device`, `wait_stream`). Their arguments are user-object
//! indices (events, streams) or a device index.
//!
//! They order work between streams; they compute nothing. Every backend
//! runs a program's lines in program order on one stream, which is one of
//! the schedules those events allow (an op issued later never runs before
//! one issued earlier), so each is checked and then has nothing left to do.

use crate::exec::{ArgList, ExecError, Kwargs, Value};
pub(crate) use crate::ir::STREAM_OPS;

/// Whether `key` (an op's registry key) is one of [`STREAM_OPS`].
pub(crate) fn is_stream_op(key: &str) -> bool {
    STREAM_OPS.contains(&key)
}

/// Runs a stream op in program order: its arguments must be indices (they
/// name events, streams or a device); the result is `None`, as the op's.
pub(crate) fn run_in_order<T>(op: &str, args: &ArgList<'_, T>, kwargs: &Kwargs<'_, T>) -> Result<Value<T>, ExecError> {
    for (k, v) in args.iter().enumerate() {
        if !matches!(v, Value::Int(i) if *i >= 0) {
            return Err(ExecError::op(
                op,
                format!("argument {k} must be an event, stream or device index"),
            ));
        }
    }
    if let Some(name) = kwargs.keys().next() {
        return Err(ExecError::op(op, format!("takes no keyword argument `{name}`")));
    }
    Ok(Value::None)
}

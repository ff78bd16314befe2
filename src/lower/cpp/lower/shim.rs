//! AOTI shim calls of fallback ops whose calls pass keyword-only optional
//! arguments: the shim takes every schema argument in schema order (optional
//! tensors as `AtenTensorHandle*`, `nullptr` when absent; optional scalars
//! as pointers; absent defaults spelled out), as Inductor's C++ wrapper
//! passes them. The IR lists a call's arguments as the program gave them
//! (`segment_reduce(data, "sum", offsets=...)`), so these ops carry their
//! schema here; every other op's arguments go in IR order.

use super::{c_float, GraphCtx, Lowering};
use crate::ir::{ArgValue, ExternCall};
use crate::lower::cpp::Error;

/// One schema parameter, by how the shim takes it.
#[derive(Clone, Copy, Debug)]
enum Param {
    /// `Tensor`: a handle.
    Tensor,
    /// `Tensor?`: `&temporary_reference(x.get())` or `nullptr`.
    OptTensor,
    /// `str`.
    Str,
    /// `int` with its default.
    Int(i64),
    /// `bool` with its default (`0` / `1`).
    Bool(bool),
    /// `Scalar?` taken as `double*`: a local and its address, or `nullptr`.
    OptDouble,
}

/// The schema of `op` (name without `aten.`, overload), when it is one of these ops.
fn schema(name: &str, overload: Option<&str>) -> Option<&'static [(&'static str, Param)]> {
    use Param::*;
    match (name, overload.unwrap_or("default")) {
        // segment_reduce(Tensor data, str reduce, *, Tensor? lengths=None, Tensor? indices=None,
        //                Tensor? offsets=None, int axis=0, bool unsafe=False, Scalar? initial=None)
        ("segment_reduce", "default") => Some(&[
            ("data", Tensor),
            ("reduce", Str),
            ("lengths", OptTensor),
            ("indices", OptTensor),
            ("offsets", OptTensor),
            ("axis", Int(0)),
            ("unsafe", Bool(false)),
            ("initial", OptDouble),
        ]),
        _ => None,
    }
}

impl Lowering<'_> {
    /// The shim arguments of `call` in schema order, when its op has a schema
    /// here; `local` names the locals it declares (optional scalars).
    pub(super) fn schema_args(
        &mut self,
        g: &GraphCtx<'_>,
        call: &ExternCall,
        name: &str,
        overload: Option<&str>,
        local: &str,
        cx: &super::Cx<'_>,
    ) -> Result<Option<Vec<String>>, Error> {
        let Some(params) = schema(name, overload) else {
            return Ok(None);
        };
        let bad = |message: String| Error::Invalid {
            context: cx.into(),
            message,
        };
        if call.args.len() > params.len() {
            return Err(bad(format!(
                "`{}` takes {} arguments, the call passes {} positionally",
                call.op,
                params.len(),
                call.args.len()
            )));
        }
        if let Some(k) = call.kwargs.keys().find(|k| !params.iter().any(|(p, _)| p == k)) {
            return Err(bad(format!("`{}` has no parameter `{k}`", call.op)));
        }
        let mut out = Vec::with_capacity(params.len());
        for (i, (pname, param)) in params.iter().enumerate() {
            let given = call
                .args
                .get(i)
                .or_else(|| call.kwargs.get(*pname))
                .filter(|v| !matches!(v, ArgValue::None));
            out.push(match (param, given) {
                (Param::Tensor | Param::Str, Some(v)) => self.shim_arg(g, v, cx)?,
                (Param::Tensor | Param::Str, None) => {
                    return Err(bad(format!("`{}`: missing argument `{pname}`", call.op)))
                }
                (Param::OptTensor, Some(ArgValue::Buffer(b))) => format!("&temporary_reference({}.get())", g.local(b)),
                (Param::OptTensor | Param::OptDouble, None) => "nullptr".into(),
                (Param::Int(_), Some(v)) => self.shim_arg(g, v, cx)?,
                (Param::Int(d), None) => format!("{d}L"),
                (Param::Bool(_), Some(ArgValue::Bool(b))) | (Param::Bool(b), None) => u8::from(*b).to_string(),
                (Param::OptDouble, Some(v)) => {
                    let value = match v {
                        ArgValue::Float(f) => c_float(*f),
                        other => format!("static_cast<double>({})", self.shim_arg(g, other, cx)?),
                    };
                    let var = format!("{local}_{pname}");
                    self.line(format!("double {var} = {value};"));
                    format!("&{var}")
                }
                (_, Some(v)) => return Err(bad(format!("`{}`: argument `{pname}` cannot be {v:?}", call.op))),
            });
        }
        Ok(Some(out))
    }
}

//! AOTI: fallback ops that have no C shim run through Python, as Inductor's
//! C++ wrapper runs them: `torch._inductor.codecache.custom_op_wrapper(op,
//! *args)` with tensors passed as capsules of their handles, under the GIL.

use super::{c_float, c_string, GraphCtx, Lowering};
use crate::ir::{ArgValue, ExternCall};
use crate::lower::cpp::Error;

/// Ops PyTorch 2.11 ships no C shim for (`torch/csrc/inductor/aoti_torch/generated`).
const WITHOUT_C_SHIM: &[&str] = &["_padded_dense_to_jagged_forward", "_jagged_to_padded_dense_forward"];

/// Whether op `name` (without `aten.`) runs through Python in the AOTI dialect.
pub(super) fn without_c_shim(name: &str) -> bool {
    WITHOUT_C_SHIM.contains(&name)
}

impl Lowering<'_> {
    /// The call of `call` through `custom_op_wrapper`, its one tensor result
    /// written to `result` (declared here).
    pub(super) fn python_op_call(
        &mut self,
        g: &GraphCtx<'_>,
        call: &ExternCall,
        result: &str,
        cx: &super::Cx<'_>,
    ) -> Result<(), Error> {
        // `torch.ops.<namespace>.<name>.<overload>`, `default` when the IR names none.
        let qualified = call.op.strip_prefix("torch.ops.").unwrap_or(&call.op);
        let op = if qualified.split('.').count() == 2 {
            format!("torch.ops.{qualified}.default")
        } else {
            format!("torch.ops.{qualified}")
        };
        let wrapper = format!("{result}_op_wrapper");
        let tuple = format!("{result}_py_args");
        self.line(format!("RAIIPyObject {wrapper};"));
        self.open("{");
        self.line("py::gil_scoped_acquire_simple acquire;");
        self.line("RAIIPyObject codecache_module(PyImport_ImportModule(\"torch._inductor.codecache\"));");
        self.line("if (!codecache_module) throw std::runtime_error(\"Failed to load torch._inductor.codecache\");");
        self.line(format!(
            "{wrapper} = PyObject_GetAttrString(codecache_module, \"custom_op_wrapper\");"
        ));
        self.line(format!(
            "if (!{wrapper}) throw std::runtime_error(\"Failed to load torch._inductor.codecache.custom_op_wrapper\");"
        ));
        self.close("}");
        self.line(format!("RAIIAtenTensorHandle {result};"));
        self.declare(result);
        self.open("{");
        self.line("py::gil_scoped_acquire_simple acquire;");
        let args: Vec<&ArgValue> = call.args.iter().chain(call.kwargs.values()).collect();
        self.line(format!("RAIIPyObject {tuple}(PyTuple_New({}));", args.len() + 1));
        self.line(format!(
            "if (!{tuple}) throw std::runtime_error(\"PyTuple_New {tuple} failed\");"
        ));
        self.line(format!(
            "PyTuple_SetItem({tuple}, 0, PyUnicode_FromString({}));",
            c_string(&op)
        ));
        for (i, a) in args.iter().enumerate() {
            let value = self.py_value(g, a, &format!("{tuple}_{}", i + 1), cx)?;
            self.line(format!("PyTuple_SetItem({tuple}, {}, {value});", i + 1));
        }
        let py_result = format!("{result}_py");
        self.line(format!(
            "RAIIPyObject {py_result}(PyObject_CallObject({wrapper}, {tuple}));"
        ));
        self.line(format!(
            "if (!{py_result}) throw std::runtime_error({});",
            c_string(&format!("PyObject_CallObject {op} failed"))
        ));
        self.line(format!(
            "{result} = reinterpret_cast<AtenTensorHandle>(PyCapsule_GetPointer({py_result}.get(), NULL));"
        ));
        self.close("}");
        Ok(())
    }

    /// A new reference to `a` as a Python object (`local` names a list built first).
    pub(super) fn py_value(
        &mut self,
        g: &GraphCtx<'_>,
        a: &ArgValue,
        local: &str,
        cx: &super::Cx<'_>,
    ) -> Result<String, Error> {
        Ok(match a {
            ArgValue::Buffer(b) => format!(
                "PyCapsule_New(reinterpret_cast<void*>({}.get()), NULL, NULL)",
                g.tensor_arg(b, cx)?
            ),
            ArgValue::None => {
                self.line("Py_INCREF(Py_None);");
                "Py_None".into()
            }
            ArgValue::Expr(e) => format!("PyLong_FromLongLong({})", self.cexpr(e)),
            ArgValue::Float(f) => format!("PyFloat_FromDouble({})", c_float(*f)),
            ArgValue::Bool(b) => format!("PyBool_FromLong({})", u8::from(*b)),
            ArgValue::Str(s) => format!("PyUnicode_FromString({})", c_string(s)),
            ArgValue::List(items) => {
                self.line(format!("PyObject* {local} = PyList_New({});", items.len()));
                for (j, item) in items.iter().enumerate() {
                    let value = self.py_value(g, item, &format!("{local}_{j}"), cx)?;
                    self.line(format!("PyList_SetItem({local}, {j}, {value});"));
                }
                local.to_string()
            }
            other => {
                return Err(self.unsupported(
                    cx,
                    format!("argument {other:?} has no Python form for `custom_op_wrapper`"),
                ))
            }
        })
    }
}

//! Triton launches: the `call_<kernel>(...)` line and its arguments.

use super::*;

impl<'a> Lowering<'a> {
    pub(super) fn kernel_call(&mut self, g: &GraphCtx<'_>, call: &KernelCall, cx: &Cx<'_>) -> Result<(), Error> {
        let (meta, plan) = match self.call_plans.get(&call.kernel) {
            Some((meta, plan)) => (*meta, plan.clone()),
            None => {
                // Validation checked that the kernel is in the table.
                let kernel = self.info.line_kernel(&call.kernel);
                let meta = match &kernel.backend {
                    KernelBackend::Triton(m) => m,
                    _ => return self.direct_call(g, call, kernel, cx),
                };
                let plan = Rc::new(launch::CallPlan::new(&call.kernel, meta)?);
                self.call_plans.insert(call.kernel.clone(), (meta, plan.clone()));
                self.called_kernels.insert(call.kernel.clone());
                (meta, plan)
            }
        };
        let args = plan.bind(&call.kernel, meta, call, cx)?;
        if let Some(r) = self.recorded.as_mut() {
            let args = args
                .iter()
                .map(|&(i, value)| (plan.params[i].name.clone(), value.clone()))
                .collect();
            r.calls.push(RecordedCall {
                kernel: call.kernel.clone(),
                graph: GraphName::new(g.name.map_or(MAIN_GRAPH, |n| n.as_str())),
                line: self.line_index,
                args,
            });
        }
        let device = call.device.map_or(0, |d| device_index(&d));
        // AOTI: the stream variable is declared (if needed) before the call line.
        let d = self.dialect;
        d.before_launch(self, device);
        let style = self.cstyle();
        self.indent_body();
        let _ = write!(self.body, "call_{}(", call.kernel);
        for &(i, value) in &args {
            self.kernel_arg(g, &call.kernel, &plan.params[i], value, style, cx)?;
            self.body.push_str(", ");
        }
        d.launch_tail(self, device);
        Ok(())
    }

    pub(super) fn kernel_arg(
        &mut self,
        g: &GraphCtx<'_>,
        kernel: &KernelName,
        param: &launch::Param,
        value: &ArgValue,
        style: CStyle,
        cx: &Cx<'_>,
    ) -> Result<(), Error> {
        // Reachable: validation does not check the parameters `constants`
        // fixes (they may still be passed), nor a scalar parameter's value
        // that is not a tensor.
        let bad = |what: &str| {
            direct::kernel_args(
                cx,
                kernel,
                format!("parameter `{}` ({}) gets {what}", param.name, param.kind_text()),
            )
        };
        // Writes the argument at the end of the body.
        let out = &mut self.body;
        match (param.is_pointer(), value) {
            (true, ArgValue::Buffer(b)) => Ok(write!(out, "{}", g.var(b))?),
            (false, ArgValue::Expr(e)) => Ok(write!(out, "{}", CExpr { e, style })?),
            (false, ArgValue::Float(v)) => {
                out.push_str(&c_float(*v));
                Ok(())
            }
            (false, ArgValue::Bool(b)) => Ok(write!(out, "{b}")?),
            (true, _) => Err(bad("a non-tensor value")),
            // A one-element tensor for a scalar parameter: its value, read
            // at the call (Inductor's `t.item()` / `aoti_torch_item_*`).
            (false, ArgValue::Buffer(b)) => {
                let layout = g.layout(b);
                if layout.size.iter().any(|s| s.as_int() != Some(1)) {
                    return Err(bad(&format!("tensor `{b}` with more than one element")));
                }
                match self.dialect.item_arg(&g.local(b), layout.dtype) {
                    Some(read) => {
                        out.push_str(&read);
                        Ok(())
                    }
                    None => Err(self.unsupported(
                        cx,
                        format!(
                            "kernel `{kernel}` parameter `{}`: reading a 0-d tensor `{b}` of dtype {}",
                            param.name, layout.dtype
                        ),
                    )),
                }
            }
            (false, _) => Err(bad("a value that is not a number")),
        }
    }
}

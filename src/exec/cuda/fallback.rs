//! The host fallback: an extern op the device does not run, run on the host
//! backend's ops with its operands copied through host memory (on only when
//! [`super::CudaOptions::host_fallback`] is).

use super::bytes::{host_from_bytes, host_storage_bytes};
use super::{library, CudaBackend, CudaTensor, Storage};
use crate::exec::op::op_key;
use crate::exec::{Backend, ExecError, ExternCall, Tensor, Value};
use indexmap::IndexMap;
use std::sync::Arc;

impl CudaBackend {
    /// Runs an extern op on the host: tensors go to host memory (one host
    /// copy per device allocation, so aliasing views stay aliased), the op
    /// runs, allocations it modified are copied back, and results come back
    /// as new device tensors (in-place ops return their first argument).
    pub(super) fn host_fallback(&mut self, call: ExternCall<'_, CudaTensor>) -> Result<Value<CudaTensor>, ExecError> {
        self.options.extern_ops.record_host(call.op);
        if let Some(trace) = self.trace.as_mut() {
            trace.push(library::Traced::Host(call.op.to_string()));
        }
        let mut staged: Vec<Staged> = Vec::new();
        let args = call
            .args
            .iter()
            .map(|v| self.stage_to_host(v, &mut staged))
            .collect::<Result<Vec<_>, _>>()?;
        let kwargs = call
            .kwargs
            .iter()
            .map(|(k, v)| Ok((k.to_string(), self.stage_to_host(v, &mut staged)?)))
            .collect::<Result<IndexMap<_, _>, ExecError>>()?;
        let result = self.host.call_extern(ExternCall {
            op: call.op,
            family: call.family,
            args: (&args).into(),
            kwargs: (&kwargs).into(),
            expected: call.expected,
        })?;
        for s in &staged {
            let now = host_storage_bytes(&s.host)?;
            if now != s.original {
                self.device.upload(s.storage.ptr, &now)?;
            }
        }
        if op_key(call.op).ends_with('_') {
            if let (Value::Tensor(_), Some(Value::Tensor(first))) = (&result, call.args.first()) {
                return Ok(Value::Tensor(first.clone()));
            }
        }
        self.copy_value_in(&result)
    }

    fn stage_to_host(&mut self, v: &Value<CudaTensor>, staged: &mut Vec<Staged>) -> Result<Value<Tensor>, ExecError> {
        v.try_map_tensors(&mut |t| {
            let i = match staged.iter().position(|s| Arc::ptr_eq(&s.storage, &t.storage)) {
                Some(i) => i,
                None => {
                    let mut bytes = vec![0u8; t.storage.bytes];
                    self.device.download(&mut bytes, t.storage.ptr)?;
                    let n =
                        i64::try_from(t.storage_numel()).map_err(|_| ExecError::Input("storage too large".into()))?;
                    let host = host_from_bytes(t.spec.dtype, &bytes, n)?;
                    staged.push(Staged {
                        storage: Arc::clone(&t.storage),
                        host,
                        original: bytes,
                    });
                    staged.len() - 1
                }
            };
            staged[i].host.view(&t.spec.size, &t.spec.stride, t.spec.offset)
        })
    }

    fn copy_value_in(&mut self, v: &Value<Tensor>) -> Result<Value<CudaTensor>, ExecError> {
        v.try_map_tensors(&mut |t| self.copy_in(t))
    }
}

/// A device allocation copied to the host for a fallback op.
struct Staged {
    storage: Arc<Storage>,
    /// The whole allocation as a 1-D host tensor.
    host: Tensor,
    original: Vec<u8>,
}

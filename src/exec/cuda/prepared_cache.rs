//! [`PreparedCache`]: the recordings of one plan, by the inputs' layouts and
//! the device values each read.

use super::prepared::Prepared;
use crate::exec::cuda::Replay;
use crate::exec::cuda::{CudaBackend, CudaTensor};
use crate::exec::interp::Plan;
use crate::exec::{ExecError, TensorSpec, Value};
use indexmap::IndexMap;

/// Prepared recordings of one plan, keyed by the layouts and symbol values of
/// the inputs and by the device values each recording read (a small cache:
/// the oldest entry goes beyond the capacity, [`PreparedCache::CAPACITY`]
/// unless made [`PreparedCache::with_capacity`]).
#[derive(Debug, Default)]
pub struct PreparedCache {
    entries: Vec<(Vec<InputKey>, Prepared)>,
    /// Recordings made (first calls, new shapes, diverged reads).
    pub recordings: usize,
    /// Most recordings kept; 0 means [`PreparedCache::CAPACITY`].
    capacity: usize,
}

/// What of one input a recording depends on. A tensor is known by the device
/// memory it lives in (address and size), not by its `Storage` handle: a
/// caller's buffer borrowed afresh on every call
/// (`runtime::cuda::Session::run_device`) is the same input as long as
/// it is the same memory, and the recording holds the storages it saw, so no
/// other allocation can take their addresses while it lives.
#[derive(Clone, Debug, PartialEq)]
enum InputKey {
    Tensor { ptr: u64, bytes: usize, spec: TensorSpec },
    Int(i64),
    Other,
}

fn input_key(v: &Value<CudaTensor>) -> InputKey {
    match v {
        Value::Tensor(t) => InputKey::Tensor {
            ptr: t.storage.ptr,
            bytes: t.storage.bytes,
            spec: t.spec.clone(),
        },
        Value::Int(i) => InputKey::Int(*i),
        _ => InputKey::Other,
    }
}

fn key_matches(key: &[InputKey], inputs: &[Value<CudaTensor>]) -> bool {
    key.len() == inputs.len()
        && key.iter().zip(inputs).all(|(k, v)| match (k, v) {
            (InputKey::Tensor { ptr, bytes, spec }, Value::Tensor(t)) => {
                *ptr == t.storage.ptr && *bytes == t.storage.bytes && *spec == t.spec
            }
            (InputKey::Int(a), Value::Int(b)) => a == b,
            (InputKey::Other, v) => !matches!(v, Value::Tensor(_) | Value::Int(_)),
            _ => false,
        })
}

impl PreparedCache {
    /// Most recordings kept by default.
    pub const CAPACITY: usize = 8;

    /// An empty cache keeping at most `capacity` recordings (at least one).
    pub fn with_capacity(capacity: usize) -> PreparedCache {
        PreparedCache {
            capacity: capacity.max(1),
            ..PreparedCache::default()
        }
    }

    /// Recordings held now.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// `true` when no recording is held.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Runs `plan` on `inputs`: replays a matching recording (directly, or
    /// through CUDA graphs when `graphs`), recording a new one when none
    /// matches or every match diverged. Returns the recording whose outputs
    /// hold the results. Each call runs the program's operations once, so
    /// writes to inputs happen once per call (a diverged replay stops before
    /// any such write; see the module documentation).
    ///
    /// Inputs are used in place: a recording matches only the same device
    /// tensors (by storage) with the same layouts and integer values. For new
    /// values, write them into the same tensors
    /// ([`super::CudaBackend::overwrite`]); other tensors make a new recording.
    pub fn run(
        &mut self,
        backend: &mut CudaBackend,
        plan: &Plan,
        inputs: &[Value<CudaTensor>],
        constants: &IndexMap<String, CudaTensor>,
        graphs: bool,
    ) -> Result<&Prepared, ExecError> {
        let mut hit = None;
        for (i, (key, prepared)) in self.entries.iter_mut().enumerate() {
            if !key_matches(key, inputs) {
                continue;
            }
            let r = if graphs {
                super::graph::replay(prepared, backend)?
            } else {
                prepared.replay(backend)?
            };
            if r == Replay::Done {
                hit = Some(i);
                break;
            }
        }
        let i = match hit {
            Some(i) => i,
            None => {
                // The recorded run computed this call's results; it is not
                // replayed now (that would apply writes to the inputs twice).
                // Graphs are captured on the next graph replay.
                let (prepared, _) = Prepared::record(backend, plan, inputs.to_vec(), constants)?;
                self.recordings += 1;
                let capacity = if self.capacity == 0 {
                    Self::CAPACITY
                } else {
                    self.capacity
                };
                if self.entries.len() >= capacity {
                    self.entries.remove(0);
                }
                self.entries.push((inputs.iter().map(input_key).collect(), prepared));
                self.entries.len() - 1
            }
        };
        // `i` indexes an entry that exists: found above or just pushed.
        self.entries
            .get(i)
            .map(|(_, p)| p)
            .ok_or_else(|| ExecError::Device("prepared cache entry vanished".into()))
    }
}

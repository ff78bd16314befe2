//! The GEMM family's library calls, replayable (see
//! [`crate::exec::cuda::library`]): one cuBLAS GEMM, or one planned
//! cuBLASLt matmul (float with epilogue, int8, fp8), and how each is made
//! from the column-major problem ([`Common`]).

use super::Common;
use crate::exec::cuda::blaslt::{Fp8Plan, Int8Plan, Lt, LtPlan, LtPointers, LtShape};
use crate::exec::cuda::cublas::Gemm;
use crate::exec::cuda::library::{self, Address, LaneWorkspaces, LibraryCall};
use crate::exec::cuda::CudaBackend;
use crate::exec::ExecError;
use cudarc::driver::sys::CUdeviceptr;
use std::rc::Rc;

/// One GEMM-family library call.
#[derive(Debug)]
pub(super) enum BlasCall {
    /// A cuBLAS GEMM.
    Gemm(Gemm),
    /// A planned cuBLASLt matmul (the workspace is the backend's persistent
    /// one or a lane's, so it is not among the addresses).
    Lt {
        plan: Rc<LtPlan>,
        ptrs: LtPointers,
        alpha: f32,
        beta: f32,
    },
    /// A planned int8 cuBLASLt matmul (no workspace, so calls on concurrent
    /// lanes share nothing).
    Int8 { plan: Rc<Int8Plan>, ptrs: LtPointers },
    /// A planned fp8 cuBLASLt matmul.
    Fp8 { plan: Rc<Fp8Plan>, ptrs: LtPointers },
}

/// A [`BlasCall`] of the extern op `op`.
#[derive(Debug)]
pub(super) struct OpCall {
    pub(super) op: String,
    pub(super) call: BlasCall,
}

/// Runs `call` for `op` and keeps it in the trace while the prepared path records.
pub(super) fn submit(backend: &mut CudaBackend, op: &str, call: BlasCall) -> Result<(), ExecError> {
    library::submit(
        backend,
        Box::new(OpCall {
            op: op.to_string(),
            call,
        }),
    )
}

/// The backend's cuBLASLt state, loaded on first use.
pub(super) fn lt(backend: &mut CudaBackend) -> Result<&mut Lt, ExecError> {
    let lt = match backend.lt.take() {
        Some(lt) => lt,
        None => Lt::new(&backend.device)?,
    };
    Ok(backend.lt.insert(lt))
}

/// The cuBLASLt addresses of `cm`'s operands, with no bias and no scales.
pub(super) fn lt_pointers(cm: &Common) -> LtPointers {
    LtPointers {
        a: cm.a.ptr,
        b: cm.b.ptr,
        c: cm.c.ptr,
        bias: 0,
        scale_a: 0,
        scale_b: 0,
    }
}

/// The cuBLASLt shape of `cm` (`ldc` is C's); an error for `op` when a size is negative.
pub(super) fn lt_shape(cm: &Common, op: &str) -> Result<LtShape, ExecError> {
    let dim = |v: i64, what: &str| {
        u64::try_from(v).map_err(|_| ExecError::op(op, format!("cuBLASLt {what} = {v} is negative")))
    };
    Ok(LtShape {
        trans_a: cm.a.transpose,
        trans_b: cm.b.transpose,
        m: dim(cm.m, "m")?,
        n: dim(cm.n, "n")?,
        k: dim(cm.k, "k")?,
        lda: cm.a.ld,
        ldb: cm.b.ld,
        ldc: cm.c.ld,
    })
}

impl LibraryCall for OpCall {
    fn op(&self) -> &str {
        &self.op
    }

    fn library(&self) -> &'static str {
        match self.call {
            BlasCall::Gemm(_) => "cuBLAS",
            BlasCall::Lt { .. } | BlasCall::Int8 { .. } | BlasCall::Fp8 { .. } => "cuBLASLt",
        }
    }

    fn addresses(&self) -> Vec<Address> {
        match &self.call {
            BlasCall::Gemm(g) => library::addresses(&[(g.a.ptr, false), (g.b.ptr, false), (g.c.ptr, true)], &[]),
            BlasCall::Lt { ptrs: p, .. } | BlasCall::Int8 { ptrs: p, .. } | BlasCall::Fp8 { ptrs: p, .. } => {
                library::addresses(
                    &[(p.a, false), (p.b, false), (p.c, true)],
                    &[(p.bias, false), (p.scale_a, false), (p.scale_b, false)],
                )
            }
        }
    }

    fn rebased(&self, addresses: &[CUdeviceptr]) -> Box<dyn LibraryCall> {
        // The addresses in `addresses`' order: the operands, then the
        // optional pointers that are present.
        let mut given = addresses.iter().copied();
        let mut next = |old: CUdeviceptr, optional: bool| {
            if optional && old == 0 {
                0
            } else {
                given.next().unwrap_or(old)
            }
        };
        let mut lt = |p: &LtPointers| LtPointers {
            a: next(p.a, false),
            b: next(p.b, false),
            c: next(p.c, false),
            bias: next(p.bias, true),
            scale_a: next(p.scale_a, true),
            scale_b: next(p.scale_b, true),
        };
        let call = match &self.call {
            BlasCall::Gemm(g) => {
                let mut g = *g;
                if let [a, b, c] = *addresses {
                    (g.a.ptr, g.b.ptr, g.c.ptr) = (a, b, c);
                }
                BlasCall::Gemm(g)
            }
            BlasCall::Lt {
                plan,
                ptrs,
                alpha,
                beta,
            } => BlasCall::Lt {
                plan: Rc::clone(plan),
                ptrs: lt(ptrs),
                alpha: *alpha,
                beta: *beta,
            },
            BlasCall::Int8 { plan, ptrs } => BlasCall::Int8 {
                plan: Rc::clone(plan),
                ptrs: lt(ptrs),
            },
            BlasCall::Fp8 { plan, ptrs } => BlasCall::Fp8 {
                plan: Rc::clone(plan),
                ptrs: lt(ptrs),
            },
        };
        Box::new(OpCall {
            op: self.op.clone(),
            call,
        })
    }

    fn run(&self, backend: &CudaBackend) -> Result<(), ExecError> {
        self.run_with(backend, None)
    }

    fn run_in(&self, backend: &CudaBackend, workspaces: &LaneWorkspaces) -> Result<(), ExecError> {
        self.run_with(backend, Some(workspaces))
    }
}

impl OpCall {
    /// Queues the call with the handles' own workspaces, or with the lane's
    /// `workspaces` (an error when the lane has none for this library).
    fn run_with(&self, backend: &CudaBackend, workspaces: Option<&LaneWorkspaces>) -> Result<(), ExecError> {
        let op = &self.op;
        let library = self.library();
        let missing = || ExecError::op(op, format!("no {library} workspace for this call's lane"));
        let lane_lt = || match workspaces {
            Some(w) if w.lt == 0 => Err(missing()),
            Some(w) => Ok(Some(w.lt)),
            None => Ok(None),
        };
        let lt = || library::recorded_handle(backend.lt.as_ref(), op, "cuBLASLt");
        let result = match &self.call {
            BlasCall::Gemm(g) => {
                let lane = match workspaces {
                    Some(w) if w.blas.0 == 0 => return Err(missing()),
                    Some(w) => Some(w.blas),
                    None => None,
                };
                let blas = library::recorded_handle(backend.blas.as_ref(), op, "cuBLAS")?;
                match lane {
                    Some((ptr, bytes)) => blas.gemm_in(g, ptr, bytes),
                    None => blas.gemm(g),
                }
            }
            BlasCall::Lt {
                plan,
                ptrs,
                alpha,
                beta,
            } => match lane_lt()? {
                Some(w) => lt()?.matmul_in(plan, ptrs, *alpha, *beta, w),
                None => lt()?.matmul(plan, ptrs, *alpha, *beta),
            },
            BlasCall::Int8 { plan, ptrs } => lt()?.int8_matmul(plan, ptrs),
            BlasCall::Fp8 { plan, ptrs } => {
                let workspace = lane_lt()?;
                lt()?.fp8_matmul(plan, ptrs, workspace)
            }
        };
        result.map_err(|e| ExecError::op(op, e.to_string()))
    }
}

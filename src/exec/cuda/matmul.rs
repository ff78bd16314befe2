//! `mm` and `bmm` on cuBLAS.
//!
//! A row-major product `C = A B` with row-major `C` is the column-major
//! product `C^T = B^T A^T`; an operand stored row-major is, read column-major,
//! its own transpose, so it needs no transpose flag, and one stored
//! column-major (a transposed view) takes `CUBLAS_OP_T`. A column-major `C`
//! is computed directly as `C = A B`.

use super::driver::{Gemm, GemmOperand};
use super::library::{self, Address, LibraryCall};
use super::{CudaBackend, CudaTensor};
use crate::exec::{Backend, ExecError, ExternCall, TensorSpec, Value};
use crate::ir::DType;
use cudarc::cublas::sys::cudaDataType;

/// A matmul ready to run.
pub(super) struct Plan {
    op: String,
    a: CudaTensor,
    b: CudaTensor,
    /// The result, allocated (or `out=`).
    c: CudaTensor,
    returns_out: bool,
    batched: bool,
}

/// How a matrix (the last two dims) lies in memory.
#[derive(Clone, Copy, Debug)]
enum Order {
    /// Rows contiguous; leading dimension = row stride.
    Row(i64),
    /// Columns contiguous; leading dimension = column stride.
    Col(i64),
}

fn order(rows: i64, cols: i64, s_row: i64, s_col: i64) -> Option<Order> {
    if (s_col == 1 || cols <= 1) && (rows <= 1 || s_row >= cols.max(1)) {
        return Some(Order::Row(if rows <= 1 { cols.max(1) } else { s_row }));
    }
    if (s_row == 1 || rows <= 1) && (cols <= 1 || s_col >= rows.max(1)) {
        return Some(Order::Col(if cols <= 1 { rows.max(1) } else { s_col }));
    }
    None
}

fn data_type(d: DType) -> Option<cudaDataType> {
    match d {
        DType::Float32 => Some(cudaDataType::CUDA_R_32F),
        DType::Float16 => Some(cudaDataType::CUDA_R_16F),
        DType::Bfloat16 => Some(cudaDataType::CUDA_R_16BF),
        _ => None,
    }
}

/// Runs `call` when it is a GEMM-family op cuBLAS can take; `Ok(None)` otherwise.
pub(super) fn call(
    backend: &mut CudaBackend,
    call: &ExternCall<'_, CudaTensor>,
) -> Result<Option<Value<CudaTensor>>, ExecError> {
    if !matches!(super::op_key(call.op).as_str(), "aten.mm" | "aten.bmm") {
        return Ok(None);
    }
    let Some(p) = plan(backend, call)? else {
        return Ok(None);
    };
    let first = backend.blas.is_none().then(std::time::Instant::now);
    let result = run(backend, p)?;
    if let Some(t0) = first {
        backend.timings.blas_first_call += t0.elapsed();
    }
    Ok(Some(result))
}

/// Checks the arguments of `call` (an `mm` or `bmm`) and allocates the result;
/// `None` when cuBLAS cannot take them (dtype, layout), so the caller may fall back.
pub(super) fn plan(backend: &mut CudaBackend, call: &ExternCall<'_, CudaTensor>) -> Result<Option<Plan>, ExecError> {
    let op = call.op;
    let batched = super::op_key(op) == "aten.bmm";
    let rank = if batched { 3 } else { 2 };
    let tensor = |i: usize, name: &str| -> Result<CudaTensor, ExecError> {
        match call.args.get(i).or_else(|| call.kwargs.get(name)) {
            Some(Value::Tensor(t)) if t.spec.size.len() == rank => Ok(t.clone()),
            Some(Value::Tensor(t)) => Err(ExecError::op(
                op,
                format!("`{name}` has rank {}, expected {rank}", t.spec.size.len()),
            )),
            Some(other) => Err(ExecError::op(
                op,
                format!("`{name}` must be a tensor, got {}", other.kind()),
            )),
            None => Err(ExecError::op(op, format!("missing argument `{name}`"))),
        }
    };
    let (a, b) = (tensor(0, "self")?, tensor(1, "mat2")?);
    let (sa, sb) = (&a.spec.size, &b.spec.size);
    let (batch, m, k, n) = if batched {
        (sa[0], sa[1], sa[2], sb[2])
    } else {
        (1, sa[0], sa[1], sb[1])
    };
    let (kb, batch_b) = if batched { (sb[1], sb[0]) } else { (sb[0], 1) };
    if k != kb || batch != batch_b {
        return Err(ExecError::op(op, format!("cannot multiply shapes {sa:?} and {sb:?}")));
    }
    if a.spec.dtype != b.spec.dtype {
        return Err(ExecError::op(
            op,
            format!("operand dtypes differ: {} and {}", a.spec.dtype, b.spec.dtype),
        ));
    }
    if data_type(a.spec.dtype).is_none() {
        return Ok(None);
    }
    let shape: Vec<i64> = if batched { vec![batch, m, n] } else { vec![m, n] };
    let (c, returns_out) = match call.kwargs.get("out") {
        Some(Value::Tensor(out)) => {
            if out.spec.size != shape || out.spec.dtype != a.spec.dtype {
                return Err(ExecError::op(
                    op,
                    format!(
                        "`out` is {}{:?}, the product is {}{shape:?}",
                        out.spec.dtype, out.spec.size, a.spec.dtype
                    ),
                ));
            }
            (out.clone(), true)
        }
        None | Some(Value::None) => {
            let declared = call
                .expected
                .as_ref()
                .and_then(|e| e.concrete())
                .filter(|s| s.size == shape && s.dtype == a.spec.dtype);
            let spec = declared.unwrap_or_else(|| TensorSpec::contiguous(a.spec.dtype, a.spec.device, &shape));
            (backend.allocate(&spec)?, false)
        }
        Some(other) => {
            return Err(ExecError::op(
                op,
                format!("`out` must be a tensor, got {}", other.kind()),
            ))
        }
    };
    let p = Plan {
        op: op.to_string(),
        a,
        b,
        c,
        returns_out,
        batched,
    };
    Ok(operands(&p).map(|_| p))
}

fn matrix(t: &CudaTensor, batched: bool) -> Option<(Order, i64)> {
    let (s, st) = (&t.spec.size, &t.spec.stride);
    let r = s.len();
    let o = order(s[r - 2], s[r - 1], st[r - 2], st[r - 1])?;
    let batch_stride = if batched { st[0] } else { 0 };
    Some((o, batch_stride))
}

/// The GEMM for a plan, or `None` when a layout does not fit cuBLAS.
pub(super) fn operands(p: &Plan) -> Option<Gemm> {
    let (a, sa) = matrix(&p.a, p.batched)?;
    let (b, sb) = matrix(&p.b, p.batched)?;
    let (c, sc) = matrix(&p.c, p.batched)?;
    let size = &p.a.spec.size;
    let r = size.len();
    let (m, k, n) = (size[r - 2], size[r - 1], p.b.spec.size[r - 1]);
    let batch = if p.batched { size[0] } else { 1 };
    // cuBLAS writes C with one stride per batch; overlapping batches (stride
    // 0 with more than one) would race.
    if p.batched && batch > 1 && sc == 0 {
        return None;
    }
    let operand = |t: &CudaTensor, transpose: bool, ld: i64, batch_stride: i64| GemmOperand {
        ptr: t.data_ptr(),
        transpose,
        ld,
        batch_stride,
    };
    let dtype = data_type(p.a.spec.dtype)?;
    Some(match c {
        // C^T (n x m) = B^T A^T: row-major operands read column-major are already transposed.
        Order::Row(ldc) => Gemm {
            m: n,
            n: m,
            k,
            batch,
            a: match b {
                Order::Row(ld) => operand(&p.b, false, ld, sb),
                Order::Col(ld) => operand(&p.b, true, ld, sb),
            },
            b: match a {
                Order::Row(ld) => operand(&p.a, false, ld, sa),
                Order::Col(ld) => operand(&p.a, true, ld, sa),
            },
            c: operand(&p.c, false, ldc, sc),
            alpha: 1.0,
            beta: 0.0,
            dtype,
        },
        // C (m x n) = A B, column-major.
        Order::Col(ldc) => Gemm {
            m,
            n,
            k,
            batch,
            a: match a {
                Order::Col(ld) => operand(&p.a, false, ld, sa),
                Order::Row(ld) => operand(&p.a, true, ld, sa),
            },
            b: match b {
                Order::Col(ld) => operand(&p.b, false, ld, sb),
                Order::Row(ld) => operand(&p.b, true, ld, sb),
            },
            c: operand(&p.c, false, ldc, sc),
            alpha: 1.0,
            beta: 0.0,
            dtype,
        },
    })
}

/// Runs a planned matmul; returns `None` for `out=` calls, else the result.
pub(super) fn run(backend: &mut CudaBackend, p: Plan) -> Result<Value<CudaTensor>, ExecError> {
    let gemm = operands(&p).ok_or_else(|| ExecError::op(&p.op, "operand layouts changed after planning"))?;
    if gemm.m > 0 && gemm.n > 0 && gemm.batch > 0 {
        if backend.blas.is_none() {
            backend.blas = Some(backend.device.blas_handle()?);
        }
        library::submit(backend, Box::new(GemmCall { op: p.op.clone(), gemm }))?;
    }
    Ok(if p.returns_out { Value::None } else { Value::Tensor(p.c) })
}

/// A cuBLAS GEMM as a replayable library call.
#[derive(Debug)]
struct GemmCall {
    op: String,
    gemm: Gemm,
}

impl LibraryCall for GemmCall {
    fn op(&self) -> &str {
        &self.op
    }

    fn library(&self) -> &'static str {
        "cuBLAS"
    }

    fn addresses(&self) -> Vec<Address> {
        let g = &self.gemm;
        [(g.a.ptr, false), (g.b.ptr, false), (g.c.ptr, true)]
            .into_iter()
            .map(|(ptr, writes)| Address { ptr, writes })
            .collect()
    }

    fn rebased(&self, addresses: &[cudarc::driver::sys::CUdeviceptr]) -> Box<dyn LibraryCall> {
        let mut gemm = self.gemm;
        if let [a, b, c] = *addresses {
            (gemm.a.ptr, gemm.b.ptr, gemm.c.ptr) = (a, b, c);
        }
        Box::new(GemmCall {
            op: self.op.clone(),
            gemm,
        })
    }

    fn run(&self, backend: &CudaBackend) -> Result<(), ExecError> {
        match &backend.blas {
            Some(h) => h.gemm(&self.gemm).map_err(|e| ExecError::op(&self.op, e.to_string())),
            None => Err(ExecError::op(&self.op, "no cuBLAS handle (the recorded run created one)")),
        }
    }
}

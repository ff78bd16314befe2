//! cuDNN's graph (backend descriptor) API: descriptors destroyed on drop,
//! the tensor, pointwise, reduction, matmul and convolution nodes wrapir's
//! cuDNN graphs are made of, and plans chosen by cuDNN's heuristics as
//! PyTorch asks for them (mode A for attention; mode INSTANT then the
//! fallback list, with PyTorch's numerical-note filter, for convolutions)
//! that run with a variant pack of device pointers.
//!
//! Every call returns a [`CudaError`] naming it.

use super::dnn::{check, DnnHandle};
use super::driver::CudaError;
use cudarc::cudnn::sys as dnn;
use std::ffi::c_void;

use dnn::cudnnBackendAttributeName_t as Attr;
use dnn::cudnnBackendAttributeType_t as Ty;
use dnn::cudnnBackendDescriptorType_t as Kind;
pub(super) use dnn::cudnnBackendHeurMode_t as HeurMode;
pub(super) use dnn::cudnnDataType_t as DataType;
pub(super) use dnn::cudnnPointwiseMode_t as Pointwise;
pub(super) use dnn::cudnnReduceTensorOp_t as Reduce;

/// One backend descriptor; destroyed on drop.
#[derive(Debug)]
pub(super) struct Desc(dnn::cudnnBackendDescriptor_t);

impl Desc {
    fn new(kind: Kind) -> Result<Desc, CudaError> {
        let mut raw: dnn::cudnnBackendDescriptor_t = std::ptr::null_mut();
        // SAFETY: `raw` is a valid out-pointer.
        check("cudnnBackendCreateDescriptor", unsafe {
            dnn::cudnnBackendCreateDescriptor(kind, &mut raw)
        })?;
        Ok(Desc(raw))
    }

    /// Sets attribute `name` to `values`, elements of type `ty`.
    ///
    /// # Safety
    /// `T` is the C type `ty` names.
    unsafe fn set_raw<T>(&self, name: Attr, ty: Ty, values: &[T]) -> Result<(), CudaError> {
        let count = i64::try_from(values.len())
            .map_err(|_| CudaError::Range(format!("{} elements of a cuDNN attribute", values.len())))?;
        // SAFETY: the descriptor is live; `values` holds `count` elements of
        // the type `ty` names (the caller vouches for `T`).
        check("cudnnBackendSetAttribute", unsafe {
            dnn::cudnnBackendSetAttribute(self.0, name, ty, count, values.as_ptr().cast())
        })
    }

    /// Reads attribute `name` into at most `capacity` elements of type `ty`
    /// at `values` (null with `capacity` 0: a count query); returns how many
    /// elements the attribute has (with `capacity` > 0, how many were written).
    ///
    /// # Safety
    /// `values` points at room for `capacity` elements of the C type `ty`
    /// names (descriptor elements: descriptors created of the kind cuDNN fills).
    unsafe fn get_raw(&self, name: Attr, ty: Ty, capacity: i64, values: *mut c_void) -> Result<i64, CudaError> {
        let mut count = 0i64;
        // SAFETY: the descriptor is live; `count` is a valid out-pointer; the
        // caller vouches for `values`.
        check("cudnnBackendGetAttribute", unsafe {
            dnn::cudnnBackendGetAttribute(self.0, name, ty, capacity, &mut count, values)
        })?;
        Ok(count)
    }

    fn set_i64s(&self, name: Attr, values: &[i64]) -> Result<(), CudaError> {
        // SAFETY: int64 elements.
        unsafe { self.set_raw(name, Ty::CUDNN_TYPE_INT64, values) }
    }

    fn set_bool(&self, name: Attr, value: bool) -> Result<(), CudaError> {
        // SAFETY: one `bool` element (cuDNN's BOOLEAN is a C `bool`, one byte).
        unsafe { self.set_raw(name, Ty::CUDNN_TYPE_BOOLEAN, &[value]) }
    }

    fn set_dtype(&self, name: Attr, value: DataType) -> Result<(), CudaError> {
        // SAFETY: one `cudnnDataType_t` element.
        unsafe { self.set_raw(name, Ty::CUDNN_TYPE_DATA_TYPE, &[value]) }
    }

    fn set_desc(&self, name: Attr, value: &Desc) -> Result<(), CudaError> {
        self.set_descs(name, &[value])
    }

    /// Sets attribute `name` to the handles of `values`.
    fn set_descs(&self, name: Attr, values: &[&Desc]) -> Result<(), CudaError> {
        let raws: Vec<dnn::cudnnBackendDescriptor_t> = values.iter().map(|d| d.0).collect();
        // SAFETY: descriptor handles, live for the call.
        unsafe { self.set_raw(name, Ty::CUDNN_TYPE_BACKEND_DESCRIPTOR, &raws) }
    }

    /// Sets attribute `name` to one value of a cuDNN enum type.
    fn set_enum<E: BackendEnum>(&self, name: Attr, value: E) -> Result<(), CudaError> {
        // SAFETY: one element of the C enum type `E::TY` names.
        unsafe { self.set_raw(name, E::TY, &[value]) }
    }

    /// Sets attribute `name` to one `float`.
    fn set_f32(&self, name: Attr, value: f32) -> Result<(), CudaError> {
        // SAFETY: one `float`.
        unsafe { self.set_raw(name, Ty::CUDNN_TYPE_FLOAT, &[value]) }
    }

    /// Sets attribute `name` to the chars of `text` (as many as it holds).
    fn set_chars(&self, name: Attr, text: &[u8]) -> Result<(), CudaError> {
        // SAFETY: chars.
        unsafe { self.set_raw(name, Ty::CUDNN_TYPE_CHAR, text) }
    }

    /// Sets attribute `name` to the addresses `pointers` (cuDNN keeps them;
    /// nothing is read through them until the descriptor is executed).
    fn set_pointers(&self, name: Attr, pointers: &[*mut c_void]) -> Result<(), CudaError> {
        // SAFETY: `void *` elements.
        unsafe { self.set_raw(name, Ty::CUDNN_TYPE_VOID_PTR, pointers) }
    }

    /// Sets attribute `name` to the live handle `handle`.
    fn set_handle(&self, name: Attr, handle: &DnnHandle) -> Result<(), CudaError> {
        let raw = handle.raw();
        // SAFETY: one live handle.
        unsafe { self.set_raw(name, Ty::CUDNN_TYPE_HANDLE, &[raw]) }
    }

    fn finalize(&self) -> Result<(), CudaError> {
        // SAFETY: the descriptor is live.
        check("cudnnBackendFinalize", unsafe { dnn::cudnnBackendFinalize(self.0) })
    }
}

impl Drop for Desc {
    fn drop(&mut self) {
        // SAFETY: created once, destroyed once.
        let _ = unsafe { dnn::cudnnBackendDestroyDescriptor(self.0) };
    }
}

/// A cuDNN enum type and the attribute type that names it.
trait BackendEnum: Copy {
    const TY: Ty;
}

impl BackendEnum for Pointwise {
    const TY: Ty = Ty::CUDNN_TYPE_POINTWISE_MODE;
}

impl BackendEnum for Reduce {
    const TY: Ty = Ty::CUDNN_TYPE_REDUCTION_OPERATOR_TYPE;
}

impl BackendEnum for HeurMode {
    const TY: Ty = Ty::CUDNN_TYPE_HEUR_MODE;
}

impl BackendEnum for dnn::cudnnConvolutionMode_t {
    const TY: Ty = Ty::CUDNN_TYPE_CONVOLUTION_MODE;
}

/// A tensor of the graph (the variant pack names non-virtual ones by uid).
#[derive(Debug)]
struct Tensor {
    desc: Desc,
}

/// What a graph tensor is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Role {
    /// Device memory passed at execution, 16-byte aligned.
    Memory,
    /// Device memory passed at execution, aligned to this many bytes.
    MemoryAligned(i64),
    /// An intermediate no memory holds.
    Virtual,
    /// A host scalar passed by value at execution.
    ByValue,
}

/// A graph under construction: its tensors and operations, kept alive as
/// long as the plan made from them.
#[derive(Debug, Default)]
pub(super) struct Graph {
    tensors: Vec<Tensor>,
    ops: Vec<Desc>,
    next_virtual_uid: i64,
}

/// A graph tensor, by position.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct T(usize);

impl Graph {
    /// Adds a tensor (memory aligned as `role` says, else to 16 bytes);
    /// `uid` 0 gives a virtual tensor a fresh id.
    pub(super) fn tensor(
        &mut self,
        uid: i64,
        dtype: DataType,
        dims: &[i64],
        strides: &[i64],
        role: Role,
    ) -> Result<T, CudaError> {
        let alignment = match role {
            Role::MemoryAligned(bytes) => bytes,
            Role::Memory | Role::Virtual | Role::ByValue => 16,
        };
        let uid = if uid == 0 {
            self.next_virtual_uid += 1;
            1_000_000 + self.next_virtual_uid
        } else {
            uid
        };
        let desc = Desc::new(Kind::CUDNN_BACKEND_TENSOR_DESCRIPTOR)?;
        desc.set_dtype(Attr::CUDNN_ATTR_TENSOR_DATA_TYPE, dtype)?;
        desc.set_i64s(Attr::CUDNN_ATTR_TENSOR_DIMENSIONS, dims)?;
        desc.set_i64s(Attr::CUDNN_ATTR_TENSOR_STRIDES, strides)?;
        desc.set_i64s(Attr::CUDNN_ATTR_TENSOR_UNIQUE_ID, &[uid])?;
        desc.set_i64s(Attr::CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, &[alignment])?;
        desc.set_bool(Attr::CUDNN_ATTR_TENSOR_IS_VIRTUAL, role == Role::Virtual)?;
        if role == Role::ByValue {
            desc.set_bool(Attr::CUDNN_ATTR_TENSOR_IS_BY_VALUE, true)?;
        }
        desc.finalize()?;
        self.tensors.push(Tensor { desc });
        Ok(T(self.tensors.len() - 1))
    }

    /// A by-value f32 scalar (`[1, 1, 1, 1]`).
    pub(super) fn scalar(&mut self, uid: i64) -> Result<T, CudaError> {
        self.tensor(uid, DataType::CUDNN_DATA_FLOAT, &[1; 4], &[1; 4], Role::ByValue)
    }

    /// A pointwise node `y = mode(x, b, t)` computing in `math`; `axis` for
    /// `GEN_INDEX`.
    pub(super) fn pointwise(
        &mut self,
        mode: Pointwise,
        math: DataType,
        axis: Option<i64>,
        inputs: &[T],
        y: T,
    ) -> Result<(), CudaError> {
        let pw = Desc::new(Kind::CUDNN_BACKEND_POINTWISE_DESCRIPTOR)?;
        pw.set_enum(Attr::CUDNN_ATTR_POINTWISE_MODE, mode)?;
        pw.set_dtype(Attr::CUDNN_ATTR_POINTWISE_MATH_PREC, math)?;
        if let Some(axis) = axis {
            pw.set_i64s(Attr::CUDNN_ATTR_POINTWISE_AXIS, &[axis])?;
        }
        pw.finalize()?;
        let op = Desc::new(Kind::CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR)?;
        op.set_desc(Attr::CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, &pw)?;
        let slots = [
            Attr::CUDNN_ATTR_OPERATION_POINTWISE_XDESC,
            Attr::CUDNN_ATTR_OPERATION_POINTWISE_BDESC,
            Attr::CUDNN_ATTR_OPERATION_POINTWISE_TDESC,
        ];
        for (slot, t) in slots.iter().zip(inputs) {
            op.set_desc(*slot, self.desc(*t))?;
        }
        op.set_desc(Attr::CUDNN_ATTR_OPERATION_POINTWISE_YDESC, self.desc(y))?;
        self.push_node(pw, op)
    }

    /// A reduction node `y = reduce(x)` over the dimensions where `y` has size 1.
    pub(super) fn reduction(&mut self, operator: Reduce, x: T, y: T) -> Result<(), CudaError> {
        let r = Desc::new(Kind::CUDNN_BACKEND_REDUCTION_DESCRIPTOR)?;
        r.set_enum(Attr::CUDNN_ATTR_REDUCTION_OPERATOR, operator)?;
        r.set_dtype(Attr::CUDNN_ATTR_REDUCTION_COMP_TYPE, DataType::CUDNN_DATA_FLOAT)?;
        r.finalize()?;
        let op = Desc::new(Kind::CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR)?;
        op.set_desc(Attr::CUDNN_ATTR_OPERATION_REDUCTION_XDESC, self.desc(x))?;
        op.set_desc(Attr::CUDNN_ATTR_OPERATION_REDUCTION_YDESC, self.desc(y))?;
        op.set_desc(Attr::CUDNN_ATTR_OPERATION_REDUCTION_DESC, &r)?;
        self.push_node(r, op)
    }

    /// A batched matmul node `c = a b` with fp32 compute.
    pub(super) fn matmul(&mut self, a: T, b: T, c: T) -> Result<(), CudaError> {
        let m = Desc::new(Kind::CUDNN_BACKEND_MATMUL_DESCRIPTOR)?;
        m.set_dtype(Attr::CUDNN_ATTR_MATMUL_COMP_TYPE, DataType::CUDNN_DATA_FLOAT)?;
        m.finalize()?;
        let op = Desc::new(Kind::CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR)?;
        op.set_desc(Attr::CUDNN_ATTR_OPERATION_MATMUL_ADESC, self.desc(a))?;
        op.set_desc(Attr::CUDNN_ATTR_OPERATION_MATMUL_BDESC, self.desc(b))?;
        op.set_desc(Attr::CUDNN_ATTR_OPERATION_MATMUL_CDESC, self.desc(c))?;
        op.set_desc(Attr::CUDNN_ATTR_OPERATION_MATMUL_DESC, &m)?;
        self.push_node(m, op)
    }

    /// A convolution node with fp32 compute, cross-correlation, padding on
    /// both sides: forward (`y = conv(x, w)`) or backward-data (`x` is the
    /// gradient `dy`, `y` the result `dx`, as a transposed convolution runs).
    pub(super) fn convolution(
        &mut self,
        backward_data: bool,
        [x, w, y]: [T; 3],
        [padding, stride, dilation]: [&[i64]; 3],
    ) -> Result<(), CudaError> {
        let c = Desc::new(Kind::CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR)?;
        c.set_dtype(Attr::CUDNN_ATTR_CONVOLUTION_COMP_TYPE, DataType::CUDNN_DATA_FLOAT)?;
        c.set_enum(
            Attr::CUDNN_ATTR_CONVOLUTION_CONV_MODE,
            dnn::cudnnConvolutionMode_t::CUDNN_CROSS_CORRELATION,
        )?;
        c.set_i64s(Attr::CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, &[stride.len() as i64])?;
        c.set_i64s(Attr::CUDNN_ATTR_CONVOLUTION_DILATIONS, dilation)?;
        c.set_i64s(Attr::CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, stride)?;
        c.set_i64s(Attr::CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, padding)?;
        c.set_i64s(Attr::CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, padding)?;
        c.finalize()?;
        let (kind, [alpha, beta, desc, wa, xa, ya]) = if backward_data {
            (
                Kind::CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR,
                [
                    Attr::CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA,
                    Attr::CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA,
                    Attr::CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC,
                    Attr::CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W,
                    Attr::CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY,
                    Attr::CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX,
                ],
            )
        } else {
            (
                Kind::CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR,
                [
                    Attr::CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA,
                    Attr::CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA,
                    Attr::CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC,
                    Attr::CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W,
                    Attr::CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X,
                    Attr::CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y,
                ],
            )
        };
        let op = Desc::new(kind)?;
        op.set_f32(alpha, 1.0)?;
        op.set_f32(beta, 0.0)?;
        op.set_desc(desc, &c)?;
        op.set_desc(wa, self.desc(w))?;
        op.set_desc(xa, self.desc(x))?;
        op.set_desc(ya, self.desc(y))?;
        self.push_node(c, op)
    }

    /// The descriptor of graph tensor `t`.
    fn desc(&self, t: T) -> &Desc {
        &self.tensors[t.0].desc
    }

    /// Finalizes a node's operation descriptor `op` and keeps the node's own
    /// descriptor and `op` alive with the graph, in that order:
    /// [`Graph::plan_with`] takes the operations as every other entry.
    fn push_node(&mut self, desc: Desc, op: Desc) -> Result<(), CudaError> {
        op.finalize()?;
        self.ops.push(desc);
        self.ops.push(op);
        Ok(())
    }

    /// The operation graph on `handle`, the engine configurations cuDNN's
    /// heuristics (mode A) rank for it, and the first of them that makes an
    /// execution plan.
    pub(super) fn plan(self, handle: &DnnHandle) -> Result<Plan, CudaError> {
        self.plan_with(handle, &[HeurMode::CUDNN_HEUR_MODE_A], EngineFilter::default())
    }

    /// The operation graph on `handle` and the first engine configuration,
    /// in the order the heuristics `modes` rank them (one mode after the
    /// other) and `filter` lets through, that makes an execution plan.
    pub(super) fn plan_with(
        self,
        handle: &DnnHandle,
        modes: &[HeurMode],
        filter: EngineFilter,
    ) -> Result<Plan, CudaError> {
        let graph = Desc::new(Kind::CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR)?;
        // Operation descriptors are every other entry, after their own
        // descriptor (`push_node`).
        let ops: Vec<&Desc> = self.ops.iter().skip(1).step_by(2).collect();
        graph.set_descs(Attr::CUDNN_ATTR_OPERATIONGRAPH_OPS, &ops)?;
        let started = std::time::Instant::now();
        let mut cost = PlanCost::default();
        graph.set_handle(Attr::CUDNN_ATTR_OPERATIONGRAPH_HANDLE, handle)?;
        graph.finalize()?;

        let mut last = CudaError::Dnn {
            call: "cudnnBackendGetAttribute",
            status: "cuDNN's heuristics offered no engine for the graph".to_string(),
        };
        for &mode in modes {
            let configs = engine_configs(&graph, mode)?;
            cost.heuristics = started.elapsed().saturating_sub(cost.finalize);
            for config in configs {
                if filter.rejects(&config)? {
                    continue;
                }
                let finalizing = std::time::Instant::now();
                let made = execution_plan(handle, &config);
                cost.finalize += finalizing.elapsed();
                match made {
                    Ok((plan, workspace)) => {
                        let behaviour = engine_notes(
                            &engine_of(&config)?,
                            Attr::CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE,
                            Ty::CUDNN_TYPE_BEHAVIOR_NOTE,
                        )?;
                        cost.runtime_compiled = behaviour.contains(
                            &(dnn::cudnnBackendBehaviorNote_t::CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION as i32),
                        );
                        return Ok(Plan {
                            plan,
                            workspace,
                            cost,
                            _graph: Some(graph),
                            _parts: self,
                        });
                    }
                    Err(e) => last = e,
                }
            }
        }
        Err(last)
    }
}

/// Which engines a plan may use, by their numerical notes (PyTorch's
/// `filterEngineConfigs` for convolutions).
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct EngineFilter {
    /// Skip engines that convert inputs to a narrower type.
    pub(super) no_down_convert: bool,
    /// Skip tensor-core engines (fp32 with TF32 off).
    pub(super) no_tensor_core: bool,
}

impl EngineFilter {
    fn rejects(&self, config: &Desc) -> Result<bool, CudaError> {
        if !self.no_down_convert && !self.no_tensor_core {
            return Ok(false);
        }
        let notes = engine_notes(
            &engine_of(config)?,
            Attr::CUDNN_ATTR_ENGINE_NUMERICAL_NOTE,
            Ty::CUDNN_TYPE_NUMERICAL_NOTE,
        )?;
        let has = |note: dnn::cudnnBackendNumericalNote_t| notes.contains(&(note as i32));
        Ok(
            (self.no_down_convert && has(dnn::cudnnBackendNumericalNote_t::CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS))
                || (self.no_tensor_core && has(dnn::cudnnBackendNumericalNote_t::CUDNN_NUMERICAL_NOTE_TENSOR_CORE)),
        )
    }
}

/// The engine of an engine configuration.
fn engine_of(config: &Desc) -> Result<Desc, CudaError> {
    let engine = Desc::new(Kind::CUDNN_BACKEND_ENGINE_DESCRIPTOR)?;
    let mut raw = engine.0;
    // SAFETY: one created engine descriptor cuDNN fills from the config.
    unsafe {
        config.get_raw(
            Attr::CUDNN_ATTR_ENGINECFG_ENGINE,
            Ty::CUDNN_TYPE_BACKEND_DESCRIPTOR,
            1,
            (&mut raw as *mut dnn::cudnnBackendDescriptor_t).cast(),
        )
    }?;
    Ok(engine)
}

/// An engine's notes of kind `attr` (numerical or behaviour), as C ints:
/// cuDNN may report notes this binding has no variant for.
fn engine_notes(engine: &Desc, attr: Attr, ty: Ty) -> Result<Vec<i32>, CudaError> {
    let mut notes = [0i32; 16];
    // SAFETY: `notes` holds 16 enum-sized elements.
    let count = unsafe { engine.get_raw(attr, ty, notes.len() as i64, notes.as_mut_ptr().cast()) }?;
    Ok(notes[..count.clamp(0, 16) as usize].to_vec())
}

/// What making one plan cost.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct PlanCost {
    /// Finalizing the graph and querying the heuristics.
    pub(super) heuristics: std::time::Duration,
    /// Finalizing execution plans (the rejected ones' included): where an
    /// engine compiles its kernels.
    pub(super) finalize: std::time::Duration,
    /// The chosen engine compiles its kernels at run time (cuDNN's
    /// behaviour note `RUNTIME_COMPILATION`).
    pub(super) runtime_compiled: bool,
    /// Restored from its JSON form ([`Plan::from_json`]) rather than made.
    pub(super) restored: bool,
}

/// The engine configurations heuristics `mode` ranks for `graph`, best first.
fn engine_configs(graph: &Desc, mode: HeurMode) -> Result<Vec<Desc>, CudaError> {
    let heur = Desc::new(Kind::CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR)?;
    heur.set_desc(Attr::CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph)?;
    heur.set_enum(Attr::CUDNN_ATTR_ENGINEHEUR_MODE, mode)?;
    heur.finalize()?;
    // SAFETY: a count query (no elements requested).
    let count = unsafe {
        heur.get_raw(
            Attr::CUDNN_ATTR_ENGINEHEUR_RESULTS,
            Ty::CUDNN_TYPE_BACKEND_DESCRIPTOR,
            0,
            std::ptr::null_mut(),
        )
    }?;
    let wanted = count.clamp(0, 64);
    let mut configs: Vec<Desc> = (0..wanted)
        .map(|_| Desc::new(Kind::CUDNN_BACKEND_ENGINECFG_DESCRIPTOR))
        .collect::<Result<_, _>>()?;
    let mut raws: Vec<dnn::cudnnBackendDescriptor_t> = configs.iter().map(|d| d.0).collect();
    // SAFETY: `raws` holds `wanted` created engine-config descriptors cuDNN fills.
    let got = unsafe {
        heur.get_raw(
            Attr::CUDNN_ATTR_ENGINEHEUR_RESULTS,
            Ty::CUDNN_TYPE_BACKEND_DESCRIPTOR,
            wanted,
            raws.as_mut_ptr().cast(),
        )
    }?;
    configs.truncate(got.clamp(0, wanted) as usize);
    Ok(configs)
}

/// A finalized execution plan of `config` and the workspace bytes it needs.
fn execution_plan(handle: &DnnHandle, config: &Desc) -> Result<(Desc, usize), CudaError> {
    let plan = Desc::new(Kind::CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR)?;
    plan.set_handle(Attr::CUDNN_ATTR_EXECUTION_PLAN_HANDLE, handle)?;
    plan.set_desc(Attr::CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, config)?;
    plan.finalize()?;
    let workspace = workspace_of(&plan)?;
    Ok((plan, workspace))
}

/// The workspace bytes a finalized plan needs.
fn workspace_of(plan: &Desc) -> Result<usize, CudaError> {
    let mut workspace = 0i64;
    // SAFETY: one int64 element.
    unsafe {
        plan.get_raw(
            Attr::CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
            Ty::CUDNN_TYPE_INT64,
            1,
            (&mut workspace as *mut i64).cast(),
        )
    }?;
    usize::try_from(workspace)
        .map_err(|_| CudaError::Range(format!("cuDNN asked for a workspace of {workspace} bytes")))
}

/// An execution plan and everything it was made from.
#[derive(Debug)]
pub(super) struct Plan {
    plan: Desc,
    /// Bytes of device workspace an execution needs.
    pub(super) workspace: usize,
    /// What making it cost.
    pub(super) cost: PlanCost,
    /// The operation graph (`None` for a plan restored from its JSON form).
    _graph: Option<Desc>,
    _parts: Graph,
}

impl Plan {
    /// The plan's JSON form (cuDNN's own serialization, which it offers for
    /// engines that compile at run time), for [`Plan::from_json`] in a later
    /// process on an identical GPU with the same cuDNN.
    pub(super) fn json(&self) -> Result<Vec<u8>, CudaError> {
        let json = Attr::CUDNN_ATTR_EXECUTION_PLAN_JSON_REPRESENTATION;
        // SAFETY: a length query (no elements requested).
        let count = unsafe { self.plan.get_raw(json, Ty::CUDNN_TYPE_CHAR, 0, std::ptr::null_mut()) }?;
        let len = usize::try_from(count)
            .ok()
            .filter(|&n| n > 0 && n <= 64 << 20)
            .ok_or_else(|| CudaError::Range(format!("cuDNN's plan JSON of {count} bytes")))?;
        let mut text = vec![0u8; len];
        // SAFETY: `text` holds `len` (= `count`) chars for cuDNN to fill.
        let got = unsafe {
            self.plan
                .get_raw(json, Ty::CUDNN_TYPE_CHAR, count, text.as_mut_ptr().cast())
        }?;
        text.truncate(got.clamp(0, count) as usize);
        while text.last() == Some(&0) {
            text.pop();
        }
        Ok(text)
    }

    /// A plan restored on `handle` from its [`Plan::json`] form.
    pub(super) fn from_json(handle: &DnnHandle, json: &[u8]) -> Result<Plan, CudaError> {
        let started = std::time::Instant::now();
        let plan = Desc::new(Kind::CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR)?;
        plan.set_handle(Attr::CUDNN_ATTR_EXECUTION_PLAN_HANDLE, handle)?;
        // cuDNN reads the text up to its length; a trailing NUL as C strings have it.
        let mut text = json.to_vec();
        text.push(0);
        plan.set_chars(Attr::CUDNN_ATTR_EXECUTION_PLAN_JSON_REPRESENTATION, &text)?;
        plan.finalize()?;
        let workspace = workspace_of(&plan)?;
        Ok(Plan {
            plan,
            workspace,
            cost: PlanCost {
                finalize: started.elapsed(),
                runtime_compiled: true,
                restored: true,
                ..PlanCost::default()
            },
            _graph: None,
            _parts: Graph::default(),
        })
    }

    /// Queues the plan on the handle's stream with the tensors `uids` at
    /// `pointers` (device addresses, or host addresses of by-value scalars)
    /// and `workspace` (at least [`Plan::workspace`] bytes, or 0 when none).
    ///
    /// # Safety
    /// Every pointer is live for the execution: device memory of the size
    /// and layout its tensor declares, ordered on the handle's stream, and
    /// by-value scalars readable until this call returns.
    pub(super) unsafe fn execute(
        &self,
        handle: &DnnHandle,
        uids: &[i64],
        pointers: &[*mut c_void],
        workspace: *mut c_void,
    ) -> Result<(), CudaError> {
        let pack = Desc::new(Kind::CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR)?;
        pack.set_i64s(Attr::CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, uids)?;
        pack.set_pointers(Attr::CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, pointers)?;
        pack.set_pointers(
            Attr::CUDNN_ATTR_VARIANT_PACK_WORKSPACE,
            std::slice::from_ref(&workspace),
        )?;
        pack.finalize()?;
        // SAFETY: handle, plan and pack are live; the caller vouches for the pointers.
        check("cudnnBackendExecute", unsafe {
            dnn::cudnnBackendExecute(handle.raw(), self.plan.0, pack.0)
        })
    }
}

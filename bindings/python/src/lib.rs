//! `wrapir._wrapir`, the compiled part of the `wrapir` Python package: a
//! [`wrapir::runtime::Model`] as a Python object. The package's
//! `__init__.py` turns PyTorch tensors and NumPy arrays into DLPack
//! capsules for [`Model::call`] and its DLPack outputs back into tensors.

mod dlpack;

use indexmap::IndexMap;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes, PyCapsule, PyDict, PyList, PyTuple};
use std::path::PathBuf;
use std::sync::Arc;
use wrapir::exec::{ExecError, RunError, Tensor, Value};
use wrapir::runtime::{Device, ModelError, ModelOptions};

pyo3::create_exception!(
    wrapir,
    Error,
    pyo3::exceptions::PyRuntimeError,
    "A model could not be loaded or run (bad inputs raise ValueError or TypeError)."
);

/// Whether `e` says the call's inputs do not match the program.
fn is_input_error(e: &ModelError) -> bool {
    matches!(
        e,
        ModelError::Exec(ExecError::Input(_) | ExecError::Limit(_))
            | ModelError::Run(RunError::Exec(ExecError::Input(_) | ExecError::Limit(_)))
    )
}

/// A load or run error as Python's: bad inputs are `ValueError`s, the rest `wrapir.Error`.
fn to_py(e: ModelError) -> PyErr {
    if is_input_error(&e) {
        PyValueError::new_err(e.to_string())
    } else {
        Error::new_err(e.to_string())
    }
}

/// The alignment, in bytes, of a CUDA input's data that the model's kernels
/// assume (Inductor's `ALIGNMENT`, Triton's pointer divisibility).
#[cfg(feature = "cuda")]
const INPUT_ALIGNMENT: u64 = 16;

/// A loaded model (`wrapir.load`): call it with tensors. Safe to call from
/// several Python threads at once; the GIL is released while it runs.
#[pyclass(frozen, module = "wrapir._wrapir")]
struct Model {
    inner: Arc<wrapir::runtime::Model>,
    limits: wrapir::Limits,
}

/// `load(source, device, scratch_dir, idle_sessions)`: `source` is a path
/// (a bundle directory or `.wirpkg` package) or the bytes of a package.
#[pyfunction]
#[pyo3(signature = (source, device = "cpu", scratch_dir = None, idle_sessions = None))]
fn load(
    py: Python<'_>,
    source: &Bound<'_, PyAny>,
    device: &str,
    scratch_dir: Option<PathBuf>,
    idle_sessions: Option<usize>,
) -> PyResult<Model> {
    let device: Device = device.parse().map_err(PyValueError::new_err)?;
    let defaults = ModelOptions::default();
    let options = ModelOptions {
        device,
        scratch_dir,
        idle_sessions: idle_sessions.unwrap_or(defaults.idle_sessions),
        ..defaults
    };
    let bytes = if let Ok(b) = source.cast::<PyBytes>() {
        Some(b.as_bytes().to_vec())
    } else if let Ok(b) = source.cast::<PyByteArray>() {
        Some(b.to_vec())
    } else {
        None
    };
    let model = if let Some(bytes) = bytes {
        py.detach(|| wrapir::runtime::Model::from_bytes(bytes, &options))
    } else {
        let path: PathBuf = source.extract().map_err(|_| {
            PyTypeError::new_err(format!(
                "load() takes a path or the bytes of a package, not {}",
                source.get_type().name().map_or("this".into(), |n| n.to_string())
            ))
        })?;
        py.detach(|| wrapir::runtime::Model::load(&path, &options))
    };
    Ok(Model {
        inner: Arc::new(model.map_err(to_py)?),
        limits: options.limits,
    })
}

#[pymethods]
impl Model {
    /// The names of the inputs each call takes, in order.
    #[getter]
    fn input_names(&self) -> Vec<String> {
        self.inner.input_names().to_vec()
    }

    /// The names of the inputs a call writes (the bundle's
    /// `mutated_inputs`; empty when it does not record them).
    #[getter]
    fn mutated_inputs(&self) -> Vec<String> {
        self.inner.mutated_inputs().to_vec()
    }

    /// The device the model runs on (`cpu`, `cuda:N`).
    #[getter]
    fn device(&self) -> String {
        self.inner.device().to_string()
    }

    /// Seconds the load took (opening the package to ready).
    #[getter]
    fn load_seconds(&self) -> f64 {
        self.inner.load_report().total.as_secs_f64()
    }

    /// Runs one call. `args` and `kwargs` are DLPack capsules of dense CPU
    /// tensors (or ints, for symbol inputs), positional in
    /// [`Model::input_names`] order or by name. Returns the outputs: a
    /// capsule per tensor, Python numbers, lists and `None` for the rest.
    #[pyo3(signature = (*args, **kwargs))]
    fn call<'py>(
        &self,
        py: Python<'py>,
        args: &Bound<'py, PyTuple>,
        kwargs: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyList>> {
        let inputs = self.named_inputs(args, kwargs, &mut |name, value| self.input(name, value))?;
        let model = &*self.inner;
        let outputs = py.detach(|| model.run(&inputs)).map_err(to_py)?;
        drop(inputs);
        let list = PyList::empty(py);
        for value in outputs {
            list.append(to_python(py, value, &mut |py, t| dlpack::capsule_of(py, t))?)?;
        }
        Ok(list)
    }

    /// Runs one call on CUDA tensors in place, without a copy (a model on a
    /// CUDA device). `args` and `kwargs` are DLPack capsules of CUDA tensors
    /// on the model's device (`kDLCUDA`), as [`Model::call`] takes them;
    /// `stream` is the caller's current `CUstream` of that device (PyTorch's
    /// `torch.cuda.current_stream(device).cuda_stream`; 0: the legacy
    /// default stream): the inputs are read after its work so far, and it
    /// waits for the outputs. Each capsule's tensor is held until the call's
    /// work is queued; a tensor the program writes (the bundle's mutated
    /// inputs) is written in place. Returns the outputs as [`Model::call`]
    /// does, tensors as `kDLCUDA` capsules of device memory of their own.
    #[pyo3(signature = (stream, *args, **kwargs))]
    fn call_device<'py>(
        &self,
        py: Python<'py>,
        stream: u64,
        args: &Bound<'py, PyTuple>,
        kwargs: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyList>> {
        #[cfg(feature = "cuda")]
        {
            let (Some(cuda), wrapir::runtime::Device::Cuda(ordinal)) = (self.inner.as_cuda(), self.inner.device())
            else {
                return Err(PyValueError::new_err(format!(
                    "the model runs on {}; it reads CPU tensors (use .cpu())",
                    self.inner.device()
                )));
            };
            let mut lent = Vec::new();
            let inputs = self.named_inputs(args, kwargs, &mut |name, value| {
                let capsule = value.cast::<PyCapsule>().map_err(|_| {
                    PyTypeError::new_err(format!(
                        "input `{name}`: a call on CUDA tensors takes tensors only, not {}",
                        value.get_type().name().map_or("this".into(), |n| n.to_string())
                    ))
                })?;
                let (tensor, view) = dlpack::cuda_input(name, capsule)?;
                lent.push(tensor);
                if view.device != ordinal {
                    return Err(PyValueError::new_err(format!(
                        "input `{name}` is on cuda:{}; the model runs on cuda:{ordinal}",
                        view.device
                    )));
                }
                // Inductor's kernels assume their inputs aligned (Triton's
                // pointer divisibility); one that is not would fault on the
                // device and end the process's CUDA context.
                if view.bytes > 0 && view.ptr % INPUT_ALIGNMENT != 0 {
                    return Err(PyValueError::new_err(format!(
                        "input `{name}`: its data at {:#x} is not {INPUT_ALIGNMENT}-byte aligned, as the \
                         model's kernels assume (pass a copy: `.clone()`)",
                        view.ptr
                    )));
                }
                Ok(wrapir::runtime::cuda::DeviceInput {
                    ptr: view.ptr,
                    bytes: view.bytes,
                    spec: view.spec,
                })
            })?;
            // SAFETY: each input is the view of a live CUDA tensor of the
            // model's device (checked above) reaching `bytes` bytes from
            // `ptr`, lent by its producer until `lent` drops, after the call
            // has queued its work; the caller (the package's `__init__.py`)
            // records each tensor's use on `stream`, so the caching allocator
            // does not reuse its memory before `stream` has passed the call.
            // `stream` is the caller's current stream of the model's device:
            // PyTorch's streams live as long as the process.
            let outputs = py.detach(|| unsafe { cuda.run_device(&inputs, stream) });
            drop(lent);
            let list = PyList::empty(py);
            for value in outputs.map_err(to_py)? {
                list.append(to_python(py, value, &mut |py, t| {
                    dlpack::device_capsule_of(py, t, ordinal)
                })?)?;
            }
            Ok(list)
        }
        #[cfg(not(feature = "cuda"))]
        {
            let _ = (py, stream, args, kwargs);
            Err(Error::new_err("this build of wrapir has no CUDA"))
        }
    }

    fn __repr__(&self) -> String {
        format!(
            "<wrapir.Model on {} with inputs ({})>",
            self.inner.device(),
            self.inner.input_names().join(", ")
        )
    }
}

impl Model {
    /// The call's inputs by name: `args` positional in
    /// [`Model::input_names`] order, then `kwargs`, each read by `read`.
    fn named_inputs<T>(
        &self,
        args: &Bound<'_, PyTuple>,
        kwargs: Option<&Bound<'_, PyDict>>,
        read: &mut dyn FnMut(&str, &Bound<'_, PyAny>) -> PyResult<T>,
    ) -> PyResult<IndexMap<String, T>> {
        let names = self.inner.input_names();
        if args.len() > names.len() {
            return Err(PyTypeError::new_err(format!(
                "the model takes {} inputs ({}), {} were given",
                names.len(),
                names.join(", "),
                args.len()
            )));
        }
        let mut inputs: IndexMap<String, T> = IndexMap::new();
        for (name, value) in names.iter().zip(args.iter()) {
            inputs.insert(name.clone(), read(name, &value)?);
        }
        if let Some(kwargs) = kwargs {
            for (key, value) in kwargs.iter() {
                let name: String = key.extract()?;
                if inputs.contains_key(&name) {
                    return Err(PyTypeError::new_err(format!("input `{name}` was given twice")));
                }
                let tensor = read(&name, &value)?;
                inputs.insert(name, tensor);
            }
        }
        Ok(inputs)
    }

    /// One input: a DLPack capsule (copied into a host tensor) or an int (a
    /// symbol input's value).
    fn input(&self, name: &str, value: &Bound<'_, PyAny>) -> PyResult<Tensor> {
        if let Ok(capsule) = value.cast::<PyCapsule>() {
            return dlpack::tensor_from_capsule(name, capsule, &self.limits);
        }
        if let Ok(v) = value.extract::<i64>() {
            return Ok(Tensor::scalar(v));
        }
        Err(PyTypeError::new_err(format!(
            "input `{name}`: expected a tensor, an array or an int, not {}",
            value.get_type().name().map_or("this".into(), |n| n.to_string())
        )))
    }
}

/// An output as Python's: a tensor as a DLPack capsule (made by `capsule`),
/// a number as one.
fn to_python<'py, T>(
    py: Python<'py>,
    value: Value<T>,
    capsule: &mut dyn FnMut(Python<'py>, T) -> PyResult<Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyAny>> {
    Ok(match value {
        Value::Tensor(t) => capsule(py, t)?,
        Value::Int(v) => v.into_pyobject(py)?.into_any(),
        Value::Float(v) => v.into_pyobject(py)?.into_any(),
        Value::Bool(v) => pyo3::types::PyBool::new(py, v).to_owned().into_any(),
        Value::None => py.None().into_bound(py),
        Value::Str(s) => s.into_pyobject(py)?.into_any(),
        Value::List(items) => {
            let list = PyList::empty(py);
            for item in items {
                list.append(to_python(py, item, capsule)?)?;
            }
            list.into_any()
        }
        other => {
            return Err(Error::new_err(format!(
                "an output is a {}, which has no Python form here",
                other.kind()
            )))
        }
    })
}

/// The compiled part of the `wrapir` package.
#[pymodule]
fn _wrapir(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Model>()?;
    m.add_function(wrap_pyfunction!(load, m)?)?;
    m.add("Error", m.py().get_type::<Error>())?;
    m.add("DEVICE_CPU", dlpack::DEVICE_CPU)?;
    m.add("DEVICE_CUDA", dlpack::DEVICE_CUDA)?;
    m.add("CUDA", cfg!(feature = "cuda"))?;
    Ok(())
}

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
        let names = self.inner.input_names();
        if args.len() > names.len() {
            return Err(PyTypeError::new_err(format!(
                "the model takes {} inputs ({}), {} were given",
                names.len(),
                names.join(", "),
                args.len()
            )));
        }
        let mut inputs: IndexMap<String, Tensor> = IndexMap::new();
        for (name, value) in names.iter().zip(args.iter()) {
            inputs.insert(name.clone(), self.input(name, &value)?);
        }
        if let Some(kwargs) = kwargs {
            for (key, value) in kwargs.iter() {
                let name: String = key.extract()?;
                if inputs.contains_key(&name) {
                    return Err(PyTypeError::new_err(format!("input `{name}` was given twice")));
                }
                let tensor = self.input(&name, &value)?;
                inputs.insert(name, tensor);
            }
        }
        let model = &*self.inner;
        let outputs = py.detach(|| model.run(&inputs)).map_err(to_py)?;
        drop(inputs);
        let list = PyList::empty(py);
        for value in outputs {
            list.append(to_python(py, value)?)?;
        }
        Ok(list)
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

/// An output as Python's: a tensor as a DLPack capsule, a number as one.
fn to_python(py: Python<'_>, value: Value<Tensor>) -> PyResult<Bound<'_, PyAny>> {
    Ok(match value {
        Value::Tensor(t) => dlpack::capsule_of(py, t)?,
        Value::Int(v) => v.into_pyobject(py)?.into_any(),
        Value::Float(v) => v.into_pyobject(py)?.into_any(),
        Value::Bool(v) => pyo3::types::PyBool::new(py, v).to_owned().into_any(),
        Value::None => py.None().into_bound(py),
        Value::Str(s) => s.into_pyobject(py)?.into_any(),
        Value::List(items) => {
            let list = PyList::empty(py);
            for item in items {
                list.append(to_python(py, item)?)?;
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
    m.add("CUDA", cfg!(feature = "cuda"))?;
    Ok(())
}

//! Serving a model: load a package or bundle once, then call it from many
//! threads, on the CPU or on a GPU, through one [`Model`] and [`Session`].
//!
//! [`Model::load`] opens a bundle directory or a `.wirpkg` package (through
//! `bundle`), [`Model::from_bytes`] a package held in memory, and
//! [`Model::from_source`] anything else that supplies a program, its
//! weights and its kernel images (a [`ModelSource`]). Loading validates the
//! program, compiles its plan, checks that the device can run every kernel
//! and extern op, loads the kernels and lays out the weights (the bundle's
//! `weights` inputs) once; every call then supplies only the other inputs,
//! by graph input name ([`Model::input_names`]), as host tensors, and gets
//! the outputs back as host tensors.
//!
//! The device is [`ModelOptions::device`]:
//!
//! * [`Device::Cpu`] (every build): the host backend, with the bundle's
//!   compiled C++ and Halide kernels (`exec::host::kernels`) and the host's
//!   extern ops. Each [`Session`] is a host backend of its own sharing the
//!   plan, the weights and the loaded kernels.
//! * [`Device::Cuda`] (feature `cuda`): the CUDA backend's model
//!   ([`cuda::Model`]): weights on the
//!   device, one stream, arena and set of recordings per session. A build
//!   without the feature answers a CUDA request with an error saying so.
//!
//! A [`Model`] is `Send + Sync`: [`Model::run`] borrows an idle session (or
//! opens one) per call, so threads that call it at once run on sessions of
//! their own. A thread that makes many calls can keep one with
//! [`Model::session`].
//!
//! ## Mutated inputs
//!
//! A program may write into its inputs: a KV-cache decode step updates its
//! caches in place, as the PyTorch function it was compiled from did.
//! [`Model::mutated_inputs`] names them (`bundle.json`'s `mutated_inputs`,
//! recorded by the exporter; empty for a bundle exported before they were
//! recorded, even if its program writes some). Their new values come back
//! as they would from the PyTorch call:
//!
//! * [`Device::Cpu`]: in the caller's tensors. A call works on the tensors
//!   given: one in its declared layout is the program's buffer itself and is
//!   written in place; one that had to be laid out is copied back after the
//!   call. After [`Model::run`] returns, each mutated input's tensor holds
//!   its new value (clones of a tensor share its storage and see it too).
//! * [`Device::Cuda`]: [`Model::run`] and [`Session::run`] with host
//!   tensors run on the session's device copies and copy each mutated
//!   input's new value back into the caller's tensor after the call;
//!   `cuda::Session::run_device` (feature `cuda`, through
//!   `Session::as_cuda_mut`) and `cuda::Model::run_device` (through
//!   `Model::as_cuda`; outputs of the caller's own, as the Python package
//!   uses it for CUDA tensors) take the caller's device buffers in place, so
//!   the writes land in them and nothing is copied (keep a cache on the
//!   device this way).
//!
//! A mutated input that is a weight (a module buffer the program writes) is
//! the model's own and shared by its sessions: every call changes it.
//!
//! Inputs are checked as every run checks them: a missing or unknown name,
//! a dtype or rank other than declared, or a size outside a dynamic
//! program's declared range is an error naming the input (and the
//! dimension, symbol and range).
//!
//! ```
//! # fn main() -> Result<(), wrapir::runtime::ModelError> {
//! use wrapir::runtime::{Model, ModelOptions};
//! let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/inductor/bundles_cpu/cpp/softmax");
//! let model = Model::load(dir, &ModelOptions::default())?; // the CPU by default
//! let bundle = wrapir::bundle::Bundle::open(std::path::Path::new(dir)).expect("opens");
//! let inputs = bundle.inputs().expect("readable").expect("the bundle stores its inputs");
//! let outputs = model.run(&inputs)?;
//! assert_eq!(outputs.len(), 1);
//! # Ok(())
//! # }
//! ```

pub mod bench;
mod cpu;
#[cfg(feature = "cuda")]
#[cfg_attr(docsrs, doc(cfg(feature = "cuda")))]
pub mod cuda;
// Without the `cuda` feature: the few names callers use in both builds,
// whose entry points fail.
#[cfg(not(feature = "cuda"))]
#[path = "cuda_standin.rs"]
pub mod cuda;

pub use crate::exec::model_source::{CudnnPlans, ModelError, ModelSource};

use crate::bundle::{Bundle, SharedBytes};
use crate::exec::{Tensor, Value};
use crate::ir::Program;
use indexmap::IndexMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Where a model runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Device {
    /// The host CPU (every build).
    #[default]
    Cpu,
    /// The CUDA device of this ordinal (a build with the `cuda` feature).
    Cuda(usize),
}

impl std::fmt::Display for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Device::Cpu => f.write_str("cpu"),
            Device::Cuda(n) => write!(f, "cuda:{n}"),
        }
    }
}

impl std::str::FromStr for Device {
    type Err = String;

    /// `cpu`, `cuda` (device 0) or `cuda:N`.
    fn from_str(s: &str) -> Result<Device, String> {
        let bad = || format!("unknown device `{s}`: expected `cpu`, `cuda` or `cuda:N`");
        match s {
            "cpu" => Ok(Device::Cpu),
            "cuda" => Ok(Device::Cuda(0)),
            _ => match s.strip_prefix("cuda:") {
                Some(n) if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) => {
                    n.parse().map(Device::Cuda).map_err(|_| bad())
                }
                _ => Err(bad()),
            },
        }
    }
}

/// How [`Model::load`] prepares a model.
#[derive(Clone, Debug)]
pub struct ModelOptions {
    /// Where the model runs (default [`Device::Cpu`]).
    pub device: Device,
    /// Bounds on the package, the program and each run.
    pub limits: crate::Limits,
    /// Idle sessions kept for later calls (default: the machine's
    /// parallelism); more threads at once open more, closed after their call.
    pub idle_sessions: usize,
    /// Where a package's compiled host kernels may be written to be loaded
    /// when they cannot load from memory (Halide kernels, which find their
    /// runtime through `$ORIGIN`; a system without anonymous in-memory
    /// files): a private directory is made inside it and removed once they
    /// are loaded. `None` (the default) writes nothing, and such a package
    /// is an error that says to set this. A package's C++ kernels load from
    /// anonymous in-memory files on Linux; bundle directories load their
    /// kernels in place.
    pub scratch_dir: Option<PathBuf>,
    /// The CUDA backend's settings (used when [`ModelOptions::device`] is a
    /// CUDA device).
    #[cfg(feature = "cuda")]
    #[cfg_attr(docsrs, doc(cfg(feature = "cuda")))]
    pub cuda: CudaSettings,
}

impl Default for ModelOptions {
    fn default() -> Self {
        ModelOptions {
            device: Device::Cpu,
            limits: crate::Limits::default(),
            idle_sessions: std::thread::available_parallelism().map_or(4, |n| n.get()),
            scratch_dir: None,
            #[cfg(feature = "cuda")]
            cuda: CudaSettings::default(),
        }
    }
}

#[cfg(feature = "cuda")]
pub use cuda::CudaSettings;

/// What [`Model::load`] did and how long it took.
#[derive(Clone, Debug, Default)]
pub struct LoadReport {
    /// The device that runs the model: `cpu`, or the GPU's name.
    pub device: String,
    /// Kernels loaded (compiled host kernels, or kernel images on a GPU).
    pub kernels: usize,
    /// Weight tensors laid out (or uploaded).
    pub weights: usize,
    /// Their bytes.
    pub weight_bytes: u64,
    /// The whole of the load, from opening the package to the model ready.
    pub total: Duration,
}

/// A model loaded on one device, ready to serve calls from many threads
/// (see the [module documentation](self)).
pub struct Model {
    inner: Inner,
    device: Device,
    report: LoadReport,
    /// The graph inputs the program writes (`bundle.json`'s `mutated_inputs`).
    mutated_inputs: Vec<String>,
}

enum Inner {
    Cpu(cpu::CpuModel),
    #[cfg(feature = "cuda")]
    Cuda(cuda::Model),
}

// `Model` is shared by the threads that call it; a session moves to one.
const _: fn() = || {
    fn send_sync<T: Send + Sync>() {}
    fn send<T: Send>() {}
    send_sync::<Model>();
    send::<Session>();
};

impl std::fmt::Debug for Model {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Model")
            .field("device", &self.device)
            .field("inputs", &self.input_names())
            .field("report", &self.report)
            .finish()
    }
}

/// How errors name a package given as bytes.
pub const IN_MEMORY: &str = "<package in memory>";

impl Model {
    /// Loads the bundle directory or package at `path` on
    /// [`ModelOptions::device`], opened within [`ModelOptions::limits`].
    pub fn load(path: impl AsRef<Path>, options: &ModelOptions) -> Result<Model, ModelError> {
        let started = Instant::now();
        let bundle = crate::bundle::model::open_for_model(path.as_ref(), &options.limits)?;
        Model::load_from(&bundle, options, started)
    }

    /// Loads a package held in memory (the bytes of a `.wirpkg`), named
    /// [`IN_MEMORY`] in errors. Nothing is written to a file, except a CPU
    /// program's compiled kernels that cannot load from memory, into
    /// [`ModelOptions::scratch_dir`] when the caller sets it.
    pub fn from_bytes(bytes: impl Into<SharedBytes>, options: &ModelOptions) -> Result<Model, ModelError> {
        let started = Instant::now();
        let bundle = Bundle::from_package_bytes(IN_MEMORY, bytes, &options.limits).map_err(|e| ModelError::Bundle {
            path: PathBuf::from(IN_MEMORY),
            message: e.to_string(),
        })?;
        Model::load_from(&bundle, options, started)
    }

    /// Loads the model `source` supplies (a program, its `bundle.json`, its
    /// stored inputs with the weights, its kernel images).
    pub fn from_source(source: &dyn ModelSource, options: &ModelOptions) -> Result<Model, ModelError> {
        Model::load_from(source, options, Instant::now())
    }

    fn load_from(source: &dyn ModelSource, options: &ModelOptions, started: Instant) -> Result<Model, ModelError> {
        let (inner, report) = match options.device {
            Device::Cpu => {
                let (model, report) = cpu::CpuModel::load(source, options, started)?;
                (Inner::Cpu(model), report)
            }
            #[cfg(feature = "cuda")]
            Device::Cuda(ordinal) => {
                let model = cuda::load(source, options, ordinal, started)?;
                let report = cuda::report(&model);
                (Inner::Cuda(model), report)
            }
            #[cfg(not(feature = "cuda"))]
            Device::Cuda(_) => return Err(cuda::CudaError::NotBuilt.into()),
        };
        Ok(Model {
            inner,
            device: options.device,
            report,
            mutated_inputs: source.meta().mutated_inputs.clone().unwrap_or_default(),
        })
    }

    /// The device the model runs on.
    pub fn device(&self) -> Device {
        self.device
    }

    /// What loading did and how long it took.
    pub fn load_report(&self) -> &LoadReport {
        &self.report
    }

    /// The graph inputs each call supplies, in the program's order (the
    /// weights are the model's own; symbol inputs follow from the sizes).
    pub fn input_names(&self) -> &[String] {
        match &self.inner {
            Inner::Cpu(m) => m.input_names(),
            #[cfg(feature = "cuda")]
            Inner::Cuda(m) => m.input_names(),
        }
    }

    /// The graph inputs a call writes (see [Mutated inputs](self#mutated-inputs)),
    /// in graph input order: `bundle.json`'s `mutated_inputs`, empty when the
    /// bundle does not record them.
    pub fn mutated_inputs(&self) -> &[String] {
        &self.mutated_inputs
    }

    /// The program the model runs.
    pub fn program(&self) -> &Program {
        match &self.inner {
            Inner::Cpu(m) => m.program(),
            #[cfg(feature = "cuda")]
            Inner::Cuda(m) => m.program(),
        }
    }

    /// A session of its own for the calling thread (kept until dropped;
    /// [`Model::run`] borrows one per call instead).
    pub fn session(&self) -> Result<Session, ModelError> {
        Ok(Session {
            inner: match &self.inner {
                Inner::Cpu(m) => SessionInner::Cpu(m.session()),
                #[cfg(feature = "cuda")]
                Inner::Cuda(m) => SessionInner::Cuda(Box::new(m.session()?)),
            },
        })
    }

    /// Runs one call with host `inputs`, by graph input name, and returns
    /// the outputs on the host. Safe to call from several threads at once.
    /// The mutated inputs' tensors hold their new values after the call
    /// (see [Mutated inputs](self#mutated-inputs)).
    pub fn run(&self, inputs: &IndexMap<String, Tensor>) -> Result<Vec<Value<Tensor>>, ModelError> {
        match &self.inner {
            Inner::Cpu(m) => m.run(inputs),
            #[cfg(feature = "cuda")]
            Inner::Cuda(m) => m.run(inputs),
        }
    }

    /// The CUDA backend's model behind this one, when it runs on a GPU: its
    /// full load report, serialized cuDNN plans and device memory.
    #[cfg(feature = "cuda")]
    #[cfg_attr(docsrs, doc(cfg(feature = "cuda")))]
    pub fn as_cuda(&self) -> Option<&cuda::Model> {
        match &self.inner {
            Inner::Cuda(m) => Some(m),
            Inner::Cpu(_) => None,
        }
    }
}

/// The calls of one thread: a backend of its own over the model's shared
/// plan, weights and kernels.
pub struct Session {
    inner: SessionInner,
}

enum SessionInner {
    Cpu(cpu::CpuSession),
    #[cfg(feature = "cuda")]
    Cuda(Box<cuda::Session>),
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let device = match &self.inner {
            SessionInner::Cpu(_) => "cpu",
            #[cfg(feature = "cuda")]
            SessionInner::Cuda(_) => "cuda",
        };
        f.debug_struct("Session").field("device", &device).finish()
    }
}

impl Session {
    /// Runs one call with host `inputs` (by graph input name) and returns
    /// the outputs on the host.
    pub fn run(&mut self, inputs: &IndexMap<String, Tensor>) -> Result<Vec<Value<Tensor>>, ModelError> {
        match &mut self.inner {
            SessionInner::Cpu(s) => s.run(inputs),
            #[cfg(feature = "cuda")]
            SessionInner::Cuda(s) => s.run(inputs),
        }
    }

    /// The CUDA backend's session behind this one, when the model runs on a
    /// GPU: [`run_device`](cuda::Session::run_device) takes
    /// the caller's device buffers in place.
    #[cfg(feature = "cuda")]
    #[cfg_attr(docsrs, doc(cfg(feature = "cuda")))]
    pub fn as_cuda_mut(&mut self) -> Option<&mut cuda::Session> {
        match &mut self.inner {
            SessionInner::Cuda(s) => Some(s),
            SessionInner::Cpu(_) => None,
        }
    }
}

/// The graph inputs each call of a model of `program` supplies, in the
/// program's order: its tensor inputs other than the `weights` the model
/// holds (symbol inputs follow from the sizes).
fn call_inputs<T>(program: &Program, weights: &IndexMap<String, T>) -> Vec<String> {
    program
        .main
        .inputs
        .iter()
        .filter_map(|i| match i {
            crate::ir::GraphInput::Tensor { name } if !weights.contains_key(name.as_str()) => Some(name.to_string()),
            _ => None,
        })
        .collect()
}

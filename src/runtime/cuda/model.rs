//! A deployed model: load a bundle once, then serve calls from many threads.
//!
//! [`Model::load`] (a bundle directory or package, opened by `bundle`) and
//! [`Model::from_source`] (anything that supplies a program, its weights and
//! its kernel images: a [`ModelSource`]) validate the program, compile its
//! plan, open the device, load every kernel image, upload the weights (the
//! bundle's `weights` inputs) and prepare the libraries the program uses,
//! before the first call. [`Model::run`] takes the other inputs as host tensors and
//! returns host tensors; [`Session::run_device`] takes and returns device
//! tensors, used in place.
//!
//! Each call runs on a [`Session`]: a backend with its own stream, its own
//! arena of intermediate buffers and its own cache of prepared recordings,
//! one per shape bucket (each distinct set of input layouts and symbol
//! values, at most [`ModelOptions::shape_cache`]). The first call of a bucket
//! runs the interpreter and records; later calls replay the recording,
//! through CUDA graphs when [`ModelOptions::graphs`] is on. All sessions
//! share the weights, the loaded kernels and the device's memory pool.
//! `Model::run` borrows an idle session (or opens one), so threads that call
//! it at once run on separate streams.
//!
//! Each session loads the built-in kernels it uses itself (from the
//! process's compiled images) and keeps its own copy of the CUDA generator
//! state, starting from the bundle's: programs that draw random numbers
//! (`aten.randint`, Inductor's seeds) draw the same sequence on every
//! session, advancing per session, not across them as one PyTorch process
//! would.

use crate::exec::cuda::conv::{self, PlanKeys, PlansAhead};
use crate::exec::cuda::{
    prime, to_host, CudaBackend, CudaError, CudaOptions, CudaPaths, CudaTensor, GraphStreams, PreparedCache,
    SharedKernels,
};
use crate::exec::interp::Plan;
use crate::exec::model_source::{CudnnPlans, ModelError, ModelSource};
use crate::exec::op::ExternOp;
use crate::exec::run::{compile_program_with_limits, place_inputs, SuppliedInput};
use crate::exec::safetensors::decode_raw;
use crate::exec::{Backend, ExecError, Tensor, TensorSpec, Value};
use crate::format::images::{NoKernelImages, SupplyError};
use crate::format::safetensors::{raw_tensors, RawTensor};
use crate::ir::{GraphInput, Program};
use indexmap::IndexMap;
use std::sync::{Arc, Mutex};

mod device_calls;
pub use device_calls::DeviceOutput;
use std::time::{Duration, Instant};

/// How [`Model::load`] prepares a model.
#[derive(Clone, Debug)]
pub struct ModelOptions {
    /// The CUDA device ordinal (default 0).
    pub device: usize,
    /// Replay recordings through CUDA graphs (default `true`); `false`
    /// replays them as direct launches.
    pub graphs: bool,
    /// Shape buckets each session keeps recorded (default 8); the oldest
    /// goes when a new one would exceed it.
    pub shape_cache: usize,
    /// Idle sessions kept for later calls (default: the machine's
    /// parallelism); more threads at once open more, closed after their call.
    pub idle_sessions: usize,
    /// Bounds on the program and its run.
    pub limits: crate::Limits,
    /// Run one call on the bundle's stored inputs while loading (default
    /// `true`, when it stores every call input), so that library handles,
    /// convolution and attention plans and the first shape's recording exist
    /// before the first call.
    pub warm_up: bool,
    /// Where the CUDA libraries and the kernel cache are
    /// ([`CudaOptions::paths`]; default: the loader's paths only, no disk
    /// cache; [`CudaPaths::from_env`] reads them from the environment).
    pub paths: CudaPaths,
    /// Threads that make the program's convolution plans (cuDNN's engine
    /// choice and any kernels it compiles) before its first call, at load
    /// and when a session opens, from a shapes-only run of the program
    /// (default: the machine's parallelism, at most 8); 0 leaves each plan
    /// to the first call that needs it.
    pub plan_threads: usize,
    /// How graph replay orders each recording's operations: by the
    /// program's dependency DAG where that was measured faster on this
    /// device, segment by segment, else one chain ([`GraphStreams::Auto`],
    /// the default); always one chain ([`GraphStreams::Single`], which also
    /// forces single stream); or always by the DAG
    /// ([`GraphStreams::Concurrent`]). See [`CudaOptions::graph_streams`].
    pub graph_streams: GraphStreams,
}

impl Default for ModelOptions {
    fn default() -> Self {
        ModelOptions {
            device: 0,
            graphs: true,
            shape_cache: 8,
            idle_sessions: std::thread::available_parallelism().map_or(4, |n| n.get()),
            limits: crate::Limits::default(),
            warm_up: true,
            paths: CudaPaths::default(),
            plan_threads: std::thread::available_parallelism().map_or(4, |n| n.get().min(8)),
            graph_streams: GraphStreams::Auto,
        }
    }
}

impl From<CudaError> for ModelError {
    fn from(e: CudaError) -> Self {
        ModelError::Exec(e.into())
    }
}

/// What [`Model::load`] did and how long it took.
#[derive(Clone, Debug, Default)]
pub struct LoadReport {
    /// The device that runs the model (its driver name).
    pub device: String,
    /// Weight tensors uploaded.
    pub weights: usize,
    /// Their bytes.
    pub weight_bytes: u64,
    /// Reading the weights from the bundle and copying them to the device.
    pub weight_time: Duration,
    /// Kernel images loaded.
    pub kernels: usize,
    /// Opening the device (context and stream).
    pub device_open: Duration,
    /// The libraries whose one-time start-up ran on a thread of its own
    /// during the load (cuBLAS, cuDNN: those the program calls), and how
    /// long each took, or why it failed (the model's own calls then report
    /// the same problem).
    pub primed: Vec<(String, Result<Duration, String>)>,
    /// The convolution plans made ahead on threads while loading
    /// ([`ModelOptions::plan_threads`]; `None` when the program calls no
    /// convolution or the option is 0).
    pub conv_plans: Option<PlansAhead>,
    /// The warm-up call ([`ModelOptions::warm_up`]; `None` when none ran).
    pub warm_up: Option<Duration>,
    /// The whole of [`Model::load`].
    pub total: Duration,
    /// Bytes of the GPU's memory in use when loading ended, by every
    /// process ([`Model::device_memory_in_use`]).
    pub device_memory_in_use: u64,
}

impl LoadReport {
    /// Weight upload rate in GB/s (0 when nothing was uploaded).
    pub fn weight_gbps(&self) -> f64 {
        let s = self.weight_time.as_secs_f64();
        if s > 0.0 {
            self.weight_bytes as f64 / s / 1e9
        } else {
            0.0
        }
    }
}

/// What every session shares.
struct Shared {
    program: Program,
    plan: Plan,
    options: CudaOptions,
    model: ModelOptions,
    /// The weights on the device, by graph input name.
    weights: IndexMap<String, CudaTensor>,
    /// Graph inputs a call supplies (neither weights nor symbol inputs), in order.
    user_inputs: Vec<String>,
    /// The graph inputs the program writes (`bundle.json`'s `mutated_inputs`):
    /// [`Session::run`] copies their new values back into the caller's tensors.
    mutated_inputs: Vec<String>,
    kernels: SharedKernels,
    /// The convolution plans each session makes ahead (empty: none).
    conv_keys: PlanKeys,
}

/// A model loaded on one GPU, ready to serve calls from many threads.
pub struct Model {
    /// Idle sessions (dropped before `shared`, whose weights they read).
    idle: Mutex<Vec<Session>>,
    shared: Arc<Shared>,
    report: LoadReport,
}

// `Model` is shared by the threads that call it.
const _: fn() = || {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<Model>();
};

impl std::fmt::Debug for Model {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Model")
            .field("user_inputs", &self.shared.user_inputs)
            .field("weights", &self.shared.weights.len())
            .field("report", &self.report)
            .finish()
    }
}

/// The stored inputs' entry, as errors name it.
const INPUTS: &str = "inputs.safetensors";

impl Model {
    /// Loads the bundle directory or package at `path` (what loading does:
    /// [`Model`]): opens it within [`ModelOptions::limits`] and checks that
    /// its cubins can run on the device. [`Model::from_source`] loads from
    /// anything else that supplies a program, weights and kernel images.
    pub fn load(path: impl AsRef<std::path::Path>, options: &ModelOptions) -> Result<Model, ModelError> {
        let started = Instant::now();
        let bundle = crate::bundle::model::open_for_model(path.as_ref(), &options.limits)?;
        Model::load_from(&bundle, options, started)
    }

    /// Loads the model `source` supplies (see the module documentation):
    /// checks that its kernel images can run on the device.
    pub fn from_source(source: &dyn ModelSource, options: &ModelOptions) -> Result<Model, ModelError> {
        Model::load_from(source, options, Instant::now())
    }

    /// [`Model::from_source`] for a load that started at `started` (what
    /// [`LoadReport::total`] counts from).
    pub(crate) fn load_from(
        source: &dyn ModelSource,
        options: &ModelOptions,
        started: Instant,
    ) -> Result<Model, ModelError> {
        let path = source.location();
        let bundle_err = |e: SupplyError| ModelError::Bundle {
            path: path.to_path_buf(),
            message: e.to_string(),
        };
        let program = source.program().clone();
        let meta = source.meta().clone();
        let weight_names = source.weights().to_vec();
        let stored_bytes = source.stored_inputs().map_err(bundle_err)?;
        let stored_bytes: &[u8] = stored_bytes.as_deref().map_or(&[][..], |b| b.as_ref());
        let stored: IndexMap<String, RawTensor<'_>> = if stored_bytes.is_empty() {
            IndexMap::new()
        } else {
            raw_tensors(stored_bytes, &options.limits).map_err(|e| ModelError::Bundle {
                path: path.to_path_buf(),
                message: format!("{INPUTS}: {e}"),
            })?
        };
        let plan = if options.graph_streams.plans_concurrency() {
            crate::exec::compile_program_with_dag(&program, &options.limits)?
        } else {
            compile_program_with_limits(&program, &options.limits)?
        };
        let mut cuda = CudaOptions {
            kernels: source.kernel_images(),
            paths: options.paths.clone(),
            cudnn_plans: source.cudnn_plans(),
            ..CudaOptions::for_bundle(NoKernelImages, &meta)
        }
        .preload_for(&program);
        cuda.ordinal = options.device;
        cuda.graph_streams = options.graph_streams;
        // The convolution plans the first call makes, found by a shapes-only run.
        let conv_keys = (options.plan_threads > 0 && calls_convolution(&program))
            .then(|| conv::program_keys(&program, &plan, cuda.math.cudnn_allow_tf32));
        let mut backend = CudaBackend::new(cuda.clone())?;
        // cuBLAS's and cuDNN's one-time start-up, on threads of their own
        // while the weights and kernel images load.
        let primers = prime::start(
            cuda.ordinal,
            &Arc::new(cuda.paths.clone()),
            cuda.preload_blas,
            cuda.preload_dnn && calls_convolution(&program),
        );
        let device_open = backend.load_timings().device_open;
        let device = backend.device_name()?;
        let (major, minor) = backend.compute_capability()?;
        let device_sm = u32::try_from(major * 10 + minor).unwrap_or(0);
        // Every kernel's image, checked before the weights upload: present,
        // a cubin or PTX, for this GPU (one rule: `ImageArch::check_runs_on`).
        for (kernel, arch) in source.kernel_image_archs() {
            let arch = arch.map_err(bundle_err)?;
            arch.check_runs_on(device_sm, &device).map_err(|e| ModelError::Bundle {
                path: path.to_path_buf(),
                message: format!("kernel `{kernel}`: its image is {e}"),
            })?;
        }
        let weights_started = Instant::now();
        let mut weights = IndexMap::new();
        let mut weight_bytes = 0u64;
        for name in &weight_names {
            let known = program
                .main
                .inputs
                .iter()
                .any(|i| matches!(i, GraphInput::Tensor { name: n } if n.as_str() == name.as_str()));
            if !known {
                return Err(ModelError::Bundle {
                    path: path.to_path_buf(),
                    message: format!("bundle.json: weight `{name}` is not a tensor input of the program"),
                });
            }
            let raw = stored.get(name).ok_or_else(|| ModelError::Bundle {
                path: path.to_path_buf(),
                message: format!("inputs.safetensors: weight `{name}` is not stored"),
            })?;
            weight_bytes += raw.data.len() as u64;
            weights.insert(name.clone(), raw.clone());
        }
        // Kernel images load on a second backend (thread) while this one
        // stages the weights: both are host-bound (module loading in the
        // driver, copies into the pinned staging buffers), so they overlap.
        let (laid, weight_time, loaded, planned) = std::thread::scope(|scope| {
            // The loader only loads images: no library or built-in preloads of its own.
            let image_options = CudaOptions {
                preload_blas: false,
                preload_builtins: false,
                preload_dnn: false,
                ..cuda.clone()
            };
            let program = &program;
            let paths = Arc::new(cuda.paths.clone());
            let planner = match &conv_keys {
                Some(Ok(keys)) => {
                    let (keys, ordinal, threads) = (keys.clone(), cuda.ordinal, options.plan_threads);
                    let supplied = cuda.cudnn_plans.clone();
                    Some(scope.spawn(move || conv::make_ahead(ordinal, &paths, &keys, threads, &supplied)))
                }
                _ => None,
            };
            let loader = scope.spawn(move || -> Result<(SharedKernels, usize), ModelError> {
                let mut images = CudaBackend::new(image_options)?;
                let n = images.preload_kernels(program)?;
                Ok((images.shared_kernels(), n))
            });
            // Lay each weight out as the program declares it (one home for the matching rules).
            let laid = place_weights(program, &weights, &mut backend, &options.limits)
                .and_then(|laid| backend.synchronize().map(|()| laid).map_err(ModelError::from));
            let weight_time = weights_started.elapsed();
            let loaded = loader.join().unwrap_or_else(|_| {
                Err(ModelError::Exec(ExecError::Unsupported(
                    "the kernel-image loading thread panicked".into(),
                )))
            });
            let planned = planner.map(|p| {
                p.join().unwrap_or_else(|_| {
                    let failed = vec!["the plan-making thread panicked".to_string()];
                    (
                        Vec::new(),
                        PlansAhead {
                            failed,
                            ..PlansAhead::default()
                        },
                    )
                })
            });
            (laid, weight_time, loaded, planned)
        });
        let laid = laid?;
        let (images, kernels) = loaded?;
        backend.adopt_kernels(&images);
        let mut conv_plans = match (planned, &conv_keys) {
            (Some((made, report)), _) => {
                conv::adopt_ahead(&mut backend, made);
                Some(report)
            }
            (None, Some(Err(why))) => Some(PlansAhead {
                failed: vec![format!("the shapes are not known before the first call: {why}")],
                ..PlansAhead::default()
            }),
            _ => None,
        };
        let user_inputs = crate::runtime::call_inputs(&program, &laid);
        let shared = Arc::new(Shared {
            kernels: backend.shared_kernels(),
            program,
            plan,
            options: cuda,
            model: options.clone(),
            weights: laid,
            user_inputs,
            mutated_inputs: meta.mutated_inputs.clone().unwrap_or_default(),
            conv_keys: conv_keys.and_then(Result::ok).unwrap_or_default(),
        });
        let stored_inputs = stored;
        let mut first = Session::with_backend(Arc::clone(&shared), backend);
        let call_inputs: Option<IndexMap<String, Tensor>> = shared
            .user_inputs
            .iter()
            .map(|n| {
                stored_inputs
                    .get(n)
                    .and_then(|raw| decode_raw(n, raw, &options.limits).ok())
                    .map(|t| (n.clone(), t))
            })
            .collect();
        let primed = primers
            .wait()
            .into_iter()
            .map(|(library, r)| (library.to_string(), r))
            .collect();
        let warm_up = match call_inputs {
            Some(inputs) if options.warm_up => {
                let t0 = Instant::now();
                first.run(&inputs)?;
                Some(t0.elapsed())
            }
            _ => None,
        };
        if let (Some(p), Some(_)) = (conv_plans.as_mut(), warm_up) {
            p.made_by_warm_up = Some(first.backend.conv_plans_made_in_calls());
        }
        let device_memory_in_use = first.backend.device_memory_in_use()?;
        let report = LoadReport {
            device_memory_in_use,
            primed,
            conv_plans,
            warm_up,
            device,
            weights: shared.weights.len(),
            weight_bytes,
            weight_time,
            kernels,
            device_open,
            total: started.elapsed(),
        };
        Ok(Model {
            idle: Mutex::new(vec![first]),
            shared,
            report,
        })
    }

    /// What loading did and how long it took.
    pub fn load_report(&self) -> &LoadReport {
        &self.report
    }

    /// The graph inputs each call supplies, in the program's order (the
    /// weights are the model's own; symbol inputs follow from the sizes).
    pub fn input_names(&self) -> &[String] {
        &self.shared.user_inputs
    }

    /// The program the model runs.
    pub fn program(&self) -> &Program {
        &self.shared.program
    }

    /// A session of its own for the calling thread (kept until dropped;
    /// [`Model::run`] borrows one per call instead).
    pub fn session(&self) -> Result<Session, ModelError> {
        let idle = self.idle.lock().ok().and_then(|mut v| v.pop());
        match idle {
            Some(s) => Ok(s),
            None => Session::open(Arc::clone(&self.shared)),
        }
    }

    /// Runs one call with host `inputs`, by graph input name, and returns
    /// the outputs on the host. Safe to call from several threads at once.
    pub fn run(&self, inputs: &IndexMap<String, Tensor>) -> Result<Vec<Value<Tensor>>, ModelError> {
        let mut session = self.session()?;
        let out = session.run(inputs);
        self.give_back(session);
        out
    }

    /// The serialized cuDNN plans of the model's convolutions whose engines
    /// compile kernels at run time (those made ahead at load and by calls so
    /// far, on any idle session), with the cuDNN, driver and GPU they were
    /// made for: what a package carries (`wrapir pack --cudnn-plans`) so that
    /// a process on the same GPU and libraries restores them
    /// ([`CudaOptions::cudnn_plans`]) instead of compiling.
    pub fn cudnn_plans(&self) -> Result<CudnnPlans, ModelError> {
        let idle = self
            .idle
            .lock()
            .map_err(|_| ExecError::Unsupported("a thread panicked while holding the model's sessions".into()))?;
        let mut made_for = None;
        let mut entries = IndexMap::new();
        for session in idle.iter() {
            session.backend.bind()?;
            let plans = conv::plan_entries(&session.backend)?;
            made_for = made_for.or(plans.made_for.clone());
            for (name, json) in plans.iter() {
                entries.entry(name.to_string()).or_insert_with(|| json.to_vec());
            }
        }
        entries.sort_keys();
        Ok(CudnnPlans::new(made_for, entries))
    }

    /// Bytes of the model's GPU memory in use now, by every process
    /// (`cuMemGetInfo`: total less free). On a GPU the process has to
    /// itself: what it holds, context, libraries, weights, every session's
    /// arenas and graph pools included.
    pub fn device_memory_in_use(&self) -> Result<u64, ModelError> {
        let session = self.session()?;
        let used = session.backend.device_memory_in_use();
        self.give_back(session);
        Ok(used?)
    }

    /// Keeps `session` for a later call, up to [`ModelOptions::idle_sessions`].
    fn give_back(&self, session: Session) {
        if let Ok(mut idle) = self.idle.lock() {
            if idle.len() < self.shared.model.idle_sessions.max(1) {
                idle.push(session);
            }
        }
    }
}

/// Loads `source` on device `ordinal` (the libraries and kernel cache
/// found through `paths`), makes every convolution plan its program needs
/// ahead and in a warm-up call, and returns [`Model::cudnn_plans`]: the
/// plans a package of it carries for this GPU.
pub fn make_cudnn_plans(source: &dyn ModelSource, ordinal: usize, paths: CudaPaths) -> Result<CudnnPlans, ModelError> {
    let options = ModelOptions {
        device: ordinal,
        paths,
        graphs: false,
        idle_sessions: 1,
        ..ModelOptions::default()
    };
    Model::from_source(source, &options)?.cudnn_plans()
}

/// Whether any graph of `program` calls a convolution (the cuDNN primer
/// runs one; a program whose only cuDNN op is attention does not need
/// cuDNN's convolution engines started).
fn calls_convolution(program: &Program) -> bool {
    std::iter::once(&program.main)
        .chain(program.subgraphs.values())
        .flat_map(|g| &g.lines)
        .any(|line| {
            line.extern_call()
                .is_some_and(|call| conv::runs(ExternOp::of(&call.op)))
        })
}

/// Uploads `weights` (stored raw) laid out as the program declares them:
/// dense ones as their stored bytes, in one staged copy; others decoded and
/// laid out first.
fn place_weights(
    program: &Program,
    weights: &IndexMap<String, RawTensor<'_>>,
    backend: &mut CudaBackend,
    limits: &crate::Limits,
) -> Result<IndexMap<String, CudaTensor>, ModelError> {
    let mut out = IndexMap::new();
    let mut dense: Vec<(CudaTensor, &[u8])> = Vec::new();
    for (name, raw) in weights {
        let layout = program
            .main
            .layout(&crate::ir::BufName::new(name))
            .ok_or_else(|| ModelError::Exec(ExecError::Input(format!("weight `{name}` has no declared layout"))))?;
        if layout.dtype != raw.dtype || layout.size.len() != raw.size.len() {
            return Err(ExecError::Input(format!(
                "weight `{name}` is {}{:?}, the program declares {layout}",
                raw.dtype, raw.size
            ))
            .into());
        }
        let env = crate::sym::Bindings::new();
        let spec = crate::exec::run::concrete_layout(layout, &env, &format!("weight `{name}`"), &|s| {
            format!("its layout names symbol `{s}`, which a weight cannot bind")
        })?;
        if spec.size != raw.size {
            return Err(ExecError::Input(format!(
                "weight `{name}` has sizes {:?}, the program declares {:?}",
                raw.size, spec.size
            ))
            .into());
        }
        let t = backend.allocate(&spec)?;
        // Bools are decoded, which checks their bytes are 0 or 1.
        let packed = spec.offset == 0
            && !spec.dtype.is_complex()
            && spec.dtype != crate::ir::DType::Bool
            && spec
                .size
                .iter()
                .zip(spec.stride.iter().zip(crate::exec::contiguous_strides(&spec.size)))
                .all(|(n, (s, c))| *n <= 1 || *s == c);
        if packed {
            dense.push((t.clone(), raw.data));
        } else {
            let host = decode_raw(name, raw, limits).map_err(|e| ExecError::Input(format!("weight `{name}`: {e}")))?;
            backend.overwrite(&t, &host)?;
        }
        out.insert(name.clone(), t);
    }
    let copies: Vec<(&CudaTensor, &[u8])> = dense.iter().map(|(t, b)| (t, *b)).collect();
    backend.upload_raw(&copies)?;
    Ok(out)
}

/// One input of a call: a host tensor, or a device tensor (a weight, or a
/// caller's buffer used in place).
enum Supplied<'a> {
    Host(&'a Tensor),
    Device(CudaTensor),
}

impl SuppliedInput for Supplied<'_> {
    fn dtype(&self) -> crate::ir::DType {
        match self {
            Supplied::Host(t) => t.dtype(),
            Supplied::Device(t) => t.spec().dtype,
        }
    }
    fn size(&self) -> &[i64] {
        match self {
            Supplied::Host(t) => t.size(),
            Supplied::Device(t) => &t.spec().size,
        }
    }
    fn symbol_value(&self) -> Result<Option<i64>, ExecError> {
        match self {
            Supplied::Host(t) => t.symbol_value(),
            Supplied::Device(_) => Ok(None),
        }
    }
}

/// A caller's device tensor for [`Session::run_device`].
#[derive(Clone, Debug)]
pub struct DeviceInput {
    /// Address of the allocation (element 0 of the storage, not of the view).
    pub ptr: u64,
    /// Bytes of the allocation from `ptr`.
    pub bytes: usize,
    /// Layout of the view (dtype, sizes, strides, storage offset). Its
    /// device is not read, except that another CUDA device than the
    /// model's is an error.
    pub spec: TensorSpec,
}

/// The calls of one thread: its own backend (stream, libraries, arena)
/// and its recordings, one per shape bucket.
pub struct Session {
    shared: Arc<Shared>,
    backend: CudaBackend,
    cache: PreparedCache,
    /// Device input buffers per shape bucket (host calls), oldest first.
    buckets: Vec<(Vec<TensorSpec>, IndexMap<String, CudaTensor>)>,
    /// The program cannot be prepared (e.g. it needs the host): every call runs the interpreter.
    interpret: bool,
    /// The outputs of the last device call.
    outputs: Vec<Value<CudaTensor>>,
}

// SAFETY: a session owns its backend and the recordings that backend made;
// every `Rc` and raw CUDA handle in them (modules, library handles and
// plans, streams) is reachable only through this session, so moving the
// session moves all of them together and no two threads use them at once.
// The handles belong to the device's primary context, which each call binds
// on the calling thread before any CUDA call (`CudaBackend::bind`); cuBLAS,
// cuBLASLt and cuDNN handles may move between threads when not used
// concurrently.
unsafe impl Send for Session {}

impl Session {
    fn open(shared: Arc<Shared>) -> Result<Session, ModelError> {
        let mut backend = CudaBackend::new(shared.options.clone())?;
        backend.adopt_kernels(&shared.kernels);
        if shared.conv_keys.len() > 0 {
            let paths = Arc::new(shared.options.paths.clone());
            let threads = shared.model.plan_threads;
            let (made, _) = conv::make_ahead(
                shared.options.ordinal,
                &paths,
                &shared.conv_keys,
                threads,
                &shared.options.cudnn_plans,
            );
            conv::adopt_ahead(&mut backend, made);
        }
        Ok(Session::with_backend(shared, backend))
    }

    fn with_backend(shared: Arc<Shared>, backend: CudaBackend) -> Session {
        let cache = PreparedCache::with_capacity(shared.model.shape_cache);
        Session {
            shared,
            backend,
            cache,
            buckets: Vec::new(),
            interpret: false,
            outputs: Vec::new(),
        }
    }

    /// Matches `supplied` (user inputs by name) plus the weights to the
    /// program: the graph inputs in order and the constants, each placed by
    /// `place` (weights come to it as device tensors).
    #[allow(clippy::type_complexity)]
    fn bind<'a, T>(
        &self,
        supplied: IndexMap<String, Supplied<'a>>,
        place: &mut dyn FnMut(&str, &Supplied<'a>, &TensorSpec) -> Result<T, ExecError>,
    ) -> Result<(Vec<Value<T>>, IndexMap<String, T>), ModelError> {
        let mut all = supplied;
        for (name, t) in &self.shared.weights {
            if all.contains_key(name) {
                return Err(ExecError::Input(format!(
                    "`{name}` is a weight of the model; it is not supplied per call"
                ))
                .into());
            }
            all.insert(name.clone(), Supplied::Device(t.clone()));
        }
        Ok(place_inputs(&self.shared.program, &all, place)?)
    }

    /// Runs one call with host `inputs` (by graph input name) and copies the
    /// outputs to the host. The inputs the program writes (the bundle's
    /// `mutated_inputs`, a KV cache) are written on the session's device
    /// copies and copied back into the caller's tensors, as a PyTorch call
    /// leaves them.
    pub fn run(&mut self, inputs: &IndexMap<String, Tensor>) -> Result<Vec<Value<Tensor>>, ModelError> {
        self.backend.bind()?;
        let mut buffers = self.upload(inputs)?;
        let outputs = match self.execute_uploaded(&buffers) {
            Err(ModelError::Exec(ExecError::Unpreparable(_))) => {
                // The recording ran the whole call but cannot be replayed:
                // run it again through the interpreter on fresh copies of the inputs.
                self.interpret = true;
                buffers = self.upload(inputs)?;
                self.execute_uploaded(&buffers)?
            }
            r => r?,
        };
        let host = outputs
            .iter()
            .map(|v| to_host(&mut self.backend, v))
            .collect::<Result<Vec<_>, _>>()?;
        let shared = Arc::clone(&self.shared);
        for name in &shared.mutated_inputs {
            if let (Some(buffer), Some(caller)) = (buffers.get(name), inputs.get(name)) {
                let value = self.backend.copy_out(buffer)?;
                caller.copy_from(&value)?;
            }
        }
        self.backend.synchronize()?;
        Ok(host)
    }

    /// Copies host `inputs` into the device buffers of their shape bucket
    /// (made on the bucket's first call); returns the buffers by name.
    fn upload(&mut self, inputs: &IndexMap<String, Tensor>) -> Result<IndexMap<String, CudaTensor>, ModelError> {
        let supplied: IndexMap<String, Supplied<'_>> =
            inputs.iter().map(|(k, v)| (k.clone(), Supplied::Host(v))).collect();
        let mut specs: Vec<(String, TensorSpec)> = Vec::new();
        self.bind(supplied, &mut |name, s, spec| {
            if let Supplied::Host(_) = s {
                specs.push((name.to_string(), spec.clone()));
            }
            Ok(())
        })?;
        let key: Vec<TensorSpec> = specs.iter().map(|(_, s)| s.clone()).collect();
        let bucket = match self.buckets.iter().position(|(k, _)| *k == key) {
            Some(i) => i,
            None => {
                let mut buffers = IndexMap::new();
                for (name, spec) in &specs {
                    buffers.insert(name.clone(), self.backend.allocate(spec)?);
                }
                if self.buckets.len() >= self.shared.model.shape_cache.max(1) {
                    self.buckets.remove(0);
                }
                self.buckets.push((key, buffers));
                self.buckets.len() - 1
            }
        };
        let buffers = self
            .buckets
            .get(bucket)
            .map(|(_, b)| b.clone())
            .ok_or_else(|| ExecError::Device("shape bucket vanished".into()))?;
        for (name, dst) in &buffers {
            let host = inputs
                .get(name)
                .ok_or_else(|| ExecError::Input(format!("input `{name}` was not supplied")))?;
            self.backend.overwrite(dst, host).map_err(|e| match e {
                ExecError::Input(m) => ExecError::Input(format!("input `{name}`: {m}")),
                e => e,
            })?;
        }
        Ok(buffers)
    }

    /// Runs the call on inputs already in device `buffers`.
    fn execute_uploaded(
        &mut self,
        buffers: &IndexMap<String, CudaTensor>,
    ) -> Result<Vec<Value<CudaTensor>>, ModelError> {
        let supplied: IndexMap<String, Supplied<'_>> = buffers
            .iter()
            .map(|(k, v)| (k.clone(), Supplied::Device(v.clone())))
            .collect();
        let (args, constants) = self.bind(supplied, &mut |name, s, _| match s {
            Supplied::Device(t) => Ok(t.clone()),
            Supplied::Host(_) => Err(ExecError::Input(format!("`{name}` is not on the device"))),
        })?;
        self.execute(args, &constants)
    }

    /// Runs one call on the caller's device tensors, used in place (no
    /// copy), and returns the outputs on the device: valid until the next
    /// call on this session. Inputs are read on the session's stream after
    /// the work queued on `stream` so far (a `CUstream`; 0 for none), and
    /// `stream` waits for the outputs before its later work.
    ///
    /// # Safety
    /// Each input's memory must be a live allocation of this device holding
    /// `bytes` bytes, not freed or written by others until `stream` has
    /// passed this call.
    pub unsafe fn run_device(
        &mut self,
        inputs: &IndexMap<String, DeviceInput>,
        stream: u64,
    ) -> Result<&[Value<CudaTensor>], ModelError> {
        self.backend.bind()?;
        let mut supplied = IndexMap::new();
        let ordinal = self.backend.ordinal();
        for (name, d) in inputs {
            let device = d.spec.device;
            if device.kind == crate::ir::DeviceType::Cuda && device.index.is_some_and(|i| i as usize != ordinal) {
                return Err(ExecError::Input(format!(
                    "input `{name}` is on {device}; the model runs on cuda:{ordinal}"
                ))
                .into());
            }
            // SAFETY: the caller's contract above.
            let t = unsafe { self.backend.borrow_device(d.ptr, d.bytes, d.spec.clone()) }
                .map_err(|e| ExecError::Input(format!("input `{name}`: {e}")))?;
            supplied.insert(name.clone(), Supplied::Device(t));
        }
        let (args, constants) = self.bind(supplied, &mut |name, s, spec| match s {
            Supplied::Device(t) if t.spec().stride == spec.stride && t.spec().offset == spec.offset => Ok(t.clone()),
            Supplied::Device(t) => Err(ExecError::Input(format!(
                "`{name}` has strides {:?} and offset {}, the program declares {:?} and {}",
                t.spec().stride,
                t.spec().offset,
                spec.stride,
                spec.offset
            ))),
            Supplied::Host(_) => Err(ExecError::Input(format!("`{name}` is not on the device"))),
        })?;
        self.backend.wait_for_stream(stream)?;
        self.outputs = self.execute(args, &constants)?;
        self.backend.signal_stream(stream)?;
        Ok(&self.outputs)
    }

    /// Runs the plan: replays the bucket's recording, records it on its
    /// first call, or interprets when the program cannot be prepared (after
    /// the first such call, which fails with [`ExecError::Unpreparable`]).
    fn execute(
        &mut self,
        args: Vec<Value<CudaTensor>>,
        constants: &IndexMap<String, CudaTensor>,
    ) -> Result<Vec<Value<CudaTensor>>, ModelError> {
        let shared = Arc::clone(&self.shared);
        if !self.interpret {
            return match self
                .cache
                .run(&mut self.backend, &shared.plan, &args, constants, shared.model.graphs)
            {
                Ok(p) => Ok(p.outputs().to_vec()),
                Err(e @ ExecError::Unpreparable(_)) => {
                    self.interpret = true;
                    Err(e.into())
                }
                Err(e) => Err(e.into()),
            };
        }
        Ok(shared.plan.run(&mut self.backend, args, constants)?.outputs)
    }

    /// Copies the outputs of the last [`Session::run_device`] call to the host.
    pub fn outputs_to_host(&mut self) -> Result<Vec<Value<Tensor>>, ModelError> {
        self.backend.bind()?;
        let outputs = std::mem::take(&mut self.outputs);
        let host = outputs
            .iter()
            .map(|v| to_host(&mut self.backend, v))
            .collect::<Result<Vec<_>, _>>();
        self.outputs = outputs;
        let host = host?;
        self.backend.synchronize()?;
        Ok(host)
    }

    /// Recordings this session holds (one per shape bucket and placement of
    /// the inputs seen: host inputs staged by the session, or the caller's
    /// device buffers).
    pub fn recordings(&self) -> usize {
        self.cache.len()
    }
}

//! `wrapir::runtime::Model` on the CPU: every committed CPU bundle
//! (`fixtures/inductor/bundles_cpu*`, as `tests/cpu_bundles.rs` judges them)
//! loaded as a model and called with its stored call inputs; one model
//! called from many threads at once; packages from a file and from memory;
//! mutated inputs coming back in the caller's tensors; bad inputs and
//! devices as errors naming what is wrong.

mod common;

use indexmap::IndexMap;
use std::path::{Path, PathBuf};
use wrapir::bundle::Bundle;
use wrapir::exec::{Tensor, Value};
use wrapir::runtime::{Device, Model, ModelError, ModelOptions, IN_MEMORY};

/// Every committed set of CPU bundles.
const SETS: &[&str] = &[
    "bundles_cpu/cpp",
    "bundles_cpu/halide",
    "bundles_cpu_2.15/cpp",
    "bundles_cpu_2.15/halide",
    "bundles_cpu_2.15/control",
];

fn bundle(set: &str, case: &str) -> PathBuf {
    common::root().join("fixtures/inductor").join(set).join(case)
}

/// The stored inputs of the bundle at `dir` that a call of `model`
/// supplies (not the weights, which are the model's own, nor the symbol
/// inputs, which the sizes bind).
fn call_inputs(dir: &Path, model: &Model) -> IndexMap<String, Tensor> {
    let bundle = Bundle::open(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    let mut inputs = bundle.inputs().unwrap().expect("the bundle stores its inputs");
    inputs.retain(|name, _| model.input_names().contains(name));
    assert_eq!(inputs.len(), model.input_names().len(), "{}", dir.display());
    inputs
}

/// Compares `outputs` with the references of the bundle at `dir`.
fn judge(dir: &Path, outputs: &[Value<Tensor>]) -> Result<(), String> {
    let bundle = Bundle::open(dir).map_err(|e| e.to_string())?;
    match common::compare_with_bundle(&bundle, outputs)?.first_error() {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

#[test]
fn every_cpu_bundle_serves_as_a_model() {
    let mut failures = Vec::new();
    let mut served = 0;
    for set in SETS {
        for dir in common::bundle_dirs(&format!("fixtures/inductor/{set}")) {
            let name = format!("{set}/{}", common::case_name(&dir));
            let model = match Model::load(&dir, &ModelOptions::default()) {
                Ok(m) => m,
                Err(e) => {
                    failures.push(format!("{name}: loading: {e}"));
                    continue;
                }
            };
            let bundle = Bundle::open(&dir).unwrap();
            assert_eq!(model.device(), Device::Cpu);
            assert_eq!(model.load_report().weights, bundle.weights().len(), "{name}");
            // A model's inputs are the program's tensor inputs less its weights.
            for input in model.input_names() {
                assert!(
                    !bundle.weights().contains(input),
                    "{name}: weight {input} is a call input"
                );
            }
            match model.run(&call_inputs(&dir, &model)) {
                Ok(outputs) => match judge(&dir, &outputs) {
                    Ok(()) => served += 1,
                    Err(e) => failures.push(format!("{name}: {e}")),
                },
                Err(e) => failures.push(format!("{name}: running: {e}")),
            }
        }
    }
    common::assert_no_failures(&failures);
    assert!(served >= 4 * 17, "only {served} bundles served");
}

/// The bit patterns of every tensor output, to compare runs exactly.
fn bits(outputs: &[Value<Tensor>]) -> Vec<Vec<u64>> {
    outputs
        .iter()
        .map(|v| v.as_tensor().map(common::element_bits).unwrap_or_default())
        .collect()
}

#[test]
fn one_model_serves_many_threads_at_once() {
    // A convolution network with weights (extern convolutions and C++
    // kernels), and a dynamic program called with two sizes.
    let cnn = bundle("bundles_cpu/cpp", "small_cnn");
    let model = Model::load(&cnn, &ModelOptions::default()).unwrap();
    let inputs = call_inputs(&cnn, &model);
    let want = model.run(&inputs).unwrap();
    judge(&cnn, &want).unwrap();
    let want = bits(&want);
    let dynamic = bundle("bundles_cpu/halide", "pointwise_dynamic");
    let dyn_model = Model::load(&dynamic, &ModelOptions::default()).unwrap();
    let dyn_inputs = call_inputs(&dynamic, &dyn_model);
    let dyn_want = bits(&dyn_model.run(&dyn_inputs).unwrap());
    let short: IndexMap<String, Tensor> = dyn_inputs
        .iter()
        .map(|(k, t)| (k.clone(), t.view(&[7], &[1], 0).unwrap().contiguous_copy().unwrap()))
        .collect();
    let short_want = bits(&dyn_model.run(&short).unwrap());
    assert_eq!(short_want[0].len(), 7);
    const THREADS: usize = 8;
    const CALLS: usize = 6;
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..THREADS)
            .map(|i| {
                let (model, inputs, want) = (&model, &inputs, &want);
                let (dyn_model, dyn_inputs, short) = (&dyn_model, &dyn_inputs, &short);
                let (dyn_want, short_want) = (&dyn_want, &short_want);
                scope.spawn(move || {
                    // Half the threads keep a session, half borrow one per call.
                    let mut session = (i % 2 == 0).then(|| model.session().unwrap());
                    for call in 0..CALLS {
                        let out = match session.as_mut() {
                            Some(s) => s.run(inputs).unwrap(),
                            None => model.run(inputs).unwrap(),
                        };
                        assert_eq!(&bits(&out), want, "thread {i} call {call}");
                        let (x, w) = if (i + call) % 2 == 0 {
                            (dyn_inputs, dyn_want)
                        } else {
                            (short, short_want)
                        };
                        assert_eq!(&bits(&dyn_model.run(x).unwrap()), w, "thread {i} call {call} (dynamic)");
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().expect("a serving thread panicked");
        }
    });
}

/// A package of the bundle at `dir`, in `scratch`.
fn package(dir: &Path, scratch: &Path) -> PathBuf {
    let path = scratch.join(format!("{}.wirpkg", common::case_name(dir)));
    Bundle::open(dir).unwrap().write_package(&path).unwrap();
    path
}

#[test]
fn packages_load_from_a_file_and_from_memory() {
    let scratch = common::scratch("runtime", "packages");
    let kernels = scratch.join("kernels");
    std::fs::create_dir(&kernels).unwrap();
    let with_scratch = ModelOptions {
        scratch_dir: Some(kernels.clone()),
        ..ModelOptions::default()
    };
    // C++ kernels load from anonymous in-memory files (Linux): nothing is
    // written. Halide kernels load only from files, written where the
    // caller says. Programs of several kernels, with the models of the
    // earlier packages still loaded, each kernel its own image.
    let linux = cfg!(target_os = "linux");
    let mut earlier = Vec::new();
    for (set, case, in_memory) in [
        ("bundles_cpu/cpp", "small_cnn", linux),
        ("bundles_cpu/cpp", "transformer_block", linux),
        ("bundles_cpu/halide", "softmax", false),
    ] {
        let dir = bundle(set, case);
        let path = package(&dir, &scratch);
        let bytes = std::fs::read(&path).unwrap();
        let mut models = Vec::new();
        if in_memory {
            models.push(Model::load(&path, &ModelOptions::default()).unwrap());
            models.push(Model::from_bytes(bytes.clone(), &ModelOptions::default()).unwrap());
        } else {
            let refused = Model::from_bytes(bytes.clone(), &ModelOptions::default()).unwrap_err();
            let text = refused.to_string();
            common::assert_contains(&text, IN_MEMORY);
            common::assert_contains(&text, "ModelOptions::scratch_dir");
            let refused = Model::load(&path, &ModelOptions::default()).unwrap_err();
            common::assert_contains(&refused.to_string(), "ModelOptions::scratch_dir");
        }
        models.push(Model::load(&path, &with_scratch).unwrap());
        models.push(Model::from_bytes(bytes, &with_scratch).unwrap());
        for model in &models {
            let inputs = call_inputs(&dir, model);
            judge(&dir, &model.run(&inputs).unwrap()).unwrap_or_else(|e| panic!("{set}/{case}: {e}"));
        }
        earlier.push((dir, models));
        // The private directory the images were written to is gone once they loaded.
        assert_eq!(std::fs::read_dir(&kernels).unwrap().count(), 0, "{set}/{case}");
    }
    // Every model still runs its own kernels.
    for (dir, models) in &earlier {
        for model in models {
            judge(dir, &model.run(&call_inputs(dir, model)).unwrap()).unwrap();
        }
    }
    let _ = std::fs::remove_dir_all(&scratch);
}

/// A KV-cache decode step writes its caches (`index_copy_` on two inputs):
/// the model names them, and after a call the caller's tensors hold eager's
/// caches, whether they were in the declared layout (written in place) or
/// laid out otherwise (a copy, copied back), from a model and a session.
#[test]
fn mutated_inputs_come_back_in_the_callers_tensors() {
    let dir = bundle("bundles_cpu_2.15/ops", "kv_cache_decode");
    let model = Model::load(&dir, &ModelOptions::default()).unwrap();
    let b = Bundle::open(&dir).unwrap();
    let mutated = model.mutated_inputs().to_vec();
    assert_eq!(mutated, b.meta().mutated_inputs.clone().unwrap());
    assert_eq!(mutated.len(), 2);
    let eager = b.mutated().unwrap().unwrap();
    let judge_caches = |inputs: &IndexMap<String, Tensor>, how: &str| {
        let c = common::compare_mutated_with_bundle(&b, inputs).unwrap().unwrap();
        assert!(c.is_ok(), "{how}: {:?}", c.first_error());
        for name in &mutated {
            assert!(
                common::element_bits(&inputs[name]) != common::element_bits(&b.inputs().unwrap().unwrap()[name]),
                "{how}: `{name}` still holds its value before the call"
            );
        }
    };
    // In the declared layout: the program's buffers are the caller's tensors.
    let inputs = call_inputs(&dir, &model);
    judge(&dir, &model.run(&inputs).unwrap()).unwrap();
    judge_caches(&inputs, "declared layout");
    // Laid out otherwise ([T, B, H, D] memory seen as [B, H, T, D]): copied back.
    let mut strided = call_inputs(&dir, &model);
    let mut layouts = Vec::new();
    for name in &mutated {
        let t = &strided[name];
        let &[batch, heads, _, dim] = t.size() else {
            panic!("a cache is 4-d")
        };
        let stride = vec![heads * dim, dim, batch * heads * dim, 1];
        assert_ne!(stride.as_slice(), t.stride());
        let other = Tensor::zeros_like_spec(&wrapir::exec::TensorSpec {
            stride: stride.clone(),
            ..t.spec().clone()
        })
        .unwrap();
        other.copy_from(t).unwrap();
        strided.insert(name.clone(), other);
        layouts.push(stride);
    }
    let mut session = model.session().unwrap();
    judge(&dir, &session.run(&strided).unwrap()).unwrap();
    judge_caches(&strided, "another layout");
    for (name, stride) in mutated.iter().zip(&layouts) {
        assert_eq!(
            strided[name].stride(),
            stride.as_slice(),
            "the caller's tensor keeps its layout"
        );
        assert_eq!(strided[name].size(), eager[name].size());
    }
    // A bundle that does not record mutated inputs names none.
    let old = Model::load(bundle("bundles_cpu/cpp", "softmax"), &ModelOptions::default()).unwrap();
    assert!(old.mutated_inputs().is_empty());
}

#[test]
fn bad_inputs_are_errors_naming_the_input() {
    let dir = bundle("bundles_cpu/cpp", "pointwise_dynamic");
    let model = Model::load(&dir, &ModelOptions::default()).unwrap();
    let inputs = call_inputs(&dir, &model);
    let (first, x) = inputs.first().map(|(k, t)| (k.clone(), t.clone())).unwrap();
    let error = |inputs: &IndexMap<String, Tensor>| -> String {
        match model.run(inputs) {
            Err(e @ ModelError::Run(_)) => e.to_string(),
            other => panic!("expected an input error, got {other:?}"),
        }
    };
    // A dtype other than declared.
    let mut wrong = inputs.clone();
    wrong.insert(
        first.clone(),
        Tensor::from_vec(vec![0i64; x.numel()], x.size()).unwrap(),
    );
    let e = error(&wrong);
    common::assert_contains(&e, &format!("`{first}` is i64[{}]", x.numel()));
    // A size outside the declared range of its symbol.
    let tiny: IndexMap<String, Tensor> = inputs
        .iter()
        .map(|(k, _)| (k.clone(), Tensor::from_vec(vec![0.5f32], &[1]).unwrap()))
        .collect();
    let e = error(&tiny);
    common::assert_contains(&e, &format!("size 0 of `{first}` is 1"));
    common::assert_contains(&e, "outside its range");
    // A missing input, and a name the program does not have.
    let mut missing = inputs.clone();
    missing.shift_remove(&first);
    common::assert_contains(&error(&missing), &format!("`{first}` was not supplied"));
    let mut unknown = inputs.clone();
    unknown.insert("no_such_input".into(), x.clone());
    common::assert_contains(
        &error(&unknown),
        "`no_such_input` is neither a graph input nor a constant",
    );
    // A weight is the model's own.
    let cnn = bundle("bundles_cpu/cpp", "small_cnn");
    let cnn_model = Model::load(&cnn, &ModelOptions::default()).unwrap();
    let weight = Bundle::open(&cnn).unwrap().weights()[0].clone();
    let mut with_weight = call_inputs(&cnn, &cnn_model);
    with_weight.insert(weight.clone(), x);
    let e = cnn_model.run(&with_weight).unwrap_err().to_string();
    common::assert_contains(&e, &format!("`{weight}` is a weight of the model"));
}

#[test]
fn devices_that_cannot_run_the_model_are_load_errors() {
    // A CUDA bundle (Triton kernels) asked to run on the CPU.
    let triton = common::root().join("fixtures/inductor/bundles/softmax");
    let e = Model::load(&triton, &ModelOptions::default()).unwrap_err().to_string();
    common::assert_contains(&e, "is a CUDA triton kernel");
    // Not a bundle at all.
    let e = Model::load("no/such/bundle", &ModelOptions::default())
        .unwrap_err()
        .to_string();
    common::assert_contains(&e, "no/such/bundle");
    let e = Model::from_bytes(b"not a package".to_vec(), &ModelOptions::default())
        .unwrap_err()
        .to_string();
    common::assert_contains(&e, IN_MEMORY);
    // A CUDA device in a build without the CUDA backend.
    if cfg!(not(feature = "cuda")) {
        let options = ModelOptions {
            device: "cuda:0".parse().unwrap(),
            ..ModelOptions::default()
        };
        let e = Model::load(bundle("bundles_cpu/cpp", "softmax"), &options)
            .unwrap_err()
            .to_string();
        common::assert_contains(&e, "built without the `cuda` feature");
    }
}

#[test]
fn devices_parse_from_their_names() {
    assert_eq!("cpu".parse::<Device>(), Ok(Device::Cpu));
    assert_eq!("cuda".parse::<Device>(), Ok(Device::Cuda(0)));
    assert_eq!("cuda:3".parse::<Device>(), Ok(Device::Cuda(3)));
    for bad in ["gpu", "cuda:", "cuda:x", "cuda:-1", "CPU", "cuda:99999999999999999999"] {
        let e = bad.parse::<Device>().unwrap_err();
        common::assert_contains(&e, &format!("unknown device `{bad}`"));
    }
    assert_eq!(Device::Cuda(1).to_string(), "cuda:1");
    assert_eq!(Device::Cpu.to_string(), "cpu");
}

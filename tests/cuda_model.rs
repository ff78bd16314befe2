#![cfg(feature = "cuda")]
//! `wrapir::runtime::cuda::Model` on real bundles (GPU only): one load, many
//! calls, from one thread and from several at once; results equal eager
//! within the bundle's tolerance and, call after call and thread against
//! thread, equal each other bit for bit (the same kernels and library calls
//! replayed). Dynamic bundles take sizes inside their declared ranges and
//! refuse others with an error that names the input, dimension, symbol and
//! range.
//!
//! `cargo test --features cuda --test cuda_model` on a machine with a GPU.

mod common;

use common::read_tensors as tensors;
use common::root;
use indexmap::IndexMap;
use std::path::{Path, PathBuf};
use wrapir::exec::compare::{compare_leaves, output_leaves};
use wrapir::exec::{Tensor, Value};
use wrapir::format::bundle_json::{BundleMeta, Tolerance};
use wrapir::runtime::cuda::{CudaPaths, DeviceInput, Model, ModelOptions};

/// The default model options, with the CUDA libraries and the kernel cache
/// where the environment says (as the CLI finds them).
fn options() -> ModelOptions {
    ModelOptions {
        paths: CudaPaths::from_env(),
        ..ModelOptions::default()
    }
}

fn bundle(name: &str) -> PathBuf {
    root().join("fixtures/inductor/bundles").join(name)
}

/// The bundle `name` loaded as a model with [`options`], its directory and
/// the stored inputs of a call.
fn load(name: &str) -> (PathBuf, Model, IndexMap<String, Tensor>) {
    let dir = bundle(name);
    let model = Model::load(&dir, &options()).unwrap_or_else(|e| panic!("{name}: {e}"));
    let inputs = call_inputs(&model, &dir);
    (dir, model, inputs)
}

/// The stored inputs a call supplies (everything but the weights).
fn call_inputs(model: &Model, dir: &Path) -> IndexMap<String, Tensor> {
    let stored = tensors(&dir.join("inputs.safetensors"));
    model
        .input_names()
        .iter()
        .map(|n| {
            (
                n.clone(),
                stored.get(n).unwrap_or_else(|| panic!("{n} not stored")).clone(),
            )
        })
        .collect()
}

/// Every output's dtype, sizes and element bits (floating elements widened
/// to f64 exactly, integers to i64; complex as their parts).
fn bits(outputs: &[Value<Tensor>]) -> Vec<(String, Vec<i64>, Vec<u64>)> {
    use wrapir::exec::compare::OutputLeaf;
    output_leaves(outputs)
        .iter()
        .map(|leaf| match leaf {
            OutputLeaf::Tensor(t) => {
                let t = if t.dtype().is_complex() {
                    t.view_as_real().expect("complex parts")
                } else {
                    (*t).clone()
                };
                (t.dtype().to_string(), t.size().to_vec(), common::element_bits(&t))
            }
            OutputLeaf::Int(i) => ("int".to_string(), Vec::new(), vec![*i as u64]),
        })
        .collect()
}

fn check_eager(dir: &Path, outputs: &[Value<Tensor>]) {
    let meta = BundleMeta::from_json(&std::fs::read_to_string(dir.join(BundleMeta::FILE)).unwrap()).unwrap();
    let expected = tensors(&dir.join(BundleMeta::EXPECTED));
    let tolerance = meta.tolerance.unwrap_or(Tolerance { rtol: 2e-2, atol: 2e-2 });
    let got = output_leaves(outputs);
    if let Some(e) = compare_leaves(&got, &expected, meta.int_outputs.as_deref(), Some(tolerance)).first_error() {
        panic!("{}: {e}", dir.display());
    }
}

/// Bundles of every op family: convolutions and GEMMs (cuDNN, cuBLAS),
/// f32 attention (own kernel), bf16 attention (cuDNN), built-in kernels
/// with a device read (nonzero), a conditional, and a dynamic-shape model.
const BUNDLES: &[&str] = &[
    "resnet",
    "mobilenet_v3",
    "vit",
    "gpt2_bf16",
    "llama",
    "nonzero",
    "cond_branches",
    "llama_dynamic",
];

#[test]
fn calls_match_eager_and_replay_bit_for_bit() {
    for name in BUNDLES {
        let (dir, model, inputs) = load(name);
        let report = model.load_report();
        assert!(report.kernels > 0, "{name}: no kernels loaded");
        // Every library the program calls was started on its own thread, without error.
        for (library, primed) in &report.primed {
            assert!(primed.is_ok(), "{name}: priming {library}: {primed:?}");
        }
        let libraries: Vec<&str> = report.primed.iter().map(|(l, _)| l.as_str()).collect();
        let program = model.program();
        let calls = |op: &str| {
            program
                .main
                .lines
                .iter()
                .any(|l| matches!(l, wrapir::ir::Line::ExternKernelOut { call, .. } | wrapir::ir::Line::ExternKernelAlloc(call) if call.op.contains(op)))
        };
        let dnn = calls("convolution");
        assert_eq!(libraries.contains(&"cuDNN"), dnn, "{name}: cuDNN primed {libraries:?}");
        assert!(report.device_memory_in_use > 0, "{name}: no device memory in use");
        let first = model.run(&inputs).unwrap_or_else(|e| panic!("{name}: first call: {e}"));
        check_eager(&dir, &first);
        for call in 1..4 {
            let again = model
                .run(&inputs)
                .unwrap_or_else(|e| panic!("{name}: call {call}: {e}"));
            assert_eq!(bits(&first), bits(&again), "{name}: call {call} differs from the first");
        }
        let session = model.session().unwrap();
        assert_eq!(session.recordings(), 1, "{name}: one shape, one recording");
    }
}

#[test]
fn threads_share_one_model() {
    for name in ["resnet", "gpt2_bf16", "nonzero"] {
        let (_, model, inputs) = load(name);
        let reference = bits(&model.run(&inputs).unwrap());
        std::thread::scope(|scope| {
            let handles: Vec<_> = (0..4)
                .map(|t| {
                    let (model, inputs, reference) = (&model, &inputs, &reference);
                    scope.spawn(move || {
                        for call in 0..6 {
                            let out = model
                                .run(inputs)
                                .unwrap_or_else(|e| panic!("{name} thread {t} call {call}: {e}"));
                            assert_eq!(&bits(&out), reference, "{name}: thread {t} call {call}");
                        }
                    })
                })
                .collect();
            for h in handles {
                h.join().unwrap();
            }
        });
    }
}

#[test]
fn dynamic_sizes_inside_the_range_run_and_outside_are_refused() {
    let (dir, model, inputs) = load("bert_dynamic");
    let first = model.run(&inputs).unwrap();
    check_eager(&dir, &first);
    // Another sequence length in range: its own bucket, run twice (record, replay).
    let name = model.input_names()[0].clone();
    let ids = &inputs[&name];
    let (batch, seq) = (ids.size()[0], ids.size()[1]);
    let shorter: Vec<i64> = (0..batch * (seq - 2)).map(|i| i % 7).collect();
    let t = Tensor::from_i64(wrapir::ir::DType::Int64, &shorter, &[batch, seq - 2]).unwrap();
    let other: IndexMap<String, Tensor> = [(name.clone(), t)].into_iter().collect();
    let a = model.run(&other).unwrap();
    let b = model.run(&other).unwrap();
    assert_eq!(bits(&a), bits(&b));
    // bert_dynamic's sequence symbol lies in [2, 64].
    let long: Vec<i64> = vec![1; (batch * 65) as usize];
    let t = Tensor::from_i64(wrapir::ir::DType::Int64, &long, &[batch, 65]).unwrap();
    let bad: IndexMap<String, Tensor> = [(name.clone(), t)].into_iter().collect();
    let e = model.run(&bad).unwrap_err().to_string();
    assert!(
        e.contains(&format!("size 1 of `{name}`")) && e.contains("[2, 64]"),
        "{e}"
    );
}

#[test]
fn device_inputs_are_used_in_place() {
    use cudarc::driver::{CudaContext, DevicePtr};
    let (_, model, inputs) = load("resnet");
    let reference = model.run(&inputs).unwrap();
    let ctx = CudaContext::new(0).unwrap();
    // SAFETY: the test's slices are used on one stream only; tracking would
    // synchronise the context at stream creation, under other tests' captures.
    unsafe { ctx.disable_event_tracking() };
    let stream = ctx.new_stream().unwrap();
    let mut device = IndexMap::new();
    let mut keep = Vec::new();
    for (name, t) in &inputs {
        let values = t.to_vec::<f32>().unwrap();
        let slice = stream.clone_htod(&values).unwrap();
        let ptr = {
            let (ptr, _sync) = slice.device_ptr(&stream);
            ptr
        };
        device.insert(
            name.clone(),
            DeviceInput {
                ptr,
                bytes: values.len() * 4,
                spec: t.spec().clone(),
            },
        );
        keep.push(slice);
    }
    let mut session = model.session().unwrap();
    // The session kept from `model.run` holds that call's recording (host
    // inputs staged in the session's own buffers).
    let before = session.recordings();
    for call in 0..3 {
        // SAFETY: the slices live until the end of the test and nothing else writes them.
        unsafe { session.run_device(&device, stream.cu_stream() as u64) }.unwrap();
        let out = session.outputs_to_host().unwrap();
        assert_eq!(bits(&out), bits(&reference), "call {call}");
    }
    // The same device buffers, borrowed afresh on every call, are the same
    // inputs: the first call records and the others replay.
    assert_eq!(session.recordings(), before + 1, "run_device recorded more than once");
    // An input labelled with another CUDA device is an error naming it.
    let mut elsewhere = device.clone();
    let (name, first) = elsewhere.iter_mut().next().unwrap();
    let name = name.clone();
    first.spec.device = wrapir::ir::Device::cuda(1);
    // SAFETY: as above; the call fails before reading any input.
    let e = unsafe { session.run_device(&elsewhere, stream.cu_stream() as u64) }.unwrap_err();
    assert!(
        e.to_string()
            .contains(&format!("input `{name}` is on cuda:1; the model runs on cuda:0")),
        "{e}"
    );
    stream.synchronize().unwrap();
    drop(keep);
}

#[test]
fn convolution_plans_are_made_ahead_on_threads() {
    for name in ["mobilenet_v3", "resnet", "vit", "gpt2_bf16"] {
        let dir = bundle(name);
        let ahead = Model::load(&dir, &options()).unwrap_or_else(|e| panic!("{name}: {e}"));
        let at_first_call = Model::load(
            &dir,
            &ModelOptions {
                plan_threads: 0,
                ..options()
            },
        )
        .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(
            at_first_call.load_report().conv_plans.is_none(),
            "{name}: planned with 0 threads"
        );
        let report = ahead.load_report().conv_plans.clone();
        if name == "gpt2_bf16" {
            assert!(report.is_none(), "{name} calls no convolution: {report:?}");
        } else {
            let report = report.unwrap_or_else(|| panic!("{name}: no plans made ahead"));
            assert!(report.made > 0 && report.failed.is_empty(), "{name}: {report:?}");
            // The shapes-only run foresaw every plan the first call needed.
            assert_eq!(report.made_by_warm_up, Some(0), "{name}: {report:?}");
        }
        let inputs = call_inputs(&ahead, &dir);
        let out = ahead.run(&inputs).unwrap_or_else(|e| panic!("{name}: {e}"));
        check_eager(&dir, &out);
        let reference = at_first_call.run(&inputs).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(
            bits(&out),
            bits(&reference),
            "{name}: plans made ahead changed the result"
        );
        // A second session makes its plans ahead too, with the same results.
        std::thread::scope(|scope| {
            let (ahead, inputs, reference) = (&ahead, &inputs, &reference);
            let threads: Vec<_> = (0..2)
                .map(|_| scope.spawn(move || bits(&ahead.run(inputs).unwrap())))
                .collect();
            for t in threads {
                assert_eq!(t.join().unwrap(), bits(reference), "{name}: a second session differs");
            }
        });
    }
}

#[test]
fn runtime_compiled_convolution_plans_are_restored_from_the_kernel_cache() {
    let name = "mobilenet_v3";
    let dir = bundle(name);
    let cache = std::env::temp_dir().join(format!("wrapir-plan-cache-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&cache);
    let with_cache = || ModelOptions {
        paths: CudaPaths {
            kernel_cache: Some(cache.clone()),
            ..CudaPaths::from_env()
        },
        ..options()
    };
    let first = Model::load(&dir, &with_cache()).unwrap_or_else(|e| panic!("{name}: {e}"));
    let made = first.load_report().conv_plans.clone().expect("plans made ahead");
    assert!(
        made.runtime_compiled > 0,
        "{name}: no engine compiled at run time: {made:?}"
    );
    assert_eq!(made.restored, 0, "{name}: restored from an empty cache: {made:?}");
    let stored = std::fs::read_dir(&cache)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .starts_with("cudnn-conv-")
        })
        .count();
    assert_eq!(
        stored, made.runtime_compiled,
        "{name}: one cache entry per compiled plan"
    );
    let second = Model::load(&dir, &with_cache()).unwrap_or_else(|e| panic!("{name}: {e}"));
    let again = second.load_report().conv_plans.clone().expect("plans made ahead");
    assert_eq!(again.restored, made.runtime_compiled, "{name}: {again:?}");
    let inputs = call_inputs(&first, &dir);
    let a = first.run(&inputs).unwrap();
    let b = second.run(&inputs).unwrap();
    check_eager(&dir, &b);
    assert_eq!(bits(&a), bits(&b), "{name}: a restored plan changed the result");
    let _ = std::fs::remove_dir_all(&cache);
}

/// `wrapir pack --cudnn-plans`'s library path: the plans a model's engines
/// compile at run time, made on this GPU, travel in its package; a fresh
/// load of the package with no kernel cache restores every one of them and
/// computes the same bits. Plans the GPU's cuDNN refuses are made again.
#[test]
fn a_package_carries_the_cudnn_plans_of_its_gpu() {
    use wrapir::bundle::Bundle;
    use wrapir::runtime::{cuda::make_cudnn_plans, CudnnPlans};
    let name = "mobilenet_v3";
    let dir = bundle(name);
    let no_cache = CudaPaths {
        kernel_cache: None,
        ..CudaPaths::from_env()
    };
    let source = Bundle::open(&dir).unwrap();
    let plans = make_cudnn_plans(&source, 0, no_cache.clone()).unwrap_or_else(|e| panic!("{name}: {e}"));
    let made_for = plans.made_for.clone().expect("the plans name their GPU");
    assert!(!plans.is_empty(), "{name}: no plan compiled at run time");
    let scratch = std::env::temp_dir().join(format!("wrapir-plan-package-{}", std::process::id()));
    std::fs::create_dir_all(&scratch).unwrap();
    let pkg = scratch.join("mobilenet_v3.wirpkg");
    let summary = source
        .clone()
        .with_cudnn_plans(plans.clone())
        .write_package(&pkg)
        .unwrap();
    assert_eq!(summary.metadata.cudnn_plans_for.as_deref(), Some(made_for.as_str()));
    let options = || ModelOptions {
        paths: no_cache.clone(),
        ..options()
    };
    let packaged = Model::load(&pkg, &options()).unwrap_or_else(|e| panic!("{name}: {e}"));
    let report = packaged.load_report().conv_plans.clone().expect("plans made ahead");
    assert_eq!(report.restored, plans.len(), "{name}: {report:?}");
    assert_eq!(report.runtime_compiled, plans.len(), "{name}: {report:?}");
    assert_eq!(report.made_by_warm_up, Some(0), "{name}: {report:?}");
    let plain = Model::load(&dir, &options()).unwrap_or_else(|e| panic!("{name}: {e}"));
    let inputs = call_inputs(&plain, &dir);
    let a = plain.run(&inputs).unwrap();
    let b = packaged.run(&inputs).unwrap();
    check_eager(&dir, &b);
    assert_eq!(bits(&a), bits(&b), "{name}: a packaged plan changed the result");
    // The same names with JSON cuDNN refuses: every plan is made again, same bits.
    let refused = CudnnPlans::new(
        Some(made_for),
        plans
            .iter()
            .map(|(n, _)| (n.to_string(), b"{\"not\": \"a plan\"}".to_vec())),
    );
    let bad = scratch.join("refused.wirpkg");
    source.with_cudnn_plans(refused).write_package(&bad).unwrap();
    let remade = Model::load(&bad, &options()).unwrap_or_else(|e| panic!("{name}: {e}"));
    let report = remade.load_report().conv_plans.clone().expect("plans made ahead");
    assert_eq!(report.restored, 0, "{name}: {report:?}");
    assert_eq!(report.runtime_compiled, plans.len(), "{name}: {report:?}");
    assert_eq!(
        bits(&a),
        bits(&remade.run(&inputs).unwrap()),
        "{name}: remade plans changed the result"
    );
    let _ = std::fs::remove_dir_all(&scratch);
}

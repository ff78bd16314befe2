#![cfg(feature = "cuda")]
//! Prepared plans (direct launches and CUDA graphs) against the interpreter,
//! on the committed bundles: bit-for-bit equal outputs and inputs over
//! several calls, recordings per device-read value, the generator's advance,
//! and the graph forms of recordings that read device values.
//!
//! Compiled only with the `cuda` feature; on a machine with a GPU:
//! `cargo test --features cuda --test cuda_prepared`.

mod common;

use common::read_tensors as tensors;
use common::root;
use indexmap::IndexMap;
use std::path::Path;
use wrapir::bundle::KernelImages;
use wrapir::exec::cuda::{CudaBackend, CudaOptions, CudaPaths, GraphReads};
use wrapir::exec::{Backend, Tensor, Value};
use wrapir::format::bundle_json::BundleMeta;
use wrapir::ir::{DType, Program};

use wrapir::exec::cuda::{place_inputs, CudaTensor, Prepared, PreparedCache, Replay};

/// The sizes of a host tensor and the bits of its elements
/// ([`common::element_bits`]), for bit-for-bit comparison.
fn bits(t: &Tensor) -> (Vec<i64>, Vec<u64>) {
    (t.size().to_vec(), common::element_bits(t))
}

fn device_bits(backend: &mut CudaBackend, values: &[Value<CudaTensor>]) -> Vec<(Vec<i64>, Vec<u64>)> {
    let mut out = Vec::new();
    for v in values {
        if let Value::Tensor(t) = v {
            out.push(bits(&backend.copy_out(t).expect("copy out")));
        }
    }
    out
}

/// The options a bundle runs with: its kernels and the math modes of its
/// `bundle.json` (PyTorch's defaults where it records none).
fn bundle_options(dir: &Path) -> CudaOptions {
    let path = dir.join(BundleMeta::FILE);
    let meta = match std::fs::read_to_string(&path) {
        Ok(text) => BundleMeta::from_json(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display())),
        Err(_) => BundleMeta::default(),
    };
    CudaOptions {
        paths: CudaPaths::from_env(),
        ..CudaOptions::for_bundle(KernelImages::from(dir), &meta)
    }
}

fn load_bundle(dir: &Path) -> (Program, IndexMap<String, Tensor>) {
    let text = std::fs::read_to_string(dir.join("program.json")).expect("program.json");
    (
        Program::from_json(&text).expect("program"),
        tensors(&dir.join("inputs.safetensors")),
    )
}

/// Runs `calls` calls of `bundle` through the interpreter on one copy of
/// the inputs and through a [`PreparedCache`] (direct or graphs) on another,
/// calling `between(call, backend, interp_inputs, prepared_inputs)` before
/// each call. Compares, per call, the outputs and then the inputs (which a
/// program may write) bit for bit. `Ok(recordings)`, or `Err` when the
/// bundle cannot be prepared (the reason).
fn check_prepared(
    dir: &Path,
    graphs: bool,
    calls: usize,
    between: &mut dyn FnMut(usize, &mut CudaBackend, &[Value<CudaTensor>], &[Value<CudaTensor>]),
) -> Result<usize, String> {
    let name = common::case_name(dir);
    let (program, inputs) = load_bundle(dir);
    let mut backend = CudaBackend::new(CudaOptions {
        host_fallback: false,
        ..bundle_options(dir)
    })
    .expect("GPU");
    let (plan, interp_args, interp_consts) = place_inputs(&program, &mut backend, &inputs).expect("inputs");
    let (_, args, consts) = place_inputs(&program, &mut backend, &inputs).expect("inputs");
    let mut cache = PreparedCache::default();
    // Random draws (`aten.randint`, Inductor's seed buffer) advance the
    // generator in the interpreter and in replays alike: call k of each
    // starts from the state the interpreter's call k started from.
    let mut rng = backend.cuda_rng().expect("generator state");
    for call in 0..calls {
        between(call, &mut backend, &interp_args, &args);
        backend.set_cuda_rng(rng).expect("generator state");
        let want = plan
            .run(&mut backend, interp_args.clone(), &interp_consts)
            .expect("interpreter run");
        let want = device_bits(&mut backend, &want.outputs);
        let next = backend.cuda_rng().expect("generator state");
        backend.set_cuda_rng(rng).expect("generator state");
        rng = next;
        let got = match cache.run(&mut backend, &plan, &args, &consts, graphs) {
            Ok(p) => p.outputs().to_vec(),
            Err(e) if call == 0 && e.to_string().contains("cannot be prepared") => return Err(e.to_string()),
            Err(e) => panic!("{name}: call {call}: {e}"),
        };
        let got = device_bits(&mut backend, &got);
        assert!(
            got == want,
            "{name} ({}): call {call}: outputs differ from the interpreter's",
            if graphs { "graphs" } else { "direct" }
        );
        let (wi, gi) = (
            device_bits(&mut backend, &interp_args),
            device_bits(&mut backend, &args),
        );
        assert!(
            gi == wi,
            "{name}: call {call}: inputs after the call differ from the interpreter's"
        );
    }
    backend.synchronize().expect("sync");
    Ok(cache.recordings)
}

#[test]
fn prepared_direct_and_graphs_equal_the_interpreter_over_three_calls() {
    let mut prepared = Vec::new();
    let mut refused = Vec::new();
    for dir in common::cuda_bundles() {
        let name = common::case_name(&dir);
        let direct = check_prepared(&dir, false, 3, &mut |_, _, _, _| {});
        let graphs = check_prepared(&dir, true, 3, &mut |_, _, _, _| {});
        match (direct, graphs) {
            (Ok(a), Ok(b)) => {
                // Same inputs every call: one recording serves all three.
                assert_eq!((a, b), (1, 1), "{name}: recordings (direct, graphs)");
                prepared.push(name);
            }
            (Err(a), Err(b)) => {
                assert_eq!(a, b, "{name}: direct and graph modes refuse for different reasons");
                refused.push(format!("{name}: {a}"));
            }
            (a, b) => panic!("{name}: direct {a:?}, graphs {b:?}"),
        }
    }
    eprintln!(
        "prepared ({}): {}\nrefused ({}):\n  {}",
        prepared.len(),
        prepared.join(", "),
        refused.len(),
        refused.join("\n  ")
    );
    // Every bundle prepares: Triton kernels, cuBLAS matmuls and the built-in
    // kernels (compaction, jagged conversions, scatter, index_put_, topk) are
    // all recorded.
    assert!(
        refused.is_empty(),
        "bundles that did not prepare:\n  {}",
        refused.join("\n  ")
    );
}

/// Inductor's seed buffer on the device: PyTorch's values at the backend's
/// generator state, which every draw advances, in the interpreter and in
/// replays of a prepared recording (direct and graphs) alike.
#[test]
fn randint_draws_pytorchs_values_and_replays_advance_the_generator() {
    // The same program as tests/host_features.rs's SEEDS_PROGRAM.
    let program = Program::from_json(
        r#"{"format_version": 1, "main": {"inputs": [],
 "buffers": {"buf0": {"kind": "tensor", "layout": {"dtype": "int64", "device": "cuda:0", "size": [3], "stride": [1]}}},
 "lines": [{"line": "allocate", "buffer": "buf0"},
  {"line": "extern_kernel_out", "op": "aten.randint.low_out", "args": [{"kind": "expr", "value": -9223372036854775808},
   {"kind": "expr", "value": 9223372036854775807}, {"kind": "list", "value": [{"kind": "expr", "value": 3}]}], "out": "buf0"}],
 "outputs": [{"kind": "buffer", "value": "buf0"}]}}"#,
    )
    .unwrap();
    let first = vec![-1862263915586927219i64, 307676209692372650, -8763487590234822823];
    let mut backend = CudaBackend::new(CudaOptions {
        cuda_rng: wrapir::format::bundle_json::CudaRngState { seed: 0, offset: 0 },
        ..CudaOptions::from_env()
    })
    .expect("GPU");
    let (plan, args, consts) = place_inputs(&program, &mut backend, &IndexMap::new()).expect("inputs");
    let values = |backend: &mut CudaBackend, outs: &[Value<CudaTensor>]| match outs.first() {
        Some(Value::Tensor(t)) => backend.copy_out(t).unwrap().to_i64_vec().unwrap(),
        other => panic!("output {other:?}"),
    };
    let zero = wrapir::format::bundle_json::CudaRngState { seed: 0, offset: 0 };
    // The interpreter's three calls from offset 0: PyTorch's first draw, then new numbers.
    let mut want = Vec::new();
    for _ in 0..3 {
        let r = plan.run(&mut backend, args.clone(), &consts).unwrap();
        want.push(values(&mut backend, &r.outputs));
    }
    assert_eq!(want[0], first);
    assert_ne!(want[1], first);
    assert_ne!(want[2], want[1]);
    assert_eq!(backend.cuda_rng().unwrap().offset, 12);
    for graphs in [false, true] {
        backend.set_cuda_rng(zero).unwrap();
        let mut cache = PreparedCache::default();
        for (call, want) in want.iter().enumerate() {
            let outs = cache
                .run(&mut backend, &plan, &args, &consts, graphs)
                .unwrap()
                .outputs()
                .to_vec();
            assert_eq!(&values(&mut backend, &outs), want, "graphs {graphs}, call {call}");
        }
        assert_eq!(cache.recordings, 1);
        assert_eq!(backend.cuda_rng().unwrap().offset, 12, "graphs {graphs}");
    }
}

/// `item_slice` reads `u0 = arg0_1.item()`: writing another value into the
/// same input tensor makes the replay diverge at that read and record again
/// (a new shape); writing the first value back replays the first recording.
#[test]
fn a_changed_device_read_records_again() {
    let dir = root().join("fixtures/inductor/bundles/item_slice");
    let (_, inputs) = load_bundle(&dir);
    let first = inputs.get("arg0_1").expect("arg0_1");
    let original = first.to_i64_vec().expect("an integer scalar")[0];
    assert_eq!(first.dtype(), DType::Int64);
    let other = if original > 1 { original - 1 } else { original + 1 };
    let value = |v: i64| Tensor::from_vec(vec![v], first.size()).expect("scalar");
    for graphs in [false, true] {
        let plan_values = [original, other, original, other];
        let recordings = check_prepared(
            &dir,
            graphs,
            plan_values.len(),
            &mut |call, backend, interp, prepared| {
                let v = value(plan_values[call]);
                for args in [interp, prepared] {
                    let Some(Value::Tensor(t)) = args.first() else {
                        panic!("arg0_1 is not a tensor")
                    };
                    backend.overwrite(t, &v).expect("overwrite");
                }
            },
        )
        .expect("item_slice prepares");
        assert_eq!(recordings, 2, "graphs {graphs}: one recording per value of u0");
    }
}

/// A recording that reads device values (an `item()`, `cond` and
/// `while_loop` predicates, a compaction's count, an unbacked size) replays
/// as one graph whose reads are checked on the device under conditional IF
/// nodes ([`GraphReads::OneGraph`]), or as segments with host reads between
/// them ([`GraphReads::Segments`]); [`GraphReads::Auto`] picks one graph from
/// [`GraphReads::AUTO_MIN_READS`] reads. Every form equals the direct replay
/// bit for bit, call after call.
#[test]
fn recordings_with_device_reads_replay_as_one_graph_or_segments() {
    for name in common::DEVICE_READ_BUNDLES {
        let dir = root().join("fixtures/inductor/bundles").join(name);
        let (program, inputs) = load_bundle(&dir);
        for mode in [GraphReads::OneGraph, GraphReads::Segments, GraphReads::Auto] {
            let mut backend = CudaBackend::new(CudaOptions {
                graph_reads: mode,
                ..bundle_options(&dir)
            })
            .expect("GPU");
            let (plan, args, consts) = place_inputs(&program, &mut backend, &inputs).expect("inputs");
            let (mut prepared, _) = Prepared::record(&mut backend, &plan, args, &consts).expect("records");
            let reads = prepared.reads();
            assert!(reads > 0, "{name}: the recording reads no device value");
            assert_eq!(prepared.replay(&backend).expect("direct"), Replay::Done, "{name}");
            let want = device_bits(&mut backend, prepared.outputs());
            for call in 0..3 {
                assert_eq!(
                    prepared.replay_graphs(&backend).expect("graphs"),
                    Replay::Done,
                    "{name}: call {call}"
                );
                let got = device_bits(&mut backend, prepared.outputs());
                assert!(got == want, "{name} ({mode:?}): call {call} differs from direct");
            }
            let form = prepared.graph_form().expect("captured");
            let one_graph = match mode {
                GraphReads::OneGraph => true,
                GraphReads::Segments => false,
                GraphReads::Auto => reads >= GraphReads::AUTO_MIN_READS,
            };
            if one_graph {
                assert_eq!(prepared.captured_graphs(), 1, "{name}: {form}");
                assert!(form.starts_with("one graph, "), "{name}: {form}");
                let device = prepared.graph_device_us(&backend, 5).expect("timed");
                assert!(device.is_some_and(|us| us > 0.0), "{name}: device time {device:?}");
            } else {
                assert!(
                    form.contains("segment graphs") && form.contains("graph_reads"),
                    "{name}: {form}"
                );
            }
            eprintln!("{name} ({mode:?}, {reads} reads): {form}");
        }
    }
}

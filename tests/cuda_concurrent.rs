#![cfg(feature = "cuda")]
//! Concurrent CUDA graph replay ([`GraphStreams::Concurrent`]: each
//! recorded operation after only those the program's dependency DAG orders
//! it after) against single-stream replay, bit for bit, call after call, on
//! committed bundles with parallel structure: attention blocks (BERT, GPT-2,
//! Llama, ViT, T5), the closest to a mixture of experts' routing (top-k,
//! scatter-add) and CNNs with branches (ResNet, DenseNet, ShuffleNet,
//! EfficientNet). Also: the concurrent plan's arena against the
//! single-stream one, and that concurrency was found at all.
//!
//! Compiled only with the `cuda` feature; on a machine with a GPU:
//! `cargo test --features cuda --test cuda_concurrent`.

mod common;

use common::{read_tensors, root};
use std::path::Path;
use wrapir::bundle::KernelImages;
use wrapir::exec::cuda::{
    place_inputs, CudaBackend, CudaOptions, CudaPaths, GraphReads, GraphStreams, Prepared, Replay,
};
use wrapir::exec::{Backend, Tensor, Value};
use wrapir::format::bundle_json::BundleMeta;
use wrapir::ir::Program;

const ATTENTION: &[&str] = &["bert", "gpt2", "llama", "vit", "t5"];
const MOE_LIKE: &[&str] = &["topk", "scatter_add"];
const CNN: &[&str] = &["resnet", "densenet", "shufflenet", "efficientnet"];

/// What one replay mode gave: the outputs' sizes and bits after each call,
/// and the recording's facts.
struct Replayed {
    calls: Vec<Vec<(Vec<i64>, Vec<u64>)>>,
    arena: u64,
    single_stream_arena: u64,
    concurrent_ops: usize,
    form: String,
    why_single: Option<String>,
    /// Segments [`GraphStreams::Auto`] measured and chose for.
    choices: usize,
}

/// The bundle in `dir` recorded on a backend that replays graphs as `streams` says
/// (and the device reads of a recording as segments, the form concurrent
/// segments apply to).
fn record(dir: &Path, streams: GraphStreams) -> (CudaBackend, Prepared) {
    record_with(dir, streams, GraphReads::Segments)
}

/// The bundle in `dir` recorded on a backend that replays graphs as
/// `streams` and `reads` say.
fn record_with(dir: &Path, streams: GraphStreams, reads: GraphReads) -> (CudaBackend, Prepared) {
    let name = dir.file_name().unwrap().to_string_lossy().to_string();
    let program =
        Program::from_json(&std::fs::read_to_string(dir.join("program.json")).expect("program.json")).expect("program");
    let inputs = read_tensors(&dir.join("inputs.safetensors"));
    let meta = match std::fs::read_to_string(dir.join(BundleMeta::FILE)) {
        Ok(text) => BundleMeta::from_json(&text).expect("bundle.json"),
        Err(_) => BundleMeta::default(),
    };
    let mut backend = CudaBackend::new(CudaOptions {
        paths: CudaPaths::from_env(),
        graph_streams: streams,
        graph_reads: reads,
        ..CudaOptions::for_bundle(KernelImages::from(dir), &meta)
    })
    .expect("GPU");
    let (plan, args, consts) = place_inputs(&program, &mut backend, &inputs).unwrap_or_else(|e| panic!("{name}: {e}"));
    let (prepared, _) = Prepared::record(&mut backend, &plan, args, &consts).unwrap_or_else(|e| panic!("{name}: {e}"));
    (backend, prepared)
}

fn replay(dir: &Path, streams: GraphStreams) -> Replayed {
    replay_with(dir, streams, GraphReads::Segments)
}

fn replay_with(dir: &Path, streams: GraphStreams, reads: GraphReads) -> Replayed {
    let name = dir.file_name().unwrap().to_string_lossy().to_string();
    let (mut backend, mut prepared) = record_with(dir, streams, reads);
    let mut calls = Vec::new();
    for call in 0..3 {
        let done = prepared
            .replay_graphs(&backend)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(done, Replay::Done, "{name}: call {call}");
        let mut bits = Vec::new();
        for v in prepared.outputs().to_vec() {
            if let Value::Tensor(t) = v {
                let host = backend.copy_out(&t).expect("copy out");
                bits.push((host.size().to_vec(), common::element_bits(&host)));
            }
        }
        calls.push(bits);
    }
    Replayed {
        calls,
        arena: prepared.arena_bytes(),
        single_stream_arena: prepared.single_stream_arena_bytes(),
        concurrent_ops: prepared.concurrent_ops(),
        form: prepared.graph_form().unwrap_or_default(),
        why_single: prepared.single_stream_reason().map(str::to_string),
        choices: prepared.stream_choices().len(),
    }
}

#[test]
fn concurrent_replay_equals_single_stream_bit_for_bit() {
    let mut failures = Vec::new();
    let mut found = Vec::new();
    for (family, names) in [("attention", ATTENTION), ("moe-like", MOE_LIKE), ("cnn", CNN)] {
        for name in names {
            let dir = root().join("fixtures/inductor/bundles").join(name);
            let single = replay(&dir, GraphStreams::Single);
            let concurrent = replay(&dir, GraphStreams::Concurrent);
            if let Some(why) = &concurrent.why_single {
                failures.push(format!("{name}: replays on one stream: {why}"));
                continue;
            }
            for (call, (a, b)) in single.calls.iter().zip(&concurrent.calls).enumerate() {
                if a != b {
                    failures.push(format!(
                        "{name}: call {call}: concurrent replay differs from single stream"
                    ));
                }
            }
            eprintln!(
                "{family} {name}: {} operations may overlap their predecessor; arena {} bytes concurrent, {} single-stream ({:+.1}%); {}",
                concurrent.concurrent_ops,
                concurrent.arena,
                single.arena,
                (concurrent.arena as f64 / single.single_stream_arena.max(1) as f64 - 1.0) * 100.0,
                concurrent.form
            );
            found.push((family, concurrent.concurrent_ops));
        }
    }
    common::assert_no_failures(&failures);
    for family in ["attention", "cnn"] {
        assert!(
            found.iter().any(|(f, n)| *f == family && *n > 0),
            "no {family} bundle has operations that may run concurrently: {found:?}"
        );
    }
}

/// [`GraphStreams::Auto`] (the serving API's default) captures each graph
/// segment as one chain and ordered by the DAG, times both and keeps the
/// faster: whichever it keeps, the results equal single-stream replay bit
/// for bit, call after call, and every segment of these recordings (no
/// device reads, no written inputs) was measured.
#[test]
fn auto_replay_equals_single_stream_and_measures_every_segment() {
    let mut failures = Vec::new();
    for name in ATTENTION.iter().chain(CNN) {
        let dir = root().join("fixtures/inductor/bundles").join(name);
        let single = replay(&dir, GraphStreams::Single);
        let auto = replay(&dir, GraphStreams::Auto);
        if single.calls != auto.calls {
            failures.push(format!("{name}: auto replay differs from single stream"));
        }
        if auto.choices == 0 || !auto.form.contains("measured (auto)") {
            failures.push(format!("{name}: no segment measured: {}", auto.form));
        }
        eprintln!("{name}: {}", auto.form);
    }
    common::assert_no_failures(&failures);
}

/// Bundles whose recordings read device values beyond
/// [`common::DEVICE_READ_BUNDLES`]: a router's sort, and a router's token
/// counts per expert.
const MORE_READS: &[&str] = &["moe_router_sort", "moe_topk", "hf_mixtral"];

/// The mixtures of experts among [`MORE_READS`]: each expert's work waits for
/// its token count only, so their counts are checked together.
const MOE: &[&str] = &["moe_topk", "hf_mixtral"];

/// The checks of a one-graph form (`one graph, R device-checked reads in C checks ...`).
fn checks(form: &str) -> Option<usize> {
    let rest = form.split(" reads in ").nth(1)?;
    rest.split(' ').next()?.parse().ok()
}

/// Recordings that read device values replay as one graph whose levels
/// (what depends on no read, and what each group of reads gates) are
/// captured by the program's DAG ([`GraphReads::OneGraph`] with
/// [`GraphStreams::Concurrent`]): bit for bit what one chain gives, call
/// after call; a mixture of experts checks its experts' counts in fewer
/// checks than it has reads; and [`GraphStreams::Auto`] measures the two
/// one-graph forms and keeps one, with the same results.
#[test]
fn one_graph_ordered_by_the_dag_equals_one_chain_with_device_reads() {
    let mut failures = Vec::new();
    for name in common::DEVICE_READ_BUNDLES.iter().chain(MORE_READS) {
        let dir = root().join("fixtures/inductor/bundles").join(name);
        if !dir.join("program.json").is_file() {
            failures.push(format!(
                "{name}: no committed CUDA bundle (export it on a GPU: `fixtures/inductor/sweep.py --device cuda --only {name}`)"
            ));
            continue;
        }
        let chain = replay_with(&dir, GraphStreams::Single, GraphReads::OneGraph);
        let ordered = replay_with(&dir, GraphStreams::Concurrent, GraphReads::OneGraph);
        let auto = replay_with(&dir, GraphStreams::Auto, GraphReads::OneGraph);
        for (mode, r) in [("by the DAG", &ordered), ("auto", &auto)] {
            if r.calls != chain.calls {
                failures.push(format!("{name}: one graph {mode} differs from one chain: {}", r.form));
            }
        }
        let why = ordered.why_single.clone().unwrap_or_default();
        if !ordered.form.starts_with("one graph, ") {
            failures.push(format!("{name}: not one graph: {}", ordered.form));
        } else if why.is_empty() && !ordered.form.contains("ordered by the program's DAG") {
            failures.push(format!("{name}: one graph not ordered by the DAG: {}", ordered.form));
        }
        if why.is_empty() && !auto.form.contains("measured (auto)") {
            failures.push(format!("{name}: auto measured nothing: {}", auto.form));
        }
        let (c, a) = (checks(&chain.form), checks(&ordered.form));
        if MOE.contains(name) && !matches!((c, a), (Some(c), Some(a)) if a < c) {
            failures.push(format!(
                "{name}: the experts' counts are not checked together: {} / {}",
                chain.form, ordered.form
            ));
        }
        eprintln!(
            "{name}: chain: {}\n  by the DAG: {}\n  auto: {}{why}",
            chain.form, ordered.form, auto.form
        );
    }
    common::assert_no_failures(&failures);
}

/// In the one graph ordered by the DAG, a read that sees another value
/// than recorded stops the replay ([`Replay::Diverged`]) at that read
/// (`item_slice` reads its input's `item()`), and writing the recorded
/// value back replays again.
#[test]
fn one_graph_ordered_by_the_dag_diverges_at_a_changed_read() {
    let dir = root().join("fixtures/inductor/bundles/item_slice");
    let program =
        Program::from_json(&std::fs::read_to_string(dir.join("program.json")).expect("program.json")).expect("program");
    let inputs = read_tensors(&dir.join("inputs.safetensors"));
    let meta = BundleMeta::from_json(&std::fs::read_to_string(dir.join(BundleMeta::FILE)).unwrap_or_default())
        .unwrap_or_default();
    let mut backend = CudaBackend::new(CudaOptions {
        paths: CudaPaths::from_env(),
        graph_streams: GraphStreams::Concurrent,
        graph_reads: GraphReads::OneGraph,
        ..CudaOptions::for_bundle(KernelImages::from(dir.as_path()), &meta)
    })
    .expect("GPU");
    let (plan, args, consts) = place_inputs(&program, &mut backend, &inputs).expect("inputs");
    let Some(Value::Tensor(input)) = args.first().cloned() else {
        panic!("arg0_1 is not a tensor")
    };
    let (mut prepared, _) = Prepared::record(&mut backend, &plan, args, &consts).expect("records");
    assert_eq!(prepared.replay_graphs(&backend).expect("replay"), Replay::Done);
    let form = prepared.graph_form().unwrap_or_default();
    assert!(form.contains("ordered by the program's DAG"), "{form}");
    let recorded = inputs.get("arg0_1").expect("arg0_1");
    let value = recorded.to_i64_vec().expect("an integer scalar")[0];
    let other = Tensor::from_vec(vec![if value > 1 { value - 1 } else { value + 1 }], recorded.size()).expect("scalar");
    backend.overwrite(&input, &other).expect("overwrite");
    assert_eq!(
        prepared.replay_graphs(&backend).expect("replay"),
        Replay::Diverged { read: 0 }
    );
    backend.overwrite(&input, recorded).expect("overwrite");
    assert_eq!(prepared.replay_graphs(&backend).expect("replay"), Replay::Done);
}

/// The critical-path profile `wrapir bench` prints: the chain that sets the
/// bound is a chain of the recording's operations in replay order, its
/// steps' times add up to the bound, it is shorter than the whole program
/// where the DAG has parallel branches, and the chain replayed alone takes
/// device time.
#[test]
fn critical_path_names_its_chain() {
    for name in ["llama", "resnet"] {
        let dir = root().join("fixtures/inductor/bundles").join(name);
        let (backend, mut prepared) = record(&dir, GraphStreams::Concurrent);
        assert_eq!(prepared.replay_graphs(&backend).expect("replay"), Replay::Done);
        let c = prepared
            .critical_path(&backend, 3)
            .expect("timing")
            .expect("no device reads");
        assert!(!c.chain.is_empty(), "{name}: empty chain");
        assert!(
            c.chain.windows(2).all(|w| w[0].op < w[1].op),
            "{name}: chain out of order: {:?}",
            c.chain
        );
        let total: f64 = c.chain.iter().map(|s| s.us).sum();
        assert!(
            (total - c.critical_us).abs() <= 1e-9 * total.max(1.0),
            "{name}: {total} vs {}",
            c.critical_us
        );
        assert!(c.critical_us <= c.sum_us + 1e-9, "{name}: bound above the sum");
        assert!(c.chain_replay_us > 0.0, "{name}: chain replay took no time");
        assert!(c.chain.iter().all(|s| !s.what.is_empty()), "{name}: unnamed step");
        if prepared.concurrent_ops() > 0 {
            assert!(
                c.chain.len() < c.ops,
                "{name}: concurrent DAG but the chain is every operation"
            );
        }
        eprintln!(
            "{name}: {} of {} operations on the critical path, bound {:.2} us, chain alone {:.2} us, sum {:.2} us",
            c.chain.len(),
            c.ops,
            c.critical_us,
            c.chain_replay_us,
            c.sum_us
        );
    }
}

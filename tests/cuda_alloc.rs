#![cfg(feature = "cuda")]
//! The steady-state replay loops of prepared plans allocate no host memory:
//! a counting global allocator around many replays, direct and through CUDA
//! graphs, of bundles with Triton launches, cuBLAS GEMMs, built-in kernels
//! and device reads.
//!
//! On a machine with a GPU: `cargo test --features cuda --test cuda_alloc`.

use std::alloc::{GlobalAlloc, Layout, System};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use wrapir::exec::cuda::{place_inputs, CudaBackend, CudaOptions, Prepared, Replay};
use wrapir::exec::safetensors;
use wrapir::format::bundle_json::BundleMeta;
use wrapir::ir::Program;

/// Counts allocations and reallocations (frees are not counted).
struct Counting;

static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards every call to the system allocator unchanged.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller's contract is passed on.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract is passed on.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller's contract is passed on.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

const REPLAYS: usize = 1000;

/// Allocations during `REPLAYS` replays after warm-up, direct and graphs.
fn allocations(bundle: &str) -> (usize, usize, usize) {
    let root = std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")));
    let dir = root.join("fixtures/inductor/bundles").join(bundle);
    let program =
        Program::from_json(&std::fs::read_to_string(dir.join("program.json")).expect("program")).expect("program");
    let inputs = safetensors::parse(&std::fs::read(dir.join("inputs.safetensors")).expect("inputs")).expect("inputs");
    let meta = match std::fs::read_to_string(dir.join(BundleMeta::FILE)) {
        Ok(text) => BundleMeta::from_json(&text).expect("bundle.json"),
        Err(_) => BundleMeta::default(),
    };
    // No host fallback: every op of these bundles runs on the device.
    let mut backend = CudaBackend::new(CudaOptions {
        host_fallback: false,
        paths: wrapir::exec::cuda::CudaPaths::from_env(),
        ..CudaOptions::for_bundle(wrapir::bundle::KernelImages::from(&dir), &meta)
    })
    .expect("GPU");
    let (plan, args, constants) = place_inputs(&program, &mut backend, &inputs).expect("inputs");
    let (mut prepared, _) = Prepared::record(&mut backend, &plan, args, &constants).expect("prepares");
    let mut count = |backend: &mut CudaBackend, graphs: bool| {
        let replay = |p: &mut Prepared, b: &CudaBackend| if graphs { p.replay_graphs(b) } else { p.replay(b) };
        for _ in 0..20 {
            assert_eq!(replay(&mut prepared, backend).expect("replay"), Replay::Done);
        }
        backend.synchronize().expect("sync");
        let before = ALLOCATIONS.load(Ordering::Relaxed);
        let mut done = 0usize;
        for _ in 0..REPLAYS {
            done += usize::from(replay(&mut prepared, backend).expect("replay") == Replay::Done);
        }
        let allocated = ALLOCATIONS.load(Ordering::Relaxed) - before;
        backend.synchronize().expect("sync");
        assert_eq!(done, REPLAYS, "{bundle}: a replay diverged");
        allocated
    };
    let direct = count(&mut backend, false);
    let graphs = count(&mut backend, true);
    (prepared.launches() + prepared.reads(), direct, graphs)
}

/// One test (the counter is process-wide): Triton-only, cuBLAS + Triton, a
/// device read between launches, and built-in kernels (compaction with its
/// size read back; scatter with its zeroed error flag read after it).
#[test]
fn steady_state_replays_allocate_nothing() {
    for bundle in [
        "softmax",
        "mm_gelu",
        "item_slice",
        "cond_same_shape",
        "nonzero",
        "scatter_reduce_amax",
        "topk",
        "chain_100",
    ] {
        let (ops, direct, graphs) = allocations(bundle);
        eprintln!("{bundle}: {ops} ops per replay; {direct} allocations in {REPLAYS} direct replays, {graphs} in {REPLAYS} graph replays");
        assert_eq!(
            (direct, graphs),
            (0, 0),
            "{bundle}: host allocations in the replay loops (direct, graphs)"
        );
    }
}

//! The libraries' one-time start-up, paid on threads of their own while a
//! model loads: a process's first cuBLAS GEMM costs 100-260 ms after a ready
//! context and its first cuDNN convolution about as much (the libraries'
//! own initialisation, whoever calls them; `benches/RESULTS.md`), and a
//! model's first call would otherwise pay them one after the other. Each
//! primer opens the device's primary context with a stream of its own, makes
//! one tiny call and drains it; what it warms is process- and context-wide.
//! A primer that fails reports why and changes nothing else: the model's own
//! call then meets the same problem and reports it as usual.

use super::cublas::{Gemm, GemmOperand};
use super::dnn::DnnHandle;
use super::driver::{setup_lock, CudaError, Device};
use super::CudaPaths;
use cudarc::cublas::sys as blas_sys;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Primers started by [`start`].
pub(crate) struct Primers(Vec<(&'static str, JoinHandle<Result<Duration, String>>)>);

/// Starts a primer thread for cuBLAS (`blas`) and for cuDNN (`dnn`) on
/// device `ordinal`.
pub(crate) fn start(ordinal: usize, paths: &Arc<CudaPaths>, blas: bool, dnn: bool) -> Primers {
    let mut threads = Vec::new();
    let mut spawn = |name: &'static str, work: fn(&Arc<Device>) -> Result<(), String>| {
        let paths = Arc::clone(paths);
        threads.push((
            name,
            std::thread::spawn(move || {
                let t0 = Instant::now();
                let device = Device::open(ordinal, paths).map_err(|e| e.to_string())?;
                work(&device)?;
                Ok(t0.elapsed())
            }),
        ));
    };
    if blas {
        spawn("cuBLAS", prime_blas);
    }
    if dnn {
        spawn("cuDNN", prime_dnn);
    }
    Primers(threads)
}

impl Primers {
    /// Waits for every primer: its library and how long it took, or why it failed.
    pub(crate) fn wait(mut self) -> Vec<(&'static str, Result<Duration, String>)> {
        std::mem::take(&mut self.0)
            .into_iter()
            .map(|(name, t)| {
                (
                    name,
                    t.join().unwrap_or_else(|_| Err("the primer thread panicked".into())),
                )
            })
            .collect()
    }
}

impl Drop for Primers {
    /// A load that fails early still waits for its primers: a process
    /// exiting while one is inside a library's initialisers can crash.
    fn drop(&mut self) {
        for (_, t) in self.0.drain(..) {
            let _ = t.join();
        }
    }
}

/// Three zeroed device buffers of `bytes` each, freed on drop.
struct Scratch<'d> {
    device: &'d Device,
    ptrs: [cudarc::driver::sys::CUdeviceptr; 3],
}

impl<'d> Scratch<'d> {
    fn new(device: &'d Device, bytes: usize) -> Result<Scratch<'d>, CudaError> {
        let mut s = Scratch { device, ptrs: [0; 3] };
        for i in 0..3 {
            s.ptrs[i] = device.alloc(bytes)?;
            device.zero(s.ptrs[i], bytes)?;
        }
        Ok(s)
    }
}

impl Drop for Scratch<'_> {
    fn drop(&mut self) {
        let _ = self.device.synchronize();
        for p in self.ptrs.into_iter().filter(|&p| p != 0) {
            let _ = self.device.free(p);
        }
    }
}

/// One 8x8x8 f32 GEMM on a handle of its own.
fn prime_blas(device: &Arc<Device>) -> Result<(), String> {
    let handle = device.blas_handle().map_err(|e| e.to_string())?;
    let scratch = Scratch::new(device, 8 * 8 * 4).map_err(|e| e.to_string())?;
    let operand = |ptr| GemmOperand {
        ptr,
        transpose: false,
        ld: 8,
        batch_stride: 0,
    };
    let [a, b, c] = scratch.ptrs;
    let gemm = Gemm {
        m: 8,
        n: 8,
        k: 8,
        batch: 1,
        a: operand(a),
        b: operand(b),
        c: operand(c),
        alpha: 1.0,
        beta: 0.0,
        dtype: blas_sys::cudaDataType::CUDA_R_32F,
        math: blas_sys::cublasMath_t::CUBLAS_DEFAULT_MATH,
    };
    // The first GEMM loads cuBLAS's modules: never alongside a capture.
    let _setup = setup_lock();
    handle.gemm(&gemm).map_err(|e| e.to_string())?;
    device.synchronize().map_err(|e| e.to_string())
}

/// One tiny convolution plan made and run on a handle of its own.
fn prime_dnn(device: &Arc<Device>) -> Result<(), String> {
    let handle = DnnHandle::new(device).map_err(|e| e.to_string())?;
    let scratch = Scratch::new(device, 64).map_err(|e| e.to_string())?;
    super::conv::prime(&handle, device, scratch.ptrs).map_err(|e| e.to_string())
}

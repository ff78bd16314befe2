//! `libwrapir_runtime`: the C ABI of `wrapir::capi` (declared in
//! `wrapir_rt.h`, which `wrapir lower --target cpp-standalone` ships) as a
//! shared and a static library. The functions are defined, once, in the
//! wrapir crate; this crate only links them into the libraries.

pub use wrapir::capi::*;

//! The bundle's file formats, from and to bytes: `bundle.json`
//! ([`bundle_json`]), safetensors ([`safetensors`]) and the kernel images'
//! headers ([`images`]). The ground floor under `exec` and `bundle`: it
//! names no other module of the crate but `ir` (dtypes), does no I/O, and
//! holds no tensors (`exec` reads tensors from these views, `bundle` owns
//! the files).

pub mod bundle_json;
pub mod images;
pub mod safetensors;

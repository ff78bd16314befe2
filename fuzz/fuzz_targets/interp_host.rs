//! A parsed, valid program run on the host backend with inputs generated from
//! its declared input layouts (symbols: hints clamped to 0..=8; at most
//! 4096 elements per input), memory and loop fuel capped small.
#![no_main]
use libfuzzer_sys::fuzz_target;
use wrapir::exec::host::{HostBackend, HostOptions};

fuzz_target!(|data: &[u8]| {
    let Some(program) = wrapir_fuzz::valid_program(data) else { return };
    let limits = wrapir_fuzz::limits();
    let hints = wrapir_fuzz::hints(&program, 8);
    let Some(inputs) = wrapir_fuzz::host_inputs(&program, &hints) else { return };
    let options = HostOptions {
        jagged_zero_fill: data.len() % 2 == 0,
        ..HostOptions::default()
    };
    let mut backend = HostBackend::new(options).with_limits(limits);
    let _ = wrapir::exec::run_program(&program, &mut backend, &inputs);
});

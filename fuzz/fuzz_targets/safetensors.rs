//! The safetensors reader on arbitrary bytes; what parses reads back as values
//! and writes and parses again.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(tensors) = wrapir::exec::safetensors::parse(data) else { return };
    for t in tensors.values() {
        let _ = t.to_f64_vec();
    }
    if let Ok(bytes) = wrapir::exec::safetensors::write(&tensors) {
        if let Err(e) = wrapir::exec::safetensors::parse(&bytes) {
            panic!("written safetensors do not parse: {e}");
        }
    }
});

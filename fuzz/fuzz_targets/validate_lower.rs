//! Text (or JSON, when the input starts with `{`) -> validate; a valid program
//! goes through every lowering (Python, C++ AOTI and standalone, FX) and the
//! launch reconciliation.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some(program) = wrapir_fuzz::parse_program(data) else { return };
    if let Ok(info) = wrapir::ir::validate_with_limits(&program, &wrapir_fuzz::limits()) {
        wrapir_fuzz::lower_all(&info);
    }
});

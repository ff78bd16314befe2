//! `Program::from_json` on arbitrary text; where it parses, `to_json` and
//! `from_json` again succeed, and the text printer does not panic.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let Ok(program) = wrapir::ir::Program::from_json(text) else { return };
    let json = program.to_json();
    if let Err(e) = wrapir::ir::Program::from_json(&json) {
        panic!("to_json output does not parse: {e}\n{json}");
    }
    let _ = wrapir::text::print(&program);
});

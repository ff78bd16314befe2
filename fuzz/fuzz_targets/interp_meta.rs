//! A parsed, valid program run on the meta backend: symbols take their
//! declared hints clamped to 0..=16, memory and loop fuel capped small.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some(program) = wrapir_fuzz::valid_program(data) else { return };
    let limits = wrapir_fuzz::limits();
    let mut backend = wrapir::exec::meta::MetaBackend::new()
        .with_limits(limits)
        .with_predicate(data.len() % 2 == 0);
    for (s, v) in wrapir_fuzz::hints(&program, 16) {
        backend = backend.with_hint(s, v);
    }
    let _ = wrapir::exec::meta::run_program_on(&program, &mut backend);
});

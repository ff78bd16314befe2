//! Structured programs (`wrapir_fuzz::gen`, through `ProgramBuilder`) ->
//! validate; a valid one goes through every lowering, the reconciliation, the
//! text and JSON round trips, and a meta run.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut u = arbitrary::Unstructured::new(data);
    let Ok(program) = wrapir_fuzz::gen::program(&mut u) else { return };
    let limits = wrapir_fuzz::limits();
    let Ok(info) = wrapir::ir::validate_with_limits(&program, &limits) else { return };
    wrapir_fuzz::lower_all(&info);
    let text = wrapir::text::print(&program);
    match wrapir::text::parse_with_limits(&text, &limits) {
        Ok(p) => assert_eq!(wrapir::text::print(&p), text, "text round trip of a valid program is not stable"),
        Err(e) => panic!("a valid program's text does not parse: {e:?}\n{text}"),
    }
    if let Err(e) = wrapir::ir::Program::from_json(&program.to_json()) {
        panic!("a valid program's JSON does not parse: {e}");
    }
    let mut backend = wrapir::exec::meta::MetaBackend::new().with_limits(limits);
    let _ = wrapir::exec::meta::run_program_on(&program, &mut backend);
});

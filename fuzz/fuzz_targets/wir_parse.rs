//! The `.wir` parser on arbitrary text; where it parses, printing and parsing
//! again gives the same text (the printer/parser round trip).
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let limits = wrapir_fuzz::limits();
    let Ok(program) = wrapir::text::parse_with_limits(text, &limits) else { return };
    let printed = wrapir::text::print(&program);
    let again = match wrapir::text::parse_with_limits(&printed, &limits) {
        Ok(p) => p,
        Err(e) => panic!("printed program does not parse: {e:?}\n{printed}"),
    };
    let reprinted = wrapir::text::print(&again);
    assert_eq!(printed, reprinted, "print/parse round trip is not stable");
});

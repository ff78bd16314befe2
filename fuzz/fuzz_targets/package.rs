//! The `.wirpkg` reader on arbitrary bytes: a package that opens has every
//! entry within the file, and its safetensors entries read or fail cleanly.
#![no_main]
use libfuzzer_sys::fuzz_target;
use wrapir::bundle::{package::Package, SharedBytes};

fuzz_target!(|data: &[u8]| {
    let path = std::path::Path::new("fuzz.wirpkg");
    let Ok(package) = Package::parse(path, SharedBytes::from(data.to_vec())) else { return };
    let mut total = 0usize;
    for (name, bytes) in package.entries() {
        total = total.checked_add(bytes.len()).expect("entries do not overlap, so they fit the file");
        if name.ends_with(".safetensors") {
            let _ = wrapir::exec::safetensors::parse_with_limits(bytes, &wrapir_fuzz::limits());
        }
    }
    assert!(total <= data.len(), "entries overlap or run past the file");
});

//! Kernel images (cubin ELF headers and section tables, PTX text) on
//! arbitrary bytes: reading an image's architecture never panics, a cubin
//! that reads is one `image_arch` reads the same way, and the load rule
//! holds for the image's own architecture; the host-image check
//! (`check_host_image`) never panics and refuses every cubin.
#![no_main]
use libfuzzer_sys::fuzz_target;
use wrapir::bundle::{cubin_arch, image_arch, ImageArch};

fuzz_target!(|data: &[u8]| {
    let host = wrapir::format::images::check_host_image(data);
    let cubin = cubin_arch(data);
    if cubin.is_ok() {
        assert!(host.is_err(), "a cubin is not a host image");
    }
    let image = image_arch(data);
    if let Ok(arch) = cubin {
        assert_eq!(image, Ok(ImageArch::Cubin(arch)), "a cubin reads as one");
    }
    if let Ok(image) = image {
        assert!(image.runs_on(image.arch().sm), "{image} loads on its own architecture");
        let _ = image.check_runs_on(image.arch().sm.saturating_add(1), "fuzz");
    }
});

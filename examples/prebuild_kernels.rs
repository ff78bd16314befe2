//! Regenerates the CUDA backend's prebuilt kernel images: every one of its
//! own CUDA sources (built-in ops, `extra.cu`, the attention kernels per head
//! dim) compiled by NVRTC to a cubin for each architecture, stored deflated,
//! with the table that embeds them (`index.rs`). Needs NVRTC, not a GPU: found as the
//! backend finds it (`$WRAPIR_CUDA_LIBRARY_PATH` included), with its
//! `libnvrtc-builtins` on the loader's path (`LD_LIBRARY_PATH`).
//!
//! ```text
//! cargo run --release --features cuda --example prebuild_kernels -- [--out DIR] [--arch 80,90]
//! ```
//!
//! Run it after editing a kernel source: the backend uses an image only when
//! its recorded digest matches the current source (otherwise NVRTC compiles
//! the source at first use), and a unit test fails while any is stale.

use std::path::PathBuf;
use wrapir::runtime::cuda::{prebuild_kernels, CudaPaths};

fn main() {
    if let Err(e) = run() {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), String> {
    let mut out = PathBuf::from("src/exec/cuda/kernels/prebuilt");
    let mut archs = vec![(8, 0), (9, 0)];
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let mut value = || args.next().ok_or(format!("{flag} needs a value"));
        match flag.as_str() {
            "--out" => out = PathBuf::from(value()?),
            "--arch" => {
                archs = value()?
                    .split(',')
                    .map(|a| match a.trim().parse::<i32>() {
                        Ok(n) if (10..1000).contains(&n) => Ok((n / 10, n % 10)),
                        _ => Err(format!("--arch takes compute capabilities such as 80,90; got `{a}`")),
                    })
                    .collect::<Result<_, _>>()?;
            }
            other => return Err(format!("unknown flag `{other}` (flags: --out DIR, --arch 80,90)")),
        }
    }
    let started = std::time::Instant::now();
    let (mut images, (major, minor)) = prebuild_kernels(&CudaPaths::from_env(), &archs).map_err(|e| e.to_string())?;
    images.sort_by(|a, b| (&a.id, a.major, a.minor).cmp(&(&b.id, b.major, b.minor)));
    std::fs::create_dir_all(&out).map_err(|e| format!("{}: {e}", out.display()))?;
    // Images of sources or architectures no longer built must not linger.
    for entry in std::fs::read_dir(&out).map_err(|e| format!("{}: {e}", out.display()))? {
        let path = entry.map_err(|e| e.to_string())?.path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if name.ends_with(".cubin") || name.ends_with(".cubin.deflate") {
            std::fs::remove_file(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        }
    }
    let mut index = format!(
        "//! The committed kernel images, compiled by NVRTC {major}.{minor}. Written by\n\
         //! `cargo run --release --features cuda --example prebuild_kernels`; do not edit.\n\n\
         use super::Prebuilt;\n\n\
         pub(super) static IMAGES: &[Prebuilt] = &[\n"
    );
    let (mut bytes, mut stored) = (0, 0);
    for image in &images {
        let file = out.join(image.file_name());
        let packed = image.file_bytes();
        std::fs::write(&file, &packed).map_err(|e| format!("{}: {e}", file.display()))?;
        bytes += image.image.len();
        stored += packed.len();
        index.push_str(&format!(
            "    Prebuilt {{\n        id: {:?},\n        major: {},\n        minor: {},\n        digest: [0x{:016x}, 0x{:016x}],\n        size: {},\n        deflated: include_bytes!({:?}),\n    }},\n",
            image.id,
            image.major,
            image.minor,
            image.digest[0],
            image.digest[1],
            image.image.len(),
            image.file_name()
        ));
    }
    index.push_str("];\n");
    let file = out.join("index.rs");
    std::fs::write(&file, index).map_err(|e| format!("{}: {e}", file.display()))?;
    println!(
        "{} images, {bytes} bytes ({stored} deflated), in {} ({:.1} s, NVRTC {major}.{minor})",
        images.len(),
        out.display(),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

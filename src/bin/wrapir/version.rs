//! `wrapir --version`: the version, the features built in and, in a build
//! with `cuda`, the CUDA libraries this machine has.

/// The report `--version` prints.
pub(crate) fn report() -> String {
    let mut out = format!(
        "wrapir {}\nfeatures: {}\n",
        env!("CARGO_PKG_VERSION"),
        wrapir::FEATURES.join(", ")
    );
    let paths = wrapir::runtime::cuda::CudaPaths::from_env();
    out += &match wrapir::runtime::cuda::library_versions(&paths) {
        Ok(found) => {
            let found: Vec<String> = found
                .into_iter()
                .map(|v| match v.version {
                    Some(version) => format!("{} {version}", v.library),
                    None => format!("{} not found", v.library),
                })
                .collect();
            format!(
                "cuda: built in; on this machine: {} (found as `run --device cuda` finds them)\n",
                found.join(", ")
            )
        }
        Err(_) => "cuda: not built in (`--device cuda` needs a build with `--features cuda`)\n".to_string(),
    };
    out
}

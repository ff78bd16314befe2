//! The kernel images of a bundle as the CUDA backend would load them, for
//! `check --device cuda` (listed), and `run` / `bench` on cuda (checked
//! before the device opens): every kernel's image present, a cubin or PTX,
//! not truncated, and for the GPU's architecture.

use super::*;
use wrapir::bundle::BundleError;

/// `--arch`: an SM number from `sm_90`, `sm90`, `90` or `9.0`.
pub(crate) fn parse_arch(text: &str) -> Result<u32, String> {
    let t = text.trim();
    let t = t.strip_prefix("sm_").or_else(|| t.strip_prefix("sm")).unwrap_or(t);
    let sm = match t.split_once('.') {
        Some((major, minor)) => major
            .parse::<u32>()
            .ok()
            .zip(minor.parse::<u32>().ok().filter(|m| *m < 10))
            .and_then(|(a, b)| a.checked_mul(10)?.checked_add(b)),
        None => t.parse::<u32>().ok(),
    };
    sm.filter(|sm| *sm >= 10)
        .ok_or_else(|| format!("`{text}` is not a GPU architecture (give one as sm_90, 90 or 9.0)"))
}

/// The GPU the kernels are compared with: `--arch`, else (in a build with
/// the `cuda` feature) device 0 when the driver reports one.
fn target_gpu(arch: Option<u32>) -> Result<(String, u32), String> {
    if let Some(sm) = arch {
        return Ok(("the target GPU".to_string(), sm));
    }
    wrapir::runtime::cuda::device_arch(0).map_err(|e| e.to_string())
}

/// `check --device cuda`: one `error: kernel ...` line per kernel whose image
/// cannot load (absent, not a cubin or PTX, truncated, no image at all, or
/// for another architecture than `--arch` or the present GPU), then a
/// summary; `false` when any cannot load. Prints nothing for a program
/// without kernels.
pub(crate) fn check_kernel_images(bundle: &Bundle, arch: Option<u32>) -> bool {
    let kernels = bundle.kernel_image_archs();
    if kernels.is_empty() {
        return true;
    }
    let target = target_gpu(arch);
    let mut out = String::new();
    let mut failed = 0usize;
    let mut archs = std::collections::BTreeSet::new();
    for (kernel, image) in &kernels {
        let problem = match image {
            Err(e) => Some(e.to_string()),
            Ok(a) => {
                archs.insert(a.to_string());
                match &target {
                    Ok((gpu, sm)) => a
                        .check_runs_on(*sm, gpu)
                        .err()
                        .map(|e| format!("kernel `{kernel}`: its image is {e}")),
                    Err(_) => None,
                }
            }
        };
        if let Some(p) = problem {
            failed += 1;
            out += &format!("error: {p}\n");
        }
    }
    let total = kernels.len();
    let n = match total {
        1 => "1 kernel".to_string(),
        n => format!("{n} kernels"),
    };
    let compiled = format!("{n}, compiled for {}", archs.into_iter().collect::<Vec<_>>().join(", "));
    out += &match &target {
        _ if failed > 0 => format!("cuda: {failed} of {total} kernel images cannot load\n"),
        Ok((gpu, sm)) => format!("cuda: every kernel image loads on {gpu} (sm_{sm}): {compiled}\n"),
        Err(why) => format!(
            "cuda: every kernel image is readable: {compiled} (not compared with a GPU: {why}; --arch names one)\n"
        ),
    };
    print!("{out}");
    failed == 0
}

/// Before a cuda run or bench opens the device: an error listing every
/// kernel whose image the bundle names but cannot provide (absent,
/// unreadable, not a cubin or PTX, truncated). With `all`, also the kernels
/// the backend cannot launch from an image at all.
pub(crate) fn require_kernel_images(bundle: &Bundle, all: bool) -> Result<()> {
    let problems: Vec<String> = bundle
        .kernel_image_archs()
        .into_iter()
        .filter_map(|(_, image)| image.err())
        .filter(|e| all || !matches!(e, BundleError::NoKernelImage { .. }))
        .map(|e| e.to_string())
        .collect();
    match problems.as_slice() {
        [] => Ok(()),
        [one] => bail!("{one}"),
        many => bail!(
            "{} kernels cannot load their image:\n  {}",
            many.len(),
            many.join("\n  ")
        ),
    }
}

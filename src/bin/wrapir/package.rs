//! `wrapir lower --target cpp-standalone --package DIR`: a CMake project of
//! the standalone wrapper (`wrapir::lower::cpp::package`), with the files
//! the runtime reads at run time and, when it lies next to this binary,
//! the runtime library; and `wrapir pack`, a bundle as a `.wirpkg` package.

use super::*;
use wrapir::bundle::conventions;

/// The shared runtime library's file name.
const RUNTIME_LIBRARY: &str = "libwrapir_runtime.so";

/// The files every package directory holds, by which an existing directory
/// is recognised as an earlier package that may be replaced.
const PACKAGE_MARKERS: [&str; 3] = ["CMakeLists.txt", "main.cpp", conventions::PROGRAM_JSON];

/// Writes the package of `program` (lowered from `bundle`, opened from
/// `source`) as directory `dir`; the program is named after `source`'s file
/// stem (the bundle directory, the package or program file). The package is
/// built in a private sibling directory and renamed to `dir` when complete,
/// so an error leaves no half-written `dir` behind (the sibling is removed).
/// `dir` may be absent (its missing parents are made), empty, or an earlier
/// package (replaced whole); any other existing `dir` is an error before
/// anything is written.
pub(crate) fn write_package(
    bundle: &Bundle,
    source: &Path,
    program: &Program,
    info: &ir::ProgramInfo<'_>,
    dir: &Path,
) -> Result<()> {
    require_runtime_ops(program)?;
    let existing = check_destination(dir)?;
    let parent = match dir.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let base = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    // Missing parents of the folder the user named are made; the package
    // directory itself is written atomically.
    std::fs::create_dir_all(&parent).with_context(|| format!("creating {}", parent.display()))?;
    let staging = wrapir::exec::host::kernels::ScratchDir::new_in(&parent, &format!(".{base}.partial"))
        .with_context(|| format!("creating a temporary directory in {} for the package", parent.display()))?;
    let report = write_package_files(bundle, source, program, info, staging.path(), dir)?;
    // The staging directory is private (0700); the package gets the usual mode.
    std::fs::set_permissions(staging.path(), std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .with_context(|| format!("setting the mode of {}", staging.path().display()))?;
    match existing {
        Destination::Absent | Destination::Empty => std::fs::rename(staging.path(), dir)
            .with_context(|| format!("renaming {} to {}", staging.path().display(), dir.display()))?,
        Destination::EarlierPackage => {
            // Move the earlier package aside (onto a fresh empty directory,
            // which `rename` replaces), put the new one in place, then drop
            // the old one; on failure the earlier package is put back.
            let old = wrapir::exec::host::kernels::ScratchDir::new_in(&parent, &format!(".{base}.old"))
                .with_context(|| format!("creating a temporary directory in {}", parent.display()))?;
            std::fs::rename(dir, old.path())
                .with_context(|| format!("moving the earlier package {} aside", dir.display()))?;
            if let Err(e) = std::fs::rename(staging.path(), dir) {
                let restored = std::fs::rename(old.path(), dir);
                return Err(e).with_context(|| {
                    format!(
                        "renaming {} to {}{}",
                        staging.path().display(),
                        dir.display(),
                        if restored.is_ok() {
                            " (the earlier package is kept)"
                        } else {
                            ""
                        }
                    )
                });
            }
            drop(old);
        }
    }
    write_output(None, &report)
}

/// What is at a package's destination before it is written.
enum Destination {
    Absent,
    Empty,
    EarlierPackage,
}

/// Where `lower --package` may put a package: an error for a file, a
/// symlink (not followed) or a directory that holds anything but an earlier
/// package, naming what is there.
fn check_destination(dir: &Path) -> Result<Destination> {
    let meta = match std::fs::symlink_metadata(dir) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Destination::Absent),
        Err(e) => return Err(e).with_context(|| format!("reading {}", dir.display())),
    };
    if !meta.is_dir() {
        bail!(
            "--package {}: it exists and is not a directory (a symlink is not followed); name a new directory",
            dir.display()
        );
    }
    let mut entries = std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))?;
    if entries.next().is_none() {
        return Ok(Destination::Empty);
    }
    if PACKAGE_MARKERS.iter().all(|m| dir.join(m).is_file()) {
        return Ok(Destination::EarlierPackage);
    }
    bail!(
        "--package {}: the directory exists and is not an earlier package (it lacks {}); name a new or empty directory",
        dir.display(),
        PACKAGE_MARKERS.join(", ")
    )
}

/// Writes the package's files into `dir` (the staging directory; `shown` is
/// the directory the user named, for the report); returns the report.
fn write_package_files(
    bundle: &Bundle,
    source: &Path,
    program: &Program,
    info: &ir::ProgramInfo<'_>,
    dir: &Path,
    shown: &Path,
) -> Result<String> {
    let name = source
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .filter(|s| s != "-")
        .unwrap_or_else(|| "model".to_string());
    let files = wrapir::lower::cpp::package::package(info, &name)?;
    for f in &files {
        write_output(Some(&dir.join(&f.path)), &f.contents)?;
    }
    write_output(Some(&dir.join(conventions::PROGRAM_JSON)), &(program.to_json() + "\n"))?;
    let meta = conventions::METADATA;
    if let Some(bytes) = bundle.entry(meta)? {
        write_bytes(&dir.join(meta), &bytes)?;
    }
    let mut cubins: Vec<String> = bundle.cubin_paths().iter().map(|p| p.to_string()).collect();
    cubins.extend(host_image_paths(program));
    for path in &cubins {
        let relative = Path::new(path);
        if !wrapir::ir::is_plain_relative_path(path.strip_prefix("./").unwrap_or(path)) {
            bail!("kernel image path `{path}` is not a plain relative path inside the bundle; the package copies images to the same relative paths");
        }
        let bytes = bundle.kernel_image(path)?;
        let to = dir.join(relative);
        if let Some(parent) = to.parent() {
            std::fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
        }
        write_bytes(&to, &bytes)?;
    }
    let target = wrapir::lower::cpp::package::target_name(&name);
    let mut report = format!(
        "package {}: {target}.cpp, main.cpp, wrapir_runtime.h, CMakeLists.txt, program.json, {} kernel image(s)\n",
        shown.display(),
        cubins.len()
    );
    report += &match copy_runtime_library(dir)? {
        Some(from) => format!(
            "runtime library: {} (copied from {})\n",
            RUNTIME_LIBRARY,
            from.display()
        ),
        None => {
            "runtime library: none next to the wrapir binary; build it with `cargo build --release -p wrapir-runtime` \
                 and configure with -DWRAPIR_RUNTIME_DIR=<checkout>/target/release\n"
                .to_string()
        }
    };
    report += &format!("build: cmake -B build {0} && cmake --build build; run: build/{target} INPUTS.safetensors OUTPUTS.safetensors [CALLS]\n", shown.display());
    Ok(report)
}

/// The compiled host kernels a host-only wrapper calls (`kernels/<k>.so`)
/// and, when one is a Halide kernel, the Halide runtime they link.
fn host_image_paths(program: &Program) -> Vec<String> {
    use wrapir::exec::host::kernels::{host_kernel_names, image_path, HALIDE_RUNTIME};
    let mut paths: Vec<String> = host_kernel_names(program).into_iter().map(image_path).collect();
    let halide = program
        .kernels
        .values()
        .any(|k| matches!(&k.backend, ir::KernelBackend::Halide(m) if !m.is_cuda()));
    if halide {
        paths.push(HALIDE_RUNTIME.to_string());
    }
    paths
}

/// Which of the runtime library's contexts runs a program's extern ops:
/// the host context for host-only programs, else the CUDA device's.
fn runtime_context(program: &Program) -> (&'static str, &'static str) {
    if wrapir::lower::cpp::host_only(program) {
        ("host", "cpu")
    } else {
        ("device", "cuda")
    }
}

/// Every op the wrapper calls in the runtime library must have an
/// implementation in the context that runs it (the CUDA backend's table,
/// or the host backend's ops): else an error naming each call, as `wrapir
/// check --device cuda` does.
fn require_runtime_ops(program: &Program) -> Result<()> {
    if let Some(message) = missing_runtime_ops_report(program, " of this program") {
        bail!("{message}");
    }
    Ok(())
}

/// The calls the runtime library cannot run (`None`: there are none), as
/// one message: `the runtime library has no ... extern op call(s){after}
/// (see ...):` and the calls, one a line.
fn missing_runtime_ops_report(program: &Program, after: &str) -> Option<String> {
    let missing = missing_runtime_ops(program);
    if missing.is_empty() {
        return None;
    }
    let (what, device) = runtime_context(program);
    Some(format!(
        "the runtime library has no {what} implementation of {} extern op call(s){after} (see `wrapir ops --device {device}`):\n{}",
        missing.len(),
        missing.join("\n")
    ))
}

/// `--target cpp-standalone` without `--package`: a warning on stderr for
/// each call the runtime library cannot run (the wrapper fails there).
pub(crate) fn warn_missing_runtime_ops(program: &Program) {
    if let Some(message) = missing_runtime_ops_report(program, "; the wrapper fails when it reaches one") {
        eprintln!("warning: {message}");
    }
}

/// The calls the standalone wrapper makes in the runtime library that it
/// cannot run, one line each (graph, line, text, op and op key).
fn missing_runtime_ops(program: &Program) -> Vec<String> {
    use wrapir::exec::device_ops::runs_on_cuda;
    use wrapir::exec::uses::extern_uses;
    let host = wrapir::lower::cpp::host_only(program).then(wrapir::exec::host::HostBackend::default);
    let runs = |op: &str| match &host {
        Some(backend) => backend.has_op(op),
        None => runs_on_cuda(op),
    };
    extern_uses(program)
        .into_iter()
        .filter(|u| u.named && !runs(&u.op))
        .map(|u| {
            format!(
                "  graph {}, line {} `{}`: op `{}` ({})",
                u.graph,
                u.line,
                u.text,
                u.op,
                wrapir::exec::op::op_key(&u.op)
            )
        })
        .collect()
}

/// Copies the runtime library from this binary's directory into the
/// package's `lib/`; the source path, or `None` when there is none.
fn copy_runtime_library(dir: &Path) -> Result<Option<PathBuf>> {
    let Some(exe_dir) = std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(Path::to_path_buf))
    else {
        return Ok(None);
    };
    let from = exe_dir.join(RUNTIME_LIBRARY);
    if !from.is_file() {
        return Ok(None);
    }
    let lib = dir.join(wrapir::lower::cpp::package::RUNTIME_LIB_DIR);
    std::fs::create_dir_all(&lib).with_context(|| format!("creating {}", lib.display()))?;
    std::fs::copy(&from, lib.join(RUNTIME_LIBRARY))
        .with_context(|| format!("copying {} into {}", from.display(), lib.display()))?;
    Ok(Some(from))
}

fn write_bytes(path: &Path, bytes: &[u8]) -> Result<()> {
    std::fs::write(path, bytes).with_context(|| format!("writing {}", path.display()))
}

/// `wrapir pack`: writes the bundle as a package and says what it holds.
pub(super) fn pack(input: &Path, output: &Path, cudnn_plans: bool) -> Result<ExitCode> {
    let mut bundle = open_bundle(input)?;
    if cudnn_plans {
        let plans = wrapir::runtime::cuda::make_cudnn_plans(&bundle, 0, wrapir::runtime::cuda::CudaPaths::from_env())
            .with_context(|| format!("making the cuDNN plans of {}", input.display()))?;
        bundle = bundle.with_cudnn_plans(plans);
    }
    let summary = bundle.write_package(output)?;
    let m = &summary.metadata;
    let kernels = summary.entries.iter().filter(|e| e.starts_with("kernels/")).count();
    let mut out = format!(
        "packed {} into {}: {} entries, {} bytes\n",
        input.display(),
        output.display(),
        summary.entries.len(),
        summary.bytes
    );
    for entry in &summary.entries {
        if !entry.starts_with("kernels/") && !entry.starts_with("cudnn-plans/") {
            out += &format!("  {entry}\n");
        }
    }
    let arch: Vec<String> = m.cubin_arch.iter().map(|sm| format!("sm_{sm}")).collect();
    out += &format!(
        "  kernels/: {kernels} files, {} cubins loaded by the program{}\n",
        m.cubins.len(),
        if arch.is_empty() {
            String::new()
        } else {
            format!(" ({})", arch.join(", "))
        }
    );
    if let (Some(torch), Some(triton)) = (&m.provenance.torch, &m.provenance.triton) {
        out += &format!("  compiled by PyTorch {torch}, Triton {triton}\n");
    }
    if !m.weights.is_empty() {
        out += &format!("  weights: {} of the graph inputs\n", m.weights.len());
    }
    if !summary.entries.iter().any(|e| e == wrapir::bundle::INPUTS) {
        out += &format!(
            "  no {}: the bundle carries no inputs, so `run` of the package needs --inputs FILE\n",
            wrapir::bundle::INPUTS
        );
    }
    let plans = summary.entries.iter().filter(|e| e.starts_with("cudnn-plans/")).count();
    if let Some(made_for) = &m.cudnn_plans_for {
        out += &format!("  cudnn-plans/: {plans} plans compiled at run time, for {made_for}\n");
    } else if cudnn_plans {
        out += "  cudnn-plans/: none (no convolution of this model compiles its engine at run time)\n";
    }
    write_output(None, &out)?;
    Ok(ExitCode::SUCCESS)
}

//! Bad bundles and bad inputs on every backend (issue 13, deliverable 4):
//! a missing, corrupt, truncated or other-architecture cubin, a program
//! naming a kernel image the bundle lacks, a malformed `bundle.json`,
//! truncated or mislabeled safetensors, and inputs of the wrong dtype, rank
//! or size. Each is a clear error (exit 1 or 2) naming the file, tensor or
//! kernel, on meta, cpu and (for what is read before the device opens) cuda;
//! none needs a GPU. Every case breaks a fresh copy of the committed
//! `softmax` bundle in a scratch directory.

mod common;

use std::path::{Path, PathBuf};

/// The softmax bundle's one kernel.
const KERNEL: &str = "triton_per_fused__softmax_exp_prepare_softmax_online_sub_0";

fn cubin(b: &Path) -> PathBuf {
    b.join("kernels").join(format!("{KERNEL}.cubin"))
}

/// A safetensors file: `header` (the JSON) and `data`.
fn safetensors(header: &str, data: &[u8]) -> Vec<u8> {
    let mut out = (header.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(data);
    out
}

/// Replaces the bundle's inputs with a safetensors file of this header and
/// `bytes` zero bytes of data.
fn write_inputs(b: &Path, header: &str, bytes: usize) {
    std::fs::write(b.join("inputs.safetensors"), safetensors(header, &vec![0; bytes])).unwrap();
}

/// Sets the SM number in the cubin's ELF `e_flags` (either ABI layout).
fn patch_arch(b: &Path, sm: u32) {
    let mut image = std::fs::read(cubin(b)).unwrap();
    let mut flags = u32::from_le_bytes(image[48..52].try_into().unwrap());
    flags = match image[8] {
        7 => (flags & !0x8ff) | sm,
        _ => (flags & !0xff08) | (sm << 8),
    };
    image[48..52].copy_from_slice(&flags.to_le_bytes());
    std::fs::write(cubin(b), image).unwrap();
}

/// Rewrites the program's kernel image path.
fn rename_image(b: &Path, to: &str) {
    let path = b.join("program.json");
    let text = std::fs::read_to_string(&path).unwrap();
    let from = format!("\"kernels/{KERNEL}.cubin\"");
    assert!(text.contains(&from));
    std::fs::write(&path, text.replace(&from, &format!("\"{to}\""))).unwrap();
}

/// Packs the (broken) bundle; the case runs on the package.
fn pack(b: &Path) -> PathBuf {
    let pkg = b.with_extension("wirpkg");
    wrapir::bundle::Bundle::open(b).unwrap().write_package(&pkg).unwrap();
    pkg
}

/// How a case breaks its copy of the bundle.
#[derive(Clone, Copy)]
enum Spoil {
    /// Leaves it as it is.
    Nothing,
    /// Writes these bytes to the bundle's file.
    Write(&'static str, &'static [u8]),
    /// Replaces the inputs with one tensor `arg0_1` of this dtype code, shape
    /// and byte count (the data all zeros).
    Inputs(&'static str, &'static str, usize),
    /// Replaces the inputs with a safetensors file of this header and byte
    /// count (the data all zeros).
    InputsHeader(&'static str, usize),
    /// Sets the SM number of the cubin ([`patch_arch`]).
    Arch(u32),
    /// Points the program at this kernel image path ([`rename_image`]).
    RenameImage(&'static str),
    /// Breaks it in code; returns what the command runs on (the bundle
    /// itself when `None`, or a package made from it).
    With(fn(&Path) -> Option<PathBuf>),
}

impl Spoil {
    /// Breaks the copy `b`; returns what the command runs on (the bundle
    /// itself when `None`, or a package made from it).
    fn apply(self, b: &Path) -> Option<PathBuf> {
        match self {
            Spoil::Nothing => {}
            Spoil::Write(file, bytes) => std::fs::write(b.join(file), bytes).unwrap(),
            Spoil::Inputs(dtype, shape, bytes) => write_inputs(
                b,
                &format!(r#"{{"arg0_1":{{"dtype":"{dtype}","shape":{shape},"data_offsets":[0,{bytes}]}}}}"#),
                bytes,
            ),
            Spoil::InputsHeader(header, bytes) => write_inputs(b, header, bytes),
            Spoil::Arch(sm) => patch_arch(b, sm),
            Spoil::RenameImage(to) => rename_image(b, to),
            Spoil::With(spoil) => return spoil(b),
        }
        None
    }
}

/// One bad bundle or input.
struct Case {
    name: String,
    /// Breaks the copy of the bundle; returns what the command runs on
    /// (the bundle itself, or a package made from it).
    spoil: Spoil,
    /// The command after `wrapir VERB`: `{b}` is the bundle (or package),
    /// `{dir}` the case's scratch directory.
    args: &'static [&'static str],
    /// Exit status.
    code: i32,
    /// What stdout plus stderr must contain (`{b}`, `{dir}` as in `args`).
    contains: &'static [&'static str],
}

const CHECK_CUDA: &[&str] = &["check", "{b}", "--device", "cuda", "--no-translation"];
const RUN_META: &[&str] = &["run", "{b}", "--device", "meta"];
const RUN_CPU: &[&str] = &["run", "{b}", "--device", "cpu"];
const RUN_CUDA: &[&str] = &["run", "{b}", "--device", "cuda"];

/// `{name}_meta`, `{name}_cpu` and `{name}_cuda`: `wrapir run` of the
/// bundle `spoil` broke on each device exits 2 with `contains`.
fn on_every_device(name: &'static str, spoil: Spoil, contains: &'static [&'static str]) -> impl Iterator<Item = Case> {
    [("meta", RUN_META), ("cpu", RUN_CPU), ("cuda", RUN_CUDA)]
        .into_iter()
        .map(move |(device, args)| Case {
            name: format!("{name}_{device}"),
            spoil,
            args,
            code: 2,
            contains,
        })
}

fn cases() -> Vec<Case> {
    let none = Spoil::Nothing;
    let missing = Spoil::With(|b| {
        std::fs::remove_file(cubin(b)).unwrap();
        None
    });
    let not_elf = Spoil::With(|b| {
        std::fs::write(cubin(b), b"not an ELF image").unwrap();
        None
    });
    let truncated = Spoil::With(|b| {
        let image = std::fs::read(cubin(b)).unwrap();
        std::fs::write(cubin(b), &image[..image.len() / 2]).unwrap();
        None
    });
    let truncated_inputs = Spoil::With(|b| {
        let bytes = std::fs::read(b.join("inputs.safetensors")).unwrap();
        std::fs::write(b.join("inputs.safetensors"), &bytes[..100]).unwrap();
        None
    });
    let wrong_dtype = Spoil::Inputs("F64", "[32,100]", 25600);
    let wrong_rank = Spoil::Inputs("F32", "[3200]", 12800);
    let wrong_size = Spoil::Inputs("F32", "[32,99]", 12672);
    const MISSING: &str = "error: kernel `triton_per_fused__softmax_exp_prepare_softmax_online_sub_0`: its image {b}/kernels/triton_per_fused__softmax_exp_prepare_softmax_online_sub_0.cubin is absent from the bundle (the kernel metadata names `kernels/triton_per_fused__softmax_exp_prepare_softmax_online_sub_0.cubin`)";
    const NOT_ELF: &str = "kernel `triton_per_fused__softmax_exp_prepare_softmax_online_sub_0`: kernel image {b}/kernels/triton_per_fused__softmax_exp_prepare_softmax_online_sub_0.cubin: 16 bytes that are neither a cubin (an ELF file: no `\\x7fELF` magic) nor PTX text";
    const TRUNCATED: &str = "kernel image {b}/kernels/triton_per_fused__softmax_exp_prepare_softmax_online_sub_0.cubin: truncated or corrupt: its program headers (6 entries of 56 bytes at byte 34824) end past its 17580 bytes";
    const WRONG_DTYPE: &str = "`arg0_1` is f64[32, 100], the program declares f32[32, 100][100, 1]@cuda:0";
    const WRONG_RANK: &str = "`arg0_1` is f32[3200], the program declares f32[32, 100][100, 1]@cuda:0";
    const WRONG_SIZE: &str =
        "`arg0_1` has sizes [32, 99], the program declares f32[32, 100][100, 1]@cuda:0 = [32, 100]";
    [
        // ---- kernel images (cuda; checked before the device opens) ----
        Case {
            name: "cubin_missing_check".into(),
            spoil: missing,
            args: CHECK_CUDA,
            code: 1,
            contains: &[MISSING, "cuda: 1 of 1 kernel images cannot load"],
        },
        Case {
            name: "cubin_missing_run".into(),
            spoil: missing,
            args: RUN_CUDA,
            code: 2,
            contains: &[MISSING],
        },
        Case {
            name: "cubin_missing_package".into(),
            spoil: Spoil::With(|b| {
                std::fs::remove_file(cubin(b)).unwrap();
                // Packing the directory refuses, naming the absent image ...
                let pkg = b.with_extension("wirpkg");
                let e = wrapir::bundle::Bundle::open(b).unwrap().write_package(&pkg).unwrap_err();
                assert!(e.to_string().contains(&format!("kernels/{KERNEL}.cubin")), "{e}");
                // ... a program file packs without the images it names.
                let alone = b.join("alone");
                std::fs::create_dir_all(&alone).unwrap();
                std::fs::copy(b.join("program.json"), alone.join("program.json")).unwrap();
                Some(pack(&alone.join("program.json")))
            }),
            args: CHECK_CUDA,
            code: 1,
            contains: &["its image package entry `kernels/triton_per_fused__softmax_exp_prepare_softmax_online_sub_0.cubin` is absent from the bundle"],
        },
        Case {
            name: "cubin_not_elf_check".into(),
            spoil: not_elf,
            args: CHECK_CUDA,
            code: 1,
            contains: &[NOT_ELF],
        },
        Case {
            name: "cubin_not_elf_run".into(),
            spoil: not_elf,
            args: RUN_CUDA,
            code: 2,
            contains: &[NOT_ELF],
        },
        Case {
            name: "cubin_truncated_check".into(),
            spoil: truncated,
            args: CHECK_CUDA,
            code: 1,
            contains: &[TRUNCATED, "cuda: 1 of 1 kernel images cannot load"],
        },
        Case {
            name: "cubin_truncated_run".into(),
            spoil: truncated,
            args: RUN_CUDA,
            code: 2,
            contains: &[TRUNCATED],
        },
        Case {
            name: "cubin_truncated_pack_refuses".into(),
            spoil: Spoil::With(|b| {
                let image = std::fs::read(cubin(b)).unwrap();
                std::fs::write(cubin(b), &image[..1000]).unwrap();
                // Packing reads the architecture of every cubin: the truncation is found there.
                let pkg = b.with_extension("wirpkg");
                let e = wrapir::bundle::Bundle::open(b).unwrap().write_package(&pkg).unwrap_err();
                assert!(e.to_string().contains("truncated or corrupt"), "{e}");
                None
            }),
            args: CHECK_CUDA,
            code: 1,
            contains: &["truncated or corrupt"],
        },
        Case {
            name: "cubin_for_another_arch".into(),
            spoil: none,
            args: &["check", "{b}", "--device", "cuda", "--no-translation", "--arch", "sm_80"],
            code: 1,
            contains: &["error: kernel `triton_per_fused__softmax_exp_prepare_softmax_online_sub_0`: its image is compiled for sm_90 (runs on sm_90 to sm_99), not for the target GPU (sm_80): re-export the bundle on a GPU of that architecture"],
        },
        Case {
            name: "cubin_patched_to_sm_50".into(),
            spoil: Spoil::Arch(50),
            args: &["check", "{b}", "--device", "cuda", "--no-translation", "--arch", "9.0"],
            code: 1,
            contains: &["its image is compiled for sm_50 (runs on sm_50 to sm_59), not for the target GPU (sm_90)"],
        },
        Case {
            name: "cubin_for_this_arch".into(),
            spoil: none,
            args: &["check", "{b}", "--device", "cuda", "--no-translation", "--arch", "90"],
            code: 0,
            contains: &["cuda: every kernel image loads on the target GPU (sm_90): 1 kernel, compiled for sm_90\n"],
        },
        Case {
            name: "arch_not_an_arch".into(),
            spoil: none,
            args: &["check", "{b}", "--device", "cuda", "--arch", "hopper"],
            code: 2,
            contains: &["`hopper` is not a GPU architecture (give one as sm_90, 90 or 9.0)"],
        },
        Case {
            name: "program_names_an_absent_image".into(),
            spoil: Spoil::RenameImage("kernels/gone.cubin"),
            args: CHECK_CUDA,
            code: 1,
            contains: &["error: kernel `triton_per_fused__softmax_exp_prepare_softmax_online_sub_0`: its image {b}/kernels/gone.cubin is absent from the bundle (the kernel metadata names `kernels/gone.cubin`)"],
        },
        Case {
            name: "program_names_an_absent_image_run".into(),
            spoil: Spoil::RenameImage("kernels/gone.cubin"),
            args: RUN_CUDA,
            code: 2,
            contains: &["its image {b}/kernels/gone.cubin is absent from the bundle"],
        },
        Case {
            name: "program_names_an_image_outside_the_bundle".into(),
            spoil: Spoil::RenameImage("../softmax/kernels/k.cubin"),
            args: CHECK_CUDA,
            code: 1,
            // Refused by validation, before any image is looked up.
            contains: &["kernel triton_per_fused__softmax_exp_prepare_softmax_online_sub_0: image path `../softmax/kernels/k.cubin` leaves the bundle"],
        },
        // ---- bundle.json ----
        Case {
            name: "bundle_json_not_json".into(),
            spoil: Spoil::Write("bundle.json", b"{\"case\": \"softmax\","),
            args: &["check", "{b}"],
            code: 2,
            contains: &["in {b}/bundle.json: "],
        },
        Case {
            name: "bundle_json_wrong_field_type".into(),
            spoil: Spoil::Write("bundle.json", br#"{"tolerance": "tight"}"#),
            args: RUN_META,
            code: 2,
            contains: &["in {b}/bundle.json: ", "tolerance"],
        },
        Case {
            name: "bundle_json_not_text".into(),
            spoil: Spoil::Write("bundle.json", &[0xff, 0xfe, 0]),
            args: RUN_CPU,
            code: 2,
            contains: &["{b}/bundle.json is not UTF-8 text"],
        },
        // ---- safetensors: inputs, references, --inputs ----
    ]
    .into_iter()
    .chain(on_every_device("inputs_truncated", truncated_inputs, &["in {b}/inputs.safetensors: "]))
    .chain([
        Case {
            name: "inputs_dtype_code_does_not_match_bytes".into(),
            // F16 [32, 100] is 6400 bytes, not 12800.
            spoil: Spoil::Inputs("F16", "[32,100]", 12800),
            args: RUN_CPU,
            code: 2,
            contains: &["in {b}/inputs.safetensors: ", "arg0_1"],
        },
        Case {
            name: "inputs_unknown_dtype_code".into(),
            spoil: Spoil::Inputs("F31", "[32,100]", 12800),
            args: RUN_META,
            code: 2,
            contains: &["in {b}/inputs.safetensors: ", "F31"],
        },
        Case {
            name: "inputs_offsets_out_of_range".into(),
            spoil: Spoil::InputsHeader(
                r#"{"arg0_1":{"dtype":"F32","shape":[32,100],"data_offsets":[0,99999]}}"#,
                12800,
            ),
            args: RUN_CPU,
            code: 2,
            contains: &["in {b}/inputs.safetensors: "],
        },
        Case {
            name: "inputs_header_length_huge".into(),
            spoil: Spoil::With(|b| {
                let mut bytes = std::fs::read(b.join("inputs.safetensors")).unwrap();
                bytes[..8].copy_from_slice(&u64::MAX.to_le_bytes());
                std::fs::write(b.join("inputs.safetensors"), bytes).unwrap();
                None
            }),
            args: RUN_META,
            code: 2,
            contains: &["in {b}/inputs.safetensors: "],
        },
        Case {
            name: "expected_truncated".into(),
            spoil: Spoil::With(|b| {
                let bytes = std::fs::read(b.join("expected.safetensors")).unwrap();
                std::fs::write(b.join("expected.safetensors"), &bytes[..bytes.len() - 1]).unwrap();
                None
            }),
            args: RUN_CPU,
            code: 2,
            contains: &["in {b}/expected.safetensors: "],
        },
        Case {
            name: "inputs_flag_file_truncated".into(),
            spoil: Spoil::Write("x.safetensors", &[1, 2, 3]),
            args: &["run", "{b}", "--device", "meta", "--inputs", "{b}/x.safetensors"],
            code: 2,
            contains: &["in {b}/x.safetensors: "],
        },
    ])
    // ---- inputs that do not fit the program, on every backend ----
    .chain(on_every_device("input_wrong_dtype", wrong_dtype, &[WRONG_DTYPE]))
    .chain(on_every_device("input_wrong_rank", wrong_rank, &[WRONG_RANK]))
    .chain(on_every_device("input_wrong_size", wrong_size, &[WRONG_SIZE]))
    .chain([
        Case {
            name: "input_wrong_name".into(),
            spoil: Spoil::InputsHeader(
                r#"{"arg9_1":{"dtype":"F32","shape":[32,100],"data_offsets":[0,12800]}}"#,
                12800,
            ),
            args: RUN_CPU,
            code: 2,
            contains: &["`arg9_1` is neither a graph input nor a constant"],
        },
    ])
    .collect()
}

/// Runs one case on a fresh copy of the softmax bundle under `dir`: `Err`
/// says what differs from the expectation.
fn check(dir: &Path, case: &Case) -> Result<(), String> {
    let b = dir.join(&case.name);
    common::copy_dir(&common::root().join("fixtures/inductor/bundles/softmax"), &b);
    let target = case.spoil.apply(&b).unwrap_or_else(|| b.clone());
    let subst = |s: &str| {
        s.replace("{b}", &target.display().to_string())
            .replace("{dir}", &dir.display().to_string())
    };
    let args: Vec<String> = case.args.iter().map(|a| subst(a)).collect();
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let run = common::wrapir(&refs);
    let output = format!("{}{}", run.stdout, run.stderr);
    let mut problems = Vec::new();
    if run.code != case.code {
        problems.push(format!("exit {} (want {})", run.code, case.code));
    }
    for want in case.contains {
        let want = subst(want);
        if !output.contains(&want) {
            problems.push(format!("missing `{want}`"));
        }
    }
    if output.contains("panicked") {
        problems.push("crashed".into());
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(format!("{}: {}\n{output}", case.name, problems.join("; ")))
    }
}

#[test]
fn bad_bundles_and_inputs_are_clear_errors() {
    let dir = common::scratch("bad_bundles", "cases");
    let failures: Vec<String> = cases().iter().filter_map(|c| check(&dir, c).err()).collect();
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    let _ = std::fs::remove_dir_all(&dir);
}

/// The committed bundles' images all read as cubins for their recorded
/// architecture, through the same check `check --device cuda` makes.
#[test]
fn committed_cubins_pass_the_image_check() {
    let root = common::root().join("fixtures/inductor/bundles");
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("program.json").is_file())
        .collect();
    dirs.sort();
    let mut failures = Vec::new();
    for dir in dirs {
        let bundle = wrapir::bundle::Bundle::open(&dir).unwrap();
        for (kernel, image) in bundle.kernel_image_archs() {
            match image {
                Ok(arch) if arch.runs_on(90) => {}
                other => failures.push(format!("{}: {kernel}: {other:?}", dir.display())),
            }
        }
    }
    common::assert_no_failures(&failures);
}

//! One-file packages (`wrapir pack`, `Bundle::open` of a `.wirpkg`): every
//! verb gives on the package what it gives on the bundle directory, the
//! library reads the same program, metadata, tensors and kernel images from
//! both, and bad, truncated or hostile packages are clear errors.

mod common;

use common::wrapir;
use std::path::{Path, PathBuf};
use wrapir::bundle::{package, Bundle, BundleError, BundleKind};

/// Committed bundles covering an extern mm (runs on cpu), Triton kernels,
/// two outputs, an unbacked `cond`, and a model with weights.
const BUNDLES: &[&str] = &["cat_mm", "softmax", "topk", "feat_cond_unbacked", "bert"];

fn bundle_dir(name: &str) -> PathBuf {
    common::root().join("fixtures/inductor/bundles").join(name)
}

fn scratch(test: &str) -> PathBuf {
    common::scratch("package", test)
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Packs `name` into `dir` with the CLI; returns the package path.
fn pack(name: &str, dir: &Path) -> PathBuf {
    let out = dir.join(format!("{name}.wirpkg"));
    let r = wrapir(&["pack", s(&bundle_dir(name)), "-o", s(&out)]);
    assert_eq!(r.code, 0, "pack {name}: {}{}", r.stdout, r.stderr);
    common::assert_contains(&r.stdout, "packed");
    out
}

#[test]
fn every_verb_gives_the_same_result_on_the_package() {
    let dir = scratch("verbs");
    let mut failures = Vec::new();
    for name in BUNDLES {
        let pkg = pack(name, &dir);
        let bdir = bundle_dir(name);
        // Entries are named `DIR/entry` and `PACKAGE:entry`.
        let normalize = |text: &str| {
            text.replace(&format!("{}/", bdir.display()), "BUNDLE/")
                .replace(&format!("{}:", pkg.display()), "BUNDLE/")
        };
        let verbs: &[&[&str]] = &[
            &["check"],
            &["check", "--device", "cuda"],
            &["print"],
            &["print", "--json"],
            &["lower", "--target", "python"],
            &["lower", "--target", "cpp"],
            &["lower", "--target", "cpp-standalone"],
            &["lower", "--target", "fx"],
            &["run", "--device", "meta"],
            &["run", "--device", "cpu"],
            &["run", "--device", "cpu", "--print"],
        ];
        for verb in verbs {
            let on = |path: &Path| {
                let mut args: Vec<&str> = vec![verb[0], s(path)];
                args.extend_from_slice(&verb[1..]);
                wrapir(&args)
            };
            let (a, b) = (on(&bdir), on(&pkg));
            let same = a.code == b.code
                && normalize(&a.stdout) == normalize(&b.stdout)
                && normalize(&a.stderr) == normalize(&b.stderr);
            if !same {
                failures.push(format!(
                    "{name} {verb:?}: directory exit {} / package exit {}\n--- directory\n{}{}\n--- package\n{}{}",
                    a.code, b.code, a.stdout, a.stderr, b.stdout, b.stderr
                ));
            }
        }
    }
    common::assert_no_failures(&failures);
}

#[test]
fn the_library_reads_the_same_bundle_from_both() {
    let dir = scratch("library");
    for name in BUNDLES {
        let bdir = bundle_dir(name);
        let from_dir = Bundle::open(&bdir).unwrap();
        let pkg = dir.join(format!("{name}.wirpkg"));
        let summary = from_dir.write_package(&pkg).unwrap();
        let from_pkg = Bundle::open(&pkg).unwrap();
        assert_eq!(from_dir.kind(), BundleKind::Directory);
        assert_eq!(from_pkg.kind(), BundleKind::Package);
        assert_eq!(from_pkg.program(), from_dir.program(), "{name}");
        assert_eq!(from_pkg.source(), from_dir.source(), "{name}");
        assert_eq!(from_pkg.meta(), from_dir.meta(), "{name}");
        assert_eq!(from_pkg.meta(), from_dir.meta(), "{name}");
        assert_eq!(from_pkg.weights(), from_dir.weights(), "{name}");
        for (a, b) in [
            (from_dir.inputs().unwrap(), from_pkg.inputs().unwrap()),
            (from_dir.expected().unwrap(), from_pkg.expected().unwrap()),
            (from_dir.compiled().unwrap(), from_pkg.compiled().unwrap()),
        ] {
            assert_eq!(a.is_some(), b.is_some(), "{name}");
            let (a, b) = (a.unwrap_or_default(), b.unwrap_or_default());
            assert_eq!(a.keys().collect::<Vec<_>>(), b.keys().collect::<Vec<_>>(), "{name}");
            for (k, t) in &a {
                assert_eq!(t.spec(), b[k].spec(), "{name}: {k}");
                assert_eq!(t.to_f64_vec().unwrap(), b[k].to_f64_vec().unwrap(), "{name}: {k}");
            }
        }
        for path in from_dir.cubin_paths() {
            assert_eq!(
                &*from_dir.kernel_image(path).unwrap(),
                &*from_pkg.kernel_image(path).unwrap(),
                "{name}: {path}"
            );
        }
        assert_eq!(from_pkg.cubin_arch().unwrap(), from_dir.cubin_arch().unwrap(), "{name}");
        // The table of contents records what the bundle says.
        let manifest = from_pkg.manifest().unwrap();
        assert_eq!(manifest.metadata, summary.metadata);
        assert_eq!(manifest.metadata.provenance, from_dir.meta().provenance);
        assert_eq!(manifest.metadata.weights, from_dir.weights());
        assert_eq!(
            manifest.metadata.cubin_arch,
            from_dir.cubin_arch().unwrap().into_iter().collect::<Vec<_>>()
        );
        // Packing the package again gives the same bytes.
        let again = dir.join(format!("{name}-again.wirpkg"));
        from_pkg.write_package(&again).unwrap();
        assert_eq!(std::fs::read(&pkg).unwrap(), std::fs::read(&again).unwrap(), "{name}");
    }
    // The committed bundles were compiled for the H200 (sm_90).
    let softmax = Bundle::open(&bundle_dir("softmax")).unwrap();
    assert_eq!(softmax.cubin_arch().unwrap().into_iter().collect::<Vec<_>>(), [90]);
    let cat_mm = Bundle::open(&bundle_dir("cat_mm")).unwrap();
    assert!(cat_mm.cubin_arch().unwrap().is_empty(), "cat_mm has no Triton kernels");
    let bert = Bundle::open(&bundle_dir("bert")).unwrap();
    assert_eq!(bert.weights().len(), 39);
    assert_eq!(
        bert.meta().weight_names["arg3_1"],
        "model.embeddings.word_embeddings.weight"
    );
}

#[test]
fn program_files_open_and_pack() {
    let dir = scratch("files");
    let wir = common::root().join("fixtures/nonzero.wir");
    let b = Bundle::open(&wir).unwrap();
    assert_eq!(b.kind(), BundleKind::ProgramFile);
    assert!(b.inputs().unwrap().is_none() && b.meta() == &Default::default());
    let pkg = dir.join("nonzero.wirpkg");
    let summary = b.write_package(&pkg).unwrap();
    assert_eq!(summary.entries, ["program.wir"]);
    let p = Bundle::open(&pkg).unwrap();
    assert_eq!(p.program(), b.program());
    let r = wrapir(&["run", s(&pkg), "--hint", "u0=7"]);
    r.assert_exit(0);
    common::assert_contains(&r.stdout, "bound symbols: u0 = 7");
    // A directory without a program is not a bundle.
    let err = Bundle::open(&dir).unwrap_err().to_string();
    assert!(err.contains("without `program.json`"), "{err}");
}

#[test]
fn packages_carry_cudnn_plans_for_their_gpu() {
    use wrapir::runtime::{CudnnPlans, ModelSource};
    let dir = scratch("plans");
    let made_for = "cudnn 91400 driver 13000 NVIDIA H200 sm90 x132";
    let plans = CudnnPlans::new(
        Some(made_for.to_string()),
        [
            ("cudnn-conv-0123.json".to_string(), b"{\"a\":1}".to_vec()),
            ("cudnn-conv-4567.json".to_string(), b"{\"b\":2}".to_vec()),
        ],
    );
    let plain = Bundle::open(&bundle_dir("resnet")).unwrap();
    assert!(plain.cudnn_plans().unwrap().is_empty(), "a directory carries none");
    let bundle = plain.with_cudnn_plans(plans.clone());
    let pkg = dir.join("resnet.wirpkg");
    let summary = bundle.write_package(&pkg).unwrap();
    let stored: Vec<&str> = summary
        .entries
        .iter()
        .filter(|e| e.starts_with("cudnn-plans/"))
        .map(|e| e.as_str())
        .collect();
    assert_eq!(
        stored,
        ["cudnn-plans/cudnn-conv-0123.json", "cudnn-plans/cudnn-conv-4567.json"]
    );
    assert_eq!(summary.metadata.cudnn_plans_for.as_deref(), Some(made_for));
    // Read back: the same plans, as the model source hands them over.
    let opened = Bundle::open(&pkg).unwrap();
    assert_eq!(opened.cudnn_plans().unwrap(), plans);
    assert_eq!(ModelSource::cudnn_plans(&opened), plans);
    // A package packed again keeps them; new plans replace them.
    let again = dir.join("again.wirpkg");
    opened.write_package(&again).unwrap();
    assert_eq!(Bundle::open(&again).unwrap().cudnn_plans().unwrap(), plans);
    let other = CudnnPlans::new(
        Some("another GPU".into()),
        [("cudnn-conv-89ab.json".to_string(), b"{}".to_vec())],
    );
    let replaced = dir.join("replaced.wirpkg");
    let summary = Bundle::open(&pkg)
        .unwrap()
        .with_cudnn_plans(other.clone())
        .write_package(&replaced)
        .unwrap();
    assert_eq!(
        summary.entries.iter().filter(|e| e.starts_with("cudnn-plans/")).count(),
        1
    );
    assert_eq!(Bundle::open(&replaced).unwrap().cudnn_plans().unwrap(), other);
    // Without plans the table of contents does not name them.
    let bare = dir.join("bare.wirpkg");
    let summary = Bundle::open(&bundle_dir("resnet"))
        .unwrap()
        .write_package(&bare)
        .unwrap();
    assert_eq!(summary.metadata.cudnn_plans_for, None);
    let toc = String::from_utf8_lossy(&std::fs::read(&bare).unwrap()[..4096]).into_owned();
    assert!(!toc.contains("cudnn"), "{toc}");
    // `--cudnn-plans` makes them on a GPU: without one it is an error naming the flag's need.
    if !cfg!(feature = "cuda") {
        let r = wrapir(&[
            "pack",
            s(&bundle_dir("resnet")),
            "-o",
            s(&dir.join("gpu.wirpkg")),
            "--cudnn-plans",
        ]);
        r.assert_exit(2);
        common::assert_contains(&r.stderr, "making the cuDNN plans");
        common::assert_contains(&r.stderr, "`cuda` feature");
    }
}

/// The bytes of a valid package of `softmax`.
fn softmax_package(dir: &Path) -> Vec<u8> {
    let pkg = dir.join("softmax.wirpkg");
    Bundle::open(&bundle_dir("softmax"))
        .unwrap()
        .write_package(&pkg)
        .unwrap();
    std::fs::read(pkg).unwrap()
}

/// A package of these entries, with the table of contents written by hand.
fn handmade(toc: &str, data: &[u8], version: u32) -> Vec<u8> {
    let toc_len = toc.len() as u64;
    let data_offset = (40 + toc_len).div_ceil(8) * 8;
    let file_len = data_offset + data.len() as u64;
    let mut out = package::MAGIC.to_vec();
    out.extend_from_slice(&version.to_le_bytes());
    out.extend_from_slice(&0u32.to_le_bytes());
    out.extend_from_slice(&file_len.to_le_bytes());
    out.extend_from_slice(&toc_len.to_le_bytes());
    out.extend_from_slice(&data_offset.to_le_bytes());
    out.extend_from_slice(toc.as_bytes());
    out.resize(data_offset as usize, 0);
    out.extend_from_slice(data);
    out
}

fn open_bytes(dir: &Path, name: &str, bytes: &[u8]) -> Result<Bundle, BundleError> {
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    Bundle::open(&path)
}

#[test]
fn bad_packages_are_clear_errors() {
    let dir = scratch("bad");
    let good = softmax_package(&dir);
    let program = std::fs::read(bundle_dir("softmax").join("program.json")).unwrap();
    let entry = |name: &str, offset: u64, length: u64| {
        format!(r#"{{"entries": [{{"name": "{name}", "offset": {offset}, "length": {length}}}]}}"#)
    };
    let mut cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("empty", vec![], "not a wrapir package"),
        (
            "bad magic",
            b"PK\x03\x04 not a package at all, but long enough".to_vec(),
            "not a wrapir package",
        ),
        (
            "magic only",
            package::MAGIC.to_vec(),
            "truncated: 8 bytes, shorter than the 40-byte header",
        ),
        (
            "trailing bytes",
            [&good[..], b"extra"].concat(),
            "(bytes after its end)",
        ),
        (
            "overlap",
            handmade(
                r#"{"entries": [{"name": "program.json", "offset": 0, "length": 16}, {"name": "bundle.json", "offset": 8, "length": 8}]}"#,
                &[b' '; 16],
                1,
            ),
            "overlap",
        ),
        (
            "duplicate",
            handmade(
                r#"{"entries": [{"name": "program.json", "offset": 0, "length": 2}, {"name": "program.json", "offset": 8, "length": 2}]}"#,
                b"{}      {}",
                1,
            ),
            "appears twice",
        ),
        (
            "toc not json",
            handmade("{nope", b"", 1),
            "the table of contents is not valid",
        ),
    ];
    // The good package cut short: what is cut, and the length kept.
    let cuts = [
        ("header only", 40),
        ("toc cut", 64),
        ("payload cut", good.len() - 9),
        ("last byte cut", good.len() - 1),
    ];
    cases.extend(cuts.map(|(what, kept)| (what, good[..kept].to_vec(), "truncated: the header says the package is")));
    // Packages of one entry: what is wrong, the entry's name, offset and
    // length, the data, the format version, and the error.
    #[rustfmt::skip]
    let one_entry: [(&str, &str, u64, u64, &[u8], u32, &str); 12] = [
        ("version 3", "program.json", 0, 2, b"{}", 3, "package format version 3 is not supported (this wrapir reads versions 1 to 2"),
        ("version 2 without checksum", "program.json", 0, 2, b"{}", 2, "entry `program.json` has no checksum"),
        ("version 0", "program.json", 0, 2, b"{}", 0, "version 0 is not supported"),
        ("offset out of range", "program.json", 8, 2, b"{}", 1, "2 bytes at data offset 8 run past the end"),
        ("length out of range", "program.json", 0, 3, b"{}", 1, "3 bytes at data offset 0 run past the end"),
        ("length overflow", "program.json", 0, u64::MAX, b"{}", 1, "run past the end"),
        ("offset overflow", "program.json", u64::MAX - 7, 1, b"{}", 1, "run past the end"),
        ("misaligned offset", "program.json", 3, 1, b"{}{}", 1, "offset 3 is not a multiple of 8"),
        ("parent path", "../program.json", 0, 2, b"{}", 1, "is not a plain relative path"),
        ("absolute path", "/etc/passwd", 0, 2, b"{}", 1, "is not a plain relative path"),
        ("no program", "bundle.json", 0, 2, b"{}", 1, "has no `program.json`"),
        ("bad program", "program.json", 0, 2, b"{]", 1, "program.json"),
    ];
    cases.extend(one_entry.map(|(what, name, offset, length, data, version, want)| {
        (what, handmade(&entry(name, offset, length), data, version), want)
    }));
    // A table of contents claiming more than a package may hold, and past the file.
    // The good package with the header's 8-byte field at `at` set to `value`.
    let patched = |at: usize, value: u64| {
        let mut bytes = good.clone();
        bytes[at..at + 8].copy_from_slice(&value.to_le_bytes());
        bytes
    };
    cases.extend([
        (
            "huge toc",
            patched(24, u64::MAX),
            "more than the 16777216 a package may have",
        ),
        (
            "toc past end",
            patched(24, 1 << 20),
            "truncated: the table of contents ends at byte 1048616",
        ),
        (
            "huge file length",
            patched(16, u64::MAX),
            "truncated: the header says the package is 18446744073709551615 bytes",
        ),
        (
            "bad data offset",
            patched(32, 3),
            "data offset 3 must be a multiple of 8",
        ),
    ]);
    let mut flags = good.clone();
    flags[12] = 1;
    cases.push(("flags", flags, "unknown header flags 0x1"));
    // A valid container holding a bad safetensors entry opens; reading it names the entry.
    let bad_inputs = handmade(
        &format!(
            r#"{{"entries": [{{"name": "program.json", "offset": 0, "length": {}}}, {{"name": "inputs.safetensors", "offset": {}, "length": 3}}]}}"#,
            program.len(),
            program.len().div_ceil(8) * 8
        ),
        &[
            program.clone(),
            vec![0; program.len().div_ceil(8) * 8 - program.len()],
            vec![1, 2, 3],
        ]
        .concat(),
        1,
    );
    let mut failures = Vec::new();
    for (what, bytes, want) in cases {
        match open_bytes(&dir, "case.wirpkg", &bytes) {
            Err(e) if e.to_string().contains(want) && e.to_string().contains("case.wirpkg") => {}
            Err(e) => failures.push(format!("{what}: `{e}` does not contain `{want}` and the file name")),
            Ok(_) => failures.push(format!("{what}: opened")),
        }
    }
    common::assert_no_failures(&failures);
    let b = open_bytes(&dir, "inputs.wirpkg", &bad_inputs).unwrap();
    let err = b.inputs().unwrap_err().to_string();
    assert!(
        err.contains("inputs.wirpkg:inputs.safetensors") && err.contains("too short"),
        "{err}"
    );
    // Every prefix of a good package is an error, never a panic.
    for cut in (0..good.len()).step_by(997) {
        let err = match open_bytes(&dir, "prefix.wirpkg", &good[..cut]) {
            Ok(_) => panic!("a {cut}-byte prefix opens"),
            Err(e) => e.to_string(),
        };
        assert!(err.contains("prefix.wirpkg"), "prefix {cut}: {err}");
    }
    // The CLI names the file and exits 2.
    std::fs::write(dir.join("v3.wirpkg"), handmade(&entry("program.json", 0, 2), b"{}", 3)).unwrap();
    let r = wrapir(&["check", s(&dir.join("v3.wirpkg"))]);
    r.assert_exit(2);
    common::assert_contains(&r.stderr, "v3.wirpkg: package format version 3 is not supported");
}

/// The span of entry `name` in package `bytes` (its data offset plus the
/// table of contents' offset, and its length).
fn entry_span(bytes: &[u8], name: &str) -> (usize, usize) {
    let u64_at = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap()) as usize;
    let (toc_len, data_offset) = (u64_at(24), u64_at(32));
    let manifest: package::Manifest = serde_json::from_slice(&bytes[40..40 + toc_len]).unwrap();
    let record = manifest.entries.iter().find(|e| e.name == name).unwrap();
    assert!(
        record.checksum.as_deref().is_some_and(|c| c.starts_with("xxh3-64:")),
        "{record:?}"
    );
    (data_offset + record.offset as usize, record.length as usize)
}

#[test]
fn a_corrupted_entry_is_an_error_naming_it() {
    let dir = scratch("checksum");
    let good = softmax_package(&dir);
    assert_eq!(
        u32::from_le_bytes(good[8..12].try_into().unwrap()),
        package::FORMAT_VERSION
    );
    let softmax = Bundle::open(&bundle_dir("softmax")).unwrap();
    let kernel = softmax.cubin_paths()[0].to_string();
    let kernel = kernel.as_str();
    // One flipped bit in the middle, the first and the last byte of each entry.
    for entry in ["program.json", "inputs.safetensors", kernel] {
        let (start, len) = entry_span(&good, entry);
        for at in [start, start + len / 2, start + len - 1] {
            let mut bytes = good.clone();
            bytes[at] ^= 0x10;
            let err = match open_bytes(&dir, "flipped.wirpkg", &bytes) {
                Ok(_) => panic!("{entry}: a flipped byte at {at} opens"),
                Err(e) => e,
            };
            assert!(
                matches!(&err, BundleError::ChecksumMismatch { entry: e, .. } if e == entry),
                "{err}"
            );
            common::assert_contains(
                &err.to_string(),
                &format!("flipped.wirpkg: entry `{entry}` is corrupted"),
            );
        }
    }
    // The CLI names the entry and exits 2.
    let (start, len) = entry_span(&good, kernel);
    let mut bytes = good.clone();
    bytes[start + len / 3] ^= 1;
    std::fs::write(dir.join("corrupt.wirpkg"), &bytes).unwrap();
    let r = wrapir(&["run", s(&dir.join("corrupt.wirpkg")), "--device", "meta"]);
    r.assert_exit(2);
    common::assert_contains(&r.stderr, &format!("corrupt.wirpkg: entry `{kernel}` is corrupted"));
    // A malformed checksum is an error naming the entry too.
    let key = b"\"checksum\": \"xxh3-64:";
    let at = good.windows(key.len()).position(|w| w == key).unwrap() + key.len() - "xxh3-64:".len();
    let mut bytes = good.clone();
    bytes[at..at + 7].copy_from_slice(b"sha-256");
    let err = open_bytes(&dir, "form.wirpkg", &bytes).unwrap_err().to_string();
    common::assert_contains(&err, "entry `program.json`: checksum `sha-256:");
    common::assert_contains(&err, "is not `xxh3-64:` and 16 lowercase hex digits");
}

#[test]
fn a_version_1_package_opens_unverified_and_says_so() {
    let dir = scratch("version1");
    let program = std::fs::read(bundle_dir("softmax").join("program.json")).unwrap();
    let toc = format!(
        r#"{{"entries": [{{"name": "program.json", "offset": 0, "length": {}}}]}}"#,
        program.len()
    );
    let path = dir.join("old.wirpkg");
    std::fs::write(&path, handmade(&toc, &program, 1)).unwrap();
    let bundle = Bundle::open(&path).unwrap();
    assert_eq!(bundle.package_verified(), Some(false));
    assert_eq!(Bundle::open(&bundle_dir("softmax")).unwrap().package_verified(), None);
    let r = wrapir(&["print", s(&path)]);
    r.assert_exit(0);
    common::assert_contains(&r.stdout, "softmax");
    common::assert_contains(
        &r.stderr,
        &format!(
            "note: {} is a version-1 package, which records no checksums: its entries are used unverified",
            path.display()
        ),
    );
    // Packing it again writes the current version, verified.
    let repacked = dir.join("new.wirpkg");
    wrapir(&["pack", s(&path), "-o", s(&repacked)]).assert_exit(0);
    assert_eq!(Bundle::open(&repacked).unwrap().package_verified(), Some(true));
    let r = wrapir(&["print", s(&repacked)]);
    r.assert_exit(0);
    assert!(!r.stderr.contains("note:"), "{}", r.stderr);
}

//! The command line's conventions: every verb takes a program file, a bundle
//! directory, a package or stdin; `run` names the device that ran; errors
//! name flags; hints must name the program's symbols; symbols the meta
//! backend defaulted to a bound are reported.

mod common;

use common::{path_str, wrapir, CliCase};
use indexmap::IndexMap;
use std::path::{Path, PathBuf};
use wrapir::exec::safetensors;
use wrapir::exec::Tensor;

fn scratch(test: &str) -> PathBuf {
    common::scratch("cli", test)
}

/// A command line that succeeds with these texts on stdout.
fn ok<'a>(args: &[&'a str], stdout: &[&'a str]) -> CliCase<'a> {
    CliCase::new(args, 0, stdout, &[])
}

/// A command line that is refused (exit 2) with `stderr` in its message.
fn refused<'a>(args: &[&'a str], stderr: &'a str) -> CliCase<'a> {
    CliCase::new(args, 2, &[], &[stderr])
}

/// `wrapir run <program> --hint <hint>`, refused with `stderr` in its message.
fn hint_refused<'a>(program: &'a str, hint: &'a str, stderr: &'a str) -> CliCase<'a> {
    refused(&["run", program, "--hint", hint], stderr)
}

fn f32s(v: &[f32], size: &[i64]) -> Tensor {
    Tensor::from_vec(v.to_vec(), size).unwrap()
}

#[test]
fn cli_names_the_device_flags_and_defaulted_symbols() {
    let cat_mm = common::root().join("fixtures/inductor/bundles/cat_mm");
    let cat_mm_inputs = cat_mm.join("inputs.safetensors");
    let nonzero_inputs = scratch("flags").join("inputs.safetensors");
    // An input file without the program's input `arg0_1`.
    let mut other = IndexMap::new();
    other.insert("something_else".to_string(), f32s(&[1.0], &[1]));
    std::fs::write(&nonzero_inputs, safetensors::write(&other).unwrap()).unwrap();
    let cat_mm = path_str(&cat_mm);
    let (nonzero, pointwise) = ("fixtures/nonzero.wir", "fixtures/pointwise.wir");
    let item_convert_int = "fixtures/item_convert_int.wir";
    let cases = [
        ok(&["run", nonzero], &["device: meta\n"]),
        ok(&["run", cat_mm, "--device", "cpu"], &["device: cpu\n"]),
        ok(&["run", cat_mm, "--device", "meta"], &["device: meta\n"]),
        // Unbacked symbols that took a bound of their range: one line each.
        ok(
            &["run", item_convert_int],
            &[
                "note: unbacked symbol `u0` has no hint: took its upper bound 50 (set it with --hint u0=N)\n",
                "note: unbacked symbol `u1` has no hint: took its upper bound 1 (set it with --hint u1=N)\n",
                "note: unbacked symbol `u2` has no hint: took its upper bound 12 (set it with --hint u2=N)\n",
            ],
        ),
        ok(&["run", nonzero, "--hint", "u0=10"], &["bound symbols: u0 = 10"]).without("note:"),
        // Unknown hint symbols name the symbol and list the program's.
        hint_refused(
            nonzero,
            "zz=3",
            "--hint `zz=3`: the program has no symbol `zz` (its symbols: u0)",
        ),
        hint_refused(
            item_convert_int,
            "u9=1",
            "no symbol `u9` (its symbols: u0, u1, u2, triton_poi_fused_mul_slice_0_xnumel)",
        ),
        hint_refused(pointwise, "s0=3", "the program has no symbol `s0` (it has no symbols)"),
        hint_refused(nonzero, "u0=x", "--hint `u0=x`: `x` is not an integer"),
        // Messages name flags, not library functions.
        refused(
            &["run", "fixtures/cond_dynamic_branches.wir"],
            "needs a value (`--predicate true|false`",
        )
        .without("with_predicates"),
        refused(
            &["run", cat_mm, "--device", "cpu", "--predicate", "true"],
            "`--predicate` is for `--device meta`",
        ),
        refused(
            &["run", cat_mm, "--device", "cpu", "--hint", "s0=1"],
            "`--hint` is for `--device meta`",
        ),
        refused(
            &["run", pointwise, "--device", "cpu"],
            "no inputs were given: pass --inputs FILE.safetensors",
        ),
        // Inputs are matched as on cpu and cuda.
        refused(
            &["run", nonzero, "--inputs", path_str(&nonzero_inputs)],
            "running fixtures/nonzero.wir on meta: `something_else` is neither a graph input nor a constant",
        ),
        refused(
            &["run", cat_mm, "--device", "cpu", "--inputs", path_str(&nonzero_inputs)],
            "`something_else` is neither a graph input nor a constant",
        ),
        ok(
            &["run", cat_mm, "--device", "cpu", "--inputs", path_str(&cat_mm_inputs)],
            &["1 outputs match"],
        ),
        refused(
            &["run", nonzero, "--inputs", "no/such/file.safetensors"],
            "no/such/file.safetensors",
        ),
    ];
    common::run_cli_cases(cases.into());
}

#[test]
fn cli_verbs_take_files_directories_and_stdin() {
    let cat_mm = common::root().join("fixtures/inductor/bundles/cat_mm");
    for verb in [&["check"][..], &["print"], &["lower", "--target", "fx"]] {
        for program in [path_str(&cat_mm), "fixtures/inductor/bundles/cat_mm/program.json"] {
            let mut args = verb.to_vec();
            args.insert(1, program);
            let r = wrapir(&args);
            assert_eq!(r.code, 0, "{args:?}: {}", r.stderr);
        }
    }
    // A directory that is not a bundle, and a file that is not a program.
    let r = wrapir(&["check", "fixtures"]);
    assert_eq!(r.code, 2);
    common::assert_contains(
        &r.stderr,
        "fixtures: a directory without `program.json` is not a bundle",
    );
    let r = wrapir(&["print", "fixtures/inductor/bundles/cat_mm/inputs.safetensors"]);
    assert_eq!(r.code, 2);
    common::assert_contains(&r.stderr, "inputs.safetensors");
    // Parse errors still show the offending line.
    let bad = scratch("parse").join("bad.wir");
    std::fs::write(&bad, "program {\n  nonsense here\n}\n").unwrap();
    let r = wrapir(&["check", path_str(&bad)]);
    assert_eq!(r.code, 2);
    for want in ["cannot parse", "(line 1, column 1)", "here"] {
        common::assert_contains(&r.stderr, want);
    }
    // A missing file is named once.
    let r = wrapir(&["print", "no/such.wir"]);
    assert_eq!(r.code, 2);
    assert_eq!(r.stderr.matches("No such file").count(), 1, "{}", r.stderr);
    // Program text on stdin.
    use std::io::Write;
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_wrapir"))
        .args(["run", "-", "--hint", "u0=3"])
        .current_dir(common::root())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let text = std::fs::read(common::root().join("fixtures/nonzero.wir")).unwrap();
    child.stdin.take().unwrap().write_all(&text).unwrap();
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("bound symbols: u0 = 3"),
        "{stdout}"
    );
}

#[test]
fn cli_says_what_it_dropped() {
    let dir = scratch("dropped");
    let bundles = common::root().join("fixtures/inductor/bundles");
    // A bundle without inputs: `pack` says so in one line.
    let no_inputs = dir.join("no_inputs");
    common::copy_dir(&bundles.join("cat_mm"), &no_inputs);
    std::fs::remove_file(no_inputs.join("inputs.safetensors")).unwrap();
    let pkg = dir.join("no_inputs.wirpkg");
    let r = wrapir(&["pack", path_str(&no_inputs), "-o", path_str(&pkg)]);
    r.assert_exit(0);
    let line = "  no inputs.safetensors: the bundle carries no inputs, so `run` of the package needs --inputs FILE\n";
    common::assert_contains(&r.stdout, line);
    let r = wrapir(&[
        "pack",
        path_str(&bundles.join("cat_mm")),
        "-o",
        path_str(&dir.join("full.wirpkg")),
    ]);
    r.assert_exit(0);
    assert!(!r.stdout.contains("no inputs"), "{}", r.stdout);
    // A bundle without eager outputs: `run` says the comparison was not made.
    let no_expected = dir.join("no_expected");
    common::copy_dir(&bundles.join("cat_mm"), &no_expected);
    let expected = no_expected.join("expected.safetensors");
    std::fs::remove_file(&expected).unwrap();
    let r = wrapir(&["run", path_str(&no_expected), "--device", "cpu"]);
    r.assert_exit(0);
    common::assert_contains(
        &r.stdout,
        &format!("against eager: absent (no {}), not compared\n", expected.display()),
    );
    // An unbacked symbol whose upper bound makes an allocation too large:
    // the error names the symbol and the hint that avoids it.
    let nonzero = std::fs::read_to_string(common::root().join("fixtures/nonzero.wir")).unwrap();
    let huge = nonzero
        .replace(
            "symbol u0: unbacked [0, 100]",
            "symbol u0: unbacked [0, 4611686018427387904]",
        )
        .replace("assert (u0 <= 100)", "assert (u0 <= 4611686018427387904)");
    assert_ne!(huge, nonzero, "fixtures/nonzero.wir changed: update this test");
    let huge_path = dir.join("nonzero_huge.wir");
    std::fs::write(&huge_path, huge).unwrap();
    let r = wrapir(&["run", path_str(&huge_path), "--device", "meta"]);
    r.assert_exit(2);
    common::assert_contains(
        &r.stderr,
        "unbacked symbol `u0` had no hint and took its upper bound 4611686018427387904, which sizes above may come from: give it a realistic value with --hint u0=N",
    );
    let r = wrapir(&["run", path_str(&huge_path), "--device", "meta", "--hint", "u0=7"]);
    r.assert_exit(0);
    common::assert_contains(&r.stdout, "bound symbols: u0 = 7");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn lower_package_leaves_no_half_written_directory() {
    let dir = scratch("package_dir");
    let bundle = common::copy_bundle("softmax", &dir);
    let lower = |out: &Path| common::lower_package(&bundle, out);
    // A kernel image that cannot be read fails after the wrapper is written:
    // neither the package nor its staging directory is left behind.
    let kernels = bundle.join("kernels");
    let cubin = common::listing(&kernels)
        .into_iter()
        .find(|n| n.ends_with(".cubin"))
        .unwrap();
    let saved = std::fs::read(kernels.join(&cubin)).unwrap();
    std::fs::remove_file(kernels.join(&cubin)).unwrap();
    let out = dir.join("pkg");
    let before = common::listing(&dir);
    let r = lower(&out);
    r.assert_exit(2);
    common::assert_contains(&r.stderr, &cubin);
    assert_eq!(
        common::listing(&dir),
        before,
        "a failed package leaves nothing in its parent"
    );
    // Complete, it is written; written again over itself, it is replaced.
    std::fs::write(kernels.join(&cubin), &saved).unwrap();
    lower(&out).assert_exit(0);
    assert!(out.join("CMakeLists.txt").is_file() && out.join("kernels").join(&cubin).is_file());
    std::fs::write(out.join("stale.txt"), "from an earlier package").unwrap();
    lower(&out).assert_exit(0);
    assert!(!out.join("stale.txt").exists() && out.join("main.cpp").is_file());
    let mut with_package = [&before[..], &["pkg".to_string()]].concat();
    with_package.sort();
    assert_eq!(common::listing(&dir), with_package);
    // A failure over an earlier package keeps it whole.
    std::fs::remove_file(kernels.join(&cubin)).unwrap();
    let earlier = common::listing(&out);
    lower(&out).assert_exit(2);
    assert_eq!(common::listing(&out), earlier);
    std::fs::write(kernels.join(&cubin), &saved).unwrap();
    // A directory that is not an earlier package, a file and a symlink are refused untouched.
    let mine = dir.join("mine");
    std::fs::create_dir(&mine).unwrap();
    std::fs::write(mine.join("notes.txt"), "mine").unwrap();
    let r = lower(&mine);
    r.assert_exit(2);
    common::assert_contains(&r.stderr, "the directory exists and is not an earlier package");
    assert_eq!(common::listing(&mine), ["notes.txt"]);
    let link = dir.join("link");
    std::os::unix::fs::symlink(&mine, &link).unwrap();
    let r = lower(&link);
    r.assert_exit(2);
    common::assert_contains(&r.stderr, "is not a directory (a symlink is not followed)");
    assert_eq!(common::listing(&mine), ["notes.txt"]);
    let _ = std::fs::remove_dir_all(&dir);
}

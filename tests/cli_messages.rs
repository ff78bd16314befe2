//! What a person reads: help that fits a screen, errors that point at the
//! file and say what to pass instead, `wrapir info`, outputs saved and named
//! inputs, the device that ran each output, `--version`.

mod common;

use common::{path_str, run_cli_cases as run_cases, wrapir, CliCase};
use indexmap::IndexMap;
use std::path::PathBuf;
use wrapir::exec::safetensors;

fn scratch(test: &str) -> PathBuf {
    common::scratch("cli_messages", test)
}

/// `args` exiting with `code`, printing `stdout` and `stderr` ([`common::CliCase`]).
fn case<'a>(args: &[&'a str], code: i32, stdout: &[&'a str], stderr: &[&'a str]) -> CliCase<'a> {
    CliCase::new(args, code, stdout, stderr)
}

/// The verbs' lines of `wrapir --help`: two-space indented, one line each.
fn verb_lines(help: &str) -> Vec<&str> {
    help.split("Commands:")
        .nth(1)
        .and_then(|rest| rest.split("\n\n").next())
        .map(|block| block.lines().filter(|l| !l.trim().is_empty()).collect())
        .unwrap_or_default()
}

#[test]
fn help_is_short_and_says_why_a_device_is_missing() {
    let top = wrapir(&["--help"]);
    assert_eq!(top.code, 0, "{}", top.stderr);
    let verbs = verb_lines(&top.stdout);
    assert!(verbs.len() >= 10, "{}", top.stdout);
    for line in &verbs {
        // One line each: every line starts a verb, none is a continuation.
        assert!(
            line.starts_with("  ") && !line.starts_with("    "),
            "a continuation line: `{line}`"
        );
        assert!(line.len() <= 120, "a long summary: `{line}`");
    }
    for verb in [
        "info", "check", "run", "lower", "compare", "pack", "ops", "bench", "sym", "print",
    ] {
        assert!(
            verbs.iter().any(|l| l.trim_start().starts_with(verb)),
            "no `{verb}` in:\n{}",
            top.stdout
        );
    }
    common::assert_contains(&top.stdout, "wrapir help VERB");
    // The limits under their own heading, after every verb's own options.
    let run = wrapir(&["help", "run"]);
    let (own, limits) = run
        .stdout
        .split_once("Limits (every verb")
        .unwrap_or_else(|| panic!("no Limits heading in:\n{}", run.stdout));
    for flag in ["--device", "--save-outputs", "--inputs"] {
        assert!(own.contains(flag), "`{flag}` not among run's own options:\n{own}");
    }
    for flag in [
        "--max-alloc-bytes",
        "--max-run-bytes",
        "--max-depth",
        "--max-subgraph-depth",
        "--loop-fuel",
        "--max-diagnostics",
        "--max-outputs",
        "--max-inlined-subgraphs",
        "--max-file-bytes",
    ] {
        assert!(
            limits.contains(flag) && !own.contains(flag),
            "`{flag}` not under Limits"
        );
    }
    run_cases(vec![
        // The details are in `help VERB`, with the reason for the devices a verb takes.
        case(
            &["help", "check"],
            0,
            &["No `meta`: the meta backend runs every op"],
            &[],
        ),
        case(&["help", "lower"], 0, &["No `--device`: a lowering writes code"], &[]),
        case(&["help", "bench"], 0, &["only `cuda` (or its alias `gpu`)"], &[]),
        case(
            &["help", "compare"],
            0,
            &["No `--device`: the outputs were computed elsewhere"],
            &[],
        ),
        // `gpu` is `cuda`; `bench` says which device it takes.
        case(
            &[
                "check",
                "fixtures/inductor/bundles/cat_mm",
                "--device",
                "gpu",
                "--no-translation",
            ],
            0,
            &["cuda: every extern op call runs"],
            &[],
        )
        .without("invalid value"),
        case(
            &["bench", "fixtures/nonzero.wir", "--device", "cpu"],
            2,
            &[],
            &["`bench` times the cuda device only", "pass `--device cuda`"],
        ),
    ]);
}

#[test]
fn version_lists_the_features_built_in() {
    let r = wrapir(&["--version"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stdout.starts_with(&format!("wrapir {}\n", env!("CARGO_PKG_VERSION"))),
        "{}",
        r.stdout
    );
    let features = r.stdout.lines().find_map(|l| l.strip_prefix("features: ")).unwrap();
    assert!(features.split(", ").any(|f| f == "cli"), "{}", r.stdout);
    // This build has no `cuda` feature (a `cuda` build lists the libraries it found).
    assert!(
        r.stdout.contains("cuda: not built in") || r.stdout.contains("cuda: built in; on this machine: CUDA driver"),
        "{}",
        r.stdout
    );
    // Without a verb or flag: the help.
    let bare = wrapir(&[]);
    assert_eq!(bare.code, 2);
    common::assert_contains(&bare.stderr, "Usage:");
}

#[test]
fn wrong_kinds_of_file_say_what_they_are() {
    let dir = scratch("files");
    let empty = dir.join("empty.json");
    std::fs::write(&empty, "").unwrap();
    let bundle_json = "fixtures/inductor/bundles/cat_mm/bundle.json";
    run_cases(vec![
        case(&["check", path_str(&empty)], 2, &[], &["invalid program JSON"]).without("wrapir <version>"),
        case(
            &["print", bundle_json],
            2,
            &[],
            &["this is a bundle's metadata (`bundle.json`), not a program: pass the bundle directory (`fixtures/inductor/bundles/cat_mm`) instead"],
        ),
    ]);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn validation_errors_point_at_the_file() {
    let dir = scratch("validation");
    // A use after free on file line 7 (the graph's line 1) of a buffer freed
    // on file line 6, after comments and blank lines: the message names file
    // lines, not the graph's own numbering.
    let wir = dir.join("uaf.wir");
    std::fs::write(
        &wir,
        "wrapir 1\n\n; a comment\ngraph main(arg0_1: f32[8][1]@cuda:0) -> (buf0) {\n  buffer buf0: f32[8][1]@cuda:0\n  free arg0_1\n    extern buf0 = torch.ops.aten.clone.default(arg0_1)\n}\n",
    )
    .unwrap();
    let json = dir.join("uaf.json");
    let printed = wrapir(&["print", "--json", path_str(&wir)]);
    assert_eq!(printed.code, 0, "{}", printed.stderr);
    std::fs::write(&json, &printed.stdout).unwrap();
    let at_wir = format!("--> {}:7:5", wir.display());
    let snippet = " 7 |     extern buf0 = torch.ops.aten.clone.default(arg0_1)\n   |     ^";
    let at_json = format!("--> {}: main.lines[1]", json.display());
    run_cases(vec![
        case(
            &["check", path_str(&wir)],
            1,
            &[],
            &[
                "error in graph main: buffer arg0_1 is used after it was freed at line 6\n",
                &at_wir,
                snippet,
            ],
        ),
        case(&["lower", path_str(&wir)], 2, &[], &[&at_wir, snippet]),
        case(&["run", path_str(&wir)], 2, &[], &[&at_wir]),
        case(
            &["check", path_str(&json)],
            1,
            &[],
            &["buffer arg0_1 is used after it was freed at `main.lines[0]`", &at_json],
        ),
    ]);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn runs_name_the_device_that_ran_and_save_their_outputs() {
    let dir = scratch("save");
    let cat_mm = "fixtures/inductor/bundles/cat_mm";
    let saved = dir.join("out.safetensors");
    let softmax = "fixtures/inductor/bundles/softmax";
    run_cases(vec![
        // A cuda program on the cpu backend: the device that ran, and the declared one.
        case(
            &["run", cat_mm, "--device", "cpu"],
            0,
            &["output 0: tensor f32", "on cpu (declared cuda"],
            &[],
        ),
        case(
            &["run", cat_mm, "--device", "cpu", "--save-outputs", path_str(&saved)],
            0,
            &["saved 1 outputs to"],
            &[],
        ),
        case(
            &["compare", cat_mm, path_str(&saved)],
            0,
            &["against eager: 1 outputs match"],
            &[],
        ),
        case(
            &["run", cat_mm, "--save-outputs", path_str(&saved)],
            2,
            &[],
            &["`--save-outputs` needs `--device cpu` or `--device cuda`"],
        ),
        // Triton kernels: `check --device cpu` names them, `run --device cpu` points at cuda.
        case(
            &["check", softmax, "--device", "cpu", "--no-translation"],
            1,
            &[
                "the cpu backend cannot run kernel `triton_",
                "a Triton kernel runs on the GPU",
                "run it with --device cuda",
            ],
            &[],
        ),
        case(
            &["run", softmax, "--device", "cpu"],
            2,
            &[],
            &["is a Triton kernel, which runs on the GPU: run with --device cuda"],
        ),
    ]);
    let stored = common::read_tensors(&saved);
    assert_eq!(stored.keys().collect::<Vec<_>>(), ["out0"]);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn info_shows_inputs_outputs_kernels_ops_and_versions() {
    let dir = scratch("info");
    // A copy of cat_mm whose bundle.json names its inputs and outputs, as the exporter writes them.
    let bundle = common::copy_bundle("cat_mm", &dir);
    let meta_path = bundle.join("bundle.json");
    let mut meta: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&meta_path).unwrap()).unwrap();
    meta["signature"] = serde_json::json!(["a", "b", "pair"]);
    meta["input_names"] = serde_json::json!({"arg0_1": "a", "arg1_1": "b", "arg2_1": "pair[0]", "arg3_1": "pair[1]"});
    meta["output_names"] = serde_json::json!(["output"]);
    std::fs::write(&meta_path, meta.to_string()).unwrap();
    // Inputs under the user's names run like the graph's.
    let stored = common::read_tensors(&bundle.join("inputs.safetensors"));
    let user_names = ["a", "b", "pair[0]", "pair[1]"];
    let renamed: IndexMap<String, wrapir::exec::Tensor> = stored
        .values()
        .zip(user_names)
        .map(|(t, n)| (n.to_string(), t.clone()))
        .collect();
    let named_inputs = dir.join("named.safetensors");
    std::fs::write(&named_inputs, safetensors::write(&renamed).unwrap()).unwrap();
    let mut twice = renamed.clone();
    twice.insert("arg0_1".to_string(), stored["arg0_1"].clone());
    let twice_inputs = dir.join("twice.safetensors");
    std::fs::write(&twice_inputs, safetensors::write(&twice).unwrap()).unwrap();
    let b = path_str(&bundle);
    let pkg = dir.join("cat_mm.wirpkg");
    run_cases(vec![
        case(
            &["info", b],
            0,
            &[
                ": bundle directory\n",
                "compiled by: PyTorch 2.11.0+cu130, Triton 3.6.0, on NVIDIA H200",
                "inputs (4):\n  signature: (a, b, pair)\n  arg0_1 `a`: f32[",
                "arg3_1 `pair[1]`: ",
                "outputs (1):\n  0 `output`: ",
                "kernels: none",
                "extern ops (2 calls of 1 op):\n  aten.mm x2: runs on cuda (cuBLAS), cpu",
            ],
            &[],
        ),
        case(
            &["run", b, "--device", "cpu", "--inputs", path_str(&named_inputs)],
            0,
            &["1 outputs match"],
            &[],
        ),
        case(
            &["run", b, "--device", "cpu", "--inputs", path_str(&twice_inputs)],
            2,
            &[],
            &["graph input `arg0_1` is given twice: as `arg0_1` and by its name `a`"],
        ),
        case(&["pack", b, "-o", path_str(&pkg)], 0, &["packed"], &[]),
        case(
            &["info", path_str(&pkg)],
            0,
            &[": package\n", "package: format version", "0 `output`"],
            &[],
        ),
        // A program file: no bundle.json, so no versions and no user names.
        case(
            &["info", "fixtures/nonzero.wir"],
            0,
            &[
                "fixtures/nonzero.wir: program file",
                "symbols (1):\n  u0: unbacked (data-dependent), range",
            ],
            &[],
        )
        .without("compiled by"),
    ]);
    // A model with weights: their count and size.
    let r = wrapir(&["info", "fixtures/inductor/bundles/bert"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stdout.contains(" (weight `") && r.stdout.contains("weights: "),
        "{}",
        r.stdout
    );
    assert!(r.stdout.contains("kernels (8): 8 triton"), "{}", r.stdout);
    let _ = std::fs::remove_dir_all(&dir);
}

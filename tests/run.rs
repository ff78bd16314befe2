//! Whole-program runs: every fixture on the meta backend, the safetensors
//! reader and writer, and the `wrapir run` command end to end.

mod common;

use indexmap::IndexMap;
use std::path::{Path, PathBuf};
use wrapir::exec::meta::{run_program_on, MetaBackend, MetaReport};
use wrapir::exec::safetensors;
use wrapir::exec::{Tensor, Value};
use wrapir::format::safetensors::SafetensorsError;
use wrapir::ir::{DType, GraphOutput, Program};
use wrapir::sym::{eval::eval_int, Bindings, Symbol};

// ---- every fixture on meta ------------------------------------------------------

/// How a fixture runs on meta when symbol hints and range defaults are not enough.
struct MetaSetup {
    fixture: &'static str,
    /// Caller hints.
    hints: &'static [(&'static str, i64)],
    /// Values of data-dependent predicates to run with (one run each).
    predicates: &'static [bool],
    /// `Some(text)`: the run must fail with an error containing `text`.
    fails_with: Option<&'static str>,
}

const SETUPS: &[MetaSetup] = &[
    // `cond` on a tensor predicate: run both branches.
    MetaSetup {
        fixture: "cond_dynamic_branches",
        hints: &[],
        predicates: &[true, false],
        fails_with: None,
    },
    // A switch on a tensor selector: `true` selects branch 1, `false` branch 0.
    MetaSetup {
        fixture: "switch_asserts",
        hints: &[("u0", 3)],
        predicates: &[true, false],
        fails_with: None,
    },
    // A data-dependent loop: `true` would never stop, so run zero iterations.
    MetaSetup {
        fixture: "while_loop",
        hints: &[],
        predicates: &[false],
        fails_with: None,
    },
    // The range defaults (64, 64) violate `u0 + u1 == 64`.
    MetaSetup {
        fixture: "tuple_output_unbacked",
        hints: &[("u0", 40), ("u1", 24)],
        predicates: &[],
        fails_with: None,
    },
];

fn meta_run(program: &Program, hints: &[(&str, i64)], predicate: Option<bool>) -> Result<MetaReport, String> {
    let mut backend = MetaBackend::new();
    for (s, v) in hints {
        backend = backend.with_hint(*s, *v);
    }
    if let Some(p) = predicate {
        backend = backend.with_predicate(p);
    }
    run_program_on(program, &mut backend).map_err(|e| e.to_string())
}

/// Checks the outputs of a meta run against the program's declared outputs,
/// evaluated with the symbols the run bound (and the hints for the rest).
fn check_outputs(program: &Program, hints: &[(&str, i64)], report: &MetaReport) -> Result<(), String> {
    let mut env: Bindings = program
        .symbols
        .iter()
        .filter_map(|(s, d)| d.hint.map(|h| (s.clone(), h)))
        .collect();
    env.extend(hints.iter().map(|(s, v)| (Symbol::new(s), *v)));
    env.extend(report.symbols.iter().map(|(s, v)| (s.clone(), *v)));
    let declared = &program.main.outputs;
    if declared.len() != report.outputs.len() {
        return Err(format!("{} outputs, {} declared", report.outputs.len(), declared.len()));
    }
    let eval = |e: &wrapir::sym::SymExpr| eval_int(e, &env).map_err(|err| err.to_string());
    for (k, (decl, got)) in declared.iter().zip(&report.outputs).enumerate() {
        match (decl, got) {
            (GraphOutput::Buffer(name), Value::Tensor(spec)) => {
                let layout = program
                    .main
                    .layout(name)
                    .ok_or_else(|| format!("output {k}: `{name}` has no layout"))?;
                let size = layout.size.iter().map(eval).collect::<Result<Vec<_>, _>>()?;
                let stride = layout.stride.iter().map(eval).collect::<Result<Vec<_>, _>>()?;
                let strides_agree = spec
                    .size
                    .iter()
                    .zip(spec.stride.iter().zip(&stride))
                    .all(|(n, (a, b))| *n <= 1 || a == b);
                if spec.dtype != layout.dtype || spec.size != size || !strides_agree {
                    return Err(format!(
                        "output {k} `{name}`: got {:?}, declared {layout} = {size:?} / {stride:?}",
                        spec
                    ));
                }
            }
            (GraphOutput::Expr(e), Value::Int(v)) => {
                if eval(e)? != *v {
                    return Err(format!("output {k}: got {v}, declared `{e}` = {}", eval(e)?));
                }
            }
            (GraphOutput::None, Value::None) => {}
            (d, g) => return Err(format!("output {k}: got a {}, declared {d:?}", g.kind())),
        }
    }
    if report.memory.peak_bytes < report.memory.current_bytes {
        return Err(format!(
            "peak {} below live {}",
            report.memory.peak_bytes, report.memory.current_bytes
        ));
    }
    Ok(())
}

#[test]
fn every_fixture_runs_on_meta() {
    let fixtures = common::fixtures();
    assert!(!fixtures.is_empty(), "no fixtures found");
    let mut failures = Vec::new();
    for path in &fixtures {
        let name = common::name(path);
        let program = common::load(path);
        let setup = SETUPS.iter().find(|s| s.fixture == name);
        let hints = setup.map_or(&[][..], |s| s.hints);
        let predicates: Vec<Option<bool>> = match setup {
            Some(s) if !s.predicates.is_empty() => s.predicates.iter().map(|p| Some(*p)).collect(),
            _ => vec![None],
        };
        for predicate in predicates {
            let label = format!("{name} (predicate {predicate:?})");
            match (meta_run(&program, hints, predicate), setup.and_then(|s| s.fails_with)) {
                (Ok(report), None) => {
                    if let Err(e) = check_outputs(&program, hints, &report) {
                        failures.push(format!("{label}: {e}"));
                    }
                }
                (Err(e), Some(want)) if e.contains(want) => {}
                (Err(e), _) => failures.push(format!("{label}: {e}")),
                (Ok(_), Some(want)) => failures.push(format!(
                    "{label}: expected to fail with `{want}`, but it ran; update SETUPS"
                )),
            }
        }
    }
    for s in SETUPS {
        if !fixtures.iter().any(|p| common::name(p) == s.fixture) {
            failures.push(format!("SETUPS names `{}`, which is not a fixture", s.fixture));
        }
    }
    common::assert_no_failures(&failures);
}

#[test]
fn meta_reports_peak_memory_and_unbacked_values() {
    // nonzero.wir: input f32[100] (400 B) and mask b8[100] (100 B) live together;
    // the input dies, then the mask, then nonzero's i64[u0, 1] (8 u0 B) and the
    // f32[u0, 1] result (4 u0 B) live together: peak = max(500, 12 u0).
    // Without a hint, u0 takes its range's upper bound (100).
    let program = common::load(&common::root().join("fixtures/nonzero.wir"));
    for (hint, u0, peak) in [(Some(10), 10, 500), (None, 100, 1200)] {
        let hints: Vec<(&str, i64)> = hint.map(|h| ("u0", h)).into_iter().collect();
        let report = meta_run(&program, &hints, None).unwrap();
        assert_eq!(report.symbols.get(&Symbol::new("u0")).copied(), Some(u0));
        assert_eq!(report.memory.peak_bytes, peak, "u0 = {u0}");
    }
}

#[test]
fn meta_names_symbols_without_a_value() {
    let mut p = wrapir::ir::ProgramBuilder::new();
    let _s0 = p.backed_symbol("s0", None);
    let mut g = p.main();
    let x = g.tensor_input(
        "arg0_1",
        wrapir::ir::Layout::contiguous(
            DType::Float32,
            wrapir::ir::Device::cpu(),
            [wrapir::sym::SymExpr::sym("s0")],
        ),
    );
    g.output(&x);
    g.finish();
    let program = p.finish();
    let err = meta_run(&program, &[], None).unwrap_err();
    assert!(
        err.contains("input `arg0_1`") && err.contains("symbol `s0` has no value"),
        "{err}"
    );
    let report = meta_run(&program, &[("s0", 5)], None).unwrap();
    assert!(matches!(report.outputs.first(), Some(Value::Tensor(t)) if t.size == vec![5]));
}

// ---- safetensors ------------------------------------------------------------------

fn f32s(v: &[f32], size: &[i64]) -> Tensor {
    Tensor::from_vec(v.to_vec(), size).unwrap()
}

#[test]
fn safetensors_round_trip_keeps_order_dtypes_and_values() {
    let mut m = IndexMap::new();
    m.insert(
        "z_first".to_string(),
        f32s(&[1.5, -2.0, f32::INFINITY, 0.0, 3.25, 7.0], &[2, 3]),
    );
    m.insert(
        "a_second".to_string(),
        Tensor::from_vec(vec![i64::MIN, 0, i64::MAX], &[3]).unwrap(),
    );
    m.insert("flag".to_string(), Tensor::from_vec(vec![true, false], &[2]).unwrap());
    m.insert("scalar".to_string(), Tensor::scalar(42i64));
    m.insert("empty".to_string(), f32s(&[], &[0, 4]));
    for (name, dtype) in [("h", DType::Float16), ("b", DType::Bfloat16), ("d", DType::Float64)] {
        m.insert(
            name.to_string(),
            Tensor::from_f64(dtype, &[0.5, -1.0, 65504.0], &[3]).unwrap(),
        );
    }
    for (name, dtype) in [
        ("i8", DType::Int8),
        ("u8", DType::Uint8),
        ("i16", DType::Int16),
        ("i32", DType::Int32),
    ] {
        m.insert(name.to_string(), Tensor::from_i64(dtype, &[-1, 2, 127], &[3]).unwrap());
    }
    // A transposed view is written row-major.
    let base = f32s(&[1., 2., 3., 4., 5., 6.], &[2, 3]);
    m.insert("view".to_string(), base.view(&[3, 2], &[1, 3], 0).unwrap());
    let mut meta = IndexMap::new();
    meta.insert("format".to_string(), "pt".to_string());
    let bytes = safetensors::write_with_metadata(&m, &meta).unwrap();
    let header_len = u64::from_le_bytes(bytes[..8].try_into().unwrap());
    assert_eq!(header_len % 8, 0, "header is padded to 8 bytes");
    let back = safetensors::parse_with_metadata(&bytes).unwrap();
    assert_eq!(back.metadata, meta);
    assert_eq!(back.tensors.keys().collect::<Vec<_>>(), m.keys().collect::<Vec<_>>());
    for (name, t) in &m {
        let r = &back.tensors[name];
        assert_eq!((r.dtype(), r.size()), (t.dtype(), t.size()), "{name}");
        assert_eq!(r.to_f64_vec().unwrap(), t.to_f64_vec().unwrap(), "{name}");
    }
    assert_eq!(back.tensors["view"].to_f64_vec().unwrap(), vec![1., 4., 2., 5., 3., 6.]);
}

/// A file from a JSON header and a data section (header padded like writers do).
fn file(header: &str, data: &[u8]) -> Vec<u8> {
    let mut out = (header.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(data);
    out
}

#[test]
fn malformed_safetensors_are_clear_errors() {
    // One f32 tensor `x`: name, shape, data offsets, data section length, the error.
    let f32_cases: [(&str, &str, u64, u64, usize, &str); 5] = [
        ("negative dim", "[-1]", 0, 4, 4, "is not a non-negative integer"),
        (
            "offsets past end",
            "[2]",
            0,
            8,
            4,
            "data offsets [0, 8] are outside the 4-byte data section",
        ),
        ("reversed offsets", "[0]", 4, 0, 4, "data offsets [4, 0]"),
        (
            "byte count",
            "[3]",
            0,
            8,
            8,
            "f32 of shape [3] needs 12 bytes, but its data offsets span 8",
        ),
        (
            "overflowing shape",
            "[4294967296, 4294967296]",
            0,
            4,
            4,
            "needs 18446744073709551615 bytes",
        ),
    ];
    let f32_files = f32_cases.map(|(name, shape, begin, end, len, want)| {
        let header = format!(r#"{{"x":{{"dtype":"F32","shape":{shape},"data_offsets":[{begin},{end}]}}}}"#);
        (name, file(&header, &vec![0; len]), want)
    });
    let mut huge = 1_000_000u64.to_le_bytes().to_vec();
    huge.extend_from_slice(b"{}");
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("too short", vec![1, 2, 3], "too short for the 8-byte header length"),
        ("header past end", huge, "header length 1000000 exceeds the 2 bytes"),
        ("not json", file("{nope", &[]), "invalid header"),
        ("not an object", file("[1,2]", &[]), "invalid header"),
        (
            "unknown dtype",
            file(r#"{"x":{"dtype":"C128","shape":[1],"data_offsets":[0,16]}}"#, &[0; 8]),
            "unknown dtype `C128`",
        ),
        (
            "missing shape",
            file(r#"{"x":{"dtype":"F32","data_offsets":[0,4]}}"#, &[0; 4]),
            "tensor `x`: missing `shape`",
        ),
        (
            "bad bool",
            file(r#"{"b":{"dtype":"BOOL","shape":[2],"data_offsets":[0,2]}}"#, &[1, 7]),
            "byte 7 at element 1 is not a boolean",
        ),
        (
            "fnuz fp8",
            file(
                r#"{"q":{"dtype":"F8_E4M3FNUZ","shape":[2],"data_offsets":[0,2]}}"#,
                &[0; 2],
            ),
            "dtype f8e4m3fnuz is not supported by host tensors",
        ),
        (
            "bad metadata",
            file(r#"{"__metadata__":{"k":1}}"#, &[]),
            "`__metadata__` must be an object of strings",
        ),
        (
            "gap between tensors",
            file(
                r#"{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}}"#,
                &[0; 12],
            ),
            "tensor `b`: data offsets [8, 12] do not start where the tensors before end (byte 4)",
        ),
        (
            "bytes past the tensors",
            file(r#"{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}"#, &[0; 8]),
            "the tensors cover 4 of the 8 bytes",
        ),
        (
            "dtype wrapir lacks",
            file(r#"{"a":{"dtype":"U16","shape":[1],"data_offsets":[0,2]}}"#, &[0; 2]),
            "tensor `a`: safetensors dtype `U16` has no wrapir dtype",
        ),
        (
            "sub-byte dtype not filling its bytes",
            file(r#"{"a":{"dtype":"F4","shape":[3],"data_offsets":[0,2]}}"#, &[0; 2]),
            "tensor `a`: F4 of shape [3] does not fill the 2 bytes",
        ),
    ];
    let mut failures = Vec::new();
    for (name, bytes, want) in cases.into_iter().chain(f32_files) {
        match safetensors::parse(&bytes) {
            Err(e) if e.to_string().contains(want) => {}
            other => failures.push(format!("{name}: got {other:?}, want an error containing `{want}`")),
        }
    }
    common::assert_no_failures(&failures);
    let mut reserved = IndexMap::new();
    reserved.insert("__metadata__".to_string(), Tensor::scalar(1i64));
    assert!(matches!(
        safetensors::write(&reserved),
        Err(SafetensorsError::Write { .. })
    ));
}

#[test]
fn bundle_safetensors_parse_and_round_trip() {
    let dir = common::root().join("fixtures/inductor/bundles/topk");
    for file in ["inputs.safetensors", "expected.safetensors"] {
        let bytes = std::fs::read(dir.join(file)).unwrap();
        let tensors = safetensors::parse(&bytes).unwrap();
        assert!(!tensors.is_empty(), "{file}");
        let again = safetensors::parse(&safetensors::write(&tensors).unwrap()).unwrap();
        for (name, t) in &tensors {
            assert_eq!(
                again[name].to_f64_vec().unwrap(),
                t.to_f64_vec().unwrap(),
                "{file}: {name}"
            );
        }
    }
    let expected = safetensors::parse(&std::fs::read(dir.join("expected.safetensors")).unwrap()).unwrap();
    assert_eq!(
        expected.keys().collect::<Vec<_>>(),
        ["out0", "out1"],
        "keys in file order"
    );
}

// ---- `wrapir run` -----------------------------------------------------------------

use common::wrapir;

/// A fresh scratch directory for one test.
fn scratch(test: &str) -> PathBuf {
    common::scratch("run", test)
}

fn path_str(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Without the `cuda` feature the CUDA backend's stand-in cannot open: the
/// commands that need a GPU say which feature is missing, after the checks
/// that need none.
#[cfg(not(feature = "cuda"))]
#[test]
fn cuda_commands_name_the_missing_feature() {
    const WHY: &str = "wrapir was built without the `cuda` feature (rebuild with `--features cuda`)";
    let run = wrapir(&["run", "fixtures/addmm_bf16.wir", "--device", "cuda"]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(
        run.stderr.starts_with(&format!(
            "error: running fixtures/addmm_bf16.wir on cuda: opening the GPU: {WHY}"
        )),
        "{}",
        run.stderr
    );
    let bench = wrapir(&["bench", "fixtures/inductor/bundles/softmax"]);
    assert_eq!(bench.code, 2, "{}", bench.stderr);
    assert_eq!(bench.stderr, format!("error: opening the GPU: {WHY}\n"));
    assert_eq!(bench.stdout, "");
    let check = wrapir(&["check", "fixtures/inductor/bundles/softmax", "--device", "cuda"]);
    assert!(
        check
            .stdout
            .contains(&format!("(not compared with a GPU: {WHY}; --arch names one)")),
        "{}",
        check.stdout
    );
}

#[test]
fn cli_runs_fixtures_on_meta() {
    // (arguments, exit code, texts stdout must contain, text stderr must contain)
    let cases: &[(&[&str], i32, &[&str], &str)] = &[
        (
            &["run", "fixtures/nonzero.wir", "--hint", "u0=10"],
            0,
            &[
                "output 0: tensor f32[10, 1]",
                "bound symbols: u0 = 10",
                "peak memory: 500 bytes",
            ],
            "",
        ),
        (
            &["run", "fixtures/nonzero.wir"],
            0,
            &["bound symbols: u0 = 100", "peak memory: 1200 bytes"],
            "",
        ),
        (
            &["run", "fixtures/pointwise.wir", "--device", "meta"],
            0,
            &[
                "output 0: tensor f32[64, 128] stride [128, 1] offset 0 on cuda",
                "bound symbols: none",
                "peak memory: ",
            ],
            "",
        ),
        (
            &["run", "fixtures/cond_dynamic_branches.wir"],
            2,
            &[],
            "the meta backend cannot read tensor data",
        ),
        (
            &["run", "fixtures/while_loop.wir", "--predicate", "false"],
            0,
            &["output 0: "],
            "",
        ),
        (
            &["run", "fixtures/nonzero.wir", "--hint", "u0"],
            2,
            &[],
            "hint `u0` is not SYMBOL=VALUE",
        ),
        (
            &["run", "fixtures/nonzero.wir", "--expect", "x.safetensors"],
            2,
            &[],
            "`--expect` needs `--device cpu`",
        ),
        (
            &["run", "fixtures/pointwise.wir", "--device", "cpu"],
            2,
            &[],
            "was not supplied",
        ),
    ];
    let mut failures = Vec::new();
    for (args, code, stdout, stderr) in cases {
        let r = wrapir(args);
        if !r.matches(*code, stdout, stderr) {
            failures.push(r.failure(format_args!("{args:?} (want exit {code})")));
        }
    }
    common::assert_no_failures(&failures);
}

#[test]
fn cli_compares_cpu_outputs_with_expected() {
    let bundle = common::root().join("fixtures/inductor/bundles/cat_mm");
    // The bundle's own inputs and expected outputs.
    let r = wrapir(&["run", path_str(&bundle), "--device", "cpu", "--print"]);
    r.assert_exit(0);
    for want in ["output 0: tensor f32[16, 32]", "values: [", "1 outputs match"] {
        common::assert_contains(&r.stdout, want);
    }

    // One element off: exit 1, naming the output, index and values.
    let expected = safetensors::parse(&std::fs::read(bundle.join("expected.safetensors")).unwrap()).unwrap();
    let out0 = &expected["out0"];
    let mut values = out0.to_f64_vec().unwrap();
    let (row, col) = (3usize, 5usize);
    let k = row * 32 + col;
    values[k] += 1000.0;
    let mut wrong = IndexMap::new();
    wrong.insert(
        "out0".to_string(),
        Tensor::from_f64(DType::Float32, &values, out0.size()).unwrap(),
    );
    // A run of the bundle on the host, compared with the outputs in `expect`.
    let run_expecting = |expect: &Path| {
        wrapir(&[
            "run",
            path_str(&bundle),
            "--device",
            "cpu",
            "--expect",
            path_str(expect),
        ])
    };
    let dir = scratch("mismatch");
    let wrong_path = dir.join("wrong.safetensors");
    std::fs::write(&wrong_path, safetensors::write(&wrong).unwrap()).unwrap();
    let r = run_expecting(&wrong_path);
    r.assert_exit(1);
    let want = format!(
        "output 0 (expected `out0`): 1 of 512 elements differ (rtol 0.02, atol 0.02); first at index [{row}, {col}]"
    );
    common::assert_contains(&r.stderr, &want);

    // A shape mismatch and a count mismatch.
    let mut short = IndexMap::new();
    short.insert(
        "out0".to_string(),
        Tensor::from_f64(DType::Float32, &values[..32], &[1, 32]).unwrap(),
    );
    short.insert("out1".to_string(), Tensor::scalar(1.0f32));
    let short_path = dir.join("short.safetensors");
    std::fs::write(&short_path, safetensors::write(&short).unwrap()).unwrap();
    let r = run_expecting(&short_path);
    r.assert_exit(1);
    common::assert_contains(&r.stderr, "the program returned 1 tensors, 2 are expected");
    short.shift_remove("out1");
    std::fs::write(&short_path, safetensors::write(&short).unwrap()).unwrap();
    let r = run_expecting(&short_path);
    r.assert_exit(1);
    common::assert_contains(&r.stderr, "got f32[16, 32], expected f32[1, 32]");

    // A malformed inputs file is an error (exit 2).
    let bad = dir.join("bad.safetensors");
    std::fs::write(&bad, [1u8, 0, 0]).unwrap();
    let r = wrapir(&["run", path_str(&bundle), "--device", "cpu", "--inputs", path_str(&bad)]);
    r.assert_exit(2);
    common::assert_contains(&r.stderr, "too short for the 8-byte header length");
    let _ = std::fs::remove_dir_all(&dir);
}

// ---- two references: eager and Inductor's compiled outputs -------------------

#[test]
fn cli_compares_with_eager_and_with_inductor() {
    let dir = scratch("two-references");
    let bundle = common::copy_bundle("cat_mm", &dir);
    let b = path_str(&bundle);
    let compiled = bundle.join("compiled.safetensors");
    let _ = std::fs::remove_file(&compiled);

    // No compiled.safetensors: reported as absent, not an error.
    let r = wrapir(&["run", b, "--device", "cpu"]);
    r.assert_exit(0);
    let absent = format!("against inductor: absent (no {})", compiled.display());
    for want in [
        "against eager: 1 outputs match ",
        "(rtol 0.02, atol 0.02)",
        "  output 0 (`out0`): max abs error ",
        &absent,
    ] {
        common::assert_contains(&r.stdout, want);
    }

    // Inductor's outputs as the host computes them, and a tight tolerance.
    let program = Program::from_json(&std::fs::read_to_string(bundle.join("program.json")).unwrap()).unwrap();
    let inputs = safetensors::parse(&std::fs::read(bundle.join("inputs.safetensors")).unwrap()).unwrap();
    let out = wrapir::exec::run_program(&program, &mut wrapir::exec::host::HostBackend::default(), &inputs).unwrap();
    let Value::Tensor(out0) = &out.outputs[0] else {
        panic!("not a tensor")
    };
    let mut reference = IndexMap::new();
    reference.insert("out0".to_string(), out0.clone());
    std::fs::write(&compiled, safetensors::write(&reference).unwrap()).unwrap();
    let meta_path = bundle.join("bundle.json");
    let mut meta: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&meta_path).unwrap()).unwrap();
    meta["compiled_tolerance"] = serde_json::json!({"atol": 1e-5, "rtol": 1e-5});
    std::fs::write(&meta_path, meta.to_string()).unwrap();
    let r = wrapir(&["run", b, "--device", "cpu"]);
    r.assert_exit(0);
    assert!(
        r.stdout.contains("against eager: 1 outputs match ")
            && r.stdout.contains(&format!(
                "against inductor: 1 outputs match {} (rtol 0.00001, atol 0.00001)",
                compiled.display()
            ))
            && r.stdout
                .contains("  output 0 (`out0`): max abs error 0, max rel error 0; match"),
        "{}",
        r.stdout
    );

    // One element off by 1e-3: within eager's 2e-2, beyond Inductor's 1e-5.
    let mut values = out0.to_f64_vec().unwrap();
    values[37] += 1e-3;
    reference.insert(
        "out0".to_string(),
        Tensor::from_f64(DType::Float32, &values, out0.size()).unwrap(),
    );
    std::fs::write(&compiled, safetensors::write(&reference).unwrap()).unwrap();
    let r = wrapir(&["run", b, "--device", "cpu"]);
    r.assert_exit(1);
    assert!(
        r.stdout.contains("against eager: 1 outputs match ")
            && r.stdout.contains("against inductor: 1 of 1 outputs differ from ")
            && r.stdout
                .contains("MISMATCH: 1 of 512 elements differ (rtol 0.00001, atol 0.00001); first at index [1, 5]"),
        "{}",
        r.stdout
    );
    common::assert_contains(
        &r.stderr,
        &format!(
            "mismatch against {} (inductor): output 0 (expected `out0`): 1 of 512 elements differ",
            compiled.display()
        ),
    );
    // The largest error is the perturbation (f32 rounding aside).
    let line = r.stdout.lines().filter(|l| l.contains("max abs error")).nth(1).unwrap();
    let abs: f64 = line
        .split("max abs error ")
        .nth(1)
        .unwrap()
        .split(',')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!((abs - 1e-3).abs() < 1e-6, "{line}");
    // --atol / --rtol widen both comparisons.
    let r = wrapir(&["run", b, "--device", "cpu", "--atol", "0.01"]);
    r.assert_exit(0);

    // A malformed compiled_tolerance is an error naming it.
    meta["compiled_tolerance"] = serde_json::json!({"atol": "tight"});
    std::fs::write(&meta_path, meta.to_string()).unwrap();
    let r = wrapir(&["run", b, "--device", "cpu"]);
    r.assert_exit(2);
    common::assert_contains(&r.stderr, "`compiled_tolerance` must be an object");

    // The host fallback flag is for cuda only.
    let r = wrapir(&[
        "run",
        "fixtures/pointwise.wir",
        "--device",
        "cpu",
        "--allow-host-fallback",
    ]);
    assert_eq!(r.code, 2);
    common::assert_contains(&r.stderr, "--allow-host-fallback is for `--device cuda`");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bundle_meta_reads_tolerances_and_math() {
    use wrapir::format::bundle_json::{BundleMeta, MathModes, Tolerance};
    let meta = BundleMeta::from_json(r#"{"case": "x"}"#).unwrap();
    assert_eq!(meta.provenance.case.as_deref(), Some("x"));
    let provenance_only = BundleMeta {
        provenance: meta.provenance.clone(),
        ..BundleMeta::default()
    };
    assert_eq!(meta, provenance_only);
    let meta = BundleMeta::from_json(
        r#"{"tolerance": {"atol": 0.02, "rtol": 0.02}, "compiled_tolerance": {"atol": 1e-6, "rtol": 1e-5},
            "math": {"matmul_allow_tf32": true}}"#,
    )
    .unwrap();
    assert_eq!(meta.tolerance, Some(Tolerance { rtol: 0.02, atol: 0.02 }));
    assert_eq!(meta.compiled_tolerance, Some(Tolerance { rtol: 1e-5, atol: 1e-6 }));
    // Absent keys keep PyTorch's defaults; the math modes are read in every build.
    assert_eq!(
        meta.math,
        MathModes {
            matmul_allow_tf32: true,
            ..MathModes::default()
        }
    );
    let err = BundleMeta::from_json(r#"{"math": {"cudnn_allow_tf32": 1}}"#).unwrap_err();
    assert!(err.to_string().contains("`math`"), "{err}");
    #[cfg(feature = "cuda")]
    {
        let options = wrapir::exec::cuda::CudaOptions::for_bundle(wrapir::bundle::KernelImages::from("b"), &meta);
        assert!(options.math.matmul_allow_tf32 && !options.host_fallback);
    }
    for (text, field) in [
        (r#"{"tolerance": {"atol": 1}}"#, "`tolerance`"),
        (r#"{"compiled_tolerance": 3}"#, "`compiled_tolerance`"),
        ("[1]", "not a JSON object"),
        ("{", "not JSON"),
    ] {
        let err = BundleMeta::from_json(text).unwrap_err().to_string();
        assert!(err.starts_with("bundle.json: ") && err.contains(field), "{text}: {err}");
    }
}

#[test]
fn comparisons_report_the_largest_errors() {
    use wrapir::exec::compare::{compare_outputs, max_errors};
    use wrapir::format::bundle_json::Tolerance;
    let t = |v: &[f64]| Tensor::from_f64(DType::Float32, v, &[v.len() as i64]).unwrap();
    let got = t(&[1.0, 2.0, 0.0, f64::NAN]);
    let want = t(&[1.0, 2.5, 0.0, f64::NAN]);
    assert_eq!(max_errors(&got, &want), Some((0.5, 0.2)));
    assert_eq!(max_errors(&t(&[0.5]), &t(&[0.0])), Some((0.5, f64::INFINITY)));
    assert_eq!(max_errors(&t(&[1.0]), &t(&[1.0, 2.0])), None);
    let mut reference = IndexMap::new();
    reference.insert("out0".to_string(), want.clone());
    let c = compare_outputs(&[&got], &reference, Some(Tolerance { rtol: 0.0, atol: 0.6 }));
    assert!(c.is_ok() && c.first_error().is_none());
    assert_eq!(c.max_errors(), Some((0.5, 0.2)));
    let c = compare_outputs(&[&got], &reference, Some(Tolerance { rtol: 0.0, atol: 0.1 }));
    assert!(!c.is_ok());
    assert!(
        c.first_error()
            .unwrap()
            .starts_with("output 0 (expected `out0`): 1 of 4 elements differ"),
        "{:?}",
        c.first_error()
    );
    let c = compare_outputs(&[&got, &got], &reference, None);
    assert_eq!(c.count_mismatch, Some((2, 1)));
    assert_eq!(
        c.first_error().unwrap(),
        "the program returned 2 tensors, 1 are expected"
    );
    // graph_out<k> tensors are the references when a file has them.
    reference.insert("graph_out0".to_string(), got.clone());
    let c = compare_outputs(&[&got], &reference, Some(Tolerance { rtol: 0.0, atol: 0.0 }));
    assert!(c.is_ok() && c.outputs[0].name == "graph_out0", "{c:?}");
}

// ---- integer outputs ------------------------------------------------------------

#[test]
fn integer_outputs_are_compared_where_the_reference_stores_them() {
    use wrapir::exec::compare::{compare_leaves, OutputLeaf};
    let t = Tensor::from_f64(DType::Float32, &[1.0, 2.0], &[2]).unwrap();
    let i = |v: i64| Tensor::from_i64(DType::Int64, &[v], &[]).unwrap();
    let mut reference = IndexMap::new();
    reference.insert("out0".to_string(), t.clone());
    reference.insert("out1".to_string(), i(12));
    let marked = ["out1".to_string()];
    // (leaves, first error, outputs compared)
    let cases: &[(&[OutputLeaf<'_>], Option<&str>, usize)] = &[
        (&[OutputLeaf::Tensor(&t), OutputLeaf::Int(12)], None, 2),
        (
            &[OutputLeaf::Tensor(&t), OutputLeaf::Int(13)],
            Some("output 1 (expected `out1`): got integer 13, expected 12"),
            2,
        ),
        (
            &[OutputLeaf::Int(12), OutputLeaf::Tensor(&t)],
            Some("output 0 (expected `out0`): got an integer, expected a tensor"),
            2,
        ),
        (
            &[OutputLeaf::Tensor(&t)],
            Some("the program returned 1 outputs, 2 are expected"),
            0,
        ),
    ];
    let mut failures = Vec::new();
    for (k, (leaves, error, compared)) in cases.iter().enumerate() {
        let c = compare_leaves(leaves, &reference, Some(&marked), None);
        let got = (c.first_error(), c.outputs.len(), c.ints_not_compared);
        let want = (error.map(str::to_string), *compared, 0);
        if got != want {
            failures.push(format!("case {k}: got {got:?}, want {want:?}"));
        }
    }
    common::assert_no_failures(&failures);
    // The outputs `t` and the integer 12 compared with `reference`.
    let compare_t_and_12 = |reference: &IndexMap<String, Tensor>, marked: Option<&[String]>| {
        compare_leaves(&[OutputLeaf::Tensor(&t), OutputLeaf::Int(12)], reference, marked, None)
    };
    let c = compare_t_and_12(&reference, Some(&marked));
    assert_eq!(
        c.outputs.iter().map(|o| (o.name.as_str(), o.int)).collect::<Vec<_>>(),
        [("out0", None), ("out1", Some(12))]
    );
    // No marker (a bundle from before integer outputs were stored): the
    // integer is skipped and counted, the tensor pairs with the file's tensor.
    let mut tensors_only = IndexMap::new();
    tensors_only.insert("out0".to_string(), t.clone());
    let c = compare_t_and_12(&tensors_only, None);
    assert!(c.is_ok() && c.outputs.len() == 1 && c.ints_not_compared == 1, "{c:?}");
    // A stored integer must be a one-element integer tensor.
    let mut bad = reference.clone();
    bad.insert(
        "out1".to_string(),
        Tensor::from_f64(DType::Float32, &[12.0], &[]).unwrap(),
    );
    let c = compare_t_and_12(&bad, Some(&marked));
    assert_eq!(
        c.first_error().unwrap(),
        "output 1 (expected `out1`): an integer output is stored as a one-element integer tensor, the reference holds f32[]"
    );
    // bundle.json's marker.
    let meta = wrapir::format::bundle_json::BundleMeta::from_json(r#"{"int_outputs": ["out1"]}"#).unwrap();
    assert_eq!(meta.int_outputs, Some(vec!["out1".to_string()]));
    let err = wrapir::format::bundle_json::BundleMeta::from_json(r#"{"int_outputs": [1]}"#).unwrap_err();
    assert!(
        err.to_string().contains("`int_outputs` must be a list of tensor names"),
        "{err}"
    );
}

/// A bundle that returns a data-dependent size next to a tensor and runs on
/// the host: `nonzero`, then `u0`.
const INT_OUTPUT_PROGRAM: &str = r#"wrapir 1

symbol u0: unbacked [0, 6]

graph main(arg0_1: f32[6][1]@cpu) -> (buf2, u0) {
  buffer buf1: multi
  buffer buf2: i64[u0, 1][1, u0]@cpu
  extern buf1 = torch.ops.aten.nonzero.default(arg0_1)
  bind buf1: u0 = .size()[0]
  get buf2 = buf1
}
"#;

#[test]
fn cli_compares_integer_outputs() {
    let dir = scratch("int-outputs");
    let program = wrapir::text::parse(INT_OUTPUT_PROGRAM).unwrap();
    std::fs::write(dir.join("program.json"), program.to_json()).unwrap();
    let x = Tensor::from_f64(DType::Float32, &[0.0, 1.0, 0.0, 2.0, 3.0, 0.0], &[6]).unwrap();
    let write = |name: &str, tensors: &[(&str, Tensor)]| {
        let map: IndexMap<String, Tensor> = tensors.iter().map(|(k, t)| (k.to_string(), t.clone())).collect();
        std::fs::write(dir.join(name), safetensors::write(&map).unwrap()).unwrap();
    };
    write("inputs.safetensors", &[("arg0_1", x)]);
    let nz = Tensor::from_i64(DType::Int64, &[1, 3, 4], &[3, 1]).unwrap();
    let int = |v: i64| Tensor::from_i64(DType::Int64, &[v], &[]).unwrap();
    let b = path_str(&dir);
    // (bundle.json, u0 stored, exit code, stdout parts, stderr part)
    let cases: &[(&str, i64, i32, &[&str], &str)] = &[
        (
            r#"{"int_outputs": ["out1"]}"#,
            3,
            0,
            &[
                "output 1: int 3",
                "against eager: 2 outputs match",
                "  output 1 (`out1`): integer 3; match",
            ],
            "",
        ),
        (
            r#"{"int_outputs": ["out1"]}"#,
            4,
            1,
            &["against eager: 1 of 2 outputs differ"],
            "output 1 (expected `out1`): got integer 3, expected 4",
        ),
        // Before integer outputs were stored: the tensor is compared, the integer is reported as not compared.
        (
            "{}",
            4,
            0,
            &["against eager: 1 outputs match", "1 integer output(s) not compared"],
            "",
        ),
    ];
    let mut failures = Vec::new();
    for (meta, stored, code, stdout, stderr) in cases {
        std::fs::write(dir.join("bundle.json"), meta).unwrap();
        if meta.contains("int_outputs") {
            write("expected.safetensors", &[("out0", nz.clone()), ("out1", int(*stored))]);
        } else {
            write("expected.safetensors", &[("out0", nz.clone())]);
        }
        let r = wrapir(&["run", b, "--device", "cpu"]);
        if !r.matches(*code, stdout, stderr) {
            failures.push(r.failure(format_args!("{meta} {stored} (want exit {code})")));
        }
    }
    common::assert_no_failures(&failures);
    let _ = std::fs::remove_dir_all(&dir);
}

//! Triton call reconciliation and translation validation (`wrapir::reconcile`).

mod common;

use wrapir::ir::ProgramInfo;
use wrapir::ir::{validate, ArgValue, ConstValue, GraphName, KernelName, Program};
use wrapir::lower::cpp::Dialect;
use wrapir::reconcile::{
    check_lowerings, check_program, check_program_against, validate_emitted, BakedSource, CheckReport, CppLaunches,
    EmitError, EmittedLaunch, EmittedValue, FxLaunches, LaunchEmitter, LaunchRecord, LoweringVerdict, Mismatch,
    Options, ProofCache, PythonLaunches, ScratchKind, Verdict,
};
use wrapir::sym::{parse as expr, SymExpr};

fn program(src: &str) -> Program {
    wrapir::text::parse(src).unwrap_or_else(|e| panic!("parse: {e}\n{src}"))
}

fn report(p: &Program) -> CheckReport {
    let info = validate(p).unwrap_or_else(|e| panic!("invalid program: {e}"));
    check_program(
        &info,
        &Options {
            parallel: false,
            ..Options::default()
        },
    )
}

/// Checks the rendered report (without `--explain`) of a program in `.wir` text.
fn check(name: &str, src: &str, expect: &str) {
    let got = report(&program(src)).render(false);
    assert_eq!(got.trim_end(), expect.trim_end(), "case {name}");
}

/// The record of the only (or first) launch.
fn record(src: &str) -> LaunchRecord {
    let r = report(&program(src));
    r.entries[0]
        .record
        .clone()
        .unwrap_or_else(|| panic!("no record: {}", r.render(true)))
}

fn grid(r: &LaunchRecord) -> String {
    format!("({}, {}, {})", r.grid[0], r.grid[1], r.grid[2])
}

fn fixture(name: &str) -> String {
    std::fs::read_to_string(common::root().join("fixtures").join(name)).expect("fixture")
}

/// A one-kernel program: kernel body lines, then the call line.
fn one_kernel(symbols: &str, kernel: &str, call: &str) -> String {
    format!(
        "wrapir 1\n\n{symbols}\n\nkernel k: triton {{\n{kernel}\n}}\n\n\
         graph main(arg0_1: sym s0, arg1_1: f32[s0][1]@cuda:0) -> (buf0) {{\n  buffer buf0: f32[s0][1]@cuda:0\n  \
         define k\n  alloc buf0\n  {call}\n}}\n"
    )
}

#[test]
fn reports() {
    let pointwise = "  signature in_ptr0: *fp32, out_ptr0: *fp32, xnumel: i32, XBLOCK: constexpr\n  config XBLOCK: 128\n  grid Grid1D\n  num_warps 4";
    let cases: &[(&str, String, &str)] = &[
        (
            "bounded size: everything proven",
            one_kernel("symbol s0: backed [2, 4096] hint 8", pointwise, "call k(arg1_1, buf0, s0) @cuda:0"),
            "proven   main:2 k (3 args, grid ((s0 + 127) // 128, 1, 1))\n1 launch: 1 proven, 0 guarded, 0 failed; 0 proofs (0 from cache)",
        ),
        (
            "unbounded size: i32 guard",
            one_kernel("symbol s0: backed [2, inf] hint 8", pointwise, "call k(arg1_1, buf0, s0) @cuda:0"),
            "guarded  main:2 k: xnumel: cannot prove s0 fits i32 (range [2, inf])\n1 launch: 0 proven, 1 guarded, 0 failed; 0 proofs (0 from cache)",
        ),
        (
            "literal out of i32 range",
            one_kernel("symbol s0: backed [2, 8] hint 8", pointwise, "call k(arg1_1, buf0, 4294967296) @cuda:0"),
            "failed   main:2 k: parameter `xnumel: i32` = 4294967296 lies in [4294967296, 4294967296], outside [-2147483648, 2147483647]\n1 launch: 0 proven, 0 guarded, 1 failed; 0 proofs (0 from cache)",
        ),
        (
            "equal-to-1 size passed as literal 1",
            one_kernel(
                "symbol s0: backed [2, 8] hint 8",
                "  signature in_ptr0: *fp32, out_ptr0: *fp32, xnumel: i32, XBLOCK: constexpr\n  constants xnumel: 1\n  config XBLOCK: 1\n  grid Grid1D\n  num_warps 1",
                "call k(arg1_1, buf0, 1) @cuda:0",
            ),
            "proven   main:2 k (2 args, grid (1, 1, 1))\n1 launch: 1 proven, 0 guarded, 0 failed; 1 proof (0 from cache)",
        ),
        (
            "equal-to-1 size passed a size that can be 2",
            one_kernel(
                "symbol s0: backed [1, 8] hint 8",
                "  signature in_ptr0: *fp32, out_ptr0: *fp32, xnumel: i32, XBLOCK: constexpr\n  constants xnumel: 1\n  config XBLOCK: 1\n  grid Grid1D\n  num_warps 1",
                "call k(arg1_1, buf0, s0) @cuda:0",
            ),
            "failed   main:2 k: constant xnumel = 1 but the call passes s0 (counterexample: s0=2, where it is 2)\n1 launch: 0 proven, 0 guarded, 1 failed; 1 proof (0 from cache)",
        ),
        (
            "explicit constexpr that cannot hold",
            fixture("invalid/reconcile_constant_mismatch.wir"),
            "failed   main:4 add_kernel_0: constant BLOCK_SIZE = 16 but the call passes 32\n1 launch: 0 proven, 0 guarded, 1 failed; 1 proof (0 from cache)",
        ),
        (
            "None constant given a buffer",
            one_kernel(
                "symbol s0: backed [2, 8] hint 8",
                "  signature in_ptr0: *fp32, out_ptr0: *fp32, y: constexpr, xnumel: i32, XBLOCK: constexpr\n  constants y: None\n  config XBLOCK: 8\n  grid Grid1D\n  num_warps 1",
                "call k(arg1_1, buf0, xnumel=s0, y=buf0) @cuda:0",
            ),
            "failed   main:2 k: constant y = None but the call passes buffer `buf0`\n1 launch: 0 proven, 0 guarded, 1 failed; 0 proofs (0 from cache)",
        ),
        (
            "None constant given Inductor's -1 placeholder",
            one_kernel(
                "symbol s0: backed [2, 8] hint 8",
                "  signature in_ptr0: *fp32, out_ptr0: *fp32, y: constexpr, xnumel: i32, XBLOCK: constexpr\n  constants y: None\n  config XBLOCK: 8\n  grid Grid1D\n  num_warps 1",
                "call k(arg1_1, buf0, xnumel=s0, y=-1) @cuda:0",
            ),
            "proven   main:2 k (3 args, grid ((s0 + 7) // 8, 1, 1))\n1 launch: 1 proven, 0 guarded, 0 failed; 0 proofs (0 from cache)",
        ),
    ];
    for (name, src, expect) in cases {
        check(name, src, expect);
    }
}

/// `PrecomputedGrid` candidates are matched as Inductor's launcher matches
/// them: against the config kwargs *and* `num_warps` / `num_stages`
/// (`config_to_dict`), first match wins; a key the kernel's metadata does not
/// record refuses the choice instead of guessing.
#[test]
fn precomputed_grid_candidates_match_num_warps_and_num_stages() {
    let kernel = |candidates: &str| {
        one_kernel(
            "symbol s0: backed [2, 4096] hint 8",
            &format!(
                "  signature in_ptr0: *fp32, out_ptr0: *fp32, n: i32, BX: constexpr\n  config BX: 16\n  grid PrecomputedGrid\n{candidates}  num_warps 4\n  num_stages 3\n  extra_launcher_args _launcher_s0\n  user_defined"
            ),
            "call k(arg1_1, buf0, s0, s0) @cuda:0",
        )
    };
    let cases = [
        (
            "the user kernel's candidates carry num_warps and num_stages",
            "    candidate BX: 16, num_warps: 4, num_stages: 3 => ((15 + _launcher_s0) // 16, 1, 1)\n    candidate BX: 32, num_warps: 4, num_stages: 3 => ((31 + _launcher_s0) // 32, 1, 1)\n",
            "proven   main:2 k (3 args, grid ((15 + s0) // 16, 1, 1))",
        ),
        (
            "same kwargs, other num_warps: the second candidate",
            "    candidate BX: 16, num_warps: 8, num_stages: 3 => ((15 + _launcher_s0) // 16, 2, 1)\n    candidate BX: 16, num_warps: 4, num_stages: 3 => ((15 + _launcher_s0) // 16, 1, 1)\n",
            "proven   main:2 k (3 args, grid ((15 + s0) // 16, 1, 1))",
        ),
        (
            "no candidate matches",
            "    candidate BX: 16, num_warps: 4, num_stages: 2 => ((15 + _launcher_s0) // 16, 1, 1)\n",
            "failed   main:2 k: no PrecomputedGrid candidate matches the chosen config (BX: 16, num_warps: 4, num_stages: 3)",
        ),
        (
            "an unrecorded setting",
            "    candidate BX: 16, num_consumer_groups: 0 => ((15 + _launcher_s0) // 16, 1, 1)\n",
            "failed   main:2 k: PrecomputedGrid candidate 0 matches on `num_consumer_groups`, which the kernel's metadata does not record: the candidate the launcher takes cannot be decided",
        ),
    ];
    for (name, candidates, expect) in cases {
        let got = report(&program(&kernel(candidates))).render(false);
        assert_eq!(got.lines().next(), Some(expect), "case {name}:\n{got}");
    }
}

/// Upstream zips signature names with positional args; with an explicit
/// constexpr and FixedGrid launcher args, `_grid_0` read `BLOCK_SIZE`. By name,
/// the grid is the launcher args and the constexpr is baked in.
#[test]
fn user_kernel_with_explicit_constexpr_and_fixed_grid() {
    let r = record(&fixture("user_triton_constexpr.wir"));
    assert_eq!(grid(&r), "((s0 + 15) // 16, 1, 1)");
    let args: Vec<String> = r.args.iter().map(|a| a.param.clone()).collect();
    assert_eq!(args, ["in_ptr0", "in_ptr1", "out_ptr", "n_elements"]);
    assert_eq!(r.args[2].value, ArgValue::Buffer("buf0".into()));
    assert_eq!(r.baked.len(), 1);
    assert_eq!(
        (r.baked[0].param.as_str(), &r.baked[0].value),
        ("BLOCK_SIZE", &ConstValue::Int(16))
    );
    assert_eq!(r.baked[0].passed, Some(ArgValue::Expr(SymExpr::Int(16))));
    let launcher: Vec<String> = r.launcher_args.iter().map(|(n, e)| format!("{n}={e}")).collect();
    assert_eq!(launcher, ["_grid_0=(s0 + 15) // 16", "_grid_1=1", "_grid_2=1"]);
    // s0 in [2, inf] may not fit the i32 `n_elements`: one guard.
    let guards: Vec<String> = r.guards.iter().map(|g| format!("{} | {}", g.cond, g.message)).collect();
    assert_eq!(
        guards,
        ["s0 <= 2147483647 | n_elements: cannot prove s0 fits i32 (range [2, inf])"]
    );
}

#[test]
fn specialization_none_args_and_scratch() {
    let p = program(&fixture("reconcile_specialized.wir"));
    let r = report(&p);
    assert!(r.is_ok(), "{}", r.render(true));
    let first = r.entries[0].record.as_ref().expect("record");
    // ynumel is baked in (equal to 1), so it is not a runtime argument.
    let args: Vec<&str> = first.args.iter().map(|a| a.param.as_str()).collect();
    assert_eq!(args, ["in_ptr0", "out_ptr0", "xnumel"]);
    let baked: Vec<String> = first
        .baked
        .iter()
        .map(|b| format!("{}={}:{:?}", b.param, b.value, b.source))
        .collect();
    assert_eq!(baked, ["ynumel=1:Constants", "YBLOCK=1:Config", "XBLOCK=128:Config"]);
    assert_eq!(grid(first), "((s0 + 127) // 128, 1, 1)");
    let scratch: Vec<String> = first
        .scratch
        .iter()
        .map(|s| {
            format!(
                "{} {} {}",
                s.kind.as_str(),
                s.bytes_per_cta,
                s.total_bytes.as_ref().map_or("null".into(), |t| t.to_string())
            )
        })
        .collect();
    assert_eq!(scratch, ["global 0 null", "profile 64 64*((s0 + 127) // 128)"]);
    assert_eq!(first.scratch[1].kind, ScratchKind::Profile);

    let second = r.entries[1].record.as_ref().expect("record");
    let args: Vec<&str> = second.args.iter().map(|a| a.param.as_str()).collect();
    assert_eq!(args, ["in_ptr0", "out_ptr", "n_elements"]);
    assert_eq!(second.args[1].value, ArgValue::Buffer("buf1".into()));
    let baked: Vec<String> = second
        .baked
        .iter()
        .map(|b| format!("{}={}", b.param, b.value))
        .collect();
    assert_eq!(baked, ["mask_ptr=None", "BLOCK_SIZE=64"]);
    assert_eq!(second.baked[0].source, BakedSource::Constants);
    assert_eq!(grid(second), "((s0 + 63) // 64, 1, 1)");
    assert!(second.scratch.is_empty());
}

#[test]
fn every_grid_type() {
    let r = report(&program(&fixture("grid_types.wir")));
    assert!(r.is_ok(), "{}", r.render(true));
    let grids: Vec<(String, String)> = r
        .entries
        .iter()
        .map(|e| (e.kernel.to_string(), grid(e.record.as_ref().expect("record"))))
        .collect();
    let expect = [
        ("triton_poi_fused_transpose_0", "((s0 + 31) // 32, 8, 1)"),
        ("triton_poi_fused_permute_1", "((s0 + 63) // 64, 256, 1)"),
        ("triton_poi_fused_3d_2", "(16, (s0 + 15) // 16, 1)"),
        ("triton_red_fused_sum_3", "(32, s0, 1)"),
        ("triton_red_fused_cumsum_4", "(1, s0, 1)"),
        ("triton_tem_fused_mm_5", "((s0 + 63) // 64, 1, 1)"),
    ];
    let got: Vec<(&str, &str)> = grids.iter().map(|(k, g)| (k.as_str(), g.as_str())).collect();
    assert_eq!(got, expect);
    // Grid2DWithYZOverflow with a symbolic y splits y into (y, z).
    let src = one_kernel(
        "symbol s0: backed [2, 8] hint 8",
        "  signature in_ptr0: *fp32, out_ptr0: *fp32, ynumel: i64, xnumel: i32, YBLOCK: constexpr, XBLOCK: constexpr\n  config YBLOCK: 1, XBLOCK: 64\n  grid Grid2DWithYZOverflow max_y_grid 65535\n  num_warps 2",
        "call k(arg1_1, buf0, (4096*s0), 2) @cuda:0",
    );
    let r = record(&src);
    assert_eq!(
        grid(&r),
        "(1, (4096*s0 + ((4096*s0 + 65534) // 65535) + (-1)) // ((4096*s0 + 65534) // 65535), (4096*s0 + 65534) // 65535)"
    );
}

#[test]
fn binding_errors() {
    let kernel = "  signature in_ptr0: *fp32, out_ptr0: *fp32, xnumel: i32, XBLOCK: constexpr\n  config XBLOCK: 8\n  grid Grid1D\n  num_warps 1";
    let cases = [
        (
            "call k(arg1_1, out_ptr0=buf0, xnumel=s0, XBLOCK=16) @cuda:0",
            "config value XBLOCK = 8 but the call passes 16",
        ),
        ("call k(arg1_1, buf0, XBLOCK=8, xnumel=s0) @cuda:0", ""),
    ];
    for (call, expect) in cases {
        let r = report(&program(&one_kernel("symbol s0: backed [2, 8] hint 8", kernel, call)));
        let got = match &r.entries[0].verdict {
            Verdict::Failed(f) => f.to_string(),
            _ => String::new(),
        };
        assert_eq!(got, expect, "{call}");
    }
}

#[test]
fn fx_launches_validate() {
    for name in [
        "pointwise.wir",
        "while_loop.wir",
        "cond_dynamic_branches.wir",
        "user_triton_constexpr.wir",
    ] {
        let p = program(&fixture(name));
        let info = validate(&p).expect("valid");
        let r = check_program_against(&info, &Options::default(), &FxLaunches::default());
        assert!(r.is_ok(), "{name}:\n{}", r.render(true));
        assert_eq!(r.lowering.as_deref(), Some("fx"));
        for e in &r.entries {
            assert!(
                !e.validations.is_empty(),
                "{name}: launch at {}:{} not validated",
                e.graph,
                e.line
            );
            assert!(
                e.validations.iter().all(|v| v.grid_proven == Some(true)),
                "{name}:\n{}",
                r.render(true)
            );
        }
    }
}

#[test]
fn emitted_mismatches() {
    let p = program(&fixture("user_triton_constexpr.wir"));
    let info = validate(&p).expect("valid");
    let r = check_program(&info, &Options::default());
    let rec = r.entries[0].record.clone().expect("record");
    let cache = ProofCache::new(wrapir::reconcile::program_facts(&p), Default::default());
    let base = EmittedLaunch {
        kernel: KernelName::new("add_kernel_0"),
        graph: GraphName::new("main"),
        line: 4,
        args: vec![
            ("in_ptr0".into(), EmittedValue::Buffer("arg1_1".into())),
            ("in_ptr1".into(), EmittedValue::Buffer("arg2_1".into())),
            ("out_ptr".into(), EmittedValue::Buffer("buf0".into())),
            ("n_elements".into(), EmittedValue::Expr(expr("s0").expect("expr"))),
            ("BLOCK_SIZE".into(), EmittedValue::Expr(SymExpr::Int(16))),
        ],
        grid: Some([
            expr("(s0 + (16 - 1)) // 16").expect("expr"),
            SymExpr::Int(1),
            SymExpr::Int(1),
        ]),
        scratch: None,
        ranges: Vec::new(),
    };
    let ok = validate_emitted(&info, &rec, &base, &cache).expect("the Python-style grid is the same grid");
    assert_eq!(ok.grid_proven, Some(true));
    assert_eq!(ok.values_proven, 5);

    let mut upstream = base.clone();
    // What upstream's misaligned zip launches: grid x = BLOCK_SIZE.
    upstream.grid = Some([SymExpr::Int(16), SymExpr::Int(1), SymExpr::Int(1)]);
    let err = validate_emitted(&info, &rec, &upstream, &cache).expect_err("grid differs");
    assert!(
        matches!(&err, Mismatch::Value { param, counterexample: Some(_), .. } if param == "grid[0]"),
        "{err}"
    );

    let mut swapped = base.clone();
    swapped.args[0].1 = EmittedValue::Buffer("arg2_1".into());
    let err = validate_emitted(&info, &rec, &swapped, &cache).expect_err("swapped buffers");
    assert_eq!(
        err.to_string(),
        "passes in_ptr0 = buffer `arg2_1` but the launch needs buffer `arg1_1`"
    );

    let mut missing = base.clone();
    missing.args.remove(3);
    let err = validate_emitted(&info, &rec, &missing, &cache).expect_err("missing arg");
    assert_eq!(err.to_string(), "omits runtime argument `n_elements`");
}

#[test]
fn explain_shows_proofs_and_counterexamples() {
    let bad = report(&program(&fixture("invalid/reconcile_constant_mismatch.wir"))).render(true);
    assert!(
        bad.contains("failed   main:4 add_kernel_0: constant BLOCK_SIZE = 16 but the call passes 32"),
        "{bad}"
    );
    let good = report(&program(&fixture("reconcile_specialized.wir"))).render(true);
    assert!(good.contains("    proven ynumel: 1 == 1\n"), "{good}");
    assert!(good.contains("    baked: mask_ptr = None, BLOCK_SIZE = 64\n"), "{good}");
    assert!(
        good.contains("    profile scratch: 64 bytes per CTA, 64*((s0 + 127) // 128) bytes\n"),
        "{good}"
    );
}

#[test]
fn reconcile_fixtures_are_canonical() {
    for path in common::fixtures().into_iter().chain(common::invalid_fixtures()) {
        if !common::name(&path).starts_with("reconcile_") {
            continue;
        }
        let text = std::fs::read_to_string(&path).expect("read");
        assert_eq!(wrapir::text::print(&common::load(&path)), text, "{}", path.display());
    }
}

#[test]
fn every_fixture_reconciles() {
    let mut failures = Vec::new();
    for path in common::fixtures() {
        let p = common::load(&path);
        let info = validate(&p).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let parallel = check_program(&info, &Options::default());
        let serial = check_program(
            &info,
            &Options {
                parallel: false,
                ..Options::default()
            },
        );
        assert_eq!(
            parallel.render(false).lines().count(),
            serial.render(false).lines().count()
        );
        if !parallel.is_ok() {
            failures.push(format!("{}:\n{}", common::name(&path), parallel.render(true)));
        }
    }
    common::assert_no_failures(&failures);
    // The invalid reconcile fixtures validate but fail reconciliation.
    for path in common::invalid_fixtures() {
        if common::name(&path).starts_with("reconcile_") {
            let p = common::load(&path);
            assert_eq!(report(&p).totals.failed, 1, "{}", path.display());
        }
    }
}

/// The four lowerings whose emitted launches `wrapir check` validates.
fn all_lowerings() -> Vec<Box<dyn LaunchEmitter>> {
    wrapir::lower::Target::ALL
        .into_iter()
        .map(wrapir::reconcile::emitter)
        .collect()
}

#[test]
fn every_fixture_launch_is_proven_or_guarded_for_every_lowering() {
    let emitters = all_lowerings();
    let refs: Vec<&dyn LaunchEmitter> = emitters.iter().map(|e| e.as_ref()).collect();
    let mut failures = Vec::new();
    let mut launches = 0;
    for path in common::fixtures() {
        let p = common::load(&path);
        let info = validate(&p).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let r = check_lowerings(&info, &Options::default(), &refs);
        let names: Vec<_> = r
            .lowerings
            .iter()
            .map(|l| l.lowering.clone().unwrap_or_default())
            .collect();
        assert_eq!(names, ["python", "cpp", "cpp-standalone", "fx"]);
        for (i, entry) in r.base.entries.iter().enumerate() {
            launches += 1;
            for (l, name) in names.iter().enumerate() {
                match r.verdict(l, i) {
                    LoweringVerdict::Proven | LoweringVerdict::Guarded(_) => {}
                    other => failures.push(format!(
                        "{} {}:{} {name}: {other:?}\n{}",
                        common::name(&path),
                        entry.graph,
                        entry.line,
                        r.render(true)
                    )),
                }
            }
        }
        assert_eq!(r.is_ok(), failures.is_empty(), "{}", r.render(true));
    }
    common::assert_no_failures(&failures);
    assert!(launches > 10, "the fixtures have only {launches} Triton launches");
}

#[test]
fn recording_launches_leaves_the_text_unchanged() {
    for path in common::fixtures() {
        let p = common::load(&path);
        let info = validate(&p).expect("valid");
        let triton_calls = check_program(&info, &Options::default()).entries.len();
        let python = wrapir::lower::python::Options::default();
        if let Ok(text) = wrapir::lower::python::write_string(&info, &python) {
            let (recorded, launches) =
                wrapir::lower::python::write_string_with_launches(&info, &python).expect("lowers");
            assert_eq!(text, recorded, "{}", path.display());
            assert_eq!(launches.len(), triton_calls, "{}", path.display());
        }
        for dialect in [Dialect::Aoti, Dialect::Standalone] {
            let options = wrapir::lower::cpp::Options::for_dialect(dialect);
            if let Ok(text) = wrapir::lower::cpp::write_string(&info, &options) {
                let (recorded, launches) =
                    wrapir::lower::cpp::write_string_with_launches(&info, &options).expect("lowers");
                assert_eq!(text, recorded, "{} {dialect:?}", path.display());
                assert!(launches.len() >= triton_calls, "{} {dialect:?}", path.display());
            }
        }
    }
}

/// An emitter that reports another's launches, changed by `corrupt`.
struct Corrupted<'e> {
    inner: &'e dyn LaunchEmitter,
    corrupt: fn(&mut EmittedLaunch),
}

impl LaunchEmitter for Corrupted<'_> {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn emitted_launches(&self, info: &ProgramInfo<'_>) -> Result<Vec<EmittedLaunch>, EmitError> {
        let mut launches = self.inner.emitted_launches(info)?;
        if let Some(first) = launches.first_mut() {
            (self.corrupt)(first);
        }
        Ok(launches)
    }
}

fn swap_first_two_args(l: &mut EmittedLaunch) {
    let (a, b) = (l.args[0].1.clone(), l.args[1].1.clone());
    l.args[0].1 = b;
    l.args[1].1 = a;
}

fn bump_grid_x(l: &mut EmittedLaunch) {
    if let Some(g) = l.grid.as_mut() {
        g[0] = SymExpr::add(g[0].clone(), SymExpr::Int(1));
    }
}

#[test]
fn corrupted_emitted_launches_are_mismatches_of_their_lowering() {
    let p = program(&fixture("pointwise.wir"));
    let info = validate(&p).expect("valid");
    let emitters = all_lowerings();
    type Case = (fn(&mut EmittedLaunch), &'static str);
    let cases: [Case; 2] = [
        (
            swap_first_two_args,
            "passes in_ptr0 = buffer `arg1_1` but the launch needs buffer `arg0_1`",
        ),
        (bump_grid_x, "passes grid[0] = "),
    ];
    for (corrupt, expect) in cases {
        for (i, inner) in emitters.iter().enumerate() {
            let bad = Corrupted {
                inner: inner.as_ref(),
                corrupt,
            };
            // The corrupted lowering among the honest ones: only it fails.
            let refs: Vec<&dyn LaunchEmitter> = emitters
                .iter()
                .enumerate()
                .map(|(j, e)| if i == j { &bad as &dyn LaunchEmitter } else { e.as_ref() })
                .collect();
            let r = check_lowerings(&info, &Options::default(), &refs);
            assert!(!r.is_ok(), "{}: {expect}", inner.name());
            for j in 0..refs.len() {
                match (r.verdict(j, 0), i == j) {
                    (LoweringVerdict::Failed(m), true) => assert!(m.starts_with(expect), "{}: {m}", inner.name()),
                    (LoweringVerdict::Proven, false) => {}
                    (other, _) => panic!("{} (corrupted {}): {other:?}", refs[j].name(), inner.name()),
                }
            }
            let text = r.render(false);
            assert!(
                text.contains(&format!("    {:<15} failed: {expect}", inner.name())),
                "{text}"
            );
            assert!(
                text.ends_with("1 launch: 0 proven, 0 guarded, 1 failed (python, cpp, cpp-standalone, fx)\n"),
                "{text}"
            );
        }
    }
}

#[test]
fn cpp_grid_narrowing_is_checked() {
    // grid_0 = xnumel (XBLOCK 1): Python passes a 2^40 grid to its launcher,
    // C++ would truncate it to `uint32_t`.
    let kernel = "  signature in_ptr0: *fp32, out_ptr0: *fp32, xnumel: i64, XBLOCK: constexpr\n  config XBLOCK: 1\n  grid Grid1D\n  num_warps 1";
    let cases = [
        ("call k(arg1_1, buf0, 1099511627776) @cuda:0", "symbol s0: backed [2, 8] hint 8", [
            "proven",
            "failed: uint32_t grid_0 = 1099511627776 lies in [1099511627776, 1099511627776], outside [0, 4294967295]",
        ]),
        ("call k(arg1_1, buf0, s0) @cuda:0", "symbol s0: backed [2, inf] hint 8", [
            "proven",
            "guarded: uint32_t grid_0: cannot prove s0 in [0, 4294967295] (range [2, inf])",
        ]),
        ("call k(arg1_1, buf0, s0) @cuda:0", "symbol s0: backed [2, 4096] hint 8", ["proven", "proven"]),
    ];
    for (call, symbols, [python, cpp]) in cases {
        let p = program(&one_kernel(symbols, kernel, call));
        let info = validate(&p).expect("valid");
        let emitters: [&dyn LaunchEmitter; 2] = [
            &PythonLaunches::default(),
            &CppLaunches {
                dialect: Dialect::Standalone,
            },
        ];
        let text = check_lowerings(&info, &Options::default(), &emitters).render(false);
        assert!(
            text.contains(&format!("    python          {python}")),
            "{call}:\n{text}"
        );
        assert!(text.contains(&format!("    cpp-standalone  {cpp}")), "{call}:\n{text}");
    }
}

/// What reconciliation cannot prove becomes a `RuntimeAssert` in front of the
/// launch: the guarded program validates, lowers with the check in it, and a
/// run whose values break the guard fails with the guard's message.
#[test]
fn guards_become_runtime_asserts() {
    let program = common::load(&common::root().join("fixtures/user_triton_constexpr.wir"));
    let info = validate(&program).expect("valid fixture");
    let report = wrapir::reconcile::check_program(&info, &Default::default());
    assert_eq!(report.totals.guarded, 1, "{}", report.render(false));
    let guarded = wrapir::reconcile::insert_guards(&program, &report);
    let asserts: Vec<String> = guarded
        .main
        .lines
        .iter()
        .filter(|l| matches!(l, wrapir::ir::Line::RuntimeAssert { .. }))
        .map(wrapir::text::print_line)
        .collect();
    assert_eq!(
        asserts,
        ["assert (s0 <= 2147483647) 'add_kernel_0: n_elements: cannot prove s0 fits i32 (range [2, inf])'"]
    );
    let info = validate(&guarded).expect("the guarded program stays valid");
    let python = wrapir::lower::python::write_string(&info, &Default::default()).expect("lowers");
    assert!(python.contains("if not (s0 <= 2147483647):"), "{python}");

    let mut hints = wrapir::sym::Bindings::new();
    hints.insert("s0".into(), 1000);
    wrapir::exec::meta::run_program(&guarded, &hints).expect("a value that fits i32 runs");
    hints.insert("s0".into(), 1 << 33);
    let err = wrapir::exec::meta::run_program(&guarded, &hints).expect_err("a value that does not fit i32 fails");
    assert!(err.to_string().contains("add_kernel_0: n_elements"), "{err}");
    // Exactly the one guard line was added.
    assert_eq!(guarded.main.lines.len(), program.main.lines.len() + 1);
}

/// `reconcile::guarded` is the CLI's guard policy: validate, reconcile, insert guards.
#[test]
fn guarded_validates_reconciles_and_inserts_guards() {
    let options = Options::default();
    for path in common::fixtures() {
        let p = common::load(&path);
        let info = wrapir::ir::validate(&p).unwrap_or_else(|e| panic!("{e}"));
        let report = check_program(&info, &options);
        let guarded = wrapir::reconcile::guarded(p.clone(), &Default::default(), &options);
        let want = wrapir::reconcile::insert_guards(&p, &report);
        match guarded {
            Ok(g) => assert_eq!(g, want, "{}", path.display()),
            Err(e) => panic!("{}: {e}", path.display()),
        }
    }
    let mut bad = common::load(&common::fixtures()[0]);
    bad.main.lines.push(wrapir::ir::Line::Free {
        buffer: wrapir::ir::BufName::new("no_such_buffer"),
    });
    let err = wrapir::reconcile::guarded(bad, &Default::default(), &options).unwrap_err();
    assert!(
        matches!(err, wrapir::reconcile::GuardError::Invalid(_)) && err.to_string().contains("no_such_buffer"),
        "{err}"
    );
}

/// The one argument-binding walk reports every problem and keeps going (the
/// validator's use); `TritonMeta::bind_args` stops at the first.
#[test]
fn one_binding_walk_reports_every_problem() {
    use wrapir::ir::{bind_call_args, ArgBindError, ArgValue, CallArg};
    let arg = |name: Option<&str>, v: i64| CallArg {
        name: name.map(str::to_string),
        value: ArgValue::Expr(wrapir::sym::SymExpr::Int(v)),
    };
    let args = [
        arg(None, 1),
        arg(Some("b"), 2),
        arg(Some("zz"), 3),
        arg(Some("b"), 4),
        arg(None, 5),
    ];
    let mut issues = Vec::new();
    let bound = bind_call_args(&["a", "b"], &|n| n == "a" || n == "b", &args, &mut |e| issues.push(e));
    assert_eq!(
        bound,
        [
            ("a", &ArgValue::Expr(wrapir::sym::SymExpr::Int(1))),
            ("b", &ArgValue::Expr(wrapir::sym::SymExpr::Int(4)))
        ]
    );
    assert_eq!(
        issues,
        [
            ArgBindError::UnknownParameter { param: "zz".into() },
            ArgBindError::BoundTwice { param: "b".into() },
            ArgBindError::PositionalAfterNamed { position: 4 },
        ]
    );
}

/// The proof cache proves claims up to the names of their symbols: a claim
/// over other symbols with the same ranges and definitions is a hit, its
/// proof and counterexample in its own names; other ranges or definitions
/// are another claim, proven on their own facts.
#[test]
fn proofs_are_shared_by_claims_that_differ_only_in_names() {
    use wrapir::sym::{Facts, Outcome};
    let facts = Facts::parse(&[
        "u0 >= 1",
        "u0 <= 100",
        "u1 >= 1",
        "u1 <= 100",
        "u2 >= 0",
        "u2 <= 100",
        "s0 >= 2",
        "s1 >= 2",
        "s2 >= 2",
        "ks0 == s0*s1",
        "ks1 == s2*s1",
    ])
    .expect("facts");
    let cache = ProofCache::new(facts, Default::default());
    let prove = |a: &str, b: &str| cache.prove(&expr(a).expect("a"), &expr(b).expect("b"));
    // Max(x, 1) == x holds for x >= 1 only.
    let first = prove("Max(u0, 1)", "u0");
    assert!(first.is_proven(), "{first:?}");
    assert_eq!((cache.misses(), cache.hits()), (1, 0));
    let Outcome::Proven(renamed) = prove("Max(u1, 1)", "u1") else {
        panic!("u1 in [1, 100]: proven")
    };
    assert_eq!((cache.misses(), cache.hits()), (1, 1));
    assert!(renamed.flat_string().contains("u1"), "{}", renamed.flat_string());
    assert!(!renamed.flat_string().contains("u0"), "{}", renamed.flat_string());
    // u2 may be 0: another shape, disproved, the counterexample naming u2.
    let Outcome::Disproved(c) = prove("Max(u2, 1)", "u2") else {
        panic!("u2 = 0 differs")
    };
    assert_eq!(c.to_string(), "u2=0");
    assert_eq!(cache.misses(), 2);
    // Definitions travel with their symbols.
    assert!(prove("ks0", "s0*s1").is_proven());
    assert!(prove("ks1", "s2*s1").is_proven());
    assert_eq!(cache.hits(), 2);
    let Outcome::Disproved(c) = prove("ks1", "s0*s1") else {
        panic!("ks1 = s2*s1 is not s0*s1")
    };
    assert!(c.to_string().contains("s2="), "{c}");
    assert!(!c.to_string().contains('_'), "{c}");
}

//! FX lowering: exact printed graphs of small programs, each written as
//! `.wir` text with the FX graph it must print (`cases/fx.txt`).

mod common;

/// Parses `input` (a program's text without its `wrapir 1` header) and
/// lowers it; returns a message when the printed graph differs from `expect`.
fn check(name: &str, input: &str, expect: &str) -> Option<String> {
    let program = wrapir::text::parse(&format!("wrapir 1\n{input}")).unwrap_or_else(|e| panic!("{name}: {e}"));
    let info = wrapir::ir::validate(&program).unwrap_or_else(|e| panic!("{name}: invalid program: {e}"));
    let got = wrapir::lower::fx::write_string(&info, &Default::default()).unwrap_or_else(|e| panic!("{name}: {e}"));
    (got.trim() != expect.trim()).then(|| format!("=== {name}: printed FX graph differs, got:\n{got}"))
}

#[test]
fn printed_graphs() {
    let failures: Vec<String> = common::text_cases(include_str!("cases/fx.txt"))
        .into_iter()
        .filter_map(|case| check(&case.name, &case.input, &case.expect.join("\n")))
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

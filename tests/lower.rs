//! Snapshot every fixture through every back end (one snapshot per target),
//! reviewed with `cargo insta review`. Every fixture must validate; a back end
//! that cannot express a fixture snapshots its error message instead. And
//! small valid programs through every back end (`cases/lower.txt`): each
//! lowers, or its refusal is the documented limitation the case names.

mod common;

use wrapir::ir::validate;
use wrapir::lower::Target;

/// Lowers every fixture with `target` and snapshots the text as `<target>@<fixture>`.
fn check_target(target: Target) {
    let fixtures = common::fixtures();
    assert!(
        fixtures.len() >= 20,
        "expected at least 20 fixtures, found {}",
        fixtures.len()
    );
    for path in fixtures {
        let name = common::name(&path);
        let program = common::load(&path);
        let info = validate(&program).unwrap_or_else(|e| panic!("{name} is invalid:\n{e}"));
        // A back end that cannot express a fixture says why; that message is part
        // of the snapshot, so a fixture that stops (or starts) lowering shows up in review.
        let text = target.write_string(&info).unwrap_or_else(|e| format!("error: {e}\n"));
        common::settings().bind(|| insta::assert_snapshot!(format!("{}@{name}", target.name()), text));
    }
}

/// One snapshot test per back end: `name => Target`.
macro_rules! snapshot_tests {
    ($($name:ident => $target:ident),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                check_target(Target::$target);
            }
        )*
    };
}

snapshot_tests! {
    python => Python,
    cpp_aoti => Cpp,
    cpp_standalone => CppStandalone,
    fx => Fx,
}

#[test]
fn snapshot_helper_renders_every_back_end() {
    let path = common::fixtures()
        .into_iter()
        .find(|p| common::name(p) == "pointwise")
        .expect("the pointwise fixture exists");
    let program = common::load(&path);
    let info = validate(&program).unwrap_or_else(|e| panic!("pointwise is invalid:\n{e}"));
    assert_eq!(wrapir::snapshot::Target::ALL.len(), 4);
    for target in Target::ALL {
        let text = wrapir::snapshot::render(&program, target).unwrap_or_else(|e| panic!("{target}: {e}"));
        let plain = target.write_string(&info).unwrap_or_else(|e| panic!("{target}: {e}"));
        assert_eq!(text, wrapir::snapshot::redact(&plain), "{target}");
        assert!(text.contains("buf0"), "{target}: {text}");
    }
}

/// Lowers case `name` (a program's text without its `wrapir 1` header) with
/// every back end; returns a message per back end whose result differs from
/// `expect`: one line or more per target, `<target>: <text>` (it lowers, and
/// its output holds `<text>`) or `<target> error: <message>` (it refuses with
/// exactly that message). Every target must be named.
fn check(name: &str, input: &str, expect: &[String]) -> Vec<String> {
    let program = wrapir::text::parse(&format!("wrapir 1\n{input}")).unwrap_or_else(|e| panic!("{name}: {e}"));
    let info = validate(&program).unwrap_or_else(|e| panic!("{name}: invalid program: {e}"));
    let mut failures = Vec::new();
    for target in Target::ALL {
        let wanted: Vec<(bool, &str)> = expect
            .iter()
            .filter_map(|line| {
                let (head, text) = line.split_once(": ")?;
                match head.strip_suffix(" error") {
                    Some(t) => (t == target.name()).then_some((true, text)),
                    None => (head == target.name()).then_some((false, text)),
                }
            })
            .collect();
        if wanted.is_empty() {
            failures.push(format!("=== {name}: no expectation for {target}"));
            continue;
        }
        let got = target.write_string(&info);
        for (error, text) in wanted {
            let ok = match (&got, error) {
                (Ok(out), false) => out.contains(text),
                (Err(e), true) => e.to_string() == text,
                _ => false,
            };
            if !ok {
                let got = match &got {
                    Ok(out) => out.clone(),
                    Err(e) => format!("error: {e}"),
                };
                let want = if error { "error" } else { "text" };
                failures.push(format!("=== {name}, {target}: expected {want} `{text}`, got:\n{got}"));
            }
        }
    }
    failures
}

#[test]
fn valid_programs_lower_with_every_back_end() {
    let failures: Vec<String> = common::text_cases(include_str!("cases/lower.txt"))
        .into_iter()
        .flat_map(|case| check(&case.name, &case.input, &case.expect))
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

//! Snapshot every fixture through every back end (one snapshot per target),
//! reviewed with `cargo insta review`. Every fixture must validate; a back end
//! that cannot express a fixture snapshots its error message instead.

mod common;

use wrapir::ir::validate;

/// Lowers every fixture with `lower` and snapshots the text as `<target>@<fixture>`.
fn check_target(target: &str, lower: impl Fn(&wrapir::ir::ProgramInfo<'_>) -> Result<String, String>) {
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
        let text = lower(&info).unwrap_or_else(|e| format!("error: {e}\n"));
        common::settings().bind(|| insta::assert_snapshot!(format!("{target}@{name}"), text));
    }
}

#[test]
fn python() {
    check_target("python", |info| {
        wrapir::lower::python::write_string(info, &Default::default()).map_err(|e| e.to_string())
    });
}

fn cpp(dialect: wrapir::lower::cpp::Dialect) -> impl Fn(&wrapir::ir::ProgramInfo<'_>) -> Result<String, String> {
    move |info| {
        let options = wrapir::lower::cpp::Options {
            dialect,
            ..Default::default()
        };
        wrapir::lower::cpp::write_string(info, &options).map_err(|e| e.to_string())
    }
}

#[test]
fn cpp_aoti() {
    check_target("cpp", cpp(wrapir::lower::cpp::Dialect::Aoti));
}

#[test]
fn cpp_standalone() {
    check_target("cpp-standalone", cpp(wrapir::lower::cpp::Dialect::Standalone));
}

#[test]
fn fx() {
    check_target("fx", |info| {
        wrapir::lower::fx::write_string(info, &Default::default()).map_err(|e| e.to_string())
    });
}

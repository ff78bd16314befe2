//! Snapshot every fixture through every back end (one snapshot per target),
//! reviewed with `cargo insta review`. Every fixture must validate; a back end
//! that cannot express a fixture snapshots its error message instead.

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

//! The FX printout runs: every fixture's printed module is executed by
//! python3 with stub callables (every call returns a stub), `forward` of the
//! top graph and of every subgraph class called with stub arguments. A node
//! named like the callable it calls (`device = device(...)`)
//! would make that name a local of `forward` and raise `UnboundLocalError`.

mod common;

use std::process::Command;
use wrapir::ir::validate;

/// Executes each `(name, code)` module; returns the harness's report lines.
const HARNESS: &str = r#"
import inspect, os, sys

class Stub:
    def __init__(self, *a, **k): pass
    def __getattr__(self, name): return Stub()
    def __call__(self, *a, **k): return Stub()
    def __getitem__(self, k): return Stub()
    def __iter__(self): return iter([Stub(), Stub()])
    def __bool__(self): return True
    def __index__(self): return 1
    def __int__(self): return 1
for op in ["add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "and", "or", "xor",
           "lshift", "rshift", "matmul"]:
    setattr(Stub, f"__{op}__", lambda self, other: Stub())
    setattr(Stub, f"__r{op}__", lambda self, other: Stub())
for op in ["lt", "le", "gt", "ge", "eq", "ne"]:
    setattr(Stub, f"__{op}__", lambda self, other: Stub())
for op in ["neg", "pos", "abs", "invert"]:
    setattr(Stub, f"__{op}__", lambda self: Stub())
Stub.__hash__ = lambda self: id(self)

class Nn:
    Module = Stub

class Torch(Stub):
    nn = Nn()

def run_forward(obj):
    params = list(inspect.signature(obj.forward).parameters)
    obj.forward(*[Stub() for _ in params])

def run_classes(ns):
    for value in list(ns.values()):
        if isinstance(value, type) and issubclass(value, Stub) and "forward" in vars(value):
            run_forward(value())
            run_classes(vars(value))

failed = 0
for path in sys.argv[1:]:
    name = os.path.basename(path)
    ns = {"torch": Torch(), "extern_kernels": Stub(), "wrapir": Stub(),
          "assert_size_stride": Stub(), "assert_alignment": Stub(), "assert_finite": Stub(), "device": Stub()}
    try:
        exec(compile(open(path).read(), name, "exec"), ns)
        run_forward(type("Top", (Stub,), {"forward": ns["forward"]})())
        run_classes(ns)
        print("ok", name)
    except Exception as e:
        failed += 1
        print("FAIL", name, type(e).__name__, e)
sys.exit(1 if failed else 0)
"#;

#[test]
fn every_fixture_printout_executes_under_python() {
    let dir = common::scratch("fx_printout", "modules");
    let mut paths = Vec::new();
    for path in common::fixtures() {
        let name = common::name(&path);
        let program = common::load(&path);
        let info = validate(&program).unwrap_or_else(|e| panic!("{name} is invalid:\n{e}"));
        // A fixture the FX back end cannot express is covered by its snapshot.
        let Ok(text) = wrapir::lower::fx::write_string(&info, &Default::default()) else {
            continue;
        };
        let file = dir.join(format!("{name}.py"));
        std::fs::write(&file, text).unwrap();
        paths.push(file);
    }
    assert!(paths.len() >= 20, "only {} fixtures lowered to FX", paths.len());
    let harness = dir.join("harness.py");
    std::fs::write(&harness, HARNESS).unwrap();
    let out = common::run_tool(
        Command::new("python3").arg(&harness).args(&paths),
        "python3",
        "executing the FX printouts",
    );
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "printed FX modules that do not run:\n{}\n{}",
        report
            .lines()
            .filter(|l| l.starts_with("FAIL"))
            .collect::<Vec<_>>()
            .join("\n"),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        report.lines().filter(|l| l.starts_with("ok ")).count(),
        paths.len(),
        "{report}"
    );
}

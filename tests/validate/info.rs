//! `ProgramInfo`, the error format, and the `.wir` fixtures.

use super::*;

// ProgramInfo and the error format

/// `nonzero`-style program: an extern op with a data-dependent size, a bind,
/// then a cond whose branches both bind `u1`, visible afterwards.
fn unbacked_program() -> wrapir::ir::Program {
    let mut p = ProgramBuilder::new();
    let u0 = p.unbacked_symbol("u0", Some(0), Some(8));
    let u1 = p.unbacked_symbol("u1", Some(0), None);
    let k = add_kernel(&mut p);
    let mut g = p.main();
    let x = input8(&mut g);
    let pred = g.tensor_input("arg1_1", Layout::contiguous(DType::Bool, Device::cuda(0), []));
    g.define_kernel(&k); // 0
    let m = g.extern_alloc_multi(
        "buf0",
        "torch.ops.aten.nonzero.default",
        vec![ArgValue::Buffer(x.clone())],
    ); // 1
    g.bind_size(&m, &u0, 0); // 2
    let r = g.multi_output("buf1", f32s(&[sym("u0")]), &m, &[]); // 3
    let out = g.allocate("buf2", f32s(&[sym("u0")])); // 4
    g.call_kernel(
        &k,
        [
            ArgValue::Buffer(r.clone()),
            ArgValue::Buffer(out.clone()),
            ArgValue::Expr(sym("u0")),
        ],
    ); // 5
    g.free_if_not_reused(&r); // 6
    g.conditional("buf3", Predicate::Tensor(pred), ("true_graph_0", "false_graph_0"), &[x]); // 7
    g.runtime_assert(SymExpr::cmp(CmpOp::Ge, sym("u1"), SymExpr::Int(0)), "u1 >= 0"); // 8
    g.output(&out);
    g.finish();
    for name in ["true_graph_0", "false_graph_0"] {
        let mut s = p.subgraph(name);
        let a = s.tensor_input(&format!("{name}_arg0_1"), f32n(8));
        s.bind_unbacked(
            &a,
            &u1,
            [KeyEntry::CallMethod(TensorMethod::Stride), KeyEntry::Index(0)]
                .into_iter()
                .collect(),
        );
        // The kernel was defined by main before the cond runs this graph.
        let o = s.allocate(&format!("{name}_buf0"), f32n(8));
        s.call_kernel(&k, add_args(a, o.clone()));
        s.output(&o);
        s.finish();
    }
    p.finish()
}

#[test]
fn program_info_reports_definitions_uses_and_bindings() {
    let program = unbacked_program();
    let info = match validate(&program) {
        Ok(info) => info,
        Err(e) => panic!("expected a valid program:\n{e}"),
    };
    let main = info.main();
    assert_eq!(main.name().as_str(), MAIN_GRAPH);
    let b = |n: &str| main.buffer(&BufName::new(n)).cloned();

    let buf1 = b("buf1").expect("buf1 is defined");
    assert_eq!(
        (buf1.defined, buf1.last_use, buf1.ended),
        (Site::Line(3), Some(5), Some(6))
    );
    assert_eq!(buf1.storage_root, Some(BufName::new("buf1")));
    let arg0 = b("arg0_1").expect("arg0_1 is an input");
    assert_eq!(
        (arg0.defined, arg0.last_use, arg0.ended, arg0.is_output),
        (Site::Input(0), Some(7), None, false)
    );
    let buf2 = b("buf2").expect("buf2 is defined");
    assert!(buf2.is_output && main.is_output(&BufName::new("buf2")));
    assert_eq!(
        main.output_buffers().cloned().collect::<Vec<_>>(),
        vec![BufName::new("buf2")]
    );
    assert_eq!(
        b("buf0").and_then(|i| i.storage_root),
        None,
        "multi-output values own no storage"
    );

    assert_eq!(main.binds(2), &[Symbol::new("u0")]);
    assert_eq!(main.binds(7), &[Symbol::new("u1")], "both branches bind u1");
    assert!(main.binds(5).is_empty());

    let u0 = info.symbol_binding(&Symbol::new("u0")).expect("u0 is bound");
    assert_eq!((u0.graph.as_str(), u0.site), (MAIN_GRAPH, Site::Line(2)));
    let u1: Vec<String> = info
        .symbol_bindings(&Symbol::new("u1"))
        .iter()
        .map(|b| b.to_string())
        .collect();
    assert_eq!(u1, ["line 0 of graph true_graph_0", "line 0 of graph false_graph_0"]);

    let k = KernelName::new("triton_poi_fused_add_0");
    assert_eq!(
        info.kernel_definition_site(&k).map(|(g, i)| (g.as_str(), i)),
        Some((MAIN_GRAPH, 0))
    );
    assert!(info.kernel(&k).is_some());
    assert_eq!(info.defined_kernels().count(), 1);

    let t = info
        .graph(Some(&GraphName::new("true_graph_0")))
        .expect("subgraph info");
    assert_eq!(t.callers(), &[(GraphName::new(MAIN_GRAPH), 7)]);
    assert_eq!(t.binds(0), &[Symbol::new("u1")]);
    assert_eq!(info.graphs().count(), 3);
}

#[test]
fn backed_symbols_are_bound_by_the_input_that_mentions_them() {
    let mut p = ProgramBuilder::new();
    let s0 = p.backed_symbol("s0", Some(4));
    let s1 = p.backed_symbol("s1", Some(4));
    let mut g = p.main();
    g.tensor_input("arg0_1", f32n(8));
    g.symbol_input("arg1_1", &s1);
    g.tensor_input("arg2_1", f32s(&[SymExpr::mul(SymExpr::Int(2), sym("s0"))]));
    g.finish();
    let program = p.finish();
    let info = validate(&program).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(info.symbol_binding(&s0).map(|b| b.site), Some(Site::Input(2)));
    assert_eq!(info.symbol_binding(&s1).map(|b| b.site), Some(Site::Input(1)));
}

#[test]
fn errors_are_all_collected_and_display_one_per_line() {
    let mut p = ProgramBuilder::new();
    let mut g = p.main();
    let b = g.allocate("buf0", f32n(8));
    g.free_if_not_reused(&b);
    g.free_if_not_reused(&b);
    g.line(Line::ExitDeviceContext);
    g.finish();
    let program = p.finish();
    let errors = validate(&program).err().expect("invalid program");
    assert_eq!(errors.len(), 2);
    let text = errors.to_string();
    let expected = [
        format!(
            "error in graph main, line 2 `{}`: buffer buf0 is freed twice (first freed at line 1)",
            wrapir::text::print_line(&program.main.lines[2])
        ),
        format!(
            "error in graph main, line 3 `{}`: device guard exit without a matching enter",
            wrapir::text::print_line(&program.main.lines[3])
        ),
    ];
    assert_eq!(text, expected.join("\n"));
    assert_eq!(errors.errors[0].graph().map(|g| g.as_str()), Some(MAIN_GRAPH));
    assert_eq!(errors.errors[0].line(), Some(2));
}

// Fixtures

#[test]
fn valid_fixtures_validate() {
    let fixtures = common::fixtures();
    assert!(!fixtures.is_empty(), "no fixtures found");
    let mut failures = Vec::new();
    for path in fixtures {
        let program = common::load(&path);
        if let Err(e) = validate(&program) {
            failures.push(format!("{}:\n{e}", common::name(&path)));
        }
    }
    assert!(
        failures.is_empty(),
        "valid fixtures rejected:\n{}",
        failures.join("\n\n")
    );
}

#[test]
fn invalid_fixture_diagnostics() {
    let fixtures = common::invalid_fixtures();
    assert!(!fixtures.is_empty(), "no invalid fixtures found");
    for path in fixtures {
        let name = common::name(&path);
        let program = common::load(&path);
        // An invalid fixture is one `wrapir check` rejects: either the validator
        // or, for a structurally valid program, launch reconciliation.
        let text = match validate(&program) {
            Ok(info) => {
                let report = wrapir::reconcile::check_program(&info, &Default::default());
                assert!(
                    report.totals.failed > 0,
                    "invalid fixture {name} validates and reconciles"
                );
                report.render(false)
            }
            Err(e) => e.to_string(),
        };
        common::settings().bind(|| insta::assert_snapshot!(format!("validate@{name}"), text));
    }
}

/// `Line::defines` and `Line::binds` say what the validator records: the line
/// that defines a buffer is the one `BufferInfo::defined` names, and the
/// symbols a line binds are among `GraphInfo::binds` of that line. `uses`
/// never names the buffer the line defines.
#[test]
fn line_accessors_agree_with_program_info() {
    for path in common::fixtures() {
        let program = common::load(&path);
        let info = wrapir::ir::validate(&program).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let graphs = std::iter::once((None, &program.main)).chain(program.subgraphs.iter().map(|(n, g)| (Some(n), g)));
        for (name, graph) in graphs {
            let gi = info.graph(name).expect("every graph has its info");
            for (i, line) in graph.lines.iter().enumerate() {
                if let Some(b) = line.defines() {
                    let defined = gi.buffer(b).map(|b| b.defined);
                    assert_eq!(defined, Some(Site::Line(i)), "{}: line {i} `{line}`", path.display());
                    assert!(!line.uses().contains(&b), "{}: line {i} `{line}`", path.display());
                }
                for s in line.binds() {
                    assert!(gi.binds(i).contains(s), "{}: line {i} binds `{s}`", path.display());
                }
            }
        }
    }
}

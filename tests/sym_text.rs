//! The symbolic-expression text layer: parser, Python / C++ / canonical
//! printers, checked evaluation.
//!
//! "Equal" in the round-trip properties means structural `==` on `SymExpr`
//! (same variants, same operand order, same literals). Trees are generated
//! with the same constructors the rest of wrapir uses (`SymExpr::add`, `mul`,
//! `neg`, `sub`, `floor_div`, `cmp`) plus the plain variants for the rest,
//! always with at least two operands in n-ary nodes.

use proptest::prelude::*;
use wrapir::sym::eval::{eval_bool, eval_int};
use wrapir::sym::{parse, print, Bindings, CmpOp, EvalError, SymExpr, Symbol};

fn parsed(text: &str) -> SymExpr {
    match parse(text) {
        Ok(e) => e,
        Err(err) => panic!("{err}"),
    }
}

/// The lines of a printer's case file (`cases/sym_*.txt`): `<input> =>
/// <printed form>`, an input between backticks keeping its spaces.
fn printed_forms(file: &str) -> Vec<(String, String)> {
    file.lines()
        .filter(|l| !l.is_empty() && !l.starts_with(';'))
        .map(|line| {
            let (input, expect) = line.split_once(" => ").unwrap_or_else(|| panic!("no ` => `: {line}"));
            let input = input.trim_end();
            let input = input
                .strip_prefix('`')
                .and_then(|i| i.strip_suffix('`'))
                .unwrap_or(input);
            (input.to_string(), expect.to_string())
        })
        .collect()
}

// ---------------------------------------------------------------- (a) Python

/// Parses `input` and checks the Python printer's output.
fn check_python(input: &str, expect: &str) {
    let e = parsed(input);
    assert_eq!(print::python(&e), expect, "python form of `{input}` (parsed as {e:?})");
    // The canonical form always reads back as the same tree.
    assert_eq!(
        parse(&print::canonical(&e)),
        Ok(e.clone()),
        "canonical round trip of `{input}`"
    );
}

#[test]
fn python_round_trip() {
    // Forms as Inductor 2.11's `pexpr` writes them: unchanged by parse + print.
    let same = [
        "4*s0",
        "s0*s1",
        "s77",
        "u0",
        "4*u0",
        "512*ks0",
        "ks0*ks1",
        "triton_poi_fused_mul_slice_0_xnumel",
        "u0 <= 100",
        "0 <= u0",
        "u0 >= 0",
        "u12 <= 40",
        "xindex // 128",
        "(-1) + s0",
        "s0 + ((-1)*s1)",
        "(-1)*s0",
        "1 + (s0 // 2)",
        "(s0 // 2)*s1",
        "1 + (((-1) + s0) // 128)",
        "(1 + s0) // 2",
        "(s0*s1) // 4",
        "2*(s0 % 4)",
        "2*s0*s1",
        "s0*s0",
        "s0*s1 + 4*s0",
        "min(s0, 4)",
        "max(1, s0)",
        "min(s0, s1, 4)",
        "max(1, min(s0, 8))",
        "u0 <= 100 and u0 >= 0",
        "u0 >= 0 or u1 >= 0",
        "(u0 >= 0 or u1 >= 0) and u2 == 0",
        "not (u0 >= 0)",
        "s0 == 4",
        "s0 != s1",
        "(2*s0) == 8",
        "(s0 % 4) == 0",
        "s0 + 1 <= 8",
        "True",
        "False",
        "-5",
        "-9223372036854775808",
        "9223372036854775807",
        "(xindex // 16) % 8",
        "s0 % 3",
        "(s0 + s1) % 3",
        "((xindex // 16) % 8)",
        "(xindex % 48)",
        "1 + (((x // 4) % 8))",
        "(((2*s0) // s1) % 8)",
    ];
    // `((x // d) % m)` is how Inductor prints ModularIndexing; it reads back as
    // `Mod(FloorDiv(x, d), m)`, whose Python form has no parentheses of its
    // own, so those entries print with one pair fewer.
    for text in same {
        let expect = match text {
            "((xindex // 16) % 8)" => "(xindex // 16) % 8",
            "(xindex % 48)" => "xindex % 48",
            "(((2*s0) // s1) % 8)" => "((2*s0) // s1) % 8",
            "1 + (((x // 4) % 8))" => "1 + ((x // 4) % 8)",
            other => other,
        };
        check_python(text, expect);
    }
    // Other spellings: launcher text, sympy function names, canonical forms.
    let table = printed_forms(include_str!("cases/sym_python.txt"));
    for (input, expect) in &table {
        check_python(input, expect);
    }
}

// ---------------------------------------------------------------- canonical

fn check_canonical(input: &str, expect: &str) {
    let e = parsed(input);
    assert_eq!(print::canonical(&e), expect, "canonical form of `{input}`");
    assert_eq!(e.to_string(), expect, "Display is the canonical form");
    assert_eq!(parse(expect), Ok(e), "canonical round trip of `{input}`");
}

#[test]
fn canonical_spells_lossy_nodes() {
    let table = printed_forms(include_str!("cases/sym_canonical.txt"));
    for (input, expect) in &table {
        check_canonical(input, expect);
    }
}

// ---------------------------------------------------------------- (b) C++

fn check_cpp(input: &str, expect: &str) {
    assert_eq!(print::cpp(&parsed(input)), expect, "C++ form of `{input}`");
}

#[test]
fn cpp_printer() {
    let table = printed_forms(include_str!("cases/sym_cpp.txt"));
    for (input, expect) in &table {
        check_cpp(input, expect);
    }
}

// ---------------------------------------------------------------- (c) eval

#[derive(Debug)]
enum Expect {
    Int(i64),
    Bool(bool),
    Overflow,
    DivisionByZero,
    Inexact,
    Unbound(&'static str),
    IntExpected,
    BoolExpected,
}

fn bindings() -> Bindings {
    [
        ("s0", 10),
        ("s1", -7),
        ("u0", 3),
        ("z", 0),
        ("big", i64::MAX),
        ("small", i64::MIN),
    ]
    .into_iter()
    .map(|(k, v)| (Symbol::new(k), v))
    .collect()
}

fn check_eval(text: &str, expect: Expect) {
    let e = parsed(text);
    let b = bindings();
    let ok_int = |r: Result<i64, EvalError>| r;
    match expect {
        Expect::Int(v) => assert_eq!(ok_int(eval_int(&e, &b)), Ok(v), "`{text}`"),
        Expect::Bool(v) => assert_eq!(eval_bool(&e, &b), Ok(v), "`{text}`"),
        Expect::BoolExpected => {
            let r = eval_bool(&e, &b);
            assert!(
                matches!(
                    r,
                    Err(EvalError::TypeMismatch {
                        expected: "boolean",
                        ..
                    })
                ),
                "`{text}`: {r:?}"
            );
        }
        other => {
            let r = if e.is_boolean() {
                eval_bool(&e, &b).map(i64::from)
            } else {
                eval_int(&e, &b)
            };
            let matched = match (&other, &r) {
                (Expect::Overflow, Err(EvalError::Overflow { .. })) => true,
                (Expect::DivisionByZero, Err(EvalError::DivisionByZero { .. })) => true,
                (Expect::Inexact, Err(EvalError::InexactDivision { .. })) => true,
                (Expect::Unbound(name), Err(EvalError::Unbound { symbol })) => symbol.as_str() == *name,
                (
                    Expect::IntExpected,
                    Err(EvalError::TypeMismatch {
                        expected: "integer", ..
                    }),
                ) => true,
                _ => false,
            };
            assert!(matched, "`{text}`: expected {other:?}, got {r:?}");
        }
    }
}

#[test]
fn evaluation() {
    use Expect::*;
    let table = [
        ("4*s0", Int(40)),
        ("s0 - s1", Int(17)),
        ("s1 // 2", Int(-4)),
        ("FloorDiv(s1, -2)", Int(3)),
        ("s1 % 2", Int(-1)),
        ("Mod(s1, -2)", Int(-1)),
        ("PythonMod(s1, 2)", Int(1)),
        ("PythonMod(s0, -3)", Int(-2)),
        ("ModularIndexing(s1, 1, 4)", Int(1)),
        ("ModularIndexing(s0, 3, 2)", Int(1)),
        ("ModularIndexing(s1, 2, 3)", Int(2)),
        ("CleanDiv(s0, 5)", Int(2)),
        ("CleanDiv(s1, -7)", Int(1)),
        ("CleanDiv(s0, 3)", Inexact),
        ("-((s0) // -(128))", Int(1)),
        ("-((s0) // -(4))", Int(3)),
        ("min(s0, s1, u0)", Int(-7)),
        ("max(s0, s1, u0)", Int(10)),
        ("s0**3", Int(1000)),
        ("s1**0", Int(1)),
        ("2**62", Int(1 << 62)),
        ("2**63", Overflow),
        ("(-2)**63", Int(i64::MIN)),
        ("big + 1", Overflow),
        ("big + 1 + (-1)", Int(i64::MAX)),
        ("small - 1", Overflow),
        ("-small", Overflow),
        ("small // -1", Overflow),
        ("small % -1", Int(0)),
        ("PythonMod(small, -1)", Int(0)),
        ("CleanDiv(small, -1)", Overflow),
        ("big*2", Overflow),
        ("big*2*z", Int(0)),
        ("s0 // z", DivisionByZero),
        ("s0 % z", DivisionByZero),
        ("PythonMod(s0, 0)", DivisionByZero),
        ("CleanDiv(s0, z)", DivisionByZero),
        ("ModularIndexing(s0, 0, 2)", DivisionByZero),
        ("ModularIndexing(s0, 1, z)", DivisionByZero),
        ("s9 + 1", Unbound("s9")),
        ("min(s0, u7)", Unbound("u7")),
        ("True + 1", IntExpected),
        ("s0 < True", IntExpected),
        ("(s0 < 1)*2", IntExpected),
        ("u0 <= 100 and u0 >= 0", Bool(true)),
        ("u0 > 100 or s1 < 0", Bool(true)),
        ("not (u0 >= 0)", Bool(false)),
        ("s0 == 10", Bool(true)),
        ("s0 != 10", Bool(false)),
        ("Eq(u0 > 1, True)", Bool(true)),
        ("Ne(u0 > 1, False)", Bool(true)),
        ("Eq(u0 > 1, s0)", BoolExpected),
        // `and` / `or` short-circuit like Python.
        ("z != 0 and 10 // z > 1", Bool(false)),
        ("z == 0 or 10 // z > 1", Bool(true)),
        ("z == 0 and 10 // z > 1", DivisionByZero),
        ("s0", BoolExpected),
        ("u0 >= 0 and s0", BoolExpected),
    ];
    for (text, expect) in table {
        check_eval(text, expect);
    }
    // `eval_int` on a boolean expression.
    let r = eval_int(&parsed("u0 >= 0"), &bindings());
    assert!(
        matches!(
            r,
            Err(EvalError::TypeMismatch {
                expected: "integer",
                ..
            })
        ),
        "{r:?}"
    );
}

// ---------------------------------------------------------------- parse errors

/// The cases of `cases/sym_parse_errors.txt`: the text between backticks,
/// then a `^` under the byte the error is at and a part of the message. The
/// byte offset is that of the character under the caret (the text's length
/// past its end).
fn parse_error_cases(file: &str) -> Vec<(String, usize, String)> {
    let mut cases = Vec::new();
    let mut lines = file.lines().filter(|l| !l.is_empty() && !l.starts_with(';'));
    while let Some(quoted) = lines.next() {
        let text = quoted
            .strip_prefix('`')
            .and_then(|t| t.strip_suffix('`'))
            .unwrap_or_else(|| panic!("not a quoted text: {quoted}"));
        let caret = lines.next().unwrap_or_else(|| panic!("no caret line after {quoted}"));
        let (before, part) = caret.split_once("^ ").unwrap_or_else(|| panic!("no `^ `: {caret}"));
        let column = before.chars().count() - 1;
        let offset = text.char_indices().nth(column).map_or(text.len(), |(i, _)| i);
        cases.push((text.to_string(), offset, part.to_string()));
    }
    cases
}

fn check_parse_error(text: &str, offset: usize, message_part: &str) {
    match parse(text) {
        Ok(e) => panic!("`{text}` parsed as {e:?}, expected an error"),
        Err(err) => {
            assert_eq!(err.offset, offset, "offset for `{text}`: {err}");
            assert!(
                err.message.contains(message_part),
                "message for `{text}`: {}",
                err.message
            );
            assert_eq!(err.text, text);
        }
    }
}

#[test]
fn parse_errors() {
    for (text, offset, part) in parse_error_cases(include_str!("cases/sym_parse_errors.txt")) {
        check_parse_error(&text, offset, &part);
    }
}

#[test]
fn exponent_limit_is_inclusive() {
    assert_eq!(parse("s0**64").map(|e| print::canonical(&e)), Ok("s0**64".to_string()));
}

/// Nesting past the limit is an error, never a crash (of the stack, at
/// 100,000 levels); nesting within it parses.
#[test]
fn deep_nesting_is_rejected() {
    for text in [
        "(".repeat(5000) + "1" + &")".repeat(5000),
        "-".repeat(5000) + "s0",
        "min(".repeat(5000) + "1",
        "(".repeat(100_000) + "1" + &")".repeat(100_000),
        "-".repeat(100_000) + "x",
        "not ".repeat(100_000) + "x",
    ] {
        let err = parse(&text).expect_err("too deep");
        assert!(err.message.contains("nested more than"), "{}", err.message);
    }
    let depth = wrapir::sym::parse::MAX_DEPTH - 1;
    let ok = "(".repeat(depth) + "s0" + &")".repeat(depth);
    assert_eq!(parse(&ok), Ok(SymExpr::sym("s0")));
}

#[test]
fn json_uses_the_canonical_form() {
    let e = parsed("PythonMod(s0, 3) + 1");
    let json = serde_json::to_string(&e).expect("serialises");
    assert_eq!(json, "\"PythonMod(s0, 3) + 1\"");
    let back: SymExpr = serde_json::from_str(&json).expect("deserialises");
    assert_eq!(back, e);
    let n: SymExpr = serde_json::from_str("-4").expect("integer");
    assert_eq!(n, SymExpr::Int(-4));
}

// ---------------------------------------------------------------- (d) properties

const SYMBOLS: [&str; 5] = ["s0", "s1", "u0", "ks0", "x_numel"];

fn leaf() -> impl Strategy<Value = SymExpr> {
    prop_oneof![
        4 => (-6i64..=6).prop_map(SymExpr::Int),
        1 => any::<i64>().prop_map(SymExpr::Int),
        1 => prop_oneof![Just(i64::MIN), Just(i64::MAX)].prop_map(SymExpr::Int),
        1 => any::<bool>().prop_map(SymExpr::Bool),
        5 => proptest::sample::select(&SYMBOLS[..]).prop_map(SymExpr::sym),
    ]
}

fn cmp_op() -> impl Strategy<Value = CmpOp> {
    proptest::sample::select(&[CmpOp::Eq, CmpOp::Ne, CmpOp::Lt, CmpOp::Le, CmpOp::Gt, CmpOp::Ge][..])
}

/// Random trees. `python_lossless` leaves out `PythonMod` and
/// `ModularIndexing`, whose Python text reads back as C-semantics `Mod`.
fn expr(python_lossless: bool) -> impl Strategy<Value = SymExpr> {
    leaf().prop_recursive(5, 48, 4, move |inner| {
        let bx = |e: SymExpr| Box::new(e);
        let pair = (inner.clone(), inner.clone());
        // An n-ary node of 2 or 3 operands.
        let nary =
            |node: fn(Vec<SymExpr>) -> SymExpr| proptest::collection::vec(inner.clone(), 2..4).prop_map(node).boxed();
        let mut options: Vec<BoxedStrategy<SymExpr>> = vec![
            pair.clone().prop_map(|(a, b)| SymExpr::add(a, b)).boxed(),
            pair.clone().prop_map(|(a, b)| SymExpr::mul(a, b)).boxed(),
            pair.clone().prop_map(|(a, b)| SymExpr::sub(a, b)).boxed(),
            inner.clone().prop_map(SymExpr::neg).boxed(),
            pair.clone().prop_map(|(a, b)| SymExpr::floor_div(a, b)).boxed(),
            pair.clone()
                .prop_map(move |(a, b)| SymExpr::CleanDiv(bx(a), bx(b)))
                .boxed(),
            pair.clone().prop_map(move |(a, b)| SymExpr::Mod(bx(a), bx(b))).boxed(),
            nary(SymExpr::Min),
            nary(SymExpr::Max),
            (inner.clone(), 0u32..4)
                .prop_map(move |(a, n)| SymExpr::Pow(bx(a), n))
                .boxed(),
            (cmp_op(), inner.clone(), inner.clone())
                .prop_map(|(op, a, b)| SymExpr::cmp(op, a, b))
                .boxed(),
            nary(SymExpr::And),
            nary(SymExpr::Or),
            inner.clone().prop_map(move |a| SymExpr::Not(bx(a))).boxed(),
        ];
        if !python_lossless {
            options.push(
                pair.clone()
                    .prop_map(move |(a, b)| SymExpr::PythonMod(bx(a), bx(b)))
                    .boxed(),
            );
            options.push(
                (inner.clone(), inner.clone(), inner.clone())
                    .prop_map(move |(x, d, m)| SymExpr::ModularIndexing(bx(x), bx(d), bx(m)))
                    .boxed(),
            );
        }
        proptest::strategy::Union::new(options)
    })
}

fn random_bindings() -> impl Strategy<Value = Bindings> {
    proptest::collection::vec(-20i64..=20, SYMBOLS.len())
        .prop_map(|vals| SYMBOLS.iter().zip(vals).map(|(s, v)| (Symbol::new(s), v)).collect())
}

/// The value of an expression of either type (booleans as 0/1).
fn value(e: &SymExpr, b: &Bindings) -> Result<i64, EvalError> {
    if e.is_boolean() {
        eval_bool(e, b).map(i64::from)
    } else {
        eval_int(e, b)
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// `parse(canonical(e)) == e` structurally.
    #[test]
    fn canonical_round_trips(e in expr(false)) {
        let text = print::canonical(&e);
        prop_assert_eq!(parse(&text), Ok(e), "text: {}", text);
    }

    /// Inductor's Python text always parses, and, for trees without
    /// `PythonMod`/`ModularIndexing`, means the same wherever `e` is defined.
    #[test]
    fn python_text_evaluates_the_same(e in expr(true), b in random_bindings()) {
        let text = print::python(&e);
        let back = parse(&text);
        prop_assert!(back.is_ok(), "python text `{}` does not parse: {:?}", text, back);
        if let (Ok(want), Ok(back)) = (value(&e, &b), back) {
            prop_assert_eq!(value(&back, &b), Ok(want), "text: {}", text);
        }
    }

    /// The Python form of every tree parses (lossy nodes included), and the
    /// C++ printer is total.
    #[test]
    fn every_python_text_parses(e in expr(false)) {
        let text = print::python(&e);
        let back = parse(&text);
        prop_assert!(back.is_ok(), "python text `{}` does not parse: {:?}", text, back);
        prop_assert!(!print::cpp(&e).is_empty());
    }
}

/// A chain of minus signs (found by the `sym` and `wir_parse` fuzz targets:
/// `fuzz/regressions/*minus_chain*`) parses within the depth limit; its
/// printed forms parse again to the same value, since `-(-x)` is `x`.
#[test]
fn minus_chains_print_within_the_depth_limit() {
    let chain = format!("s0*s2{}s2*s3", "-".repeat(99));
    let e = parsed(&chain);
    for printed in [print::python(&e), print::canonical(&e)] {
        let again = parse(&printed).unwrap_or_else(|err| panic!("{printed:?}: {err:?}"));
        let b = bindings();
        assert_eq!(eval_int(&again, &b), eval_int(&e, &b), "{printed}");
    }
    check_python("--s0", "s0");
    check_python("---s0", "(-1)*s0");
    // Every regression input of the two targets runs clean.
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/regressions");
    let sym = std::fs::read_to_string(root.join("sym_minus_chain_printed_too_deep.txt")).unwrap();
    let first = sym.lines().next().unwrap();
    let e = parsed(first);
    parse(&print::python(&e)).expect("printed form parses");
    let wir = std::fs::read_to_string(root.join("wir_parse_minus_chain_printed_too_deep.wir")).unwrap();
    if let Ok(p) = wrapir::text::parse(&wir) {
        let printed = wrapir::text::print(&p);
        let again = wrapir::text::parse(&printed).expect("printed program parses");
        assert_eq!(wrapir::text::print(&again), printed);
    }
}

/// A chain of `*`, `//` and `%` builds one tree level per operator without
/// any nesting in its text, and the printers parenthesise each level, so a
/// long chain (found by the `sym` fuzz target:
/// `fuzz/regressions/sym_mod_chain_printed_too_deep.txt`, 120 operators)
/// printed a form nested past the parser's limit. Trees deeper than
/// `MAX_TREE_DEPTH` are an error; every tree up to it prints forms that parse.
#[test]
fn operator_chains_stay_within_the_tree_depth_limit() {
    use wrapir::sym::parse::MAX_TREE_DEPTH;
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/regressions");
    let sym = std::fs::read_to_string(root.join("sym_mod_chain_printed_too_deep.txt")).unwrap();
    let err = parse(sym.lines().next().unwrap()).unwrap_err();
    assert!(err.message.contains("deeper than"), "{err}");
    // The longest chain accepted, of each operator, prints forms that parse
    // to the same tree (canonical) and value (Python).
    for op in [" % ", " // "] {
        let at_limit = format!("s0{}", format!("{op}(s1 + 3)").repeat(MAX_TREE_DEPTH - 2));
        let e = parsed(&at_limit);
        for printed in [print::python(&e), print::canonical(&e)] {
            let again = parse(&printed).unwrap_or_else(|err| panic!("{printed:?}: {err:?}"));
            let b = bindings();
            assert_eq!(eval_int(&again, &b), eval_int(&e, &b), "{printed}");
        }
        let past = format!("s0{}", format!("{op}(s1 + 3)").repeat(MAX_TREE_DEPTH + 1));
        assert!(parse(&past).is_err(), "{op}: {} operators parsed", MAX_TREE_DEPTH + 1);
    }
    // A product is one n-ary node however long: 1,000 factors parse.
    assert!(parse(&format!("s0{}", "*(s1 + 3)".repeat(1000))).is_ok());
}

/// Python writes `x**n` as `n` copies of `x`, so nested powers print
/// exponentially long: an expression that would print to more than
/// `MAX_PRINTED_TERMS` terms is a parse error (the `sym` fuzz target's
/// out-of-memory input, `fuzz/regressions/sym_oom_nested_pow_printed.txt`).
#[test]
fn nested_powers_that_print_past_the_limit_are_errors() {
    use wrapir::sym::parse::MAX_PRINTED_TERMS;
    assert!(parse("((x**30)**30)**30").is_ok());
    let err = parse("((((x**30)**30)**30)**30)**30").unwrap_err();
    assert!(err.message.contains(&MAX_PRINTED_TERMS.to_string()), "{err}");
    let printed = print::python(&parsed("((x**30)**30)**30"));
    assert_eq!(printed.matches('x').count(), 27_000);
}

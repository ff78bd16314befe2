//! Collective calls (`_c10d_functional`) checked without a device: within one
//! rank's program (arguments, result dtype and sizes, one size per group) and
//! across the programs of ranks that run together.

use wrapir::ir::collectives::{check_ranks, collectives, Kind};
use wrapir::ir::Program;

/// A program whose `main` takes `x: <input>` and runs `lines` (buffers declared in `decls`).
fn program(input: &str, decls: &str, lines: &str, out: &str) -> Program {
    let text = format!("wrapir 1\n\ngraph main(x: {input}) -> ({out}) {{\n{decls}\n  device 0 {{\n{lines}\n  }}\n}}\n");
    wrapir::text::parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"))
}

/// `expect`: `Ok(kinds)` for a well-formed program, `Err(fragment)` for the message.
fn check(p: &Program, expect: Result<&[Kind], &str>) {
    match (collectives(p), expect) {
        (Ok(found), Ok(kinds)) => {
            let got: Vec<Kind> = found.iter().map(|c| c.kind).collect();
            assert_eq!(got, kinds);
        }
        (Err(e), Err(fragment)) => assert!(e.to_string().contains(fragment), "`{e}` lacks `{fragment}`"),
        (got, want) => panic!("got {got:?}, expected {want:?}"),
    }
}

const F32_8: &str = "f32[8, 4][4, 1]@cuda:0";

#[test]
fn well_formed_collectives_and_their_shapes() {
    let p = program(
        F32_8,
        "  buffer buf0: f32[8, 4][4, 1]@cuda:0\n  buffer buf1: f32[8, 4][4, 1]@cuda:0\n  buffer buf2: f32[16, 4][4, 1]@cuda:0\n  buffer buf3: f32[4, 4][4, 1]@cuda:0",
        "    extern buf0 = torch.ops._c10d_functional.all_reduce.default(x, 'sum', '0')\n    extern buf1 = torch.ops._c10d_functional.wait_tensor.default(buf0)\n    extern buf2 = torch.ops._c10d_functional.all_gather_into_tensor.default(buf1, 2, '0')\n    extern buf3 = torch.ops._c10d_functional.reduce_scatter_tensor.default(buf1, 'avg', 2, '0')",
        "buf2, buf3",
    );
    check(
        &p,
        Ok(&[
            Kind::AllReduce { in_place: false },
            Kind::Wait,
            Kind::AllGather,
            Kind::ReduceScatter,
        ]),
    );
    // The committed comm-buffer fixture.
    let fixture = wrapir::text::parse(&std::fs::read_to_string("fixtures/comm_buffer.wir").unwrap()).unwrap();
    check(&fixture, Ok(&[Kind::AllReduce { in_place: false }]));
}

#[test]
fn malformed_collectives_are_errors_naming_the_line_and_cause() {
    let one = |decls: &str, line: &str| program(F32_8, decls, line, "buf0");
    let b0 = |layout: &str| format!("  buffer buf0: {layout}");
    check(
        &one(
            &b0("f32[8, 4][4, 1]@cuda:0"),
            "    extern buf0 = torch.ops._c10d_functional.all_reduce.default(x, 'mean', '0')",
        ),
        Err("line 2: `torch.ops._c10d_functional.all_reduce.default`: reduce op `mean` is not one of sum"),
    );
    check(
        &one(
            &b0("f32[8, 4][4, 1]@cuda:0"),
            "    extern buf0 = torch.ops._c10d_functional.all_gather_into_tensor.default(x, 2, '0')",
        ),
        Err("result `buf0` has size 8 in dimension 0; the input's 8 makes it 16"),
    );
    check(
        &one(
            &b0("f32[3, 4][4, 1]@cuda:0"),
            "    extern buf0 = torch.ops._c10d_functional.reduce_scatter_tensor.default(x, 'sum', 3, '0')",
        ),
        Err("input `x`'s dimension 0 (8) is not divisible by the group size 3"),
    );
    check(
        &one(
            &b0("bf16[8, 4][4, 1]@cuda:0"),
            "    extern buf0 = torch.ops._c10d_functional.all_reduce.default(x, 'sum', '0')",
        ),
        Err("result `buf0` is bf16 but input `x` is f32"),
    );
    check(
        &one(
            &b0("f32[8, 4][4, 1]@cuda:0"),
            "    extern buf0 = torch.ops._c10d_functional.all_reduce.default(x, 'sum')",
        ),
        Err("takes 3 arguments, the call passes 2"),
    );
    check(
        &one(
            &b0("f32[8, 4][4, 1]@cuda:0"),
            "    extern buf0 = torch.ops._c10d_functional.all_gather_into_tensor.default(x, 0, '0')",
        ),
        Err("group size 0 is below 1"),
    );
    check(
        &one(
            &b0("f32[8, 4][4, 1]@cuda:0"),
            "    extern buf0 = torch.ops._c10d_functional.all_to_all.default(x, '0')",
        ),
        Err("`all_to_all` is not one of the functional collectives wrapir knows"),
    );
    // One group, two sizes.
    let p = program(
        F32_8,
        "  buffer buf0: f32[16, 4][4, 1]@cuda:0\n  buffer buf1: f32[32, 4][4, 1]@cuda:0",
        "    extern buf0 = torch.ops._c10d_functional.all_gather_into_tensor.default(x, 2, '0')\n    extern buf1 = torch.ops._c10d_functional.all_gather_into_tensor.default(x, 4, '0')",
        "buf0, buf1",
    );
    check(
        &p,
        Err("process group `0` has size 2 at graph `main`, line 2 but size 4 at graph `main`, line 3"),
    );
}

#[test]
fn ranks_must_issue_the_same_collectives() {
    let with = |reduce: &str, group: &str| {
        program(
            F32_8,
            "  buffer buf0: f32[8, 4][4, 1]@cuda:0",
            &format!("    extern buf0 = torch.ops._c10d_functional.all_reduce.default(x, '{reduce}', '{group}')"),
            "buf0",
        )
    };
    let (a, b) = (with("sum", "0"), with("sum", "0"));
    assert_eq!(check_ranks(&[("rank0", &a), ("rank1", &b)]), Ok(()));
    let c = with("max", "0");
    let e = check_ranks(&[("rank0", &a), ("rank1", &c)]).unwrap_err().to_string();
    assert_eq!(
        e,
        "ranks `rank0` and `rank1` disagree at collective 1: reduce op 'sum' (graph `main`, line 2) against 'max' (graph `main`, line 2)"
    );
    let d = with("sum", "1");
    let e = check_ranks(&[("rank0", &a), ("rank1", &d)]).unwrap_err().to_string();
    assert!(e.contains("disagree at collective 1: group"), "{e}");
    let none = program(F32_8, "", "    free x", "x");
    let e = check_ranks(&[("rank0", &a), ("rank1", &none)]).unwrap_err().to_string();
    assert_eq!(
        e,
        "ranks `rank0` and `rank1` disagree at collective 1: 1 collectives against 0"
    );
}

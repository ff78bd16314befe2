//! Valid programs: the case file `cases/valid.txt`.

use super::*;

#[test]
fn valid_programs() {
    for case in common::text_cases(include_str!("cases/valid.txt")) {
        assert!(case.expect.is_empty(), "valid case `{}` expects diagnostics", case.name);
        check(&case, "cases/valid.txt");
    }
}

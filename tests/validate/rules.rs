//! Invalid programs, one per rule, with the exact diagnostics: the case
//! files `cases/*.txt`, one per kind of rule.

use super::*;

#[test]
fn buffer_rules() {
    check_file(include_str!("cases/buffers.txt"));
}

#[test]
fn storage_rules() {
    check_file(include_str!("cases/storage.txt"));
}

#[test]
fn symbol_rules() {
    check_file(include_str!("cases/symbols.txt"));
}

#[test]
fn kernel_rules() {
    check_file(include_str!("cases/kernels.txt"));
}

#[test]
fn structure_rules() {
    check_file(include_str!("cases/structure.txt"));
}

//! Invalid programs, one per rule, with the exact diagnostics: the case
//! files `cases/*.txt`, one per kind of rule.

use super::*;

/// One test per case file: `test_name => "cases/<file>.txt"`.
macro_rules! case_file_tests {
    ($($name:ident => $file:literal),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                check_file(include_str!($file));
            }
        )*
    };
}

case_file_tests! {
    buffer_rules => "cases/buffers.txt",
    storage_rules => "cases/storage.txt",
    symbol_rules => "cases/symbols.txt",
    kernel_rules => "cases/kernels.txt",
    structure_rules => "cases/structure.txt",
}

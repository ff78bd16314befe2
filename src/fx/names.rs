//! Node names under torch.fx's namespace rules (`_Namespace.create_name` in
//! `torch/fx/graph.py`): a candidate is made an identifier (runs of other
//! characters become `_`, an empty one is `_unnamed`, a leading digit gets a
//! `_`), its trailing `_<digits>` is its suffix, and a taken or reserved name
//! gets the first free `base_<k>`. Reserved are Python's keywords and
//! builtins, the globals torch.fx puts into every module (`torch`, `device`,
//! `inf`, ...) and the bare names the printout calls or reads
//! (`assert_size_stride`, `assert_alignment`, `extern_kernels`, `wrapir`,
//! `self`), so no node shadows a call target.

use std::borrow::Cow;

/// Names no node may take (sorted, for binary search).
const RESERVED: &[&str] = &[
    "ArithmeticError",
    "AssertionError",
    "AttributeError",
    "BaseException",
    "BaseExceptionGroup",
    "BlockingIOError",
    "BrokenPipeError",
    "BufferError",
    "BytesWarning",
    "ChildProcessError",
    "ConnectionAbortedError",
    "ConnectionError",
    "ConnectionRefusedError",
    "ConnectionResetError",
    "DeprecationWarning",
    "EOFError",
    "Ellipsis",
    "EncodingWarning",
    "EnvironmentError",
    "Exception",
    "ExceptionGroup",
    "False",
    "FileExistsError",
    "FileNotFoundError",
    "FloatingPointError",
    "FutureWarning",
    "GeneratorExit",
    "IOError",
    "ImportError",
    "ImportWarning",
    "IndentationError",
    "IndexError",
    "InterruptedError",
    "IsADirectoryError",
    "KeyError",
    "KeyboardInterrupt",
    "LookupError",
    "MemoryError",
    "ModuleNotFoundError",
    "NameError",
    "None",
    "NoneType",
    "NotADirectoryError",
    "NotImplemented",
    "NotImplementedError",
    "OSError",
    "OverflowError",
    "PendingDeprecationWarning",
    "PermissionError",
    "ProcessLookupError",
    "RecursionError",
    "ReferenceError",
    "ResourceWarning",
    "RuntimeError",
    "RuntimeWarning",
    "StopAsyncIteration",
    "StopIteration",
    "SyntaxError",
    "SyntaxWarning",
    "SystemError",
    "SystemExit",
    "TabError",
    "TimeoutError",
    "True",
    "TypeError",
    "UnboundLocalError",
    "UnicodeDecodeError",
    "UnicodeEncodeError",
    "UnicodeError",
    "UnicodeTranslateError",
    "UnicodeWarning",
    "UserWarning",
    "ValueError",
    "Warning",
    "ZeroDivisionError",
    "__build_class__",
    "__debug__",
    "__doc__",
    "__import__",
    "__loader__",
    "__name__",
    "__package__",
    "__spec__",
    "abs",
    "aiter",
    "all",
    "and",
    "anext",
    "any",
    "as",
    "ascii",
    "assert",
    "assert_alignment",
    "assert_finite",
    "assert_size_stride",
    "async",
    "await",
    "bin",
    "bool",
    "break",
    "breakpoint",
    "bytearray",
    "bytes",
    "callable",
    "chr",
    "class",
    "classmethod",
    "compile",
    "complex",
    "continue",
    "copyright",
    "credits",
    "def",
    "del",
    "delattr",
    "device",
    "dict",
    "dir",
    "divmod",
    "elif",
    "else",
    "enumerate",
    "eval",
    "except",
    "exec",
    "exit",
    "extern_kernels",
    "filter",
    "finally",
    "float",
    "for",
    "format",
    "from",
    "frozenset",
    "fx_pytree",
    "getattr",
    "global",
    "globals",
    "hasattr",
    "hash",
    "help",
    "hex",
    "id",
    "if",
    "import",
    "in",
    "inf",
    "input",
    "int",
    "is",
    "isinstance",
    "issubclass",
    "iter",
    "lambda",
    "len",
    "license",
    "list",
    "locals",
    "map",
    "max",
    "memoryview",
    "min",
    "nan",
    "next",
    "nonlocal",
    "not",
    "object",
    "oct",
    "open",
    "or",
    "ord",
    "pass",
    "pow",
    "print",
    "property",
    "pytree",
    "quit",
    "raise",
    "range",
    "repr",
    "return",
    "reversed",
    "round",
    "self",
    "set",
    "setattr",
    "slice",
    "sorted",
    "staticmethod",
    "str",
    "sum",
    "super",
    "torch",
    "try",
    "tuple",
    "type",
    "vars",
    "while",
    "with",
    "wrapir",
    "yield",
    "zip",
];

/// `true` when `name` is reserved: a Python keyword or builtin, a global of
/// every torch.fx module, or a bare name the printout uses.
pub fn is_reserved(name: &str) -> bool {
    // No reserved name is longer than `RESERVED_MAX_LEN` or has a digit;
    // generated names (`buf3`, `arg0_1`, `triton_kernel_wrapper_mutation`)
    // are mostly one or the other.
    name.len() <= RESERVED_MAX_LEN && !name.bytes().any(|b| b.is_ascii_digit()) && RESERVED.binary_search(&name).is_ok()
}

/// The length of the longest reserved name (`PendingDeprecationWarning`).
const RESERVED_MAX_LEN: usize = 25;

/// `IDENT[b]`: `b` may appear in an identifier (ASCII letter, digit, `_`).
const IDENT: [bool; 256] = {
    let mut t = [false; 256];
    let mut b = 0;
    while b < 256 {
        let c = b as u8;
        t[b] = c.is_ascii_alphanumeric() || c == b'_';
        b += 1;
    }
    t
};

/// `candidate` as a Python identifier, the way torch.fx sanitizes it.
pub fn sanitize(candidate: &str) -> Cow<'_, str> {
    let bytes = candidate.as_bytes();
    if !bytes.is_empty() && !bytes[0].is_ascii_digit() && bytes.iter().all(|&b| IDENT[usize::from(b)]) {
        return Cow::Borrowed(candidate);
    }
    let mut out = String::with_capacity(candidate.len() + 1);
    let mut in_run = false;
    for c in candidate.chars() {
        if c.is_ascii_alphanumeric() || c == '_' {
            out.push(c);
            in_run = false;
        } else if !in_run {
            out.push('_');
            in_run = true;
        }
    }
    if out.is_empty() {
        out.push_str("_unnamed");
    }
    if out.as_bytes()[0].is_ascii_digit() {
        out.insert(0, '_');
    }
    Cow::Owned(out)
}

/// Splits an identifier into its base and numeric suffix: `arg0_1` is
/// (`arg0`, 1), `buf0` is (`buf0`, none), `x__2` is (`x_`, 2).
pub fn split_suffix(name: &str) -> (&str, Option<u64>) {
    let bytes = name.as_bytes();
    let digits = bytes.iter().rev().take_while(|b| b.is_ascii_digit()).count();
    // The suffix is what follows the last `_`, all digits, after a non-empty base.
    let Some(underscore) = bytes.len().checked_sub(digits).and_then(|n| n.checked_sub(1)) else {
        return (name, None);
    };
    if digits == 0 || underscore == 0 || bytes[underscore] != b'_' {
        return (name, None);
    }
    let mut n: u64 = 0;
    for &b in &bytes[underscore + 1..] {
        match n.checked_mul(10).and_then(|n| n.checked_add(u64::from(b - b'0'))) {
            Some(v) => n = v,
            None => return (name, None),
        }
    }
    (&name[..underscore], Some(n))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reserved_names_are_sorted_and_cover_the_printout() {
        assert!(RESERVED.windows(2).all(|w| w[0] < w[1]));
        assert!(RESERVED.iter().all(|n| !n.bytes().any(|b| b.is_ascii_digit())));
        assert_eq!(RESERVED.iter().map(|n| n.len()).max(), Some(RESERVED_MAX_LEN));
        for n in ["assert_size_stride", "torch", "device", "max", "sum", "lambda", "self"] {
            assert!(is_reserved(n), "{n}");
        }
        assert!(!is_reserved("buf0"));
    }

    #[test]
    fn sanitizes_like_torch_fx() {
        assert_eq!(sanitize("buf0"), "buf0");
        assert_eq!(
            sanitize(&format!("{}.Tensor", crate::ir::op::key::ADD)),
            "aten_add_Tensor"
        );
        assert_eq!(sanitize("a..b"), "a_b");
        assert_eq!(sanitize(""), "_unnamed");
        assert_eq!(sanitize("0x"), "_0x");
    }

    #[test]
    fn splits_numeric_suffixes() {
        assert_eq!(split_suffix("arg0_1"), ("arg0", Some(1)));
        assert_eq!(split_suffix("buf0"), ("buf0", None));
        assert_eq!(split_suffix("x__2"), ("x_", Some(2)));
        assert_eq!(split_suffix("_1"), ("_1", None));
        assert_eq!(split_suffix("a_1_2"), ("a_1", Some(2)));
        assert_eq!(split_suffix("a_"), ("a_", None));
        assert_eq!(split_suffix("a_b1"), ("a_b1", None));
        assert_eq!(split_suffix("12"), ("12", None));
        assert_eq!(split_suffix("a_007"), ("a", Some(7)));
        assert_eq!(split_suffix("a_99999999999999999999"), ("a_99999999999999999999", None));
        assert_eq!(split_suffix(""), ("", None));
    }

    #[test]
    fn graph_names_follow_create_name() {
        use crate::fx::{Graph, Op};
        let mut g = Graph::new();
        let mut push = |name: &str| {
            let id = g.push(name, Op::Constant { name: "c".into() }, None);
            g.node(id).name.clone()
        };
        assert_eq!(push("arg0_1"), "arg0_1");
        assert_eq!(push("arg0_1"), "arg0_2");
        assert_eq!(push("max"), "max_1");
        assert_eq!(push("assert_size_stride"), "assert_size_stride_1");
        assert_eq!(push("assert_size_stride"), "assert_size_stride_2");
        assert_eq!(push(crate::ir::op::key::ADD), "aten_add");
        assert_eq!(push(crate::ir::op::key::ADD), "aten_add_1");
    }
}

//! Python (`pexpr`) and C++ (`cexpr`) printers.
use super::SymExpr;
use std::fmt;

/// Writes the Python form.
pub fn write_python(f: &mut dyn fmt::Write, e: &SymExpr) -> fmt::Result {
    match e {
        SymExpr::Int(v) => write!(f, "{v}"),
        SymExpr::Sym(s) => write!(f, "{s}"),
        _ => write!(f, "<expr>"),
    }
}

/// The Python form as a string.
pub fn python(e: &SymExpr) -> String {
    let mut s = String::new();
    let _ = write_python(&mut s, e);
    s
}

/// Writes the C++ form.
pub fn write_cpp(f: &mut dyn fmt::Write, e: &SymExpr) -> fmt::Result {
    match e {
        SymExpr::Int(v) => write!(f, "{v}L"),
        SymExpr::Sym(s) => write!(f, "{s}"),
        _ => write!(f, "<expr>"),
    }
}

/// The C++ form as a string.
pub fn cpp(e: &SymExpr) -> String {
    let mut s = String::new();
    let _ = write_cpp(&mut s, e);
    s
}

//! Validation errors for the terminal: each points at the bundle's program
//! file ([`wrapir::text::render_validation_errors`]).

use wrapir::bundle::Bundle;
use wrapir::ir::ValidationErrors;

/// `errors` of `bundle`'s program, pointing at its file (`.wir` line, column
/// and snippet; a JSON program's JSON path).
pub(crate) fn render_validation_errors(bundle: &Bundle, errors: &ValidationErrors) -> String {
    wrapir::text::render_validation_errors(bundle.name(), bundle.source(), errors, bundle.limits())
}

//! Comparing host tensors with expected values, like
//! `torch.testing.assert_close`, and what a bundle's `bundle.json` says
//! about the references a run is compared with ([`crate::format::bundle_json::BundleMeta`]).
//!
//! A bundle carries two references for the same inputs: eager PyTorch's
//! outputs ([`crate::format::bundle_json::BundleMeta::EXPECTED`], compared within `tolerance`) and
//! Inductor's own compiled outputs ([`crate::format::bundle_json::BundleMeta::COMPILED`], compared within
//! `compiled_tolerance`, usually much tighter). [`compare_outputs`] compares
//! a run's outputs with either and reports the largest errors per output.
//! An integer output (a size the program returns next to its tensors) is
//! stored as a 0-d int64 tensor listed in `bundle.json`'s `int_outputs`
//! ([`crate::format::bundle_json::BundleMeta::int_outputs`]) and compared exactly ([`compare_leaves`]).
//! The inputs a program writes
//! ([`crate::format::bundle_json::BundleMeta::mutated_inputs`]) are compared
//! after the call with eager's values
//! ([`crate::format::bundle_json::BundleMeta::MUTATED`], [`compare_mutated`]).

use super::Tensor;
use crate::format::bundle_json::Tolerance;
use crate::ir::DType;
use indexmap::IndexMap;

mod mutated;
pub use mutated::{compare_mutated, MutatedCheck, MutationComparison};

/// How a tensor differs from the expected one.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum Mismatch {
    /// Different dtype or shape.
    #[error("got {got_dtype}{got_size:?}, expected {expected_dtype}{expected_size:?}")]
    Layout {
        /// Dtype of the result.
        got_dtype: DType,
        /// Shape of the result.
        got_size: Vec<i64>,
        /// Expected dtype.
        expected_dtype: DType,
        /// Expected shape.
        expected_size: Vec<i64>,
    },
    /// Elements outside the tolerance.
    #[error(
        "{count} of {numel} elements differ{}; first at index {index:?}: got {got}, expected {expected}",
        tolerance.map(|t| format!(" (rtol {}, atol {})", t.rtol, t.atol)).unwrap_or_default()
    )]
    Values {
        /// How many elements differ.
        count: usize,
        /// Elements in all.
        numel: usize,
        /// Index of the first differing element.
        index: Vec<i64>,
        /// Its value in the result.
        got: f64,
        /// Its expected value.
        expected: f64,
        /// The tolerance used (`None`: exact).
        tolerance: Option<Tolerance>,
    },
    /// An integer output (a size the program returns) with another value.
    #[error("got integer {got}, expected {expected}")]
    Int {
        /// The program's value.
        got: i64,
        /// The reference's value.
        expected: i64,
    },
    /// A tensor where the reference holds an integer output, or the reverse.
    #[error("got {got}, expected {expected}")]
    Kind {
        /// What the program returned (`a tensor`, `an integer`).
        got: &'static str,
        /// What the reference holds.
        expected: &'static str,
    },
    /// The data could not be read.
    #[error("{0}")]
    Unreadable(String),
}

/// Compares `got` with `expected`: same dtype and shape, then every element.
/// Floating dtypes use `tolerance` (default: [`Tolerance::default_for`]); NaN
/// matches NaN and infinities must be equal. Integers and booleans must be
/// equal (compared as `i64`, so exactly).
pub fn compare(got: &Tensor, expected: &Tensor, tolerance: Option<Tolerance>) -> Result<(), Mismatch> {
    if got.dtype() != expected.dtype() || got.size() != expected.size() {
        return Err(Mismatch::Layout {
            got_dtype: got.dtype(),
            got_size: got.size().to_vec(),
            expected_dtype: expected.dtype(),
            expected_size: expected.size().to_vec(),
        });
    }
    if let Some(part) = got.dtype().complex_part() {
        // Complex tensors compare part by part, at the part dtype's tolerance;
        // an index names the element and (last) the part, 0 real, 1 imaginary.
        let unreadable = |e: super::ExecError| Mismatch::Unreadable(e.to_string());
        let (g, e) = (
            got.view_as_real().map_err(unreadable)?,
            expected.view_as_real().map_err(unreadable)?,
        );
        return compare(&g, &e, tolerance.or_else(|| Tolerance::default_for(part)));
    }
    let unreadable = |e: super::ExecError| Mismatch::Unreadable(e.to_string());
    let tolerance = if got.dtype().is_floating() {
        tolerance.or_else(|| Tolerance::default_for(got.dtype()))
    } else {
        None
    };
    let (count, first, numel) = match tolerance {
        Some(tol) => {
            let (g, e) = (
                got.to_f64_vec().map_err(unreadable)?,
                expected.to_f64_vec().map_err(unreadable)?,
            );
            let close =
                |a: f64, b: f64| (a.is_nan() && b.is_nan()) || a == b || (a - b).abs() <= tol.atol + tol.rtol * b.abs();
            let bad: Vec<usize> = (0..g.len().min(e.len())).filter(|i| !close(g[*i], e[*i])).collect();
            (bad.len(), bad.first().map(|i| (*i, g[*i], e[*i])), g.len())
        }
        None => {
            let (g, e) = (
                got.to_i64_vec().map_err(unreadable)?,
                expected.to_i64_vec().map_err(unreadable)?,
            );
            let bad: Vec<usize> = (0..g.len().min(e.len())).filter(|i| g[*i] != e[*i]).collect();
            (
                bad.len(),
                bad.first().map(|i| (*i, g[*i] as f64, e[*i] as f64)),
                g.len(),
            )
        }
    };
    match first {
        None => Ok(()),
        Some((flat, g, e)) => Err(Mismatch::Values {
            count,
            numel,
            index: unravel(flat, got.size()),
            got: g,
            expected: e,
            tolerance,
        }),
    }
}

/// The multi-index of row-major element `flat` in `size`.
fn unravel(flat: usize, size: &[i64]) -> Vec<i64> {
    let mut index = vec![0i64; size.len()];
    let mut rest = flat as i64;
    for (d, n) in size.iter().enumerate().rev() {
        let n = (*n).max(1);
        index[d] = rest % n;
        rest /= n;
    }
    index
}

/// One output compared with its reference tensor.
#[derive(Clone, Debug, PartialEq)]
pub struct OutputCheck {
    /// The output's position among the compared outputs (the program's
    /// tensor outputs, and its integer outputs where the reference stores them).
    pub index: usize,
    /// The program's value when the output is an integer (`None`: a tensor).
    pub int: Option<i64>,
    /// The reference tensor's name (`out0`, `graph_out1`).
    pub name: String,
    /// The largest `|got - expected|` (NaN where a NaN meets a number);
    /// `None` when dtype or shape differ.
    pub max_abs: Option<f64>,
    /// The largest `|got - expected| / |expected|` (infinite where the
    /// expected value is 0 and the result is not); `None` as for `max_abs`.
    pub max_rel: Option<f64>,
    /// Why it does not match (`None`: within the tolerance).
    pub mismatch: Option<Mismatch>,
}

/// A run's tensor outputs compared with a reference file's tensors.
#[derive(Clone, Debug, PartialEq)]
pub struct Comparison {
    /// One entry per output, in order (empty when the counts differ).
    pub outputs: Vec<OutputCheck>,
    /// `Some((outputs, references))` when the counts differ.
    pub count_mismatch: Option<(usize, usize)>,
    /// Whether integer outputs were compared (the reference says which of
    /// its tensors are integer outputs); `false`: tensor outputs only.
    pub with_ints: bool,
    /// Integer outputs the program returned that were not compared, because
    /// the reference does not say where it stores them.
    pub ints_not_compared: usize,
}

impl Comparison {
    /// Whether every output matches.
    pub fn is_ok(&self) -> bool {
        self.count_mismatch.is_none() && self.outputs.iter().all(|o| o.mismatch.is_none())
    }

    /// The first failure, as a sentence naming the output and reference
    /// tensor (`output 0 (expected `out0`): 1 of 512 elements differ ...`).
    pub fn first_error(&self) -> Option<String> {
        if let Some((got, want)) = self.count_mismatch {
            let what = if self.with_ints { "outputs" } else { "tensors" };
            return Some(format!("the program returned {got} {what}, {want} are expected"));
        }
        self.outputs.iter().find_map(|o| {
            o.mismatch
                .as_ref()
                .map(|m| format!("output {} (expected `{}`): {m}", o.index, o.name))
        })
    }

    /// The largest `max_abs` and `max_rel` over all outputs (`None` when no
    /// output could be measured).
    pub fn max_errors(&self) -> Option<(f64, f64)> {
        let worst = |a: f64, b: f64| if a.is_nan() || b.is_nan() { f64::NAN } else { a.max(b) };
        self.outputs
            .iter()
            .fold(None, |acc, o| match (acc, o.max_abs.zip(o.max_rel)) {
                (None, e) => e,
                (Some(a), None) => Some(a),
                (Some((a, r)), Some((a2, r2))) => Some((worst(a, a2), worst(r, r2))),
            })
    }
}

/// The tensors of a reference file that a program's outputs pair with, in
/// file order: the `graph_out<k>` tensors when there are any (bundles add
/// them when the compiled graph returns other tensors than eager), else all.
pub fn reference_outputs(reference: &IndexMap<String, Tensor>) -> Vec<(&str, &Tensor)> {
    let graph: Vec<(&str, &Tensor)> = reference
        .iter()
        .filter(|(k, _)| k.starts_with("graph_out"))
        .map(|(k, t)| (k.as_str(), t))
        .collect();
    if graph.is_empty() {
        reference.iter().map(|(k, t)| (k.as_str(), t)).collect()
    } else {
        graph
    }
}

/// One output of a run as a reference holds it: a tensor, or an integer
/// (a size the program returns, `GraphOutput::Expr`).
#[derive(Clone, Copy, Debug)]
pub enum OutputLeaf<'a> {
    /// A tensor output.
    Tensor(&'a Tensor),
    /// An integer output (booleans as 0/1).
    Int(i64),
}

/// The outputs of a run in the order references store them, as PyTorch's
/// pytree leaves are: lists flattened, `None` left out, tensors and integers
/// kept (other scalars are left out too: references hold neither).
pub fn output_leaves(outputs: &[super::Value<Tensor>]) -> Vec<OutputLeaf<'_>> {
    fn walk<'a>(v: &'a super::Value<Tensor>, out: &mut Vec<OutputLeaf<'a>>) {
        match v {
            super::Value::Tensor(t) => out.push(OutputLeaf::Tensor(t)),
            super::Value::List(items) => items.iter().for_each(|i| walk(i, out)),
            other => {
                if let Some(i) = other.as_int() {
                    out.push(OutputLeaf::Int(i));
                }
            }
        }
    }
    let mut out = Vec::new();
    outputs.iter().for_each(|v| walk(v, &mut out));
    out
}

/// Compares `got` (a run's tensor outputs, in order) with the tensors of
/// `reference` ([`reference_outputs`]) under `tolerance` (as [`compare`]),
/// measuring the largest errors of each output.
pub fn compare_outputs(
    got: &[&Tensor],
    reference: &IndexMap<String, Tensor>,
    tolerance: Option<Tolerance>,
) -> Comparison {
    let leaves: Vec<OutputLeaf<'_>> = got.iter().map(|t| OutputLeaf::Tensor(t)).collect();
    compare_leaves(&leaves, reference, None, tolerance)
}

/// Compares a run's outputs ([`output_leaves`]) with `reference`
/// ([`reference_outputs`]). With `int_outputs` (the reference names holding
/// integer outputs, [`crate::format::bundle_json::BundleMeta::int_outputs`]) every leaf pairs with a
/// reference in order: a tensor with a tensor (as [`compare_outputs`]), an
/// integer with a one-element integer tensor of the same value. Without it,
/// integer leaves are skipped and counted in [`Comparison::ints_not_compared`].
pub fn compare_leaves(
    got: &[OutputLeaf<'_>],
    reference: &IndexMap<String, Tensor>,
    int_outputs: Option<&[String]>,
    tolerance: Option<Tolerance>,
) -> Comparison {
    let ints_not_compared = match int_outputs {
        Some(_) => 0,
        None => got.iter().filter(|l| matches!(l, OutputLeaf::Int(_))).count(),
    };
    let got: Vec<OutputLeaf<'_>> = match int_outputs {
        Some(_) => got.to_vec(),
        None => got
            .iter()
            .copied()
            .filter(|l| matches!(l, OutputLeaf::Tensor(_)))
            .collect(),
    };
    let expected = reference_outputs(reference);
    let mut comparison = Comparison {
        outputs: Vec::new(),
        count_mismatch: None,
        with_ints: int_outputs.is_some(),
        ints_not_compared,
    };
    if got.len() != expected.len() {
        comparison.count_mismatch = Some((got.len(), expected.len()));
        return comparison;
    }
    let is_int = |name: &str| int_outputs.is_some_and(|names| names.iter().any(|n| n == name));
    comparison.outputs = got
        .iter()
        .zip(&expected)
        .enumerate()
        .map(|(index, (g, (name, e)))| {
            let check = |int, errors: Option<(f64, f64)>, mismatch| OutputCheck {
                index,
                int,
                name: name.to_string(),
                max_abs: errors.map(|(a, _)| a),
                max_rel: errors.map(|(_, r)| r),
                mismatch,
            };
            let kind = |got, expected| Some(Mismatch::Kind { got, expected });
            match (g, is_int(name)) {
                (OutputLeaf::Tensor(g), false) => check(None, max_errors(g, e), compare(g, e, tolerance).err()),
                (OutputLeaf::Tensor(_), true) => check(None, None, kind("a tensor", "an integer")),
                (OutputLeaf::Int(v), false) => check(Some(*v), None, kind("an integer", "a tensor")),
                (OutputLeaf::Int(v), true) => match stored_int(e) {
                    Ok(want) => {
                        let d = (*v as f64 - want as f64).abs();
                        let mismatch = (*v != want).then_some(Mismatch::Int {
                            got: *v,
                            expected: want,
                        });
                        check(
                            Some(*v),
                            Some((d, if want == 0 { d } else { d / (want as f64).abs() })),
                            mismatch,
                        )
                    }
                    Err(m) => check(Some(*v), None, Some(m)),
                },
            }
        })
        .collect();
    comparison
}

/// The value of a reference's integer output: a one-element integer tensor.
fn stored_int(t: &Tensor) -> Result<i64, Mismatch> {
    if t.dtype().is_floating() || t.numel() != 1 {
        return Err(Mismatch::Unreadable(format!(
            "an integer output is stored as a one-element integer tensor, the reference holds {}{:?}",
            t.dtype(),
            t.size()
        )));
    }
    match t.to_i64_vec() {
        Ok(v) => v
            .first()
            .copied()
            .ok_or_else(|| Mismatch::Unreadable("empty tensor".into())),
        Err(e) => Err(Mismatch::Unreadable(e.to_string())),
    }
}

/// The largest absolute and relative differences between `got` and
/// `expected` (as [`OutputCheck::max_abs`] and [`OutputCheck::max_rel`]);
/// NaN equals NaN and equal infinities differ by 0. `None` when dtype or
/// shape differ or the data cannot be read.
pub fn max_errors(got: &Tensor, expected: &Tensor) -> Option<(f64, f64)> {
    if got.dtype() != expected.dtype() || got.size() != expected.size() {
        return None;
    }
    if got.dtype().is_complex() {
        return max_errors(&got.view_as_real().ok()?, &expected.view_as_real().ok()?);
    }
    let (g, e) = (got.to_f64_vec().ok()?, expected.to_f64_vec().ok()?);
    let (mut abs, mut rel) = (0.0f64, 0.0f64);
    for (a, b) in g.iter().zip(&e) {
        if a == b || (a.is_nan() && b.is_nan()) {
            continue;
        }
        let d = (a - b).abs();
        let r = if *b == 0.0 { f64::INFINITY } else { d / b.abs() };
        abs = if d.is_nan() || abs.is_nan() {
            f64::NAN
        } else {
            abs.max(d)
        };
        rel = if r.is_nan() || rel.is_nan() {
            f64::NAN
        } else {
            rel.max(r)
        };
    }
    Some((abs, rel))
}

//! A run's mutated inputs compared with eager PyTorch's values after the
//! call: the inputs a program writes (`bundle.json`'s `mutated_inputs`, a KV
//! cache updated in place) are part of its result, judged as its outputs are.

use super::{compare, max_errors, Mismatch, Tolerance};
use crate::exec::Tensor;
use indexmap::IndexMap;

/// One mutated graph input's value after the run, compared with the
/// reference's.
#[derive(Clone, Debug, PartialEq)]
pub struct MutatedCheck {
    /// The graph input (`arg1_1`).
    pub name: String,
    /// The largest `|got - expected|` (as [`super::OutputCheck::max_abs`]).
    pub max_abs: Option<f64>,
    /// The largest relative difference (as [`super::OutputCheck::max_rel`]).
    pub max_rel: Option<f64>,
    /// Why it does not match (`None`: within the tolerance).
    pub mismatch: Option<Mismatch>,
}

/// Every mutated input of a run compared with a reference.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MutationComparison {
    /// One entry per mutated input, in the order the bundle lists them.
    pub inputs: Vec<MutatedCheck>,
}

impl MutationComparison {
    /// Whether every mutated input matches.
    pub fn is_ok(&self) -> bool {
        self.inputs.iter().all(|i| i.mismatch.is_none())
    }

    /// The first failure, as a sentence naming the input
    /// (`mutated input `arg1_1`: 3 of 64 elements differ ...`).
    pub fn first_error(&self) -> Option<String> {
        self.inputs.iter().find_map(|i| {
            i.mismatch
                .as_ref()
                .map(|m| format!("mutated input `{}` after the call: {m}", i.name))
        })
    }
}

/// Compares the values `after` a run (by graph input name: what the run
/// left in its inputs) of each input in `mutated` with `reference` (eager's
/// values after the call, `mutated.safetensors`) under `tolerance` (as
/// [`compare`]). An input missing from either side is a mismatch naming the
/// side.
pub fn compare_mutated(
    after: &IndexMap<String, Tensor>,
    reference: &IndexMap<String, Tensor>,
    mutated: &[String],
    tolerance: Option<Tolerance>,
) -> MutationComparison {
    let inputs = mutated
        .iter()
        .map(|name| {
            let missing = |what: &str| MutatedCheck {
                name: name.clone(),
                max_abs: None,
                max_rel: None,
                mismatch: Some(Mismatch::Unreadable(format!("{what} holds no value for it"))),
            };
            match (after.get(name), reference.get(name)) {
                (None, _) => missing("the run"),
                (_, None) => missing("the reference"),
                (Some(got), Some(want)) => {
                    let errors = max_errors(got, want);
                    MutatedCheck {
                        name: name.clone(),
                        max_abs: errors.map(|(a, _)| a),
                        max_rel: errors.map(|(_, r)| r),
                        mismatch: compare(got, want, tolerance).err(),
                    }
                }
            }
        })
        .collect();
    MutationComparison { inputs }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::DType;

    fn tensor(values: &[f64]) -> Tensor {
        Tensor::from_f64(DType::Float32, values, &[values.len() as i64]).unwrap()
    }

    #[test]
    fn each_mutated_input_is_judged_and_named() {
        let after: IndexMap<String, Tensor> = [
            ("arg1_1".to_string(), tensor(&[1.0, 2.0])),
            ("arg2_1".to_string(), tensor(&[1.0, 5.0])),
        ]
        .into_iter()
        .collect();
        let eager: IndexMap<String, Tensor> = [
            ("arg1_1".to_string(), tensor(&[1.0, 2.0])),
            ("arg2_1".to_string(), tensor(&[1.0, 2.0])),
        ]
        .into_iter()
        .collect();
        let tol = Some(Tolerance { rtol: 1e-5, atol: 1e-5 });
        let names = ["arg1_1".to_string(), "arg2_1".to_string()];
        let c = compare_mutated(&after, &eager, &names, tol);
        assert_eq!(c.inputs.len(), 2);
        assert!(c.inputs[0].mismatch.is_none());
        assert_eq!(c.inputs[1].max_abs, Some(3.0));
        let e = c.first_error().unwrap();
        assert!(
            e.starts_with("mutated input `arg2_1` after the call: 1 of 2 elements differ"),
            "{e}"
        );
        // Only the listed inputs are compared; one the reference lacks is named.
        assert!(compare_mutated(&after, &eager, &names[..1], tol).is_ok());
        let missing = compare_mutated(&after, &IndexMap::new(), &names[..1], tol);
        assert!(
            missing.first_error().unwrap().contains("the reference holds no value"),
            "{missing:?}"
        );
    }
}

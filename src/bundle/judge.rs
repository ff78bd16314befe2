//! Judging a run of a bundle against its references: the one home of
//! which references a run's outputs are compared with, at which tolerance,
//! and of the inputs a program writes. `wrapir run` and `wrapir compare`,
//! the tests and the crate's front-page example call [`judge_run`] (the
//! element-wise comparisons are `exec::compare`'s).
//!
//! * References ([`References::of`]): eager PyTorch's outputs (the
//!   caller's [`JudgeOptions::expect`], else `expected.safetensors`) at the
//!   bundle's tolerance, and for a bundle directory or package Inductor's
//!   compiled outputs (`compiled.safetensors`) at the compiled tolerance; a
//!   bundle's absent file is judged absent, never skipped silently.
//!   [`JudgeOptions::rtol`] / [`JudgeOptions::atol`] override both.
//! * On the CUDA backend ([`JudgeOptions::on_cuda`]), where the program
//!   calls ops that run on wrapir's own kernels rather than PyTorch's
//!   library, the comparison with Inductor's outputs uses the eager
//!   tolerance where that is looser ([`conventions::inductor_tolerance_on_cuda`]).
//! * Mutated inputs (`bundle.json`'s `mutated_inputs`): compared with
//!   eager's values after the call (`mutated.safetensors`) at the eager
//!   tolerance, when the run used the bundle's own inputs and left their new
//!   values in host tensors ([`After::Host`]).

use super::conventions::{self, Loosened};
use super::{Bundle, BundleError, BundleKind};
use crate::exec::compare::{compare_leaves, compare_mutated, output_leaves, Comparison, MutationComparison};
use crate::exec::{Tensor, Value};
use crate::format::bundle_json::Tolerance;
use indexmap::IndexMap;

/// How a run is judged.
#[derive(Clone, Debug, Default)]
pub struct JudgeOptions {
    /// Eager outputs to compare with instead of the bundle's: their name as
    /// reports show it (a file's path) and the tensors.
    pub expect: Option<(String, IndexMap<String, Tensor>)>,
    /// Relative tolerance of floating outputs, overriding the bundle's.
    pub rtol: Option<f64>,
    /// Absolute tolerance of floating outputs, overriding the bundle's.
    pub atol: Option<f64>,
    /// The outputs were computed on the CUDA backend (see the module
    /// documentation).
    pub on_cuda: bool,
}

/// One reference a run's outputs are compared with.
#[derive(Clone, Debug)]
pub struct Reference {
    /// The file or entry, as reports show it.
    pub name: String,
    /// Its tensors; `None`: the bundle has no such file (judged absent).
    pub tensors: Option<IndexMap<String, Tensor>>,
    /// The tolerance of the comparison (`None`: each dtype's default).
    pub tolerance: Option<Tolerance>,
}

/// The references a run of a bundle is judged against.
#[derive(Clone, Debug)]
pub struct References {
    /// Eager PyTorch's outputs (`None` for a program file without `--expect`).
    pub eager: Option<Reference>,
    /// For a bundle directory or package: Inductor's compiled outputs.
    pub compiled: Option<Reference>,
    /// Which reference tensors hold integer outputs (`bundle.json`'s
    /// `int_outputs`; `None`: integer outputs are not compared).
    pub int_outputs: Option<Vec<String>>,
    /// On CUDA: the compiled tolerance loosened to the eager one, and why.
    pub loosened: Option<Loosened>,
    /// The tolerance mutated inputs are compared at (the bundle's eager
    /// one, with the overrides).
    mutated_tolerance: Option<Tolerance>,
}

impl References {
    /// The references of a run of `bundle` (see the module documentation).
    pub fn of(bundle: &Bundle, options: &JudgeOptions) -> Result<References, BundleError> {
        let meta = bundle.meta();
        let overridden = |t: Option<Tolerance>| conventions::with_overrides(t, options.rtol, options.atol);
        let eager = match &options.expect {
            Some((name, tensors)) => Some(Reference {
                name: name.clone(),
                tensors: Some(tensors.clone()),
                tolerance: overridden(meta.tolerance),
            }),
            None if bundle.has(conventions::EXPECTED) => Some(Reference {
                name: bundle.display(conventions::EXPECTED),
                tensors: bundle.expected()?,
                tolerance: overridden(meta.tolerance),
            }),
            // A bundle without eager outputs: judged absent.
            None if bundle.kind() != BundleKind::ProgramFile => Some(Reference {
                name: bundle.display(conventions::EXPECTED),
                tensors: None,
                tolerance: overridden(meta.tolerance),
            }),
            None => None,
        };
        let mut compiled = match bundle.kind() {
            BundleKind::ProgramFile => None,
            BundleKind::Directory | BundleKind::Package => Some(Reference {
                name: bundle.display(conventions::COMPILED),
                tensors: bundle.compiled()?,
                tolerance: overridden(meta.compiled_tolerance),
            }),
        };
        let mut loosened = None;
        if options.on_cuda {
            let eager_tolerance = eager.as_ref().and_then(|r| r.tolerance).or(meta.tolerance);
            if let Some(c) = compiled.as_mut() {
                if let Some(tight) = c.tolerance {
                    loosened = conventions::inductor_tolerance_on_cuda(bundle.program(), tight, eager_tolerance);
                    if let Some(l) = &loosened {
                        c.tolerance = Some(l.tolerance);
                    }
                }
            }
        }
        Ok(References {
            eager,
            compiled,
            int_outputs: meta.int_outputs.clone(),
            loosened,
            mutated_tolerance: overridden(meta.tolerance),
        })
    }
}

/// Where a run left the inputs the program writes.
#[derive(Clone, Copy, Debug)]
pub enum After<'a> {
    /// In these host tensors, by graph input name: the bundle's own inputs
    /// as the run left them.
    Host(&'a IndexMap<String, Tensor>),
    /// The run had inputs of the caller's, not the bundle's (or none).
    Supplied,
    /// On the device, not read back.
    Device,
}

/// One reference's judgement of the outputs.
#[derive(Clone, Debug)]
pub struct Verdict {
    /// Which reference: `eager` or `inductor`.
    pub what: &'static str,
    /// The reference's file or entry, as reports show it.
    pub name: String,
    /// The tolerance compared at (`None`: each dtype's default).
    pub tolerance: Option<Tolerance>,
    /// The comparison; `None`: the reference is absent, nothing compared.
    pub comparison: Option<Comparison>,
}

/// The judgement of the inputs a program writes.
#[derive(Clone, Debug)]
pub enum MutatedVerdict {
    /// The bundle records none (or was exported before they were recorded).
    NotRecorded,
    /// Not compared: eager's values are for the bundle's own inputs, and the
    /// run had others ([`After::Supplied`]); `count` inputs, eager's in `file`.
    Supplied {
        /// Mutated inputs the bundle lists.
        count: usize,
        /// Eager's values after the call, as reports show it.
        file: String,
    },
    /// Not compared: the run left them on the device ([`After::Device`]).
    OnDevice {
        /// Mutated inputs the bundle lists.
        count: usize,
    },
    /// Not compared: the bundle has no `mutated.safetensors` (`file`).
    Absent {
        /// The missing file, as reports show it.
        file: String,
    },
    /// Compared with eager's values in `file` at `tolerance`.
    Compared {
        /// Eager's values after the call, as reports show it.
        file: String,
        /// The tolerance compared at.
        tolerance: Option<Tolerance>,
        /// The comparison, one entry per mutated input.
        comparison: MutationComparison,
    },
}

/// What [`judge_run`] found.
#[derive(Clone, Debug)]
pub struct Judgement {
    /// The outputs against each reference, eager first.
    pub outputs: Vec<Verdict>,
    /// The inputs the program writes.
    pub mutated: MutatedVerdict,
}

impl Judgement {
    /// The first failure, naming the reference it failed against
    /// (`mismatch against expected.safetensors (eager): ...`); an absent
    /// reference is not a failure.
    pub fn first_error(&self) -> Option<String> {
        let outputs = self.outputs.iter().find_map(|v| {
            let message = v.comparison.as_ref()?.first_error()?;
            Some(format!("mismatch against {} ({}): {message}", v.name, v.what))
        });
        outputs.or_else(|| match &self.mutated {
            MutatedVerdict::Compared { file, comparison, .. } => comparison
                .first_error()
                .map(|message| format!("mismatch against {file} (eager): {message}")),
            _ => None,
        })
    }

    /// The verdict against `what` (`eager` or `inductor`), if that reference exists.
    pub fn against(&self, what: &str) -> Option<&Verdict> {
        self.outputs.iter().find(|v| v.what == what)
    }
}

/// Judges `outputs` (a run's outputs of `bundle`'s program) against
/// `references` and the inputs the program writes as the run left them
/// (`after`); see the module documentation.
pub fn judge_run(
    bundle: &Bundle,
    references: &References,
    outputs: &[Value<Tensor>],
    after: After<'_>,
) -> Result<Judgement, BundleError> {
    let got = output_leaves(outputs);
    let refs = [("eager", &references.eager), ("inductor", &references.compiled)];
    let outputs = refs
        .into_iter()
        .filter_map(|(what, reference)| {
            let r = reference.as_ref()?;
            Some(Verdict {
                what,
                name: r.name.clone(),
                tolerance: r.tolerance,
                comparison: r
                    .tensors
                    .as_ref()
                    .map(|t| compare_leaves(&got, t, references.int_outputs.as_deref(), r.tolerance)),
            })
        })
        .collect();
    Ok(Judgement {
        outputs,
        mutated: judge_mutated(bundle, references, after)?,
    })
}

/// The inputs `bundle`'s program writes, as the run left them (`after`),
/// against eager's values after the call.
fn judge_mutated(bundle: &Bundle, references: &References, after: After<'_>) -> Result<MutatedVerdict, BundleError> {
    let meta = bundle.meta();
    let Some(mutated) = meta.mutated_inputs.as_ref().filter(|m| !m.is_empty()) else {
        return Ok(MutatedVerdict::NotRecorded);
    };
    let file = bundle.display(conventions::MUTATED);
    let after = match after {
        After::Device => return Ok(MutatedVerdict::OnDevice { count: mutated.len() }),
        After::Supplied => {
            return Ok(MutatedVerdict::Supplied {
                count: mutated.len(),
                file,
            })
        }
        After::Host(after) => after,
    };
    let Some(eager) = bundle.mutated()? else {
        return Ok(MutatedVerdict::Absent { file });
    };
    let tolerance = references.mutated_tolerance;
    Ok(MutatedVerdict::Compared {
        file,
        tolerance,
        comparison: compare_mutated(after, &eager, mutated, tolerance),
    })
}

//! `bundle.json`: what a bundle says about itself, read by `crate::bundle`
//! (which owns the files) and handed to `crate::exec` as plain values: the
//! tolerances its references are compared within ([`Tolerance`]), the math
//! modes it was compiled under ([`MathModes`]), the CUDA generator's state
//! ([`CudaRngState`]), its integer outputs, where it came from
//! ([`Provenance`]), and which graph inputs are weights and what the user
//! calls its inputs and outputs. `fixtures/inductor/README.md` lists the
//! fields; every field is optional.

use crate::ir::DType;
use indexmap::IndexMap;
use serde::{Deserialize, Serialize};

/// Floating tolerance: `|got - expected| <= atol + rtol * |expected|`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Tolerance {
    /// Relative tolerance.
    pub rtol: f64,
    /// Absolute tolerance.
    pub atol: f64,
}

impl Tolerance {
    /// `torch.testing.assert_close`'s defaults: f64 (1e-7, 1e-7), f32
    /// (1.3e-6, 1e-5), f16 (1e-3, 1e-5), bf16 (1.6e-2, 1e-5); fp8 (0.125,
    /// 1e-5), one step of a 3-bit mantissa. `None` for integers and booleans,
    /// which must be equal.
    pub fn default_for(dtype: DType) -> Option<Tolerance> {
        let (rtol, atol) = match dtype {
            DType::Float64 => (1e-7, 1e-7),
            DType::Float32 => (1.3e-6, 1e-5),
            DType::Float16 => (1e-3, 1e-5),
            DType::Bfloat16 => (1.6e-2, 1e-5),
            d if d.is_floating() => (1.25e-1, 1e-5),
            _ => return None,
        };
        Some(Tolerance { rtol, atol })
    }
}

/// PyTorch's math-mode switches that change library numerics; each library
/// call follows them as PyTorch's own call does. Defaults are PyTorch's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct MathModes {
    /// `torch.backends.cuda.matmul.allow_tf32` (default `false`): fp32 GEMMs may round inputs to TF32.
    pub matmul_allow_tf32: bool,
    /// `torch.backends.cudnn.allow_tf32` (default `true`): fp32 convolutions may use TF32.
    pub cudnn_allow_tf32: bool,
    /// `torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction` (default `true`).
    pub fp16_reduced_precision_reduction: bool,
    /// `torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction` (default `true`).
    pub bf16_reduced_precision_reduction: bool,
}

impl Default for MathModes {
    fn default() -> Self {
        MathModes {
            matmul_allow_tf32: false,
            cudnn_allow_tf32: true,
            fp16_reduced_precision_reduction: true,
            bf16_reduced_precision_reduction: true,
        }
    }
}

/// PyTorch's default CUDA seed (`default_rng_seed_val`).
pub const DEFAULT_SEED: u64 = 67_280_421_310_721;

/// The state of PyTorch's CUDA generator: its seed and Philox offset
/// (`philox_offset_per_thread`), as `torch.cuda.get_rng_state()` holds them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CudaRngState {
    /// The seed.
    pub seed: u64,
    /// The Philox offset (a multiple of 4).
    pub offset: u64,
}

impl Default for CudaRngState {
    fn default() -> Self {
        CudaRngState {
            seed: DEFAULT_SEED,
            offset: 0,
        }
    }
}

/// Where a program came from: `bundle.json`'s `case`, `torch`, `triton` and
/// `device`, as a bundle ([`BundleMeta::provenance`]) and the package packed
/// from it ([`crate::bundle::package::PackageMetadata::provenance`]) both
/// record them. Every field is optional.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Provenance {
    /// `case`: the exporter's case name.
    pub case: Option<String>,
    /// `torch`: the PyTorch version that compiled it (`2.11.0+cu130`).
    pub torch: Option<String>,
    /// `triton`: the Triton version that compiled its kernels.
    pub triton: Option<String>,
    /// `device`: the GPU it was compiled on (`NVIDIA H200`).
    pub device: Option<String>,
}

/// What a bundle's `bundle.json` says about running and checking it
/// (`fixtures/inductor/README.md`). Every field is optional in the file.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct BundleMeta {
    /// `"tolerance": {"atol", "rtol"}`: for the comparison with eager
    /// PyTorch's outputs ([`BundleMeta::EXPECTED`]); `None`: the dtype defaults.
    pub tolerance: Option<Tolerance>,
    /// `"compiled_tolerance": {"atol", "rtol"}`: for the comparison with
    /// Inductor's compiled outputs ([`BundleMeta::COMPILED`]); `None`: the dtype defaults.
    pub compiled_tolerance: Option<Tolerance>,
    /// `"math"`: the math modes the bundle was compiled under (absent keys,
    /// or no `math` at all: PyTorch's defaults). Read into
    /// `CudaOptions::math` by `CudaOptions::for_bundle`.
    pub math: MathModes,
    /// `"int_outputs"`: the reference names (`out1`, `graph_out1`) that hold
    /// an integer output (a size the program returns next to its tensors,
    /// stored as a 0-d int64 tensor) rather than a tensor output. `None`
    /// when the file has no such field (bundles exported before integer
    /// outputs were stored): then only tensor outputs are compared.
    pub int_outputs: Option<Vec<String>>,
    /// `"cuda_rng": {"seed", "offset"}`: the CUDA generator's state as the
    /// compiled call started, which Inductor's seed buffer
    /// (`aten.randint.low_out`) is drawn from; `None`: PyTorch's default
    /// seed at offset 0 (see `crate::exec::random`).
    pub cuda_rng: Option<CudaRngState>,
    /// `"mutated_inputs"`: the graph inputs the program writes (a KV cache
    /// updated in place), whose values after the call are part of its
    /// result: eager PyTorch's are in [`BundleMeta::MUTATED`]. `None` when
    /// the file has no such field (bundles exported before mutations were
    /// recorded); `Some(empty)`: the program writes none of its inputs.
    pub mutated_inputs: Option<Vec<String>>,
    /// `case`, `torch`, `triton`, `device`.
    pub provenance: Provenance,
    /// `graph_inputs`: the compiled graph's input names, in call order.
    pub graph_inputs: Vec<String>,
    /// `weights`: the graph inputs that are the module's parameters or buffers.
    pub weights: Vec<String>,
    /// `weight_names`: each weight's name in the module (`model.fc.weight`).
    pub weight_names: IndexMap<String, String>,
    /// `signature`: the positional parameter names of the exported function
    /// (or module's `forward`), in order.
    pub signature: Vec<String>,
    /// `input_names`: graph input -> the user's name of the input it
    /// receives (`x`, `batch['ids']`, `pair[1]`); weights and symbolic sizes
    /// have none.
    pub input_names: IndexMap<String, String>,
    /// `output_names`: per stored output (`out<k>`), its path in what the
    /// function returned (`output`, `output[0]`, `output['logits']`).
    pub output_names: Vec<String>,
    /// `input_tree`: the pytree structure of the positional inputs, as
    /// `torch.utils._pytree.treespec_dumps` writes it.
    pub input_tree: Option<String>,
    /// `output_tree`: the pytree structure of the output, likewise.
    pub output_tree: Option<String>,
}

/// A `bundle.json` that cannot be read, naming the field.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("bundle.json: {0}")]
pub struct BundleMetaError(pub String);

impl BundleMeta {
    /// The file name of a bundle's metadata.
    pub const FILE: &'static str = "bundle.json";
    /// The file name of eager PyTorch's outputs.
    pub const EXPECTED: &'static str = "expected.safetensors";
    /// The file name of Inductor's compiled outputs (same tensor names as [`BundleMeta::EXPECTED`]).
    pub const COMPILED: &'static str = "compiled.safetensors";
    /// The file name of eager PyTorch's values of the mutated inputs after
    /// the call ([`BundleMeta::mutated_inputs`]), by graph input name.
    pub const MUTATED: &'static str = "mutated.safetensors";

    /// Parses the text of a `bundle.json`. Absent fields take their
    /// defaults; a field that is present but malformed (a tolerance without
    /// numeric `atol` and `rtol`, a `math` entry that is not a boolean) is an
    /// error naming it.
    pub fn from_json(text: &str) -> Result<BundleMeta, BundleMetaError> {
        let json: serde_json::Value =
            serde_json::from_str(text).map_err(|e| BundleMetaError(format!("not JSON: {e}")))?;
        let Some(obj) = json.as_object() else {
            return Err(BundleMetaError("not a JSON object".into()));
        };
        let tolerance = |field: &str| -> Result<Option<Tolerance>, BundleMetaError> {
            match json.get(field) {
                None | Some(serde_json::Value::Null) => Ok(None),
                Some(t) => match (
                    t.get("rtol").and_then(|v| v.as_f64()),
                    t.get("atol").and_then(|v| v.as_f64()),
                ) {
                    (Some(rtol), Some(atol)) => Ok(Some(Tolerance { rtol, atol })),
                    _ => Err(BundleMetaError(format!(
                        "`{field}` must be an object with numbers `atol` and `rtol`, got {t}"
                    ))),
                },
            }
        };
        let math = match json.get("math") {
            None | Some(serde_json::Value::Null) => MathModes::default(),
            Some(m) => serde_json::from_value(m.clone()).map_err(|e| BundleMetaError(format!("`math`: {e}")))?,
        };
        let names = |field: &str, what: &str| -> Result<Option<Vec<String>>, BundleMetaError> {
            match json.get(field) {
                None | Some(serde_json::Value::Null) => Ok(None),
                Some(serde_json::Value::Array(items)) => Ok(Some(
                    items
                        .iter()
                        .map(|v| v.as_str().map(str::to_string))
                        .collect::<Option<Vec<String>>>()
                        .ok_or_else(|| BundleMetaError(format!("`{field}` must be a list of {what}, got {items:?}")))?,
                )),
                Some(other) => Err(BundleMetaError(format!(
                    "`{field}` must be a list of {what}, got {other}"
                ))),
            }
        };
        let int_outputs = names("int_outputs", "tensor names")?;
        let mutated_inputs = names("mutated_inputs", "graph input names")?;
        let cuda_rng =
            match json.get("cuda_rng") {
                None | Some(serde_json::Value::Null) => None,
                Some(r) => Some(serde_json::from_value(r.clone()).map_err(|e| {
                    BundleMetaError(format!("`cuda_rng` must be {{\"seed\": u64, \"offset\": u64}}: {e}"))
                })?),
            };
        let tolerance_ = tolerance("tolerance")?;
        let compiled_tolerance = tolerance("compiled_tolerance")?;
        let string = |field: &str| -> Result<Option<String>, BundleMetaError> {
            match obj.get(field) {
                None | Some(serde_json::Value::Null) => Ok(None),
                Some(serde_json::Value::String(s)) => Ok(Some(s.clone())),
                Some(other) => Err(BundleMetaError(format!("`{field}` must be a string, got {other}"))),
            }
        };
        let strings = |field: &str| -> Result<Vec<String>, BundleMetaError> {
            match obj.get(field) {
                None | Some(serde_json::Value::Null) => Ok(Vec::new()),
                Some(serde_json::Value::Array(items)) => items
                    .iter()
                    .map(|v| v.as_str().map(str::to_string))
                    .collect::<Option<Vec<String>>>()
                    .ok_or_else(|| BundleMetaError(format!("`{field}` must be a list of strings"))),
                Some(other) => Err(BundleMetaError(format!(
                    "`{field}` must be a list of strings, got {other}"
                ))),
            }
        };
        let string_map = |field: &str| -> Result<IndexMap<String, String>, BundleMetaError> {
            match obj.get(field) {
                None | Some(serde_json::Value::Null) => Ok(IndexMap::new()),
                Some(serde_json::Value::Object(m)) => m
                    .iter()
                    .map(|(k, v)| v.as_str().map(|s| (k.clone(), s.to_string())))
                    .collect::<Option<IndexMap<String, String>>>()
                    .ok_or_else(|| BundleMetaError(format!("`{field}` must map graph inputs to strings"))),
                Some(other) => Err(BundleMetaError(format!("`{field}` must be an object, got {other}"))),
            }
        };
        let input_names = string_map("input_names")?;
        // One user name names one graph input.
        let mut seen = std::collections::HashSet::new();
        if let Some(dup) = input_names.values().find(|n| !seen.insert(n.as_str())) {
            return Err(BundleMetaError(format!(
                "`input_names` gives two graph inputs the name `{dup}`"
            )));
        }
        Ok(BundleMeta {
            tolerance: tolerance_,
            compiled_tolerance,
            math,
            int_outputs,
            cuda_rng,
            mutated_inputs,
            provenance: Provenance {
                case: string("case")?,
                torch: string("torch")?,
                triton: string("triton")?,
                device: string("device")?,
            },
            graph_inputs: strings("graph_inputs")?,
            weights: strings("weights")?,
            weight_names: string_map("weight_names")?,
            signature: strings("signature")?,
            input_names,
            output_names: strings("output_names")?,
            input_tree: string("input_tree")?,
            output_tree: string("output_tree")?,
        })
    }

    /// `supplied` keyed by graph input: each key that is the user's name of
    /// a graph input (`input_names`) is replaced by that graph input's name;
    /// other keys (graph input names, constants, anything else) are kept for
    /// the caller to check. An error names a user's name given next to its
    /// graph input's own.
    pub fn by_graph_input<T>(&self, supplied: IndexMap<String, T>) -> Result<IndexMap<String, T>, String> {
        if self.input_names.is_empty() {
            return Ok(supplied);
        }
        let mut out = IndexMap::with_capacity(supplied.len());
        for (key, value) in supplied {
            let graph = match self.graph_input_named(&key) {
                // A graph input's own name wins over a user's name it happens to equal.
                Some(_) if self.input_names.contains_key(&key) => key,
                Some(graph) => graph.to_string(),
                None => key,
            };
            if out.contains_key(&graph) {
                let user = &self.input_names[graph.as_str()];
                return Err(format!(
                    "graph input `{graph}` is given twice: as `{graph}` and by its name `{user}`"
                ));
            }
            out.insert(graph, value);
        }
        Ok(out)
    }

    /// The graph input the user calls `name` (`input_names`), or `None`.
    pub fn graph_input_named(&self, name: &str) -> Option<&str> {
        self.input_names
            .iter()
            .find(|(_, user)| user.as_str() == name)
            .map(|(graph, _)| graph.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_and_errors() {
        let info = BundleMeta::from_json(
            r#"{"case": "m", "torch": "2.11.0", "weights": ["arg1_1"], "weight_names": {"arg1_1": "fc.weight"}}"#,
        )
        .unwrap();
        assert_eq!(info.weights, ["arg1_1"]);
        assert_eq!(info.weight_names["arg1_1"], "fc.weight");
        assert_eq!(info.provenance.case.as_deref(), Some("m"));
        assert_eq!(info.provenance.triton, None);
        assert!(BundleMeta::from_json(r#"{"weights": "arg1_1"}"#)
            .unwrap_err()
            .0
            .contains("`weights`"));
        assert!(BundleMeta::from_json("[]").unwrap_err().0.contains("object"));
    }

    #[test]
    fn user_names_are_optional_and_checked() {
        let info = BundleMeta::from_json(
            r#"{"signature": ["x", "pair"], "input_names": {"arg1_1": "x", "arg0_1": "pair[0]"},
                "output_names": ["output['a']"], "output_tree": "[1, {}]"}"#,
        )
        .unwrap();
        assert_eq!(info.signature, ["x", "pair"]);
        assert_eq!(info.graph_input_named("pair[0]"), Some("arg0_1"));
        assert_eq!(info.graph_input_named("y"), None);
        assert_eq!(info.output_names, ["output['a']"]);
        assert_eq!(info.output_tree.as_deref(), Some("[1, {}]"));
        assert_eq!(info.input_tree, None);
        // Old bundles have none of them.
        let old = BundleMeta::from_json(r#"{"case": "m"}"#).unwrap();
        assert!(old.signature.is_empty() && old.input_names.is_empty() && old.output_names.is_empty());
        // Inputs by the user's names, by graph input names, or both for different inputs.
        let supplied: IndexMap<String, i32> = [("pair[0]", 1), ("x", 2), ("w", 3)]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect();
        let by_graph = info.by_graph_input(supplied).unwrap();
        assert_eq!(by_graph.keys().collect::<Vec<_>>(), ["arg0_1", "arg1_1", "w"]);
        let twice: IndexMap<String, i32> = [("x".to_string(), 1), ("arg1_1".to_string(), 2)].into_iter().collect();
        let e = info.by_graph_input(twice).unwrap_err();
        assert!(
            e.contains("`arg1_1` is given twice: as `arg1_1` and by its name `x`"),
            "{e}"
        );
        let dup = BundleMeta::from_json(r#"{"input_names": {"arg0_1": "x", "arg1_1": "x"}}"#)
            .unwrap_err()
            .0;
        assert!(dup.contains("two graph inputs the name `x`"), "{dup}");
        assert!(BundleMeta::from_json(r#"{"input_names": ["x"]}"#)
            .unwrap_err()
            .0
            .contains("`input_names` must be an object"));
    }
}

//! [`BundleInfo`]: what a bundle's `bundle.json` says about where it came
//! from ([`Provenance`]) and which graph inputs are the model's weights (the
//! fields that [`crate::exec::compare::BundleMeta`] does not hold).

use indexmap::IndexMap;
use serde::{Deserialize, Serialize};

/// Where a program came from: `bundle.json`'s `case`, `torch`, `triton` and
/// `device`, as a bundle ([`BundleInfo::provenance`]) and the package packed
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

/// Provenance and weights from a bundle's `bundle.json`
/// (`fixtures/inductor/README.md` lists the fields). Every field is optional.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BundleInfo {
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

impl BundleInfo {
    /// Reads these fields from the text of a `bundle.json`; an error names
    /// the field that has the wrong type.
    pub fn from_json(text: &str) -> Result<BundleInfo, String> {
        let json: serde_json::Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
        let obj = json.as_object().ok_or("not a JSON object")?;
        let string = |field: &str| -> Result<Option<String>, String> {
            match obj.get(field) {
                None | Some(serde_json::Value::Null) => Ok(None),
                Some(serde_json::Value::String(s)) => Ok(Some(s.clone())),
                Some(other) => Err(format!("`{field}` must be a string, got {other}")),
            }
        };
        let strings = |field: &str| -> Result<Vec<String>, String> {
            match obj.get(field) {
                None | Some(serde_json::Value::Null) => Ok(Vec::new()),
                Some(serde_json::Value::Array(items)) => items
                    .iter()
                    .map(|v| v.as_str().map(str::to_string))
                    .collect::<Option<Vec<String>>>()
                    .ok_or_else(|| format!("`{field}` must be a list of strings")),
                Some(other) => Err(format!("`{field}` must be a list of strings, got {other}")),
            }
        };
        let string_map = |field: &str| -> Result<IndexMap<String, String>, String> {
            match obj.get(field) {
                None | Some(serde_json::Value::Null) => Ok(IndexMap::new()),
                Some(serde_json::Value::Object(m)) => m
                    .iter()
                    .map(|(k, v)| v.as_str().map(|s| (k.clone(), s.to_string())))
                    .collect::<Option<IndexMap<String, String>>>()
                    .ok_or_else(|| format!("`{field}` must map graph inputs to strings")),
                Some(other) => Err(format!("`{field}` must be an object, got {other}")),
            }
        };
        let input_names = string_map("input_names")?;
        // One user name names one graph input.
        let mut seen = std::collections::HashSet::new();
        if let Some(dup) = input_names.values().find(|n| !seen.insert(n.as_str())) {
            return Err(format!("`input_names` gives two graph inputs the name `{dup}`"));
        }
        Ok(BundleInfo {
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
        let info = BundleInfo::from_json(
            r#"{"case": "m", "torch": "2.11.0", "weights": ["arg1_1"], "weight_names": {"arg1_1": "fc.weight"}}"#,
        )
        .unwrap();
        assert_eq!(info.weights, ["arg1_1"]);
        assert_eq!(info.weight_names["arg1_1"], "fc.weight");
        assert_eq!(info.provenance.case.as_deref(), Some("m"));
        assert_eq!(info.provenance.triton, None);
        assert!(BundleInfo::from_json(r#"{"weights": "arg1_1"}"#)
            .unwrap_err()
            .contains("`weights`"));
        assert!(BundleInfo::from_json("[]").unwrap_err().contains("object"));
    }

    #[test]
    fn user_names_are_optional_and_checked() {
        let info = BundleInfo::from_json(
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
        let old = BundleInfo::from_json(r#"{"case": "m"}"#).unwrap();
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
        let dup = BundleInfo::from_json(r#"{"input_names": {"arg0_1": "x", "arg1_1": "x"}}"#).unwrap_err();
        assert!(dup.contains("two graph inputs the name `x`"), "{dup}");
        assert!(BundleInfo::from_json(r#"{"input_names": ["x"]}"#)
            .unwrap_err()
            .contains("`input_names` must be an object"));
    }
}

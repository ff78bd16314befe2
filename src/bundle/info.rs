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
        let weight_names = match obj.get("weight_names") {
            None | Some(serde_json::Value::Null) => IndexMap::new(),
            Some(serde_json::Value::Object(m)) => m
                .iter()
                .map(|(k, v)| v.as_str().map(|s| (k.clone(), s.to_string())))
                .collect::<Option<IndexMap<String, String>>>()
                .ok_or("`weight_names` must map graph inputs to strings")?,
            Some(other) => return Err(format!("`weight_names` must be an object, got {other}")),
        };
        Ok(BundleInfo {
            provenance: Provenance {
                case: string("case")?,
                torch: string("torch")?,
                triton: string("triton")?,
                device: string("device")?,
            },
            graph_inputs: strings("graph_inputs")?,
            weights: strings("weights")?,
            weight_names,
        })
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
}

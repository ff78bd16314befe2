//! Rank sets: the bundles of the ranks of one multi-rank program, and the
//! process groups they run under (`ranks.json`, written by the exporter's
//! `export_ranks`):
//!
//! ```text
//! DIR/ranks.json   {"format_version": 1, "world_size": 2, "backend": "gloo",
//!                   "ranks": ["rank0", "rank1"], "groups": {"0": [0, 1]}}
//! DIR/rank0/       a bundle (program.json, kernels/, inputs.safetensors, ...)
//! DIR/rank1/
//! ```

use super::{Bundle, BundleError};
use crate::exec::collective::ProcessGroups;
use crate::Limits;
use indexmap::IndexMap;
use std::path::{Path, PathBuf};

/// The layout file of a rank set.
pub const RANKS_FILE: &str = "ranks.json";

/// The format version of `ranks.json` this wrapir reads.
pub const RANKS_FORMAT_VERSION: u64 = 1;

/// The largest world size a rank set may declare (each rank runs on a thread).
pub const MAX_WORLD_SIZE: usize = 1024;

/// An opened rank set: its process groups and one [`Bundle`] per rank, in
/// rank order.
#[derive(Clone, Debug)]
pub struct RankSet {
    path: PathBuf,
    groups: ProcessGroups,
    backend: Option<String>,
    ranks: Vec<Bundle>,
}

impl RankSet {
    /// Whether `path` is a rank set directory (it holds `ranks.json`).
    pub fn is_rank_set(path: &Path) -> bool {
        path.join(RANKS_FILE).is_file()
    }

    /// Opens the rank set directory `path` (see the module docs); every rank's
    /// bundle is opened within `limits`. Errors name `ranks.json` and the field.
    pub fn open(path: &Path, limits: &Limits) -> Result<RankSet, BundleError> {
        let file = path.join(RANKS_FILE);
        let name = file.display().to_string();
        let meta = |message: String| BundleError::Meta {
            name: name.clone(),
            message,
        };
        let text = crate::limits::files::read_to_string(&file, limits.max_file_bytes)?;
        let json: serde_json::Value = serde_json::from_str(&text).map_err(|e| meta(format!("not JSON: {e}")))?;
        let version = json.get("format_version").and_then(serde_json::Value::as_u64);
        if version != Some(RANKS_FORMAT_VERSION) {
            return Err(meta(format!(
                "`format_version` is {}, this wrapir reads {RANKS_FORMAT_VERSION}",
                json.get("format_version")
                    .map_or("missing".to_string(), |v| v.to_string())
            )));
        }
        let world_size = json
            .get("world_size")
            .and_then(serde_json::Value::as_u64)
            .and_then(|n| usize::try_from(n).ok())
            .filter(|n| (1..=MAX_WORLD_SIZE).contains(n))
            .ok_or_else(|| meta(format!("`world_size` must be an integer from 1 to {MAX_WORLD_SIZE}")))?;
        let dirs: Vec<String> = match json.get("ranks") {
            Some(serde_json::Value::Array(v)) => v
                .iter()
                .map(|d| d.as_str().map(str::to_string))
                .collect::<Option<_>>()
                .ok_or_else(|| meta("`ranks` must list directory names".into()))?,
            _ => return Err(meta("`ranks` must list one directory per rank".into())),
        };
        if dirs.len() != world_size {
            return Err(meta(format!(
                "`ranks` lists {} directories for a world of {world_size}",
                dirs.len()
            )));
        }
        let mut groups = IndexMap::new();
        match json.get("groups") {
            Some(serde_json::Value::Object(map)) => {
                for (group, ranks) in map {
                    let ranks: Vec<usize> = ranks
                        .as_array()
                        .and_then(|v| {
                            v.iter()
                                .map(|r| r.as_u64().and_then(|r| usize::try_from(r).ok()))
                                .collect()
                        })
                        .ok_or_else(|| meta(format!("group `{group}` must list ranks")))?;
                    groups.insert(group.clone(), ranks);
                }
            }
            None => {}
            Some(_) => return Err(meta("`groups` must map group names to rank lists".into())),
        }
        let groups = if groups.is_empty() {
            ProcessGroups::world(world_size)
        } else {
            ProcessGroups { world_size, groups }
        };
        groups.check().map_err(meta)?;
        let backend = json
            .get("backend")
            .and_then(serde_json::Value::as_str)
            .map(str::to_string);
        let mut ranks = Vec::with_capacity(world_size);
        for dir in &dirs {
            let plain = !dir.is_empty() && Path::new(dir).components().count() == 1 && !dir.contains("..");
            if !plain {
                return Err(meta(format!(
                    "rank directory `{dir}` must be a plain name inside the rank set"
                )));
            }
            ranks.push(Bundle::open_with_limits(&path.join(dir), limits)?);
        }
        Ok(RankSet {
            path: path.to_path_buf(),
            groups,
            backend,
            ranks,
        })
    }

    /// The rank set's directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The process groups.
    pub fn groups(&self) -> &ProcessGroups {
        &self.groups
    }

    /// The `torch.distributed` backend the ranks were exported with (`gloo`, `nccl`).
    pub fn backend(&self) -> Option<&str> {
        self.backend.as_deref()
    }

    /// The ranks' bundles, in rank order.
    pub fn ranks(&self) -> &[Bundle] {
        &self.ranks
    }

    /// Checks that the ranks' programs issue the same collectives in the same
    /// order ([`crate::ir::collectives::check_ranks`]), and that every group a
    /// program names is one of the rank set's with the size it states.
    pub fn check(&self) -> Result<(), String> {
        let labels: Vec<String> = (0..self.ranks.len()).map(|r| format!("rank{r}")).collect();
        let programs: Vec<(&str, &crate::ir::Program)> = labels
            .iter()
            .map(String::as_str)
            .zip(self.ranks.iter().map(Bundle::program))
            .collect();
        crate::ir::collectives::check_ranks(&programs).map_err(|e| e.to_string())?;
        for (label, program) in &programs {
            for c in crate::ir::collectives::collectives(program).map_err(|e| format!("{label}: {e}"))? {
                let Some(group) = &c.group else { continue };
                let members = self.groups.groups.get(group).ok_or_else(|| {
                    format!(
                        "{label}: graph `{}`, line {}: `{}` names process group `{group}`, which {RANKS_FILE} does not declare",
                        c.graph,
                        c.line + 1,
                        c.op
                    )
                })?;
                if let Some(size) = c.group_size {
                    if usize::try_from(size).ok() != Some(members.len()) {
                        return Err(format!(
                            "{label}: graph `{}`, line {}: `{}` states group size {size}, but process group `{group}` has {} ranks",
                            c.graph,
                            c.line + 1,
                            c.op,
                            members.len()
                        ));
                    }
                }
            }
        }
        Ok(())
    }
}

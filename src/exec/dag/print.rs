//! The DAG as text: its summary, nodes and edges with their reasons
//! (`wrapir check --dag`).

use super::{Access, Dag, Edge, Reason, Storage, Summary};
use std::fmt;

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} nodes ({} do device work), {} edges; critical path {} work nodes, width {}",
            self.nodes, self.work, self.edges, self.critical_path, self.width
        )
    }
}

impl Dag {
    /// The name of a storage, for messages.
    pub fn storage_name(&self, s: Storage) -> String {
        match s {
            Storage::External => "inputs and constants".into(),
            Storage::Random => "random state".into(),
            Storage::World => "unknown effects".into(),
            Storage::Node(i) => match self.nodes.get(i) {
                Some(n) => format!("storage of `{}`", n.name),
                None => format!("storage of node {i}"),
            },
        }
    }

    /// One edge's reason as text.
    pub fn reason_text(&self, e: &Edge) -> String {
        let name = |i: usize| self.nodes.get(i).map_or("?", |n| n.name.as_str());
        match &e.reason {
            Reason::Value => format!("value `{}`", name(e.from)),
            Reason::Storage { access, storage, via } => {
                let access = match access {
                    Access::Raw => "RAW",
                    Access::War => "WAR",
                    Access::Waw => "WAW",
                };
                let via = match via {
                    Some(v) => format!(" through `{}`", name(*v)),
                    None => String::new(),
                };
                format!("{access} {}{via}", self.storage_name(*storage))
            }
            Reason::Symbol(s) => format!("symbol `{s}` bound, read"),
            Reason::Join(s) => format!("symbol `{s}` bound, joined with the binders of its run"),
            Reason::InputOrder => "input order".into(),
        }
    }
}

impl fmt::Display for Dag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "dag: {}", self.summary())?;
        let depth = self.depths();
        writeln!(f, "nodes (position, depth, * = device work):")?;
        for (i, n) in self.nodes.iter().enumerate() {
            let mark = if n.work { '*' } else { ' ' };
            writeln!(f, "  {i:>4} {:>4} {mark} {} = {}", depth[i], n.name, n.what)?;
        }
        writeln!(f, "edges:")?;
        for e in &self.edges {
            writeln!(f, "  {:>4} -> {:<4} {}", e.from, e.to, self.reason_text(e))?;
        }
        Ok(())
    }
}

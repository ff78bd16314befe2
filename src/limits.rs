//! Explicit resource limits: what bad input may cost before it becomes an error.
//!
//! Every parser, checker, lowering and backend that walks user data bounds its
//! work by a [`Limits`] the caller passes (the plain entry points use
//! [`Limits::default`]). Exceeding one is an error ([`LimitExceeded`]) that
//! names the limit, the value that exceeded it, and the `wrapir` flag that
//! raises it. The library reads no system state: the CLI reads the host's
//! physical memory and passes it in as the memory limits.

use std::fmt;

/// Resource limits of one parse, check, lowering or run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Most bytes one tensor allocation (a buffer, an op's result, a placed
    /// input) may take on the host and meta backends. Default
    /// [`Limits::DEFAULT_MEMORY_BYTES`]; the CLI uses the host's physical memory.
    pub max_alloc_bytes: u64,
    /// Most bytes a whole run may hold at once (live tensors of the host and
    /// meta backends). Default [`Limits::DEFAULT_MEMORY_BYTES`]; the CLI uses the
    /// host's physical memory.
    pub max_run_bytes: u64,
    /// Deepest nesting of the text form and of values in the IR: nested list
    /// arguments, nested `device` blocks. Default 256.
    pub max_text_depth: usize,
    /// Longest chain of subgraphs calling subgraphs (`cond`/`while_loop`
    /// branches and bodies). Default 64.
    pub max_subgraph_depth: usize,
    /// Most iterations one `while_loop` may run before the run stops with an
    /// error. Default 100,000.
    pub loop_fuel: u64,
    /// Most diagnostics one validation reports; the rest are counted in one
    /// final diagnostic. Default 1,000.
    pub max_diagnostics: usize,
    /// Most outputs one multi-output value may have: a `get` index at or past
    /// it is an error (the C++ lowerings declare one handle per output).
    /// Default 65,536.
    pub max_outputs: usize,
    /// Most subgraph bodies the C++ lowerings may inline: they write a
    /// subgraph's code at every line that runs it, so nested conditionals
    /// sharing a branch grow exponentially. Default 4,096.
    pub max_inlined_subgraphs: usize,
    /// The prover's limits (e-nodes, iterations, time), which also bound the
    /// preprocessing of its facts.
    pub prover: crate::sym::egraph::Limits,
}

impl Limits {
    /// The default memory limits of the library: 16 GiB.
    pub const DEFAULT_MEMORY_BYTES: u64 = 16 << 30;

    /// Both memory limits set to `bytes`.
    pub fn with_memory(self, bytes: u64) -> Self {
        Limits {
            max_alloc_bytes: bytes,
            max_run_bytes: bytes,
            ..self
        }
    }

    /// The value of limit `which` (sizes as `u64`).
    pub fn max(&self, which: Limit) -> u64 {
        match which {
            Limit::AllocBytes => self.max_alloc_bytes,
            Limit::RunBytes => self.max_run_bytes,
            Limit::TextDepth => self.max_text_depth as u64,
            Limit::SubgraphDepth => self.max_subgraph_depth as u64,
            Limit::LoopFuel => self.loop_fuel,
            Limit::Diagnostics => self.max_diagnostics as u64,
            Limit::Outputs => self.max_outputs as u64,
            Limit::InlinedSubgraphs => self.max_inlined_subgraphs as u64,
        }
    }

    /// An error when `value` exceeds `limit` of kind `which`.
    pub fn check(which: Limit, value: u64, limit: u64, what: impl Into<String>) -> Result<(), LimitExceeded> {
        if value > limit {
            Err(LimitExceeded {
                limit: which,
                value,
                max: limit,
                what: what.into(),
            })
        } else {
            Ok(())
        }
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_alloc_bytes: Self::DEFAULT_MEMORY_BYTES,
            max_run_bytes: Self::DEFAULT_MEMORY_BYTES,
            max_text_depth: 256,
            max_subgraph_depth: 64,
            loop_fuel: 100_000,
            max_diagnostics: 1_000,
            max_outputs: 65_536,
            max_inlined_subgraphs: 4_096,
            prover: crate::sym::egraph::Limits::default(),
        }
    }
}

/// Which limit of [`Limits`] was exceeded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Limit {
    /// [`Limits::max_alloc_bytes`].
    AllocBytes,
    /// [`Limits::max_run_bytes`].
    RunBytes,
    /// [`Limits::max_text_depth`].
    TextDepth,
    /// [`Limits::max_subgraph_depth`].
    SubgraphDepth,
    /// [`Limits::loop_fuel`].
    LoopFuel,
    /// [`Limits::max_diagnostics`].
    Diagnostics,
    /// [`Limits::max_outputs`].
    Outputs,
    /// [`Limits::max_inlined_subgraphs`].
    InlinedSubgraphs,
}

impl Limit {
    /// The field of [`Limits`].
    pub fn name(self) -> &'static str {
        match self {
            Limit::AllocBytes => "max_alloc_bytes",
            Limit::RunBytes => "max_run_bytes",
            Limit::TextDepth => "max_text_depth",
            Limit::SubgraphDepth => "max_subgraph_depth",
            Limit::LoopFuel => "loop_fuel",
            Limit::Diagnostics => "max_diagnostics",
            Limit::Outputs => "max_outputs",
            Limit::InlinedSubgraphs => "max_inlined_subgraphs",
        }
    }

    /// The `wrapir` flag that sets it.
    pub fn flag(self) -> &'static str {
        match self {
            Limit::AllocBytes => "--max-alloc-bytes",
            Limit::RunBytes => "--max-run-bytes",
            Limit::TextDepth => "--max-depth",
            Limit::SubgraphDepth => "--max-subgraph-depth",
            Limit::LoopFuel => "--loop-fuel",
            Limit::Diagnostics => "--max-diagnostics",
            Limit::Outputs => "--max-outputs",
            Limit::InlinedSubgraphs => "--max-inlined-subgraphs",
        }
    }
}

impl fmt::Display for Limit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A limit was exceeded: `what` needs `value`, the limit is `max`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{what}: {value} exceeds the limit {limit} = {max} (raise it with {})", limit.flag())]
pub struct LimitExceeded {
    /// The limit.
    pub limit: Limit,
    /// The value that exceeded it (saturated at `u64::MAX`).
    pub value: u64,
    /// The limit's value.
    pub max: u64,
    /// What needed it (`allocating buf0 f32[1099511627776][1]`).
    pub what: String,
}

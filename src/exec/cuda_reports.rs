//! The CUDA backend's reports: plain data that callers read in every build,
//! with the `cuda` feature (`exec::cuda`) or without it (the stand-in, whose
//! entry points never produce them). Re-exported from `exec::cuda`.

/// Where a backend's one-time start-up work went (wall time): opening the
/// device, loading kernel images, compiling the built-in kernels, creating
/// the cuBLAS handle. Each happens at first use, so a program that launches
/// no built-in kernel pays no NVRTC compilation and one with no matmul
/// creates no cuBLAS handle.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct LoadTimings {
    /// `cuInit`, the primary context and the stream (`CudaBackend::new`).
    pub device_open: std::time::Duration,
    /// Reading cubin files and `cuModuleLoadData` (and function look-ups).
    pub module_load: std::time::Duration,
    /// Kernel image files loaded.
    pub modules: usize,
    /// NVRTC compilation and loading of the built-in kernels (0 when none ran).
    pub builtin_load: std::time::Duration,
    /// The first cuBLAS call: handle creation (library load) and its first GEMM (0 when none ran).
    pub blas_first_call: std::time::Duration,
}

/// A CUDA library's version as the library itself reports it
/// (`exec::cuda::library_versions`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LibraryVersion {
    /// The library (`CUDA driver`, `cuBLAS`, `cuDNN`, `NCCL`).
    pub library: &'static str,
    /// Its version (`12.8`, `9.10.2`), or `None` when it was not found.
    pub version: Option<String>,
}

/// The raw launch floor measured in this process.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LaunchFloor {
    /// Host µs per `cuLaunchKernel` of an empty kernel (median of repeats).
    pub launch_us: f64,
    /// µs per kernel of replaying one captured graph of `kernels` empty
    /// launches (median of repeats, until the stream is idle).
    pub graph_us: f64,
    /// Host µs of one 8-byte device-to-host read on an idle stream (median):
    /// the least a replay's device read (an unbacked size, a `cond`
    /// predicate) costs.
    pub read_us: f64,
    /// Launches per loop and per graph.
    pub kernels: usize,
    /// How the empty kernel was compiled (`nvrtc`, or `ptx` when NVRTC is missing).
    pub compiler: &'static str,
}

/// The host cost of one kind of library call in a recording
/// (`Prepared::library_costs`): each call made on its own in a loop.
#[derive(Clone, Debug, PartialEq)]
pub struct LibraryCost {
    /// The library (`cuBLAS`, `cuBLASLt`, `cuDNN`).
    pub library: &'static str,
    /// The op the calls serve, and what part of it where it takes several.
    pub op: String,
    /// Calls of this kind per replay.
    pub calls: usize,
    /// Host µs of all of them per replay (sum of each call's median).
    pub us: f64,
}

/// How a replay ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Replay {
    /// Every operation ran; the outputs hold this call's results.
    Done,
    /// The `read`-th device read returned another value than when recorded:
    /// the rest of the recording does not apply and the outputs are not valid.
    Diverged {
        /// Index of the read among the recording's reads.
        read: usize,
    },
}

/// How CUDA graph replay treats a recording's device reads (unbacked sizes,
/// `cond` and `while_loop` predicates, `item()`): [`CudaOptions::graph_reads`]
/// (`exec::cuda`).
///
/// A recording with reads replays either as **one graph**, each read checked
/// on the device by a one-thread kernel that opens the conditional IF node
/// holding the rest (the host waits once, for a status word, at the end), or
/// as **segments**: one graph per stretch between reads, the host reading
/// each value between them. On the H200 a conditional node costs about as
/// much device time as a host read costs round trip (8-10 µs), so one graph
/// wins once a recording has a few reads: a recording with one read ran 1.6x
/// slower as one graph, two reads about even, six and nine reads 15-27%
/// faster (`wrapir bench --graphs --graph-reads`, `benches/RESULTS.md`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum GraphReads {
    /// One graph where the recording has at least
    /// [`GraphReads::AUTO_MIN_READS`] device reads and the driver has
    /// conditional nodes (CUDA 12.4 or newer), else segments.
    #[default]
    Auto,
    /// One graph whenever the driver has conditional nodes.
    OneGraph,
    /// Always segments with host reads between them.
    Segments,
}

impl GraphReads {
    /// The fewest device reads for which [`GraphReads::Auto`] makes one graph.
    pub const AUTO_MIN_READS: usize = 3;

    /// Each choice's command-line name.
    pub const NAMES: [(&'static str, GraphReads); 3] = [
        ("auto", GraphReads::Auto),
        ("one-graph", GraphReads::OneGraph),
        ("segments", GraphReads::Segments),
    ];
}

impl std::str::FromStr for GraphReads {
    type Err = String;

    /// One of [`GraphReads::NAMES`].
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        named(s, &Self::NAMES)
    }
}

/// The value named `s` among `names` (command-line names and their
/// values); otherwise an error listing the names.
fn named<T: Copy>(s: &str, names: &[(&str, T)]) -> Result<T, String> {
    if let Some((_, value)) = names.iter().find(|(name, _)| *name == s) {
        return Ok(*value);
    }
    let list: Vec<&str> = names.iter().map(|(name, _)| *name).collect();
    let expected = match list.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} or {last}", rest.join(", ")),
        _ => list.join(", "),
    };
    Err(format!("`{s}`: expected {expected}"))
}

/// How CUDA graph replay orders a recording's operations:
/// [`CudaOptions::graph_streams`] (`exec::cuda`).
///
/// **Single**: one chain, as the program lists them (what Inductor's
/// wrapper launches on its one stream). **Concurrent**: each operation
/// depends only on those the program's dependency DAG
/// ([`crate::exec::dag`]) orders it after, so independent kernels (the
/// projections of an attention block, a mixture of experts' experts, the
/// branches of an inception block) run at the same time; the arena is
/// then planned so that buffers of operations that may overlap never share
/// memory (it may grow: `Prepared::arena_bytes` against
/// `Prepared::single_stream_arena_bytes`). **Auto**: recorded as for
/// `Concurrent`, then each graph segment is captured both ways when it is
/// first replayed, both are timed on the device, and the concurrent graph
/// is kept only where it is measurably faster (`Prepared::stream_choices`
/// says what was measured and chosen); a recording that writes its inputs
/// is not replayed for timing and stays one chain. Direct (non-graph)
/// replay runs one stream either way. The backend's default is `Single`;
/// the serving API (`Model`) defaults to `Auto`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum GraphStreams {
    /// One chain of operations in program order.
    #[default]
    Single,
    /// Operations ordered by the program's dependency DAG.
    Concurrent,
    /// Concurrent per graph segment where measured faster, else one chain.
    Auto,
}

impl std::str::FromStr for GraphStreams {
    type Err = String;

    /// One of [`GraphStreams::NAMES`].
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        named(s, &Self::NAMES)
    }
}

impl GraphStreams {
    /// Whether the recording is planned for concurrent replay (its
    /// operations get their DAG dependencies and the arena keeps buffers of
    /// operations that may overlap apart): `Concurrent` and `Auto`.
    pub fn plans_concurrency(self) -> bool {
        matches!(self, GraphStreams::Concurrent | GraphStreams::Auto)
    }

    /// Each choice's command-line name.
    pub const NAMES: [(&'static str, GraphStreams); 3] = [
        ("single", GraphStreams::Single),
        ("concurrent", GraphStreams::Concurrent),
        ("auto", GraphStreams::Auto),
    ];
}

/// What [`GraphStreams::Auto`] measured for one graph segment and chose.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StreamChoice {
    /// Operations in the segment.
    pub ops: usize,
    /// Device µs of one replay of the segment as one chain (median).
    pub single_us: f64,
    /// Device µs of one replay of the segment ordered by the DAG (median).
    pub concurrent_us: f64,
    /// Whether the concurrent graph was kept: it was faster than the chain
    /// by more than the noise margin ([`StreamChoice::MARGIN`]).
    pub concurrent: bool,
}

impl StreamChoice {
    /// The concurrent graph is kept only below this fraction of the
    /// chain's time, so that noise never picks a slower graph.
    pub const MARGIN: f64 = 0.98;
}

/// The device time of a recording's operations one by one, and its
/// critical-path bound (`Prepared::critical_path`), with the chain that
/// sets the bound: what a profile of concurrent replay needs to say where
/// the time goes.
#[derive(Clone, Debug, PartialEq)]
pub struct CriticalPath {
    /// The sum of every operation's device µs (what one stream needs at
    /// least). Each operation is timed as a graph of
    /// [`CriticalPath::REPEATS`] copies of itself replayed back to back,
    /// divided by the copies: its device time inside a graph, without the
    /// launch and event overhead of timing it alone.
    pub sum_us: f64,
    /// The longest chain of dependent operations (the program's DAG; one
    /// chain for a recording that is not concurrent), each at its device
    /// µs as above: the critical-path bound of concurrent replay.
    pub critical_us: f64,
    /// Operations timed.
    pub ops: usize,
    /// The operations of that longest chain, in order.
    pub chain: Vec<ChainStep>,
    /// The chain's operations alone, captured in order as one graph and
    /// replayed (median µs): the bound plus what each dependency costs the
    /// device between two operations (the next one cannot start before the
    /// previous one's last block ends). Concurrent replay above this is
    /// what the operations off the chain take from the chain (SMs, memory
    /// bandwidth) or could not hide.
    pub chain_replay_us: f64,
}

/// One operation of the critical path.
#[derive(Clone, Debug, PartialEq)]
pub struct ChainStep {
    /// Its index among the recording's operations (replay order).
    pub op: usize,
    /// What it is: the kernel's name, or the extern op and its library.
    pub what: String,
    /// Its device µs, timed as in [`CriticalPath::sum_us`].
    pub us: f64,
}

impl CriticalPath {
    /// Copies of an operation in the graph that times it.
    pub const REPEATS: usize = 16;
}

#[cfg(test)]
mod tests {
    use super::{GraphReads, GraphStreams};

    /// The command-line names parse; another is an error listing them.
    #[test]
    fn graph_choices_parse_from_their_names() {
        assert_eq!("one-graph".parse::<GraphReads>(), Ok(GraphReads::OneGraph));
        assert_eq!(
            "graph".parse::<GraphReads>(),
            Err("`graph`: expected auto, one-graph or segments".to_string())
        );
        assert_eq!("concurrent".parse::<GraphStreams>(), Ok(GraphStreams::Concurrent));
        assert_eq!(
            "".parse::<GraphStreams>(),
            Err("``: expected single, concurrent or auto".to_string())
        );
    }
}

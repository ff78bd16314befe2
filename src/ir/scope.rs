//! Scopes inside a graph: the user streams of a device guard and the stream,
//! memory-pool and kernel-profile blocks of [`super::Line::EnterScope`].

use serde::{Deserialize, Serialize};
use std::fmt;

/// The user streams of a device guard (`EnterDeviceContextManagerWithStreamInfoLine`):
/// side stream `k` (1-based) is the user object `user_objects[k - 1]` of the
/// compiled region (`stream1 = _get_stream_by_index(3)`); stream 0 is the
/// device's current stream.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceStreams {
    /// The user-object index of each side stream, in stream order.
    pub user_objects: Vec<u32>,
    /// Whether the guard (re)reads the device's current stream
    /// (`default_stream = torch.cuda.current_stream()`); Inductor skips it
    /// when the previous guard was on the same device.
    #[serde(default = "yes", skip_serializing_if = "is_true")]
    pub reads_current_stream: bool,
}

/// The `torch.ops.streams.*` event and synchronisation ops Inductor 2.12+
/// keeps as extern calls in programs with user streams, by registry key
/// (`streams.<name>`). Their arguments are user-object indices (events,
/// streams) or a device index. They order work between streams and compute
/// nothing: run in program order on one stream (what every wrapir executor
/// and C++ wrapper does), each is already satisfied.
pub const STREAM_OPS: [&str; 6] = [
    "streams.record_event",
    "streams.wait_event",
    "streams.synchronize_event",
    "streams.synchronize_stream",
    "streams.synchronize_device",
    "streams.wait_stream",
];

/// The registry key (`streams.record_event`) of an extern call's op when it
/// is one of [`STREAM_OPS`]: `op` as the program names it
/// (`torch.ops.streams.record_event.default`) or as a key.
pub fn stream_op(op: &str) -> Option<&'static str> {
    let s = op.strip_prefix("torch.ops.").unwrap_or(op);
    let name = s.strip_prefix("streams.")?;
    let name = name.split('.').next().unwrap_or(name);
    STREAM_OPS
        .iter()
        .copied()
        .find(|k| k.strip_prefix("streams.") == Some(name))
}

/// What a [`Line::EnterScope`] opens.
///
/// None of them changes what the program computes: Inductor orders work
/// across streams with events (`torch.ops.streams.*` extern calls), so
/// running every line in program order on one stream is one of the
/// schedules the program allows, and is what wrapir's executors do.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "scope", rename_all = "snake_case")]
pub enum Scope {
    /// The lines run on a stream of the enclosing device guard
    /// (`EnterCudaStreamContextLine`: `with stream1:`).
    Stream {
        /// The stream's index in the guard's [`DeviceStreams`] (0: the
        /// current stream).
        stream: u32,
    },
    /// Allocations inside come from a user's memory pool
    /// (`EnterCudaMemPoolContextLine`: `with torch.cuda.use_mem_pool(
    /// get_external_object_by_index(P), device=D):`).
    MemPool {
        /// The pool's user-object index.
        pool: u32,
        /// The device.
        device_index: u32,
    },
    /// A C++ wrapper's kernel-profiling block (`EnterKernelProfileScopeLine`:
    /// a `{ ... }` around one kernel call and its record-function handle).
    KernelProfile,
}

/// The kind of a [`Scope`], which a [`Line::ExitScope`] names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ScopeKind {
    /// [`Scope::Stream`].
    Stream,
    /// [`Scope::MemPool`].
    MemPool,
    /// [`Scope::KernelProfile`].
    KernelProfile,
}

impl Scope {
    /// Its kind.
    pub fn kind(&self) -> ScopeKind {
        match self {
            Scope::Stream { .. } => ScopeKind::Stream,
            Scope::MemPool { .. } => ScopeKind::MemPool,
            Scope::KernelProfile => ScopeKind::KernelProfile,
        }
    }

    /// The keyword of its block in the text form (`stream 1 {`).
    pub fn keyword(&self) -> &'static str {
        self.kind().keyword()
    }
}

impl ScopeKind {
    /// The keyword of its block in the text form (`stream`, `mem_pool`,
    /// `profile_scope`).
    pub fn keyword(self) -> &'static str {
        match self {
            ScopeKind::Stream => "stream",
            ScopeKind::MemPool => "mem_pool",
            ScopeKind::KernelProfile => "profile_scope",
        }
    }

    /// The keyword of the bare exit line (`exit_stream`), what the text form
    /// writes when no block pairs it.
    pub fn exit_keyword(self) -> &'static str {
        match self {
            ScopeKind::Stream => "exit_stream",
            ScopeKind::MemPool => "exit_mem_pool",
            ScopeKind::KernelProfile => "exit_profile_scope",
        }
    }

    /// Every kind, in declaration order.
    pub const ALL: [ScopeKind; 3] = [ScopeKind::Stream, ScopeKind::MemPool, ScopeKind::KernelProfile];
}

impl fmt::Display for ScopeKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ScopeKind::Stream => "stream",
            ScopeKind::MemPool => "memory pool",
            ScopeKind::KernelProfile => "kernel-profile",
        })
    }
}

fn is_true(b: &bool) -> bool {
    *b
}

fn yes() -> bool {
    true
}

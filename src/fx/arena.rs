//! The node arena of a [`super::Graph`].

use super::Node;
use std::fmt;

/// Nodes per arena chunk (a power of two). A chunk (about 64 KiB) stays
/// below the allocator's threshold for mapping fresh pages, so the chunks
/// of a graph that was dropped are reused by the next one instead of being
/// faulted in again.
const CHUNK: usize = 1 << 8;

/// The node arena: fixed-size chunks, so that a growing graph never moves
/// the nodes it already holds. Every chunk but the last is full.
#[derive(Clone, Default, PartialEq)]
pub(super) struct Arena {
    chunks: Vec<Vec<Node>>,
    len: usize,
}

impl Arena {
    /// An arena whose chunk table has room for `nodes` nodes.
    pub(super) fn with_capacity(nodes: usize) -> Self {
        Arena {
            chunks: Vec::with_capacity(nodes.div_ceil(CHUNK)),
            len: 0,
        }
    }

    pub(super) fn len(&self) -> usize {
        self.len
    }

    pub(super) fn get(&self, i: usize) -> Option<&Node> {
        self.chunks.get(i / CHUNK)?.get(i % CHUNK)
    }

    pub(super) fn get_mut(&mut self, i: usize) -> Option<&mut Node> {
        self.chunks.get_mut(i / CHUNK)?.get_mut(i % CHUNK)
    }

    /// The nodes in index order, chunk by chunk.
    pub(super) fn chunks(&self) -> impl Iterator<Item = &[Node]> {
        self.chunks.iter().map(Vec::as_slice)
    }

    pub(super) fn push(&mut self, node: Node) {
        match self.chunks.last_mut() {
            Some(last) if last.len() < CHUNK => last.push(node),
            // The first chunk grows like a vector (small graphs stay small);
            // later ones are allocated whole.
            None => self.chunks.push(vec![node]),
            Some(_) => {
                let mut chunk = Vec::with_capacity(CHUNK);
                chunk.push(node);
                self.chunks.push(chunk);
            }
        }
        self.len = self.len.saturating_add(1);
    }
}

impl std::ops::Index<usize> for Arena {
    type Output = Node;
    fn index(&self, i: usize) -> &Node {
        &self.chunks[i / CHUNK][i % CHUNK]
    }
}

impl std::ops::IndexMut<usize> for Arena {
    fn index_mut(&mut self, i: usize) -> &mut Node {
        &mut self.chunks[i / CHUNK][i % CHUNK]
    }
}

impl fmt::Debug for Arena {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.chunks.iter().flatten()).finish()
    }
}

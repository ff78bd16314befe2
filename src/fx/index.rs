//! The naming machinery of [`Graph`]: the name index that makes
//! [`Graph::fresh_name`] and [`Graph::insert`] constant-time, renames, and
//! the bookkeeping of nodes handed out by [`Graph::node_mut`].

use super::{names, Graph, Name, NodeId, Symbol};
use rustc_hash::FxHashMap as HashMap;
use std::collections::hash_map::Entry;

/// Name lookup for [`Graph`]: how many nodes hold each name and, for a
/// name used as a base, the first suffix that may still be free, so that
/// naming a node neither rescans the graph (a 100,000-node lowering would
/// be quadratic) nor allocates (names are [`Name`]s, inline when short).
///
/// A name `base_i` with `i` in canonical decimal (what
/// [`Name::with_suffix`] writes, see [`suffixed`]) is not a table entry of
/// its own: it is bit `i` of its base's suffix set, in pages of
/// [`PAGE_BITS`] bits, so that the auto names of one base
/// (`triton_kernel_wrapper_mutation_1`, `_2`, ...) are claimed in one small
/// page table instead of one entry each in a table of every name.
#[derive(Clone, Debug, Default)]
pub(super) struct NameIndex {
    /// Name -> its [`NameEntry`], for every name that is not [`suffixed`]
    /// and every base of a suffix set. Nodes handed out by
    /// [`Graph::node_mut`] stay indexed under their names at that time
    /// until reindexed.
    entries: HashMap<Name, NameEntry>,
    /// Suffix sets: `(set, i / PAGE_BITS)` -> the page's bits; bit
    /// `i % PAGE_BITS` is set when a node holds `base_i`, `set` being the
    /// base's [`NameEntry::set`].
    pages: HashMap<(u32, u64), [u64; PAGE_WORDS]>,
    /// Nodes beyond the first that hold a [`suffixed`] name (only after a
    /// rename through [`Graph::node_mut`]).
    extra: HashMap<Name, u32>,
    /// Suffix sets handed out (set ids are `1..=sets`).
    sets: u32,
    /// Nodes handed out by [`Graph::node_mut`] (which may rename them), each
    /// once, with its (indexed) name at that time; reindexed by the next
    /// mutating call.
    touched: Vec<(NodeId, Name)>,
    /// The symbols of [`super::Node::binds`] as sets, for nodes that bind
    /// many (every precomputed size equal to one expression binds the same
    /// node), so that [`Graph::bind_symbol`] does not rescan the list.
    /// Dropped for nodes handed out by [`Graph::node_mut`].
    pub(super) bind_sets: HashMap<NodeId, rustc_hash::FxHashSet<Symbol>>,
    /// Static candidate names seen ([`Graph::push_static`]), by address and
    /// length, with whether each is plain ([`Graph::is_plain_static`]) and,
    /// for a plain one, its suffixed names' prefix (`base_`, inline).
    statics: Vec<((usize, usize), Option<Name>)>,
}

/// Suffixes per page of a suffix set.
const PAGE_BITS: u64 = 512;
/// `u64` words per page.
const PAGE_WORDS: usize = (PAGE_BITS / 64) as usize;

/// What [`NameIndex`] knows of one name.
#[derive(Clone, Copy, Debug, Default)]
struct NameEntry {
    /// Nodes that hold the name (as indexed); more than one only after a
    /// rename through [`Graph::node_mut`]. Always 0 for a [`suffixed`]
    /// name (its holders are a bit of its base's set).
    nodes: u32,
    /// As a base: its suffix set, 0 for none yet.
    set: u32,
    /// As a base: `i` such that `base_1` .. `base_{i-1}` are all taken.
    next_suffix: Option<u64>,
}

/// `name` as `(base, i)` when it is `base_i` with `i` in canonical decimal
/// (no leading zero): the names [`NameIndex`] keeps in suffix sets, and
/// exactly the names [`Name::with_suffix`] makes of a non-empty base.
fn suffixed(name: &str) -> Option<(&str, u64)> {
    let (base, i) = names::split_suffix(name);
    let i = i?;
    // `split_suffix` gives the base before the last `_` and the digits after it.
    let digits = name.as_bytes().get(base.len() + 1..)?;
    (digits.len() == 1 || digits.first() != Some(&b'0')).then_some((base, i))
}

impl NameIndex {
    /// An index with room for `n` names.
    pub(super) fn with_capacity(n: usize) -> Self {
        NameIndex {
            entries: HashMap::with_capacity_and_hasher(n, Default::default()),
            ..Default::default()
        }
    }

    /// How many nodes hold `name` (as indexed).
    fn holders(&self, name: &str) -> u32 {
        match suffixed(name) {
            Some((base, i)) => {
                let set = self.entries.get(base).map_or(0, |e| e.set);
                if set == 0 || !self.bit(set, i) {
                    return 0;
                }
                self.extra.get(name).map_or(1, |n| n.saturating_add(1))
            }
            None => self.entries.get(name).map_or(0, |e| e.nodes),
        }
    }

    /// Bit `i` of suffix set `set`.
    fn bit(&self, set: u32, i: u64) -> bool {
        let word = ((i % PAGE_BITS) / 64) as usize;
        self.pages
            .get(&(set, i / PAGE_BITS))
            .is_some_and(|p| (p[word] >> (i % 64)) & 1 == 1)
    }

    /// Sets bit `i` of suffix set `set`; `true` when it was clear.
    fn set_bit(&mut self, set: u32, i: u64) -> bool {
        let word = ((i % PAGE_BITS) / 64) as usize;
        let page = self.pages.entry((set, i / PAGE_BITS)).or_insert([0; PAGE_WORDS]);
        let mask = 1u64 << (i % 64);
        let clear = page[word] & mask == 0;
        page[word] |= mask;
        clear
    }

    /// Clears bit `i` of suffix set `set`.
    fn clear_bit(&mut self, set: u32, i: u64) {
        let word = ((i % PAGE_BITS) / 64) as usize;
        if let Some(p) = self.pages.get_mut(&(set, i / PAGE_BITS)) {
            p[word] &= !(1u64 << (i % 64));
        }
    }

    /// The suffix set of `base`, made (with the base's entry) when missing.
    fn set_of(&mut self, base: &str) -> u32 {
        let NameIndex { entries, sets, .. } = self;
        let e = match entries.get_mut(base) {
            Some(e) => e,
            None => entries.entry(Name::new(base)).or_default(),
        };
        if e.set == 0 {
            // Fewer sets than nodes, and a graph has fewer than 2^32 nodes.
            *sets = sets.saturating_add(1);
            e.set = *sets;
        }
        e.set
    }

    /// Records that one more node holds `name`.
    fn add_holder(&mut self, name: &Name) {
        match suffixed(name) {
            Some((base, i)) => {
                let set = self.set_of(base);
                if !self.set_bit(set, i) {
                    let n = self.extra.entry(name.clone()).or_default();
                    *n = n.saturating_add(1);
                }
            }
            None => {
                let e = self.entries.entry(name.clone()).or_default();
                e.nodes = e.nodes.saturating_add(1);
            }
        }
    }

    /// Records that one node less holds `name`.
    fn remove_holder(&mut self, name: &str) {
        match suffixed(name) {
            Some((base, i)) => {
                if let Some(n) = self.extra.get_mut(name) {
                    *n = n.saturating_sub(1);
                    if *n == 0 {
                        self.extra.remove(name);
                    }
                    return;
                }
                let set = self.entries.get(base).map_or(0, |e| e.set);
                if set != 0 {
                    self.clear_bit(set, i);
                }
            }
            None => {
                if let Some(e) = self.entries.get_mut(name) {
                    e.nodes = e.nodes.saturating_sub(1);
                    // A base with a suffix set keeps its entry (the set's id).
                    if e.nodes == 0 && e.next_suffix.is_none() && e.set == 0 {
                        self.entries.remove(name);
                    }
                }
            }
        }
    }
}

impl Graph {
    /// `true` when a node already has this name or the name is reserved
    /// ([`names::is_reserved`]).
    pub fn has_name(&self, name: &str) -> bool {
        self.taken(name) || names::is_reserved(name)
    }

    /// `true` when a node has this name.
    fn taken(&self, name: &str) -> bool {
        let indexed = self.names.holders(name);
        if self.names.touched.is_empty() {
            return indexed > 0;
        }
        // Touched nodes are indexed under their names when handed out.
        let mut count = i64::from(indexed);
        for (id, old) in &self.names.touched {
            let now = self.nodes.get(id.index()).map(|n| n.name.as_str());
            if old.as_str() == name && now != Some(name) {
                count -= 1;
            } else if old.as_str() != name && now == Some(name) {
                count += 1;
            }
        }
        count > 0
    }

    /// A name not used yet for `candidate`, by torch.fx's namespace rules
    /// ([`names`]): the candidate made an identifier when it is free and not
    /// reserved, else `base_1`, `base_2`, ... (the first free one) where
    /// `base` is the candidate without its numeric suffix. Reserved names
    /// include the bare callables the printout calls ([`super::PRINTED_GLOBALS`]),
    /// so no node shadows its own call target.
    pub fn fresh_name(&self, candidate: &str) -> Name {
        let candidate = names::sanitize(candidate);
        if !self.has_name(&candidate) {
            return Name::new(&candidate);
        }
        let (base, _) = names::split_suffix(&candidate);
        // Suffixes below the hint are known to be taken, unless a node handed
        // out by `node_mut` was renamed since (then start from 1).
        let start = if self.names.touched.is_empty() {
            self.names.entries.get(base).and_then(|e| e.next_suffix).unwrap_or(1)
        } else {
            1
        };
        let mut i = start;
        loop {
            // A suffixed name has a digit, so it is never reserved.
            let name = Name::with_suffix(base, i);
            if !self.taken(&name) {
                return name;
            }
            // A graph has far fewer than `u64::MAX` nodes.
            i = i.saturating_add(1);
        }
    }

    /// [`Graph::fresh_name`], indexed as taken (one node more holds it):
    /// one hash lookup for a free candidate, about three for a suffixed one.
    /// Needs no touched nodes ([`Graph::reindex_touched`] first).
    pub(super) fn claim_name(&mut self, candidate: &str) -> Name {
        let candidate = names::sanitize(candidate);
        let mut hint = None;
        if suffixed(&candidate).is_some() {
            // A suffixed name has a digit, so it is never reserved.
            if self.names.holders(&candidate) == 0 {
                let name = Name::new(&candidate);
                self.names.add_holder(&name);
                return name;
            }
        } else {
            let entries = &mut self.names.entries;
            match entries.entry(Name::new(&candidate)) {
                Entry::Vacant(v) if !names::is_reserved(&candidate) => {
                    let name = v.key().clone();
                    v.insert(NameEntry {
                        nodes: 1,
                        ..Default::default()
                    });
                    return name;
                }
                Entry::Occupied(mut o) => {
                    let e = o.get_mut();
                    if e.nodes == 0 && !names::is_reserved(&candidate) {
                        e.nodes = 1;
                        return o.key().clone();
                    }
                    if names::split_suffix(&candidate).1.is_none() {
                        // The candidate is its own base: take the hint here and
                        // move it past the suffix it will most likely get.
                        let start = e.next_suffix.unwrap_or(1);
                        e.next_suffix = Some(start.saturating_add(1));
                        hint = Some(start);
                    }
                }
                Entry::Vacant(_) => {}
            }
        }
        let (base, _) = names::split_suffix(&candidate);
        let start = match hint {
            Some(h) => h,
            None => self.names.entries.get(base).and_then(|e| e.next_suffix).unwrap_or(1),
        };
        self.claim_suffixed(base, start, hint)
    }

    /// [`Graph::claim_name`] for a candidate that is an identifier without
    /// a numeric suffix and not reserved (so it is its own base): without
    /// the sanitizing, reserved-name and suffix tests.
    /// `prefix` indexes the prefix `candidate_` ([`Graph::is_plain_static`]).
    pub(super) fn claim_plain(&mut self, candidate: &str, prefix: usize) -> Name {
        let NameIndex { entries, sets, .. } = &mut self.names;
        // Most candidates of a lowering are taken bases (auto names): look
        // up by `str` first, make a key only for a new one.
        let e = match entries.get_mut(candidate) {
            Some(e) => e,
            None => {
                let name = Name::new(candidate);
                entries.insert(
                    name.clone(),
                    NameEntry {
                        nodes: 1,
                        ..Default::default()
                    },
                );
                return name;
            }
        };
        if e.nodes == 0 {
            e.nodes = 1;
            return Name::new(candidate);
        }
        let start = e.next_suffix.unwrap_or(1);
        e.next_suffix = Some(start.saturating_add(1));
        if e.set == 0 {
            // Fewer sets than nodes, and a graph has fewer than 2^32 nodes.
            *sets = sets.saturating_add(1);
            e.set = *sets;
        }
        let set = e.set;
        let i = self.claim_in_set(candidate, set, start, Some(start));
        self.names
            .statics
            .get(prefix)
            .and_then(|(_, p)| p.as_ref()?.append_decimal(i))
            .unwrap_or_else(|| Name::with_suffix(candidate, i))
    }

    /// `Some(i)` when `name` (fixed text) is an identifier of its own: what
    /// [`Graph::claim_plain`] takes, `i` indexing its suffixed names'
    /// prefix (`name_`, for [`Name::append_decimal`]). Worked out once per
    /// text and graph.
    pub(super) fn is_plain_static(&mut self, name: &'static str) -> Option<usize> {
        // The address and length of a `&'static str` name its text: static
        // text never changes.
        let key = (name.as_ptr() as usize, name.len());
        let statics = &self.names.statics;
        if let Some(i) = statics.iter().position(|(k, _)| *k == key) {
            return statics[i].1.is_some().then_some(i);
        }
        let plain = matches!(names::sanitize(name), std::borrow::Cow::Borrowed(_))
            && !names::is_reserved(name)
            && names::split_suffix(name).1.is_none();
        let prefix = plain.then(|| Name::new(&format!("{name}_")));
        self.names.statics.push((key, prefix));
        plain.then_some(self.names.statics.len() - 1)
    }

    /// The first free `base_i` from `i = start`, indexed as taken; moves
    /// `base`'s hint past it unless the caller already set it (`hint`).
    fn claim_suffixed(&mut self, base: &str, start: u64, hint: Option<u64>) -> Name {
        let set = self.names.set_of(base);
        let i = self.claim_in_set(base, set, start, hint);
        Name::with_suffix(base, i)
    }

    /// [`Graph::claim_suffixed`] with the base's suffix set `set`: the
    /// suffix claimed.
    fn claim_in_set(&mut self, base: &str, set: u32, start: u64, hint: Option<u64>) -> u64 {
        let mut i = start;
        // A suffixed name has a digit, so it is never reserved; `base_i` of a
        // non-empty base is `suffixed` with this base and `i`.
        while !self.names.set_bit(set, i) {
            i = i.saturating_add(1);
        }
        if hint != Some(i) {
            if let Some(e) = self.names.entries.get_mut(base) {
                e.next_suffix = Some(i.saturating_add(1));
            }
        }
        i
    }

    /// Records that one more node holds `name`.
    fn index_name(&mut self, name: &Name) {
        self.names.add_holder(name);
    }

    /// Records that one node less holds `name`: lowers the suffix hint of the
    /// base it may have been generated from (`base_i`).
    fn unindex_name(&mut self, name: &str) {
        self.names.remove_holder(name);
        if let (base, Some(i)) = names::split_suffix(name) {
            if let Some(hint) = self.names.entries.get_mut(base).and_then(|e| e.next_suffix.as_mut()) {
                *hint = (*hint).min(i);
            }
        }
    }

    /// Reindexes the nodes handed out by [`Graph::node_mut`].
    #[inline]
    pub(super) fn reindex_touched(&mut self) {
        if !self.names.touched.is_empty() {
            self.reindex_touched_nodes();
        }
    }

    /// [`Graph::reindex_touched`] when there are touched nodes.
    #[cold]
    fn reindex_touched_nodes(&mut self) {
        for (id, old) in std::mem::take(&mut self.names.touched) {
            self.names.bind_sets.remove(&id);
            let Some(new) = self.nodes.get(id.index()).map(|n| n.name.clone()) else {
                continue;
            };
            if new != old {
                self.unindex_name(&old);
                self.index_name(&new);
            }
        }
    }

    /// Remembers that node `id` is handed out mutably (it may be renamed).
    pub(super) fn touch(&mut self, id: NodeId) {
        if self.names.touched.iter().any(|(t, _)| *t == id) {
            return;
        }
        if let Some(n) = self.nodes.get(id.index()) {
            self.names.touched.push((id, n.name.clone()));
        }
    }

    /// Renames a node when the new name is free; returns whether it did.
    pub fn try_rename(&mut self, id: NodeId, name: &str) -> bool {
        self.reindex_touched();
        if self.has_name(name) {
            return false;
        }
        let new = Name::new(name);
        let Some(node) = self.nodes.get_mut(id.index()) else {
            return false;
        };
        let old = std::mem::replace(&mut node.name, new.clone());
        self.unindex_name(&old);
        self.index_name(&new);
        true
    }
}

#[cfg(test)]
mod tests {
    use crate::fx::{Graph, Op};

    fn push(g: &mut Graph, name: &str) -> String {
        let id = g.push(name, Op::Constant { name: "c".into() }, None);
        g.node(id).name.to_string()
    }

    #[test]
    fn renames_free_and_take_names() {
        let mut g = Graph::new();
        assert_eq!(push(&mut g, "a"), "a");
        assert_eq!(push(&mut g, "a"), "a_1");
        let first = g.order()[0];
        g.node_mut(first).name = crate::fx::Name::new("b");
        assert!(!g.has_name("a"));
        assert!(g.has_name("b"));
        assert_eq!(g.fresh_name("a"), "a");
        assert_eq!(g.fresh_name("b"), "b_1");
        assert_eq!(push(&mut g, "b"), "b_1");
        assert_eq!(push(&mut g, "a"), "a");
        let second = g.order()[1];
        assert!(g.try_rename(second, "c"));
        assert!(!g.try_rename(second, "b"));
        assert!(!g.has_name("a_1"));
        assert_eq!(push(&mut g, "a"), "a_1");
        assert_eq!(push(&mut g, "a"), "a_2");
        assert_eq!(push(&mut g, "max"), "max_1");
        assert_eq!(push(&mut g, "c_1"), "c_1");
        assert_eq!(push(&mut g, "c_1"), "c_2");
    }

    /// A transcript of naming operations (pushes, auto names, renames
    /// through `node_mut` and `try_rename`, `fresh_name`, `has_name`) on
    /// candidates with and without suffixes, canonical or not, reserved or
    /// not, pinned by its FNV-1a hash: the value is the one the name index
    /// before suffix sets (one table entry per name) gives for the same
    /// transcript, so the two name every node alike.
    #[test]
    fn naming_transcript_matches_the_table_index() {
        use crate::fx::Name;
        let pool = [
            "a",
            "a_1",
            "a_2",
            "a_01",
            "a_0",
            "a_1_1",
            "a_1_2",
            "b",
            "b_3",
            "max",
            "max_1",
            "x_",
            "x__1",
            "buf0",
            "buf0_1",
            "triton_kernel_wrapper_mutation",
            "triton_kernel_wrapper_mutation_2",
            "mul",
            "a.b",
            "_1",
            "a_007",
            "mul_0",
        ];
        // A fixed linear congruential sequence: the same cases every run.
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut next = |n: usize| {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (state >> 33) as usize % n
        };
        let mut out = String::new();
        for round in 0..300 {
            let mut g = Graph::new();
            let mut len = 0usize;
            for _ in 0..150 {
                let pick = pool[next(pool.len())];
                match next(12) {
                    0 if len > 0 => {
                        let id = g.order()[next(len)];
                        g.node_mut(id).name = Name::new(pick);
                        out.push_str(&format!("{round} mut {pick}\n"));
                    }
                    1 if len > 0 => {
                        let id = g.order()[next(len)];
                        out.push_str(&format!("{round} rename {pick} {}\n", g.try_rename(id, pick)));
                    }
                    2 => {
                        out.push_str(&format!("{round} fresh {pick} {}\n", g.fresh_name(pick)));
                        for n in &pool {
                            out.push_str(&format!("{}", g.has_name(n) as u8));
                        }
                        out.push('\n');
                    }
                    3 | 4 => {
                        let s: &'static str = if next(2) == 0 {
                            "triton_kernel_wrapper_mutation"
                        } else {
                            "mul"
                        };
                        let id = g.push_static(s, Op::Constant { name: "c".into() }, None);
                        len += 1;
                        out.push_str(&format!("{round} static {}\n", g.node(id).name));
                    }
                    _ => {
                        let id = g.push(pick, Op::Constant { name: "c".into() }, None);
                        len += 1;
                        out.push_str(&format!("{round} push {pick} {}\n", g.node(id).name));
                    }
                }
            }
        }
        let mut h = 0xcbf2_9ce4_8422_2325u64;
        for b in out.bytes() {
            h = (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
        }
        assert_eq!(out.lines().count(), 48_697);
        assert_eq!(h, 0xbb93_6cc4_7408_90d9);
    }

    #[test]
    fn a_node_touched_twice_is_reindexed_once() {
        let mut g = Graph::new();
        let id = g.push("x", Op::Constant { name: "c".into() }, None);
        g.node_mut(id).name = crate::fx::Name::new("y");
        g.node_mut(id).name = crate::fx::Name::new("x");
        assert!(g.has_name("x"));
        assert!(!g.has_name("y"));
        assert_eq!(push(&mut g, "y"), "y");
        assert_eq!(push(&mut g, "x"), "x_1");
    }
}

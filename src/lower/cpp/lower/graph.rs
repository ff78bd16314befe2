//! One graph being lowered: local names and the multi-output element map.

use super::*;

/// One graph being lowered: its table, local-name prefix and multi-output map.
///
/// C++ receives the tensors of a multi-output value as separate variables
/// (upstream passes one out-handle per `MultiOutput`), so every extracted
/// element is declared by the line that produces the value, and a `get` line
/// prints nothing. Elements are addressed by *paths* of list/tuple indices
/// from the produced value (the *root*): `get buf3 = buf1[0][1]` is path
/// `[0, 1]`, a chain `get buf2 = buf1[0]; get buf3 = buf2[1]` (with `buf2`
/// declared `multi`) is the same path, and `get buf2 = buf1` (empty indices,
/// the whole value of a single-output op such as `nonzero`) is path `[]`: the
/// op's one output is written straight into `buf2`, as Inductor prints it.
pub(super) struct GraphCtx<'a> {
    pub(super) graph: &'a Graph,
    /// The program's constants: variables of the whole function, read by
    /// every graph under their own names (subgraphs are inlined).
    pub(super) constants: &'a IndexMap<BufName, Layout>,
    /// `None` for main.
    pub(super) name: Option<&'a GraphName>,
    pub(super) prefix: String,
    /// Root -> element path -> extracted buffer (`None`: not extracted, but
    /// reached by an unbacked binding; it gets a placeholder variable).
    pub(super) elements: HashMap<BufName, BTreeMap<Vec<usize>, Option<BufName>>>,
    /// Tensors defined by a `MultiOutput` line -> (root, path).
    pub(super) extracted: HashMap<BufName, (BufName, Vec<usize>)>,
    /// Multi-valued `MultiOutput` results -> (root, path) of the part they name.
    pub(super) parts: HashMap<BufName, (BufName, Vec<usize>)>,
    /// The graph's multi-output buffers (usually few or none).
    pub(super) multi: HashSet<&'a str>,
    /// `get` results naming an element an earlier `get` extracted -> that
    /// earlier result: a new reference to its variable, made at the line.
    pub(super) copies: HashMap<BufName, BufName>,
}

/// `[0][1]` for a path (`` for the whole value).
pub(super) fn path_text(path: &[usize]) -> String {
    path.iter().map(|i| format!("[{i}]")).collect()
}

/// Leading `Index` keys of a key path as element indices (stops at a negative one).
pub(super) fn index_prefix(path: &[KeyEntry]) -> Vec<usize> {
    path.iter()
        .map_while(|k| match k {
            KeyEntry::Index(i) => usize::try_from(*i).ok(),
            _ => None,
        })
        .collect()
}

impl<'a> GraphCtx<'a> {
    pub(super) fn new(
        graph: &'a Graph,
        name: Option<&'a GraphName>,
        constants: &'a IndexMap<BufName, Layout>,
    ) -> Result<Self, Error> {
        let prefix = name.map(|n| format!("{n}_")).unwrap_or_default();
        let mut ctx = GraphCtx {
            graph,
            constants,
            name,
            prefix,
            elements: HashMap::default(),
            extracted: HashMap::default(),
            parts: HashMap::default(),
            copies: HashMap::default(),
            multi: graph
                .buffers
                .iter()
                .filter(|(_, d)| matches!(d.kind, BufferKind::Multi))
                .map(|(b, _)| b.as_str())
                .collect(),
        };
        for (i, line) in graph.lines.iter().enumerate() {
            let Line::MultiOutput(MultiOutput {
                result,
                source,
                indices,
            }) = line
            else {
                continue;
            };
            let cx = Cx {
                graph: name,
                index: i,
                line,
            };
            let mut steps = Vec::with_capacity(indices.len());
            for index in indices {
                match index {
                    MultiIndex::List(k) | MultiIndex::Tuple(k) => {
                        // Invariant: `validate` rejects a negative multi-output index (`NegativeIndex`).
                        steps.push(usize::try_from(*k).expect("validated: multi-output indices are non-negative"))
                    }
                    MultiIndex::Dict(key) => {
                        return Err({
                            Error::new(cx.location(), ErrorKind::NotSupported { dialect: "both dialects", what: format!(
                                "extracting `{result}` from `{source}` by the dict key {}: C++ receives multi-outputs as a flat list of handles",
                                c_string(key)
                            ) })
                        })
                    }
                }
            }
            let (root, mut path) = match ctx.parts.get(source) {
                Some((r, p)) => (r.clone(), p.clone()),
                None if ctx.is_multi(source) => (source.clone(), Vec::new()),
                // A whole tensor under a new name: an alias, printed at the line.
                None if steps.is_empty() => continue,
                // Invariant: `validate` requires the source of a `get` with
                // indices to be a multi-output value (`NotMulti`), which is a
                // part or a multi-output buffer of this graph's table.
                None => unreachable!("validated: `get {result}` indexes into a multi-output value"),
            };
            path.extend(steps);
            if ctx.is_multi(result) {
                ctx.parts.insert(result.clone(), (root, path));
                continue;
            }
            // The same element extracted again (two names for one tensor,
            // as a Python wrapper may read `buf0[0]` twice).
            if let Some(Some(first)) = ctx.elements.get(&root).and_then(|t| t.get(&path)) {
                ctx.copies.insert(result.clone(), first.clone());
                continue;
            }
            ctx.add_element(&root, path.clone(), result.clone(), &cx)?;
            ctx.extracted.insert(result.clone(), (root, path));
        }
        // Elements reached only by unbacked bindings still need a variable; a
        // path conflicting with the extracted ones is reported when lowered.
        for line in &graph.lines {
            let Line::UnbackedSymbolDefs { source, bindings } = line else {
                continue;
            };
            let Some((root, base)) = ctx.multi_origin(source) else {
                continue;
            };
            for path in bindings.values() {
                let mut full = base.clone();
                full.extend(index_prefix(path));
                let tree = ctx.elements.entry(root.clone()).or_default();
                if !tree.keys().any(|k| k.starts_with(&full) || full.starts_with(k)) {
                    tree.insert(full, None);
                }
            }
        }
        Ok(ctx)
    }

    /// Records element `path` of `root`, extracted as `buffer` (the caller
    /// has made a second extraction of one path a copy of the first). A
    /// path both a tensor and a list of further values (`buf1[0]` and
    /// `buf1[0][1]` both extracted) is a limitation: validation cannot know
    /// an extern op's result structure, and the C++ lowerings declare one
    /// variable per tensor of it.
    pub(super) fn add_element(
        &mut self,
        root: &BufName,
        path: Vec<usize>,
        buffer: BufName,
        cx: &Cx<'_>,
    ) -> Result<(), Error> {
        let tree = self.elements.entry(root.clone()).or_default();
        if let Some(other) = tree.keys().find(|k| k.starts_with(&path) || path.starts_with(k)) {
            return Err(Error::new(
                cx.location(),
                ErrorKind::NotSupported {
                    dialect: "both dialects",
                    what: format!(
                        "`{root}{}` (`{buffer}`) and `{root}{}` both extracted: one is inside the other, so one of them is not a tensor",
                        path_text(&path),
                        path_text(other),
                    ),
                },
            ));
        }
        tree.insert(path, Some(buffer));
        Ok(())
    }

    /// Whether `b` names a program constant here (no buffer of the graph's
    /// own table shadows it).
    pub(super) fn is_constant(&self, b: &BufName) -> bool {
        !self.constants.is_empty() && !self.graph.buffers.contains_key(b) && self.constants.contains_key(b)
    }

    /// The C++ variable of a buffer: subgraph buffers get the graph's name in
    /// front; a constant is the whole function's variable of its own name.
    pub(super) fn local(&self, b: &BufName) -> String {
        if self.prefix.is_empty() || b.as_str().starts_with(&self.prefix) || self.is_constant(b) {
            b.to_string()
        } else {
            format!("{}{}", self.prefix, b)
        }
    }

    /// [`GraphCtx::local`] as a value that prints it.
    pub(super) fn var<'x>(&'x self, b: &'x BufName) -> Var<'x> {
        Var {
            prefix: if self.is_constant(b) { "" } else { &self.prefix },
            name: b.as_str(),
        }
    }

    /// The layout of `b` when it is a tensor: declared in the graph's table,
    /// or a program constant.
    pub(super) fn tensor_layout(&self, b: &BufName) -> Option<&'a Layout> {
        match self.graph.buffers.get(b) {
            Some(_) => self.graph.layout(b),
            None => self.constants.get(b),
        }
    }

    /// The tensor layout of `b`, which validation makes a tensor wherever a
    /// line needs its layout: allocations, views, reuses, kernel arguments,
    /// `index_put` targets, `item` sources and selectors name tensors
    /// (`Need::Tensor`), and an extern op's result that is not a
    /// multi-output value is a tensor of the graph's table.
    pub(super) fn layout(&self, b: &BufName) -> &'a Layout {
        self.tensor_layout(b)
            .expect("validated: a line needing a layout names a tensor of the graph or a program constant")
    }

    /// The variable of `b` passed as one extern-op argument: a tensor, never
    /// a multi-output value (its elements are separate variables, so the
    /// value itself has none). The error is a limitation, not a re-check:
    /// validation lets a multi-output value be an argument (the Python and
    /// FX lowerings pass it whole); Inductor never passes one.
    pub(super) fn tensor_arg(&self, b: &BufName, cx: &Cx<'_>) -> Result<String, Error> {
        if self.is_multi(b) {
            return Err(Error::new(cx, ErrorKind::MultiOutputArgument { buffer: b.clone() }));
        }
        Ok(self.local(b))
    }

    pub(super) fn is_multi(&self, b: &BufName) -> bool {
        !self.multi.is_empty() && self.multi.contains(b.as_str())
    }

    /// The variable of element `path` of `root`: the extracted buffer, or a
    /// placeholder `<root>_<i>_<j>` (released with the scope).
    pub(super) fn element_var(&self, root: &BufName, path: &[usize]) -> String {
        match self.elements.get(root).and_then(|t| t.get(path)) {
            Some(Some(b)) => self.local(b),
            _ => {
                let mut name = self.local(root);
                for i in path {
                    let _ = write!(name, "_{i}");
                }
                name
            }
        }
    }

    /// Every tensor of a multi-output value, flattened in path order, with
    /// placeholders for the unextracted siblings of extracted elements (each
    /// assumed to be one tensor, as upstream passes one handle per output).
    pub(super) fn leaf_vars(&self, root: &BufName) -> Vec<String> {
        let mut out = Vec::new();
        if let Some(tree) = self.elements.get(root) {
            self.collect_leaves(root, tree, &mut Vec::new(), &mut out);
        }
        out
    }

    pub(super) fn collect_leaves(
        &self,
        root: &BufName,
        tree: &BTreeMap<Vec<usize>, Option<BufName>>,
        prefix: &mut Vec<usize>,
        out: &mut Vec<String>,
    ) {
        if tree.contains_key(prefix.as_slice()) {
            out.push(self.element_var(root, prefix));
            return;
        }
        let children = tree
            .keys()
            .filter(|k| k.len() > prefix.len() && k.starts_with(prefix))
            .filter_map(|k| k.get(prefix.len()).copied())
            .max();
        let Some(last) = children else {
            out.push(self.element_var(root, prefix));
            return;
        };
        for i in 0..=last {
            prefix.push(i);
            self.collect_leaves(root, tree, prefix, out);
            prefix.pop();
        }
    }

    /// Variables receiving the outputs of a conditional or while loop: one per
    /// subgraph output (at least `count`); missing ones get `<root>_<i>` names.
    pub(super) fn flat_vars(&self, root: &BufName, count: usize, cx: &Cx<'_>) -> Result<Vec<String>, Error> {
        let tree = self.elements.get(root);
        let mut len = count;
        for path in tree.into_iter().flat_map(|t| t.keys()) {
            match path.as_slice() {
                [i] => len = len.max(i + 1),
                // A subgraph output that is itself a multi-output value
                // (validation allows it; Inductor's control flow returns
                // flat tensors).
                _ => {
                    return Err(Error::new(
                        cx.location(),
                        ErrorKind::NotSupported {
                            dialect: "both dialects",
                            what: format!(
                                "extracting `{root}{}`: a subgraph output that is a multi-output value (C++ receives a subgraph's outputs as one tensor each)",
                                path_text(path)
                            ),
                        },
                    ))
                }
            }
        }
        Ok((0..len).map(|i| self.element_var(root, &[i])).collect())
    }

    /// Root and path of a multi-output value or a part of one.
    pub(super) fn multi_origin(&self, b: &BufName) -> Option<(BufName, Vec<usize>)> {
        match self.parts.get(b) {
            Some(origin) => Some(origin.clone()),
            None if self.is_multi(b) => Some((b.clone(), Vec::new())),
            None => None,
        }
    }
}

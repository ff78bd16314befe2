//! Unbacked symbols bound from tensors and `item()` reads.

use super::*;

impl<'a> Lowering<'a> {
    // ---- unbacked symbols --------------------------------------------------

    /// Binds `symbol` from the C++ value `raw` post-processed by `tail`
    /// (`[]`, `[DivideBy(d)]` or `[ConvertInt]`).
    pub(super) fn bind_symbol(
        &mut self,
        symbol: &Symbol,
        raw: &str,
        tail: &[KeyEntry],
        described: &str,
        cx: &Cx<'_>,
    ) -> Result<(), Error> {
        let s = symbol.as_str();
        match tail {
            [] => {
                if self.declared(s) {
                    self.line(format!("{s} = {raw};"));
                } else {
                    self.line(format!("auto {s} = {raw};"));
                    self.declare(s);
                }
            }
            [KeyEntry::ConvertInt] => self.decl_line(s, "int64_t", &format!("{raw} ? 1 : 0")),
            // `validate` rejects a divisor that is not positive (`BadKeyPath`).
            [KeyEntry::DivideBy(d)] => {
                let msg = format!("{s}: {described} = ");
                let tail_msg = format!(" is not divisible by {d}");
                self.line(format!(
                    "if ({raw} % {d} != 0) {{ throw std::runtime_error({} + std::to_string({raw}) + {}); }}",
                    c_string(&msg),
                    c_string(&tail_msg)
                ));
                self.decl_line(s, "int64_t", &format!("{raw} / {d}"));
            }
            other => {
                return Err(self.unsupported(
                    cx,
                    format!("binding `{s}` through the key path suffix `{}`", KeyPathText(other)),
                ))
            }
        }
        Ok(())
    }

    pub(super) fn unbacked(
        &mut self,
        g: &GraphCtx<'_>,
        source: &BufName,
        symbol: &Symbol,
        path: &[KeyEntry],
        cx: &Cx<'_>,
    ) -> Result<(), Error> {
        // Resolve the top level: C++ holds multi-output elements as separate
        // variables, so leading indices are walked key by key to one of them.
        let (base, rest): (String, &[KeyEntry]) = if let Some((root, mut at)) = g.multi_origin(source) {
            let tree = g.elements.get(&root);
            let is_leaf = |p: &[usize]| tree.is_some_and(|t| t.contains_key(p));
            let is_list = |p: &[usize]| tree.is_some_and(|t| t.keys().any(|k| k.len() > p.len() && k.starts_with(p)));
            let mut rest = path;
            loop {
                if is_leaf(&at) {
                    break;
                }
                match rest.split_first() {
                    Some((KeyEntry::Index(i), tail)) if is_list(&at) => {
                        // Invariant: `validate` rejects a negative key path index (`BadKeyPath`).
                        let i = usize::try_from(*i).expect("validated: key path indices are non-negative");
                        at.push(i);
                        rest = tail;
                    }
                    // The path stops at a part of the value that other
                    // lines index further (`.size()[0]` of a value whose
                    // `[0]` is extracted, `[0]` with `[0][5]` also bound),
                    // which has no one variable; validation cannot know an
                    // extern op's result structure.
                    _ => {
                        return Err(Error::new(
                            cx,
                            ErrorKind::NotSupported {
                                dialect: "both dialects",
                                what: format!(
                                    "the key path `{}` of `{symbol}` stops at `{root}{}`, which other lines index further: not one tensor",
                                    KeyPathText(path),
                                    path_text(&at)
                                ),
                            },
                        ))
                    }
                }
            }
            (g.element_var(&root, &at), rest)
        } else {
            match g.extracted.get(source) {
                // Bindings computed on the op's output, attached to one extracted
                // element: drop the element's own indices.
                Some((_, at)) if !at.is_empty() && index_prefix(path).starts_with(at) => {
                    (g.local(source), &path[at.len()..])
                }
                _ => (g.local(source), path),
            }
        };
        let (value, tail) = match rest {
            [KeyEntry::CallMethod(m @ (TensorMethod::Size | TensorMethod::Stride)), KeyEntry::Index(d), tail @ ..] => {
                (format!("{base}.{}({d})", m.as_str()), tail)
            }
            [KeyEntry::CallMethod(TensorMethod::StorageOffset), tail @ ..] => (format!("{base}.storage_offset()"), tail),
            _ => {
                return Err(self.unsupported(
                    cx,
                    format!(
                        "binding `{symbol}` from `{source}` through the key path `{}` (needs .size()[i], .stride()[i] or .storage_offset())",
                        KeyPathText(path)
                    ),
                ))
            }
        };
        let described = format!("{source}{}", KeyPathText(&path[..path.len() - tail.len()]));
        if tail.is_empty() {
            return self.bind_symbol(symbol, &value, tail, &described, cx);
        }
        let raw = format!("{symbol}_undivided");
        if matches!(tail, [KeyEntry::ConvertInt]) {
            return self.bind_symbol(symbol, &value, tail, &described, cx);
        }
        self.decl_line(&raw, "int64_t", &value);
        self.bind_symbol(symbol, &raw, tail, &described, cx)
    }
}

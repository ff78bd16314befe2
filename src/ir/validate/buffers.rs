//! Buffers: definitions, uses, ends, `Reuse` and `Reinterpret`, storage.

use super::*;

impl<'a> Validator<'a> {
    /// Defines `name`. `storage`: `None` for multi-output values, `Some(None)`
    /// for a fresh storage, `Some(Some(id))` to use an existing one.
    pub(super) fn define(
        &mut self,
        g: &mut GraphState<'a>,
        name: &BufName,
        site: Site,
        storage: Option<Option<usize>>,
    ) {
        let r = g.resolve(self.program, name);
        let storage = match storage {
            None => None,
            Some(Some(id)) => Some(id),
            Some(None) => {
                let capacity = g.layout_of(self.program, name, r);
                g.storages.push(Storage {
                    owner: name.clone(),
                    root: name.clone(),
                    capacity,
                    freed_at: None,
                });
                Some(g.storages.len() - 1)
            }
        };
        let storage_root = storage.and_then(|id| g.storages.get(id)).map(|s| s.root.clone());
        g.set_state(r, BufState::Live { storage });
        let (index, _) = g.info.buffers.insert_full(
            name.clone(),
            BufferInfo {
                defined: site,
                last_use: None,
                ended: None,
                is_output: false,
                storage_root,
            },
        );
        if let BufRef::Graph(i) = r {
            g.info_index[i] = Some(index);
        }
    }

    /// Checks that a line may define `name` with the given kind; returns
    /// `false` (after reporting) when it may not.
    pub(super) fn may_define(&mut self, g: &mut GraphState<'a>, at: usize, name: &BufName, need: Need) -> bool {
        let r = g.resolve(self.program, name);
        if !self.declared(g, at, name, r) {
            return false;
        }
        if r == BufRef::Constant {
            // The lowerings declare a constant once, from the program's
            // table: a line's result of that name would be a second tensor.
            self.err(
                Self::at(g, at),
                ValidationErrorKind::DefinesConstant { buffer: name.clone() },
            );
            return false;
        }
        if !self.kind_ok(g, at, name, r, need) {
            return false;
        }
        if let Some(first) = g.defined_site(name, r) {
            self.err(
                Self::at(g, at),
                ValidationErrorKind::DefinedTwice {
                    buffer: name.clone(),
                    first,
                },
            );
            return false;
        }
        true
    }

    /// Reports (once per name) a buffer missing from the table; constants count
    /// as declared.
    pub(super) fn declared(&mut self, g: &mut GraphState<'a>, at: usize, name: &BufName, r: BufRef) -> bool {
        if r != BufRef::Undeclared {
            return true;
        }
        if g.reported.insert(format!("undeclared-buffer {name}")) {
            let kind = match self.buffer_owner(name) {
                Some(owner) if owner != g.name => ValidationErrorKind::ForeignBuffer {
                    buffer: name.clone(),
                    owner,
                },
                _ => ValidationErrorKind::UndeclaredBuffer { buffer: name.clone() },
            };
            self.err(Self::at(g, at), kind);
        }
        false
    }

    pub(super) fn kind_ok(&mut self, g: &mut GraphState<'a>, at: usize, name: &BufName, r: BufRef, need: Need) -> bool {
        let is_tensor = match r {
            BufRef::Graph(i) => matches!(
                g.graph.buffers.get_index(i).map(|(_, d)| &d.kind),
                Some(BufferKind::Tensor(_))
            ),
            _ => true, // a constant
        };
        match (need, is_tensor) {
            (Need::Tensor, false) => {
                self.err(
                    Self::at(g, at),
                    ValidationErrorKind::NotATensor { buffer: name.clone() },
                );
                false
            }
            (Need::Multi, true) => {
                self.err(Self::at(g, at), ValidationErrorKind::NotMulti { buffer: name.clone() });
                false
            }
            _ => true,
        }
    }

    /// A read or write of a live buffer. `layout_syms`: also require the
    /// symbols of its layout to be bound. Returns the buffer's storage id when
    /// the use is valid.
    pub(super) fn use_buffer(
        &mut self,
        g: &mut GraphState<'a>,
        at: usize,
        name: &BufName,
        need: Need,
        layout_syms: bool,
    ) -> Option<Option<usize>> {
        let r = g.resolve(self.program, name);
        if !self.declared(g, at, name, r) || !self.kind_ok(g, at, name, r, need) {
            return None;
        }
        if r == BufRef::Constant {
            return Some(None);
        }
        let result = match g.state(r).cloned() {
            None => {
                self.used_before_definition(g, at, name);
                return None;
            }
            Some(BufState::Released { at: ended_at, .. }) => {
                self.use_after_end(g, at, name, ended_at, Ending::MarkedReused);
                return None;
            }
            Some(BufState::Ended { at: ended_at, how }) => {
                self.use_after_end(g, at, name, ended_at, how);
                return None;
            }
            Some(BufState::Live { storage }) => {
                self.check_storage_alive(g, name, storage, Some(at));
                Some(storage)
            }
        };
        g.touch(name, r, at);
        if layout_syms {
            self.require_layout_symbols(g, at, name, r);
        }
        result
    }

    /// A use at line `at` of `name`, which is not defined yet (a later line may define it).
    fn used_before_definition(&mut self, g: &mut GraphState<'a>, at: usize, name: &BufName) {
        Self::prescan(g);
        let defined_at = g.later_definitions.get(name).copied();
        self.err(
            Self::at(g, at),
            ValidationErrorKind::UsedBeforeDefinition {
                buffer: name.clone(),
                defined_at,
            },
        );
    }

    /// A use at line `at` of `name`, which line `ended_at` ended (`how`).
    fn use_after_end(&mut self, g: &GraphState<'a>, at: usize, name: &BufName, ended_at: usize, how: Ending) {
        self.err(
            Self::at(g, at),
            ValidationErrorKind::UseAfterEnd {
                buffer: name.clone(),
                ended_at,
                how,
            },
        );
    }

    pub(super) fn check_storage_alive(
        &mut self,
        g: &mut GraphState<'a>,
        name: &BufName,
        storage: Option<usize>,
        at: Option<usize>,
    ) {
        let Some(st) = viewed_storage(g, name, storage) else {
            return;
        };
        if let Some(freed_at) = st.freed_at {
            self.err(
                Self::loc(g, at),
                ValidationErrorKind::ViewOutlivesStorage {
                    buffer: name.clone(),
                    owner: st.owner.clone(),
                    freed_at,
                },
            );
        }
    }

    /// Resolves `name`, which the line at `at` ends (frees or reuses):
    /// `None`, reported, when it is undeclared, not of the kind `need` asks
    /// for, or a constant (which is never ended).
    fn resolve_ended(
        &mut self,
        g: &mut GraphState<'a>,
        at: usize,
        name: &BufName,
        need: Option<Need>,
    ) -> Option<BufRef> {
        let r = g.resolve(self.program, name);
        if !self.declared(g, at, name, r) || need.is_some_and(|need| !self.kind_ok(g, at, name, r, need)) {
            return None;
        }
        if r == BufRef::Constant {
            self.err(
                Self::at(g, at),
                ValidationErrorKind::ConstantEnded { buffer: name.clone() },
            );
            return None;
        }
        Some(r)
    }

    /// Reports `name` when the line at `at` hands its storage on (a reuse,
    /// `free_if_not_reused ... reused`) but `name` is a view of another
    /// buffer's storage.
    fn check_owns_storage(&mut self, g: &GraphState<'a>, at: usize, name: &BufName, storage: Option<usize>) {
        if let Some(st) = viewed_storage(g, name, storage) {
            self.err(
                Self::at(g, at),
                ValidationErrorKind::ReuseOfView {
                    buffer: name.clone(),
                    owner: st.owner.clone(),
                },
            );
        }
    }

    /// Ends `name` (free-like lines). `mark_reused`: `FreeIfNotReused ... reused`.
    pub(super) fn end_buffer(&mut self, g: &mut GraphState<'a>, at: usize, name: &BufName, mark_reused: bool) {
        let Some(r) = self.resolve_ended(g, at, name, None) else {
            return;
        };
        match g.state(r).cloned() {
            None => {
                self.used_before_definition(g, at, name);
            }
            Some(BufState::Ended {
                at: first,
                how: Ending::Freed | Ending::MarkedReused,
            })
            | Some(BufState::Released { at: first, .. }) => {
                self.err(
                    Self::at(g, at),
                    ValidationErrorKind::DoubleFree {
                        buffer: name.clone(),
                        first_freed_at: first,
                    },
                );
            }
            Some(BufState::Ended { at: ended_at, how }) => {
                self.use_after_end(g, at, name, ended_at, how);
            }
            Some(BufState::Live { storage }) => {
                if mark_reused {
                    self.check_owns_storage(g, at, name, storage);
                    // The storage stays allocated; the name may only be `old` of a Reuse now.
                    g.set_state(r, BufState::Released { at, storage });
                } else {
                    let owned = storage
                        .and_then(|id| g.storages.get_mut(id))
                        .filter(|st| st.owner == *name);
                    if let Some(st) = owned {
                        st.freed_at = Some(at);
                    }
                    g.set_state(r, BufState::Ended { at, how: Ending::Freed });
                }
                if let Some(info) = g.info_mut(name, r) {
                    info.ended = Some(at);
                }
            }
        }
    }

    pub(super) fn reuse(&mut self, g: &mut GraphState<'a>, at: usize, old: &BufName, new: &BufName, delete_old: bool) {
        let may_define = self.may_define(g, at, new, Need::Tensor);
        let Some(r) = self.resolve_ended(g, at, old, Some(Need::Tensor)) else {
            return;
        };
        let storage = match g.state(r).cloned() {
            None => {
                self.used_before_definition(g, at, old);
                return;
            }
            Some(BufState::Ended { at: ended_at, how }) => {
                self.use_after_end(g, at, old, ended_at, how);
                return;
            }
            Some(BufState::Released { storage, .. }) => storage,
            Some(BufState::Live { storage }) => {
                if !delete_old {
                    self.err(
                        Self::at(g, at),
                        ValidationErrorKind::ReuseOfLiveBuffer {
                            old: old.clone(),
                            new: new.clone(),
                        },
                    );
                }
                if let Some(info) = g.info_mut(old, r) {
                    info.ended = Some(at);
                }
                storage
            }
        };
        self.check_owns_storage(g, at, old, storage);
        g.touch(old, r, at);
        g.set_state(
            r,
            BufState::Ended {
                at,
                how: Ending::ReusedBy(new.clone()),
            },
        );
        let r_new = g.resolve(self.program, new);
        if let (Some(lo), Some(ln)) = (g.layout_of(self.program, old, r), g.layout_of(self.program, new, r_new)) {
            if lo.dtype != ln.dtype {
                self.err(
                    Self::at(g, at),
                    ValidationErrorKind::ReuseDtypeMismatch {
                        old: old.clone(),
                        new: new.clone(),
                        old_dtype: lo.dtype,
                        new_dtype: ln.dtype,
                    },
                );
            }
            self.check_same_device(g, at, (old, lo), (new, ln));
            // Decided only for constant sizes; syntactically equal storage
            // expressions fit trivially; other symbolic comparisons are accepted.
            if lo.storage_numel_expr() != ln.storage_numel_expr() {
                if let (Some(o), Some(n)) = (const_storage(lo), const_storage(ln)) {
                    if n > o {
                        self.err(
                            Self::at(g, at),
                            ValidationErrorKind::ReuseTooSmall {
                                old: old.clone(),
                                new: new.clone(),
                                old_numel: o,
                                new_numel: n,
                            },
                        );
                    }
                }
            }
            if may_define {
                self.require_layout_symbols(g, at, new, r_new);
            }
        }
        if !may_define {
            return;
        }
        match storage {
            Some(id) => {
                if let Some(st) = g.storages.get_mut(id) {
                    st.owner = new.clone();
                }
                self.define(g, new, Site::Line(at), Some(Some(id)));
            }
            None => self.define(g, new, Site::Line(at), Some(None)),
        }
    }

    pub(super) fn reinterpret(&mut self, g: &mut GraphState<'a>, at: usize, base: &BufName, alias: &BufName) {
        let storage = self.use_buffer(g, at, base, Need::Tensor, true);
        if !self.may_define(g, at, alias, Need::Tensor) {
            return;
        }
        let storage = storage.flatten();
        let r_alias = g.resolve(self.program, alias);
        if let Some(la) = g.layout_of(self.program, alias, r_alias) {
            self.require_layout_symbols(g, at, alias, r_alias);
            let st = storage.and_then(|id| g.storages.get(id)).cloned();
            let capacity = match &st {
                Some(s) => s.capacity,
                None => g.layout(self.program, base),
            };
            let owner = st.as_ref().map(|s| s.owner.clone()).unwrap_or_else(|| base.clone());
            if let Some(cap) = capacity {
                self.check_same_device(g, at, (base, cap), (alias, la));
                let bytes = |l: &Layout| const_storage(l).and_then(|n| n.checked_mul(l.dtype.size_bytes() as i64));
                if let (Some(needed), Some(available)) = (bytes(la), bytes(cap)) {
                    if needed > available {
                        self.err(
                            Self::at(g, at),
                            ValidationErrorKind::ViewOutOfBounds {
                                alias: alias.clone(),
                                owner,
                                needed,
                                available,
                            },
                        );
                    }
                }
            }
        }
        match storage {
            Some(id) => self.define(g, alias, Site::Line(at), Some(Some(id))),
            // The base is a constant or its storage is unknown: the view gets its own record.
            None => self.define(g, alias, Site::Line(at), Some(None)),
        }
    }

    /// Defines the result of an op (extern alloc, multi-output element, cond,
    /// loop): a fresh storage for tensors, none for multi-output values.
    pub(super) fn define_result(&mut self, g: &mut GraphState<'a>, at: usize, name: &BufName, need: Need) {
        if !self.may_define(g, at, name, need) {
            return;
        }
        let storage = if g.layout(self.program, name).is_some() {
            Some(None)
        } else {
            None
        };
        self.define(g, name, Site::Line(at), storage);
    }

    pub(super) fn use_arg(&mut self, g: &mut GraphState<'a>, at: usize, v: &ArgValue) {
        match v {
            ArgValue::Buffer(b) => {
                self.use_buffer(g, at, b, Need::Any, true);
                return;
            }
            ArgValue::Expr(e) => {
                self.use_expr(g, Some(at), e, at);
                return;
            }
            ArgValue::List(_) => {}
            _ => return,
        }
        if self.over_limit(g, at, crate::Limit::TextDepth, v.depth(), || {
            "list argument nested too deep".to_string()
        }) {
            return;
        }
        // Lists: every buffer, then every expression.
        let mut bufs = Vec::new();
        v.for_each_buffer(&mut |b| bufs.push(b.clone()));
        for b in bufs {
            self.use_buffer(g, at, &b, Need::Any, true);
        }
        let mut exprs = Vec::new();
        v.for_each_expr(&mut |e| exprs.push(e.clone()));
        for e in exprs {
            self.use_expr(g, Some(at), &e, at);
        }
    }

    /// Reports a buffer placed on storage of another device: `new` (a
    /// reuse's new buffer, a view) on `old`'s storage (with its layout: the
    /// old buffer's, the storage's capacity).
    fn check_same_device(&mut self, g: &GraphState<'a>, at: usize, old: (&BufName, &Layout), new: (&BufName, &Layout)) {
        if old.1.device != new.1.device {
            self.err(
                Self::at(g, at),
                ValidationErrorKind::DeviceMismatch {
                    old: old.0.clone(),
                    new: new.0.clone(),
                    old_device: old.1.device,
                    new_device: new.1.device,
                },
            );
        }
    }

    // -- lines ------------------------------------------------------------------
}

/// The storage `storage` of `name` when `name` is a view of it: another
/// buffer owns it.
fn viewed_storage<'g, 'a>(g: &'g GraphState<'a>, name: &BufName, storage: Option<usize>) -> Option<&'g Storage<'a>> {
    storage.and_then(|id| g.storages.get(id)).filter(|st| st.owner != *name)
}

//! Allocations, views, reuses and new references of tensors.

use super::*;

impl<'a> Lowering<'a> {
    pub(super) fn allocate(&mut self, g: &GraphCtx<'_>, buffer: &BufName, cx: &Cx<'_>) -> Result<(), Error> {
        let layout = g.layout(buffer, cx)?;
        if layout.offset != SymExpr::Int(0) {
            return Err(self.unsupported(cx, format!("allocating `{buffer}` with a storage offset")));
        }
        let d = self.dialect;
        d.allocate(self, g.var(buffer), layout, cx)
    }

    /// A view expression of `base` with `layout` (AOTI: an RAII handle expression).
    pub(super) fn view_expr(
        &mut self,
        base: &str,
        base_layout: &Layout,
        layout: &Layout,
        cx: &Cx<'_>,
    ) -> Result<String, Error> {
        if base_layout.dtype.size_bytes() != layout.dtype.size_bytes() {
            return Err(self.unsupported(
                cx,
                format!(
                    "a view of `{base}` changing the element size ({} to {})",
                    base_layout.dtype, layout.dtype
                ),
            ));
        }
        let sizes = self.int_array(&layout.size);
        let strides = self.int_array(&layout.stride);
        let offset = self.cexpr(&layout.offset);
        let d = self.dialect;
        Ok(d.view(self, base, base_layout, layout, &sizes, &strides, &offset))
    }

    /// A new reference to the same tensor (AOTI: a new handle).
    pub(super) fn share(&mut self, src: &str, dst: &str) {
        let d = self.dialect;
        d.share(self, src, dst);
    }

    pub(super) fn same_layout(a: &Layout, b: &Layout) -> bool {
        a.size == b.size && a.stride == b.stride && a.offset == b.offset && a.dtype == b.dtype
    }

    pub(super) fn reuse(
        &mut self,
        g: &GraphCtx<'_>,
        old: &BufName,
        new: &BufName,
        delete_old: bool,
        cx: &Cx<'_>,
    ) -> Result<(), Error> {
        let old_layout = g.layout(old, cx)?;
        let new_layout = g.layout(new, cx)?;
        let (o, n) = (g.local(old), g.local(new));
        if Self::same_layout(old_layout, new_layout) {
            if delete_old {
                self.line(format!("auto {n} = std::move({o});  // reuse"));
                self.declare(&n);
            } else {
                self.share(&o, &n);
            }
            return Ok(());
        }
        let view = self.view_expr(&o, old_layout, new_layout, cx)?;
        if delete_old {
            self.line(format!("auto {n} = {view}; {o}.reset();  // reuse"));
        } else {
            self.line(format!("auto {n} = {view};  // reuse"));
        }
        self.declare(&n);
        Ok(())
    }

    pub(super) fn reinterpret(
        &mut self,
        g: &GraphCtx<'_>,
        base: &BufName,
        alias: &BufName,
        cx: &Cx<'_>,
    ) -> Result<(), Error> {
        let base_layout = g.layout(base, cx)?;
        let alias_layout = g.layout(alias, cx)?;
        let (b, a) = (g.local(base), g.local(alias));
        if Self::same_layout(base_layout, alias_layout) {
            self.share(&b, &a);
            return Ok(());
        }
        let view = self.view_expr(&b, base_layout, alias_layout, cx)?;
        self.line(format!("auto {a} = {view};  // alias"));
        self.declare(&a);
        Ok(())
    }
}

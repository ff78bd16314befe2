//! Allocations, views, reuses and new references of tensors.

use super::*;

impl<'a> Lowering<'a> {
    pub(super) fn allocate(&mut self, g: &GraphCtx<'_>, buffer: &BufName, cx: &Cx<'_>) -> Result<(), Error> {
        let layout = g.layout(buffer);
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
        let geometry = format!("{}, {sizes}, {strides}, {offset}", layout.rank());
        let d = self.dialect;
        Ok(d.view(self, base, base_layout, layout, &geometry))
    }

    /// A new reference to the same tensor (AOTI: a new handle).
    pub(super) fn share(&mut self, src: &str, dst: &str) {
        let d = self.dialect;
        d.share(self, src, dst);
    }

    pub(super) fn same_layout(a: &Layout, b: &Layout) -> bool {
        a.size == b.size && a.stride == b.stride && a.offset == b.offset && a.dtype == b.dtype
    }

    /// The one rule of a `Reuse` (`moved`: `delete_old`) and a
    /// `Reinterpret` line: declares `dst` as `src` itself where their layouts
    /// agree (moved when `moved`, else shared), otherwise as a view of `src`
    /// (and resets `src` when `moved`); `note` is the line's trailing comment.
    pub(super) fn declare_view(
        &mut self,
        g: &GraphCtx<'_>,
        (src, dst): (&BufName, &BufName),
        moved: bool,
        note: &str,
        cx: &Cx<'_>,
    ) -> Result<(), Error> {
        let src_layout = g.layout(src);
        let dst_layout = g.layout(dst);
        let (s, d) = (g.local(src), g.local(dst));
        if Self::same_layout(src_layout, dst_layout) {
            if moved {
                self.line(format!("auto {d} = std::move({s});  // {note}"));
                self.declare(&d);
            } else {
                self.share(&s, &d);
            }
            return Ok(());
        }
        let view = self.view_expr(&s, src_layout, dst_layout, cx)?;
        if moved {
            self.line(format!("auto {d} = {view}; {s}.reset();  // {note}"));
        } else {
            self.line(format!("auto {d} = {view};  // {note}"));
        }
        self.declare(&d);
        Ok(())
    }
}

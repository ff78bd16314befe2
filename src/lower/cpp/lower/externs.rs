//! Extern (ATen) ops, index_put and scatter fallbacks: what both dialects
//! share (the result variables, the op's device; the fallbacks' calls are
//! the lines' own, `IndexPutFallback::extern_call` and
//! `ScatterFallback::extern_call`); the call itself is the dialect's
//! ([`DialectOps::extern_call`], [`DialectOps::index_put`]).

use super::*;

impl Lowering<'_> {
    /// The device an extern call runs on: its result's, its output's or its first tensor's.
    pub(super) fn extern_device(&self, g: &GraphCtx<'_>, call: &ExternCall, out: Option<&BufName>) -> Device {
        let mut candidates: Vec<BufName> = Vec::new();
        candidates.extend(out.cloned());
        candidates.extend(call.result.clone());
        for a in call.args.iter().chain(call.kwargs.values()) {
            a.for_each_buffer(&mut |b| candidates.push(b.clone()));
        }
        candidates
            .iter()
            .find_map(|b| g.tensor_layout(b).map(|l| l.device))
            .unwrap_or(Device::cuda(0))
    }

    pub(super) fn extern_call(
        &mut self,
        g: &GraphCtx<'_>,
        call: &ExternCall,
        out: Option<&BufName>,
        cx: &Cx<'_>,
    ) -> Result<(), Error> {
        // Result variables: one tensor, or one per element of a multi-output value.
        let results: Vec<String> = match &call.result {
            None => vec![],
            Some(r) if g.is_multi(r) => g.leaf_vars(r),
            Some(r) => vec![g.local(r)],
        };
        let site = ExternSite {
            g,
            call,
            out,
            results: &results,
            cx,
        };
        let d = self.dialect;
        d.extern_call(self, &site)
    }

    /// A scatter fallback: its extern call under the dialect's op name,
    /// the target passed as `out=` where the dialect calls the `_out` form.
    pub(super) fn scatter(&mut self, g: &GraphCtx<'_>, s: &ScatterFallback, cx: &Cx<'_>) -> Result<(), Error> {
        let (op, target_out) = self.dialect.scatter_op(&s.op);
        let call = ExternCall { op, ..s.extern_call() };
        self.extern_call(g, &call, target_out.then_some(&s.target), cx)
    }
}

//! Extern-op coverage against Inductor: every op Inductor can leave as an
//! extern call, with what each backend does with it (`wrapir ops --all`,
//! `docs/OPS.md`).
//!
//! The op list is generated from Inductor's own registrations
//! (`inductor_ops.tsv`, written by `fixtures/inductor/inductor_fallbacks.py`
//! from each supported PyTorch: its `make_fallback` set, fallback handlers,
//! `extern_kernels.*` and the ops of its extern IR nodes; never typed by
//! hand). What runs each op comes from the extern-op catalogue
//! ([`super::op::CATALOGUE`]) and the host registry, the same views the
//! backends dispatch through, so the table cannot claim an op a backend
//! does not register (tests in `device_ops` and `exec::cuda` hold the
//! registries to the catalogue).

use super::device_ops::cuda_op;
use super::host::HostBackend;
use super::op::{op_key, stream, CATALOGUE, OWN_ATTENTION, VIEW};

/// The generated list: `key<TAB>versions<TAB>sources` per line, `#` comments.
const INDUCTOR_OPS: &str = include_str!("inductor_ops.tsv");

/// One op Inductor can leave as an extern call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InductorOp {
    /// The registry key (`aten.sort`; `extern_kernels.mm` is `aten.mm`).
    pub key: &'static str,
    /// The PyTorch versions whose Inductor has it (`2.11,2.15`).
    pub versions: &'static str,
    /// Where Inductor registers it (`make_fallback`, `fallback_handler`,
    /// `extern_kernels`, `extern_kernel_ir`), comma-separated.
    pub sources: &'static str,
}

/// Every op of the generated list, in key order.
pub fn inductor_ops() -> Vec<InductorOp> {
    INDUCTOR_OPS
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| {
            let mut f = l.split('\t');
            Some(InductorOp {
                key: f.next()?,
                versions: f.next()?,
                sources: f.next()?,
            })
        })
        .collect()
}

/// What one backend does with an op.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Status {
    /// Runs it: how (`host code`, `vendor library (cuBLASLt)`, `own kernel
    /// (built-in kernel)`, `view`, `no device work`).
    Runs(String),
    /// Runs it only on the host through the CUDA backend's host fallback
    /// (`--allow-host-fallback`); an error without it.
    HostFallback,
    /// Refuses it (`wrapir check --device` names it): why.
    Refused(String),
}

impl Status {
    /// The table cell.
    pub fn cell(&self) -> String {
        match self {
            Status::Runs(how) => how.clone(),
            Status::HostFallback => "refused; host code with --allow-host-fallback".to_string(),
            Status::Refused(why) => format!("refused: {why}"),
        }
    }
}

/// One row of the coverage table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Row {
    /// The op's registry key.
    pub key: String,
    /// The PyTorch versions whose Inductor can leave it as an extern call
    /// (empty: an op the catalogue knows that is outside Inductor's explicit
    /// set, such as an implicit fallback or a view).
    pub versions: String,
    /// On the cpu (host) backend.
    pub cpu: Status,
    /// On the cuda backend.
    pub cuda: Status,
}

/// Why a backend has no implementation of `key`, by what the op is.
fn missing(key: &str) -> String {
    let ns = key.split('.').next().unwrap_or("");
    if !key.contains('.') {
        "a higher-order op, not an extern op a backend runs".to_string()
    } else if matches!(ns, "mkldnn" | "onednn" | "mkl" | "quantized" | "_quantized") {
        "a oneDNN / MKL / quantized op of Inductor's CPU lowerings; not implemented".to_string()
    } else {
        "not implemented".to_string()
    }
}

/// What the cpu backend does with `key`.
fn on_cpu(key: &str, host: &HostBackend) -> Status {
    if stream::is_stream_op(key) {
        Status::Runs("no device work (program order)".into())
    } else if host.has_op(key) {
        Status::Runs("host code".into())
    } else {
        Status::Refused(missing(key))
    }
}

/// What the cuda backend does with `key`.
fn on_cuda(key: &str, host: &HostBackend) -> Status {
    if stream::is_stream_op(key) {
        return Status::Runs("no device work (program order)".into());
    }
    match cuda_op(key) {
        Some(row) => Status::Runs(match row.via {
            VIEW => "view (no device work)".to_string(),
            OWN_ATTENTION => format!("own kernel ({OWN_ATTENTION})"),
            via if via.starts_with("cu") => format!("vendor library ({via})"),
            via => format!("own kernel ({via})"),
        }),
        None if host.has_op(key) => Status::HostFallback,
        None => Status::Refused(missing(key)),
    }
}

/// The table: Inductor's ops in key order, then the catalogue's ops outside
/// that list (views, implicit fallbacks, wrapir's own ops).
pub fn coverage() -> Vec<Row> {
    let host = HostBackend::default();
    let listed = inductor_ops();
    let row = |key: &str, versions: &str| Row {
        key: key.to_string(),
        versions: versions.to_string(),
        cpu: on_cpu(key, &host),
        cuda: on_cuda(key, &host),
    };
    let mut rows: Vec<Row> = listed.iter().map(|op| row(op.key, op.versions)).collect();
    let mut others: Vec<&str> = CATALOGUE
        .iter()
        .map(|e| e.key)
        .chain(stream::STREAM_OPS.iter().copied())
        .filter(|k| !listed.iter().any(|op| op.key == *k))
        .collect();
    others.sort_unstable();
    others.dedup();
    rows.extend(others.into_iter().map(|k| row(k, "")));
    rows
}

/// `wrapir ops --all`: one line per op (`key  versions  cpu  cuda`), aligned.
pub fn text_table(rows: &[Row]) -> String {
    let head = ["op", "inductor", "cpu", "cuda"];
    let cells: Vec<[String; 4]> = rows
        .iter()
        .map(|r| {
            let versions = if r.versions.is_empty() {
                "-".to_string()
            } else {
                r.versions.clone()
            };
            [r.key.clone(), versions, r.cpu.cell(), r.cuda.cell()]
        })
        .collect();
    let width = |i: usize| {
        cells
            .iter()
            .map(|c| c[i].len())
            .chain([head[i].len()])
            .max()
            .unwrap_or(0)
    };
    let (w0, w1, w2) = (width(0), width(1), width(2));
    let mut out = format!("{:<w0$}  {:<w1$}  {:<w2$}  {}\n", head[0], head[1], head[2], head[3]);
    for c in &cells {
        out += &format!("{:<w0$}  {:<w1$}  {:<w2$}  {}\n", c[0], c[1], c[2], c[3]);
    }
    out += &summary(rows);
    out
}

/// The counts under the table.
fn summary(rows: &[Row]) -> String {
    let listed = rows.iter().filter(|r| !r.versions.is_empty()).count();
    let runs = |f: fn(&Row) -> &Status| {
        rows.iter()
            .filter(|r| !r.versions.is_empty() && matches!(f(r), Status::Runs(_)))
            .count()
    };
    format!(
        "{listed} ops Inductor can leave as extern calls: {} run on cpu, {} on cuda ({} more through the host fallback)\n",
        runs(|r| &r.cpu),
        runs(|r| &r.cuda),
        rows.iter()
            .filter(|r| !r.versions.is_empty() && r.cuda == Status::HostFallback)
            .count()
    )
}

/// `docs/OPS.md`: the table as Markdown, with how it is made.
pub fn markdown(rows: &[Row]) -> String {
    let mut out = String::from(
        "# Extern ops: coverage against Inductor\n\n\
         <!-- Generated by `wrapir ops --all --markdown`; tests/ops.rs fails while this file differs. -->\n\n\
         Every op that PyTorch Inductor (the versions in the second column) can leave as an extern call,\n\
         read from its own registrations by `fixtures/inductor/inductor_fallbacks.py` (its `make_fallback`\n\
         set, fallback handlers, `extern_kernels.*` and the ops of its extern IR nodes), and what each\n\
         backend does with it, from the extern-op catalogue (`src/exec/op/catalogue.rs`) and the host\n\
         registry. `vendor library` is the library call PyTorch makes; `own kernel` is wrapir's NVRTC\n\
         kernel; `host code` is the host backend's Rust. Inductor's implicit fallbacks (an op with\n\
         neither a lowering nor a decomposition) are not enumerable and not listed; the last rows are\n\
         the catalogue's ops outside the list. `wrapir check --device D` names every op of a program\n\
         that D refuses.\n\n\
         | op | inductor | cpu | cuda |\n|---|---|---|---|\n",
    );
    for r in rows {
        let versions = if r.versions.is_empty() {
            "-"
        } else {
            r.versions.as_str()
        };
        out += &format!(
            "| `{}` | {} | {} | {} |\n",
            r.key,
            versions.replace(',', ", "),
            r.cpu.cell(),
            r.cuda.cell()
        );
    }
    out += "\n";
    out += &summary(rows);
    out
}

/// The row of `op` (any spelling [`op_key`] accepts).
pub fn row_of(op: &str) -> Option<Row> {
    let key = op_key(op);
    coverage().into_iter().find(|r| r.key == key)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::host::HostBackend;

    #[test]
    fn the_generated_list_parses_and_every_catalogue_op_has_a_row() {
        let ops = inductor_ops();
        assert!(ops.len() > 200, "{} ops", ops.len());
        for op in &ops {
            assert!(!op.versions.is_empty() && !op.sources.is_empty(), "{op:?}");
        }
        let rows = coverage();
        for e in CATALOGUE {
            assert!(rows.iter().any(|r| r.key == e.key), "`{}` has no row", e.key);
        }
    }

    /// A row says an op runs exactly where the registries run it.
    #[test]
    fn every_claim_is_a_registry_entry() {
        let host = HostBackend::default();
        for r in coverage() {
            let stream = stream::is_stream_op(&r.key);
            assert_eq!(
                matches!(r.cpu, Status::Runs(_)),
                stream || host.has_op(&r.key),
                "{}",
                r.key
            );
            assert_eq!(
                matches!(r.cuda, Status::Runs(_)),
                crate::exec::device_ops::runs_on_cuda(&r.key),
                "{}",
                r.key
            );
            if r.cuda == Status::HostFallback {
                assert!(host.has_op(&r.key), "{}", r.key);
            }
        }
        // The ops issue 39's sweep reached run on both devices.
        use crate::exec::op::key::{INT_MM, MM, SORT, TOPK};
        for key in [SORT, INT_MM, TOPK, MM] {
            let r = row_of(key).unwrap();
            assert!(matches!((&r.cpu, &r.cuda), (Status::Runs(_), Status::Runs(_))), "{r:?}");
        }
        assert_eq!(
            row_of("extern_kernels._int_mm").unwrap().cuda,
            Status::Runs("vendor library (cuBLASLt)".into())
        );
    }
}

//! `wrapir ops`: the extern ops each backend runs (`--device`), and with
//! `--all` the coverage table against Inductor (`exec::coverage`).

use crate::RunDevice;
use anyhow::{bail, Result};

/// What `wrapir ops` prints for these flags.
pub(crate) fn output(device: Option<RunDevice>, markdown: bool, all: bool) -> Result<String> {
    use wrapir::exec::coverage;
    Ok(match (all, markdown) {
        (true, true) => coverage::markdown(&coverage::coverage()),
        (true, false) => coverage::text_table(&coverage::coverage()),
        (false, true) => {
            if !matches!(device, None | Some(RunDevice::Cuda)) {
                bail!("--markdown prints the cuda table; leave out --device or give `--device cuda`");
            }
            wrapir::exec::device_ops::markdown_table()
        }
        (false, false) => listing(device),
    })
}

/// `wrapir ops`: the extern ops of one backend (`Some`), one per line, or of
/// every backend, grouped under a header each (`None`).
fn listing(device: Option<RunDevice>) -> String {
    let cuda = || {
        let rows = wrapir::exec::device_ops::cuda_ops();
        let w_op = rows.iter().map(|r| r.op.len()).max().unwrap_or(0);
        let w_via = rows.iter().map(|r| r.via.len()).max().unwrap_or(0);
        rows.iter()
            .map(|r| format!("{:<w_op$}  {:<w_via$}  {}", r.op, r.via, r.dtypes))
            .collect::<Vec<_>>()
    };
    let cpu = || wrapir::exec::host::HostBackend::default().op_names();
    let meta = || {
        vec![
            "every extern op, shapes only: a result takes its declared layout, an `out=` or in-place op writes \
nothing, an op with no declared result gives an opaque value"
                .to_string(),
        ]
    };
    let lines = |v: Vec<String>, indent: &str| v.iter().map(|l| format!("{indent}{l}\n")).collect::<String>();
    match device {
        Some(RunDevice::Cuda) => lines(cuda(), ""),
        Some(RunDevice::Cpu) => lines(cpu(), ""),
        Some(RunDevice::Meta) => lines(meta(), ""),
        None => format!(
            "cuda (on the device; any other op is an error unless --allow-host-fallback runs it on the host):\n{}\
             cpu (the host op registry):\n{}\
             meta:\n{}",
            lines(cuda(), "  "),
            lines(cpu(), "  "),
            lines(meta(), "  ")
        ),
    }
}

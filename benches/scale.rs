//! Scale: the release `wrapir` CLI on generated programs of 20k, 200k and
//! 2M lines (`.wir` text, lines as the file has them), three shapes:
//!
//! - `launches`: the lowering benchmark's program (`common::generate`):
//!   Triton launches with symbolic, unbacked and precomputed sizes,
//!   allocations, frees, reuses, extern calls, asserts;
//! - `wide`: many sibling `cond`/`while_loop` subgraphs
//!   (`common::subgraphs::wide`);
//! - `deep`: chains of `cond`s nested to the default `max_subgraph_depth`
//!   (`common::subgraphs::deep`).
//!
//! Each program is written to a private scratch directory and run through
//! `wrapir check`, `print`, `lower --target` python, cpp, cpp-standalone
//! and fx, and `run --device meta`, one process at a time; each measure is
//! the median wall time of `SCALE_REPEATS` runs (default 3, at a million
//! lines and more `SCALE_LARGE_REPEATS`, default 1) and the largest
//! peak resident set of those runs (the child's `ru_maxrss` from `wait4`).
//! Every run must exit 0. The ratio column is the time at the largest size
//! over the time at the one before it; target: at most 12 for 2M over 200k.
//!
//! Run with `cargo bench --bench scale`. Environment (all optional):
//! `SCALE_SIZES=20000,200000` (lines), `SCALE_SHAPES=launches,wide,deep`,
//! `SCALE_VERBS=check,print,python,cpp,cpp-standalone,fx,meta`,
//! `SCALE_REPEATS=3`, `SCALE_LARGE_REPEATS=1` (runs at a million lines and
//! more), `SCALE_TIMEOUT_S=600` (a run past it is killed and
//! reported; the larger sizes of that verb are skipped),
//! `SCALE_MAX_RSS_MIB=8192` (a run whose resident set passes it is killed
//! and reported likewise), `SCALE_WRITE_TO=DIR` (only write the programs
//! there, as `<shape>_<size>.wir`, for profiling one verb by hand; existing
//! files are not overwritten).

mod common;

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use wrapir::exec::host::kernels::ScratchDir;
use wrapir::ir::Program;

/// The program shapes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Shape {
    Launches,
    Wide,
    Deep,
}

impl Shape {
    const ALL: [Shape; 3] = [Shape::Launches, Shape::Wide, Shape::Deep];

    fn name(self) -> &'static str {
        match self {
            Shape::Launches => "launches",
            Shape::Wide => "wide",
            Shape::Deep => "deep",
        }
    }

    /// The program of `units` units: main-graph lines, subgraph sites,
    /// chains.
    fn program(self, units: usize) -> Program {
        match self {
            Shape::Launches => common::generate(common::Size::lines(units), 7).program,
            Shape::Wide => common::subgraphs::wide(units),
            Shape::Deep => common::subgraphs::deep(units, wrapir::Limits::default().max_subgraph_depth),
        }
    }

    /// Units of a small program, to learn the lines per unit from.
    fn calibration_units(self) -> usize {
        match self {
            Shape::Launches => 20_000,
            Shape::Wide => 1_000,
            Shape::Deep => 20,
        }
    }
}

/// The verbs: the CLI's arguments before the program's path.
const VERBS: [(&str, &[&str]); 7] = [
    ("check", &["check"]),
    ("print", &["print"]),
    ("python", &["lower", "--target", "python"]),
    ("cpp", &["lower", "--target", "cpp"]),
    ("cpp-standalone", &["lower", "--target", "cpp-standalone"]),
    ("fx", &["lower", "--target", "fx"]),
    // Every while loop's predicate is false (the generated `cond`s' are symbolic).
    ("meta", &["run", "--device", "meta", "--predicate", "false"]),
];

/// Arguments every run takes: the C++ wrappers inline every subgraph once,
/// and these programs have more than the default 4,096.
const COMMON_ARGS: &[&str] = &["--max-inlined-subgraphs", "100000000"];

/// One process's cost.
#[derive(Clone, Copy, Debug)]
struct Cost {
    wall: Duration,
    /// Peak resident set, KiB.
    max_rss_kib: u64,
}

/// Why a run did not give a cost.
#[derive(Debug)]
enum Failure {
    TimedOut(Duration),
    OverMemory(u64),
    Failed(String),
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::TimedOut(d) => write!(f, "> {} s (killed)", d.as_secs()),
            Failure::OverMemory(kib) => write!(f, "> {} MiB RSS (killed)", kib / 1024),
            Failure::Failed(why) => write!(f, "failed: {why}"),
        }
    }
}

/// The resident set of process `pid` in KiB (`VmRSS`), if readable.
fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Runs `wrapir args...` with stdout discarded and stderr to `stderr_path`,
/// killing it past `timeout` or `max_rss_kib`.
fn run_once(
    bin: &Path,
    args: &[&str],
    stderr_path: &Path,
    timeout: Duration,
    max_rss_kib: u64,
) -> Result<Cost, Failure> {
    let stderr = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(stderr_path)
        .map_err(|e| Failure::Failed(format!("stderr file: {e}")))?;
    let start = Instant::now();
    let child = Command::new(bin)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .map_err(|e| Failure::Failed(format!("spawn {}: {e}", bin.display())))?;
    let pid = child.id();
    let mut killed = None;
    let mut polls: u64 = 0;
    loop {
        let mut status: libc::c_int = 0;
        // SAFETY: `rusage` is plain data that wait4 fills in; all-zero is a valid value.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: `pid` is our child, not yet reaped (`child` is never waited
        // on through std); `status` and `usage` are valid for writes.
        let reaped = unsafe { libc::wait4(pid as libc::pid_t, &mut status, libc::WNOHANG, &mut usage) };
        if reaped == pid as libc::pid_t {
            let wall = start.elapsed();
            if let Some(f) = killed {
                return Err(f);
            }
            let max_rss_kib = u64::try_from(usage.ru_maxrss).unwrap_or(0);
            if libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0 {
                return Ok(Cost { wall, max_rss_kib });
            }
            let tail = std::fs::read_to_string(stderr_path).unwrap_or_default();
            let tail: String = tail.lines().rev().take(5).collect::<Vec<_>>().join(" / ");
            return Err(Failure::Failed(format!("status {status:#x}: {tail}")));
        }
        if reaped < 0 {
            return Err(Failure::Failed(format!("wait4: {}", std::io::Error::last_os_error())));
        }
        polls += 1;
        if killed.is_none() {
            if start.elapsed() > timeout {
                killed = Some(Failure::TimedOut(timeout));
            } else if polls % 50 == 0 {
                if let Some(rss) = rss_kib(pid).filter(|&r| r > max_rss_kib) {
                    killed = Some(Failure::OverMemory(rss));
                }
            }
            if killed.is_some() {
                // SAFETY: `pid` is our child and not yet reaped, so the id is still its own.
                unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
            }
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// The median wall time and the largest peak RSS of `repeats` runs.
fn measure(
    bin: &Path,
    args: &[&str],
    stderr_path: &Path,
    repeats: usize,
    timeout: Duration,
    max_rss_kib: u64,
) -> Result<Cost, Failure> {
    let mut walls = Vec::new();
    let mut max_rss = 0;
    for _ in 0..repeats.max(1) {
        let c = run_once(bin, args, stderr_path, timeout, max_rss_kib)?;
        walls.push(c.wall);
        max_rss = max_rss.max(c.max_rss_kib);
    }
    walls.sort();
    Ok(Cost {
        wall: walls[walls.len() / 2],
        max_rss_kib: max_rss,
    })
}

fn env_list(name: &str) -> Option<Vec<String>> {
    std::env::var(name).ok().map(|v| {
        v.split(',')
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .collect()
    })
}

fn env_num(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(default)
}

/// Writes `text` to a new file `path` (never through an existing name).
fn write_new(path: &Path, text: &str) -> std::io::Result<()> {
    let mut f: File = OpenOptions::new().write(true).create_new(true).open(path)?;
    f.write_all(text.as_bytes())
}

/// The program of `shape` with about `lines` lines of text, and its text.
fn sized(shape: Shape, lines: usize) -> (String, usize) {
    let units0 = shape.calibration_units();
    let lines0 = wrapir::text::print(&shape.program(units0)).lines().count();
    let units = ((lines as f64) * (units0 as f64) / (lines0 as f64)).round().max(1.0) as usize;
    let program = shape.program(units);
    if let Err(e) = wrapir::ir::validate(&program) {
        eprintln!("generated {} program is invalid:\n{e}", shape.name());
        std::process::exit(1);
    }
    let text = wrapir::text::print(&program);
    let n = text.lines().count();
    (text, n)
}

fn fmt_time(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s < 1.0 {
        format!("{:.0} ms", s * 1e3)
    } else {
        format!("{s:.2} s")
    }
}

fn main() {
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_wrapir"));
    let sizes: Vec<usize> = env_list("SCALE_SIZES")
        .map(|v| v.iter().filter_map(|s| s.parse().ok()).collect())
        .unwrap_or_else(|| vec![20_000, 200_000, 2_000_000]);
    let shapes: Vec<Shape> = match env_list("SCALE_SHAPES") {
        Some(v) => Shape::ALL
            .into_iter()
            .filter(|s| v.iter().any(|n| n == s.name()))
            .collect(),
        None => Shape::ALL.to_vec(),
    };
    let verbs: Vec<(&str, &[&str])> = match env_list("SCALE_VERBS") {
        Some(v) => VERBS.into_iter().filter(|(n, _)| v.iter().any(|x| x == n)).collect(),
        None => VERBS.to_vec(),
    };
    let repeats = env_num("SCALE_REPEATS", 3) as usize;
    let large_repeats = env_num("SCALE_LARGE_REPEATS", 1) as usize;
    let timeout = Duration::from_secs(env_num("SCALE_TIMEOUT_S", 600));
    let max_rss_kib = env_num("SCALE_MAX_RSS_MIB", 8192).saturating_mul(1024);
    let scratch = ScratchDir::new_in(&std::env::temp_dir(), "wrapir-scale").unwrap_or_else(|e| {
        eprintln!("scratch directory: {e}");
        std::process::exit(1);
    });
    let stderr_path = scratch.path().join("stderr.txt");
    if let Ok(dir) = std::env::var("SCALE_WRITE_TO") {
        for &shape in &shapes {
            for &size in &sizes {
                let (text, n) = sized(shape, size);
                let path = Path::new(&dir).join(format!("{}_{size}.wir", shape.name()));
                if let Err(e) = write_new(&path, &text) {
                    eprintln!("writing {}: {e}", path.display());
                    std::process::exit(1);
                }
                println!("{}: {n} lines", path.display());
            }
        }
        return;
    }

    println!("command: cargo bench --bench scale");
    println!(
        "binary: {}; {repeats} runs each below 1M lines, {large_repeats} from 1M (median wall time, largest peak RSS)",
        bin.display()
    );
    // results[shape][verb][size]
    let mut rows: Vec<(Shape, &str, Vec<Option<Result<Cost, Failure>>>)> = Vec::new();
    let mut file_lines: Vec<(Shape, Vec<(usize, usize)>)> = Vec::new();
    for &shape in &shapes {
        let mut shape_rows: Vec<(&str, Vec<Option<Result<Cost, Failure>>>)> =
            verbs.iter().map(|(n, _)| (*n, Vec::new())).collect();
        let mut shape_lines = Vec::new();
        for &size in &sizes {
            let (text, n) = sized(shape, size);
            let path = scratch.path().join(format!("{}_{size}.wir", shape.name()));
            if let Err(e) = write_new(&path, &text) {
                eprintln!("writing {}: {e}", path.display());
                std::process::exit(1);
            }
            drop(text);
            shape_lines.push((size, n));
            eprintln!(
                "{} {size}: {n} lines, {} bytes",
                shape.name(),
                std::fs::metadata(&path).map_or(0, |m| m.len())
            );
            let path_str = path.to_string_lossy().into_owned();
            for ((verb, verb_args), (_, results)) in verbs.iter().zip(shape_rows.iter_mut()) {
                // A verb that failed at a smaller size is not run at larger ones.
                if results.iter().any(|r| matches!(r, Some(Err(_)) | None)) {
                    results.push(None);
                    continue;
                }
                let mut args: Vec<&str> = verb_args.to_vec();
                args.extend_from_slice(COMMON_ARGS);
                args.push(&path_str);
                let runs = if size >= 1_000_000 { large_repeats } else { repeats };
                let r = measure(&bin, &args, &stderr_path, runs, timeout, max_rss_kib);
                match &r {
                    Ok(c) => eprintln!("  {verb}: {} ({} MiB)", fmt_time(c.wall), c.max_rss_kib / 1024),
                    Err(f) => eprintln!("  {verb}: {f}"),
                }
                results.push(Some(r));
            }
            let _ = std::fs::remove_file(&path);
        }
        file_lines.push((shape, shape_lines));
        rows.extend(shape_rows.into_iter().map(|(v, r)| (shape, v, r)));
    }

    println!();
    for (shape, lines) in &file_lines {
        let list: Vec<String> = lines
            .iter()
            .map(|(target, n)| {
                format!(
                    "{} -> {} lines",
                    common::thousands(*target as f64),
                    common::thousands(*n as f64)
                )
            })
            .collect();
        println!("{}: {}", shape.name(), list.join(", "));
    }
    println!();
    let mut header = String::from("| shape | verb |");
    let mut rule = String::from("|---|---|");
    for &size in &sizes {
        header += &format!(" {} time | peak RSS |", common::thousands(size as f64));
        rule += "---:|---:|";
    }
    if sizes.len() >= 2 {
        header += " ratio |";
        rule += "---:|";
    }
    println!("{header}\n{rule}");
    for (shape, verb, results) in &rows {
        let mut line = format!("| {} | {verb} |", shape.name());
        for r in results {
            match r {
                Some(Ok(c)) => line += &format!(" {} | {} MiB |", fmt_time(c.wall), c.max_rss_kib / 1024),
                Some(Err(f)) => line += &format!(" {f} | - |"),
                None => line += " skipped | - |",
            }
        }
        if let [.., Some(Ok(a)), Some(Ok(b))] = results.as_slice() {
            line += &format!(" {:.1}x |", b.wall.as_secs_f64() / a.wall.as_secs_f64());
        } else if sizes.len() >= 2 {
            line += " - |";
        }
        println!("{line}");
    }
}

//! Lowering throughput on a generated 100,000-line program: validation, the
//! Python, C++ (AOTI and standalone) and FX lowerings, and the text printer
//! and parser. Prints the median of several runs (after warm-up) per target in
//! program lines per second; the target is 1,000,000 lines/s each.
//!
//! Run with `cargo bench --bench lower`. `LOWER_TARGET=<name>[,<name>...]`
//! (the names of the table's first column, e.g. `LOWER_TARGET='fx lower'`)
//! runs only those targets, and checks only their outputs: what a profile
//! under callgrind needs.

mod common;

use common::{generate, median_time, thousands, validated, Size};
use wrapir::lower::cpp::{Dialect, Options as CppOptions};

const LINES: usize = 100_000;
const WARMUP: usize = 2;
const REPEATS: usize = 9;
const TARGET_LINES_PER_S: f64 = 1e6;

fn main() {
    let gen = generate(Size::lines(LINES), 11);
    let program = &gen.program;
    let lines = program.main.lines.len();
    let info = validated(program);
    let text = wrapir::text::print(program);
    let aoti = CppOptions {
        dialect: Dialect::Aoti,
        ..Default::default()
    };
    let standalone = CppOptions {
        dialect: Dialect::Standalone,
        ..Default::default()
    };
    let python_opts = wrapir::lower::python::Options::default();
    let fx_opts = wrapir::lower::fx::Options::default();
    let only: Option<Vec<String>> = std::env::var("LOWER_TARGET")
        .ok()
        .map(|v| v.split(',').map(|t| t.trim().to_string()).collect());
    let selected = |name: &str| only.as_ref().is_none_or(|o| o.iter().any(|t| t == name));

    // Check every selected target once and report output sizes.
    type Check<'a> = Box<dyn Fn() -> Result<usize, String> + 'a>;
    // A lowering's output size, or its error.
    fn size<E: std::fmt::Display>(lowered: Result<String, E>) -> Result<usize, String> {
        lowered.map(|s| s.len()).map_err(|e| e.to_string())
    }
    let checks: Vec<(&str, Check)> = vec![
        (
            "python",
            Box::new(|| size(wrapir::lower::python::write_string(&info, &python_opts))),
        ),
        (
            "cpp (aoti)",
            Box::new(|| size(wrapir::lower::cpp::write_string(&info, &aoti))),
        ),
        (
            "cpp (standalone)",
            Box::new(|| size(wrapir::lower::cpp::write_string(&info, &standalone))),
        ),
        (
            "fx write_string",
            Box::new(|| size(wrapir::lower::fx::write_string(&info, &fx_opts))),
        ),
        ("text print", Box::new(|| Ok(text.len()))),
    ];
    let outputs: Vec<(&str, Result<usize, String>)> = checks
        .iter()
        .filter(|(name, _)| selected(name))
        .map(|(name, check)| (*name, check()))
        .collect();
    let mut failed = false;
    for (name, r) in &outputs {
        if let Err(e) = r {
            eprintln!("{name} failed: {e}");
            failed = true;
        }
    }
    if failed {
        std::process::exit(1);
    }
    if selected("text parse") {
        match wrapir::text::parse(&text) {
            Ok(back) if back == *program => {}
            Ok(_) => {
                eprintln!("text round trip changed the program");
                std::process::exit(1);
            }
            Err(e) => {
                eprintln!("text parse failed: {e}");
                std::process::exit(1);
            }
        }
    }

    println!("command: cargo bench --bench lower");
    println!(
        "program: {} main-graph lines, {} kernels, {} Triton launches, {} symbols, {} buffers",
        thousands(lines as f64),
        program.kernels.len(),
        thousands(gen.launches as f64),
        program.symbols.len(),
        thousands(program.main.buffers.len() as f64)
    );
    println!(
        "median of {REPEATS} runs after {WARMUP} warm-up runs; target {} lines/s",
        thousands(TARGET_LINES_PER_S)
    );
    println!();
    println!("| target | output bytes | median | lines/s | ratio to target |");
    println!("|---|---:|---:|---:|---:|");
    let sizes: std::collections::HashMap<&str, usize> = outputs
        .iter()
        .filter_map(|(n, r)| r.as_ref().ok().map(|s| (*n, *s)))
        .collect();
    let row = |name: &str, time: &dyn Fn() -> std::time::Duration| {
        if !selected(name) {
            return;
        }
        let time = time();
        let rate = lines as f64 / time.as_secs_f64();
        let bytes = sizes
            .get(name)
            .map(|b| thousands(*b as f64))
            .unwrap_or_else(|| "-".into());
        println!(
            "| {name} | {bytes} | {:.1} ms | {} | {:.2}x |",
            time.as_secs_f64() * 1e3,
            thousands(rate),
            rate / TARGET_LINES_PER_S
        );
    };
    row("validate", &|| {
        median_time(WARMUP, REPEATS, || {
            wrapir::ir::validate(program).map(|i| i.graphs().count())
        })
    });
    row("python", &|| {
        median_time(WARMUP, REPEATS, || {
            wrapir::lower::python::write_string(&info, &python_opts)
        })
    });
    row("cpp (aoti)", &|| {
        median_time(WARMUP, REPEATS, || wrapir::lower::cpp::write_string(&info, &aoti))
    });
    row("cpp (standalone)", &|| {
        median_time(WARMUP, REPEATS, || wrapir::lower::cpp::write_string(&info, &standalone))
    });
    row("fx lower", &|| {
        median_time(WARMUP, REPEATS, || wrapir::lower::fx::lower(&info, &fx_opts))
    });
    row("fx write_string", &|| {
        median_time(WARMUP, REPEATS, || wrapir::lower::fx::write_string(&info, &fx_opts))
    });
    row("text print", &|| {
        median_time(WARMUP, REPEATS, || wrapir::text::print(program))
    });
    row("text parse", &|| {
        median_time(WARMUP, REPEATS, || wrapir::text::parse(&text))
    });
}

//! The `wrapir` command-line tool: a thin shell over the library.

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand, ValueEnum};
use miette::{miette, LabeledSpan, NamedSource};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use wrapir::ir::{self, Program};

#[derive(Parser)]
#[command(name = "wrapir", version, about = "PyTorch Inductor wrapper code as typed data: validate, lower, prove")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Lower a program to wrapper code.
    Lower {
        /// A `.json` or `.wir` program, or `-` for stdin.
        program: PathBuf,
        /// The back end.
        #[arg(long, value_enum, default_value_t = Target::Python)]
        target: Target,
        /// Write here instead of stdout.
        #[arg(short, long)]
        output: Option<PathBuf>,
    },
    /// Print a program in the canonical text form (or JSON).
    Print {
        /// A `.json` or `.wir` program, or `-` for stdin.
        program: PathBuf,
        /// Print JSON instead of the text form.
        #[arg(long)]
        json: bool,
    },
    /// Validate a program; exits non-zero with diagnostics when it is invalid.
    Check {
        /// A `.json` or `.wir` program, or `-` for stdin.
        program: PathBuf,
    },
    /// Symbolic size expressions.
    Sym {
        #[command(subcommand)]
        command: SymCommand,
    },
}

#[derive(Subcommand)]
enum SymCommand {
    /// Prove `A == B`. Prints `proven`, `disproved` (with an assignment) or `unknown`
    /// on the first line; exits 0, 1 or 2 respectively.
    Prove {
        /// Left side, in Inductor's Python syntax.
        a: String,
        /// Right side.
        b: String,
        /// A fact such as `s0 >= 1`, `u0 <= 100`, `ks0 == s0*s1` (repeatable).
        #[arg(long = "assume")]
        assume: Vec<String>,
        /// Print the proof or the counterexample's evaluation.
        #[arg(long)]
        explain: bool,
    },
}

#[derive(Clone, Copy, ValueEnum)]
enum Target {
    /// Inductor's Python wrapper module.
    Python,
    /// Inductor's C++ wrapper (`cpp_wrapper=True`, AOTI shim style).
    Cpp,
    /// A C++17 wrapper that needs only the CUDA driver API and wrapir's runtime header.
    CppStandalone,
    /// The FX graph, printed in torch.fx's readable style.
    Fx,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn run(cli: Cli) -> Result<ExitCode> {
    match cli.command {
        Command::Lower { program, target, output } => {
            let (program, _) = load(&program)?;
            let info = match ir::validate(&program) {
                Ok(info) => info,
                Err(e) => bail!("the program is invalid; run `wrapir check` for details:\n{e}"),
            };
            let text = match target {
                Target::Python => wrapir::lower::python::write_string(&info, &Default::default())?,
                Target::Cpp => cpp(&info, wrapir::lower::cpp::Dialect::Aoti)?,
                Target::CppStandalone => cpp(&info, wrapir::lower::cpp::Dialect::Standalone)?,
                Target::Fx => wrapir::lower::fx::write_string(&info, &Default::default())?,
            };
            write_output(output.as_deref(), &text)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Print { program, json } => {
            let (program, _) = load(&program)?;
            let text = if json { program.to_json() + "\n" } else { wrapir::text::print(&program) };
            write_output(None, &text)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Check { program } => {
            let (program, name) = load(&program)?;
            match ir::validate(&program) {
                Ok(_) => {
                    println!("{name}: valid");
                    Ok(ExitCode::SUCCESS)
                }
                Err(e) => {
                    eprintln!("{name}: invalid\n{e}");
                    Ok(ExitCode::from(1))
                }
            }
        }
        Command::Sym { command: SymCommand::Prove { a, b, assume, explain } } => sym_prove(&a, &b, &assume, explain),
    }
}

fn cpp(info: &ir::ProgramInfo<'_>, dialect: wrapir::lower::cpp::Dialect) -> Result<String> {
    let options = wrapir::lower::cpp::Options { dialect, ..Default::default() };
    Ok(wrapir::lower::cpp::write_string(info, &options)?)
}

fn sym_prove(a: &str, b: &str, assume: &[String], _explain: bool) -> Result<ExitCode> {
    use wrapir::sym::{eval, parse};
    let a = parse(a)?;
    let b = parse(b)?;
    if !assume.is_empty() {
        bail!("--assume needs the e-graph prover, which this build does not have yet");
    }
    // Without the prover, only closed expressions can be decided (by evaluation).
    let empty = eval::Bindings::new();
    match (eval::eval_int(&a, &empty), eval::eval_int(&b, &empty)) {
        (Ok(x), Ok(y)) if x == y => {
            println!("proven");
            Ok(ExitCode::SUCCESS)
        }
        (Ok(x), Ok(y)) => {
            println!("disproved: {a} = {x}, {b} = {y}");
            Ok(ExitCode::from(1))
        }
        _ if a == b => {
            println!("proven");
            Ok(ExitCode::SUCCESS)
        }
        _ => {
            println!("unknown: expressions with symbols need the e-graph prover");
            Ok(ExitCode::from(2))
        }
    }
}

/// Reads a program from a `.json`/`.wir` file or stdin (`-`); JSON is detected
/// by a leading `{`. Parse errors are rendered with the offending source line.
fn load(path: &Path) -> Result<(Program, String)> {
    let (text, name) = if path.as_os_str() == "-" {
        let mut s = String::new();
        std::io::stdin().read_to_string(&mut s).context("reading stdin")?;
        (s, "<stdin>".to_string())
    } else {
        let s = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        (s, path.display().to_string())
    };
    let program = if text.trim_start().starts_with('{') {
        Program::from_json(&text).with_context(|| format!("in {name}"))?
    } else {
        match wrapir::text::parse(&text) {
            Ok(p) => p,
            Err(e) => {
                let offset = byte_offset(&text, e.line, e.column);
                let report = miette!(labels = vec![LabeledSpan::at_offset(offset, "here")], "{}", e.message)
                    .with_source_code(NamedSource::new(name.clone(), text.clone()));
                bail!("cannot parse {name} (line {}, column {}):\n{report:?}", e.line, e.column);
            }
        }
    };
    Ok((program, name))
}

fn byte_offset(text: &str, line: usize, column: usize) -> usize {
    let mut offset = 0;
    for (i, l) in text.split_inclusive('\n').enumerate() {
        if i + 1 == line {
            let col_bytes: usize = l.chars().take(column.saturating_sub(1)).map(char::len_utf8).sum();
            return offset + col_bytes.min(l.len());
        }
        offset += l.len();
    }
    text.len()
}

fn write_output(path: Option<&Path>, text: &str) -> Result<()> {
    match path {
        Some(p) => std::fs::write(p, text).with_context(|| format!("writing {}", p.display())),
        None => {
            let mut out = std::io::stdout().lock();
            out.write_all(text.as_bytes()).context("writing stdout")
        }
    }
}

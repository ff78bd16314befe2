//! The docs and the CLI agree: every shell command block of `README.md`
//! and `python/README.md` is tagged, on the line before its opening fence,
//! `<!-- docs-test: run -->` or `<!-- docs-test: skip (why) -->`, and every
//! `run` block is run here, line by line, as a reader would paste it.
//!
//! The commands run in a scratch directory that links the checkout's
//! `fixtures/`, `python/` and `examples/`, with this build's `wrapir` first
//! on `PATH` and, when a block installs with `pip`, a fresh virtual
//! environment before it (so nothing is installed outside the scratch
//! directory). Blocks of one file share the directory, in order, so a later
//! block sees an earlier one's files (`nonzero.json`, `bert.wirpkg`).
//! `cargo ...` lines are not run: they build what this test already runs
//! (the CLI and the runtime library of this build). A command must exit 0;
//! `wrapir check` may exit 1, its documented "the check found a problem".
//! A block that needs no GPU must be `run`; `skip` says why it cannot be
//! (a GPU, the CUDA toolkit, torchvision, a release install).

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

/// The files whose command blocks are checked.
const DOCS: &[&str] = &["README.md", "python/README.md"];

/// A fenced shell block: where it starts, its tag, its text.
struct Block {
    /// The file, relative to the checkout.
    file: &'static str,
    /// The 1-based line of the opening fence.
    line: usize,
    /// `None`: untagged; `Some(None)`: run; `Some(Some(why))`: skipped.
    tag: Option<Option<String>>,
    /// The lines between the fences.
    body: Vec<String>,
}

/// The shell blocks of `text` (fences whose info string starts with `sh`,
/// `bash`, `shell` or `console`), with the tag on the line before each.
fn shell_blocks(file: &'static str, text: &str) -> Vec<Block> {
    let lines: Vec<&str> = text.lines().collect();
    let mut blocks = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let Some(info) = lines[i].trim_start().strip_prefix("```") else {
            i += 1;
            continue;
        };
        let indent = lines[i].len() - lines[i].trim_start().len();
        let lang = info.split([',', ' ']).next().unwrap_or("");
        let end = (i + 1..lines.len())
            .find(|&j| {
                lines[j].trim_start().starts_with("```") && lines[j].len() - lines[j].trim_start().len() == indent
            })
            .unwrap_or(lines.len());
        if ["sh", "bash", "shell", "console"].contains(&lang) {
            let tag = i.checked_sub(1).and_then(|p| parse_tag(lines[p]));
            blocks.push(Block {
                file,
                line: i + 1,
                tag,
                body: lines[i + 1..end].iter().map(|l| l.to_string()).collect(),
            });
        }
        i = end + 1;
    }
    blocks
}

/// `<!-- docs-test: run -->` is `Some(None)`, `<!-- docs-test: skip (why) -->`
/// is `Some(Some(why))`; anything else is no tag.
fn parse_tag(line: &str) -> Option<Option<String>> {
    let inner = line.trim().strip_prefix("<!--")?.strip_suffix("-->")?.trim();
    let tag = inner.strip_prefix("docs-test:")?.trim();
    if tag == "run" {
        return Some(None);
    }
    let why = tag.strip_prefix("skip")?.trim();
    let why = why.strip_prefix('(')?.strip_suffix(')')?.trim();
    (!why.is_empty()).then(|| Some(why.to_string()))
}

/// The commands of a block: continuation lines (`\` at the end) joined,
/// blank and comment lines dropped, `cargo` lines left out.
fn commands(body: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    let mut pending = String::new();
    for line in body {
        let line = line.trim();
        if let Some(head) = line.strip_suffix('\\') {
            pending += head.trim_end();
            pending.push(' ');
            continue;
        }
        let command = std::mem::take(&mut pending) + line;
        if command.is_empty() || command.starts_with('#') || command.starts_with("cargo ") {
            continue;
        }
        out.push(command);
    }
    out
}

/// Runs the `run` blocks of one file in `dir`: the failures.
fn run_blocks(blocks: &[&Block], dir: &Path, path: &str) -> Vec<String> {
    let mut failures = Vec::new();
    let mut path = path.to_string();
    for block in blocks {
        let cmds = commands(&block.body);
        if cmds.iter().any(|c| c.starts_with("pip ")) && !dir.join("venv").exists() {
            // Installs go into a virtual environment of the scratch directory.
            let made = Command::new("python3")
                .args(["-m", "venv", "venv"])
                .current_dir(dir)
                .output()
                .expect("python3 runs");
            common::assert_tool_ok(&made, format_args!("python3 -m venv"));
            path = format!("{}:{path}", dir.join("venv/bin").display());
        }
        for cmd in cmds {
            let out = Command::new("bash")
                .args(["-c", &cmd])
                .current_dir(dir)
                .env("PATH", &path)
                .output()
                .expect("bash runs");
            let code = out.status.code();
            let finding = cmd.starts_with("wrapir check") && code == Some(1);
            if code != Some(0) && !finding {
                let tail = |b: &[u8]| {
                    let s = String::from_utf8_lossy(b);
                    let lines: Vec<&str> = s.lines().collect();
                    lines[lines.len().saturating_sub(15)..].join("\n")
                };
                failures.push(format!(
                    "{}:{}: `{cmd}` exited with {:?}\n--- stdout\n{}\n--- stderr\n{}",
                    block.file,
                    block.line,
                    code,
                    tail(&out.stdout),
                    tail(&out.stderr)
                ));
            }
        }
    }
    failures
}

/// Links the checkout's folders the commands read into the scratch `dir`.
fn link_checkout(dir: &Path) {
    for name in ["fixtures", "python", "examples"] {
        std::os::unix::fs::symlink(common::root().join(name), dir.join(name)).unwrap();
    }
}

#[test]
fn every_shell_block_of_the_docs_is_tagged() {
    let mut untagged = Vec::new();
    let mut counts = String::new();
    for file in DOCS {
        let text = std::fs::read_to_string(common::root().join(file)).unwrap();
        let blocks = shell_blocks(file, &text);
        assert!(!blocks.is_empty(), "{file} has no shell blocks: is the parser broken?");
        let run = blocks.iter().filter(|b| b.tag == Some(None)).count();
        counts += &format!("{file}: {} blocks, {run} run\n", blocks.len());
        for b in blocks.iter().filter(|b| b.tag.is_none()) {
            untagged.push(format!(
                "{}:{}: a shell block without `<!-- docs-test: run -->` or `<!-- docs-test: skip (why) -->` on the line before it",
                b.file, b.line
            ));
        }
    }
    print!("{counts}");
    common::assert_no_failures(&untagged);
}

#[test]
#[cfg_attr(
    not(wrapir_has_cmake),
    ignore = "needs cmake on PATH (a README block builds a package with it)"
)]
fn every_runnable_command_of_the_docs_runs() {
    let wrapir = PathBuf::from(env!("CARGO_BIN_EXE_wrapir"));
    let bin_dir = wrapir.parent().unwrap();
    assert!(
        bin_dir.join("libwrapir_runtime.so").is_file(),
        "build the runtime library first (`cargo build -p wrapir-runtime`, the same profile as this test): a README block packages a CPU bundle with it"
    );
    let path = format!("{}:{}", bin_dir.display(), std::env::var("PATH").unwrap_or_default());
    let mut failures = Vec::new();
    let mut ran = 0;
    for file in DOCS {
        let text = std::fs::read_to_string(common::root().join(file)).unwrap();
        let blocks = shell_blocks(file, &text);
        let run: Vec<&Block> = blocks.iter().filter(|b| b.tag == Some(None)).collect();
        ran += run.len();
        let dir = common::scratch("docs_commands", &file.replace(['/', '.'], "_"));
        link_checkout(&dir);
        failures.extend(run_blocks(&run, &dir, &path));
        if failures.is_empty() {
            let _ = std::fs::remove_dir_all(&dir);
        }
    }
    assert!(ran > 0, "no block is tagged `run`");
    common::assert_no_failures(&failures);
}

#[test]
fn the_tag_and_block_parser_reads_what_the_docs_write() {
    let text = "intro\n<!-- docs-test: run -->\n```sh\nwrapir a \\\n  --flag   # note\n\n# comment\ncargo build\n```\n\
                <!-- docs-test: skip (needs a GPU) -->\n```bash\nwrapir gpu\n```\n```text\nnot a command\n```\n```sh\nuntagged\n```\n";
    let blocks = shell_blocks("T.md", text);
    assert_eq!(blocks.len(), 3);
    assert_eq!(blocks[0].line, 3);
    assert_eq!(blocks[0].tag, Some(None));
    assert_eq!(commands(&blocks[0].body), ["wrapir a --flag   # note"]);
    assert_eq!(blocks[1].tag, Some(Some("needs a GPU".to_string())));
    assert_eq!(blocks[2].tag, None);
    assert_eq!(parse_tag("<!-- docs-test: skip -->"), None, "a skip says why");
}

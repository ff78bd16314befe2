//! Tidy checks of the source tree (in the manner of rust-analyzer's `tidy`):
//! the import rules ARCHITECTURE.md states, the crates only one module may
//! name, and the size of source files. Each known exception is listed here
//! with the reason it stands.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Which top-level library modules each module may name through `crate::`.
/// `limits` (the resource bounds, re-exported at the crate root) is open to
/// every module.
const ALLOWED: &[(&str, &[&str])] = &[
    ("sym", &[]),
    ("bench", &[]),
    ("limits", &["sym"]),
    ("ir", &["sym"]),
    ("format", &["ir"]),
    ("text", &["ir", "sym"]),
    ("fx", &["ir", "sym"]),
    ("lower", &["ir", "sym", "fx"]),
    ("reconcile", &["ir", "sym", "fx", "lower"]),
    ("exec", &["ir", "sym", "fx", "lower", "text", "bench", "format"]),
    ("bundle", &["ir", "text", "exec", "format"]),
    ("capi", &["ir", "exec", "bundle", "format"]),
    ("runtime", &["ir", "sym", "exec", "bundle", "format", "bench"]),
    ("snapshot", &["ir", "lower"]),
    ("lib", &[]),
];

/// Known exceptions to [`ALLOWED`]: (module, module it names, why). None
/// stand now; an exception added here must say why it stands and how it
/// would be broken.
const EXCEPTIONS: &[(&str, &str, &str)] = &[];

/// The sub-layers of `exec`, bottom first: a file of one may name (through
/// `crate::exec::` or `super::`) the sub-modules of the layers below it and
/// its own sub-module, never one of its own layer or above. `exec/mod.rs`
/// (the `Backend` trait, values, errors) and `args.rs` are the floor every
/// layer stands on; the root's `pub use` lines are the facade, not imports.
const EXEC_LAYERS: &[(&str, &[&str])] = &[
    ("core: values, arguments, the extern-op catalogue", &["op"]),
    ("a graph's dependency DAG", &["dag"]),
    (
        "the interpreter and what a program calls",
        &["interp", "random", "uses"],
    ),
    ("whole-program runs' shared steps", &["run"]),
    ("the host backend", &["host"]),
    (
        "on the host backend: shapes only, ranks, device tables, tensor files, references",
        &[
            "meta",
            "collective",
            "device_ops",
            "safetensors",
            "compare",
            "model_source",
            "cuda_paths",
            "cuda_reports",
        ],
    ),
    ("the extern-op coverage table, over the device tables", &["coverage"]),
    (
        "the CUDA backend (feature `cuda`; its products are `runtime::cuda`)",
        &["cuda"],
    ),
];

/// Crates only these module path prefixes (relative to `src/`) may name.
const CRATE_OWNERS: &[(&str, &[&str])] = &[
    ("egg", &["sym/"]),
    ("cudarc", &["exec/cuda/"]),
    ("anyhow", &["bin/"]),
    ("clap", &["bin/"]),
    ("miette", &["bin/"]),
    ("libc", &["exec/host/kernels/memfd.rs"]),
    ("libloading", &["exec/host/kernels/", "exec/cuda/libraries.rs"]),
    ("miniz_oxide", &["exec/cuda/kernels/image.rs"]),
];

/// Files that may read the process environment: the CLI, and the library's
/// one edge, `exec/cuda_paths.rs` (`CudaPaths::from_env`: where the CUDA
/// libraries and the kernel cache are, which the CLI, the C ABI's init and
/// the examples ask it for). The library itself takes its settings from the
/// caller.
const ENV_READERS: &[&str] = &["bin/", "exec/cuda_paths.rs"];

/// Files that do file I/O (`std::fs`, `File`) of their own, each on paths
/// its caller names, with the reason (ARCHITECTURE.md, "The library does no
/// file or process I/O of its own"). The CLI and tests are not checked.
const FILE_IO: &[(&str, &str)] = &[
    (
        "bundle/",
        "opens (memory-maps) the bundles and packages a caller names, writes packages where told",
    ),
    (
        "capi/",
        "the runtime library: opens the bundles and writes the safetensors files its C caller names",
    ),
    (
        "exec/cuda_paths.rs",
        "lists the Python prefixes' `lib` folders that `CudaPaths::from_env` searches",
    ),
    (
        "exec/cuda/libraries.rs",
        "lists `CudaPaths::library_dirs` for the CUDA libraries the loader opens",
    ),
    (
        "exec/cuda/kernels/image.rs",
        "the compiled built-in kernels' cache in `CudaPaths::kernel_cache`",
    ),
    (
        "exec/host/kernels/",
        "writes a package's CPU kernels into the caller's scratch folder for `dlopen`",
    ),
    (
        "limits.rs",
        "`limits::files`: the one reader of files, within `Limits::max_file_bytes`",
    ),
];

/// Files that read files other than through `limits::files` (which checks a
/// file's size before and while reading it against `Limits::max_file_bytes`),
/// with the reason. The CLI is checked too.
const UNCAPPED_READERS: &[(&str, &str)] = &[
    (
        "bundle/bytes.rs",
        "maps a regular file that `limits::files::open` opened and sized (and checks the mapping's length)",
    ),
    (
        "exec/host/kernels/scratch.rs",
        "its unit test reads back the file it wrote",
    ),
    ("bin/wrapir.rs", "reads `/proc/meminfo` (the host's memory)"),
    (
        "bin/wrapir/bench.rs",
        "reads `/proc/self/stat` and `/proc/uptime` (start-up time)",
    ),
];

/// The most lines a source file may have.
const MAX_LINES: usize = 1000;

/// Files allowed to be longer than [`MAX_LINES`], with the reason.
const LONG_FILES: &[(&str, &str)] = &[("src/text/parse.rs", "the .wir parser: one recursive-descent grammar")];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    let mut entries: Vec<_> = entries.filter_map(Result::ok).map(|e| e.path()).collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// `path` relative to `base`, with `/` separators.
fn relative(path: &Path, base: &Path) -> String {
    let rel = path.strip_prefix(base).unwrap_or(path);
    rel.components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join("/")
}

/// The top-level module a file under `src/` belongs to (`lib` for `lib.rs`).
fn top_module(rel: &str) -> &str {
    let first = rel.split('/').next().unwrap_or(rel);
    first.strip_suffix(".rs").unwrap_or(first)
}

/// The code of a file without its line comments (doc comments included):
/// what comments say about other modules is not an import.
fn code(text: &str) -> String {
    text.lines()
        .map(|l| match l.trim_start().starts_with("//") {
            true => "",
            false => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The top-level modules `code` names through `crate::`: `crate::ir::X`,
/// `use crate::{fx, ir::Y}`.
fn crate_modules(code: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = code;
    while let Some(i) = rest.find("crate::") {
        let before = rest[..i].chars().next_back();
        rest = &rest[i + "crate::".len()..];
        if before.is_some_and(|c| is_ident(c) || c == ':') {
            continue;
        }
        if let Some(group) = rest.strip_prefix('{') {
            // Top-level names of the group, up to its closing brace.
            let mut depth = 0usize;
            let mut start = true;
            for (k, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => start = true,
                    c if start && depth == 0 && is_ident(c) => {
                        let name: String = group[k..].chars().take_while(|c| is_ident(*c)).collect();
                        out.insert(name);
                        start = false;
                    }
                    c if !c.is_whitespace() => start = false,
                    _ => {}
                }
            }
        } else {
            let name: String = rest.chars().take_while(|c| is_ident(*c)).collect();
            if !name.is_empty() {
                out.insert(name);
            }
        }
    }
    out
}

/// `true` when `code` names the crate `krate` as a path root (`krate::...`).
fn names_crate(code: &str, krate: &str) -> bool {
    let pat = format!("{krate}::");
    code.match_indices(&pat).any(|(i, _)| {
        let before = code[..i].chars().next_back();
        !before.is_some_and(|c| is_ident(c) || c == ':')
    })
}

fn library_files() -> Vec<(String, String)> {
    let src = root().join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files
        .into_iter()
        .map(|p| {
            let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            (relative(&p, &src), text)
        })
        .collect()
}

/// The message for each entry of a list of known exceptions that no longer
/// applies (`used` says whether one still does): it must be removed.
fn stale<T>(listed: &[T], used: impl Fn(&T) -> bool, message: impl Fn(&T) -> String) -> Vec<String> {
    listed.iter().filter(|e| !used(e)).map(message).collect()
}

/// A list of known exceptions by path, `(path, reason)` (a path ending in
/// `/` covers the folder), and which of them a check has used.
struct PathExceptions {
    listed: &'static [(&'static str, &'static str)],
    used: BTreeSet<&'static str>,
}

impl PathExceptions {
    /// The exceptions of `listed`, none used yet.
    fn new(listed: &'static [(&'static str, &'static str)]) -> Self {
        PathExceptions {
            listed,
            used: BTreeSet::new(),
        }
    }

    /// Whether an entry covers `rel` (the path itself, or a folder above
    /// it); the entry counts as used.
    fn allows(&mut self, rel: &str) -> bool {
        let entry = self
            .listed
            .iter()
            .find(|(p, _)| rel == *p || (p.ends_with('/') && rel.starts_with(p)));
        if let Some((p, _)) = entry {
            self.used.insert(p);
        }
        entry.is_some()
    }

    /// The [`stale`] message for each entry no check used, from `message(path, reason)`.
    fn stale(&self, message: impl Fn(&str, &str) -> String) -> Vec<String> {
        stale(self.listed, |(p, _)| self.used.contains(p), |(p, why)| message(p, why))
    }
}

/// Passes when there are no violations; otherwise fails listing them, one a line.
#[track_caller]
fn assert_no_violations(violations: &[String]) {
    assert!(violations.is_empty(), "{}", violations.join("\n"));
}

/// The `exec` sub-modules `code` (of the module at `path`, `["exec", "host",
/// "ops"]`) names through `crate::exec::` or `super::` paths.
fn exec_modules(code: &str, path: &[&str]) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let bytes = code.as_bytes();
    let mut i = 0;
    while i < code.len() {
        let rest = &code[i..];
        let starts = rest.starts_with("crate::") || rest.starts_with("super::");
        let before = code[..i].chars().next_back();
        if !starts || before.is_some_and(|c| is_ident(c) || c == ':') {
            i += rest.chars().next().map_or(1, char::len_utf8);
            continue;
        }
        // Resolve the path's prefix to absolute segments.
        let mut abs: Vec<String> = Vec::new();
        let mut at = i;
        if code[at..].starts_with("crate::") {
            at += "crate::".len();
        } else {
            let mut base = path.to_vec();
            while code[at..].starts_with("super::") {
                base.pop();
                at += "super::".len();
            }
            abs.extend(base.iter().map(|s| s.to_string()));
        }
        loop {
            let name: String = code[at..].chars().take_while(|c| is_ident(*c)).collect();
            if name.is_empty() || !code[at + name.len()..].starts_with("::") {
                if !name.is_empty() {
                    abs.push(name);
                }
                break;
            }
            at += name.len() + 2;
            abs.push(name);
        }
        if abs.len() >= 2 && abs[0] == "exec" {
            out.insert(abs[1].clone());
        } else if abs.len() == 1 && abs[0] == "exec" && bytes.get(at) == Some(&b'{') {
            for name in crate_modules(&format!("crate::{}", &code[at..])) {
                out.insert(name);
            }
        }
        i = at.max(i + 1);
    }
    out
}

#[test]
fn exec_sub_layers_import_only_downward() {
    let layer_of: BTreeMap<&str, usize> = EXEC_LAYERS
        .iter()
        .enumerate()
        .flat_map(|(k, (_, names))| names.iter().map(move |n| (*n, k)))
        .collect();
    let mut violations = Vec::new();
    for (rel, text) in library_files() {
        let Some(inside) = rel.strip_prefix("exec/") else {
            continue;
        };
        let mut path: Vec<&str> = std::iter::once("exec").chain(inside.split('/')).collect();
        if let Some(last) = path.last_mut() {
            *last = last.strip_suffix(".rs").unwrap_or(last);
        }
        if path.last() == Some(&"mod") {
            path.pop();
        }
        let code = code(&text);
        // The root's re-exports are its facade.
        let code = match path.as_slice() {
            ["exec"] => code
                .lines()
                .filter(|l| !l.trim_start().starts_with("pub use"))
                .collect::<Vec<_>>()
                .join("\n"),
            _ => code,
        };
        let own = path.get(1).copied().unwrap_or("mod");
        let own = if own == "args" { "mod" } else { own };
        let own_layer = match own {
            "mod" => None,
            m => match layer_of.get(m) {
                Some(k) => Some(*k),
                None => {
                    violations.push(format!("src/{rel}: `exec::{m}` has no row in EXEC_LAYERS"));
                    continue;
                }
            },
        };
        for used in exec_modules(&code, &path) {
            let Some(&used_layer) = layer_of.get(used.as_str()) else {
                continue; // an item of the root, or `args`
            };
            if used == own {
                continue;
            }
            if own_layer.is_none_or(|k| used_layer >= k) {
                violations.push(format!(
                    "src/{rel}: `exec::{own}` ({}) must not import `exec::{used}` ({})",
                    own_layer.map_or("the root", |k| EXEC_LAYERS[k].0),
                    EXEC_LAYERS[used_layer].0
                ));
            }
        }
    }
    assert_no_violations(&violations);
}

/// The one place the library writes an ATen op's name: `ir::op`'s table.
/// Every other file names an op by its `ExternOp`, its `key` or
/// `ir::op::primitive` (a bare `"aten."`, the namespace, is no op's name).
const OP_NAMES_HOME: &str = "ir/op.rs";

#[test]
fn aten_ops_are_named_only_in_ir_op() {
    let names_op = |line: &str| {
        ["\"aten.", "\"torch.ops.aten."].iter().any(|prefix| {
            line.match_indices(prefix).any(|(i, _)| {
                line[i + prefix.len()..]
                    .chars()
                    .next()
                    .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
            })
        })
    };
    let mut violations = Vec::new();
    for (rel, text) in library_files() {
        if rel == OP_NAMES_HOME {
            continue;
        }
        for (n, line) in code(&text).lines().enumerate() {
            if names_op(line) {
                violations.push(format!(
                    "src/{rel}:{}: an ATen op's name outside {OP_NAMES_HOME}: {}",
                    n + 1,
                    line.trim()
                ));
            }
        }
    }
    assert_no_violations(&violations);
}

#[test]
fn modules_import_only_what_the_architecture_allows() {
    let allowed: BTreeMap<&str, &[&str]> = ALLOWED.iter().copied().collect();
    let mut violations = Vec::new();
    let mut exceptions_used = BTreeSet::new();
    for (rel, text) in library_files() {
        let module = top_module(&rel);
        if module == "bin" {
            continue;
        }
        let Some(ok) = allowed.get(module) else {
            violations.push(format!("src/{rel}: module `{module}` has no row in ALLOWED"));
            continue;
        };
        for used in crate_modules(&code(&text)) {
            if used == module
                || matches!(used.as_str(), "limits" | "Limits" | "Limit" | "LimitExceeded")
                || ok.contains(&used.as_str())
            {
                continue;
            }
            if let Some((_, _, _)) = EXCEPTIONS.iter().find(|(m, u, _)| *m == module && *u == used) {
                exceptions_used.insert((module.to_string(), used.clone()));
                continue;
            }
            violations.push(format!("src/{rel}: `{module}` must not import `crate::{used}`"));
        }
    }
    violations.extend(stale(
        EXCEPTIONS,
        |(m, u, _)| exceptions_used.contains(&(m.to_string(), u.to_string())),
        |(m, u, why)| format!("exception ({m} -> {u}: {why}) is no longer needed; remove it"),
    ));
    assert_no_violations(&violations);
}

/// A cycle of `graph` (each node to the nodes it names), as the path that
/// closes it, if there is one.
fn find_cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        m: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        stack: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(i) = stack.iter().position(|s| s == m) {
            let mut found = stack[i..].to_vec();
            found.push(m.to_string());
            return Some(found);
        }
        if !done.insert(m.to_string()) {
            return None;
        }
        stack.push(m.to_string());
        let found = graph
            .get(m)
            .into_iter()
            .flatten()
            .find_map(|next| visit(next, graph, stack, done));
        stack.pop();
        found
    }
    let mut done = BTreeSet::new();
    graph.keys().find_map(|m| visit(m, graph, &mut Vec::new(), &mut done))
}

/// The allowed dependencies (exceptions aside) form no cycle: each module
/// depends only on modules below it.
#[test]
fn the_allowed_dependencies_are_layered() {
    let graph = ALLOWED
        .iter()
        .map(|(m, deps)| (m.to_string(), deps.iter().map(|d| d.to_string()).collect()))
        .collect();
    if let Some(cycle) = find_cycle(&graph) {
        panic!("cycle: {}", cycle.join(" -> "));
    }
}

#[test]
fn only_their_owners_name_the_crates_they_own() {
    let mut violations = Vec::new();
    let mut readers_used = BTreeSet::new();
    for (rel, text) in library_files() {
        let code = code(&text);
        for (krate, owners) in CRATE_OWNERS {
            if names_crate(&code, krate) && !owners.iter().any(|o| rel.starts_with(o)) {
                violations.push(format!("src/{rel} names `{krate}`, which only {owners:?} may"));
            }
        }
        let reads_env = code.contains("std::env::") || code.contains("env::var");
        match ENV_READERS.iter().find(|o| rel.starts_with(*o)) {
            Some(reader) if reads_env => {
                readers_used.insert(*reader);
            }
            Some(_) => {}
            None if reads_env => violations.push(format!(
                "src/{rel} reads the environment; the library takes its settings from the caller \
                 (only {ENV_READERS:?} may read it)"
            )),
            None => {}
        }
    }
    violations.extend(stale(
        ENV_READERS,
        |reader| readers_used.contains(reader),
        |reader| format!("src/{reader} no longer reads the environment; remove it from ENV_READERS"),
    ));
    assert_no_violations(&violations);
}

#[test]
fn only_the_listed_files_do_file_io() {
    let mut violations = Vec::new();
    let mut file_io = PathExceptions::new(FILE_IO);
    for (rel, text) in library_files() {
        if top_module(&rel) == "bin" {
            continue;
        }
        let code = code(&text);
        let does_io = code.contains("std::fs") || names_crate(&code, "fs") || names_crate(&code, "File");
        if does_io && !file_io.allows(&rel) {
            violations.push(format!(
                "src/{rel} does file I/O; the library takes bytes and sources from its caller \
                 (only the files in FILE_IO may, each with its reason)"
            ));
        }
    }
    violations
        .extend(file_io.stale(|p, why| format!("src/{p} ({why}) no longer does file I/O; remove it from FILE_IO")));
    assert_no_violations(&violations);
}

#[test]
fn every_file_read_is_capped() {
    let mut violations = Vec::new();
    let mut readers = PathExceptions::new(UNCAPPED_READERS);
    for (rel, text) in library_files() {
        if rel == "limits.rs" {
            continue;
        }
        let code = code(&text);
        let reads = [
            "fs::read(",
            "fs::read_to_string(",
            ".read_to_end(",
            "Read::read_to_end(",
            ".read_to_string(",
            "Mmap::map(",
            "File::open(",
        ]
        .into_iter()
        .find(|r| code.contains(r));
        if let Some(read) = reads {
            if !readers.allows(&rel) {
                violations.push(format!(
                    "src/{rel} reads a file with `{read}`: read through `wrapir::limits::files` \
                     (the size checked against `Limits::max_file_bytes` before and while reading)"
                ));
            }
        }
    }
    violations.extend(
        readers
            .stale(|p, why| format!("src/{p} ({why}) no longer reads files itself; remove it from UNCAPPED_READERS")),
    );
    assert_no_violations(&violations);
}

#[test]
fn source_files_stay_under_the_line_limit() {
    let root = root();
    let mut files = Vec::new();
    for dir in ["src", "tests", "benches", "examples"] {
        rust_files(&root.join(dir), &mut files);
    }
    let mut violations = Vec::new();
    let mut long_files = PathExceptions::new(LONG_FILES);
    for path in files {
        let rel = relative(&path, &root);
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{rel}: {e}"));
        let lines = text.lines().count();
        if lines > MAX_LINES && !long_files.allows(&rel) {
            violations.push(format!(
                "{rel} has {lines} lines (limit {MAX_LINES}): split it along its seams"
            ));
        }
    }
    violations
        .extend(long_files.stale(|p, why| format!("{p} ({why}) is within the limit now; remove it from LONG_FILES")));
    assert_no_violations(&violations);
}

#[test]
fn the_import_parser_reads_paths_and_groups() {
    let text =
        "use crate::ir::{A, B};\nuse crate::{fx::{self, Op}, sym};\nlet x = crate::lower::fx::lower(p);\nmy_crate::x;";
    let got: Vec<String> = crate_modules(text).into_iter().collect();
    assert_eq!(got, ["fx", "ir", "lower", "sym"]);
    assert!(names_crate("use egg::Id;", "egg"));
    assert!(!names_crate("use my_egg::Id;", "egg"));
    assert_eq!(code("// crate::exec\nlet a = 1;"), "\nlet a = 1;");
    let at = ["exec".to_string(), "cuda".to_string(), "graph".to_string()];
    let got = named_paths("use super::{prepared::{self, Op}, Replay};\nsuper::super::run(x);", &at);
    let want = [
        "exec::cuda::prepared",
        "exec::cuda::prepared::Op",
        "exec::cuda::Replay",
        "exec::run",
    ];
    assert_eq!(got.iter().map(|p| p.join("::")).collect::<Vec<_>>(), want);
}

/// The module path of each library file (`exec/cuda/mod.rs` is
/// `["exec", "cuda"]`), with the files a parent names by `#[path = "…"]`
/// under the name the parent gives them. The binaries are crates of their own.
fn module_paths(files: &[(String, String)]) -> BTreeMap<String, Vec<String>> {
    let mut paths: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (rel, _) in files {
        if top_module(rel) == "bin" {
            continue;
        }
        let mut path: Vec<String> = rel.split('/').map(str::to_string).collect();
        if let Some(last) = path.last_mut() {
            *last = last.strip_suffix(".rs").unwrap_or(last).to_string();
        }
        if matches!(path.last().map(String::as_str), Some("mod" | "lib")) {
            path.pop();
        }
        paths.insert(rel.clone(), path);
    }
    for (rel, text) in files {
        let Some(parent) = paths.get(rel).cloned() else {
            continue;
        };
        let dir = rel.rsplit_once('/').map_or("", |(d, _)| d);
        let mut lines = text.lines().map(str::trim);
        while let Some(line) = lines.next() {
            let Some(target) = line.strip_prefix("#[path = \"").and_then(|l| l.strip_suffix("\"]")) else {
                continue;
            };
            let module = lines
                .find(|l| !l.starts_with("#["))
                .and_then(|l| l.trim_start_matches("pub ").strip_prefix("mod "))
                .and_then(|l| l.strip_suffix(';'));
            if let Some(module) = module {
                let file = if dir.is_empty() {
                    target.to_string()
                } else {
                    format!("{dir}/{target}")
                };
                let mut path = parent.clone();
                path.push(module.to_string());
                paths.insert(file, path);
            }
        }
    }
    paths
}

/// The absolute paths `code` (of the module at `path`) names through
/// `crate::`, `super::` or `self::`, groups expanded:
/// `use super::{a::B, c}` names `…::a::B` and `…::c`.
fn named_paths(code: &str, path: &[String]) -> Vec<Vec<String>> {
    /// The use-tree at the start of `s` below `prefix`, into `out`; returns
    /// how many bytes it read.
    fn tree(s: &str, prefix: &mut Vec<String>, out: &mut Vec<Vec<String>>) -> usize {
        let depth = prefix.len();
        let mut at = 0;
        loop {
            at += s[at..].len() - s[at..].trim_start().len();
            if let Some(group) = s[at..].strip_prefix('{') {
                at += 1;
                let mut read = 0;
                loop {
                    read += group[read..].len() - group[read..].trim_start().len();
                    if group[read..].starts_with('}') || group[read..].is_empty() {
                        read += 1;
                        break;
                    }
                    read += tree(&group[read..], prefix, out);
                    read += group[read..].len() - group[read..].trim_start().len();
                    if group[read..].starts_with(',') {
                        read += 1;
                    }
                }
                at += read;
                break;
            }
            let name: String = s[at..].chars().take_while(|c| is_ident(*c)).collect();
            if name.is_empty() {
                break;
            }
            at += name.len();
            if name != "self" {
                prefix.push(name);
            }
            if !s[at..].starts_with("::") {
                out.push(prefix.clone());
                break;
            }
            at += 2;
        }
        prefix.truncate(depth);
        at.min(s.len())
    }
    let mut out = Vec::new();
    let mut i = 0;
    while i < code.len() {
        let rest = &code[i..];
        let before = code[..i].chars().next_back();
        let root = ["crate::", "super::", "self::"]
            .into_iter()
            .find(|r| rest.starts_with(r));
        let Some(root) = root.filter(|_| !before.is_some_and(|c| is_ident(c) || c == ':')) else {
            i += rest.chars().next().map_or(1, char::len_utf8);
            continue;
        };
        let mut prefix: Vec<String> = match root {
            "crate::" => Vec::new(),
            _ => path.to_vec(),
        };
        let mut at = i + root.len();
        if root == "super::" {
            prefix.pop();
            while code[at..].starts_with("super::") {
                prefix.pop();
                at += "super::".len();
            }
        }
        at += tree(&code[at..], &mut prefix, &mut out);
        i = at.max(i + 1);
    }
    out
}

/// No module imports a sibling that imports it back, directly or through
/// others: in every folder of `src`, the sub-modules' imports of each other
/// (a sub-folder counted as one, its files together; the folder's own
/// `mod.rs`, the parent its children stand on, apart) form no cycle. A
/// name reached through the parent's re-export counts as the parent's.
#[test]
fn no_module_imports_a_sibling_that_imports_it_back() {
    let files = library_files();
    let paths = module_paths(&files);
    let modules: BTreeSet<&[String]> = paths
        .values()
        .flat_map(|p| (1..=p.len()).map(move |k| &p[..k]))
        .collect();
    // (parent folder) -> (sibling -> siblings it names).
    let mut edges: BTreeMap<Vec<String>, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    for (rel, text) in &files {
        let Some(path) = paths.get(rel) else { continue };
        // A file's unit tests are not its structure.
        let code = code(text);
        let code = code.split("#[cfg(test)]\nmod tests").next().unwrap_or(&code);
        for used in named_paths(code, path) {
            let d = path.iter().zip(&used).take_while(|(a, b)| a == b).count();
            if d < path.len() && d < used.len() && modules.contains(&used[..=d]) {
                let parent = path[..d].to_vec();
                edges
                    .entry(parent)
                    .or_default()
                    .entry(path[d].clone())
                    .or_default()
                    .insert(used[d].clone());
            }
        }
    }
    let violations: Vec<String> = edges
        .iter()
        .filter_map(|(parent, graph)| {
            let cycle = find_cycle(graph)?;
            Some(format!(
                "src/{}: an import circle: {}",
                parent.join("/"),
                cycle.join(" -> ")
            ))
        })
        .collect();
    assert_no_violations(&violations);
}

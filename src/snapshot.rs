//! Snapshot testing of generated wrappers in a user's own test suite
//! (feature `insta`).
//!
//! ```no_run
//! # let program = wrapir::ir::Program::new();
//! // In a test: one snapshot per back end (python, cpp, cpp-standalone, fx),
//! // reviewed with `cargo insta review`.
//! wrapir::snapshot::assert_wrapper_snapshots("my_model", &program);
//! ```
//!
//! Snapshots are stable across machines and cache states: kernel hashes, cubin
//! paths and Inductor cache paths are redacted (see [`redact`]).

use crate::ir::{validate, Program};

/// A back end a snapshot can be taken of: every [`crate::lower::Target`].
pub use crate::lower::Target;

/// Why a program could not be rendered for a snapshot.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    /// The program is invalid.
    #[error("program is invalid:\n{0}")]
    Invalid(String),
    /// A back end failed.
    #[error("cannot lower to {target}: {message}")]
    Lower {
        /// The back end.
        target: &'static str,
        /// Its error.
        message: String,
    },
}

/// Renders `program` for `target`, redacted for snapshots.
pub fn render(program: &Program, target: Target) -> Result<String, SnapshotError> {
    let info = validate(program).map_err(|e| SnapshotError::Invalid(e.to_string()))?;
    let text = target.write_string(&info).map_err(|e| SnapshotError::Lower {
        target: target.name(),
        message: e.to_string(),
    })?;
    Ok(redact(&text))
}

/// Asserts one insta snapshot per back end ([`Target::ALL`]), named
/// `<name>@<target>`, using the caller's insta settings (snapshot path,
/// review workflow). A back end that cannot express the program snapshots
/// its error message (`error: ...`), so a program that stops (or starts)
/// lowering shows up in review.
///
/// Panics (it is a test assertion) when the program is invalid.
#[track_caller]
pub fn assert_wrapper_snapshots(name: &str, program: &Program) {
    for target in Target::ALL {
        let text = match render(program, target) {
            Ok(text) => text,
            Err(e @ SnapshotError::Invalid(_)) => panic!("{name}: {e}"),
            Err(SnapshotError::Lower { message, .. }) => format!("error: {message}\n"),
        };
        insta::assert_snapshot!(format!("{name}@{}", target.name()), text);
    }
}

/// Replaces machine- and cache-dependent tokens with stable placeholders:
/// * paths under an Inductor cache directory (`/tmp/torchinductor_<user>/...`) -> `[cache path]`;
/// * `.cubin`, `.ptx`, `.so` file paths -> `[binary path]`;
/// * runs of 40+ lowercase alphanumerics or 32+ uppercase hex digits (kernel and backend hashes) -> `[hash]`.
pub fn redact(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for (i, line) in text.split('\n').enumerate() {
        if i > 0 {
            out.push('\n');
        }
        redact_line(line, &mut out);
    }
    out
}

fn is_path_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '/' | '_' | '-' | '.' | '~')
}

fn redact_line(line: &str, out: &mut String) {
    let chars: Vec<char> = line.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if is_path_char(c) && (i == 0 || !is_path_char(chars[i - 1])) {
            let mut j = i;
            while j < chars.len() && is_path_char(chars[j]) {
                j += 1;
            }
            let token: String = chars[i..j].iter().collect();
            out.push_str(&redact_token(&token));
            i = j;
        } else {
            out.push(c);
            i += 1;
        }
    }
}

fn redact_token(token: &str) -> String {
    if token.contains('/') && token.contains("torchinductor") {
        return "[cache path]".to_string();
    }
    if token.contains('/')
        && [".cubin", ".ptx", ".so", ".hsaco"]
            .iter()
            .any(|ext| token.ends_with(ext))
    {
        return "[binary path]".to_string();
    }
    // Hashes inside identifiers: split on `_`/`.` and redact long hash-like parts.
    let mut result = String::with_capacity(token.len());
    let mut part = String::new();
    let flush = |part: &mut String, result: &mut String| {
        if is_hash(part) {
            result.push_str("[hash]");
        } else {
            result.push_str(part);
        }
        part.clear();
    };
    for c in token.chars() {
        if matches!(c, '_' | '.' | '/' | '-') {
            flush(&mut part, &mut result);
            result.push(c);
        } else {
            part.push(c);
        }
    }
    flush(&mut part, &mut result);
    result
}

fn is_hash(s: &str) -> bool {
    let lower_alnum = s.len() >= 40
        && s.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        && s.chars().any(|c| c.is_ascii_digit());
    let upper_hex = s.len() >= 32 && s.chars().all(|c| c.is_ascii_digit() || ('A'..='F').contains(&c));
    lower_alnum || upper_hex
}

#[cfg(test)]
mod tests {
    use super::redact;

    #[test]
    fn redaction_table() {
        let cases = [
            (
                "# kernel path: /tmp/torchinductor_root/nj/cnjjd56wlqkkyxg5jitusvyufhtvte2wxv6l3dilyuroh2ui2i4q.py",
                "# kernel path: [cache path]",
            ),
            (
                "loadKernel(\"/data/k/triton_poi_fused_add_0.cubin\", ...)",
                "loadKernel(\"[binary path]\", ...)",
            ),
            (
                "'backend_hash': '91D1D1166449D9E2EB66EB9770C9E2C3B0FEB787341F27FEB4D3F0338DA50336'",
                "'backend_hash': '[hash]'",
            ),
            (
                "triton_poi_fused_add_0.run(arg0_1, buf0, 8, stream=stream0)",
                "triton_poi_fused_add_0.run(arg0_1, buf0, 8, stream=stream0)",
            ),
            ("x = 0.7071067811865476", "x = 0.7071067811865476"),
        ];
        for (input, expected) in cases {
            assert_eq!(redact(input), expected, "input: {input}");
        }
    }
}

//! A scanner over one line of `.wir` text: whitespace, identifiers, integers,
//! string literals and bracket-balanced spans, with 1-based error positions.

use super::ParseError;
use std::fmt;

/// Position-tracking reader over the code part of one text line (the comment
/// already cut off).
pub(crate) struct Cursor<'a> {
    /// The code part of the line (no comment, no line break).
    text: &'a str,
    /// Byte offset of the next unread character.
    pos: usize,
    /// 1-based line number, for errors.
    line: usize,
}

/// `true` for characters that may start an identifier.
pub(crate) fn is_ident_start(c: char) -> bool {
    c.is_ascii_alphabetic() || c == '_'
}

/// `true` for characters that may continue an identifier.
pub(crate) fn is_ident_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// `true` when `s` is a non-empty ASCII identifier.
pub(crate) fn is_ident(s: &str) -> bool {
    let mut chars = s.chars();
    chars.next().is_some_and(is_ident_start) && chars.all(is_ident_char)
}

/// The code part of a raw line: everything before the first `;` that is not
/// inside a single-quoted string, with trailing whitespace removed.
pub(crate) fn strip_comment(raw: &str) -> &str {
    // `;`, `'` and `\\` are ASCII, and no byte of a multi-byte UTF-8
    // character is, so scanning bytes finds the same cut as scanning chars.
    let bytes = raw.as_bytes();
    let mut i = 0;
    loop {
        // Outside a string: up to the next quote or semicolon.
        let Some(k) = bytes
            .get(i..)
            .and_then(|t| t.iter().position(|&b| b == b'\'' || b == b';'))
        else {
            return raw.trim_end();
        };
        i += k;
        if bytes.get(i) == Some(&b';') {
            return raw.get(..i).unwrap_or(raw).trim_end();
        }
        // Inside a string: up to its closing quote (a backslash escapes the next character).
        i += 1;
        loop {
            match bytes.get(i) {
                None => return raw.trim_end(),
                Some(b'\\') => i += 2,
                Some(b'\'') => {
                    i += 1;
                    break;
                }
                Some(_) => i += 1,
            }
        }
    }
}

impl<'a> Cursor<'a> {
    /// A cursor at the start of `text` (line number `line`, 1-based).
    pub(crate) fn new(text: &'a str, line: usize) -> Self {
        Cursor { text, pos: 0, line }
    }

    /// The current byte offset.
    pub(crate) fn pos(&self) -> usize {
        self.pos
    }

    /// The 1-based line and character column of byte offset `pos` of this line.
    pub(crate) fn position_at(&self, pos: usize) -> super::SourcePosition {
        let prefix = self.text.get(..pos).unwrap_or(self.text);
        super::SourcePosition {
            line: self.line,
            column: prefix.chars().count() + 1,
        }
    }

    /// An error at byte offset `pos` of this line.
    pub(crate) fn error_at(&self, pos: usize, message: impl Into<String>) -> ParseError {
        let prefix = self.text.get(..pos).unwrap_or(self.text);
        ParseError {
            line: self.line,
            column: prefix.chars().count() + 1,
            message: message.into(),
        }
    }

    /// An error at the next non-blank character.
    pub(crate) fn error(&mut self, message: impl Into<String>) -> ParseError {
        self.skip_ws();
        self.error_at(self.pos, message)
    }

    /// Moves back to an earlier offset returned by [`Cursor::pos`].
    pub(crate) fn set_pos(&mut self, pos: usize) {
        self.pos = pos.min(self.text.len());
    }

    /// The unread text, blanks included.
    pub(crate) fn rest_str(&self) -> &'a str {
        self.rest_raw()
    }

    /// The text from byte offset `pos` on.
    pub(crate) fn rest_str_from(&self, pos: usize) -> &'a str {
        self.text.get(pos..).unwrap_or("")
    }

    /// Skips spaces and tabs.
    pub(crate) fn skip_ws(&mut self) {
        let bytes = self.text.as_bytes();
        let mut pos = self.pos;
        while matches!(bytes.get(pos), Some(b' ' | b'\t')) {
            pos += 1;
        }
        self.pos = pos;
    }

    fn rest_raw(&self) -> &'a str {
        self.text.get(self.pos..).unwrap_or("")
    }

    /// The unread text after blanks.
    pub(crate) fn rest(&mut self) -> &'a str {
        self.skip_ws();
        self.rest_raw()
    }

    /// `true` when only blanks are left.
    pub(crate) fn at_end(&mut self) -> bool {
        self.rest().is_empty()
    }

    /// The next non-blank character, not consumed.
    pub(crate) fn peek(&mut self) -> Option<char> {
        self.rest().chars().next()
    }

    /// The next character without skipping blanks, not consumed.
    pub(crate) fn peek_raw(&self) -> Option<char> {
        self.rest_raw().chars().next()
    }

    /// Consumes `token` (after blanks) if it comes next.
    pub(crate) fn eat(&mut self, token: &str) -> bool {
        self.skip_ws();
        self.eat_raw(token)
    }

    /// Consumes `token` if it comes next, without skipping blanks first.
    pub(crate) fn eat_raw(&mut self, token: &str) -> bool {
        if self.rest_raw().starts_with(token) {
            self.pos += token.len();
            true
        } else {
            false
        }
    }

    /// Consumes `token` (after blanks) or fails with `message`.
    pub(crate) fn expect(&mut self, token: &str, message: impl FnOnce() -> String) -> Result<(), ParseError> {
        let found = self.eat(token);
        self.require(found, message)
    }

    /// `Ok` when `found`, else the error `message` here.
    fn require(&mut self, found: bool, message: impl FnOnce() -> String) -> Result<(), ParseError> {
        match found {
            true => Ok(()),
            false => Err(self.error(message())),
        }
    }

    /// Reads an identifier (after blanks), if one comes next.
    pub(crate) fn ident(&mut self) -> Option<&'a str> {
        let rest = self.rest();
        // Identifiers are ASCII: the first other byte (a multi-byte
        // character's lead byte included) ends one, on a char boundary.
        let bytes = rest.as_bytes();
        match bytes.first() {
            Some(&b) if b.is_ascii_alphabetic() || b == b'_' => {}
            _ => return None,
        }
        let end = bytes
            .iter()
            .position(|&b| !(b.is_ascii_alphanumeric() || b == b'_'))
            .unwrap_or(bytes.len());
        self.pos += end;
        rest.get(..end)
    }

    /// Reads an identifier or fails with `message`.
    pub(crate) fn expect_ident(&mut self, message: impl FnOnce() -> String) -> Result<&'a str, ParseError> {
        match self.ident() {
            Some(s) => Ok(s),
            None => Err(self.error(message())),
        }
    }

    /// Consumes the keyword `kw` if it comes next as a whole identifier.
    pub(crate) fn eat_keyword(&mut self, kw: &str) -> bool {
        let save = self.pos;
        match self.ident() {
            Some(s) if s == kw => true,
            _ => {
                self.pos = save;
                false
            }
        }
    }

    /// Consumes the keyword `kw` or fails with `message`.
    pub(crate) fn expect_keyword(&mut self, kw: &str, message: impl FnOnce() -> String) -> Result<(), ParseError> {
        let found = self.eat_keyword(kw);
        self.require(found, message)
    }

    /// Reads a run of characters satisfying `f` (after blanks); may be empty.
    pub(crate) fn take_while(&mut self, f: impl Fn(char) -> bool) -> &'a str {
        let rest = self.rest();
        let end = rest
            .char_indices()
            .find(|(_, c)| !f(*c))
            .map(|(i, _)| i)
            .unwrap_or(rest.len());
        self.pos += end;
        rest.get(..end).unwrap_or("")
    }

    /// Reads a decimal integer with optional leading `-`.
    pub(crate) fn integer<T: std::str::FromStr>(&mut self, what: &dyn fmt::Display) -> Result<T, ParseError> {
        self.skip_ws();
        let start = self.pos;
        let rest = self.rest_raw();
        let sign = usize::from(rest.starts_with('-'));
        let digits = rest
            .get(sign..)
            .unwrap_or("")
            .char_indices()
            .find(|(_, c)| !c.is_ascii_digit())
            .map(|(i, _)| i)
            .unwrap_or(rest.len() - sign);
        if digits == 0 {
            return Err(self.error_at(start, format!("expected {what}")));
        }
        let token = rest.get(..sign + digits).unwrap_or("");
        match token.parse::<T>() {
            Ok(v) => {
                self.pos += token.len();
                Ok(v)
            }
            Err(_) => Err(self.error_at(start, format!("{what} `{token}` is out of range"))),
        }
    }

    /// Reads a Python single-quoted string literal (`'a\'b'`).
    pub(crate) fn string(&mut self, what: &dyn fmt::Display) -> Result<String, ParseError> {
        self.skip_ws();
        let start = self.pos;
        if self.peek_raw() != Some('\'') {
            return Err(self.error_at(start, format!("expected {what} (a '...' string)")));
        }
        // Fast path: no escape before the closing quote.
        let body = self.rest_raw().get(1..).unwrap_or("");
        if let Some(k) = body.bytes().position(|b| b == b'\'' || b == b'\\') {
            if body.as_bytes().get(k) == Some(&b'\'') {
                self.pos += k + 2;
                return Ok(body.get(..k).unwrap_or("").to_string());
            }
        }
        let mut out = String::new();
        let mut chars = self.rest_raw().char_indices().skip(1);
        while let Some((i, c)) = chars.next() {
            match c {
                '\'' => {
                    self.pos += i + 1;
                    return Ok(out);
                }
                '\\' => {
                    let esc_pos = self.pos + i;
                    match chars.next() {
                        Some((_, '\\')) => out.push('\\'),
                        Some((_, '\'')) => out.push('\''),
                        Some((_, 'n')) => out.push('\n'),
                        Some((_, 't')) => out.push('\t'),
                        Some((_, 'r')) => out.push('\r'),
                        Some((_, 'x')) => {
                            let hex: String = [chars.next(), chars.next()].iter().flatten().map(|(_, c)| *c).collect();
                            match u8::from_str_radix(&hex, 16) {
                                Ok(b) if hex.len() == 2 => out.push(char::from(b)),
                                _ => return Err(self.error_at(esc_pos, format!("bad escape `\\x{hex}` in string"))),
                            }
                        }
                        Some((_, other)) => {
                            return Err(self.error_at(esc_pos, format!("unknown escape `\\{other}` in string")))
                        }
                        None => break,
                    }
                }
                c => out.push(c),
            }
        }
        Err(self.error_at(start, format!("unterminated string in {what}")))
    }

    /// Reads text up to (not including) the first of `stops` at bracket depth 0,
    /// skipping over `(...)`, `[...]` and strings. Returns the start offset and
    /// the trimmed text. Fails on an unbalanced closing bracket or when the line
    /// ends inside a bracket.
    pub(crate) fn balanced_until(
        &mut self,
        stops: &[char],
        what: &dyn fmt::Display,
    ) -> Result<(usize, &'a str), ParseError> {
        self.skip_ws();
        let start = self.pos;
        let text = self.rest_raw();
        let mut scan = BracketScan::default();
        let mut end = text.len();
        let unbalanced = |c: char, i: usize| self.error_at(start + i, format!("unbalanced `{c}` in {what}"));
        // Every character this scan acts on is ASCII (when the stops are), so
        // it can walk bytes: a multi-byte character is its lead byte (read as
        // U+FFFD, which only ends an escape) and continuation bytes (skipped).
        if stops.iter().all(char::is_ascii) {
            // Fast path: runs of bytes that mean nothing here (outside strings:
            // not a stop, bracket or quote) are skipped without decoding.
            let mut special = [false; 128];
            for b in [b'\'', b'(', b'[', b')', b']', b'\\'] {
                special[usize::from(b)] = true;
            }
            for c in stops {
                special[*c as usize] = true;
            }
            for (i, &b) in text.as_bytes().iter().enumerate() {
                let c = match b {
                    _ if b.is_ascii() && !special[usize::from(b)] && !scan.in_string && !scan.escaped => continue,
                    _ if b.is_ascii() => char::from(b),
                    _ if b >= 0xC0 => char::REPLACEMENT_CHARACTER,
                    _ => continue,
                };
                if scan.step(c, i, stops).map_err(|c| unbalanced(c, i))? {
                    end = i;
                    break;
                }
            }
        } else {
            // A stop outside ASCII: walk characters.
            for (i, c) in text.char_indices() {
                if scan.step(c, i, stops).map_err(|c| unbalanced(c, i))? {
                    end = i;
                    break;
                }
            }
        }
        if let Some((o, i)) = scan.stack.last() {
            return Err(self.error_at(start + i, format!("unclosed `{o}` in {what}")));
        }
        if scan.in_string {
            return Err(self.error_at(start, format!("unterminated string in {what}")));
        }
        self.pos = start + end;
        Ok((start, text.get(..end).unwrap_or("").trim_end()))
    }

    /// Fails unless the line is fully consumed.
    pub(crate) fn finish(&mut self, context: &dyn fmt::Display) -> Result<(), ParseError> {
        if self.at_end() {
            Ok(())
        } else {
            let rest = self.rest();
            Err(self.error(format!("unexpected `{}` after {context}", first_token(rest))))
        }
    }
}

/// The first whitespace-delimited token of `s` (for messages).
pub(crate) fn first_token(s: &str) -> &str {
    let s = s.trim_start();
    let end = s.find([' ', '\t']).unwrap_or(s.len());
    s.get(..end).unwrap_or(s)
}

/// The state of [`Cursor::balanced_until`]'s scan: open brackets and where
/// they opened, and whether it is inside a string (after a backslash).
#[derive(Default)]
struct BracketScan {
    stack: smallvec::SmallVec<[(char, usize); 8]>,
    in_string: bool,
    escaped: bool,
}

impl BracketScan {
    /// Takes character `c` at offset `i`: `Ok(true)` when it is one of
    /// `stops` at depth 0 (the scan ends before it), `Err(c)` for a closing
    /// bracket that closes nothing or the wrong bracket.
    fn step(&mut self, c: char, i: usize, stops: &[char]) -> Result<bool, char> {
        if self.in_string {
            if self.escaped {
                self.escaped = false;
            } else if c == '\\' {
                self.escaped = true;
            } else if c == '\'' {
                self.in_string = false;
            }
            return Ok(false);
        }
        if self.stack.is_empty() && stops.contains(&c) {
            return Ok(true);
        }
        match c {
            '\'' => self.in_string = true,
            '(' | '[' => self.stack.push((c, i)),
            ')' | ']' => {
                let open = if c == ')' { '(' } else { '[' };
                match self.stack.pop() {
                    Some((o, _)) if o == open => {}
                    _ => return Err(c),
                }
            }
            _ => {}
        }
        Ok(false)
    }
}

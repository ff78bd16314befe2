//! Parser for Inductor's Python-printed expressions and wrapir's canonical form.
//!
//! # Grammar (Python precedence, loosest first)
//!
//! ```text
//! expr       := and_expr ("or" and_expr)*
//! and_expr   := not_expr ("and" not_expr)*
//! not_expr   := "not" not_expr | comparison
//! comparison := sum (("==" | "!=" | "<" | "<=" | ">" | ">=") sum)?   -- no chains
//! sum        := term (("+" | "-") term)*
//! term       := unary (("*" | "//" | "%") unary)*
//! unary      := ("-" | "+") unary | power
//! power      := primary ("**" unary)?          -- exponent: integer literal >= 0
//! primary    := INT | "True" | "False" | IDENT | IDENT "(" expr ("," expr)* ")" | "(" expr ")"
//! ```
//!
//! Functions: `min`/`Min`, `max`/`Max` (two or more operands), `FloorDiv(a, b)`,
//! `CleanDiv(a, b)`, `Mod(a, b)`, `PythonMod(a, b)`, `ModularIndexing(x, d, m)`,
//! `Pow(x, n)`, `Eq`/`Ne`/`Lt`/`Le`/`Gt`/`Ge(a, b)`, `And(...)`/`Or(...)`
//! (two or more), `Not(x)`.
//!
//! # What the tree looks like
//!
//! The parser builds the tree the text spells, without simplifying, so that
//! Inductor's text prints back unchanged:
//!
//! * `a + b - c` is one `Add([a, b, -c])`, `a*b*c` one `Mul([a, b, c])`; a
//!   parenthesised sum or product stays a separate operand (`a + (b + c)` is
//!   `Add([a, Add([b, c])])`).
//! * `-` applied to an integer (also a parenthesised one: `-(128)`) is the
//!   negative literal; applied to anything else it is `Mul([-1, x])`, and a
//!   product that starts with such a negation continues it (`-a*b` is
//!   `Mul([-1, a, b])`). `a - b` is `Add([a, -b])` with the same negation.
//! * `a // b` is `FloorDiv`; `a % b` is `Mod` (C semantics; Inductor only prints
//!   `%` for `Mod` on non-negative operands, for `PythonMod`, and inside
//!   `ModularIndexing`, so the Python form of the latter two reads back as
//!   `Mod`, equal wherever the operands are non-negative). The canonical form
//!   spells them `PythonMod(a, b)` and `ModularIndexing(x, d, m)`.
//! * `x**n` is `Pow`; `x*x` stays a `Mul`.
//!
//! Round trip: for every tree whose n-ary nodes have at least two operands and
//! whose symbols are identifiers other than `and`, `or`, `not`, `True`,
//! `False`, `parse(&canonical(e)) == Ok(e)` (structural `==`).
//!
//! Nesting (parentheses, calls, unary operators) deeper than [`MAX_DEPTH`] is
//! an error, so no input can exhaust the stack.
use super::{CmpOp, SymExpr};

/// Deepest nesting of parentheses, calls and prefix operators accepted.
pub const MAX_DEPTH: usize = 100;

/// Deepest expression tree accepted. A chain of `*`, `//` and `%` parses
/// without nesting but builds one tree level per operator, and the printers
/// parenthesise each level (at most two parentheses or prefixes a level:
/// `((x // d) % m)`, `not (x)`), so trees up to this depth print within
/// [`MAX_DEPTH`] and every printed form parses again (a chain of 120 `%`s
/// did not). It also bounds the recursion of printing and dropping a tree.
pub const MAX_TREE_DEPTH: usize = 40;

/// Most terms an expression may print to. Inductor's Python form writes
/// `x**n` as `n` copies of `x` joined by `*`, so nested powers print
/// exponentially long (`((x**30)**30)**30` is 27,000 copies); an expression
/// over this is an error rather than gigabytes of printed text.
pub const MAX_PRINTED_TERMS: u64 = 1 << 20;

/// A syntax error in an expression.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("cannot parse expression `{text}` at byte {offset}: {message}")]
pub struct ParseError {
    /// The whole input.
    pub text: String,
    /// Byte offset of the problem.
    pub offset: usize,
    /// What was expected or found.
    pub message: String,
}

/// Parses one expression (see the module docs for the grammar and the tree
/// it builds).
pub fn parse(text: &str) -> Result<SymExpr, ParseError> {
    let tokens = lex(text)?;
    let mut p = Parser {
        text,
        tokens,
        pos: 0,
        depth: 0,
    };
    let e = p.expr()?;
    if printed_terms(&e) > MAX_PRINTED_TERMS {
        return Err(p.error_at(
            0,
            format!("expression would print to more than {MAX_PRINTED_TERMS} terms (Python writes `x**n` as n copies of `x`)"),
        ));
    }
    if tree_deeper_than(&e, MAX_TREE_DEPTH) {
        return Err(p.error_at(
            0,
            format!("expression tree deeper than {MAX_TREE_DEPTH} levels (a chain of `*`, `//` and `%` builds one level per operator)"),
        ));
    }
    match p.peek() {
        Tok::End => Ok(e),
        _ => Err(p.error_here(format!(
            "expected an operator or the end of the expression, found {}",
            p.describe()
        ))),
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Tok<'a> {
    /// Magnitude of an integer literal (at most 2^63, so `-9223372036854775808` parses).
    Int(u64),
    /// Borrowed from the input (no allocation per token).
    Ident(&'a str),
    LParen,
    RParen,
    Comma,
    Plus,
    Minus,
    Star,
    StarStar,
    SlashSlash,
    Percent,
    Cmp(CmpOp),
    End,
}

#[derive(Clone, Copy, Debug)]
struct Token<'a> {
    tok: Tok<'a>,
    start: usize,
    end: usize,
}

fn lex(text: &str) -> Result<Vec<Token<'_>>, ParseError> {
    let err = |offset: usize, message: String| ParseError {
        text: text.to_string(),
        offset,
        message,
    };
    let bytes = text.as_bytes();
    // At most one token per byte, plus `End`; expressions are short.
    let mut out = Vec::with_capacity(text.len() / 2 + 2);
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        let start = i;
        if c.is_ascii_whitespace() {
            i += 1;
            continue;
        }
        let two = bytes.get(i + 1).copied();
        let tok = if c.is_ascii_digit() {
            while i < bytes.len() && bytes[i].is_ascii_digit() {
                i += 1;
            }
            let digits = &text[start..i];
            let v: u64 = digits
                .parse()
                .ok()
                .filter(|v| *v <= 1u64 << 63)
                .ok_or_else(|| err(start, format!("integer literal `{digits}` does not fit in 64 bits")))?;
            if i < bytes.len() && (bytes[i].is_ascii_alphabetic() || bytes[i] == b'_' || bytes[i] == b'.') {
                return Err(err(
                    i,
                    format!("unexpected `{}` after integer literal `{digits}`", bytes[i] as char),
                ));
            }
            out.push(Token {
                tok: Tok::Int(v),
                start,
                end: i,
            });
            continue;
        } else if c.is_ascii_alphabetic() || c == b'_' {
            while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
                i += 1;
            }
            out.push(Token {
                tok: Tok::Ident(&text[start..i]),
                start,
                end: i,
            });
            continue;
        } else {
            let (tok, len) = match (c, two) {
                (b'*', Some(b'*')) => (Tok::StarStar, 2),
                (b'/', Some(b'/')) => (Tok::SlashSlash, 2),
                (b'=', Some(b'=')) => (Tok::Cmp(CmpOp::Eq), 2),
                (b'!', Some(b'=')) => (Tok::Cmp(CmpOp::Ne), 2),
                (b'<', Some(b'=')) => (Tok::Cmp(CmpOp::Le), 2),
                (b'>', Some(b'=')) => (Tok::Cmp(CmpOp::Ge), 2),
                (b'<', _) => (Tok::Cmp(CmpOp::Lt), 1),
                (b'>', _) => (Tok::Cmp(CmpOp::Gt), 1),
                (b'(', _) => (Tok::LParen, 1),
                (b')', _) => (Tok::RParen, 1),
                (b',', _) => (Tok::Comma, 1),
                (b'+', _) => (Tok::Plus, 1),
                (b'-', _) => (Tok::Minus, 1),
                (b'*', _) => (Tok::Star, 1),
                (b'%', _) => (Tok::Percent, 1),
                (b'/', _) => return Err(err(start, "true division `/` is not supported; expected `//`".into())),
                (b'=', _) => return Err(err(start, "unexpected `=`; expected `==` for a comparison".into())),
                _ => {
                    let ch = text[start..].chars().next().unwrap_or('?');
                    return Err(err(start, format!("unexpected character `{ch}`")));
                }
            };
            i += len;
            tok
        };
        out.push(Token { tok, start, end: i });
    }
    out.push(Token {
        tok: Tok::End,
        start: text.len(),
        end: text.len(),
    });
    Ok(out)
}

struct Parser<'a> {
    text: &'a str,
    tokens: Vec<Token<'a>>,
    pos: usize,
    depth: usize,
}

/// Result of `unary`: the expression and whether it is a bare negation
/// `Mul([-1, x])` that a following `*` may extend.
struct Unary {
    expr: SymExpr,
    open_product: bool,
}

const KEYWORDS: [&str; 5] = ["and", "or", "not", "True", "False"];

impl<'a> Parser<'a> {
    fn token(&self) -> &Token<'a> {
        // `lex` always ends the list with `End` and `bump` never moves past it.
        &self.tokens[self.pos.min(self.tokens.len() - 1)]
    }

    fn peek(&self) -> &Tok<'a> {
        &self.token().tok
    }

    fn peek_second(&self) -> &Tok<'a> {
        self.tokens.get(self.pos + 1).map_or(&Tok::End, |t| &t.tok)
    }

    fn bump(&mut self) -> Token<'a> {
        let t = *self.token();
        if self.pos + 1 < self.tokens.len() {
            self.pos += 1;
        }
        t
    }

    fn is_keyword(&self, kw: &str) -> bool {
        matches!(self.peek(), Tok::Ident(s) if *s == kw)
    }

    fn describe(&self) -> String {
        let t = self.token();
        match &t.tok {
            Tok::End => "the end of the expression".into(),
            Tok::Int(_) => format!("integer `{}`", &self.text[t.start..t.end]),
            Tok::Ident(s) if KEYWORDS.contains(s) => format!("keyword `{s}`"),
            Tok::Ident(s) => format!("identifier `{s}`"),
            _ => format!("`{}`", &self.text[t.start..t.end]),
        }
    }

    fn error_at(&self, offset: usize, message: String) -> ParseError {
        ParseError {
            text: self.text.to_string(),
            offset,
            message,
        }
    }

    fn error_here(&self, message: String) -> ParseError {
        self.error_at(self.token().start, message)
    }

    fn enter(&mut self) -> Result<(), ParseError> {
        if self.depth >= MAX_DEPTH {
            return Err(self.error_here(format!("expression nested more than {MAX_DEPTH} levels deep")));
        }
        self.depth += 1;
        Ok(())
    }

    fn leave(&mut self) {
        self.depth = self.depth.saturating_sub(1);
    }

    fn expect(&mut self, tok: Tok<'a>, what: &str) -> Result<Token<'a>, ParseError> {
        if *self.peek() == tok {
            Ok(self.bump())
        } else {
            Err(self.error_here(format!("expected {what}, found {}", self.describe())))
        }
    }

    fn expr(&mut self) -> Result<SymExpr, ParseError> {
        self.enter()?;
        let r = self.or_expr();
        self.leave();
        r
    }

    fn or_expr(&mut self) -> Result<SymExpr, ParseError> {
        self.keyword_chain("or", Self::and_expr, SymExpr::Or)
    }

    fn and_expr(&mut self) -> Result<SymExpr, ParseError> {
        self.keyword_chain("and", Self::not_expr, SymExpr::And)
    }

    /// `operand (kw operand)*`: the one operand itself, or `make` of them all.
    fn keyword_chain(
        &mut self,
        kw: &str,
        operand: fn(&mut Self) -> Result<SymExpr, ParseError>,
        make: fn(Vec<SymExpr>) -> SymExpr,
    ) -> Result<SymExpr, ParseError> {
        let first = operand(self)?;
        if !self.is_keyword(kw) {
            return Ok(first);
        }
        let mut items = vec![first];
        while self.is_keyword(kw) {
            self.bump();
            items.push(operand(self)?);
        }
        Ok(make(items))
    }

    fn not_expr(&mut self) -> Result<SymExpr, ParseError> {
        if self.is_keyword("not") {
            self.bump();
            self.enter()?;
            let inner = self.not_expr();
            self.leave();
            return Ok(SymExpr::Not(Box::new(inner?)));
        }
        self.comparison()
    }

    fn comparison(&mut self) -> Result<SymExpr, ParseError> {
        let lhs = self.sum()?;
        let Tok::Cmp(op) = *self.peek() else { return Ok(lhs) };
        self.bump();
        let rhs = self.sum()?;
        if let Tok::Cmp(_) = self.peek() {
            return Err(self.error_here(format!(
                "chained comparisons are not supported; found {} after a comparison (write `a < b and b < c`)",
                self.describe()
            )));
        }
        Ok(SymExpr::cmp(op, lhs, rhs))
    }

    fn sum(&mut self) -> Result<SymExpr, ParseError> {
        let first = self.term()?;
        if !matches!(self.peek(), Tok::Plus | Tok::Minus) {
            return Ok(first);
        }
        let mut terms = vec![first];
        loop {
            match self.peek() {
                Tok::Plus => {
                    self.bump();
                    terms.push(self.term()?);
                }
                Tok::Minus => {
                    let at = self.bump().start;
                    let t = self.term()?;
                    terms.push(self.negate(t, at)?.expr);
                }
                _ => break,
            }
        }
        Ok(if terms.len() == 1 {
            terms.remove(0)
        } else {
            SymExpr::Add(terms)
        })
    }

    fn term(&mut self) -> Result<SymExpr, ParseError> {
        let first = self.unary()?;
        let mut acc = first.expr;
        let mut open_product = first.open_product;
        // Each operator that wraps `acc` adds a tree level: stop at the
        // tree limit before building more (see `MAX_TREE_DEPTH`).
        let mut levels = 0usize;
        loop {
            if levels > MAX_TREE_DEPTH {
                return Err(self.error_here(format!(
                    "expression tree deeper than {MAX_TREE_DEPTH} levels (a chain of `*`, `//` and `%` builds one level per operator)"
                )));
            }
            match self.peek() {
                Tok::Star => {
                    self.bump();
                    let rhs = self.unary()?.expr;
                    match &mut acc {
                        SymExpr::Mul(factors) if open_product => factors.push(rhs),
                        _ => {
                            acc = SymExpr::Mul(vec![acc, rhs]);
                            levels += 1;
                        }
                    }
                    open_product = true;
                }
                Tok::SlashSlash => {
                    self.bump();
                    let rhs = self.unary()?.expr;
                    acc = SymExpr::floor_div(acc, rhs);
                    levels += 1;
                    open_product = false;
                }
                Tok::Percent => {
                    self.bump();
                    let rhs = self.unary()?.expr;
                    acc = SymExpr::Mod(Box::new(acc), Box::new(rhs));
                    levels += 1;
                    open_product = false;
                }
                _ => return Ok(acc),
            }
        }
    }

    /// `-x`: a negative literal for integers, `y` for `x = Mul([-1, y])`,
    /// else `Mul([-1, x])`.
    fn negate(&self, x: SymExpr, at: usize) -> Result<Unary, ParseError> {
        match x {
            SymExpr::Int(v) => v
                .checked_neg()
                .map(|n| Unary {
                    expr: SymExpr::Int(n),
                    open_product: false,
                })
                .ok_or_else(|| self.error_at(at, format!("negating {v} overflows 64 bits"))),
            // `-(-x)` is `x`: a chain of minus signs stays one level deep,
            // so its printed form parses within the same depth limit.
            SymExpr::Mul(factors) if factors.len() == 2 && factors[0] == SymExpr::Int(-1) => {
                let mut factors = factors;
                Ok(Unary {
                    expr: factors.swap_remove(1),
                    open_product: false,
                })
            }
            other => Ok(Unary {
                expr: SymExpr::Mul(vec![SymExpr::Int(-1), other]),
                open_product: true,
            }),
        }
    }

    fn unary(&mut self) -> Result<Unary, ParseError> {
        match self.peek() {
            Tok::Minus => {
                let at = self.bump().start;
                // `-9223372036854775808`: the magnitude alone does not fit in i64.
                if let (Tok::Int(m), next) = (*self.peek(), self.peek_second()) {
                    if *next != Tok::StarStar {
                        self.bump();
                        let v = 0i64.checked_sub_unsigned(m).ok_or_else(|| {
                            self.error_at(at, format!("integer literal -{m} does not fit in 64 bits"))
                        })?;
                        return Ok(Unary {
                            expr: SymExpr::Int(v),
                            open_product: false,
                        });
                    }
                }
                self.enter()?;
                let inner = self.unary();
                self.leave();
                self.negate(inner?.expr, at)
            }
            Tok::Plus => {
                self.bump();
                self.enter()?;
                let inner = self.unary();
                self.leave();
                inner
            }
            _ => Ok(Unary {
                expr: self.power()?,
                open_product: false,
            }),
        }
    }

    fn power(&mut self) -> Result<SymExpr, ParseError> {
        let base = self.primary()?;
        if *self.peek() != Tok::StarStar {
            return Ok(base);
        }
        self.bump();
        let at = self.token().start;
        self.enter()?;
        let exp = self.unary();
        self.leave();
        let n = natural_exponent(&exp?.expr).ok_or_else(|| {
            self.error_at(
                at,
                format!("expected a non-negative integer literal (at most {MAX_EXPONENT}) as exponent"),
            )
        })?;
        Ok(SymExpr::Pow(Box::new(base), n))
    }

    fn primary(&mut self) -> Result<SymExpr, ParseError> {
        let t = *self.token();
        match &t.tok {
            Tok::Int(m) => {
                self.bump();
                i64::try_from(*m)
                    .map(SymExpr::Int)
                    .map_err(|_| self.error_at(t.start, format!("integer literal {m} does not fit in 64 bits")))
            }
            Tok::Ident(name) => match *name {
                "True" => {
                    self.bump();
                    Ok(SymExpr::Bool(true))
                }
                "False" => {
                    self.bump();
                    Ok(SymExpr::Bool(false))
                }
                "and" | "or" | "not" => {
                    Err(self.error_here(format!("expected an expression, found {}", self.describe())))
                }
                _ => {
                    self.bump();
                    if *self.peek() == Tok::LParen {
                        self.call(name, t.start)
                    } else {
                        Ok(SymExpr::sym(name))
                    }
                }
            },
            Tok::LParen => {
                self.bump();
                let inner = self.expr()?;
                self.expect(Tok::RParen, "`)`")?;
                Ok(inner)
            }
            _ => Err(self.error_here(format!("expected an expression, found {}", self.describe()))),
        }
    }

    fn call(&mut self, name: &str, at: usize) -> Result<SymExpr, ParseError> {
        self.expect(Tok::LParen, "`(`")?;
        self.enter()?;
        let args = self.call_args();
        self.leave();
        let mut args = args?;
        let arity = |want: usize| -> Result<(), ParseError> {
            if args.len() == want {
                Ok(())
            } else {
                let noun = if want == 1 { "argument" } else { "arguments" };
                Err(self.error_at(at, format!("`{name}` takes {want} {noun}, found {}", args.len())))
            }
        };
        let at_least_two = |args: &Vec<SymExpr>| -> Result<(), ParseError> {
            if args.len() >= 2 {
                Ok(())
            } else {
                Err(self.error_at(at, format!("`{name}` takes at least 2 arguments, found {}", args.len())))
            }
        };
        let cmp = |op| -> Result<SymExpr, ParseError> {
            arity(2)?;
            let mut it = args.clone().into_iter();
            match (it.next(), it.next()) {
                (Some(a), Some(b)) => Ok(SymExpr::cmp(op, a, b)),
                _ => Err(self.error_at(at, format!("`{name}` takes 2 arguments"))),
            }
        };
        let bx = |e: SymExpr| Box::new(e);
        match name {
            "min" | "Min" => at_least_two(&args).map(|_| SymExpr::Min(args)),
            "max" | "Max" => at_least_two(&args).map(|_| SymExpr::Max(args)),
            "And" => at_least_two(&args).map(|_| SymExpr::And(args)),
            "Or" => at_least_two(&args).map(|_| SymExpr::Or(args)),
            "Eq" => cmp(CmpOp::Eq),
            "Ne" => cmp(CmpOp::Ne),
            "Lt" => cmp(CmpOp::Lt),
            "Le" => cmp(CmpOp::Le),
            "Gt" => cmp(CmpOp::Gt),
            "Ge" => cmp(CmpOp::Ge),
            "Not" => {
                arity(1)?;
                Ok(SymExpr::Not(bx(args.remove(0))))
            }
            "FloorDiv" | "CleanDiv" | "Mod" | "PythonMod" | "Pow" => {
                arity(2)?;
                let b = args.remove(1);
                let a = args.remove(0);
                Ok(match name {
                    "FloorDiv" => SymExpr::FloorDiv(bx(a), bx(b)),
                    "CleanDiv" => SymExpr::CleanDiv(bx(a), bx(b)),
                    "Mod" => SymExpr::Mod(bx(a), bx(b)),
                    "PythonMod" => SymExpr::PythonMod(bx(a), bx(b)),
                    _ => {
                        let n = natural_exponent(&b).ok_or_else(|| {
                            self.error_at(
                                at,
                                format!("`Pow` needs a non-negative integer literal exponent (at most {MAX_EXPONENT})"),
                            )
                        })?;
                        SymExpr::Pow(bx(a), n)
                    }
                })
            }
            "ModularIndexing" => {
                arity(3)?;
                let m = args.remove(2);
                let d = args.remove(1);
                let x = args.remove(0);
                Ok(SymExpr::ModularIndexing(bx(x), bx(d), bx(m)))
            }
            _ => Err(self.error_at(
                at,
                format!(
                    "unknown function `{name}`; expected one of min, max, FloorDiv, CleanDiv, Mod, PythonMod, \
                     ModularIndexing, Pow, Eq, Ne, Lt, Le, Gt, Ge, And, Or, Not"
                ),
            )),
        }
    }

    fn call_args(&mut self) -> Result<Vec<SymExpr>, ParseError> {
        let mut args = Vec::new();
        if *self.peek() == Tok::RParen {
            self.bump();
            return Ok(args);
        }
        loop {
            args.push(self.expr()?);
            match self.peek() {
                Tok::Comma => {
                    self.bump();
                }
                Tok::RParen => {
                    self.bump();
                    return Ok(args);
                }
                _ => {
                    return Err(self.error_here(format!(
                        "expected `,` or `)` in an argument list, found {}",
                        self.describe()
                    )))
                }
            }
        }
    }
}

/// The largest exponent of `x**n` / `Pow(x, n)`: any base other than -1, 0
/// and 1 overflows 64 bits before it, and the Python and C++ printers write
/// `x**n` as `n` factors (Inductor's `_print_Pow`), so a larger one would only
/// make printing cost O(n).
pub const MAX_EXPONENT: u32 = 64;

fn natural_exponent(e: &SymExpr) -> Option<u32> {
    match e {
        SymExpr::Int(v) => u32::try_from(*v).ok().filter(|n| *n <= MAX_EXPONENT),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn int_extremes() {
        assert_eq!(parse("-9223372036854775808"), Ok(SymExpr::Int(i64::MIN)));
        assert_eq!(parse("9223372036854775807"), Ok(SymExpr::Int(i64::MAX)));
        assert!(parse("9223372036854775808").is_err());
        assert!(parse("-(-9223372036854775808)").is_err());
        assert!(parse("99999999999999999999").is_err());
    }
}

/// Whether `e`'s tree has more than `limit` levels, walked with an explicit
/// stack (no recursion, whatever the depth).
fn tree_deeper_than(e: &SymExpr, limit: usize) -> bool {
    let mut stack = vec![(e, 1usize)];
    while let Some((node, depth)) = stack.pop() {
        if depth > limit {
            return true;
        }
        stack.extend(node.children().into_iter().map(|c| (c, depth + 1)));
    }
    false
}

/// The terms `e` prints to in the Python form, where `Pow(x, n)` is `n`
/// copies of `x` (saturating), counted with an explicit stack (no
/// recursion, whatever the depth).
fn printed_terms(e: &SymExpr) -> u64 {
    // Post-order: each node's count once its children's are known.
    let mut counts: Vec<u64> = Vec::new();
    let mut stack: Vec<(&SymExpr, bool)> = vec![(e, false)];
    while let Some((node, expanded)) = stack.pop() {
        let children = node.children();
        if !expanded {
            stack.push((node, true));
            stack.extend(children.iter().rev().map(|c| (*c, false)));
            continue;
        }
        let from_children: Vec<u64> = counts.split_off(counts.len().saturating_sub(children.len()));
        let count = match node {
            SymExpr::Pow(_, n) => from_children
                .first()
                .copied()
                .unwrap_or(1)
                .saturating_mul(u64::from(*n).max(1)),
            _ => from_children.iter().fold(1u64, |a, c| a.saturating_add(*c)),
        };
        counts.push(count);
    }
    counts.pop().unwrap_or(1)
}

//! [`Name`]: a node name, kept inline when short (nearly every name a
//! lowering makes: `buf12`, `sym_size_int_3`,
//! `triton_kernel_wrapper_mutation_25424`), so that making, copying and
//! dropping a node's name allocates nothing.

use std::borrow::Borrow;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::ops::Deref;
use std::sync::Arc;

/// Bytes a [`Name`] holds inline (the type is 48 bytes).
const INLINE: usize = 46;

/// A node name: an immutable string, inline up to 46 bytes, shared
/// (`Arc<str>`) when longer. Compares, hashes and prints as its text;
/// dereferences to `str`.
#[derive(Clone)]
pub struct Name(Repr);

#[derive(Clone)]
enum Repr {
    /// `buf[..len]` is the text, copied from a `&str` (so valid UTF-8).
    Inline {
        len: u8,
        buf: [u8; INLINE],
    },
    Heap(Arc<str>),
}

impl Name {
    /// The name `s`.
    pub fn new(s: &str) -> Name {
        match u8::try_from(s.len()) {
            Ok(len) if s.len() <= INLINE => {
                let mut buf = [0u8; INLINE];
                buf[..s.len()].copy_from_slice(s.as_bytes());
                Name(Repr::Inline { len, buf })
            }
            _ => Name(Repr::Heap(Arc::from(s))),
        }
    }

    /// `base` followed by `_` and `suffix` in decimal (`base_3`), without a
    /// temporary `String` when it fits inline.
    pub(crate) fn with_suffix(base: &str, suffix: u64) -> Name {
        let mut buf = [0u8; 20];
        let digits = decimal_digits(suffix, &mut buf);
        let total = base.len().saturating_add(1).saturating_add(digits.len());
        match u8::try_from(total) {
            Ok(len) if total <= INLINE => {
                let mut buf = [0u8; INLINE];
                buf[..base.len()].copy_from_slice(base.as_bytes());
                buf[base.len()] = b'_';
                // At most 20 digits: a byte loop, no `memcpy` call.
                for (d, s) in buf[base.len() + 1..total].iter_mut().zip(digits) {
                    *d = *s;
                }
                Name(Repr::Inline { len, buf })
            }
            _ => {
                let mut s = String::with_capacity(total);
                s.push_str(base);
                s.push('_');
                // The digits are ASCII.
                s.extend(digits.iter().map(|&b| char::from(b)));
                Name(Repr::Heap(Arc::from(s)))
            }
        }
    }

    /// This name followed by `suffix` in decimal, when this name is kept
    /// inline and the result fits inline (`None` otherwise): a prefix such
    /// as `mul_` made once gives `mul_3` without copying the base again.
    #[inline]
    pub(crate) fn append_decimal(&self, suffix: u64) -> Option<Name> {
        let Repr::Inline { len, buf } = &self.0 else {
            return None;
        };
        let mut digits = [0u8; 20];
        let digits = decimal_digits(suffix, &mut digits);
        let start = usize::from(*len);
        let total = start.saturating_add(digits.len());
        let len = u8::try_from(total).ok().filter(|_| total <= INLINE)?;
        let mut buf = *buf;
        for (d, s) in buf[start..total].iter_mut().zip(digits) {
            *d = *s;
        }
        Some(Name(Repr::Inline { len, buf }))
    }

    /// The name as text.
    pub fn as_str(&self) -> &str {
        match &self.0 {
            Repr::Inline { len, buf } => {
                let bytes = &buf[..usize::from(*len)];
                // SAFETY: `buf[..len]` was copied whole from a `&str` (`new`), or
                // from a `&str`, an ASCII `_` and ASCII digits (`with_suffix`),
                // or from such a name's text and ASCII digits
                // (`append_decimal`), and is never written afterwards, so it is
                // valid UTF-8.
                unsafe { std::str::from_utf8_unchecked(bytes) }
            }
            Repr::Heap(s) => s,
        }
    }
}

impl Deref for Name {
    type Target = str;
    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl AsRef<str> for Name {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl Borrow<str> for Name {
    fn borrow(&self) -> &str {
        self.as_str()
    }
}

impl PartialEq for Name {
    fn eq(&self, other: &Name) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for Name {}

impl PartialEq<str> for Name {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for Name {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl PartialEq<String> for Name {
    fn eq(&self, other: &String) -> bool {
        self.as_str() == other.as_str()
    }
}

impl PartialEq<Name> for str {
    fn eq(&self, other: &Name) -> bool {
        self == other.as_str()
    }
}

impl PartialEq<Name> for &str {
    fn eq(&self, other: &Name) -> bool {
        *self == other.as_str()
    }
}

impl PartialOrd for Name {
    fn partial_cmp(&self, other: &Name) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Name {
    fn cmp(&self, other: &Name) -> std::cmp::Ordering {
        self.as_str().cmp(other.as_str())
    }
}

impl Hash for Name {
    /// Hashes as the `str` it holds (what [`Borrow<str>`] requires).
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_str().hash(state);
    }
}

impl fmt::Debug for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl fmt::Display for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl From<&str> for Name {
    fn from(s: &str) -> Name {
        Name::new(s)
    }
}

impl From<String> for Name {
    fn from(s: String) -> Name {
        Name::new(&s)
    }
}

impl From<&Name> for String {
    fn from(n: &Name) -> String {
        n.as_str().to_string()
    }
}

impl From<Name> for String {
    fn from(n: Name) -> String {
        n.as_str().to_string()
    }
}

/// `PAIRS[2 * i..2 * i + 2]`: the two decimal digits of `i` (`00` to `99`).
const PAIRS: [u8; 200] = {
    let mut t = [0u8; 200];
    let mut i = 0;
    while i < 100 {
        t[2 * i] = b'0' + (i / 10) as u8;
        t[2 * i + 1] = b'0' + (i % 10) as u8;
        i += 1;
    }
    t
};

/// The decimal digits of `n` (ASCII), written at the end of `buf` (20 bytes
/// hold every `u64`): the one digit writer of node names and the printer.
/// Two digits a step, from a table (half the divisions of a digit loop).
#[inline]
pub(crate) fn decimal_digits(mut n: u64, buf: &mut [u8; 20]) -> &[u8] {
    let mut start = buf.len();
    while n >= 100 {
        // `n % 100` < 100: a pair of the table; `start` stays >= 2 while
        // `n` has three digits or more (a `u64` has at most 20).
        let pair = (n % 100) as usize * 2;
        n /= 100;
        start -= 2;
        buf[start..start + 2].copy_from_slice(&PAIRS[pair..pair + 2]);
    }
    if n >= 10 {
        let pair = n as usize * 2;
        start -= 2;
        buf[start..start + 2].copy_from_slice(&PAIRS[pair..pair + 2]);
    } else {
        start -= 1;
        // `n < 10`: a single digit.
        buf[start] = b'0' + n as u8;
    }
    &buf[start..]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inline_and_heap_names_are_their_text() {
        for s in ["", "buf0", &"x".repeat(INLINE), &"y".repeat(INLINE + 1), "ünïcode_1"] {
            let n = Name::new(s);
            assert_eq!(n.as_str(), s);
            assert_eq!(n, Name::from(s.to_string()));
            assert_eq!(format!("{n:?}"), format!("{s:?}"));
        }
        assert_eq!(std::mem::size_of::<Name>(), 48);
    }

    #[test]
    fn suffixes_are_written_in_decimal() {
        assert_eq!(Name::with_suffix("arg0", 1).as_str(), "arg0_1");
        assert_eq!(Name::with_suffix("x", 0).as_str(), "x_0");
        assert_eq!(Name::with_suffix("x", u64::MAX).as_str(), format!("x_{}", u64::MAX));
        let long = "z".repeat(INLINE);
        assert_eq!(Name::with_suffix(&long, 25424).as_str(), format!("{long}_25424"));
    }

    #[test]
    fn decimal_digits_match_format() {
        let mut buf = [0u8; 20];
        for n in (0..1_000u64).chain([9_999, 10_000, 99_999, 123_456_789, u64::MAX / 7, u64::MAX - 1, u64::MAX]) {
            assert_eq!(decimal_digits(n, &mut buf), n.to_string().as_bytes(), "{n}");
        }
    }

    #[test]
    fn appended_digits_are_the_suffixed_name() {
        let prefix = Name::new("triton_kernel_wrapper_mutation_");
        for i in [0u64, 7, 25_424, 999_999_999_999_999] {
            assert_eq!(
                prefix.append_decimal(i).as_deref(),
                Some(Name::with_suffix("triton_kernel_wrapper_mutation", i).as_str())
            );
        }
        // 31 + 20 bytes: longer than inline.
        assert!(prefix.append_decimal(u64::MAX).is_none());
        assert!(Name::new(&"x".repeat(INLINE - 1)).append_decimal(12).is_none());
        assert!(Name::new(&"x".repeat(INLINE + 1)).append_decimal(1).is_none());
    }

    #[test]
    fn hashes_like_str() {
        use std::hash::BuildHasher;
        let h = rustc_hash::FxBuildHasher;
        assert_eq!(h.hash_one(Name::new("buf3")), h.hash_one("buf3"));
    }
}

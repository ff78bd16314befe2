//! The arguments of a kernel launch or an extern call as backends read them:
//! positional ([`ArgList`]) and keyword ([`Kwargs`]), borrowed from the
//! interpreter's values.

use super::Value;
use indexmap::IndexMap;

/// Positional arguments of a kernel launch or an extern call. Borrowed: the
/// interpreter passes references to the values it holds (no value is
/// cloned for a call); a caller with its own values passes a slice of them
/// (`ArgList::from(&values[..])`).
pub struct ArgList<'a, T> {
    repr: ArgRepr<'a, T>,
}

enum ArgRepr<'a, T> {
    Values(&'a [Value<T>]),
    Refs(&'a [&'a Value<T>]),
    /// `table[index[i]]` (the interpreter's slots; every one of them filled).
    Slots {
        index: &'a [usize],
        table: &'a [Option<Value<T>>],
    },
}

/// `Clone` and `Copy` for the borrowed argument views and the calls made of
/// them, whatever their values' type (`derive` would ask it to be `Copy`).
macro_rules! copy_views {
    ($($view:ident),*) => {
        $(
            impl<T> Clone for $view<'_, T> {
                fn clone(&self) -> Self {
                    *self
                }
            }

            impl<T> Copy for $view<'_, T> {}
        )*
    };
}

pub(super) use copy_views;

copy_views!(ArgRepr, ArgList, KwargsRepr, Kwargs);

/// `IntoIterator` for the argument views and references to them: their
/// `iter()`, of `$item`s; `Debug` as the `$debug` (`debug_list`,
/// `debug_map`) of those items.
macro_rules! iterable_views {
    ($($view:ident => $iter:ident of $item:ty, $debug:ident);*) => {
        $(
            impl<T: std::fmt::Debug> std::fmt::Debug for $view<'_, T> {
                fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                    f.$debug().entries(self.iter()).finish()
                }
            }

            impl<'a, T> IntoIterator for $view<'a, T> {
                type Item = $item;
                type IntoIter = $iter<'a, T>;

                fn into_iter(self) -> Self::IntoIter {
                    self.iter()
                }
            }

            impl<'a, T> IntoIterator for &$view<'a, T> {
                type Item = $item;
                type IntoIter = $iter<'a, T>;

                fn into_iter(self) -> Self::IntoIter {
                    self.iter()
                }
            }
        )*
    };
}

iterable_views!(
    ArgList => ArgIter of &'a Value<T>, debug_list;
    Kwargs => KwargsIter of (&'a str, &'a Value<T>), debug_map
);

/// `table[s]`, if filled.
fn table_get<T>(table: &[Option<Value<T>>], s: usize) -> Option<&Value<T>> {
    table.get(s).and_then(Option::as_ref)
}

impl<'a, T> ArgList<'a, T> {
    /// Arguments given as references.
    pub fn refs(values: &'a [&'a Value<T>]) -> Self {
        ArgList {
            repr: ArgRepr::Refs(values),
        }
    }

    /// No arguments.
    pub fn empty() -> Self {
        ArgList::refs(&[])
    }

    /// The values `table[index[i]]`; every one of those entries must be
    /// filled (an empty one reads as a missing argument).
    pub(crate) fn slots(index: &'a [usize], table: &'a [Option<Value<T>>]) -> Self {
        ArgList {
            repr: ArgRepr::Slots { index, table },
        }
    }

    /// The `i`-th argument.
    pub fn get(&self, i: usize) -> Option<&'a Value<T>> {
        match self.repr {
            ArgRepr::Values(v) => v.get(i),
            ArgRepr::Refs(v) => v.get(i).copied(),
            ArgRepr::Slots { index, table } => index.get(i).and_then(|s| table_get(table, *s)),
        }
    }

    /// The first argument.
    pub fn first(&self) -> Option<&'a Value<T>> {
        self.get(0)
    }

    /// Number of arguments.
    pub fn len(&self) -> usize {
        match self.repr {
            ArgRepr::Values(v) => v.len(),
            ArgRepr::Refs(v) => v.len(),
            ArgRepr::Slots { index, .. } => index.len(),
        }
    }

    /// `true` when there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The arguments from the `start`-th on (empty past the end).
    pub fn skip(&self, start: usize) -> Self {
        ArgList {
            repr: match self.repr {
                ArgRepr::Values(v) => ArgRepr::Values(v.get(start..).unwrap_or_default()),
                ArgRepr::Refs(v) => ArgRepr::Refs(v.get(start..).unwrap_or_default()),
                ArgRepr::Slots { index, table } => ArgRepr::Slots {
                    index: index.get(start..).unwrap_or_default(),
                    table,
                },
            },
        }
    }

    /// The arguments, in order.
    pub fn iter(&self) -> ArgIter<'a, T> {
        ArgIter {
            inner: match self.repr {
                ArgRepr::Values(v) => ArgIterRepr::Values(v.iter()),
                ArgRepr::Refs(v) => ArgIterRepr::Refs(v.iter()),
                ArgRepr::Slots { index, table } => ArgIterRepr::Slots(index.iter(), table),
            },
        }
    }

    /// Owned copies of the arguments.
    pub fn to_vec(&self) -> Vec<Value<T>>
    where
        T: Clone,
    {
        self.iter().cloned().collect()
    }
}

impl<'a, T> From<&'a [Value<T>]> for ArgList<'a, T> {
    fn from(values: &'a [Value<T>]) -> Self {
        ArgList {
            repr: ArgRepr::Values(values),
        }
    }
}

impl<'a, T> From<&'a Vec<Value<T>>> for ArgList<'a, T> {
    fn from(values: &'a Vec<Value<T>>) -> Self {
        ArgList::from(values.as_slice())
    }
}

/// The iterator of [`ArgList::iter`].
pub struct ArgIter<'a, T> {
    inner: ArgIterRepr<'a, T>,
}

enum ArgIterRepr<'a, T> {
    Values(std::slice::Iter<'a, Value<T>>),
    Refs(std::slice::Iter<'a, &'a Value<T>>),
    Slots(std::slice::Iter<'a, usize>, &'a [Option<Value<T>>]),
}

impl<'a, T> Iterator for ArgIter<'a, T> {
    type Item = &'a Value<T>;

    fn next(&mut self) -> Option<Self::Item> {
        match &mut self.inner {
            ArgIterRepr::Values(it) => it.next(),
            ArgIterRepr::Refs(it) => it.next().copied(),
            ArgIterRepr::Slots(it, table) => it.find_map(|s| table_get(table, *s)),
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        match &self.inner {
            ArgIterRepr::Values(it) => it.size_hint(),
            ArgIterRepr::Refs(it) => it.size_hint(),
            ArgIterRepr::Slots(it, _) => it.size_hint(),
        }
    }
}

impl<T> ExactSizeIterator for ArgIter<'_, T> {}

/// Keyword arguments of a kernel launch or an extern call, by parameter name
/// in the program's order. Borrowed like [`ArgList`]: the interpreter passes
/// its pre-resolved names and references to its values, so a call builds no
/// map and hashes no names (a lookup by name is a short linear scan); a
/// caller with a map passes `Kwargs::from(&map)`.
pub struct Kwargs<'a, T> {
    repr: KwargsRepr<'a, T>,
}

enum KwargsRepr<'a, T> {
    /// Names and values in parallel (same length).
    Refs {
        names: &'a [String],
        values: &'a [&'a Value<T>],
    },
    /// Names and `table[index[i]]` in parallel (the interpreter's slots).
    Slots {
        names: &'a [String],
        index: &'a [usize],
        table: &'a [Option<Value<T>>],
    },
    /// A caller's map.
    Map(&'a IndexMap<String, Value<T>>),
}

impl<'a, T> Kwargs<'a, T> {
    /// Keyword arguments `names[i] = values[i]`; entries past the shorter
    /// slice are ignored.
    pub fn new(names: &'a [String], values: &'a [&'a Value<T>]) -> Self {
        let n = names.len().min(values.len());
        Kwargs {
            repr: KwargsRepr::Refs {
                names: names.get(..n).unwrap_or_default(),
                values: values.get(..n).unwrap_or_default(),
            },
        }
    }

    /// No keyword arguments.
    pub fn empty() -> Self {
        Kwargs::new(&[], &[])
    }

    /// `names[i] = table[index[i]]`, like [`ArgList::slots`].
    pub(crate) fn slots(names: &'a [String], index: &'a [usize], table: &'a [Option<Value<T>>]) -> Self {
        let n = names.len().min(index.len());
        Kwargs {
            repr: KwargsRepr::Slots {
                names: names.get(..n).unwrap_or_default(),
                index: index.get(..n).unwrap_or_default(),
                table,
            },
        }
    }

    /// The value of `name`.
    pub fn get(&self, name: &str) -> Option<&'a Value<T>> {
        match self.repr {
            KwargsRepr::Refs { names, values } => names
                .iter()
                .position(|n| n == name)
                .and_then(|i| values.get(i).copied()),
            KwargsRepr::Slots { names, index, table } => names
                .iter()
                .position(|n| n == name)
                .and_then(|i| index.get(i))
                .and_then(|s| table_get(table, *s)),
            KwargsRepr::Map(map) => map.get(name),
        }
    }

    /// `true` when `name` is given.
    pub fn contains_key(&self, name: &str) -> bool {
        self.get(name).is_some()
    }

    /// Number of keyword arguments.
    pub fn len(&self) -> usize {
        match self.repr {
            KwargsRepr::Refs { names, .. } | KwargsRepr::Slots { names, .. } => names.len(),
            KwargsRepr::Map(map) => map.len(),
        }
    }

    /// `true` when there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Names and values, in order.
    pub fn iter(&self) -> KwargsIter<'a, T> {
        KwargsIter {
            inner: match self.repr {
                KwargsRepr::Refs { names, values } => KwargsIterRepr::Refs(names.iter().zip(values.iter())),
                KwargsRepr::Slots { names, index, table } => {
                    KwargsIterRepr::Slots(names.iter().zip(index.iter()), table)
                }
                KwargsRepr::Map(map) => KwargsIterRepr::Map(map.iter()),
            },
        }
    }

    /// Names, in order.
    pub fn keys(&self) -> impl Iterator<Item = &'a str> + 'a
    where
        T: 'a,
    {
        self.iter().map(|(k, _)| k)
    }

    /// Values, in order.
    pub fn values(&self) -> impl Iterator<Item = &'a Value<T>> + 'a
    where
        T: 'a,
    {
        self.iter().map(|(_, v)| v)
    }

    /// An owned map of the same arguments.
    pub fn to_map(&self) -> IndexMap<String, Value<T>>
    where
        T: Clone,
    {
        self.iter().map(|(k, v)| (k.to_string(), v.clone())).collect()
    }
}

impl<'a, T> From<&'a IndexMap<String, Value<T>>> for Kwargs<'a, T> {
    fn from(map: &'a IndexMap<String, Value<T>>) -> Self {
        Kwargs {
            repr: KwargsRepr::Map(map),
        }
    }
}

/// The iterator of [`Kwargs::iter`].
pub struct KwargsIter<'a, T> {
    inner: KwargsIterRepr<'a, T>,
}

enum KwargsIterRepr<'a, T> {
    Refs(std::iter::Zip<std::slice::Iter<'a, String>, std::slice::Iter<'a, &'a Value<T>>>),
    Slots(
        std::iter::Zip<std::slice::Iter<'a, String>, std::slice::Iter<'a, usize>>,
        &'a [Option<Value<T>>],
    ),
    Map(indexmap::map::Iter<'a, String, Value<T>>),
}

impl<'a, T> Iterator for KwargsIter<'a, T> {
    type Item = (&'a str, &'a Value<T>);

    fn next(&mut self) -> Option<Self::Item> {
        match &mut self.inner {
            KwargsIterRepr::Refs(it) => it.next().map(|(k, v)| (k.as_str(), *v)),
            KwargsIterRepr::Slots(it, table) => it.find_map(|(k, s)| Some((k.as_str(), table_get(table, *s)?))),
            KwargsIterRepr::Map(it) => it.next().map(|(k, v)| (k.as_str(), v)),
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        match &self.inner {
            KwargsIterRepr::Refs(it) => it.size_hint(),
            KwargsIterRepr::Slots(it, _) => it.size_hint(),
            KwargsIterRepr::Map(it) => it.size_hint(),
        }
    }
}

impl<T> ExactSizeIterator for KwargsIter<'_, T> {}

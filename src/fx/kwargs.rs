//! [`Kwargs`]: the keyword arguments of a node, with a name list that nodes
//! may share.

use super::{Arg, Name};
use std::fmt;
use std::sync::Arc;

/// A list of distinct keyword names, shared (`Arc`): cloning it copies a
/// pointer.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct KwargNames(Arc<Vec<Name>>);

impl KwargNames {
    /// The names; `None` when one repeats.
    pub fn new(names: Vec<Name>) -> Option<Self> {
        let unique = names.iter().enumerate().all(|(i, n)| !names[..i].contains(n));
        unique.then(|| KwargNames(Arc::new(names)))
    }

    /// The names in order.
    pub fn as_slice(&self) -> &[Name] {
        &self.0
    }

    /// The shared list's address: the same for clones, different for
    /// distinct lists while both are alive.
    pub(crate) fn addr(&self) -> usize {
        Arc::as_ptr(&self.0) as usize
    }

    /// `true` when another [`KwargNames`] holds the same list.
    pub(crate) fn is_shared(&self) -> bool {
        Arc::strong_count(&self.0) > 1
    }

    /// `true` when both are the same shared list.
    pub fn ptr_eq(&self, other: &KwargNames) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl fmt::Debug for KwargNames {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.0.iter()).finish()
    }
}

/// Keyword arguments in order: each name with its value, names unique.
///
/// The names are kept apart from the values, as [`KwargNames`]: every
/// launch of one Triton kernel passes the same parameters, so its nodes
/// share one name list ([`Kwargs::with_names`]) and own only their values.
/// Equality is that of maps (the same names with equal values, in any
/// order), as for an `IndexMap`.
#[derive(Clone, Default)]
pub struct Kwargs {
    names: KwargNames,
    values: Vec<Arg>,
}

impl Kwargs {
    /// No arguments.
    pub fn new() -> Self {
        Kwargs::default()
    }

    /// `values[i]` for `names[i]`; `None` unless there are as many values
    /// as names.
    pub fn with_names(names: &KwargNames, values: Vec<Arg>) -> Option<Self> {
        (names.0.len() == values.len()).then(|| Kwargs {
            names: names.clone(),
            values,
        })
    }

    /// The names, shareable with another [`Kwargs`] through [`Kwargs::with_names`].
    pub fn names(&self) -> &KwargNames {
        &self.names
    }

    /// Sets `name` to `value`: in place (returning the old value) when the
    /// name is present, else appended.
    pub fn insert(&mut self, name: &str, value: Arg) -> Option<Arg> {
        match self.index_of(name) {
            Some(i) => self.values.get_mut(i).map(|v| std::mem::replace(v, value)),
            None => {
                Arc::make_mut(&mut self.names.0).push(Name::new(name));
                self.values.push(value);
                None
            }
        }
    }

    /// The position of `name`.
    pub fn index_of(&self, name: &str) -> Option<usize> {
        self.names.0.iter().position(|n| n.as_str() == name)
    }

    /// The value of `name`.
    pub fn get(&self, name: &str) -> Option<&Arg> {
        self.index_of(name).and_then(|i| self.values.get(i))
    }

    /// `true` when `name` is present.
    pub fn contains_key(&self, name: &str) -> bool {
        self.index_of(name).is_some()
    }

    /// The entry at position `i`, its value mutable.
    pub fn get_index_mut(&mut self, i: usize) -> Option<(&Name, &mut Arg)> {
        Some((self.names.0.get(i)?, self.values.get_mut(i)?))
    }

    /// Number of arguments.
    pub fn len(&self) -> usize {
        self.values.len()
    }

    /// `true` when there are none.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// The names in order.
    pub fn keys(&self) -> std::slice::Iter<'_, Name> {
        self.names.0.iter()
    }

    /// The values in order.
    pub fn values(&self) -> std::slice::Iter<'_, Arg> {
        self.values.iter()
    }

    /// The values in order, mutable.
    pub fn values_mut(&mut self) -> std::slice::IterMut<'_, Arg> {
        self.values.iter_mut()
    }

    /// Every (name, value) in order.
    pub fn iter(&self) -> std::iter::Zip<std::slice::Iter<'_, Name>, std::slice::Iter<'_, Arg>> {
        self.names.0.iter().zip(self.values.iter())
    }
}

impl<'a> IntoIterator for &'a Kwargs {
    type Item = (&'a Name, &'a Arg);
    type IntoIter = std::iter::Zip<std::slice::Iter<'a, Name>, std::slice::Iter<'a, Arg>>;
    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

impl<N: AsRef<str>> FromIterator<(N, Arg)> for Kwargs {
    /// Later entries replace earlier ones of the same name (as for a map).
    fn from_iter<I: IntoIterator<Item = (N, Arg)>>(iter: I) -> Self {
        let mut k = Kwargs::new();
        for (n, v) in iter {
            k.insert(n.as_ref(), v);
        }
        k
    }
}

impl PartialEq for Kwargs {
    fn eq(&self, other: &Kwargs) -> bool {
        self.len() == other.len() && self.iter().all(|(n, v)| other.get(n) == Some(v))
    }
}

impl fmt::Debug for Kwargs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inserts_replace_in_place_and_append() {
        let mut k = Kwargs::new();
        assert_eq!(k.insert("a", Arg::Int(1)), None);
        assert_eq!(k.insert("b", Arg::Int(2)), None);
        assert_eq!(k.insert("a", Arg::Int(3)), Some(Arg::Int(1)));
        let pairs: Vec<(&str, &Arg)> = k.iter().map(|(n, v)| (n.as_str(), v)).collect();
        assert_eq!(pairs, [("a", &Arg::Int(3)), ("b", &Arg::Int(2))]);
        assert_eq!(format!("{k:?}"), r#"{"a": Int(3), "b": Int(2)}"#);
    }

    #[test]
    fn shared_names_copy_on_insert() {
        let names = KwargNames::new(vec![Name::new("x"), Name::new("y")]).unwrap_or_default();
        let a = Kwargs::with_names(&names, vec![Arg::Int(1), Arg::None]).unwrap_or_default();
        let mut b = a.clone();
        b.insert("z", Arg::Bool(true));
        assert_eq!(a.len(), 2);
        assert_eq!(b.len(), 3);
        assert!(a.names().ptr_eq(&names));
        assert!(!b.names().ptr_eq(&names));
        assert!(Kwargs::with_names(&names, vec![]).is_none());
        assert!(KwargNames::new(vec![Name::new("x"), Name::new("x")]).is_none());
    }

    #[test]
    fn equality_is_that_of_maps() {
        let a: Kwargs = [("a", Arg::Int(1)), ("b", Arg::Int(2))].into_iter().collect();
        let b: Kwargs = [("b", Arg::Int(2)), ("a", Arg::Int(1))].into_iter().collect();
        let c: Kwargs = [("a", Arg::Int(1))].into_iter().collect();
        assert_eq!(a, b);
        assert_ne!(a, c);
    }
}

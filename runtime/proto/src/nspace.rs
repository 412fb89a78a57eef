//! Namespace names, shared instead of copied.
//!
//! Every [`ProcId`](crate::ProcId) carries its namespace (a job's or a group's name), and a
//! node server copies process ids at every step of a collective: decoding a message,
//! cloning an outcome, storing data, answering each local member. With a `String` each
//! copy was an allocation and a byte copy, and each comparison a byte compare. An
//! [`Nspace`] is a reference-counted `str`: a clone is a count increment, and equal names
//! usually share one allocation, so comparing them stops at the pointer.
//!
//! Names are interned per thread in a small cache of recently seen names
//! ([`RECENT`] entries): decoding a process list of one job makes one allocation at most,
//! not one per process. A name missing from the cache is allocated as before; two equal
//! names in different allocations still compare, order and hash as equal strings.

use std::borrow::Borrow;
use std::cell::RefCell;
use std::cmp::Ordering;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::ops::Deref;
use std::sync::Arc;

use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// How many recently seen names each thread keeps for reuse. A job has one namespace and a
/// process takes part in a few groups at once; a miss costs only an allocation.
pub const RECENT: usize = 8;

thread_local! {
    static CACHE: RefCell<Cache> = const { RefCell::new(Cache { names: Vec::new(), next: 0 }) };
}

struct Cache {
    names: Vec<Arc<str>>,
    /// The slot the next miss replaces once the cache is full.
    next: usize,
}

impl Cache {
    fn get(&mut self, name: &str) -> Arc<str> {
        if let Some(hit) = self.names.iter().find(|n| ***n == *name) {
            return hit.clone();
        }
        let new: Arc<str> = Arc::from(name);
        if self.names.len() < RECENT {
            self.names.push(new.clone());
        } else {
            self.names[self.next] = new.clone();
            self.next = (self.next + 1) % RECENT;
        }
        new
    }
}

/// A namespace name: a job's namespace or a group id. Dereferences to `str`; compares,
/// orders and hashes as its string.
#[derive(Clone)]
pub struct Nspace(Arc<str>);

impl Nspace {
    /// The name, reusing this thread's allocation of an equal name seen recently.
    pub fn new(name: &str) -> Nspace {
        Nspace(CACHE.with(|c| c.borrow_mut().get(name)))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether both are the same allocation (equal names usually are; see the module).
    pub fn shares_with(&self, other: &Nspace) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Deref for Nspace {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl AsRef<str> for Nspace {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

/// Lets maps keyed by `Nspace` be searched with a `&str` (hashing and ordering agree).
impl Borrow<str> for Nspace {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl PartialEq for Nspace {
    fn eq(&self, other: &Nspace) -> bool {
        self.shares_with(other) || *self.0 == *other.0
    }
}

impl Eq for Nspace {}

impl PartialOrd for Nspace {
    fn partial_cmp(&self, other: &Nspace) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Nspace {
    fn cmp(&self, other: &Nspace) -> Ordering {
        if self.shares_with(other) {
            Ordering::Equal
        } else {
            self.0.cmp(&other.0)
        }
    }
}

impl Hash for Nspace {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_str().hash(state)
    }
}

impl PartialEq<str> for Nspace {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for Nspace {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl PartialEq<String> for Nspace {
    fn eq(&self, other: &String) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<Nspace> for str {
    fn eq(&self, other: &Nspace) -> bool {
        self == other.as_str()
    }
}

impl PartialEq<Nspace> for &str {
    fn eq(&self, other: &Nspace) -> bool {
        *self == other.as_str()
    }
}

impl PartialEq<Nspace> for String {
    fn eq(&self, other: &Nspace) -> bool {
        self == other.as_str()
    }
}

impl fmt::Debug for Nspace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl fmt::Display for Nspace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.as_str())
    }
}

impl From<&str> for Nspace {
    fn from(name: &str) -> Nspace {
        Nspace::new(name)
    }
}

impl From<&String> for Nspace {
    fn from(name: &String) -> Nspace {
        Nspace::new(name)
    }
}

impl From<String> for Nspace {
    fn from(name: String) -> Nspace {
        Nspace::new(&name)
    }
}

impl From<&Nspace> for Nspace {
    fn from(name: &Nspace) -> Nspace {
        name.clone()
    }
}

impl From<Nspace> for String {
    fn from(name: Nspace) -> String {
        name.as_str().to_string()
    }
}

/// On the wire an `Nspace` is its string, as a `String` was.
impl Serialize for Nspace {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Nspace {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Nspace, D::Error> {
        struct NameVisitor;
        impl Visitor<'_> for NameVisitor {
            type Value = Nspace;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a namespace name")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Nspace, E> {
                Ok(Nspace::new(v))
            }
        }
        d.deserialize_str(NameVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::{BTreeMap, HashMap};

    #[test]
    fn equal_names_share_one_allocation_within_the_cache() {
        let a = Nspace::new("job.7");
        let b = Nspace::from(String::from("job.7"));
        assert!(a.shares_with(&b));
        // More names than the cache holds push the first one out: a new allocation,
        // still equal in every respect.
        for i in 0..RECENT {
            let _ = Nspace::new(&format!("other.{i}"));
        }
        let c = Nspace::new("job.7");
        assert!(!a.shares_with(&c));
        assert_eq!(a, c);
        assert_eq!(a.cmp(&c), Ordering::Equal);
        let hash = |n: &Nspace| {
            let mut h = std::collections::hash_map::DefaultHasher::new();
            n.hash(&mut h);
            h.finish()
        };
        assert_eq!(hash(&a), hash(&c));
    }

    #[test]
    fn orders_and_compares_as_its_string() {
        let names = ["b", "a", "ab", "", "ba", "a"];
        let mut ours: Vec<Nspace> = names.iter().map(|n| Nspace::new(n)).collect();
        let mut strings: Vec<&str> = names.to_vec();
        ours.sort();
        strings.sort();
        assert_eq!(ours.iter().map(|n| n.as_str()).collect::<Vec<_>>(), strings);
        assert!(Nspace::new("a") < Nspace::new("ab"));
        assert_ne!(Nspace::new("a"), Nspace::new("b"));
        assert!(Nspace::new("x") == "x" && "x" == Nspace::new("x"));
        let owned = String::from("x");
        assert!(Nspace::new("x") == owned && owned == Nspace::new("x"));
    }

    #[test]
    fn maps_keyed_by_name_are_searched_with_a_str() {
        let mut h = HashMap::new();
        h.insert(Nspace::new("g1"), 1);
        let mut b = BTreeMap::new();
        b.insert(Nspace::new("g2"), 2);
        assert_eq!(h.get("g1"), Some(&1));
        assert_eq!(b.get("g2"), Some(&2));
        assert_eq!(h.get("g2"), None);
    }

    #[test]
    fn encodes_as_a_string_and_decodes_into_the_cache() {
        let name = Nspace::new("cohort.42.beef");
        let bytes = bincode::serialize(&name).unwrap();
        assert_eq!(bytes, bincode::serialize("cohort.42.beef").unwrap());
        let back: Nspace = bincode::deserialize(&bytes).unwrap();
        assert_eq!(back, name);
        assert!(back.shares_with(&name));
        let bad = bincode::serialize(&[0xffu8, 0xfe][..]).unwrap();
        assert!(bincode::deserialize::<Nspace>(&bad).is_err());
    }

    #[test]
    fn formats_as_its_string() {
        let n = Nspace::new("ns");
        assert_eq!(format!("{n}"), "ns");
        assert_eq!(format!("{n:>4}"), "  ns");
        assert_eq!(format!("{n:?}"), "\"ns\"");
    }
}

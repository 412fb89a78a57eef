//! A map that remembers only its most recently added keys.

use std::collections::VecDeque;

use crate::HashMap;
use std::hash::Hash;

/// Entries about finished collectives (tombstones, failed attempts, completions,
/// owed rounds): kept for the `cap` most recently added keys, oldest forgotten first,
/// so a long job's bookkeeping stays bounded.
#[derive(Debug)]
pub(super) struct Recent<K, V> {
    map: HashMap<K, V>,
    /// Keys in the order they were added (a key removed and added again appears
    /// twice; its older place then forgets it early, which only shortens its stay).
    order: VecDeque<K>,
    cap: usize,
}

impl<K: Hash + Eq + Clone, V> Recent<K, V> {
    pub(super) fn new(cap: usize) -> Recent<K, V> {
        Recent {
            map: HashMap::default(),
            order: VecDeque::new(),
            cap,
        }
    }

    /// Adds or replaces `key`'s entry; returns the one it replaced.
    pub(super) fn insert(&mut self, key: K, value: V) -> Option<V> {
        let old = self.map.insert(key.clone(), value);
        if old.is_none() {
            self.added(key);
        }
        old
    }

    /// `key`'s entry, added (as `V::default()`) if missing.
    pub(super) fn entry(&mut self, key: &K) -> &mut V
    where
        V: Default,
    {
        if !self.map.contains_key(key) {
            self.added(key.clone());
        }
        self.map.entry(key.clone()).or_default()
    }

    pub(super) fn get(&self, key: &K) -> Option<&V> {
        self.map.get(key)
    }

    pub(super) fn get_mut(&mut self, key: &K) -> Option<&mut V> {
        self.map.get_mut(key)
    }

    pub(super) fn contains_key(&self, key: &K) -> bool {
        self.map.contains_key(key)
    }

    pub(super) fn remove(&mut self, key: &K) -> Option<V> {
        self.map.remove(key)
    }

    fn added(&mut self, key: K) {
        self.order.push_back(key);
        while self.order.len() > self.cap {
            if let Some(old) = self.order.pop_front() {
                self.map.remove(&old);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forgets_the_oldest_keys_beyond_its_capacity() {
        let mut r: Recent<u32, &str> = Recent::new(2);
        assert_eq!(r.insert(1, "a"), None);
        assert_eq!(
            r.insert(1, "b"),
            Some("a"),
            "a replacement is not a new key"
        );
        *r.entry(&2) = "c";
        r.insert(3, "d");
        assert!(!r.contains_key(&1), "the oldest key is forgotten");
        assert_eq!((r.get(&2), r.get(&3)), (Some(&"c"), Some(&"d")));
        assert_eq!(r.remove(&2), Some("c"));
        assert_eq!(r.get(&2), None);
    }
}

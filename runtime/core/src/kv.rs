//! Posted data of processes, as one node server sees it.
//!
//! Local processes' data is kept in two halves: what same-node readers may see (local +
//! global scope) and what other nodes may see (remote + global scope). Data of
//! processes on other nodes arrives through collectives or direct modex and replaces
//! the previous snapshot of that process.

use std::collections::BTreeMap;

use crate::{HashMap, HashSet};

use cohort_proto::{Info, ProcId, Value};

type Map = BTreeMap<String, Value>;

#[derive(Default, Debug)]
pub struct KvStore {
    local_half: HashMap<ProcId, Map>,
    remote_half: HashMap<ProcId, Map>,
    committed: HashSet<ProcId>,
    foreign: HashMap<ProcId, Map>,
}

/// Result of a lookup.
#[derive(Debug, PartialEq)]
pub enum Lookup {
    Found(Value),
    /// The owner published and the key is not among its data.
    Absent,
    /// Nothing known about the owner yet (wait for a commit or fetch it).
    Unknown,
}

impl KvStore {
    /// A local process committed `local` (local+global) and `remote` (remote+global).
    pub fn commit(&mut self, proc: &ProcId, local: Info, remote: Info) {
        self.local_half
            .entry(proc.clone())
            .or_default()
            .extend(local);
        self.remote_half
            .entry(proc.clone())
            .or_default()
            .extend(remote);
        self.committed.insert(proc.clone());
    }

    pub fn has_committed(&self, proc: &ProcId) -> bool {
        self.committed.contains(proc)
    }

    /// What other nodes may read of a local process (sent in collectives and modex).
    pub fn remote_view(&self, proc: &ProcId) -> Info {
        self.remote_half
            .get(proc)
            .map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
            .unwrap_or_default()
    }

    /// Store a snapshot of a process on another node.
    pub fn store_foreign(&mut self, proc: ProcId, data: Info) {
        self.foreign.insert(proc, data.into_iter().collect());
    }

    /// Reads `key` of a process hosted on this node. Local and global data first; then
    /// remote-scope data, which group members must be able to read wherever they run
    /// (the scope decides what travels to other nodes, not who may read it).
    pub fn lookup_local(&self, owner: &ProcId, key: &str) -> Lookup {
        let found = self
            .local_half
            .get(owner)
            .and_then(|m| m.get(key))
            .or_else(|| self.remote_half.get(owner).and_then(|m| m.get(key)));
        match found {
            Some(v) => Lookup::Found(v.clone()),
            None if self.committed.contains(owner) => Lookup::Absent,
            None => Lookup::Unknown,
        }
    }

    /// Reads `key` of a process hosted on another node from the cached snapshot.
    pub fn lookup_foreign(&self, owner: &ProcId, key: &str) -> Lookup {
        match self.foreign.get(owner) {
            Some(m) => match m.get(key) {
                Some(v) => Lookup::Found(v.clone()),
                None => Lookup::Absent,
            },
            None => Lookup::Unknown,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scopes_are_respected() {
        let mut kv = KvStore::default();
        let a = ProcId::new("j", 0);
        let b = ProcId::new("j", 1);
        assert_eq!(kv.lookup_local(&a, "x"), Lookup::Unknown);
        kv.commit(
            &a,
            vec![
                ("loc".into(), Value::U32(1)),
                ("glob".into(), Value::U32(3)),
            ],
            vec![
                ("rem".into(), Value::U32(2)),
                ("glob".into(), Value::U32(3)),
            ],
        );
        assert_eq!(kv.lookup_local(&a, "loc"), Lookup::Found(Value::U32(1)));
        assert_eq!(kv.lookup_local(&a, "rem"), Lookup::Found(Value::U32(2)));
        assert_eq!(kv.lookup_local(&a, "none"), Lookup::Absent);
        let _ = b;
        let view = kv.remote_view(&a);
        assert!(view.iter().any(|(k, _)| k == "glob"));
        assert!(!view.iter().any(|(k, _)| k == "loc"));
    }
}

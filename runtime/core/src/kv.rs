//! Posted data of processes, as one node server sees it.
//!
//! Local processes' data is kept in two halves: what same-node readers may see (local +
//! global scope) and what other nodes may see (remote + global scope). Data of
//! processes on other nodes arrives through collectives or direct modex and replaces
//! the previous snapshot of that process. It arrives encoded ([`Posted`]) and stays so
//! until a process of this node reads a key of it: most snapshots a collective brings
//! are never read here.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use crate::{HashMap, HashSet};

use cohort_proto::posted::Posted;
use cohort_proto::value::info_get;
use cohort_proto::{CohortError, Info, ProcId, Value};

type Map = BTreeMap<String, Value>;

/// Up to this many keys, a foreign snapshot is kept as it arrived and searched in
/// order; more are indexed. A collective stores one snapshot per process of every
/// other node, and most processes post a few keys: building and later dropping a map
/// for each was a tenth of a node server's work per outcome (`cohort-sim cost`).
const FEW_KEYS: usize = 16;

/// What a process on another node posted, as its last collective or modex carried it.
#[derive(Debug)]
enum Snapshot {
    /// Searched from the end (the last write of a key wins).
    Few(Info),
    Many(Map),
}

impl Snapshot {
    fn new(data: Info) -> Snapshot {
        if data.len() <= FEW_KEYS {
            Snapshot::Few(data)
        } else {
            Snapshot::Many(data.into_iter().collect())
        }
    }

    fn get(&self, key: &str) -> Option<&Value> {
        match self {
            Snapshot::Few(info) => info_get(info, key),
            Snapshot::Many(map) => map.get(key),
        }
    }
}

/// A foreign snapshot as it arrived, and its keys once first read.
#[derive(Debug)]
struct Foreign {
    posted: Posted,
    decoded: OnceLock<Result<Snapshot, CohortError>>,
}

#[derive(Default, Debug)]
pub struct KvStore {
    local_half: HashMap<ProcId, Map>,
    remote_half: HashMap<ProcId, Map>,
    /// `remote_half` encoded, redone at each commit: what every collective and modex
    /// answer carries of the process.
    remote_posted: HashMap<ProcId, Posted>,
    committed: HashSet<ProcId>,
    foreign: HashMap<ProcId, Foreign>,
}

/// Result of a lookup.
#[derive(Debug, PartialEq)]
pub enum Lookup {
    Found(Value),
    /// The owner published and the key is not among its data.
    Absent,
    /// Nothing known about the owner yet (wait for a commit or fetch it).
    Unknown,
    /// The owner's snapshot arrived but does not decode (names the owner and why).
    Malformed(CohortError),
}

impl KvStore {
    /// A local process committed `local` (local+global) and `remote` (remote+global).
    pub fn commit(&mut self, proc: &ProcId, local: Info, remote: Info) {
        self.local_half
            .entry(proc.clone())
            .or_default()
            .extend(local);
        let half = self.remote_half.entry(proc.clone()).or_default();
        half.extend(remote);
        let view: Info = half.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        self.remote_posted.insert(proc.clone(), Posted::new(&view));
        self.committed.insert(proc.clone());
    }

    pub fn has_committed(&self, proc: &ProcId) -> bool {
        self.committed.contains(proc)
    }

    /// What other nodes may read of a local process (sent in collectives and modex).
    pub fn remote_view(&self, proc: &ProcId) -> Posted {
        self.remote_posted.get(proc).cloned().unwrap_or_default()
    }

    /// Store a snapshot of a process on another node.
    pub fn store_foreign(&mut self, proc: ProcId, posted: Posted) {
        let decoded = OnceLock::new();
        self.foreign.insert(proc, Foreign { posted, decoded });
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
        let Some(f) = self.foreign.get(owner) else {
            return Lookup::Unknown;
        };
        let decoded = f.decoded.get_or_init(|| {
            f.posted.info().map(Snapshot::new).map_err(|e| {
                CohortError::Protocol(format!("the data {owner} posted, as received: {e}"))
            })
        });
        match decoded {
            Ok(snapshot) => match snapshot.get(key) {
                Some(v) => Lookup::Found(v.clone()),
                None => Lookup::Absent,
            },
            Err(e) => Lookup::Malformed(e.clone()),
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
        let view = kv.remote_view(&a).info().unwrap();
        assert!(view.iter().any(|(k, _)| k == "glob"));
        assert!(!view.iter().any(|(k, _)| k == "loc"));
    }

    #[test]
    fn a_foreign_snapshot_answers_the_last_write_of_a_key_small_or_large() {
        for keys in [1usize, FEW_KEYS - 1, FEW_KEYS, 100] {
            let mut kv = KvStore::default();
            let p = ProcId::new("j", 7);
            let mut data: Info = (0..keys)
                .map(|i| (format!("k{i}"), Value::U64(i as u64)))
                .collect();
            data.push(("k0".into(), Value::U64(1000)));
            kv.store_foreign(p.clone(), Posted::new(&data));
            assert_eq!(kv.lookup_foreign(&p, "k0"), Lookup::Found(Value::U64(1000)));
            let last = format!("k{}", keys - 1);
            let want = if keys == 1 { 1000 } else { keys as u64 - 1 };
            assert_eq!(
                kv.lookup_foreign(&p, &last),
                Lookup::Found(Value::U64(want))
            );
            assert_eq!(kv.lookup_foreign(&p, "nope"), Lookup::Absent);
            // A later snapshot replaces the whole earlier one.
            kv.store_foreign(
                p.clone(),
                Posted::new(&vec![("other".into(), Value::U32(1))]),
            );
            assert_eq!(kv.lookup_foreign(&p, "k0"), Lookup::Absent);
            assert_eq!(
                kv.lookup_foreign(&ProcId::new("j", 8), "k0"),
                Lookup::Unknown
            );
        }
    }

    #[test]
    fn a_snapshot_that_does_not_decode_is_an_error_naming_its_owner() {
        let mut kv = KvStore::default();
        let p = ProcId::new("j", 4);
        // Three bytes, carried as a snapshot: too short for any encoded info.
        let garbage: Posted =
            cohort_proto::frame::decode_body(&cohort_proto::frame::encode_body(&vec![1u8, 2, 3]))
                .unwrap();
        kv.store_foreign(p.clone(), garbage);
        for key in ["a", "b"] {
            match kv.lookup_foreign(&p, key) {
                Lookup::Malformed(e) => assert!(e.to_string().contains("j:4"), "{e}"),
                other => panic!("{other:?}"),
            }
        }
    }
}

//! Compact wire form of process lists: `#[serde(with = "crate::procset")]` on a
//! `Vec<ProcId>` field encodes it as runs of consecutive ranks per namespace, in list
//! order (the list decodes to exactly the same `Vec`, order and duplicates included).
//! A fence or construct over `{job, 0..16383}` then costs a few dozen bytes per
//! message instead of ~15 bytes per process.
//!
//! Decoding is bounded: a list may expand to at most [`MAX_PROCS`] processes, so a
//! malformed frame cannot make a server allocate more than its frame length allows
//! by much.

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::ids::{ProcId, Rank};

/// Largest list a compact encoding may expand to.
pub const MAX_PROCS: u64 = 1 << 22;

#[derive(Serialize, Deserialize)]
struct Compact {
    nspaces: Vec<String>,
    /// (index into `nspaces`, first rank, number of consecutive ranks)
    runs: Vec<(u32, Rank, u32)>,
}

pub fn serialize<S: Serializer>(procs: &[ProcId], s: S) -> Result<S::Ok, S::Error> {
    let mut c = Compact {
        nspaces: Vec::new(),
        runs: Vec::new(),
    };
    for p in procs {
        let ns = match c.nspaces.iter().position(|n| *n == p.nspace) {
            Some(i) => i as u32,
            None => {
                c.nspaces.push(p.nspace.clone());
                (c.nspaces.len() - 1) as u32
            }
        };
        match c.runs.last_mut() {
            Some((n, first, len))
                if *n == ns && first.checked_add(*len) == Some(p.rank) && *len < u32::MAX =>
            {
                *len += 1
            }
            _ => c.runs.push((ns, p.rank, 1)),
        }
    }
    c.serialize(s)
}

pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<ProcId>, D::Error> {
    let c = Compact::deserialize(d)?;
    let mut total = 0u64;
    for &(ns, first, len) in &c.runs {
        if ns as usize >= c.nspaces.len() {
            return Err(D::Error::custom(format!(
                "process list: namespace index {ns} out of {}",
                c.nspaces.len()
            )));
        }
        if u64::from(first) + u64::from(len) > u64::from(u32::MAX) + 1 {
            return Err(D::Error::custom("process list: rank run overflows"));
        }
        total += u64::from(len);
        if total > MAX_PROCS {
            return Err(D::Error::custom(format!(
                "process list of more than {MAX_PROCS} processes"
            )));
        }
    }
    let mut out = Vec::with_capacity(total as usize);
    for (ns, first, len) in c.runs {
        let nspace = &c.nspaces[ns as usize];
        out.extend((0..len).map(|i| ProcId::new(nspace.clone(), first + i)));
    }
    Ok(out)
}

/// The same compact form for a shared list (`Arc<[ProcId]>`): a server keeps one copy
/// of a list every operation over the whole job refers to.
pub mod shared {
    use std::sync::Arc;

    use serde::{Deserializer, Serializer};

    use crate::ids::ProcId;

    pub fn serialize<S: Serializer>(procs: &Arc<[ProcId]>, s: S) -> Result<S::Ok, S::Error> {
        super::serialize(procs, s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Arc<[ProcId]>, D::Error> {
        super::deserialize(d).map(Arc::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame;

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Holder(#[serde(with = "crate::procset")] Vec<ProcId>);

    fn p(ns: &str, r: Rank) -> ProcId {
        ProcId::new(ns, r)
    }

    fn roundtrip(v: Vec<ProcId>) -> usize {
        let h = Holder(v);
        let bytes = frame::encode_body(&h);
        assert_eq!(frame::decode_body::<Holder>(&bytes).unwrap(), h);
        bytes.len()
    }

    #[test]
    fn lists_come_back_exactly_and_runs_are_small() {
        assert!(roundtrip(vec![]) < 32);
        let big: Vec<ProcId> = (0..16384).map(|r| p("job", r)).collect();
        assert!(roundtrip(big) < 64, "one run");
        // Order, duplicates, several namespaces, wildcards and u32::MAX survive.
        roundtrip(vec![
            p("b", 3),
            p("a", 1),
            p("a", 2),
            p("b", 4),
            p("a", 2),
            p("a", crate::ids::RANK_WILDCARD),
            p("a", 0),
            p("c", u32::MAX - 1),
            p("c", u32::MAX),
        ]);
    }

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct SharedHolder(#[serde(with = "crate::procset::shared")] std::sync::Arc<[ProcId]>);

    #[test]
    fn a_shared_list_has_the_same_wire_form() {
        let list: Vec<ProcId> = [p("a", 0), p("a", 1), p("b", 7), p("a", 2)].into();
        let shared = SharedHolder(list.clone().into());
        let bytes = frame::encode_body(&shared);
        assert_eq!(bytes, frame::encode_body(&Holder(list.clone())));
        let back: SharedHolder = frame::decode_body(&bytes).unwrap();
        assert_eq!(&back.0[..], &list[..]);
    }

    #[test]
    fn hostile_lists_are_refused_not_expanded() {
        let bad = |c: Compact| {
            let bytes = frame::encode_body(&c);
            frame::decode_body::<Holder>(&bytes)
                .unwrap_err()
                .to_string()
        };
        let e = bad(Compact {
            nspaces: vec!["j".into()],
            runs: vec![(0, 0, u32::MAX)],
        });
        assert!(e.contains("more than"), "{e}");
        let e = bad(Compact {
            nspaces: vec![],
            runs: vec![(0, 0, 1)],
        });
        assert!(e.contains("namespace index"), "{e}");
        let e = bad(Compact {
            nspaces: vec!["j".into()],
            runs: vec![(0, u32::MAX, 2)],
        });
        assert!(e.contains("overflows"), "{e}");
    }
}

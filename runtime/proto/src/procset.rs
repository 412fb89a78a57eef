//! Compact wire form of process lists: `#[serde(with = "crate::procset")]` on a
//! `Vec<ProcId>` field encodes it as runs of consecutive ranks per namespace, in list
//! order (the list decodes to exactly the same `Vec`, order and duplicates included).
//! A fence or construct over `{job, 0..16383}` then costs a few dozen bytes per
//! message instead of ~15 bytes per process.
//!
//! Decoding is bounded: a list may expand to at most [`MAX_PROCS`] processes, so a
//! malformed frame cannot make a server allocate more than its frame length allows
//! by much.

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::ids::{ProcId, Rank};

/// Largest list a compact encoding may expand to.
pub const MAX_PROCS: u64 = 1 << 22;

#[derive(Clone, PartialEq, Serialize, Deserialize)]
struct Compact {
    nspaces: Vec<crate::ids::Nspace>,
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
    expand::<D::Error>(Compact::deserialize(d)?)
}

/// The list `c` stands for, bounded by [`MAX_PROCS`].
fn expand<E: serde::de::Error>(c: Compact) -> Result<Vec<ProcId>, E> {
    let mut total = 0u64;
    for &(ns, first, len) in &c.runs {
        if ns as usize >= c.nspaces.len() {
            return Err(E::custom(format!(
                "process list: namespace index {ns} out of {}",
                c.nspaces.len()
            )));
        }
        if u64::from(first) + u64::from(len) > u64::from(u32::MAX) + 1 {
            return Err(E::custom("process list: rank run overflows"));
        }
        total += u64::from(len);
        if total > MAX_PROCS {
            return Err(E::custom(format!(
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
///
/// A whole namespace (`{ns, 0..n}`) registered with [`shared::whole_namespace`] is
/// neither walked when it is encoded nor expanded when it is decoded: every fence over
/// the job carries that list in each message, and expanding it allocated a name per
/// process, per message (4.5 ms per message for 65536 processes), although it is
/// 60 bytes on the wire.
///
/// Any other list decodes to the list this thread decoded last when their compact forms
/// are equal (and that list is still alive): every leader of a collective construct
/// sends the whole leader list, and a node server with R local leaders took in R copies.
pub mod shared {
    use std::cell::RefCell;
    use std::sync::{Arc, Mutex, Weak};

    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    use super::Compact;
    use crate::ids::ProcId;

    /// Registered whole-namespace lists (few: one per job a process serves).
    static WHOLE: Mutex<Vec<Weak<[ProcId]>>> = Mutex::new(Vec::new());

    thread_local! {
        /// The list this thread decoded last, and its compact form.
        static LAST: RefCell<Option<(Compact, Weak<[ProcId]>)>> = const { RefCell::new(None) };
    }

    fn registered() -> std::sync::MutexGuard<'static, Vec<Weak<[ProcId]>>> {
        WHOLE.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether `list` is `{ns, 0}, {ns, 1}, …, {ns, n-1}` for one namespace, n ≥ 1.
    fn is_whole_namespace(list: &[ProcId]) -> bool {
        list.first().is_some_and(|first| {
            list.iter()
                .enumerate()
                .all(|(i, p)| p.rank as usize == i && p.nspace == first.nspace)
        })
    }

    /// Registers `list` when it is a whole namespace (`{ns, 0..n}`, in order), so that
    /// lists equal to it are encoded without walking them and decode to it, shared.
    /// Returns the registered list: `list`, or an equal one registered before (while
    /// one is alive). Any other list is returned as it is.
    pub fn whole_namespace(list: Arc<[ProcId]>) -> Arc<[ProcId]> {
        if !is_whole_namespace(&list) {
            return list;
        }
        let mut reg = registered();
        reg.retain(|w| w.strong_count() > 0);
        if let Some(known) = find(&reg, &list[0].nspace, list.len()) {
            return known;
        }
        reg.push(Arc::downgrade(&list));
        list
    }

    /// The list `{nspace, 0..n}` among `reg`, if it is alive.
    fn find(reg: &[Weak<[ProcId]>], nspace: &str, n: usize) -> Option<Arc<[ProcId]>> {
        reg.iter()
            .filter_map(Weak::upgrade)
            .find(|k| k.len() == n && k[0].nspace == nspace)
    }

    /// Whether `procs` is (the same allocation as) a registered list.
    fn is_registered(procs: &Arc<[ProcId]>) -> bool {
        !procs.is_empty()
            && registered()
                .iter()
                .filter_map(Weak::upgrade)
                .any(|k| Arc::ptr_eq(&k, procs))
    }

    pub fn serialize<S: Serializer>(procs: &Arc<[ProcId]>, s: S) -> Result<S::Ok, S::Error> {
        if is_registered(procs) {
            // One run: what the walk below would produce.
            return Compact {
                nspaces: vec![procs[0].nspace.clone()],
                runs: vec![(0, 0, procs.len() as u32)],
            }
            .serialize(s);
        }
        super::serialize(procs, s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Arc<[ProcId]>, D::Error> {
        let c = Compact::deserialize(d)?;
        if let ([nspace], [(0, 0, n)]) = (&c.nspaces[..], &c.runs[..]) {
            if let Some(known) = find(&registered(), nspace, *n as usize) {
                return Ok(known);
            }
        }
        let last = LAST.with(|l| {
            let l = l.borrow();
            let (form, list) = l.as_ref()?;
            (*form == c).then(|| list.upgrade()).flatten()
        });
        if let Some(list) = last {
            return Ok(list);
        }
        let list: Arc<[ProcId]> = super::expand::<D::Error>(c.clone())?.into();
        LAST.with(|l| *l.borrow_mut() = Some((c, Arc::downgrade(&list))));
        Ok(list)
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

    fn whole(ns: &str, n: u32) -> std::sync::Arc<[ProcId]> {
        (0..n).map(|r| p(ns, r)).collect::<Vec<_>>().into()
    }

    #[test]
    fn a_registered_whole_namespace_decodes_to_the_one_shared_list() {
        use std::sync::Arc;
        // Namespaces of their own: the registry is shared by the tests of this process.
        let reg = shared::whole_namespace(whole("procset-reg", 5000));
        // An equal list registers as the same one.
        assert!(Arc::ptr_eq(
            &shared::whole_namespace(whole("procset-reg", 5000)),
            &reg
        ));
        // Same bytes as the walked form of an equal, unregistered list.
        let bytes = frame::encode_body(&SharedHolder(reg.clone()));
        let walked: Vec<ProcId> = reg.to_vec();
        assert_eq!(bytes, frame::encode_body(&Holder(walked)));
        let back: SharedHolder = frame::decode_body(&bytes).unwrap();
        assert!(
            Arc::ptr_eq(&back.0, &reg),
            "not expanded: the registered list"
        );
        // Lists that are not that namespace, whole, come back as themselves.
        for other in [
            whole("procset-reg", 4999),
            whole("procset-reg", 5001),
            whole("procset-reg-b", 5000),
            (1..5001)
                .map(|r| p("procset-reg", r))
                .collect::<Vec<_>>()
                .into(),
        ] {
            let bytes = frame::encode_body(&SharedHolder(other.clone()));
            let back: SharedHolder = frame::decode_body(&bytes).unwrap();
            assert!(!Arc::ptr_eq(&back.0, &reg));
            assert_eq!(back.0, other);
        }
    }

    #[test]
    fn only_whole_namespaces_register_and_a_dropped_one_is_forgotten() {
        use std::sync::Arc;
        let gap: Arc<[ProcId]> = vec![p("procset-gap", 0), p("procset-gap", 2)].into();
        let returned = shared::whole_namespace(gap.clone());
        assert!(Arc::ptr_eq(&returned, &gap));
        let bytes = frame::encode_body(&SharedHolder(whole("procset-gap", 3)));
        let back: SharedHolder = frame::decode_body(&bytes).unwrap();
        assert_eq!(back.0, whole("procset-gap", 3));

        let reg = shared::whole_namespace(whole("procset-dropped", 10));
        let bytes = frame::encode_body(&SharedHolder(reg.clone()));
        drop(reg);
        let back: SharedHolder = frame::decode_body(&bytes).unwrap();
        assert_eq!(back.0, whole("procset-dropped", 10));
        assert!(shared::whole_namespace(Arc::from(Vec::new())).is_empty());
    }

    #[test]
    fn a_list_decoded_again_is_the_same_list_while_it_lives() {
        use std::sync::Arc;
        // Not a whole namespace (it starts at rank 3, and has a second namespace).
        let list: Vec<ProcId> = (3..40)
            .map(|r| p("procset-again", r))
            .chain([p("procset-other", 1)])
            .collect();
        let bytes = frame::encode_body(&SharedHolder(list.clone().into()));
        let first: SharedHolder = frame::decode_body(&bytes).unwrap();
        let second: SharedHolder = frame::decode_body(&bytes).unwrap();
        assert_eq!(&first.0[..], &list[..]);
        assert!(Arc::ptr_eq(&first.0, &second.0));
        // Another list in between: each decodes to itself.
        let shorter = frame::encode_body(&SharedHolder(list[..10].to_vec().into()));
        let other: SharedHolder = frame::decode_body(&shorter).unwrap();
        assert_eq!(&other.0[..], &list[..10]);
        let third: SharedHolder = frame::decode_body(&bytes).unwrap();
        assert_eq!(third.0, first.0);
        // Once dropped, the next decode makes a new, equal list.
        drop((first, second, third));
        let again: SharedHolder = frame::decode_body(&bytes).unwrap();
        assert_eq!(&again.0[..], &list[..]);
    }
}

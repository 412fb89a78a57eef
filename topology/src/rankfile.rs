//! Open MPI's rankfile (`mpirun --rankfile FILE`): each rank's node, and the cores it
//! is bound to there.
//!
//! ```text
//! # comments and blank lines are skipped
//! rank 0=node0 slot=0-1        # logical cores 0 and 1 of the host
//! rank 1=node1 slot=1:0,2      # package (socket) 1's logical cores 0 and 2
//! rank 2=+n1 slot=0:*;1:0      # the job's node 1: all of package 0, core 0 of package 1
//! rank 3=node0                 # no slot: not bound
//! ```
//!
//! Core and package numbers are logical (hwloc's order on the host; hardware threads
//! with `--use-hwthread-cpus`), and resolved by the node server on its own host with
//! [`NodeLayout::slot_binding`]. The launcher hands every node server the whole map as
//! one argument ([`RankMap`]'s text form).

use std::fmt;
use std::str::FromStr;

use crate::cpuset::CpuSet;
use crate::placement::NodeLayout;

/// The highest rank a rankfile may name, plus one (bounds what a file can allocate).
pub const MAX_RANKS: u32 = 1 << 20;

/// A rankfile's `slot=` value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SlotSpec {
    /// Logical cores of the host: `0-2,5`.
    Cores(CpuSet),
    /// Packages and their logical cores (`None`: all of them): `1:0-2`, `0:*;1:0`.
    Packages(Vec<(u32, Option<CpuSet>)>),
}

/// An index list (`0-2,5`), non-empty.
fn index_list(s: &str) -> Result<CpuSet, String> {
    let set: CpuSet = s
        .parse()
        .map_err(|_| format!("{s:?} is not a list of logical indices like 0-2,5"))?;
    if set.is_empty() {
        return Err("an empty list".into());
    }
    Ok(set)
}

impl FromStr for SlotSpec {
    type Err = String;

    fn from_str(s: &str) -> Result<SlotSpec, String> {
        let s = s.trim();
        if !s.contains(':') {
            return index_list(s).map(SlotSpec::Cores);
        }
        let mut packages = Vec::new();
        for part in s.split(';') {
            let (p, cores) = part
                .split_once(':')
                .ok_or_else(|| format!("{part:?}: each of several parts is PACKAGE:CORES"))?;
            let p: u32 = p
                .trim()
                .parse()
                .map_err(|_| format!("{p:?} is not a package (socket) number"))?;
            let cores = match cores.trim() {
                "*" => None,
                c => Some(index_list(c)?),
            };
            packages.push((p, cores));
        }
        Ok(SlotSpec::Packages(packages))
    }
}

impl fmt::Display for SlotSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SlotSpec::Cores(c) => write!(f, "{c}"),
            SlotSpec::Packages(ps) => {
                for (i, (p, cores)) in ps.iter().enumerate() {
                    if i > 0 {
                        f.write_str(";")?;
                    }
                    match cores {
                        Some(c) => write!(f, "{p}:{c}")?,
                        None => write!(f, "{p}:*")?,
                    }
                }
                Ok(())
            }
        }
    }
}

impl NodeLayout {
    /// The CPUs of `spec`'s cores on this host; an error naming what the host lacks.
    pub fn slot_binding(&self, spec: &SlotSpec) -> Result<CpuSet, String> {
        let n = self.cores.len();
        let mut cpus = CpuSet::new();
        match spec {
            SlotSpec::Cores(list) => {
                for i in list.iter() {
                    let core = self.cores.get(i as usize).ok_or_else(|| {
                        format!(
                            "logical core {i}: the host has {n} (0-{})",
                            n.saturating_sub(1)
                        )
                    })?;
                    cpus = cpus.union(core);
                }
            }
            SlotSpec::Packages(ps) => {
                for (p, list) in ps {
                    let in_package: Vec<usize> = (0..n)
                        .filter(|&c| self.core_package[c] == *p as usize)
                        .collect();
                    if in_package.is_empty() {
                        return Err(format!("package {p}: the host has {}", self.packages.len()));
                    }
                    let chosen: Vec<usize> = match list {
                        None => in_package,
                        Some(list) => list
                            .iter()
                            .map(|i| {
                                in_package.get(i as usize).copied().ok_or_else(|| {
                                    format!("core {i} of package {p}: it has {}", in_package.len())
                                })
                            })
                            .collect::<Result<_, _>>()?,
                    };
                    for c in chosen {
                        cpus = cpus.union(&self.cores[c]);
                    }
                }
            }
        }
        Ok(cpus)
    }
}

/// Every rank's node and `slot=` value (rank order), as a rankfile gave them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RankMap {
    pub ranks: Vec<(u32, Option<SlotSpec>)>,
}

impl RankMap {
    /// The node of each rank, in rank order.
    pub fn rank_node(&self) -> Vec<u32> {
        self.ranks.iter().map(|(n, _)| *n).collect()
    }

    /// Rank `rank`'s `slot=` value, if it has one.
    pub fn slot(&self, rank: u32) -> Option<&SlotSpec> {
        self.ranks.get(rank as usize).and_then(|(_, s)| s.as_ref())
    }

    /// Whether `layout` (a host's) has every core the `slot=` values of the ranks on
    /// `node` name (of every rank, with `None`): an error naming the first rank whose
    /// cores it lacks.
    pub fn check_slots(&self, layout: &NodeLayout, node: Option<u32>) -> Result<(), String> {
        for (rank, (on, slot)) in self.ranks.iter().enumerate() {
            if let Some(slot) = slot.as_ref().filter(|_| node.is_none_or(|n| n == *on)) {
                layout
                    .slot_binding(slot)
                    .map_err(|e| format!("rank {rank} slot={slot}: {e}"))?;
            }
        }
        Ok(())
    }
}

/// The form handed to node servers: one item per rank in rank order, `NODE` or
/// `NODE=SLOT`, joined by `/` (`0=0-1/1=1:0,2/0`).
impl fmt::Display for RankMap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, (node, slot)) in self.ranks.iter().enumerate() {
            if i > 0 {
                f.write_str("/")?;
            }
            write!(f, "{node}")?;
            if let Some(s) = slot {
                write!(f, "={s}")?;
            }
        }
        Ok(())
    }
}

impl FromStr for RankMap {
    type Err = String;

    fn from_str(s: &str) -> Result<RankMap, String> {
        let ranks = s
            .split('/')
            .enumerate()
            .map(|(rank, item)| {
                let (node, slot) = match item.split_once('=') {
                    Some((n, s)) => (n, Some(s.parse::<SlotSpec>()?)),
                    None => (item, None),
                };
                let node = node
                    .parse::<u32>()
                    .map_err(|_| format!("rank {rank}: {node:?} is not a node index"))?;
                Ok((node, slot))
            })
            .collect::<Result<_, String>>()?;
        Ok(RankMap { ranks })
    }
}

/// Reads rankfile `text`: `nodes` are the job's node names (a line's host is one of
/// them, or `+nK`, the K-th); `np`, when given, is the job's size, which the file must
/// cover exactly (else the file's ranks, 0 to the highest, are the job). Errors name
/// the line.
pub fn parse_rankfile(text: &str, nodes: &[String], np: Option<u32>) -> Result<RankMap, String> {
    let mut given: std::collections::BTreeMap<u32, (usize, u32, Option<SlotSpec>)> =
        Default::default();
    for (i, raw) in text.lines().enumerate() {
        let line_no = i + 1;
        let err = |why: String| format!("line {line_no}: {why}");
        let line = raw.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        // `rank 0 = aa slot = 1:0` reads as `rank 0=aa slot=1:0`.
        let squeezed = line.split('=').map(str::trim).collect::<Vec<_>>().join("=");
        let mut words = squeezed.split_whitespace();
        if words.next().map(str::to_ascii_lowercase).as_deref() != Some("rank") {
            return Err(err(format!(
                "{line:?}: a line is `rank N=HOST [slot=LIST]`"
            )));
        }
        let (rank, host) = words
            .next()
            .and_then(|w| w.split_once('='))
            .ok_or_else(|| err(format!("{line:?}: a line is `rank N=HOST [slot=LIST]`")))?;
        let rank: u32 = rank
            .parse()
            .ok()
            .filter(|&r| r < MAX_RANKS)
            .ok_or_else(|| err(format!("{rank:?} is not a rank")))?;
        let node = match host.strip_prefix("+n") {
            Some(k) => k
                .parse::<u32>()
                .ok()
                .filter(|&k| (k as usize) < nodes.len())
                .ok_or_else(|| {
                    err(format!(
                        "{host:?}: the job has {} node(s), +n0 to +n{}",
                        nodes.len(),
                        nodes.len().saturating_sub(1)
                    ))
                })?,
            None => nodes
                .iter()
                .position(|n| n == host)
                .map(|p| p as u32)
                .ok_or_else(|| {
                    err(format!(
                        "rank {rank}: host {host:?} is not one of the job's nodes ({})",
                        crate::hostlist::compress(nodes)
                    ))
                })?,
        };
        let mut slot = None;
        for w in words {
            match w.split_once('=') {
                Some((k, v)) if k.eq_ignore_ascii_case("slot") && slot.is_none() => {
                    slot = Some(
                        v.parse::<SlotSpec>()
                            .map_err(|e| err(format!("rank {rank}: slot={v}: {e}")))?,
                    );
                }
                _ => {
                    return Err(err(format!(
                        "rank {rank}: {w:?}: only one slot=LIST may follow the host"
                    )))
                }
            }
        }
        if let Some((first, _, _)) = given.get(&rank) {
            return Err(err(format!(
                "rank {rank} is already placed on line {first}"
            )));
        }
        given.insert(rank, (line_no, node, slot));
    }
    let np = match (np, given.keys().next_back()) {
        (Some(np), _) => np,
        (None, Some(&last)) => last + 1,
        (None, None) => return Err("it places no rank".into()),
    };
    if let Some((&r, (line, _, _))) = given.range(np..).next() {
        return Err(format!(
            "line {line}: rank {r}, but the job has {np} rank(s)"
        ));
    }
    if let Some(missing) = (0..np).find(|r| !given.contains_key(r)) {
        return Err(format!(
            "rank {missing} is not placed (a rankfile places every rank of the job, 0-{})",
            np.saturating_sub(1)
        ));
    }
    Ok(RankMap {
        ranks: given.into_values().map(|(_, n, s)| (n, s)).collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names() -> Vec<String> {
        ["aa", "bb", "cc"].map(String::from).into()
    }

    fn cpus(s: &str) -> CpuSet {
        s.parse().unwrap()
    }

    /// Open MPI's examples, with comments, `+nK` hosts, spaces around `=` and a rank
    /// without a slot; the text form handed to node servers reads back the same.
    #[test]
    fn open_mpi_rankfiles_read() {
        let text = "# two sockets each\n\
                    rank 0=aa slot=1:0-2\n\
                    \n\
                    rank 2  =\tcc slot =  1-2   # cores 1 and 2\n\
                    rank 1=+n1 slot=0:0,1;1:*\n\
                    RANK 3=aa\n";
        let map = parse_rankfile(text, &names(), None).unwrap();
        assert_eq!(map.rank_node(), [0, 1, 2, 0]);
        assert_eq!(
            map.slot(0),
            Some(&SlotSpec::Packages(vec![(1, Some(cpus("0-2")))]))
        );
        assert_eq!(
            map.slot(1),
            Some(&SlotSpec::Packages(vec![(0, Some(cpus("0-1"))), (1, None)]))
        );
        assert_eq!(map.slot(2), Some(&SlotSpec::Cores(cpus("1-2"))));
        assert_eq!(map.slot(3), None);
        let wire = map.to_string();
        assert_eq!(wire, "0=1:0-2/1=0:0-1;1:*/2=1-2/0");
        assert_eq!(wire.parse::<RankMap>(), Ok(map));
    }

    /// Every mistake names its line (or the rank left out) and what is wrong.
    #[test]
    fn bad_rankfiles_are_refused_naming_the_line() {
        let cases: [(&str, Option<u32>, &str); 11] = [
            (
                "rank 0=aa\nrank 0=bb",
                None,
                "line 2: rank 0 is already placed on line 1",
            ),
            ("rank 0=aa\nrank 2=bb", None, "rank 1 is not placed"),
            ("rank 0=aa\nrank 1=bb", Some(3), "rank 2 is not placed"),
            (
                "rank 0=aa\nrank 1=bb",
                Some(1),
                "line 2: rank 1, but the job has 1 rank(s)",
            ),
            (
                "rank 0=zz",
                None,
                "line 1: rank 0: host \"zz\" is not one of the job's nodes (aa,bb,cc)",
            ),
            ("rank 0=+n3", None, "+n0 to +n2"),
            ("rank 0=aa slot=x", None, "line 1: rank 0: slot=x"),
            ("rank 0=aa slot=0:", None, "line 1: rank 0: slot=0:"),
            ("rank 0=aa slot=1 bogus", None, "only one slot=LIST"),
            ("host 0=aa", None, "a line is `rank N=HOST"),
            ("# nothing\n", None, "it places no rank"),
        ];
        for (text, np, says) in cases {
            let e = parse_rankfile(text, &names(), np).unwrap_err();
            assert!(e.contains(says), "{text:?}: {e}");
        }
    }

    /// Two packages of two cores with two hardware threads each.
    fn layout() -> NodeLayout {
        NodeLayout {
            cores: ["0,4", "1,5", "2,6", "3,7"].map(cpus).into(),
            core_domain: vec![0, 0, 1, 1],
            domains: vec![cpus("0-1,4-5"), cpus("2-3,6-7")],
            core_package: vec![0, 0, 1, 1],
            packages: vec![cpus("0-1,4-5"), cpus("2-3,6-7")],
        }
    }

    /// Logical cores, and a package's own logical cores, resolve to their CPUs; what
    /// the host lacks is named.
    #[test]
    fn slots_resolve_on_the_hosts_layout() {
        let l = layout();
        let bind = |s: &str| l.slot_binding(&s.parse().unwrap());
        assert_eq!(bind("1-2"), Ok(cpus("1-2,5-6")));
        assert_eq!(bind("1:1"), Ok(cpus("3,7")));
        assert_eq!(bind("0:*;1:0"), Ok(cpus("0-2,4-6")));
        assert_eq!(
            bind("4").unwrap_err(),
            "logical core 4: the host has 4 (0-3)"
        );
        assert_eq!(bind("2:0").unwrap_err(), "package 2: the host has 2");
        assert_eq!(bind("1:2").unwrap_err(), "core 2 of package 1: it has 2");
        // A map's check: the ranks of one node, or of all.
        let map: RankMap = "0=0:*/1=1:2/0".parse().unwrap();
        assert_eq!(map.check_slots(&l, Some(0)), Ok(()));
        let e = "rank 1 slot=1:2: core 2 of package 1: it has 2";
        assert_eq!(map.check_slots(&l, Some(1)).unwrap_err(), e);
        assert_eq!(map.check_slots(&l, None).unwrap_err(), e);
    }
}

//! Where ranks go and what they are bound to: `--map-by` and `--bind-to` as pure
//! arithmetic over a [`Topology`], the default binding decision (bind to core unless
//! oversubscribed), and the [`Binding`] a rank reads back from `COHORT_BINDING`.
//!
//! The launcher and every node server run the same functions on the same inputs, so
//! they agree on the job map and on every rank's CPUs without talking about it.

use std::fmt;
use std::str::FromStr;

use cohort_proto::env;
use cohort_proto::JobMap;
use serde::{Deserialize, Serialize};

use crate::cpuset::{CpuListError, CpuSet};
use crate::machine::Topology;

/// `--map-by`: how ranks are placed on node servers, and on cores within a node.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MapBy {
    /// Fill node servers in turn (block mapping); within a node, consecutive cores.
    #[default]
    Slot,
    /// Rank `r` on node server `r % M` (round-robin); within a node, consecutive cores.
    Node,
    /// Block over node servers; within a node, alternate NUMA domains.
    Numa,
    /// Block over node servers; within a node, consecutive cores.
    Core,
    /// Block over node servers; within a node, alternate packages (sockets).
    Package,
}

/// `--bind-to`: what a rank is bound to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BindTo {
    None,
    Core,
    Numa,
    /// The CPUs of the rank's package (socket).
    Package,
    /// One hardware thread (PU): the first of the rank's core, or the rank's own with
    /// [`SlotUnit::Hwthread`].
    Hwthread,
}

/// What one placement slot is: a core, or (mpirun's `--use-hwthread-cpus`) a hardware
/// thread, so a host of C cores with T threads each holds C·T ranks before it is
/// oversubscribed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SlotUnit {
    #[default]
    Core,
    Hwthread,
}

impl SlotUnit {
    /// Hardware threads with `--use-hwthread-cpus` (`hwthreads`), else cores.
    pub fn of(hwthreads: bool) -> SlotUnit {
        match hwthreads {
            true => SlotUnit::Hwthread,
            false => SlotUnit::Core,
        }
    }

    /// `core` / `hardware thread`, for messages.
    pub fn name(self) -> &'static str {
        match self {
            SlotUnit::Core => "core",
            SlotUnit::Hwthread => "hardware thread",
        }
    }
}

macro_rules! keyword_enum {
    ($ty:ident { $($name:literal => $variant:ident),+ $(,)? }) => {
        impl $ty {
            /// Every accepted spelling, for help texts and errors.
            pub const NAMES: &'static [&'static str] = &[$($name),+];

            pub fn as_str(self) -> &'static str {
                match self { $($ty::$variant => $name),+ }
            }
        }

        impl fmt::Display for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl FromStr for $ty {
            type Err = String;

            fn from_str(s: &str) -> Result<$ty, String> {
                match s.to_ascii_lowercase().as_str() {
                    $($name => Ok($ty::$variant),)+
                    _ => Err(format!(
                        "{s:?} is not one of {}",
                        $ty::NAMES.join(", ")
                    )),
                }
            }
        }
    };
}

keyword_enum!(MapBy { "slot" => Slot, "node" => Node, "numa" => Numa, "core" => Core, "package" => Package });
keyword_enum!(BindTo { "none" => None, "core" => Core, "numa" => Numa, "package" => Package, "hwthread" => Hwthread });

/// How ranks are numbered over the node servers (the [`MapBy`] given to [`job_map`] and
/// [`job_map_with_counts`]): as `--rank-by` says (`Slot` in blocks, `Node`
/// round-robin), else as `--map-by` does (round-robin for `node`, blocks otherwise).
pub fn rank_order(map_by: MapBy, rank_by: Option<MapBy>) -> MapBy {
    match (rank_by, map_by) {
        (Some(order), _) => order,
        (None, MapBy::Node) => MapBy::Node,
        (None, _) => MapBy::Slot,
    }
}

/// mpirun's `--rank-by`: `slot` (ranks in blocks over the node servers) or `node`
/// (round-robin); Open MPI's finer orders (by core, socket, …) are refused by name.
pub fn parse_rank_by(s: &str) -> Result<MapBy, String> {
    match s.to_ascii_lowercase().as_str() {
        "slot" => Ok(MapBy::Slot),
        "node" => Ok(MapBy::Node),
        _ => Err(format!(
            "--rank-by {s}: cohort numbers ranks by slot (in blocks over the node servers) \
             or by node (round-robin); give one of those"
        )),
    }
}

/// mpirun's `--cpu-set`: a CPU list (`0-3,8`), not empty.
pub fn parse_cpu_set(s: &str) -> Result<CpuSet, String> {
    let set: CpuSet = s.parse().map_err(|e| format!("{e}"))?;
    if set.is_empty() {
        return Err(format!("{s:?} lists no CPU"));
    }
    Ok(set)
}

/// The job's rank → node-server map for `map_by`. The launcher and every node server
/// build it with this one function.
pub fn job_map(
    map_by: MapBy,
    nspace: impl Into<cohort_proto::Nspace>,
    np: u32,
    nodes: u32,
) -> JobMap {
    match map_by {
        MapBy::Node => JobMap::round_robin(nspace, np, nodes),
        MapBy::Slot | MapBy::Numa | MapBy::Core | MapBy::Package => {
            JobMap::block(nspace, np, nodes)
        }
    }
}

/// The job's rank → node-server map when the launcher fixed how many ranks each node
/// server gets (`counts[n]` for node `n`; hosts with `slots` caps): [`MapBy::Node`]
/// deals ranks round-robin over the nodes that still have room, the block policies
/// give node 0 its first `counts[0]` ranks, node 1 the next, and so on. With the
/// counts of an even split this is exactly [`job_map`]. The launcher and every node
/// server build it with this one function.
pub fn job_map_with_counts(
    map_by: MapBy,
    nspace: impl Into<cohort_proto::Nspace>,
    counts: &[u32],
) -> JobMap {
    let nodes = u32::try_from(counts.len()).expect("node count fits in u32");
    let np: u32 = counts.iter().sum();
    let mut job = JobMap::block(nspace, np, nodes);
    job.rank_node.clear();
    match map_by {
        MapBy::Node => {
            let mut left = counts.to_vec();
            while job.rank_node.len() < np as usize {
                for (node, l) in left.iter_mut().enumerate() {
                    if *l > 0 {
                        *l -= 1;
                        job.rank_node.push(node as u32);
                    }
                }
            }
        }
        MapBy::Slot | MapBy::Numa | MapBy::Core | MapBy::Package => {
            for (node, &c) in counts.iter().enumerate() {
                job.rank_node
                    .extend(std::iter::repeat_n(node as u32, c as usize));
            }
        }
    }
    job
}

/// What a rank is bound to.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Binding {
    /// Not bound: runs wherever its node server may run.
    Unbound,
    /// Bound to exactly these CPUs.
    Cpus(CpuSet),
}

impl Binding {
    pub fn cpus(&self) -> Option<&CpuSet> {
        match self {
            Binding::Unbound => None,
            Binding::Cpus(c) => Some(c),
        }
    }
}

/// `none`, or the CPU list (`0-1`): the value of `COHORT_BINDING`.
impl fmt::Display for Binding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Binding::Unbound => f.write_str("none"),
            Binding::Cpus(c) => write!(f, "{c}"),
        }
    }
}

impl FromStr for Binding {
    type Err = CpuListError;

    fn from_str(s: &str) -> Result<Binding, CpuListError> {
        let s = s.trim();
        if s.eq_ignore_ascii_case("none") {
            return Ok(Binding::Unbound);
        }
        let cpus: CpuSet = s.parse()?;
        if cpus.is_empty() {
            return Err(CpuListError {
                text: s.to_string(),
                why: "no CPU",
            });
        }
        Ok(Binding::Cpus(cpus))
    }
}

/// This process's binding as its node server set it (`COHORT_BINDING`); `None` when
/// the variable is absent (not started by cohortd) or malformed.
pub fn binding_from_env() -> Option<Binding> {
    binding_from(std::env::var(env::BINDING).ok().as_deref())
}

/// [`binding_from_env`] on a given value of the variable.
pub fn binding_from(value: Option<&str>) -> Option<Binding> {
    value?.parse().ok()
}

/// The CPUs a node server places ranks on: its allowed cores (or hardware threads, with
/// [`SlotUnit::Hwthread`]), grouped by NUMA domain and package.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeLayout {
    /// Each slot unit's PUs, in logical order: a core's, or one PU with
    /// [`SlotUnit::Hwthread`] (the fields below say "core" for a unit).
    pub cores: Vec<CpuSet>,
    /// Each core's NUMA domain, an index into `domains`.
    pub core_domain: Vec<usize>,
    /// The CPUs of each NUMA domain that has cores.
    pub domains: Vec<CpuSet>,
    /// Each core's package (socket), an index into `packages`.
    pub core_package: Vec<usize>,
    /// The allowed CPUs of each package that has cores.
    pub packages: Vec<CpuSet>,
}

impl NodeLayout {
    /// The layout of `topo`: its cores, and NUMA domains that have cores (memory-only
    /// nodes are left out). Cores outside every NUMA node form one domain of their own.
    pub fn from_topology(topo: &Topology) -> NodeLayout {
        let mut domains: Vec<(Option<u32>, CpuSet)> = Vec::new();
        let mut core_domain = Vec::new();
        let mut packages: Vec<(Option<u32>, CpuSet)> = Vec::new();
        let mut core_package = Vec::new();
        let mut cores = Vec::new();
        for core in topo.cores.iter().filter(|c| !c.cpuset.is_empty()) {
            // A domain's CPUs are its NUMA node's (allowed ones), and cover its cores
            // even when hwloc's NUMA cpuset is odd.
            core_domain.push(group_core(&mut domains, core.numa, &core.cpuset, || {
                core.numa
                    .and_then(|n| topo.numa_node(n))
                    .map(|n| n.cpuset.intersection(&topo.machine.cpuset))
                    .unwrap_or_default()
            }));
            // Packages by the cores they hold (cores of no known package: one).
            core_package.push(group_core(
                &mut packages,
                core.package,
                &core.cpuset,
                CpuSet::new,
            ));
            cores.push(core.cpuset.clone());
        }
        NodeLayout {
            cores,
            core_domain,
            domains: domains.into_iter().map(|(_, c)| c).collect(),
            core_package,
            packages: packages.into_iter().map(|(_, c)| c).collect(),
        }
    }

    /// The layout of `topo` with placement slots of `unit`: its cores, or each of
    /// their hardware threads in turn (a core's PUs one after the other, in the core's
    /// NUMA domain and package).
    pub fn with_unit(topo: &Topology, unit: SlotUnit) -> NodeLayout {
        let by_core = NodeLayout::from_topology(topo);
        if unit == SlotUnit::Core {
            return by_core;
        }
        let mut layout = NodeLayout {
            cores: Vec::new(),
            core_domain: Vec::new(),
            domains: by_core.domains.clone(),
            core_package: Vec::new(),
            packages: by_core.packages.clone(),
        };
        for (i, core) in by_core.cores.iter().enumerate() {
            for pu in core.iter() {
                let mut one = CpuSet::new();
                one.insert(pu);
                layout.cores.push(one);
                layout.core_domain.push(by_core.core_domain[i]);
                layout.core_package.push(by_core.core_package[i]);
            }
        }
        layout
    }

    /// This layout limited to `cpus` (mpirun's `--cpu-set`): each unit keeps its CPUs
    /// in the set, units with none are left out, as are the domains and packages
    /// left without units.
    pub fn restricted(&self, cpus: &CpuSet) -> NodeLayout {
        let mut out = NodeLayout {
            cores: Vec::new(),
            core_domain: Vec::new(),
            domains: Vec::new(),
            core_package: Vec::new(),
            packages: Vec::new(),
        };
        // Old group index -> new one, as groups are first met.
        let mut domain_map: Vec<Option<usize>> = vec![None; self.domains.len()];
        let mut package_map: Vec<Option<usize>> = vec![None; self.packages.len()];
        let regroup =
            |map: &mut Vec<Option<usize>>, groups: &mut Vec<CpuSet>, old: usize, all: &CpuSet| {
                *map[old].get_or_insert_with(|| {
                    groups.push(all.intersection(cpus));
                    groups.len() - 1
                })
            };
        for (i, core) in self.cores.iter().enumerate() {
            let kept = core.intersection(cpus);
            if kept.is_empty() {
                continue;
            }
            let d = self.core_domain[i];
            let p = self.core_package[i];
            out.core_domain.push(regroup(
                &mut domain_map,
                &mut out.domains,
                d,
                &self.domains[d],
            ));
            out.core_package.push(regroup(
                &mut package_map,
                &mut out.packages,
                p,
                &self.packages[p],
            ));
            out.cores.push(kept);
        }
        out
    }

    /// The placement slots of host `topo`: cores or hardware threads (`unit`), within
    /// `--cpu-set` when given. The launcher and node servers count with this one.
    pub fn for_slots(topo: &Topology, unit: SlotUnit, cpu_set: Option<&CpuSet>) -> NodeLayout {
        let layout = NodeLayout::with_unit(topo, unit);
        match cpu_set {
            Some(set) => layout.restricted(set),
            None => layout,
        }
    }

    /// How many slot units (cores, or hardware threads) the host has.
    pub fn num_cores(&self) -> usize {
        self.cores.len()
    }

    /// Core of placement slot `slot` (slots are numbered across every rank that shares
    /// the host): consecutive cores, or for `numa` / `package` alternate domains /
    /// packages first, `pe` consecutive slots (a rank's, with `pe` CPUs per rank) in
    /// one of them.
    pub fn core_of_slot(&self, map_by: MapBy, slot: u32, pe: u32) -> Option<usize> {
        if self.cores.is_empty() {
            return None;
        }
        let slot = slot as usize;
        let (group_of, groups) = match map_by {
            MapBy::Slot | MapBy::Node | MapBy::Core => return Some(slot % self.cores.len()),
            MapBy::Numa => (&self.core_domain, self.domains.len()),
            MapBy::Package => (&self.core_package, self.packages.len()),
        };
        let pe = pe.max(1) as usize;
        let (block, within) = (slot / pe, slot % pe);
        let group = block % groups;
        let in_group: Vec<usize> = (0..self.cores.len())
            .filter(|&c| group_of[c] == group)
            .collect();
        let nth = ((block / groups) * pe + within) % in_group.len();
        Some(in_group[nth])
    }

    /// Binding of the placement slots `slots` (one process's; consecutive for a
    /// launched rank, the free ones a spawn got for a spawned one): their cores' CPUs,
    /// or their NUMA domains' / packages' for `--bind-to numa` / `package`. `pe` as in
    /// [`core_of_slot`](Self::core_of_slot).
    pub fn binding(
        &self,
        map_by: MapBy,
        bind_to: BindTo,
        slots: impl IntoIterator<Item = u32>,
        pe: u32,
    ) -> Binding {
        let mut cpus: Option<CpuSet> = None;
        for slot in slots {
            let Some(core) = self.core_of_slot(map_by, slot, pe) else {
                return Binding::Unbound;
            };
            let these = match bind_to {
                BindTo::None => return Binding::Unbound,
                BindTo::Core => &self.cores[core],
                BindTo::Numa => &self.domains[self.core_domain[core]],
                BindTo::Package => &self.packages[self.core_package[core]],
                BindTo::Hwthread => {
                    let mut one = CpuSet::new();
                    if let Some(pu) = self.cores[core].first() {
                        one.insert(pu);
                    }
                    cpus = Some(match cpus {
                        Some(c) => c.union(&one),
                        None => one,
                    });
                    continue;
                }
            };
            cpus = Some(match cpus {
                Some(c) => c.union(these),
                None => these.clone(),
            });
        }
        cpus.map_or(Binding::Unbound, Binding::Cpus)
    }

    /// Bindings of `count` ranks of `pe` CPUs each (`--map-by …:PE=n`), the first being
    /// the host's rank `first` (ranks of co-located node servers come before): rank
    /// `first + i` occupies slots `(first + i) * pe ..` and is bound to their cores.
    pub fn plan(
        &self,
        map_by: MapBy,
        bind_to: BindTo,
        first: u32,
        count: u32,
        pe: u32,
    ) -> Vec<Binding> {
        let pe = pe.max(1);
        (0..count)
            .map(|i| {
                let at = (first + i) * pe;
                self.binding(map_by, bind_to, at..at + pe, pe)
            })
            .collect()
    }
}

/// The index in `groups` (keyed by NUMA node or package) of the group `key` of a core
/// with CPUs `cpus`, added (with the CPUs `first` gives) when it is the first of its
/// group; the group's CPUs then cover the core's.
fn group_core(
    groups: &mut Vec<(Option<u32>, CpuSet)>,
    key: Option<u32>,
    cpus: &CpuSet,
    first: impl FnOnce() -> CpuSet,
) -> usize {
    let at = match groups.iter().position(|(k, _)| *k == key) {
        Some(at) => at,
        None => {
            groups.push((key, first()));
            groups.len() - 1
        }
    };
    groups[at].1 = groups[at].1.union(cpus);
    at
}

/// The binding policy in force, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BindDecision {
    pub bind_to: BindTo,
    /// More ranks than cores share the host.
    pub oversubscribed: bool,
    /// What to tell the user (once), if anything.
    pub notice: Option<String>,
}

/// Decides the binding for `ranks` ranks of `pe` slots each (`--cpus-per-rank`)
/// sharing a host of `cores` slot units (`unit`: cores, or hardware threads). `where_`
/// names the place in messages (`node0`, `this host (node0-node2)`).
///
/// Like mpirun: with no `--bind-to`, bind to core (to hwthread when slots are hardware
/// threads) unless oversubscribed, and say so when not binding; an explicit
/// `--bind-to core` or `hwthread` while oversubscribed is obeyed (ranks share CPUs)
/// with a warning.
pub fn decide_binding(
    requested: Option<BindTo>,
    ranks: u32,
    pe: u32,
    cores: usize,
    unit: SlotUnit,
    where_: &str,
) -> BindDecision {
    let needed = u64::from(ranks) * u64::from(pe.max(1));
    let oversubscribed = needed > cores as u64;
    let plural = |n: usize, what: &str| format!("{n} {what}{}", if n == 1 { "" } else { "s" });
    let each = match pe {
        0 | 1 => String::new(),
        n => format!(" of {} each", plural(n as usize, unit.name())),
    };
    let what = format!(
        "{}{each} on {where_} with {}",
        plural(ranks as usize, "rank"),
        plural(cores, unit.name())
    );
    let default = match unit {
        SlotUnit::Core => BindTo::Core,
        SlotUnit::Hwthread => BindTo::Hwthread,
    };
    let (bind_to, notice) = match (requested, oversubscribed) {
        (None, false) => (default, None),
        (None, true) => (
            BindTo::None,
            Some(format!(
                "{what}: oversubscribed, not binding (use --bind-to to override)"
            )),
        ),
        (Some(b @ (BindTo::Core | BindTo::Hwthread)), true) => (
            b,
            Some(format!(
                "warning: {what}: oversubscribed; binding anyway as --bind-to {b} \
                 asks (ranks share CPUs)"
            )),
        ),
        (Some(b), _) => (b, None),
    };
    BindDecision {
        bind_to,
        oversubscribed,
        notice,
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn counted_maps_deal_or_block_and_match_the_even_split() {
        use super::{job_map, job_map_with_counts, MapBy};
        for map_by in [MapBy::Slot, MapBy::Node] {
            for (np, nodes) in [(7, 3), (2, 3), (6, 3), (1, 1)] {
                let even = job_map(map_by, "ns", np, nodes);
                let counts: Vec<u32> = (0..nodes)
                    .map(|n| even.rank_node.iter().filter(|&&x| x == n).count() as u32)
                    .collect();
                assert_eq!(job_map_with_counts(map_by, "ns", &counts), even);
            }
        }
        let rr = job_map_with_counts(MapBy::Node, "ns", &[1, 3, 2]);
        assert_eq!(rr.rank_node, [0, 1, 2, 1, 2, 1]);
        let block = job_map_with_counts(MapBy::Slot, "ns", &[1, 0, 2]);
        assert_eq!(block.rank_node, [0, 2, 2]);
        assert_eq!((block.num_nodes, block.size()), (3, 3));
    }

    use super::*;
    use crate::machine::tests::synthetic;

    fn lists(b: &[Binding]) -> Vec<String> {
        b.iter().map(|b| b.to_string()).collect()
    }

    #[test]
    fn keywords_parse_and_print() {
        assert_eq!("NODE".parse::<MapBy>(), Ok(MapBy::Node));
        assert_eq!("numa".parse::<BindTo>(), Ok(BindTo::Numa));
        assert!("socket"
            .parse::<MapBy>()
            .unwrap_err()
            .contains("slot, node"));
        assert_eq!(BindTo::None.to_string(), "none");
        assert_eq!(MapBy::default(), MapBy::Slot);
    }

    #[test]
    fn job_maps_block_or_round_robin() {
        assert_eq!(job_map(MapBy::Slot, "j", 4, 2).rank_node, [0, 0, 1, 1]);
        assert_eq!(job_map(MapBy::Core, "j", 4, 2).rank_node, [0, 0, 1, 1]);
        assert_eq!(job_map(MapBy::Node, "j", 5, 2).rank_node, [0, 1, 0, 1, 0]);
    }

    #[test]
    fn bind_to_core_gives_distinct_cores_with_their_threads() {
        let l = NodeLayout::from_topology(&synthetic(2, 2, 2));
        assert_eq!(l.num_cores(), 4);
        let b = l.plan(MapBy::Core, BindTo::Core, 0, 4, 1);
        assert_eq!(lists(&b), ["0,4", "1,5", "2,6", "3,7"]);
        // slots continue where a co-located node server's ranks ended
        let b = l.plan(MapBy::Slot, BindTo::Core, 2, 2, 1);
        assert_eq!(lists(&b), ["2,6", "3,7"]);
    }

    #[test]
    fn several_cpus_per_rank_take_consecutive_cores() {
        // 2 domains of 4 cores, 1 PU each
        let l = NodeLayout::from_topology(&synthetic(2, 4, 1));
        let b = l.plan(MapBy::Slot, BindTo::Core, 0, 4, 2);
        assert_eq!(lists(&b), ["0-1", "2-3", "4-5", "6-7"]);
        // after a co-located node server's 1 rank of 2 CPUs
        let b = l.plan(MapBy::Core, BindTo::Core, 1, 2, 2);
        assert_eq!(lists(&b), ["2-3", "4-5"]);
        // numa:PE=2: each rank's 2 cores in one domain, domains alternating
        let b = l.plan(MapBy::Numa, BindTo::Core, 0, 4, 2);
        assert_eq!(lists(&b), ["0-1", "4-5", "2-3", "6-7"]);
        // with 3 CPUs per rank the second spans both domains
        let b = l.plan(MapBy::Slot, BindTo::Numa, 0, 2, 3);
        assert_eq!(lists(&b), ["0-3", "0-7"]);
        // a spawned process (one slot) after them, in the same slot order
        assert_eq!(
            l.binding(MapBy::Numa, BindTo::Core, 8..9, 2),
            Binding::Cpus("0".parse().unwrap())
        );
    }

    #[test]
    fn a_spawned_process_of_several_cores_is_bound_to_the_free_slots_it_got() {
        // 2 domains of 4 cores, 1 PU each; the slots need not be consecutive
        let l = NodeLayout::from_topology(&synthetic(2, 4, 1));
        let cpus = |list: &str| Binding::Cpus(list.parse().unwrap());
        assert_eq!(l.binding(MapBy::Slot, BindTo::Core, [1, 3], 1), cpus("1,3"));
        assert_eq!(
            l.binding(MapBy::Core, BindTo::Core, [5, 6, 7], 1),
            cpus("5-7")
        );
        // --bind-to numa: the domains of its cores
        assert_eq!(l.binding(MapBy::Slot, BindTo::Numa, [3, 4], 1), cpus("0-7"));
        assert_eq!(l.binding(MapBy::Slot, BindTo::Numa, [2, 3], 1), cpus("0-3"));
        // none: unbound
        assert_eq!(
            l.binding(MapBy::Slot, BindTo::Core, [], 1),
            Binding::Unbound
        );
    }

    #[test]
    fn map_by_and_bind_to_package() {
        // one package of two NUMA domains of 2 cores, and a second package of one
        let mut t = synthetic(3, 2, 1);
        for c in &mut t.cores {
            c.package = Some(u32::from(c.index >= 4));
        }
        let l = NodeLayout::from_topology(&t);
        assert_eq!(l.packages.len(), 2);
        let b = l.plan(MapBy::Package, BindTo::Core, 0, 4, 1);
        assert_eq!(lists(&b), ["0", "4", "1", "5"]);
        let b = l.plan(MapBy::Core, BindTo::Package, 0, 5, 1);
        assert_eq!(lists(&b), ["0-3", "0-3", "0-3", "0-3", "4-5"]);
        // package:PE=2: each rank's 2 cores in one package
        let b = l.plan(MapBy::Package, BindTo::Core, 0, 3, 2);
        assert_eq!(lists(&b), ["0-1", "4-5", "2-3"]);
        assert_eq!("package".parse::<MapBy>(), Ok(MapBy::Package));
        assert_eq!("package".parse::<BindTo>(), Ok(BindTo::Package));
    }

    #[test]
    fn map_by_numa_alternates_domains() {
        let l = NodeLayout::from_topology(&synthetic(2, 2, 1));
        let cores = l.plan(MapBy::Numa, BindTo::Core, 0, 5, 1);
        assert_eq!(lists(&cores), ["0", "2", "1", "3", "0"]);
        let numa = l.plan(MapBy::Numa, BindTo::Numa, 0, 3, 1);
        assert_eq!(lists(&numa), ["0-1", "2-3", "0-1"]);
        let numa = l.plan(MapBy::Core, BindTo::Numa, 0, 3, 1);
        assert_eq!(lists(&numa), ["0-1", "0-1", "2-3"]);
    }

    #[test]
    fn bind_to_none_and_empty_layouts_leave_ranks_unbound() {
        let l = NodeLayout::from_topology(&synthetic(1, 2, 1));
        assert!(l
            .plan(MapBy::Core, BindTo::None, 0, 3, 1)
            .iter()
            .all(|b| *b == Binding::Unbound));
        let mut empty = synthetic(1, 1, 1);
        empty.cores.clear();
        let l = NodeLayout::from_topology(&empty);
        assert_eq!(
            l.plan(MapBy::Numa, BindTo::Core, 0, 1, 1),
            [Binding::Unbound]
        );
    }

    #[test]
    fn memory_only_numa_nodes_are_not_domains() {
        let mut t = synthetic(1, 2, 1);
        t.numa_nodes.push(crate::machine::NumaNode {
            os_index: 7,
            memory_bytes: 1 << 30,
            cpuset: CpuSet::new(),
        });
        let l = NodeLayout::from_topology(&t);
        assert_eq!(l.domains.len(), 1);
        assert_eq!(
            lists(&l.plan(MapBy::Numa, BindTo::Core, 0, 2, 1)),
            ["0", "1"]
        );
    }

    #[test]
    fn default_binds_to_core_unless_oversubscribed() {
        let d = decide_binding(None, 2, 1, 2, SlotUnit::Core, "node0");
        assert_eq!(
            (d.bind_to, d.oversubscribed, d.notice),
            (BindTo::Core, false, None)
        );

        let d = decide_binding(None, 4, 1, 2, SlotUnit::Core, "node0");
        assert_eq!(d.bind_to, BindTo::None);
        assert!(d.oversubscribed);
        assert_eq!(
            d.notice.as_deref(),
            Some("4 ranks on node0 with 2 cores: oversubscribed, not binding (use --bind-to to override)")
        );

        let d = decide_binding(Some(BindTo::Core), 4, 1, 2, SlotUnit::Core, "node0");
        assert_eq!(d.bind_to, BindTo::Core);
        assert!(d.notice.unwrap().starts_with("warning:"));

        let d = decide_binding(None, 2, 2, 3, SlotUnit::Core, "node0");
        assert!(d.oversubscribed && d.bind_to == BindTo::None);
        let notice = d.notice.unwrap();
        assert!(
            notice.contains("2 ranks of 2 cores each on node0 with 3 cores"),
            "{notice}"
        );
        assert!(!decide_binding(None, 2, 2, 4, SlotUnit::Core, "node0").oversubscribed);
        let d = decide_binding(None, 2, 1, 1, SlotUnit::Core, "node0");
        assert!(d
            .notice
            .unwrap()
            .starts_with("2 ranks on node0 with 1 core: "));

        for b in [BindTo::None, BindTo::Numa] {
            let d = decide_binding(Some(b), 4, 1, 2, SlotUnit::Core, "node0");
            assert_eq!((d.bind_to, d.notice), (b, None));
        }
    }

    /// mpirun's `--bind-to hwthread` binds a rank to one hardware thread, its core's
    /// first; with `--use-hwthread-cpus` the slots are the hardware threads (a core's
    /// in turn), so twice the ranks fit on a 2-way SMT host before it is
    /// oversubscribed, each bound to its own thread by default.
    #[test]
    fn hwthread_binding_and_hwthread_slots() {
        // 2 NUMA domains of 2 cores; core c has PUs c and c + 4.
        let t = synthetic(2, 2, 2);
        let cores = NodeLayout::from_topology(&t);
        assert_eq!(NodeLayout::with_unit(&t, SlotUnit::Core), cores);
        assert_eq!(
            lists(&cores.plan(MapBy::Slot, BindTo::Hwthread, 0, 4, 1)),
            ["0", "1", "2", "3"]
        );
        assert_eq!(
            lists(&cores.plan(MapBy::Slot, BindTo::Core, 0, 2, 1)),
            ["0,4", "1,5"]
        );
        let threads = NodeLayout::with_unit(&t, SlotUnit::Hwthread);
        assert_eq!(threads.num_cores(), 8);
        assert_eq!(
            lists(&threads.plan(MapBy::Slot, BindTo::Hwthread, 0, 4, 1)),
            ["0", "4", "1", "5"]
        );
        // numa: alternate domains; PE=2: both threads of a core; numa binding as before
        assert_eq!(
            lists(&threads.plan(MapBy::Numa, BindTo::Hwthread, 0, 3, 1)),
            ["0", "2", "4"]
        );
        assert_eq!(
            lists(&threads.plan(MapBy::Slot, BindTo::Hwthread, 0, 2, 2)),
            ["0,4", "1,5"]
        );
        assert_eq!(
            lists(&threads.plan(MapBy::Slot, BindTo::Numa, 0, 1, 1)),
            lists(&cores.plan(MapBy::Slot, BindTo::Numa, 0, 1, 1))
        );
        let d = decide_binding(None, 8, 1, threads.num_cores(), SlotUnit::Hwthread, "n");
        assert_eq!((d.bind_to, d.oversubscribed), (BindTo::Hwthread, false));
        let d = decide_binding(None, 9, 1, 8, SlotUnit::Hwthread, "n");
        assert_eq!(d.bind_to, BindTo::None);
        let notice = d.notice.unwrap();
        assert!(
            notice.contains("9 ranks on n with 8 hardware threads"),
            "{notice}"
        );
        let d = decide_binding(Some(BindTo::Hwthread), 9, 1, 8, SlotUnit::Hwthread, "n");
        assert_eq!(d.bind_to, BindTo::Hwthread);
        assert!(d.notice.unwrap().contains("--bind-to hwthread"));
    }

    /// mpirun's `--cpu-set`: the layout keeps the listed CPUs only; cores outside are
    /// not placement slots, and a core partly inside keeps its listed CPUs.
    #[test]
    fn a_cpu_set_limits_the_slots() {
        // 2 NUMA domains of 2 cores; core c has PUs c and c + 4.
        let t = synthetic(2, 2, 2);
        let all = NodeLayout::from_topology(&t);
        let set: CpuSet = "1-2,6".parse().unwrap();
        let l = all.restricted(&set);
        assert_eq!(l.num_cores(), 2, "{l:?}");
        assert_eq!(
            lists(&l.plan(MapBy::Slot, BindTo::Core, 0, 2, 1)),
            ["1", "2,6"]
        );
        // core 1 in domain 0, core 2 in domain 1: by NUMA they alternate.
        assert_eq!(
            lists(&l.plan(MapBy::Numa, BindTo::Numa, 0, 2, 1)),
            ["1", "2,6"]
        );
        assert_eq!(l.domains.len(), 2);
        let threads = NodeLayout::with_unit(&t, SlotUnit::Hwthread).restricted(&set);
        assert_eq!(threads.num_cores(), 3);
        assert_eq!(all.restricted(&"9".parse().unwrap()).num_cores(), 0);
        assert_eq!(all.restricted(&(0..8).collect()), all);
    }

    #[test]
    fn bindings_roundtrip_through_the_environment_form() {
        assert_eq!(binding_from(Some("none")), Some(Binding::Unbound));
        assert_eq!(
            binding_from(Some("0-1")),
            Some(Binding::Cpus(CpuSet::from([0, 1])))
        );
        assert_eq!(binding_from(Some("")), None);
        assert_eq!(binding_from(Some("garbage")), None);
        assert_eq!(binding_from(None), None);
        let b = Binding::Cpus(CpuSet::from([3, 4, 5, 9]));
        assert_eq!(b.to_string().parse::<Binding>(), Ok(b));
    }
}

//! Where this node server and its ranks run: discovers the host once, binds the
//! progress thread (cohortd's one thread) near the NIC it prefers, and computes every
//! local rank's binding from `--map-by` / `--bind-to` / `--first-slot`.

use std::collections::BTreeMap;

use cohort_proto::{JobMap, NodeId, Rank};
use cohort_topology::affinity::{bind_current_thread, current_affinity};
use cohort_topology::placement::decide_binding;
use cohort_topology::{
    cpus_near, preferred_nic, Binding, CpuSet, Discover, NicInfo, NodeLayout, SlotUnit, Topology,
};

use super::args::DaemonArgs;
use super::say;

/// This host as the node server found it, and the NIC it chose.
pub struct NodePlacement {
    topo: Topology,
    /// CPUs cohortd could run on before it bound its progress thread: what ranks that
    /// are not bound get back (they would otherwise inherit the progress thread's).
    unbound_cpus: Option<CpuSet>,
    /// The NIC this node server prefers (for the fabric; `None` without any device).
    pub nic: Option<NicInfo>,
    /// What a placement slot is (`--use-hwthread-cpus`: a hardware thread).
    unit: SlotUnit,
    /// `--cpu-set`: the only CPUs ranks are placed on.
    cpu_set: Option<CpuSet>,
}

impl NodePlacement {
    /// Discovers the host (with its network devices) and picks the NIC; ranks are
    /// placed on slots of `unit`, within `cpu_set` when given.
    pub fn discover(unit: SlotUnit, cpu_set: Option<CpuSet>) -> NodePlacement {
        // The XML is served to the ranks (`pmix.hwlocxml2`).
        let topo = Discover {
            io: true,
            xml: true,
        }
        .run();
        let nic = preferred_nic(&topo);
        let unbound_cpus = current_affinity().ok().map(|cpus| match &cpu_set {
            Some(set) => cpus.intersection(set),
            None => cpus,
        });
        NodePlacement {
            unbound_cpus,
            topo,
            nic,
            unit,
            cpu_set,
        }
    }

    /// Binds the calling thread — run it on the progress thread — to the CPUs of the
    /// preferred NIC's NUMA node. Best effort: a failure is logged, not fatal.
    pub fn bind_progress_thread(&self) {
        let Some(nic) = &self.nic else {
            tracing::debug!("no network or OpenFabrics device found; progress thread not bound");
            return;
        };
        let Some(cpus) = cpus_near(&self.topo, nic) else {
            tracing::debug!(nic = %nic.name, "no CPU known near the NIC; progress thread not bound");
            return;
        };
        let why = match nic.numa {
            Some(n) => format!("the CPUs of NUMA node {n}, where it is attached"),
            None => "the CPUs hwloc reports near it".to_string(),
        };
        match bind_current_thread(&cpus) {
            Ok(()) => tracing::info!(
                nic = %nic.name, kind = ?nic.kind, pci = nic.pci_bus_id.as_deref().unwrap_or("-"),
                "progress thread bound to CPUs {cpus} near the preferred NIC {}: {why}",
                nic.name
            ),
            Err(e) => tracing::warn!(
                nic = %nic.name,
                "cannot bind the progress thread to CPUs {cpus} near NIC {}: {e}", nic.name
            ),
        }
    }

    /// With `--rank-map` (`cohort run --rankfile`): an error naming the first rank of
    /// this node whose `slot=` this host lacks (a logical core or package beyond its
    /// own), before anything starts.
    pub fn check_rank_map(&self, args: &DaemonArgs) -> Result<(), String> {
        let Some(map) = &args.rank_map else {
            return Ok(());
        };
        map.check_slots(&self.layout(), Some(args.node))
            .map_err(|e| format!("--rankfile: {e} (host {})", self.topo.machine.hostname))
    }

    /// Each local rank's binding. Without `--bind-to` (not started by `cohort run`)
    /// the node decides alone, and says so when oversubscribed. With `--rank-map`,
    /// the rankfile's `slot=` decides (see [`check_rank_map`](Self::check_rank_map)).
    pub fn rank_bindings(&self, args: &DaemonArgs, job: &JobMap) -> BTreeMap<Rank, Binding> {
        let ranks = job.ranks_on(args.node as NodeId);
        let layout = self.layout();
        if let Some(map) = &args.rank_map {
            return ranks
                .into_iter()
                .map(|r| {
                    let b = map
                        .slot(r)
                        .and_then(|s| layout.slot_binding(s).ok())
                        .map_or(Binding::Unbound, Binding::Cpus);
                    (r, b)
                })
                .collect();
        }
        let bind_to = match args.bind_to {
            Some(b) => b,
            None => {
                let d = decide_binding(
                    None,
                    ranks.len() as u32,
                    args.cpus_per_rank,
                    layout.num_cores(),
                    self.unit,
                    &args.node_name,
                );
                if let Some(notice) = d
                    .notice
                    .filter(|n| !args.quiet || n.starts_with("warning:"))
                {
                    say(format_args!("{notice}"));
                }
                d.bind_to
            }
        };
        let plan = layout.plan(
            args.map_by,
            bind_to,
            args.first_slot,
            ranks.len() as u32,
            args.cpus_per_rank,
        );
        let bindings: BTreeMap<Rank, Binding> = ranks.into_iter().zip(plan).collect();
        tracing::debug!(
            map_by = %args.map_by, bind_to = %bind_to, first_slot = args.first_slot,
            cpus_per_rank = args.cpus_per_rank,
            bindings = ?bindings.iter().map(|(r, b)| format!("{r}:{b}")).collect::<Vec<_>>(),
            "rank placement"
        );
        bindings
    }

    /// The placement slots of this host (cores, or hardware threads), as binding
    /// counts them.
    pub fn cores(&self) -> u32 {
        u32::try_from(self.layout().num_cores()).unwrap_or(u32::MAX)
    }

    /// CPUs for ranks that are not bound.
    pub fn unbound_cpus(&self) -> Option<&CpuSet> {
        self.unbound_cpus.as_ref()
    }

    /// The slots ranks are placed on, by NUMA domain and package.
    pub fn layout(&self) -> NodeLayout {
        NodeLayout::for_slots(&self.topo, self.unit, self.cpu_set.as_ref())
    }

    /// With `--cpu-set`: an error when none of its CPUs is one ranks may use here.
    pub fn check_cpu_set(&self) -> Result<(), String> {
        match &self.cpu_set {
            Some(set) if self.layout().num_cores() == 0 => Err(format!(
                "--cpu-set {set}: none of these CPUs is usable on host {} (it has CPUs {})",
                self.topo.machine.hostname, self.topo.machine.cpuset
            )),
            _ => Ok(()),
        }
    }

    /// The host's topology, without its XML.
    pub fn topology(&self) -> Topology {
        Topology {
            hwloc_xml: None,
            ..self.topo.clone()
        }
    }

    /// The host's topology as hwloc exported it (XML), when hwloc found it.
    pub fn hwloc_xml(&self) -> Option<&str> {
        self.topo.hwloc_xml.as_deref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A node server given a `--cpu-set` none of whose CPUs its host has refuses to
    /// run, naming the set and the host's CPUs; one with a usable set places ranks on
    /// it only, and its unbound ranks run there.
    #[test]
    fn a_cpu_set_outside_the_host_is_refused() {
        let p = NodePlacement::discover(SlotUnit::Core, Some("1000".parse().unwrap()));
        let e = p.check_cpu_set().unwrap_err();
        assert!(e.contains("--cpu-set 1000: none of these CPUs"), "{e}");
        let all = NodePlacement::discover(SlotUnit::Core, None);
        assert!(all.check_cpu_set().is_ok());
        let first = all.layout().cores[0].first().expect("a CPU");
        let mut set = CpuSet::new();
        set.insert(first);
        let one = NodePlacement::discover(SlotUnit::Core, Some(set.clone()));
        assert!(one.check_cpu_set().is_ok());
        assert_eq!(one.layout().cores, [set.clone()]);
        if let Some(unbound) = one.unbound_cpus() {
            assert!(unbound.is_subset(&set), "{unbound}");
        }
    }
}

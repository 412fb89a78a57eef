//! `cohort topo` (this host's topology as a table or JSON), and the placement
//! decision of `cohort run` for node servers that all run on this host.

use cohort_proto::JobMap;
use cohort_topology::placement::decide_binding;
use cohort_topology::{BindTo, CpuSet, Discover, NodeLayout, SlotUnit, Topology};

use crate::cli::TopoArgs;

/// Runs `cohort topo`; returns the exit status.
pub fn run(args: &TopoArgs) -> i32 {
    let topo = Discover {
        io: true,
        xml: false,
    }
    .run();
    let text = if args.json {
        match serde_json::to_string_pretty(&topo) {
            Ok(j) => j + "\n",
            Err(e) => {
                crate::say(format_args!("cannot write the topology as JSON: {e}"));
                return 1;
            }
        }
    } else {
        topo.render_table()
    };
    use std::io::Write;
    match std::io::stdout().write_all(text.as_bytes()) {
        Ok(()) => 0,
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => 0,
        Err(e) => {
            crate::say(format_args!("cannot write to stdout: {e}"));
            1
        }
    }
}

/// How the ranks of a job are bound, decided once for the whole job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobPlacement {
    pub bind_to: BindTo,
    /// `first_slots[n]`: how many of this host's ranks come before node `n`'s, so
    /// node servers sharing the host bind their ranks to distinct cores.
    pub first_slots: Vec<u32>,
    /// What to tell the user, once.
    pub notice: Option<String>,
}

/// Decides the binding of `job`, whose ranks take `pe` cores each, when all its node
/// servers share this host (as `cohort run` starts them): the host's cores are shared
/// by every rank of the job, so oversubscription is judged over the whole job, not per
/// node server.
pub fn plan_job(
    requested: Option<BindTo>,
    pe: u32,
    unit: SlotUnit,
    job: &JobMap,
    topo: &Topology,
    cpu_set: Option<&CpuSet>,
) -> JobPlacement {
    let cores = NodeLayout::for_slots(topo, unit, cpu_set).num_cores();
    let where_ = match job.num_nodes {
        1 => job.node_names[0].clone(),
        m => format!("this host (node servers node0-node{})", m - 1),
    };
    let decision = decide_binding(requested, job.size(), pe, cores, unit, &where_);
    let mut first_slots = Vec::with_capacity(job.num_nodes as usize);
    let mut next = 0;
    for node in 0..job.num_nodes {
        first_slots.push(next);
        next += job.count_on(node);
    }
    JobPlacement {
        bind_to: decision.bind_to,
        first_slots,
        notice: decision.notice,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cohort_topology::discover::from_affinity;
    use cohort_topology::placement::job_map;
    use cohort_topology::MapBy;

    fn two_cores() -> Topology {
        let mut t = from_affinity();
        let core = t.cores[0].clone();
        t.cores = vec![core.clone(), core];
        t
    }

    #[test]
    fn one_node_within_its_cores_binds_to_core() {
        let p = plan_job(
            None,
            1,
            SlotUnit::Core,
            &job_map(MapBy::Slot, "j", 2, 1),
            &two_cores(),
            None,
        );
        assert_eq!(p.bind_to, BindTo::Core);
        assert_eq!(p.first_slots, [0]);
        assert_eq!(p.notice, None);
    }

    #[test]
    fn oversubscription_is_judged_over_the_host() {
        let p = plan_job(
            None,
            1,
            SlotUnit::Core,
            &job_map(MapBy::Node, "j", 4, 2),
            &two_cores(),
            None,
        );
        assert_eq!(p.bind_to, BindTo::None);
        assert_eq!(p.first_slots, [0, 2]);
        let notice = p.notice.unwrap();
        assert!(
            notice.starts_with(
                "4 ranks on this host (node servers node0-node1) with 2 cores: oversubscribed"
            ),
            "{notice}"
        );

        let p = plan_job(
            None,
            1,
            SlotUnit::Core,
            &job_map(MapBy::Slot, "j", 4, 1),
            &two_cores(),
            None,
        );
        assert_eq!(
            p.notice.as_deref(),
            Some("4 ranks on node0 with 2 cores: oversubscribed, not binding (use --bind-to to override)")
        );
    }

    #[test]
    fn node_servers_sharing_the_host_take_consecutive_slots() {
        let p = plan_job(
            Some(BindTo::Core),
            1,
            SlotUnit::Core,
            &job_map(MapBy::Slot, "j", 7, 3),
            &two_cores(),
            None,
        );
        assert_eq!(p.first_slots, [0, 3, 5]);
    }
}

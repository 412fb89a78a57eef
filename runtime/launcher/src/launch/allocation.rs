//! `--display-allocation`: the nodes the job was given and their slots, before
//! mapping, as mpirun's `--display-allocation` prints them. Printed as soon as the
//! allocation is known, so it shows even when mapping then refuses the job (too few
//! slots).

use cohort_topology::{hostlist, CpuSet, SlotUnit};

use crate::slurm::Allocation;
use crate::ssh::Host;

/// Where the job's node servers run, and what each was given.
pub(super) enum Allocated<'a> {
    /// Every node server on this host: they share its slots.
    Local {
        /// This host's name.
        host: String,
        /// Its cores (or hardware threads), within `cpu_set`.
        slots: u32,
        unit: SlotUnit,
        cpu_set: Option<&'a CpuSet>,
        /// The node servers' names.
        names: &'a [String],
    },
    /// One node server on each of the allocation's first `names.len()` nodes.
    Slurm {
        alloc: &'a Allocation,
        names: &'a [String],
    },
    /// One node server per host of `--host` / `--hostfile` (`from` says which).
    Ssh { hosts: &'a [Host], from: String },
}

/// `n thing` or `n things` (also the job map's).
pub(super) fn plural(n: impl Into<u64>, what: &str) -> String {
    let n = n.into();
    format!("{n} {what}{}", if n == 1 { "" } else { "s" })
}

/// The text `--display-allocation` prints: a header line saying where the slots come
/// from, then one line per node server (`NAME: slots=N`, with Slurm's CPU count), in
/// node-server order.
pub(super) fn display_allocation(a: &Allocated) -> String {
    let rule = "=".repeat(20);
    let mut out = format!("{rule} ALLOCATED NODES {rule}\n");
    match a {
        Allocated::Local {
            host,
            slots,
            unit,
            cpu_set,
            names,
        } => {
            let host = match host.is_empty() {
                true => "this host".to_string(),
                false => format!("this host ({host})"),
            };
            let within = cpu_set.map_or(String::new(), |s| format!(" in --cpu-set {s}"));
            out.push_str(&format!(
                "{host}: {} ({}{within}), shared by {}\n",
                plural(*slots, "slot"),
                plural(*slots, unit.name()),
                plural(names.len() as u32, "node server"),
            ));
            for name in *names {
                out.push_str(&format!("  {name}: slots={slots} (shared)\n"));
            }
        }
        Allocated::Slurm { alloc, names } => {
            let of = match alloc.num_nodes {
                Some(n) => format!("{} of {n}", names.len()),
                None => names.len().to_string(),
            };
            let tasks = alloc
                .tasks
                .map_or(String::new(), |t| format!(", {}", plural(t, "task")));
            out.push_str(&format!(
                "Slurm job {} ({}{tasks}): node servers on {of} node(s)\n",
                alloc.job_id,
                hostlist::compress(names),
            ));
            for (i, name) in names.iter().enumerate() {
                let slots = alloc
                    .tasks_per_node
                    .get(i)
                    .map_or("slots=?".to_string(), |t| format!("slots={t}"));
                let cpus = alloc
                    .cpus_per_node
                    .get(i)
                    .map_or(String::new(), |c| format!(" cpus={c}"));
                out.push_str(&format!("  {name}: {slots}{cpus}\n"));
            }
        }
        Allocated::Ssh { hosts, from } => {
            let given: u64 = hosts.iter().filter_map(|h| h.slots).map(u64::from).sum();
            let total = match hosts.iter().all(|h| h.slots.is_some()) {
                true => format!(", {}", plural(given, "slot")),
                false => String::new(),
            };
            out.push_str(&format!(
                "hosts from {from}: {}{total}\n",
                plural(hosts.len() as u32, "host")
            ));
            for h in *hosts {
                let slots = h
                    .slots
                    .map_or("no slot count".to_string(), |s| format!("slots={s}"));
                let user = h
                    .user
                    .as_ref()
                    .map_or(String::new(), |u| format!(" (as {u})"));
                out.push_str(&format!("  {}: {slots}{user}\n", h.name));
            }
        }
    }
    out.push_str(&"=".repeat(rule.len() * 2 + 17));
    out.push('\n');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(s: &str) -> Vec<&str> {
        s.lines().collect()
    }

    /// Local node servers share this host's cores: each line says so.
    #[test]
    fn local_node_servers_share_this_hosts_slots() {
        let names = ["node0".to_string(), "node1".to_string()];
        let set: CpuSet = "0-1".parse().unwrap();
        let out = display_allocation(&Allocated::Local {
            host: "h1".into(),
            slots: 2,
            unit: SlotUnit::Core,
            cpu_set: Some(&set),
            names: &names,
        });
        assert_eq!(
            lines(&out),
            [
                "==================== ALLOCATED NODES ====================",
                "this host (h1): 2 slots (2 cores in --cpu-set 0-1), shared by 2 node servers",
                "  node0: slots=2 (shared)",
                "  node1: slots=2 (shared)",
                "========================================================="
            ]
        );
        let one = display_allocation(&Allocated::Local {
            host: String::new(),
            slots: 1,
            unit: SlotUnit::Hwthread,
            cpu_set: None,
            names: &names[..1],
        });
        assert_eq!(
            lines(&one)[1],
            "this host: 1 slot (1 hardware thread), shared by 1 node server"
        );
    }

    /// Under Slurm, each used node with its tasks (slots) and CPUs, in order; a node
    /// Slurm gave no count for says so.
    #[test]
    fn slurm_nodes_show_their_tasks_and_cpus() {
        let alloc = Allocation {
            job_id: "42".into(),
            nodelist: "n[1-4]".into(),
            num_nodes: Some(4),
            tasks: Some(7),
            tasks_per_node: vec![3, 2, 2],
            cpus_per_node: vec![4, 4, 2, 2],
        };
        let names: Vec<String> = ["n1", "n2", "n3", "n4"].map(String::from).into();
        let out = display_allocation(&Allocated::Slurm {
            alloc: &alloc,
            names: &names,
        });
        assert_eq!(
            lines(&out)[1..5],
            [
                "Slurm job 42 (n[1-4], 7 tasks): node servers on 4 of 4 node(s)",
                "  n1: slots=3 cpus=4",
                "  n2: slots=2 cpus=4",
                "  n3: slots=2 cpus=2",
            ]
        );
        assert_eq!(lines(&out)[5], "  n4: slots=? cpus=2");
        let out = display_allocation(&Allocated::Slurm {
            alloc: &alloc,
            names: &names[..2],
        });
        assert_eq!(
            lines(&out)[1],
            "Slurm job 42 (n[1-2], 7 tasks): node servers on 2 of 4 node(s)"
        );
        assert_eq!(lines(&out).len(), 5);
    }

    /// Over ssh, each host with its slots (or none), the total only when every host
    /// has a count.
    #[test]
    fn ssh_hosts_show_their_slots() {
        let host = |name: &str, user: Option<&str>, slots| Host {
            user: user.map(String::from),
            name: name.into(),
            slots,
        };
        let hosts = [host("a", None, Some(4)), host("b", Some("me"), Some(2))];
        let out = display_allocation(&Allocated::Ssh {
            hosts: &hosts,
            from: "--host".into(),
        });
        assert_eq!(
            lines(&out)[1..4],
            [
                "hosts from --host: 2 hosts, 6 slots",
                "  a: slots=4",
                "  b: slots=2 (as me)"
            ]
        );
        let hosts = [host("a", None, Some(4)), host("c", None, None)];
        let out = display_allocation(&Allocated::Ssh {
            hosts: &hosts,
            from: "--hostfile hf".into(),
        });
        assert_eq!(
            lines(&out)[1..4],
            [
                "hosts from --hostfile hf: 2 hosts",
                "  a: slots=4",
                "  c: no slot count"
            ]
        );
    }
}

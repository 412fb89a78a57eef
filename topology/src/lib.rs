//! Topology: what a host looks like, where ranks go on it, and the collective trees
//! over the node servers taking part in one operation.
//!
//! * [`machine`] — the host summary ([`Topology`]) and the NIC a node server prefers;
//!   [`discover`] fills it (hwloc with the `hwloc` feature, else the CPU affinity).
//! * [`placement`] — `--map-by` / `--bind-to` arithmetic and the [`Binding`] a rank
//!   reads from `COHORT_BINDING`; [`affinity`] applies bindings.
//! * [`tree`] — a [`Tree`] is built from the ordered list of participating node
//!   servers and the operation's root; every server computes the same tree from the
//!   same inputs, so no coordination is needed. Flat (k-ary or binomial, [`Tree::new`])
//!   or, when a switch map is known, switch leaders first ([`Tree::hierarchical`]).
//!   Roots are chosen per operation ([`rendezvous`]) so that no single server carries
//!   every collective.
//! * [`switches`] — the switch map from a Slurm `topology.conf` ([`SwitchMap`]) and a
//!   job's node servers placed on it ([`Locality`]); [`hostlist`] expands Slurm
//!   hostlist expressions.
//! * [`radix`] — the tree shape for a job size from a gather + broadcast cost model
//!   ([`choose_radix`]).

pub mod affinity;
pub mod cpuset;
pub mod discover;
pub mod hostlist;
pub mod machine;
pub mod placement;
pub mod radix;
pub mod switches;
pub mod tree;

pub use cpuset::CpuSet;
pub use discover::Discover;
pub use machine::{cpus_near, preferred_nic, NicInfo, NicKind, Topology};
pub use placement::{binding_from_env, BindTo, Binding, MapBy, NodeLayout};
pub use radix::{ceil_log2, choose_radix, default_shape, Allgather, CostModel};
pub use switches::{Locality, SwitchMap, TopologyFileError};
pub use tree::{Tree, TreeShape};

/// Index of a node server in the job.
pub type NodeId = u32;

/// Stable 64-bit FNV-1a hash; identical on every node server and every build.
pub fn stable_hash(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// Picks the rendezvous/root among `n` candidates for an operation keyed by `key`.
pub fn rendezvous(key: &str, n: usize) -> usize {
    assert!(n > 0, "rendezvous needs at least one candidate");
    (stable_hash(key.as_bytes()) % n as u64) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rendezvous_is_stable_and_spreads() {
        assert_eq!(rendezvous("grp-a", 7), rendezvous("grp-a", 7));
        let hits: std::collections::BTreeSet<usize> =
            (0..64).map(|i| rendezvous(&format!("g{i}"), 8)).collect();
        assert!(
            hits.len() >= 6,
            "64 ids should land on most of 8 servers: {hits:?}"
        );
    }
}

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
pub mod rankfile;
pub mod switches;
pub mod tree;

pub use cpuset::CpuSet;
pub use discover::Discover;
pub use machine::{cpus_near, preferred_nic, Cache, NicInfo, NicKind, Topology};
pub use placement::{binding_from_env, BindTo, Binding, MapBy, NodeLayout, SlotUnit};
pub use radix::{ceil_log2, choose_radix, default_shape, Allgather, CostModel};
pub use switches::{Locality, SwitchMap, TopologyFileError};
pub use tree::{Tree, TreeShape};

/// Index of a node server in the job.
pub type NodeId = u32;

/// Stable 64-bit FNV-1a hash; identical on every node server and every build.
pub fn stable_hash(bytes: &[u8]) -> u64 {
    StableHash::default().bytes(bytes).finish()
}

/// [`stable_hash`] of a key given in parts (their concatenation), without building
/// the key: `StableHash::default().bytes(id).bytes(b"#").decimal(seq)` hashes as
/// `format!("{id}#{seq}")` does.
#[derive(Debug, Clone, Copy)]
pub struct StableHash(u64);

impl Default for StableHash {
    fn default() -> Self {
        StableHash(cohort_proto::digest::FNV1A_START)
    }
}

impl StableHash {
    pub fn bytes(self, bytes: &[u8]) -> Self {
        StableHash(cohort_proto::digest::fnv1a_extend(self.0, bytes))
    }

    /// `n` in decimal, as `n.to_string()` spells it.
    pub fn decimal(self, n: u64) -> Self {
        let mut digits = [0u8; 20];
        let mut at = digits.len();
        let mut n = n;
        loop {
            at -= 1;
            digits[at] = b'0' + (n % 10) as u8;
            n /= 10;
            if n == 0 {
                break;
            }
        }
        self.bytes(&digits[at..])
    }

    pub fn finish(self) -> u64 {
        self.0
    }

    /// The rendezvous among `n` candidates for this key (as [`rendezvous`]).
    pub fn pick(self, n: usize) -> usize {
        assert!(n > 0, "rendezvous needs at least one candidate");
        (self.0 % n as u64) as usize
    }
}

/// Picks the rendezvous/root among `n` candidates for an operation keyed by `key`.
pub fn rendezvous(key: &str, n: usize) -> usize {
    StableHash::default().bytes(key.as_bytes()).pick(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A key hashed in parts picks what the formatted key picks (so fence roots did
    /// not move when the engine stopped formatting them).
    #[test]
    fn a_key_in_parts_hashes_as_the_formatted_key() {
        for (id, seq) in [
            ("", 0),
            ("job.fence", 7),
            ("g", 10),
            ("héllo", u64::MAX),
            ("x", 99),
        ] {
            let whole = format!("{id}#{seq}");
            let parts = StableHash::default()
                .bytes(id.as_bytes())
                .bytes(b"#")
                .decimal(seq);
            assert_eq!(parts.finish(), stable_hash(whole.as_bytes()), "{whole}");
            for n in [1, 3, 16, 1000] {
                assert_eq!(parts.pick(n), rendezvous(&whole, n), "{whole} among {n}");
            }
        }
        assert_eq!(stable_hash(b""), 0xcbf2_9ce4_8422_2325);
    }

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

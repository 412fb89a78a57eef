//! Static job layout: which node server hosts which rank.

use serde::{Deserialize, Serialize};

use crate::ids::{NodeId, ProcId, Rank};

/// The job's namespace, size and rank → node map (block mapping by default;
/// round-robin with `--map-by node`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobMap {
    pub nspace: crate::ids::Nspace,
    pub num_nodes: u32,
    /// `rank_node[r]` is the node server hosting rank `r`.
    pub rank_node: Vec<NodeId>,
    /// `node_names[n]` is the name of node `n`.
    pub node_names: Vec<String>,
}

impl JobMap {
    /// `n` ranks spread block-wise over `m` nodes: the first `n % m` nodes get one extra.
    pub fn block(nspace: impl Into<crate::ids::Nspace>, n: u32, m: u32) -> JobMap {
        assert!(m > 0, "a job needs at least one node");
        let base = n / m;
        let extra = n % m;
        let mut rank_node = Vec::with_capacity(n as usize);
        for node in 0..m {
            let count = base + u32::from(node < extra);
            rank_node.extend(std::iter::repeat_n(node, count as usize));
        }
        JobMap {
            nspace: nspace.into(),
            num_nodes: m,
            rank_node,
            node_names: (0..m).map(|i| format!("node{i}")).collect(),
        }
    }

    /// `n` ranks dealt round-robin over `m` nodes: rank `r` on node `r % m`.
    pub fn round_robin(nspace: impl Into<crate::ids::Nspace>, n: u32, m: u32) -> JobMap {
        assert!(m > 0, "a job needs at least one node");
        JobMap {
            nspace: nspace.into(),
            num_nodes: m,
            rank_node: (0..n).map(|r| r % m).collect(),
            node_names: (0..m).map(|i| format!("node{i}")).collect(),
        }
    }

    pub fn size(&self) -> u32 {
        self.rank_node.len() as u32
    }

    /// Node hosting `proc`, if it belongs to this job.
    pub fn node_of(&self, proc: &ProcId) -> Option<NodeId> {
        if proc.nspace != self.nspace {
            return None;
        }
        self.rank_node.get(proc.rank as usize).copied()
    }

    pub fn contains(&self, proc: &ProcId) -> bool {
        self.node_of(proc).is_some()
    }

    /// Ranks hosted on `node`, ascending.
    pub fn ranks_on(&self, node: NodeId) -> Vec<Rank> {
        (0..self.size())
            .filter(|&r| self.rank_node[r as usize] == node)
            .collect()
    }

    /// Local rank of `rank` on its node (its index among the node's ranks).
    pub fn local_rank(&self, rank: Rank) -> Option<u32> {
        let node = *self.rank_node.get(rank as usize)?;
        Some(
            self.rank_node[..rank as usize]
                .iter()
                .filter(|&&n| n == node)
                .count() as u32,
        )
    }

    pub fn all_procs(&self) -> Vec<ProcId> {
        (0..self.size())
            .map(|r| ProcId::new(self.nspace.clone(), r))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_mapping_spreads_remainder_first() {
        let m = JobMap::block("j", 7, 3);
        assert_eq!(m.rank_node, vec![0, 0, 0, 1, 1, 2, 2]);
        assert_eq!(m.ranks_on(1), vec![3, 4]);
        assert_eq!(m.local_rank(4), Some(1));
        assert_eq!(m.node_of(&ProcId::new("j", 6)), Some(2));
        assert_eq!(m.node_of(&ProcId::new("j", 7)), None);
        assert_eq!(m.node_of(&ProcId::new("other", 0)), None);
    }

    #[test]
    fn round_robin_mapping_deals_ranks() {
        let m = JobMap::round_robin("j", 5, 2);
        assert_eq!(m.rank_node, vec![0, 1, 0, 1, 0]);
        assert_eq!(m.ranks_on(0), vec![0, 2, 4]);
        assert_eq!(m.local_rank(3), Some(1));
        assert_eq!(m.local_rank(4), Some(2));
        assert_eq!(m.node_names, ["node0", "node1"]);
    }
}

//! Topology: what a host looks like, where ranks go on it, and the collective trees
//! over the node servers taking part in one operation.
//!
//! * [`machine`] — the host summary ([`Topology`]) and the NIC a node server prefers;
//!   [`discover`] fills it (hwloc with the `hwloc` feature, else the CPU affinity).
//! * [`placement`] — `--map-by` / `--bind-to` arithmetic and the [`Binding`] a rank
//!   reads from `COHORT_BINDING`; [`affinity`] applies bindings.
//! * Trees (this file): a [`Tree`] is built from the ordered list of participating
//!   node servers and the operation's root; every server computes the same tree from
//!   the same inputs, so no coordination is needed. Roots are chosen per operation
//!   ([`rendezvous`]) so that no single server carries every collective.

pub mod affinity;
pub mod cpuset;
pub mod discover;
pub mod machine;
pub mod placement;

pub use cpuset::CpuSet;
pub use discover::Discover;
pub use machine::{cpus_near, preferred_nic, NicInfo, NicKind, Topology};
pub use placement::{binding_from_env, BindTo, Binding, MapBy, NodeLayout};

/// Index of a node server in the job.
pub type NodeId = u32;

/// Shape of a collective tree.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TreeShape {
    /// Position `p` has children `k·p+1 ..= k·p+k`.
    KAry(usize),
    /// Binomial tree: `p` has children `p + 2^j` for every `2^j` above its lowest set bit.
    Binomial,
}

impl Default for TreeShape {
    fn default() -> Self {
        TreeShape::KAry(4)
    }
}

/// A collective tree: parent/children relations among the participants.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tree {
    shape: TreeShape,
    /// `order[0]` is the root; positions are indices in this vector.
    order: Vec<NodeId>,
}

impl Tree {
    /// Builds the tree over `nodes` (any order, duplicates ignored) rooted at `root`
    /// (added if absent). Non-root nodes are placed in ascending order starting after
    /// the root, wrapping around, so different roots spread interior load.
    pub fn new(nodes: &[NodeId], root: NodeId, shape: TreeShape) -> Tree {
        let mut sorted: Vec<NodeId> = nodes.to_vec();
        sorted.push(root);
        sorted.sort_unstable();
        sorted.dedup();
        let at = sorted.binary_search(&root).unwrap_or(0);
        let mut order = Vec::with_capacity(sorted.len());
        order.push(root);
        order.extend(sorted[at + 1..].iter().copied());
        order.extend(sorted[..at].iter().copied());
        if let TreeShape::KAry(k) = shape {
            assert!(k >= 1, "tree radix must be at least 1");
        }
        Tree { shape, order }
    }

    pub fn root(&self) -> NodeId {
        self.order[0]
    }

    pub fn len(&self) -> usize {
        self.order.len()
    }

    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }

    /// Every participant, root first.
    pub fn nodes(&self) -> &[NodeId] {
        &self.order
    }

    pub fn contains(&self, node: NodeId) -> bool {
        self.position(node).is_some()
    }

    fn position(&self, node: NodeId) -> Option<usize> {
        self.order.iter().position(|&n| n == node)
    }

    fn parent_pos(&self, p: usize) -> Option<usize> {
        if p == 0 {
            return None;
        }
        Some(match self.shape {
            TreeShape::KAry(k) => (p - 1) / k,
            TreeShape::Binomial => p & (p - 1),
        })
    }

    fn children_pos(&self, p: usize) -> Vec<usize> {
        let n = self.order.len();
        match self.shape {
            TreeShape::KAry(k) => (p * k + 1..=p * k + k).filter(|&c| c < n).collect(),
            TreeShape::Binomial => {
                let mut out = Vec::new();
                let mut bit = 1usize;
                while p + bit < n {
                    if p & bit != 0 {
                        break;
                    }
                    out.push(p + bit);
                    bit <<= 1;
                }
                out
            }
        }
    }

    /// Tree parent of `node`; `None` for the root or a non-participant.
    pub fn parent(&self, node: NodeId) -> Option<NodeId> {
        let p = self.position(node)?;
        self.parent_pos(p).map(|q| self.order[q])
    }

    /// Tree children of `node` (empty for leaves and non-participants).
    pub fn children(&self, node: NodeId) -> Vec<NodeId> {
        match self.position(node) {
            Some(p) => self
                .children_pos(p)
                .into_iter()
                .map(|c| self.order[c])
                .collect(),
            None => Vec::new(),
        }
    }

    /// `node` and all its descendants.
    pub fn subtree(&self, node: NodeId) -> Vec<NodeId> {
        let Some(p) = self.position(node) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        let mut stack = vec![p];
        while let Some(q) = stack.pop() {
            out.push(self.order[q]);
            stack.extend(self.children_pos(q));
        }
        out
    }

    /// Height of the tree in hops (0 for a single node).
    pub fn depth(&self) -> usize {
        (0..self.order.len())
            .map(|mut p| {
                let mut d = 0;
                while let Some(q) = self.parent_pos(p) {
                    p = q;
                    d += 1;
                }
                d
            })
            .max()
            .unwrap_or(0)
    }
}

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

    fn check_consistent(t: &Tree) {
        // every non-root has exactly one parent, and is its parent's child
        for &n in t.nodes() {
            match t.parent(n) {
                None => assert_eq!(n, t.root()),
                Some(p) => assert!(t.children(p).contains(&n)),
            }
        }
        let mut all = t.subtree(t.root());
        all.sort_unstable();
        let mut nodes = t.nodes().to_vec();
        nodes.sort_unstable();
        assert_eq!(all, nodes, "the root's subtree is the whole tree");
    }

    #[test]
    fn kary_and_binomial_are_consistent_trees() {
        for n in 1..40u32 {
            let nodes: Vec<NodeId> = (0..n).collect();
            for root in [0, n / 2, n - 1] {
                for shape in [
                    TreeShape::KAry(1),
                    TreeShape::KAry(2),
                    TreeShape::KAry(4),
                    TreeShape::Binomial,
                ] {
                    let t = Tree::new(&nodes, root, shape);
                    assert_eq!(t.root(), root);
                    assert_eq!(t.len(), n as usize);
                    check_consistent(&t);
                }
            }
        }
    }

    #[test]
    fn root_outside_participants_is_added() {
        let t = Tree::new(&[5, 2, 9], 7, TreeShape::KAry(2));
        assert_eq!(t.nodes(), &[7, 9, 2, 5]);
        assert_eq!(t.children(7), vec![9, 2]);
        assert_eq!(t.parent(5), Some(9));
    }

    #[test]
    fn depth_is_logarithmic() {
        let nodes: Vec<NodeId> = (0..1024).collect();
        assert_eq!(Tree::new(&nodes, 0, TreeShape::Binomial).depth(), 10);
        assert_eq!(Tree::new(&nodes, 0, TreeShape::KAry(4)).depth(), 5);
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

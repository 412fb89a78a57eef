//! Collective trees over the node servers taking part in one operation.
//!
//! A [`Tree`] is an explicit parent/children relation over the participants, rooted at
//! the operation's root. Two builders, both pure functions of their inputs so that
//! every node server computes the same tree without talking to the others:
//!
//! * [`Tree::new`] — flat: k-ary or binomial over the participants in id order,
//!   rotated to start at the root.
//! * [`Tree::hierarchical`] / [`Tree::with_locality`] — switch leaders first, when a
//!   switch map is known (see [`Tree::with_locality`] for the rule).

use std::collections::BTreeMap;

use crate::switches::{Locality, SwitchId, SwitchMap};
use crate::NodeId;

/// Shape of a collective tree.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TreeShape {
    /// Position `p` has children `k·p+1 ..= k·p+k`.
    KAry(usize),
    /// Binomial tree: `p` has children `p + 2^j` for every `2^j` below its lowest set bit.
    Binomial,
}

impl Default for TreeShape {
    fn default() -> Self {
        TreeShape::KAry(4)
    }
}

impl std::fmt::Display for TreeShape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TreeShape::KAry(k) => write!(f, "{k}-ary"),
            TreeShape::Binomial => f.write_str("binomial"),
        }
    }
}

impl TreeShape {
    /// Parent position of position `p` (`None` for the root).
    fn parent_pos(self, p: usize) -> Option<usize> {
        if p == 0 {
            return None;
        }
        Some(match self {
            TreeShape::KAry(k) => (p - 1) / k,
            TreeShape::Binomial => p & (p - 1),
        })
    }
}

/// No parent (the root).
const NONE: u32 = u32::MAX;

/// A collective tree: parent/children relations among the participants.
///
/// Positions index `order`; every parent has a smaller position than its children,
/// and each node's children are listed in increasing position. Two trees are equal
/// when they have the same shape, root, and children (in order) for every node,
/// whatever order their nodes are stored in.
#[derive(Clone, Debug)]
pub struct Tree {
    shape: TreeShape,
    /// `order[0]` is the root.
    order: Vec<NodeId>,
    /// Parent position per position (`NONE` for the root).
    parent: Vec<u32>,
    /// Children of position `p`: `kids[first[p]..first[p + 1]]`.
    first: Vec<u32>,
    kids: Vec<u32>,
    /// `(node, position)` sorted by node, for lookups.
    index: Vec<(NodeId, u32)>,
    /// Nodes in the subtree of each position (itself included).
    sizes: Vec<u32>,
}

impl PartialEq for Tree {
    fn eq(&self, other: &Tree) -> bool {
        self.shape == other.shape
            && self.len() == other.len()
            && self.root() == other.root()
            && self
                .index
                .iter()
                .zip(&other.index)
                .all(|(&(a, p), &(b, q))| {
                    a == b
                        && self
                            .children_pos(p as usize)
                            .iter()
                            .map(|&c| self.order[c as usize])
                            .eq(other
                                .children_pos(q as usize)
                                .iter()
                                .map(|&c| other.order[c as usize]))
                })
    }
}

impl Eq for Tree {}

impl Tree {
    /// Builds the flat tree over `nodes` (any order, duplicates ignored) rooted at
    /// `root` (added if absent). Non-root nodes are placed in ascending order starting
    /// after the root, wrapping around, so different roots spread interior load.
    pub fn new(nodes: &[NodeId], root: NodeId, shape: TreeShape) -> Tree {
        if let TreeShape::KAry(k) = shape {
            assert!(k >= 1, "tree radix must be at least 1");
        }
        let order = rotated(nodes, root);
        let parent = (0..order.len())
            .map(|p| shape.parent_pos(p).map_or(NONE, |q| q as u32))
            .collect();
        Tree::from_parents(shape, order, parent)
    }

    /// Builds the tree "switch leaders first" over `nodes` rooted at `root`, where
    /// `node_names[id]` is the host name of node `id` as `map` lists it. Equivalent to
    /// [`Tree::with_locality`] with `Locality::new(map, node_names)`; build the
    /// [`Locality`] once when making many trees for the same job.
    pub fn hierarchical<S: AsRef<str>>(
        nodes: &[NodeId],
        root: NodeId,
        shape: TreeShape,
        map: &SwitchMap,
        node_names: &[S],
    ) -> Tree {
        Tree::with_locality(nodes, root, shape, &Locality::new(map, node_names))
    }

    /// Builds the tree "switch leaders first" over `nodes` (duplicates ignored; `root`
    /// added if absent) rooted at `root`:
    ///
    /// 1. The participants are grouped by the switch below the top of the map they
    ///    hang off (nodes the map does not list form one more group, as if on a switch
    ///    of their own; several top switches are joined under an implicit root).
    /// 2. Each group gets a leader: `root` if it is in the group, else the group's
    ///    lowest node id.
    /// 3. The leaders are connected by a flat tree of `shape` rooted at `root`
    ///    (as [`Tree::new`] does).
    /// 4. Each group is built the same way one switch level down, under its leader,
    ///    until the group is the participants attached directly to one switch: these
    ///    hang under their leader as a flat subtree of `shape`.
    ///
    /// So exactly one edge enters each participating switch from outside it: edges
    /// between leaf switches number (participating leaf switches − 1), and the depth is
    /// at most the sum over levels of the flat depth for that level's group count, plus
    /// the flat depth of the largest leaf group. With no map information (every node
    /// unknown) this is exactly [`Tree::new`].
    pub fn with_locality(
        nodes: &[NodeId],
        root: NodeId,
        shape: TreeShape,
        locality: &Locality,
    ) -> Tree {
        if let TreeShape::KAry(k) = shape {
            assert!(k >= 1, "tree radix must be at least 1");
        }
        let members = rotated(nodes, root);
        let mut b = Builder {
            shape,
            locality,
            children: BTreeMap::new(),
        };
        let mut sorted = members.clone();
        sorted.sort_unstable();
        b.attach(0, &sorted, root);
        // Positions in breadth-first order from the root; children in the order the
        // builder attached them (upper levels first).
        let mut order = Vec::with_capacity(members.len());
        let mut parent = Vec::with_capacity(members.len());
        order.push(root);
        parent.push(NONE);
        let mut at = 0;
        while at < order.len() {
            if let Some(kids) = b.children.get(&order[at]) {
                for &c in kids {
                    order.push(c);
                    parent.push(at as u32);
                }
            }
            at += 1;
        }
        debug_assert_eq!(order.len(), members.len(), "every participant is placed");
        Tree::from_parents(shape, order, parent)
    }

    /// Assembles the tree from positions and parent positions (parents first).
    fn from_parents(shape: TreeShape, order: Vec<NodeId>, parent: Vec<u32>) -> Tree {
        let n = order.len();
        let mut count = vec![0u32; n + 1];
        for &p in parent.iter().filter(|&&p| p != NONE) {
            count[p as usize + 1] += 1;
        }
        for i in 0..n {
            count[i + 1] += count[i];
        }
        let first = count.clone();
        let mut fill = count;
        let mut kids = vec![0u32; n.saturating_sub(1)];
        for (c, &p) in parent.iter().enumerate() {
            if p != NONE {
                debug_assert!((p as usize) < c, "parents come before children");
                kids[fill[p as usize] as usize] = c as u32;
                fill[p as usize] += 1;
            }
        }
        let mut index: Vec<(NodeId, u32)> = order
            .iter()
            .enumerate()
            .map(|(p, &id)| (id, p as u32))
            .collect();
        index.sort_unstable();
        let mut sizes = vec![1u32; n];
        for c in (1..n).rev() {
            if parent[c] != NONE {
                sizes[parent[c] as usize] += sizes[c];
            }
        }
        Tree {
            shape,
            order,
            parent,
            first,
            kids,
            index,
            sizes,
        }
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

    /// The shape the tree (or, for a hierarchical tree, each of its levels) has.
    pub fn shape(&self) -> TreeShape {
        self.shape
    }

    /// Every participant, root first (parents before their children).
    pub fn nodes(&self) -> &[NodeId] {
        &self.order
    }

    pub fn contains(&self, node: NodeId) -> bool {
        self.position(node).is_some()
    }

    fn position(&self, node: NodeId) -> Option<usize> {
        self.index
            .binary_search_by_key(&node, |&(n, _)| n)
            .ok()
            .map(|i| self.index[i].1 as usize)
    }

    fn children_pos(&self, p: usize) -> &[u32] {
        &self.kids[self.first[p] as usize..self.first[p + 1] as usize]
    }

    /// Tree parent of `node`; `None` for the root or a non-participant.
    pub fn parent(&self, node: NodeId) -> Option<NodeId> {
        let p = self.position(node)?;
        match self.parent[p] {
            NONE => None,
            q => Some(self.order[q as usize]),
        }
    }

    /// Tree children of `node` (empty for leaves and non-participants).
    pub fn children(&self, node: NodeId) -> Vec<NodeId> {
        match self.position(node) {
            Some(p) => self
                .children_pos(p)
                .iter()
                .map(|&c| self.order[c as usize])
                .collect(),
            None => Vec::new(),
        }
    }

    /// Tree children of `node`, largest subtree first (ties in position order): the
    /// order in which a broadcast reaches the deepest parts of the tree soonest.
    pub fn children_largest_first(&self, node: NodeId) -> Vec<NodeId> {
        let Some(p) = self.position(node) else {
            return Vec::new();
        };
        let mut kids: Vec<u32> = self.children_pos(p).to_vec();
        kids.sort_by_key(|&c| std::cmp::Reverse(self.sizes[c as usize]));
        kids.into_iter().map(|c| self.order[c as usize]).collect()
    }

    /// Number of nodes in the subtree of `node` (0 for a non-participant).
    pub fn subtree_len(&self, node: NodeId) -> usize {
        self.position(node).map_or(0, |p| self.sizes[p] as usize)
    }

    /// `node` and all its descendants.
    pub fn subtree(&self, node: NodeId) -> Vec<NodeId> {
        let Some(p) = self.position(node) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        let mut stack = vec![p as u32];
        while let Some(q) = stack.pop() {
            out.push(self.order[q as usize]);
            stack.extend_from_slice(self.children_pos(q as usize));
        }
        out
    }

    /// Every `(child, parent)` edge, in position order of the child.
    pub fn edges(&self) -> impl Iterator<Item = (NodeId, NodeId)> + '_ {
        self.parent
            .iter()
            .enumerate()
            .filter(|(_, &p)| p != NONE)
            .map(|(c, &p)| (self.order[c], self.order[p as usize]))
    }

    /// Hops from the root to `node`.
    pub fn level(&self, node: NodeId) -> Option<usize> {
        let mut p = self.position(node)?;
        let mut d = 0;
        while self.parent[p] != NONE {
            p = self.parent[p] as usize;
            d += 1;
        }
        Some(d)
    }

    /// Height of the tree in hops (0 for a single node).
    pub fn depth(&self) -> usize {
        let mut level = vec![0usize; self.order.len()];
        let mut max = 0;
        for p in 1..self.order.len() {
            level[p] = level[self.parent[p] as usize] + 1;
            max = max.max(level[p]);
        }
        max
    }
}

/// `nodes ∪ {root}` sorted and deduplicated, rotated so that `root` comes first.
fn rotated(nodes: &[NodeId], root: NodeId) -> Vec<NodeId> {
    let mut sorted: Vec<NodeId> = nodes.to_vec();
    sorted.push(root);
    sorted.sort_unstable();
    sorted.dedup();
    let at = sorted.binary_search(&root).unwrap_or(0);
    sorted.rotate_left(at);
    sorted
}

/// Collects the edges of a hierarchical tree.
struct Builder<'a> {
    shape: TreeShape,
    locality: &'a Locality,
    /// Parent → children, in attach order.
    children: BTreeMap<NodeId, Vec<NodeId>>,
}

/// Which part of a switch a participant falls in one level down.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Part {
    /// Attached directly (at the level of the map's top: not on the map at all).
    Direct,
    Below(SwitchId),
}

impl Builder<'_> {
    /// Connects `members` (sorted, containing `leader`) under `leader`, looking at
    /// their switch paths from `level` down.
    fn attach(&mut self, level: usize, members: &[NodeId], leader: NodeId) {
        let mut parts: BTreeMap<Part, Vec<NodeId>> = BTreeMap::new();
        for &n in members {
            let part = match self.locality.path(n).get(level) {
                Some(&s) => Part::Below(s),
                None => Part::Direct,
            };
            parts.entry(part).or_default().push(n);
        }
        if parts.len() == 1 {
            let (part, group) = parts.into_iter().next().expect("one part");
            match part {
                Part::Direct => self.flat(&group, leader),
                Part::Below(_) => self.attach(level + 1, &group, leader),
            }
            return;
        }
        // One leader per part; members are sorted, so the first is the lowest.
        let groups: Vec<(Part, NodeId, Vec<NodeId>)> = parts
            .into_iter()
            .map(|(part, group)| {
                let l = if group.contains(&leader) {
                    leader
                } else {
                    group[0]
                };
                (part, l, group)
            })
            .collect();
        let leaders: Vec<NodeId> = groups.iter().map(|g| g.1).collect();
        self.flat(&leaders, leader);
        for (part, l, group) in groups {
            match part {
                Part::Direct => self.flat(&group, l),
                Part::Below(_) => self.attach(level + 1, &group, l),
            }
        }
    }

    /// Hangs `members` under `root` as a flat tree of the builder's shape.
    fn flat(&mut self, members: &[NodeId], root: NodeId) {
        if members.len() <= 1 {
            return;
        }
        let t = Tree::new(members, root, self.shape);
        for (child, parent) in t.edges() {
            self.children.entry(parent).or_default().push(child);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    #[test]
    fn broadcast_order_is_largest_subtree_first() {
        // Binomial over 0..8 rooted at 0: the root's children 1, 2, 4 head subtrees of
        // 1, 2 and 4 nodes.
        let t = Tree::new(&(0..8).collect::<Vec<_>>(), 0, TreeShape::Binomial);
        assert_eq!(t.children(0), vec![1, 2, 4]);
        assert_eq!(t.children_largest_first(0), vec![4, 2, 1]);
        assert_eq!(
            [4, 2, 1, 0].map(|n| t.subtree_len(n)),
            [4, 2, 1, 8],
            "subtree sizes"
        );
        // 3-ary over 6 nodes rooted at 3 (order 3 4 5 0 1 2): the root's children 4, 5
        // and 0 head subtrees of 3 (4, 1, 2), 1 and 1 nodes; ties stay in position
        // order.
        let t = Tree::new(&(0..6).collect::<Vec<_>>(), 3, TreeShape::KAry(3));
        assert_eq!(t.children(3), vec![4, 5, 0]);
        assert_eq!(t.children_largest_first(3), vec![4, 5, 0]);
        let t = Tree::new(&(0..6).collect::<Vec<_>>(), 0, TreeShape::Binomial);
        // order 0..5: the root's children 1 (1 node), 2 (2 nodes), 4 (2 nodes).
        assert_eq!(t.children_largest_first(0), vec![2, 4, 1]);
        let t = Tree::new(&(0..6).collect::<Vec<_>>(), 3, TreeShape::KAry(3));
        assert_eq!(t.subtree_len(4), 3);
        assert_eq!(t.subtree_len(0), 1);
        assert_eq!(t.subtree_len(99), 0);
        assert!(t.children_largest_first(99).is_empty());
    }

    fn check_consistent(t: &Tree) {
        // every non-root has exactly one parent, and is its parent's child
        for &n in t.nodes() {
            match t.parent(n) {
                None => assert_eq!(n, t.root()),
                Some(p) => {
                    assert_eq!(
                        t.children(p).iter().filter(|&&c| c == n).count(),
                        1,
                        "{n} listed once under its parent {p}"
                    );
                }
            }
            for c in t.children(n) {
                assert_eq!(t.parent(c), Some(n));
            }
        }
        let mut all = t.subtree(t.root());
        all.sort_unstable();
        let mut nodes = t.nodes().to_vec();
        nodes.sort_unstable();
        let before = nodes.len();
        nodes.dedup();
        assert_eq!(before, nodes.len(), "no participant twice");
        assert_eq!(all, nodes, "the root's subtree is the whole tree");
        assert_eq!(t.edges().count(), t.len() - 1);
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
        assert_eq!(t.level(5), Some(2));
        assert_eq!(t.level(4), None);
        assert!(!t.contains(4));
        assert!(t.children(4).is_empty());
        assert!(t.subtree(4).is_empty());
    }

    #[test]
    fn depth_is_logarithmic() {
        let nodes: Vec<NodeId> = (0..1024).collect();
        assert_eq!(Tree::new(&nodes, 0, TreeShape::Binomial).depth(), 10);
        assert_eq!(Tree::new(&nodes, 0, TreeShape::KAry(4)).depth(), 5);
        assert_eq!(Tree::new(&[3], 3, TreeShape::KAry(4)).depth(), 0);
    }

    /// `leaves` leaf switches of `per` nodes each, grouped `fan` leaves per middle
    /// switch when `fan > 0` (three levels), else all under one top (two levels).
    /// Node ids are dealt round-robin over leaves so that switch groups are not
    /// contiguous id ranges.
    fn fat_tree(leaves: u32, per: u32, fan: u32) -> (Locality, Vec<Vec<NodeId>>) {
        let n = leaves * per;
        let mut members = vec![Vec::new(); leaves as usize];
        let paths = (0..n)
            .map(|id| {
                let leaf = id % leaves;
                members[leaf as usize].push(id);
                let leaf_id = 1000 + leaf;
                match leaf.checked_div(fan) {
                    Some(mid) => vec![0, 1 + mid, leaf_id],
                    None => vec![0, leaf_id],
                }
            })
            .collect();
        (Locality::from_paths(paths), members)
    }

    fn cross_leaf_edges(t: &Tree, l: &Locality) -> usize {
        t.edges()
            .filter(|&(c, p)| l.leaf_of(c) != l.leaf_of(p))
            .count()
    }

    fn flat_depth(n: usize, shape: TreeShape) -> usize {
        let nodes: Vec<NodeId> = (0..n as NodeId).collect();
        Tree::new(&nodes, 0, shape).depth()
    }

    const SHAPES: [TreeShape; 4] = [
        TreeShape::KAry(1),
        TreeShape::KAry(2),
        TreeShape::KAry(5),
        TreeShape::Binomial,
    ];

    #[test]
    fn hierarchical_trees_are_consistent_and_cross_switches_once_per_switch() {
        for (leaves, per, fan) in [(2, 3, 0), (4, 5, 0), (6, 4, 2), (9, 7, 3), (1, 8, 0)] {
            let (loc, members) = fat_tree(leaves, per, fan);
            let n = leaves * per;
            let all: Vec<NodeId> = (0..n).collect();
            // Participant subsets: everyone, every third node, the first half.
            let subsets: Vec<Vec<NodeId>> = vec![
                all.clone(),
                all.iter().copied().filter(|i| i % 3 == 1).collect(),
                all[..(n / 2).max(1) as usize].to_vec(),
            ];
            for nodes in subsets {
                for root in [nodes[0], nodes[nodes.len() / 2], *nodes.last().unwrap()] {
                    for shape in SHAPES {
                        let t = Tree::with_locality(&nodes, root, shape, &loc);
                        assert_eq!(t.root(), root);
                        assert_eq!(t.len(), nodes.len());
                        check_consistent(&t);

                        let leaves_used: BTreeSet<_> =
                            nodes.iter().map(|&x| loc.leaf_of(x)).collect();
                        assert!(
                            cross_leaf_edges(&t, &loc) < leaves_used.len(),
                            "{leaves}x{per}/{fan} {shape:?}: too many edges between switches"
                        );
                        assert_eq!(cross_leaf_edges(&t, &loc), leaves_used.len() - 1);

                        // Depth: one flat tree per level of the map plus the leaf.
                        let biggest_leaf = members
                            .iter()
                            .map(|m| m.iter().filter(|x| nodes.contains(x)).count())
                            .max()
                            .unwrap();
                        let bound = if fan > 0 {
                            let mids = leaves.div_ceil(fan) as usize;
                            flat_depth(mids, shape)
                                + flat_depth(fan as usize, shape)
                                + flat_depth(biggest_leaf, shape)
                        } else {
                            flat_depth(leaves as usize, shape) + flat_depth(biggest_leaf, shape)
                        };
                        assert!(
                            t.depth() <= bound,
                            "{leaves}x{per}/{fan} {shape:?}: depth {} > {bound}",
                            t.depth()
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn leaders_are_the_root_or_the_lowest_node_of_their_switch() {
        let (loc, members) = fat_tree(4, 5, 0);
        let nodes: Vec<NodeId> = (0..20).collect();
        let root = 13; // on leaf 1 (13 % 4)
        let t = Tree::with_locality(&nodes, root, TreeShape::KAry(2), &loc);
        for m in &members {
            // The one node of each switch whose parent is elsewhere (or the root).
            let entries: Vec<NodeId> = m
                .iter()
                .copied()
                .filter(|&x| t.parent(x).is_none_or(|p| loc.leaf_of(p) != loc.leaf_of(x)))
                .collect();
            let want = if m.contains(&root) { root } else { m[0] };
            assert_eq!(entries, [want]);
        }
    }

    #[test]
    fn same_inputs_same_tree_whatever_the_input_order() {
        let (loc, _) = fat_tree(5, 4, 0);
        let mut nodes: Vec<NodeId> = (0..20).rev().collect();
        nodes.extend([3, 3, 7]);
        let a = Tree::with_locality(&nodes, 6, TreeShape::Binomial, &loc);
        nodes.sort_unstable();
        let b = Tree::with_locality(&nodes, 6, TreeShape::Binomial, &loc);
        assert_eq!(a, b);
    }

    #[test]
    fn unknown_nodes_and_absent_roots() {
        // Nodes 0-3 on switch A, 4-5 on B, 6-7 not on the map.
        let loc = Locality::from_paths(vec![
            vec![0, 1],
            vec![0, 1],
            vec![0, 1],
            vec![0, 1],
            vec![0, 2],
            vec![0, 2],
            vec![],
            vec![],
        ]);
        let nodes: Vec<NodeId> = (0..8).collect();
        for root in 0..8 {
            let t = Tree::with_locality(&nodes, root, TreeShape::KAry(2), &loc);
            check_consistent(&t);
        }
        // A root that does not participate is still the root.
        let t = Tree::with_locality(&[1, 2, 5], 7, TreeShape::KAry(2), &loc);
        assert_eq!(t.root(), 7);
        check_consistent(&t);
        assert_eq!(t.len(), 4);
        // Without map information the hierarchical builder is the flat one.
        let none = Locality::from_paths(vec![vec![]; 8]);
        for shape in SHAPES {
            assert_eq!(
                Tree::with_locality(&nodes, 5, shape, &none),
                Tree::new(&nodes, 5, shape)
            );
        }
    }

    #[test]
    fn hierarchical_from_a_topology_file() {
        let map = SwitchMap::parse(
            "SwitchName=s1 Nodes=node[0-2]\nSwitchName=s2 Nodes=node[3-5]\n\
             SwitchName=top Switches=s[1-2]\n",
        )
        .unwrap();
        let names: Vec<String> = (0..6).map(|i| format!("node{i}")).collect();
        let all: Vec<NodeId> = (0..6).collect();
        let t = Tree::hierarchical(&all, 4, TreeShape::KAry(5), &map, &names);
        check_consistent(&t);
        // Leaders: node4 (the root) on s2, node0 on s1. The leader edge comes first,
        // then the root's own switch in rotated order.
        assert_eq!(t.children(4), [0, 5, 3]);
        assert_eq!(t.children(0), [1, 2]);
        assert_eq!(t.depth(), 2);
        // The flat tree would be a star.
        assert_eq!(Tree::new(&all, 4, TreeShape::KAry(5)).depth(), 1);
    }

    #[test]
    fn big_hierarchical_trees_are_cheap_and_sound() {
        let (loc, _) = fat_tree(512, 32, 16);
        let nodes: Vec<NodeId> = (0..16384).collect();
        let t = Tree::with_locality(&nodes, 12345, TreeShape::KAry(8), &loc);
        assert_eq!(t.len(), 16384);
        check_consistent(&t);
        assert_eq!(cross_leaf_edges(&t, &loc), 511);
    }
}

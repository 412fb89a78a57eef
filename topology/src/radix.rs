//! Choosing the shape of collective trees from the job size and the fabric's cost.
//!
//! # The model
//!
//! Every collective of the node servers is a gather up the tree followed by a
//! broadcast of the result down it (an allgather through the root). With `n` node
//! servers contributing `D` bytes each, a message of `b` bytes costs
//! `α + o + b·β` from send to delivery, where `α` is the per-hop latency, `β` the
//! per-byte time and `o` the per-message processing overhead of a node server; a
//! node handles the messages of its children one after another.
//!
//! * **k-ary tree.** Take the path from the root down its first children (the path
//!   through the largest subtrees, as deep as the tree). At each node on it with `f`
//!   children and a subtree of `s` nodes, the gather waits `α + f·o` plus
//!   `(s − 1)·D·β` to take in its children's data, and the broadcast spends
//!   `α + f·(o + n·D·β)` sending the whole result to each child in turn:
//!
//!   `T_k(n) = Σ_path [ 2α + 2·f·o + (s − 1)·D·β + f·n·D·β ]
//!           ≈ 2·depth_k·(α + k·o) + n·D·β·(k/(k−1) + k·depth_k)`
//!
//! * **Binomial tree.** `r = ⌈log2 n⌉` rounds each way with one message per node per
//!   round; the root takes in `(n − 1)·D` bytes in all and sends the `n·D`-byte
//!   result once per round:
//!
//!   `T_bin(n) = 2·r·(α + o) + (n − 1)·D·β + r·n·D·β`
//!
//! Latency (`α`) favours shallow, wide trees (fewer hops), per-message overhead and
//! payload favour narrow ones (a parent serializes its children's messages, and each
//! extra child costs one more copy of the result). [`CostModel::best_shape`] returns
//! the cheapest of `KAry(2..=16)` and `Binomial` (radices above `n − 1` all give the
//! same star and are not considered).
//!
//! # Defaults
//!
//! Until the transport measures them, node servers use [`DEFAULT_ALPHA_S`] (10 µs,
//! a TCP hop between hosts), [`DEFAULT_BETA_S_PER_BYTE`] (1 ns/byte, about 1 GB/s),
//! [`DEFAULT_OVERHEAD_S`] (1 µs to decode, step the engine and encode one peer
//! message) and [`DEFAULT_BYTES_PER_NODE`] (1 KiB of payload per node server).

use crate::tree::TreeShape;

/// Default per-hop latency: 10 µs (a TCP hop between hosts).
pub const DEFAULT_ALPHA_S: f64 = 10e-6;
/// Default per-byte time: 1 ns/byte (≈ 1 GB/s).
pub const DEFAULT_BETA_S_PER_BYTE: f64 = 1e-9;
/// Default per-message overhead of a node server: 1 µs.
pub const DEFAULT_OVERHEAD_S: f64 = 1e-6;
/// Default payload per node server in one collective: 1 KiB.
pub const DEFAULT_BYTES_PER_NODE: f64 = 1024.0;
/// Largest radix considered.
pub const MAX_RADIX: usize = 16;

/// Parameters of the gather + broadcast cost model (see the [module docs](self)).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CostModel {
    /// Per-hop latency α, seconds.
    pub alpha_s: f64,
    /// Per-byte time β, seconds per byte.
    pub beta_s_per_byte: f64,
    /// Per-message processing overhead o, seconds.
    pub overhead_s: f64,
    /// Payload each node server contributes, bytes.
    pub bytes_per_node: f64,
}

impl Default for CostModel {
    fn default() -> Self {
        CostModel {
            alpha_s: DEFAULT_ALPHA_S,
            beta_s_per_byte: DEFAULT_BETA_S_PER_BYTE,
            overhead_s: DEFAULT_OVERHEAD_S,
            bytes_per_node: DEFAULT_BYTES_PER_NODE,
        }
    }
}

impl CostModel {
    /// Modelled time of one gather + broadcast over `n` node servers in a flat tree of
    /// `shape`, in seconds (0 for `n ≤ 1`).
    pub fn time(&self, n: usize, shape: TreeShape) -> f64 {
        if n <= 1 {
            return 0.0;
        }
        let (a, o) = (self.alpha_s, self.overhead_s);
        let d = self.bytes_per_node * self.beta_s_per_byte;
        let result = n as f64 * d;
        match shape {
            TreeShape::Binomial => {
                let r = f64::from(ceil_log2(n));
                2.0 * r * (a + o) + (n - 1) as f64 * d + r * result
            }
            TreeShape::KAry(k) => {
                let k = k.max(1);
                let mut t = 0.0;
                let mut p = 0usize;
                loop {
                    let first = p.saturating_mul(k).saturating_add(1);
                    let f = n.saturating_sub(first).min(k);
                    if f == 0 {
                        break t;
                    }
                    let s = kary_subtree(p, n, k);
                    t += 2.0 * a + 2.0 * f as f64 * o + (s - 1) as f64 * d + f as f64 * result;
                    p = first;
                }
            }
        }
    }

    /// Modelled time of the dissemination allgather over `n` node servers, seconds:
    /// `⌈log2 n⌉` rounds of one message each, every server taking in `(n − 1)·D` bytes
    /// in all, then the lean outcome (no payload) down a binary tree:
    ///
    /// `T_dis(n) = r·(α + o) + (n − 1)·D·β + depth_2·(α + 2·o)`
    pub fn dissemination_time(&self, n: usize) -> f64 {
        if n <= 1 {
            return 0.0;
        }
        let (a, o) = (self.alpha_s, self.overhead_s);
        let d = self.bytes_per_node * self.beta_s_per_byte;
        let r = f64::from(ceil_log2(n));
        let depth = f64::from(ceil_log2(n + 1) - 1);
        r * (a + o) + (n - 1) as f64 * d + depth * (a + 2.0 * o)
    }

    /// Whether the dissemination allgather is modelled cheaper than the best tree for
    /// `n` node servers.
    pub fn prefers_dissemination(&self, n: usize) -> bool {
        n >= 2 && self.dissemination_time(n) < self.time(n, self.best_shape(n))
    }

    /// The cheapest shape for `n` node servers: `KAry(k)` for `k` in
    /// `2..=min(16, n − 1)`, or `Binomial`. Ties go to the first candidate in that
    /// order.
    pub fn best_shape(&self, n: usize) -> TreeShape {
        let top = n.saturating_sub(1).clamp(2, MAX_RADIX);
        let mut best = TreeShape::KAry(2);
        let mut best_t = self.time(n, best);
        for shape in (3..=top)
            .map(TreeShape::KAry)
            .chain(std::iter::once(TreeShape::Binomial))
        {
            let t = self.time(n, shape);
            if t < best_t {
                best = shape;
                best_t = t;
            }
        }
        best
    }
}

/// How the node servers of one fence or group construct gather their contributions.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Allgather {
    /// Up the collective tree to its root, which decides and sends the outcome (with
    /// every member's data) back down.
    Tree,
    /// A dissemination (Bruck) allgather among the servers: in round `i` each sends
    /// what it holds to the server `2^i` positions before it, so after `⌈log2 n⌉`
    /// rounds every server holds every contribution. The root then decides and sends
    /// a lean outcome (without the data everyone already holds) down a binary tree.
    Dissemination,
    /// Per operation, whichever [`CostModel::prefers_dissemination`] says is cheaper
    /// for its number of servers (with the default cost model).
    #[default]
    Auto,
}

impl std::fmt::Display for Allgather {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Allgather::Tree => "tree",
            Allgather::Dissemination => "dissemination",
            Allgather::Auto => "auto",
        })
    }
}

impl std::str::FromStr for Allgather {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "tree" => Ok(Allgather::Tree),
            "dissemination" | "bruck" => Ok(Allgather::Dissemination),
            "auto" => Ok(Allgather::Auto),
            other => Err(format!(
                "unknown allgather algorithm {other:?} (expected tree, dissemination or auto)"
            )),
        }
    }
}

impl Allgather {
    /// Whether an operation over `n` node servers uses the dissemination allgather.
    pub fn disseminates(self, n: usize) -> bool {
        match self {
            Allgather::Tree => false,
            Allgather::Dissemination => n >= 2,
            Allgather::Auto => CostModel::default().prefers_dissemination(n),
        }
    }
}

/// `⌈log2 n⌉` (0 for `n ≤ 1`): a binomial tree's rounds, the dissemination
/// allgather's.
pub fn ceil_log2(n: usize) -> u32 {
    usize::BITS - n.saturating_sub(1).leading_zeros()
}

/// The shape node servers use for `n` participating servers until the transport
/// measures α and β: [`choose_radix`] with the documented defaults.
pub fn default_shape(n: usize) -> TreeShape {
    choose_radix(
        n,
        DEFAULT_ALPHA_S,
        DEFAULT_BETA_S_PER_BYTE,
        DEFAULT_BYTES_PER_NODE,
    )
}

/// Picks the tree shape for `n` node servers from the per-hop latency `alpha_s`
/// (seconds), the per-byte time `beta_s_per_byte` (seconds/byte) and the payload per
/// node server, with the default per-message overhead ([`DEFAULT_OVERHEAD_S`]); see
/// the [module docs](self) for the model.
pub fn choose_radix(
    n: usize,
    alpha_s: f64,
    beta_s_per_byte: f64,
    bytes_per_node: f64,
) -> TreeShape {
    CostModel {
        alpha_s,
        beta_s_per_byte,
        overhead_s: DEFAULT_OVERHEAD_S,
        bytes_per_node,
    }
    .best_shape(n)
}

/// Nodes in the subtree of heap position `p` of a k-ary tree over `n` positions.
fn kary_subtree(p: usize, n: usize, k: usize) -> usize {
    let (mut first, mut last, mut count) = (p, p, 0usize);
    while first < n {
        count += last.min(n - 1) - first + 1;
        first = first.saturating_mul(k).saturating_add(1);
        last = last.saturating_mul(k).saturating_add(k);
    }
    count
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tree::Tree;

    /// Rounds of the model each way: the hops to the deepest node of a k-ary tree, and
    /// ⌈log2 n⌉ for a binomial tree, whose root serves one child per round.
    fn rounds(n: usize, shape: TreeShape) -> usize {
        match shape {
            TreeShape::Binomial => (usize::BITS - n.saturating_sub(1).leading_zeros()) as usize,
            TreeShape::KAry(k) => {
                let (mut d, mut cap, mut level) = (0, 1usize, 1usize);
                while cap < n {
                    level *= k;
                    cap += level;
                    d += 1;
                }
                d
            }
        }
    }

    #[test]
    fn rounds_match_the_trees() {
        for n in 1..300usize {
            let nodes: Vec<u32> = (0..n as u32).collect();
            for k in 2..=MAX_RADIX {
                let shape = TreeShape::KAry(k);
                assert_eq!(rounds(n, shape), Tree::new(&nodes, 0, shape).depth());
            }
            // The last child of a binomial root is served in round ⌈log2 n⌉.
            let t = Tree::new(&nodes, 0, TreeShape::Binomial);
            let last = t.children(0).len();
            assert_eq!(rounds(n, TreeShape::Binomial), last, "{n}");
        }
    }

    /// Radix as "how wide": a binomial tree takes one child per round, like k = 2.
    fn width(shape: TreeShape) -> usize {
        match shape {
            TreeShape::KAry(k) => k,
            TreeShape::Binomial => 2,
        }
    }

    fn sizes() -> Vec<usize> {
        let mut v: Vec<usize> = (2..=70).collect();
        v.extend([100, 127, 128, 129, 255, 256, 1000, 1024, 4096, 16384]);
        v
    }

    fn model(alpha_s: f64, bytes: f64) -> CostModel {
        CostModel {
            alpha_s,
            bytes_per_node: bytes,
            ..CostModel::default()
        }
    }

    #[test]
    fn subtree_sizes_match_the_tree() {
        for n in 1..60usize {
            for k in 1..6usize {
                let nodes: Vec<u32> = (0..n as u32).collect();
                let t = Tree::new(&nodes, 0, TreeShape::KAry(k));
                for p in 0..n {
                    assert_eq!(kary_subtree(p, n, k), t.subtree(p as u32).len());
                }
            }
        }
    }

    #[test]
    fn matches_the_closed_form_for_full_trees() {
        // A full binary tree of 7: two hops of 2 children each on the path.
        let m = model(10e-6, 0.0);
        let want = 2.0 * 2.0 * (m.alpha_s + 2.0 * m.overhead_s);
        assert!((m.time(7, TreeShape::KAry(2)) - want).abs() < 1e-12);
        assert_eq!(m.time(1, TreeShape::Binomial), 0.0);
    }

    #[test]
    fn larger_alpha_favours_larger_radix() {
        let alphas: Vec<f64> = (-32..=0).map(|e| 10f64.powf(f64::from(e) / 4.0)).collect();
        for n in sizes() {
            for bytes in [0.0, 16.0, 1024.0, 65536.0] {
                let picks: Vec<TreeShape> = alphas
                    .iter()
                    .map(|&a| model(a, bytes).best_shape(n))
                    .collect();
                for w in picks.windows(2) {
                    assert!(
                        width(w[1]) >= width(w[0]) && rounds(n, w[1]) <= rounds(n, w[0]),
                        "n={n} D={bytes}: a larger α picked {:?} after {:?}",
                        w[1],
                        w[0]
                    );
                }
                if bytes > 0.0 {
                    continue;
                }
                // Without payload, in the limit the fewest hops win.
                let last = *picks.last().unwrap();
                let fewest = (2..=MAX_RADIX)
                    .map(|k| rounds(n, TreeShape::KAry(k)))
                    .min()
                    .unwrap();
                assert_eq!(rounds(n, last), fewest, "n={n} D={bytes}: {last:?}");
            }
        }
    }

    #[test]
    fn larger_payloads_favour_smaller_radix() {
        let payloads: Vec<f64> = std::iter::once(0.0)
            .chain((0..24).map(|e| f64::from(1u32 << e)))
            .collect();
        for n in sizes() {
            for alpha in [1e-6, 1e-5, 1e-4, 1e-2] {
                let picks: Vec<TreeShape> = payloads
                    .iter()
                    .map(|&b| model(alpha, b).best_shape(n))
                    .collect();
                for w in picks.windows(2) {
                    assert!(
                        width(w[1]) <= width(w[0]) && rounds(n, w[1]) >= rounds(n, w[0]),
                        "n={n} α={alpha}: a larger payload picked {:?} after {:?}",
                        w[1],
                        w[0]
                    );
                }
            }
        }
    }

    #[test]
    fn small_jobs_favour_larger_radix() {
        // Latency-bound (negligible payload, α well above the per-message overhead):
        // every job small enough for one level is a star, a large one is not.
        for alpha in [10e-6, 100e-6, 1e-3] {
            let m = model(alpha, 0.0);
            for n in 2..=MAX_RADIX + 1 {
                assert_eq!(rounds(n, m.best_shape(n)), 1, "n={n} α={alpha}");
            }
            assert!(rounds(16384, m.best_shape(16384)) > 1);
        }
        // Whatever the parameters, a small job's tree is never deeper than a large one's.
        for alpha in [1e-7, 1e-6, 1e-5, 1e-4, 1e-3] {
            for bytes in [0.0, 64.0, 1024.0, 1e6] {
                let m = model(alpha, bytes);
                let big = rounds(16384, m.best_shape(16384));
                for n in 2..=16 {
                    assert!(
                        rounds(n, m.best_shape(n)) <= big,
                        "n={n} α={alpha} D={bytes}"
                    );
                }
            }
        }
    }

    #[test]
    fn choose_radix_uses_the_default_overhead() {
        for n in [1, 2, 3, 6, 100, 16384] {
            let m = CostModel::default();
            assert_eq!(
                choose_radix(n, m.alpha_s, m.beta_s_per_byte, m.bytes_per_node),
                m.best_shape(n)
            );
        }
        // Degenerate sizes still give a usable shape.
        assert_eq!(choose_radix(0, 1e-5, 1e-9, 1024.0), TreeShape::KAry(2));
        assert_eq!(choose_radix(2, 1e-5, 1e-9, 1024.0), TreeShape::KAry(2));
    }

    #[test]
    fn auto_gathers_by_dissemination_where_the_result_is_large() {
        let m = CostModel::default();
        // 3 servers: two hops of a star beat two rounds plus a lean broadcast.
        assert!(!m.prefers_dissemination(3));
        assert!(!Allgather::Auto.disseminates(3));
        // 16384 servers × 1 KiB: a tree sends 16 MiB down every level.
        assert!(m.dissemination_time(16384) * 5.0 < m.time(16384, m.best_shape(16384)));
        assert!(Allgather::Auto.disseminates(16384));
        for n in [1, 2, 3, 100, 16384] {
            assert!(!Allgather::Tree.disseminates(n));
            assert_eq!(Allgather::Dissemination.disseminates(n), n >= 2);
        }
        for a in [Allgather::Tree, Allgather::Dissemination, Allgather::Auto] {
            assert_eq!(a.to_string().parse::<Allgather>(), Ok(a));
        }
        assert!("ring".parse::<Allgather>().is_err());
    }
}

//! The dissemination (Bruck) allgather of fences and collective-method constructs.
//!
//! The servers of an operation (its tree's nodes, root included) take positions
//! `0..n` in id order. Once its own processes have all joined (or are settled), the
//! server at position `p` runs `r = ⌈log2 n⌉` rounds: in round `i` it sends the
//! contributions of positions `[p, p + m_i)` (mod `n`, `m_i = min(2^i, n − 2^i)`) to
//! position `p − 2^i`, having received positions `[p + 2^j, …)` in every earlier round
//! `j` from position `p + 2^j`. After round `r − 1` every server holds every
//! contribution, each having sent and taken in `(n − 1)` servers' worth of data in `r`
//! messages, which is the allgather's lower bound in both latency and bandwidth.
//!
//! The root (the same server the tree collective uses) is one of the `n`. It decides
//! exactly as it does after a tree gather, and sends the outcome down a binary tree
//! *lean*: without the data and group info every server already gathered. A server
//! fills those in from its own copy once its last round is in.
//!
//! Failures fall back to the tree collective's paths: when a server of the operation
//! is lost, every server still waiting for the outcome (or setting up its rounds only
//! after the loss) sends what it has gathered straight to the root once its own
//! processes are settled (as a child of a lost server re-sends its subtree), telling
//! the root of the loss first, and the root then sends the whole outcome. Timeouts,
//! aborts, probes, leader failures and decisions all stay the root's, as in the tree
//! collective.
//!
//! Rounds travel other links than outcomes, so two operations with one key (a retry
//! after a failure, a construct of a reused group id) can overlap at a server:
//! * a round of a later attempt than the one in progress here (a retry) waits until
//!   that one ends (`early_msgs`, as every stamped message);
//! * every server sends each of its rounds exactly once per operation, also when it
//!   completes early (after a fallback), so a server that completed without a round
//!   knows it is owed, and drops it when it comes: per-link order puts it before any
//!   round of the next operation from the same server (`owed_rounds`).

use super::*;

/// Dissemination state of one collective at one server.
#[derive(Debug)]
pub(super) struct Gather {
    /// The operation's servers in id order (position = index).
    nodes: Vec<NodeId>,
    /// This server's position.
    me: usize,
    rounds: u32,
    /// This server's own processes are settled (its round 0 may go out).
    ready: bool,
    /// Rounds sent so far (they go out in order).
    sent: u32,
    /// Bit `i`: round `i` came in.
    received: u64,
}

impl Gather {
    /// The state for `me` over the servers of `tree`; `None` when `me` is not one of
    /// them.
    pub(super) fn new(tree: &Tree, me: NodeId) -> Option<Gather> {
        let mut nodes = tree.nodes().to_vec();
        nodes.sort_unstable();
        let pos = nodes.binary_search(&me).ok()?;
        let rounds = cohort_topology::ceil_log2(nodes.len());
        Some(Gather {
            nodes,
            me: pos,
            rounds,
            ready: false,
            sent: 0,
            received: 0,
        })
    }

    /// Distance from this server's position forward to `node`'s (mod n).
    fn offset(&self, node: NodeId) -> Option<usize> {
        let n = self.nodes.len();
        let pos = self.nodes.binary_search(&node).ok()?;
        Some((pos + n - self.me) % n)
    }

    fn all_in(&self, rounds: u32) -> bool {
        let mask = if rounds >= 64 {
            u64::MAX
        } else {
            (1u64 << rounds) - 1
        };
        self.received & mask == mask
    }

    pub(super) fn involves(&self, node: NodeId) -> bool {
        self.nodes.binary_search(&node).is_ok()
    }

    /// Whether round `round` from `from` is one this server expects.
    fn expects(&self, from: NodeId, round: u8) -> bool {
        let n = self.nodes.len();
        u32::from(round) < self.rounds
            && self.nodes[(self.me + (1usize << round)) % n] == from
            && self.received & (1u64 << round) == 0
    }
}

/// A lean outcome waiting for this server's last rounds.
#[derive(Debug)]
pub(super) struct LeanDown {
    spec: Option<CollSpec>,
    outcome: CollOutcome,
    late: Vec<ProcId>,
    gathered: u32,
}

impl Engine {
    /// Whether `key` over `servers` node servers runs the dissemination allgather.
    pub(super) fn disseminates(&self, key: &CollKey, spec: &CollSpec, servers: usize) -> bool {
        let eligible = matches!(
            (key.kind, spec),
            (CollKind::Fence, CollSpec::Fence { .. })
                | (CollKind::Construct, CollSpec::Construct { .. })
        );
        // With a switch map, `auto` keeps the hierarchical tree (switch leaders first),
        // which crosses the upper switches once per subtree; the dissemination
        // allgather's partners ignore the switches.
        let auto_with_switches = self.allgather == Allgather::Auto && self.locality.is_some();
        eligible && !auto_with_switches && self.allgather.disseminates(servers)
    }

    /// Sends every round this server can send now: round 0 once its own processes are
    /// settled, round `i` once rounds `0..i` came in.
    pub(super) fn gather_step(&mut self, key: &CollKey) {
        let Some(coll) = self.colls.get(key) else {
            return;
        };
        let (Some(spec), Some(g)) = (&coll.spec, &coll.gather) else {
            return;
        };
        if !g.ready {
            let Some(excused) = self.settled(key, coll, spec, |n| n == self.node) else {
                return;
            };
            let coll = self.colls.get_mut(key).expect("present");
            coll.excused.extend(excused);
            coll.gather.as_mut().expect("present").ready = true;
            self.fallback_up(key);
        }
        self.send_rounds(key, false);
    }

    /// After a fallback, once this server's own processes are settled, everything it
    /// has (its own contributions and what it gathered) goes straight to the root,
    /// once. Sending earlier would leave out processes of its own that join later:
    /// rounds cannot carry them to the root past a lost server.
    pub(super) fn fallback_up(&mut self, key: &CollKey) {
        let root = self.root_of(key);
        let Some(coll) = self.colls.get(key) else {
            return;
        };
        let ready = coll.gather.as_ref().is_some_and(|g| g.ready);
        if !coll.fallback || coll.sent_up || !ready || coll.spec.is_none() {
            return;
        }
        let Some(root) = root.filter(|r| *r != self.node && !self.lost_nodes.contains(r)) else {
            return;
        };
        tracing::debug!(?key, root, "allgather: sending what is here to the root");
        // The root learns of the losses first (it may have heard of none yet): it then
        // sends its outcome around them, not into a lost server.
        let lost: Vec<NodeId> = coll
            .gather
            .as_ref()
            .map(|g| {
                g.nodes
                    .iter()
                    .filter(|n| self.lost_nodes.contains(n))
                    .copied()
                    .collect()
            })
            .unwrap_or_default();
        for node in lost {
            self.send_peer(root, PeerMsg::NodeLost { node });
        }
        let msg = self.up_msg(key, true);
        let coll = self.colls.get_mut(key).expect("present");
        coll.sent_up = true;
        coll.sent_to = Some(root);
        self.send_peer(root, msg);
    }

    /// A gather set up here after one of its servers was lost falls back at once: it
    /// would wait for ever for the lost server's rounds, and the root must send the
    /// whole outcome.
    pub(super) fn gather_lost_already(&mut self, key: &CollKey) {
        if self.lost_nodes.is_empty() {
            return;
        }
        let lost = self
            .colls
            .get(key)
            .and_then(|c| c.gather.as_ref())
            .is_some_and(|g| g.nodes.iter().any(|n| self.lost_nodes.contains(n)));
        if lost {
            self.colls.get_mut(key).expect("present").fallback = true;
        }
    }

    /// Sends the rounds due: each once rounds `0..i` are in, or with `all` every round
    /// not sent yet (a server that completes early still sends each of its rounds
    /// once, so its partners can tell the rounds they are owed from a later
    /// operation's).
    fn send_rounds(&mut self, key: &CollKey, all: bool) {
        let attempt = self.stamp(key);
        loop {
            let Some(coll) = self.colls.get(key) else {
                return;
            };
            let Some(g) = coll.gather.as_ref() else {
                return;
            };
            if g.sent >= g.rounds || !(all || g.all_in(g.sent)) {
                return;
            }
            let n = g.nodes.len();
            let step = 1usize << g.sent;
            let count = step.min(n - step);
            let to = g.nodes[(g.me + n - step) % n];
            let ours = |p: &ProcId| {
                self.jobs
                    .node_of(p)
                    .and_then(|v| g.offset(v))
                    .is_some_and(|o| o < count)
            };
            let contribs: Vec<Contribution> = coll
                .contribs
                .values()
                .filter(|c| ours(&c.proc))
                .cloned()
                .collect();
            let excused: Vec<ProcId> = coll.excused.iter().filter(|p| ours(p)).cloned().collect();
            let msg = PeerMsg::CollGather {
                key: key.clone(),
                spec: coll.spec.clone().expect("present"),
                round: g.sent as u8,
                contribs,
                excused,
                attempt,
            };
            self.colls
                .get_mut(key)
                .and_then(|c| c.gather.as_mut())
                .expect("present")
                .sent += 1;
            if !self.lost_nodes.contains(&to) {
                self.send_peer(to, msg);
            }
        }
    }

    /// One round of `key`'s allgather came in from `from`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn on_gather(
        &mut self,
        from: NodeId,
        key: CollKey,
        spec: CollSpec,
        round: u8,
        contribs: Vec<Contribution>,
        excused: Vec<ProcId>,
        attempt: u32,
        now: Time,
    ) {
        // (Leftovers of failed attempts were dropped in `handle_peer`.) Per-link order:
        // the first round `round` from `from` after a completion that left it owed is
        // that operation's, even if the key is in use here again.
        if self.owed_round(&key, from, round) {
            tracing::debug!(
                ?key,
                from,
                round,
                "dropping an allgather round owed to an operation already ended here"
            );
            return;
        }
        let coll = self.tracker(&key, attempt, now);
        for c in contribs {
            coll.contribs.insert(c.proc.clone(), c);
        }
        coll.excused.extend(excused);
        if let Err(e) = self.merge_spec(&key, spec) {
            return self.fail(&key, e, now);
        }
        let coll = self.colls.get_mut(&key).expect("present");
        match coll.gather.as_mut() {
            Some(g) if g.expects(from, round) => g.received |= 1u64 << round,
            // A fault-tolerant fence that went on at its decider after its root's loss:
            // the old rounds still come, some twice (the decider's second tracker).
            _ if coll.rerooted => {
                tracing::debug!(
                    ?key,
                    from,
                    round,
                    "allgather round of a fence gone on elsewhere"
                )
            }
            _ => {
                tracing::warn!(
                    ?key,
                    from,
                    round,
                    "unexpected allgather round (kept its contributions)"
                );
            }
        }
        self.progress(&key, now);
        self.finish_lean(&key, now);
    }

    /// `key` completed here successfully: first every round not sent yet goes out
    /// (see [`Engine::send_rounds`]).
    pub(super) fn gather_flush(&mut self, key: &CollKey) {
        if self.colls.get(key).is_some_and(|c| c.gather.is_some()) {
            self.send_rounds(key, true);
        }
    }

    /// `key` completed here successfully with `gather`: the rounds that had not come in
    /// yet are owed (every server sends each of its rounds once), and are dropped when
    /// they come instead of starting a new operation with the same key (a construct
    /// of a reused group id).
    pub(super) fn gather_owed(&mut self, key: &CollKey, gather: &Gather) {
        let n = gather.nodes.len();
        let owed: Vec<(NodeId, u8)> = (0..gather.rounds)
            .filter(|&r| gather.received & (1u64 << r) == 0)
            .map(|r| (gather.nodes[(gather.me + (1usize << r)) % n], r as u8))
            .filter(|(from, _)| !self.lost_nodes.contains(from))
            .collect();
        if owed.is_empty() {
            return;
        }
        self.owed_rounds.insert(key.clone(), owed);
    }

    /// Whether round `round` from `from` is one `key`'s completion here left owed (it
    /// is then no longer owed).
    fn owed_round(&mut self, key: &CollKey, from: NodeId, round: u8) -> bool {
        let Some(owed) = self.owed_rounds.get_mut(key) else {
            return false;
        };
        let Some(at) = owed.iter().position(|&o| o == (from, round)) else {
            return false;
        };
        owed.swap_remove(at);
        if owed.is_empty() {
            self.owed_rounds.remove(key);
        }
        true
    }

    /// A server of the operation is lost: until the outcome is here, what this server
    /// gathered goes straight to the root, which then sends the whole outcome.
    pub(super) fn gather_peer_lost(&mut self, key: &CollKey, peer: NodeId) {
        let root = self.root_of(key);
        let Some(coll) = self.colls.get_mut(key) else {
            return;
        };
        if !coll.gather.as_ref().is_some_and(|g| g.involves(peer)) {
            return;
        }
        if root == Some(self.node) {
            coll.fallback = true;
            return;
        }
        let Some(root) = root.filter(|r| !self.lost_nodes.contains(r)) else {
            return;
        };
        if coll.fallback {
            // Already sent to the root. The root's outcome comes down its tree: if
            // `peer` was on the way, the root is asked again (it answers from the
            // outcome it keeps once decided).
            // (`peer` is neither this server nor the root: both are alive.)
            let on_the_way = coll.sent_up
                && coll
                    .tree
                    .as_ref()
                    .is_some_and(|t| t.subtree(peer).contains(&self.node));
            if on_the_way {
                coll.sent_up = false;
                self.fallback_up(key);
            }
            return;
        }
        tracing::debug!(
            ?key,
            lost = peer,
            root,
            "allgather: falling back to the root"
        );
        coll.fallback = true;
        self.fallback_up(key);
    }

    /// Root: the outcome for the tree below, without the gathered data (`Some` only
    /// for a successful allgather that needed no fallback).
    pub(super) fn lean_outcome(coll: &Coll, outcome: &CollOutcome) -> Option<(CollOutcome, u32)> {
        if coll.gather.is_none() || coll.fallback {
            return None;
        }
        let gathered = coll.contribs.len() as u32;
        // The entries of processes whose contributions were not gathered (add-members').
        fn carried<T: Clone>(coll: &Coll, entries: &[(ProcId, T)]) -> Vec<(ProcId, T)> {
            entries
                .iter()
                .filter(|(p, _)| !coll.contribs.contains_key(p))
                .cloned()
                .collect()
        }
        let lean = match outcome {
            CollOutcome::Fence { data } => CollOutcome::Fence {
                data: carried(coll, data),
            },
            CollOutcome::Construct {
                status,
                members,
                context_id,
                group_info,
                data,
                failed,
                notify_termination,
                designated_leaders,
                connect,
            } => CollOutcome::Construct {
                status: *status,
                members: members.clone(),
                context_id: *context_id,
                group_info: carried(coll, group_info),
                data: carried(coll, data),
                failed: failed.clone(),
                notify_termination: *notify_termination,
                designated_leaders: designated_leaders.clone(),
                connect: *connect,
            },
            _ => return None,
        };
        Some((lean, gathered))
    }

    /// A lean outcome reached this server: pass it on as it came, and apply it once
    /// this server's own allgather is complete.
    pub(super) fn on_lean_down(
        &mut self,
        key: CollKey,
        spec: Option<CollSpec>,
        outcome: CollOutcome,
        late: Vec<ProcId>,
        gathered: u32,
        now: Time,
    ) {
        let tree = self
            .colls
            .get(&key)
            .and_then(|c| c.tree.clone())
            .or_else(|| spec.as_ref().map(|s| self.tree_for(&key, s)));
        let attempt = self.stamp(&key);
        self.pass_down(tree.as_ref(), || PeerMsg::CollDown {
            key: key.clone(),
            spec: spec.clone(),
            outcome: outcome.clone(),
            late: late.clone(),
            attempt,
            lean: Some(gathered),
        });
        let attempt = self.attempt_of(&key);
        let coll = self.tracker(&key, attempt, now);
        coll.lean = Some(LeanDown {
            spec,
            outcome,
            late,
            gathered,
        });
        self.finish_lean(&key, now);
    }

    /// Applies a waiting lean outcome once every contribution it leaves out is here.
    pub(super) fn finish_lean(&mut self, key: &CollKey, now: Time) {
        if self.agree_asking.contains_key(key) {
            // Its root was lost: a decider decides for everyone, and this server may
            // have told it that it lacks the outcome.
            return;
        }
        let Some(coll) = self.colls.get_mut(key) else {
            return;
        };
        let have = coll.contribs.len() as u32;
        let Some(lean) = coll.lean.as_ref() else {
            return;
        };
        if have < lean.gathered {
            return;
        }
        let lean = coll.lean.take().expect("checked");
        let coll = self.colls.get(key).expect("present");
        // The gathered entries first, then those the outcome carried (add-members').
        fn fill<T>(gathered: Vec<(ProcId, T)>, carried: &mut Vec<(ProcId, T)>) {
            let extra = std::mem::replace(carried, gathered);
            carried.extend(extra);
        }
        let mut outcome = lean.outcome;
        match &mut outcome {
            CollOutcome::Fence { data } => {
                let gathered = coll
                    .contribs
                    .values()
                    .filter(|c| !c.data.is_empty())
                    .map(|c| (c.proc.clone(), c.data.clone()))
                    .collect();
                fill(gathered, data);
            }
            CollOutcome::Construct {
                members,
                group_info,
                data,
                ..
            } => {
                let gathered = || {
                    coll.contribs
                        .values()
                        .filter(|c| members.binary_search(&c.proc).is_ok())
                };
                fill(
                    gathered()
                        .map(|c| (c.proc.clone(), c.group_info.clone()))
                        .collect(),
                    group_info,
                );
                fill(
                    gathered()
                        .map(|c| (c.proc.clone(), c.data.clone()))
                        .collect(),
                    data,
                );
            }
            _ => {}
        }
        self.complete(key.clone(), lean.spec, outcome, lean.late, false, now);
    }
}

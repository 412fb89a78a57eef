//! An in-memory cluster of engines: peer messages are delivered through a FIFO queue,
//! client frames are collected per client. Used by the engine's tests and as the base
//! of the discrete-event simulator; it runs the same state machines the node servers run.

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use cohort_proto::msg::{ReqId, Request, ServerFrame};
use cohort_proto::peer::PeerMsg;
use cohort_proto::{JobMap, NodeId, ProcId};
use cohort_topology::{Allgather, TreeShape};

use crate::engine::{Action, ClientId, Engine, EngineConfig, Time};

/// Rewrites a peer message on its way (a buggy or hostile peer, for fuzzing): called
/// with the message's sequence number (0-based, counting the messages that reached a
/// live server before any rewrite: [`Cluster::deliveries`]), the sender, the receiver
/// and the message; returns the deliveries to make instead, as (sender, receiver,
/// message): none drops it, several duplicate or misroute it. Node ids returned must
/// name servers of the cluster.
pub type PeerTamper =
    Box<dyn FnMut(u64, NodeId, NodeId, PeerMsg) -> Vec<(NodeId, NodeId, PeerMsg)>>;

/// Rewrites a client request before its node server sees it (for fuzzing): called with
/// the request's sequence number (0-based), the calling rank and the request.
pub type RequestTamper = Box<dyn FnMut(u64, u32, Request) -> Request>;

/// A node server killed during a run ([`Cluster::kills`]).
#[derive(Clone, Debug)]
pub struct Kill {
    /// Killed once this many peer messages were delivered.
    pub after: u64,
    pub node: NodeId,
    /// Servers whose fabric reports the loss only after this many more deliveries (or
    /// once the cluster is quiet); until then they learn of it from other servers'
    /// messages, or when they send to it. The others are told at once, as
    /// [`Cluster::kill_node`] does.
    pub unnoticed: Vec<(NodeId, u64)>,
    /// What it sent before it died is still delivered (its process crashed and its
    /// kernel sent what it had written), possibly after the receiver learned of the
    /// loss from another server. Otherwise it is lost with it (its host crashed).
    pub flushed: bool,
}

/// Removes and returns the first entry of `v` that is `due` (the faults a run
/// schedules: [`Cluster::kills`], [`Cluster::exits`], [`Cluster::clock_jumps`], late
/// loss reports).
fn take_due<T>(v: &mut Vec<T>, due: impl Fn(&T) -> bool) -> Option<T> {
    let i = v.iter().position(due)?;
    Some(v.remove(i))
}

/// What [`Cluster::step`] delivers.
enum Next {
    Peer(NodeId, NodeId, PeerMsg),
    Request(u32, ReqId, Request),
}

/// Engines wired together in memory.
pub struct Cluster {
    pub engines: Vec<Engine>,
    pub job: JobMap,
    net: VecDeque<(NodeId, NodeId, PeerMsg)>,
    /// Frames received by each client, in order.
    pub inbox: HashMap<ClientId, Vec<ServerFrame>>,
    pub now: Time,
    /// Peer messages delivered so far, per sending node.
    pub sent: Vec<u64>,
    /// Peer-message actions per sending node: one per message, or one for a message
    /// that goes to several nodes (`Action::ToPeers`, which a driver encodes once).
    pub peer_actions: Vec<u64>,
    next_req: ReqId,
    /// Links whose messages are held back (to reorder deliveries across links).
    held_links: std::collections::HashSet<(NodeId, NodeId)>,
    held: VecDeque<(NodeId, NodeId, PeerMsg)>,
    /// Pairs of servers that exchanged a message (a fabric connection exists).
    links: std::collections::HashSet<(NodeId, NodeId)>,
    /// Servers killed with [`Cluster::kill_node`].
    dead: std::collections::HashSet<NodeId>,
    /// See [`PeerTamper`]; `None` delivers messages as sent.
    pub tamper_peer: Option<PeerTamper>,
    /// See [`RequestTamper`]; `None` hands requests over as made.
    pub tamper_request: Option<RequestTamper>,
    /// Peer messages that reached a live server so far, as sent (before any rewrite).
    pub deliveries: u64,
    /// More deliveries than this is a message storm (servers that keep answering each
    /// other): [`Cluster::pump`] panics naming the last message. `None`: no limit.
    pub storm_limit: Option<u64>,
    /// When set, [`Cluster::pump`] delivers next the oldest message of a link picked at
    /// random (from this xorshift state) among the links with messages in flight,
    /// instead of the oldest message of all: each link keeps its order, as a fabric
    /// keeps it, and links overtake each other in any way. `None`: oldest first.
    pub shuffle: Option<u64>,
    /// With [`Cluster::shuffle`]: a request is queued rather than handed to its server
    /// at once, and only a few random steps run before [`Cluster::request`] returns, so
    /// the next requests meet the earlier ones still in flight. Each rank's requests
    /// reach its server in order (one client connection); ranks and links overtake
    /// each other. Everything else (`advance`, `exit`, …) still runs to quiet.
    pub overlap_requests: bool,
    /// Node servers to kill once so many peer messages were delivered, wherever the
    /// scenario is then (see [`Kill`]).
    pub kills: Vec<Kill>,
    /// `(n, rank)`: `rank` exits ([`Cluster::exit`]) once `n` peer messages were
    /// delivered, wherever the scenario is then.
    pub exits: Vec<(u64, u32)>,
    /// `(n, d)`: the clock advances by `d` ([`Cluster::advance`], timers fire) once `n`
    /// peer messages were delivered, wherever the scenario is then.
    pub clock_jumps: Vec<(u64, Duration)>,
    /// Losses servers' fabrics report late: (at this many deliveries, to, lost).
    late_reports: Vec<(u64, NodeId, NodeId)>,
    /// Requests made but not yet handed to their server (see `overlap_requests`).
    queued: VecDeque<(u32, ReqId, Request)>,
    /// Client requests made so far.
    pub requests: u64,
    /// The job's data store, which the launcher holds in a real job
    /// ([`crate::datastore`]): the cluster answers the engines' `Action::Data` calls
    /// with it, in the order they were made.
    pub store: crate::datastore::DataStore,
    /// Data store calls made and not yet handled: (caller's server, token, process,
    /// request).
    data_calls: VecDeque<(NodeId, u64, ProcId, Request)>,
    /// (server, dead peer) pairs whose loss the server was told of.
    told: std::collections::HashSet<(NodeId, NodeId)>,
}

impl Cluster {
    /// `n` ranks over `m` nodes, block mapping; client id of rank r is r + 1.
    pub fn new(n: u32, m: u32, shape: TreeShape) -> Cluster {
        Cluster::with_allgather(n, m, shape, Allgather::Tree)
    }

    /// As [`Cluster::new`], with fences and constructs gathering by `allgather`.
    pub fn with_allgather(n: u32, m: u32, shape: TreeShape, allgather: Allgather) -> Cluster {
        let job = JobMap::block("job", n, m);
        let engines = (0..m)
            .map(|node| {
                Engine::new(EngineConfig {
                    node,
                    job: job.clone(),
                    tree_shape: shape,
                    switches: None,
                    allgather,
                })
            })
            .collect();
        Cluster {
            engines,
            job,
            net: VecDeque::new(),
            inbox: HashMap::new(),
            now: Duration::ZERO,
            sent: vec![0; m as usize],
            peer_actions: vec![0; m as usize],
            next_req: 1,
            held_links: Default::default(),
            held: VecDeque::new(),
            links: Default::default(),
            dead: Default::default(),
            told: Default::default(),
            tamper_peer: None,
            tamper_request: None,
            deliveries: 0,
            storm_limit: None,
            requests: 0,
            shuffle: None,
            overlap_requests: false,
            kills: Vec::new(),
            exits: Vec::new(),
            clock_jumps: Vec::new(),
            late_reports: Vec::new(),
            queued: VecDeque::new(),
            store: Default::default(),
            data_calls: VecDeque::new(),
        }
    }

    pub fn proc(&self, rank: u32) -> ProcId {
        ProcId::new(self.job.nspace.clone(), rank)
    }

    pub fn client_of(rank: u32) -> ClientId {
        u64::from(rank) + 1
    }

    fn node_of_rank(&self, rank: u32) -> NodeId {
        self.job.rank_node[rank as usize]
    }

    /// Connects every rank's client.
    pub fn connect_all(&mut self) {
        for r in 0..self.job.size() {
            self.connect(r);
        }
    }

    pub fn connect(&mut self, rank: u32) {
        let node = self.node_of_rank(rank) as usize;
        let proc = self.proc(rank);
        self.engines[node]
            .on_client_connected(Self::client_of(rank), proc)
            .expect("rank connects to its own node");
        self.pump();
    }

    /// Every rank calls a whole-job fence (collecting data or not), in rank order;
    /// returns the request ids, indexed by rank.
    pub fn fence_all(&mut self, collect: bool) -> Vec<ReqId> {
        let opts = cohort_proto::msg::FenceOpts {
            collect,
            timeout_ms: None,
            ft_collective: false,
        };
        (0..self.job.size())
            .map(|r| self.fence(r, vec![], opts.clone()))
            .collect()
    }

    /// `rank` calls a fence over `procs` (empty: the whole job); returns the request id.
    pub fn fence(
        &mut self,
        rank: u32,
        procs: Vec<ProcId>,
        opts: cohort_proto::msg::FenceOpts,
    ) -> ReqId {
        self.request(rank, Request::Fence { procs, opts })
    }

    /// Sends a request from `rank`; returns its request id.
    pub fn request(&mut self, rank: u32, req: Request) -> ReqId {
        let id = self.next_req;
        self.next_req += 1;
        let node = self.node_of_rank(rank) as usize;
        let now = self.now;
        let req = match self.tamper_request.as_mut() {
            Some(t) => t(self.requests, rank, req),
            None => req,
        };
        self.requests += 1;
        if self.overlap_requests && self.shuffle.is_some() {
            self.queued.push_back((rank, id, req));
            let steps = self.random(8);
            for _ in 0..steps {
                if !self.step() {
                    break;
                }
            }
            return id;
        }
        let _at = tracing::debug_span!("server", n = node).entered();
        self.engines[node].on_client_request(Self::client_of(rank), id, req, now);
        drop(_at);
        self.pump();
        id
    }

    pub fn exit(&mut self, rank: u32) {
        let node = self.node_of_rank(rank) as usize;
        let proc = self.proc(rank);
        let now = self.now;
        // Its server tells the data store (`Action::DataProcGone`).
        self.engines[node].on_proc_exited(proc, now);
        self.pump();
    }

    /// `rank`'s client closes its connection without finalizing (the process may live
    /// on): its server treats it as terminated.
    pub fn disconnect(&mut self, rank: u32) {
        let node = self.node_of_rank(rank) as usize;
        let now = self.now;
        self.engines[node].on_client_disconnected(Self::client_of(rank), now);
        self.pump();
    }

    /// Advances the clock and fires timers.
    pub fn advance(&mut self, d: Duration) {
        self.now += d;
        let now = self.now;
        for (i, e) in self.engines.iter_mut().enumerate() {
            if !self.dead.contains(&(i as NodeId)) {
                let _at = tracing::debug_span!("server", n = i).entered();
                e.on_timer(now);
            }
        }
        let answers = self.store.expire(now);
        self.data_answers(answers);
        self.pump();
    }

    /// Hands the data store's answers to the callers' servers.
    fn data_answers(&mut self, answers: Vec<crate::datastore::Answer>) {
        for a in answers {
            if !self.dead.contains(&a.home) {
                self.engines[a.home as usize].on_data_answer(a.token, a.result);
            }
        }
    }

    /// The data store handles call `token` of `proc` from server `home`, as the
    /// launcher does.
    fn data_call(&mut self, home: NodeId, token: u64, proc: ProcId, req: Request) {
        let answers = self.store.call(&proc, home, token, req, self.now);
        self.data_answers(answers);
    }

    /// Holds back every message on the link `from → to` until [`Cluster::release`]
    /// (per-link order is kept; other links overtake it, as on a real network).
    pub fn hold(&mut self, from: NodeId, to: NodeId) {
        self.held_links.insert((from, to));
    }

    /// How many messages held links hold back now.
    pub fn held_messages(&self) -> usize {
        self.held.len()
    }

    /// Delivers what was held on `from → to`, in order, and stops holding it.
    pub fn release(&mut self, from: NodeId, to: NodeId) {
        self.held_links.remove(&(from, to));
        let (mine, rest): (Vec<_>, Vec<_>) = std::mem::take(&mut self.held)
            .into_iter()
            .partition(|(f, t, _)| (*f, *t) == (from, to));
        self.held = rest.into();
        for m in mine.into_iter().rev() {
            self.net.push_front(m);
        }
        self.pump();
    }

    /// Kills node server `node` (as a crash would): messages to and from it that are
    /// still in flight are lost, and — as a fabric reports a broken connection —
    /// every server that exchanged messages with it, or had messages on their way to
    /// it, is told it is lost. Servers that never talked to it are not.
    pub fn kill_node(&mut self, node: NodeId) {
        self.kill_node_unnoticed_by(node, &[]);
    }

    /// Kills `node` as [`Cluster::kill_node`] does, except that the servers in
    /// `unnoticed` are not told by their fabric (as if their connection to it broke
    /// only later): they learn of the loss only from other servers' messages.
    pub fn kill_node_unnoticed_by(&mut self, node: NodeId, unnoticed: &[NodeId]) {
        self.kill(node, unnoticed, false);
    }

    /// Kills `node` as [`Cluster::kill_node`] does, except that what it sent before is
    /// still delivered, after every server that talked to it was told of the loss (as
    /// when its process crashed, its kernel sent what it had written, and the other
    /// servers heard of the loss from each other before that arrived).
    pub fn kill_node_flushed(&mut self, node: NodeId) {
        self.kill(node, &[], true);
    }

    fn kill(&mut self, node: NodeId, unnoticed: &[NodeId], flushed: bool) {
        self.dead.insert(node);
        // The launcher learns of it: the lookups to be answered there go, and its
        // ranks terminated.
        self.store.home_lost(node);
        for rank in self.job.ranks_on(node) {
            let proc = self.proc(rank);
            self.store.proc_terminated(&proc);
        }
        let mut tell: Vec<NodeId> = self
            .links
            .iter()
            .filter_map(|&(a, b)| match (a == node, b == node) {
                (true, _) => Some(b),
                (_, true) => Some(a),
                _ => None,
            })
            .collect();
        for q in [&mut self.net, &mut self.held] {
            tell.extend(q.iter().filter(|(_, t, _)| *t == node).map(|(f, _, _)| *f));
            q.retain(|(f, t, _)| (flushed || *f != node) && *t != node);
        }
        tell.sort_unstable();
        tell.dedup();
        tell.retain(|n| !unnoticed.contains(n));
        for n in tell {
            self.tell_lost(n, node);
        }
        self.pump();
    }

    /// Server `to`'s fabric reports `lost` lost now (it may have heard of it
    /// already, from another server).
    pub fn report_lost(&mut self, to: NodeId, lost: NodeId) {
        self.tell_lost(to, lost);
        self.pump();
    }

    fn tell_lost(&mut self, to: NodeId, lost: NodeId) {
        if self.dead.contains(&to) || !self.told.insert((to, lost)) {
            return;
        }
        let now = self.now;
        let _at = tracing::debug_span!("server", n = to).entered();
        self.engines[to as usize].on_peer_lost(lost, now);
    }

    /// Delivers every queued message (and request) until the cluster is quiet.
    pub fn pump(&mut self) {
        while self.step() {}
    }

    /// Moves the engines' actions to the network and the clients' inboxes, then makes
    /// one delivery: a peer message, or (see [`Cluster::overlap_requests`]) a queued
    /// request. `false` when nothing was in flight.
    fn step(&mut self) -> bool {
        let n = self.deliveries;
        if let Some(k) = take_due(&mut self.kills, |k| n >= k.after) {
            let unnoticed: Vec<NodeId> = k.unnoticed.iter().map(|&(s, _)| s).collect();
            for &(s, later) in &k.unnoticed {
                self.late_reports.push((n + later, s, k.node));
            }
            self.kill(k.node, &unnoticed, k.flushed);
            return true;
        }
        if let Some((_, d)) = take_due(&mut self.clock_jumps, |&(at, _)| n >= at) {
            self.advance(d);
            return true;
        }
        if let Some((_, rank)) = take_due(&mut self.exits, |&(at, _)| n >= at) {
            if !self.dead.contains(&self.node_of_rank(rank)) {
                self.exit(rank);
            }
            return true;
        }
        if let Some((_, to, lost)) = take_due(&mut self.late_reports, |&(at, _, _)| n >= at) {
            self.tell_lost(to, lost);
            return true;
        }
        self.collect_actions();
        if let Some((home, token, proc, req)) = self.data_calls.pop_front() {
            self.data_call(home, token, proc, req);
            return true;
        }
        let (from, to, msg) = match self.next_event() {
            None if !self.late_reports.is_empty() => {
                // Quiet: the fabrics' late reports come now.
                let (_, to, lost) = self.late_reports.remove(0);
                self.tell_lost(to, lost);
                return true;
            }
            None => return false,
            Some(Next::Request(rank, id, req)) => {
                let node = self.node_of_rank(rank) as usize;
                let now = self.now;
                let _at = tracing::debug_span!("server", n = node).entered();
                self.engines[node].on_client_request(Self::client_of(rank), id, req, now);
                return true;
            }
            Some(Next::Peer(from, to, msg)) => (from, to, msg),
        };
        if self.held_links.contains(&(from, to)) {
            self.held.push_back((from, to, msg));
            return true;
        }
        if self.dead.contains(&to) {
            // The connection attempt fails: the sender learns of the loss.
            self.tell_lost(from, to);
            return true;
        }
        self.links.insert((from.min(to), from.max(to)));
        let now = self.now;
        let seq = self.deliveries;
        if self.storm_limit.is_some_and(|limit| seq >= limit) {
            panic!("message storm: {seq} peer messages, the last {from} -> {to}: {msg:?}");
        }
        self.deliveries += 1;
        let deliveries = match self.tamper_peer.as_mut() {
            Some(t) => t(seq, from, to, msg),
            None => vec![(from, to, msg)],
        };
        for (from, to, msg) in deliveries {
            if !self.dead.contains(&to) {
                let _at = tracing::debug_span!("server", n = to, from).entered();
                self.engines[to as usize].on_peer(from, msg, now);
            }
        }
        true
    }

    fn collect_actions(&mut self) {
        for i in 0..self.engines.len() {
            if self.dead.contains(&(i as NodeId)) {
                self.engines[i].take_actions();
                continue;
            }
            for a in self.engines[i].take_actions() {
                match a {
                    Action::ToClient { client, frame } => {
                        self.inbox.entry(client).or_default().push(frame)
                    }
                    Action::ToPeer { node, msg } => {
                        self.sent[i] += 1;
                        self.peer_actions[i] += 1;
                        self.net.push_back((i as NodeId, node, msg))
                    }
                    Action::ToPeers { nodes, msg } => {
                        self.peer_actions[i] += 1;
                        for node in nodes {
                            self.sent[i] += 1;
                            self.net.push_back((i as NodeId, node, msg.clone()))
                        }
                    }
                    Action::Data { token, proc, req } => {
                        self.data_calls.push_back((i as NodeId, token, proc, req))
                    }
                    Action::DataProcGone { proc } => self.store.proc_terminated(&proc),
                }
            }
        }
    }

    /// Whether node server `node` was killed ([`Cluster::kill_node`]).
    pub fn is_dead(&self, node: NodeId) -> bool {
        self.dead.contains(&node)
    }

    /// A random number below `n` from [`Cluster::shuffle`]'s state (0 without one).
    fn random(&mut self, n: usize) -> usize {
        let Some(state) = self.shuffle.as_mut() else {
            return 0;
        };
        if *state == 0 {
            *state = 0x9e37_79b9_7f4a_7c15;
        }
        *state ^= *state << 13;
        *state ^= *state >> 7;
        *state ^= *state << 17;
        (*state % n.max(1) as u64) as usize
    }

    /// What [`Cluster::step`] delivers next (see [`Cluster::shuffle`]).
    fn next_event(&mut self) -> Option<Next> {
        if self.shuffle.is_none() {
            return self.net.pop_front().map(|(f, t, m)| Next::Peer(f, t, m));
        }
        // Links with messages in flight, then ranks with queued requests.
        let mut links: Vec<(NodeId, NodeId)> = Vec::new();
        for (f, t, _) in &self.net {
            if !links.contains(&(*f, *t)) {
                links.push((*f, *t));
            }
        }
        let mut ranks: Vec<u32> = Vec::new();
        for (r, _, _) in &self.queued {
            if !ranks.contains(r) {
                ranks.push(*r);
            }
        }
        if links.is_empty() && ranks.is_empty() {
            return None;
        }
        let pick = self.random(links.len() + ranks.len());
        if let Some(&link) = links.get(pick) {
            let at = self.net.iter().position(|(f, t, _)| (*f, *t) == link)?;
            return self.net.remove(at).map(|(f, t, m)| Next::Peer(f, t, m));
        }
        let rank = ranks[pick - links.len()];
        let at = self.queued.iter().position(|(r, _, _)| *r == rank)?;
        self.queued
            .remove(at)
            .map(|(r, id, req)| Next::Request(r, id, req))
    }

    /// The reply to request `id` of `rank`, if it arrived.
    pub fn reply(
        &self,
        rank: u32,
        id: ReqId,
    ) -> Option<Result<cohort_proto::msg::Response, cohort_proto::CohortError>> {
        self.inbox
            .get(&Self::client_of(rank))?
            .iter()
            .find_map(|f| match f {
                ServerFrame::Reply { id: i, result } if *i == id => Some(result.clone()),
                _ => None,
            })
    }

    /// `rank` calls a collective-method construct of `id` with the leaders `leaders`
    /// (ranks); returns the request id.
    pub fn construct(
        &mut self,
        rank: u32,
        id: &str,
        leaders: &[u32],
        opts: cohort_proto::msg::ConstructOpts,
    ) -> ReqId {
        let procs = leaders.iter().map(|&r| self.proc(r)).collect();
        self.request(
            rank,
            Request::Construct {
                id: id.into(),
                procs,
                opts,
            },
        )
    }

    /// The group result `rank` got for request `id`; panics naming what came instead.
    pub fn group(&self, rank: u32, id: ReqId) -> cohort_proto::msg::GroupResult {
        match self.reply(rank, id) {
            Some(Ok(cohort_proto::msg::Response::Group(g))) => std::sync::Arc::unwrap_or_clone(g),
            other => panic!("rank {rank}: expected a group result, got {other:?}"),
        }
    }

    /// The error `rank` got for request `id`; panics naming what came instead.
    pub fn error(&self, rank: u32, id: ReqId) -> cohort_proto::CohortError {
        match self.reply(rank, id) {
            Some(Err(e)) => e,
            other => panic!("rank {rank}: expected an error, got {other:?}"),
        }
    }

    /// Events received by `rank`, in order.
    pub fn events(&self, rank: u32) -> Vec<cohort_proto::Event> {
        self.inbox
            .get(&Self::client_of(rank))
            .map(|v| {
                v.iter()
                    .filter_map(|f| match f {
                        ServerFrame::Event(e) => Some(e.clone()),
                        _ => None,
                    })
                    .collect()
            })
            .unwrap_or_default()
    }
}

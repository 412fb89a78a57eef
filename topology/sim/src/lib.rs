//! `cohort-sim`: a discrete-event simulator of cohort's node servers.
//!
//! It runs the node servers' own state machines — one [`cohort_core::Engine`] per
//! simulated node server, exactly as `cohortd` drives them — and replaces sockets and
//! clocks by a cost model:
//!
//! * a message of `b` bytes (its real encoded frame length) from server `u` to server
//!   `v` leaves `u`'s link when the link is free, takes `b·β` to serialize, arrives
//!   `α` later, and is taken in by `v`'s link (which also serializes its incoming
//!   messages at `β` per byte);
//! * a server handles one message (or client request) at a time, `o` each;
//! * a rank reaches its own node server, and a reply reaches the rank, in `α_c`.
//!
//! For every run it reports the completion time (the last rank's reply), the number of
//! rounds (the longest causal chain of server-to-server messages), and the messages and
//! bytes each server sent. The ranks' results (membership, context id, group info and
//! the data each member posted, read back with `get`) are returned too, so they can be
//! compared with a real job's.
//!
//! With [`Params::host_cores`] the servers are emulated on one host, as `cohort run
//! --nodes M` does: a hop's latency is CPU time (half at each end) and all work waits
//! for one of the host's cores.
//!
//! The whole simulated cluster lives in one process: every engine holds its full state
//! (job map, trackers, the group's data), so memory grows with N² for group constructs.
//! [`memory_estimate`] says ahead of time whether a run fits. Beyond that,
//! [`simulate_model`] replays the engines' message schedule for a group construct on
//! the same trees and the same network model, with message sizes fitted from real
//! engine runs ([`SizeModel`]); `tests/model.rs` checks that it agrees with
//! [`simulate`] exactly wherever both run.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::time::{Duration, Instant};

use cohort_core::engine::{Action, ClientId, Engine, EngineConfig};
use cohort_proto::digest::{group_view_line, posted_value, DATA_KEY, INFO_KEY};
use cohort_proto::msg::{
    ClientFrame, ClientFrameEncoder, ConstructOpts, FenceOpts, GroupResult, ReqId, Request,
    Response, ServerFrame,
};
use cohort_proto::peer::PeerMsg;
use cohort_proto::{frame, CohortError, Info, JobMap, NodeId, ProcId, Value};
use cohort_topology::{Allgather, TreeShape};

/// Picoseconds: the simulator's clock unit (β on a 25 GB/s link is 40 ps/byte).
type Ps = u64;

fn ps(seconds: f64) -> Ps {
    (seconds * 1e12).round().max(0.0) as Ps
}

/// The cost model (see the [crate docs](crate)).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Params {
    /// Per-hop latency between node servers, seconds.
    pub alpha_s: f64,
    /// Per-byte time of a link, seconds per byte.
    pub beta_s_per_byte: f64,
    /// Per-message processing time of a node server, seconds.
    pub overhead_s: f64,
    /// A node server's processing time per byte of a peer message it takes in
    /// (decoding it, storing what it carries, passing it on), seconds per byte: a step
    /// then costs `o + γ·b`. The outcome of a collective carries every process's entry,
    /// so this is what makes a step grow with the job.
    pub overhead_s_per_byte: f64,
    /// One-way latency between a rank and its own node server, seconds.
    pub client_alpha_s: f64,
    /// `Some(c)`: all simulated node servers and ranks share one host with `c` cores
    /// (how `cohort run --nodes M` emulates nodes on one machine). A hop's `α` (and
    /// `α_c`) is then CPU time — half at the sender, half at the receiver, as system
    /// calls and wake-ups are on loopback — and every piece of CPU work waits for a
    /// free core. `None`: every server is its own machine and `α` is wire latency.
    pub host_cores: Option<u32>,
}

impl Params {
    /// InfiniBand HDR-like: α = 1 µs, 25 GB/s, o = 0.5 µs, γ = 0, α_c = 0.5 µs.
    pub fn hdr() -> Params {
        Params {
            alpha_s: 1e-6,
            beta_s_per_byte: 1.0 / 25e9,
            overhead_s: 0.5e-6,
            overhead_s_per_byte: 0.0,
            client_alpha_s: 0.5e-6,
            host_cores: None,
        }
    }
}

/// Which collective every rank calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Collective {
    /// `fence` over `{nspace, *}` with data collection.
    Fence,
    /// `group_construct` (collective method, every rank a leader naming all ranks) with
    /// a context id.
    Construct,
}

impl std::fmt::Display for Collective {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Collective::Fence => "fence",
            Collective::Construct => "construct",
        })
    }
}

/// One simulated job: `nodes` node servers with `ranks_per_node` ranks each (block
/// mapping, as `cohort run` places them), every rank posting `bytes_per_rank` bytes of
/// remote-scope data and then calling `op`.
#[derive(Clone, Debug)]
pub struct Scenario {
    pub nodes: u32,
    pub ranks_per_node: u32,
    pub shape: TreeShape,
    /// How the engines gather (`Allgather::Tree` by default here; `cohortd` uses
    /// `Auto`).
    pub allgather: Allgather,
    pub op: Collective,
    pub bytes_per_rank: usize,
    pub nspace: String,
    pub group_id: String,
    /// Read every member's data back with `get` on every rank after the collective
    /// (N² gets: for comparing results at small N).
    pub read_back: bool,
}

impl Scenario {
    pub fn new(nodes: u32, op: Collective, shape: TreeShape) -> Scenario {
        Scenario {
            nodes,
            ranks_per_node: 1,
            shape,
            allgather: Allgather::Tree,
            op,
            bytes_per_rank: 1024,
            nspace: "sim".into(),
            group_id: "simgroup".into(),
            read_back: false,
        }
    }

    pub fn ranks(&self) -> u32 {
        self.nodes * self.ranks_per_node
    }
}

/// What one rank got back.
#[derive(Clone, Debug, PartialEq)]
pub struct RankResult {
    pub rank: u32,
    /// Construct: the canonical membership. Fence: empty.
    pub members: Vec<ProcId>,
    pub context_id: Option<u64>,
    /// Construct: every member's group-info contributions.
    pub group_info: Vec<(ProcId, Info)>,
    /// With `read_back`: every participant's posted value, in rank order.
    pub data: Vec<(ProcId, Value)>,
}

/// The outcome of one simulated run.
#[derive(Clone, Debug)]
pub struct Report {
    pub nodes: u32,
    pub shape: TreeShape,
    /// Time from the ranks' calls to the last rank's reply, seconds.
    pub completion_s: f64,
    /// Longest causal chain of server-to-server messages.
    pub rounds: u32,
    /// Server-to-server messages sent by each server.
    pub msgs_sent: Vec<u64>,
    /// Bytes (encoded frames) sent by each server.
    pub bytes_sent: Vec<u64>,
    /// Wall time spent inside the engines (this machine's cost of the state machines).
    pub engine_wall: Duration,
    /// Engine steps (messages and requests handled).
    pub engine_steps: u64,
    pub results: Vec<RankResult>,
}

impl Report {
    pub fn max_msgs(&self) -> u64 {
        self.msgs_sent.iter().copied().max().unwrap_or(0)
    }
    pub fn max_bytes(&self) -> u64 {
        self.bytes_sent.iter().copied().max().unwrap_or(0)
    }
}

/// Errors of a simulated run.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error("rank {rank}: {op} failed: {error}")]
    Op {
        rank: u32,
        op: &'static str,
        error: CohortError,
    },
    #[error("rank {rank}: {op} never completed (the simulated cluster went quiet)")]
    Stuck { rank: u32, op: &'static str },
    #[error("rank {rank}: unexpected reply to {op}: {reply:?}")]
    Unexpected {
        rank: u32,
        op: &'static str,
        reply: Box<Response>,
    },
    #[error("a scenario needs at least one node and one rank per node")]
    Empty,
    #[error("schedule model: {0}")]
    Model(String),
}

/// Rough peak memory of a run, bytes: the group's data and membership are held by
/// every simulated server.
pub fn memory_estimate(s: &Scenario) -> u64 {
    let n = u64::from(s.ranks());
    let m = u64::from(s.nodes);
    let per_member = 160 + s.nspace.len() as u64 + s.bytes_per_rank as u64;
    // Each server: the outcome it holds, the copy it forwards, the stored data; the
    // job map (a node id per rank, a name per node).
    let per_server = n * per_member * 3 + n * 4 + m * 32;
    per_server * m
}

/// The network and the servers' processors: a discrete-event queue of deliveries,
/// each taken in by its server when the server is free, `o` each.
struct Net<E> {
    alpha: Ps,
    beta_ps_per_byte: f64,
    o: Ps,
    o_ps_per_byte: f64,
    client_alpha: Ps,
    queue: BinaryHeap<Reverse<(Ps, u64)>>,
    /// Destination, hop count, the receiver's CPU cost of taking it in, the event.
    events: HashMap<u64, (NodeId, u32, Ps, E)>,
    seq: u64,
    cpu_free: Vec<Ps>,
    tx_free: Vec<Ps>,
    rx_free: Vec<Ps>,
    /// Longest causal chain of messages that reached each server so far.
    hop: Vec<u32>,
    max_hop: u32,
    msgs: Vec<u64>,
    bytes: Vec<u64>,
    /// (kind, contributions, size) of every peer message, when recording.
    log: Option<Vec<(MsgShape, usize)>>,
    /// Shared-host mode: when each core is free next.
    cores: Option<Vec<Ps>>,
}

/// What the size model needs to know about a peer message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum MsgShape {
    Up {
        contribs: usize,
    },
    Down,
    /// A dissemination round carrying `contribs` contributions.
    Gather {
        contribs: usize,
    },
    /// The outcome after a dissemination allgather, without the gathered data.
    LeanDown,
    Other,
}

impl<E> Net<E> {
    fn new(servers: usize, p: &Params) -> Net<E> {
        Net {
            alpha: ps(p.alpha_s),
            beta_ps_per_byte: p.beta_s_per_byte * 1e12,
            o: ps(p.overhead_s),
            o_ps_per_byte: p.overhead_s_per_byte * 1e12,
            client_alpha: ps(p.client_alpha_s),
            queue: BinaryHeap::new(),
            events: HashMap::new(),
            seq: 0,
            cpu_free: vec![0; servers],
            tx_free: vec![0; servers],
            rx_free: vec![0; servers],
            hop: vec![0; servers],
            max_hop: 0,
            msgs: vec![0; servers],
            bytes: vec![0; servers],
            log: None,
            cores: p.host_cores.map(|c| vec![0; c.max(1) as usize]),
        }
    }

    /// CPU work of `dur` that may start at `ready`: on the earliest free core of a
    /// shared host, or at once when every server has its own processor.
    fn cpu(&mut self, ready: Ps, dur: Ps) -> Ps {
        match &mut self.cores {
            Some(cores) => {
                let core = cores
                    .iter_mut()
                    .min_by_key(|free| **free)
                    .expect("at least one core");
                let end = ready.max(*core) + dur;
                *core = end;
                end
            }
            None => ready + dur,
        }
    }

    /// The CPU cost of one side of a hop of latency `lat` on a shared host (zero when
    /// `lat` is wire latency).
    fn side(&self, lat: Ps) -> Ps {
        if self.cores.is_some() {
            lat / 2
        } else {
            0
        }
    }

    /// The wire part of a hop of latency `lat`.
    fn wire(&self, lat: Ps) -> Ps {
        if self.cores.is_some() {
            0
        } else {
            lat
        }
    }

    /// Server `from` answers one of its ranks (ready at `at`); returns when the rank
    /// has the reply.
    fn reply(&mut self, from: NodeId, at: Ps) -> Ps {
        let u = from as usize;
        let (side, wire) = (self.side(self.client_alpha), self.wire(self.client_alpha));
        let sent = self.cpu(at.max(self.cpu_free[u]), side);
        if side > 0 {
            self.cpu_free[u] = sent;
        }
        self.cpu(sent + wire, side)
    }

    /// A client request sent by a rank of server `to` at `at`: it reaches the server
    /// `α_c` later.
    fn request(&mut self, to: NodeId, at: Ps, ev: E) {
        let (side, wire) = (self.side(self.client_alpha), self.wire(self.client_alpha));
        let sent = self.cpu(at, side);
        self.push(sent + wire, to, 0, side, ev);
    }

    /// A request that travels in the same write as the next one (the client library
    /// sends pending puts with the collective that follows): no hop costs of its own.
    fn request_piggyback(&mut self, to: NodeId, at: Ps, ev: E) {
        let wire = self.wire(self.client_alpha);
        self.push(at + wire, to, 0, 0, ev);
    }

    fn push(&mut self, at: Ps, to: NodeId, hop: u32, recv_cost: Ps, ev: E) {
        self.seq += 1;
        self.events.insert(self.seq, (to, hop, recv_cost, ev));
        self.queue.push(Reverse((at, self.seq)));
    }

    /// The next event, with the time its server finishes handling it.
    fn pop(&mut self) -> Option<(Ps, NodeId, E)> {
        let Reverse((t, seq)) = self.queue.pop()?;
        let (to, hop, recv_cost, ev) = self.events.remove(&seq).expect("queued event is stored");
        let v = to as usize;
        let end = self.cpu(t.max(self.cpu_free[v]), recv_cost + self.o);
        self.cpu_free[v] = end;
        self.hop[v] = self.hop[v].max(hop);
        Some((end, to, ev))
    }

    /// Sends `size` bytes from `from` (ready at `at`) to `to`: serialized on the
    /// sender's link, `α` on the wire, serialized again on the receiver's link.
    fn send(&mut self, from: NodeId, to: NodeId, size: usize, shape: MsgShape, at: Ps, ev: E) {
        let (u, d) = (from as usize, to as usize);
        let wire = (size as f64 * self.beta_ps_per_byte).round() as Ps;
        self.msgs[u] += 1;
        self.bytes[u] += size as u64;
        if let Some(log) = &mut self.log {
            log.push((shape, size));
        }
        let side = self.side(self.alpha);
        let at = if side > 0 {
            let sent = self.cpu(at.max(self.cpu_free[u]), side);
            self.cpu_free[u] = sent;
            sent
        } else {
            at
        };
        let tx_start = at.max(self.tx_free[u]);
        let tx_end = tx_start + wire;
        self.tx_free[u] = tx_end;
        let arrive = (tx_end + self.wire(self.alpha)).max(self.rx_free[d] + wire);
        self.rx_free[d] = arrive;
        let hop = self.hop[u] + 1;
        self.max_hop = self.max_hop.max(hop);
        let take_in = (size as f64 * self.o_ps_per_byte).round() as Ps;
        self.push(arrive, to, hop, side + take_in, ev);
    }
}

#[derive(Debug)]
enum EvKind {
    Peer {
        from: NodeId,
        msg: PeerMsg,
    },
    Client {
        client: ClientId,
        id: ReqId,
        req: Request,
    },
}

/// The simulated cluster of real engines.
struct Sim {
    net: Net<EvKind>,
    job: JobMap,
    engines: Vec<Engine>,
    /// Reply per (client, request id), with the time it reaches the rank.
    replies: HashMap<(ClientId, ReqId), (Ps, Result<Response, CohortError>)>,
    next_req: ReqId,
    wall: Duration,
    steps: u64,
    /// When set: every message handled is also decoded from its wire form and every
    /// output encoded, as a node server does, and each step's wall time is recorded
    /// with the wire size of the message it took in.
    codec_steps: Option<Vec<(Duration, usize)>>,
}

fn client_of(rank: u32) -> ClientId {
    u64::from(rank) + 1
}

fn shape_of(msg: &PeerMsg) -> MsgShape {
    match msg {
        PeerMsg::CollUp { contribs, .. } => MsgShape::Up {
            contribs: contribs.len(),
        },
        PeerMsg::CollGather { contribs, .. } => MsgShape::Gather {
            contribs: contribs.len(),
        },
        PeerMsg::CollDown { lean: Some(_), .. } => MsgShape::LeanDown,
        PeerMsg::CollDown { .. } => MsgShape::Down,
        _ => MsgShape::Other,
    }
}

impl Sim {
    fn new(s: &Scenario, p: Params) -> Sim {
        let job = JobMap::block(s.nspace.clone(), s.ranks(), s.nodes);
        let engines = (0..s.nodes)
            .map(|node| {
                Engine::new(EngineConfig {
                    node,
                    job: job.clone(),
                    tree_shape: s.shape,
                    switches: None,
                    allgather: s.allgather,
                })
            })
            .collect();
        Sim {
            net: Net::new(s.nodes as usize, &p),
            job,
            engines,
            replies: HashMap::new(),
            next_req: 1,
            wall: Duration::ZERO,
            steps: 0,
            codec_steps: None,
        }
    }

    fn node_of(&self, rank: u32) -> NodeId {
        self.job.rank_node[rank as usize]
    }

    fn connect_all(&mut self) {
        for r in 0..self.job.size() {
            let node = self.node_of(r) as usize;
            let proc = ProcId::new(self.job.nspace.clone(), r);
            self.engines[node]
                .on_client_connected(client_of(r), proc)
                .expect("a simulated rank connects to its own node server");
            self.engines[node].take_actions();
        }
    }

    /// Rank `rank` sends `req` at `at`; returns the request id.
    fn request(&mut self, rank: u32, req: Request, at: Ps) -> ReqId {
        let id = self.next_req;
        self.next_req += 1;
        let to = self.node_of(rank);
        let client = client_of(rank);
        self.net.request(to, at, EvKind::Client { client, id, req });
        id
    }

    /// Rank `rank`'s commit, sent with its next request and answered by nobody (as
    /// the client library sends it: request id 0, in the same write).
    fn commit(&mut self, rank: u32, req: Request, at: Ps) {
        let to = self.node_of(rank);
        let client = client_of(rank);
        self.net
            .request_piggyback(to, at, EvKind::Client { client, id: 0, req });
    }

    /// Runs until no event is left.
    fn run(&mut self) {
        while let Some((end, to, ev)) = self.net.pop() {
            let v = to as usize;
            let now = Duration::from_nanos(end / 1000);
            // With the codec: the message arrives in its wire form (encoded outside
            // the timed step, as the sender's step paid for that), and the step
            // decodes it as a node server's reader does.
            let wire = self.codec_steps.as_ref().map(|_| match &ev {
                EvKind::Peer { msg, .. } => frame::encode_body(msg),
                EvKind::Client { id, req, .. } => frame::encode_body(&ClientFrame {
                    id: *id,
                    req: req.clone(),
                }),
            });
            let taken_in = wire.as_ref().map_or(0, Vec::len);
            let began = Instant::now();
            match (ev, wire) {
                (EvKind::Peer { from, msg }, wire) => {
                    let msg = match wire {
                        Some(w) => frame::decode_body(&w).expect("a peer message decodes"),
                        None => msg,
                    };
                    self.engines[v].on_peer(from, msg, now);
                }
                (EvKind::Client { client, id, req }, wire) => {
                    let (id, req) = match wire {
                        Some(w) => {
                            let f: ClientFrame =
                                frame::decode_body(&w).expect("a client frame decodes");
                            (f.id, f.req)
                        }
                        None => (id, req),
                    };
                    self.engines[v].on_client_request(client, id, req, now);
                }
            }
            let actions = self.engines[v].take_actions();
            if let Some(steps) = &mut self.codec_steps {
                // Encoded as `cohortd` encodes them (its `flush`).
                let mut to_clients = ClientFrameEncoder::default();
                for a in &actions {
                    match a {
                        Action::ToPeer { msg, .. } | Action::ToPeers { msg, .. } => {
                            drop(frame::encode(msg))
                        }
                        Action::ToClient { frame: f, .. } => {
                            let mut out = Vec::new();
                            to_clients.encode_into(f, &mut out);
                        }
                        // The simulated workloads publish nothing.
                        Action::Data { .. } | Action::DataProcGone { .. } => {}
                    }
                }
                steps.push((began.elapsed(), taken_in));
            }
            self.wall += began.elapsed();
            self.steps += 1;
            self.act(to, actions, end);
            if self.net.queue.is_empty() {
                self.fire_timers();
            }
        }
    }

    /// `msg` from `from` to each of `nodes` (cloned for all but the last).
    fn send_peers(&mut self, from: NodeId, nodes: &[NodeId], msg: PeerMsg, at: Ps) {
        let Some((&last, rest)) = nodes.split_last() else {
            return;
        };
        let size = frame::encoded_len(&msg);
        let shape = shape_of(&msg);
        for &node in rest {
            let msg = msg.clone();
            self.net
                .send(from, node, size, shape, at, EvKind::Peer { from, msg });
        }
        self.net
            .send(from, last, size, shape, at, EvKind::Peer { from, msg });
    }

    fn act(&mut self, from: NodeId, actions: Vec<Action>, at: Ps) {
        for a in actions {
            match a {
                Action::ToPeer { node, msg } => self.send_peers(from, &[node], msg, at),
                Action::ToPeers { nodes, msg } => self.send_peers(from, &nodes, msg, at),
                Action::ToClient { client, frame } => {
                    if let ServerFrame::Reply { id, result } = frame {
                        let t = self.net.reply(from, at);
                        self.replies.insert((client, id), (t, result));
                    }
                }
                // The simulated workloads publish nothing (the data store is the
                // launcher's, which the simulator does not model).
                Action::Data { .. } | Action::DataProcGone { .. } => {}
            }
        }
    }

    /// When the network is quiet, lets the engines' timers (collective timeouts) fire
    /// at their deadlines, so a stuck collective ends the way it would on real servers.
    fn fire_timers(&mut self) {
        let Some((v, at)) = self
            .engines
            .iter()
            .enumerate()
            .filter_map(|(i, e)| e.next_deadline().map(|d| (i, d)))
            .min_by_key(|&(_, d)| d)
        else {
            return;
        };
        let end = ps(at.as_secs_f64()).max(self.net.cpu_free[v]);
        self.net.cpu_free[v] = end;
        self.engines[v].on_timer(at);
        let actions = self.engines[v].take_actions();
        self.act(v as NodeId, actions, end);
    }

    fn take_reply(
        &mut self,
        rank: u32,
        id: ReqId,
        op: &'static str,
    ) -> Result<(Ps, Response), SimError> {
        match self.replies.remove(&(client_of(rank), id)) {
            Some((t, Ok(r))) => Ok((t, r)),
            Some((_, Err(error))) => Err(SimError::Op { rank, op, error }),
            None => Err(SimError::Stuck { rank, op }),
        }
    }
}

/// The lines `cohort-sim replay` prints, one per rank (see [`cohort_proto::digest`]).
pub fn compare_lines(results: &[RankResult]) -> Vec<String> {
    results
        .iter()
        .map(|r| group_view_line(r.rank, &r.members, r.context_id, &r.group_info, &r.data))
        .collect()
}

/// Runs `s` under the cost model `p`.
pub fn simulate(s: &Scenario, p: Params) -> Result<Report, SimError> {
    if s.nodes == 0 || s.ranks_per_node == 0 {
        return Err(SimError::Empty);
    }
    let mut sim = Sim::new(s, p);
    sim.connect_all();
    let calls = start_collective(&mut sim, s);
    let n = s.ranks();
    let all: Vec<ProcId> = (0..n).map(|r| ProcId::new(s.nspace.clone(), r)).collect();
    sim.run();
    let op_name = match s.op {
        Collective::Fence => "fence",
        Collective::Construct => "group construct",
    };
    let mut completion: Ps = 0;
    let mut results = Vec::with_capacity(n as usize);
    for (r, &id) in (0..n).zip(&calls) {
        let (t, reply) = sim.take_reply(r, id, op_name)?;
        completion = completion.max(t);
        let mut res = RankResult {
            rank: r,
            members: Vec::new(),
            context_id: None,
            group_info: Vec::new(),
            data: Vec::new(),
        };
        match (s.op, reply) {
            (Collective::Fence, Response::Done) => {}
            (Collective::Construct, Response::Group(g)) => {
                let GroupResult {
                    members,
                    context_id,
                    group_info,
                    ..
                } = std::sync::Arc::unwrap_or_clone(g);
                res.members = members;
                res.context_id = context_id;
                res.group_info = group_info;
            }
            (_, reply) => {
                return Err(SimError::Unexpected {
                    rank: r,
                    op: op_name,
                    reply: Box::new(reply),
                })
            }
        }
        results.push(res);
    }
    let report_msgs = sim.net.msgs.clone();
    let report_bytes = sim.net.bytes.clone();
    let rounds = sim.net.max_hop;
    if s.read_back {
        // Reads after completion: every rank reads every rank's data; they must be
        // local after the collective, so no server-to-server traffic is expected.
        let t0 = completion;
        let mut gets = Vec::new();
        for r in 0..n {
            for owner in &all {
                let id = sim.request(
                    r,
                    Request::Get {
                        proc: owner.clone(),
                        key: DATA_KEY.into(),
                        timeout_ms: Some(1_000),
                        after_commits: 0,
                    },
                    t0,
                );
                gets.push((r, owner.clone(), id));
            }
        }
        sim.run();
        for (r, owner, id) in gets {
            match sim.take_reply(r, id, "get")? {
                (_, Response::Value(v)) => results[r as usize].data.push((owner, v)),
                (_, reply) => {
                    return Err(SimError::Unexpected {
                        rank: r,
                        op: "get",
                        reply: Box::new(reply),
                    })
                }
            }
        }
    }
    Ok(Report {
        nodes: s.nodes,
        shape: s.shape,
        completion_s: completion as f64 / 1e12,
        rounds,
        msgs_sent: report_msgs,
        bytes_sent: report_bytes,
        engine_wall: sim.wall,
        engine_steps: sim.steps,
        results,
    })
}

/// Every rank commits its data (the client library commits before a collective), then
/// calls the collective; both reach the server α_c after t = 0. Returns the
/// collective's request id per rank.
fn start_collective(sim: &mut Sim, s: &Scenario) -> Vec<ReqId> {
    let n = s.ranks();
    // One list for every rank's request: a copy each was N² memory at large N (a real
    // rank builds its own; the server decodes equal lists to one either way).
    let all: std::sync::Arc<[ProcId]> = (0..n).map(|r| ProcId::new(s.nspace.clone(), r)).collect();
    let mut calls = Vec::with_capacity(n as usize);
    for r in 0..n {
        sim.commit(
            r,
            Request::Commit {
                local: Vec::new(),
                remote: vec![(DATA_KEY.into(), posted_value(r, s.bytes_per_rank))],
            },
            0,
        );
        let req = match s.op {
            Collective::Fence => Request::Fence {
                procs: vec![ProcId::wildcard(s.nspace.clone())],
                opts: FenceOpts {
                    collect: true,
                    timeout_ms: Some(600_000),
                    ft_collective: false,
                },
            },
            Collective::Construct => Request::Construct {
                id: s.group_id.clone(),
                procs: all.clone(),
                opts: ConstructOpts {
                    assign_context_id: true,
                    timeout_ms: Some(600_000),
                    group_info: vec![(INFO_KEY.into(), Value::U32(r))],
                    ..Default::default()
                },
            },
        };
        calls.push(sim.request(r, req, 0));
    }
    calls
}

/// The median wall time this machine's node server spends per message on the
/// collective path: decoding it, stepping the engine, encoding what it sends. Taken
/// over `runs` simulated 3-server collectives (fences with 1 KiB per rank and group
/// constructs), one rank per server.
pub fn measure_overhead(runs: usize) -> Duration {
    let mut steps = Vec::new();
    for i in 0..runs.max(1) {
        let op = if i % 2 == 0 {
            Collective::Fence
        } else {
            Collective::Construct
        };
        let s = Scenario::new(3, op, TreeShape::KAry(2));
        let mut sim = Sim::new(&s, Params::hdr());
        sim.codec_steps = Some(Vec::new());
        sim.connect_all();
        start_collective(&mut sim, &s);
        sim.run();
        steps.extend(
            sim.codec_steps
                .take()
                .unwrap_or_default()
                .into_iter()
                .map(|(t, _)| t),
        );
    }
    steps.sort_unstable();
    steps[steps.len() / 2]
}

/// What a node server's message handling costs in steady state: see
/// [`measure_steady`].
#[derive(Clone, Copy, Debug)]
pub struct SteadyCost {
    /// Timed iterations.
    pub iterations: usize,
    /// Messages handled per iteration, over all servers (client requests and peer
    /// messages; each is one step: decode, engine, encode of what it sends).
    pub steps_per_iteration: f64,
    /// Median time of one step.
    pub median_step: Duration,
    /// Mean time of one step.
    pub mean_step: Duration,
    /// All servers' step time per iteration.
    pub per_iteration: Duration,
    /// The step time's growth per byte of the message taken in (least-squares slope
    /// over every step), seconds per byte: the cost model's γ.
    pub per_byte_s: f64,
}

/// The CPU a node server spends per message in steady state, measured on `nodes`
/// in-process engines with `ranks_per_node` ranks each, the real codec and no I/O:
/// `iterations` (after `warmup`) of what `cohort-bench` times, each followed by its
/// untimed barrier. For a fence: a commit of `bytes` of remote data and a collecting fence;
/// for a construct: a group construct with a context id and its destruct. Unlike
/// [`measure_overhead`], the engines are warm (their tables and the allocator have
/// seen the same operation before), as in a benchmark loop or a long-running job.
pub fn measure_steady(
    nodes: u32,
    ranks_per_node: u32,
    op: Collective,
    bytes: usize,
    iterations: usize,
    warmup: usize,
) -> Result<SteadyCost, SimError> {
    let mut s = Scenario::new(nodes, op, TreeShape::KAry(2));
    s.ranks_per_node = ranks_per_node;
    s.bytes_per_rank = bytes;
    let mut sim = Sim::new(&s, Params::hdr());
    sim.connect_all();
    let n = s.ranks();
    let mut steps = Vec::new();
    for i in 0..warmup + iterations {
        sim.codec_steps = Some(std::mem::take(&mut steps));
        let mut phases: Vec<(&'static str, Vec<ReqId>)> = Vec::new();
        match op {
            Collective::Fence => {
                let calls = start_collective(&mut sim, &s);
                sim.run();
                phases.push(("fence", calls));
            }
            Collective::Construct => {
                let calls = start_collective(&mut sim, &s);
                sim.run();
                phases.push(("group construct", calls));
                let calls = (0..n)
                    .map(|r| {
                        let req = Request::Destruct {
                            id: s.group_id.clone(),
                            timeout_ms: Some(600_000),
                            ft_collective: false,
                        };
                        sim.request(r, req, 0)
                    })
                    .collect();
                sim.run();
                phases.push(("group destruct", calls));
            }
        }
        // The benchmark's barrier: a fence over everyone without data.
        let calls = (0..n)
            .map(|r| {
                let req = Request::Fence {
                    procs: vec![ProcId::wildcard(s.nspace.clone())],
                    opts: FenceOpts {
                        collect: false,
                        timeout_ms: Some(600_000),
                        ft_collective: false,
                    },
                };
                sim.request(r, req, 0)
            })
            .collect();
        sim.run();
        phases.push(("fence", calls));
        for (what, calls) in phases {
            for (r, id) in (0..n).zip(calls) {
                match sim.take_reply(r, id, what)? {
                    (_, Response::Done) | (_, Response::Group(_)) => {}
                    (_, reply) => {
                        return Err(SimError::Unexpected {
                            rank: r,
                            op: what,
                            reply: Box::new(reply),
                        })
                    }
                }
            }
        }
        steps = sim.codec_steps.take().unwrap_or_default();
        if i + 1 == warmup {
            steps.clear();
        }
    }
    let per_byte_s = slope(&steps);
    let mut steps: Vec<Duration> = steps.into_iter().map(|(t, _)| t).collect();
    let total: Duration = steps.iter().sum();
    let count = steps.len().max(1);
    steps.sort_unstable();
    Ok(SteadyCost {
        iterations,
        steps_per_iteration: steps.len() as f64 / iterations.max(1) as f64,
        median_step: steps.get(steps.len() / 2).copied().unwrap_or_default(),
        mean_step: total / count as u32,
        per_iteration: total / iterations.max(1) as u32,
        per_byte_s,
    })
}

/// Least-squares slope of the steps' times (seconds) over their sizes (bytes); 0
/// without spread.
fn slope(steps: &[(Duration, usize)]) -> f64 {
    let n = steps.len();
    if n < 2 {
        return 0.0;
    }
    let xs = steps.iter().map(|&(_, b)| b as f64);
    let ys = steps.iter().map(|(t, _)| t.as_secs_f64());
    let (mx, my) = (
        xs.clone().sum::<f64>() / n as f64,
        ys.clone().sum::<f64>() / n as f64,
    );
    let (mut sxy, mut sxx) = (0.0, 0.0);
    for (x, y) in xs.zip(ys) {
        sxy += (x - mx) * (y - my);
        sxx += (x - mx) * (x - mx);
    }
    if sxx > 0.0 {
        sxy / sxx
    } else {
        0.0
    }
}

/// The lower bound of an allgather of `n·d` bytes over `n` servers:
/// `⌈log2 n⌉·α + (n−1)/n·(n·d)·β`, seconds.
pub fn lower_bound(n: u32, bytes_per_node: f64, p: &Params) -> f64 {
    if n <= 1 {
        return 0.0;
    }
    let rounds = f64::from(cohort_topology::ceil_log2(n as usize));
    let total = f64::from(n) * bytes_per_node;
    rounds * p.alpha_s + f64::from(n - 1) / f64::from(n) * total * p.beta_s_per_byte
}

/// ⌈log_k n⌉ for `k ≥ 2` (0 for `n ≤ 1`).
pub fn ceil_log(n: u32, k: u32) -> u32 {
    let (mut r, mut reach) = (0u32, 1u64);
    while reach < u64::from(n) {
        reach *= u64::from(k);
        r += 1;
    }
    r
}

/// Sizes of a group construct's peer messages, affine in the number of ranks `R` and a
/// message's contributions `c` (every rank contributes the same shape of data):
/// `up = a + b·R + per_contrib·c`, `down = d + e·R`. Fitted from real engine runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SizeModel {
    up_a: i64,
    up_b: i64,
    per_contrib: i64,
    down_d: i64,
    down_e: i64,
}

impl SizeModel {
    /// Fits the model to `s`'s message shapes from runs of the real engines over 3 and
    /// 5 servers, and checks it against every message of the second run. The tree
    /// collective runs in a chain (its up messages carry 1, 2, … servers'
    /// contributions); for the dissemination allgather `up` sizes its rounds (over 5
    /// servers: one and two servers' contributions) and `down` its lean outcome.
    pub fn fit(s: &Scenario) -> Result<SizeModel, SimError> {
        if s.allgather.disseminates(s.nodes as usize) {
            let gather = |contribs| MsgShape::Gather { contribs };
            SizeModel::fit_with(s, Allgather::Dissemination, gather, MsgShape::LeanDown)
        } else {
            let up = |contribs| MsgShape::Up { contribs };
            SizeModel::fit_with(s, Allgather::Tree, up, MsgShape::Down)
        }
    }

    fn fit_with(
        s: &Scenario,
        allgather: Allgather,
        up: fn(usize) -> MsgShape,
        down: MsgShape,
    ) -> Result<SizeModel, SimError> {
        let r = i64::from(s.ranks_per_node);
        let run = |nodes: u32| -> Vec<(MsgShape, usize)> {
            let mut t = s.clone();
            t.nodes = nodes;
            t.shape = TreeShape::KAry(1);
            t.allgather = allgather;
            t.read_back = false;
            let mut sim = Sim::new(&t, Params::hdr());
            sim.net.log = Some(Vec::new());
            sim.connect_all();
            start_collective(&mut sim, &t);
            sim.run();
            sim.net.log.take().unwrap_or_default()
        };
        let size_of = |log: &[(MsgShape, usize)], want: MsgShape| -> Result<i64, SimError> {
            log.iter()
                .find(|(m, _)| *m == want)
                .map(|&(_, size)| size as i64)
                .ok_or(SimError::Model(format!(
                    "no {want:?} message in the calibration run"
                )))
        };
        let up_r = |c: i64| up(c as usize);
        let (three, five) = (run(3), run(5));
        let per_contrib = (size_of(&five, up_r(2 * r))? - size_of(&five, up_r(r))?) / r;
        let at3 = size_of(&three, up_r(r))? - per_contrib * r;
        let at5 = size_of(&five, up_r(r))? - per_contrib * r;
        let up_b = (at5 - at3) / (2 * r);
        let up_a = at3 - up_b * 3 * r;
        let (d3, d5) = (size_of(&three, down)?, size_of(&five, down)?);
        let down_e = (d5 - d3) / (2 * r);
        let down_d = d3 - down_e * 3 * r;
        let m = SizeModel {
            up_a,
            up_b,
            per_contrib,
            down_d,
            down_e,
        };
        for &(shape, size) in &five {
            let predicted = match shape {
                MsgShape::Up { contribs } | MsgShape::Gather { contribs }
                    if shape == up(contribs) =>
                {
                    m.up(5 * r as u64, contribs as u64)
                }
                _ if shape == down => m.down(5 * r as u64),
                _ => continue,
            };
            if predicted != size {
                return Err(SimError::Model(format!(
                    "{shape:?}: the engine sent {size} bytes, the size model says {predicted}"
                )));
            }
        }
        Ok(m)
    }

    fn up(&self, ranks: u64, contribs: u64) -> usize {
        (self.up_a + self.up_b * ranks as i64 + self.per_contrib * contribs as i64) as usize
    }

    fn down(&self, ranks: u64) -> usize {
        (self.down_d + self.down_e * ranks as i64) as usize
    }
}

#[derive(Debug)]
enum ModelEv {
    Request,
    Up { contribs: u64 },
    Down,
}

/// The group construct of `s` by the schedule model: the message pattern of the
/// engines' tree collective (gather to the rendezvous server, broadcast of the result)
/// on the same trees and the same network model, with message sizes from
/// [`SizeModel`], without the engines' state — for N beyond what fits in memory.
/// `tests/model.rs` checks it against [`simulate`] wherever both run.
pub fn simulate_model(s: &Scenario, p: Params) -> Result<Report, SimError> {
    if s.nodes == 0 || s.ranks_per_node == 0 {
        return Err(SimError::Empty);
    }
    if s.op != Collective::Construct {
        return Err(SimError::Model(
            "the schedule model covers group constructs only".into(),
        ));
    }
    let sizes = SizeModel::fit(s)?;
    if s.allgather.disseminates(s.nodes as usize) {
        return Ok(model_dissemination(s, p, sizes));
    }
    let n = s.nodes as usize;
    let ranks = u64::from(s.ranks());
    let nodes: Vec<NodeId> = (0..s.nodes).collect();
    let root = nodes[cohort_topology::rendezvous(&s.group_id, n)];
    let tree = cohort_topology::Tree::new(&nodes, root, s.shape);
    let mut net: Net<ModelEv> = Net::new(n, &p);
    let mut local_left = vec![2 * s.ranks_per_node; n];
    let mut kids_left: Vec<usize> = nodes.iter().map(|&v| tree.children(v).len()).collect();
    let mut contribs = vec![u64::from(s.ranks_per_node); n];
    model_requests(&mut net, s, || ModelEv::Request);
    let mut completion: Ps = 0;
    let mut steps = 0u64;
    while let Some((end, v, ev)) = net.pop() {
        steps += 1;
        let i = v as usize;
        let ready = match ev {
            ModelEv::Request => {
                local_left[i] -= 1;
                local_left[i] == 0 && kids_left[i] == 0
            }
            ModelEv::Up { contribs: c } => {
                contribs[i] += c;
                kids_left[i] -= 1;
                local_left[i] == 0 && kids_left[i] == 0
            }
            ModelEv::Down => {
                for k in tree.children_largest_first(v) {
                    net.send(v, k, sizes.down(ranks), MsgShape::Down, end, ModelEv::Down);
                }
                for _ in 0..s.ranks_per_node {
                    completion = completion.max(net.reply(v, end));
                }
                false
            }
        };
        if !ready {
            continue;
        }
        match tree.parent(v) {
            Some(parent) => {
                let c = contribs[i];
                let size = sizes.up(ranks, c);
                let shape = MsgShape::Up {
                    contribs: c as usize,
                };
                net.send(v, parent, size, shape, end, ModelEv::Up { contribs: c });
            }
            None => {
                for k in tree.children_largest_first(v) {
                    net.send(v, k, sizes.down(ranks), MsgShape::Down, end, ModelEv::Down);
                }
                for _ in 0..s.ranks_per_node {
                    completion = completion.max(net.reply(v, end));
                }
            }
        }
    }
    Ok(model_report(s, net, completion, steps))
}

/// Every rank's commit (in the same write as its call) and its collective call, at 0.
fn model_requests<E>(net: &mut Net<E>, s: &Scenario, request: impl Fn() -> E) {
    for rank in 0..s.ranks() {
        let v = rank / s.ranks_per_node;
        net.request_piggyback(v, 0, request());
        net.request(v, 0, request());
    }
}

/// A schedule model's run as a [`Report`] (no engines: no results, no wall time).
fn model_report<E>(s: &Scenario, net: Net<E>, completion: Ps, steps: u64) -> Report {
    Report {
        nodes: s.nodes,
        shape: s.shape,
        completion_s: completion as f64 / 1e12,
        rounds: net.max_hop,
        msgs_sent: net.msgs,
        bytes_sent: net.bytes,
        engine_wall: Duration::ZERO,
        engine_steps: steps,
        results: Vec::new(),
    }
}

#[derive(Debug)]
enum DisEv {
    Request,
    Round(u32),
    Lean,
}

/// The schedule model of the dissemination allgather (see `cohort_core`'s
/// `engine/gather.rs`): server `v` sends round `i` (the contributions of
/// `min(2^i, n − 2^i)` servers) to `v − 2^i` once its ranks have called and rounds
/// `0..i` are in; the root decides when every round is in and sends the lean outcome
/// down a binary tree; a server replies to its ranks once it has the lean outcome and
/// every round.
fn model_dissemination(s: &Scenario, p: Params, sizes: SizeModel) -> Report {
    let n = s.nodes as usize;
    let ranks = u64::from(s.ranks());
    let rpn = u64::from(s.ranks_per_node);
    let nodes: Vec<NodeId> = (0..s.nodes).collect();
    let root = nodes[cohort_topology::rendezvous(&s.group_id, n)];
    let tree = cohort_topology::Tree::new(&nodes, root, TreeShape::KAry(2));
    let rounds = cohort_topology::ceil_log2(n);
    let all_in = |bits: u64, k: u32| {
        let mask = (1u64 << k) - 1;
        bits & mask == mask
    };
    let mut net: Net<DisEv> = Net::new(n, &p);
    let mut local_left = vec![2 * s.ranks_per_node; n];
    let mut sent = vec![0u32; n];
    let mut received = vec![0u64; n];
    let mut lean = vec![false; n];
    let mut done = vec![false; n];
    model_requests(&mut net, s, || DisEv::Request);
    let mut completion: Ps = 0;
    let mut steps = 0u64;
    while let Some((end, v, ev)) = net.pop() {
        steps += 1;
        let i = v as usize;
        match ev {
            DisEv::Request => local_left[i] -= 1,
            DisEv::Round(k) => received[i] |= 1u64 << k,
            DisEv::Lean => {}
        }
        if local_left[i] == 0 {
            while sent[i] < rounds && all_in(received[i], sent[i]) {
                let step = 1usize << sent[i];
                let count = step.min(n - step) as u64;
                let to = nodes[(i + n - step) % n];
                let size = sizes.up(ranks, count * rpn);
                let shape = MsgShape::Gather {
                    contribs: (count * rpn) as usize,
                };
                net.send(v, to, size, shape, end, DisEv::Round(sent[i]));
                sent[i] += 1;
            }
        }
        let complete = local_left[i] == 0 && all_in(received[i], rounds);
        // The root decides once it holds everything; others pass the lean outcome on
        // as it comes (a Lean event sends no rounds, so the order matches the engine).
        let decides = v == root && complete && !lean[i];
        if decides || matches!(ev, DisEv::Lean) {
            for c in tree.children_largest_first(v) {
                let size = sizes.down(ranks);
                net.send(v, c, size, MsgShape::LeanDown, end, DisEv::Lean);
            }
            lean[i] = true;
        }
        if lean[i] && complete && !done[i] {
            done[i] = true;
            for _ in 0..s.ranks_per_node {
                completion = completion.max(net.reply(v, end));
            }
        }
    }
    model_report(s, net, completion, steps)
}

//! The node service: accepts local clients on a private Unix socket, talks to peer node
//! servers over the fabric, and drives the sans-IO [`Engine`] from `cohort-core`.
//!
//! Everything runs on one thread inside a `tokio::task::LocalSet`: the engine is owned
//! by a `RefCell`, every input (client frame, fabric message, process exit, timer) is
//! one borrow, and the resulting actions are written out before the next input. Fabric
//! messages are applied by the fabric's reading task itself, through the handler the
//! fabric is bound with (no hop through a channel to a task of ours).

use std::cell::RefCell;
use std::collections::{HashMap, HashSet, VecDeque};
use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::inbox;
use bytes::Bytes;
use cohort_core::{
    take_where, Action, ClientId, Detection, Detector, DetectorConfig, Engine, EngineConfig, Time,
};
use cohort_proto::control::DaemonMsg;
use cohort_proto::frame::{self, MAX_CLIENT_FRAME};
use cohort_proto::msg::{
    ClientFrame, ClientFrameEncoder, Hello, LocalBinding, ServerFrame, Welcome,
};
use cohort_proto::peer::PeerMsg;
use cohort_proto::shm_fence::{self, ShmFence};
use cohort_proto::{CohortError, JobMap, NodeId, ProcId, Rank, PROTOCOL_VERSION};
use cohort_topology::{default_shape, Allgather, SwitchMap};
use cohort_transport::{
    AnyFabric, Fabric, FabricConfig, FabricEvent, FabricKind, Spinner, VerbsOptions,
};
use tokio::io::BufReader;
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::Notify;

/// A client must say hello within this long after connecting.
const HELLO_TIMEOUT: Duration = Duration::from_secs(10);
/// Largest hello frame.
const MAX_HELLO: usize = 64 << 10;

/// Everything the service needs to know about its place in the job.
#[derive(Clone, Debug)]
pub struct ServiceConfig {
    pub node: NodeId,
    pub job: JobMap,
    /// Per-job secret node servers prove to each other.
    pub job_secret: Vec<u8>,
    /// Token local clients must present.
    pub client_token: Vec<u8>,
    /// Where the fabric listens (port 0 = ephemeral).
    pub fabric_listen: SocketAddr,
    /// Private directory (created 0700 if missing) for the client socket.
    pub socket_dir: PathBuf,
    /// The cluster's switch map (`--topology`): collective trees are built switch
    /// leaders first when it is known, flat otherwise.
    pub switches: Option<Arc<SwitchMap>>,
    /// Device, port and GID for the verbs fabric (unset fields: environment, then the
    /// backend's defaults).
    pub verbs: VerbsOptions,
    /// How long the service polls after a client frame or a fabric message before it
    /// sleeps in the kernel (zero: never polls). See [`Spinner`].
    pub spin: Duration,
    /// Whether a one-node job's whole-job fences meet in shared memory
    /// (`cohort_proto::shm_fence`) rather than at the service.
    pub shm_fence: bool,
    /// How fences and collective-method constructs gather contributions.
    pub allgather: Allgather,
    /// Heartbeats among node servers, so that one that falls silent without closing
    /// its connections (its host died, it is frozen, the network cut it off) is
    /// declared lost (`cohort_core::detector`); `None`: only broken connections are.
    pub detector: Option<DetectorConfig>,
}

/// A survey of which node servers this one reaches (see [`NodeService::survey`]).
#[derive(Debug)]
struct Survey {
    token: u64,
    deadline: Time,
    waiting: Vec<NodeId>,
    reached: Vec<NodeId>,
}

/// Handle to a running node service.
pub struct NodeService {
    /// This service's entry in [`SERVICES`].
    id: u64,
    shared: Rc<RefCell<Shared>>,
    fabric: AnyFabric,
    fabric_addr: String,
    socket_path: PathBuf,
    node: NodeId,
    stop: Rc<Notify>,
    detector: Option<DetectorConfig>,
    reports: RefCell<Option<tokio::sync::mpsc::UnboundedReceiver<DaemonMsg>>>,
}

struct ClientConn {
    proc: Option<ProcId>,
    write: Rc<OwnedWriteHalf>,
    queue: Rc<RefCell<VecDeque<Bytes>>>,
    wake_writer: Rc<Notify>,
}

struct Shared {
    engine: Engine,
    fabric: AnyFabric,
    origin: Instant,
    clients: HashMap<ClientId, ClientConn>,
    next_client: ClientId,
    client_token: Vec<u8>,
    owner_uid: u32,
    /// Outbound peer messages held until the peer table is known.
    held: Option<Vec<(NodeId, Bytes)>>,
    /// Local processes that exited while their connection was still open: the exit is
    /// applied once the connection drains, so no frame they sent is lost.
    exited_while_connected: HashSet<ProcId>,
    timer: Rc<Notify>,
    armed: Option<Time>,
    /// The node-local fence segment of a one-node job (see `cohort_proto::shm_fence`).
    fence_shm: Option<(ShmFence, PathBuf)>,
    /// Adaptive polling (see [`Spinner`]): told of each client frame here, of each
    /// fabric message by the fabric.
    spinner: Arc<Spinner>,
    /// The failure detector, once the peers are known (see [`NodeService::start`]).
    detector: Option<Detector>,
    /// Where this server's reports to the launcher go (see [`NodeService::reports`]).
    reports: tokio::sync::mpsc::UnboundedSender<DaemonMsg>,
    /// Peers the fabric found unreachable, reported to the launcher and awaiting its
    /// verdict (reported once each).
    unreachable: HashSet<NodeId>,
    /// Surveys in progress.
    surveys: Vec<Survey>,
    /// Servers the launcher says are gone, and when to treat them as lost if the
    /// fabric has not reported them by then (see [`NodeService::peer_gone`]).
    gone: Vec<(NodeId, Time)>,
    /// When a message from another node server last arrived (see
    /// [`NodeService::unheard`]).
    last_heard: Option<Time>,
    /// The job is ending (see [`NodeService::job_ending`]): peers that go away have
    /// left, not failed.
    ending: bool,
}

impl Shared {
    fn now(&self) -> Time {
        self.origin.elapsed()
    }

    /// Tells the node-local fence segment that `proc` terminated, if it did: ranks
    /// waiting there for it fail instead of waiting for their timeout.
    fn note_exit(&self, proc: &ProcId) {
        if let Some((shm, _)) = &self.fence_shm {
            if proc.nspace == self.engine.job().nspace && self.engine.is_terminated(proc) {
                shm.mark_dead(proc.rank);
            }
        }
    }

    /// Writes out every action the engine produced and re-arms the timer if needed.
    fn flush(&mut self) {
        // Frames for one client leave in one write (a reply and the events that came
        // with it wake the client once), clients in the order of their first frame.
        let mut out: Vec<(ClientId, Vec<u8>)> = Vec::new();
        let mut encoder = ClientFrameEncoder::default();
        for action in self.engine.take_actions() {
            match action {
                Action::ToClient { client, frame } => {
                    let at = match out.iter().position(|(c, _)| *c == client) {
                        Some(i) => i,
                        None => {
                            out.push((client, Vec::new()));
                            out.len() - 1
                        }
                    };
                    encoder.encode_into(&frame, &mut out[at].1);
                }
                Action::ToPeer { node, msg } => {
                    self.send_peer(node, Bytes::from(frame::encode_body(&msg)));
                }
                Action::ToPeers { nodes, msg } => {
                    // Encoded once; every peer gets the same bytes.
                    let bytes = Bytes::from(frame::encode_body(&msg));
                    for node in nodes {
                        self.send_peer(node, bytes.clone());
                    }
                }
                // To the launcher, which holds the job's data store.
                Action::Data { token, proc, req } => {
                    let _ = self.reports.send(DaemonMsg::Data { token, proc, req });
                }
                Action::DataProcGone { proc } => {
                    if let Some(job) = self.engine.session().index_of(&proc.nspace) {
                        let rank = proc.rank;
                        let _ = self.reports.send(DaemonMsg::DataProcGone { job, rank });
                    }
                }
            }
        }
        for (client, bytes) in out {
            self.send_client_bytes(client, Bytes::from(bytes));
        }
        let next = [
            self.engine.next_deadline(),
            self.detector.as_ref().and_then(Detector::deadline),
            self.surveys.iter().map(|s| s.deadline).min(),
            self.gone.iter().map(|&(_, t)| t).min(),
        ]
        .into_iter()
        .flatten()
        .min();
        if next.is_some() && (self.armed.is_none() || next < self.armed) {
            self.armed = next;
            self.timer.notify_one();
        }
    }

    /// Runs the failure detector's timer: heartbeats out, silent servers reported to the
    /// owner of [`NodeService`] (for the launcher to judge; see
    /// [`NodeService::reports`]); surveys whose time is up answered.
    fn detect(&mut self, now: Time) {
        for survey in take_where(&mut self.surveys, |s| s.deadline <= now) {
            self.answer_survey(survey);
        }
        for (node, _) in take_where(&mut self.gone, |&(_, t)| t <= now) {
            if !self.engine.lost_nodes().any(|n| n == node) {
                self.lose(node, "gone, by the launcher's word", now);
            }
        }
        let Some(detector) = self.detector.as_mut() else {
            return;
        };
        let mut out = Vec::new();
        detector.on_timer(now, &mut out);
        for d in out {
            match d {
                Detection::Beat { to } => {
                    self.send_peer(to, Bytes::from(frame::encode_body(&PeerMsg::Heartbeat)));
                }
                Detection::Declare { node, silent } => {
                    // Only the launcher's verdict makes it a loss (`NodeService::peer_lost`):
                    // this server may be the one cut off. The launcher tells the user.
                    tracing::info!(
                        peer = node,
                        silent_ms = silent.as_millis() as u64,
                        "no message from peer node server {node} for {:.1} s; reported to \
                         the launcher",
                        silent.as_secs_f64()
                    );
                    let _ = self.reports.send(DaemonMsg::PeerSilent {
                        node,
                        silent_ms: silent.as_millis() as u64,
                    });
                }
            }
        }
    }

    fn answer_survey(&mut self, survey: Survey) {
        tracing::info!(
            token = survey.token,
            reached = ?survey.reached,
            unanswered = ?survey.waiting,
            "survey of the node servers this one reaches: done"
        );
        let _ = self.reports.send(DaemonMsg::Reached {
            token: survey.token,
            nodes: survey.reached,
        });
    }

    /// A `Pong` for survey `token` from `from`.
    fn pong(&mut self, from: NodeId, token: u64) {
        let Some(i) = self.surveys.iter().position(|s| s.token == token) else {
            return;
        };
        let survey = &mut self.surveys[i];
        if let Some(w) = survey.waiting.iter().position(|&n| n == from) {
            survey.waiting.swap_remove(w);
            survey.reached.push(from);
        }
        if survey.waiting.is_empty() {
            let survey = self.surveys.swap_remove(i);
            self.answer_survey(survey);
        }
    }

    /// The fabric lost `peer`. Without the failure detector it is a loss at once, as
    /// is a loss that proves the process gone or that it dropped its connections
    /// here (the fabric delivered what it sent before): the engine routes around it
    /// and tells every other server, and the launcher is told too, so that it ends
    /// the server if it still runs (every server routes around it now). An
    /// `unreachable` loss is only reported: the launcher judges (this server may be
    /// the one cut off, and the engine would make the loss everyone's, for good), and
    /// this server acts on its verdict ([`NodeService::peer_lost`]). Logged at info
    /// only: every server connected to the lost one sees it, and the launcher tells
    /// the user once.
    fn on_fabric_loss(&mut self, peer: NodeId, reason: String, unreachable: bool, now: Time) {
        if self.ending {
            // Shut down with the job (or about to be): nothing is routed around it any
            // more, and no other server needs telling.
            tracing::debug!(peer, %reason, "peer node server left with the job");
            return;
        }
        let Some(d) = self.detector.as_mut() else {
            tracing::info!(peer, %reason, "peer node server lost");
            self.engine.on_peer_lost(peer, now);
            return;
        };
        // No heartbeats into it meanwhile: each would be another failed connection.
        d.unreachable(peer, now);
        if !unreachable {
            tracing::info!(peer, %reason, "peer node server lost");
            self.engine.on_peer_lost(peer, now);
        } else if self.unreachable.insert(peer) {
            tracing::info!(
                peer,
                %reason,
                "peer node server {peer} unreachable; reported to the launcher"
            );
        } else {
            tracing::debug!(peer, %reason, "peer node server still unreachable");
            return;
        }
        let _ = self.reports.send(DaemonMsg::FabricLost {
            node: peer,
            reason,
            unreachable,
        });
    }

    /// Node server `node` is lost by the launcher's word (`why`): its connections are
    /// dropped (they may never break: a network that drops its packets closes
    /// nothing), so nothing more is read from it or queued for it, and the engine
    /// routes around it.
    fn lose(&mut self, node: NodeId, why: &str, now: Time) {
        tracing::info!(peer = node, "peer node server lost: {why}");
        self.fabric.declare_lost(node);
        if let Some(d) = self.detector.as_mut() {
            d.lost(node, now);
        }
        self.engine.on_peer_lost(node, now);
    }

    /// Sends an encoded peer message (held until the peer table is known).
    fn send_peer(&mut self, node: NodeId, bytes: Bytes) {
        match &mut self.held {
            Some(held) => held.push((node, bytes)),
            None => match self.fabric.send(node, bytes) {
                Ok(()) => {}
                Err(cohort_transport::FabricError::Closed) => {
                    tracing::debug!(peer = node, "fabric closed; message dropped")
                }
                Err(e) => tracing::warn!(peer = node, error = %e, "fabric send failed"),
            },
        }
    }

    fn send_client(&mut self, client: ClientId, frame: &ServerFrame) {
        self.send_client_bytes(client, Bytes::from(frame::encode(frame)));
    }

    /// Queues encoded frames for `client`: straight into its socket when nothing is
    /// queued ahead of them.
    fn send_client_bytes(&mut self, client: ClientId, bytes: Bytes) {
        let Some(conn) = self.clients.get(&client) else {
            return;
        };
        let mut queue = conn.queue.borrow_mut();
        if queue.is_empty() {
            // Fast path: straight into the socket, no task hop.
            match conn.write.try_write(&bytes) {
                Ok(n) if n == bytes.len() => return,
                Ok(n) => queue.push_back(bytes.slice(n..)),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => queue.push_back(bytes),
                Err(e) => {
                    tracing::debug!(client, error = %e, "client write failed");
                    return;
                }
            }
        } else {
            queue.push_back(bytes);
        }
        conn.wake_writer.notify_one();
    }
}

impl NodeService {
    /// Binds the fabric listener and the client socket; serving starts at once, peers
    /// become reachable after [`NodeService::start`].
    pub async fn bind(cfg: ServiceConfig) -> std::io::Result<NodeService> {
        std::fs::create_dir_all(&cfg.socket_dir)?;
        std::fs::set_permissions(&cfg.socket_dir, std::fs::Permissions::from_mode(0o700))?;
        let socket_path = cfg.socket_dir.join("cohortd.sock");
        let _ = std::fs::remove_file(&socket_path);
        let listener = UnixListener::bind(&socket_path)?;

        let kind = FabricKind::from_env().map_err(std::io::Error::other)?;
        let spinner = Spinner::new(cfg.spin);
        let mut fabric_cfg = FabricConfig::new(cfg.node, cfg.fabric_listen, cfg.job_secret.clone());
        fabric_cfg.verbs = cfg.verbs.clone();
        fabric_cfg.spinner = Some(spinner.clone());
        // With the failure detector, a connection whose data goes unanswered for a peer
        // timeout breaks, and is reported to the launcher as unreachable (see
        // `Shared::on_fabric_loss`): TCP would retransmit for many minutes.
        fabric_cfg.stall_timeout = cfg.detector.map(|d| d.timeout);
        // Everything here runs in one LocalSet (see the module docs).
        fabric_cfg.local_tasks = true;
        // Fabric events are handled by the fabric's reading task itself, through this
        // thread's entry for the service (see `SERVICES`).
        let id = NEXT_SERVICE.fetch_add(1, Ordering::Relaxed);
        let drain = inbox::register(&SERVICES, id);
        let handler = Arc::new(move |ev| on_fabric_event(id, ev));
        let fabric = match AnyFabric::bind_handler(kind, fabric_cfg, handler).await {
            Ok(f) => f,
            Err(e) => {
                inbox::unregister(&SERVICES, id);
                return Err(e);
            }
        };
        let fabric_addr = fabric.local_addr();

        // The radix comes from the cost model with its default α/β (the transport does
        // not measure them yet) for the job's node count.
        let tree_shape = default_shape(cfg.job.num_nodes as usize);
        tracing::debug!(
            nodes = cfg.job.num_nodes,
            shape = %tree_shape,
            allgather = %cfg.allgather,
            hierarchical = cfg.switches.is_some(),
            "collective trees"
        );
        let engine = Engine::new(EngineConfig {
            node: cfg.node,
            job: cfg.job.clone(),
            tree_shape,
            switches: cfg.switches.clone(),
            allgather: cfg.allgather,
        });
        let timer = Rc::new(Notify::new());
        // One node: whole-job fences meet in shared memory (cohort_proto::shm_fence).
        let fence_shm = if cfg.job.num_nodes == 1 && cfg.shm_fence {
            let path = cfg.socket_dir.join(shm_fence::FILE_NAME);
            Some((ShmFence::create(&path, cfg.job.size())?, path))
        } else {
            None
        };
        // SAFETY: getuid cannot fail and has no preconditions.
        let owner_uid = unsafe { libc::getuid() };
        let (reports_tx, reports_rx) = tokio::sync::mpsc::unbounded_channel();
        let shared = Rc::new(RefCell::new(Shared {
            engine,
            fabric: fabric.clone(),
            origin: Instant::now(),
            clients: HashMap::new(),
            next_client: 1,
            client_token: cfg.client_token.clone(),
            owner_uid,
            held: Some(Vec::new()),
            exited_while_connected: HashSet::new(),
            timer: timer.clone(),
            armed: None,
            fence_shm,
            spinner: spinner.clone(),
            detector: None,
            reports: reports_tx,
            unreachable: HashSet::new(),
            surveys: Vec::new(),
            gone: Vec::new(),
            ending: false,
            last_heard: None,
        }));
        let stop = Rc::new(Notify::new());
        tokio::task::spawn_local(accept_loop(listener, shared.clone(), stop.clone()));
        tokio::task::spawn_local(inbox::drain(&SERVICES, id, drain, apply_fabric_event));
        inbox::attach(&SERVICES, id, &shared);
        tokio::task::spawn_local(timer_loop(shared.clone(), timer));
        tokio::task::spawn_local(spinner.run());
        tracing::info!(
            node = cfg.node,
            fabric = %fabric_addr,
            socket = %socket_path.display(),
            "node service listening"
        );
        Ok(NodeService {
            id,
            shared,
            fabric,
            fabric_addr,
            socket_path,
            node: cfg.node,
            stop,
            detector: cfg.detector,
            reports: RefCell::new(Some(reports_rx)),
        })
    }

    /// What this server tells the launcher about its peers, as it happens (once;
    /// `None` the second time): `PeerSilent` and `FabricLost` are accusations for the
    /// launcher to judge, not yet losses (this server may be the one cut off), and
    /// `Reached` answers a survey ([`NodeService::survey`]).
    pub fn reports(&self) -> Option<tokio::sync::mpsc::UnboundedReceiver<DaemonMsg>> {
        self.reports.borrow_mut().take()
    }

    /// The launcher asks which node servers this one reaches (after one found another
    /// unreachable): every other one not lost but `except` is pinged over the fabric,
    /// and `DaemonMsg::Reached` `token` answers once all answered or `within` passed.
    pub fn survey(&self, token: u64, except: NodeId, within: Duration) {
        let mut s = self.shared.borrow_mut();
        let now = s.now();
        let lost: HashSet<NodeId> = s.engine.lost_nodes().collect();
        let waiting: Vec<NodeId> = (0..s.engine.job().num_nodes)
            .filter(|&n| n != self.node && n != except && !lost.contains(&n))
            .filter(|n| !s.unreachable.contains(n))
            .collect();
        tracing::info!(
            token,
            ?waiting,
            "surveying the node servers this one reaches"
        );
        let ping = Bytes::from(frame::encode_body(&PeerMsg::Ping { token }));
        for &n in &waiting {
            s.send_peer(n, ping.clone());
        }
        let survey = Survey {
            token,
            deadline: now + within,
            waiting,
            reached: Vec::new(),
        };
        if survey.waiting.is_empty() {
            s.answer_survey(survey);
        } else {
            s.surveys.push(survey);
        }
        s.flush();
    }

    pub fn fabric_addr(&self) -> String {
        self.fabric_addr.clone()
    }

    pub fn socket_path(&self) -> PathBuf {
        self.socket_path.clone()
    }

    pub fn node(&self) -> NodeId {
        self.node
    }

    /// Every node server's fabric address is known (index = node id): start talking.
    pub fn start(&self, peers: Vec<String>) {
        self.fabric.set_peers(peers);
        let mut s = self.shared.borrow_mut();
        let held = s.held.take().unwrap_or_default();
        for (node, bytes) in held {
            if let Err(e) = self.fabric.send(node, bytes) {
                tracing::warn!(peer = node, error = %e, "fabric send failed");
            }
        }
        if let Some(cfg) = self.detector {
            let now = s.now();
            let nodes = s.engine.job().num_nodes;
            let mut detector = Detector::new(self.node, nodes, cfg, now);
            for node in s.engine.lost_nodes() {
                detector.unreachable(node, now);
            }
            s.detector = Some(detector);
            s.detect(now);
            s.flush();
        }
    }

    /// How long this server has heard from no other node server (`None`: never heard
    /// from one). One the network cut off hears nobody: see the launcher's `Tribunal`.
    pub fn unheard(&self) -> Option<Duration> {
        let s = self.shared.borrow();
        s.last_heard.map(|t| s.now().saturating_sub(t))
    }

    /// The launcher says the job is ending: every node server is about to be shut
    /// down, so from now on a peer that goes away has left with the job. Its loss is
    /// not reported (nor told to the other servers, nor routed around: no operation of
    /// the job is left to need it), the failure detector stops, the fabric logs such
    /// losses at debug level, and the news of local processes that ended cleanly is
    /// no longer sent (`cohort_core::engine::CLEAN_END_NOTICE_DELAY`). Without this, a server told to shut down a moment
    /// before another made that one log the departure as a failure (and tell every
    /// other server, over connections made for it).
    pub fn job_ending(&self) {
        let mut s = self.shared.borrow_mut();
        s.ending = true;
        s.detector = None;
        s.gone.clear();
        s.fabric.expect_departures();
        s.engine.job_ending();
    }

    /// The launcher dropped this server's report of `node`: watch it again.
    pub fn keep_watching(&self, node: NodeId) {
        let mut s = self.shared.borrow_mut();
        let now = s.now();
        if let Some(d) = s.detector.as_mut() {
            d.watch_again(node, now);
        }
        s.flush();
    }

    /// The launcher says node server `node` is lost: it killed it (found silent, or
    /// one end of a broken link). Its connections are dropped at once: what it sends
    /// until it dies must not count.
    pub fn peer_lost(&self, node: NodeId) {
        let mut s = self.shared.borrow_mut();
        let now = s.now();
        s.lose(node, "the launcher declared it", now);
        s.flush();
    }

    /// The launcher says node server `node`'s process ended (or its control connection
    /// closed, so it ends). If this server awaits a verdict about it, it is lost now.
    /// Otherwise its fabric should report it within `grace` (its kernel closed its
    /// connections), after everything it sent before: waiting for that keeps its last
    /// messages, which dropping its connections now would lose. If not reported by
    /// then (no connection to it, or its host is gone), it is lost then.
    pub fn peer_gone(&self, node: NodeId, grace: Duration) {
        let mut s = self.shared.borrow_mut();
        let now = s.now();
        if s.engine.lost_nodes().any(|n| n == node) {
            return;
        }
        if s.unreachable.contains(&node) {
            s.lose(node, "gone, by the launcher's word", now);
        } else {
            s.gone.push((node, now + grace));
        }
        s.flush();
    }

    /// The launcher's data store answered call `token` (`LauncherMsg::DataReply`).
    pub fn data_answer(
        &self,
        token: u64,
        result: Result<cohort_proto::msg::Response, cohort_proto::CohortError>,
    ) {
        let mut s = self.shared.borrow_mut();
        s.engine.on_data_answer(token, result);
        s.flush();
    }

    /// This host's topology (hwloc XML), which local processes may read
    /// (`cohort_proto::keys::HWLOC_XML`).
    pub fn set_local_topology(&self, xml: Option<String>) {
        self.shared.borrow_mut().engine.set_local_topology(xml);
    }

    /// Where job `nspace`'s bound processes on this node sit (`Engine::set_local_bindings`).
    pub fn set_local_bindings(&self, nspace: &str, bindings: Vec<LocalBinding>) {
        self.shared
            .borrow_mut()
            .engine
            .set_local_bindings(nspace, bindings);
    }

    /// The session's universe size (`LauncherMsg::Start`), before any client connects.
    pub fn set_universe(&self, universe: u32) {
        self.shared.borrow_mut().engine.set_universe(universe);
    }

    /// Job `index` of the session (spawned by `parent`) exists from now on
    /// (`LauncherMsg::AddJob`); refused unless it is the next one and well formed.
    pub fn add_job(&self, index: u32, job: JobMap, parent: ProcId) -> Result<(), String> {
        let mut s = self.shared.borrow_mut();
        s.engine.add_job(index, job, parent)
    }

    /// This node server started its processes of spawned job `index`
    /// (`LauncherMsg::StartJob`): the job's process sets are defined.
    pub fn job_started(&self, index: u32) {
        let mut s = self.shared.borrow_mut();
        s.engine.on_job_started(index);
        s.flush();
    }

    /// Spawned job `index` ended, or was cancelled (`LauncherMsg::JobGone`,
    /// `LauncherMsg::CancelJob`): its process sets are deleted.
    pub fn job_gone(&self, index: u32) {
        let mut s = self.shared.borrow_mut();
        s.engine.on_job_gone(index);
        s.flush();
    }

    /// Every process of spawned job `index` ended (`LauncherMsg::JobEnded`).
    pub fn job_ended(&self, index: u32, parent: ProcId, exit_code: i32) {
        let mut s = self.shared.borrow_mut();
        s.engine.on_job_ended(index, parent, exit_code);
        s.flush();
    }

    /// A local process of job `job` (0: the launched one) ended (normally or not).
    pub fn proc_exited(&self, job: u32, rank: Rank) {
        let mut s = self.shared.borrow_mut();
        let Some(nspace) = s.engine.session().get(job).map(|j| j.nspace.clone()) else {
            return;
        };
        let proc = ProcId::new(nspace, rank);
        let connected = s.clients.values().any(|c| c.proc.as_ref() == Some(&proc));
        if connected {
            s.exited_while_connected.insert(proc);
            return;
        }
        let now = s.now();
        s.engine.on_proc_exited(proc.clone(), now);
        s.note_exit(&proc);
        s.flush();
    }

    /// Graceful end: say goodbye to peers, close the client socket, remove it.
    pub async fn shutdown(&self) {
        self.stop.notify_one();
        self.fabric.shutdown().await;
        let _ = std::fs::remove_file(&self.socket_path);
        if let Some((_, path)) = &self.shared.borrow().fence_shm {
            let _ = std::fs::remove_file(path);
        }
    }
}

async fn accept_loop(listener: UnixListener, shared: Rc<RefCell<Shared>>, stop: Rc<Notify>) {
    loop {
        let accepted = tokio::select! {
            r = listener.accept() => r,
            _ = stop.notified() => return,
        };
        match accepted {
            Ok((stream, _)) => {
                tokio::task::spawn_local(serve_client(stream, shared.clone()));
            }
            Err(e) => {
                tracing::warn!(error = %e, "accept on the client socket failed");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }
}

/// Checks peer credentials and the hello; returns the admitted proc.
async fn authenticate(
    cred: std::io::Result<tokio::net::unix::UCred>,
    reader: &mut BufReader<OwnedReadHalf>,
    shared: &Rc<RefCell<Shared>>,
) -> Result<Hello, CohortError> {
    let cred =
        cred.map_err(|e| CohortError::AuthRefused(format!("cannot read peer credentials: {e}")))?;
    let owner = shared.borrow().owner_uid;
    if cred.uid() != owner {
        return Err(CohortError::AuthRefused(format!(
            "peer uid {} (pid {:?}) is not the job owner uid {owner}",
            cred.uid(),
            cred.pid()
        )));
    }
    let hello: Hello =
        tokio::time::timeout(HELLO_TIMEOUT, frame::read_frame_async(reader, MAX_HELLO))
            .await
            .map_err(|_| CohortError::AuthRefused("no hello within the timeout".into()))??
            .ok_or_else(|| CohortError::AuthRefused("closed before hello".into()))?;
    if hello.version != PROTOCOL_VERSION {
        return Err(CohortError::AuthRefused(format!(
            "protocol version {} is not {PROTOCOL_VERSION}",
            hello.version
        )));
    }
    let token_ok = cohort_proto::env::secrets_equal(&hello.token, &shared.borrow().client_token);
    if !token_ok {
        return Err(CohortError::AuthRefused(format!(
            "wrong job token from {}:{} (pid {:?})",
            hello.nspace,
            hello.rank,
            cred.pid()
        )));
    }
    Ok(hello)
}

async fn serve_client(stream: UnixStream, shared: Rc<RefCell<Shared>>) {
    let cred = stream.peer_cred();
    let (read, write) = stream.into_split();
    let mut reader = BufReader::with_capacity(64 << 10, read);
    let write = Rc::new(write);
    let client = {
        let mut s = shared.borrow_mut();
        let id = s.next_client;
        s.next_client += 1;
        id
    };
    let queue = Rc::new(RefCell::new(VecDeque::new()));
    let wake_writer = Rc::new(Notify::new());
    shared.borrow_mut().clients.insert(
        client,
        ClientConn {
            proc: None,
            write: write.clone(),
            queue: queue.clone(),
            wake_writer: wake_writer.clone(),
        },
    );
    let writer = tokio::task::spawn_local(writer_loop(write.clone(), queue, wake_writer));

    let hello = authenticate(cred, &mut reader, &shared).await;
    let admitted = hello.and_then(|h| {
        let proc = ProcId::new(h.nspace, h.rank);
        let mut s = shared.borrow_mut();
        s.engine.on_client_connected(client, proc.clone())?;
        // The process's own job (a spawned one's, for a process it spawned).
        let job = s.engine.session().job_of(&proc.nspace).cloned();
        let job = job.unwrap_or_else(|| s.engine.job().clone());
        let primary = job.nspace == s.engine.job().nspace;
        let node = s.engine.node();
        let node_name = job
            .node_names
            .get(node as usize)
            .cloned()
            .unwrap_or_default();
        // The node-local fence segment is the launched job's.
        let fence_shm = s
            .fence_shm
            .as_ref()
            .filter(|_| primary)
            .map(|(_, path)| path.display().to_string());
        let universe = s.engine.universe();
        let local_bindings = s.engine.local_bindings(&job.nspace);
        s.send_client(
            client,
            &ServerFrame::Welcome(Ok(Welcome {
                job,
                node,
                node_name,
                fence_shm,
                universe,
                local_bindings,
            })),
        );
        if let Some(c) = s.clients.get_mut(&client) {
            c.proc = Some(proc.clone());
        }
        s.flush();
        Ok(proc)
    });
    let proc = match admitted {
        Ok(p) => p,
        Err(e) => {
            tracing::warn!(client, error = %e, "client connection refused");
            let bytes = frame::encode(&ServerFrame::Welcome(Err(e)));
            let _ = write.try_write(&bytes);
            shared.borrow_mut().clients.remove(&client);
            writer.abort();
            return;
        }
    };
    tracing::debug!(client, %proc, "client admitted");

    loop {
        match frame::read_frame_async::<_, ClientFrame>(&mut reader, MAX_CLIENT_FRAME).await {
            Ok(Some(f)) => {
                let mut s = shared.borrow_mut();
                let now = s.now();
                s.engine.on_client_request(client, f.id, f.req, now);
                s.flush();
                s.spinner.input();
            }
            Ok(None) => break,
            Err(CohortError::Io(e)) => {
                tracing::debug!(client, %proc, error = %e, "client connection ended");
                break;
            }
            Err(e) => {
                tracing::warn!(client, %proc, error = %e, "closing client connection after a bad frame");
                break;
            }
        }
    }
    let mut s = shared.borrow_mut();
    let now = s.now();
    s.engine.on_client_disconnected(client, now);
    s.clients.remove(&client);
    if s.exited_while_connected.remove(&proc) {
        s.engine.on_proc_exited(proc.clone(), now);
    }
    s.note_exit(&proc);
    s.flush();
    writer.abort();
}

async fn writer_loop(
    write: Rc<OwnedWriteHalf>,
    queue: Rc<RefCell<VecDeque<Bytes>>>,
    wake: Rc<Notify>,
) {
    loop {
        wake.notified().await;
        loop {
            let front = queue.borrow().front().cloned();
            let Some(buf) = front else { break };
            if write.writable().await.is_err() {
                return;
            }
            match write.try_write(&buf) {
                Ok(n) => {
                    let mut q = queue.borrow_mut();
                    if n == buf.len() {
                        q.pop_front();
                    } else if let Some(f) = q.front_mut() {
                        *f = buf.slice(n..);
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(_) => return,
            }
        }
    }
}

impl Drop for NodeService {
    fn drop(&mut self) {
        inbox::unregister(&SERVICES, self.id);
    }
}

thread_local! {
    /// This thread's node services, for their fabric handlers (see [`crate::inbox`]).
    /// `cohortd` runs one; tests may run several per thread.
    static SERVICES: inbox::Table<Shared> = RefCell::new(HashMap::new());
}

static NEXT_SERVICE: AtomicU64 = AtomicU64::new(0);

/// The fabric's handler for service `id`.
fn on_fabric_event(id: u64, ev: FabricEvent) {
    if !inbox::deliver(&SERVICES, id, ev, apply_fabric_event) {
        tracing::error!(
            service = id,
            "fabric event for a node service that is gone or on another thread; dropped"
        );
    }
}

/// One fabric event through the engine, and its actions out.
fn apply_fabric_event(s: &mut Shared, ev: FabricEvent) {
    let now = s.now();
    match ev {
        FabricEvent::Message { from, payload } => match frame::decode_body::<PeerMsg>(&payload) {
            Ok(msg) => {
                if from != s.engine.node() {
                    s.last_heard = Some(now);
                }
                if let Some(d) = s.detector.as_mut() {
                    d.heard(from, now);
                    match &msg {
                        PeerMsg::Heartbeat => return,
                        PeerMsg::NodeLost { node } => d.unreachable(*node, now),
                        _ => {}
                    }
                }
                match msg {
                    PeerMsg::Ping { token } => {
                        let pong = PeerMsg::Pong { token };
                        s.send_peer(from, Bytes::from(frame::encode_body(&pong)));
                    }
                    PeerMsg::Pong { token } => s.pong(from, token),
                    msg => s.engine.on_peer(from, msg, now),
                }
            }
            Err(e) => {
                tracing::error!(peer = from, error = %e, "dropping a malformed fabric message")
            }
        },
        FabricEvent::PeerLost {
            peer,
            reason,
            unreachable,
        } => s.on_fabric_loss(peer, reason, unreachable, now),
    }
    s.flush();
}

async fn timer_loop(shared: Rc<RefCell<Shared>>, wake: Rc<Notify>) {
    loop {
        let (deadline, origin) = {
            let s = shared.borrow();
            (s.armed, s.origin)
        };
        match deadline {
            Some(d) => {
                tokio::select! {
                    _ = tokio::time::sleep_until((origin + d).into()) => {
                        let mut s = shared.borrow_mut();
                        s.armed = None;
                        let now = s.now();
                        s.engine.on_timer(now);
                        s.detect(now);
                        s.flush();
                        // flush() re-armed for the next deadline, if any
                    }
                    _ = wake.notified() => {}
                }
            }
            None => wake.notified().await,
        }
    }
}

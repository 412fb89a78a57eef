//! The node server's decision logic, without I/O.
//!
//! Inputs: authenticated client requests, fabric messages from peer node servers,
//! process exits and timer ticks. Outputs: [`Action`]s (frames to clients, messages to
//! peers) drained with [`Engine::take_actions`]. The node server (and the simulator)
//! drive it; nothing in here touches a socket or a clock.
//!
//! Every collective (fence, group construct, group destruct) runs the same way: local
//! participants contribute to their node server; each server forwards its subtree's
//! aggregate to its parent in the operation's [`Tree`] once every expected process of
//! the subtree has contributed or is known to be gone; the root decides the outcome
//! and broadcasts it down. Completion is accounted per *process*, not per server, so a
//! server whose processes all died before calling never stalls its ancestors.
//!
//! Fences and collective-method constructs may instead gather by a dissemination
//! allgather among their servers (`EngineConfig::allgather`, see `engine/gather.rs`):
//! only the data movement changes; the root still decides, and every failure path
//! (timeouts, probes, aborts, lost servers) is the tree collective's.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use crate::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use cohort_proto::event::{codes, keys};
use cohort_proto::ids::fmt_procs;
use cohort_proto::msg::{
    ConnectMode, ConstructDecision, ConstructOpts, ConstructStatus, FenceOpts, GroupResult,
    InviteOpts, LocalBinding, ReqId, Request, Response, ServerFrame,
};
use cohort_proto::peer::{
    AgreeState, CollKey, CollKind, CollOutcome, CollSpec, ContribFlags, Contribution, PeerMsg,
};
use cohort_proto::posted::Posted;
use cohort_proto::value::info_get;
use cohort_proto::{
    validate_group_id, CohortError, ContextId, Event, EventCode, Info, JobMap, JobState, NodeId,
    ProcId, Range, Session, Value,
};
use cohort_topology::{rendezvous, Allgather, Locality, StableHash, SwitchMap, Tree, TreeShape};

use crate::kv::{KvStore, Lookup};

mod gather;
mod invite;
mod publish;
mod recent;
use gather::{Gather, LeanDown};
use invite::{invite_key, InviteTracker};
use recent::Recent;

/// Engine time: a monotonic offset from an arbitrary origin chosen by the driver.
pub type Time = Duration;
/// A client connection, numbered by the driver.
pub type ClientId = u64;

/// How long a participant that asked the root to abort waits for the root's verdict
/// before giving up locally (the root is unreachable).
const ABORT_GRACE: Duration = Duration::from_secs(5);

/// How long a server holds the news that one of its processes ended cleanly (it
/// finalized, and had joined no collective in progress here) before it tells the
/// servers that do not host a member of a group it was in. A failure is told to every
/// server at once, and so is a clean end to the servers of its groups' members (a
/// global failure view, for one, must not wait for a member past finalize). For the
/// others the news can wait: an operation that names the process fails a little
/// later, and at a job's end, where every process ends cleanly at about the same
/// time, the news is dropped when the launcher announces the end
/// ([`Engine::job_ending`]) instead of going to every other server, one message per
/// process and server over connections made for the purpose (with 128 node servers
/// and 256 ranks that doubled the job's time on a 2-core host).
pub const CLEAN_END_NOTICE_DELAY: Duration = Duration::from_millis(500);
/// How long a root waits for probe replies before naming the missing processes from
/// what it has heard.
const PROBE_GRACE: Duration = Duration::from_secs(2);
/// Failed collectives remembered so that a late local participant gets the same error.
const MAX_TOMBSTONES: usize = 1024;
/// Events kept for a local process that has not connected yet.
const MAX_PENDING_EVENTS: usize = 1024;
/// Outcomes an interior server keeps after forwarding them, for children of a lost
/// server that re-send their contributions here.
const KEPT_OUTCOMES: usize = 8;
/// Messages of a later attempt kept per collective until the attempt in progress here
/// ends (a few per peer; more means a confused peer).
const MAX_EARLY_MSGS: usize = 256;

/// A global failure view's contribution carries its server's local view in its group
/// info under this key.
const FAILED_VIEW_KEY: &str = "cohort.failed";

/// The root of fence or agreement `id`#`seq` among the sorted `nodes` of its
/// participants: as `rendezvous(&format!("{id}#{seq}"), …)`, unformatted.
fn salted_root(id: &str, seq: u64, nodes: &[NodeId]) -> Option<NodeId> {
    let salt = StableHash::default()
        .bytes(id.as_bytes())
        .bytes(b"#")
        .decimal(seq);
    nodes.get(salt.pick(nodes.len().max(1))).copied()
}

/// Whether operations of `kind` meet at their group id's rendezvous server
/// (`Engine::rendezvous_node`): constructs and destructs.
fn meets_at_rendezvous(kind: CollKind) -> bool {
    matches!(kind, CollKind::Construct | CollKind::Destruct)
}

/// Whether an operation of `spec` goes on without its lost root when no live server
/// has its outcome, rather than failing (see `Engine::reroot`): a fault-tolerant fence,
/// and a destruct, whose root is the group id's rendezvous, a server of ours that may
/// host none of its members. (A spec goes with its kind of key only.)
fn goes_on_after_root_loss(spec: &CollSpec) -> bool {
    matches!(
        spec,
        CollSpec::Fence {
            tolerate_terminated: true,
            ..
        } | CollSpec::Destruct { .. }
    )
}

/// The key of group `id`'s construct, destruct or invite (one of each at a time).
pub(super) fn group_key(kind: CollKind, id: &str) -> CollKey {
    CollKey {
        kind,
        id: id.to_string(),
        seq: 0,
    }
}

/// Whether operations of `kind` whose root is lost before their outcome reached every
/// server are decided for all by one server (`Engine::ask_about_agreement`): fences,
/// global failure views, constructs and destructs (not invites: their tracker is their
/// first leader's server, whose loss fails them).
fn decided_after_root_loss(kind: CollKind) -> bool {
    kind != CollKind::Invite
}

/// Outcomes of fences kept for a decider that asks after their root's loss (their data
/// is shared with the store, not copied): far more than a server completes in the
/// moments a loss takes to be known.
const SETTLED_FENCES: usize = 256;

/// The local failure view `c` carried (none when it carried none).
fn failed_view_of(c: &Contribution) -> &[ProcId] {
    match info_get(&c.group_info, FAILED_VIEW_KEY) {
        Some(Value::Procs(procs)) => procs,
        _ => &[],
    }
}

/// Something the driver must do.
#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    ToClient {
        client: ClientId,
        frame: ServerFrame,
    },
    ToPeer {
        node: NodeId,
        msg: PeerMsg,
    },
    /// The same `msg` to each of `nodes`, in that order (one message per node): a
    /// driver encodes it once, and a fabric can register its bytes once.
    ToPeers {
        nodes: Vec<NodeId>,
        msg: PeerMsg,
    },
    /// A publish, lookup or unpublish of local process `proc`, for the job's data
    /// store (the launcher's; `crate::datastore`). Its answer comes back through
    /// [`Engine::on_data_answer`] `token`.
    Data {
        token: u64,
        proc: ProcId,
        req: Request,
    },
    /// Local process `proc` is terminated for this server (it exited, or closed its
    /// connection without finalizing), which the data store learns no other way when
    /// the process lives on: its waiting lookups go, and its proc-persistent values.
    DataProcGone {
        proc: ProcId,
    },
}

/// Static configuration of one node server's engine.
#[derive(Clone, Debug)]
pub struct EngineConfig {
    pub node: NodeId,
    pub job: JobMap,
    pub tree_shape: TreeShape,
    /// The cluster's switch map, when known: collective trees are then built switch
    /// leaders first, placing nodes by `job.node_names` (which must be the same on
    /// every node server). `None`: flat trees.
    pub switches: Option<Arc<SwitchMap>>,
    /// How fences and collective-method constructs gather contributions (must be the
    /// same on every node server).
    pub allgather: Allgather,
}

/// A leader list as a local leader sent it, and its canonical expansion.
struct LeadersMemo {
    sent: std::sync::Weak<[ProcId]>,
    leaders: Arc<[ProcId]>,
}

/// A constructed group as this node server knows it.
#[derive(Clone, Debug, PartialEq)]
pub struct Group {
    pub id: String,
    /// Current members, canonical order (group rank = index).
    pub members: Vec<ProcId>,
    /// Membership at construct time (fixes the destruct tree on every server).
    pub original: Arc<[ProcId]>,
    pub context_id: Option<ContextId>,
    pub group_info: BTreeMap<ProcId, Info>,
    pub notify_termination: bool,
    /// Members that declared themselves leader; when any did, failure events go only
    /// to them (PMIX_GROUP_LEADER), otherwise to every member.
    pub designated_leaders: Vec<ProcId>,
    /// A connection made by `PMIx_Connect` (rfc0003): its members depart together
    /// (no leave), and a member's termination is reported or allowed as the mode says.
    pub connect: Option<ConnectMode>,
}

impl Group {
    /// Whether a member's termination raises events to the others (see
    /// `Engine::termination_events`).
    fn reports_termination(&self) -> bool {
        self.notify_termination || self.connect == Some(ConnectMode::Strict)
    }

    /// Whether `p` is a current member (the members are in canonical order).
    fn has(&self, p: &ProcId) -> bool {
        self.members.binary_search(p).is_ok()
    }

    fn result(&self, status: ConstructStatus, failed: Vec<ProcId>) -> GroupResult {
        GroupResult {
            id: self.id.clone(),
            status,
            members: self.members.clone(),
            context_id: self.context_id,
            group_info: self
                .members
                .iter()
                .map(|p| {
                    (
                        p.clone(),
                        self.group_info.get(p).cloned().unwrap_or_default(),
                    )
                })
                .collect(),
            failed,
        }
    }
}

#[derive(Clone, Debug)]
struct Waiter {
    client: ClientId,
    req: ReqId,
    proc: ProcId,
    deadline: Option<Time>,
    timeout_ms: u64,
    abort_sent: bool,
}

/// Failed attempts of one collective key, as far as this server is concerned.
#[derive(Debug, Default)]
struct Attempts {
    /// Failed outcomes this server applied.
    seen: u32,
    /// Failed outcomes this server passed to each peer.
    told: HashMap<NodeId, u32>,
    /// The servers of the failed attempts (each got the failure down the tree): a
    /// message of theirs stamped with fewer failures is a leftover.
    servers: BTreeSet<NodeId>,
    /// The last failure applied here, for a server that missed it (see
    /// [`Engine::answer_stale`]).
    error: Option<CohortError>,
}

#[derive(Debug)]
struct Coll {
    spec: Option<CollSpec>,
    tree: Option<Tree>,
    contribs: BTreeMap<ProcId, Contribution>,
    /// Root only: add-members that joined directly.
    joins: BTreeMap<ProcId, Contribution>,
    /// Root only: servers that sent joins or aborts (they get the outcome directly).
    direct_nodes: BTreeSet<NodeId>,
    excused: BTreeSet<ProcId>,
    waiters: Vec<Waiter>,
    sent_up: bool,
    /// Where the contributions went up (the tree parent, or the nearest live ancestor).
    sent_to: Option<NodeId>,
    /// A doomed-operation abort was already sent to the root.
    doomed_sent: bool,
    /// Non-root: how many processes of the spec's list this server's subtree hosts
    /// (counted once, when first needed).
    subtree_expected: std::cell::Cell<Option<usize>>,
    /// Root only: a timeout is ending the operation; collecting who joined where.
    probe: Option<Probe>,
    /// Root only: processes that failed before joining and that a decision dropped.
    dropped: BTreeSet<ProcId>,
    /// Root only: failures already reported by a member-failed event.
    failure_reported: BTreeSet<ProcId>,
    /// Root only: a leader-failed event went out for the current leader.
    leader_failure_reported: bool,
    /// Root only: who won a leadership claim after the designated leader failed.
    claimed_leader: Option<ProcId>,
    /// Dissemination allgather state (`None`: the tree collective).
    gather: Option<Gather>,
    /// Dissemination only. Root: a server re-sent its contributions directly (a server
    /// of the operation was lost), so the outcome goes down whole. Others: this server
    /// did so.
    fallback: bool,
    /// Dissemination only: a lean outcome waiting for this server's last rounds.
    lean: Option<LeanDown>,
    /// The attempt of the key this tracker belongs to (failed attempts seen by whoever
    /// started it here). Messages of a later attempt wait until it ends.
    attempt: u32,
    /// A fault-tolerant fence or a destruct whose root was lost with the outcome
    /// nowhere: it goes on at its decider, the root of its tree now (see
    /// [`Engine::reroot`]).
    rerooted: bool,
    /// A waiter here timed out (its timeout): the root was asked to end the operation.
    /// A root that is lost before it did is asked again where the operation goes on.
    timed_out: Option<u64>,
    started: Time,
}

impl Coll {
    /// The server an operation went on at after its root's loss (see
    /// `Engine::reroot`), if it did.
    fn rerooted_at(&self) -> Option<NodeId> {
        self.tree.as_ref().filter(|_| self.rerooted).map(Tree::root)
    }

    /// Whether an outcome from `from` to `node` may be a late copy of the lost root's,
    /// for an operation that went on elsewhere: `from` is lost (`lost`), or not above
    /// `node` in the tree the operation goes on in. (Servers that lacked the outcome
    /// drop a late copy, so only the lost root itself can still deliver one; it may be
    /// above `node` in the new tree, a destruct's, which keeps lost servers in place.)
    fn outcome_of_lost_root(&self, from: NodeId, node: NodeId, lost: bool) -> bool {
        let Some(tree) = self.tree.as_ref().filter(|_| self.rerooted) else {
            return false;
        };
        if lost {
            return true;
        }
        let mut at = node;
        while let Some(parent) = tree.parent(at) {
            if parent == from {
                return false;
            }
            at = parent;
        }
        true
    }

    fn new(now: Time) -> Coll {
        Coll {
            spec: None,
            tree: None,
            contribs: BTreeMap::new(),
            joins: BTreeMap::new(),
            direct_nodes: BTreeSet::new(),
            excused: BTreeSet::new(),
            waiters: Vec::new(),
            sent_up: false,
            sent_to: None,
            doomed_sent: false,
            subtree_expected: std::cell::Cell::new(None),
            probe: None,
            dropped: BTreeSet::new(),
            failure_reported: BTreeSet::new(),
            leader_failure_reported: false,
            claimed_leader: None,
            gather: None,
            fallback: false,
            lean: None,
            attempt: 0,
            rerooted: false,
            timed_out: None,
            started: now,
        }
    }
}

#[derive(Debug)]
enum AckKind {
    Decide,
    /// A join of invite `id`; its waiter is in the invite's tracker entry.
    Join(String),
}

#[derive(Debug)]
struct AckWaiter {
    client: ClientId,
    req: ReqId,
    kind: AckKind,
    /// The server that answers: if it is lost, the request fails at once.
    peer: NodeId,
}

#[derive(Debug)]
struct Probe {
    op: String,
    timeout_ms: u64,
    waiting: BTreeSet<NodeId>,
    joined: BTreeSet<ProcId>,
    deadline: Time,
}

#[derive(Debug)]
struct PendingGet {
    client: ClientId,
    req: ReqId,
    reader: ProcId,
    owner: ProcId,
    key: String,
    deadline: Option<Time>,
    timeout_ms: u64,
    fetched: bool,
    /// Commits of `owner` to wait for first (a node-local fence's published count).
    after_commits: u64,
}

#[derive(Debug)]
struct ModexWait {
    from: NodeId,
    req: u64,
    proc: ProcId,
    deadline: Option<Time>,
    timeout_ms: u64,
}

/// The node server's sans-IO core.
pub struct Engine {
    node: NodeId,
    /// The session's jobs: the launched one and those spawned since.
    jobs: Session,
    /// The session's universe size (PMIX_UNIV_SIZE; [`Engine::set_universe`]).
    universe: u32,
    /// This host's topology as hwloc XML ([`Engine::set_local_topology`]).
    local_topology: Option<String>,
    /// Where this node's bound processes sit ([`Engine::set_local_bindings`]).
    local_bindings: HashMap<ProcId, LocalBinding>,
    /// Groups constructed with PMIX_GROUP_LOCAL_ONLY (all members here): their
    /// rendezvous is this node server, until they are destructed or fail to form.
    local_groups: HashSet<String>,
    shape: TreeShape,
    allgather: Allgather,
    /// The job's nodes on the switch map (from `EngineConfig::switches`).
    locality: Option<Locality>,
    all_nodes: Vec<NodeId>,
    /// The leader list a local leader of a collective construct sent last (as decoded:
    /// equal lists from this server's leaders are one allocation) and its canonical
    /// expansion, when it names only ranks of the job: R local leaders of a construct
    /// cost one expansion, not R.
    leaders_memo: Option<LeadersMemo>,

    clients: HashMap<ClientId, ProcId>,
    proc_clients: HashMap<ProcId, ClientId>,
    finalized: HashSet<ProcId>,
    terminated: HashSet<ProcId>,
    /// Terminated processes that finalized first (told by their host): ended, not
    /// failed, so no failure view counts them.
    finished: HashSet<ProcId>,
    /// Collectives a terminated process had joined at its host before it died.
    joined_before_death: HashMap<ProcId, HashSet<CollKey>>,
    /// Local processes that ended cleanly, not yet told to every other server: when to
    /// tell the rest, and the servers already told (see [`CLEAN_END_NOTICE_DELAY`]).
    clean_ends: Vec<(ProcId, Time, BTreeSet<NodeId>)>,
    pending_events: HashMap<ProcId, VecDeque<Event>>,

    /// Every process of the job, sorted, and its [`signature`]: what a fence over the
    /// whole job waits for, shared by all of them.
    whole_job: Arc<[ProcId]>,
    whole_job_sig: String,
    kv: KvStore,
    /// Commit frames received from each local process (see `Request::Get`'s
    /// `after_commits`).
    commits: HashMap<ProcId, u64>,
    gets: Vec<PendingGet>,
    modex_waits: Vec<ModexWait>,
    modex_inflight: HashMap<ProcId, u64>,
    next_modex: u64,

    colls: HashMap<CollKey, Coll>,
    /// Failed collectives: the error, and the local participants that had not called
    /// yet. When one of them calls, it gets the same error instead of starting a new
    /// attempt alone.
    tombstones: Recent<CollKey, (CohortError, BTreeSet<ProcId>)>,
    /// Root only: operations this server completed successfully, most recent last. An
    /// abort for one of them is stale: it comes from a server that saw a participant
    /// exit after the outcome but before the outcome reached it.
    recently_done: Recent<CollKey, ()>,
    /// Global failure views ended here: the view, or `None` when it was decided that
    /// nobody had it (after its root was lost). For the deciders that ask after a
    /// root was lost (see [`Engine::ask_about_agreement`]).
    agree_done: Recent<CollKey, Option<CollOutcome>>,
    /// Global failure views whose root was lost before their outcome arrived here: the
    /// decider asked (this server itself when it decides).
    agree_asking: HashMap<CollKey, NodeId>,
    /// Global failure views this server decides: the servers still to answer its poll.
    agree_polling: HashMap<CollKey, BTreeSet<NodeId>>,
    /// Servers waiting for this server's decision on a view.
    agree_waiting: Vec<(NodeId, CollKey)>,
    /// Queries and polls (`true`) about views that this server cannot answer yet: it
    /// does not know the root, or a server before the decider, to be lost.
    agree_questions: Vec<(NodeId, CollKey, bool)>,
    /// Views this server told a decider it lacks: their outcome is dropped if it still
    /// arrives from the lost root's tree.
    agree_bound: Recent<CollKey, ()>,
    /// Fences, constructs and destructs this server decides after their root's loss:
    /// the spec an asker gave (see `PeerMsg::AgreeQuery`).
    agree_specs: HashMap<CollKey, CollSpec>,
    /// Constructs and destructs that succeeded here (applied, or decided here after
    /// their root was lost): the outcome, for a decider that asks after a root's loss
    /// (see [`Engine::ask_about_agreement`]). A construct's goes when the group's
    /// destruct succeeds here; a destruct's when a construct of the id starts here.
    settled: Recent<CollKey, CollOutcome>,
    /// Fences that succeeded here, likewise ([`SETTLED_FENCES`]).
    settled_fences: Recent<CollKey, CollOutcome>,
    /// Dissemination allgathers this server completed after a fallback (a server of
    /// the operation was lost), with a lean copy of the outcome possibly still on its
    /// way: it is dropped, until the key is used again here.
    fallback_done: Recent<CollKey, ()>,
    /// Dissemination allgathers that completed here before every round came in: the
    /// rounds still owed, by sender (see `Engine::gather_owed`).
    owed_rounds: Recent<CollKey, Vec<(NodeId, u8)>>,
    /// Messages of a later attempt of a collective than the one in progress here,
    /// handled once that one ends (see `handle_peer`).
    early_msgs: HashMap<CollKey, Vec<(NodeId, PeerMsg)>>,
    /// Calls of processes whose previous call of the same collective gave up waiting
    /// for the root (abort grace) while that attempt is still open here: they start the
    /// next attempt once it ends.
    parked: Vec<(CollKey, CollSpec, Contribution, Waiter)>,
    fence_seq: HashMap<(ProcId, String), u64>,
    /// Each member's next global failure view of a group, by group id (the key's seq).
    agree_seq: HashMap<(ProcId, String), u64>,

    groups: HashMap<String, Group>,
    retired: HashMap<String, Group>,
    departed: HashMap<String, BTreeSet<ProcId>>,
    /// Authority for group ids whose rendezvous is this server: id → current members.
    live_roots: HashMap<String, Vec<ProcId>>,
    next_ctx: u64,

    /// Invite/join constructs tracked here (this server hosts their first leader).
    invites: HashMap<String, InviteTracker>,
    /// Where the tracker of an invite this server's processes joined lives.
    invite_homes: HashMap<String, NodeId>,
    /// Requests waiting for a peer's `Ack` (decisions; joins, in case they are refused).
    acks: HashMap<u64, AckWaiter>,
    next_token: u64,

    /// Node servers known to be lost (this server's fabric reported them, or another
    /// server did with `NodeLost`). Trees route around them.
    lost_nodes: BTreeSet<NodeId>,
    /// (peer, lost): `peer` told this server of `lost`'s loss (`NodeLost`, on their
    /// link, which keeps order): what `peer` sent after it, it sent knowing. A group
    /// id's rendezvous that passes over a lost server is used only with peers known to
    /// know of it (see [`Engine::behind_on`]).
    heard_lost: HashSet<(NodeId, NodeId)>,
    /// Interior servers: the latest outcomes they forwarded (key, spec, outcome).
    kept_outcomes: VecDeque<(CollKey, Option<CollSpec>, CollOutcome)>,
    /// Failed attempts per collective key: how many this server applied, and how many
    /// it told each peer of (bounded, oldest keys forgotten first). See `stale`.
    attempts: Recent<CollKey, Attempts>,

    /// This server's processes' data store calls waiting for its answer, by token.
    data_waits: HashMap<u64, publish::DataWait>,
    next_data_token: u64,

    actions: Vec<Action>,
    self_inbox: VecDeque<PeerMsg>,
}

impl Engine {
    pub fn new(cfg: EngineConfig) -> Engine {
        let all_nodes = (0..cfg.job.num_nodes).collect();
        let locality = cfg
            .switches
            .as_deref()
            .map(|map| Locality::new(map, &cfg.job.node_names));
        // Registered: fence messages over the whole job then carry it without a walk
        // to encode or a copy of every process to decode.
        let whole_job = cohort_proto::procset::shared::whole_namespace(cfg.job.all_procs().into());
        let whole_job_sig = signature(&whole_job);
        Engine {
            node: cfg.node,
            universe: cfg.job.size(),
            local_topology: None,
            local_bindings: HashMap::default(),
            local_groups: HashSet::default(),
            jobs: Session::new(cfg.job),
            whole_job,
            whole_job_sig,
            shape: cfg.tree_shape,
            allgather: cfg.allgather,
            locality,
            all_nodes,
            clients: HashMap::default(),
            proc_clients: HashMap::default(),
            finalized: HashSet::default(),
            finished: HashSet::default(),
            clean_ends: Vec::new(),
            terminated: HashSet::default(),
            joined_before_death: HashMap::default(),
            pending_events: HashMap::default(),
            kv: KvStore::default(),
            commits: HashMap::default(),
            gets: Vec::new(),
            modex_waits: Vec::new(),
            modex_inflight: HashMap::default(),
            next_modex: 1,
            colls: HashMap::default(),
            tombstones: Recent::new(MAX_TOMBSTONES),
            recently_done: Recent::new(MAX_TOMBSTONES),
            agree_done: Recent::new(MAX_TOMBSTONES),
            agree_asking: HashMap::default(),
            agree_polling: HashMap::default(),
            agree_waiting: Vec::new(),
            agree_questions: Vec::new(),
            agree_bound: Recent::new(MAX_TOMBSTONES),
            settled: Recent::new(MAX_TOMBSTONES),
            agree_specs: HashMap::default(),
            settled_fences: Recent::new(SETTLED_FENCES),
            leaders_memo: None,
            fallback_done: Recent::new(MAX_TOMBSTONES),
            owed_rounds: Recent::new(MAX_TOMBSTONES),
            early_msgs: HashMap::default(),
            parked: Vec::new(),
            fence_seq: HashMap::default(),
            agree_seq: HashMap::default(),
            groups: HashMap::default(),
            retired: HashMap::default(),
            departed: HashMap::default(),
            live_roots: HashMap::default(),
            next_ctx: 1,
            invites: HashMap::default(),
            invite_homes: HashMap::default(),
            acks: HashMap::default(),
            next_token: 1,
            lost_nodes: BTreeSet::new(),
            heard_lost: HashSet::default(),
            kept_outcomes: VecDeque::new(),
            attempts: Recent::new(MAX_TOMBSTONES),
            data_waits: HashMap::default(),
            next_data_token: 1,
            actions: Vec::new(),
            self_inbox: VecDeque::new(),
        }
    }

    pub fn node(&self) -> NodeId {
        self.node
    }

    /// The launched job.
    pub fn job(&self) -> &JobMap {
        self.jobs.primary()
    }

    /// The session's jobs, spawned ones included.
    pub fn session(&self) -> &Session {
        &self.jobs
    }

    /// The session's universe size, as the launcher counted it (never below the
    /// launched job's size).
    pub fn set_universe(&mut self, universe: u32) {
        self.universe = universe.max(self.jobs.primary().size());
    }

    pub fn universe(&self) -> u32 {
        self.universe
    }

    /// This host's topology as hwloc exported it (XML): the value of
    /// [`keys::HWLOC_XML`] for this node's processes and any job's wildcard, so that
    /// they need not discover the host again (Open MPI does, tens of milliseconds of
    /// every process's start, when no one gives it the topology).
    pub fn set_local_topology(&mut self, xml: Option<String>) {
        self.local_topology = xml;
    }

    /// Where the bound processes of job `nspace` on this node sit (the others are
    /// unbound): their [`keys::CPUSET`] and [`keys::LOCALITY_STRING`], and what
    /// [`Engine::local_bindings`] gives the job's processes when they connect.
    pub fn set_local_bindings(&mut self, nspace: &str, bindings: Vec<LocalBinding>) {
        self.local_bindings.retain(|p, _| p.nspace != nspace);
        for b in bindings {
            self.local_bindings.insert(ProcId::new(nspace, b.rank), b);
        }
    }

    /// The bindings of job `nspace`'s processes on this node, by rank.
    pub fn local_bindings(&self, nspace: &str) -> Vec<LocalBinding> {
        let mut v: Vec<LocalBinding> = self
            .local_bindings
            .iter()
            .filter(|(p, _)| p.nspace == nspace)
            .map(|(_, b)| b.clone())
            .collect();
        v.sort_by_key(|b| b.rank);
        v
    }

    /// Job `index`, spawned by `parent`, exists from now on: its processes may
    /// connect and be named. Refused unless it is the next one and well formed.
    pub fn add_job(&mut self, index: u32, job: JobMap, parent: ProcId) -> Result<(), String> {
        self.jobs.add(index, job, parent)
    }

    /// Every process of spawned job `index` ended: `parent` (a local process, which
    /// asked) gets a `JOB_END` event naming it, with its exit code.
    pub fn on_job_ended(&mut self, index: u32, parent: ProcId, exit_code: i32) {
        let Some(job) = self.jobs.get(index).filter(|_| index > 0) else {
            return;
        };
        if self.jobs.node_of(&parent) != Some(self.node) {
            return;
        }
        let nspace = job.nspace.clone();
        let status = if exit_code == 0 { 0 } else { -1 };
        let event = Event {
            code: codes::JOB_END,
            source: ProcId::wildcard(nspace.clone()),
            affected: vec![ProcId::wildcard(nspace.clone())],
            info: vec![
                (keys::NSPACE.into(), Value::Str(nspace.to_string())),
                (keys::EXIT_CODE.into(), Value::I64(exit_code.into())),
                (keys::JOB_TERM_STATUS.into(), Value::I64(status)),
            ],
        };
        self.deliver_local(&parent, event);
    }

    /// This node server started its processes of spawned job `index`: the job's
    /// process sets are defined, and every local process of the other running jobs
    /// gets a `PROCESS_SET_DEFINE` event for each (name and members).
    pub fn on_job_started(&mut self, index: u32) {
        if self.jobs.set_running(index) {
            self.tell_of_psets(index, codes::PROCESS_SET_DEFINE);
        }
    }

    /// Spawned job `index` ended or was cancelled: its process sets are deleted, and
    /// every local process of the other running jobs gets a `PROCESS_SET_DELETE` event
    /// for each that was defined.
    pub fn on_job_gone(&mut self, index: u32) {
        if self.jobs.set_ended(index) {
            self.tell_of_psets(index, codes::PROCESS_SET_DELETE);
        }
    }

    /// Raises `code` (`PROCESS_SET_DEFINE`, with the members, or `_DELETE`) for each
    /// process set of job `index`.
    fn tell_of_psets(&mut self, index: u32, code: EventCode) {
        let Some(job) = self.jobs.get(index) else {
            return;
        };
        let events: Vec<Event> = job
            .psets
            .iter()
            .map(|p| {
                let mut info = vec![(keys::PSET_NAME.into(), Value::Str(p.name.clone()))];
                if code == codes::PROCESS_SET_DEFINE {
                    let members = job.pset_members(&p.name).unwrap_or_default();
                    info.push((keys::PSET_MEMBERS.into(), Value::Procs(members)));
                }
                Event {
                    code,
                    source: ProcId::wildcard(job.nspace.clone()),
                    affected: Vec::new(),
                    info,
                }
            })
            .collect();
        self.tell_running_locals(index, events);
    }

    /// Delivers `events`, in order, to every process hosted here of the running jobs
    /// but job `except`.
    fn tell_running_locals(&mut self, except: u32, events: Vec<Event>) {
        if events.is_empty() {
            return;
        }
        let procs: Vec<ProcId> = (0..self.jobs.jobs().len() as u32)
            .filter(|&i| i != except && self.jobs.state(i) == Some(JobState::Running))
            .filter_map(|i| self.jobs.get(i))
            .flat_map(|j| {
                j.ranks_on(self.node)
                    .into_iter()
                    .map(|r| ProcId::new(j.nspace.clone(), r))
            })
            .collect();
        for p in procs {
            for e in &events {
                self.deliver_local(&p, e.clone());
            }
        }
    }

    /// Why `proc` is no process of the session, for errors.
    fn not_in_session(&self, proc: &ProcId) -> String {
        match self.jobs.job_of(&proc.nspace) {
            Some(job) => format!("job {} has {} ranks", job.nspace, job.size()),
            None => format!("no job {} in this session", proc.nspace),
        }
    }

    /// Whether `proc` is known to have terminated.
    pub fn is_terminated(&self, proc: &ProcId) -> bool {
        self.terminated.contains(proc)
    }

    /// Drains the actions produced so far.
    pub fn take_actions(&mut self) -> Vec<Action> {
        std::mem::take(&mut self.actions)
    }

    /// Live groups this server knows (for inspection and tests).
    pub fn group(&self, id: &str) -> Option<&Group> {
        self.groups.get(id)
    }

    /// Number of collectives in progress here (tests use it to check for leaks).
    pub fn collectives_in_progress(&self) -> usize {
        self.colls.len()
    }

    /// Collectives in progress here that a live process joined (or waits in). After a
    /// server's loss, an operation joined only by processes that have since terminated
    /// stays open for the live participants that have not called yet (they may still
    /// call and complete it); tests use this to tell those apart from leaks.
    pub fn collectives_joined_by_live_processes(&self) -> usize {
        let live = |p: &ProcId| !self.terminated.contains(p);
        self.colls
            .values()
            .filter(|c| {
                c.contribs.keys().any(live)
                    || c.joins.keys().any(live)
                    || c.waiters.iter().any(|w| live(&w.proc))
            })
            .count()
    }

    /// Open invites, requests waiting for a peer's acknowledgement and the invites
    /// whose tracker this server knows of (tests use it to check that finished or
    /// refused invites leave nothing behind).
    pub fn invite_bookkeeping(&self) -> usize {
        self.acks.len() + self.invites.len() + self.invite_homes.len()
    }

    /// The node servers this one knows are lost.
    pub fn lost_nodes(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.lost_nodes.iter().copied()
    }

    /// The earliest time [`Engine::on_timer`] has work to do.
    pub fn next_deadline(&self) -> Option<Time> {
        let colls = self.colls.values().flat_map(|c| {
            c.waiters
                .iter()
                .filter_map(|w| w.deadline)
                .chain(c.probe.as_ref().map(|p| p.deadline))
        });
        let gets = self.gets.iter().filter_map(|g| g.deadline);
        let modex = self.modex_waits.iter().filter_map(|m| m.deadline);
        let parked = self.parked.iter().filter_map(|(_, _, _, w)| w.deadline);
        let invites = self.invites_deadline();
        let clean_ends = self.clean_ends.iter().map(|(_, at, _)| *at);
        colls
            .chain(gets)
            .chain(modex)
            .chain(parked)
            .chain(invites)
            .chain(clean_ends)
            .min()
    }

    // ------------------------------------------------------------------ clients

    /// Admits an authenticated client for `proc`. Refuses procs not hosted here, already
    /// connected, or already terminated.
    pub fn on_client_connected(
        &mut self,
        client: ClientId,
        proc: ProcId,
    ) -> Result<(), CohortError> {
        match self.jobs.node_of(&proc) {
            Some(n) if n == self.node => {}
            Some(n) => {
                return Err(CohortError::UnknownProc {
                    reason: format!("it is hosted by node server {n}, not {}", self.node),
                    proc,
                })
            }
            None => {
                return Err(CohortError::UnknownProc {
                    reason: self.not_in_session(&proc),
                    proc,
                })
            }
        }
        if self.proc_clients.contains_key(&proc) {
            return Err(CohortError::AuthRefused(format!(
                "{proc} is already connected"
            )));
        }
        if self.terminated.contains(&proc) {
            return Err(CohortError::AuthRefused(format!("{proc} has terminated")));
        }
        self.clients.insert(client, proc.clone());
        self.proc_clients.insert(proc.clone(), client);
        if let Some(q) = self.pending_events.remove(&proc) {
            for ev in q {
                self.push_client(client, ServerFrame::Event(ev));
            }
        }
        Ok(())
    }

    /// A client connection closed. Without a prior finalize this is the process
    /// terminating (a client that disconnects mid-operation).
    pub fn on_client_disconnected(&mut self, client: ClientId, now: Time) {
        let Some(proc) = self.clients.remove(&client) else {
            return;
        };
        self.proc_clients.remove(&proc);
        if !self.finalized.contains(&proc) {
            tracing::info!(%proc, "client disconnected without finalize; treating it as terminated");
            self.terminate(proc, now);
        }
        self.drain_self(now);
    }

    /// A process hosted here ended.
    pub fn on_proc_exited(&mut self, proc: ProcId, now: Time) {
        self.terminate(proc, now);
        self.drain_self(now);
    }

    /// Handles one request frame of an admitted client.
    pub fn on_client_request(&mut self, client: ClientId, id: ReqId, req: Request, now: Time) {
        let Some(proc) = self.clients.get(&client).cloned() else {
            return;
        };
        if self.terminated.contains(&proc) {
            // Read after its exit was reported (the exit and the socket are different
            // channels): every server already counts it as failed, so a contribution
            // now would contradict that, and nobody is left to read an answer.
            tracing::debug!(%proc, id, "ignoring a request of a terminated process");
            return;
        }
        match req {
            Request::Commit { local, remote } => {
                *self.commits.entry(proc.clone()).or_insert(0) += 1;
                self.kv.commit(&proc, local, remote);
                self.on_committed(&proc, now);
            }
            Request::Get {
                proc: target,
                key,
                timeout_ms,
                after_commits,
            } => self.get(
                client,
                id,
                proc,
                target,
                key,
                timeout_ms,
                after_commits,
                now,
            ),
            Request::Fence { procs, opts } => self.fence(client, id, proc, procs, opts, now),
            Request::Construct {
                id: gid,
                procs,
                opts,
            } => self.construct(client, id, proc, gid, procs, opts, now),
            Request::Destruct {
                id: gid,
                timeout_ms,
                ft_collective,
            } => self.destruct(client, id, proc, gid, (timeout_ms, ft_collective), now),
            Request::Invite {
                id: gid,
                procs,
                opts,
            } => self.invite(client, id, proc, gid, procs, opts, now),
            Request::Join {
                id: gid,
                leader,
                accept,
                timeout_ms,
                group_info,
            } => self.join(
                client, id, proc, gid, leader, accept, timeout_ms, group_info, now,
            ),
            Request::Decide { id: gid, decision } => {
                self.decide_request(client, id, proc, gid, decision)
            }
            Request::Leave { id: gid } => {
                let r = self.leave(proc, gid, now).map(|_| Response::Done);
                self.reply(client, id, r);
            }
            Request::Notify { code, range, info } => {
                let r = self.notify(proc, code, range, info).map(|_| Response::Done);
                self.reply(client, id, r);
            }
            Request::QueryGroup { id: gid } => {
                let r = match self.groups.get(&gid) {
                    Some(g) => Ok(Response::Group(Arc::new(
                        g.result(ConstructStatus::Success, vec![]),
                    ))),
                    None => Err(CohortError::GroupNotFound { id: gid }),
                };
                self.reply(client, id, r);
            }
            Request::QueryGroupNames => {
                let mut names: Vec<String> = self
                    .groups
                    .values()
                    .filter(|g| g.has(&proc))
                    .map(|g| g.id.clone())
                    .collect();
                names.sort();
                self.reply(client, id, Ok(Response::GroupNames(names)));
            }
            Request::QuerySession => {
                let info = Response::Session {
                    nspaces: self.jobs.active_nspaces(),
                    psets: self.jobs.psets().map(|(_, p)| p.name.clone()).collect(),
                };
                self.reply(client, id, Ok(info));
            }
            Request::QueryPset { name } => {
                let r = self
                    .jobs
                    .pset_members(&name)
                    .map(Response::Procs)
                    .ok_or(CohortError::PsetNotFound { name });
                self.reply(client, id, r);
            }
            Request::FailedLocal { id: gid } => {
                let r = self.failed_members(&gid, &proc).map(Response::Procs);
                self.reply(client, id, r);
            }
            Request::FailedGlobal {
                id: gid,
                timeout_ms,
            } => self.agree(client, id, proc, gid, timeout_ms, now),
            Request::Finalize => {
                self.finalized.insert(proc);
                self.reply(client, id, Ok(Response::Done));
            }
            req @ (Request::Publish { .. }
            | Request::Lookup { .. }
            | Request::Unpublish { .. }
            | Request::Spawn { .. }) => self.data_request(client, id, proc, req),
        }
        self.drain_self(now);
    }

    // ------------------------------------------------------------------ peers

    /// Handles one message from a peer node server.
    pub fn on_peer(&mut self, from: NodeId, msg: PeerMsg, now: Time) {
        if self.lost_nodes.contains(&from) {
            // Known lost here (perhaps from another server, before its own connection
            // delivered everything): what it sent does not count any more, so every
            // decision taken on its loss stands.
            tracing::debug!(from, "dropping a message from a lost node server");
            return;
        }
        self.handle_peer(from, msg, now);
        self.drain_self(now);
    }

    /// A peer node server is gone: every process it hosted is terminated, every other
    /// server is told, and collectives route around it (see [`Engine::node_lost`]).
    pub fn on_peer_lost(&mut self, peer: NodeId, now: Time) {
        if peer != self.node && !self.lost_nodes.contains(&peer) {
            for &n in &self.all_nodes.clone() {
                if n != self.node && n != peer && !self.lost_nodes.contains(&n) {
                    self.send_peer(n, PeerMsg::NodeLost { node: peer });
                }
            }
        }
        self.node_lost(peer, now);
        self.drain_self(now);
    }

    /// Node server `peer` is lost. Its processes are terminated (so per-process
    /// accounting settles them: members if their contributions got through, failed
    /// otherwise). In every collective in progress here:
    /// * if `peer` was its root, the collective fails here with `PeerLost` (every
    ///   server learns of the loss and fails its own part);
    /// * if this server's contributions went up to `peer`, they are re-sent to the
    ///   nearest live ancestor, which answers with the outcome if it already has it;
    /// * trees built from now on skip `peer`: its children send up to its parent, and
    ///   outcomes go down to its children.
    fn node_lost(&mut self, peer: NodeId, now: Time) {
        if peer == self.node || self.lost_nodes.contains(&peer) {
            return;
        }
        // Collectives in progress whose root it was, found before the loss counts
        // here: a construct without a tree yet would take the id's next rendezvous
        // for its root from then on.
        let mut rooted: Vec<CollKey> = self
            .colls
            .keys()
            .filter(|k| self.root_of(k) == Some(peer))
            .cloned()
            .collect();
        rooted.sort_unstable();
        // Live groups with members here whose rendezvous it was: the next one learns
        // of them, so their ids stay in use there.
        let mut moved: Vec<(String, Vec<ProcId>)> = self
            .groups
            .values()
            .filter(|g| self.rendezvous_node(&g.id) == peer)
            .map(|g| (g.id.clone(), g.members.clone()))
            .collect();
        moved.sort_unstable();
        self.lost_nodes.insert(peer);
        for (id, members) in moved {
            let next = self.rendezvous_node(&id);
            self.send_peer(next, PeerMsg::GroupLive { id, members });
        }
        tracing::debug!(node = peer, "node server lost; collectives route around it");
        // Requests waiting for the lost server's answer (a decision it was to apply, a
        // join it was to accept) get an error now instead of waiting for ever.
        let mut orphans: Vec<u64> = self
            .acks
            .iter()
            .filter(|(_, a)| a.peer == peer)
            .map(|(t, _)| *t)
            .collect();
        orphans.sort_unstable();
        for token in orphans {
            let what = match &self.acks[&token].kind {
                AckKind::Decide => "it was to apply a construct decision".to_string(),
                AckKind::Join(id) => format!("it tracked the invite of group {id:?}"),
            };
            let err = CohortError::PeerLost {
                node: peer,
                reason: what,
            };
            self.on_ack(token, Err(err));
        }
        // Collectives in progress whose root it was end, before its processes count as
        // terminated: those may have taken part (the root may have answered them before
        // it was lost), which a server the outcome did not reach cannot tell. A fence,
        // construct, destruct or failure view is decided for everyone by one server
        // (`ask_about_agreement`): the outcome if any server got it, else the same
        // failure, naming the root (a fault-tolerant fence and a destruct go on at the
        // decider instead: `reroot`). (The decider of a construct is the id's next
        // rendezvous, where servers that heard of the loss before they started their
        // part went: it fails them too.) An invite fails here.
        for key in rooted {
            if !self.colls.contains_key(&key) || self.ask_about_agreement(&key, now) {
                continue;
            }
            let err = CohortError::PeerLost {
                node: peer,
                reason: format!("it was the root of {}", op_name(&key)),
            };
            let spec = self.colls.get(&key).and_then(|c| c.spec.clone());
            let outcome = CollOutcome::Failed(err);
            self.complete(key, spec, outcome, Vec::new(), false, now);
        }
        self.agreement_peer_lost(peer, now);
        // Outcomes this server passed on to `peer` may have died with it: its children
        // get them from here (a server below it that sent its part straight to the root
        // after an earlier loss waited for ever otherwise: schedule seed 34822).
        let resend: Vec<(Tree, CollKey, Option<CollSpec>, CollOutcome)> = self
            .kept_outcomes
            .iter()
            .filter_map(|(k, spec, outcome)| {
                let tree = self.tree_for(k, spec.as_ref()?);
                (tree.parent(peer) == Some(self.node))
                    .then(|| (tree, k.clone(), spec.clone(), outcome.clone()))
            })
            .collect();
        for (tree, key, spec, outcome) in resend {
            for child in self.live_children(&tree, peer) {
                if child == self.node {
                    continue;
                }
                tracing::debug!(
                    ?key,
                    lost = peer,
                    child,
                    "passing an outcome on past a lost child"
                );
                self.send_kept_outcome(child, key.clone(), spec.clone(), outcome.clone());
            }
        }
        for proc in self.jobs.procs_on(peer) {
            self.mark_terminated(proc, now);
        }
        let keys: Vec<CollKey> = self.colls.keys().cloned().collect();
        for key in keys {
            let Some(coll) = self.colls.get(&key) else {
                continue;
            };
            if self.agree_asking.contains_key(&key) {
                continue;
            }
            if coll.gather.is_some() {
                self.gather_peer_lost(&key, peer);
                self.progress(&key, now);
                continue;
            }
            if coll.sent_up && coll.sent_to == Some(peer) {
                let Some(tree) = coll.tree.clone() else {
                    continue;
                };
                match self.live_parent(&tree) {
                    Some(to) => {
                        let msg = self.up_msg(&key, true);
                        if let Some(c) = self.colls.get_mut(&key) {
                            c.sent_to = Some(to);
                        }
                        tracing::debug!(?key, lost = peer, to, "re-sending contributions");
                        // `to` learns of the loss first (this server may have heard
                        // of it from a third one): it then sends its outcome around
                        // the lost server, not into it.
                        self.send_peer(to, PeerMsg::NodeLost { node: peer });
                        self.send_peer(to, msg);
                    }
                    None => {
                        let err = CohortError::PeerLost {
                            node: peer,
                            reason: format!(
                                "no live ancestor left in the tree of {}",
                                op_name(&key)
                            ),
                        };
                        self.fail(&key, err, now);
                    }
                }
            } else {
                self.progress(&key, now);
            }
        }
        // Invites tracked there are gone with it (their joiners here failed above).
        self.invite_homes.retain(|_, home| *home != peer);
    }

    /// Whether a message from `from` stamped with `attempt` belongs to an attempt of
    /// `key` that this server already failed and told `from` about: it was in flight
    /// when the failure was decided (a retry's messages carry the higher count).
    fn stale(&self, key: &CollKey, from: NodeId, attempt: u32) -> bool {
        let Some(a) = self.attempts.get(key) else {
            return false;
        };
        from != self.node
            && (a.told.get(&from).is_some_and(|&told| attempt < told)
                // Every server of a failed attempt gets the failure (down the tree):
                // its messages with fewer failures are leftovers. (A server new to
                // the key, joining a retry, stamps with fewer and is not one.)
                || (attempt < a.seen && a.servers.contains(&from))
                // An attempt that failed with the loss of the id's rendezvous failed
                // for everyone: a message of it, from whichever server, is answered
                // with the failure (its sender started its part before it heard of
                // the outcome, or of the loss) and not taken into a later attempt.
                || (attempt < a.seen && self.failed_with_rendezvous(key, a)))
    }

    /// Whether `a`'s last failure of construct or destruct `key` was the loss of a
    /// node server that the group id's rendezvous has passed over since.
    fn failed_with_rendezvous(&self, key: &CollKey, a: &Attempts) -> bool {
        meets_at_rendezvous(key.kind)
            && matches!(&a.error, Some(CohortError::PeerLost { node, .. })
                if self.lost_ahead(&key.id).contains(node))
    }

    /// The stamp for this server's messages about `key`.
    fn attempt_of(&self, key: &CollKey) -> u32 {
        self.attempts.get(key).map_or(0, |a| a.seen)
    }

    /// The stamp for this server's messages about `key`: the attempt of its tracker
    /// here (a retry's, when a server that saw the failure started it here), or the
    /// failed attempts seen here.
    fn stamp(&self, key: &CollKey) -> u32 {
        let seen = self.attempt_of(key);
        self.colls.get(key).map_or(seen, |c| c.attempt.max(seen))
    }

    /// The tracker of `key`, created for `attempt` when there is none.
    fn tracker(&mut self, key: &CollKey, attempt: u32, now: Time) -> &mut Coll {
        if key.kind == CollKind::Construct && !self.colls.contains_key(key) {
            // A destruct of the id's previous group is no answer about the next one.
            self.settled.remove(&group_key(CollKind::Destruct, &key.id));
        }
        self.colls.entry(key.clone()).or_insert_with(|| Coll {
            attempt,
            ..Coll::new(now)
        })
    }

    /// A failure of `key` (`error`) was applied here and passed on to `told`.
    fn record_failure(&mut self, key: &CollKey, told: &[NodeId], error: &CohortError) {
        let a = self.attempts.entry(key);
        a.seen += 1;
        a.error = Some(error.clone());
        for &n in told {
            *a.told.entry(n).or_default() += 1;
        }
    }

    /// `from` sent a message of an attempt of `key` that failed here (`stale`). If this
    /// server did not pass the failure to `from` itself, it went down the tree through
    /// servers that may have been lost before passing it on: a sender that re-sends its
    /// contributions to an ancestor (its parent lost) or gives up (a timeout) may be
    /// waiting for it still, and would keep its tracker for ever. Such a sender gets the
    /// failure directly; a copy that also comes down the tree is dropped as the
    /// outcome of an attempt it already ended.
    fn answer_stale(&mut self, from: NodeId, msg: &PeerMsg) {
        let (key, attempt) = match msg {
            PeerMsg::CollUp {
                key,
                rerouted: true,
                attempt,
                ..
            }
            | PeerMsg::CollAbort { key, attempt, .. } => (key, *attempt),
            // A server that came to this one as the id's next rendezvous (its first
            // pick lost) after this one's own part of the attempt failed, or that sent
            // its part of an attempt that failed with the rendezvous's loss.
            PeerMsg::CollUp { key, attempt, .. }
            | PeerMsg::CollJoin { key, attempt, .. }
            | PeerMsg::CollGather { key, attempt, .. }
                if meets_at_rendezvous(key.kind)
                    && (self.root_of(key) == Some(self.node)
                        || self
                            .attempts
                            .get(key)
                            .is_some_and(|a| self.failed_with_rendezvous(key, a))) =>
            {
                (key, *attempt)
            }
            _ => return,
        };
        let Some(a) = self.attempts.get(key) else {
            return;
        };
        if a.told.get(&from).is_some_and(|&told| attempt < told) {
            // On its way on this very link.
            return;
        }
        let Some(error) = a.error.clone() else {
            return;
        };
        tracing::debug!(
            ?key,
            from,
            attempt,
            "telling a server the failure it missed"
        );
        self.send_peer(
            from,
            PeerMsg::CollDown {
                key: key.clone(),
                spec: None,
                outcome: CollOutcome::Failed(error),
                late: Vec::new(),
                attempt,
                lean: None,
            },
        );
    }

    /// Passes an outcome (`msg`) on to this server's live children in `tree`, as one
    /// message object; returns them.
    fn pass_down(&mut self, tree: Option<&Tree>, msg: impl FnOnce() -> PeerMsg) -> Vec<NodeId> {
        let children = tree
            .map(|t| self.live_children(t, self.node))
            .unwrap_or_default();
        if !children.is_empty() {
            let msg = msg();
            self.send_peers(children.clone(), msg);
        }
        children
    }

    /// Passes an outcome this server does not apply (of an attempt it ended or moved
    /// past) on to its live children in the tree `spec` gives; returns them.
    fn pass_on_down(
        &mut self,
        key: CollKey,
        spec: Option<CollSpec>,
        outcome: CollOutcome,
        late: Vec<ProcId>,
        attempt: u32,
        lean: Option<u32>,
    ) -> Vec<NodeId> {
        let tree = spec.as_ref().map(|s| self.tree_for(&key, s));
        self.pass_down(tree.as_ref(), || PeerMsg::CollDown {
            key,
            spec,
            outcome,
            late,
            attempt,
            lean,
        })
    }

    /// The nearest ancestor of this server in `tree` that is not lost.
    fn live_parent(&self, tree: &Tree) -> Option<NodeId> {
        let mut at = tree.parent(self.node)?;
        while self.lost_nodes.contains(&at) {
            at = tree.parent(at)?;
        }
        Some(at)
    }

    /// Children of `node` in `tree`, largest subtree first, with every lost child
    /// replaced by its own live children.
    fn live_children(&self, tree: &Tree, node: NodeId) -> Vec<NodeId> {
        let mut out = Vec::new();
        for c in tree.children_largest_first(node) {
            if self.lost_nodes.contains(&c) {
                out.extend(self.live_children(tree, c));
            } else {
                out.push(c);
            }
        }
        out
    }

    fn handle_peer(&mut self, from: NodeId, msg: PeerMsg, now: Time) {
        let carried = match &msg {
            PeerMsg::CollUp { key, spec, .. } | PeerMsg::CollGather { key, spec, .. } => {
                Some((key, spec))
            }
            PeerMsg::CollAbort { key, spec, .. }
            | PeerMsg::CollDown { key, spec, .. }
            | PeerMsg::AgreeQuery { key, spec } => spec.as_ref().map(|s| (key, s)),
            _ => None,
        };
        if let Some((key, spec)) = carried {
            if self.spec_contradicts_key(key, spec) {
                tracing::error!(
                    ?key,
                    from,
                    "protocol violation: node server {from} sent an operation description \
                     that contradicts the operation's id; message dropped"
                );
                return;
            }
        }
        if let Some(behind) = self.behind_on(from, &msg) {
            tracing::debug!(
                from,
                ?behind,
                "dropping a message sent before its sender knew of its rendezvous's loss"
            );
            for node in behind {
                self.send_peer(from, PeerMsg::NodeLost { node });
            }
            return;
        }
        let stamped = match &msg {
            PeerMsg::CollUp { key, attempt, .. }
            | PeerMsg::CollJoin { key, attempt, .. }
            | PeerMsg::CollAbort { key, attempt, .. }
            | PeerMsg::CollProbeReply { key, attempt, .. }
            | PeerMsg::CollGather { key, attempt, .. } => Some((key, *attempt)),
            _ => None,
        };
        if let Some((key, attempt)) = stamped {
            if self.stale(key, from, attempt) {
                tracing::debug!(
                    ?key,
                    from,
                    attempt,
                    "dropping a message of an attempt that failed before it arrived"
                );
                self.answer_stale(from, &msg);
                return;
            }
            let spec = match &msg {
                PeerMsg::CollUp { spec, .. } | PeerMsg::CollGather { spec, .. } => Some(spec),
                PeerMsg::CollAbort { spec, .. } => spec.as_ref(),
                _ => None,
            };
            let (behind, same) = match self.colls.get(key) {
                Some(c) if c.attempt < attempt => {
                    (true, c.spec.is_some() && c.spec.as_ref() == spec)
                }
                _ => (false, false),
            };
            if behind && same {
                // The same operation, started here before this server heard of the
                // attempt number (it took no part in the failed attempts): it adopts it.
                let key = key.clone();
                self.colls.get_mut(&key).expect("present").attempt = attempt;
            } else if behind {
                // A later attempt (a retry) whose sender learnt of the failure of the
                // one in progress here first: it waits until that one ends here.
                let key = key.clone();
                let early = self.early_msgs.entry(key.clone()).or_default();
                if early.len() < MAX_EARLY_MSGS {
                    early.push((from, msg));
                } else {
                    tracing::warn!(?key, from, "too many messages of a later attempt; dropped");
                }
                return;
            }
        }
        match msg {
            PeerMsg::CollUp {
                key,
                rerouted: true,
                ..
            } if !self.colls.contains_key(&key)
                && self.kept_outcomes.iter().any(|(k, _, _)| *k == key) =>
            {
                // A child of a lost server, whose outcome was lost with it.
                let (_, spec, outcome) = self
                    .kept_outcomes
                    .iter()
                    .find(|(k, _, _)| *k == key)
                    .cloned()
                    .expect("checked above");
                self.send_kept_outcome(from, key, spec, outcome);
            }
            PeerMsg::CollUp {
                key,
                spec,
                contribs,
                excused,
                rerouted,
                attempt,
            } => {
                self.recently_done.remove(&key);
                let coll = self.tracker(&key, attempt, now);
                if rerouted {
                    // Dissemination: a server of the operation was lost; this one's
                    // gathered data came directly, so the outcome must go down whole.
                    coll.fallback = true;
                    coll.direct_nodes.insert(from);
                }
                for c in contribs {
                    coll.contribs.insert(c.proc.clone(), c);
                }
                coll.excused.extend(excused);
                if let Err(e) = self.merge_spec(&key, spec) {
                    self.fail(&key, e, now);
                    return;
                }
                self.progress(&key, now);
            }
            PeerMsg::CollJoin {
                key,
                contrib,
                attempt,
            } => {
                self.recently_done.remove(&key);
                let coll = self.tracker(&key, attempt, now);
                let (proc, count) = (contrib.proc.clone(), contrib.flags.bootstrap);
                coll.joins.insert(proc.clone(), contrib);
                coll.direct_nodes.insert(from);
                if let Some(n) = count {
                    if let Err(e) = self.merge_bootstrap(&key, &proc, n) {
                        return self.fail(&key, e, now);
                    }
                }
                self.progress(&key, now);
            }
            PeerMsg::CollAbort { key, error, .. } if key.kind == CollKind::Invite => match error {
                CohortError::Timeout { timeout_ms, .. } => {
                    self.invite_timed_out(&key.id, timeout_ms, now)
                }
                other => self.fail_invite(&key.id, other, now),
            },
            PeerMsg::CollAbort { key, .. } if self.recently_done.contains_key(&key) => {
                tracing::debug!(
                    ?key,
                    from,
                    "ignoring an abort of an operation already completed"
                );
            }
            PeerMsg::CollAbort {
                key,
                spec,
                error,
                attempt,
            } => {
                let coll = self.tracker(&key, attempt, now);
                coll.direct_nodes.insert(from);
                if let Some(spec) = spec {
                    let _ = self.merge_spec(&key, spec);
                }
                if self.root_of(&key) == Some(self.node) {
                    self.start_probe(&key, error, now);
                } else {
                    self.fail(&key, error, now);
                }
            }
            PeerMsg::CollProbe { key } => {
                let joined = self
                    .colls
                    .get(&key)
                    .map(|c| {
                        let mut j: BTreeSet<ProcId> = c.contribs.keys().cloned().collect();
                        j.extend(c.waiters.iter().map(|w| w.proc.clone()));
                        j.into_iter().collect()
                    })
                    .unwrap_or_default();
                let attempt = self.stamp(&key);
                self.send_peer(
                    from,
                    PeerMsg::CollProbeReply {
                        key,
                        joined,
                        attempt,
                    },
                );
            }
            PeerMsg::CollProbeReply { key, joined, .. } => {
                let done = match self.colls.get_mut(&key).and_then(|c| c.probe.as_mut()) {
                    Some(p) => {
                        p.waiting.remove(&from);
                        p.joined.extend(joined);
                        p.waiting.is_empty()
                    }
                    None => false,
                };
                if done {
                    self.finish_probe(&key, now);
                }
            }
            PeerMsg::CollGather {
                key,
                spec,
                round,
                contribs,
                excused,
                attempt,
            } => self.on_gather(from, key, spec, round, contribs, excused, attempt, now),
            PeerMsg::CollDown { key, .. }
                if key.kind == CollKind::Agree
                    && (self.agree_bound.contains_key(&key)
                        || self.agree_done.contains_key(&key)) =>
            {
                // This server told a decider it lacks this view (or already ended it): the
                // decider's word stands, whatever the lost root's tree still delivers.
                tracing::debug!(?key, from, "dropping a failure view decided elsewhere");
            }
            PeerMsg::CollDown { key, .. }
                if matches!(
                    key.kind,
                    CollKind::Fence | CollKind::Construct | CollKind::Destruct
                ) && (self.agree_asking.contains_key(&key)
                    || (!self.colls.contains_key(&key)
                        && self.settled_outcome(&key).is_some())) =>
            {
                // Its root was lost and a decider decides for everyone (this server may
                // have told it that it lacks the outcome): the decider's word stands.
                // Or it succeeded here already (a decider's answer came first).
                tracing::debug!(?key, from, "dropping an outcome decided elsewhere");
            }
            PeerMsg::CollDown { key, .. }
                if self.colls.get(&key).is_some_and(|c| {
                    c.outcome_of_lost_root(from, self.node, self.lost_nodes.contains(&from))
                }) =>
            {
                // A fault-tolerant fence or a destruct going on at its decider: the
                // decider found the lost root's outcome nowhere, so a late copy of it is
                // not applied.
                tracing::debug!(
                    ?key,
                    from,
                    "dropping an outcome of an operation going on elsewhere"
                );
            }
            PeerMsg::CollDown {
                key,
                spec,
                outcome,
                late,
                attempt,
                lean,
            } if attempt < self.attempt_of(&key) => {
                tracing::debug!(
                    ?key,
                    from,
                    attempt,
                    "not applying the outcome of an attempt this server already ended"
                );
                if meets_at_rendezvous(key.kind) {
                    // This server's part may have ended on its own (its root, as it
                    // knew it, was lost): the servers below it in the tree the outcome
                    // follows still need it.
                    self.pass_on_down(key, spec, outcome, late, attempt, lean);
                }
            }
            PeerMsg::CollDown {
                key,
                spec,
                outcome,
                late,
                attempt,
                lean,
            } if self.colls.get(&key).is_some_and(|c| c.attempt > attempt) => {
                // The verdict on an attempt this server has moved past (its tracker is
                // a retry's, started by a server that saw the failure first): passed on
                // to the old tree below, counted, not applied.
                let count = match &outcome {
                    CollOutcome::Failed(e) if attempt >= self.attempt_of(&key) => Some(e.clone()),
                    _ => None,
                };
                let told = self.pass_on_down(key.clone(), spec, outcome, late, attempt, lean);
                if let Some(error) = count {
                    self.record_failure(&key, &told, &error);
                }
            }
            PeerMsg::CollDown {
                key,
                spec,
                outcome,
                late,
                lean,
                ..
            } => {
                if let Some(c) = self.colls.get_mut(&key).filter(|c| c.gather.is_some()) {
                    if lean.is_none() {
                        // Dissemination, and the outcome came whole: the root fell
                        // back (a server of the operation was lost, maybe one this
                        // server has not heard of). It goes on whole: a lean copy
                        // would leave the servers below waiting for rounds that may
                        // never come (a tolerant fence hung so; schedule seed 10037).
                        c.fallback = true;
                    }
                }
                self.on_down(key, spec, outcome, late, lean, now)
            }
            PeerMsg::NodeLost { node } => {
                // At most one entry per server and loss.
                self.heard_lost.insert((from, node));
                self.node_lost(node, now)
            }
            PeerMsg::ProcTerminated {
                proc,
                contributed,
                finalized,
            } => {
                if finalized {
                    self.finished.insert(proc.clone());
                }
                if !contributed.is_empty() {
                    self.joined_before_death
                        .insert(proc.clone(), contributed.into_iter().collect());
                }
                self.mark_terminated(proc, now)
            }
            PeerMsg::Event { targets, event } => {
                for p in targets {
                    if self.jobs.node_of(&p) == Some(self.node) {
                        self.deliver_local(&p, event.clone());
                    }
                }
            }
            PeerMsg::ModexReq {
                req,
                proc,
                timeout_ms,
            } => self.modex_request(from, req, proc, timeout_ms, now),
            PeerMsg::ModexResp { req, proc, result } => self.modex_response(req, proc, result, now),
            PeerMsg::GroupLeft { id, proc } => self.apply_left(&id, &proc, now),
            PeerMsg::InviteReply {
                id,
                accept,
                contrib,
                token,
            } => self.on_invite_reply(from, id, accept, contrib, token, now),
            PeerMsg::Decide {
                key,
                proc,
                decision,
                token,
            } => {
                let result = if key.kind == CollKind::Invite {
                    self.invite_decision(&key.id, &proc, decision, now)
                } else {
                    self.apply_decision(&key, &proc, decision, now)
                };
                self.send_peer(from, PeerMsg::Ack { token, result });
            }
            PeerMsg::Ack { token, result } => self.on_ack(token, result),
            PeerMsg::GroupLive { id, members } => {
                // A group passed on after its rendezvous's loss may have been destructed
                // here already (its members' contributions came another way).
                let destructed = self
                    .recently_done
                    .contains_key(&group_key(CollKind::Destruct, &id));
                if self.rendezvous_node(&id) == self.node && !destructed {
                    self.live_roots.insert(id, members);
                }
            }
            PeerMsg::AgreeQuery { key, spec } => {
                // (Checked against the key above.)
                if let Some(spec) = spec.filter(|_| Self::query_carries_spec(key.kind)) {
                    if self.agree_specs.len() < MAX_EARLY_MSGS {
                        self.agree_specs.entry(key.clone()).or_insert(spec);
                    }
                }
                self.agreement_question(from, key, false, now)
            }
            PeerMsg::AgreePoll { key } => self.agreement_question(from, key, true, now),
            PeerMsg::AgreeAnswer { key, state } => self.agreement_answer(from, key, state, now),
            // The node server's failure detector takes these (`crate::detector`).
            PeerMsg::Heartbeat | PeerMsg::Ping { .. } | PeerMsg::Pong { .. } => {}
        }
    }

    // ------------------------------------------------------------------ timers

    /// Expires every deadline at or before `now`.
    pub fn on_timer(&mut self, now: Time) {
        // clean ends due to be told
        let (due, later): (Vec<_>, Vec<_>) = std::mem::take(&mut self.clean_ends)
            .into_iter()
            .partition(|(_, at, _)| *at <= now);
        self.clean_ends = later;
        for (proc, _, told) in due {
            self.tell_terminated(&proc, &[], true, |n| !told.contains(&n));
        }
        // collectives
        let keys: Vec<CollKey> = self
            .colls
            .iter()
            .filter(|(_, c)| {
                c.waiters
                    .iter()
                    .any(|w| w.deadline.is_some_and(|d| d <= now))
            })
            .map(|(k, _)| k.clone())
            .collect();
        for key in keys {
            self.expire_waiters(&key, now);
        }
        let probes: Vec<CollKey> = self
            .colls
            .iter()
            .filter(|(_, c)| c.probe.as_ref().is_some_and(|p| p.deadline <= now))
            .map(|(k, _)| k.clone())
            .collect();
        for key in probes {
            self.finish_probe(&key, now);
        }
        self.expire_invites(now);
        let (expired, parked): (Vec<_>, Vec<_>) = std::mem::take(&mut self.parked)
            .into_iter()
            .partition(|(_, _, _, w)| w.deadline.is_some_and(|d| d <= now));
        self.parked = parked;
        for (key, _, _, w) in expired {
            let err = CohortError::Timeout {
                op: format!(
                    "{} (its previous attempt is still waiting for the root's verdict)",
                    op_name(&key)
                ),
                timeout_ms: w.timeout_ms,
                missing: Vec::new(),
            };
            self.reply(w.client, w.req, Err(err));
        }
        // gets
        let mut i = 0;
        while i < self.gets.len() {
            if self.gets[i].deadline.is_some_and(|d| d <= now) {
                let g = self.gets.swap_remove(i);
                let err = CohortError::Timeout {
                    op: format!("get of {:?} from {}", g.key, g.owner),
                    timeout_ms: g.timeout_ms,
                    missing: vec![g.owner.clone()],
                };
                self.reply(g.client, g.req, Err(err));
            } else {
                i += 1;
            }
        }
        // modex requests from peers waiting for a local commit
        let mut i = 0;
        while i < self.modex_waits.len() {
            if self.modex_waits[i].deadline.is_some_and(|d| d <= now) {
                let m = self.modex_waits.swap_remove(i);
                let err = CohortError::Timeout {
                    op: format!("direct modex of {}", m.proc),
                    timeout_ms: m.timeout_ms,
                    missing: vec![m.proc.clone()],
                };
                self.send_peer(
                    m.from,
                    PeerMsg::ModexResp {
                        req: m.req,
                        proc: m.proc,
                        result: Err(err),
                    },
                );
            } else {
                i += 1;
            }
        }
        self.drain_self(now);
    }

    fn expire_waiters(&mut self, key: &CollKey, now: Time) {
        let root = self.root_of(key);
        let Some(coll) = self.colls.get_mut(key) else {
            return;
        };
        let mut abort: Option<CohortError> = None;
        let mut give_up: Vec<Waiter> = Vec::new();
        coll.waiters.retain_mut(|w| {
            if w.deadline.is_none_or(|d| d > now) {
                return true;
            }
            if w.abort_sent {
                give_up.push(w.clone());
                return false;
            }
            w.abort_sent = true;
            w.deadline = Some(now + ABORT_GRACE);
            abort.get_or_insert(CohortError::Timeout {
                op: op_name(key),
                timeout_ms: w.timeout_ms,
                missing: Vec::new(),
            });
            true
        });
        if let Some(CohortError::Timeout { timeout_ms, .. }) = &abort {
            coll.timed_out = Some(*timeout_ms);
        }
        // The tracker stays until the root's verdict comes (or the root is lost): the
        // verdict may still be a success, which installs the group here as everywhere.
        // A retry by these ranks meanwhile waits for it (`parked`).
        for w in give_up {
            let err = CohortError::Timeout {
                op: format!(
                    "{} (root node server {root:?} did not answer)",
                    op_name(key)
                ),
                timeout_ms: w.timeout_ms,
                missing: Vec::new(),
            };
            self.reply(w.client, w.req, Err(err));
        }
        if self.agree_asking.contains_key(key) {
            // Its root is lost and a decider decides for everyone: ending it here alone
            // could split it. The waiters give up after the grace (the outcome, if a
            // success, still installs the group here as everywhere).
            return;
        }
        if let Some(err) = abort {
            self.ask_root_to_end(key, root, err, now);
        }
    }

    /// Root: a participant timed out. Ask every server involved who joined there, then
    /// fail with exactly the processes that never called (or succeed, if the last
    /// contributions arrive meanwhile).
    fn start_probe(&mut self, key: &CollKey, err: CohortError, now: Time) {
        let CohortError::Timeout { op, timeout_ms, .. } = err else {
            return self.fail(key, err, now);
        };
        if key.kind == CollKind::Invite {
            return self.invite_timed_out(&key.id, timeout_ms, now);
        }
        let attempt = self.attempt_of(key);
        let me = self.node;
        let coll = self.tracker(key, attempt, now);
        if coll.probe.is_some() {
            return;
        }
        let mut waiting: BTreeSet<NodeId> = coll.direct_nodes.clone();
        if let Some(t) = &coll.tree {
            waiting.extend(t.nodes().iter().copied());
        }
        waiting.remove(&me);
        coll.probe = Some(Probe {
            op,
            timeout_ms,
            waiting: waiting.clone(),
            joined: BTreeSet::new(),
            deadline: now + PROBE_GRACE,
        });
        if waiting.is_empty() {
            return self.finish_probe(key, now);
        }
        for n in waiting {
            self.send_peer(n, PeerMsg::CollProbe { key: key.clone() });
        }
    }

    fn finish_probe(&mut self, key: &CollKey, now: Time) {
        let Some(coll) = self.colls.get_mut(key) else {
            return;
        };
        let Some(probe) = coll.probe.take() else {
            return;
        };
        let missing: Vec<ProcId> = self
            .missing(key)
            .into_iter()
            .filter(|p| !probe.joined.contains(p))
            .collect();
        let error = CohortError::Timeout {
            op: probe.op,
            timeout_ms: probe.timeout_ms,
            missing,
        };
        self.decide(key, Decision::Fail(error), now);
    }

    fn missing(&self, key: &CollKey) -> Vec<ProcId> {
        let Some(coll) = self.colls.get(key) else {
            return Vec::new();
        };
        let Some(spec) = &coll.spec else {
            return Vec::new();
        };
        let joined = |p: &ProcId| coll.contribs.contains_key(p) || coll.joins.contains_key(p);
        let mut expected: BTreeSet<ProcId> = expected_of(spec).iter().cloned().collect();
        expected.extend(add_members_of(coll));
        expected
            .into_iter()
            .filter(|p| !joined(p) && !coll.excused.contains(p))
            .collect()
    }

    // ------------------------------------------------------------------ kv / get

    #[allow(clippy::too_many_arguments)]
    fn get(
        &mut self,
        client: ClientId,
        req: ReqId,
        reader: ProcId,
        target: ProcId,
        key: String,
        timeout_ms: Option<u64>,
        after_commits: u64,
        now: Time,
    ) {
        let owner = if self.jobs.job_of(&target.nspace).is_none() {
            // A destructed group's ranks stay readable; a connection's nspace addresses
            // nothing once disconnected (rfc0003: the nspace is the connection's).
            let group = self.groups.get(target.nspace.as_str()).or_else(|| {
                self.retired
                    .get(target.nspace.as_str())
                    .filter(|g| g.connect.is_none())
            });
            let Some(g) = group else {
                let err = CohortError::UnknownProc {
                    reason: "no such namespace or group".into(),
                    proc: target,
                };
                return self.reply(client, req, Err(err));
            };
            let Some(member) = g.members.get(target.rank as usize).cloned() else {
                let err = CohortError::UnknownProc {
                    reason: format!("group {:?} has {} members", g.id, g.members.len()),
                    proc: target,
                };
                return self.reply(client, req, Err(err));
            };
            if let Some(v) = g.group_info.get(&member).and_then(|i| info_get(i, &key)) {
                let v = v.clone();
                return self.reply(client, req, Ok(Response::Value(v)));
            }
            member
        } else {
            target
        };
        // Job-level values need no commit (after_commits concerns posted data only).
        if let Some(v) = self.job_value(&owner, &key) {
            return self.reply(client, req, Ok(Response::Value(v)));
        }
        // A launched job has no parent, another host's topology is not known here, and
        // an unbound process (or another host's) has no binding: nobody will post any.
        if owner.is_wildcard()
            || [
                keys::PARENT_ID,
                keys::HWLOC_XML,
                keys::LOCALITY_STRING,
                keys::CPUSET,
            ]
            .contains(&key.as_str())
        {
            let err = CohortError::NotFound { proc: owner, key };
            return self.reply(client, req, Err(err));
        }
        if !self.jobs.contains(&owner) {
            let err = CohortError::UnknownProc {
                reason: self.not_in_session(&owner),
                proc: owner,
            };
            return self.reply(client, req, Err(err));
        }
        let pending = PendingGet {
            client,
            req,
            reader,
            owner,
            key,
            deadline: timeout_ms.map(|t| now + Duration::from_millis(t)),
            timeout_ms: timeout_ms.unwrap_or(0),
            fetched: false,
            after_commits,
        };
        if let Some(p) = self.try_get(pending) {
            self.gets.push(p);
        }
    }

    /// A get whose local owner has not committed what it needs yet: waits (returned
    /// back), unless the owner terminated, which fails it.
    fn wait_for_local_owner(&mut self, g: PendingGet) -> Option<PendingGet> {
        if !self.terminated.contains(&g.owner) {
            return Some(g);
        }
        let err = CohortError::ProcTerminated {
            op: format!("get of {:?}", g.key),
            procs: vec![g.owner],
        };
        self.reply(g.client, g.req, Err(err));
        None
    }

    /// Answers a get if possible; returns it back if it must wait.
    fn try_get(&mut self, mut g: PendingGet) -> Option<PendingGet> {
        let local = self.jobs.node_of(&g.owner) == Some(self.node);
        if local && self.commits.get(&g.owner).copied().unwrap_or(0) < g.after_commits {
            // The owner's commits published at a node-local fence are still on their
            // way (on its own connection).
            return self.wait_for_local_owner(g);
        }
        let lookup = if local {
            self.kv.lookup_local(&g.owner, &g.key)
        } else {
            self.kv.lookup_foreign(&g.owner, &g.key)
        };
        match lookup {
            Lookup::Found(v) => {
                self.reply(g.client, g.req, Ok(Response::Value(v)));
                None
            }
            Lookup::Absent if local || g.fetched => {
                let err = CohortError::NotFound {
                    proc: g.owner,
                    key: g.key,
                };
                self.reply(g.client, g.req, Err(err));
                None
            }
            Lookup::Malformed(err) => {
                self.reply(g.client, g.req, Err(err));
                None
            }
            _ if local => self.wait_for_local_owner(g),
            _ => {
                // Remote owner: fetch its committed data from its node server.
                if !self.modex_inflight.contains_key(&g.owner) {
                    let id = self.next_modex;
                    self.next_modex += 1;
                    self.modex_inflight.insert(g.owner.clone(), id);
                    let node = self.jobs.node_of(&g.owner).unwrap_or(self.node);
                    let timeout_ms = g.deadline.map(|_| g.timeout_ms);
                    self.send_peer(
                        node,
                        PeerMsg::ModexReq {
                            req: id,
                            proc: g.owner.clone(),
                            timeout_ms,
                        },
                    );
                }
                g.fetched = false;
                Some(g)
            }
        }
    }

    fn retry_gets(&mut self, owner: &ProcId, fetched: bool) {
        let (mine, rest): (Vec<_>, Vec<_>) = std::mem::take(&mut self.gets)
            .into_iter()
            .partition(|g| &g.owner == owner);
        self.gets = rest;
        for mut g in mine {
            g.fetched |= fetched;
            if let Some(g) = self.try_get(g) {
                self.gets.push(g);
            }
        }
    }

    fn on_committed(&mut self, proc: &ProcId, _now: Time) {
        self.retry_gets(proc, false);
        let (ready, rest): (Vec<_>, Vec<_>) = std::mem::take(&mut self.modex_waits)
            .into_iter()
            .partition(|m| &m.proc == proc);
        self.modex_waits = rest;
        for m in ready {
            let data = self.kv.remote_view(&m.proc);
            self.send_peer(
                m.from,
                PeerMsg::ModexResp {
                    req: m.req,
                    proc: m.proc,
                    result: Ok(data),
                },
            );
        }
    }

    fn modex_request(
        &mut self,
        from: NodeId,
        req: u64,
        proc: ProcId,
        timeout_ms: Option<u64>,
        now: Time,
    ) {
        let result = if self.jobs.node_of(&proc) != Some(self.node) {
            Some(Err(CohortError::UnknownProc {
                reason: format!("not hosted by node server {}", self.node),
                proc: proc.clone(),
            }))
        } else if self.kv.has_committed(&proc) {
            Some(Ok(self.kv.remote_view(&proc)))
        } else if self.terminated.contains(&proc) {
            Some(Err(CohortError::ProcTerminated {
                op: "get".into(),
                procs: vec![proc.clone()],
            }))
        } else {
            None
        };
        match result {
            Some(result) => self.send_peer(from, PeerMsg::ModexResp { req, proc, result }),
            None => self.modex_waits.push(ModexWait {
                from,
                req,
                proc,
                deadline: timeout_ms.map(|t| now + Duration::from_millis(t)),
                timeout_ms: timeout_ms.unwrap_or(0),
            }),
        }
    }

    fn modex_response(
        &mut self,
        req: u64,
        proc: ProcId,
        result: Result<Posted, CohortError>,
        _now: Time,
    ) {
        if self.modex_inflight.get(&proc) == Some(&req) {
            self.modex_inflight.remove(&proc);
        }
        match result {
            Ok(data) => {
                self.kv.store_foreign(proc.clone(), data);
                self.retry_gets(&proc, true);
            }
            Err(e) => {
                let (mine, rest): (Vec<_>, Vec<_>) = std::mem::take(&mut self.gets)
                    .into_iter()
                    .partition(|g| g.owner == proc);
                self.gets = rest;
                for g in mine {
                    self.reply(g.client, g.req, Err(e.clone()));
                }
            }
        }
    }

    /// Job-level keys every process can read without anyone posting them.
    fn job_value(&self, proc: &ProcId, key: &str) -> Option<Value> {
        let job = self.jobs.job_of(&proc.nspace)?;
        let job_wide = match key {
            "pmix.job.size" => Some(Value::U32(job.size())),
            "pmix.univ.size" => Some(Value::U32(self.universe)),
            "pmix.num.nodes" => Some(Value::U32(job.num_nodes)),
            "pmix.nspace" => Some(Value::Str(job.nspace.to_string())),
            keys::JOB_NUM_APPS => Some(Value::U32(job.num_apps())),
            keys::PARENT_ID => self
                .jobs
                .parent_of(&job.nspace)
                .map(|p| Value::Procs(vec![p.clone()])),
            keys::SPAWNED => Some(Value::Bool(self.jobs.parent_of(&job.nspace).is_some())),
            _ => None,
        };
        if job_wide.is_some() {
            return job_wide;
        }
        if proc.is_wildcard() {
            // Node-level keys of a job's wildcard: the asker's node, this server's.
            // No local peers is "not found", not an empty list (Open MPI 4.1's connect
            // crashes on an empty one).
            let here = job.ranks_on(self.node);
            return match key {
                "pmix.local.size" => Some(Value::U32(here.len() as u32)),
                keys::NODE_SIZE => Some(Value::U32(self.jobs.node_size(self.node))),
                keys::HWLOC_XML => self.local_topology.clone().map(Value::Str),
                "pmix.lpeers" if here.is_empty() => None,
                "pmix.lpeers" => Some(Value::Str(
                    here.iter()
                        .map(|r| r.to_string())
                        .collect::<Vec<_>>()
                        .join(","),
                )),
                _ => None,
            };
        }
        let node = self.jobs.node_of(proc)?;
        match key {
            "pmix.rank" => Some(Value::U32(proc.rank)),
            "pmix.nodeid" => Some(Value::U32(node)),
            "pmix.hname" => job.node_names.get(node as usize).cloned().map(Value::Str),
            "pmix.lrank" => job.local_rank(proc.rank).map(Value::U32),
            keys::NODE_RANK => self.jobs.node_rank(proc).map(Value::U32),
            "pmix.local.size" => Some(Value::U32(job.count_on(node))),
            keys::NODE_SIZE => Some(Value::U32(self.jobs.node_size(node))),
            // Only this host's are known here.
            keys::HWLOC_XML if node == self.node => self.local_topology.clone().map(Value::Str),
            keys::LOCALITY_STRING | keys::CPUSET if node == self.node => {
                self.local_bindings.get(proc)?.value_of(key).map(Value::Str)
            }
            keys::APPNUM => job.app_of(proc.rank).map(Value::U32),
            keys::APP_SIZE | keys::APP_RANK => {
                let ranks = job.app_ranks(job.app_of(proc.rank)?)?;
                Some(Value::U32(if key == keys::APP_SIZE {
                    ranks.end - ranks.start
                } else {
                    proc.rank - ranks.start
                }))
            }
            keys::PSET_NAMES => job.psets_of(proc.rank).map(Value::Strs),
            _ => None,
        }
    }

    // ------------------------------------------------------------------ collectives

    /// Whether `procs` names every process of the job: no processes (the whole job by
    /// convention), or the job's wildcard `{job, *}` alone (MPI_Init's fence).
    fn names_whole_job(&self, procs: &[ProcId]) -> bool {
        match procs {
            [] => true,
            [p] => p.is_wildcard() && p.nspace == self.jobs.primary().nspace,
            _ => false,
        }
    }

    /// Expands wildcards (`{nspace,*}`, `{group,*}`, `{group, r}`) into sorted job procs.
    fn expand(&self, procs: &[ProcId]) -> Result<Vec<ProcId>, CohortError> {
        // The whole job, or a lone group wildcard, is already the sorted answer: no set
        // of every process, built per request at N log N name comparisons.
        if self.names_whole_job(procs) {
            return Ok(self.whole_job.to_vec());
        }
        if let [p] = procs {
            if let Some(g) = self
                .groups
                .get(p.nspace.as_str())
                .filter(|_| p.is_wildcard())
            {
                if g.members.windows(2).all(|w| w[0] < w[1]) {
                    return Ok(g.members.clone());
                }
            }
        }
        // Processes of this job, named one by one in ascending order (how leader lists
        // usually come): already the answer.
        let own = |p: &ProcId| !p.is_wildcard() && self.jobs.contains(p);
        let ascending = |w: &[ProcId]| {
            if w[0].nspace.shares_with(&w[1].nspace) {
                w[0].rank < w[1].rank
            } else {
                w[0] < w[1]
            }
        };
        if procs.iter().all(own) && procs.windows(2).all(ascending) {
            return Ok(procs.to_vec());
        }
        let mut out = BTreeSet::new();
        for p in procs {
            if let Some(job) = self.jobs.job_of(&p.nspace) {
                if p.is_wildcard() {
                    out.extend(job.all_procs());
                } else if job.contains(p) {
                    out.insert(p.clone());
                } else {
                    return Err(CohortError::UnknownProc {
                        reason: self.not_in_session(p),
                        proc: p.clone(),
                    });
                }
            } else if let Some(g) = self.groups.get(p.nspace.as_str()) {
                if p.is_wildcard() {
                    out.extend(g.members.iter().cloned());
                } else {
                    match g.members.get(p.rank as usize) {
                        Some(m) => {
                            out.insert(m.clone());
                        }
                        None => {
                            return Err(CohortError::UnknownProc {
                                reason: format!("group {:?} has {} members", g.id, g.members.len()),
                                proc: p.clone(),
                            })
                        }
                    }
                }
            } else {
                return Err(CohortError::UnknownProc {
                    reason: "no such namespace or group".into(),
                    proc: p.clone(),
                });
            }
        }
        Ok(out.into_iter().collect())
    }

    fn fence(
        &mut self,
        client: ClientId,
        req: ReqId,
        proc: ProcId,
        procs: Vec<ProcId>,
        opts: FenceOpts,
        now: Time,
    ) {
        let not_among = |m: &[ProcId]| {
            format!(
                "fence caller {proc} is not among the participants {}",
                fmt_procs(m)
            )
        };
        // No processes: every process of the caller's own job.
        let procs = if procs.is_empty() {
            vec![ProcId::wildcard(proc.nspace.clone())]
        } else {
            procs
        };
        let (members, sig) = if self.names_whole_job(&procs) {
            // The common fence (MPI_Init's): the server's one list and its signature,
            // not a copy of every process per request.
            if !self.jobs.primary().contains(&proc) {
                let e = CohortError::BadRequest(not_among(&self.whole_job));
                return self.reply(client, req, Err(e));
            }
            (Arc::clone(&self.whole_job), self.whole_job_sig.clone())
        } else {
            match self.participants_with(&procs, &proc, not_among) {
                Ok(m) => {
                    let sig = signature(&m);
                    (Arc::from(m), sig)
                }
                Err(e) => return self.reply(client, req, Err(e)),
            }
        };
        let seq = self
            .fence_seq
            .entry((proc.clone(), sig.clone()))
            .or_insert(0);
        let key = CollKey {
            kind: CollKind::Fence,
            id: sig,
            seq: *seq,
        };
        *seq += 1;
        let data = if opts.collect {
            self.kv.remote_view(&proc)
        } else {
            Posted::default()
        };
        let contrib = Contribution {
            proc: proc.clone(),
            data,
            group_info: Vec::new(),
            add_members: Vec::new(),
            flags: ContribFlags::default(),
        };
        let spec = CollSpec::Fence {
            procs: members,
            collect: opts.collect,
            tolerate_terminated: self.early_term_connection(&procs) || opts.ft_collective,
        };
        let waiter = waiter(client, req, proc, opts.timeout_ms, now);
        self.contribute(key, spec, contrib, waiter, now);
    }

    /// Whether `procs` is `{nspace,*}` of a connection whose members may terminate
    /// early: rfc0003 PMIX_CONNECT_EARLY_TERM_ALLOWED makes the server responsible "for
    /// adjusting completion requirements on any ongoing or future collectives for this
    /// nspace", so a fence over it completes without members that terminated.
    fn early_term_connection(&self, procs: &[ProcId]) -> bool {
        match procs {
            [p] if p.is_wildcard() => self
                .groups
                .get(p.nspace.as_str())
                .is_some_and(|g| g.connect == Some(ConnectMode::EarlyTermAllowed)),
            _ => false,
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn construct(
        &mut self,
        client: ClientId,
        req: ReqId,
        proc: ProcId,
        gid: String,
        procs: Arc<[ProcId]>,
        opts: ConstructOpts,
        now: Time,
    ) {
        if let Err(e) = self.check_group_id(&gid) {
            return self.reply(client, req, Err(e));
        }
        if let Some(g) = self.groups.get(&gid) {
            let err = CohortError::GroupIdInUse {
                id: gid,
                members: g.members.clone(),
            };
            return self.reply(client, req, Err(err));
        }
        let add_members = match self.expand_nonempty(&opts.add_members) {
            Ok(a) => a,
            Err(e) => return self.reply(client, req, Err(e)),
        };
        if let Err(e) = self.mark_local(&gid, opts.local_only, &procs, &add_members) {
            return self.reply(client, req, Err(e));
        }
        let contrib = Contribution {
            proc: proc.clone(),
            data: self.kv.remote_view(&proc),
            group_info: opts.group_info,
            add_members,
            flags: ContribFlags {
                optional: opts.optional,
                notify_termination: opts.notify_termination,
                assign_context_id: opts.assign_context_id,
                leader: opts.leader,
                bootstrap: opts.bootstrap,
                connect: opts.connect,
            },
        };
        let key = CollKey {
            kind: CollKind::Construct,
            id: gid,
            seq: 0,
        };
        let waiter = waiter(client, req, proc.clone(), opts.timeout_ms, now);
        if let Some(count) = opts.bootstrap {
            // group-construction-methods §6.4.3.2: a bootstrap leader passes only itself.
            if count == 0 || procs.len() != 1 || procs[0] != proc {
                let err = CohortError::BadRequest(format!(
                    "group {:?}: a bootstrap leader passes exactly itself ({proc}) and a leader count of at least 1 (got {} procs, count {count})",
                    key.id,
                    procs.len()
                ));
                return self.reply(client, req, Err(err));
            }
            return self.join_at_root(key, contrib, waiter, now);
        }
        if procs.is_empty() {
            // An add-member: hold the waiter here, join at the rendezvous directly.
            return self.join_at_root(key, contrib, waiter, now);
        }
        let leaders = self.construct_leaders(&procs).and_then(|l| {
            caller_among(l, &proc, |l| {
                format!(
                    "group {:?}: leader list {} does not include the caller {proc}; add-members call with no procs",
                    key.id,
                    fmt_procs(l)
                )
            })
        });
        let leaders = match leaders {
            Ok(l) => l,
            Err(e) => return self.reply(client, req, Err(e)),
        };
        self.contribute(key, CollSpec::Construct { leaders }, contrib, waiter, now);
    }

    /// A group id a new group may take: well formed, and not a job's namespace (now or
    /// one a spawn will give), which `{id, r}` would address as well.
    fn check_group_id(&self, id: &str) -> Result<(), CohortError> {
        validate_group_id(id)?;
        match self.jobs.namespace_clash(id) {
            Some(reason) => Err(CohortError::InvalidGroupId {
                id: id.to_string(),
                reason,
            }),
            None => Ok(()),
        }
    }

    /// A construct's leader list, canonical: expanded once per list a local leader sent
    /// (see `leaders_memo`).
    fn construct_leaders(&mut self, procs: &Arc<[ProcId]>) -> Result<Arc<[ProcId]>, CohortError> {
        if let Some(memo) = &self.leaders_memo {
            if memo.sent.upgrade().is_some_and(|s| Arc::ptr_eq(&s, procs)) {
                return Ok(memo.leaders.clone());
            }
        }
        let leaders: Arc<[ProcId]> = self.expand(procs)?.into();
        // A list with wildcards or group ranks expands by the groups of the moment.
        if procs
            .iter()
            .all(|p| !p.is_wildcard() && self.jobs.job_of(&p.nspace).is_some())
        {
            self.leaders_memo = Some(LeadersMemo {
                sent: Arc::downgrade(procs),
                leaders: leaders.clone(),
            });
        }
        Ok(leaders)
    }

    /// Participation that goes straight to the operation's rendezvous server (add-members,
    /// bootstrap leaders): the waiter stays here until the outcome comes back.
    fn join_at_root(&mut self, key: CollKey, contrib: Contribution, waiter: Waiter, now: Time) {
        let proc = contrib.proc.clone();
        if let Some(err) = self.late_failure(&key, &proc) {
            return self.reply(waiter.client, waiter.req, Err(err));
        }
        let attempt = self.attempt_of(&key);
        let coll = self.tracker(&key, attempt, now);
        if coll.waiters.iter().any(|w| w.proc == proc) {
            let err = CohortError::BadRequest(format!(
                "{proc} already participates in {}",
                op_name(&key)
            ));
            return self.reply(waiter.client, waiter.req, Err(err));
        }
        coll.waiters.push(waiter);
        let root = self.rendezvous_node(&key.id);
        let attempt = self.stamp(&key);
        self.send_peer(
            root,
            PeerMsg::CollJoin {
                key,
                contrib,
                attempt,
            },
        );
    }

    /// Expands `procs` and checks the caller is among them (`why` words the error).
    fn participants_with(
        &self,
        procs: &[ProcId],
        caller: &ProcId,
        why: impl FnOnce(&[ProcId]) -> String,
    ) -> Result<Vec<ProcId>, CohortError> {
        caller_among(self.expand(procs)?, caller, why)
    }

    fn expand_nonempty(&self, procs: &[ProcId]) -> Result<Vec<ProcId>, CohortError> {
        if procs.is_empty() {
            Ok(Vec::new())
        } else {
            self.expand(procs)
        }
    }

    fn destruct(
        &mut self,
        client: ClientId,
        req: ReqId,
        proc: ProcId,
        gid: String,
        (timeout_ms, ft_collective): (Option<u64>, bool),
        now: Time,
    ) {
        let group = match self.member_group(&gid, &proc) {
            Ok(g) => g,
            Err(e) => return self.reply(client, req, Err(e)),
        };
        let key = CollKey {
            kind: CollKind::Destruct,
            id: gid,
            seq: 0,
        };
        // rfc0003 PMIX_CONNECT_EARLY_TERM_ALLOWED: "adjusting completion requirements"
        // of the disconnect: members that terminated are not waited for.
        // PMIX_GROUP_FT_COLLECTIVE asks the same of this destruct alone.
        let tolerant = group.notify_termination
            || group.connect == Some(ConnectMode::EarlyTermAllowed)
            || ft_collective;
        let spec = CollSpec::Destruct {
            members: group.original.clone(),
            notify_termination: tolerant,
        };
        let contrib = Contribution {
            proc: proc.clone(),
            data: Posted::default(),
            group_info: Vec::new(),
            add_members: Vec::new(),
            flags: ContribFlags::default(),
        };
        let waiter = waiter(client, req, proc, timeout_ms, now);
        self.contribute(key, spec, contrib, waiter, now);
    }

    /// The members of group `gid` (which `proc` belongs to) known here to have failed:
    /// the local failure view. Members that left are not members any more.
    fn failed_members(&self, gid: &str, proc: &ProcId) -> Result<Vec<ProcId>, CohortError> {
        Ok(self.failed_view(self.member_group(gid, proc)?))
    }

    /// The members of `group` known here to have failed: terminated without having
    /// finalized first (a failure view's members).
    fn failed_view(&self, group: &Group) -> Vec<ProcId> {
        let mut failed = self.failed_of(group);
        failed.retain(|p| !self.finished.contains(p));
        failed
    }

    /// The members of `group` known here to have terminated.
    fn failed_of(&self, group: &Group) -> Vec<ProcId> {
        group
            .members
            .iter()
            .filter(|p| self.terminated.contains(*p))
            .cloned()
            .collect()
    }

    /// The node servers hosting `procs`, ascending, each once.
    fn nodes_of(&self, procs: &[ProcId]) -> Vec<NodeId> {
        let mut nodes: Vec<NodeId> = procs.iter().filter_map(|p| self.jobs.node_of(p)).collect();
        nodes.sort_unstable();
        nodes.dedup();
        nodes
    }

    /// The global failure view of group `gid`: `proc` contributes its local view, and
    /// the root answers every surviving member with the union of the views and of the
    /// members it knows terminated (see [`CollSpec::Agree`]).
    fn agree(
        &mut self,
        client: ClientId,
        req: ReqId,
        proc: ProcId,
        gid: String,
        timeout_ms: Option<u64>,
        now: Time,
    ) {
        let (members, local) = match self.member_group(&gid, &proc) {
            Ok(g) => (g.original.clone(), self.failed_view(g)),
            Err(e) => return self.reply(client, req, Err(e)),
        };
        let nodes = self.nodes_of(&members);
        let mut seq = self
            .agree_seq
            .get(&(proc.clone(), gid.clone()))
            .copied()
            .unwrap_or(0);
        // A call decided by a server known lost here would fail: every server that
        // knows of the loss skips it alike, and one that does not yet fails that call
        // with `PeerLost`, after which its caller's next call is the one the others
        // made. (Bounded: the caller's own server is among `nodes`.)
        for _ in 0..64 {
            let root = salted_root(&gid, seq, &nodes).unwrap_or(self.node);
            if !self.lost_nodes.contains(&root) {
                break;
            }
            seq += 1;
        }
        self.agree_seq.insert((proc.clone(), gid.clone()), seq + 1);
        let key = CollKey {
            kind: CollKind::Agree,
            id: gid,
            seq,
        };
        let contrib = Contribution {
            proc: proc.clone(),
            data: Posted::default(),
            group_info: vec![(FAILED_VIEW_KEY.into(), Value::Procs(local))],
            add_members: Vec::new(),
            flags: ContribFlags::default(),
        };
        let waiter = waiter(client, req, proc, timeout_ms, now);
        self.contribute(key, CollSpec::Agree { members }, contrib, waiter, now);
    }

    /// Operation `key` (a fence, a global failure view, a construct or a destruct) lost
    /// its root before its outcome arrived here. The root may have answered other
    /// servers first, and a server that passed its answer on may be lost too with the
    /// answer still on its way to some: failing here alone, or taking "not here" from
    /// the live servers for "nowhere", would leave some members with the outcome (a
    /// fence's data, a view, a group or a destructed one) and others with an error
    /// (whose retry then meets nobody). So one server decides for all — the decider:
    /// for a fence or view, the first of its servers not lost; for a construct or
    /// destruct, the group id's rendezvous now (the first of its candidates not lost) —
    /// and this one asks it. The decider polls every other live server that may have
    /// the outcome (a fence's or view's servers; for a construct or destruct, every
    /// server: add-members' servers are in no tree); a server answers once everything
    /// the lost servers before the decider (and the root) sent it has arrived, and one
    /// that lacks the outcome drops it if it still arrives later. The outcome if any
    /// server has it, else `PeerLost` naming the root, for everyone alike (a
    /// fault-tolerant fence or a destruct goes on at the decider instead:
    /// [`Self::reroot`]). Under a decider's loss the askers ask the next one. `false`
    /// for invites.
    fn ask_about_agreement(&mut self, key: &CollKey, now: Time) -> bool {
        if !decided_after_root_loss(key.kind) || !self.colls.contains_key(key) {
            return false;
        }
        // A lean outcome waiting here for the last allgather rounds is dropped: this
        // server now tells the decider it lacks the outcome, which must stay true (the
        // rounds may never come, and the decider may decide otherwise).
        self.colls.get_mut(key).expect("checked").lean = None;
        self.ask_agreement_decider(key, now);
        true
    }

    /// Asks `key`'s decider (as this server knows it now) for its decision; polls the
    /// servers when this server is the decider.
    fn ask_agreement_decider(&mut self, key: &CollKey, now: Time) {
        let decider = self.agreement_decider(key).unwrap_or(self.node);
        tracing::debug!(?key, decider, "root lost: asking the decider");
        self.agree_asking.insert(key.clone(), decider);
        if decider == self.node {
            self.poll_for_agreement(key, now);
        } else {
            self.tell_losses_before(decider, key, decider);
            let spec = self
                .colls
                .get(key)
                .and_then(|c| c.spec.clone())
                .filter(|_| Self::query_carries_spec(key.kind));
            let query = PeerMsg::AgreeQuery {
                key: key.clone(),
                spec,
            };
            self.send_peer(decider, query);
        }
    }

    /// Whether a query about a lost root's operation of `kind` carries the asker's spec:
    /// a fence's decider may have no part in it (its processes terminated, excused by
    /// a fault-tolerant fence) and polls the fence's servers all the same; a construct's
    /// or destruct's records the failure with it.
    fn query_carries_spec(kind: CollKind) -> bool {
        kind == CollKind::Fence || meets_at_rendezvous(kind)
    }

    /// Tells `to` of the losses of `key`'s servers before `decider` and of its root
    /// (all known lost here), ahead of a question about `key`: `to` answers only once
    /// it knows them, and a server that told of a loss may have been lost itself before
    /// it told `to`.
    fn tell_losses_before(&mut self, decider: NodeId, key: &CollKey, to: NodeId) {
        let mut before: Vec<NodeId> = self
            .agreement_servers(key)
            .unwrap_or_default()
            .into_iter()
            .take_while(|&n| n != decider)
            .collect();
        // A fence's or view's root may come after the decider.
        before.extend(self.agreement_root(key));
        before.sort_unstable();
        before.dedup();
        before.retain(|&n| n != to && self.lost_nodes.contains(&n));
        for node in before {
            self.send_peer(to, PeerMsg::NodeLost { node });
        }
    }

    /// The servers `key`'s decider polls, in the order deciders are taken. A view's:
    /// its tracker's spec, else the group this server knows. A fence's: its tracker's
    /// spec, else the one an asker gave. A construct's or destruct's: every server, in
    /// the order of the id's rendezvous candidates.
    fn agreement_servers(&self, key: &CollKey) -> Option<Vec<NodeId>> {
        if meets_at_rendezvous(key.kind) {
            return Some(self.rendezvous_order(&key.id).collect());
        }
        let spec = self.colls.get(key).and_then(|c| c.spec.as_ref());
        match spec.or_else(|| self.agree_specs.get(key)) {
            Some(CollSpec::Agree { members }) => return Some(self.nodes_of(members)),
            Some(spec @ CollSpec::Fence { .. }) => return Some(self.nodes_of(expected_of(spec))),
            _ => {}
        }
        if key.kind != CollKind::Agree {
            // A fence this server has no tracker of and was not asked about: its part
            // is done, or never began.
            return None;
        }
        let group = self
            .groups
            .get(&key.id)
            .or_else(|| self.retired.get(&key.id))?;
        Some(self.nodes_of(&group.original))
    }

    /// The first of `key`'s servers not known lost here.
    fn agreement_decider(&self, key: &CollKey) -> Option<NodeId> {
        self.agreement_servers(key)?
            .into_iter()
            .find(|n| !self.lost_nodes.contains(n))
    }

    /// Whether this server may answer about `key` a poll of `decider` (or, as the
    /// decider, a query): it knows every server before the decider to be lost (a
    /// view's root too), so whatever those sent here has arrived. A server that does
    /// not know the view at all answers at once. (A construct's or destruct's root was
    /// the id's rendezvous when the operation started: a server before the decider.)
    fn may_answer_about_agreement(&self, decider: NodeId, key: &CollKey) -> bool {
        if !meets_at_rendezvous(key.kind)
            && self
                .agreement_root(key)
                .is_some_and(|r| r != decider && !self.lost_nodes.contains(&r))
        {
            // (A fault-tolerant fence going on at its decider has it for its root.)
            return false;
        }
        self.agreement_servers(key).is_none_or(|servers| {
            servers
                .iter()
                .take_while(|&&n| n != decider)
                .all(|n| self.lost_nodes.contains(n))
        })
    }

    /// What this server has of `key` for a decider, if it has anything: a view ended
    /// here (decided, or `Failed`); a construct or destruct that succeeded here and is
    /// not in progress here again.
    fn agreement_state(&self, key: &CollKey) -> Option<AgreeState> {
        if key.kind == CollKind::Agree {
            return self.agree_done.get(key).map(|done| match done {
                Some(outcome) => AgreeState::Has(outcome.clone()),
                None => AgreeState::Failed,
            });
        }
        if self.colls.contains_key(key) {
            return None;
        }
        self.settled_outcome(key)
            .map(|outcome| AgreeState::Has(outcome.clone()))
    }

    /// The outcome fence, construct or destruct `key` succeeded with here, while kept
    /// (see `settled`).
    fn settled_outcome(&self, key: &CollKey) -> Option<&CollOutcome> {
        match key.kind {
            CollKind::Fence => self.settled_fences.get(key),
            k if meets_at_rendezvous(k) => self.settled.get(key),
            _ => None,
        }
    }

    /// Keeps the outcome a fence, construct or destruct succeeded with here.
    fn settle(&mut self, key: &CollKey, outcome: &CollOutcome) {
        match key.kind {
            CollKind::Fence => self.settled_fences.insert(key.clone(), outcome.clone()),
            k if meets_at_rendezvous(k) => self.settled.insert(key.clone(), outcome.clone()),
            _ => None,
        };
    }

    /// This server decides `key`: it asks every other live server what it has, and
    /// lacks it itself from now on (a late copy from the old tree is dropped).
    fn poll_for_agreement(&mut self, key: &CollKey, now: Time) {
        match self.agreement_state(key) {
            Some(AgreeState::Has(outcome)) => {
                return self.decide_agreement(key, Some(outcome), now)
            }
            Some(_) => return self.decide_agreement(key, None, now),
            None => {}
        }
        if self.agree_polling.contains_key(key) {
            return;
        }
        if key.kind == CollKind::Agree {
            self.agree_bound.insert(key.clone(), ());
        }
        let poll: BTreeSet<NodeId> = self
            .agreement_servers(key)
            .unwrap_or_default()
            .into_iter()
            .filter(|n| *n != self.node && !self.lost_nodes.contains(n))
            .collect();
        tracing::debug!(?key, ?poll, "polling for a lost root's operation");
        for &n in &poll {
            self.tell_losses_before(self.node, key, n);
            self.send_peer(n, PeerMsg::AgreePoll { key: key.clone() });
        }
        if poll.is_empty() {
            return self.decide_agreement(key, None, now);
        }
        self.agree_polling.insert(key.clone(), poll);
    }

    /// `peer` is lost: it will not answer polls; operations it was to decide are asked
    /// of the next decider; questions waiting for its loss can be answered now.
    fn agreement_peer_lost(&mut self, peer: NodeId, now: Time) {
        let mut nobody: Vec<CollKey> = Vec::new();
        for (key, waiting) in self.agree_polling.iter_mut() {
            if waiting.remove(&peer) && waiting.is_empty() {
                nobody.push(key.clone());
            }
        }
        nobody.sort_unstable();
        for key in nobody {
            self.decide_agreement(&key, None, now);
        }
        let mut reask: Vec<CollKey> = self
            .agree_asking
            .iter()
            .filter(|(_, d)| **d == peer)
            .map(|(k, _)| k.clone())
            .collect();
        reask.sort_unstable();
        for key in reask {
            self.ask_agreement_decider(&key, now);
        }
        self.agree_waiting.retain(|(n, _)| *n != peer);
        let mut questions = std::mem::take(&mut self.agree_questions);
        let due = crate::take_where(&mut questions, |(from, key, poll)| {
            self.may_answer_about_agreement(if *poll { *from } else { self.node }, key)
        });
        self.agree_questions = questions;
        for (from, key, poll) in due {
            if !self.lost_nodes.contains(&from) {
                self.answer_about_agreement(from, key, poll, now);
            }
        }
    }

    /// Another server asks about `key`: its decider (`poll`) what this server has of
    /// it, or an asker (`!poll`) for this server's decision.
    fn agreement_question(&mut self, from: NodeId, key: CollKey, poll: bool, now: Time) {
        if !decided_after_root_loss(key.kind) {
            return;
        }
        let decider = if poll { from } else { self.node };
        let goes_on_here = self.colls.get(&key).and_then(Coll::rerooted_at) == Some(self.node);
        if !poll && goes_on_here {
            // A fault-tolerant fence this server decided goes on here: so it does for
            // the asker, whose processes called late.
            let state = AgreeState::Failed;
            return self.send_peer(from, PeerMsg::AgreeAnswer { key, state });
        }
        if self.agree_done.contains_key(&key) || self.may_answer_about_agreement(decider, &key) {
            self.answer_about_agreement(from, key, poll, now);
        } else if self.agree_questions.len() < MAX_EARLY_MSGS {
            tracing::debug!(?key, from, poll, "question waits for losses");
            // What the lost servers sent here may still be on its way: answer once
            // their losses are known here.
            self.agree_questions.push((from, key, poll));
        }
    }

    fn answer_about_agreement(&mut self, to: NodeId, key: CollKey, poll: bool, now: Time) {
        if let Some(state) = self.agreement_state(&key) {
            tracing::debug!(
                ?key,
                to,
                poll,
                "answering about a lost root's operation: ended here"
            );
            if let (false, AgreeState::Has(outcome)) = (poll, &state) {
                // As the decider, with the outcome here already.
                self.take_over_outcome(&key, outcome);
            }
            return self.send_peer(to, PeerMsg::AgreeAnswer { key, state });
        }
        if poll {
            // A view is bound here from now on; a construct's or destruct's tracker
            // here, if any, asks too (its root is before the decider, so known lost
            // here), which drops the outcome if it still arrives.
            if key.kind == CollKind::Agree {
                self.agree_bound.insert(key.clone(), ());
            }
            return self.send_peer(
                to,
                PeerMsg::AgreeAnswer {
                    key,
                    state: AgreeState::Lacks,
                },
            );
        }
        // This server is the decider (the asker knows every server before it lost, and
        // so does this one): answered once it decided.
        if !self
            .agree_waiting
            .iter()
            .any(|(n, k)| *n == to && *k == key)
            && self.agree_waiting.len() < MAX_EARLY_MSGS
        {
            self.agree_waiting.push((to, key.clone()));
        }
        self.poll_for_agreement(&key, now);
    }

    /// `from` answers this server's poll (it decides `key`) or query (`from` decides).
    fn agreement_answer(&mut self, from: NodeId, key: CollKey, state: AgreeState, now: Time) {
        if let AgreeState::Has(outcome) = &state {
            let fits = matches!(
                (key.kind, outcome),
                (CollKind::Agree, CollOutcome::Agree { .. })
                    | (CollKind::Fence, CollOutcome::Fence { .. })
                    | (CollKind::Construct, CollOutcome::Construct { .. })
                    | (CollKind::Destruct, CollOutcome::Destruct)
            );
            if !fits {
                tracing::error!(
                    ?key,
                    from,
                    "protocol violation: node server {from} answered about {} with the \
                     outcome of another kind of operation; answer dropped",
                    op_name(&key)
                );
                return;
            }
        }
        if let Some(waiting) = self.agree_polling.get_mut(&key) {
            if !waiting.remove(&from) {
                return;
            }
            match state {
                AgreeState::Has(outcome) => self.decide_agreement(&key, Some(outcome), now),
                AgreeState::Failed => self.decide_agreement(&key, None, now),
                AgreeState::Lacks if waiting.is_empty() => self.decide_agreement(&key, None, now),
                AgreeState::Lacks => {}
            }
        } else if self.agree_asking.get(&key) == Some(&from) {
            match state {
                AgreeState::Has(outcome) => self.end_agreement(&key, Some(outcome), now),
                AgreeState::Failed => self.end_agreement(&key, None, now),
                AgreeState::Lacks => {}
            }
        }
    }

    /// This server, `key`'s decider, decided: the outcome (`Some`), or nobody has it.
    /// It tells the servers waiting for it and ends the operation here. A construct's
    /// or destruct's decider is the group id's rendezvous now: it takes over the id's
    /// bookkeeping from the lost root.
    fn decide_agreement(&mut self, key: &CollKey, decision: Option<CollOutcome>, now: Time) {
        tracing::debug!(
            ?key,
            success = decision.is_some(),
            "decided a lost root's operation"
        );
        self.agree_polling.remove(key);
        let state = match &decision {
            Some(outcome) => AgreeState::Has(outcome.clone()),
            None => AgreeState::Failed,
        };
        let waiting = crate::take_where(&mut self.agree_waiting, |(_, k)| k == key);
        for (to, key) in waiting {
            let state = state.clone();
            self.send_peer(to, PeerMsg::AgreeAnswer { key, state });
        }
        if let Some(outcome) = &decision {
            self.take_over_outcome(key, outcome);
        }
        self.end_agreement(key, decision, now);
    }

    /// This server, a construct's or destruct's decider, hands on `outcome`, which its
    /// lost root decided: it is the group id's rendezvous now, and takes over the id's
    /// bookkeeping (the id in use, or free again; a late abort is stale).
    fn take_over_outcome(&mut self, key: &CollKey, outcome: &CollOutcome) {
        if !meets_at_rendezvous(key.kind) {
            return;
        }
        match outcome {
            CollOutcome::Construct { members, .. } => {
                self.live_roots.insert(key.id.clone(), members.clone());
            }
            CollOutcome::Destruct => {
                self.live_roots.remove(&key.id);
            }
            _ => {}
        }
        self.recently_done.insert(key.clone(), ());
        self.settle(key, outcome);
    }

    /// `key` ends here as its decider decided (a fault-tolerant fence that nobody has
    /// the outcome of goes on at the decider instead: [`Self::reroot`]).
    fn end_agreement(&mut self, key: &CollKey, decision: Option<CollOutcome>, now: Time) {
        let decider = self.agree_asking.remove(key).unwrap_or(self.node);
        let asked_spec = self.agree_specs.remove(key);
        if key.kind == CollKind::Agree {
            self.agree_done.insert(key.clone(), decision.clone());
        }
        let spec = self.colls.get(key).and_then(|c| c.spec.clone());
        if let Some(outcome) = decision {
            if self.colls.contains_key(key) {
                self.complete(key.clone(), spec, outcome, Vec::new(), false, now);
            }
            return;
        }
        if let Some(spec) = spec.clone().or_else(|| asked_spec.clone()) {
            if goes_on_after_root_loss(&spec) {
                return self.reroot(key, decider, spec, now);
            }
        }
        let error = CohortError::PeerLost {
            node: self.lost_root_of(key),
            reason: format!("it was the root of {}", op_name(key)),
        };
        // A construct's decider is the id's rendezvous now: servers that heard of the
        // loss before they started their part came here, and fail too,
        // down the tree they used. Without a part in it, it records the failure with
        // the spec an asker gave: what of it still comes here is answered with the
        // failure, and its own processes that call later get it too.
        let forward =
            meets_at_rendezvous(key.kind) && self.agreement_decider(key) == Some(self.node);
        if !self.colls.contains_key(key) {
            if forward {
                let outcome = CollOutcome::Failed(error);
                self.complete(key.clone(), asked_spec, outcome, Vec::new(), true, now);
            }
            return;
        }
        let spec = spec.or(asked_spec);
        if forward {
            let tree = spec.as_ref().map(|s| self.tree_for(key, s));
            self.colls.get_mut(key).expect("checked").tree = tree;
        }
        let outcome = CollOutcome::Failed(error);
        self.complete(key.clone(), spec, outcome, Vec::new(), forward, now);
    }

    /// Operation `key`, whose root was lost with its outcome nowhere (its decider found
    /// none), goes on with `root` (the decider, which told everyone) as its root.
    ///
    /// - A fault-tolerant fence, in a flat tree over its live servers:
    ///   PMIX_GROUP_FT_COLLECTIVE adjusts a collective "on-the-fly for terminated
    ///   processes", and the lost root's processes terminated with it. A server whose
    ///   processes call later finds the root lost (a fence's root follows from its
    ///   participants), asks the decider, and comes there too.
    /// - A destruct, in the tree it would have had if it had begun after the loss: the
    ///   decider is the group id's rendezvous now, where a server whose processes call
    ///   later goes by itself. Its members on the lost server terminated: they are
    ///   excused or fail it, as for any destruct.
    ///
    /// Each server sends what it has there once its subtree is settled. The decider
    /// makes a tracker if it has none (its own processes took no part).
    fn reroot(&mut self, key: &CollKey, root: NodeId, spec: CollSpec, now: Time) {
        let tree = if meets_at_rendezvous(key.kind) {
            let tree = self.tree_for(key, &spec);
            if tree.root() != root {
                // The decider is the first of the id's candidates not lost, here as
                // there: the asker knew every loss before it, and was told the rest.
                tracing::warn!(
                    ?key,
                    root,
                    rendezvous = tree.root(),
                    "{} goes on at its decider, which is not its rendezvous here",
                    op_name(key)
                );
            }
            tree
        } else {
            let mut live = self.nodes_of(expected_of(&spec));
            live.retain(|n| !self.lost_nodes.contains(n));
            // A star (the root is added if it is not among them).
            Tree::new(&live, root, TreeShape::KAry(live.len().max(1)))
        };
        if !self.colls.contains_key(key) {
            if root != self.node {
                return;
            }
            let attempt = self.attempt_of(key);
            self.tracker(key, attempt, now).spec = Some(spec);
        }
        tracing::debug!(?key, root, "going on at the decider after the root's loss");
        let coll = self.colls.get_mut(key).expect("present");
        coll.tree = Some(tree);
        coll.rerooted = true;
        coll.sent_up = false;
        coll.sent_to = None;
        coll.subtree_expected.set(None);
        let timed_out = coll.timed_out;
        if coll.gather.is_some() {
            // What this server gathered goes to the new root, which sends the whole
            // outcome.
            coll.fallback = true;
            self.fallback_up(key);
        }
        self.progress(key, now);
        if let Some(timeout_ms) = timed_out.filter(|_| self.colls.contains_key(key)) {
            // A caller here timed out and the lost root was asked to end it (it may
            // have been probing): the new root is asked instead, or probes itself.
            // Otherwise the operation would wait for ever for a process that never
            // calls, its waiters here gone.
            let err = CohortError::Timeout {
                op: op_name(key),
                timeout_ms,
                missing: Vec::new(),
            };
            self.ask_root_to_end(key, Some(root), err, now);
        }
    }

    /// The lost root `key`'s failure names: its tracker's root, else the first lost
    /// server of the decider order (a construct's or destruct's first pick).
    fn lost_root_of(&self, key: &CollKey) -> NodeId {
        let tracked = self
            .colls
            .get(key)
            .and_then(|c| c.tree.as_ref())
            .map(|t| t.root());
        if let Some(root) = tracked.filter(|r| self.lost_nodes.contains(r)) {
            return root;
        }
        if meets_at_rendezvous(key.kind) {
            if let Some(&first) = self.lost_ahead(&key.id).last() {
                return first;
            }
        }
        self.agreement_root(key).unwrap_or(self.node)
    }

    /// The root of view `key`: its tracker's, else the one its group's members give.
    fn agreement_root(&self, key: &CollKey) -> Option<NodeId> {
        if let Some(root) = self.root_of(key) {
            return Some(root);
        }
        if key.kind != CollKind::Agree {
            return None;
        }
        let group = self
            .groups
            .get(&key.id)
            .or_else(|| self.retired.get(&key.id))?;
        salted_root(&key.id, key.seq, &self.nodes_of(&group.original))
    }

    fn member_group(&self, gid: &str, proc: &ProcId) -> Result<&Group, CohortError> {
        validate_group_id(gid)?;
        let g = self
            .groups
            .get(gid)
            .ok_or_else(|| CohortError::GroupNotFound { id: gid.into() })?;
        if !g.has(proc) {
            return Err(CohortError::NotAMember {
                id: gid.into(),
                proc: proc.clone(),
            });
        }
        Ok(g)
    }

    fn contribute(
        &mut self,
        key: CollKey,
        spec: CollSpec,
        contrib: Contribution,
        waiter: Waiter,
        now: Time,
    ) {
        if let Some(err) = self.late_failure(&key, &contrib.proc) {
            return self.reply(waiter.client, waiter.req, Err(err));
        }
        self.recently_done.remove(&key);
        self.fallback_done.remove(&key);
        let attempt = self.attempt_of(&key);
        let coll = self.tracker(&key, attempt, now);
        if coll.contribs.contains_key(&contrib.proc) {
            if !coll.waiters.iter().any(|w| w.proc == contrib.proc) {
                // Its previous call gave up on the root (abort grace) and got a
                // timeout; that attempt stays open for the root's verdict (which may
                // yet be a success). This call starts the next attempt after it.
                self.parked.push((key, spec, contrib, waiter));
                return;
            }
            let err = CohortError::BadRequest(format!(
                "{} already participates in {}",
                contrib.proc,
                op_name(&key)
            ));
            return self.reply(waiter.client, waiter.req, Err(err));
        }
        if let Err(e) = self.merge_spec(&key, spec) {
            self.reply(waiter.client, waiter.req, Err(e.clone()));
            return self.fail(&key, e, now);
        }
        let coll = self.colls.get_mut(&key).expect("created above");
        coll.contribs.insert(contrib.proc.clone(), contrib);
        coll.waiters.push(waiter);
        self.progress(&key, now);
    }

    /// The error of a failed `key` that `proc` was expected in but had not joined yet.
    fn late_failure(&mut self, key: &CollKey, proc: &ProcId) -> Option<CohortError> {
        let (err, late) = self.tombstones.get_mut(key)?;
        if !late.remove(proc) {
            return None;
        }
        let err = err.clone();
        if late.is_empty() {
            self.tombstones.remove(key);
        }
        Some(err)
    }

    /// Remembers which local participants of failed `key` had not called yet.
    fn bury(
        &mut self,
        key: &CollKey,
        spec: Option<&CollSpec>,
        late: &[ProcId],
        err: &CohortError,
        answered: &[Waiter],
        joined: &[ProcId],
    ) {
        let late: BTreeSet<ProcId> = spec
            .map(expected_of)
            .unwrap_or_default()
            .iter()
            .chain(late)
            .filter(|p| self.jobs.node_of(p) == Some(self.node))
            .filter(|p| !answered.iter().any(|w| &w.proc == *p) && !self.terminated.contains(*p))
            // Joined, but answered already (its server gave up on the root).
            .filter(|p| !joined.contains(p))
            .cloned()
            .collect();
        if late.is_empty() {
            return;
        }
        self.tombstones.insert(key.clone(), (err.clone(), late));
    }

    /// Records the spec of `key`, or checks a new one against it.
    fn merge_spec(&mut self, key: &CollKey, spec: CollSpec) -> Result<(), CohortError> {
        if self.colls.get(key).is_some_and(|c| c.spec.is_none()) {
            // The tree only once per operation and server (not per message).
            let (tree, disseminates) = self.plan_for(key, &spec);
            let gather = disseminates
                .then(|| Gather::new(&tree, self.node))
                .flatten();
            let coll = self.colls.get_mut(key).expect("caller created the tracker");
            coll.gather = gather;
            coll.spec = Some(spec);
            coll.tree = Some(tree);
            self.gather_lost_already(key);
            return Ok(());
        }
        let old = self
            .colls
            .get_mut(key)
            .and_then(|c| c.spec.as_mut())
            .expect("caller created the tracker");
        match (old, spec) {
            (
                CollSpec::Fence {
                    collect,
                    tolerate_terminated,
                    ..
                },
                CollSpec::Fence {
                    collect: c,
                    tolerate_terminated: t,
                    ..
                },
            ) => {
                *collect |= c;
                *tolerate_terminated &= t;
                Ok(())
            }
            (CollSpec::Construct { leaders }, CollSpec::Construct { leaders: l }) => {
                if *leaders == l {
                    Ok(())
                } else {
                    Err(CohortError::LeaderMismatch {
                        id: key.id.clone(),
                        a: leaders.to_vec(),
                        b: l.to_vec(),
                    })
                }
            }
            (
                CollSpec::Destruct {
                    notify_termination, ..
                },
                CollSpec::Destruct {
                    notify_termination: t,
                    ..
                },
            ) => {
                // Tolerant only if every caller is (PMIX_GROUP_FT_COLLECTIVE per call).
                *notify_termination &= t;
                Ok(())
            }
            (CollSpec::Agree { members }, CollSpec::Agree { members: m }) => {
                if Arc::ptr_eq(members, &m) || **members == *m {
                    Ok(())
                } else {
                    Err(CohortError::Mismatch {
                        op: op_name(key),
                        reason: format!(
                            "one member knows the group as {}, another as {}",
                            fmt_procs(members),
                            fmt_procs(&m)
                        ),
                    })
                }
            }
            (CollSpec::Bootstrap { leaders }, CollSpec::Bootstrap { leaders: n })
                if *leaders == n =>
            {
                Ok(())
            }
            _ => Err(CohortError::Mismatch {
                op: op_name(key),
                reason: "operation kinds differ".into(),
            }),
        }
    }

    /// A bootstrap leader joined at the root saying there are `n` leaders.
    fn merge_bootstrap(&mut self, key: &CollKey, proc: &ProcId, n: u32) -> Result<(), CohortError> {
        let coll = self.colls.get(key).expect("caller created the tracker");
        match &coll.spec {
            None => self.merge_spec(key, CollSpec::Bootstrap { leaders: n }),
            Some(CollSpec::Bootstrap { leaders: m }) if *m == n => Ok(()),
            Some(CollSpec::Bootstrap { leaders: m }) => {
                let m = *m;
                let other = coll
                    .joins
                    .values()
                    .find(|c| c.flags.bootstrap == Some(m))
                    .map(|c| c.proc.clone())
                    .unwrap_or_else(|| proc.clone());
                Err(CohortError::LeaderCountMismatch {
                    id: key.id.clone(),
                    a: (other, m),
                    b: (proc.clone(), n),
                })
            }
            Some(_) => Err(CohortError::Mismatch {
                op: op_name(key),
                reason: format!(
                    "{proc} uses the bootstrap method, other callers the collective one"
                ),
            }),
        }
    }

    /// The node server where group `gid`'s constructs and destructs meet: the first
    /// live one in the id's order (its hash's pick, then the next ones in turn), so an
    /// id whose first pick was lost stays usable. A server that learns of a loss before
    /// starting its part goes to the next one; a message about such an operation is
    /// preceded on its link by the losses passed over ([`Self::lost_ahead`]), so its
    /// receiver routes it alike. Operations in flight when their root is lost fail with
    /// `PeerLost`, also at the next one for the servers that went there
    /// ([`Self::node_lost`]).
    fn rendezvous_node(&self, gid: &str) -> NodeId {
        if self.local_groups.contains(gid) {
            return self.node;
        }
        self.rendezvous_order(gid)
            .find(|x| *x == self.node || !self.lost_nodes.contains(x))
            .unwrap_or(self.node)
    }

    /// Group `gid`'s candidate rendezvous servers in turn: its hash's pick, then the
    /// next ones, all of them once.
    fn rendezvous_order(&self, gid: &str) -> impl Iterator<Item = NodeId> + '_ {
        let n = self.all_nodes.len();
        let first = rendezvous(gid, n);
        (0..n).map(move |i| self.all_nodes[(first + i) % n])
    }

    /// The losses that `from` did not know of when it sent `msg`, a contribution to a
    /// construct or destruct (an Up, a join, a gather round, an abort) whose group id's
    /// rendezvous passes over them here: `from` sent it toward the lost rendezvous, so
    /// its part of the operation fails there once it hears (and the next rendezvous
    /// with it, see [`Self::node_lost`]); taking it here would let the next rendezvous
    /// decide with it while `from` fails, a split. `None`: `from` knew (a sender tells
    /// the losses ahead of such a message first, on the same link).
    fn behind_on(&self, from: NodeId, msg: &PeerMsg) -> Option<Vec<NodeId>> {
        if from == self.node || self.lost_nodes.is_empty() {
            return None;
        }
        let key = match msg {
            PeerMsg::CollUp { key, .. }
            | PeerMsg::CollJoin { key, .. }
            | PeerMsg::CollGather { key, .. }
            | PeerMsg::CollAbort { key, .. } => key,
            _ => return None,
        };
        if !meets_at_rendezvous(key.kind) {
            return None;
        }
        let behind: Vec<NodeId> = self
            .lost_ahead(&key.id)
            .into_iter()
            .filter(|x| !self.heard_lost.contains(&(from, *x)))
            .collect();
        (!behind.is_empty()).then_some(behind)
    }

    /// The lost node servers that group `gid`'s rendezvous passes over (none while its
    /// first pick lives).
    fn lost_ahead(&self, gid: &str) -> Vec<NodeId> {
        if self.lost_nodes.is_empty() || self.local_groups.contains(gid) {
            return Vec::new();
        }
        self.rendezvous_order(gid)
            .take_while(|x| *x != self.node && self.lost_nodes.contains(x))
            .collect()
    }

    /// PMIX_GROUP_LOCAL_ONLY: checks that every process `procs` and `add_members`
    /// name runs here, then makes this node server the rendezvous of `gid`. Without
    /// it, a mark left by a local group of that id that no longer exists goes.
    fn mark_local(
        &mut self,
        gid: &str,
        local_only: bool,
        procs: &[ProcId],
        add_members: &[ProcId],
    ) -> Result<(), CohortError> {
        if !local_only {
            if !self.local_groups.contains(gid) {
                return Ok(());
            }
            let live = self.groups.contains_key(gid)
                || self
                    .colls
                    .keys()
                    .any(|k| k.id == gid && meets_at_rendezvous(k.kind));
            if !live {
                self.local_groups.remove(gid);
            }
            return Ok(());
        }
        let leaders = self.expand(procs)?;
        let elsewhere = leaders
            .iter()
            .chain(add_members)
            .find(|p| self.jobs.node_of(p) != Some(self.node));
        if let Some(p) = elsewhere {
            let where_ = match self.jobs.node_of(p) {
                Some(n) => format!("on node server {n}"),
                None => "not a process of the session".to_string(),
            };
            return Err(CohortError::BadRequest(format!(
                "group {gid:?} with PMIX_GROUP_LOCAL_ONLY: {p} is {where_}, not on node \
                 server {} with the caller",
                self.node
            )));
        }
        self.local_groups.insert(gid.to_string());
        Ok(())
    }

    fn tree_for(&self, key: &CollKey, spec: &CollSpec) -> Tree {
        self.plan_for(key, spec).0
    }

    /// The tree of `key`, and whether it gathers by the dissemination allgather (the
    /// tree then only carries the lean outcome down).
    fn plan_for(&self, key: &CollKey, spec: &CollSpec) -> (Tree, bool) {
        let nodes = self.nodes_of(expected_of(spec));
        let root = match key.kind {
            CollKind::Fence | CollKind::Agree => {
                salted_root(&key.id, key.seq, &nodes).unwrap_or(self.node)
            }
            CollKind::Construct | CollKind::Destruct => self.rendezvous_node(&key.id),
            CollKind::Invite => self.invite_home(&key.id).unwrap_or(self.node),
        };
        let servers = nodes.len() + usize::from(nodes.binary_search(&root).is_err());
        if self.disseminates(key, spec, servers) {
            // The lean outcome goes down a binary tree: with the allgather's ⌈log2 n⌉
            // messages no server sends more than ⌈log2 n⌉ + 2.
            return (Tree::new(&nodes, root, TreeShape::KAry(2)), true);
        }
        let tree = match &self.locality {
            Some(locality) => Tree::with_locality(&nodes, root, self.shape, locality),
            None => Tree::new(&nodes, root, self.shape),
        };
        (tree, false)
    }

    /// Whether `spec`, carried by a peer's message about `key`, contradicts it. A fence's
    /// id is the signature of its participants, and its root and tree follow from them:
    /// a server that took another list for the same id would route the operation to
    /// another root than every other server does (an abort would then go back and forth
    /// between two servers that each take the other for the root, for ever). Honest
    /// servers never send one. The whole job's list is recognised by its allocation,
    /// a list this server holds for `key` by equality; any other list is checked once,
    /// when this server first learns of the fence. The same holds for a global failure
    /// view and its group's membership.
    fn spec_contradicts_key(&self, key: &CollKey, spec: &CollSpec) -> bool {
        match (key.kind, spec) {
            (CollKind::Fence, CollSpec::Fence { procs, .. }) => {
                let known = self.colls.get(key).and_then(|c| c.spec.as_ref());
                if let Some(CollSpec::Fence { procs: known, .. }) = known {
                    return known != procs;
                }
                if Arc::ptr_eq(procs, &self.whole_job) {
                    return key.id != self.whole_job_sig;
                }
                signature(procs) != key.id
            }
            // An invite's outcome goes from its tracker straight to each participant's
            // server and never names a spec: a server that took one would pass the
            // outcome on as the root of a tree of its own.
            (CollKind::Invite, _) => true,
            (CollKind::Fence, _) | (_, CollSpec::Fence { .. }) => true,
            // An agreement's root follows from the group's membership: a list other
            // than the group's (as this server knows it, or as the operation started
            // here) would route it elsewhere. A server that has not installed the group
            // yet takes the list it is given.
            (CollKind::Agree, CollSpec::Agree { members }) => {
                let known = match self.colls.get(key).and_then(|c| c.spec.as_ref()) {
                    Some(CollSpec::Agree { members }) => Some(members),
                    _ => self.groups.get(&key.id).map(|g| &g.original),
                };
                known.is_some_and(|known| !Arc::ptr_eq(known, members) && known != members)
            }
            (CollKind::Agree, _) | (_, CollSpec::Agree { .. }) => true,
            _ => false,
        }
    }

    /// The root of `key`, when it can be known here.
    fn root_of(&self, key: &CollKey) -> Option<NodeId> {
        match key.kind {
            // The tracker's tree keeps the root it was started with (a root lost since
            // fails it); a new one meets at the id's rendezvous as known now.
            CollKind::Construct | CollKind::Destruct => Some(
                self.colls
                    .get(key)
                    .and_then(|c| c.tree.as_ref())
                    .map_or_else(|| self.rendezvous_node(&key.id), |t| t.root()),
            ),
            CollKind::Invite => self.invite_home(&key.id),
            CollKind::Fence | CollKind::Agree => self
                .colls
                .get(key)
                .and_then(|c| c.tree.as_ref())
                .map(|t| t.root()),
        }
    }

    /// Where process `p` stands in collective `key`, as far as this server can tell.
    fn standing(&self, key: &CollKey, coll: &Coll, p: &ProcId) -> Standing {
        if coll.contribs.contains_key(p) || coll.joins.contains_key(p) {
            return Standing::Joined;
        }
        if coll.excused.contains(p) || self.has_departed(&key.id, key.kind, p) {
            return Standing::Excused;
        }
        if self.terminated.contains(p) {
            let joined = self
                .joined_before_death
                .get(p)
                .is_some_and(|keys| keys.contains(key));
            // A process that joined before dying has its contribution on the way, unless
            // its server was lost too: what that server had not passed on is gone (a
            // fault-tolerant fence waited for it for ever).
            let carrier_lost = self
                .jobs
                .node_of(p)
                .is_some_and(|n| n != self.node && self.lost_nodes.contains(&n));
            return if joined && !carrier_lost {
                Standing::Pending
            } else {
                Standing::FailedEarly
            };
        }
        Standing::Pending
    }

    /// Whether an expected process of `key` can settle only by joining: nobody
    /// terminated, left or was excused. Then fewer contributions than expected
    /// processes means one is pending, without ranking each.
    fn only_joins_settle(&self, key: &CollKey, coll: &Coll) -> bool {
        self.terminated.is_empty()
            && coll.excused.is_empty()
            && !self.departed.contains_key(key.id.as_str())
    }

    /// Whether a participant failing before joining dooms the whole operation.
    fn intolerant(coll: &Coll, spec: &CollSpec) -> bool {
        match spec {
            CollSpec::Fence {
                tolerate_terminated,
                ..
            } => !tolerate_terminated,
            CollSpec::Construct { .. } | CollSpec::Bootstrap { .. } => {
                let f = merged_flags(coll);
                !f.optional && !f.notify_termination
            }
            CollSpec::Destruct {
                notify_termination, ..
            } => !notify_termination,
            // Failed members are what it is about.
            CollSpec::Agree { .. } => false,
        }
    }

    /// Every process `key` waits for: the spec's list (for bootstrap: the leaders that
    /// joined so far) plus named add-members.
    fn all_expected(coll: &Coll, spec: &CollSpec) -> BTreeSet<ProcId> {
        let mut expected: BTreeSet<ProcId> = expected_of(spec).iter().cloned().collect();
        match spec {
            CollSpec::Construct { .. } => expected.extend(add_members_of(coll)),
            CollSpec::Bootstrap { .. } => {
                expected.extend(bootstrap_leaders(coll));
                expected.extend(add_members_of(coll));
            }
            _ => {}
        }
        expected
    }

    /// Moves `key` forward: a root decides; an interior or leaf server forwards its
    /// subtree once settled, and asks the root to fail an operation it knows is doomed.
    fn progress(&mut self, key: &CollKey, now: Time) {
        if self.agree_asking.contains_key(key) {
            // Its root is lost: the other servers' answers end it.
            return;
        }
        self.gather_step(key);
        let Some(coll) = self.colls.get(key) else {
            return;
        };
        if self.root_of(key) == Some(self.node) {
            self.check_leader(key);
            match self.evaluate_root(key) {
                Some(Decision::Pause(failed)) => self.report_failures(key, failed),
                Some(decision) => self.decide(key, decision, now),
                None => {}
            }
            return;
        }
        let (Some(spec), Some(tree)) = (&coll.spec, &coll.tree) else {
            return;
        };
        // Only a terminated process can have failed before joining: while none has,
        // no scan of every expected process per contribution.
        if !coll.doomed_sent && !self.terminated.is_empty() && Self::intolerant(coll, spec) {
            let failed: Vec<ProcId> = Self::all_expected(coll, spec)
                .into_iter()
                .filter(|p| self.standing(key, coll, p) == Standing::FailedEarly)
                .collect();
            if !failed.is_empty() {
                let err = CohortError::ProcTerminated {
                    op: op_name(key),
                    procs: failed,
                };
                self.colls.get_mut(key).expect("present").doomed_sent = true;
                return self.fail(key, err, now);
            }
        }
        if let Some(root) = self.root_of(key).filter(|r| self.lost_nodes.contains(r)) {
            if goes_on_after_root_loss(spec) {
                // A fault-tolerant fence started after its root was lost: its decider
                // says where it goes on.
                self.ask_about_agreement(key, now);
                return;
            }
            // Started after its root (the group id's rendezvous server, or the
            // invite's home) was lost: nobody can decide it.
            let err = CohortError::PeerLost {
                node: root,
                reason: format!("it is the root of {}", op_name(key)),
            };
            return self.fail(key, err, now);
        }
        if coll.gather.is_some() || coll.sent_up || !tree.contains(self.node) {
            return;
        }
        let subtree: HashSet<NodeId> = tree.subtree(self.node).into_iter().collect();
        // The subtree settles only once each of its processes joined: fewer contributions
        // than it hosts means not yet, without ranking every expected process on each
        // arrival.
        if self.only_joins_settle(key, coll) {
            let hosted = coll.subtree_expected.get().unwrap_or_else(|| {
                let n = expected_of(spec)
                    .iter()
                    .filter(|p| self.jobs.node_of(p).is_some_and(|n| subtree.contains(&n)))
                    .count();
                coll.subtree_expected.set(Some(n));
                n
            });
            if coll.contribs.len() + coll.joins.len() < hosted {
                return;
            }
        }
        let Some(newly_excused) = self.settled(key, coll, spec, |n| subtree.contains(&n)) else {
            return;
        };
        let mut excused = coll.excused.clone();
        excused.extend(newly_excused);
        let Some(parent) = self.live_parent(tree) else {
            // Every ancestor up to the root is lost; node_lost failed or will fail it.
            return;
        };
        // The lost servers between this one and `parent` (it skips them): the parent
        // learns of them with the losses below (their processes are the parent's to
        // count, and only their children may have heard of their loss: a fault-tolerant
        // fence's root waited for ever for the processes of a lost child of its own,
        // schedule seed 11737).
        let mut skipped = Vec::new();
        let mut at = self.node;
        while let Some(up) = tree.parent(at).filter(|&up| up != parent) {
            skipped.push(up);
            at = up;
        }
        let coll = self.colls.get_mut(key).expect("present");
        coll.sent_up = true;
        coll.sent_to = Some(parent);
        coll.excused = excused;
        // After a reroot, what a server holds of its old subtree goes up too, so its
        // new parent may complete before every child's part came: a part that comes
        // after is answered with the kept outcome, not taken for a new operation's
        // (a destruct's next incarnation completed without a member's call so).
        let rerooted = coll.rerooted;
        // The parent learns first of the losses in this subtree, whose processes it
        // counts as settled: it may not have heard of them (a fault-tolerant fence's
        // root waited for ever for the processes of a lost server it knew nothing of).
        let mut lost: Vec<NodeId> = self
            .lost_nodes
            .iter()
            .filter(|n| subtree.contains(n))
            .copied()
            .collect();
        lost.extend(skipped);
        for node in lost {
            self.send_peer(parent, PeerMsg::NodeLost { node });
        }
        let msg = self.up_msg(key, rerooted);
        self.send_peer(parent, msg);
    }

    /// Whether every expected process of `key` hosted on a node `on` accepts is
    /// settled (joined, excused or failed before joining); then those excused.
    fn settled(
        &self,
        key: &CollKey,
        coll: &Coll,
        spec: &CollSpec,
        on: impl Fn(NodeId) -> bool,
    ) -> Option<Vec<ProcId>> {
        let mut excused = Vec::new();
        for p in expected_of(spec)
            .iter()
            .filter(|p| self.jobs.node_of(p).is_some_and(&on))
        {
            match self.standing(key, coll, p) {
                Standing::Pending => return None,
                Standing::Excused => excused.push(p.clone()),
                Standing::Joined | Standing::FailedEarly => {}
            }
        }
        Some(excused)
    }

    /// This server's contributions to `key` (its subtree's), for its parent.
    fn up_msg(&self, key: &CollKey, rerouted: bool) -> PeerMsg {
        let coll = self.colls.get(key).expect("collective in progress");
        PeerMsg::CollUp {
            key: key.clone(),
            spec: coll
                .spec
                .clone()
                .expect("a collective with a tree has a spec"),
            contribs: coll.contribs.values().cloned().collect(),
            excused: coll.excused.iter().cloned().collect(),
            rerouted,
            attempt: self.stamp(key),
        }
    }

    /// Who may decide about construct `key` now: the claimed leader, else a designated
    /// leader that is alive; `None` means any participant may.
    fn current_leader(&self, coll: &Coll) -> Option<ProcId> {
        if let Some(l) = &coll.claimed_leader {
            return (!self.terminated.contains(l)).then(|| l.clone());
        }
        designated_leaders(coll)
            .into_iter()
            .find(|l| !self.terminated.contains(l))
    }

    /// Everyone taking part in construct `key` that is still alive (those that have not
    /// called yet too: events wait for them).
    fn live_participants(&self, coll: &Coll) -> Vec<ProcId> {
        let Some(spec) = &coll.spec else {
            return coll.joins.keys().cloned().collect();
        };
        let mut all = Self::all_expected(coll, spec);
        all.extend(coll.contribs.keys().cloned());
        all.extend(coll.joins.keys().cloned());
        all.into_iter()
            .filter(|p| !self.terminated.contains(p))
            .collect()
    }

    /// Root: processes failed before joining a notify-termination construct. The leader
    /// (or every participant without one) hears of each once; the construct waits for
    /// a decision (`Continue`/`Abort`) or a timeout.
    fn report_failures(&mut self, key: &CollKey, failed: Vec<ProcId>) {
        let Some(coll) = self.colls.get(key) else {
            return;
        };
        let fresh: Vec<ProcId> = failed
            .into_iter()
            .filter(|p| !coll.failure_reported.contains(p))
            .collect();
        if fresh.is_empty() {
            return;
        }
        let audience = match self.current_leader(coll) {
            Some(l) => vec![l],
            None => self.live_participants(coll),
        };
        let coll = self.colls.get_mut(key).expect("present");
        coll.failure_reported.extend(fresh.iter().cloned());
        for f in fresh {
            let event = group_event(codes::GROUP_MEMBER_FAILED, f.clone(), vec![f], &key.id);
            self.route_event(audience.clone(), event);
        }
    }

    /// Root: a designated (or claimed) leader died before the construct completed →
    /// every participant hears of it once, and may claim leadership or abort.
    fn check_leader(&mut self, key: &CollKey) {
        let Some(coll) = self.colls.get(key) else {
            return;
        };
        if coll.leader_failure_reported || coll.spec.is_none() {
            return;
        }
        let candidates: Vec<ProcId> = match &coll.claimed_leader {
            Some(l) => vec![l.clone()],
            None => designated_leaders(coll),
        };
        let Some(dead) = candidates
            .iter()
            .find(|l| self.terminated.contains(*l))
            .cloned()
        else {
            return;
        };
        if self.current_leader(coll).is_some() {
            return;
        }
        let audience = self.live_participants(coll);
        self.colls
            .get_mut(key)
            .expect("present")
            .leader_failure_reported = true;
        let event = group_event(
            codes::GROUP_LEADER_FAILED,
            dead.clone(),
            vec![dead],
            &key.id,
        );
        self.route_event(audience, event);
    }

    /// A new context id: unique in the session because the allocating server's index
    /// is in the low bits, never reused because the counter only grows.
    fn allocate_context_id(&mut self) -> ContextId {
        let id = (self.next_ctx << 16) | u64::from(self.node);
        self.next_ctx += 1;
        id
    }

    fn track_ack(&mut self, client: ClientId, req: ReqId, kind: AckKind, peer: NodeId) -> u64 {
        let token = self.next_token;
        self.next_token += 1;
        self.acks.insert(
            token,
            AckWaiter {
                client,
                req,
                kind,
                peer,
            },
        );
        token
    }

    /// A client's decision: routed to the invite tracker when this server knows one for
    /// the group, else to the group's rendezvous (collective / bootstrap root).
    fn decide_request(
        &mut self,
        client: ClientId,
        req: ReqId,
        proc: ProcId,
        gid: String,
        decision: ConstructDecision,
    ) {
        if let Err(e) = validate_group_id(&gid) {
            return self.reply(client, req, Err(e));
        }
        let (key, home) = match self.invite_home(&gid) {
            Some(home) => (invite_key(&gid), home),
            None => {
                let root = self.rendezvous_node(&gid);
                let key = CollKey {
                    kind: CollKind::Construct,
                    id: gid,
                    seq: 0,
                };
                (key, root)
            }
        };
        if self.lost_nodes.contains(&home) {
            // Its loss was reported already: no answer will come, and no later report.
            let err = CohortError::PeerLost {
                node: home,
                reason: format!("it was to apply decisions about group {:?}", key.id),
            };
            return self.reply(client, req, Err(err));
        }
        let token = self.track_ack(client, req, AckKind::Decide, home);
        self.send_peer(
            home,
            PeerMsg::Decide {
                key,
                proc,
                decision,
                token,
            },
        );
    }

    fn on_ack(&mut self, token: u64, result: Result<(), CohortError>) {
        let Some(a) = self.acks.remove(&token) else {
            return;
        };
        match (a.kind, result) {
            (AckKind::Decide, r) => self.reply(a.client, a.req, r.map(|_| Response::Done)),
            (AckKind::Join(_), Ok(())) => {}
            (AckKind::Join(id), Err(e)) => {
                let key = invite_key(&id);
                if let Some(c) = self.colls.get_mut(&key) {
                    c.waiters
                        .retain(|w| !(w.client == a.client && w.req == a.req));
                    // The refused join was all this server tracked of the invite (no
                    // other local joiner waits): nothing of it stays behind.
                    if c.waiters.is_empty()
                        && c.contribs.is_empty()
                        && c.joins.is_empty()
                        && c.probe.is_none()
                    {
                        self.colls.remove(&key);
                        if !self.invites.contains_key(&id) {
                            self.invite_homes.remove(&id);
                        }
                    }
                }
                self.reply(a.client, a.req, Err(e));
            }
        }
    }

    /// Root: a participant's decision about construct `key` in progress.
    fn apply_decision(
        &mut self,
        key: &CollKey,
        proc: &ProcId,
        decision: ConstructDecision,
        now: Time,
    ) -> Result<(), CohortError> {
        let Some(coll) = self.colls.get(key) else {
            return Err(CohortError::BadRequest(format!(
                "no construct of group {:?} is in progress at its rendezvous node server",
                key.id
            )));
        };
        let leader = self.current_leader(coll);
        if let (Some(l), false) = (
            &leader,
            matches!(decision, ConstructDecision::ClaimLeadership),
        ) {
            if l != proc {
                return Err(CohortError::NotLeader {
                    id: key.id.clone(),
                    proc: proc.clone(),
                    reason: format!("{l} leads this construct"),
                });
            }
        }
        match decision {
            ConstructDecision::Continue => {
                let failed: Vec<ProcId> = match &coll.spec {
                    Some(spec) => Self::all_expected(coll, spec)
                        .into_iter()
                        .filter(|p| self.standing(key, coll, p) == Standing::FailedEarly)
                        .collect(),
                    None => Vec::new(),
                };
                self.colls
                    .get_mut(key)
                    .expect("present")
                    .dropped
                    .extend(failed);
                self.progress(key, now);
                Ok(())
            }
            ConstructDecision::Abort => {
                let audience = self.live_participants(coll);
                let err = CohortError::ConstructAborted {
                    id: key.id.clone(),
                    reason: format!("aborted by {proc}"),
                };
                let event =
                    group_event(codes::GROUP_CONSTRUCT_ABORT, proc.clone(), vec![], &key.id);
                self.decide(key, Decision::Fail(err), now);
                self.route_event(audience, event);
                Ok(())
            }
            ConstructDecision::ClaimLeadership => {
                if let Some(l) = leader {
                    return Err(CohortError::NotLeader {
                        id: key.id.clone(),
                        proc: proc.clone(),
                        reason: format!("{l} already leads this construct"),
                    });
                }
                if !coll.leader_failure_reported {
                    return Err(CohortError::NotLeader {
                        id: key.id.clone(),
                        proc: proc.clone(),
                        reason: "no leader of this construct has failed".into(),
                    });
                }
                let audience = self.live_participants(coll);
                let coll = self.colls.get_mut(key).expect("present");
                coll.claimed_leader = Some(proc.clone());
                coll.leader_failure_reported = false;
                let mut event =
                    group_event(codes::GROUP_LEADER_SELECTED, proc.clone(), vec![], &key.id);
                event
                    .info
                    .push((keys::GROUP_LEADER.into(), Value::Procs(vec![proc.clone()])));
                self.route_event(audience, event);
                // Failures reported to the old leader are reported again to the new one.
                let coll = self.colls.get_mut(key).expect("present");
                coll.failure_reported.clear();
                self.progress(key, now);
                Ok(())
            }
            ConstructDecision::Invite(_) => Err(CohortError::BadRequest(format!(
                "group {:?}: only an invite/join construct can invite more processes",
                key.id
            ))),
        }
    }

    fn has_departed(&self, gid: &str, kind: CollKind, p: &ProcId) -> bool {
        matches!(kind, CollKind::Destruct | CollKind::Agree)
            && self.departed.get(gid).is_some_and(|d| d.contains(p))
    }

    fn evaluate_root(&self, key: &CollKey) -> Option<Decision> {
        let coll = self.colls.get(key)?;
        let spec = coll.spec.as_ref()?;
        let is_construct = matches!(
            spec,
            CollSpec::Construct { .. } | CollSpec::Bootstrap { .. }
        );
        if is_construct {
            if let Some(live) = self.live_roots.get(&key.id) {
                return Some(Decision::Fail(CohortError::GroupIdInUse {
                    id: key.id.clone(),
                    members: live.clone(),
                }));
            }
        }
        if let CollSpec::Bootstrap { leaders } = spec {
            let joined = bootstrap_leaders(coll).len() as u32;
            if joined > *leaders {
                return Some(Decision::Fail(CohortError::Mismatch {
                    op: op_name(key),
                    reason: format!(
                        "{joined} bootstrap leaders called, but they said there are {leaders}"
                    ),
                }));
            }
            if joined < *leaders {
                return None;
            }
        }
        if self.terminated.is_empty() {
            // Nobody failed before joining, so it succeeds once nobody is pending: stop
            // at the first pending process instead of ranking every one on each call.
            // Fewer joined than listed: someone is pending.
            if self.only_joins_settle(key, coll)
                && coll.contribs.len() + coll.joins.len() < expected_of(spec).len()
            {
                return None;
            }
            let pending = |p: &ProcId| self.standing(key, coll, p) == Standing::Pending;
            let any_pending = match spec {
                CollSpec::Fence { .. } | CollSpec::Destruct { .. } | CollSpec::Agree { .. } => {
                    expected_of(spec).iter().any(pending)
                }
                _ => Self::all_expected(coll, spec).iter().any(pending),
            };
            return (!any_pending).then_some(Decision::Succeed);
        }
        let expected = Self::all_expected(coll, spec);
        let standings: Vec<(ProcId, Standing)> = expected
            .into_iter()
            .map(|p| {
                let s = self.standing(key, coll, &p);
                (p, s)
            })
            .collect();
        let failed: Vec<ProcId> = standings
            .iter()
            .filter(|(_, s)| *s == Standing::FailedEarly)
            .map(|(p, _)| p.clone())
            .collect();
        if !failed.is_empty() {
            if Self::intolerant(coll, spec) {
                return Some(Decision::Fail(CohortError::ProcTerminated {
                    op: op_name(key),
                    procs: failed,
                }));
            }
            // Notify-termination (without optional): a decision must drop them first.
            // Report only once every live participant has joined: only then is it known
            // whether a leader was declared (who alone hears of failures then).
            let undecided: Vec<ProcId> = failed
                .into_iter()
                .filter(|p| !coll.dropped.contains(p))
                .collect();
            if is_construct && !merged_flags(coll).optional && !undecided.is_empty() {
                // Nobody is left to decide (or to tell): every participant is gone.
                if standings.iter().all(|(p, _)| self.terminated.contains(p)) {
                    return Some(Decision::Fail(CohortError::ProcTerminated {
                        op: op_name(key),
                        procs: standings.into_iter().map(|(p, _)| p).collect(),
                    }));
                }
                let all_in = standings.iter().all(|(_, s)| *s != Standing::Pending);
                return all_in.then_some(Decision::Pause(undecided));
            }
        }
        standings
            .iter()
            .all(|(_, s)| *s != Standing::Pending)
            .then_some(Decision::Succeed)
    }

    /// Root: turns a decision into the outcome and broadcasts it.
    fn decide(&mut self, key: &CollKey, decision: Decision, now: Time) {
        let outcome = match decision {
            Decision::Fail(e) => CollOutcome::Failed(e),
            Decision::Succeed => self.success_outcome(key),
            Decision::Pause(failed) => return self.report_failures(key, failed),
        };
        if !matches!(outcome, CollOutcome::Failed(_)) {
            self.recently_done.insert(key.clone(), ());
        }
        let coll = self.colls.get(key);
        let spec = coll.and_then(|c| c.spec.clone());
        let late: Vec<ProcId> = match (coll, &spec, &outcome) {
            (Some(c), Some(s), CollOutcome::Failed(_)) => Self::all_expected(c, s)
                .into_iter()
                .filter(|p| !c.contribs.contains_key(p) && !c.joins.contains_key(p))
                .collect(),
            _ => Vec::new(),
        };
        self.on_down(key.clone(), spec, outcome, late, None, now);
    }

    fn success_outcome(&mut self, key: &CollKey) -> CollOutcome {
        let wants_context_id = self.colls.get(key).is_some_and(|c| {
            matches!(
                c.spec,
                Some(CollSpec::Construct { .. } | CollSpec::Bootstrap { .. })
            ) && merged_flags(c).assign_context_id
        });
        let context_id = wants_context_id.then(|| self.allocate_context_id());
        let coll = self.colls.get(key).expect("decided collectives exist");
        match coll.spec.as_ref().expect("decided collectives have a spec") {
            CollSpec::Fence { .. } => CollOutcome::Fence {
                data: coll
                    .contribs
                    .values()
                    .filter(|c| !c.data.is_empty())
                    .map(|c| (c.proc.clone(), c.data.clone()))
                    .collect(),
            },
            spec @ (CollSpec::Construct { .. } | CollSpec::Bootstrap { .. }) => {
                let flags = merged_flags(coll);
                let expected = Self::all_expected(coll, spec);
                let all = || coll.contribs.values().chain(coll.joins.values());
                let members: Vec<ProcId> = expected
                    .iter()
                    .filter(|p| coll.contribs.contains_key(*p) || coll.joins.contains_key(*p))
                    .cloned()
                    .collect();
                let failed: Vec<ProcId> = expected
                    .iter()
                    .filter(|p| !coll.contribs.contains_key(*p) && !coll.joins.contains_key(*p))
                    .cloned()
                    .collect();
                let in_group = |c: &&Contribution| expected.contains(&c.proc);
                let group_info = all()
                    .filter(in_group)
                    .map(|c| (c.proc.clone(), c.group_info.clone()))
                    .collect();
                let data = all()
                    .filter(in_group)
                    .map(|c| (c.proc.clone(), c.data.clone()))
                    .collect();
                let status = if failed.is_empty() {
                    ConstructStatus::Success
                } else {
                    ConstructStatus::PartialSuccess
                };
                self.live_roots.insert(key.id.clone(), members.clone());
                let designated_leaders = match &coll.claimed_leader {
                    Some(l) => vec![l.clone()],
                    None => designated_leaders(coll),
                };
                CollOutcome::Construct {
                    status,
                    members,
                    context_id,
                    group_info,
                    data,
                    failed,
                    notify_termination: flags.notify_termination,
                    designated_leaders,
                    connect: flags.connect,
                }
            }
            CollSpec::Destruct { .. } => {
                self.live_roots.remove(&key.id);
                CollOutcome::Destruct
            }
            CollSpec::Agree { members } => {
                // Members that did not take part (they terminated; those that left,
                // and those that finalized before ending, are excused), those known
                // here to have terminated since they took part, and every
                // participant's local view.
                let mut failed: BTreeSet<ProcId> = members
                    .iter()
                    .filter(|p| {
                        !coll.excused.contains(*p)
                            && !self.has_departed(&key.id, key.kind, p)
                            && !self.finished.contains(*p)
                    })
                    .filter(|p| self.terminated.contains(*p) || !coll.contribs.contains_key(*p))
                    .cloned()
                    .collect();
                for c in coll.contribs.values() {
                    failed.extend(failed_view_of(c).iter().cloned());
                }
                CollOutcome::Agree {
                    failed: failed.into_iter().collect(),
                }
            }
        }
    }

    /// Sends `to` the whole outcome of `key` that this server kept (see
    /// `kept_outcomes`): to a server whose part came after the outcome, or whose parent
    /// was lost with it.
    fn send_kept_outcome(
        &mut self,
        to: NodeId,
        key: CollKey,
        spec: Option<CollSpec>,
        outcome: CollOutcome,
    ) {
        let attempt = self.stamp(&key);
        let msg = PeerMsg::CollDown {
            key,
            spec,
            outcome,
            late: Vec::new(),
            attempt,
            lean: None,
        };
        self.send_peer(to, msg);
    }

    /// A caller of `key` here timed out (`err`): the root is asked to end it (it
    /// probes for who is missing; see `start_probe`), or probes itself when it is this
    /// server; `fail` ends it here when the root is lost.
    fn ask_root_to_end(
        &mut self,
        key: &CollKey,
        root: Option<NodeId>,
        err: CohortError,
        now: Time,
    ) {
        match root {
            Some(r) if r != self.node => self.fail(key, err, now),
            _ => self.start_probe(key, err, now),
        }
    }

    /// Ends `key` with `error`: decided here when this server is (or may be) the root,
    /// otherwise the root is asked to end it for everyone.
    fn fail(&mut self, key: &CollKey, error: CohortError, now: Time) {
        match self.root_of(key) {
            Some(r) if r != self.node && self.lost_nodes.contains(&r) => {
                // Nobody decides for everyone any more: end it here.
                let spec = self.colls.get(key).and_then(|c| c.spec.clone());
                self.complete(
                    key.clone(),
                    spec,
                    CollOutcome::Failed(error),
                    Vec::new(),
                    false,
                    now,
                );
            }
            Some(r) if r != self.node => {
                let spec = self.colls.get(key).and_then(|c| c.spec.clone());
                self.send_peer(
                    r,
                    PeerMsg::CollAbort {
                        key: key.clone(),
                        spec,
                        error,
                        attempt: self.stamp(key),
                    },
                );
            }
            _ => self.decide(key, Decision::Fail(error), now),
        }
    }

    /// The outcome reached this server: forward it to the subtree, apply it locally.
    fn on_down(
        &mut self,
        key: CollKey,
        spec: Option<CollSpec>,
        outcome: CollOutcome,
        late: Vec<ProcId>,
        lean: Option<u32>,
        now: Time,
    ) {
        if !self.colls.contains_key(&key) && self.fallback_done.contains_key(&key) {
            // A second copy (a lean outcome after the whole one asked for in a fallback).
            return;
        }
        if let Some(gathered) = lean {
            return self.on_lean_down(key, spec, outcome, late, gathered, now);
        }
        // A server that already passed a lean outcome on does not pass this one.
        let forward = self.colls.get(&key).is_none_or(|c| c.lean.is_none());
        self.complete(key, spec, outcome, late, forward, now)
    }

    /// Ends `key` here with `outcome`; with `forward`, also passes it down the tree.
    fn complete(
        &mut self,
        key: CollKey,
        spec: Option<CollSpec>,
        outcome: CollOutcome,
        late: Vec<ProcId>,
        forward: bool,
        now: Time,
    ) {
        let success = !matches!(outcome, CollOutcome::Failed(_));
        self.agree_asking.remove(&key);
        let attempt = self.stamp(&key);
        if success {
            self.gather_flush(&key);
        }
        let coll = self.colls.remove(&key);
        if let Some(g) = coll
            .as_ref()
            .and_then(|c| c.gather.as_ref())
            .filter(|_| success)
        {
            self.gather_owed(&key, g);
        }
        let spec = spec.or_else(|| coll.as_ref().and_then(|c| c.spec.clone()));
        // A local-only group's id is an ordinary one again once the group is gone, or
        // never came to be.
        if (key.kind == CollKind::Destruct && success)
            || (key.kind == CollKind::Construct && !success)
        {
            self.local_groups.remove(&key.id);
        }
        if success {
            // For a decider that asks after the root's loss.
            self.settle(&key, &outcome);
            if key.kind == CollKind::Destruct {
                self.settled
                    .remove(&group_key(CollKind::Construct, &key.id));
            }
        }
        if key.kind == CollKind::Construct && success {
            // A new incarnation of the id: a kept destruct outcome of the last one would
            // answer a part of the next destruct re-sent here (see the `CollUp` arm).
            self.kept_outcomes
                .retain(|(k, _, _)| !(k.kind == CollKind::Destruct && k.id == key.id));
        }
        if key.kind == CollKind::Destruct {
            // The id may be reused now: a kept construct outcome would be stale.
            self.kept_outcomes
                .retain(|(k, _, _)| !(k.kind == CollKind::Construct && k.id == key.id));
            self.fallback_done
                .remove(&group_key(CollKind::Construct, &key.id));
        }
        // The tracker built the tree with its spec; only a server that never saw the
        // operation builds it from the spec carried in the outcome.
        let tree = coll
            .as_ref()
            .and_then(|c| c.tree.clone())
            .or_else(|| spec.as_ref().map(|s| self.tree_for(&key, s)));
        // Tree children first, largest subtree first (a broadcast then reaches the
        // deepest parts soonest); then servers outside the tree, in id order.
        let children: Vec<NodeId> = tree
            .as_ref()
            .filter(|_| forward)
            .map(|t| self.live_children(t, self.node))
            .unwrap_or_default();
        let mut targets: BTreeSet<NodeId> = BTreeSet::new();
        if let Some(c) = &coll {
            // Servers that reached the root directly (add-members, aborts) and are not
            // in the tree below it.
            if tree.as_ref().is_some_and(|t| t.root() == self.node) || tree.is_none() {
                targets.extend(
                    c.direct_nodes
                        .iter()
                        .filter(|n| !tree.as_ref().is_some_and(|t| t.contains(**n)))
                        .copied(),
                );
            }
        }
        if tree.as_ref().is_none_or(|t| t.root() == self.node) {
            // The root also tells the servers of expected processes that never joined.
            targets.extend(late.iter().filter_map(|p| self.jobs.node_of(p)));
        }
        targets.remove(&self.node);
        if !forward {
            targets.clear();
        }
        for n in &children {
            targets.remove(n);
        }
        targets.retain(|n| !self.lost_nodes.contains(n));
        // Kept for the children of a child that may be lost before passing it on, and
        // by a dissemination root for servers that ask for the whole outcome after a
        // loss.
        let gather_root = forward
            && coll.as_ref().is_some_and(|c| c.gather.is_some())
            && tree.as_ref().is_some_and(|t| t.root() == self.node);
        if !children.is_empty() || gather_root {
            self.kept_outcomes.retain(|(k, _, _)| *k != key);
            self.kept_outcomes
                .push_back((key.clone(), spec.clone(), outcome.clone()));
            while self.kept_outcomes.len() > KEPT_OUTCOMES {
                self.kept_outcomes.pop_front();
            }
        }
        let told: Vec<NodeId> = children
            .into_iter()
            .chain(targets)
            .filter(|n| *n != self.node)
            .collect();
        if let CollOutcome::Failed(error) = &outcome {
            self.record_failure(&key, &told, error);
            // Also when no tracker was here (none of this server's processes had
            // joined): the servers' rounds or contributions may still come.
            if let Some(t) = &tree {
                let a = self.attempts.get_mut(&key).expect("just recorded");
                a.servers.extend(t.nodes().iter().copied());
            }
        }
        // One message object per kind of outcome for all its receivers (the outcome
        // holds every member's data: cloning and encoding it per child cost the root k
        // times its size). Dissemination: the servers below gathered the data
        // themselves and get it lean; servers outside the tree (add-members') whole.
        let lean = coll
            .as_ref()
            .filter(|_| forward)
            .and_then(|c| Self::lean_outcome(c, &outcome));
        let (lean_to, whole_to): (Vec<NodeId>, Vec<NodeId>) = match &lean {
            Some(_) => told
                .into_iter()
                .partition(|n| tree.as_ref().is_some_and(|t| t.contains(*n))),
            None => (Vec::new(), told),
        };
        let down = |outcome, lean| PeerMsg::CollDown {
            key: key.clone(),
            spec: spec.clone(),
            outcome,
            late: late.clone(),
            attempt,
            lean,
        };
        if let Some((lean, gathered)) = lean.filter(|_| !lean_to.is_empty()) {
            let msg = down(lean, Some(gathered));
            self.send_peers(lean_to, msg);
        }
        if !whole_to.is_empty() {
            let msg = down(outcome.clone(), None);
            self.send_peers(whole_to, msg);
        }
        if coll
            .as_ref()
            .is_some_and(|c| c.gather.is_some() && c.fallback)
        {
            // Dissemination: a second copy of the outcome is dropped.
            self.fallback_done.insert(key.clone(), ());
        }
        let waiters = coll.as_ref().map(|c| c.waiters.clone()).unwrap_or_default();
        let elapsed = coll.as_ref().map(|c| now.saturating_sub(c.started));
        tracing::debug!(
            kind = ?key.kind,
            id = %key.id,
            seq = key.seq,
            ok = !matches!(outcome, CollOutcome::Failed(_)),
            waiters = waiters.len(),
            elapsed_us = elapsed.map(|e| e.as_micros() as u64),
            "collective complete"
        );
        if let CollOutcome::Failed(err) = &outcome {
            let joined: Vec<ProcId> = coll
                .as_ref()
                .map(|c| c.contribs.keys().cloned().collect())
                .unwrap_or_default();
            self.bury(&key, spec.as_ref(), &late, err, &waiters, &joined);
        } else {
            self.tombstones.remove(&key);
        }
        if key.kind == CollKind::Invite {
            // Accepted joins were only waiting for a refusal that can no longer come.
            self.acks
                .retain(|_, a| !matches!(&a.kind, AckKind::Join(id) if *id == key.id));
            self.invite_homes.remove(&key.id);
        }
        self.apply_outcome(&key, outcome, waiters, now);
        if let Some(early) = self.early_msgs.remove(&key) {
            for (from, msg) in early {
                self.handle_peer(from, msg, now);
            }
        }
        let (mine, others): (Vec<_>, Vec<_>) = std::mem::take(&mut self.parked)
            .into_iter()
            .partition(|(k, _, _, _)| *k == key);
        self.parked = others;
        for (key, spec, contrib, waiter) in mine {
            match self
                .groups
                .get(&key.id)
                .filter(|_| key.kind == CollKind::Construct)
            {
                // The previous attempt succeeded after all: the group is there.
                Some(g) => {
                    let err = CohortError::GroupIdInUse {
                        id: key.id.clone(),
                        members: g.members.clone(),
                    };
                    self.reply(waiter.client, waiter.req, Err(err));
                }
                None => self.contribute(key, spec, contrib, waiter, now),
            }
        }
    }

    fn apply_outcome(
        &mut self,
        key: &CollKey,
        outcome: CollOutcome,
        waiters: Vec<Waiter>,
        now: Time,
    ) {
        match outcome {
            CollOutcome::Failed(e) => {
                for w in waiters {
                    self.reply(w.client, w.req, Err(e.clone()));
                }
            }
            CollOutcome::Fence { data } => {
                self.store_foreign(data);
                for w in waiters {
                    self.reply(w.client, w.req, Ok(Response::Done));
                }
            }
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
            } => {
                self.store_foreign(data);
                let group = Group {
                    id: key.id.clone(),
                    original: members.as_slice().into(),
                    members,
                    context_id,
                    group_info: group_info.into_iter().collect(),
                    notify_termination,
                    designated_leaders,
                    connect,
                };
                let result = Arc::new(group.result(status, failed.clone()));
                let has_local = group
                    .members
                    .iter()
                    .any(|p| self.jobs.node_of(p) == Some(self.node));
                // Members that left right after completing may have told this server
                // before the outcome got here; their departure applies once installed.
                let early_leavers: Vec<ProcId> = self
                    .departed
                    .get(&key.id)
                    .map(|d| d.iter().filter(|p| group.has(p)).cloned().collect())
                    .unwrap_or_default();
                if has_local {
                    self.retired.remove(&key.id);
                    self.groups.insert(key.id.clone(), group.clone());
                }
                for w in waiters {
                    let r = if group.has(&w.proc) {
                        Ok(Response::Group(result.clone()))
                    } else {
                        Err(CohortError::NotAMember {
                            id: key.id.clone(),
                            proc: w.proc.clone(),
                        })
                    };
                    self.reply(w.client, w.req, r);
                }
                for p in early_leavers {
                    self.apply_left(&key.id, &p, now);
                }
                // Members that joined but died before the outcome got here: their
                // termination found no group to report to yet.
                for f in self.failed_of(&group) {
                    self.termination_events(&group, &f);
                }
                if notify_termination {
                    // Listed processes that never joined.
                    for f in failed {
                        self.member_failed_event(&group, &f);
                    }
                }
            }
            CollOutcome::Agree { failed } => {
                let view = CollOutcome::Agree {
                    failed: failed.clone(),
                };
                self.agree_done.insert(key.clone(), Some(view));
                for w in waiters {
                    self.reply(w.client, w.req, Ok(Response::Procs(failed.clone())));
                }
            }
            CollOutcome::Destruct => {
                if let Some(g) = self.groups.remove(&key.id) {
                    self.retired.insert(key.id.clone(), g);
                }
                self.departed.remove(&key.id);
                for w in waiters {
                    self.reply(w.client, w.req, Ok(Response::Done));
                }
            }
        }
    }

    fn store_foreign(&mut self, data: Vec<(ProcId, Posted)>) {
        for (p, info) in data {
            if self.jobs.node_of(&p) != Some(self.node) {
                self.kv.store_foreign(p, info);
            }
        }
    }

    // ------------------------------------------------------------------ leave / events

    fn leave(&mut self, proc: ProcId, gid: String, now: Time) -> Result<(), CohortError> {
        let group = self.member_group(&gid, &proc)?;
        if group.connect.is_some() {
            // pmix-standard-sets-and-groups §"Destruct procedure": processes that
            // assemble via PMIx_Connect "must all depart the assemblage together".
            return Err(CohortError::BadRequest(format!(
                "{gid:?} is a connection (PMIx_Connect): its members cannot leave it one \
                 by one, they depart together by disconnecting"
            )));
        }
        let mut nodes: BTreeSet<NodeId> = group
            .original
            .iter()
            .filter_map(|p| self.jobs.node_of(p))
            .collect();
        nodes.insert(self.rendezvous_node(&gid));
        nodes.remove(&self.node);
        for n in nodes {
            self.send_peer(
                n,
                PeerMsg::GroupLeft {
                    id: gid.clone(),
                    proc: proc.clone(),
                },
            );
        }
        self.apply_left(&gid, &proc, now);
        Ok(())
    }

    fn apply_left(&mut self, gid: &str, proc: &ProcId, now: Time) {
        self.departed
            .entry(gid.to_string())
            .or_default()
            .insert(proc.clone());
        if let Some(m) = self.live_roots.get_mut(gid) {
            m.retain(|p| p != proc);
            if m.is_empty() {
                self.live_roots.remove(gid);
            }
        }
        let Some(g) = self.groups.get_mut(gid) else {
            return;
        };
        if !g.has(proc) {
            return;
        }
        g.members.retain(|p| p != proc);
        let event = Event {
            code: codes::GROUP_LEFT,
            source: proc.clone(),
            affected: vec![proc.clone()],
            info: vec![(keys::GROUP_ID.into(), Value::Str(gid.to_string()))],
        };
        // PMIX_GROUP_MEMBERSHIP_UPDATE: "the identifiers of the revised membership".
        let update = Event {
            code: codes::GROUP_MEMBERSHIP_UPDATE,
            source: proc.clone(),
            affected: vec![proc.clone()],
            info: vec![
                (keys::GROUP_ID.into(), Value::Str(gid.to_string())),
                (
                    keys::GROUP_MEMBERSHIP.into(),
                    Value::Procs(g.members.clone()),
                ),
            ],
        };
        let locals: Vec<ProcId> = g
            .members
            .iter()
            .filter(|p| self.jobs.node_of(p) == Some(self.node))
            .cloned()
            .collect();
        if locals.is_empty() {
            if let Some(g) = self.groups.remove(gid) {
                self.retired.insert(gid.to_string(), g);
            }
        }
        for p in locals {
            self.deliver_local(&p, event.clone());
            self.deliver_local(&p, update.clone());
        }
        let key = group_key(CollKind::Destruct, gid);
        self.progress(&key, now);
    }

    fn notify(
        &mut self,
        source: ProcId,
        code: i32,
        range: Range,
        info: Info,
    ) -> Result<(), CohortError> {
        let targets: Vec<ProcId> = match range {
            Range::Local => self.jobs.procs_on(self.node),
            Range::Session => self.jobs.all_procs(),
            Range::Namespace(ns) => match self.jobs.job_of(&ns) {
                Some(job) => job.all_procs(),
                None => {
                    return Err(CohortError::UnknownProc {
                        proc: ProcId::wildcard(ns),
                        reason: "no such namespace".into(),
                    })
                }
            },
            Range::Group(gid) => self
                .groups
                .get(&gid)
                .map(|g| g.members.clone())
                .ok_or(CohortError::GroupNotFound { id: gid })?,
            Range::Procs(procs) => self.expand_nonempty(&procs)?,
        };
        let targets = targets.into_iter().filter(|p| *p != source).collect();
        let event = Event {
            code,
            source,
            affected: Vec::new(),
            info,
        };
        self.route_event(targets, event);
        Ok(())
    }

    fn route_event(&mut self, targets: Vec<ProcId>, event: Event) {
        let mut by_node: BTreeMap<NodeId, Vec<ProcId>> = BTreeMap::new();
        for p in targets {
            if let Some(n) = self.jobs.node_of(&p) {
                by_node.entry(n).or_default().push(p);
            }
        }
        for (n, procs) in by_node {
            if n == self.node {
                for p in procs {
                    self.deliver_local(&p, event.clone());
                }
            } else {
                self.send_peer(
                    n,
                    PeerMsg::Event {
                        targets: procs,
                        event: event.clone(),
                    },
                );
            }
        }
    }

    /// Delivers to a local process now, or caches it until the process connects.
    fn deliver_local(&mut self, proc: &ProcId, event: Event) {
        if self.terminated.contains(proc) {
            return;
        }
        if let Some(&client) = self.proc_clients.get(proc) {
            self.push_client(client, ServerFrame::Event(event));
            return;
        }
        let q = self.pending_events.entry(proc.clone()).or_default();
        if q.len() >= MAX_PENDING_EVENTS {
            tracing::warn!(%proc, "event cache full; dropping the oldest event");
            q.pop_front();
        }
        q.push_back(event);
    }

    fn member_failed_event(&mut self, group: &Group, failed: &ProcId) {
        let event = Event {
            code: codes::GROUP_MEMBER_FAILED,
            source: failed.clone(),
            affected: vec![failed.clone()],
            info: vec![(keys::GROUP_ID.into(), Value::Str(group.id.clone()))],
        };
        let audience = if group.designated_leaders.is_empty() {
            &group.members
        } else {
            &group.designated_leaders
        };
        self.deliver_to_locals(audience, failed, event);
    }

    /// Delivers `event` to the processes of `audience` hosted here, but `about`.
    fn deliver_to_locals(&mut self, audience: &[ProcId], about: &ProcId, event: Event) {
        let locals: Vec<ProcId> = audience
            .iter()
            .filter(|p| *p != about && self.jobs.node_of(p) == Some(self.node))
            .cloned()
            .collect();
        for p in locals {
            self.deliver_local(&p, event.clone());
        }
    }

    // ------------------------------------------------------------------ termination

    /// A local process ended: tell every peer, then account for it here.
    fn terminate(&mut self, proc: ProcId, now: Time) {
        if self.terminated.contains(&proc) {
            return;
        }
        let contributed: Vec<CollKey> = self
            .colls
            .iter()
            .filter(|(_, c)| {
                c.contribs.contains_key(&proc) || c.waiters.iter().any(|w| w.proc == proc)
            })
            .map(|(k, _)| k.clone())
            .collect();
        let finalized = self.finalized.contains(&proc);
        if finalized {
            self.finished.insert(proc.clone());
        }
        if finalized && contributed.is_empty() {
            // The servers of its groups' members now, the rest later (or never).
            let told: BTreeSet<NodeId> = self
                .groups
                .values()
                .filter(|g| g.has(&proc))
                .flat_map(|g| g.members.iter().filter_map(|m| self.jobs.node_of(m)))
                .collect();
            self.tell_terminated(&proc, &[], true, |n| told.contains(&n));
            self.clean_ends
                .push((proc.clone(), now + CLEAN_END_NOTICE_DELAY, told));
        } else {
            self.tell_terminated(&proc, &contributed, finalized, |_| true);
        }
        if !contributed.is_empty() {
            self.joined_before_death
                .insert(proc.clone(), contributed.into_iter().collect());
        }
        self.mark_terminated(proc, now);
    }

    /// Tells the other live servers that `to` selects that local process `proc`
    /// terminated.
    fn tell_terminated(
        &mut self,
        proc: &ProcId,
        contributed: &[CollKey],
        finalized: bool,
        to: impl Fn(NodeId) -> bool,
    ) {
        for &n in &self.all_nodes.clone() {
            if n != self.node && !self.lost_nodes.contains(&n) && to(n) {
                self.send_peer(
                    n,
                    PeerMsg::ProcTerminated {
                        proc: proc.clone(),
                        contributed: contributed.to_vec(),
                        finalized,
                    },
                );
            }
        }
    }

    /// The launcher announced the job's end: every node server is about to shut down,
    /// so the clean ends not yet told are dropped (see [`CLEAN_END_NOTICE_DELAY`]).
    pub fn job_ending(&mut self) {
        self.clean_ends.clear();
    }

    fn mark_terminated(&mut self, proc: ProcId, now: Time) {
        if !self.terminated.insert(proc.clone()) {
            return;
        }
        self.pending_events.remove(&proc);
        self.data_proc_terminated(&proc);
        // Nobody is left to answer a terminated process's own requests.
        for c in self.colls.values_mut() {
            c.waiters.retain(|w| w.proc != proc);
        }
        self.gets.retain(|g| g.reader != proc);
        // Gets and modex requests waiting for its data fail now.
        if self.jobs.node_of(&proc) == Some(self.node) {
            self.retry_gets(&proc, false);
            let (mine, rest): (Vec<_>, Vec<_>) = std::mem::take(&mut self.modex_waits)
                .into_iter()
                .partition(|m| m.proc == proc);
            self.modex_waits = rest;
            for m in mine {
                let result = Err(CohortError::ProcTerminated {
                    op: "get".into(),
                    procs: vec![proc.clone()],
                });
                self.send_peer(
                    m.from,
                    PeerMsg::ModexResp {
                        req: m.req,
                        proc: m.proc,
                        result,
                    },
                );
            }
        }
        let keys: Vec<CollKey> = self.colls.keys().cloned().collect();
        for key in keys {
            self.progress(&key, now);
        }
        self.invite_terminated(&proc, now);
        let told: Vec<Group> = self
            .groups
            .values()
            .filter(|g| g.reports_termination() && g.has(&proc))
            .cloned()
            .collect();
        for g in told {
            self.termination_events(&g, &proc);
        }
    }

    /// Tells this server's members of `group` that member `dead` terminated, as the
    /// group asks: `GROUP_MEMBER_FAILED` with notify-termination, `PROC_TERMINATED`
    /// for a strict connection.
    fn termination_events(&mut self, group: &Group, dead: &ProcId) {
        if group.notify_termination {
            self.member_failed_event(group, dead);
        }
        // A member that finalized before it ended did not terminate "while
        // connected" in error (Open MPI 4.1 never disconnects a spawn's connection: a
        // spawned process still finalizing aborted on its parent's normal exit).
        if group.connect == Some(ConnectMode::Strict) && !self.finished.contains(dead) {
            self.connected_proc_terminated_event(group, dead);
        }
    }

    /// rfc0003: "Processes that terminate while connected to other processes will
    /// generate a termination error event that will be reported to any process in the
    /// connected group that has registered for such events" — to this server's other
    /// members of connection `group` (every server hosting members runs this).
    fn connected_proc_terminated_event(&mut self, group: &Group, dead: &ProcId) {
        let event = Event {
            code: codes::PROC_TERMINATED,
            source: dead.clone(),
            affected: vec![dead.clone()],
            info: vec![
                (keys::NSPACE.into(), Value::Str(group.id.clone())),
                (keys::GROUP_ID.into(), Value::Str(group.id.clone())),
            ],
        };
        self.deliver_to_locals(&group.members, dead, event);
    }

    // ------------------------------------------------------------------ plumbing

    fn reply(&mut self, client: ClientId, req: ReqId, result: Result<Response, CohortError>) {
        if req == 0 {
            return;
        }
        self.push_client(client, ServerFrame::Reply { id: req, result });
    }

    fn push_client(&mut self, client: ClientId, frame: ServerFrame) {
        if self.clients.contains_key(&client) {
            self.actions.push(Action::ToClient { client, frame });
        }
    }

    fn send_peer(&mut self, node: NodeId, msg: PeerMsg) {
        if node == self.node {
            self.self_inbox.push_back(msg);
        } else {
            for lost in self.lost_ahead_of(&msg) {
                self.actions.push(Action::ToPeer {
                    node,
                    msg: PeerMsg::NodeLost { node: lost },
                });
            }
            self.actions.push(Action::ToPeer { node, msg });
        }
    }

    /// Sends `msg` to `nodes` as one message object, after the losses its group id's
    /// rendezvous passes over (see [`Self::rendezvous_node`]).
    fn send_peers(&mut self, nodes: Vec<NodeId>, msg: PeerMsg) {
        for lost in self.lost_ahead_of(&msg) {
            self.actions.push(Action::ToPeers {
                nodes: nodes.clone(),
                msg: PeerMsg::NodeLost { node: lost },
            });
        }
        self.actions.push(Action::ToPeers { nodes, msg });
    }

    /// The losses a receiver of `msg` must know first: a construct's or destruct's
    /// message, or a group's news for its rendezvous, routed past its id's lost first
    /// picks.
    fn lost_ahead_of(&self, msg: &PeerMsg) -> Vec<NodeId> {
        let key = match msg {
            PeerMsg::CollUp { key, .. }
            | PeerMsg::CollJoin { key, .. }
            | PeerMsg::CollAbort { key, .. }
            | PeerMsg::CollDown { key, .. }
            | PeerMsg::CollGather { key, .. }
            | PeerMsg::CollProbe { key }
            | PeerMsg::CollProbeReply { key, .. }
            | PeerMsg::Decide { key, .. } => key,
            PeerMsg::GroupLive { id, .. } | PeerMsg::GroupLeft { id, .. } => {
                return self.lost_ahead(id)
            }
            _ => return Vec::new(),
        };
        if meets_at_rendezvous(key.kind) {
            self.lost_ahead(&key.id)
        } else {
            Vec::new()
        }
    }

    fn drain_self(&mut self, now: Time) {
        while let Some(msg) = self.self_inbox.pop_front() {
            self.handle_peer(self.node, msg, now);
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Standing {
    /// Its contribution is here.
    Joined,
    /// It left the group; nothing to wait for.
    Excused,
    /// It terminated without joining.
    FailedEarly,
    /// Still to call, or its contribution is on the way.
    Pending,
}

enum Decision {
    Succeed,
    Fail(CohortError),
    /// Processes failed before joining; the construct waits for a decision about them.
    Pause(Vec<ProcId>),
}

fn waiter(
    client: ClientId,
    req: ReqId,
    proc: ProcId,
    timeout_ms: Option<u64>,
    now: Time,
) -> Waiter {
    Waiter {
        client,
        req,
        proc,
        deadline: timeout_ms.map(|t| now + Duration::from_millis(t)),
        timeout_ms: timeout_ms.unwrap_or(0),
        abort_sent: false,
    }
}

/// Processes whose participation the tree accounts for.
fn expected_of(spec: &CollSpec) -> &[ProcId] {
    match spec {
        CollSpec::Fence { procs, .. } => procs,
        CollSpec::Construct { leaders } => leaders,
        CollSpec::Bootstrap { .. } => &[],
        CollSpec::Destruct { members, .. } => members,
        CollSpec::Agree { members } => members,
    }
}

/// `all` (an expanded, canonical list) when `caller` is among it; else the error `why`
/// words.
fn caller_among<L: std::ops::Deref<Target = [ProcId]>>(
    all: L,
    caller: &ProcId,
    why: impl FnOnce(&[ProcId]) -> String,
) -> Result<L, CohortError> {
    if all.binary_search(caller).is_err() {
        return Err(CohortError::BadRequest(why(&all)));
    }
    Ok(all)
}

/// Add-members named by any leader that contributed so far.
fn add_members_of(coll: &Coll) -> BTreeSet<ProcId> {
    coll.contribs
        .values()
        .chain(coll.joins.values())
        .flat_map(|c| c.add_members.iter().cloned())
        .collect()
}

/// Bootstrap leaders that joined so far.
fn bootstrap_leaders(coll: &Coll) -> BTreeSet<ProcId> {
    coll.joins
        .values()
        .filter(|c| c.flags.bootstrap.is_some())
        .map(|c| c.proc.clone())
        .collect()
}

/// Callers that declared themselves leader (PMIX_GROUP_LEADER).
fn designated_leaders(coll: &Coll) -> Vec<ProcId> {
    coll.contribs
        .values()
        .chain(coll.joins.values())
        .filter(|c| c.flags.leader)
        .map(|c| c.proc.clone())
        .collect()
}

fn merged_flags(coll: &Coll) -> ContribFlags {
    coll.contribs
        .values()
        .chain(coll.joins.values())
        .fold(ContribFlags::default(), |a, c| ContribFlags {
            optional: a.optional || c.flags.optional,
            notify_termination: a.notify_termination || c.flags.notify_termination,
            assign_context_id: a.assign_context_id || c.flags.assign_context_id,
            leader: a.leader || c.flags.leader,
            bootstrap: a.bootstrap.or(c.flags.bootstrap),
            connect: ConnectMode::merge(a.connect, c.flags.connect),
        })
}

/// A group event about `source` (info: the group id).
fn group_event(code: i32, source: ProcId, affected: Vec<ProcId>, gid: &str) -> Event {
    Event {
        code,
        source,
        affected,
        info: vec![(keys::GROUP_ID.into(), Value::Str(gid.to_string()))],
    }
}

fn op_name(key: &CollKey) -> String {
    match key.kind {
        CollKind::Fence => format!("fence over {}", key.id),
        CollKind::Construct => format!("group construct {:?}", key.id),
        CollKind::Destruct => format!("group destruct {:?}", key.id),
        CollKind::Invite => format!("group invite {:?}", key.id),
        CollKind::Agree => format!("global failure view #{} of group {:?}", key.seq, key.id),
    }
}

/// Canonical, exact signature of a sorted participant list: `ns:0-3,5;ns2:0`.
pub fn signature(procs: &[ProcId]) -> String {
    let mut out = String::new();
    let mut i = 0;
    while i < procs.len() {
        let ns = &procs[i].nspace;
        if !out.is_empty() {
            out.push(';');
        }
        out.push_str(ns);
        out.push(':');
        let mut first = true;
        while i < procs.len() && &procs[i].nspace == ns {
            let start = procs[i].rank;
            let mut end = start;
            // `checked_add`: a list from a peer may name rank u32::MAX.
            while i + 1 < procs.len()
                && procs[i + 1].nspace == *ns
                && end.checked_add(1) == Some(procs[i + 1].rank)
            {
                i += 1;
                end += 1;
            }
            if !first {
                out.push(',');
            }
            first = false;
            if start == end {
                out.push_str(&start.to_string());
            } else {
                out.push_str(&format!("{start}-{end}"));
            }
            i += 1;
        }
    }
    out
}

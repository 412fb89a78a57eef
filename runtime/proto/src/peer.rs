//! Node-server ⇄ node-server messages (over the fabric).

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::error::CohortError;
use crate::event::Event;
use crate::ids::{ContextId, NodeId, ProcId};
use crate::msg::{ConnectMode, ConstructStatus};
use crate::posted::Posted;
use crate::value::Info;

/// Which collective an operation is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum CollKind {
    Fence,
    Construct,
    Destruct,
    /// Invite/join construct, tracked at the (current) leader's node server.
    Invite,
    /// Agreement of a group's surviving members on its failed members (the global
    /// failure view). Keyed like a fence: group id plus a per-member call count.
    Agree,
}

/// Identifies one collective instance across node servers. Fences are keyed by their
/// canonical participant signature plus a per-signature sequence number; group
/// operations by group id (reusable once destruct completes) plus an epoch.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct CollKey {
    pub kind: CollKind,
    pub id: String,
    pub seq: u64,
}

/// What every participant of one collective agreed to (learnt from any contribution).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum CollSpec {
    Fence {
        /// Shared: a fence over the whole job refers to the server's one copy.
        #[serde(with = "crate::procset::shared")]
        procs: Arc<[ProcId]>,
        collect: bool,
        /// Completes without participants that terminated before joining (a fence
        /// over a connection with PMIX_CONNECT_EARLY_TERM_ALLOWED, rfc0003) instead of
        /// failing. Set only when every caller's list asked for it.
        tolerate_terminated: bool,
    },
    Construct {
        /// Shared: every local leader's contribution names the same list.
        #[serde(with = "crate::procset::shared")]
        leaders: Arc<[ProcId]>,
    },
    /// Bootstrap method: only the number of leaders is known in advance.
    Bootstrap { leaders: u32 },
    Destruct {
        /// Shared: every local member's destruct names the group's one list.
        #[serde(with = "crate::procset::shared")]
        members: Arc<[ProcId]>,
        notify_termination: bool,
    },
    /// The global failure view of a group: every member of `members` that is alive
    /// takes part; members that terminated or left are not waited for.
    Agree {
        /// The group's membership at construct time (the same list on every server).
        #[serde(with = "crate::procset::shared")]
        members: Arc<[ProcId]>,
    },
}

/// One participant's share of a collective.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Contribution {
    pub proc: ProcId,
    /// Remote-scope posted data (fence with collect, construct), encoded once.
    pub data: Posted,
    /// Construct only: PMIX_GROUP_INFO, add-members named, option flags.
    pub group_info: Info,
    pub add_members: Vec<ProcId>,
    pub flags: ContribFlags,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContribFlags {
    pub optional: bool,
    pub notify_termination: bool,
    pub assign_context_id: bool,
    pub leader: bool,
    /// Bootstrap leader: the number of leaders it was told.
    pub bootstrap: Option<u32>,
    /// A connect (rfc0003): the caller's termination mode.
    pub connect: Option<ConnectMode>,
}

/// How a collective ended, as broadcast by its root.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum CollOutcome {
    Fence {
        data: Vec<(ProcId, Posted)>,
    },
    Construct {
        status: ConstructStatus,
        #[serde(with = "crate::procset")]
        members: Vec<ProcId>,
        context_id: Option<ContextId>,
        group_info: Vec<(ProcId, Info)>,
        data: Vec<(ProcId, Posted)>,
        #[serde(with = "crate::procset")]
        failed: Vec<ProcId>,
        notify_termination: bool,
        /// Callers that passed PMIX_GROUP_LEADER: failure events go only to them.
        #[serde(with = "crate::procset")]
        designated_leaders: Vec<ProcId>,
        /// A connection (rfc0003), and how it treats terminated members.
        connect: Option<ConnectMode>,
    },
    Destruct,
    /// The failed members every survivor agrees on (canonical order).
    Agree {
        #[serde(with = "crate::procset")]
        failed: Vec<ProcId>,
    },
    Failed(CohortError),
}

/// What a server has of an operation whose root was lost before its outcome reached
/// every server — a global failure view, a construct or a destruct (see
/// [`PeerMsg::AgreePoll`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum AgreeState {
    /// The outcome the root decided (a view: the failed members; a construct: the
    /// group).
    Has(CollOutcome),
    /// It was decided that nobody has it: the call failed.
    Failed,
    /// Not here, and it will not be taken if it still arrives.
    Lacks,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum PeerMsg {
    /// Aggregated contributions of a subtree, sent to the tree parent.
    CollUp {
        key: CollKey,
        spec: CollSpec,
        contribs: Vec<Contribution>,
        /// Expected participants of the subtree that are settled without contributing
        /// (they left the group).
        excused: Vec<ProcId>,
        /// Re-sent to the nearest live ancestor after the sender's parent was lost: a
        /// receiver that already completed the operation answers with its outcome.
        rerouted: bool,
        /// How many failed attempts of `key` the sender has seen. A receiver that told
        /// the sender of more failures than that drops the message as a leftover of a
        /// failed attempt (it was in flight when the attempt failed).
        attempt: u32,
    },
    /// An add-member's participation, sent straight to the operation's root.
    CollJoin {
        key: CollKey,
        contrib: Contribution,
        /// How many failed attempts of `key` the sender has seen. A receiver that told
        /// the sender of more failures than that drops the message as a leftover of a
        /// failed attempt (it was in flight when the attempt failed).
        attempt: u32,
    },
    /// Ask the root to end the operation with an error (timeout at a participant).
    CollAbort {
        key: CollKey,
        spec: Option<CollSpec>,
        error: CohortError,
        /// How many failed attempts of `key` the sender has seen. A receiver that told
        /// the sender of more failures than that drops the message as a leftover of a
        /// failed attempt (it was in flight when the attempt failed).
        attempt: u32,
    },
    /// Root → participant servers, when a timeout is about to end the operation: report
    /// which processes joined at your server, so the error names exactly who is missing.
    CollProbe { key: CollKey },
    CollProbeReply {
        key: CollKey,
        joined: Vec<ProcId>,
        /// How many failed attempts of `key` the sender has seen. A receiver that told
        /// the sender of more failures than that drops the message as a leftover of a
        /// failed attempt (it was in flight when the attempt failed).
        attempt: u32,
    },
    /// One round of a dissemination (Bruck) allgather: the contributions (and excused
    /// participants) of the servers at positions `[p, p + m)` of the operation's server
    /// list, from the server at position `p` to the one at `p − 2^round`.
    CollGather {
        key: CollKey,
        spec: CollSpec,
        round: u8,
        contribs: Vec<Contribution>,
        excused: Vec<ProcId>,
        /// How many failed attempts of `key` the sender has seen: a receiver that has
        /// seen more drops the message as a leftover of a failed attempt.
        attempt: u32,
    },
    /// The outcome, broadcast down the tree (and to add-members' servers).
    CollDown {
        key: CollKey,
        /// Lets a node that never saw the operation compute its children.
        spec: Option<CollSpec>,
        outcome: CollOutcome,
        /// On failure: processes the root expected that had not joined there. Their
        /// servers answer a later call of theirs with this same outcome.
        late: Vec<ProcId>,
        /// The attempt of `key` this outcome ends (how many failed attempts its decider
        /// had seen): a receiver that has seen more already ended this attempt itself
        /// (it gave up waiting for an unreachable root) and drops it.
        attempt: u32,
        /// `Some(n)`: a lean outcome after a dissemination allgather. The data and
        /// group info of the `n` contributions the allgather gathered are left out;
        /// every receiver gathered the same `n` and fills them in itself. `None`: the
        /// outcome is complete.
        lean: Option<u32>,
    },
    /// A process of the sender's node terminated, after joining these collectives
    /// (its contributions to them may still be on their way up).
    ProcTerminated {
        proc: ProcId,
        contributed: Vec<CollKey>,
        /// It had finalized: it ended, it did not fail (failure views leave it out).
        finalized: bool,
    },
    /// The sender lost its connection to node server `node` (it crashed or became
    /// unreachable): every process it hosted is terminated. Sent once by each server
    /// that detects a loss to every other server, so that servers that never talked to
    /// `node` stop waiting for it too.
    NodeLost { node: NodeId },
    /// Deliver an event to these local processes of the receiver.
    Event { targets: Vec<ProcId>, event: Event },
    /// Fetch `proc`'s committed remote data (direct modex).
    ModexReq {
        req: u64,
        proc: ProcId,
        timeout_ms: Option<u64>,
    },
    ModexResp {
        req: u64,
        proc: ProcId,
        result: Result<Posted, CohortError>,
    },
    /// `proc` left group `id`.
    GroupLeft { id: String, proc: ProcId },
    /// An invitee's answer, sent to the node server tracking the invite.
    InviteReply {
        id: String,
        accept: bool,
        contrib: Contribution,
        /// Answered with an `Ack` only when the answer is refused.
        token: u64,
    },
    /// A participant's decision about a construct in progress, sent to the node server
    /// deciding it (the root, or the invite tracker).
    Decide {
        key: CollKey,
        proc: ProcId,
        decision: crate::msg::ConstructDecision,
        token: u64,
    },
    /// The outcome of a `Decide` (always) or a refused `InviteReply`.
    Ack {
        token: u64,
        result: Result<(), CohortError>,
    },
    /// A group built by invitation is live: tell the id's rendezvous server, which
    /// guards id uniqueness for every method.
    GroupLive {
        id: String,
        #[serde(with = "crate::procset")]
        members: Vec<ProcId>,
    },
    /// The failure detector's "still here", to the sender's successor in the ring of
    /// node servers (`cohort_core::detector`). Handled by the node server, not the
    /// engine.
    Heartbeat,
    /// Can you hear me? (the launcher's survey of who reaches whom, after one node
    /// server found another unreachable). Answered with `Pong` by the node server, not
    /// the engine.
    Ping { token: u64 },
    /// The answer to `Ping`.
    Pong { token: u64 },
    /// What did the lost root of `key` (a global failure view, a construct or a
    /// destruct) decide? Asked of its decider — for a view, the first of the view's
    /// servers that the asker does not know to be lost; for a construct or destruct,
    /// the group id's rendezvous as the asker knows it now — by a server whose tracker
    /// of it lost its root before the outcome arrived. Answered (`AgreeAnswer`, `Has`
    /// or `Failed`) once the decider decided. A fence's, construct's or destruct's
    /// asker also gives the operation's spec when it knows it, for a decider that has
    /// no part in the operation: a fence's polls the fence's servers all the same; a
    /// construct's or destruct's records the failure with it (its own processes that
    /// call later get it too, instead of waiting alone).
    AgreeQuery {
        key: CollKey,
        spec: Option<CollSpec>,
    },
    /// The decider of `key` asks the receiver what it has of it. Answered once the
    /// receiver knows every server before the decider (the root among them) to be lost
    /// (so everything they sent it has arrived). A receiver that answers `Lacks` drops
    /// the outcome if it still arrives from the lost root's tree afterwards, which keeps
    /// the decider's "nobody has it" true.
    AgreePoll { key: CollKey },
    /// The answer to `AgreeQuery` and to `AgreePoll`.
    AgreeAnswer { key: CollKey, state: AgreeState },
}

//! Client ⇄ node-server messages (over the node server's Unix socket).

use serde::{Deserialize, Serialize};

use crate::error::CohortError;
use crate::event::{keys, Event, EventCode, Range};
use crate::ids::{ContextId, NodeId, ProcId, Rank};
use crate::job::JobMap;
use crate::publish::{DataRange, LookupOpts, Persistence, Published};
use crate::value::{Info, Value};

/// Request id chosen by the client; 0 means "no reply wanted".
pub type ReqId = u64;

/// First frame a client sends.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Hello {
    pub version: u32,
    pub nspace: String,
    pub rank: Rank,
    pub pid: u32,
    #[serde(with = "serde_bytes")]
    pub token: Vec<u8>,
}

/// The server's answer to a hello.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Welcome {
    pub job: JobMap,
    pub node: NodeId,
    pub node_name: String,
    /// The node-local fence segment ([`crate::shm_fence`]) every rank of a one-node
    /// job must use for whole-job fences; `None` when there is none (several nodes).
    pub fence_shm: Option<String>,
    /// The session's universe size (PMIX_UNIV_SIZE): how many processes its hosts'
    /// cores hold, at least the launched job's size.
    pub universe: u32,
    /// Where the bound processes of the job on this node sit (the others are
    /// unbound), so that a process learns its local peers' locality without asking.
    pub local_bindings: Vec<LocalBinding>,
}

/// Where one bound process sits on its host: what PMIX_CPUSET and
/// PMIX_LOCALITY_STRING say of it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LocalBinding {
    pub rank: Rank,
    /// The CPUs it is bound to, in the list syntax (`0-1,4`).
    pub cpus: String,
    /// Its locality string (`SK0:L30:L20:L10:CR0:HT0:NM0`).
    pub locality: String,
}

impl LocalBinding {
    /// The value of `key` for this process: PMIX_CPUSET ([`keys::CPUSET`]: `hwloc:`
    /// and the CPU list) or PMIX_LOCALITY_STRING ([`keys::LOCALITY_STRING`]); `None`
    /// for any other key.
    pub fn value_of(&self, key: &str) -> Option<String> {
        match key {
            keys::CPUSET => Some(format!("hwloc:{}", self.cpus)),
            keys::LOCALITY_STRING => Some(self.locality.clone()),
            _ => None,
        }
    }
}

/// Options of a group construct (the PMIX_GROUP_* directives).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ConstructOpts {
    /// PMIX_TIMEOUT, in milliseconds.
    pub timeout_ms: Option<u64>,
    /// PMIX_GROUP_OPTIONAL: partial success when listed procs terminate before joining.
    pub optional: bool,
    /// PMIX_GROUP_LEADER: this caller is the construct leader (failure events go to it).
    pub leader: bool,
    /// PMIX_GROUP_NOTIFY_TERMINATION: raise member-failed events instead of failing.
    pub notify_termination: bool,
    /// PMIX_GROUP_ASSIGN_CONTEXT_ID.
    pub assign_context_id: bool,
    /// PMIX_GROUP_ADD_MEMBERS (leaders only).
    pub add_members: Vec<ProcId>,
    /// PMIX_GROUP_INFO contributions of this caller.
    pub group_info: Info,
    /// PMIX_GROUP_BOOTSTRAP: the number of leaders. Bootstrap leaders pass only
    /// themselves as procs; add-members still call with no procs.
    pub bootstrap: Option<u32>,
    /// Set by `PMIx_Connect` (the client's `connect_procs`): the group is a connection
    /// (rfc0003), whose members' termination is tracked as this mode says. `None`: a
    /// plain group.
    pub connect: Option<ConnectMode>,
    /// PMIX_GROUP_LOCAL_ONLY: every participant (leaders and add-members) runs on the
    /// caller's node server, and each passes this: the construct then meets on that
    /// server alone instead of at the group id's rendezvous server (which may be
    /// another node's), and so do the group's destruct and decisions. A listed process
    /// elsewhere is refused (`BadRequest`).
    #[serde(default)]
    pub local_only: bool,
}

/// How a connection (a group made by `PMIx_Connect`, rfc0003) treats a member that
/// terminates before everyone disconnected.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ConnectMode {
    /// The default: "processes that terminate while connected to other processes will
    /// generate a termination error event" (`codes::PROC_TERMINATED` to the other
    /// members, naming the connection), and a disconnect waits for every member, so
    /// the survivors' disconnect fails with `ProcTerminated` naming it.
    Strict,
    /// PMIX_CONNECT_EARLY_TERM_ALLOWED: no event, and a disconnect completes without
    /// the members that terminated.
    EarlyTermAllowed,
}

impl ConnectMode {
    /// The mode of a connection whose callers asked for `a` and `b`: early termination
    /// is allowed only when every caller allowed it.
    pub fn merge(a: Option<ConnectMode>, b: Option<ConnectMode>) -> Option<ConnectMode> {
        match (a, b) {
            (None, x) | (x, None) => x,
            (Some(ConnectMode::EarlyTermAllowed), Some(ConnectMode::EarlyTermAllowed)) => {
                Some(ConnectMode::EarlyTermAllowed)
            }
            _ => Some(ConnectMode::Strict),
        }
    }
}

/// Options of `group_invite` (the invite/join method; the caller is the leader).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct InviteOpts {
    /// PMIX_TIMEOUT for the whole construct, in milliseconds.
    pub timeout_ms: Option<u64>,
    pub assign_context_id: bool,
    pub notify_termination: bool,
    /// The leader's PMIX_GROUP_INFO contributions.
    pub group_info: Info,
    /// When set, a decline or an invitee failure pauses completion until the leader
    /// decides (`ConstructDecision::Continue` drops it, `Invite` adds replacements,
    /// `Abort` ends the construct). When unset, declined and failed invitees are
    /// dropped automatically.
    pub decide_declines: bool,
}

/// What a leader (or, without a leader, any participant) decides about a construct in
/// progress — the PMIx "results returned from the event handler".
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum ConstructDecision {
    /// Proceed without the processes that failed (or declined) so far.
    Continue,
    /// End the construct for every participant with PMIX_GROUP_CONSTRUCT_ABORT.
    Abort,
    /// Invite method: invite these processes too (e.g. to replace a decliner).
    Invite(Vec<ProcId>),
    /// After PMIX_GROUP_LEADER_FAILED: the caller becomes the leader. Only the first
    /// claim wins; everyone gets PMIX_GROUP_LEADER_SELECTED.
    ClaimLeadership,
}

/// Options of a fence.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct FenceOpts {
    /// PMIX_COLLECT_DATA: exchange every participant's remote-scope data.
    pub collect: bool,
    pub timeout_ms: Option<u64>,
    /// PMIX_GROUP_FT_COLLECTIVE: a participant that terminates before taking part is
    /// not waited for (the fence completes among the others, without its data)
    /// instead of failing the fence. Takes effect when every participant asks.
    #[serde(default)]
    pub ft_collective: bool,
}

/// Outcome class of a successful construct.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ConstructStatus {
    /// Every listed process participated.
    Success,
    /// Some optional participants terminated first (PMIX_ERR_PARTIAL_SUCCESS).
    PartialSuccess,
}

/// What a construct returns to every member.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GroupResult {
    pub id: String,
    pub status: ConstructStatus,
    /// Canonical membership: sorted by namespace then rank. Group rank = index.
    #[serde(with = "crate::procset")]
    pub members: Vec<ProcId>,
    pub context_id: Option<ContextId>,
    /// Each member's PMIX_GROUP_INFO contributions.
    pub group_info: Vec<(ProcId, Info)>,
    /// Listed processes that terminated before joining (optional participation).
    pub failed: Vec<ProcId>,
}

/// A client request.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Request {
    /// Publish posted data. Local-scope and remote-scope halves; global data is in both.
    Commit {
        local: Info,
        remote: Info,
    },
    /// Read `key` of `proc` (which may be `{group, group-rank}`).
    Get {
        proc: ProcId,
        key: String,
        timeout_ms: Option<u64>,
        /// Answer only once the node server has received this many commits from
        /// `proc` (a rank of this job): the count `proc` published at the last
        /// node-local fence, whose commits may still be in flight. 0: no wait.
        after_commits: u64,
    },
    /// Fence over `procs` (wildcards allowed: `{nspace,*}`, `{group,*}`).
    Fence {
        #[serde(with = "crate::procset")]
        procs: Vec<ProcId>,
        opts: FenceOpts,
    },
    /// Collective group construct. Empty `procs` = joining as an add-member.
    Construct {
        id: String,
        /// Compact on the wire (runs of ranks), and shared: every leader sends the
        /// whole list, and a node server decodes its leaders' equal lists to one.
        #[serde(with = "crate::procset::shared")]
        procs: std::sync::Arc<[ProcId]>,
        opts: ConstructOpts,
    },
    Destruct {
        id: String,
        timeout_ms: Option<u64>,
        /// PMIX_GROUP_FT_COLLECTIVE: members that terminated are not waited for (as
        /// with PMIX_GROUP_NOTIFY_TERMINATION). Takes effect when every caller asks.
        #[serde(default)]
        ft_collective: bool,
    },
    Leave {
        id: String,
    },
    Notify {
        code: EventCode,
        range: Range,
        info: Info,
    },
    /// Invite/join method: the caller (leader) invites `procs`; the reply comes when
    /// every invitee has answered and the group is complete (or the construct failed).
    Invite {
        id: String,
        #[serde(with = "crate::procset")]
        procs: Vec<ProcId>,
        opts: InviteOpts,
    },
    /// Answer an invitation from `leader`. Accepting replies when the group is
    /// complete; declining replies at once.
    Join {
        id: String,
        leader: ProcId,
        accept: bool,
        timeout_ms: Option<u64>,
        group_info: Info,
    },
    /// A decision about construct `id` in progress (see [`ConstructDecision`]).
    Decide {
        id: String,
        decision: ConstructDecision,
    },
    /// Membership and context id of a group the caller belongs to.
    QueryGroup {
        id: String,
    },
    /// Names of the groups the caller belongs to (PMIX_GROUP_NAMES).
    QueryGroupNames,
    /// The members of group `id` that the caller's node server knows to have failed
    /// (the local failure view, "L"). Answered at once with [`Response::Procs`].
    FailedLocal {
        id: String,
    },
    /// The members of group `id` that failed, agreed by every surviving member (the
    /// global failure view, "G"): a collective among the members still alive.
    FailedGlobal {
        id: String,
        timeout_ms: Option<u64>,
    },
    Finalize,
    /// PMIx_Publish: put `data` in the job's data store under its keys, in `range`.
    /// All or nothing: a key already published in the same range refuses the whole
    /// call (`KeyPublished`).
    Publish {
        data: Info,
        range: DataRange,
        persistence: Persistence,
    },
    /// PMIx_Lookup: the values published under `keys` that this process may see in
    /// `opts.range` ([`Response::Published`], only those found).
    Lookup {
        keys: Vec<String>,
        opts: LookupOpts,
    },
    /// PMIx_Unpublish: removes this process's data under `keys` (all of it when
    /// `None`) in `range`.
    Unpublish {
        keys: Option<Vec<String>>,
        range: DataRange,
    },
    /// PMIx_Spawn: start a new job of `apps` in the session ([`Response::Spawned`]
    /// with its namespace once every one of its processes was started).
    Spawn {
        apps: Vec<crate::spawn::SpawnApp>,
        opts: crate::spawn::SpawnOpts,
    },
    /// PMIX_QUERY_NAMESPACES, PMIX_QUERY_PSET_NAMES, PMIX_QUERY_NUM_PSETS: the running
    /// jobs' namespaces and the process sets defined in the session
    /// ([`Response::Session`]).
    QuerySession,
    /// PMIX_QUERY_PSET_MEMBERSHIP: the members of process set `name`
    /// ([`Response::Procs`]; `PsetNotFound` when no such set is defined).
    QueryPset {
        name: String,
    },
}

impl Request {
    /// Short operation name for logs and errors.
    pub fn op_name(&self) -> &'static str {
        match self {
            Request::Commit { .. } => "commit",
            Request::Get { .. } => "get",
            Request::Fence { .. } => "fence",
            Request::Construct { .. } => "group construct",
            Request::Destruct { .. } => "group destruct",
            Request::Leave { .. } => "group leave",
            Request::Invite { .. } => "group invite",
            Request::Join { .. } => "group join",
            Request::Decide { .. } => "group construct decision",
            Request::Notify { .. } => "notify",
            Request::QueryGroup { .. } => "group query",
            Request::QueryGroupNames => "group names query",
            Request::FailedLocal { .. } => "local failure view",
            Request::FailedGlobal { .. } => "global failure view",
            Request::Finalize => "finalize",
            Request::Publish { .. } => "publish",
            Request::Lookup { .. } => "lookup",
            Request::Unpublish { .. } => "unpublish",
            Request::Spawn { .. } => "spawn",
            Request::QuerySession => "session query",
            Request::QueryPset { .. } => "process set query",
        }
    }
}

/// Successful replies.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Response {
    Done,
    Value(Value),
    /// Shared: a node server answers every local member of a construct with one result
    /// (encoded as the bare `GroupResult`).
    Group(std::sync::Arc<GroupResult>),
    GroupNames(Vec<String>),
    /// A list of processes in canonical order (the failure views).
    Procs(#[serde(with = "crate::procset")] Vec<ProcId>),
    /// What a lookup found.
    Published(Vec<Published>),
    /// The namespace a spawn started.
    Spawned(crate::ids::Nspace),
    /// The namespaces of the session's running jobs (the launched one first) and the
    /// names of the process sets defined, by job then in definition order.
    Session {
        nspaces: Vec<crate::ids::Nspace>,
        psets: Vec<String>,
    },
}

/// Frames a client sends after its hello.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ClientFrame {
    pub id: ReqId,
    pub req: Request,
}

/// Frames a server sends to a client.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum ServerFrame {
    Welcome(Result<Welcome, CohortError>),
    Reply {
        id: ReqId,
        result: Result<Response, CohortError>,
    },
    Event(Event),
}

/// Encodes a node server's frames to its clients, once per group result: every local
/// member of a construct is answered with the same shared [`GroupResult`] (its member
/// list and group info name every member of the group), so the frames differ only in
/// their request id. The first is encoded; the others copy its bytes and put their id in.
#[derive(Default)]
pub struct ClientFrameEncoder {
    last: Option<(std::sync::Arc<GroupResult>, Vec<u8>)>,
}

impl ClientFrameEncoder {
    /// Where a reply frame's request id sits: after the frame's length prefix and
    /// `ServerFrame`'s variant index (bincode's fixed-width little-endian layout).
    const REPLY_ID_AT: usize = 8;

    /// Appends `frame`'s complete frame to `out`: the bytes of
    /// [`crate::frame::encode_into`].
    pub fn encode_into(&mut self, frame: &ServerFrame, out: &mut Vec<u8>) {
        let ServerFrame::Reply {
            id,
            result: Ok(Response::Group(group)),
        } = frame
        else {
            return crate::frame::encode_into(frame, out);
        };
        let start = out.len();
        match &self.last {
            Some((last, bytes)) if std::sync::Arc::ptr_eq(last, group) => {
                out.extend_from_slice(bytes);
                let at = start + Self::REPLY_ID_AT;
                out[at..at + 8].copy_from_slice(&id.to_le_bytes());
            }
            _ => {
                crate::frame::encode_into(frame, out);
                self.last = Some((group.clone(), out[start..].to_vec()));
            }
        }
    }
}

#[cfg(test)]
mod request_tests {
    use super::*;
    use crate::frame;

    /// Every leader of a collective construct sends the whole leader list: a run of
    /// ranks is a few bytes on the wire, and any list decodes to itself, in its order.
    #[test]
    fn construct_lists_travel_compact_and_decode_to_themselves() {
        let construct = |procs: Vec<ProcId>| Request::Construct {
            id: "g".into(),
            procs: procs.into(),
            opts: ConstructOpts::default(),
        };
        let whole: Vec<ProcId> = (0..4096).map(|r| ProcId::new("job.1", r)).collect();
        let wire = frame::encode_body(&construct(whole.clone()));
        assert!(
            wire.len() < 200,
            "{} bytes for a run of 4096 ranks",
            wire.len()
        );
        let mut shuffled = whole[..64].to_vec();
        shuffled.reverse();
        shuffled.swap(3, 40);
        shuffled.push(ProcId::new("other", 2));
        shuffled.push(shuffled[0].clone());
        for procs in [whole, shuffled, vec![]] {
            let req = construct(procs);
            let back: Request = frame::decode_body(&frame::encode_body(&req)).unwrap();
            assert_eq!(back, req);
        }
    }
}

#[cfg(test)]
mod encoder_tests {
    use super::*;
    use crate::frame;
    use std::sync::Arc;

    fn group(id: &str, n: u32) -> Arc<GroupResult> {
        let members: Vec<ProcId> = (0..n).map(|r| ProcId::new("job", r)).collect();
        Arc::new(GroupResult {
            id: id.into(),
            status: ConstructStatus::Success,
            group_info: members
                .iter()
                .map(|p| (p.clone(), vec![("k".into(), Value::U32(p.rank))]))
                .collect(),
            members,
            context_id: Some(7),
            failed: vec![],
        })
    }

    #[test]
    fn shared_group_replies_encode_to_the_bytes_of_each_frame() {
        let (g1, g2) = (group("g1", 5), group("g2", 3));
        // Another result equal to g1 but not shared with it is encoded on its own.
        let g1_copy = Arc::new((*g1).clone());
        let frames = [
            (1u64, Ok(Response::Group(g1.clone()))),
            (u64::MAX - 3, Ok(Response::Group(g1.clone()))),
            (0x0102_0304_0506_0708, Ok(Response::Group(g1_copy))),
            (9, Ok(Response::Done)),
            (10, Ok(Response::Group(g1.clone()))),
            (11, Ok(Response::Group(g2.clone()))),
            (
                12,
                Err(CohortError::Timeout {
                    op: "construct of g2".into(),
                    timeout_ms: 5,
                    missing: vec![ProcId::new("job", 2)],
                }),
            ),
            (13, Ok(Response::Group(g2))),
        ]
        .map(|(id, result)| ServerFrame::Reply { id, result });
        let mut enc = ClientFrameEncoder::default();
        let mut ours = Vec::new();
        let mut plain = Vec::new();
        for f in &frames {
            enc.encode_into(f, &mut ours);
            frame::encode_into(f, &mut plain);
            assert_eq!(ours, plain, "after {f:?}");
        }
        let event = ServerFrame::Event(Event {
            code: 7,
            source: ProcId::new("job", 1),
            affected: vec![],
            info: vec![],
        });
        let mut events = Vec::new();
        enc.encode_into(&event, &mut events);
        assert_eq!(events, frame::encode(&event));
    }
}

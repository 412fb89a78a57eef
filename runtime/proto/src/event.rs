//! Events: codes, ranges and the notification payload.

use serde::{Deserialize, Serialize};

use crate::ids::ProcId;
use crate::value::Info;

/// An event code. The group codes below are cohort's stable values for the PMIx group
/// events; applications may use any other value for their own events.
pub type EventCode = i32;

pub mod codes {
    use super::EventCode;
    pub const GROUP_INVITED: EventCode = -159;
    pub const GROUP_LEFT: EventCode = -160;
    pub const GROUP_INVITE_ACCEPTED: EventCode = -161;
    pub const GROUP_INVITE_DECLINED: EventCode = -162;
    pub const GROUP_INVITE_FAILED: EventCode = -163;
    /// PMIX_GROUP_MEMBERSHIP_UPDATE: a member left; to the remaining members, after
    /// `GROUP_LEFT`. Affected: the departed process; info `keys::GROUP_ID` and
    /// `keys::GROUP_MEMBERSHIP` (the revised membership).
    pub const GROUP_MEMBERSHIP_UPDATE: EventCode = -164;
    pub const GROUP_CONSTRUCT_ABORT: EventCode = -165;
    pub const GROUP_CONSTRUCT_COMPLETE: EventCode = -166;
    pub const GROUP_LEADER_SELECTED: EventCode = -167;
    pub const GROUP_LEADER_FAILED: EventCode = -168;
    pub const GROUP_CONTEXT_ID_ASSIGNED: EventCode = -169;
    pub const GROUP_MEMBER_FAILED: EventCode = -170;
    /// rfc0003 PMIX_CONNECT_NOTIFY_EACH: a process called connect (source and
    /// affected: it; info `keys::NSPACE`: the connection's nspace).
    pub const PROC_HAS_CONNECTED: EventCode = -171;
    /// rfc0003 PMIX_CONNECT_NOTIFY_EACH: a process called disconnect (as above).
    pub const PROC_HAS_DISCONNECTED: EventCode = -172;
    /// A process terminated; for a connection (rfc0003 "termination error" event), the
    /// info carries the connection's nspace under `keys::NSPACE`.
    pub const PROC_TERMINATED: EventCode = -201;
    pub const LOST_CONNECTION: EventCode = -61;
    /// PMIX_EVENT_JOB_END: every process of a spawned job ended; to the process that
    /// spawned it, when it asked (`SpawnOpts::notify_completion`, PMIX_NOTIFY_COMPLETION).
    /// Affected: `{nspace, *}`; info: `keys::NSPACE`, `keys::EXIT_CODE`,
    /// `keys::JOB_TERM_STATUS`.
    pub const JOB_END: EventCode = -145;
    /// PMIX_PROCESS_SET_DEFINE: a process set was defined in the session (a spawned
    /// job's, as it starts); to every process of the other running jobs. Info:
    /// `keys::PSET_NAME`, `keys::PSET_MEMBERS`.
    pub const PROCESS_SET_DEFINE: EventCode = -55;
    /// PMIX_PROCESS_SET_DELETE: a process set was deleted (its job ended); to the same
    /// processes. Info: `keys::PSET_NAME`.
    pub const PROCESS_SET_DELETE: EventCode = -56;

    /// Human name of a known code, for logs and demo output.
    pub fn name(code: EventCode) -> Option<&'static str> {
        Some(match code {
            GROUP_INVITED => "GROUP_INVITED",
            GROUP_LEFT => "GROUP_LEFT",
            GROUP_INVITE_ACCEPTED => "GROUP_INVITE_ACCEPTED",
            GROUP_INVITE_DECLINED => "GROUP_INVITE_DECLINED",
            GROUP_INVITE_FAILED => "GROUP_INVITE_FAILED",
            GROUP_MEMBERSHIP_UPDATE => "GROUP_MEMBERSHIP_UPDATE",
            GROUP_CONSTRUCT_ABORT => "GROUP_CONSTRUCT_ABORT",
            GROUP_CONSTRUCT_COMPLETE => "GROUP_CONSTRUCT_COMPLETE",
            GROUP_LEADER_SELECTED => "GROUP_LEADER_SELECTED",
            GROUP_LEADER_FAILED => "GROUP_LEADER_FAILED",
            GROUP_CONTEXT_ID_ASSIGNED => "GROUP_CONTEXT_ID_ASSIGNED",
            GROUP_MEMBER_FAILED => "GROUP_MEMBER_FAILED",
            PROC_HAS_CONNECTED => "PROC_HAS_CONNECTED",
            PROC_HAS_DISCONNECTED => "PROC_HAS_DISCONNECTED",
            PROC_TERMINATED => "PROC_TERMINATED",
            LOST_CONNECTION => "LOST_CONNECTION",
            JOB_END => "JOB_END",
            PROCESS_SET_DEFINE => "PROCESS_SET_DEFINE",
            PROCESS_SET_DELETE => "PROCESS_SET_DELETE",
            _ => return None,
        })
    }
}

/// Well-known info keys carried in events and results.
pub mod keys {
    pub const GROUP_ID: &str = "pmix.grp.id";
    pub const GROUP_MEMBERSHIP: &str = "pmix.grp.mbrs";
    pub const GROUP_CONTEXT_ID: &str = "pmix.grp.ctxid";
    pub const EVENT_AFFECTED_PROC: &str = "pmix.evproc";
    pub const GROUP_LEADER: &str = "pmix.grp.ldr";
    /// PMIX_APPNUM: the application context (MPMD program) of a process (`u32`).
    pub const APPNUM: &str = "pmix.appnum";
    /// PMIX_APP_SIZE: number of processes of a process's application context (`u32`).
    pub const APP_SIZE: &str = "pmix.app.size";
    /// PMIX_APP_RANK: a process's rank within its application context (`u32`).
    pub const APP_RANK: &str = "pmix.apprank";
    /// PMIX_JOB_NUM_APPS: number of application contexts of a job (`u32`).
    pub const JOB_NUM_APPS: &str = "pmix.job.napps";
    /// PMIX_PARENT_ID: the process that spawned a process's job (`Procs`, one
    /// process); absent for the launched job.
    pub const PARENT_ID: &str = "pmix.parent";
    /// PMIX_SPAWNED: whether a process's job was spawned (`Bool`).
    pub const SPAWNED: &str = "pmix.spawned";
    /// PMIX_NODE_RANK: a process's rank among every process of the session on its
    /// node, earlier jobs' first (`U32`).
    pub const NODE_RANK: &str = "pmix.nrank";
    /// PMIX_NODE_SIZE: how many processes of the session's jobs are placed on a node
    /// (`U32`; asked of a job's wildcard: the asker's node).
    pub const NODE_SIZE: &str = "pmix.node.size";
    /// The node's topology as hwloc 2 XML (`Str`), Open MPI's
    /// `OPAL_PMIX_HWLOC_XML_V2`: served by the node server for the processes of its
    /// host (and any job's wildcard), so they need not discover the host themselves.
    pub const HWLOC_XML: &str = "pmix.hwlocxml2";
    /// PMIX_LOCALITY_STRING: where a bound process sits on its host (`Str`, see
    /// `cohort_topology::Topology::locality_string`); served for the processes of the
    /// node server's host, not found for an unbound one.
    pub const LOCALITY_STRING: &str = "pmix.locstr";
    /// PMIX_CPUSET: the CPUs a bound process was bound to at launch (`Str`,
    /// `hwloc:` and the list, like `hwloc:0-1`); served like [`LOCALITY_STRING`].
    pub const CPUSET: &str = "pmix.cpuset";
    /// PMIX_PSET_NAMES: names of the process sets a process belongs to (`Strs`).
    pub const PSET_NAMES: &str = "pmix.pset.nms";
    /// PMIX_PSET_NAME: the name of the process set a PROCESS_SET_DEFINE or
    /// PROCESS_SET_DELETE event is about (`Str`).
    pub const PSET_NAME: &str = "pmix.pset.nm";
    /// PMIX_PSET_MEMBERS: the members of the process set a PROCESS_SET_DEFINE event
    /// defines (`Procs`).
    pub const PSET_MEMBERS: &str = "pmix.pset.mems";
    /// PMIX_QUERY_PSET_NAMES: names of the process sets defined (query).
    pub const QUERY_PSET_NAMES: &str = "pmix.qry.psets";
    /// PMIX_QUERY_NUM_PSETS: number of process sets defined (query).
    pub const QUERY_NUM_PSETS: &str = "pmix.qry.psetnum";
    /// PMIX_QUERY_PSET_MEMBERSHIP: members of a process set (query).
    pub const QUERY_PSET_MEMBERSHIP: &str = "pmix.qry.pmems";
    /// PMIX_NSPACE: the nspace of a connection (rfc0003) an event is about.
    pub const NSPACE: &str = "pmix.nspace";
    /// PMIX_EXIT_CODE: a spawned job's exit code (`I64`: its first failed process's
    /// shell-style status, or 0), in `codes::JOB_END`.
    pub const EXIT_CODE: &str = "pmix.exit.code";
    /// PMIX_JOB_TERM_STATUS: how a spawned job ended (`I64`, a PMIx status: 0 when
    /// every process exited 0, PMIX_ERROR (-1) otherwise), in `codes::JOB_END`.
    pub const JOB_TERM_STATUS: &str = "pmix.job.term.status";
}

/// Who an event goes to (PMIX_RANGE_*). The source is never sent its own event.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Range {
    /// Every process on the notifier's node.
    Local,
    /// Every process of a namespace.
    Namespace(String),
    /// Every process of the session.
    Session,
    /// Every current member of a group (as the notifier's node server knows it).
    Group(String),
    /// An explicit list of processes.
    Procs(Vec<ProcId>),
}

/// A notification as delivered to handlers.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Event {
    pub code: EventCode,
    /// The process that raised it (or the node server's pseudo-proc for runtime events).
    pub source: ProcId,
    /// Processes the event is about (departed member, failed proc, …).
    pub affected: Vec<ProcId>,
    pub info: Info,
}

//! Typed errors that cross the wire. Each names the group, proc or peer involved and
//! maps to the PMIx status constant it corresponds to at the API edge.

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::ids::{fmt_procs, NodeId, ProcId};

#[derive(Clone, Debug, PartialEq, Error, Serialize, Deserialize)]
pub enum CohortError {
    #[error("invalid group id {id:?}: {reason}")]
    InvalidGroupId { id: String, reason: String },

    #[error("unknown process {proc}: {reason}")]
    UnknownProc { proc: ProcId, reason: String },

    #[error("group {id:?} does not exist (or is not known to this process's node server)")]
    GroupNotFound { id: String },

    #[error("process {proc} is not a member of group {id:?}")]
    NotAMember { id: String, proc: ProcId },

    #[error(
        "group id {id:?} is already in use by a live group with members {}",
        fmt_procs(members)
    )]
    GroupIdInUse { id: String, members: Vec<ProcId> },

    #[error(
        "leaders of group {id:?} disagree on the leader list: {} vs {}",
        fmt_procs(a),
        fmt_procs(b)
    )]
    LeaderMismatch {
        id: String,
        a: Vec<ProcId>,
        b: Vec<ProcId>,
    },

    #[error("bootstrap leaders of group {id:?} disagree on the number of leaders: {} says {}, {} says {}", a.0, a.1, b.0, b.1)]
    LeaderCountMismatch {
        id: String,
        a: (ProcId, u32),
        b: (ProcId, u32),
    },

    #[error("group {id:?}: {proc} cannot lead: {reason}")]
    NotLeader {
        id: String,
        proc: ProcId,
        reason: String,
    },

    #[error("{op} disagrees with a concurrent call: {reason}")]
    Mismatch { op: String, reason: String },

    #[error(
        "{op} timed out after {timeout_ms} ms; still waiting for {}",
        fmt_procs(missing)
    )]
    Timeout {
        op: String,
        timeout_ms: u64,
        missing: Vec<ProcId>,
    },

    #[error(
        "{op} failed: process(es) {} terminated before participating",
        fmt_procs(procs)
    )]
    ProcTerminated { op: String, procs: Vec<ProcId> },

    #[error("key {key:?} not found for process {proc}")]
    NotFound { proc: ProcId, key: String },

    #[error("node server {node} lost: {reason}")]
    PeerLost { node: NodeId, reason: String },

    #[error("construct of group {id:?} aborted: {reason}")]
    ConstructAborted { id: String, reason: String },

    #[error("bad request: {0}")]
    BadRequest(String),

    #[error("connection to the node server lost: {0}")]
    ServerLost(String),

    #[error("authentication refused: {0}")]
    AuthRefused(String),

    #[error("protocol error: {0}")]
    Protocol(String),

    #[error("I/O error: {0}")]
    Io(String),

    #[error("not supported: {0}")]
    NotSupported(String),

    #[error("process set {name:?} is not defined in this session")]
    PsetNotFound { name: String },

    #[error("key {key:?} is already published in the {range} range (by {publisher})")]
    KeyPublished {
        key: String,
        range: String,
        publisher: ProcId,
    },
}

impl CohortError {
    /// The PMIx status constant this error corresponds to.
    pub fn pmix_status(&self) -> &'static str {
        use CohortError::*;
        match self {
            InvalidGroupId { .. }
            | BadRequest(_)
            | Mismatch { .. }
            | LeaderMismatch { .. }
            | LeaderCountMismatch { .. } => "PMIX_ERR_BAD_PARAM",
            NotLeader { .. } => "PMIX_ERR_NO_PERMISSIONS",
            UnknownProc { .. } => "PMIX_ERR_NOT_FOUND",
            GroupNotFound { .. } => "PMIX_ERR_NOT_FOUND",
            NotAMember { .. } => "PMIX_ERR_BAD_PARAM",
            GroupIdInUse { .. } => "PMIX_ERR_DUPLICATE_KEY",
            Timeout { .. } => "PMIX_ERR_TIMEOUT",
            ProcTerminated { .. } => "PMIX_ERR_PROC_TERM_WO_SYNC",
            NotFound { .. } => "PMIX_ERR_NOT_FOUND",
            PeerLost { .. } => "PMIX_ERR_LOST_CONNECTION",
            ConstructAborted { .. } => "PMIX_GROUP_CONSTRUCT_ABORT",
            ServerLost(_) => "PMIX_ERR_UNREACH",
            AuthRefused(_) => "PMIX_ERR_NO_PERMISSIONS",
            Protocol(_) => "PMIX_ERR_UNPACK_FAILURE",
            Io(_) => "PMIX_ERROR",
            NotSupported(_) => "PMIX_ERR_NOT_SUPPORTED",
            PsetNotFound { .. } => "PMIX_ERR_NOT_FOUND",
            KeyPublished { .. } => "PMIX_ERR_DUPLICATE_KEY",
        }
    }
}

impl From<std::io::Error> for CohortError {
    fn from(e: std::io::Error) -> Self {
        CohortError::Io(e.to_string())
    }
}

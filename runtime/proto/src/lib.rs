//! The cohort wire contract: identifiers, values, typed errors and every message that
//! crosses a process boundary (client ⇄ node server, node server ⇄ node server,
//! launcher ⇄ node server), plus the bounded length-prefixed framing they travel in.
//!
//! Nothing here does I/O beyond `std::io::Read`/`Write` helpers; the decoders are
//! bounded so a hostile peer can at worst get its own connection closed.

pub mod auth;
pub mod control;
pub mod digest;
pub mod env;
pub mod error;
pub mod event;
pub mod frame;
pub mod ids;
pub mod job;
pub mod msg;
pub mod nspace;
pub mod peer;
pub mod posted;
pub mod procset;
pub mod publish;
pub mod shm_fence;
pub mod spawn;
pub mod value;

pub use error::CohortError;
pub use event::{Event, EventCode, Range};
pub use ids::{
    validate_group_id, ContextId, NodeId, Nspace, ProcId, Rank, MAX_GROUP_ID_LEN, RANK_WILDCARD,
};
pub use job::{validate_pset_name, JobMap, JobState, Pset, RankSet, Session, MAX_PSET_NAME_LEN};
pub use value::{Info, Scope, Value};

/// Protocol version carried in every hello; bumped on any incompatible change.
pub const PROTOCOL_VERSION: u32 = 14;

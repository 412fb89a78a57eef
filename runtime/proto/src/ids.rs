//! Process, node, group and context identifiers.

use serde::{Deserialize, Serialize};
use std::fmt;

pub use crate::nspace::Nspace;

use crate::error::CohortError;

/// Rank of a process inside its namespace.
pub type Rank = u32;
/// "All ranks" of a namespace or group (PMIX_RANK_WILDCARD).
pub const RANK_WILDCARD: Rank = u32::MAX;
/// Index of a node server inside the job (0-based, dense).
pub type NodeId = u32;
/// Group context id (PMIX_GROUP_CONTEXT_ID): unique in the session, never reused.
pub type ContextId = u64;
/// Longest group id accepted, in bytes (PMIX_MAX_NSLEN).
pub const MAX_GROUP_ID_LEN: usize = 255;

/// A process identifier: namespace plus rank. The derived ordering (namespace, then
/// rank) is the canonical group-membership order.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ProcId {
    pub nspace: Nspace,
    pub rank: Rank,
}

impl ProcId {
    pub fn new(nspace: impl Into<Nspace>, rank: Rank) -> Self {
        ProcId {
            nspace: nspace.into(),
            rank,
        }
    }
    /// `{nspace, *}`: every process of a namespace, or every member of a group.
    pub fn wildcard(nspace: impl Into<Nspace>) -> Self {
        Self::new(nspace, RANK_WILDCARD)
    }
    pub fn is_wildcard(&self) -> bool {
        self.rank == RANK_WILDCARD
    }
}

impl fmt::Display for ProcId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_wildcard() {
            write!(f, "{}:*", self.nspace)
        } else {
            write!(f, "{}:{}", self.nspace, self.rank)
        }
    }
}

/// Formats a list of procs compactly for error messages: `ns:[0,1,5]`.
pub fn fmt_procs(procs: &[ProcId]) -> String {
    let mut out = String::from("[");
    for (i, p) in procs.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        if i == 16 {
            out.push_str(&format!("… {} more", procs.len() - 16));
            break;
        }
        out.push_str(&p.to_string());
    }
    out.push(']');
    out
}

/// Checks a user-supplied group id: 1..=255 bytes, no NUL (it must survive a C string).
pub fn validate_group_id(id: &str) -> Result<(), CohortError> {
    let reason = if id.is_empty() {
        Some("group id is empty".to_string())
    } else if id.len() > MAX_GROUP_ID_LEN {
        Some(format!(
            "group id is {} bytes, longer than the {MAX_GROUP_ID_LEN}-byte limit",
            id.len()
        ))
    } else if id.contains('\0') {
        Some("group id contains a NUL byte".to_string())
    } else {
        None
    };
    match reason {
        Some(reason) => Err(CohortError::InvalidGroupId {
            id: truncate_for_display(id),
            reason,
        }),
        None => Ok(()),
    }
}

fn truncate_for_display(id: &str) -> String {
    if id.len() <= 64 {
        return id.to_string();
    }
    let mut end = 64;
    while !id.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &id[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_order_is_namespace_then_rank() {
        let mut v = vec![
            ProcId::new("b", 0),
            ProcId::new("a", 3),
            ProcId::new("a", 1),
        ];
        v.sort();
        assert_eq!(
            v,
            vec![
                ProcId::new("a", 1),
                ProcId::new("a", 3),
                ProcId::new("b", 0)
            ]
        );
    }

    #[test]
    fn group_id_limits() {
        assert!(validate_group_id("g").is_ok());
        assert!(validate_group_id(&"x".repeat(255)).is_ok());
        let e = validate_group_id("").unwrap_err();
        assert!(matches!(e, CohortError::InvalidGroupId { .. }), "{e}");
        let e = validate_group_id(&"x".repeat(256)).unwrap_err();
        assert!(e.to_string().contains("256 bytes"), "{e}");
        assert!(validate_group_id("a\0b").is_err());
    }
}

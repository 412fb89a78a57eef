//! Publish / lookup (the PMIx "Publish/Lookup Operations" chapter): data published
//! under a key, in a range, for processes that know the key but not the publisher.
//!
//! The job's data store is one node server's (see `cohort_core::datastore`); these
//! are the shapes that travel to it.

use serde::{Deserialize, Serialize};

use crate::error::CohortError;
use crate::ids::ProcId;
use crate::value::Value;

/// The longest key a process may publish or look up (PMIX_MAX_KEYLEN).
pub const MAX_PUBLISH_KEY_LEN: usize = 511;

/// Who may look a published key up (pmix_data_range_t). A lookup finds data only when
/// it names the same kind of range as the publisher did (and, for `Custom`, the same
/// processes); see `cohort_core::datastore`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum DataRange {
    /// PMIX_RANGE_PROC_LOCAL: the publishing process only.
    ProcLocal,
    /// PMIX_RANGE_LOCAL: processes on the publisher's node.
    Local,
    /// PMIX_RANGE_NAMESPACE: processes of the publisher's namespace.
    Namespace,
    /// PMIX_RANGE_SESSION, the default: every process of the session (a cohort job).
    #[default]
    Session,
    /// PMIX_RANGE_GLOBAL: every process the host environment serves. A cohort job is
    /// its own domain, so this reaches the same processes as `Session`, but it is a
    /// range of its own for matching.
    Global,
    /// PMIX_RANGE_CUSTOM: the listed processes (the publisher need not be one).
    Custom(Vec<ProcId>),
}

impl DataRange {
    /// The PMIx name of the range, for messages.
    pub fn name(&self) -> &'static str {
        match self {
            DataRange::ProcLocal => "proc-local",
            DataRange::Local => "local",
            DataRange::Namespace => "namespace",
            DataRange::Session => "session",
            DataRange::Global => "global",
            DataRange::Custom(_) => "custom",
        }
    }
}

/// How long the data store keeps a published value (pmix_persistence_t). In a cohort
/// job the application, the session and "indefinitely" all end with the job.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Persistence {
    /// PMIX_PERSIST_INDEF: until unpublished.
    Indefinite,
    /// PMIX_PERSIST_FIRST_READ: until a lookup returns it once.
    FirstRead,
    /// PMIX_PERSIST_PROC: until the publisher terminates.
    Proc,
    /// PMIX_PERSIST_APP, the default: until the application ends.
    #[default]
    App,
    /// PMIX_PERSIST_SESSION: until the session ends.
    Session,
}

/// Directives of a lookup.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LookupOpts {
    pub range: DataRange,
    /// PMIX_WAIT: answer only once this many of the keys are found (0: all of them).
    /// `None`: answer with what is there now.
    pub wait: Option<u32>,
    /// PMIX_TIMEOUT, in milliseconds, for a waiting lookup.
    pub timeout_ms: Option<u64>,
}

/// One value a lookup found (a pmix_pdata_t).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Published {
    pub key: String,
    pub publisher: ProcId,
    pub value: Value,
}

/// Checks a key for publish, lookup or unpublish.
pub fn validate_key(key: &str) -> Result<(), CohortError> {
    if key.is_empty() {
        return Err(CohortError::BadRequest(
            "a published key must not be empty".into(),
        ));
    }
    if key.len() > MAX_PUBLISH_KEY_LEN {
        return Err(CohortError::BadRequest(format!(
            "published key {:?}… is {} bytes long, over the limit of {MAX_PUBLISH_KEY_LEN}",
            &key[..key.char_indices().nth(32).map_or(key.len(), |(i, _)| i)],
            key.len()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_must_be_non_empty_and_bounded() {
        assert!(validate_key("port").is_ok());
        assert!(validate_key(&"k".repeat(MAX_PUBLISH_KEY_LEN)).is_ok());
        let long = "é".repeat(300);
        let err = validate_key(&long).unwrap_err().to_string();
        assert!(err.contains("600 bytes long"), "{err}");
        assert!(validate_key("").is_err());
    }
}

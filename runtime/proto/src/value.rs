//! Values stored by `put` and carried in info arrays.

use serde::{Deserialize, Serialize};

use crate::ids::ProcId;

/// A typed value (the subset of pmix_value_t types cohort carries).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Value {
    Bool(bool),
    U32(u32),
    U64(u64),
    I64(i64),
    F64(f64),
    Str(String),
    /// Encoded as one byte string, not element by element.
    Bytes(#[serde(with = "serde_bytes")] Vec<u8>),
    Procs(Vec<ProcId>),
}

impl Value {
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            Value::U64(v) => Some(v),
            Value::U32(v) => Some(v.into()),
            _ => None,
        }
    }
    pub fn as_bytes(&self) -> Option<&[u8]> {
        match self {
            Value::Bytes(b) => Some(b),
            Value::Str(s) => Some(s.as_bytes()),
            _ => None,
        }
    }
    /// Rough wire size, used for accounting and bounds.
    pub fn approx_size(&self) -> usize {
        match self {
            Value::Str(s) => s.len() + 8,
            Value::Bytes(b) => b.len() + 8,
            Value::Procs(p) => p.iter().map(|p| p.nspace.len() + 12).sum::<usize>() + 8,
            _ => 9,
        }
    }
}

impl From<&str> for Value {
    fn from(s: &str) -> Self {
        Value::Str(s.to_string())
    }
}
impl From<String> for Value {
    fn from(s: String) -> Self {
        Value::Str(s)
    }
}
impl From<u64> for Value {
    fn from(v: u64) -> Self {
        Value::U64(v)
    }
}
impl From<u32> for Value {
    fn from(v: u32) -> Self {
        Value::U32(v)
    }
}
impl From<bool> for Value {
    fn from(v: bool) -> Self {
        Value::Bool(v)
    }
}
impl From<Vec<u8>> for Value {
    fn from(v: Vec<u8>) -> Self {
        Value::Bytes(v)
    }
}

/// An info array: ordered key/value pairs (pmix_info_t[]).
pub type Info = Vec<(String, Value)>;

/// Looks a key up in an info array (last write wins).
pub fn info_get<'a>(info: &'a Info, key: &str) -> Option<&'a Value> {
    info.iter().rev().find(|(k, _)| k == key).map(|(_, v)| v)
}

/// Visibility of posted data (PMIX_LOCAL / PMIX_REMOTE / PMIX_GLOBAL).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Scope {
    /// Only processes on the same node can read it.
    Local,
    /// Only processes on other nodes can read it (and it travels in collectives).
    Remote,
    /// Everyone can read it.
    Global,
}

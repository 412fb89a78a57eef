//! Values stored by `put` and carried in info arrays.

/// The type [`Value::Bytes`] holds (`bytes::Bytes`: cloning shares the buffer).
pub use bytes::Bytes;
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
    /// Encoded as one byte string, not element by element. Shared, not copied, when
    /// the value is cloned: a collective's outcome is kept, forwarded, stored and
    /// replied to each local member, and each of those holds the same bytes.
    Bytes(#[serde(with = "shared_bytes")] Bytes),
    Procs(Vec<ProcId>),
    /// An array of strings (a `pmix_data_array_t` of `PMIX_STRING`), e.g. the names
    /// of the process sets a process belongs to (PMIX_PSET_NAMES).
    Strs(Vec<String>),
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
    pub fn as_strs(&self) -> Option<&[String]> {
        match self {
            Value::Strs(v) => Some(v),
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
            Value::Strs(v) => v.iter().map(|s| s.len() + 8).sum::<usize>() + 8,
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
        Value::Bytes(v.into())
    }
}
impl From<Bytes> for Value {
    fn from(v: Bytes) -> Self {
        Value::Bytes(v)
    }
}

/// `Bytes` on the wire exactly as `serde_bytes` writes a `Vec<u8>`: one length, then
/// the bytes.
pub(crate) mod shared_bytes {
    use bytes::Bytes;
    use serde::{Deserializer, Serializer};

    pub fn serialize<S: Serializer>(b: &Bytes, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(b)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Bytes, D::Error> {
        serde_bytes::deserialize::<Vec<u8>, D>(d).map(Bytes::from)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame;

    #[test]
    fn shared_bytes_keep_the_wire_form_of_a_byte_vector() {
        for len in [0usize, 1, 1024, 70_000] {
            let raw: Vec<u8> = (0..len).map(|i| (i * 7) as u8).collect();
            let new = frame::encode_body(&Value::Bytes(raw.clone().into()));
            // As `serde_bytes` wrote the `Vec<u8>` this variant held: the variant's
            // index, the length, the bytes.
            let mut old = 6u32.to_le_bytes().to_vec();
            old.extend_from_slice(&(len as u64).to_le_bytes());
            old.extend_from_slice(&raw);
            assert_eq!(new, old);
            let back: Value = frame::decode_body(&new).unwrap();
            assert_eq!(back.as_bytes(), Some(&raw[..]));
        }
    }

    #[test]
    fn a_cloned_byte_value_shares_its_bytes() {
        let v = Value::from(vec![3u8; 4096]);
        let w = v.clone();
        assert_eq!(
            v.as_bytes().unwrap().as_ptr(),
            w.as_bytes().unwrap().as_ptr()
        );
    }
}

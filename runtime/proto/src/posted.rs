//! A process's remote-scope posted data as node servers carry it: encoded once, opaque.
//!
//! A fence with data, or a construct, carries what every participant posted through
//! every node server on the way: up the tree, down again, into each server's store. As
//! an [`Info`] each hop decoded and re-encoded every key and value of every process
//! (allocating a string per key and a buffer per value). A [`Posted`] is the `Info`'s
//! encoding, made once when the process commits; a hop copies it as one byte string,
//! and a server decodes it only when one of its processes reads a key of that process.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::error::CohortError;
use crate::frame;
use crate::value::{Bytes, Info};

/// An encoded [`Info`] (empty when nothing was posted). Cloning shares the bytes.
#[derive(Clone, Default, PartialEq)]
pub struct Posted(Bytes);

impl Posted {
    /// Encodes `info`.
    pub fn new(info: &Info) -> Posted {
        if info.is_empty() {
            Posted::default()
        } else {
            Posted(Bytes::from(frame::encode_body(info)))
        }
    }

    /// Nothing posted.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Size of the encoding, in bytes.
    pub fn encoded_len(&self) -> usize {
        self.0.len()
    }

    /// The posted keys and values. Fails only on bytes this module did not encode (a
    /// peer's bug or a corrupted message); the error says how many bytes.
    pub fn info(&self) -> Result<Info, CohortError> {
        if self.0.is_empty() {
            return Ok(Info::new());
        }
        frame::decode_body(&self.0).map_err(|e| {
            CohortError::Protocol(format!(
                "posted data ({} bytes) does not decode: {e}",
                self.0.len()
            ))
        })
    }
}

impl fmt::Debug for Posted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.info() {
            Ok(info) => f.debug_tuple("Posted").field(&info).finish(),
            Err(_) => write!(f, "Posted(<{} bytes that do not decode>)", self.0.len()),
        }
    }
}

/// On the wire: one length, then the encoded `Info`.
impl Serialize for Posted {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        crate::value::shared_bytes::serialize(&self.0, s)
    }
}

impl<'de> Deserialize<'de> for Posted {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Posted, D::Error> {
        crate::value::shared_bytes::deserialize(d).map(Posted)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::value::Value;

    fn sample() -> Info {
        vec![
            ("pmix.ep".into(), Value::from(vec![7u8; 300])),
            ("rank".into(), Value::U32(3)),
            ("host".into(), Value::from("node2")),
        ]
    }

    #[test]
    fn round_trips_the_info_through_the_wire() {
        let posted = Posted::new(&sample());
        assert!(!posted.is_empty());
        let wire = frame::encode_body(&posted);
        let back: Posted = frame::decode_body(&wire).unwrap();
        assert_eq!(back, posted);
        assert_eq!(back.info().unwrap(), sample());
    }

    #[test]
    fn nothing_posted_is_empty_and_decodes_to_no_keys() {
        let posted = Posted::new(&Info::new());
        assert!(posted.is_empty());
        assert_eq!(posted.encoded_len(), 0);
        assert_eq!(posted.info().unwrap(), Info::new());
        let back: Posted = frame::decode_body(&frame::encode_body(&posted)).unwrap();
        assert!(back.is_empty());
    }

    #[test]
    fn bytes_that_are_not_an_info_are_a_typed_error() {
        let wire = frame::encode_body(&Value::from(vec![0xffu8; 12]));
        // A byte string holding garbage: it decodes as a `Posted`, but not as an Info.
        let garbage: Posted = frame::decode_body(&frame::encode_body(&serde_bytes::ByteBuf::from(
            wire[..9].to_vec(),
        )))
        .unwrap();
        let e = garbage.info().unwrap_err();
        assert!(matches!(e, CohortError::Protocol(_)), "{e}");
        assert!(e.to_string().contains("9 bytes"), "{e}");
        assert!(format!("{garbage:?}").contains("do not decode"));
    }
}

//! The byte format of stream fabrics (TCP today): the connection handshake and the
//! length-prefixed frames that follow it. Pure encoding and decoding, no I/O, so tests
//! and fuzzers can speak it directly.
//!
//! A connection starts with the connector's [`Hello`] and the acceptor's [`Reply`].
//! After an accept, both directions carry frames: a little-endian `u32` length and that
//! many payload bytes. Lengths from [`CONTROL_MIN`] up are control words, not data; the
//! only one defined is [`GOODBYE`] ("I am closing on purpose, do not report me lost"),
//! the last word a closing side writes.

use bytes::{Buf, Bytes, BytesMut};

use crate::NodeId;

/// First bytes of every hello and reply ("cohort fabric").
pub const MAGIC: [u8; 8] = *b"COHORTFB";
/// Version of this byte format; bumped on any change to the handshake or framing.
pub const WIRE_VERSION: u32 = 2;
/// Revision of the verbs backend's protocol over its queue pairs (the immediate data's
/// layout, credits); bumped on any change there. 1: credits ride on payloads.
pub const VERBS_REVISION: u32 = 1;
/// The wire version a verbs fabric presents in its hello: same handshake, then a
/// [`VerbsEndpoint`] exchange instead of frames, so the two backends refuse each other
/// (and so do verbs fabrics of different [`VERBS_REVISION`]s).
pub const VERBS_WIRE_VERSION: u32 = 0x0100_0000 | (VERBS_REVISION << 16) | WIRE_VERSION;
/// Longest secret a hello may carry.
pub const MAX_SECRET_LEN: usize = 1024;
/// Longest refusal reason a reply may carry.
pub const MAX_REASON_LEN: usize = 512;
/// Size of a hello before its secret.
pub const HELLO_FIXED_LEN: usize = 8 + 4 + 4 + 4 + 4 + 8 + 2;
/// Size of a reply before its reason.
pub const REPLY_FIXED_LEN: usize = 8 + 4 + 1 + 4 + 8 + 2;
/// Length words from here up are control words, never data lengths.
pub const CONTROL_MIN: u32 = 0xFFFF_FF00;
/// Control word: the sender closes this connection on purpose.
pub const GOODBYE: u32 = u32::MAX;
/// Largest data frame the format can express (below the control range).
pub const MAX_DATA_LEN: usize = (CONTROL_MIN - 1) as usize;

/// Malformed handshake or frame bytes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    #[error("bad magic bytes (not a cohort fabric peer)")]
    BadMagic,
    #[error("hello carries a {len}-byte secret, over the {MAX_SECRET_LEN}-byte limit")]
    SecretTooLong { len: usize },
    #[error("reply carries a {len}-byte reason, over the {MAX_REASON_LEN}-byte limit")]
    ReasonTooLong { len: usize },
    #[error("reply has unknown status {status}")]
    BadStatus { status: u8 },
    #[error("frame of {len} bytes exceeds the {max}-byte limit")]
    FrameTooLarge { len: usize, max: usize },
    #[error("unknown control word {word:#010x}")]
    UnknownControl { word: u32 },
    #[error("verbs endpoint out of range")]
    BadEndpoint,
}

/// The connector's introduction.
#[derive(Clone, PartialEq, Eq)]
pub struct Hello {
    pub wire_version: u32,
    /// `cohort_proto::PROTOCOL_VERSION` of the connector: payloads are proto messages,
    /// so mismatched builds are refused here rather than failing to decode later.
    pub proto_version: u32,
    /// The connector's node id.
    pub node: NodeId,
    /// The node id the connector believes it is talking to (catches a stale peer table).
    pub expected: NodeId,
    /// Random per-process number; a restarted peer presents a new one.
    pub incarnation: u64,
    pub secret: Vec<u8>,
}

impl std::fmt::Debug for Hello {
    // Never print the secret.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hello")
            .field("wire_version", &self.wire_version)
            .field("proto_version", &self.proto_version)
            .field("node", &self.node)
            .field("expected", &self.expected)
            .field("incarnation", &self.incarnation)
            .field("secret", &format_args!("<{} bytes>", self.secret.len()))
            .finish()
    }
}

/// A hello's fixed part; the secret (`secret_len` bytes, already bounds-checked)
/// follows on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HelloHead {
    pub wire_version: u32,
    pub proto_version: u32,
    pub node: NodeId,
    pub expected: NodeId,
    pub incarnation: u64,
    pub secret_len: usize,
}

impl Hello {
    /// Encodes the hello. Panics if the secret is longer than [`MAX_SECRET_LEN`]
    /// (a local configuration error, checked when the fabric is bound).
    pub fn encode(&self) -> Vec<u8> {
        assert!(self.secret.len() <= MAX_SECRET_LEN, "secret too long");
        let mut out = Vec::with_capacity(HELLO_FIXED_LEN + self.secret.len());
        out.extend_from_slice(&MAGIC);
        out.extend_from_slice(&self.wire_version.to_le_bytes());
        out.extend_from_slice(&self.proto_version.to_le_bytes());
        out.extend_from_slice(&self.node.to_le_bytes());
        out.extend_from_slice(&self.expected.to_le_bytes());
        out.extend_from_slice(&self.incarnation.to_le_bytes());
        out.extend_from_slice(&(self.secret.len() as u16).to_le_bytes());
        out.extend_from_slice(&self.secret);
        out
    }

    /// Decodes the fixed part, checking the magic and bounding the secret length.
    pub fn decode_head(bytes: &[u8; HELLO_FIXED_LEN]) -> Result<HelloHead, WireError> {
        let mut b = &bytes[..];
        if b[..8] != MAGIC {
            return Err(WireError::BadMagic);
        }
        b.advance(8);
        let head = HelloHead {
            wire_version: b.get_u32_le(),
            proto_version: b.get_u32_le(),
            node: b.get_u32_le(),
            expected: b.get_u32_le(),
            incarnation: b.get_u64_le(),
            secret_len: b.get_u16_le() as usize,
        };
        if head.secret_len > MAX_SECRET_LEN {
            return Err(WireError::SecretTooLong {
                len: head.secret_len,
            });
        }
        Ok(head)
    }

    /// Joins a decoded head with the secret read after it.
    pub fn from_parts(head: HelloHead, secret: Vec<u8>) -> Hello {
        Hello {
            wire_version: head.wire_version,
            proto_version: head.proto_version,
            node: head.node,
            expected: head.expected,
            incarnation: head.incarnation,
            secret,
        }
    }
}

/// The acceptor's answer to a hello.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// Accepted: the acceptor's node id and incarnation.
    Accept { node: NodeId, incarnation: u64 },
    /// Refused, with a reason for the connector's log (never the secret).
    Refuse { node: NodeId, reason: String },
}

/// A reply's fixed part; a refusal's reason (`reason_len` bytes) follows on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplyHead {
    pub wire_version: u32,
    pub accepted: bool,
    pub node: NodeId,
    pub incarnation: u64,
    pub reason_len: usize,
}

impl Reply {
    /// Encodes the reply; an over-long reason is cut at a character boundary.
    pub fn encode(&self) -> Vec<u8> {
        let (status, node, incarnation, reason) = match self {
            Reply::Accept { node, incarnation } => (0u8, *node, *incarnation, ""),
            Reply::Refuse { node, reason } => (1u8, *node, 0, truncate(reason, MAX_REASON_LEN)),
        };
        let mut out = Vec::with_capacity(REPLY_FIXED_LEN + reason.len());
        out.extend_from_slice(&MAGIC);
        out.extend_from_slice(&WIRE_VERSION.to_le_bytes());
        out.push(status);
        out.extend_from_slice(&node.to_le_bytes());
        out.extend_from_slice(&incarnation.to_le_bytes());
        out.extend_from_slice(&(reason.len() as u16).to_le_bytes());
        out.extend_from_slice(reason.as_bytes());
        out
    }

    /// Decodes the fixed part, checking magic and status and bounding the reason.
    pub fn decode_head(bytes: &[u8; REPLY_FIXED_LEN]) -> Result<ReplyHead, WireError> {
        let mut b = &bytes[..];
        if b[..8] != MAGIC {
            return Err(WireError::BadMagic);
        }
        b.advance(8);
        let wire_version = b.get_u32_le();
        let accepted = match b.get_u8() {
            0 => true,
            1 => false,
            status => return Err(WireError::BadStatus { status }),
        };
        let head = ReplyHead {
            wire_version,
            accepted,
            node: b.get_u32_le(),
            incarnation: b.get_u64_le(),
            reason_len: b.get_u16_le() as usize,
        };
        if head.reason_len > MAX_REASON_LEN {
            return Err(WireError::ReasonTooLong {
                len: head.reason_len,
            });
        }
        Ok(head)
    }

    /// Joins a decoded head with the reason bytes read after it.
    pub fn from_parts(head: ReplyHead, reason: &[u8]) -> Reply {
        if head.accepted {
            Reply::Accept {
                node: head.node,
                incarnation: head.incarnation,
            }
        } else {
            Reply::Refuse {
                node: head.node,
                reason: String::from_utf8_lossy(reason).into_owned(),
            }
        }
    }
}

fn truncate(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// Encodes a data frame's length word.
pub fn data_header(len: usize) -> [u8; 4] {
    debug_assert!(len <= MAX_DATA_LEN);
    (len as u32).to_le_bytes()
}

/// One decoded item of the frame stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    Data(Bytes),
    Goodbye,
}

/// Splits frames off the front of a receive buffer.
///
/// A length over the limit is refused before any payload is read or room reserved for
/// it. For an accepted length, [`FrameDecoder::reserve_hint`] asks room for the whole
/// rest of the frame at once: the payload is read straight into the buffer that becomes
/// the delivered `Bytes`, without growing (and copying) it step by step. That room is
/// address space, not memory: pages are committed only as bytes arrive into them, so a
/// peer that announces a large frame and stalls costs no memory it did not send.
#[derive(Debug, Clone, Copy)]
pub struct FrameDecoder {
    max: usize,
}

/// Smallest read the decoder asks room for.
const MIN_READ: usize = 64 * 1024;

impl FrameDecoder {
    /// `max` is the largest payload accepted (clamped to [`MAX_DATA_LEN`]).
    pub fn new(max: usize) -> Self {
        FrameDecoder {
            max: max.min(MAX_DATA_LEN),
        }
    }

    /// The payload limit in force.
    pub fn max(&self) -> usize {
        self.max
    }

    /// The next complete frame, `Ok(None)` if more bytes are needed.
    pub fn decode(&self, buf: &mut BytesMut) -> Result<Option<Frame>, WireError> {
        if buf.len() < 4 {
            return Ok(None);
        }
        let word = u32::from_le_bytes([buf[0], buf[1], buf[2], buf[3]]);
        if word >= CONTROL_MIN {
            return match word {
                GOODBYE => {
                    buf.advance(4);
                    Ok(Some(Frame::Goodbye))
                }
                word => Err(WireError::UnknownControl { word }),
            };
        }
        let len = word as usize;
        if len > self.max {
            return Err(WireError::FrameTooLarge { len, max: self.max });
        }
        if buf.len() < 4 + len {
            return Ok(None);
        }
        buf.advance(4);
        Ok(Some(Frame::Data(buf.split_to(len).freeze())))
    }

    /// How many bytes of spare capacity the buffer should have before the next read:
    /// the rest of the frame in progress (if within the limit), at least 64 KiB.
    pub fn reserve_hint(&self, buf: &BytesMut) -> usize {
        let missing = if buf.len() >= 4 {
            let word = u32::from_le_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize;
            if word > self.max {
                0 // refused by `decode` (or a control word)
            } else {
                (4 + word).saturating_sub(buf.len())
            }
        } else {
            0
        };
        missing.max(MIN_READ)
    }
}

/// What one side of a verbs link tells the other after an accepted handshake (connector
/// first, then acceptor): its RC queue pair and how it receives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VerbsEndpoint {
    /// Queue pair number (24 bits).
    pub qpn: u32,
    /// First packet sequence number (24 bits).
    pub psn: u32,
    /// The port GID (RoCE: the IPv4-mapped address).
    pub gid: [u8; 16],
    /// Active MTU as the verbs enum value (1 = 256 B … 5 = 4096 B).
    pub mtu: u8,
    /// Bytes per receive buffer; the sender never sends a chunk larger than this.
    pub slot_size: u32,
    /// Receive buffers posted at start: the sender's initial credits.
    pub credits: u32,
}

impl VerbsEndpoint {
    pub const LEN: usize = 8 + 4 + 4 + 16 + 1 + 4 + 4;

    pub fn encode(&self) -> [u8; Self::LEN] {
        let mut out = [0u8; Self::LEN];
        out[..8].copy_from_slice(&MAGIC);
        out[8..12].copy_from_slice(&self.qpn.to_le_bytes());
        out[12..16].copy_from_slice(&self.psn.to_le_bytes());
        out[16..32].copy_from_slice(&self.gid);
        out[32] = self.mtu;
        out[33..37].copy_from_slice(&self.slot_size.to_le_bytes());
        out[37..41].copy_from_slice(&self.credits.to_le_bytes());
        out
    }

    /// Decodes and sanity-checks an endpoint (bounded values only: a peer cannot make
    /// us allocate or wait on its say-so).
    pub fn decode(bytes: &[u8; Self::LEN]) -> Result<VerbsEndpoint, WireError> {
        if bytes[..8] != MAGIC {
            return Err(WireError::BadMagic);
        }
        let word = |at: usize| {
            u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
        };
        let ep = VerbsEndpoint {
            qpn: word(8),
            psn: word(12),
            gid: bytes[16..32].try_into().expect("16 bytes"),
            mtu: bytes[32],
            slot_size: word(33),
            credits: word(37),
        };
        if ep.qpn >> 24 != 0
            || ep.psn >> 24 != 0
            || !(1..=5).contains(&ep.mtu)
            || ep.slot_size == 0
            || ep.credits == 0
            || ep.credits > 1 << 16
        {
            return Err(WireError::BadEndpoint);
        }
        Ok(ep)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hello() -> Hello {
        Hello {
            wire_version: WIRE_VERSION,
            proto_version: 7,
            node: 3,
            expected: 1,
            incarnation: 0xdead_beef_0bad_cafe,
            secret: b"s3cret".to_vec(),
        }
    }

    #[test]
    fn hello_roundtrip_and_debug_hides_secret() {
        let h = hello();
        let bytes = h.encode();
        let head = Hello::decode_head(bytes[..HELLO_FIXED_LEN].try_into().unwrap()).unwrap();
        assert_eq!(head.secret_len, 6);
        let back = Hello::from_parts(head, bytes[HELLO_FIXED_LEN..].to_vec());
        assert_eq!(back, h);
        assert!(!format!("{h:?}").contains("s3cret"));
    }

    #[test]
    fn hello_rejects_bad_magic_and_long_secret() {
        let mut bytes = hello().encode();
        let mut fixed: [u8; HELLO_FIXED_LEN] = bytes[..HELLO_FIXED_LEN].try_into().unwrap();
        fixed[34 - 2..].copy_from_slice(&u16::MAX.to_le_bytes());
        assert_eq!(
            Hello::decode_head(&fixed),
            Err(WireError::SecretTooLong { len: 65535 })
        );
        bytes[0] = b'X';
        let fixed: [u8; HELLO_FIXED_LEN] = bytes[..HELLO_FIXED_LEN].try_into().unwrap();
        assert_eq!(Hello::decode_head(&fixed), Err(WireError::BadMagic));
    }

    #[test]
    fn reply_roundtrip_and_truncation() {
        for r in [
            Reply::Accept {
                node: 2,
                incarnation: 9,
            },
            Reply::Refuse {
                node: 2,
                reason: "secret mismatch".into(),
            },
        ] {
            let bytes = r.encode();
            let head = Reply::decode_head(bytes[..REPLY_FIXED_LEN].try_into().unwrap()).unwrap();
            assert_eq!(head.wire_version, WIRE_VERSION);
            assert_eq!(Reply::from_parts(head, &bytes[REPLY_FIXED_LEN..]), r);
        }
        let long = Reply::Refuse {
            node: 0,
            reason: "é".repeat(MAX_REASON_LEN),
        };
        let bytes = long.encode();
        assert!(bytes.len() <= REPLY_FIXED_LEN + MAX_REASON_LEN);
        let head = Reply::decode_head(bytes[..REPLY_FIXED_LEN].try_into().unwrap()).unwrap();
        let Reply::Refuse { reason, .. } = Reply::from_parts(head, &bytes[REPLY_FIXED_LEN..])
        else {
            panic!("expected a refusal")
        };
        assert!(reason.chars().all(|c| c == 'é'));
    }

    #[test]
    fn frames_split_across_reads() {
        let dec = FrameDecoder::new(1024);
        let mut wire = Vec::new();
        for p in [&b""[..], b"a", b"hello"] {
            wire.extend_from_slice(&data_header(p.len()));
            wire.extend_from_slice(p);
        }
        wire.extend_from_slice(&GOODBYE.to_le_bytes());
        let mut buf = BytesMut::new();
        let mut out = Vec::new();
        for byte in wire {
            buf.extend_from_slice(&[byte]);
            while let Some(f) = dec.decode(&mut buf).unwrap() {
                out.push(f);
            }
        }
        assert_eq!(
            out,
            vec![
                Frame::Data(Bytes::new()),
                Frame::Data(Bytes::from_static(b"a")),
                Frame::Data(Bytes::from_static(b"hello")),
                Frame::Goodbye
            ]
        );
        assert!(buf.is_empty());
    }

    #[test]
    fn oversized_and_unknown_control_are_errors_before_payload() {
        let dec = FrameDecoder::new(16);
        let mut buf = BytesMut::from(&17u32.to_le_bytes()[..]);
        assert_eq!(
            dec.decode(&mut buf),
            Err(WireError::FrameTooLarge { len: 17, max: 16 })
        );
        let mut buf = BytesMut::from(&CONTROL_MIN.to_le_bytes()[..]);
        assert!(matches!(
            dec.decode(&mut buf),
            Err(WireError::UnknownControl { .. })
        ));
    }

    #[test]
    fn reserve_hint_covers_the_frame_up_to_the_limit() {
        let dec = FrameDecoder::new(8 << 20);
        // Over the limit: no room beyond the minimum (decode refuses the frame).
        let mut huge = BytesMut::from(&(1u32 << 30).to_le_bytes()[..]);
        assert_eq!(dec.reserve_hint(&huge), MIN_READ);
        assert!(dec.decode(&mut huge).is_err());
        let mut buf = BytesMut::from(&(4u32 << 20).to_le_bytes()[..]);
        assert_eq!(dec.reserve_hint(&buf), 4 << 20);
        buf.resize(1 << 20, 0);
        assert_eq!(dec.reserve_hint(&buf), (4 << 20) + 4 - (1 << 20));
        let small = BytesMut::from(&10u32.to_le_bytes()[..]);
        assert_eq!(dec.reserve_hint(&small), MIN_READ);
        let goodbye = BytesMut::from(&GOODBYE.to_le_bytes()[..]);
        assert_eq!(dec.reserve_hint(&goodbye), MIN_READ);
    }

    #[test]
    fn verbs_endpoint_roundtrip_and_bounds() {
        let ep = VerbsEndpoint {
            qpn: 0x11,
            psn: 0xabcdef,
            gid: [7; 16],
            mtu: 5,
            slot_size: 65536,
            credits: 16,
        };
        assert_eq!(VerbsEndpoint::decode(&ep.encode()), Ok(ep));
        let bad = VerbsEndpoint { credits: 0, ..ep };
        assert_eq!(
            VerbsEndpoint::decode(&bad.encode()),
            Err(WireError::BadEndpoint)
        );
        let mut bytes = ep.encode();
        bytes[0] = 0;
        assert_eq!(VerbsEndpoint::decode(&bytes), Err(WireError::BadMagic));
    }

    /// Deterministic garbage never panics the decoders.
    #[test]
    fn garbage_never_panics() {
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let dec = FrameDecoder::new(4096);
        for len in 0..3000usize {
            let bytes: Vec<u8> = (0..len % 200)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x as u8
                })
                .collect();
            if bytes.len() >= HELLO_FIXED_LEN {
                let _ = Hello::decode_head(bytes[..HELLO_FIXED_LEN].try_into().unwrap());
            }
            if bytes.len() >= REPLY_FIXED_LEN {
                let _ = Reply::decode_head(bytes[..REPLY_FIXED_LEN].try_into().unwrap());
            }
            let mut buf = BytesMut::from(&bytes[..]);
            while let Ok(Some(_)) = dec.decode(&mut buf) {}
        }
    }
}

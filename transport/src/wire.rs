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

use crate::auth::{Challenge, NONCE_LEN, PROOF_LEN};
use crate::NodeId;

/// First bytes of every hello and reply ("cohort fabric").
pub const MAGIC: [u8; 8] = *b"COHORTFB";
/// Version of this byte format; bumped on any change to the handshake or framing.
/// 3: the secret is proven by challenge-response (`crate::auth`), never sent.
pub const WIRE_VERSION: u32 = 3;
/// Revision of the verbs backend's protocol over its queue pairs (the immediate data's
/// layout, credits); bumped on any change there. 1: credits ride on payloads.
pub const VERBS_REVISION: u32 = 1;
/// The wire version a verbs fabric presents in its hello: same handshake, then a
/// [`VerbsEndpoint`] exchange instead of frames, so the two backends refuse each other
/// (and so do verbs fabrics of different [`VERBS_REVISION`]s).
pub const VERBS_WIRE_VERSION: u32 = 0x0100_0000 | (VERBS_REVISION << 16) | WIRE_VERSION;
/// Longest job secret a fabric is bound with (it keys the handshake's proofs and never
/// travels).
pub const MAX_SECRET_LEN: usize = 1024;
/// Longest refusal reason a reply may carry.
pub const MAX_REASON_LEN: usize = 512;
/// Size of a hello.
pub const HELLO_LEN: usize = 8 + 4 + 4 + 4 + 4 + 8 + NONCE_LEN;
/// Size of a reply before its variable part (a refusal's reason, a challenge's nonce
/// and proof).
pub const REPLY_FIXED_LEN: usize = 8 + 4 + 1 + 4 + 8 + 2;
/// Size of the connector's proof message.
pub const PROOF_MSG_LEN: usize = 8 + PROOF_LEN;
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
    #[error("reply carries a {len}-byte reason, over the {MAX_REASON_LEN}-byte limit")]
    ReasonTooLong { len: usize },
    #[error("challenge carries {len} bytes, not the nonce and proof's {}", NONCE_LEN + PROOF_LEN)]
    BadChallenge { len: usize },
    #[error("reply has unknown status {status}")]
    BadStatus { status: u8 },
    #[error("frame of {len} bytes exceeds the {max}-byte limit")]
    FrameTooLarge { len: usize, max: usize },
    #[error("unknown control word {word:#010x}")]
    UnknownControl { word: u32 },
    #[error("verbs endpoint out of range")]
    BadEndpoint,
}

/// The connector's introduction. It carries a fresh nonce for the acceptor to prove
/// the job secret against, never the secret (see [`crate::auth`]).
#[derive(Clone, Debug, PartialEq, Eq)]
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
    pub nonce: [u8; NONCE_LEN],
}

impl Hello {
    pub fn encode(&self) -> [u8; HELLO_LEN] {
        let mut out = [0u8; HELLO_LEN];
        let mut at = 0;
        let mut put = |bytes: &[u8]| {
            out[at..at + bytes.len()].copy_from_slice(bytes);
            at += bytes.len();
        };
        put(&MAGIC);
        put(&self.wire_version.to_le_bytes());
        put(&self.proto_version.to_le_bytes());
        put(&self.node.to_le_bytes());
        put(&self.expected.to_le_bytes());
        put(&self.incarnation.to_le_bytes());
        put(&self.nonce);
        out
    }

    /// Decodes a hello, checking the magic.
    pub fn decode(bytes: &[u8; HELLO_LEN]) -> Result<Hello, WireError> {
        let mut b = &bytes[..];
        if b[..8] != MAGIC {
            return Err(WireError::BadMagic);
        }
        b.advance(8);
        Ok(Hello {
            wire_version: b.get_u32_le(),
            proto_version: b.get_u32_le(),
            node: b.get_u32_le(),
            expected: b.get_u32_le(),
            incarnation: b.get_u64_le(),
            nonce: b[..NONCE_LEN].try_into().expect("NONCE_LEN bytes"),
        })
    }
}

/// The acceptor's answer to a hello: a challenge first, if the hello is acceptable,
/// then (after the connector's proof) an accept or a refusal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// Accepted: the acceptor's node id and incarnation.
    Accept { node: NodeId, incarnation: u64 },
    /// Refused, with a reason for the connector's log (never the secret).
    Refuse { node: NodeId, reason: String },
    /// Prove the secret: the acceptor's nonce and its own proof.
    Challenge(Challenge),
}

/// What a reply is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplyStatus {
    Accept,
    Refuse,
    Challenge,
}

/// A reply's fixed part; its variable part (`len` bytes) follows on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplyHead {
    pub wire_version: u32,
    pub status: ReplyStatus,
    pub node: NodeId,
    pub incarnation: u64,
    pub len: usize,
}

impl Reply {
    /// Encodes the reply; an over-long reason is cut at a character boundary.
    pub fn encode(&self) -> Vec<u8> {
        let mut challenge = [0u8; NONCE_LEN + PROOF_LEN];
        let (status, node, incarnation, rest): (u8, _, _, &[u8]) = match self {
            Reply::Accept { node, incarnation } => (0, *node, *incarnation, &[]),
            Reply::Refuse { node, reason } => {
                (1, *node, 0, truncate(reason, MAX_REASON_LEN).as_bytes())
            }
            Reply::Challenge(c) => {
                challenge[..NONCE_LEN].copy_from_slice(&c.nonce);
                challenge[NONCE_LEN..].copy_from_slice(&c.proof);
                (2, c.node, 0, &challenge)
            }
        };
        let mut out = Vec::with_capacity(REPLY_FIXED_LEN + rest.len());
        out.extend_from_slice(&MAGIC);
        out.extend_from_slice(&WIRE_VERSION.to_le_bytes());
        out.push(status);
        out.extend_from_slice(&node.to_le_bytes());
        out.extend_from_slice(&incarnation.to_le_bytes());
        out.extend_from_slice(&(rest.len() as u16).to_le_bytes());
        out.extend_from_slice(rest);
        out
    }

    /// Decodes the fixed part, checking magic and status and bounding the variable
    /// part.
    pub fn decode_head(bytes: &[u8; REPLY_FIXED_LEN]) -> Result<ReplyHead, WireError> {
        let mut b = &bytes[..];
        if b[..8] != MAGIC {
            return Err(WireError::BadMagic);
        }
        b.advance(8);
        let wire_version = b.get_u32_le();
        let status = match b.get_u8() {
            0 => ReplyStatus::Accept,
            1 => ReplyStatus::Refuse,
            2 => ReplyStatus::Challenge,
            status => return Err(WireError::BadStatus { status }),
        };
        let head = ReplyHead {
            wire_version,
            status,
            node: b.get_u32_le(),
            incarnation: b.get_u64_le(),
            len: b.get_u16_le() as usize,
        };
        match status {
            ReplyStatus::Challenge if head.len != NONCE_LEN + PROOF_LEN => {
                Err(WireError::BadChallenge { len: head.len })
            }
            _ if head.len > MAX_REASON_LEN => Err(WireError::ReasonTooLong { len: head.len }),
            _ => Ok(head),
        }
    }

    /// Joins a decoded head with the variable part read after it (`head.len` bytes).
    pub fn from_parts(head: ReplyHead, rest: &[u8]) -> Reply {
        match head.status {
            ReplyStatus::Accept => Reply::Accept {
                node: head.node,
                incarnation: head.incarnation,
            },
            ReplyStatus::Refuse => Reply::Refuse {
                node: head.node,
                reason: String::from_utf8_lossy(rest).into_owned(),
            },
            ReplyStatus::Challenge => {
                let mut nonce = [0u8; NONCE_LEN];
                let mut proof = [0u8; PROOF_LEN];
                nonce.copy_from_slice(&rest[..NONCE_LEN]);
                proof.copy_from_slice(&rest[NONCE_LEN..NONCE_LEN + PROOF_LEN]);
                Reply::Challenge(Challenge {
                    node: head.node,
                    nonce,
                    proof,
                })
            }
        }
    }
}

/// The connector's answer to a challenge.
pub fn encode_proof(proof: &[u8; PROOF_LEN]) -> [u8; PROOF_MSG_LEN] {
    let mut out = [0u8; PROOF_MSG_LEN];
    out[..8].copy_from_slice(&MAGIC);
    out[8..].copy_from_slice(proof);
    out
}

pub fn decode_proof(bytes: &[u8; PROOF_MSG_LEN]) -> Result<[u8; PROOF_LEN], WireError> {
    if bytes[..8] != MAGIC {
        return Err(WireError::BadMagic);
    }
    Ok(bytes[8..].try_into().expect("PROOF_LEN bytes"))
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
            nonce: [5u8; NONCE_LEN],
        }
    }

    #[test]
    fn hello_roundtrip_and_bad_magic() {
        let h = hello();
        let mut bytes = h.encode();
        assert_eq!(Hello::decode(&bytes), Ok(h));
        bytes[0] = b'X';
        assert_eq!(Hello::decode(&bytes), Err(WireError::BadMagic));
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
                reason: "job secret not proven".into(),
            },
            Reply::Challenge(Challenge {
                node: 2,
                nonce: [1u8; NONCE_LEN],
                proof: [9u8; PROOF_LEN],
            }),
        ] {
            let bytes = r.encode();
            let head = Reply::decode_head(bytes[..REPLY_FIXED_LEN].try_into().unwrap()).unwrap();
            assert_eq!(head.wire_version, WIRE_VERSION);
            assert_eq!(head.len, bytes.len() - REPLY_FIXED_LEN);
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
    fn malformed_replies_and_proofs_are_refused() {
        let challenge = Reply::Challenge(Challenge {
            node: 2,
            nonce: [1u8; NONCE_LEN],
            proof: [9u8; PROOF_LEN],
        });
        let mut fixed: [u8; REPLY_FIXED_LEN] =
            challenge.encode()[..REPLY_FIXED_LEN].try_into().unwrap();
        // A challenge of another size.
        fixed[REPLY_FIXED_LEN - 2..].copy_from_slice(&47u16.to_le_bytes());
        assert_eq!(
            Reply::decode_head(&fixed),
            Err(WireError::BadChallenge { len: 47 })
        );
        // A refusal whose reason is too long, an unknown status.
        fixed[12] = 1;
        fixed[REPLY_FIXED_LEN - 2..].copy_from_slice(&u16::MAX.to_le_bytes());
        assert_eq!(
            Reply::decode_head(&fixed),
            Err(WireError::ReasonTooLong { len: 65535 })
        );
        fixed[12] = 3;
        assert_eq!(
            Reply::decode_head(&fixed),
            Err(WireError::BadStatus { status: 3 })
        );
        let mut proof = encode_proof(&[4u8; PROOF_LEN]);
        assert_eq!(decode_proof(&proof), Ok([4u8; PROOF_LEN]));
        proof[1] = 0;
        assert_eq!(decode_proof(&proof), Err(WireError::BadMagic));
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
            if bytes.len() >= HELLO_LEN {
                let _ = Hello::decode(bytes[..HELLO_LEN].try_into().unwrap());
            }
            if bytes.len() >= REPLY_FIXED_LEN {
                if let Ok(head) = Reply::decode_head(bytes[..REPLY_FIXED_LEN].try_into().unwrap()) {
                    let rest = &bytes[REPLY_FIXED_LEN..];
                    if rest.len() >= head.len {
                        let _ = Reply::from_parts(head, &rest[..head.len]);
                    }
                }
            }
            if bytes.len() >= PROOF_MSG_LEN {
                let _ = decode_proof(bytes[..PROOF_MSG_LEN].try_into().unwrap());
            }
            let mut buf = BytesMut::from(&bytes[..]);
            while let Ok(Some(_)) = dec.decode(&mut buf) {}
        }
    }
}

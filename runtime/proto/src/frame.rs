//! Bounded framing: a little-endian u32 length, then a bincode body.
//!
//! Every decoder enforces a caller-given maximum before allocating, so an oversized or
//! malformed frame costs one connection, never memory or the process.

use std::cell::RefCell;

use bincode::Options;
use serde::{de::DeserializeOwned, Serialize};

use crate::error::CohortError;

/// Largest client ⇄ server frame (a fence reply carrying 64 KiB × many ranks fits).
pub const MAX_CLIENT_FRAME: usize = 256 << 20;
/// Largest fabric frame between node servers.
pub const MAX_PEER_FRAME: usize = 1 << 30;
/// Largest launcher control frame.
pub const MAX_CONTROL_FRAME: usize = 1 << 20;

fn options() -> impl Options {
    bincode::DefaultOptions::new()
        .with_fixint_encoding()
        .with_little_endian()
        .reject_trailing_bytes()
}

/// Encodes `msg` as a complete frame (length prefix included).
pub fn encode<T: Serialize>(msg: &T) -> Vec<u8> {
    let mut out = Vec::new();
    encode_into(msg, &mut out);
    out
}

/// Appends `msg`'s complete frame (length prefix included) to `out`.
pub fn encode_into<T: Serialize>(msg: &T, out: &mut Vec<u8>) {
    encode_scratch(msg, 4, |frame| {
        let body_len = (frame.len() - 4) as u32;
        frame[..4].copy_from_slice(&body_len.to_le_bytes());
        if out.is_empty() && frame.len() > SMALL_FRAME {
            *out = take_large(frame);
        } else {
            out.extend_from_slice(frame);
        }
    })
}

/// Length of `msg`'s complete frame (length prefix included), without encoding it:
/// what [`encode`] would return the length of.
pub fn encoded_len<T: Serialize>(msg: &T) -> usize {
    4 + options()
        .serialized_size(msg)
        .expect("cohort messages always serialize") as usize
}

/// Encodes only the body (no length prefix), for transports that frame themselves.
pub fn encode_body<T: Serialize>(msg: &T) -> Vec<u8> {
    encode_scratch(msg, 0, |body| {
        if body.len() > SMALL_FRAME {
            take_large(body)
        } else {
            body.to_vec()
        }
    })
}

/// Encodings up to this size are copied out of the scratch buffer; larger ones take it.
const SMALL_FRAME: usize = 16 << 10;

/// Largest capacity a taken scratch buffer is replaced with: a larger encoding (rare:
/// a fence over tens of thousands of processes' data) grows the next one again.
const SCRATCH_KEEP: usize = 64 << 20;

/// Takes a large encoding, buffer and all, leaving in its place an empty buffer of the
/// same capacity (at most [`SCRATCH_KEEP`]): allocated, not copied or grown, so the next
/// encoding of that size is not grown by copies either.
fn take_large(buf: &mut Vec<u8>) -> Vec<u8> {
    let keep = buf.capacity().min(SCRATCH_KEEP);
    std::mem::replace(buf, Vec::with_capacity(keep))
}

/// Encodes `msg` in one pass, after `prefix` placeholder bytes, into this thread's
/// scratch buffer (which keeps its capacity), and hands that to `finish`, which copies
/// a small encoding out and takes a large one whole ([`take_large`]).
///
/// Why: bincode's own `serialize` asks for the size first, which walks the whole
/// message twice (for a small message with process lists that walk was about a third of
/// its encoding), and writing into a fresh buffer grows it by copies.
fn encode_scratch<T: Serialize, R>(
    msg: &T,
    prefix: usize,
    finish: impl FnOnce(&mut Vec<u8>) -> R,
) -> R {
    thread_local! {
        static SCRATCH: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
    }
    SCRATCH.with(|scratch| {
        // Borrowed only if `finish` or a `Serialize` impl encodes a message itself
        // (none does): then a buffer of its own.
        let mut own = Vec::new();
        let mut borrowed = scratch.try_borrow_mut();
        let buf = match borrowed.as_mut() {
            Ok(buf) => &mut **buf,
            Err(_) => &mut own,
        };
        buf.clear();
        buf.resize(prefix, 0);
        options()
            .serialize_into(&mut *buf, msg)
            .expect("cohort messages always serialize");
        finish(buf)
    })
}

/// Decodes a frame body, bounded by its own length.
pub fn decode_body<T: DeserializeOwned>(body: &[u8]) -> Result<T, CohortError> {
    options()
        .with_limit(body.len() as u64 + 64)
        .deserialize(body)
        .map_err(|e| CohortError::Protocol(format!("malformed frame ({} bytes): {e}", body.len())))
}

/// Validates a frame's length prefix against `max`.
pub fn check_len(len: u32, max: usize) -> Result<usize, CohortError> {
    let len = len as usize;
    if len > max {
        return Err(CohortError::Protocol(format!(
            "frame of {len} bytes exceeds the {max}-byte limit"
        )));
    }
    Ok(len)
}

/// Reads one frame from a blocking reader. `Ok(None)` on clean EOF before a frame.
pub fn read_frame<R: std::io::Read, T: DeserializeOwned>(
    r: &mut R,
    max: usize,
    buf: &mut Vec<u8>,
) -> Result<Option<T>, CohortError> {
    let mut len = [0u8; 4];
    match r.read_exact(&mut len) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e.into()),
    }
    let len = check_len(u32::from_le_bytes(len), max)?;
    buf.clear();
    buf.resize(len, 0);
    r.read_exact(buf)?;
    decode_body(buf).map(Some)
}

/// Reads one frame from an async reader. `Ok(None)` on clean EOF before a frame.
#[cfg(feature = "tokio")]
pub async fn read_frame_async<R, T>(r: &mut R, max: usize) -> Result<Option<T>, CohortError>
where
    R: tokio::io::AsyncRead + Unpin,
    T: DeserializeOwned,
{
    use tokio::io::AsyncReadExt;
    let mut len = [0u8; 4];
    match r.read_exact(&mut len).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e.into()),
    }
    let len = check_len(u32::from_le_bytes(len), max)?;
    let mut body = vec![0u8; len];
    r.read_exact(&mut body).await?;
    decode_body(&body).map(Some)
}

/// Writes one whole frame to an async writer and flushes it.
#[cfg(feature = "tokio")]
pub async fn write_frame_async<W, T>(w: &mut W, msg: &T) -> std::io::Result<()>
where
    W: tokio::io::AsyncWrite + Unpin,
    T: Serialize,
{
    use tokio::io::AsyncWriteExt;
    w.write_all(&encode(msg)).await?;
    w.flush().await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::msg::{ClientFrame, Request};
    use crate::peer::PeerMsg;

    #[test]
    fn frames_appended_to_one_buffer_decode_in_order() {
        let a = ClientFrame {
            id: 1,
            req: Request::Leave { id: "a".into() },
        };
        let b = ClientFrame {
            id: 2,
            req: Request::QueryGroupNames,
        };
        let mut buf = Vec::new();
        encode_into(&a, &mut buf);
        encode_into(&b, &mut buf);
        assert_eq!(buf.len(), encoded_len(&a) + encoded_len(&b));
        let first = u32::from_le_bytes(buf[..4].try_into().unwrap()) as usize;
        let got_a: ClientFrame = decode_body(&buf[4..4 + first]).unwrap();
        let rest = &buf[4 + first..];
        let got_b: ClientFrame = decode_body(&rest[4..]).unwrap();
        assert_eq!((got_a, got_b), (a, b));
    }

    /// Encodings below, at and above the size where the scratch buffer is taken rather
    /// than copied, one after another (so a taken buffer's successor is used too), into
    /// empty and non-empty buffers, are exactly bincode's bytes with the right prefix.
    #[test]
    fn encodings_around_the_copy_limit_are_exact() {
        // A byte string's body is an 8-byte length and its bytes.
        let lens = [
            0,
            100,
            3 * SMALL_FRAME,
            SMALL_FRAME - 13,
            SMALL_FRAME - 12,
            2 << 20,
        ];
        let more = [
            SMALL_FRAME - 9,
            SMALL_FRAME - 8,
            SMALL_FRAME - 7,
            5,
            2 * SMALL_FRAME,
        ];
        for len in lens.into_iter().chain(more) {
            let msg = serde_bytes::ByteBuf::from(vec![(len % 251) as u8; len]);
            let plain = options().serialize(&msg).unwrap();
            assert_eq!(encode_body(&msg), plain, "body of {len} bytes");
            for before in [&[][..], &[0xee][..]] {
                let mut framed = before.to_vec();
                encode_into(&msg, &mut framed);
                let (head, frame) = framed.split_at(before.len());
                assert_eq!(head, before);
                assert_eq!(frame[..4], (plain.len() as u32).to_le_bytes(), "{len}");
                assert_eq!(frame[4..], plain[..], "frame of {len} bytes");
                assert_eq!(encoded_len(&msg), frame.len());
            }
        }
        let small = ClientFrame {
            id: 3,
            req: Request::QueryGroupNames,
        };
        assert_eq!(encode_body(&small), options().serialize(&small).unwrap());
    }

    #[test]
    fn roundtrip() {
        let f = ClientFrame {
            id: 7,
            req: Request::Leave { id: "g".into() },
        };
        let bytes = encode(&f);
        let mut cur = std::io::Cursor::new(bytes);
        let mut buf = Vec::new();
        let back: ClientFrame = read_frame(&mut cur, 1024, &mut buf).unwrap().unwrap();
        assert_eq!(back, f);
    }

    #[test]
    fn oversized_frame_is_rejected_before_allocation() {
        let mut bytes = (u32::MAX).to_le_bytes().to_vec();
        bytes.extend_from_slice(&[0; 8]);
        let mut cur = std::io::Cursor::new(bytes);
        let mut buf = Vec::new();
        let e = read_frame::<_, ClientFrame>(&mut cur, 1024, &mut buf).unwrap_err();
        assert!(e.to_string().contains("exceeds"), "{e}");
        assert!(buf.capacity() < 1024);
    }

    /// Deterministic pseudo-random garbage must never panic any decoder.
    #[test]
    fn garbage_never_panics_decoders() {
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for len in 0..2000usize {
            let body: Vec<u8> = (0..len % 300)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x as u8
                })
                .collect();
            let _ = decode_body::<ClientFrame>(&body);
            let _ = decode_body::<PeerMsg>(&body);
            let _ = decode_body::<crate::msg::ServerFrame>(&body);
            let _ = decode_body::<crate::control::DaemonMsg>(&body);
        }
    }

    /// A huge declared vector length inside a small body must fail, not allocate.
    #[test]
    fn lying_inner_length_is_bounded() {
        let mut body = 9u64.to_le_bytes().to_vec(); // request id
        body.extend_from_slice(&4u32.to_le_bytes()); // Request::Fence variant
        body.extend_from_slice(&u64::MAX.to_le_bytes()); // procs.len()
        assert!(decode_body::<ClientFrame>(&body).is_err());
    }
}

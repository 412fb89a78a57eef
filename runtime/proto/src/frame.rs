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
    let small = with_small_body(msg, |body| {
        out.reserve(4 + body.len());
        out.extend_from_slice(&(body.len() as u32).to_le_bytes());
        out.extend_from_slice(body);
    });
    if small.is_none() {
        let body_len = options()
            .serialized_size(msg)
            .expect("cohort messages always serialize") as usize;
        out.reserve(4 + body_len);
        out.extend_from_slice(&(body_len as u32).to_le_bytes());
        options()
            .serialize_into(&mut *out, msg)
            .expect("cohort messages always serialize");
    }
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
    with_small_body(msg, <[u8]>::to_vec).unwrap_or_else(|| {
        options()
            .serialize(msg)
            .expect("cohort messages always serialize")
    })
}

/// Bodies up to this size are encoded in one pass into a scratch buffer, then copied.
const SMALL_BODY: usize = 16 << 10;

/// Calls `f` with `msg`'s body if it is at most [`SMALL_BODY`] bytes long (`None`
/// otherwise, having written at most that many bytes), encoded in one pass into this
/// thread's scratch buffer. The caller copies it once, to a buffer of the right size.
///
/// Why: bincode's own `serialize` asks for the size first, which walks the whole
/// message twice; for a small message with process lists that walk was about a third
/// of its encoding. For a large one (a fence's collected data) the copy would cost more
/// than the walk, whose bulk is the lengths of opaque byte strings.
fn with_small_body<T: Serialize, R>(msg: &T, f: impl FnOnce(&[u8]) -> R) -> Option<R> {
    thread_local! {
        static SCRATCH: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
    }
    SCRATCH.with(|scratch| {
        // Borrowed only if `f` or a `Serialize` impl encodes a message itself (none
        // does): then the caller's two-pass encoding.
        let mut buf = scratch.try_borrow_mut().ok()?;
        buf.clear();
        let mut w = Capped(&mut buf);
        match options().serialize_into(&mut w, msg) {
            Ok(()) => Some(f(&buf)),
            Err(_) if buf.len() + 1 > SMALL_BODY => None,
            Err(e) => panic!("cohort messages always serialize: {e}"),
        }
    })
}

/// A writer into a buffer that refuses to grow it beyond [`SMALL_BODY`] bytes.
struct Capped<'a>(&'a mut Vec<u8>);

impl std::io::Write for Capped<'_> {
    #[inline]
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        self.write_all(data).map(|()| data.len())
    }

    #[inline]
    fn write_all(&mut self, data: &[u8]) -> std::io::Result<()> {
        if self.0.len() + data.len() > SMALL_BODY {
            return Err(self.full());
        }
        self.0.extend_from_slice(data);
        Ok(())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Capped<'_> {
    /// Marks the buffer full, which is how the caller tells this refusal from a real
    /// error.
    #[cold]
    #[inline(never)]
    fn full(&mut self) -> std::io::Error {
        self.0.resize(SMALL_BODY, 0);
        std::io::ErrorKind::WriteZero.into()
    }
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

    /// Bodies below, at and above the one-pass limit (and a body that overflows it
    /// part-way) encode to exactly bincode's bytes, with the right length prefix, and
    /// the scratch buffer does not leak one message's bytes into the next.
    #[test]
    fn bodies_around_the_one_pass_limit_encode_exactly() {
        // A byte string's body is an 8-byte length and its bytes.
        for len in [
            0,
            100,
            SMALL_BODY - 9,
            SMALL_BODY - 8,
            SMALL_BODY - 7,
            3 * SMALL_BODY,
        ] {
            let msg = serde_bytes::ByteBuf::from(vec![(len % 251) as u8; len]);
            let plain = options().serialize(&msg).unwrap();
            assert_eq!(encode_body(&msg), plain, "body of {len} bytes");
            let mut framed = vec![0xee];
            encode_into(&msg, &mut framed);
            assert_eq!(framed[0], 0xee);
            assert_eq!(framed[1..5], (plain.len() as u32).to_le_bytes(), "{len}");
            assert_eq!(framed[5..], plain[..], "frame of {len} bytes");
            assert_eq!(encoded_len(&msg), framed.len() - 1);
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

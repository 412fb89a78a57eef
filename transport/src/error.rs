//! Typed fabric errors. Every variant that concerns a peer names it, so a `PeerLost`
//! reason or a refused `send` says which node server is involved.

use std::time::Duration;

use crate::NodeId;

/// What can go wrong on the fabric. Errors returned by [`Fabric::send`](crate::Fabric::send)
/// are local (bad arguments, closed fabric); failures on the wire arrive later as
/// [`FabricEvent::PeerLost`](crate::FabricEvent::PeerLost), whose reason is one of these
/// rendered as text.
#[derive(Debug, thiserror::Error)]
pub enum FabricError {
    /// The destination is not in the peer table given to `set_peers`.
    #[error("node {peer} is not among the {known} known peers")]
    UnknownPeer { peer: NodeId, known: usize },

    /// `close` was called (or the event receiver is gone); nothing more is sent.
    #[error("the fabric is closed")]
    Closed,

    /// The payload is larger than the configured frame limit; peers would refuse it.
    #[error("payload of {len} bytes for node {peer} exceeds the {max}-byte frame limit")]
    FrameTooLarge {
        peer: NodeId,
        len: usize,
        max: usize,
    },

    /// Could not open a connection to the peer's address.
    #[error("could not connect to node {peer} at {addr}: {source}")]
    Connect {
        peer: NodeId,
        addr: String,
        #[source]
        source: std::io::Error,
    },

    /// Connecting plus handshaking took longer than `FabricConfig::connect_timeout`.
    #[error("timed out after {after:?} connecting to node {peer} at {addr}")]
    ConnectTimeout {
        peer: NodeId,
        addr: String,
        after: Duration,
    },

    /// The peer answered the hello with a refusal (wrong secret, version, node id …).
    #[error("node {peer} at {addr} refused the connection: {reason}")]
    Refused {
        peer: NodeId,
        addr: String,
        reason: String,
    },

    /// An established connection failed (reset, broken pipe …).
    #[error("connection with node {peer} failed: {source}")]
    Io {
        peer: NodeId,
        #[source]
        source: std::io::Error,
    },

    /// An RDMA work request with the peer failed (its retries ran out, or the queue
    /// pair broke: a port, cable or device failure). The fabric between the two failed;
    /// that does not prove the peer's process gone (the control connection's end
    /// does).
    #[error("RDMA work with node {peer} failed: {status}")]
    Rdma { peer: NodeId, status: String },

    /// The peer closed an established connection without saying goodbye.
    #[error("node {peer} closed the connection without a goodbye")]
    PeerClosed { peer: NodeId },

    /// The peer broke the wire protocol (oversized frame, unknown control word …).
    #[error("node {peer} violated the fabric protocol: {reason}")]
    Protocol { peer: NodeId, reason: String },

    /// A new incarnation of the peer connected while the old one was still considered
    /// alive: the old process is gone.
    #[error("node {peer} restarted (a new incarnation connected)")]
    Restarted { peer: NodeId },

    /// Registering RDMA memory failed, or would, under the locked-memory limit
    /// (`limit`: the soft RLIMIT_MEMLOCK in bytes, `None` when unlimited).
    #[error(
        "cannot register {needed} bytes of RDMA memory{cause}: the locked-memory limit \
         (RLIMIT_MEMLOCK) is {}; raise it with `ulimit -l unlimited` in the shell that \
         starts the node servers (persistently: a `* - memlock unlimited` line in \
         /etc/security/limits.conf, LimitMEMLOCK=infinity in a systemd unit, \
         --ulimit memlock=-1 for a container), or use COHORT_FABRIC=tcp",
        describe_limit(*.limit)
    )]
    MemlockTooLow {
        needed: u64,
        limit: Option<u64>,
        /// The registration's own error, as ` (…)`, or empty.
        cause: String,
    },

    /// `FabricKind` parsing: no backend of that name.
    #[error("unknown fabric backend {name:?} (expected \"auto\", \"verbs\" or \"tcp\")")]
    UnknownBackend { name: String },
}

impl FabricError {
    /// Whether this failure only says the peer could not be reached: it did not
    /// answer in time (a connection or a handshake timed out, data went unacknowledged
    /// past `FabricConfig::stall_timeout`), there is no route to it or no local
    /// address to reach it from, or RDMA work with it failed. Its process may still
    /// run, cut off from this node only. Every other failure says the process is gone
    /// (connection refused, reset or closed without a goodbye) or rejects us.
    pub fn is_unreachable(&self) -> bool {
        match self {
            FabricError::ConnectTimeout { .. } | FabricError::Rdma { .. } => true,
            FabricError::Connect { source, .. } | FabricError::Io { source, .. } => {
                source.kind() == std::io::ErrorKind::TimedOut
                    || matches!(
                        source.raw_os_error(),
                        Some(
                            libc::ETIMEDOUT
                                | libc::EHOSTUNREACH
                                | libc::ENETUNREACH
                                | libc::ENETDOWN
                                | libc::EHOSTDOWN
                                | libc::EADDRNOTAVAIL
                                // What `connect` gives for a blackhole route.
                                | libc::EINVAL
                        )
                    )
            }
            _ => false,
        }
    }
}

fn describe_limit(limit: Option<u64>) -> String {
    match limit {
        Some(bytes) => format!("{bytes} bytes ({} KiB)", bytes / 1024),
        None => "unlimited".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn io(errno: i32) -> std::io::Error {
        std::io::Error::from_raw_os_error(errno)
    }

    /// Failures that only say the peer could not be reached are told apart from those
    /// that prove its process gone or rejecting us.
    #[test]
    fn unreachable_failures_are_told_apart_from_a_gone_peer() {
        let reached_not = [
            FabricError::ConnectTimeout {
                peer: 1,
                addr: "a".into(),
                after: Duration::from_secs(1),
            },
            FabricError::Io {
                peer: 1,
                source: io(libc::ETIMEDOUT),
            },
            FabricError::Io {
                peer: 1,
                source: std::io::Error::new(std::io::ErrorKind::TimedOut, "stalled"),
            },
            FabricError::Connect {
                peer: 1,
                addr: "a".into(),
                source: io(libc::EHOSTUNREACH),
            },
            FabricError::Connect {
                peer: 1,
                addr: "a".into(),
                source: io(libc::EINVAL),
            },
            FabricError::Rdma {
                peer: 1,
                status: "RetryCounterExceededError".into(),
            },
        ];
        for e in &reached_not {
            assert!(e.is_unreachable(), "{e}");
        }
        let gone = [
            FabricError::Connect {
                peer: 1,
                addr: "a".into(),
                source: io(libc::ECONNREFUSED),
            },
            FabricError::Io {
                peer: 1,
                source: io(libc::ECONNRESET),
            },
            FabricError::Io {
                peer: 1,
                source: io(libc::EPIPE),
            },
            FabricError::PeerClosed { peer: 1 },
            FabricError::Restarted { peer: 1 },
            FabricError::Refused {
                peer: 1,
                addr: "a".into(),
                reason: "wrong secret".into(),
            },
            FabricError::Protocol {
                peer: 1,
                reason: "oversized".into(),
            },
        ];
        for e in &gone {
            assert!(!e.is_unreachable(), "{e}");
        }
    }
}

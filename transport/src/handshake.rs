//! Connection set-up shared by every backend: the TCP connection that carries the
//! [`Hello`]/[`Reply`] handshake (the secret check), the goodbye exchange, and the
//! bookkeeping of live connection tasks. TCP keeps using that connection for frames;
//! verbs uses it for the queue-pair exchange and as its liveness and goodbye channel.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio::sync::{watch, Notify};
use tokio::time::timeout;

use crate::auth::{self, Challenge};
use crate::wire::{
    self, Hello, Reply, GOODBYE, HELLO_LEN, MAX_SECRET_LEN, PROOF_MSG_LEN, REPLY_FIXED_LEN,
};
use crate::{FabricError, NodeId, CLOSE_GRACE};

/// Who this fabric is, as the handshake presents it.
pub(crate) struct Identity<'a> {
    pub me: NodeId,
    pub secret: &'a [u8],
    pub incarnation: u64,
    /// The backend's wire version: a TCP node and a verbs node refuse each other.
    pub wire_version: u32,
    /// Source IP of outbound connections (`None`: let the kernel choose).
    pub source_ip: Option<IpAddr>,
    /// `TCP_USER_TIMEOUT` for the connection (see `FabricConfig::stall_timeout`).
    pub stall_timeout: Option<Duration>,
    /// `FabricConfig::connect_timeout`: a connector's bound on the whole attempt, and
    /// an acceptor's on each step it waits for (the hello, the answer to its
    /// challenge, its replies). An acceptor with a shorter bound than its connectors
    /// would refuse a slow but live connector, and a refusal counts as the loss of
    /// the acceptor at the connector.
    pub limit: Duration,
}

/// The secret a fabric is bound with must fit in a hello: the error `bind` returns
/// otherwise.
pub(crate) fn check_secret_len(secret: &[u8]) -> io::Result<()> {
    if secret.len() > MAX_SECRET_LEN {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "fabric secret is {} bytes, over the {MAX_SECRET_LEN}-byte limit",
                secret.len()
            ),
        ));
    }
    Ok(())
}

/// Why a hello is refused, if it is, before the secret is proven (see
/// [`prove_connector`]): only what the connector says about itself and its build.
/// `known` is the peer table's length.
pub(crate) fn check_hello(id: &Identity<'_>, hello: &Hello, known: usize) -> Result<(), String> {
    if hello.wire_version != id.wire_version {
        return Err(format!(
            "fabric wire version {} ({}) is not this node's {} ({})",
            hello.wire_version,
            backend_of(hello.wire_version),
            id.wire_version,
            backend_of(id.wire_version)
        ));
    }
    if hello.proto_version != cohort_proto::PROTOCOL_VERSION {
        return Err(format!(
            "protocol version {} is not this node's {}",
            hello.proto_version,
            cohort_proto::PROTOCOL_VERSION
        ));
    }
    if hello.node == id.me {
        return Err(format!("hello claims this node's own id {}", id.me));
    }
    if hello.expected != id.me {
        return Err(format!(
            "hello is meant for node {}, this is node {}",
            hello.expected, id.me
        ));
    }
    if known > 0 && hello.node as usize >= known {
        return Err(format!(
            "node id {} is not below the {known} known peers",
            hello.node
        ));
    }
    Ok(())
}

fn backend_of(wire_version: u32) -> &'static str {
    if wire_version == crate::wire::VERBS_WIRE_VERSION {
        "verbs backend"
    } else if wire_version == crate::wire::WIRE_VERSION {
        "tcp backend"
    } else if wire_version >> 24 == crate::wire::VERBS_WIRE_VERSION >> 24 {
        "verbs backend of another revision"
    } else {
        "unknown backend"
    }
}

/// Connects to `peer` at `addr` and handshakes, all within `limit`. Returns the stream
/// and the peer's incarnation.
pub(crate) async fn connect(
    id: &Identity<'_>,
    peer: NodeId,
    addr: &str,
    limit: Duration,
) -> Result<(TcpStream, u64), FabricError> {
    let attempt = async {
        let mut stream = open(id.source_ip, addr)
            .await
            .map_err(|source| FabricError::Connect {
                peer,
                addr: addr.to_string(),
                source,
            })?;
        let io_err = |source| FabricError::Io { peer, source };
        stream.set_nodelay(true).map_err(io_err)?;
        cohort_os::set_tcp_user_timeout(&stream, id.stall_timeout).map_err(io_err)?;
        let nonce = auth::nonce().map_err(io_err)?;
        let hello = Hello {
            wire_version: id.wire_version,
            proto_version: cohort_proto::PROTOCOL_VERSION,
            node: id.me,
            expected: peer,
            incarnation: id.incarnation,
            nonce,
        }
        .encode();
        stream.write_all(&hello).await.map_err(io_err)?;
        let refused = |reason: String| FabricError::Refused {
            peer,
            addr: addr.to_string(),
            reason,
        };
        let protocol = |reason: String| FabricError::Protocol { peer, reason };
        // The acceptor proves the secret first; then this side does.
        match read_reply(&mut stream, peer).await? {
            Reply::Challenge(c) if c.node != peer => {
                Err(protocol(format!("{addr} answered as node {}", c.node)))
            }
            Reply::Challenge(c) if !auth::acceptor_holds(id.secret, &hello, &c) => Err(refused(
                format!("node {peer} did not prove it holds this job's secret"),
            )),
            Reply::Challenge(c) => {
                let proof = auth::connector_proof(id.secret, &hello, &c);
                stream
                    .write_all(&wire::encode_proof(&proof))
                    .await
                    .map_err(io_err)?;
                Ok(())
            }
            Reply::Refuse { reason, .. } => Err(refused(reason)),
            Reply::Accept { .. } => Err(protocol(format!(
                "{addr} accepted without proving the job secret"
            ))),
        }?;
        match read_reply(&mut stream, peer).await? {
            Reply::Refuse { reason, .. } => Err(refused(reason)),
            Reply::Accept { node, .. } if node != peer => {
                Err(protocol(format!("{addr} answered as node {node}")))
            }
            Reply::Accept { incarnation, .. } => Ok((stream, incarnation)),
            Reply::Challenge(_) => Err(protocol(format!("{addr} challenged twice"))),
        }
    };
    match timeout(limit, attempt).await {
        Ok(result) => result,
        Err(_) => Err(FabricError::ConnectTimeout {
            peer,
            addr: addr.to_string(),
            after: limit,
        }),
    }
}

/// Opens a TCP connection to `addr` (any resolved address), from `source_ip` if given.
async fn open(source_ip: Option<IpAddr>, addr: &str) -> io::Result<TcpStream> {
    let mut last_err = None;
    for target in tokio::net::lookup_host(addr).await? {
        let socket = if target.is_ipv4() {
            TcpSocket::new_v4()?
        } else {
            TcpSocket::new_v6()?
        };
        if let Some(ip) = source_ip.filter(|ip| ip.is_ipv4() == target.is_ipv4()) {
            socket.bind(SocketAddr::new(ip, 0))?;
        }
        match socket.connect(target).await {
            Ok(stream) => return Ok(stream),
            Err(e) => last_err = Some(e),
        }
    }
    Err(last_err
        .unwrap_or_else(|| io::Error::new(io::ErrorKind::NotFound, "address resolved to nothing")))
}

/// Reads one reply of the acceptor (its variable part bounded by the decoder).
async fn read_reply(stream: &mut TcpStream, peer: NodeId) -> Result<Reply, FabricError> {
    let io_err = |source| FabricError::Io { peer, source };
    let mut fixed = [0u8; REPLY_FIXED_LEN];
    stream.read_exact(&mut fixed).await.map_err(io_err)?;
    let head = Reply::decode_head(&fixed).map_err(|e| FabricError::Protocol {
        peer,
        reason: format!("bad handshake reply: {e}"),
    })?;
    let mut rest = vec![0u8; head.len];
    stream.read_exact(&mut rest).await.map_err(io_err)?;
    Ok(Reply::from_parts(head, &rest))
}

async fn read_hello(stream: &mut TcpStream) -> Result<Hello, String> {
    let mut bytes = [0u8; HELLO_LEN];
    stream
        .read_exact(&mut bytes)
        .await
        .map_err(|e| e.to_string())?;
    Hello::decode(&bytes).map_err(|e| e.to_string())
}

/// The acceptor's first step: a connector's hello within the handshake's time limit.
/// `None` (logged) when none comes, or a bad one: the connection is then dropped
/// without a reply.
pub(crate) async fn read_hello_within(stream: &mut TcpStream, id: &Identity<'_>) -> Option<Hello> {
    match timeout(id.limit, read_hello(stream)).await {
        Ok(Ok(hello)) => Some(hello),
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "dropping fabric connection: bad hello");
            None
        }
        Err(_) => {
            tracing::warn!("dropping fabric connection: no hello within {:?}", id.limit);
            None
        }
    }
}

/// The acceptor refuses a connector that claimed to be node `claimed`: logs `reason`,
/// sends it, and closes the connection (within the handshake's time limit).
pub(crate) async fn refuse(
    stream: &mut TcpStream,
    id: &Identity<'_>,
    claimed: NodeId,
    reason: String,
) {
    tracing::warn!(claimed_node = claimed, %reason, "refusing fabric connection");
    let reply = Reply::Refuse {
        node: id.me,
        reason,
    };
    let _ = timeout(id.limit, async {
        stream.write_all(&reply.encode()).await?;
        stream.shutdown().await
    })
    .await;
}

/// [`prove_connector`] within the handshake's time limit.
pub(crate) async fn prove_within(
    stream: &mut TcpStream,
    id: &Identity<'_>,
    hello: &Hello,
) -> Result<(), String> {
    timeout(id.limit, prove_connector(stream, id, hello))
        .await
        .unwrap_or_else(|_| Err(format!("no answer to the challenge within {:?}", id.limit)))
}

/// The acceptor's half of the secret check, after an acceptable `hello`: sends the
/// challenge (with this side's proof) and checks the connector's answer. `Err` is the
/// refusal's reason (it never contains the secret).
pub(crate) async fn prove_connector(
    stream: &mut TcpStream,
    id: &Identity<'_>,
    hello: &Hello,
) -> Result<(), String> {
    let hello = hello.encode();
    let nonce = auth::nonce().map_err(|e| format!("no random nonce: {e}"))?;
    let challenge = Challenge {
        node: id.me,
        nonce,
        proof: auth::acceptor_proof(id.secret, &hello, id.me, &nonce),
    };
    stream
        .write_all(&Reply::Challenge(challenge).encode())
        .await
        .map_err(|e| format!("cannot send the challenge: {e}"))?;
    let mut answer = [0u8; PROOF_MSG_LEN];
    stream.read_exact(&mut answer).await.map_err(|e| {
        format!("no answer to the challenge (the connector may not hold this job's secret): {e}")
    })?;
    let proof = wire::decode_proof(&answer).map_err(|e| format!("bad proof: {e}"))?;
    if auth::connector_holds(id.secret, &hello, &challenge, &proof) {
        Ok(())
    } else {
        Err("job secret not proven".into())
    }
}

/// Tells the other end we are closing on purpose, then waits (bounded) for it to close
/// its side, so the goodbye is not lost to a reset from unread data.
pub(crate) async fn say_goodbye<R, W>(rd: &mut R, wr: &mut W)
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let _ = timeout(CLOSE_GRACE, async {
        wr.write_all(&GOODBYE.to_le_bytes()).await?;
        wr.shutdown().await?;
        let mut sink = [0u8; 4096];
        while rd.read(&mut sink).await? > 0 {}
        io::Result::Ok(())
    })
    .await;
}

/// Resolves once the fabric starts closing.
pub(crate) async fn closing(rx: &mut watch::Receiver<bool>) {
    let _ = rx.wait_for(|closing| *closing).await;
}

/// Counts live connection tasks so `shutdown` can wait for them.
#[derive(Default)]
pub(crate) struct TaskCount {
    live: AtomicUsize,
    idle: Notify,
}

pub(crate) struct TaskGuard(Arc<TaskCount>);

impl TaskCount {
    pub fn enter(self: &Arc<Self>) -> TaskGuard {
        self.live.fetch_add(1, Ordering::SeqCst);
        TaskGuard(self.clone())
    }

    pub async fn wait_idle(&self) {
        loop {
            let idle = self.idle.notified();
            tokio::pin!(idle);
            idle.as_mut().enable();
            if self.live.load(Ordering::SeqCst) == 0 {
                return;
            }
            idle.await;
        }
    }
}

impl Drop for TaskGuard {
    fn drop(&mut self) {
        if self.0.live.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

/// A random number identifying this process's fabric, so peers can tell a restarted
/// node server from the one they knew.
pub(crate) fn new_incarnation() -> u64 {
    if let Ok(bytes) = cohort_proto::env::random_bytes(8) {
        if let Ok(bytes) = <[u8; 8]>::try_from(bytes) {
            return u64::from_le_bytes(bytes);
        }
    }
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    nanos ^ ((std::process::id() as u64) << 32)
}

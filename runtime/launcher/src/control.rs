//! The launcher's end of the control channel: bounded async framing of
//! [`DaemonMsg`]/[`LauncherMsg`] and the registration handshake that authenticates a
//! node server by the per-job secret.

use std::time::Duration;

use cohort_proto::control::{DaemonMsg, LauncherMsg, RegisterExchange};
use cohort_proto::frame::{read_frame_async, write_frame_async, MAX_CONTROL_FRAME};
use cohort_proto::{CohortError, NodeId};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;

/// How long a fresh connection may take to send its `Register`.
pub const REGISTER_TIMEOUT: Duration = Duration::from_secs(10);

/// Reads one node-server message; `Ok(None)` on a clean EOF between frames.
pub async fn read_daemon_msg<R: AsyncRead + Unpin>(
    r: &mut R,
) -> Result<Option<DaemonMsg>, CohortError> {
    read_frame_async(r, MAX_CONTROL_FRAME).await
}

/// Writes one launcher message.
pub async fn send<W: AsyncWrite + Unpin>(w: &mut W, msg: &LauncherMsg) -> std::io::Result<()> {
    write_frame_async(w, msg).await
}

/// A node server that proved it belongs to the job.
#[derive(Debug)]
pub struct Registration {
    pub node: NodeId,
    pub fabric_addr: String,
    pub pid: u32,
    /// The node server's host name (`gethostname` there).
    pub host: String,
    /// The cores of its host.
    pub cores: u32,
    pub reader: OwnedReadHalf,
    pub writer: OwnedWriteHalf,
}

/// Why a control connection was turned away. Never carries the secret.
#[derive(Debug, thiserror::Error)]
pub enum Refused {
    #[error("no Register within {}s", REGISTER_TIMEOUT.as_secs())]
    Timeout,
    #[error("closed before registering")]
    Closed,
    #[error("bad first frame: {0}")]
    Protocol(#[from] CohortError),
    #[error("first frame was not Register")]
    NotRegister,
    #[error("claims node {node}, but the job has {num_nodes} node(s)")]
    NoSuchNode { node: NodeId, num_nodes: u32 },
    #[error("wrong job secret (claimed node {node})")]
    BadSecret { node: NodeId },
    #[error("no answer to the challenge (claimed node {node}): {reason}")]
    NoProof { node: NodeId, reason: String },
    #[error("no random nonce: {0}")]
    Nonce(std::io::Error),
}

/// Reads and checks the first frame of a control connection.
pub async fn handshake(
    stream: TcpStream,
    secret: &[u8],
    num_nodes: u32,
) -> Result<Registration, Refused> {
    let _ = stream.set_nodelay(true);
    let (mut reader, mut writer) = stream.into_split();
    let first = tokio::time::timeout(REGISTER_TIMEOUT, read_daemon_msg(&mut reader))
        .await
        .map_err(|_| Refused::Timeout)??
        .ok_or(Refused::Closed)?;
    let DaemonMsg::Register {
        node,
        nonce,
        fabric_addr,
        pid,
        host,
        cores,
    } = first
    else {
        return Err(Refused::NotRegister);
    };
    // The secret is proven both ways (cohort_proto::auth) before anything else the
    // peer claims influences our answer.
    let launcher_nonce = cohort_proto::auth::nonce().map_err(Refused::Nonce)?;
    let exchange = RegisterExchange {
        node,
        nonce: &nonce,
        fabric_addr: &fabric_addr,
        pid,
        host: &host,
        cores,
        launcher_nonce: &launcher_nonce,
    };
    let challenge = LauncherMsg::Challenge {
        nonce: launcher_nonce,
        proof: exchange.launcher_proof(secret),
    };
    let no_proof = |reason: String| Refused::NoProof { node, reason };
    send(&mut writer, &challenge)
        .await
        .map_err(|e| no_proof(e.to_string()))?;
    let answer = tokio::time::timeout(REGISTER_TIMEOUT, read_daemon_msg(&mut reader))
        .await
        .map_err(|_| no_proof(format!("none within {}s", REGISTER_TIMEOUT.as_secs())))?
        .map_err(|e| no_proof(e.to_string()))?
        .ok_or_else(|| no_proof("closed".into()))?;
    match answer {
        DaemonMsg::Proof { proof } if exchange.daemon_proven(secret, &proof) => {}
        DaemonMsg::Proof { .. } => return Err(Refused::BadSecret { node }),
        other => return Err(no_proof(format!("sent {} instead", kind(&other)))),
    }
    if node >= num_nodes {
        return Err(Refused::NoSuchNode { node, num_nodes });
    }
    Ok(Registration {
        node,
        fabric_addr,
        pid,
        host,
        cores,
        reader,
        writer,
    })
}

/// A message's kind, for errors (never its fields).
fn kind(msg: &DaemonMsg) -> String {
    let debug = format!("{msg:?}");
    debug
        .split(|c: char| !c.is_alphanumeric())
        .next()
        .unwrap_or_default()
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use cohort_proto::auth::Nonce;
    use cohort_proto::frame::encode;
    use tokio::io::AsyncWriteExt;
    use tokio::net::TcpListener;

    const FABRIC: &str = "127.0.1.1:5000";

    /// A node server's side of the registration, holding `claimed` as the secret:
    /// whether the launcher proved it holds the same, and the open connection.
    async fn daemon_side(
        addr: std::net::SocketAddr,
        node: NodeId,
        claimed: Vec<u8>,
    ) -> (bool, TcpStream) {
        let mut s = TcpStream::connect(addr).await.unwrap();
        let nonce: Nonce = [9; 16];
        let register = DaemonMsg::Register {
            node,
            nonce,
            fabric_addr: FABRIC.into(),
            pid: 42,
            host: "n1".into(),
            cores: 4,
        };
        s.write_all(&encode(&register)).await.unwrap();
        let challenge: Option<LauncherMsg> =
            cohort_proto::frame::read_frame_async(&mut s, MAX_CONTROL_FRAME)
                .await
                .unwrap();
        let Some(LauncherMsg::Challenge {
            nonce: launcher_nonce,
            proof,
        }) = challenge
        else {
            panic!("expected a challenge, got {challenge:?}");
        };
        let ex = RegisterExchange {
            node,
            nonce: &nonce,
            fabric_addr: FABRIC,
            pid: 42,
            host: "n1",
            cores: 4,
            launcher_nonce: &launcher_nonce,
        };
        let launcher_proven = ex.launcher_proven(&claimed, &proof);
        let answer = DaemonMsg::Proof {
            proof: ex.daemon_proof(&claimed),
        };
        s.write_all(&encode(&answer)).await.unwrap();
        (launcher_proven, s)
    }

    #[tokio::test(flavor = "current_thread")]
    async fn registration_proves_the_secret_both_ways_and_checks_the_node() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let secret = vec![7u8; 32];

        let daemon = tokio::spawn(daemon_side(addr, 1, secret.clone()));
        let (s, _) = listener.accept().await.unwrap();
        let reg = handshake(s, &secret, 2).await.unwrap();
        assert_eq!(
            (
                reg.node,
                reg.pid,
                reg.fabric_addr.as_str(),
                reg.host.as_str()
            ),
            (1, 42, FABRIC, "n1")
        );
        assert!(daemon.await.unwrap().0, "the launcher's proof checks out");

        // A node server with another secret: neither side's proof checks out.
        let daemon = tokio::spawn(daemon_side(addr, 0, vec![8u8; 32]));
        let (s, _) = listener.accept().await.unwrap();
        let err = handshake(s, &secret, 2).await.unwrap_err();
        assert!(matches!(err, Refused::BadSecret { node: 0 }), "{err}");
        assert!(!err.to_string().contains("0707"));
        assert!(
            !daemon.await.unwrap().0,
            "a launcher without the secret is caught"
        );

        let daemon = tokio::spawn(daemon_side(addr, 5, secret.clone()));
        let (s, _) = listener.accept().await.unwrap();
        assert!(matches!(
            handshake(s, &secret, 2).await,
            Err(Refused::NoSuchNode { node: 5, .. })
        ));
        drop(daemon.await);

        // Registering and then closing instead of answering.
        let mut c = TcpStream::connect(addr).await.unwrap();
        let register = DaemonMsg::Register {
            node: 1,
            nonce: [1; 16],
            fabric_addr: FABRIC.into(),
            pid: 1,
            host: "n1".into(),
            cores: 4,
        };
        c.write_all(&encode(&register)).await.unwrap();
        drop(c);
        let (s, _) = listener.accept().await.unwrap();
        let err = handshake(s, &secret, 2).await.unwrap_err();
        assert!(matches!(err, Refused::NoProof { node: 1, .. }), "{err}");

        // An oversized length prefix costs only that connection.
        let mut c = TcpStream::connect(addr).await.unwrap();
        c.write_all(&u32::MAX.to_le_bytes()).await.unwrap();
        let (s, _) = listener.accept().await.unwrap();
        assert!(matches!(
            handshake(s, &secret, 2).await,
            Err(Refused::Protocol(_))
        ));
    }

    #[test]
    fn message_kinds_name_no_fields() {
        let msg = DaemonMsg::Fatal {
            reason: "private".into(),
        };
        assert_eq!(kind(&msg), "Fatal");
    }
}

//! The launcher's end of the control channel: bounded async framing of
//! [`DaemonMsg`]/[`LauncherMsg`] and the registration handshake that authenticates a
//! node server by the per-job secret.

use std::time::Duration;

use cohort_proto::control::{DaemonMsg, LauncherMsg};
use cohort_proto::env::secrets_equal;
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
}

/// Reads and checks the first frame of a control connection.
pub async fn handshake(
    stream: TcpStream,
    secret: &[u8],
    num_nodes: u32,
) -> Result<Registration, Refused> {
    let _ = stream.set_nodelay(true);
    let (mut reader, writer) = stream.into_split();
    let first = tokio::time::timeout(REGISTER_TIMEOUT, read_daemon_msg(&mut reader))
        .await
        .map_err(|_| Refused::Timeout)??
        .ok_or(Refused::Closed)?;
    let DaemonMsg::Register {
        node,
        secret: offered,
        fabric_addr,
        pid,
    } = first
    else {
        return Err(Refused::NotRegister);
    };
    // Check the secret before anything else the peer claims influences our answer.
    if !secrets_equal(&offered, secret) {
        return Err(Refused::BadSecret { node });
    }
    if node >= num_nodes {
        return Err(Refused::NoSuchNode { node, num_nodes });
    }
    Ok(Registration {
        node,
        fabric_addr,
        pid,
        reader,
        writer,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use cohort_proto::frame::encode;
    use tokio::io::AsyncWriteExt;
    use tokio::net::TcpListener;

    async fn connect_and_send(addr: std::net::SocketAddr, msg: &DaemonMsg) -> TcpStream {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(&encode(msg)).await.unwrap();
        s
    }

    #[tokio::test(flavor = "current_thread")]
    async fn registration_checks_the_secret_and_node() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let secret = vec![7u8; 32];
        let register = |node, secret: &[u8]| DaemonMsg::Register {
            node,
            secret: secret.to_vec(),
            fabric_addr: "127.0.1.1:5000".into(),
            pid: 42,
        };

        let _c = connect_and_send(addr, &register(1, &secret)).await;
        let (s, _) = listener.accept().await.unwrap();
        let reg = handshake(s, &secret, 2).await.unwrap();
        assert_eq!((reg.node, reg.pid), (1, 42));

        let _c = connect_and_send(addr, &register(0, &[8u8; 32])).await;
        let (s, _) = listener.accept().await.unwrap();
        let err = handshake(s, &secret, 2).await.unwrap_err();
        assert!(matches!(err, Refused::BadSecret { node: 0 }), "{err}");
        assert!(!err.to_string().contains("0707"));

        let _c = connect_and_send(addr, &register(5, &secret)).await;
        let (s, _) = listener.accept().await.unwrap();
        assert!(matches!(
            handshake(s, &secret, 2).await,
            Err(Refused::NoSuchNode { node: 5, .. })
        ));

        // An oversized length prefix costs only that connection.
        let mut c = TcpStream::connect(addr).await.unwrap();
        c.write_all(&u32::MAX.to_le_bytes()).await.unwrap();
        let (s, _) = listener.accept().await.unwrap();
        assert!(matches!(
            handshake(s, &secret, 2).await,
            Err(Refused::Protocol(_))
        ));
    }
}

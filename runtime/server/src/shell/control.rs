//! cohortd's end of the launcher control channel: bounded async framing of
//! [`LauncherMsg`]/[`DaemonMsg`], and a reader task turning frames into events.

use cohort_proto::control::{DaemonMsg, LauncherMsg};
#[cfg(test)]
use cohort_proto::frame::encode;
use cohort_proto::frame::{read_frame_async, write_frame_async, MAX_CONTROL_FRAME};
use cohort_proto::CohortError;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::mpsc;

/// Reads one launcher message; `Ok(None)` on a clean EOF between frames.
pub async fn read_launcher_msg<R: AsyncRead + Unpin>(
    r: &mut R,
) -> Result<Option<LauncherMsg>, CohortError> {
    read_frame_async(r, MAX_CONTROL_FRAME).await
}

/// Writes one message to the launcher.
pub async fn send<W: AsyncWrite + Unpin>(w: &mut W, msg: &DaemonMsg) -> std::io::Result<()> {
    write_frame_async(w, msg).await
}

/// What the launcher said, or that it is gone.
#[derive(Debug)]
pub enum FromLauncher {
    Msg(LauncherMsg),
    /// The connection ended; `Some` carries the error, `None` means a clean EOF.
    Closed(Option<String>),
}

/// Reads frames until the connection ends, forwarding each; the last event is always
/// `Closed`.
pub async fn read_loop<R: AsyncRead + Unpin>(mut r: R, tx: mpsc::UnboundedSender<FromLauncher>) {
    loop {
        let ev = match read_launcher_msg(&mut r).await {
            Ok(Some(msg)) => FromLauncher::Msg(msg),
            Ok(None) => FromLauncher::Closed(None),
            Err(e) => FromLauncher::Closed(Some(e.to_string())),
        };
        let closed = matches!(ev, FromLauncher::Closed(_));
        if tx.send(ev).is_err() || closed {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "current_thread")]
    async fn frames_then_eof_then_garbage() {
        let mut bytes = encode(&LauncherMsg::Start {
            peers: vec!["127.0.1.1:1".into()],
            env: Vec::new(),
            universe: 1,
            job_digest: 0,
        });
        bytes.extend(encode(&LauncherMsg::Shutdown));
        let (tx, mut rx) = mpsc::unbounded_channel();
        read_loop(&bytes[..], tx).await;
        assert!(matches!(
            rx.recv().await,
            Some(FromLauncher::Msg(LauncherMsg::Start { .. }))
        ));
        assert!(matches!(
            rx.recv().await,
            Some(FromLauncher::Msg(LauncherMsg::Shutdown))
        ));
        assert!(matches!(rx.recv().await, Some(FromLauncher::Closed(None))));

        let garbage = u32::MAX.to_le_bytes();
        let (tx, mut rx) = mpsc::unbounded_channel();
        read_loop(&garbage[..], tx).await;
        assert!(matches!(
            rx.recv().await,
            Some(FromLauncher::Closed(Some(_)))
        ));
    }
}

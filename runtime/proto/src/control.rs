//! Launcher ⇄ node-server control channel.

use serde::{Deserialize, Serialize};

use crate::ids::{NodeId, Rank};

/// How a rank ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExitStatus {
    pub code: Option<i32>,
    pub signal: Option<i32>,
}

impl ExitStatus {
    pub fn success(&self) -> bool {
        self.code == Some(0)
    }
    /// Shell-style status: the exit code, or 128 + signal.
    pub fn shell_code(&self) -> i32 {
        match (self.code, self.signal) {
            (Some(c), _) => c,
            (None, Some(s)) => 128 + s,
            (None, None) => 1,
        }
    }
}

/// Node server → launcher.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum DaemonMsg {
    /// First frame: who I am, proof I belong to the job, where my fabric listens.
    Register {
        node: NodeId,
        #[serde(with = "serde_bytes")]
        secret: Vec<u8>,
        fabric_addr: String,
        pid: u32,
    },
    /// All my ranks were started.
    Launched,
    RankExited {
        rank: Rank,
        status: ExitStatus,
    },
    /// Unrecoverable error on this node server.
    Fatal {
        reason: String,
    },
    /// This node server's failure detector declared node server `node` lost: nothing
    /// came from it for `silent_ms` milliseconds. The launcher asks the accused
    /// ([`LauncherMsg::Probe`]: a server cut off by the network reports its own
    /// watched server too), kills the condemned server (a frozen one must not come back
    /// into a job that went on without it) and tells the others with
    /// [`LauncherMsg::PeerLost`].
    PeerSilent {
        node: NodeId,
        silent_ms: u64,
    },
    /// The answer to [`LauncherMsg::Probe`]: this node server has heard from no other
    /// for `silent_ms` milliseconds (`u64::MAX`: never).
    Heard {
        silent_ms: u64,
    },
    /// This node server's fabric lost node server `node` (`reason`: a connection broke
    /// or could not be made).
    ///
    /// `unreachable` (it did not answer, or there is no route): `node` may still run,
    /// cut off from this server only, so this server goes on as if it lived until the
    /// launcher's verdict ([`LauncherMsg::PeerLost`]). Unless `node` is gone, the
    /// launcher asks both ([`LauncherMsg::Survey`]) and ends one of them, as the job
    /// cannot use both.
    ///
    /// Otherwise (it closed or reset its connections) this server acted on the loss
    /// already, and every server routes around `node`: if it still runs, the launcher
    /// ends it.
    FabricLost {
        node: NodeId,
        reason: String,
        unreachable: bool,
    },
    /// The answer to [`LauncherMsg::Survey`] `token`: the node servers that answered
    /// this one's pings in time.
    Reached {
        token: u64,
        nodes: Vec<NodeId>,
    },
}

/// Launcher → node server.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum LauncherMsg {
    /// Fabric addresses of every node server (index = node id); start the ranks.
    Start { peers: Vec<String> },
    /// Kill every rank now (SIGTERM, then SIGKILL after a grace period) and exit.
    Shutdown,
    /// Node server `node` is lost: the launcher killed it after a report of its
    /// silence. Route around it, as if the fabric had reported it.
    PeerLost { node: NodeId },
    /// A report of this node server about `node` was dropped: `node` talks to the job.
    /// Watch it again (the watch moved on with the report), so that it stays watched.
    KeepWatching { node: NodeId },
    /// Node server `node`'s process ended (or its control connection closed, so it
    /// ends): route around it once its fabric reported it, so that what it sent before
    /// still counts, or after a heartbeat period at the latest.
    PeerGone { node: NodeId },
    /// This node server was reported silent: how long has it heard from no other?
    /// (Answered with [`DaemonMsg::Heard`]; a frozen server does not answer, one the
    /// network cut off answers with a long silence.)
    Probe,
    /// Which node servers can this one reach? Ping every other one not lost but
    /// `except` over the fabric and answer [`DaemonMsg::Reached`] `token` once all
    /// answered or `within_ms` passed.
    Survey {
        token: u64,
        except: NodeId,
        within_ms: u64,
    },
    /// "Still here", every heartbeat period once the job started, when the failure
    /// detector runs: a node server that hears nothing from the launcher for a peer
    /// timeout (its host died, it froze, the network cut it off) stops its ranks and
    /// exits rather than run on alone.
    Heartbeat,
}

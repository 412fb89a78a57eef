//! Launcher ⇄ node-server control channel.

use serde::{Deserialize, Serialize};

use crate::auth::{prove, proves, Nonce, Proof};
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
/// One rank's stack, for [`DaemonMsg::StackTraces`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StackTrace {
    /// The session's job index (0: the launched job).
    pub job: u32,
    pub rank: Rank,
    pub pid: u32,
    /// gdb's output, or why it could not run.
    pub text: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum DaemonMsg {
    /// First frame: who I am, where my fabric listens, and a fresh nonce for the
    /// launcher to prove the job secret against ([`LauncherMsg::Challenge`]). The
    /// secret itself never travels ([`crate::auth`]). `host` is the node server's host
    /// name as its ranks will see it (`gethostname`), which the launcher compares
    /// between node servers (`cohort run --pmix`: Open MPI names its shared memory
    /// after it).
    Register {
        node: NodeId,
        nonce: Nonce,
        fabric_addr: String,
        pid: u32,
        host: String,
        /// The cores of that host (hwloc's count, as binding uses it): with `--pmix`
        /// the launcher tells Open MPI to yield when idle on hosts with more ranks.
        cores: u32,
    },
    /// Second frame, once the launcher proved the secret: this node server's proof
    /// ([`RegisterExchange::daemon_proof`]).
    Proof { proof: Proof },
    /// All my ranks were started.
    Launched,
    /// Rank `rank` of job `job` (0: the launched one, k: the k-th spawned) ended.
    RankExited {
        job: u32,
        rank: Rank,
        status: ExitStatus,
    },
    /// Unrecoverable error on this node server.
    Fatal { reason: String },
    /// This node server's failure detector declared node server `node` lost: nothing
    /// came from it for `silent_ms` milliseconds. The launcher asks the accused
    /// ([`LauncherMsg::Probe`]: a server cut off by the network reports its own
    /// watched server too), kills the condemned server (a frozen one must not come back
    /// into a job that went on without it) and tells the others with
    /// [`LauncherMsg::PeerLost`].
    PeerSilent { node: NodeId, silent_ms: u64 },
    /// The answer to [`LauncherMsg::Probe`]: this node server has heard from no other
    /// for `silent_ms` milliseconds (`u64::MAX`: never).
    Heard { silent_ms: u64 },
    /// The answer to [`LauncherMsg::StackTraces`]: each running rank's stack (or why
    /// there is none), as gdb printed it.
    StackTraces { traces: Vec<StackTrace> },
    /// The answer to [`LauncherMsg::Ending`]: from now on this node server takes its
    /// peers' departures for the job's end, not for losses.
    Ending,
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
    Reached { token: u64, nodes: Vec<NodeId> },
    /// A publish, lookup or unpublish (`req`) of this node server's process `proc`,
    /// for the job's data store, which the launcher holds (the job's one process that
    /// lives exactly as long as the job); answered with [`LauncherMsg::DataReply`]
    /// `token`. At most [`MAX_DATA_CALL`] bytes encoded.
    Data {
        token: u64,
        proc: crate::ids::ProcId,
        req: crate::msg::Request,
    },
    /// This node server's process `rank` is terminated for it (it exited, or closed
    /// its client connection without finalizing): the data store drops its waiting
    /// lookups and proc-persistent values.
    DataProcGone { job: u32, rank: Rank },
    /// The answer to [`LauncherMsg::AddJob`] `index`: this node server knows the job
    /// (`Ok`), or could not take it (`Err`: why; the spawn fails).
    JobAdded {
        index: u32,
        result: Result<(), String>,
    },
    /// The answer to [`LauncherMsg::StartJob`] `index`: this node server's processes
    /// of that job were started (one that could not be is reported exited, status 127).
    JobStarted { index: u32 },
    /// The last [`LauncherMsg::Stdin`] chunk is written to every local rank that takes
    /// the launcher's stdin (or those ranks are gone): send the next.
    StdinTaken,
}

/// Which ranks get the launcher's stdin (`cohort run --stdin`, as Open MPI's): one
/// rank (rank 0 by default), all of them, or none. The others' stdin is `/dev/null`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum StdinTarget {
    Rank(Rank),
    All,
    #[default]
    None,
}

impl StdinTarget {
    /// Whether rank `r` takes the launcher's stdin.
    pub fn takes(self, r: Rank) -> bool {
        match self {
            StdinTarget::Rank(t) => t == r,
            StdinTarget::All => true,
            StdinTarget::None => false,
        }
    }
}

impl std::str::FromStr for StdinTarget {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "all" => Ok(StdinTarget::All),
            "none" => Ok(StdinTarget::None),
            n => n
                .parse()
                .map(StdinTarget::Rank)
                .map_err(|_| format!("--stdin {n:?}: a rank number, `all` or `none`")),
        }
    }
}

impl std::fmt::Display for StdinTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StdinTarget::Rank(r) => write!(f, "{r}"),
            StdinTarget::All => f.write_str("all"),
            StdinTarget::None => f.write_str("none"),
        }
    }
}

/// The largest [`LauncherMsg::Stdin`] chunk.
pub const MAX_STDIN_CHUNK: usize = 64 << 10;

/// The largest data store call ([`DaemonMsg::Data`]) a node server forwards, encoded:
/// well inside a control frame ([`crate::frame::MAX_CONTROL_FRAME`]).
pub const MAX_DATA_CALL: usize = 512 << 10;

/// Launcher → node server.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum LauncherMsg {
    /// The answer to [`DaemonMsg::Register`], before anything else: the launcher's
    /// nonce and its proof of the job secret ([`RegisterExchange::launcher_proof`]).
    Challenge { nonce: Nonce, proof: Proof },
    /// Fabric addresses of every node server (index = node id); start the ranks, with
    /// `env` (`VAR`, `VAL`) added to every rank's environment after the job's `-x`
    /// variables: what the launcher chose once it knew every node server
    /// (`cohort run --pmix`: Open MPI's transports).
    Start {
        peers: Vec<String>,
        env: Vec<(String, String)>,
        /// The session's universe size (PMIX_UNIV_SIZE, MPI_UNIVERSE_SIZE): the
        /// cores of the node servers' hosts, each host counted once, or the launched
        /// job's size if that is more.
        universe: u32,
        /// The launched job's map as the launcher built it ([`crate::JobMap::digest`]):
        /// a node server whose own differs stops with an error naming both.
        #[serde(default)]
        job_digest: u64,
    },
    /// The job is ending: the node servers are about to be told to shut down, so a
    /// peer that goes away (or that cannot be reached any more) has left, not failed.
    /// Answered with [`DaemonMsg::Ending`]; the launcher sends [`LauncherMsg::Shutdown`]
    /// to any node server only once every one answered (or a short wait passed), so
    /// that none of them reports another's shutdown as a loss.
    Ending,
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
    /// The job timed out (`--get-stack-traces`): print every running rank's stack with
    /// gdb and answer [`DaemonMsg::StackTraces`].
    StackTraces,
    /// Which node servers can this one reach? Ping every other one not lost but
    /// `except` over the fabric and answer [`DaemonMsg::Reached`] `token` once all
    /// answered or `within_ms` passed.
    Survey {
        token: u64,
        except: NodeId,
        within_ms: u64,
    },
    /// The data store's answer to [`DaemonMsg::Data`] `token`.
    DataReply {
        token: u64,
        result: Result<crate::msg::Response, crate::CohortError>,
    },
    /// The next bytes of the launcher's stdin, for this node server's ranks that take
    /// it (`cohortd --stdin`); answered with [`DaemonMsg::StdinTaken`] once written,
    /// and only then is the next chunk sent. At most [`MAX_STDIN_CHUNK`] bytes.
    Stdin {
        #[serde(with = "serde_bytes")]
        data: Vec<u8>,
    },
    /// The launcher's stdin ended: close those ranks' stdin.
    StdinEnd,
    /// A process of the session spawned job `index` (`job`, spawned by `parent`,
    /// running `apps`): know its processes, and prepare to start this node server's
    /// ones. Answered with [`DaemonMsg::JobAdded`]; only once every node server knows
    /// the job does the launcher start it, so that no server meets a process it cannot
    /// place.
    AddJob {
        index: u32,
        job: crate::JobMap,
        parent: crate::ids::ProcId,
        apps: Vec<crate::spawn::SpawnApp>,
        /// Per node server (index = node id; missing: none), variables added to the
        /// job's processes after the session's `-x` ones (`--pmix`: Open MPI's
        /// settings, with every job's processes counted).
        env: Vec<Vec<(String, String)>>,
        /// How the job's processes are bound (`None`: not at all).
        bind: Option<Box<crate::spawn::SpawnBinding>>,
    },
    /// Start this node server's processes of job `index` (answered with
    /// [`DaemonMsg::JobStarted`]).
    StartJob { index: u32 },
    /// Spawned job `index` is cancelled (its spawn timed out): start none of its
    /// processes here, and kill those already started. Not answered; the launcher no
    /// longer counts the job's processes.
    CancelJob { index: u32 },
    /// Every process of spawned job `index` ended (`exit_code`: its first failed
    /// process's shell-style status, or 0): tell `parent`, this node server's process
    /// that spawned it and asked to be told (PMIX_NOTIFY_COMPLETION).
    JobEnded {
        index: u32,
        parent: crate::ids::ProcId,
        exit_code: i32,
    },
    /// Every process of spawned job `index` ended: its process sets are deleted
    /// (local processes get PMIX_PROCESS_SET_DELETE) and its namespace is no longer
    /// active. Sent to every node server, after the job's last rank exit.
    JobGone { index: u32 },
    /// "Still here", every heartbeat period once the job started, when the failure
    /// detector runs: a node server that hears nothing from the launcher for a peer
    /// timeout (its host died, it froze, the network cut it off) stops its ranks and
    /// exits rather than run on alone.
    Heartbeat,
}

/// A node server's registration as both of its proofs cover it: the node server's
/// claims and nonce, and the launcher's nonce. The launcher proves the job secret
/// first, then the node server ([`crate::auth`]).
#[derive(Clone, Copy, Debug)]
pub struct RegisterExchange<'a> {
    pub node: NodeId,
    pub nonce: &'a Nonce,
    pub fabric_addr: &'a str,
    pub pid: u32,
    pub host: &'a str,
    pub cores: u32,
    pub launcher_nonce: &'a Nonce,
}

const LAUNCHER: &[u8] = b"cohort control launcher v1";
const DAEMON: &[u8] = b"cohort control node server v1";

impl RegisterExchange<'_> {
    fn check(&self, secret: &[u8], label: &[u8], proof: Option<&Proof>) -> (Proof, bool) {
        let node = self.node.to_le_bytes();
        let pid = self.pid.to_le_bytes();
        let cores = self.cores.to_le_bytes();
        let parts: [&[u8]; 7] = [
            &node,
            self.nonce,
            self.fabric_addr.as_bytes(),
            &pid,
            self.host.as_bytes(),
            &cores,
            self.launcher_nonce,
        ];
        match proof {
            Some(p) => (*p, proves(secret, label, &parts, p)),
            None => (prove(secret, label, &parts), true),
        }
    }

    /// The launcher's proof of the secret.
    pub fn launcher_proof(&self, secret: &[u8]) -> Proof {
        self.check(secret, LAUNCHER, None).0
    }

    /// Whether `proof` is the launcher's (constant-time comparison).
    pub fn launcher_proven(&self, secret: &[u8], proof: &Proof) -> bool {
        self.check(secret, LAUNCHER, Some(proof)).1
    }

    /// The node server's proof of the secret.
    pub fn daemon_proof(&self, secret: &[u8]) -> Proof {
        self.check(secret, DAEMON, None).0
    }

    /// Whether `proof` is the node server's (constant-time comparison).
    pub fn daemon_proven(&self, secret: &[u8], proof: &Proof) -> bool {
        self.check(secret, DAEMON, Some(proof)).1
    }
}

#[cfg(test)]
mod exchange_tests {
    use super::*;

    #[test]
    fn each_side_proves_the_secret_over_the_whole_registration() {
        let ex = RegisterExchange {
            node: 2,
            nonce: &[1; 16],
            fabric_addr: "10.0.0.2:4000",
            pid: 77,
            host: "n2",
            cores: 8,
            launcher_nonce: &[2; 16],
        };
        let l = ex.launcher_proof(b"secret");
        let d = ex.daemon_proof(b"secret");
        assert!(ex.launcher_proven(b"secret", &l) && ex.daemon_proven(b"secret", &d));
        assert!(!ex.launcher_proven(b"guess", &l) && !ex.daemon_proven(b"guess", &d));
        // One side's proof is not the other's.
        assert!(!ex.daemon_proven(b"secret", &l));
        // Another claim, or another launcher nonce, needs another proof.
        let moved = RegisterExchange {
            fabric_addr: "10.0.0.9:4000",
            ..ex
        };
        assert!(!moved.daemon_proven(b"secret", &d));
        let renonced = RegisterExchange {
            launcher_nonce: &[3; 16],
            ..ex
        };
        assert!(!renonced.daemon_proven(b"secret", &d));
        let other_node = RegisterExchange { node: 3, ..ex };
        assert!(!other_node.daemon_proven(b"secret", &d));
        let other_host = RegisterExchange { host: "n3", ..ex };
        assert!(!other_host.daemon_proven(b"secret", &d));
        let other_cores = RegisterExchange { cores: 64, ..ex };
        assert!(!other_cores.daemon_proven(b"secret", &d));
    }
}

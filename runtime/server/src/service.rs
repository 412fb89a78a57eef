//! The node service: accepts local clients on a private Unix socket, talks to peer node
//! servers over the fabric, and drives the sans-IO engine from `cohort-core`.
//!
//! Must run inside a `tokio::task::LocalSet` on a current-thread runtime.

use std::net::SocketAddr;
use std::path::PathBuf;

use cohort_proto::{JobMap, NodeId, Rank};

/// Everything the service needs to know about its place in the job.
#[derive(Clone, Debug)]
pub struct ServiceConfig {
    pub node: NodeId,
    pub job: JobMap,
    /// Per-job secret node servers prove to each other.
    pub job_secret: Vec<u8>,
    /// Token local clients must present.
    pub client_token: Vec<u8>,
    /// Where the fabric listens (port 0 = ephemeral).
    pub fabric_listen: SocketAddr,
    /// Private directory (created 0700 if missing) for the client socket.
    pub socket_dir: PathBuf,
}

/// Handle to a running node service.
pub struct NodeService {
    cfg: ServiceConfig,
    fabric_addr: String,
    socket_path: PathBuf,
}

impl NodeService {
    /// Binds the fabric listener and the client socket; serving starts at once, peers
    /// become reachable after [`NodeService::start`].
    pub async fn bind(cfg: ServiceConfig) -> std::io::Result<NodeService> {
        // STUB: replaced by the real service; keeps the process shell buildable.
        std::fs::create_dir_all(&cfg.socket_dir)?;
        let listener = std::net::TcpListener::bind(cfg.fabric_listen)?;
        let fabric_addr = listener.local_addr()?.to_string();
        std::mem::forget(listener);
        let socket_path = cfg.socket_dir.join("cohortd.sock");
        Ok(NodeService {
            cfg,
            fabric_addr,
            socket_path,
        })
    }

    pub fn fabric_addr(&self) -> String {
        self.fabric_addr.clone()
    }

    pub fn socket_path(&self) -> PathBuf {
        self.socket_path.clone()
    }

    pub fn node(&self) -> NodeId {
        self.cfg.node
    }

    /// Every node server's fabric address is known (index = node id): start talking.
    pub fn start(&self, _peers: Vec<String>) {}

    /// A local rank's process ended (normally or not).
    pub fn proc_exited(&self, _rank: Rank) {}

    /// Graceful end: say goodbye to peers, close the client socket, remove it.
    pub async fn shutdown(&self) {
        let _ = std::fs::remove_file(&self.socket_path);
    }
}

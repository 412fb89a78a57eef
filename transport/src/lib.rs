//! The fabric between node servers: ordered, framed, authenticated messages from one
//! `cohortd` to another, behind one [`Fabric`] trait whose backend is picked at run time.
//!
//! This crate owns the node-server ⇄ node-server wire: connection set-up and
//! authentication, framing, per-peer queues, and peer-loss detection. It knows nothing
//! of what the payloads mean (they are `cohort_proto` peer messages, encoded by the node
//! server). Backends form the closed enum [`AnyFabric`], one file each:
//!
//! * `tcp` ([`TcpFabric`]): tokio sockets, one outbound connection per peer.
//! * `verbs` ([`VerbsFabric`]): RC queue pairs over libibverbs (loaded at run time),
//!   set up over the same authenticated TCP handshake; small payloads by send/receive
//!   under credits, large ones by RDMA read from registered memory; see the `verbs`
//!   module.
//!
//! `COHORT_FABRIC=auto` (the default) picks verbs when a device with an ACTIVE port
//! exists and TCP otherwise, and logs the choice and its reason at info.
//!
//! Delivery contract, whatever the backend:
//!
//! * [`Fabric::send`] never blocks. Messages to one peer arrive in the order they were
//!   sent, each at most once; a message to one's own node id is delivered locally.
//! * Received messages and failures arrive on the event channel returned by `bind`, as
//!   [`FabricEvent`]s, or, for a fabric started with
//!   [`bind_handler`](AnyFabric::bind_handler), as calls of the owner's handler made by
//!   the task that read them, in the same order. A peer whose connection breaks without a goodbye is reported
//!   once per loss as [`FabricEvent::PeerLost`]; messages still in flight to or from it
//!   may be lost, and a later `send` reconnects (a restarted peer is reachable again).
//! * [`Fabric::close`] says goodbye to every connected peer, so a clean shutdown is not
//!   reported as a loss; after it no more events are delivered.
//!
//! ```
//! use bytes::Bytes;
//! use cohort_transport::{AnyFabric, Fabric, FabricConfig, FabricEvent, FabricKind};
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let secret = b"per-job secret".to_vec();
//! let cfg = |node| FabricConfig::new(node, "127.0.0.1:0".parse().unwrap(), secret.clone());
//! let (a, _a_events) = AnyFabric::bind(FabricKind::Tcp, cfg(0)).await.unwrap();
//! let (b, mut b_events) = AnyFabric::bind(FabricKind::Tcp, cfg(1)).await.unwrap();
//! let peers = vec![a.local_addr(), b.local_addr()];
//! a.set_peers(peers.clone());
//! b.set_peers(peers);
//!
//! a.send(1, Bytes::from_static(b"hello")).unwrap();
//! match b_events.recv().await {
//!     Some(FabricEvent::Message { from, payload }) => assert_eq!((from, &payload[..]), (0, &b"hello"[..])),
//!     other => panic!("unexpected {other:?}"),
//! }
//! a.shutdown().await;
//! b.shutdown().await;
//! # });
//! ```

mod any;
pub mod auth;
mod error;
mod handshake;
mod links;
mod liveness;
mod rdma_mem;
mod spin;
mod tcp;
mod verbs;
pub mod wire;

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;

pub use any::{AnyFabric, AutoChoice, FabricKind, BACKEND_ENV};
pub use cohort_proto::NodeId;
pub use error::FabricError;
pub use links::EventHandler;
pub use spin::Spinner;
pub use tcp::TcpFabric;
pub use verbs::{
    busy_poll_from_env, check_memlock, memlock_error, memlock_limit, probe as probe_verbs,
    BulkStats, QueuePairSide, VerbsDevice, VerbsFabric, VerbsOptions, BULK_THRESHOLD, DEVICE_ENV,
    GID_INDEX_ENV, MIN_MEMLOCK, POLL_ENV, RECV_DEPTH,
};

/// Default for [`FabricConfig::connect_timeout`].
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a closing fabric waits for its goodbyes to be acknowledged before it
/// drops the remaining connections.
pub const CLOSE_GRACE: Duration = Duration::from_secs(5);

/// What the fabric tells its owner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FabricEvent {
    /// A payload from `from` (possibly this node itself).
    Message { from: NodeId, payload: Bytes },
    /// `peer` is unreachable: an established connection broke without a goodbye, or an
    /// attempt to connect failed or was refused (the payloads queued for it were
    /// dropped). `reason` names the peer and the cause.
    ///
    /// `unreachable`: the failure only says the peer could not be reached (see
    /// [`FabricError::is_unreachable`]); its process may still run, cut off from this
    /// node alone, so the owner may want a second opinion before routing around it.
    /// Otherwise the peer's process is gone or rejects us.
    PeerLost {
        peer: NodeId,
        reason: String,
        unreachable: bool,
    },
}

/// Everything a backend needs to start.
#[derive(Clone)]
pub struct FabricConfig {
    /// This node server's id.
    pub node: NodeId,
    /// Where to listen; a concrete address (each emulated node has its own loopback
    /// address, e.g. `127.0.1.3:0`). Outbound connections use the same source IP.
    pub listen: SocketAddr,
    /// Per-job secret; peers must present the same one (at most
    /// [`wire::MAX_SECRET_LEN`] bytes).
    pub secret: Vec<u8>,
    /// Largest payload sent or accepted; a larger incoming frame closes that connection.
    pub max_frame: usize,
    /// Bound on connecting plus handshaking with a peer; an acceptor waits as long
    /// for each step of a handshake (the hello, the answer to its challenge).
    pub connect_timeout: Duration,
    /// Device, port and GID for the verbs backend (unset fields: environment, then
    /// automatic); ignored by TCP.
    pub verbs: VerbsOptions,
    /// Adaptive polling: told of every message received and sent, so the runtime
    /// keeps polling for its budget (spawn [`Spinner::run`] on the fabric's runtime).
    /// `None`: the runtime sleeps in the kernel between messages.
    pub spinner: Option<std::sync::Arc<Spinner>>,
    /// TCP backend: data sent on a connection and not acknowledged by the peer's
    /// kernel for this long breaks the connection (`TCP_USER_TIMEOUT`), reported as an
    /// `unreachable` loss, where TCP would retransmit for many minutes. `None`: the
    /// kernel's default. (A peer whose process is frozen still has its data
    /// acknowledged: the owner's failure detector finds those.) The verbs backend's
    /// queue pairs give up after their own retries (a few seconds).
    pub stall_timeout: Option<Duration>,
    /// Spawn the connection tasks on the current `tokio::task::LocalSet` rather than on
    /// the runtime. For a consumer that runs in that `LocalSet` (as `cohortd`'s engine
    /// does): a task of the runtime waking it wakes the whole `LocalSet`, which Tokio's
    /// current-thread scheduler polls only after one more look at its I/O driver, an
    /// `epoll_wait` per delivered message. Then `bind`, `send` and `close` must be called
    /// from inside that `LocalSet` (`tokio::task::spawn_local` panics elsewhere).
    pub local_tasks: bool,
}

impl FabricConfig {
    /// A configuration with the default frame limit
    /// (`cohort_proto::frame::MAX_PEER_FRAME`) and [`DEFAULT_CONNECT_TIMEOUT`].
    pub fn new(node: NodeId, listen: SocketAddr, secret: Vec<u8>) -> Self {
        FabricConfig {
            node,
            listen,
            secret,
            max_frame: cohort_proto::frame::MAX_PEER_FRAME,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            verbs: VerbsOptions::default(),
            spinner: None,
            stall_timeout: None,
            local_tasks: false,
        }
    }
}

impl std::fmt::Debug for FabricConfig {
    // Never print the secret.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FabricConfig")
            .field("node", &self.node)
            .field("listen", &self.listen)
            .field("secret", &format_args!("<{} bytes>", self.secret.len()))
            .field("max_frame", &self.max_frame)
            .field("connect_timeout", &self.connect_timeout)
            .field("verbs", &self.verbs)
            .field("spinner", &self.spinner)
            .field("stall_timeout", &self.stall_timeout)
            .field("local_tasks", &self.local_tasks)
            .finish()
    }
}

/// Message passing between node servers. Implemented by every backend and by
/// [`AnyFabric`], which delegates to the backend chosen at run time.
pub trait Fabric: Send + Sync + 'static {
    /// The backend's name (`"tcp"` or `"verbs"`).
    fn backend(&self) -> &'static str;

    /// This node's id.
    fn node(&self) -> NodeId;

    /// The address peers connect to, e.g. `"127.0.1.3:41234"`.
    fn local_addr(&self) -> String;

    /// The job's peer table: entry `i` is node `i`'s [`local_addr`](Fabric::local_addr),
    /// including this node's own entry. May be called again to replace it.
    fn set_peers(&self, peers: Vec<String>);

    /// Queues `payload` for `to` without blocking. Messages to one peer keep their
    /// order. Sending to this node's own id delivers a `Message { from: self }` to the
    /// own event channel (or handler). Network failures are reported later as
    /// `PeerLost`.
    fn send(&self, to: NodeId, payload: Bytes) -> Result<(), FabricError>;

    /// The owner declares `peer` lost although no connection broke (its failure
    /// detector found it silent: frozen, or cut off by the network). Every connection
    /// to or from it is dropped without a goodbye, payloads queued for it are dropped,
    /// no [`FabricEvent::PeerLost`] follows (the owner knows), and connections of the
    /// same incarnation that finish their handshake later are refused. So a close does
    /// not wait for goodbyes from it. A restarted peer (a new incarnation) is reachable
    /// again.
    fn declare_lost(&self, peer: NodeId);

    /// The owner's job is ending: its peers are being shut down, so a connection that
    /// breaks or cannot be made from now on is what a departure looks like. Losses are
    /// still reported as [`FabricEvent::PeerLost`], but logged at debug level rather
    /// than as warnings.
    fn expect_departures(&self);

    /// Starts a graceful close: queued messages are flushed, every connected peer is
    /// told goodbye (so it reports no loss), and no more events are delivered. Further
    /// sends fail with [`FabricError::Closed`].
    fn close(&self);
}

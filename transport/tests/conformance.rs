//! The fabric conformance suite, run against every backend: `tcp::*` over loopback
//! sockets, `verbs::*` over an RDMA device. Each test uses its own 127.x.y.z addresses
//! (TCP) so tests can run in parallel, and every test runs under a hard deadline so
//! nothing can hang; no test asserts how long anything took.
//!
//! The verbs variants need a device with an ACTIVE port; without one (this CI host)
//! they print why and pass, unless `COHORT_TEST_REQUIRE_VERBS=1` (set by the soft-RoCE
//! guest job, `deploy/rxe/ci.sh`), where a missing device fails them. Under verbs the
//! test addresses map onto `COHORT_TEST_VERBS_ADDRS` (default 192.168.78.1–4, the rxe
//! guest's addresses, each with its own GID) and message counts are smaller, since the
//! guest is emulated.

use std::collections::HashMap;
use std::future::Future;
use std::time::Duration;

use bytes::Bytes;
use cohort_transport::auth::{self, Challenge, NONCE_LEN};
use cohort_transport::wire::{
    self, Hello, Reply, HELLO_LEN, REPLY_FIXED_LEN, VERBS_WIRE_VERSION, WIRE_VERSION,
};
use cohort_transport::{
    AnyFabric, Fabric, FabricConfig, FabricEvent, FabricKind, QueuePairSide, Spinner, VerbsOptions,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc::error::TryRecvError;
use tokio::sync::mpsc::UnboundedReceiver;
use tokio::time::timeout;

type Events = UnboundedReceiver<FabricEvent>;

const DEADLINE: Duration = Duration::from_secs(120);
/// Generous bound for noticing a vanished peer.
const LOSS_BOUND: Duration = Duration::from_secs(10);
/// A quiet period used to check that no unexpected event follows.
const QUIET: Duration = Duration::from_millis(300);
const SECRET: &[u8] = b"test job secret";

async fn within<F: Future>(f: F) -> F::Output {
    timeout(DEADLINE, f).await.expect("test deadline passed")
}

/// The backend under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Backend {
    Tcp,
    /// TCP with adaptive polling, as `cohortd` runs it: links that delivered within the
    /// budget are read directly instead of through the runtime's readiness events.
    TcpPolling,
    /// TCP with adaptive polling and the events handed to a handler by the task that
    /// read them (`AnyFabric::bind_handler`), as `cohortd` runs it. The suite's handler
    /// forwards them to a channel, so every test checks the handler's event stream.
    TcpHandler,
    Verbs,
    /// Verbs with adaptive polling and a handler, as `cohortd` runs it: a link that
    /// delivered within the budget polls its completion queue directly.
    VerbsPolling,
    /// Verbs busy-polling its completion queues (`COHORT_VERBS_POLL=1`, the lowest
    /// latency mode) with a handler: an outbound link's task polls on every turn only
    /// while a frame waits for a credit or a slot, and direct sends take completions
    /// in themselves.
    VerbsBusyPoll,
}

impl Backend {
    fn kind(self) -> FabricKind {
        match self {
            Backend::Tcp | Backend::TcpPolling | Backend::TcpHandler => FabricKind::Tcp,
            Backend::Verbs | Backend::VerbsPolling | Backend::VerbsBusyPoll => FabricKind::Verbs,
        }
    }

    /// `Some(b)` (one of the verbs backends) when a usable device exists; otherwise
    /// says why and returns `None` (or panics when the environment demands verbs).
    fn verbs_or_skip(b: Backend, test: &str) -> Option<Backend> {
        let opts = VerbsOptions::default().with_env().expect("verbs settings");
        match cohort_transport::probe_verbs(&opts) {
            Ok(_) => Some(b),
            Err(why) if std::env::var("COHORT_TEST_REQUIRE_VERBS").as_deref() == Ok("1") => {
                panic!("{test}: verbs required but unusable: {why}")
            }
            Err(why) => {
                eprintln!("skipping verbs::{test}: {why}");
                None
            }
        }
    }

    /// The address a test's node listens on. TCP: as written. Verbs: the RDMA
    /// addresses, chosen by the last octet (so distinct nodes of one test get distinct
    /// GIDs where there are enough).
    fn ip(self, ip: &str) -> String {
        if self.kind() != FabricKind::Verbs {
            return ip.to_string();
        }
        let addrs = std::env::var("COHORT_TEST_VERBS_ADDRS")
            .unwrap_or_else(|_| "192.168.78.1,192.168.78.2,192.168.78.3,192.168.78.4".to_string());
        let addrs: Vec<&str> = addrs.split(',').map(str::trim).collect();
        let last: usize = ip.rsplit('.').next().unwrap().parse().unwrap();
        addrs[(last + addrs.len() - 1) % addrs.len()].to_string()
    }

    /// A message count: the TCP one, or a smaller one for (emulated) verbs.
    fn count(self, tcp: u32, verbs: u32) -> u32 {
        match self {
            Backend::Tcp | Backend::TcpPolling | Backend::TcpHandler => tcp,
            Backend::Verbs | Backend::VerbsPolling | Backend::VerbsBusyPoll => verbs,
        }
    }

    /// Whether the bulk tests move their full volume (64 MiB payloads, long streams of
    /// multi-megabyte ones). The two polling verbs modes differ from `Verbs` only in
    /// how completions are waited for, so under emulation (where megabytes take
    /// seconds) they move half the stream and payloads of up to 4 MiB, still several
    /// RDMA reads each; `verbs::` covers the sizes and chunking in full.
    fn full_volume(self) -> bool {
        !matches!(self, Backend::VerbsPolling | Backend::VerbsBusyPoll)
    }

    /// A bulk test's count: [`Backend::count`], halved without the full volume.
    fn bulk_count(self, tcp: u32, verbs: u32) -> u32 {
        match self.full_volume() {
            true => self.count(tcp, verbs),
            false => self.count(tcp, verbs).div_ceil(2),
        }
    }

    async fn bind(self, cfg: FabricConfig) -> (AnyFabric, Events) {
        let (f, rx) = self.try_bind(cfg).await.unwrap();
        assert_eq!(f.backend(), self.kind().name());
        (f, rx)
    }

    async fn try_bind(self, cfg: FabricConfig) -> std::io::Result<(AnyFabric, Events)> {
        if !matches!(
            self,
            Backend::TcpHandler | Backend::VerbsPolling | Backend::VerbsBusyPoll
        ) {
            return AnyFabric::bind(self.kind(), cfg).await;
        }
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let handler = std::sync::Arc::new(move |ev| {
            let _ = tx.send(ev);
        });
        let f = AnyFabric::bind_handler(self.kind(), cfg, handler).await?;
        Ok((f, rx))
    }
}

/// One test of a TCP backend: `NAME` calling `super::NAME(Backend::BACKEND)`.
macro_rules! tcp_case {
    ($backend:ident, $name:ident) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() {
            super::$name(super::Backend::$backend).await
        }
    };
}

/// One test of a verbs backend: skipped (or failed, when the environment demands
/// verbs) without a usable device.
macro_rules! verbs_case {
    ($backend:ident, $name:ident) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() {
            if let Some(b) =
                super::Backend::verbs_or_skip(super::Backend::$backend, stringify!($name))
            {
                super::$name(b).await
            }
        }
    };
}

/// Generates `tcp::NAME`, `tcp_polling::NAME`, `tcp_handler::NAME`, `verbs::NAME`,
/// `verbs_polling::NAME` and `verbs_busy_poll::NAME` for each `async fn NAME(Backend)`
/// of the first list, and only the three verbs ones for the second (failures of the
/// verbs transport itself: TCP has nothing apart from its control connection to break).
macro_rules! conformance {
    ($($name:ident),* $(,)?; verbs only: $($verbs_name:ident),* $(,)?) => {
        mod tcp {
            $( tcp_case!(Tcp, $name); )*
        }
        mod tcp_polling {
            $( tcp_case!(TcpPolling, $name); )*
        }
        mod tcp_handler {
            $( tcp_case!(TcpHandler, $name); )*
        }
        mod verbs {
            $( verbs_case!(Verbs, $name); )*
            $( verbs_case!(Verbs, $verbs_name); )*
        }
        mod verbs_polling {
            $( verbs_case!(VerbsPolling, $name); )*
            $( verbs_case!(VerbsPolling, $verbs_name); )*
        }
        mod verbs_busy_poll {
            $( verbs_case!(VerbsBusyPoll, $name); )*
            $( verbs_case!(VerbsBusyPoll, $verbs_name); )*
        }
    };
}

conformance!(
    all_to_all_keeps_per_peer_order,
    sizes_round_trip_intact,
    concurrent_senders_deliver_exactly_once,
    mixed_size_bursts_keep_order_and_content,
    consecutive_bulk_payloads_keep_order,
    wrong_secret_is_refused,
    dropped_peer_is_reported_lost_once,
    a_peer_declared_lost_is_dropped_without_a_report,
    graceful_close_is_not_a_loss,
    bad_or_missing_hello_is_dropped,
    an_acceptor_waits_for_the_challenge_answer_as_long_as_the_connect_timeout,
    reconnects_to_a_restarted_peer,
    a_send_after_a_loss_does_not_queue_behind_a_stalled_attempt,
    connect_failure_and_local_errors,
    killed_peer_process_is_reported_lost,
    a_peer_that_never_answers_is_reported_unreachable,
    many_peers_at_once,
    local_tasks_serve_a_consumer_in_a_local_set,
    request_reply_keeps_posting_directly;
    verbs only:
    queue_pair_error_is_reported_lost_on_both_ends,
    receiving_queue_pair_error_is_reported_lost_on_both_ends,
    queue_pair_error_on_an_idle_link_is_found_by_the_next_send,
);

/// Moves `a`'s queue pair(s) to node 1 on `side` into the error state (as a failed port
/// would), with both processes and their TCP control connections still up.
fn break_queue_pair(a: &AnyFabric, side: QueuePairSide) {
    let AnyFabric::Verbs(v) = a else {
        panic!("a verbs test on {}", a.backend())
    };
    assert!(
        v.inject_queue_pair_error(1, side),
        "no established {side:?} link to node 1 to break"
    );
}

/// 5c. A queue pair that fails while both processes live (a port or cable failure: the
/// TCP control connections stay up) is a loss of the peer, reported once on each end
/// within the bound, as a dead process is; nothing hangs. (The posted receives flush
/// with errors at once, which the link's task finds.) Here the sending side's.
async fn queue_pair_error_is_reported_lost_on_both_ends(bk: Backend) {
    queue_pair_error_is_a_loss(bk, QueuePairSide::Outbound, ["127.0.5.21", "127.0.5.22"]).await
}

/// 5c'. The same for the queue pair that receives the peer's payloads.
async fn receiving_queue_pair_error_is_reported_lost_on_both_ends(bk: Backend) {
    queue_pair_error_is_a_loss(bk, QueuePairSide::Inbound, ["127.0.5.25", "127.0.5.26"]).await
}

async fn queue_pair_error_is_a_loss(bk: Backend, side: QueuePairSide, ips: [&str; 2]) {
    within(async {
        let (a, mut a_rx, _b, mut b_rx) = exchanged_pair(bk, ips).await;
        break_queue_pair(&a, side);
        let (peer, reason) = timeout(LOSS_BOUND, next_loss(&mut a_rx))
            .await
            .expect("the failed queue pair was not reported on its own end within the bound");
        assert_eq!(peer, 1);
        assert!(reason.contains("node 1"), "{reason}");
        let (peer, reason) = timeout(LOSS_BOUND, next_loss(&mut b_rx))
            .await
            .expect("the far end was not told within the bound");
        assert_eq!(peer, 0);
        assert!(reason.contains("node 0"), "{reason}");
        assert_quiet(&mut a_rx).await;
        assert_quiet(&mut b_rx).await;
        a.shutdown().await;
    })
    .await
}

/// 5d. The same failure found by a send: a payload sent to a failed queue pair is not
/// silently taken as sent; the loss is reported on both ends within the bound, and the
/// payload is never delivered.
async fn queue_pair_error_on_an_idle_link_is_found_by_the_next_send(bk: Backend) {
    within(async {
        let (a, mut a_rx, _b, mut b_rx) = exchanged_pair(bk, ["127.0.5.23", "127.0.5.24"]).await;
        break_queue_pair(&a, QueuePairSide::Outbound);
        // Sent at once after the failure: written through or queued, it cannot arrive.
        let _ = a.send(1, Bytes::from_static(b"into the void"));
        let (peer, _) = timeout(LOSS_BOUND, next_loss(&mut a_rx))
            .await
            .expect("the failed queue pair was not reported within the bound");
        assert_eq!(peer, 1);
        match timeout(LOSS_BOUND, next_event(&mut b_rx)).await {
            Ok(FabricEvent::PeerLost { peer, .. }) => assert_eq!(peer, 0),
            Ok(other) => panic!("the far end got {other:?} instead of the loss"),
            Err(_) => panic!("the far end was not told within the bound"),
        }
        assert_quiet(&mut a_rx).await;
        assert_quiet(&mut b_rx).await;
        a.shutdown().await;
    })
    .await
}

/// Two nodes that exchanged one message each way (links up in both directions).
async fn exchanged_pair(bk: Backend, ips: [&str; 2]) -> (AnyFabric, Events, AnyFabric, Events) {
    let mut nodes = cluster(bk, &ips).await;
    let (b, mut b_rx) = nodes.pop().unwrap();
    let (a, mut a_rx) = nodes.pop().unwrap();
    a.send(1, Bytes::from_static(b"ping")).unwrap();
    assert_eq!(
        next_message(&mut b_rx).await,
        (0, Bytes::from_static(b"ping"))
    );
    b.send(0, Bytes::from_static(b"pong")).unwrap();
    assert_eq!(
        next_message(&mut a_rx).await,
        (1, Bytes::from_static(b"pong"))
    );
    (a, a_rx, b, b_rx)
}

/// Must be called inside the test's runtime (a polling backend spawns its spinner).
fn config(b: Backend, node: u32, ip: &str, secret: &[u8]) -> FabricConfig {
    let ip = b.ip(ip);
    let mut cfg = FabricConfig::new(node, format!("{ip}:0").parse().unwrap(), secret.to_vec());
    if matches!(
        b,
        Backend::TcpPolling | Backend::TcpHandler | Backend::VerbsPolling | Backend::VerbsBusyPoll
    ) {
        let spinner = Spinner::new(Duration::from_micros(150));
        tokio::spawn(spinner.clone().run());
        cfg.spinner = Some(spinner);
    }
    // Set explicitly either way: the environment (COHORT_VERBS_POLL) must not decide.
    cfg.verbs.busy_poll = Some(b == Backend::VerbsBusyPoll);
    cfg
}

/// Binds one fabric per address (node i on ips[i]) and gives all the same peer table.
async fn cluster(b: Backend, ips: &[&str]) -> Vec<(AnyFabric, Events)> {
    cluster_with(b, ips, |_| {}).await
}

/// [`cluster`], with `tweak` applied to every node's configuration.
async fn cluster_with(
    b: Backend,
    ips: &[&str],
    tweak: impl Fn(&mut FabricConfig),
) -> Vec<(AnyFabric, Events)> {
    let mut out = Vec::new();
    for (i, ip) in ips.iter().enumerate() {
        let mut cfg = config(b, i as u32, ip, SECRET);
        tweak(&mut cfg);
        out.push(b.bind(cfg).await);
    }
    let peers: Vec<String> = out.iter().map(|(f, _)| f.local_addr()).collect();
    for (f, _) in &out {
        f.set_peers(peers.clone());
    }
    out
}

/// Binds at `cfg.listen`, retrying while a dropped fabric's listener still holds the
/// address (it goes away asynchronously).
async fn bind_when_free(bk: Backend, cfg: FabricConfig) -> (AnyFabric, Events) {
    loop {
        match bk.try_bind(cfg.clone()).await {
            Ok(bound) => return bound,
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => {
                tokio::time::sleep(Duration::from_millis(20)).await
            }
            Err(e) => panic!("rebind failed: {e}"),
        }
    }
}

async fn next_event(rx: &mut Events) -> FabricEvent {
    rx.recv().await.expect("event channel ended")
}

async fn next_message(rx: &mut Events) -> (u32, Bytes) {
    match next_event(rx).await {
        FabricEvent::Message { from, payload } => (from, payload),
        other => panic!("expected a message, got {other:?}"),
    }
}

async fn next_loss(rx: &mut Events) -> (u32, String) {
    let (peer, reason, _) = next_loss_kind(rx).await;
    (peer, reason)
}

/// The next loss, and whether it was reported as `unreachable`.
async fn next_loss_kind(rx: &mut Events) -> (u32, String, bool) {
    match next_event(rx).await {
        FabricEvent::PeerLost {
            peer,
            reason,
            unreachable,
        } => (peer, reason, unreachable),
        other => panic!("expected a peer loss, got {other:?}"),
    }
}

/// Asserts nothing arrives for a short while.
async fn assert_quiet(rx: &mut Events) {
    tokio::time::sleep(QUIET).await;
    match rx.try_recv() {
        Err(TryRecvError::Empty) | Err(TryRecvError::Disconnected) => {}
        Ok(ev) => panic!("unexpected event {ev:?}"),
    }
}

/// `len` bytes in which a lost, misplaced or altered chunk shows, and that a debug
/// build makes quickly: 4 KiB blocks of one fixed pattern (not periodic within a
/// block), each stamped with its index and `salt`. (A byte-at-a-time generator took
/// most of the bulk tests' time in the rxe job, a debug build under emulation.)
fn pattern(len: usize, salt: u32) -> Vec<u8> {
    const BLOCK: usize = 4096;
    static BASE: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    let base = BASE.get_or_init(|| (0..BLOCK).map(|i| (i * 7 + i / 251) as u8).collect());
    let mut v = Vec::with_capacity(len);
    let mut block = 0u32;
    while v.len() < len {
        let start = v.len();
        let take = (len - start).min(BLOCK);
        v.extend_from_slice(&base[..take]);
        // The block's index, then the salt, little-endian.
        let stamp = (u64::from(salt) << 32 | u64::from(block)).to_le_bytes();
        let n = take.min(stamp.len());
        v[start..start + n].copy_from_slice(&stamp[..n]);
        block += 1;
    }
    v
}

fn numbered(a: u32, b: u32) -> Bytes {
    let mut v = a.to_le_bytes().to_vec();
    v.extend_from_slice(&b.to_le_bytes());
    Bytes::from(v)
}

/// Takes the next message numbered by [`numbered`] off `rx`: it must come from node 0
/// and be the next of its sender (`next` counts per sender). Returns it with its
/// sender and number.
async fn next_in_order(rx: &mut Events, next: &mut HashMap<u32, u32>) -> (Bytes, u32, u32) {
    let (from, payload) = next_message(rx).await;
    assert_eq!(from, 0);
    let (sender, seq) = unnumber(&payload);
    let expected = next.entry(sender).or_default();
    assert_eq!(
        seq, *expected,
        "sender {sender}: duplicate, loss or reorder"
    );
    *expected += 1;
    (payload, sender, seq)
}

fn unnumber(p: &[u8]) -> (u32, u32) {
    (
        u32::from_le_bytes(p[..4].try_into().unwrap()),
        u32::from_le_bytes(p[4..8].try_into().unwrap()),
    )
}

/// 1. All-to-all (self included) among three nodes, per-sender order kept.
async fn all_to_all_keeps_per_peer_order(b: Backend) {
    within(async {
        let n = b.count(10_000, 300);
        let mut nodes = cluster(b, &["127.0.1.1", "127.0.1.2", "127.0.1.3"]).await;
        for (sender, (f, _)) in nodes.iter().enumerate() {
            assert_eq!(f.node(), sender as u32);
        }
        for seq in 0..n {
            for (sender, (f, _)) in nodes.iter().enumerate() {
                for to in 0..3 {
                    f.send(to, numbered(sender as u32, seq)).unwrap();
                }
            }
        }
        for (me, (_, rx)) in nodes.iter_mut().enumerate() {
            let mut next = [0u32; 3];
            for _ in 0..3 * n {
                let (from, payload) = next_message(rx).await;
                let (sender, seq) = unnumber(&payload);
                assert_eq!(from, sender, "node {me}: wrong sender id");
                assert_eq!(seq, next[from as usize], "node {me}: order from {from}");
                next[from as usize] += 1;
            }
            assert_eq!(next, [n; 3]);
        }
        for (f, rx) in &mut nodes {
            f.shutdown().await;
            assert_quiet(rx).await;
        }
    })
    .await
}

/// 2b. A request-reply exchange of small messages, longer than the receive depth (so
/// every send slot and credit is used several times over), goes through intact and in
/// order. On verbs busy-polling, sends post directly: an outbound link's task polls only
/// while it awaits completions, so a send that finds no free slot or credit must take
/// the link's completions in itself (they free slots and return credits) before it
/// queues. Without that, 3 of 48 sends queued here (`3ee78db`).
///
/// A send may still find no room after taking completions in: the peer's
/// acknowledgements have not come yet. That is timing, not a fault (once in a CI run, its
/// guest's vCPUs starved by a build on the host), so it is bounded, not forbidden: every
/// send is posted directly, or found the link busy, or queued after a take-in of its own.
///
/// On verbs, in every completion mode, each request and reply carries back the credit
/// for the message it answers, so the exchange needs no credit message at all (with
/// them, one in 8 payloads cost a second transfer: about 50 µs per hop in the rxe
/// guest when every payload did).
async fn request_reply_keeps_posting_directly(bk: Backend) {
    within(async {
        let (a, mut a_rx, b, echo) = echo_pair(bk, ["127.0.2.5", "127.0.2.6"]).await;
        // The first exchange sets the links up (its frames wait in the queues for that).
        a.send(1, numbered(0, 0)).unwrap();
        assert_eq!(next_message(&mut a_rx).await, (1, numbered(0, 0)));
        let stats = |f: &AnyFabric| match f {
            AnyFabric::Verbs(v) => Some(v.bulk_stats()),
            _ => None,
        };
        let (a0, b0) = (stats(&a), stats(&b));
        let rounds = 3 * cohort_transport::RECV_DEPTH as u64;
        for i in 1..=rounds as u32 {
            a.send(1, numbered(0, i)).unwrap();
            assert_eq!(next_message(&mut a_rx).await, (1, numbered(0, i)));
        }
        if let (Some(a0), Some(b0)) = (a0, b0) {
            for (side, before, after) in [
                ("requests", a0, stats(&a).unwrap()),
                ("replies", b0, stats(&b).unwrap()),
            ] {
                let messages = after.credit_messages - before.credit_messages;
                let carried = after.credits_carried - before.credits_carried;
                assert_eq!(
                    (messages, carried),
                    (0, rounds),
                    "{side}: credit messages and credits carried on payloads"
                );
            }
        }
        if bk == Backend::VerbsBusyPoll {
            for (side, before, after) in [
                ("requests", a0.unwrap(), stats(&a).unwrap()),
                ("replies", b0.unwrap(), stats(&b).unwrap()),
            ] {
                let posted = after.posted_by_send - before.posted_by_send;
                let busy = after.queued_link_busy - before.queued_link_busy;
                let take_ins = after.send_take_ins - before.send_take_ins;
                let no_room = after.queued_no_room - before.queued_no_room;
                let seen = format!(
                    "{side}: {posted} posted directly, {busy} found the link busy, \
                     {no_room} queued after {take_ins} take-ins, of {rounds}"
                );
                assert_eq!(posted + busy + no_room, rounds, "{seen}: others queued");
                assert!(no_room <= take_ins, "{seen}: queued without a take-in");
                assert!(no_room <= rounds / 8, "{seen}: take-ins free nothing");
            }
        }
        a.shutdown().await;
        b.shutdown().await;
        echo.await.unwrap();
        assert_quiet(&mut a_rx).await;
    })
    .await
}

/// Two nodes on `ips`: node 0 (returned with its events) and node 1, which echoes
/// everything back to its sender from the returned task (ends once node 1 shuts down).
async fn echo_pair(
    bk: Backend,
    ips: [&str; 2],
) -> (AnyFabric, Events, AnyFabric, tokio::task::JoinHandle<()>) {
    let mut nodes = cluster(bk, &ips).await;
    let (b, mut b_rx) = nodes.pop().unwrap();
    let (a, a_rx) = nodes.pop().unwrap();
    let echo_from = b.clone();
    let echo = tokio::spawn(async move {
        while let Some(FabricEvent::Message { from, payload }) = b_rx.recv().await {
            let _ = echo_from.send(from, payload);
        }
    });
    (a, a_rx, b, echo)
}

/// 2. Payloads of 0 B .. 64 MiB go there and back intact.
async fn sizes_round_trip_intact(bk: Backend) {
    within(async {
        // Node 1 echoes everything back to node 0.
        let (a, mut a_rx, b, echo) = echo_pair(bk, ["127.0.2.1", "127.0.2.2"]).await;
        let sizes: &[usize] = match bk {
            Backend::Tcp | Backend::TcpPolling | Backend::TcpHandler => {
                &[0, 1, 64 << 10, 4 << 20, 64 << 20]
            }
            // Around the eager/bulk boundary (one 64 KiB slot), then bulk payloads
            // read in one and in several RDMA reads.
            Backend::Verbs | Backend::VerbsPolling | Backend::VerbsBusyPoll => &[
                0,
                1,
                (64 << 10) - 1,
                64 << 10,
                (64 << 10) + 1,
                3 << 20,
                (4 << 20) + 3,
                64 << 20,
            ],
        };
        let sizes = match bk.full_volume() {
            true => sizes,
            false => &sizes[..sizes.len() - 1],
        };
        for &size in sizes {
            let payload = Bytes::from(pattern(size, size as u32));
            a.send(1, payload.clone()).unwrap();
            let (from, back) = next_message(&mut a_rx).await;
            assert_eq!(from, 1);
            assert_eq!(back.len(), size);
            assert!(back == payload, "{size}-byte payload corrupted");
        }
        if let (AnyFabric::Verbs(v), AnyFabric::Verbs(w)) = (&a, &b) {
            // Eager payloads sent to an idle link are posted by `send` itself (all but
            // the first of each side, unless its link's task held the link just then):
            // 1, 64 KiB - 1 and 64 KiB here, and the echoes of those and of 0 B.
            assert!(v.bulk_stats().posted_by_send >= 1, "{:?}", v.bulk_stats());
            assert!(w.bulk_stats().posted_by_send >= 1, "{:?}", w.bulk_stats());
            // Large payloads went by RDMA read; one sent three more times (and a slice
            // of it) is registered once.
            let before = v.bulk_stats();
            let bulk = sizes.iter().filter(|&&s| s > 64 << 10).count() as u64;
            assert!(before.sent_by_read >= bulk, "{bulk} bulk sizes: {before:?}");
            let payload = Bytes::from(pattern(1 << 20, 13));
            for p in [
                payload.clone(),
                payload.clone(),
                payload.slice(1..(1 << 19)),
            ] {
                a.send(1, p.clone()).unwrap();
                assert!(next_message(&mut a_rx).await.1 == p);
            }
            let after = v.bulk_stats();
            assert_eq!(after.sent_by_read, before.sent_by_read + 3, "{after:?}");
            assert_eq!(
                after.send_registrations,
                before.send_registrations + 1,
                "{after:?}"
            );
        }
        a.shutdown().await;
        b.shutdown().await;
        echo.await.unwrap();
    })
    .await
}

/// 3. Several tasks sending to one peer: each message exactly once, each task's in order.
async fn concurrent_senders_deliver_exactly_once(b: Backend) {
    within(async {
        const TASKS: u32 = 8;
        let per_task = b.count(2_000, 100);
        let mut nodes = cluster(b, &["127.0.3.1", "127.0.3.2"]).await;
        let a = nodes[0].0.clone();
        let senders: Vec<_> = (0..TASKS)
            .map(|task| {
                let a = a.clone();
                tokio::spawn(async move {
                    for seq in 0..per_task {
                        a.send(1, numbered(task, seq)).unwrap();
                        if seq % 64 == 0 {
                            tokio::task::yield_now().await;
                        }
                    }
                })
            })
            .collect();
        for s in senders {
            s.await.unwrap();
        }
        let rx = &mut nodes[1].1;
        let mut next: HashMap<u32, u32> = HashMap::new();
        for _ in 0..TASKS * per_task {
            next_in_order(rx, &mut next).await;
        }
        assert!(next.values().all(|&n| n == per_task));
        assert_quiet(rx).await;
        for (f, _) in &nodes {
            f.shutdown().await;
        }
    })
    .await
}

/// 3b. Bursts mixing tiny and multi-megabyte payloads, from several threads at once,
///     without waiting for the receiver: the socket fills (TCP) or the credits run
///     out (verbs), so sends meet a connection with frames still queued or written in
///     part (a send writes through to the socket, or posts to the queue pair itself,
///     only when nothing is pending). Every payload arrives once, intact, each
///     sender's in order.
async fn mixed_size_bursts_keep_order_and_content(b: Backend) {
    within(async {
        const SENDERS: u32 = 3;
        const SIZES: [usize; 6] = [8, 200_000, 9, 3_000_000, 8, 60_000];
        let per_sender = b.bulk_count(60, 12);
        let mut nodes = cluster(b, &["127.0.3.5", "127.0.3.6"]).await;
        let a = nodes[0].0.clone();
        let payload = |sender: u32, seq: u32| -> Bytes {
            let size = SIZES[seq as usize % SIZES.len()];
            let mut v = numbered(sender, seq).to_vec();
            v.extend_from_slice(&pattern(size - 8, seq ^ (sender << 8)));
            Bytes::from(v)
        };
        // Plain threads, so sends really race with the connection tasks' writes.
        let senders: Vec<_> = (0..SENDERS)
            .map(|sender| {
                let a = a.clone();
                std::thread::spawn(move || {
                    for seq in 0..per_sender {
                        a.send(1, payload(sender, seq)).unwrap();
                    }
                })
            })
            .collect();
        let rx = &mut nodes[1].1;
        let mut next: HashMap<u32, u32> = HashMap::new();
        for _ in 0..SENDERS * per_sender {
            let (got, sender, seq) = next_in_order(rx, &mut next).await;
            assert!(
                got == payload(sender, seq),
                "sender {sender} message {seq} ({} bytes) corrupted",
                got.len()
            );
        }
        for s in senders {
            s.join().unwrap();
        }
        assert_quiet(rx).await;
        for (f, _) in &nodes {
            f.shutdown().await;
        }
    })
    .await
}

/// 3c. A stream of bulk payloads (the RDMA-read path on verbs) sent back to back, then
///     a small one: every payload arrives once, intact, in order. On verbs the
///     receiver reads descriptors that follow one another at once (at least one read
///     started while another was in progress), and still delivers in order.
async fn consecutive_bulk_payloads_keep_order(b: Backend) {
    within(async {
        const SIZES: [usize; 4] = [(1 << 20) + 5, 3 << 20, (64 << 10) + 1, 2 << 20];
        // Not halved in the polling modes (`bulk_count`): with 6 payloads a busy-polling
        // receiver could finish each read before the next descriptor came, and the
        // overlap checked below was down to timing (it failed once in CI, `750ce6e`).
        let count = b.count(24, 12);
        let mut nodes = cluster(b, &["127.0.3.9", "127.0.3.10"]).await;
        let a = nodes[0].0.clone();
        let payload = |seq: u32| -> Bytes {
            let size = if seq == count {
                8
            } else {
                SIZES[seq as usize % SIZES.len()]
            };
            let mut v = numbered(0, seq).to_vec();
            v.extend_from_slice(&pattern(size - 8, seq * 31));
            Bytes::from(v)
        };
        for seq in 0..=count {
            a.send(1, payload(seq)).unwrap();
        }
        let receiver = nodes[1].0.clone();
        let rx = &mut nodes[1].1;
        let mut next: HashMap<u32, u32> = HashMap::new();
        for _ in 0..=count {
            let (got, sender, seq) = next_in_order(rx, &mut next).await;
            assert_eq!(sender, 0);
            assert!(
                got == payload(seq),
                "payload {seq} ({} bytes) corrupted",
                got.len()
            );
        }
        if let AnyFabric::Verbs(v) = &receiver {
            let stats = v.bulk_stats();
            assert!(stats.read_alongside >= 1, "{stats:?}");
        }
        assert_quiet(rx).await;
        for (f, _) in &nodes {
            f.shutdown().await;
        }
    })
    .await
}

/// 4. A peer with another secret is refused: no message gets through, and the sender
///    hears about it with the peer named and the secret not echoed.
async fn wrong_secret_is_refused(bk: Backend) {
    within(async {
        let (a, mut a_rx) = bk.bind(config(bk, 0, "127.0.4.1", b"right-secret")).await;
        let (b, mut b_rx) = bk.bind(config(bk, 1, "127.0.4.2", b"wrong-secret")).await;
        let peers = vec![a.local_addr(), b.local_addr()];
        a.set_peers(peers.clone());
        b.set_peers(peers);

        for attempt in 0..2 {
            a.send(1, Bytes::from_static(b"let me in")).unwrap();
            let (peer, reason, unreachable) = next_loss_kind(&mut a_rx).await;
            assert_eq!(peer, 1);
            assert!(reason.contains("node 1"), "attempt {attempt}: {reason}");
            assert!(!unreachable, "a refusal is an answer: {reason}");
            assert!(reason.contains("refused"), "attempt {attempt}: {reason}");
            assert!(reason.contains("secret"), "attempt {attempt}: {reason}");
            assert!(!reason.contains("right-secret") && !reason.contains("wrong-secret"));
        }
        assert!(
            matches!(b_rx.try_recv(), Err(TryRecvError::Empty)),
            "the refusing node must deliver nothing"
        );
        a.shutdown().await;
        b.shutdown().await;
    })
    .await
}

/// 5a. A peer that vanishes without `close` is reported lost, once.
async fn dropped_peer_is_reported_lost_once(b: Backend) {
    within(async {
        let mut nodes = cluster(b, &["127.0.5.1", "127.0.5.2"]).await;
        let (b, _b_rx) = nodes.pop().unwrap();
        let (a, mut a_rx) = nodes.pop().unwrap();
        // Connections in both directions.
        a.send(1, Bytes::from_static(b"ping")).unwrap();
        b.send(0, Bytes::from_static(b"pong")).unwrap();
        assert_eq!(next_message(&mut a_rx).await.0, 1);

        drop(b);
        let (peer, reason) = timeout(LOSS_BOUND, next_loss(&mut a_rx))
            .await
            .expect("loss not reported within the bound");
        assert_eq!(peer, 1);
        assert!(reason.contains("node 1"), "{reason}");
        assert_quiet(&mut a_rx).await;
        a.shutdown().await;
    })
    .await
}

/// 5a''. A peer the owner declares lost (`Fabric::declare_lost`: its failure
/// detector found it silent) loses its connections at once, without a goodbye: the
/// peer sees them break and reports a loss, the declaring side reports nothing, and a
/// later payload to it is dropped rather than delivered over a new connection of the
/// same incarnation.
async fn a_peer_declared_lost_is_dropped_without_a_report(b: Backend) {
    within(async {
        let mut nodes = cluster(b, &["127.0.5.13", "127.0.5.14"]).await;
        let (b, mut b_rx) = nodes.pop().unwrap();
        let (a, mut a_rx) = nodes.pop().unwrap();
        // Connections in both directions.
        a.send(1, Bytes::from_static(b"ping")).unwrap();
        b.send(0, Bytes::from_static(b"pong")).unwrap();
        assert_eq!(next_message(&mut a_rx).await.0, 1);
        assert_eq!(next_message(&mut b_rx).await.0, 0);

        a.declare_lost(1);
        let (peer, _) = timeout(LOSS_BOUND, next_loss(&mut b_rx))
            .await
            .expect("the declared peer did not see its connections break");
        assert_eq!(peer, 0);
        a.send(1, Bytes::from_static(b"after")).unwrap();
        assert_quiet(&mut a_rx).await;
        assert_quiet(&mut b_rx).await;
        a.shutdown().await;
        b.shutdown().await;
    })
    .await
}

/// 5a'. With `local_tasks` (how `cohortd` binds: its consumer runs in a `LocalSet`) the
/// connection tasks run in that `LocalSet`: messages flow both ways in order, a dropped
/// peer is reported lost once, and shutdown is quiet.
async fn local_tasks_serve_a_consumer_in_a_local_set(bk: Backend) {
    within(tokio::task::LocalSet::new().run_until(async {
        let mut nodes = cluster_with(bk, &["127.0.5.5", "127.0.5.6"], |cfg| {
            cfg.local_tasks = true
        })
        .await;
        let (b, mut b_rx) = nodes.pop().unwrap();
        let (a, mut a_rx) = nodes.pop().unwrap();
        let n = bk.count(1000, 100);
        for seq in 0..n {
            a.send(1, numbered(0, seq)).unwrap();
            b.send(0, numbered(1, seq)).unwrap();
        }
        for (rx, from) in [(&mut a_rx, 1), (&mut b_rx, 0)] {
            for seq in 0..n {
                let (sender, payload) = next_message(rx).await;
                assert_eq!((sender, unnumber(&payload)), (from, (from, seq)));
            }
        }
        drop(b);
        let (peer, _) = timeout(LOSS_BOUND, next_loss(&mut a_rx))
            .await
            .expect("loss not reported within the bound");
        assert_eq!(peer, 1);
        assert_quiet(&mut a_rx).await;
        a.shutdown().await;
    }))
    .await
}

/// 5b. A peer that closes gracefully is not reported lost.
async fn graceful_close_is_not_a_loss(b: Backend) {
    within(async {
        let mut nodes = cluster(b, &["127.0.5.11", "127.0.5.12"]).await;
        let (d, mut d_rx) = nodes.pop().unwrap();
        let (c, mut c_rx) = nodes.pop().unwrap();
        c.send(1, Bytes::from_static(b"to d")).unwrap();
        d.send(0, Bytes::from_static(b"to c")).unwrap();
        assert_eq!(next_message(&mut d_rx).await.0, 0);
        assert_eq!(next_message(&mut c_rx).await.0, 1);

        // Messages queued before close are still delivered.
        c.send(1, Bytes::from_static(b"last words")).unwrap();
        c.shutdown().await;
        assert!(matches!(
            c.send(1, Bytes::new()),
            Err(cohort_transport::FabricError::Closed)
        ));
        assert_eq!(
            next_message(&mut d_rx).await,
            (0, Bytes::from_static(b"last words"))
        );
        assert_quiet(&mut d_rx).await;
        // The closed node's event stream ends.
        assert!(c_rx.recv().await.is_none());
        d.shutdown().await;
    })
    .await
}

/// 6. A client that passes the handshake and then announces an oversized frame loses
/// its connection; the fabric keeps serving another peer.
/// (TCP only: it speaks the TCP frame format on a raw socket.)
#[tokio::test]
async fn oversized_frame_closes_only_that_connection() {
    within(async {
        const MAX: usize = 1 << 20;
        let tcp = Backend::Tcp;
        let mut a_cfg = config(tcp, 0, "127.0.6.1", SECRET);
        a_cfg.max_frame = MAX;
        let (a, mut a_rx) = tcp.bind(a_cfg).await;
        let (b, _b_rx) = tcp.bind(config(tcp, 2, "127.0.6.2", SECRET)).await;
        let peers = vec![a.local_addr(), "127.0.6.3:1".into(), b.local_addr()];
        a.set_peers(peers.clone());
        b.set_peers(peers);

        let mut raw = tokio::net::TcpStream::connect(a.local_addr())
            .await
            .unwrap();
        let hello = raw_hello(1, 0);
        raw.write_all(&hello).await.unwrap();
        let challenge = read_challenge(&mut raw).await;
        assert!(auth::acceptor_holds(SECRET, &hello, &challenge));
        let proof = auth::connector_proof(SECRET, &hello, &challenge);
        raw.write_all(&wire::encode_proof(&proof)).await.unwrap();
        let reply = read_reply(&mut raw).await;
        assert!(matches!(reply, Reply::Accept { node: 0, .. }), "{reply:?}");

        raw.write_all(&wire::data_header(2)).await.unwrap();
        raw.write_all(b"ok").await.unwrap();
        assert_eq!(
            next_message(&mut a_rx).await,
            (1, Bytes::from_static(b"ok"))
        );

        b.send(0, Bytes::from_static(b"before")).unwrap();
        assert_eq!(
            next_message(&mut a_rx).await,
            (2, Bytes::from_static(b"before"))
        );

        raw.write_all(&((MAX + 1) as u32).to_le_bytes())
            .await
            .unwrap();
        let (peer, reason) = next_loss(&mut a_rx).await;
        assert_eq!(peer, 1);
        assert!(reason.contains("exceeds"), "{reason}");
        let mut sink = [0u8; 16];
        match raw.read(&mut sink).await {
            Ok(0) | Err(_) => {}
            Ok(n) => panic!("connection still open, read {n} bytes"),
        }

        b.send(0, Bytes::from_static(b"after")).unwrap();
        assert_eq!(
            next_message(&mut a_rx).await,
            (2, Bytes::from_static(b"after"))
        );
        a.shutdown().await;
        b.shutdown().await;
    })
    .await
}

/// A hello from node `node` to node `expected`, as a raw TCP-backend connector sends it.
fn raw_hello(node: u32, expected: u32) -> [u8; HELLO_LEN] {
    backend_hello(Backend::Tcp, node, expected)
}

/// [`raw_hello`] of `b`'s wire version (a verbs node refuses a TCP node's hello).
fn backend_hello(b: Backend, node: u32, expected: u32) -> [u8; HELLO_LEN] {
    let wire_version = match b.kind() {
        FabricKind::Verbs => VERBS_WIRE_VERSION,
        _ => WIRE_VERSION,
    };
    Hello {
        wire_version,
        proto_version: cohort_proto::PROTOCOL_VERSION,
        node,
        expected,
        incarnation: 42,
        nonce: auth::nonce().unwrap(),
    }
    .encode()
}

async fn read_reply(raw: &mut tokio::net::TcpStream) -> Reply {
    let mut fixed = [0u8; REPLY_FIXED_LEN];
    raw.read_exact(&mut fixed).await.unwrap();
    let head = Reply::decode_head(&fixed).unwrap();
    let mut rest = vec![0u8; head.len];
    raw.read_exact(&mut rest).await.unwrap();
    Reply::from_parts(head, &rest)
}

async fn read_challenge(raw: &mut tokio::net::TcpStream) -> Challenge {
    match read_reply(raw).await {
        Reply::Challenge(c) => c,
        other => panic!("expected a challenge, got {other:?}"),
    }
}

/// 4b. The job secret never travels: everything a connector sends before it is
/// accepted is recorded by a listener posing as its peer, which then answers with a
/// challenge it cannot prove (it does not hold the secret). The connector reports a
/// refusal naming the secret, and the secret is nowhere in what it sent.
/// (TCP only: the verbs backend runs the same handshake code over TCP.)
#[tokio::test]
async fn the_secret_never_travels_and_an_impostor_acceptor_is_refused() {
    within(async {
        let tcp = Backend::Tcp;
        let impostor = tokio::net::TcpListener::bind("127.0.4.12:0").await.unwrap();
        let impostor_addr = impostor.local_addr().unwrap().to_string();
        let (a, mut a_rx) = tcp.bind(config(tcp, 0, "127.0.4.11", SECRET)).await;
        a.set_peers(vec![a.local_addr(), impostor_addr]);
        a.send(1, Bytes::from_static(b"for node 1 only")).unwrap();
        let (mut conn, _) = impostor.accept().await.unwrap();
        let mut hello = [0u8; HELLO_LEN];
        conn.read_exact(&mut hello).await.unwrap();
        let decoded = Hello::decode(&hello).unwrap();
        assert_eq!((decoded.node, decoded.expected), (0, 1));
        // A challenge made with a guess of the secret.
        let nonce = [3u8; NONCE_LEN];
        let guess = Challenge {
            node: 1,
            nonce,
            proof: auth::acceptor_proof(b"a guess", &hello, 1, &nonce),
        };
        conn.write_all(&Reply::Challenge(guess).encode())
            .await
            .unwrap();
        let mut sent = hello.to_vec();
        let mut rest = Vec::new();
        let _ = timeout(LOSS_BOUND, conn.read_to_end(&mut rest)).await;
        sent.extend_from_slice(&rest);
        assert!(
            rest.is_empty(),
            "the connector answered an unproven challenge with {} bytes",
            rest.len()
        );
        assert!(!sent.windows(SECRET.len()).any(|w| w == SECRET));
        let (peer, reason, unreachable) = next_loss_kind(&mut a_rx).await;
        assert_eq!(peer, 1);
        assert!(!unreachable, "{reason}");
        assert!(
            reason.contains("refused") && reason.contains("secret"),
            "{reason}"
        );
        a.shutdown().await;
    })
    .await
}

/// 4c. A connector cannot pass with an answer recorded from another connection: the
/// acceptor's nonce is fresh each time, so the earlier proof does not fit.
#[tokio::test]
async fn a_replayed_proof_is_refused() {
    within(async {
        let tcp = Backend::Tcp;
        let (a, _a_rx) = tcp.bind(config(tcp, 0, "127.0.4.21", SECRET)).await;
        a.set_peers(vec![a.local_addr(), "127.0.4.22:1".into()]);
        // A genuine exchange, recorded.
        let hello = raw_hello(1, 0);
        let mut first = tokio::net::TcpStream::connect(a.local_addr())
            .await
            .unwrap();
        first.write_all(&hello).await.unwrap();
        let challenge = read_challenge(&mut first).await;
        let proof = wire::encode_proof(&auth::connector_proof(SECRET, &hello, &challenge));
        first.write_all(&proof).await.unwrap();
        assert!(matches!(read_reply(&mut first).await, Reply::Accept { .. }));
        drop(first);
        // The same hello and proof again, without the secret.
        let mut replay = tokio::net::TcpStream::connect(a.local_addr())
            .await
            .unwrap();
        replay.write_all(&hello).await.unwrap();
        let fresh = read_challenge(&mut replay).await;
        assert_ne!(fresh.nonce, challenge.nonce);
        replay.write_all(&proof).await.unwrap();
        match read_reply(&mut replay).await {
            Reply::Refuse { reason, .. } => assert!(reason.contains("secret"), "{reason}"),
            other => panic!("a replayed proof was answered with {other:?}"),
        }
        a.shutdown().await;
    })
    .await
}

/// Connections that never complete a proper hello are dropped, silently for the owner.
async fn bad_or_missing_hello_is_dropped(b: Backend) {
    within(async {
        let mut cfg = config(b, 0, "127.0.6.11", SECRET);
        // The silent connection is dropped after this long.
        cfg.connect_timeout = Duration::from_secs(1);
        let (a, mut a_rx) = b.bind(cfg).await;
        a.set_peers(vec![a.local_addr(), "127.0.6.12:1".into()]);

        let mut garbage = tokio::net::TcpStream::connect(a.local_addr())
            .await
            .unwrap();
        garbage.write_all(&[0x55; 64]).await.unwrap();
        let mut silent = tokio::net::TcpStream::connect(a.local_addr())
            .await
            .unwrap();
        let mut sink = [0u8; 16];
        for stream in [&mut garbage, &mut silent] {
            // Closed without a reply (the silent one after the hello timeout).
            match stream.read(&mut sink).await {
                Ok(0) | Err(_) => {}
                Ok(n) => panic!("unexpected {n}-byte answer"),
            }
        }
        assert!(matches!(a_rx.try_recv(), Err(TryRecvError::Empty)));
        a.shutdown().await;
    })
    .await
}

/// Node 0 on `ip` with connect timeout `limit`, and a raw connection to it that sent
/// `hello` (node 1's) and read the challenge.
async fn challenged(
    b: Backend,
    ip: &str,
    limit: Duration,
    hello: &[u8; HELLO_LEN],
) -> (AnyFabric, Events, tokio::net::TcpStream, Challenge) {
    let mut cfg = config(b, 0, ip, SECRET);
    cfg.connect_timeout = limit;
    let (a, a_rx) = b.bind(cfg).await;
    // Node 1's address is never used: node 0 only accepts here.
    a.set_peers(vec![a.local_addr(), "127.0.6.14:1".into()]);
    let mut raw = tokio::net::TcpStream::connect(a.local_addr())
        .await
        .unwrap();
    raw.write_all(hello).await.unwrap();
    let challenge = read_challenge(&mut raw).await;
    (a, a_rx, raw, challenge)
}

/// An acceptor with a 30 s connect timeout accepts a connector that answers its
/// challenge after 6 s (`slow_hello`: the connector's hello, node 1 to node 0).
async fn slow_connector_is_accepted(b: Backend, slow_hello: [u8; HELLO_LEN]) {
    let limit = Duration::from_secs(30);
    let (a, _a_rx, mut slow, challenge) = challenged(b, "127.0.6.13", limit, &slow_hello).await;
    tokio::time::sleep(Duration::from_secs(6)).await;
    let proof = wire::encode_proof(&auth::connector_proof(SECRET, &slow_hello, &challenge));
    slow.write_all(&proof).await.unwrap();
    match read_reply(&mut slow).await {
        Reply::Accept { node, .. } => assert_eq!(node, 0),
        other => panic!("a connector answering after 6 s got {other:?}"),
    }
    drop(slow);
    a.shutdown().await;
}

/// The acceptor's wait for each handshake step is `FabricConfig::connect_timeout`, the
/// bound its connectors have on the whole attempt. It used to be a fixed 5 s: under
/// emulation (the rxe CI job) a connector starved of CPU for longer was refused, and a
/// refusal counts as the acceptor's loss at the connector, so a live node server was
/// declared lost. Here a raw connector answers the challenge after 6 s and is accepted
/// (in the plain modes only: the polling ones share the handshake code, and under
/// emulation every second counts); one that never answers an acceptor with a short
/// timeout is refused, the reason naming that timeout.
async fn an_acceptor_waits_for_the_challenge_answer_as_long_as_the_connect_timeout(b: Backend) {
    let hello = |node, expected| backend_hello(b, node, expected);
    within(async {
        if matches!(b, Backend::Tcp | Backend::Verbs) {
            slow_connector_is_accepted(b, hello(1, 0)).await;
        }
        let limit = Duration::from_secs(1);
        let (c, _c_rx, mut mute, _) = challenged(b, "127.0.6.15", limit, &hello(1, 0)).await;
        match read_reply(&mut mute).await {
            Reply::Refuse { node, reason } => {
                assert_eq!(node, 0);
                assert!(
                    reason.contains("no answer to the challenge within 1s"),
                    "{reason}"
                );
            }
            other => panic!("a connector that never answered got {other:?}"),
        }
        c.shutdown().await;
    })
    .await
}

/// 7. After a peer restarts on the same address, sends reach the new incarnation.
async fn reconnects_to_a_restarted_peer(bk: Backend) {
    within(async {
        let mut nodes = cluster(bk, &["127.0.7.1", "127.0.7.2"]).await;
        let (b, _b_rx) = nodes.pop().unwrap();
        let (a, mut a_rx) = nodes.pop().unwrap();
        let peers = vec![a.local_addr(), b.local_addr()];
        a.send(1, Bytes::from_static(b"one")).unwrap();
        b.send(0, Bytes::from_static(b"hi")).unwrap();
        assert_eq!(next_message(&mut a_rx).await.0, 1);

        drop(b);
        assert_eq!(next_loss(&mut a_rx).await.0, 1);

        let mut b_cfg = config(bk, 1, "127.0.7.2", SECRET);
        b_cfg.listen = peers[1].parse().unwrap();
        let (b2, mut b2_rx) = bind_when_free(bk, b_cfg).await;
        assert_eq!(b2.local_addr(), peers[1]);
        b2.set_peers(peers);

        a.send(1, Bytes::from_static(b"two")).unwrap();
        assert_eq!(
            next_message(&mut b2_rx).await,
            (0, Bytes::from_static(b"two"))
        );
        b2.send(0, Bytes::from_static(b"back")).unwrap();
        assert_eq!(
            next_message(&mut a_rx).await,
            (1, Bytes::from_static(b"back"))
        );
        b2.shutdown().await;
        assert_quiet(&mut a_rx).await;
        a.shutdown().await;
    })
    .await
}

/// 7b. A send made after the PeerLost event reaches the restarted peer even when an
/// attempt to connect to the lost peer, begun before the loss, is still pending: the
/// attempt is retired, not reused. (It used to swallow such a send when it failed — a
/// 1-in-100 hang of `reconnects_to_a_restarted_peer` under load; here it is forced.)
async fn a_send_after_a_loss_does_not_queue_behind_a_stalled_attempt(bk: Backend) {
    within(async {
        // Node 1's address in node 0's table is first a listener of ours that accepts
        // node 0's connection and never answers its handshake.
        let stall = tokio::net::TcpListener::bind(format!("{}:0", bk.ip("127.0.9.2")))
            .await
            .unwrap();
        let node1_addr = stall.local_addr().unwrap().to_string();
        let (a, mut a_rx) = bk.bind(config(bk, 0, "127.0.9.1", SECRET)).await;
        let (b, _b_rx) = bk.bind(config(bk, 1, "127.0.9.3", SECRET)).await;
        let table = vec![a.local_addr(), node1_addr.clone()];
        a.set_peers(table.clone());
        b.set_peers(vec![a.local_addr(), b.local_addr()]);
        // Node 0's attempt to reach node 1 stalls in the handshake...
        a.send(1, Bytes::from_static(b"in flight")).unwrap();
        let (stalled, _) = timeout(LOSS_BOUND, stall.accept())
            .await
            .expect("node 0 connects to the address in its table")
            .unwrap();
        // ...while node 1 reaches node 0 (a link node 0 accepts).
        b.send(0, Bytes::from_static(b"hi")).unwrap();
        assert_eq!(next_message(&mut a_rx).await.0, 1);
        // Node 1 dies; node 0 notices on the accepted link.
        drop(b);
        assert_eq!(next_loss(&mut a_rx).await.0, 1);
        // Node 1 restarts at the address in node 0's table (the stalled connection
        // stays open meanwhile), and node 0 sends after the loss.
        drop(stall);
        let mut b2_cfg = config(bk, 1, "127.0.9.2", SECRET);
        b2_cfg.listen = node1_addr.parse().unwrap();
        let (b2, mut b2_rx) = bind_when_free(bk, b2_cfg).await;
        b2.set_peers(table);
        a.send(1, Bytes::from_static(b"after the loss")).unwrap();
        // The old attempt now fails: it must not take the later send with it.
        drop(stalled);
        let got = timeout(LOSS_BOUND, next_message(&mut b2_rx))
            .await
            .expect("the send made after the loss never reached the restarted node 1");
        assert_eq!(got, (0, Bytes::from_static(b"after the loss")));
        // One crash, one PeerLost.
        assert_quiet(&mut a_rx).await;
        b2.shutdown().await;
        a.shutdown().await;
    })
    .await
}

/// Unreachable peers are reported with the address; local misuse is a typed error.
async fn connect_failure_and_local_errors(b: Backend) {
    within(async {
        let mut cfg = config(b, 0, "127.0.8.1", SECRET);
        cfg.max_frame = 1024;
        let (a, mut a_rx) = b.bind(cfg).await;

        // Self-sends work before any peer table, in order.
        for i in 0..3u8 {
            a.send(0, Bytes::from(vec![i])).unwrap();
        }
        for i in 0..3u8 {
            assert_eq!(next_message(&mut a_rx).await, (0, Bytes::from(vec![i])));
        }
        let e = a.send(1, Bytes::new()).unwrap_err();
        assert!(
            matches!(
                e,
                cohort_transport::FabricError::UnknownPeer { peer: 1, known: 0 }
            ),
            "{e}"
        );

        // A port nobody listens on.
        let closed = std::net::TcpListener::bind(format!("{}:0", b.ip("127.0.8.2"))).unwrap();
        let dead_addr = closed.local_addr().unwrap().to_string();
        drop(closed);
        a.set_peers(vec![a.local_addr(), dead_addr.clone()]);
        let e = a.send(1, Bytes::from(vec![0; 1025])).unwrap_err();
        assert!(e.to_string().contains("node 1"), "{e}");
        a.send(1, Bytes::from_static(b"into the void")).unwrap();
        let (peer, reason) = next_loss(&mut a_rx).await;
        assert_eq!(peer, 1);
        assert!(reason.contains(&dead_addr), "{reason}");

        a.close();
        assert!(matches!(
            a.send(0, Bytes::new()),
            Err(cohort_transport::FabricError::Closed)
        ));
        assert!(a_rx.recv().await.is_none());
    })
    .await
}

/// 5e. A peer that never answers (its kernel accepts the connection, nothing reads
/// it: a frozen or wedged process) is reported lost within the connect timeout, as
/// unreachable: its process may still run. (Set apart from losses that prove the
/// process gone, which the node server acts on at once; see `FabricEvent::PeerLost`.)
async fn a_peer_that_never_answers_is_reported_unreachable(b: Backend) {
    within(async {
        let mut cfg = config(b, 0, "127.0.9.5", SECRET);
        cfg.connect_timeout = Duration::from_millis(500);
        let (a, mut a_rx) = b.bind(cfg).await;
        // Listening, never accepting: the kernel completes the handshake, no hello reply.
        let mute = std::net::TcpListener::bind(format!("{}:0", b.ip("127.0.9.6"))).unwrap();
        let mute_addr = mute.local_addr().unwrap().to_string();
        a.set_peers(vec![a.local_addr(), mute_addr.clone()]);
        a.send(1, Bytes::from_static(b"anyone there?")).unwrap();
        let (peer, reason, unreachable) = timeout(LOSS_BOUND, next_loss_kind(&mut a_rx))
            .await
            .expect("a peer that never answers was not reported within the bound");
        assert_eq!(peer, 1);
        assert!(reason.contains(&mute_addr), "{reason}");
        assert!(reason.contains("timed out"), "{reason}");
        assert!(
            unreachable,
            "no answer is reported as unreachable: {reason}"
        );
        assert_quiet(&mut a_rx).await;
        drop(mute);
        a.shutdown().await;
    })
    .await
}

/// 5c. A peer *process* killed with SIGKILL (no chance to close anything) is reported
/// lost, once, within the bound. The peer is this test binary re-executed as
/// [`peer_process_helper`].
async fn killed_peer_process_is_reported_lost(b: Backend) {
    use tokio::io::AsyncBufReadExt;
    within(async {
        let (a, mut a_rx) = b.bind(config(b, 0, "127.0.9.1", SECRET)).await;
        let mut child = tokio::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "peer_process_helper",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(
                PEER_PROCESS_ENV,
                format!(
                    "{},{},{}",
                    b.kind().name(),
                    b.ip("127.0.9.2"),
                    a.local_addr()
                ),
            )
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
        let child_addr = loop {
            let line = lines
                .next_line()
                .await
                .unwrap()
                .expect("peer process ended");
            // (libtest's "test … " may precede it on the same line)
            if let Some((_, addr)) = line.split_once("PEER_ADDR ") {
                break addr.trim().to_string();
            }
        };
        a.set_peers(vec![a.local_addr(), child_addr]);
        // Links both ways: the child echoes.
        a.send(1, Bytes::from_static(b"ping")).unwrap();
        assert_eq!(
            next_message(&mut a_rx).await,
            (1, Bytes::from_static(b"ping"))
        );

        child.start_kill().unwrap(); // SIGKILL
        let status = child.wait().await.unwrap();
        assert!(!status.success());
        let (peer, reason, unreachable) = timeout(LOSS_BOUND, next_loss_kind(&mut a_rx))
            .await
            .expect("the killed process was not reported lost within the bound");
        assert_eq!(peer, 1);
        assert!(reason.contains("node 1"), "{reason}");
        assert!(
            !unreachable,
            "a dead process is gone, not unreachable: {reason}"
        );
        assert_quiet(&mut a_rx).await;
        a.shutdown().await;
    })
    .await
}

/// Where [`peer_process_helper`] finds its task: `backend,listen_ip,node0_addr`.
const PEER_PROCESS_ENV: &str = "COHORT_TEST_PEER_PROCESS";

/// Not a test of its own: the body of the peer process that
/// `killed_peer_process_is_reported_lost` starts (this binary, re-executed with
/// [`PEER_PROCESS_ENV`] set). Binds node 1, prints its address, echoes every message
/// until killed. Without the variable it returns at once.
#[test]
fn peer_process_helper() {
    let Ok(spec) = std::env::var(PEER_PROCESS_ENV) else {
        return;
    };
    let parts: Vec<&str> = spec.split(',').collect();
    let [backend, ip, node0] = parts[..] else {
        panic!("bad {PEER_PROCESS_ENV}={spec:?}");
    };
    let kind: FabricKind = backend.parse().unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let cfg = FabricConfig::new(1, format!("{ip}:0").parse().unwrap(), SECRET.to_vec());
        let (f, mut rx) = AnyFabric::bind(kind, cfg).await.unwrap();
        f.set_peers(vec![node0.to_string(), f.local_addr()]);
        println!("PEER_ADDR {}", f.local_addr());
        use std::io::Write;
        std::io::stdout().flush().unwrap();
        while let Some(ev) = rx.recv().await {
            if let FabricEvent::Message { from, payload } = ev {
                let _ = f.send(from, payload);
            }
        }
    });
}

/// 8. Many peers at once: eight nodes, each sending to every other concurrently; every
///    node gets every message, per-sender order kept.
async fn many_peers_at_once(b: Backend) {
    within(async {
        const NODES: usize = 8;
        let n = b.count(500, 40);
        let ips: Vec<String> = (1..=NODES).map(|i| format!("127.0.10.{i}")).collect();
        let ips: Vec<&str> = ips.iter().map(String::as_str).collect();
        let mut nodes = cluster(b, &ips).await;
        let senders: Vec<_> = nodes
            .iter()
            .enumerate()
            .map(|(me, (f, _))| {
                let f = f.clone();
                tokio::spawn(async move {
                    for seq in 0..n {
                        for to in 0..NODES as u32 {
                            if to as usize != me {
                                f.send(to, numbered(me as u32, seq)).unwrap();
                            }
                        }
                        if seq % 16 == 0 {
                            tokio::task::yield_now().await;
                        }
                    }
                })
            })
            .collect();
        for s in senders {
            s.await.unwrap();
        }
        for (me, (_, rx)) in nodes.iter_mut().enumerate() {
            let mut next = [0u32; NODES];
            for _ in 0..(NODES as u32 - 1) * n {
                let (from, payload) = next_message(rx).await;
                let (sender, seq) = unnumber(&payload);
                assert_eq!(from, sender, "node {me}: wrong sender id");
                assert_eq!(seq, next[from as usize], "node {me}: order from {from}");
                next[from as usize] += 1;
            }
        }
        for (f, rx) in &mut nodes {
            f.shutdown().await;
            assert_quiet(rx).await;
        }
    })
    .await
}

/// The handler contract of `AnyFabric::bind_handler` (backend-independent: both
/// backends share the code that hands events over; run here over polling TCP on a
/// multi-thread runtime). Node 1's handler echoes each message to node 0 and sends a
/// copy to its own node from inside the call. Every message comes back, in order; each
/// copy to itself reaches the handler too, in order, after the call that sent it (the
/// handler is never re-entered nor called concurrently, which it checks on every call).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_handler_may_send_from_its_call_and_is_never_reentered() {
    use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
    use std::sync::{Arc, OnceLock};
    within(async {
        let b = Backend::TcpHandler;
        let (a, mut a_rx) = b.bind(config(b, 0, "127.0.6.1", SECRET)).await;
        let node1: Arc<OnceLock<AnyFabric>> = Arc::default();
        let inside = Arc::new(AtomicBool::new(false));
        let overlapped = Arc::new(AtomicBool::new(false));
        let echoed = Arc::new(AtomicU32::new(0));
        let (copies_tx, mut copies) = tokio::sync::mpsc::unbounded_channel();
        let handler = {
            let (node1, inside, overlapped, echoed) = (
                node1.clone(),
                inside.clone(),
                overlapped.clone(),
                echoed.clone(),
            );
            Arc::new(move |ev: FabricEvent| {
                if inside.swap(true, Ordering::AcqRel) {
                    overlapped.store(true, Ordering::Release);
                }
                let f = node1.get().expect("an event before bind returned");
                match ev {
                    FabricEvent::Message { from: 0, payload } => {
                        f.send(0, payload.clone()).unwrap();
                        f.send(1, payload).unwrap();
                        echoed.fetch_add(1, Ordering::AcqRel);
                    }
                    FabricEvent::Message { from: 1, payload } => {
                        let _ = copies_tx.send((payload, echoed.load(Ordering::Acquire)));
                    }
                    other => panic!("node 1: unexpected {other:?}"),
                }
                inside.store(false, Ordering::Release);
            })
        };
        let f1 =
            AnyFabric::bind_handler(FabricKind::Tcp, config(b, 1, "127.0.6.2", SECRET), handler)
                .await
                .unwrap();
        let _ = node1.set(f1.clone());
        let peers = vec![a.local_addr(), f1.local_addr()];
        a.set_peers(peers.clone());
        f1.set_peers(peers);
        let n = 2000;
        for seq in 0..n {
            a.send(1, numbered(0, seq)).unwrap();
        }
        for seq in 0..n {
            let (from, payload) = next_message(&mut a_rx).await;
            assert_eq!((from, unnumber(&payload)), (1, (0, seq)));
        }
        for seq in 0..n {
            let (payload, echoed_before) = copies.recv().await.unwrap();
            assert_eq!(
                unnumber(&payload),
                (0, seq),
                "copies to itself out of order"
            );
            assert!(
                echoed_before > seq,
                "copy {seq} reached the handler before the call that sent it returned"
            );
        }
        assert!(
            !overlapped.load(Ordering::Acquire),
            "the handler was called while a call of it was running"
        );
        a.shutdown().await;
        f1.shutdown().await;
    })
    .await
}

/// A send to one's own node is handed to the handler later, by the fabric's own task,
/// never inside `send`: `cohortd` sends while holding the state its handler needs. On
/// a current-thread runtime in a `LocalSet` with local tasks (as `cohortd` runs), the
/// test holds a lock across `send`, and the handler finds it free.
#[tokio::test(flavor = "current_thread")]
async fn tcp_handler_is_not_called_inside_a_send_to_self() {
    use std::sync::{Arc, Mutex};
    within(tokio::task::LocalSet::new().run_until(async {
        let b = Backend::TcpHandler;
        let held = Arc::new(Mutex::new(()));
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let handler = {
            let held = held.clone();
            Arc::new(move |ev: FabricEvent| {
                let free = held.try_lock().is_ok();
                let _ = tx.send((ev, free));
            })
        };
        let mut cfg = config(b, 0, "127.0.6.3", SECRET);
        cfg.local_tasks = true;
        let f = AnyFabric::bind_handler(FabricKind::Tcp, cfg, handler)
            .await
            .unwrap();
        f.set_peers(vec![f.local_addr()]);
        for seq in 0..3 {
            let guard = held.lock().unwrap();
            f.send(0, numbered(0, seq)).unwrap();
            drop(guard);
        }
        for seq in 0..3 {
            let (ev, free) = rx.recv().await.unwrap();
            match ev {
                FabricEvent::Message { from: 0, payload } => {
                    assert_eq!(unnumber(&payload), (0, seq))
                }
                other => panic!("unexpected {other:?}"),
            }
            assert!(free, "the handler ran inside send {seq}");
        }
        f.shutdown().await;
    }))
    .await
}

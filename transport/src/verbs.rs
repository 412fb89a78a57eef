//! The verbs backend: one RC queue pair per connection, over libibverbs through
//! `sideway` (whose shim loads libibverbs at run time, so a machine without rdma-core
//! still runs the TCP backend from the same binary).
//!
//! Connections follow the TCP backend's shape: each peer we send to gets one outbound
//! link, opened on the first `send`; links peers open to us are receive-only. Each link
//! starts as a TCP connection carrying the usual hello/reply handshake (the job-secret
//! check); after an accept both ends exchange a [`VerbsEndpoint`] (QPN, PSN, GID, MTU,
//! receive geometry) on it and bring their queue pairs to RTS. From then on the TCP
//! connection carries only the goodbye word and, by breaking, tells of a dead peer; the
//! payloads travel over the queue pair:
//!
//! * the receiver pre-posts [`RECV_DEPTH`] registered buffers of [`SLOT_SIZE`] bytes;
//!   the sender holds one credit per posted buffer and never sends without one, so no
//!   send ever meets a receiver that is not ready;
//! * a payload of up to [`SLOT_SIZE`] bytes goes eagerly, as a `send with immediate`
//!   copied into one of the sender's registered slots (the immediate marks the last
//!   chunk). While nothing queued to the link's task is unposted, `send` posts such a
//!   payload itself when a credit and a slot are free (write-through, as the TCP
//!   backend writes to its socket), instead of waking the task to do it;
//! * a larger one goes by rendezvous: the sender registers it (through a bounded
//!   registration cache, so a payload sent again or to several peers is registered
//!   once) and sends, in order with the eager ones and under the same credits, a
//!   descriptor (address, rkey, length); the receiver RDMA-reads it into a registered
//!   buffer from its pool (no registration once warm; the buffer returns to the pool
//!   when the delivered payload is dropped) and holds back everything the sender sent
//!   after it until the read completed, which keeps per-peer order; then it tells the
//!   sender the source may be released (a "fin"). At most [`MAX_BULK_IN_FLIGHT`]
//!   descriptors are unfinished per link; descriptors that follow one another are
//!   read at once (up to that many, 16 MiB beyond the first), delivered in order, so
//!   a stream of bulk payloads does not wait a read's round trip per payload; reads
//!   are issued a few at a time;
//! * the receiver reposts each consumed buffer and owes the sender a credit for it.
//!   Credits ride back on the payloads our own outbound link sends that peer (in their
//!   immediate, tagged with the number of the sender's queue pair they are for, see
//!   [`carry`]), so a request-reply exchange returns every credit with its replies.
//!   Credits no payload took (one-way traffic) and fins are returned in batches as a
//!   zero-length `send with immediate` (immediate = credits | fins << 16); the sender
//!   keeps a zero-length receive posted for every such message that can be in flight;
//! * each link's completion channel fd is driven by tokio's [`AsyncFd`]: the link's
//!   task sleeps until the channel signals, then drains its completion queue. With
//!   `COHORT_VERBS_POLL=1` ([`POLL_ENV`]) link tasks instead busy-poll their completion
//!   queues (yielding to the runtime between polls): lowest latency, one busy core.
//!   In between, with adaptive polling (`FabricConfig::spinner`, as `cohortd` runs),
//!   a link that delivered within the polling budget looks at its CQ directly on each
//!   turn of the runtime, and goes back to the channel once it is cold.
//!
//! Per link this registers `RECV_DEPTH × SLOT_SIZE` bytes on each end (send slots on
//! one, receive slots on the other), plus the bulk memory (receive pool, send cache),
//! all of which counts against `ulimit -l`; see [`memlock_error`].

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::io;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering as AtomicOrdering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use rdma_mummy_sys::{
    ibv_recv_wr, ibv_send_flags, ibv_send_wr, ibv_sge, ibv_wc, ibv_wr_opcode, rdma_t,
};
use sideway::ibverbs::address::{AddressHandleAttribute, Gid};
use sideway::ibverbs::completion::{
    BasicCompletionQueue, CompletionChannel, CompletionQueue, GenericCompletionQueue,
    WorkCompletionStatus,
};
use sideway::ibverbs::device::{DeviceInfo, DeviceList};
use sideway::ibverbs::device_context::{DeviceContext, Mtu, PortState};
use sideway::ibverbs::memory_region::MemoryRegion;
use sideway::ibverbs::protection_domain::ProtectionDomain;
use sideway::ibverbs::queue_pair::{BasicQueuePair, QueuePair, QueuePairAttribute, QueuePairState};
use sideway::ibverbs::AccessFlags;
use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc::{self, UnboundedReceiver};
use tokio::sync::watch;
use tokio::time::timeout;
use tracing::{debug, info, warn, Instrument};

use crate::handshake::{self, closing, new_incarnation, say_goodbye, Identity, TaskCount};
use crate::links::{self, EventHandler, Links, Outgoing, Sink, Spawner};
use crate::liveness::{ConnId, LinkEnd};
use crate::rdma_mem::{Access, PoolBuf, RecvPool, Registrar, SendCache};
use crate::wire::{Reply, VerbsEndpoint, GOODBYE, MAX_DATA_LEN, VERBS_WIRE_VERSION};
use crate::{Fabric, FabricConfig, FabricError, FabricEvent, NodeId, CLOSE_GRACE};

/// Environment variable naming the device (`rxe0`), optionally with a port (`mlx5_0:1`).
pub const DEVICE_ENV: &str = "COHORT_IB_DEVICE";
/// Environment variable giving the GID index (RoCE has no LIDs: a GID is needed).
pub const GID_INDEX_ENV: &str = "COHORT_IB_GID_INDEX";

/// Bytes per registered receive buffer: the largest chunk of one send.
pub const SLOT_SIZE: usize = 64 << 10;
/// Receive buffers posted per link, i.e. the sender's credits.
pub const RECV_DEPTH: usize = 16;
/// Bytes one link registers on one end.
pub const LINK_REGISTERED_BYTES: usize = SLOT_SIZE * RECV_DEPTH;
/// Environment variable turning on busy polling of completion queues (`1`).
pub const POLL_ENV: &str = "COHORT_VERBS_POLL";
/// Payloads larger than this go by RDMA read (rendezvous) instead of send/receive.
pub const BULK_THRESHOLD: usize = SLOT_SIZE;
/// Bulk descriptors a sender may have outstanding (not yet finished) per link; also
/// how many bulk payloads a receiver reads at once per link.
pub const MAX_BULK_IN_FLIGHT: usize = 4;
/// Bytes of bulk payloads a receiver reads at once per link beyond the oldest one
/// (which is always read, whatever its size).
const BULK_CONCURRENT_BYTES: usize = 16 << 20;
/// Largest single RDMA read work request.
const READ_CHUNK: usize = 4 << 20;
/// Reads a receiver has posted at once per link (also the QP's read depth).
const READS_IN_FLIGHT: usize = 4;
/// Work requests a link's send queue holds: the sender's data sends (≤ RECV_DEPTH);
/// the receiver's reads and credit messages (counted, never more than this).
const SQ_DEPTH: usize = RECV_DEPTH + 2 * READS_IN_FLIGHT;
/// Zero-length receives a sender keeps posted for credit messages: every such message
/// carries ≥ 1 credit or ≥ 1 fin, so no more than this can be in flight.
const CONTROL_RECVS: usize = RECV_DEPTH + MAX_BULK_IN_FLIGHT;
/// Registered bytes the send cache may hold (and entries), per fabric.
const SEND_CACHE_BYTES: usize = 64 << 20;
const SEND_CACHE_ENTRIES: usize = 64;
/// Idle registered receive buffers kept per fabric.
const RECV_POOL_IDLE_BYTES: usize = 64 << 20;
/// Bulk receive memory a fabric needs at the least (one 4 MiB payload at a time).
const BULK_MIN_REGISTERED: usize = 4 << 20;
/// A credit message is sent once this many credits are owed that no payload carried
/// back (always ≤ RECV_DEPTH, so a sender that ran out always gets them back). Half
/// the depth: a credit message is a post of its own (on rxe a whole transfer inside
/// the system call); against a quarter, half cut a request-reply exchange's latency by
/// 13–26% in the rxe guest (event mode, two sets of alternating runs), and a credit
/// message after every payload added about 50 µs to each 8-byte hop (busy-polling).
const CREDIT_BATCH: u32 = (RECV_DEPTH / 2) as u32;
/// Busy-polling: how often an outbound link's task takes completions in while sends
/// are outstanding and it has nothing else to do (it polls on every turn while it
/// waits for a credit or a slot).
const REAP_INTERVAL: Duration = Duration::from_millis(1);
/// Busy-polling: how often an idle outbound link (nothing posted awaits completion)
/// takes completions in, so a failure of its queue pair (its posted receives flush in
/// error) is found without a send.
const IDLE_REAP_INTERVAL: Duration = Duration::from_millis(10);
/// Busy-polling: a receiving link looks at its control connection (goodbye, break) on
/// every this many turns; the others only poll its CQ.
const CONTROL_EVERY: u32 = 32;
/// Busy-polling: looks at a receiving link's CQ per turn of the runtime, by default
/// (`COHORT_VERBS_POLL_SPINS`, [`POLL_SPINS_ENV`]).
const POLL_SPINS: u32 = 32;
/// Environment variable setting [`POLL_SPINS`] (1: one look per turn).
pub const POLL_SPINS_ENV: &str = "COHORT_VERBS_POLL_SPINS";
/// `wr_id` bit marking receive work requests.
const RECV_TAG: u64 = 1 << 63;
/// Immediate bit of a payload's last chunk.
const LAST_CHUNK: u32 = 1;
/// Immediate bit of a bulk descriptor (always also `LAST_CHUNK`).
const BULK_RTS: u32 = 2;
/// A payload chunk's immediate: bits 0–1 the flags above; bits 2–7 credits returned
/// (see [`carry`]); bits 8–31 the number of the queue pair they are for.
const CARRIED_SHIFT: u32 = 2;
const CARRIED_MASK: u32 = 0x3f;
const CARRIED_QPN_SHIFT: u32 = 8;
const _: () = assert!(RECV_DEPTH as u32 <= CARRIED_MASK);

/// The immediate of a payload chunk with `flags` that returns `credits` for the peer's
/// sending queue pair `qpn` (24 bits, as all QP numbers): the credits our receiving
/// link from that peer owes, carried back on what we send the peer anyway.
fn carry(flags: u32, credits: u32, qpn: u32) -> u32 {
    debug_assert!(credits <= CARRIED_MASK && flags <= (LAST_CHUNK | BULK_RTS));
    if credits == 0 {
        return flags;
    }
    flags | (credits << CARRIED_SHIFT) | ((qpn & 0xff_ffff) << CARRIED_QPN_SHIFT)
}

/// The credits a payload chunk's immediate returns and the queue pair they are for.
fn carried(imm: u32) -> (u32, u32) {
    (
        (imm >> CARRIED_SHIFT) & CARRIED_MASK,
        imm >> CARRIED_QPN_SHIFT,
    )
}
/// `wr_id` bit marking RDMA read work requests.
const READ_TAG: u64 = 1 << 62;
/// Bytes of a bulk descriptor: remote address, rkey, length.
const RTS_LEN: usize = 8 + 4 + 8;

/// A bulk descriptor as it travels (little-endian, [`RTS_LEN`] bytes): where the
/// receiver reads the payload from, under which rkey, and how much.
struct Rts {
    remote: u64,
    rkey: u32,
    len: u64,
}

impl Rts {
    fn encode(&self) -> [u8; RTS_LEN] {
        let mut b = [0u8; RTS_LEN];
        b[..8].copy_from_slice(&self.remote.to_le_bytes());
        b[8..12].copy_from_slice(&self.rkey.to_le_bytes());
        b[12..20].copy_from_slice(&self.len.to_le_bytes());
        b
    }

    /// `data` must be [`RTS_LEN`] bytes.
    fn decode(data: &[u8]) -> Rts {
        Rts {
            remote: u64::from_le_bytes(data[..8].try_into().expect("8 bytes")),
            rkey: u32::from_le_bytes(data[8..12].try_into().expect("4 bytes")),
            len: u64::from_le_bytes(data[12..20].try_into().expect("8 bytes")),
        }
    }
}
/// Local ACK timeout exponent (4.096 µs × 2^16 ≈ 0.27 s; generous for emulated rxe).
const ACK_TIMEOUT: u8 = 16;

/// Which device, port and GID the verbs backend uses, and whether it busy-polls.
/// Unset fields come from [`DEVICE_ENV`] / [`GID_INDEX_ENV`] / [`POLL_ENV`], then from
/// defaults: the first device with an active port, port 1, the GID whose IPv4-mapped
/// address is the listen address (else the first IPv4-mapped GID, else index 0), and
/// the completion channel (no busy polling).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VerbsOptions {
    /// Device name, e.g. `mlx5_0` or `rxe0`. A node server may set the NIC
    /// `cohort_topology::preferred_nic` picks.
    pub device: Option<String>,
    /// Port number (1-based).
    pub port: Option<u8>,
    pub gid_index: Option<u32>,
    /// Busy-poll the completion queues instead of sleeping on their channels (unset:
    /// [`POLL_ENV`]).
    pub busy_poll: Option<bool>,
    /// Busy-polling: looks at a receiving link's CQ per turn of the runtime, at least
    /// 1 (unset: [`POLL_SPINS_ENV`], else 32).
    pub poll_spins: Option<u32>,
}

impl VerbsOptions {
    /// Fills unset fields from the environment.
    pub fn with_env(mut self) -> Result<VerbsOptions, String> {
        if self.device.is_none() {
            if let Ok(v) = std::env::var(DEVICE_ENV) {
                let v = v.trim();
                if !v.is_empty() {
                    match v.split_once(':') {
                        Some((name, port)) => {
                            self.device = Some(name.to_string());
                            self.port = Some(port.parse().map_err(|_| {
                                format!("{DEVICE_ENV}={v}: port {port:?} is not a number")
                            })?);
                        }
                        None => self.device = Some(v.to_string()),
                    }
                }
            }
        }
        if self.gid_index.is_none() {
            if let Ok(v) = std::env::var(GID_INDEX_ENV) {
                if !v.trim().is_empty() {
                    self.gid_index = Some(
                        v.trim()
                            .parse()
                            .map_err(|_| format!("{GID_INDEX_ENV}={v:?} is not a GID index"))?,
                    );
                }
            }
        }
        if self.busy_poll.is_none() {
            self.busy_poll = Some(busy_poll_from_env());
        }
        if self.poll_spins.is_none() {
            if let Ok(v) = std::env::var(POLL_SPINS_ENV) {
                if !v.trim().is_empty() {
                    self.poll_spins = Some(parse_poll_spins(&v)?);
                }
            }
        }
        Ok(self)
    }
}

/// [`POLL_SPINS_ENV`]'s value: a count of at least 1.
fn parse_poll_spins(v: &str) -> Result<u32, String> {
    v.trim()
        .parse()
        .ok()
        .filter(|&n| n >= 1)
        .ok_or_else(|| format!("{POLL_SPINS_ENV}={v:?} is not a count of at least 1"))
}

/// Whether [`POLL_ENV`] asks for busy polling (`1`, `true` or `yes`).
pub fn busy_poll_from_env() -> bool {
    std::env::var(POLL_ENV).is_ok_and(|v| matches!(v.trim(), "1" | "true" | "yes"))
}

/// A usable device and port, as found by [`probe`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerbsDevice {
    pub name: String,
    pub port: u8,
}

/// Looks for a device with an ACTIVE port (the one `opts` names, if it names one).
/// `Err` says why verbs cannot be used here, for the backend-selection log line.
pub fn probe(opts: &VerbsOptions) -> Result<VerbsDevice, String> {
    let list = DeviceList::new().map_err(|e| {
        format!(
            "libibverbs unavailable or no RDMA subsystem ({e}: {})",
            source_text(&e)
        )
    })?;
    if list.is_empty() {
        return Err("no RDMA device found".into());
    }
    let mut seen = Vec::new();
    for dev in &list {
        let name = dev.name();
        if opts.device.as_ref().is_some_and(|want| *want != name) {
            continue;
        }
        let Ok(ctx) = dev.open() else {
            seen.push(format!("{name}: cannot open"));
            continue;
        };
        let ports: Vec<u8> = match opts.port {
            Some(p) => vec![p],
            None => {
                let count = ctx.query_device().map(|a| a.phys_port_cnt()).unwrap_or(1);
                (1..=count.max(1)).collect()
            }
        };
        for port in ports {
            match ctx.query_port(port) {
                Ok(attr) if attr.port_state() == PortState::Active => {
                    return Ok(VerbsDevice { name, port });
                }
                Ok(attr) => seen.push(format!("{name} port {port} is {:?}", attr.port_state())),
                Err(e) => seen.push(format!("{name} port {port}: {e}")),
            }
        }
    }
    match &opts.device {
        Some(want) if seen.is_empty() => Err(format!("device {want} ({DEVICE_ENV}) not found")),
        _ => Err(format!("no ACTIVE port ({})", seen.join("; "))),
    }
}

fn source_text(e: &dyn std::error::Error) -> String {
    e.source().map_or_else(String::new, |s| s.to_string())
}

/// The error a failed or impossible registration turns into: an `OutOfMemory`
/// [`io::Error`] wrapping [`FabricError::MemlockTooLow`], which names the memlock limit,
/// the amount needed and how to raise the limit.
pub fn memlock_error(needed: usize, cause: Option<&io::Error>) -> io::Error {
    io::Error::new(
        io::ErrorKind::OutOfMemory,
        FabricError::MemlockTooLow {
            needed: needed as u64,
            limit: memlock_limit(),
            cause: cause.map_or_else(String::new, |e| format!(" ({e})")),
        },
    )
}

/// Locked memory a verbs fabric needs at the least: both ends of one link and one
/// bulk receive buffer.
pub const MIN_MEMLOCK: usize = 2 * LINK_REGISTERED_BYTES + BULK_MIN_REGISTERED;

/// Checks the memlock limit against [`MIN_MEMLOCK`] (what [`VerbsFabric::bind`] does
/// before touching a device).
pub fn check_memlock() -> io::Result<()> {
    match memlock_limit() {
        Some(limit) if limit < MIN_MEMLOCK as u64 => Err(memlock_error(MIN_MEMLOCK, None)),
        _ => Ok(()),
    }
}

/// The soft RLIMIT_MEMLOCK in bytes; `None` when unlimited.
pub fn memlock_limit() -> Option<u64> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we own.
    let rc = unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut lim) };
    if rc != 0 || lim.rlim_cur == libc::RLIM_INFINITY {
        return None;
    }
    Some(lim.rlim_cur)
}

/// The opened device: shared by every link of one fabric.
struct Device {
    name: String,
    port: u8,
    gid_index: u32,
    gid: Gid,
    mtu: Mtu,
    /// RDMA reads outstanding per QP, as initiator and as responder.
    rd_atom: u8,
    pd: Arc<ProtectionDomain>,
    ctx: Arc<DeviceContext>,
}

/// Registers memory in the device's protection domain.
struct PdRegistrar(Arc<ProtectionDomain>);

impl Registrar for PdRegistrar {
    type Region = Arc<MemoryRegion>;

    unsafe fn register(&self, addr: usize, len: usize, access: Access) -> io::Result<Self::Region> {
        let flags = match access {
            Access::RemoteRead => AccessFlags::RemoteRead,
            Access::LocalWrite => AccessFlags::LocalWrite,
        };
        // SAFETY: forwarded from the caller.
        unsafe { self.0.reg_mr(addr, len, flags) }.map_err(|e| {
            let cause = io::Error::other(format!("{e}: {}", source_text(&e)));
            memlock_error(len, Some(&cause))
        })
    }
}

impl Device {
    fn open(opts: &VerbsOptions, listen_ip: IpAddr) -> io::Result<Device> {
        let found = probe(opts).map_err(|why| io::Error::new(io::ErrorKind::NotFound, why))?;
        let list = DeviceList::new().map_err(io::Error::other)?;
        let dev = list
            .iter()
            .find(|d| d.name() == found.name)
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "device vanished"))?;
        let ctx = dev.open().map_err(io::Error::other)?;
        let port_attr = ctx.query_port(found.port).map_err(io::Error::other)?;
        let gid_index = match opts.gid_index {
            Some(i) => i,
            None => pick_gid(&ctx, found.port, port_attr.gid_tbl_len(), listen_ip),
        };
        let gid = ctx.query_gid(found.port, gid_index).map_err(|e| {
            io::Error::other(format!(
                "{} port {} GID index {gid_index}: {e}",
                found.name, found.port
            ))
        })?;
        if gid.is_zero() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "{} port {} GID index {gid_index} is empty; set {GID_INDEX_ENV}",
                    found.name, found.port
                ),
            ));
        }
        let pd = ctx.alloc_pd().map_err(io::Error::other)?;
        let rd_atom = match ctx.query_device() {
            Ok(attr) => attr
                .max_qp_rd_atom()
                .min(attr.max_qp_init_rd_atom())
                .clamp(1, READS_IN_FLIGHT as i32) as u8,
            Err(_) => 1,
        };
        Ok(Device {
            name: found.name,
            port: found.port,
            gid_index,
            gid,
            mtu: port_attr.active_mtu(),
            rd_atom,
            pd,
            ctx,
        })
    }
}

/// The GID whose IPv4-mapped address is `listen_ip`, else the first IPv4-mapped one,
/// else 0. On RoCE each address of the netdev has its own GID, so several node servers
/// on one device (each on its own address) each get their own.
fn pick_gid(ctx: &DeviceContext, port: u8, table_len: i32, listen_ip: IpAddr) -> u32 {
    let mut first_v4 = None;
    for i in 0..table_len.max(0) as u32 {
        let Ok(gid) = ctx.query_gid(port, i) else {
            continue;
        };
        if gid.is_zero() {
            continue;
        }
        if let Some(v4) = Ipv6Addr::from(gid).to_ipv4_mapped() {
            if IpAddr::V4(v4) == listen_ip {
                return i;
            }
            first_v4.get_or_insert(i);
        }
    }
    first_v4.unwrap_or(0)
}

fn mtu_code(mtu: Mtu) -> u8 {
    match mtu {
        Mtu::Mtu256 => 1,
        Mtu::Mtu512 => 2,
        Mtu::Mtu1024 => 3,
        Mtu::Mtu2048 => 4,
        Mtu::Mtu4096 => 5,
    }
}

/// A registered buffer of `RECV_DEPTH` slots. Field order matters: the registration is
/// dropped (deregistered) before the memory it pins.
struct Slots {
    mr: Arc<MemoryRegion>,
    mem: Box<[u8]>,
}

impl Slots {
    fn new(dev: &Device) -> io::Result<Slots> {
        let mut mem = vec![0u8; LINK_REGISTERED_BYTES].into_boxed_slice();
        // SAFETY: `mem` lives as long as the registration (see the field order) and is
        // never reallocated.
        let mr = unsafe {
            dev.pd.reg_mr(
                mem.as_mut_ptr() as usize,
                mem.len(),
                AccessFlags::LocalWrite | AccessFlags::RemoteWrite,
            )
        }
        .map_err(|e| {
            let cause = io::Error::other(source_text(&e));
            memlock_error(LINK_REGISTERED_BYTES, Some(&cause))
        })?;
        Ok(Slots { mr, mem })
    }

    fn addr(&self, slot: usize) -> u64 {
        self.mem.as_ptr() as u64 + (slot * SLOT_SIZE) as u64
    }

    fn slot_mut(&mut self, slot: usize) -> &mut [u8] {
        &mut self.mem[slot * SLOT_SIZE..(slot + 1) * SLOT_SIZE]
    }

    fn slot(&self, slot: usize, len: usize) -> &[u8] {
        &self.mem[slot * SLOT_SIZE..slot * SLOT_SIZE + len]
    }
}

/// The completion channel's fd, for [`AsyncFd`].
struct ChannelFd(Arc<CompletionChannel>);

impl AsRawFd for ChannelFd {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}

/// One completion, copied out of the CQ.
#[derive(Clone, Copy)]
struct Completion {
    wr_id: u64,
    status: u32,
    byte_len: u32,
    imm: u32,
}

/// One end of a verbs link: queue pair, its completion queue and channel, and the
/// registered slots. Owned by the link's task (an outbound link's through [`TxLink`],
/// which `send` shares). Field order is drop order: the QP goes before the CQ it uses,
/// the CQ before its channel (a [`Waiter`] cloned from it holds both in that order).
struct QpLink {
    qp: BasicQueuePair,
    waiter: Waiter,
    slots: Slots,
    psn: u32,
    /// Sends up to this many bytes go inline (copied into the work request at post
    /// time, so the HCA need not read them from memory); 0 when the device has none.
    max_inline: usize,
}

/// A link's completion queue and its channel: what the link's task polls and waits on.
/// An outbound link's task keeps a clone, so it waits without holding the link, which
/// `send` shares. Field order is drop order: the CQ before its channel.
#[derive(Clone)]
struct Waiter {
    cq: Arc<BasicCompletionQueue>,
    events: Arc<AsyncFd<ChannelFd>>,
    /// Busy-poll the CQ instead of sleeping on the completion channel.
    poll_mode: bool,
}

/// Inline send size asked of the device (small payloads: credits are zero-length,
/// and most devices offer at least this).
const MAX_INLINE: usize = 128;

impl QpLink {
    fn new(dev: &Device, poll_mode: bool) -> io::Result<QpLink> {
        let slots = Slots::new(dev)?;
        let channel = dev.ctx.create_comp_channel().map_err(io::Error::other)?;
        channel.set_nonblocking(true)?;
        let cq = dev
            .ctx
            .create_cq_builder()
            .setup_cqe((2 * (SQ_DEPTH + CONTROL_RECVS)) as u32)
            .setup_comp_channel(&channel, 0)
            .build()
            .map_err(io::Error::other)?;
        let build = |inline: u32| {
            dev.pd
                .create_qp_builder()
                .setup_max_send_wr(SQ_DEPTH as u32)
                .setup_max_recv_wr(CONTROL_RECVS as u32)
                .setup_max_send_sge(1)
                .setup_max_recv_sge(1)
                .setup_max_inline_data(inline)
                .setup_send_cq(GenericCompletionQueue::from(cq.clone()))
                .setup_recv_cq(GenericCompletionQueue::from(cq.clone()))
                .build()
        };
        // Inline sends where the device has them (it then guarantees at least the
        // size asked); without, every send is read from registered memory.
        let (mut qp, max_inline) = match build(MAX_INLINE as u32) {
            Ok(qp) => (qp, MAX_INLINE),
            Err(e) => {
                debug!(error = %e, "no inline sends of {MAX_INLINE} bytes on this device");
                (build(0).map_err(io::Error::other)?, 0)
            }
        };
        let mut attr = QueuePairAttribute::new();
        attr.setup_state(QueuePairState::Init)
            .setup_pkey_index(0)
            .setup_port(dev.port)
            .setup_access_flags(
                AccessFlags::LocalWrite | AccessFlags::RemoteWrite | AccessFlags::RemoteRead,
            );
        qp.modify(&attr).map_err(io::Error::other)?;
        let psn = (new_incarnation() as u32) & 0xff_ffff;
        // SAFETY: the fd belongs to `channel`, which `ChannelFd` keeps alive (and so
        // open) for as long as the AsyncFd exists; it always reports that same fd.
        let events = unsafe { AsyncFd::register(ChannelFd(channel)) }.map_err(io::Error::from)?;
        Ok(QpLink {
            qp,
            waiter: Waiter {
                cq,
                events: Arc::new(events),
                poll_mode,
            },
            slots,
            psn,
            max_inline,
        })
    }

    fn endpoint(&self, dev: &Device) -> VerbsEndpoint {
        VerbsEndpoint {
            qpn: self.qp.qp_number(),
            psn: self.psn,
            gid: dev.gid.raw,
            mtu: mtu_code(dev.mtu),
            slot_size: SLOT_SIZE as u32,
            credits: RECV_DEPTH as u32,
        }
    }

    /// INIT → RTR → RTS towards `remote`, then arms the completion channel.
    fn connect(&mut self, dev: &Device, remote: &VerbsEndpoint) -> io::Result<()> {
        let mtu = Mtu::from(u32::from(remote.mtu.min(mtu_code(dev.mtu))));
        let mut attr = QueuePairAttribute::new();
        attr.setup_state(QueuePairState::ReadyToReceive)
            .setup_path_mtu(mtu)
            .setup_dest_qp_num(remote.qpn)
            .setup_rq_psn(remote.psn)
            .setup_max_dest_read_atomic(dev.rd_atom)
            .setup_min_rnr_timer(12);
        let mut ah = AddressHandleAttribute::new();
        ah.setup_dest_lid(0)
            .setup_port(dev.port)
            .setup_service_level(0)
            .setup_grh_src_gid_index(dev.gid_index as u8)
            .setup_grh_dest_gid(&Gid { raw: remote.gid })
            .setup_grh_hop_limit(64);
        attr.setup_address_vector(&ah);
        self.qp.modify(&attr).map_err(io::Error::other)?;
        let mut attr = QueuePairAttribute::new();
        attr.setup_state(QueuePairState::ReadyToSend)
            .setup_sq_psn(self.psn)
            .setup_timeout(ACK_TIMEOUT)
            .setup_retry_cnt(7)
            .setup_rnr_retry(7)
            .setup_max_read_atomic(dev.rd_atom);
        self.qp.modify(&attr).map_err(io::Error::other)?;
        if self.waiter.poll_mode {
            // Never armed, so no channel events to acknowledge (destroying a CQ waits
            // for unacknowledged ones).
            return Ok(());
        }
        self.waiter.arm()
    }

    /// See [`Waiter::wait`].
    async fn wait(&self) -> io::Result<()> {
        self.waiter.wait().await
    }

    /// See [`Waiter::poll`].
    fn poll(&self, out: &mut Vec<Completion>) -> io::Result<()> {
        self.waiter.poll(out)
    }

    /// Posts a receive for data slot `slot` (`Some`) or a zero-length one for a credit
    /// message (`None`).
    ///
    /// The work requests on this page are built on the stack and posted through
    /// libibverbs directly: sideway's post guards allocate vectors for every post, and
    /// these posts are the per-message hot path (as is [`Waiter::poll`]).
    fn post_recv(&mut self, slot: Option<usize>) -> io::Result<()> {
        let mut sge = ibv_sge {
            addr: slot.map_or(0, |s| self.slots.addr(s)),
            length: SLOT_SIZE as u32,
            lkey: self.slots.mr.lkey(),
        };
        let mut wr = ibv_recv_wr {
            wr_id: RECV_TAG | slot.unwrap_or(0) as u64,
            next: std::ptr::null_mut(),
            sg_list: &mut sge,
            num_sge: i32::from(slot.is_some()),
        };
        let mut bad = std::ptr::null_mut();
        // SAFETY: the QP is alive; `wr` and its SGE (the slot lies in `slots`,
        // registered and alive as long as the QP) outlive the call, which copies them.
        let rc = unsafe { rdma_mummy_sys::ibv_post_recv(self.qp.qp().as_ptr(), &mut wr, &mut bad) };
        rc_result(rc)
    }

    /// Sends `len` bytes of send slot `slot` (none when `slot` is `None`) with `imm`.
    fn post_send(&mut self, wr_id: u64, slot: Option<(usize, usize)>, imm: u32) -> io::Result<()> {
        let mut sge = ibv_sge {
            addr: 0,
            length: 0,
            lkey: self.slots.mr.lkey(),
        };
        let mut flags = ibv_send_flags::IBV_SEND_SIGNALED.0;
        if let Some((s, len)) = slot.filter(|&(_, len)| len > 0) {
            sge.addr = self.slots.addr(s);
            sge.length = len as u32;
            if len <= self.max_inline {
                flags |= ibv_send_flags::IBV_SEND_INLINE.0;
            }
        }
        let mut wr = send_wr(wr_id, ibv_wr_opcode::IBV_WR_SEND_WITH_IMM, flags, &mut sge);
        wr.imm_data_invalidated_rkey_union.imm_data = imm;
        self.post(&mut wr)
    }

    /// Reads `len` bytes at the peer's `remote` (`rkey`) into `local` (`lkey`).
    fn post_read(
        &mut self,
        wr_id: u64,
        (lkey, local): (u32, u64),
        (rkey, remote): (u32, u64),
        len: usize,
    ) -> io::Result<()> {
        let mut sge = ibv_sge {
            addr: local,
            length: len as u32,
            lkey,
        };
        let mut wr = send_wr(
            wr_id,
            ibv_wr_opcode::IBV_WR_RDMA_READ,
            ibv_send_flags::IBV_SEND_SIGNALED.0,
            &mut sge,
        );
        wr.wr.rdma = rdma_t {
            remote_addr: remote,
            rkey,
        };
        // `local` lies in a registered pool buffer the caller keeps alive until this
        // read completes.
        self.post(&mut wr)
    }

    /// Posts one send-queue work request built by [`send_wr`].
    fn post(&mut self, wr: &mut ibv_send_wr) -> io::Result<()> {
        let mut bad = std::ptr::null_mut();
        // SAFETY: the QP is alive; `wr` and the SGE it points to (in registered memory
        // kept alive by the caller) outlive the call, which copies them (and, inline,
        // the data).
        let rc = unsafe { rdma_mummy_sys::ibv_post_send(self.qp.qp().as_ptr(), wr, &mut bad) };
        rc_result(rc)
    }
}

/// A send-queue work request with one scatter/gather entry (none when it is empty).
fn send_wr(wr_id: u64, opcode: u32, flags: u32, sge: &mut ibv_sge) -> ibv_send_wr {
    // SAFETY: all zeroes is a valid ibv_send_wr (null pointers, no SGEs); the fields
    // that matter are set below.
    let mut wr: ibv_send_wr = unsafe { std::mem::MaybeUninit::zeroed().assume_init() };
    wr.wr_id = wr_id;
    wr.opcode = opcode;
    wr.send_flags = flags;
    if sge.length > 0 {
        wr.sg_list = sge;
        wr.num_sge = 1;
    }
    wr
}

/// A libibverbs return code (0, else an errno value) as a result.
fn rc_result(rc: i32) -> io::Result<()> {
    match rc {
        0 => Ok(()),
        rc => Err(io::Error::from_raw_os_error(rc)),
    }
}

impl Waiter {
    fn arm(&self) -> io::Result<()> {
        // SAFETY: the CQ outlives the call.
        let rc = unsafe { rdma_mummy_sys::ibv_req_notify_cq(self.cq.cq().as_ptr(), 0) };
        rc_result(rc)
    }

    /// Waits until the completion channel signals, acknowledges its events and re-arms;
    /// in polling mode just lets the runtime run others before the next poll.
    async fn wait(&self) -> io::Result<()> {
        if self.poll_mode {
            // tokio's yield (requeued after an I/O-driver poll) measured faster here
            // than requeueing at once, which on a current-thread runtime lets the
            // block_on future wait out a whole scheduler interval of busy link tasks.
            tokio::task::yield_now().await;
            return Ok(());
        }
        let mut ready = self.events.readable().await?;
        loop {
            let mut cq = std::ptr::null_mut();
            let mut ctx = std::ptr::null_mut();
            // SAFETY: the channel is alive; the fd is non-blocking, so this returns -1
            // with EAGAIN once no event is pending.
            let rc = unsafe {
                rdma_mummy_sys::ibv_get_cq_event(
                    self.events.get_ref().0.comp_channel().as_ptr(),
                    &mut cq,
                    &mut ctx,
                )
            };
            if rc != 0 {
                let err = io::Error::last_os_error();
                if err.kind() == io::ErrorKind::WouldBlock {
                    ready.clear_ready();
                    break;
                }
                return Err(err);
            }
            // SAFETY: `cq` is the CQ the event was for (ours).
            unsafe { rdma_mummy_sys::ibv_ack_cq_events(cq, 1) };
        }
        self.arm()
    }

    /// Everything in the completion queue right now (polled into a stack array, see
    /// [`QpLink::post_recv`]).
    fn poll(&self, out: &mut Vec<Completion>) -> io::Result<()> {
        const BATCH: usize = 16;
        let mut wcs = [std::mem::MaybeUninit::<ibv_wc>::uninit(); BATCH];
        loop {
            // SAFETY: the CQ is alive; `wcs` has room for BATCH entries.
            let n = unsafe {
                rdma_mummy_sys::ibv_poll_cq(
                    self.cq.cq().as_ptr(),
                    BATCH as i32,
                    wcs.as_mut_ptr().cast(),
                )
            };
            let Ok(n) = usize::try_from(n) else {
                return Err(io::Error::other(format!(
                    "polling the completion queue failed ({n})"
                )));
            };
            for wc in &wcs[..n] {
                // SAFETY: the provider filled the first n entries.
                let wc = unsafe { wc.assume_init_ref() };
                out.push(Completion {
                    wr_id: wc.wr_id,
                    status: wc.status,
                    byte_len: wc.byte_len,
                    // SAFETY: both members of the union are a u32.
                    imm: unsafe { wc.imm_data_invalidated_rkey_union.imm_data },
                });
            }
            if n < BATCH {
                return Ok(());
            }
        }
    }
}

fn completion_error(peer: NodeId, c: &Completion) -> FabricError {
    let status = WorkCompletionStatus::from(c.status);
    FabricError::Rdma {
        peer,
        status: format!("{status:?}"),
    }
}

/// Which of our queue pairs to a peer [`VerbsFabric::inject_queue_pair_error`] fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueuePairSide {
    /// The one our payloads to the peer go out on.
    Outbound,
    /// The ones the peer's payloads arrive on.
    Inbound,
}

/// What the bulk and write-through paths did so far ([`VerbsFabric::bulk_stats`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BulkStats {
    /// Payloads `send` posted itself (write-through), not through the link's task.
    pub posted_by_send: u64,
    /// Payloads `send` would have posted itself but found the link's task using the
    /// link just then, so they went through its queue.
    pub queued_link_busy: u64,
    /// Times `send`, finding no free send slot or no credit, took the link's
    /// completions in itself (which may free a slot or return credits).
    pub send_take_ins: u64,
    /// Payloads `send` queued because, even after taking completions in, the link had
    /// no free slot or no credit: the peer's acknowledgements or credits had not come.
    pub queued_no_room: u64,
    /// Bulk payloads this fabric started reading while an earlier one from the same
    /// peer was still being read.
    pub read_alongside: u64,
    /// Payloads this fabric sent by descriptor, for the receiver to RDMA-read.
    pub sent_by_read: u64,
    /// Registrations of payloads being sent (send-cache misses).
    pub send_registrations: u64,
    /// Receive buffers registered (pool misses).
    pub receive_registrations: u64,
    /// Credit messages this fabric's receiving links sent (credits no payload of
    /// ours carried back, or fins).
    pub credit_messages: u64,
    /// Credits this fabric's payloads carried back to their senders.
    pub credits_carried: u64,
}

/// Credits a receiving link owes the peer's sending queue pair `qpn`.
struct Owed {
    qpn: u32,
    credits: AtomicU32,
}

/// Where a peer's two links meet, for credits carried on payloads ([`Shared::way`]).
#[derive(Default)]
struct Way {
    /// The newest receiving link's debts, which our payloads to the peer carry back.
    owed: Mutex<Option<Arc<Owed>>>,
    /// Our sending link to the peer, which the credits its payloads carry are for.
    tx: Mutex<Weak<TxLink>>,
}

impl Way {
    /// Takes every credit owed for the peer to carry on a payload: `(credits, qpn)`.
    fn take_owed(&self) -> (u32, u32) {
        match links::lock(&self.owed).as_ref() {
            Some(o) => (o.credits.swap(0, AtomicOrdering::AcqRel), o.qpn),
            None => (0, 0),
        }
    }

    /// Owes again what [`Way::take_owed`] took for a payload that was not posted.
    fn give_back(&self, credits: u32, qpn: u32) {
        if let Some(o) = links::lock(&self.owed).as_ref().filter(|o| o.qpn == qpn) {
            o.credits.fetch_add(credits, AtomicOrdering::AcqRel);
        }
    }
}

/// A receiving link's entry in its [`Way`], removed (if still its own) when dropped.
struct OwedEntry {
    way: Arc<Way>,
    owed: Arc<Owed>,
}

impl OwedEntry {
    fn new(way: Arc<Way>, qpn: u32) -> OwedEntry {
        let owed = Arc::new(Owed {
            qpn,
            credits: AtomicU32::new(0),
        });
        *links::lock(&way.owed) = Some(owed.clone());
        OwedEntry { way, owed }
    }
}

impl Drop for OwedEntry {
    fn drop(&mut self) {
        let mut current = links::lock(&self.way.owed);
        if current.as_ref().is_some_and(|o| Arc::ptr_eq(o, &self.owed)) {
            *current = None;
        }
    }
}

/// The verbs fabric. Cheap to clone; every clone drives the same links. Dropping the
/// last clone without [`close`](Fabric::close) tears every link down abruptly.
#[derive(Clone)]
pub struct VerbsFabric {
    owner: Arc<Owner>,
}

struct Owner {
    shared: Arc<Shared>,
}

struct Shared {
    me: NodeId,
    local_addr: SocketAddr,
    source_ip: Option<IpAddr>,
    secret: Vec<u8>,
    max_frame: usize,
    connect_timeout: Duration,
    incarnation: u64,
    device: Device,
    /// Busy-poll completion queues ([`POLL_ENV`]).
    poll_mode: bool,
    /// Busy-polling: CQ looks per turn ([`VerbsOptions::poll_spins`]).
    poll_spins: u32,
    /// Registrations of payloads being sent by RDMA read.
    send_cache: Mutex<SendCache<PdRegistrar>>,
    /// Registered buffers bulk payloads are read into.
    recv_pool: Arc<RecvPool<PdRegistrar>>,
    /// Payloads sent by descriptor (RDMA read) so far.
    bulk_sent: AtomicU64,
    /// What `send` did with small payloads so far (shared with every [`TxLink`]).
    sends: Arc<SendCounts>,
    /// Bulk payloads whose read started while another was being read on its link.
    read_alongside: AtomicU64,
    /// Per peer, where its receiving and sending links meet (credits carried back).
    ways: Mutex<HashMap<NodeId, Arc<Way>>>,
    /// The queue pairs of established links, for fault injection
    /// ([`VerbsFabric::inject_queue_pair_error`]); each entry goes before its QP does.
    queue_pairs: Mutex<HashMap<ConnId, (NodeId, QueuePairSide, RawQp)>>,
    spawner: Spawner,
    closing: watch::Sender<bool>,
    tasks_live: Arc<TaskCount>,
    state: Mutex<Links>,
    /// Events go to a handler (called by the reading task itself), not a channel.
    inline_events: bool,
    /// The runtime's polling budget (`FabricConfig::spinner`) in event mode: a link
    /// that delivered within it polls its CQ directly (see [`receive`]).
    hot_budget: Option<Duration>,
}

impl VerbsFabric {
    /// Opens the device (`cfg.verbs`, then the environment), listens on `cfg.listen`
    /// for the handshake connections, and returns the fabric and its event channel.
    /// Must be called inside a tokio runtime with I/O and time enabled.
    pub async fn bind(
        cfg: FabricConfig,
    ) -> io::Result<(VerbsFabric, UnboundedReceiver<FabricEvent>)> {
        let (events_tx, events_rx) = mpsc::unbounded_channel();
        let fabric = Self::bind_sink(cfg, Sink::Channel(events_tx)).await?;
        Ok((fabric, events_rx))
    }

    /// Like [`bind`](VerbsFabric::bind), with the events handed to `handler` instead
    /// of a channel (see [`crate::AnyFabric::bind_handler`]).
    pub async fn bind_handler(cfg: FabricConfig, handler: EventHandler) -> io::Result<VerbsFabric> {
        Self::bind_sink(cfg, Sink::Handler(handler)).await
    }

    async fn bind_sink(cfg: FabricConfig, sink: Sink) -> io::Result<VerbsFabric> {
        handshake::check_secret_len(&cfg.secret)?;
        // Two links' worth (one each way to one peer) and one bulk buffer must fit, or
        // nothing will work: say so now rather than at the first send.
        check_memlock()?;
        let opts = cfg
            .verbs
            .clone()
            .with_env()
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        let device = Device::open(&opts, cfg.listen.ip())?;
        let poll_mode = opts.busy_poll == Some(true);
        let registrar = Arc::new(PdRegistrar(device.pd.clone()));
        let send_cache = SendCache::new(registrar.clone(), SEND_CACHE_BYTES, SEND_CACHE_ENTRIES);
        let recv_pool = RecvPool::new(registrar, RECV_POOL_IDLE_BYTES);
        let listener = TcpListener::bind(cfg.listen).await?;
        let local_addr = listener.local_addr()?;
        let inline_events = matches!(sink, Sink::Handler(_));
        let shared = Arc::new(Shared {
            me: cfg.node,
            local_addr,
            source_ip: Some(local_addr.ip()).filter(|ip| !ip.is_unspecified()),
            secret: cfg.secret,
            max_frame: cfg.max_frame.min(MAX_DATA_LEN),
            connect_timeout: cfg.connect_timeout,
            incarnation: new_incarnation(),
            device,
            poll_mode,
            poll_spins: opts.poll_spins.unwrap_or(POLL_SPINS).max(1),
            send_cache: Mutex::new(send_cache),
            recv_pool,
            bulk_sent: Default::default(),
            sends: Default::default(),
            read_alongside: Default::default(),
            ways: Default::default(),
            queue_pairs: Default::default(),
            spawner: Spawner::current(cfg.local_tasks),
            closing: watch::channel(false).0,
            tasks_live: Arc::default(),
            hot_budget: cfg
                .spinner
                .as_ref()
                .map(|sp| sp.budget())
                .filter(|b| !b.is_zero() && !poll_mode),
            // Busy-polling keeps the runtime polling anyway: told of the fabric's
            // messages, the spinner would only add its CPU yield (a system call) to
            // every turn of that loop.
            state: Mutex::new(Links::new(sink, cfg.spinner.clone().filter(|_| !poll_mode))),
            inline_events,
        });
        {
            let mut st = shared.lock();
            let task_shared = shared.clone();
            shared.spawn_tracked(&mut st, move |_| accept_loop(task_shared, listener));
        }
        let dev = &shared.device;
        info!(
            backend = "verbs",
            node = shared.me,
            addr = %local_addr,
            device = %dev.name,
            port = dev.port,
            gid_index = dev.gid_index,
            gid = %dev.gid,
            poll = shared.poll_mode,
            "fabric listening"
        );
        let owner = Arc::new(Owner { shared });
        Ok(VerbsFabric { owner })
    }

    /// [`close`](Fabric::close), then waits until every goodbye was acknowledged (or
    /// [`CLOSE_GRACE`] passed, after which the rest is dropped).
    pub async fn shutdown(&self) {
        let shared = &self.owner.shared;
        shared.close();
        if timeout(CLOSE_GRACE, shared.tasks_live.wait_idle())
            .await
            .is_err()
        {
            warn!(
                node = shared.me,
                "fabric goodbyes not acknowledged within {CLOSE_GRACE:?}; dropping links"
            );
            shared.abort_all();
        }
    }

    /// Fault injection for failure tests: moves a queue pair of ours to `peer` into
    /// the error state, as a failed port or cable would, while the process and its TCP
    /// control connection stay up: the one that carries our payloads to `peer`
    /// (`QueuePairSide::Outbound`) or the ones that receive `peer`'s (`QueuePairSide::Inbound`).
    /// What follows is the fabric's own failure handling. `false`: no such link (yet).
    pub fn inject_queue_pair_error(&self, peer: NodeId, which: QueuePairSide) -> bool {
        let qps = links::lock(&self.owner.shared.queue_pairs);
        let mine: Vec<&RawQp> = qps
            .values()
            .filter(|(p, side, _)| *p == peer && *side == which)
            .map(|(_, _, qp)| qp)
            .collect();
        !mine.is_empty() && mine.iter().all(|qp| qp.fail().is_ok())
    }

    /// Counters of the bulk (RDMA read) and write-through paths.
    pub fn bulk_stats(&self) -> BulkStats {
        let shared = &self.owner.shared;
        let cache = links::lock(&shared.send_cache);
        BulkStats {
            posted_by_send: shared.sends.posted.load(AtomicOrdering::Relaxed),
            queued_link_busy: shared.sends.link_busy.load(AtomicOrdering::Relaxed),
            send_take_ins: shared.sends.take_ins.load(AtomicOrdering::Relaxed),
            queued_no_room: shared.sends.no_room.load(AtomicOrdering::Relaxed),
            read_alongside: shared.read_alongside.load(AtomicOrdering::Relaxed),
            sent_by_read: shared.bulk_sent.load(AtomicOrdering::Relaxed),
            send_registrations: cache.registrations,
            receive_registrations: shared.recv_pool.registrations(),
            credit_messages: shared.sends.credit_messages.load(AtomicOrdering::Relaxed),
            credits_carried: shared.sends.carried.load(AtomicOrdering::Relaxed),
        }
    }

    /// The device in use, e.g. `rxe0`.
    pub fn device_name(&self) -> String {
        self.owner.shared.device.name.clone()
    }

    /// The port in use (1-based).
    pub fn port(&self) -> u8 {
        self.owner.shared.device.port
    }

    /// The GID index in use.
    pub fn gid_index(&self) -> u32 {
        self.owner.shared.device.gid_index
    }

    /// The device, port and GID index in use, e.g. `rxe0 port 1 GID index 2`.
    pub fn device(&self) -> String {
        let d = &self.owner.shared.device;
        format!("{} port {} GID index {}", d.name, d.port, d.gid_index)
    }
}

impl std::fmt::Debug for VerbsFabric {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VerbsFabric")
            .field("node", &self.owner.shared.me)
            .field("addr", &self.owner.shared.local_addr)
            .field("device", &self.device())
            .finish_non_exhaustive()
    }
}

impl Fabric for VerbsFabric {
    fn backend(&self) -> &'static str {
        "verbs"
    }

    fn node(&self) -> NodeId {
        self.owner.shared.me
    }

    fn local_addr(&self) -> String {
        self.owner.shared.local_addr.to_string()
    }

    fn set_peers(&self, peers: Vec<String>) {
        self.owner.shared.lock().peers = peers;
    }

    fn send(&self, to: NodeId, payload: Bytes) -> Result<(), FabricError> {
        self.owner.shared.send(to, payload)
    }

    fn declare_lost(&self, peer: NodeId) {
        // Queues no event, so nothing to hand over (and no handler call from inside
        // the owner's own call).
        self.owner.shared.lock().declare_lost(peer);
    }

    fn expect_departures(&self) {
        self.owner.shared.lock().expect_departures();
    }

    fn close(&self) {
        self.owner.shared.close();
    }
}

impl Drop for Owner {
    fn drop(&mut self) {
        let shared = self.shared.clone();
        if !shared.lock().closing {
            shared.abort_all();
            return;
        }
        let runtime = shared.spawner.runtime.clone();
        runtime.spawn(async move {
            let _ = timeout(CLOSE_GRACE, shared.tasks_live.wait_idle()).await;
            shared.abort_all();
        });
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Links> {
        links::lock(&self.state)
    }

    /// Hands queued events to the handler, if the fabric has one (see [`links::flush`]).
    fn flush(&self) {
        self.flush_from(self.lock());
    }

    /// [`Shared::flush`] with the lock already taken.
    fn flush_from(&self, st: MutexGuard<'_, Links>) {
        if self.inline_events {
            links::flush(&self.state, st);
        }
    }

    /// `peer`'s [`Way`] (made on first use; one per peer for the fabric's life).
    fn way(&self, peer: NodeId) -> Arc<Way> {
        links::lock(&self.ways).entry(peer).or_default().clone()
    }

    fn identity(&self) -> Identity<'_> {
        Identity {
            me: self.me,
            secret: &self.secret,
            incarnation: self.incarnation,
            wire_version: VERBS_WIRE_VERSION,
            source_ip: self.source_ip,
            // Payloads go over the queue pairs, whose own retries find a peer that
            // stopped answering.
            stall_timeout: None,
            limit: self.connect_timeout,
        }
    }

    fn send(self: &Arc<Self>, to: NodeId, payload: Bytes) -> Result<(), FabricError> {
        if payload.len() > self.max_frame {
            return Err(FabricError::FrameTooLarge {
                peer: to,
                len: payload.len(),
                max: self.max_frame,
            });
        }
        let mut st = self.lock();
        let Some((addr, item)) = st.route(self.me, to, payload)? else {
            if to == self.me && st.to_self_pending() {
                // Not from within `send`: its caller may hold what the handler needs.
                let shared = self.clone();
                self.spawner.spawn(async move { shared.flush() });
            }
            return Ok(());
        };
        let (queue, rx) = mpsc::unbounded_channel();
        let _ = queue.send(item);
        // The first frame is queued, not yet posted.
        let unwritten = Arc::new(AtomicUsize::new(1));
        let task_shared = self.clone();
        let task_unwritten = unwritten.clone();
        let id = self.spawn_tracked(&mut st, move |id| {
            run_outbound(task_shared, to, addr, id, rx, task_unwritten)
        });
        st.add_outbound(to, id, queue, Some(unwritten));
        Ok(())
    }

    fn close(&self) {
        if !self.lock().close() {
            return;
        }
        self.closing.send_replace(true);
    }

    fn abort_all(&self) {
        self.lock().abort();
        self.closing.send_replace(true);
    }

    fn spawn_tracked<F, Fut>(&self, st: &mut Links, make: F) -> ConnId
    where
        F: FnOnce(ConnId) -> Fut,
        Fut: Future<Output = ()> + Send + 'static,
    {
        st.spawn_tracked(&self.spawner, &self.tasks_live, make)
    }

    fn deliver(&self, peer: NodeId, conn: ConnId, batch: &mut Vec<Bytes>) -> bool {
        let mut st = self.lock();
        let delivering = st.deliver(peer, conn, batch);
        self.flush_from(st);
        delivering
    }

    fn established(&self, peer: NodeId, incarnation: u64, conn: ConnId) {
        self.lock().established(peer, incarnation, conn);
        self.flush();
    }

    fn ended(&self, peer: NodeId, conn: ConnId, how: LinkEnd) {
        self.lock().ended(peer, conn, how);
        self.flush();
    }

    /// See [`Links::connect_failed`].
    fn connect_failed(
        &self,
        peer: NodeId,
        conn: ConnId,
        err: FabricError,
        dropped: usize,
        losses_at_start: u64,
    ) {
        self.lock()
            .connect_failed(self.me, peer, conn, err, dropped, losses_at_start);
        self.flush();
    }
}

async fn accept_loop(shared: Arc<Shared>, listener: TcpListener) {
    let mut closing_rx = shared.closing.subscribe();
    loop {
        let accepted = tokio::select! {
            r = listener.accept() => r,
            _ = closing(&mut closing_rx) => return,
        };
        match accepted {
            Ok((stream, remote)) => {
                let mut st = shared.lock();
                if st.closing {
                    return;
                }
                let task_shared = shared.clone();
                shared.spawn_tracked(&mut st, move |id| {
                    run_inbound(task_shared, stream, remote, id)
                });
            }
            Err(e) => {
                warn!(node = shared.me, error = %e, "fabric accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

async fn read_endpoint(stream: &mut TcpStream) -> io::Result<VerbsEndpoint> {
    let mut bytes = [0u8; VerbsEndpoint::LEN];
    stream.read_exact(&mut bytes).await?;
    VerbsEndpoint::decode(&bytes).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

/// A link a peer opened to us: handshake, queue-pair exchange, then receive.
async fn run_inbound(shared: Arc<Shared>, mut stream: TcpStream, remote: SocketAddr, id: ConnId) {
    let span = tracing::debug_span!("verbs_in", node = shared.me, %remote);
    async move {
        let _ = stream.set_nodelay(true);
        let Some(hello) = handshake::read_hello_within(&mut stream, &shared.identity()).await
        else {
            return;
        };
        let peer = hello.node;
        let known = shared.lock().peers.len();
        let mut link = Err(String::new());
        let mut verdict = handshake::check_hello(&shared.identity(), &hello, known);
        if verdict.is_ok() {
            verdict = handshake::prove_within(&mut stream, &shared.identity(), &hello).await;
        }
        if verdict.is_ok() {
            // Resources first: a registration failure is then a refusal the connector
            // sees with its reason, rather than a silent drop.
            link = QpLink::new(&shared.device, shared.poll_mode).map_err(|e| e.to_string());
            if let Err(e) = &link {
                verdict = Err(format!(
                    "node {} cannot set up a queue pair: {e}",
                    shared.me
                ));
            }
        }
        if let Err(reason) = verdict {
            return handshake::refuse(&mut stream, &shared.identity(), peer, reason).await;
        }
        let Ok(mut link) = link else { return };
        if shared.lock().closing {
            return;
        }
        let reply = Reply::Accept {
            node: shared.me,
            incarnation: shared.incarnation,
        };
        let setup = timeout(shared.connect_timeout, async {
            for slot in 0..RECV_DEPTH {
                link.post_recv(Some(slot))?;
            }
            stream.write_all(&reply.encode()).await?;
            let theirs = read_endpoint(&mut stream).await?;
            link.connect(&shared.device, &theirs)?;
            stream
                .write_all(&link.endpoint(&shared.device).encode())
                .await?;
            io::Result::Ok(theirs.qpn)
        })
        .await
        .unwrap_or_else(|_| Err(io::ErrorKind::TimedOut.into()));
        let their_qpn = match setup {
            Ok(qpn) => qpn,
            Err(e) => {
                warn!(peer, error = %e, "verbs link set-up failed");
                return;
            }
        };
        shared.established(peer, hello.incarnation, id);
        debug!(peer, qpn = link.qp.qp_number(), "verbs link accepted");
        // Declared after `link`, so dropped before it, also when the task is aborted.
        let _registered = RegisteredQp::new(&shared, id, peer, QueuePairSide::Inbound, &link);
        // From now on our payloads to `peer` carry back the credits this link owes.
        let owed = OwedEntry::new(shared.way(peer), their_qpn);
        let end = receive(&shared, &mut link, &mut stream, peer, id, &owed).await;
        shared.ended(peer, id, end);
    }
    .instrument(span)
    .await
}

/// A bulk payload being read from the sender.
struct BulkRead {
    buf: PoolBuf<Arc<MemoryRegion>>,
    rkey: u32,
    remote: u64,
    len: usize,
    /// Bytes asked for so far, and reads not yet completed.
    posted: usize,
    outstanding: usize,
}

/// The receiving end's state between completions.
struct Inbound<'a> {
    shared: &'a Shared,
    peer: NodeId,
    /// Eager chunks of the payload in progress.
    assembly: BytesMut,
    /// Payloads ready for delivery, in order.
    batch: Vec<Bytes>,
    /// Credits owed for reposted buffers (also taken by our payloads to the peer), and
    /// the way to our sending link to the peer, which credits carried here are for.
    debts: &'a OwedEntry,
    /// Bulk reads completed since the last credit message.
    fins: u32,
    /// Bulk payloads being read, in the order their descriptors came. Several are read
    /// at once when their descriptors follow one another (see [`Inbound::may_start`]);
    /// a payload's reads are all posted before the next payload's, so reads complete
    /// in this order too.
    reading: VecDeque<BulkRead>,
    /// Receive completions that arrived while bulk payloads sent before them are being
    /// read: processed (and their buffers reposted) in order once those are, or, for
    /// a descriptor, once it may start. At most RECV_DEPTH.
    held: VecDeque<Completion>,
    /// Our send-queue entries in use (credit messages, reads), at most SQ_DEPTH.
    sq_used: usize,
    next_wr: u64,
    /// Whether the last `progress` delivered anything.
    delivered: bool,
    /// Where `progress` polls completions into (kept to reuse its allocation).
    scratch: Vec<Completion>,
}

impl Inbound<'_> {
    fn broken(&self, source: io::Error) -> LinkEnd {
        LinkEnd::Broken(FabricError::Io {
            peer: self.peer,
            source,
        })
    }

    fn violation(&self, reason: String) -> LinkEnd {
        LinkEnd::Broken(FabricError::Protocol {
            peer: self.peer,
            reason,
        })
    }

    /// One completion from the CQ.
    fn completed(&mut self, link: &mut QpLink, c: Completion) -> Result<(), LinkEnd> {
        if c.status != WorkCompletionStatus::Success as u32 {
            return Err(LinkEnd::Broken(completion_error(self.peer, &c)));
        }
        if c.wr_id & RECV_TAG != 0 {
            // Taken now when no read is in progress, or when it is a descriptor that
            // may start with nothing held before it; otherwise held, in order.
            let now = self.reading.is_empty() || (self.held.is_empty() && self.may_start(link, &c));
            if !now || !self.received(link, c)? {
                self.held.push_back(c);
            }
            return Ok(());
        }
        self.sq_used -= 1;
        if c.wr_id & READ_TAG != 0 {
            let peer = self.peer;
            // Reads complete in the order they were posted: the oldest payload with
            // one outstanding.
            let read = self
                .reading
                .iter_mut()
                .find(|r| r.outstanding > 0)
                .ok_or_else(|| {
                    LinkEnd::Broken(FabricError::Protocol {
                        peer,
                        reason: "stray read completion".into(),
                    })
                })?;
            read.outstanding -= 1;
            // Payloads wholly read, oldest first.
            while self
                .reading
                .front()
                .is_some_and(|r| r.posted == r.len && r.outstanding == 0)
            {
                let read = self.reading.pop_front().expect("checked above");
                self.batch
                    .push(self.shared.recv_pool.lend(read.buf, read.len));
                self.fins += 1;
            }
            // What the sender sent after them, in order: everything once no read is
            // left before it, or a descriptor that may start now.
            while let Some(next) = self.held.front() {
                if !self.reading.is_empty() && !self.may_start(link, next) {
                    break;
                }
                let next = self.held.pop_front().expect("checked above");
                if !self.received(link, next)? {
                    self.held.push_front(next);
                    break;
                }
            }
            self.post_reads(link)?;
        }
        Ok(())
    }

    /// Whether receive completion `c`, arriving while other bulk payloads are being
    /// read, may be taken now: a bulk descriptor, while fewer than
    /// [`MAX_BULK_IN_FLIGHT`] payloads are being read and the ones beyond the first
    /// stay within [`BULK_CONCURRENT_BYTES`]. Anything else waits for the reads before
    /// it. (A malformed descriptor is held and rejected when its turn comes.)
    fn may_start(&self, link: &QpLink, c: &Completion) -> bool {
        if c.imm & BULK_RTS == 0 || c.byte_len as usize != RTS_LEN {
            return false;
        }
        let slot = (c.wr_id & !RECV_TAG) as usize;
        if slot >= RECV_DEPTH || self.reading.len() >= MAX_BULK_IN_FLIGHT {
            return false;
        }
        let len = Rts::decode(link.slots.slot(slot, RTS_LEN)).len;
        let beyond_first: u64 = self.reading.iter().skip(1).map(|r| r.len as u64).sum();
        beyond_first.saturating_add(len) <= BULK_CONCURRENT_BYTES as u64
    }

    /// A receive completion, in the order the sender sent. `false`: a bulk descriptor
    /// that must wait, untouched, until the reads in progress are done (no receive
    /// buffer for it now: reading payloads one at a time, as then, fails only when
    /// even that one cannot have one).
    fn received(&mut self, link: &mut QpLink, c: Completion) -> Result<bool, LinkEnd> {
        let slot = (c.wr_id & !RECV_TAG) as usize;
        let len = c.byte_len as usize;
        let max = self.shared.max_frame;
        if slot >= RECV_DEPTH || len > SLOT_SIZE || self.assembly.len() + len > max {
            return Err(self.violation(format!(
                "payload exceeds the {max}-byte frame limit (or a bad chunk)"
            )));
        }
        let data = link.slots.slot(slot, len);
        let (credits, qpn) = carried(c.imm);
        if credits > 0 {
            self.credit_our_link(credits, qpn)?;
        }
        if c.imm & BULK_RTS != 0 {
            if len != RTS_LEN || !self.assembly.is_empty() {
                return Err(self.violation("malformed bulk descriptor".into()));
            }
            let Rts {
                remote,
                rkey,
                len: bulk_len,
            } = Rts::decode(data);
            if bulk_len == 0 || bulk_len > max as u64 {
                return Err(self.violation(format!(
                    "bulk payload of {bulk_len} bytes (frame limit {max})"
                )));
            }
            let buf = match self.shared.recv_pool.take(bulk_len as usize) {
                Ok(buf) => buf,
                Err(_) if !self.reading.is_empty() => return Ok(false),
                Err(e) => return Err(self.broken(e)),
            };
            if !self.reading.is_empty() {
                self.shared
                    .read_alongside
                    .fetch_add(1, AtomicOrdering::Relaxed);
            }
            self.reading.push_back(BulkRead {
                buf,
                rkey,
                remote,
                len: bulk_len as usize,
                posted: 0,
                outstanding: 0,
            });
        } else if c.imm & LAST_CHUNK != 0 {
            if self.assembly.is_empty() {
                self.batch.push(Bytes::copy_from_slice(data));
            } else {
                self.assembly.extend_from_slice(data);
                self.batch.push(self.assembly.split().freeze());
            }
        } else {
            self.assembly.extend_from_slice(data);
        }
        link.post_recv(Some(slot)).map_err(|e| self.broken(e))?;
        self.debts.owed.credits.fetch_add(1, AtomicOrdering::AcqRel);
        self.post_reads(link)?;
        Ok(true)
    }

    /// Gives our sending link to the peer the `credits` a payload carried for its
    /// queue pair `qpn`. Credits for an earlier link of ours (reconnected since) are
    /// dropped with it; more than that link has used is a protocol violation.
    fn credit_our_link(&self, credits: u32, qpn: u32) -> Result<(), LinkEnd> {
        let Some(tx_link) = links::lock(&self.debts.way.tx).upgrade() else {
            return Ok(());
        };
        if tx_link.qpn != qpn {
            return Ok(());
        }
        let mut tx = tx_link.lock();
        if !tx.open {
            return Ok(());
        }
        if tx.credits + credits > RECV_DEPTH as u32 {
            let had = tx.credits;
            drop(tx);
            return Err(self.violation(format!(
                "a payload carries {credits} credits for queue pair {qpn}, which holds {had} of {RECV_DEPTH}"
            )));
        }
        tx.credits += credits;
        drop(tx);
        // The link's task may be waiting for a credit (on its own CQ, in event mode).
        tx_link.room.notify_one();
        Ok(())
    }

    /// Issues the bulk payloads' reads, a few at a time (the device's read depth in
    /// all), oldest payload first: a payload's reads are all posted before the next
    /// one's, so they complete in payload order.
    fn post_reads(&mut self, link: &mut QpLink) -> Result<(), LinkEnd> {
        let depth = usize::from(self.shared.device.rd_atom);
        let mut outstanding: usize = self.reading.iter().map(|r| r.outstanding).sum();
        for read in self.reading.iter_mut() {
            while read.posted < read.len && outstanding < depth && self.sq_used < SQ_DEPTH {
                let n = (read.len - read.posted).min(READ_CHUNK);
                self.next_wr += 1;
                let local = (read.buf.region.lkey(), read.buf.addr() + read.posted as u64);
                let remote = (read.rkey, read.remote + read.posted as u64);
                if let Err(source) = link.post_read(READ_TAG | self.next_wr, local, remote, n) {
                    return Err(LinkEnd::Broken(FabricError::Io {
                        peer: self.peer,
                        source,
                    }));
                }
                read.posted += n;
                read.outstanding += 1;
                outstanding += 1;
                self.sq_used += 1;
            }
            if read.posted < read.len {
                break;
            }
        }
        Ok(())
    }

    /// Returns the credits no payload of ours carried back (in batches) and fins (at
    /// once) in a credit message, when the send queue has room.
    fn return_credits(&mut self, link: &mut QpLink) -> Result<(), LinkEnd> {
        let owed = self.debts.owed.credits.load(AtomicOrdering::Acquire);
        if (owed >= CREDIT_BATCH || self.fins > 0) && self.sq_used < SQ_DEPTH {
            // A payload of ours may have taken some since.
            let credits = self.debts.owed.credits.swap(0, AtomicOrdering::AcqRel);
            if credits == 0 && self.fins == 0 {
                return Ok(());
            }
            self.next_wr += 1;
            let imm = credits | (self.fins << 16);
            link.post_send(self.next_wr, None, imm)
                .map_err(|e| self.broken(e))?;
            self.shared
                .sends
                .credit_messages
                .fetch_add(1, AtomicOrdering::Relaxed);
            self.sq_used += 1;
            self.fins = 0;
        }
        Ok(())
    }

    /// Drains the CQ, delivers what is complete, returns credits. `false`: stop (the
    /// link was condemned or the fabric dropped).
    fn progress(&mut self, link: &mut QpLink, id: ConnId) -> Result<bool, LinkEnd> {
        let mut completions = std::mem::take(&mut self.scratch);
        completions.clear();
        link.poll(&mut completions).map_err(|e| self.broken(e))?;
        for &c in &completions {
            self.completed(link, c)?;
        }
        self.scratch = completions;
        self.delivered = !self.batch.is_empty();
        if self.delivered && !self.shared.deliver(self.peer, id, &mut self.batch) {
            return Ok(false);
        }
        self.return_credits(link)?;
        Ok(true)
    }
}

/// A queue pair's handle, kept in [`Shared::queue_pairs`] only while its link lives.
struct RawQp(std::ptr::NonNull<rdma_mummy_sys::ibv_qp>);

// SAFETY: only used for `ibv_modify_qp`, which libibverbs allows from any thread, and
// only under the registry's lock, which the owner takes to remove it before the QP goes.
unsafe impl Send for RawQp {}

impl RawQp {
    /// Moves the queue pair to the error state: posted work requests flush with
    /// errors, later ones complete in error.
    fn fail(&self) -> io::Result<()> {
        // SAFETY: an all-zero attribute set is valid; only the state is applied.
        let mut attr: rdma_mummy_sys::ibv_qp_attr = unsafe { std::mem::zeroed() };
        attr.qp_state = rdma_mummy_sys::ibv_qp_state::IBV_QPS_ERR;
        let mask = rdma_mummy_sys::ibv_qp_attr_mask::IBV_QP_STATE.0 as i32;
        // SAFETY: the QP is alive while registered (see `RegisteredQp`).
        rc_result(unsafe { rdma_mummy_sys::ibv_modify_qp(self.0.as_ptr(), &mut attr, mask) })
    }
}

/// A link's entry in [`Shared::queue_pairs`], removed when dropped: the link's task
/// holds it while it keeps the queue pair alive.
struct RegisteredQp<'a> {
    shared: &'a Shared,
    id: ConnId,
}

impl<'a> RegisteredQp<'a> {
    fn new(
        shared: &'a Shared,
        id: ConnId,
        peer: NodeId,
        side: QueuePairSide,
        link: &QpLink,
    ) -> RegisteredQp<'a> {
        // SAFETY: the pointer is only used while the entry exists (see `RawQp`).
        let qp = RawQp(unsafe { link.qp.qp() });
        links::lock(&shared.queue_pairs).insert(id, (peer, side, qp));
        RegisteredQp { shared, id }
    }
}

impl Drop for RegisteredQp<'_> {
    fn drop(&mut self) {
        links::lock(&self.shared.queue_pairs).remove(&self.id);
    }
}

/// The receiving end: reassembles chunks, reads bulk payloads, reposts buffers,
/// returns credits; the TCP connection tells of goodbyes and breaks.
async fn receive(
    shared: &Shared,
    link: &mut QpLink,
    stream: &mut TcpStream,
    peer: NodeId,
    id: ConnId,
    debts: &OwedEntry,
) -> LinkEnd {
    let mut closing_rx = shared.closing.subscribe();
    let mut inbound = Inbound {
        shared,
        peer,
        assembly: BytesMut::new(),
        batch: Vec::new(),
        debts,
        fins: 0,
        reading: VecDeque::new(),
        held: VecDeque::new(),
        sq_used: 0,
        next_wr: 0,
        delivered: false,
        scratch: Vec::new(),
    };
    let mut word = [0u8; 4];
    let mut word_len = 0;
    // While hot (see below): when it last delivered, and which turns read the clock.
    let mut hot: Option<(Instant, crate::spin::ClockTurns)> = None;
    // Busy-polling: turns since the control connection and the close signal were last
    // looked at (see below).
    let mut quiet_turns = 0u32;
    // Looks at the CQ per turn: busy-polling looks again, a few times, before yielding
    // (each turn of the runtime costs an I/O-driver poll, `epoll_wait`, and a timer
    // check with clock reads, many times a look at the CQ, and the next message of an
    // exchange in flight is found on the look after it completes); otherwise once.
    let looks = if shared.poll_mode {
        shared.poll_spins
    } else {
        1
    };
    loop {
        // Drain first: the queue may hold completions from before the channel was armed.
        // A delivery ends the looks at once (its consumer may be another task).
        for _ in 0..looks {
            match inbound.progress(link, id) {
                Ok(true) => {}
                Ok(false) => return LinkEnd::Local,
                Err(end) => return end,
            }
            if inbound.delivered {
                break;
            }
        }
        // Busy-polling: most turns only poll the CQ. The control connection (goodbye,
        // break) and the close signal are looked at every CONTROL_EVERY turns, and at
        // once when closing: a turn then costs the CQ looks and a yield instead of the
        // select below (its three futures, its random start), which under emulation
        // was a good part of a turn.
        if shared.poll_mode {
            quiet_turns += 1;
            if quiet_turns < CONTROL_EVERY && !*closing_rx.borrow() {
                tokio::task::yield_now().await;
                continue;
            }
            quiet_turns = 0;
        }
        // While the runtime polls and this link delivered within its budget, look at
        // the CQ directly on every turn of the runtime instead of waiting for the
        // completion channel: the next message of an exchange in flight is then taken
        // on the turn it completes, without the channel's event, its read, the re-arm
        // and a task wake-up. The CQ stays armed from the last wait, so its first entry
        // still raises one event, which the next wait consumes; there is no lost
        // wake-up once the link goes cold. A local close ends it at once (a peer that
        // keeps sending would otherwise keep the link hot and our goodbye unsaid); the
        // peer's goodbye or a broken connection is seen once the link is cold, at most
        // one budget after the peer's last message.
        if let Some(budget) = shared.hot_budget {
            if inbound.delivered {
                hot = Some((Instant::now(), crate::spin::ClockTurns::default()));
            }
            if let Some((since, clock)) = hot.as_mut() {
                if (clock.due() && since.elapsed() >= budget) || *closing_rx.borrow() {
                    hot = None;
                } else {
                    tokio::task::yield_now().await;
                    continue;
                }
            }
        }
        tokio::select! {
            r = link.wait() => if let Err(source) = r {
                return LinkEnd::Broken(FabricError::Io { peer, source });
            },
            r = stream.read(&mut word[word_len..]) => match r {
                Ok(0) => return LinkEnd::Broken(FabricError::PeerClosed { peer }),
                Ok(n) => {
                    word_len += n;
                    if word_len == word.len() {
                        let w = u32::from_le_bytes(word);
                        if w != GOODBYE {
                            return LinkEnd::Broken(FabricError::Protocol {
                                peer,
                                reason: format!("unexpected word {w:#010x} on the verbs control connection"),
                            });
                        }
                        // Everything the peer sent completed (and every bulk payload
                        // was read) before its goodbye.
                        let _ = inbound.progress(link, id);
                        debug!("fabric peer said goodbye");
                        return LinkEnd::Goodbye;
                    }
                }
                Err(source) => return LinkEnd::Broken(FabricError::Io { peer, source }),
            },
            _ = closing(&mut closing_rx) => {
                // `abort_all` also signals `closing` (to stop tasks its aborts miss,
                // e.g. one being polled at that moment). A dropped fabric must not say
                // goodbye: that marks it departing, and the peer would never report
                // its loss.
                if shared.lock().aborted {
                    return LinkEnd::Local;
                }
                let (mut rd, mut wr) = stream.split();
                say_goodbye(&mut rd, &mut wr).await;
                return LinkEnd::Local;
            }
        }
    }
}

/// Our link to `peer`: connect, handshake, queue-pair exchange, then send what is
/// queued until goodbye or failure.
async fn run_outbound(
    shared: Arc<Shared>,
    peer: NodeId,
    addr: String,
    id: ConnId,
    mut queue: UnboundedReceiver<Outgoing>,
    unwritten: Arc<AtomicUsize>,
) {
    let span = tracing::debug_span!("verbs_out", node = shared.me, peer, %addr);
    async move {
        let losses_at_start = shared.lock().liveness.losses(peer);
        let fail = |queue: &mut UnboundedReceiver<Outgoing>, err: FabricError| {
            queue.close();
            let mut dropped = 0;
            while let Ok(item) = queue.try_recv() {
                dropped += matches!(item, Outgoing::Frame(_)) as usize;
            }
            shared.connect_failed(peer, id, err, dropped, losses_at_start);
        };
        let (mut stream, incarnation) =
            match handshake::connect(&shared.identity(), peer, &addr, shared.connect_timeout).await
            {
                Ok(connected) => connected,
                Err(err) => return fail(&mut queue, err),
            };
        // The peer's incarnation is known from here on: register the link with it now,
        // so a peer that dies during the queue-pair exchange breaks this link like any
        // other of that incarnation (one loss, however many links it breaks) rather
        // than also being reported as a separate connect failure.
        shared.established(peer, incarnation, id);
        let broken = |queue: &mut UnboundedReceiver<Outgoing>, err: FabricError| {
            queue.close();
            let mut dropped = 0;
            while let Ok(item) = queue.try_recv() {
                dropped += matches!(item, Outgoing::Frame(_)) as usize;
            }
            warn!(dropped, error = %err, "verbs link set-up failed");
            shared.ended(peer, id, LinkEnd::Broken(err));
        };
        let setup = async {
            let mut link = QpLink::new(&shared.device, shared.poll_mode)?;
            for _ in 0..CONTROL_RECVS {
                link.post_recv(None)?;
            }
            stream
                .write_all(&link.endpoint(&shared.device).encode())
                .await?;
            let theirs = read_endpoint(&mut stream).await?;
            link.connect(&shared.device, &theirs)?;
            io::Result::Ok((link, theirs))
        };
        let (link, theirs) = match timeout(shared.connect_timeout, setup).await {
            Ok(Ok(ok)) => ok,
            Ok(Err(source)) => return broken(&mut queue, FabricError::Io { peer, source }),
            Err(_) => {
                return broken(
                    &mut queue,
                    FabricError::ConnectTimeout {
                        peer,
                        addr: addr.clone(),
                        after: shared.connect_timeout,
                    },
                )
            }
        };
        debug!(
            incarnation,
            qpn = link.qp.qp_number(),
            remote_qpn = theirs.qpn,
            "verbs link up"
        );
        let waiter = link.waiter.clone();
        let qpn = link.qp.qp_number();
        let way = shared.way(peer);
        let tx = Arc::new(TxLink {
            tx: Mutex::new(Tx {
                link,
                credits: theirs.credits.min(RECV_DEPTH as u32),
                free: (0..RECV_DEPTH).rev().collect(),
                in_flight: VecDeque::new(),
                open: true,
                peer,
                scratch: Vec::new(),
                failed: None,
                way: way.clone(),
                sends: shared.sends.clone(),
            }),
            sends: shared.sends.clone(),
            qpn,
            room: tokio::sync::Notify::new(),
        });
        // Credits the peer's payloads carry come to this link from now on (before its
        // first post, so before the peer can owe it any).
        *links::lock(&way.tx) = Arc::downgrade(&tx);
        shared.lock().enable_write_through(peer, id, tx.clone());
        // Declared after `tx`, so dropped while this task still keeps the QP alive.
        let _registered =
            RegisteredQp::new(&shared, id, peer, QueuePairSide::Outbound, &tx.lock().link);
        let end = transmit(
            &shared,
            &tx,
            &waiter,
            &mut stream,
            peer,
            &mut queue,
            &unwritten,
        )
        .await;
        // No more direct posts: nobody would take in their completions.
        tx.lock().open = false;
        shared.ended(peer, id, end);
    }
    .instrument(span)
    .await
}

/// A payload being sent: eagerly over several chunks, or by descriptor.
struct Pending {
    payload: Bytes,
    offset: usize,
    /// Set for a bulk payload once registered: it goes as one descriptor.
    region: Option<Arc<MemoryRegion>>,
}

impl Pending {
    /// Takes `payload` for sending; a large one is registered (through the cache) for
    /// the receiver to read. Without a registration (the locked-memory limit, say) it
    /// goes eagerly, chunk by chunk, like a small one.
    fn new(shared: &Shared, payload: Bytes) -> Pending {
        let mut region = None;
        if payload.len() > BULK_THRESHOLD {
            let mut cache = links::lock(&shared.send_cache);
            match cache.region(&payload) {
                Ok(r) => region = Some(r),
                Err(e) => {
                    debug!(len = payload.len(), error = %e, "bulk registration failed; sending by copy");
                }
            }
        }
        Pending {
            payload,
            offset: 0,
            region,
        }
    }
}

/// The sending end of an outbound link, shared by its task and by `send`, which posts
/// a small frame itself when nothing queued is still unposted (see [`TxLink`]).
struct Tx {
    link: QpLink,
    /// Receive buffers the peer has posted for us: a send needs one.
    credits: u32,
    /// Send slots no posted send uses.
    free: Vec<usize>,
    /// Bulk payloads the receiver has not finished reading, oldest first; each keeps
    /// its memory and registration alive.
    in_flight: VecDeque<(Arc<MemoryRegion>, Bytes)>,
    /// The task still runs the link: sends may post.
    open: bool,
    /// The peer, for errors.
    peer: NodeId,
    /// Where [`Tx::take_in`] polls completions into (kept to reuse its allocation).
    scratch: Vec<Completion>,
    /// The link broke while a send took completions in: the task ends the link with
    /// this as soon as it looks.
    failed: Option<LinkEnd>,
    /// Where the credits our receiving link from the peer owes are taken from, for
    /// each payload chunk to carry back.
    way: Arc<Way>,
    /// The fabric's counts (credits carried).
    sends: Arc<SendCounts>,
}

impl Tx {
    /// Takes in what completed: freed slots, returned credits and fins.
    fn take_in(&mut self) -> Result<(), LinkEnd> {
        let mut completions = std::mem::take(&mut self.scratch);
        let taken = self.reap(&mut completions);
        self.scratch = completions;
        taken
    }

    fn reap(&mut self, completions: &mut Vec<Completion>) -> Result<(), LinkEnd> {
        let peer = self.peer;
        completions.clear();
        if let Err(source) = self.link.poll(completions) {
            return Err(LinkEnd::Broken(FabricError::Io { peer, source }));
        }
        for c in completions.iter() {
            if c.status != WorkCompletionStatus::Success as u32 {
                return Err(LinkEnd::Broken(completion_error(peer, c)));
            }
            if c.wr_id & RECV_TAG != 0 {
                self.credits += c.imm & 0xffff;
                let fins = (c.imm >> 16) as usize;
                if fins > self.in_flight.len() || self.credits > RECV_DEPTH as u32 {
                    return Err(LinkEnd::Broken(FabricError::Protocol {
                        peer,
                        reason: format!(
                            "credit message returns {} credits and {fins} fins, more than were used",
                            c.imm & 0xffff
                        ),
                    }));
                }
                self.in_flight.drain(..fins);
                if let Err(source) = self.link.post_recv(None) {
                    return Err(LinkEnd::Broken(FabricError::Io { peer, source }));
                }
            } else {
                self.free.push(c.wr_id as usize);
            }
        }
        Ok(())
    }

    /// Whether a send may be posted now (a credit and a free slot).
    fn can_post(&self) -> bool {
        self.credits > 0 && !self.free.is_empty()
    }

    /// Posts `chunk` (at most [`SLOT_SIZE`] bytes) with `imm` from a free slot. Takes
    /// a credit and the slot only once posted. Call only when [`Tx::can_post`].
    /// The chunk carries back every credit our receiving link from the peer owes.
    fn post_chunk(&mut self, chunk: &[u8], flags: u32) -> io::Result<()> {
        let slot = *self.free.last().expect("can_post checked");
        self.link.slots.slot_mut(slot)[..chunk.len()].copy_from_slice(chunk);
        let (owed, qpn) = self.way.take_owed();
        let imm = carry(flags, owed, qpn);
        if let Err(e) = self
            .link
            .post_send(slot as u64, Some((slot, chunk.len())), imm)
        {
            self.way.give_back(owed, qpn);
            return Err(e);
        }
        if owed > 0 {
            self.sends
                .carried
                .fetch_add(u64::from(owed), AtomicOrdering::Relaxed);
        }
        self.free.pop();
        self.credits -= 1;
        Ok(())
    }

    /// Posts the descriptor of bulk payload `payload` (registered as `region`) for the
    /// receiver to read, and keeps both until its fin. Call only when
    /// [`Tx::can_post`] and fewer than [`MAX_BULK_IN_FLIGHT`] are in flight.
    fn post_descriptor(&mut self, region: &Arc<MemoryRegion>, payload: &Bytes) -> io::Result<()> {
        let rts = Rts {
            remote: payload.as_ptr() as u64,
            rkey: region.rkey(),
            len: payload.len() as u64,
        };
        self.post_chunk(&rts.encode(), BULK_RTS | LAST_CHUNK)?;
        self.in_flight.push_back((region.clone(), payload.clone()));
        Ok(())
    }
}

/// An outbound link's [`Tx`], as `send` sees it: a frame of up to [`SLOT_SIZE`] bytes
/// is posted by the sender itself (copied into a free slot, under a credit) when the
/// link's task is not using it at that moment; otherwise, and for larger frames, it
/// goes through the task's queue. `send` calls this only while nothing queued is
/// unposted, so a frame posted here never overtakes one queued before it.
struct TxLink {
    tx: Mutex<Tx>,
    /// The fabric's counts of what sends did here.
    sends: Arc<SendCounts>,
    /// Our queue pair's number, which credits the peer carries back name.
    qpn: u32,
    /// Signalled when credits carried on the peer's payloads were added (the task may
    /// be waiting for one).
    room: tokio::sync::Notify,
}

/// What `send` did with the small payloads it tried to post itself (see
/// [`BulkStats`]), counted by every [`TxLink`] of a fabric.
#[derive(Default)]
struct SendCounts {
    /// Posted directly.
    posted: AtomicU64,
    /// Found the link's task using the link, so queued.
    link_busy: AtomicU64,
    /// Found no free slot or credit, so took the link's completions in.
    take_ins: AtomicU64,
    /// Queued after such a take-in, still without room.
    no_room: AtomicU64,
    /// Credit messages the receiving links sent.
    credit_messages: AtomicU64,
    /// Credits payloads carried back.
    carried: AtomicU64,
}

impl TxLink {
    fn lock(&self) -> MutexGuard<'_, Tx> {
        self.tx.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl links::WriteThrough for TxLink {
    fn write_through(&self, payload: &Bytes) -> Result<Option<Bytes>, ()> {
        if payload.len() > SLOT_SIZE {
            return Err(());
        }
        // Never wait here (`send` holds the fabric's lock): a busy link takes it queued.
        let Ok(mut tx) = self.tx.try_lock() else {
            self.sends.link_busy.fetch_add(1, AtomicOrdering::Relaxed);
            return Err(());
        };
        if !tx.open {
            return Err(());
        }
        if !tx.can_post() {
            // Completions not taken in yet may have freed a slot or returned credits
            // (in polling mode the task may not have polled since).
            self.sends.take_ins.fetch_add(1, AtomicOrdering::Relaxed);
            if let Err(end) = tx.take_in() {
                tx.failed = Some(end);
                tx.open = false;
                return Err(());
            }
            if !tx.can_post() {
                self.sends.no_room.fetch_add(1, AtomicOrdering::Relaxed);
                return Err(());
            }
        }
        // A failed post takes nothing: the task posts the frame again and meets the
        // error itself.
        tx.post_chunk(payload, LAST_CHUNK).map_err(|_| ())?;
        self.sends.posted.fetch_add(1, AtomicOrdering::Relaxed);
        Ok(None)
    }
}

/// The sending end's task: posts what is queued (as credits, free slots and the bulk
/// bound allow), takes in completions, says goodbye once all is done.
async fn transmit(
    shared: &Shared,
    tx_link: &TxLink,
    waiter: &Waiter,
    stream: &mut TcpStream,
    peer: NodeId,
    queue: &mut UnboundedReceiver<Outgoing>,
    unwritten: &AtomicUsize,
) -> LinkEnd {
    let mut pending: Option<Pending> = None;
    let mut goodbye = false;
    let mut word = [0u8; 4];
    let mut word_len = 0;
    loop {
        let (done, awaited) = {
            let mut tx = tx_link.lock();
            if let Some(end) = tx.failed.take() {
                return end;
            }
            if let Err(end) = tx.take_in() {
                return end;
            }
            // Post as much as credits, free slots and the bulk bound allow.
            loop {
                if pending.is_none() && !goodbye {
                    match queue.try_recv() {
                        Ok(Outgoing::Frame(payload)) => {
                            pending = Some(Pending::new(shared, payload))
                        }
                        Ok(Outgoing::Goodbye) => goodbye = true,
                        Ok(Outgoing::Rest(_)) => unreachable!("verbs never writes in part"),
                        Err(_) => {}
                    }
                }
                let Some(p) = pending.as_mut() else { break };
                if !tx.can_post() {
                    break;
                }
                let posted = if let Some(region) = &p.region {
                    if tx.in_flight.len() >= MAX_BULK_IN_FLIGHT {
                        break;
                    }
                    shared.bulk_sent.fetch_add(1, AtomicOrdering::Relaxed);
                    p.offset = p.payload.len();
                    tx.post_descriptor(region, &p.payload)
                } else {
                    let len = (p.payload.len() - p.offset).min(SLOT_SIZE);
                    let chunk = p.offset..p.offset + len;
                    let last = chunk.end == p.payload.len();
                    let posted =
                        tx.post_chunk(&p.payload[chunk], if last { LAST_CHUNK } else { 0 });
                    p.offset += len;
                    posted
                };
                if let Err(source) = posted {
                    return LinkEnd::Broken(FabricError::Io { peer, source });
                }
                if p.offset == p.payload.len() {
                    pending = None;
                    // Wholly posted: sends may post directly again once none is left.
                    unwritten.fetch_sub(1, AtomicOrdering::AcqRel);
                }
            }
            // Posted sends not completed yet, or bulk payloads not read yet.
            let awaited = tx.free.len() < RECV_DEPTH || !tx.in_flight.is_empty();
            // Every send completed (acknowledged by the peer's HCA) and every bulk
            // payload was read: goodbye may be said.
            (goodbye && pending.is_none() && !awaited, awaited)
        };
        if done {
            let (mut rd, mut wr) = stream.split();
            handshake::say_goodbye(&mut rd, &mut wr).await;
            return LinkEnd::Local;
        }
        let want_queue = pending.is_none() && !goodbye;
        // Polling mode polls the CQ on every turn only while the task waits for a
        // credit or a slot (a frame is pending) or says goodbye. Otherwise it waits
        // for the queue, and while posted sends have not completed or bulk payloads
        // are being read it takes completions in every REAP_INTERVAL, so an error
        // completion is seen within that. An idle link does so every
        // IDLE_REAP_INTERVAL (a failed queue pair flushes its posted receives in
        // error), which also bounds how long a send posted directly while the task
        // sleeps idle waits to be looked at. Direct sends take completions in
        // themselves when out of slots or credits. So an idle outbound link does not
        // lengthen the runtime's polling loop, in which the inbound links look for
        // the next message.
        let want_cq = !shared.poll_mode || !want_queue;
        tokio::select! {
            r = waiter.wait(), if want_cq => if let Err(source) = r {
                return LinkEnd::Broken(FabricError::Io { peer, source });
            },
            _ = tokio::time::sleep(if awaited { REAP_INTERVAL } else { IDLE_REAP_INTERVAL }), if !want_cq => {}
            // Credits carried on the peer's payloads (not on this link's CQ).
            _ = tx_link.room.notified(), if !want_queue => {}
            item = queue.recv(), if want_queue => match item {
                None => return LinkEnd::Local,
                Some(Outgoing::Frame(payload)) => pending = Some(Pending::new(shared, payload)),
                Some(Outgoing::Goodbye) => goodbye = true,
                Some(Outgoing::Rest(_)) => unreachable!("verbs never writes in part"),
            },
            r = stream.read(&mut word[word_len..]) => match r {
                Ok(0) => return LinkEnd::Broken(FabricError::PeerClosed { peer }),
                Ok(n) => {
                    word_len += n;
                    if word_len == word.len() {
                        let w = u32::from_le_bytes(word);
                        if w == GOODBYE {
                            debug!("fabric peer said goodbye");
                            return LinkEnd::Goodbye;
                        }
                        return LinkEnd::Broken(FabricError::Protocol {
                            peer,
                            reason: format!("unexpected word {w:#010x} from the acceptor"),
                        });
                    }
                }
                Err(source) => return LinkEnd::Broken(FabricError::Io { peer, source }),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memlock_error_names_the_limit_and_the_fix() {
        let e = memlock_error(1 << 20, Some(&io::Error::from_raw_os_error(libc::ENOMEM)));
        let text = e.to_string();
        assert!(text.contains("1048576 bytes"), "{text}");
        assert!(text.contains("RLIMIT_MEMLOCK"), "{text}");
        assert!(text.contains("ulimit -l"), "{text}");
        assert_eq!(e.kind(), io::ErrorKind::OutOfMemory);
    }

    #[test]
    fn options_from_env_parse_device_port_and_gid() {
        // Explicit values win over the environment, which this test leaves alone.
        let opts = VerbsOptions {
            device: Some("rxe0".into()),
            port: Some(1),
            gid_index: Some(3),
            busy_poll: Some(false),
            poll_spins: Some(4),
        };
        assert_eq!(opts.clone().with_env().unwrap(), opts);
    }

    #[test]
    fn poll_spins_must_be_a_count_of_at_least_one() {
        assert_eq!(parse_poll_spins(" 32 "), Ok(32));
        assert_eq!(parse_poll_spins("1"), Ok(1));
        for bad in ["0", "-1", "many", "1.5"] {
            let e = parse_poll_spins(bad).unwrap_err();
            assert!(e.contains(POLL_SPINS_ENV) && e.contains(bad), "{e}");
        }
    }

    #[test]
    fn bulk_descriptor_round_trips_little_endian() {
        let rts = Rts {
            remote: 0x0102_0304_0506_0708,
            rkey: 0x0a0b_0c0d,
            len: (4 << 20) + 3,
        };
        let bytes = rts.encode();
        assert_eq!(bytes[0], 0x08, "remote address first, little-endian");
        assert_eq!(bytes[8], 0x0d, "then the rkey");
        let back = Rts::decode(&bytes);
        assert_eq!(
            (back.remote, back.rkey, back.len),
            (rts.remote, rts.rkey, rts.len)
        );
    }

    #[test]
    fn carried_credits_round_trip_with_the_flags() {
        for flags in [0, LAST_CHUNK, BULK_RTS | LAST_CHUNK] {
            // No credits: the immediate is the flags alone, whatever the QPN.
            assert_eq!(carry(flags, 0, 0xab_cdef), flags);
            assert_eq!(carried(flags), (0, 0));
            for credits in [1, 2, RECV_DEPTH as u32] {
                for qpn in [1, 0x11, 0xff_ffff] {
                    let imm = carry(flags, credits, qpn);
                    assert_eq!(imm & (LAST_CHUNK | BULK_RTS), flags);
                    assert_eq!(carried(imm), (credits, qpn));
                }
            }
        }
    }

    #[test]
    fn credit_batch_never_strands_a_sender() {
        // A sender out of credits has RECV_DEPTH buffers consumed at the receiver,
        // which must be enough to trigger a credit return.
        const { assert!(CREDIT_BATCH as usize <= RECV_DEPTH && CREDIT_BATCH > 0) };
    }
}

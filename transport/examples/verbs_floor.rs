//! The verbs floor: the smallest Rust program that does what the verbs fabric does per
//! small message, to tell the fabric's own cost from the device's and the language's.
//! Same `sideway` set-up as the fabric (PD, registered buffers, RC QP, 16 receive
//! buffers, inline sends with immediate data, signalled), one thread, no runtime,
//! busy-polling; a ping-pong of `ITERS` round trips (a tenth more as warm-up) between
//! two processes on one device. Prints the one-way latency in microseconds, the mean
//! of the timed round trips (like osu_latency, and perftest's t_avg).
//!
//! ```text
//! verbs_floor server GID_INDEX PORT ITERS SIZE
//! verbs_floor client GID_INDEX PORT ITERS SIZE SERVER_IP
//! ```
//!
//! In the rxe guest: `verbs_floor server 1 18600 3000 8 & verbs_floor client 2 18600
//! 3000 8 192.168.78.1` beside `ib_send_lat` and `COHORT_VERBS_POLL=1 cohort-bench
//! transport-latency` (bench/results/2026-11-25-session13.md). Device: the first one.
//! With `VERBS_FLOOR_TOKIO=1` (both ends) the loop runs on a current-thread Tokio
//! runtime and yields to it after each empty poll, as a busy-polling fabric link does.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

use rdma_mummy_sys::{ibv_poll_cq, ibv_wc};
use sideway::ibverbs::address::{AddressHandleAttribute, Gid};
use sideway::ibverbs::completion::{CompletionQueue, GenericCompletionQueue};
use sideway::ibverbs::device::DeviceList;
use sideway::ibverbs::device_context::Mtu;
use sideway::ibverbs::queue_pair::{
    BasicQueuePair, PostSendGuard, QueuePair, QueuePairAttribute, QueuePairState,
    SetScatterGatherEntry, WorkRequestFlags,
};
use sideway::ibverbs::AccessFlags;

type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// Receive buffers posted (as the fabric's `RECV_DEPTH`).
const DEPTH: usize = 16;
/// Bytes per receive buffer.
const SLOT: usize = 4096;
/// Sends up to this many bytes go inline (as the fabric's).
const MAX_INLINE: usize = 128;
/// Marks the send work request; receives carry their slot number.
const SEND_ID: u64 = 1 << 40;

fn main() -> Res<()> {
    let args: Vec<String> = std::env::args().collect();
    let usage = "usage: verbs_floor server|client GID_INDEX PORT ITERS SIZE [SERVER_IP]";
    if args.len() < 6 || (args[1] == "client" && args.len() < 7) {
        return Err(usage.into());
    }
    let server = match args[1].as_str() {
        "server" => true,
        "client" => false,
        _ => return Err(usage.into()),
    };
    let gid_index: u32 = args[2].parse()?;
    let port: u16 = args[3].parse()?;
    let iters: usize = args[4].parse()?;
    let size: usize = args[5].parse()?;
    if size > SLOT {
        return Err(format!("SIZE is at most {SLOT}").into());
    }

    let list = DeviceList::new()?;
    let dev = list.iter().next().ok_or("no RDMA device")?;
    let ctx = dev.open()?;
    let gid = ctx.query_gid(1, gid_index)?;
    let pd = ctx.alloc_pd()?;
    // Receive slots, then one send slot.
    let mut mem = vec![0u8; SLOT * (DEPTH + 1)].into_boxed_slice();
    // SAFETY: `mem` outlives the registration (declared before it, dropped after).
    let mr = unsafe {
        pd.reg_mr(
            mem.as_mut_ptr() as usize,
            mem.len(),
            AccessFlags::LocalWrite | AccessFlags::RemoteWrite,
        )
    }?;
    let base = mem.as_ptr() as u64;
    let cq = ctx.create_cq_builder().setup_cqe(256).build()?;
    let mut qp = pd
        .create_qp_builder()
        .setup_max_send_wr(64)
        .setup_max_recv_wr(DEPTH as u32)
        .setup_max_send_sge(1)
        .setup_max_recv_sge(1)
        .setup_max_inline_data(MAX_INLINE as u32)
        .setup_send_cq(GenericCompletionQueue::from(cq.clone()))
        .setup_recv_cq(GenericCompletionQueue::from(cq.clone()))
        .build()?;
    let mut attr = QueuePairAttribute::new();
    attr.setup_state(QueuePairState::Init)
        .setup_pkey_index(0)
        .setup_port(1)
        .setup_access_flags(AccessFlags::LocalWrite | AccessFlags::RemoteWrite);
    qp.modify(&attr)?;

    // Out of band: QP number and GID each way.
    let mut oob = if server {
        TcpListener::bind(("0.0.0.0", port))?.accept()?.0
    } else {
        connect_retrying(&args[6], port)?
    };
    let mut mine = qp.qp_number().to_le_bytes().to_vec();
    mine.extend_from_slice(&gid.raw);
    oob.write_all(&mine)?;
    let mut theirs = [0u8; 20];
    oob.read_exact(&mut theirs)?;
    let remote_qpn = u32::from_le_bytes(theirs[..4].try_into()?);
    let mut remote_gid = [0u8; 16];
    remote_gid.copy_from_slice(&theirs[4..]);
    let (my_psn, their_psn) = if server { (100, 200) } else { (200, 100) };

    let mut attr = QueuePairAttribute::new();
    attr.setup_state(QueuePairState::ReadyToReceive)
        .setup_path_mtu(Mtu::Mtu1024)
        .setup_dest_qp_num(remote_qpn)
        .setup_rq_psn(their_psn)
        .setup_max_dest_read_atomic(1)
        .setup_min_rnr_timer(12);
    let mut ah = AddressHandleAttribute::new();
    ah.setup_dest_lid(0)
        .setup_port(1)
        .setup_service_level(0)
        .setup_grh_src_gid_index(gid_index as u8)
        .setup_grh_dest_gid(&Gid { raw: remote_gid })
        .setup_grh_hop_limit(64);
    attr.setup_address_vector(&ah);
    qp.modify(&attr)?;
    let mut attr = QueuePairAttribute::new();
    attr.setup_state(QueuePairState::ReadyToSend)
        .setup_sq_psn(my_psn)
        .setup_timeout(16)
        .setup_retry_cnt(7)
        .setup_rnr_retry(7)
        .setup_max_read_atomic(1);
    qp.modify(&attr)?;

    let lkey = mr.lkey();
    let post_recv = |qp: &mut BasicQueuePair, slot: usize| -> Res<()> {
        let mut guard = qp.start_post_recv();
        let wr = guard.construct_wr(slot as u64);
        // SAFETY: the slot lies in `mem`, registered for as long as the QP exists.
        unsafe { wr.setup_sge(lkey, base + (slot * SLOT) as u64, SLOT as u32) };
        Ok(guard.post()?)
    };
    for slot in 0..DEPTH {
        post_recv(&mut qp, slot)?;
    }
    // Both sides' receives are posted before the first send.
    oob.write_all(&[1])?;
    oob.read_exact(&mut [0u8; 1])?;

    let send_addr = base + (DEPTH * SLOT) as u64;
    let flags = if size > 0 && size <= MAX_INLINE {
        WorkRequestFlags::Signaled | WorkRequestFlags::Inline
    } else {
        WorkRequestFlags::Signaled
    };
    let send = |qp: &mut BasicQueuePair| -> Res<()> {
        let mut guard = qp.start_post_send();
        let wr = guard.construct_wr(SEND_ID, flags).setup_send_imm(7);
        if size > 0 {
            // SAFETY: as for the receive slots.
            unsafe { wr.setup_sge(lkey, send_addr, size as u32) };
        }
        Ok(guard.post()?)
    };
    // One look at the CQ (send completions are taken on the way): `true` when a
    // receive completed, its slot then reposted.
    let poll_once = |qp: &mut BasicQueuePair| -> Res<bool> {
        let mut wcs = [std::mem::MaybeUninit::<ibv_wc>::uninit(); 16];
        // SAFETY: the CQ is alive; `wcs` has room for 16 entries.
        let n = unsafe { ibv_poll_cq(cq.cq().as_ptr(), 16, wcs.as_mut_ptr().cast()) };
        let n = usize::try_from(n).map_err(|_| "polling the CQ failed")?;
        let mut got = None;
        for wc in &wcs[..n] {
            // SAFETY: the provider filled the first n entries.
            let wc = unsafe { wc.assume_init_ref() };
            if wc.status != 0 {
                return Err(format!("work completion status {}", wc.status).into());
            }
            if wc.wr_id != SEND_ID {
                got = Some(wc.wr_id as usize);
            }
        }
        match got {
            Some(slot) => post_recv(qp, slot).map(|()| true),
            None => Ok(false),
        }
    };

    let warmup = iters / 10;
    let mut start = Instant::now();
    if std::env::var("VERBS_FLOOR_TOKIO").as_deref() == Ok("1") {
        // The same loop on a current-thread Tokio runtime (as the fabric's node runs),
        // yielding to it after each empty look at the CQ, as a busy-polling link does:
        // what a runtime turn adds, without the rest of the fabric.
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        rt.block_on(async {
            for i in 0..warmup + iters {
                if i == warmup {
                    start = Instant::now();
                }
                if !server {
                    send(&mut qp)?;
                }
                while !poll_once(&mut qp)? {
                    tokio::task::yield_now().await;
                }
                if server {
                    send(&mut qp)?;
                }
            }
            Ok::<(), Box<dyn std::error::Error>>(())
        })?;
    } else {
        // The same loop again, outside any runtime: run inside `block_on` without ever
        // yielding, it measured 14% slower (8 rounds in one guest: 66.0 against 58.1
        // µs), so the floor keeps its own copy.
        for i in 0..warmup + iters {
            if i == warmup {
                start = Instant::now();
            }
            if !server {
                send(&mut qp)?;
            }
            while !poll_once(&mut qp)? {}
            if server {
                send(&mut qp)?;
            }
        }
    }
    let one_way = start.elapsed().as_secs_f64() * 1e6 / (2 * iters.max(1)) as f64;
    if !server {
        println!("# Size  Latency(us)  (verbs_floor: one thread, busy-polling, one way)");
        println!("{size:<6}  {one_way:.2}");
    }
    // Let the peer's last send be acknowledged before the QP goes away.
    std::thread::sleep(Duration::from_millis(200));
    Ok(())
}

fn connect_retrying(host: &str, port: u16) -> Res<TcpStream> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match TcpStream::connect((host, port)) {
            Ok(s) => return Ok(s),
            Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(50)),
            Err(e) => return Err(format!("connecting to {host}:{port}: {e}").into()),
        }
    }
}

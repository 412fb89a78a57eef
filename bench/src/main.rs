//! `cohort-bench`: OSU-style latency benchmarks, run under `cohort run`.
//!
//! Like osu_allgather: each iteration is timed on every rank, a fence (outside the
//! timed region) separates iterations, warm-up iterations are skipped, and the table
//! gives the average/min/max over ranks of each rank's mean, plus the mean of the
//! ranks' medians. Every table also prints a baseline measured in the same run — the
//! round trip of a bare Unix-socket ping-pong between two ranks of one node, or a TCP
//! ping-pong between ranks on two different (emulated) nodes — and the ratio of the
//! median to the ideal time: one-way baseline latency × sequential hops.

use std::future::Future;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand, ValueEnum};

mod transport;
use cohort::{
    codes, Client, ConstructOpts, FenceOpts, GroupEventInfo, GroupResult, InviteOpts, ProcId,
    Scope, Value,
};
use cohort_topology::{Allgather, TreeShape};

#[derive(Parser)]
#[command(
    name = "cohort-bench",
    about = "OSU-style latency benchmarks for cohort (run under `cohort run`)",
    after_help = "EXAMPLES:\n  cohort run -n 4 cohort-bench fence\n  cohort run --nodes 3 -n 6 cohort-bench group --iterations 300\n  cohort-bench transport-latency --fabric tcp\n  cohort-bench transport-bw --fabric verbs   (inside deploy/rxe/rxe-run.sh)"
)]
struct Cli {
    #[command(subcommand)]
    what: What,
    /// Timed iterations per row.
    #[arg(long, short = 'i', global = true, default_value_t = 1000)]
    iterations: usize,
    /// Warm-up iterations skipped per row.
    #[arg(long, short = 'x', global = true, default_value_t = 100)]
    warmup: usize,
}

#[derive(Subcommand)]
enum What {
    /// Fence with data collection, payload sizes 0 B .. 64 KiB per rank.
    Fence {
        /// Smallest payload per rank, bytes.
        #[arg(long, default_value_t = 0)]
        min_size: usize,
        /// Largest payload per rank, bytes (powers of two from 1 up to it).
        #[arg(long, default_value_t = 65536)]
        max_size: usize,
        /// Register a catch-all event handler first, as applications with an error
        /// handler do (events are then read promptly between calls).
        #[arg(long)]
        with_handler: bool,
    },
    /// Group construct (with a context id) and destruct: collective (every rank a
    /// leader), bootstrap (two leaders, the rest added) or invite (rank 0 invites).
    Group {
        #[arg(long, value_enum, default_value_t = Method::Collective)]
        method: Method,
    },
    /// PMIx_Spawn: rank 0 spawns 1, 2, 4 … processes of a program (/bin/true by
    /// default), timed until the call returns, i.e. every spawned process was started
    /// on its node server. Its own iteration counts (spawns start processes).
    Spawn {
        /// Spawns timed per row.
        #[arg(long, default_value_t = 50)]
        spawns: usize,
        /// Warm-up spawns skipped per row.
        #[arg(long, default_value_t = 5)]
        spawn_warmup: usize,
        /// Largest number of processes per spawn (powers of two up to it).
        #[arg(long, default_value_t = 8)]
        max_procs: u32,
        /// The program spawned, with its arguments.
        #[arg(long, num_args = 1.., default_value = "/bin/true")]
        program: Vec<String>,
    },
    /// Fabric one-way latency between two processes (osu_latency format), with a
    /// same-run reference: raw TCP (tcp) or perftest ib_send_lat (verbs). Not under
    /// `cohort run`: the bench starts its peer process itself.
    TransportLatency(transport::Opts),
    /// Fabric bandwidth between two processes (osu_bw format), with a same-run
    /// reference: raw TCP stream (tcp) or perftest ib_write_bw (verbs).
    TransportBw(transport::Opts),
    /// The peer process of the transport benches (started by them).
    #[command(hide = true)]
    TransportPeer(transport::PeerOpts),
}

#[derive(Clone, Copy, ValueEnum, PartialEq, Eq)]
enum Method {
    Collective,
    Bootstrap,
    Invite,
}

impl Method {
    fn name(self) -> &'static str {
        match self {
            Method::Collective => "collective",
            Method::Bootstrap => "bootstrap",
            Method::Invite => "invite",
        }
    }
}

/// The group every `group` row constructs and destructs, once per iteration.
const GROUP_ID: &str = "bench-group";

/// A fence that exchanges posted data, bounded so a broken run cannot hang.
const COLLECT: FenceOpts = FenceOpts {
    collect: true,
    timeout_ms: Some(60_000),
    ft_collective: false,
};

struct Stats {
    avg: f64,
    min: f64,
    max: f64,
    median: f64,
}

fn main() {
    let cli = Cli::parse();
    let result = match cli.what {
        What::TransportLatency(o) => {
            transport::run(transport::Mode::Latency, o, cli.iterations, cli.warmup)
        }
        What::TransportBw(o) => transport::run(transport::Mode::Bw, o, cli.iterations, cli.warmup),
        What::TransportPeer(p) => transport::run_peer(p),
        What::Spawn {
            spawns,
            spawn_warmup,
            max_procs,
            program,
        } => run_spawn(spawns, spawn_warmup, max_procs, program),
        _ => run(cli),
    };
    if let Err(e) = result {
        eprintln!("cohort-bench: {e}");
        std::process::exit(1);
    }
}

type Res<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

fn run(cli: Cli) -> Res<()> {
    let c = Client::init()?;
    let nodes = c.job().num_nodes;
    let before = Baseline::measure(&c, 0)?;
    let mut rows: Vec<(String, Stats)> = Vec::new();
    let title;
    let hops = |depth: usize| if nodes == 1 { 2 } else { 2 + depth };
    // Server-to-server hops on the critical path, for the algorithm the node servers
    // use for this many servers (flat, no switch map).
    let depth = {
        let all: Vec<u32> = (0..nodes).collect();
        let allgather: Allgather = std::env::var(cohort_proto::env::ALLGATHER)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(Allgather::Tree);
        if allgather.disseminates(nodes as usize) {
            // ⌈log2 n⌉ rounds, then the lean outcome down a binary tree.
            let rounds = cohort_topology::ceil_log2(nodes as usize) as usize;
            rounds + cohort_topology::Tree::new(&all, 0, TreeShape::KAry(2)).depth()
        } else {
            let shape = cohort_topology::default_shape(nodes as usize);
            2 * cohort_topology::Tree::new(&all, 0, shape).depth()
        }
    };
    match cli.what {
        What::Fence {
            min_size,
            max_size,
            with_handler,
        } => {
            if with_handler {
                c.register_event_handler(None, |_, _| {});
            }
            title = format!(
                "# cohort-bench fence (collect data{}{}): {} ranks on {} node server(s), {} iterations ({} warm-up)",
                if with_handler { ", a catch-all event handler registered" } else { "" },
                if c.fences_in_shared_memory() { ", node-local: the ranks meet in shared memory, data stays at the node server" } else { "" },
                c.size(), nodes, cli.iterations, cli.warmup
            );
            let mut sizes = vec![min_size];
            let mut s = min_size.max(1);
            while s <= max_size {
                if s > min_size {
                    sizes.push(s);
                }
                s *= 2;
            }
            for size in sizes {
                let payload = vec![0xabu8; size];
                let st = measure(
                    &c,
                    cli.iterations,
                    cli.warmup,
                    &format!("fence{size}"),
                    |c| {
                        c.put(Scope::Remote, "bench.payload", payload.clone())?;
                        let t = Instant::now();
                        c.fence(&[], COLLECT)?;
                        Ok(t.elapsed())
                    },
                )?;
                rows.push((size.to_string(), st));
            }
        }
        What::Group { method } => {
            let (what, group_rows) = match method {
                Method::Collective => ("every rank a leader", group_collective(&c, &cli)?),
                Method::Bootstrap => (
                    "two leaders knowing only the leader count, half of the other ranks added by each",
                    group_bootstrap(&c, &cli)?,
                ),
                Method::Invite => (
                    "rank 0 invites every other rank; invitees accept from their event handler with the async join; timed: invite / join call to its return",
                    group_invite(&c, &cli)?,
                ),
            };
            title = format!(
                "# cohort-bench group --method {} (context id; {what}): {} ranks on {} node server(s), {} iterations ({} warm-up)",
                method.name(), c.size(), nodes, cli.iterations, cli.warmup
            );
            rows = group_rows;
        }
        What::TransportLatency(_)
        | What::TransportBw(_)
        | What::TransportPeer(_)
        | What::Spawn { .. } => {
            unreachable!("dispatched in main")
        }
    }
    let after = Baseline::measure(&c, 1)?;
    // A whole-job fence in shared memory has one hop: the last arrival releasing the
    // others (no request or reply through the node server).
    let fence_in_shm = matches!(cli.what, What::Fence { .. }) && c.fences_in_shared_memory();
    let hops = if fence_in_shm { 1 } else { hops(depth) };
    report(&c, &title, &before, &after, &rows, hops);
    c.finalize()?;
    Ok(())
}

type Rows = Vec<(String, Stats)>;

/// `cohort-bench spawn`: rank 0 times its spawns; the other ranks wait at a fence.
fn run_spawn(spawns: usize, warmup: usize, max_procs: u32, program: Vec<String>) -> Res<()> {
    use cohort::{SpawnApp, SpawnOpts};
    let c = Client::init()?;
    if c.rank() == 0 {
        println!(
            "# cohort-bench spawn: rank 0 of {} spawns N processes of {:?} (block-wise over {} node server(s)); timed: the spawn call, which returns once every one started; {spawns} spawns per row ({warmup} warm-up)",
            c.size(),
            program.join(" "),
            c.job().num_nodes
        );
        println!(
            "{:<8}{:>20}{:>20}{:>20}{:>20}",
            "# Procs", "Avg Latency(us)", "Min Latency(us)", "Max Latency(us)", "Median(us)"
        );
        let mut np = 1;
        while np <= max_procs.max(1) {
            let app = SpawnApp {
                command: program.clone(),
                maxprocs: np,
                env: Vec::new(),
                cwd: None,
                pset: None,
            };
            let mut us = Vec::with_capacity(spawns);
            for i in 0..spawns + warmup {
                let t = Instant::now();
                c.spawn(vec![app.clone()], SpawnOpts::default())?;
                if i >= warmup {
                    us.push(t.elapsed().as_secs_f64() * 1e6);
                }
            }
            us.sort_by(|a, b| a.total_cmp(b));
            let avg = us.iter().sum::<f64>() / us.len().max(1) as f64;
            let (min, max) = (
                us.first().copied().unwrap_or(0.0),
                us.last().copied().unwrap_or(0.0),
            );
            let median = us.get(us.len() / 2).copied().unwrap_or(0.0);
            println!("{np:<8}{avg:>20.2}{min:>20.2}{max:>20.2}{median:>20.2}");
            np *= 2;
        }
    }
    c.fence(&[], FenceOpts::default())?;
    c.finalize()?;
    Ok(())
}

/// Construct options every method's callers use: a context id, bounded.
fn bench_construct_opts() -> ConstructOpts {
    ConstructOpts {
        assign_context_id: true,
        timeout_ms: Some(60_000),
        ..Default::default()
    }
}

/// Times `construct` (which returns the group and its own timed part) and the destruct
/// that follows it, per iteration; a `construct` row and a `destruct` row.
fn construct_destruct_rows(
    c: &Client,
    cli: &Cli,
    mut construct: impl FnMut(&Client) -> Res<(GroupResult, Duration)>,
) -> Res<Rows> {
    let mut destructs = Vec::new();
    let st = measure(c, cli.iterations, cli.warmup, "construct", |c| {
        let (g, took) = construct(c)?;
        if g.context_id.is_none() {
            return Err("no context id".into());
        }
        let t = Instant::now();
        c.group_destruct(GROUP_ID, Some(Duration::from_secs(60)))?;
        destructs.push(t.elapsed());
        Ok(took)
    })?;
    let mut rows = vec![("construct".to_string(), st)];
    let st = reduce(c, "destruct", &destructs[cli.warmup.min(destructs.len())..])?;
    rows.push(("destruct".into(), st));
    Ok(rows)
}

/// §6.4.3.1: every rank calls with the full leader list.
fn group_collective(c: &Client, cli: &Cli) -> Res<Rows> {
    let all: Vec<ProcId> = (0..c.size()).map(|r| ProcId::new(c.nspace(), r)).collect();
    let opts = bench_construct_opts();
    construct_destruct_rows(c, cli, |c| {
        let t = Instant::now();
        let g = c.group_construct(GROUP_ID, &all, opts.clone())?;
        Ok((g, t.elapsed()))
    })
}

/// The bootstrap leaders: rank 0 and the first rank of the last node (rank n/2 on one
/// node), or rank 0 alone in a one-rank job.
fn bootstrap_leaders(c: &Client) -> Vec<u32> {
    let job = c.job();
    let second = if job.num_nodes > 1 {
        job.ranks_on(job.num_nodes - 1)
            .first()
            .copied()
            .unwrap_or(0)
    } else {
        c.size() / 2
    };
    if second == 0 {
        vec![0]
    } else {
        vec![0, second]
    }
}

/// §6.4.3.2: each leader passes only itself and the leader count, and adds every
/// other non-leader rank (alternately, so each adds half).
fn group_bootstrap(c: &Client, cli: &Cli) -> Res<Rows> {
    let leaders = bootstrap_leaders(c);
    let me = c.rank();
    let mut opts = bench_construct_opts();
    let procs = match leaders.iter().position(|&l| l == me) {
        Some(i) => {
            opts.bootstrap = Some(leaders.len() as u32);
            opts.add_members = (0..c.size())
                .filter(|r| !leaders.contains(r))
                .enumerate()
                .filter(|(k, _)| k % leaders.len() == i)
                .map(|(_, r)| ProcId::new(c.nspace(), r))
                .collect();
            vec![c.proc_id().clone()]
        }
        None => Vec::new(),
    };
    construct_destruct_rows(c, cli, |c| {
        let t = Instant::now();
        let g = c.group_construct(GROUP_ID, &procs, opts.clone())?;
        Ok((g, t.elapsed()))
    })
}

type JoinReply = std::pin::Pin<
    Box<dyn Future<Output = Result<Option<GroupResult>, cohort::CohortError>> + Send>,
>;

/// §6.4.3.3: rank 0 invites every other rank; each invitee accepts from its
/// GROUP_INVITED handler with the async join and hands the reply future, with the time
/// the join was called, to the main thread, which waits for it. Timed: the leader's
/// invite call, an invitee's join call, each to its return.
fn group_invite(c: &Client, cli: &Cli) -> Res<Rows> {
    if c.size() < 2 {
        return Err("--method invite needs at least 2 ranks".into());
    }
    let me = c.rank();
    let leader = ProcId::new(c.nspace(), 0);
    let invitees: Vec<ProcId> = (1..c.size()).map(|r| ProcId::new(c.nspace(), r)).collect();
    // Nobody waits for these; consume them so they do not pile up in the event cache.
    c.register_event_handler(
        Some(&[
            codes::GROUP_CONSTRUCT_COMPLETE,
            codes::GROUP_INVITE_ACCEPTED,
        ]),
        |_, _| {},
    );
    let (joins_tx, joins) = std::sync::mpsc::channel::<(Instant, JoinReply)>();
    let joins_tx = std::sync::Mutex::new(joins_tx);
    if me != 0 {
        c.register_event_handler(Some(&[codes::GROUP_INVITED]), move |c, ev| {
            let inv = GroupEventInfo::of(ev);
            let (Some(id), Some(from)) = (inv.id, inv.leader) else {
                return;
            };
            let t = Instant::now();
            let reply = c.group_join_async(&id, &from, true, Some(Duration::from_secs(60)), vec![]);
            if let Ok(tx) = joins_tx.lock() {
                let _ = tx.send((t, Box::pin(reply)));
            }
        });
    }
    let opts = InviteOpts {
        assign_context_id: true,
        timeout_ms: Some(60_000),
        ..Default::default()
    };
    construct_destruct_rows(c, cli, |c| {
        if me == 0 {
            let t = Instant::now();
            let g = c.group_invite(GROUP_ID, &invitees, opts.clone())?;
            return Ok((g, t.elapsed()));
        }
        let (t, reply) = joins
            .recv_timeout(Duration::from_secs(60))
            .map_err(|_| format!("no invitation from {leader} within 60 s"))?;
        let g = block_on(reply)?.ok_or("an accepting join returned no group")?;
        let took = t.elapsed();
        if g.id != GROUP_ID {
            return Err(format!("joined {:?}, expected {GROUP_ID:?}", g.id).into());
        }
        Ok((g, took))
    })
}

/// Drives a reply future on this thread (no async runtime needed).
fn block_on<F: Future>(f: F) -> F::Output {
    struct Unpark(std::thread::Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut f = std::pin::pin!(f);
    loop {
        match f.as_mut().poll(&mut cx) {
            Poll::Ready(v) => return v,
            Poll::Pending => std::thread::park(),
        }
    }
}

/// Prints the table on rank 0. The ideal uses the faster of the two baselines
/// (measured before and after the rows), which can only make the ratio worse.
fn report(
    c: &Client,
    title: &str,
    before: &Baseline,
    after: &Baseline,
    rows: &[(String, Stats)],
    hops: usize,
) {
    if c.rank() != 0 {
        return;
    }
    let rtt = before.rtt_us.min(after.rtt_us);
    println!("{title}");
    println!(
        "# Baseline (same run): {} ping-pong round trip between rank 0 and rank {}: {:.2} us before, {:.2} us after the rows; using {:.2} us",
        before.kind, before.peer, before.rtt_us, after.rtt_us, rtt
    );
    println!("# Ideal = baseline one-way latency x Hops (sequential messages on the critical path); Ratio = Median / Ideal");
    println!(
        "{:<12}{:>18}{:>18}{:>18}{:>14}{:>6}{:>12}{:>8}",
        "# Size",
        "Avg Latency(us)",
        "Min Latency(us)",
        "Max Latency(us)",
        "Median(us)",
        "Hops",
        "Ideal(us)",
        "Ratio"
    );
    let ideal = rtt / 2.0 * hops as f64;
    for (label, st) in rows {
        println!(
            "{:<12}{:>18.2}{:>18.2}{:>18.2}{:>14.2}{:>6}{:>12.2}{:>8.2}",
            label,
            st.avg,
            st.min,
            st.max,
            st.median,
            hops,
            ideal,
            st.median / ideal
        );
    }
}

/// Runs `iters + warmup` iterations of `op` (which returns its own timed part), with
/// an untimed fence after each, and reduces the per-rank results on rank 0.
fn measure(
    c: &Client,
    iters: usize,
    warmup: usize,
    tag: &str,
    mut op: impl FnMut(&Client) -> Res<Duration>,
) -> Res<Stats> {
    let mut times = Vec::with_capacity(iters);
    for i in 0..iters + warmup {
        let t = op(c)?;
        if i >= warmup {
            times.push(t);
        }
        c.fence(&[], FenceOpts::default())?;
    }
    reduce(c, tag, &times)
}

/// Publishes this rank's mean and median, collects every rank's on rank 0.
fn reduce(c: &Client, tag: &str, times: &[Duration]) -> Res<Stats> {
    let mut us: Vec<f64> = times.iter().map(|t| t.as_secs_f64() * 1e6).collect();
    us.sort_by(|a, b| a.total_cmp(b));
    let mean = us.iter().sum::<f64>() / us.len().max(1) as f64;
    let median = us.get(us.len() / 2).copied().unwrap_or(0.0);
    c.put(Scope::Global, &format!("bench.{tag}.mean"), mean.to_bits())?;
    c.put(
        Scope::Global,
        &format!("bench.{tag}.median"),
        median.to_bits(),
    )?;
    c.fence(&[], COLLECT)?;
    let mut means = Vec::new();
    let mut medians = Vec::new();
    if c.rank() == 0 {
        for r in 0..c.size() {
            let p = ProcId::new(c.nspace(), r);
            let get = |k: &str| -> Res<f64> {
                match c.get(&p, k, Some(Duration::from_secs(30)))? {
                    Value::U64(bits) => Ok(f64::from_bits(bits)),
                    v => Err(format!("unexpected {v:?}").into()),
                }
            };
            means.push(get(&format!("bench.{tag}.mean"))?);
            medians.push(get(&format!("bench.{tag}.median"))?);
        }
    } else {
        means.push(mean);
        medians.push(median);
    }
    Ok(Stats {
        avg: means.iter().sum::<f64>() / means.len() as f64,
        min: means.iter().copied().fold(f64::INFINITY, f64::min),
        max: means.iter().copied().fold(0.0, f64::max),
        median: medians.iter().sum::<f64>() / medians.len() as f64,
    })
}

/// The same-run baseline: a bare socket ping-pong between rank 0 and a peer rank —
/// rank 1 over a Unix socket on one node, or the first rank of node 1 over TCP between
/// the two emulated nodes' loopback addresses.
struct Baseline {
    kind: &'static str,
    peer: u32,
    rtt_us: f64,
}

const PINGS: usize = 2000;

impl Baseline {
    fn measure(c: &Client, round: u32) -> Res<Baseline> {
        let job = c.job();
        let multi = job.num_nodes > 1;
        let peer = if multi {
            job.ranks_on(1)
                .first()
                .copied()
                .ok_or("node 1 hosts no rank")?
        } else {
            1.min(c.size() - 1)
        };
        let kind = if multi { "TCP" } else { "Unix-socket" };
        let me = c.rank();
        let key = format!("bench.pingpong.{round}");
        let paired = c.size() > 1 && (me == 0 || me == peer);
        // Rank 0 listens and publishes where; the fence orders that before the lookup.
        let listener = if paired && me == 0 {
            Some(Listener::open(c, multi, round, &key)?)
        } else {
            None
        };
        c.fence(&[], FenceOpts::default())?;
        // Let every poller of the job (blocked calls, node servers: --spin-us) go back
        // to sleep first, so the ping-pong measures a quiet machine.
        std::thread::sleep(Duration::from_millis(20));
        let mut rtt = 0.0;
        if let Some(l) = listener {
            rtt = l.accept_and_ping()?;
        } else if paired {
            let addr = c.get(
                &ProcId::new(c.nspace(), 0),
                &key,
                Some(Duration::from_secs(30)),
            )?;
            let addr = addr.as_str().ok_or("bad ping-pong address")?;
            if multi {
                let s = TcpStream::connect(addr)?;
                s.set_nodelay(true)?;
                pingpong(s, false)?;
            } else {
                pingpong(UnixStream::connect(addr)?, false)?;
            }
        }
        if me == 0 {
            c.put(
                Scope::Global,
                &format!("bench.baseline.{round}"),
                rtt.to_bits(),
            )?;
        }
        c.fence(&[], COLLECT)?;
        let rtt = match c.get(
            &ProcId::new(c.nspace(), 0),
            &format!("bench.baseline.{round}"),
            None,
        )? {
            Value::U64(b) => f64::from_bits(b),
            v => return Err(format!("unexpected {v:?}").into()),
        };
        Ok(Baseline {
            kind,
            peer,
            rtt_us: rtt,
        })
    }
}

/// Rank 0's end of the baseline ping-pong: a Unix socket on one node, or TCP on this
/// emulated node's own loopback address (node i is 127.0.1.(i+1)) across nodes.
enum Listener {
    Uds(UnixListener, std::path::PathBuf),
    Tcp(TcpListener),
}

impl Listener {
    fn open(c: &Client, tcp: bool, round: u32, key: &str) -> Res<Listener> {
        let (l, addr) = if tcp {
            let l = TcpListener::bind(format!("127.0.1.{}:0", c.node_id() + 1))?;
            let addr = l.local_addr()?.to_string();
            (Listener::Tcp(l), addr)
        } else {
            let path = std::env::temp_dir().join(format!(
                "cohort-bench-{}-{}-{round}.sock",
                std::process::id(),
                c.nspace()
            ));
            let _ = std::fs::remove_file(&path);
            let l = UnixListener::bind(&path)?;
            let addr = path.to_string_lossy().into_owned();
            (Listener::Uds(l, path), addr)
        };
        c.put(Scope::Global, key, addr)?;
        c.commit()?;
        Ok(l)
    }

    fn accept_and_ping(self) -> Res<f64> {
        match self {
            Listener::Tcp(l) => {
                let (s, _) = l.accept()?;
                s.set_nodelay(true)?;
                pingpong(s, true)
            }
            Listener::Uds(l, path) => {
                let (s, _) = l.accept()?;
                let r = pingpong(s, true);
                let _ = std::fs::remove_file(&path);
                r
            }
        }
    }
}

fn pingpong<S: Read + Write>(mut s: S, leader: bool) -> Res<f64> {
    let mut b = [0u8; 1];
    let mut times = Vec::with_capacity(PINGS);
    for _ in 0..PINGS + 200 {
        if leader {
            let t = Instant::now();
            s.write_all(&b)?;
            s.read_exact(&mut b)?;
            times.push(t.elapsed().as_secs_f64() * 1e6);
        } else {
            s.read_exact(&mut b)?;
            s.write_all(&b)?;
        }
    }
    if !leader {
        return Ok(0.0);
    }
    let mut t: Vec<f64> = times[200..].to_vec();
    t.sort_by(|a, b| a.total_cmp(b));
    Ok(t[t.len() / 2])
}

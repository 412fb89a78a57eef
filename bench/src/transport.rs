//! `transport-latency` and `transport-bw`: the node-server fabric between two
//! processes, in osu_latency / osu_bw format, each row next to a reference measured in
//! the same run between the same two processes.
//!
//! The bench is its own peer: it re-executes itself as a hidden `transport-peer`
//! subcommand (node 1) and drives the exchange from node 0. The child's pipes carry
//! only set-up (addresses, the job secret); every timed byte goes over the fabric or
//! over the reference's socket. Per size, reference and fabric runs alternate `--runs`
//! times and the medians are printed, so load drifting during a run hits both alike.
//!
//! References: for TCP, a raw std-socket ping-pong / stream (TCP_NODELAY, the same
//! 4-byte length + payload per message as the fabric's frames) between the same two
//! processes; for verbs, perftest's `ib_send_lat` / `ib_write_bw` on the same device
//! and GIDs, started by node 0 right after the fabric table (its output parsed).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use clap::{Args, ValueEnum};
use cohort_transport::{AnyFabric, Fabric, FabricConfig, FabricEvent, FabricKind, Spinner};
use tokio::sync::mpsc::UnboundedReceiver;

use crate::Res;

/// Which measurement.
#[derive(Clone, Copy, ValueEnum, PartialEq, Eq, Debug)]
pub enum Mode {
    Latency,
    Bw,
}

/// Backends the transport benches drive.
#[derive(Clone, Copy, ValueEnum, PartialEq, Eq, Debug)]
pub enum Backend {
    Tcp,
    Verbs,
}

impl Backend {
    fn kind(self) -> FabricKind {
        match self {
            Backend::Tcp => FabricKind::Tcp,
            Backend::Verbs => FabricKind::Verbs,
        }
    }
}

/// How received messages reach the benchmark.
#[derive(Clone, Copy, ValueEnum, PartialEq, Eq, Debug)]
pub enum Delivery {
    /// A handler called by the fabric's reading task (`AnyFabric::bind_handler`), as
    /// `cohortd` receives: the measurement's reply is sent from that call.
    Handler,
    /// The event channel (`AnyFabric::bind`), read by the benchmark's task.
    Channel,
}

/// Options shared by `transport-latency` and `transport-bw`.
#[derive(Args, Clone, Debug)]
pub struct Opts {
    /// Fabric backend under test.
    #[arg(long, value_enum, default_value_t = Backend::Tcp)]
    fabric: Backend,
    /// Listen addresses of node 0 (this process) and node 1 (the child), comma
    /// separated. Defaults: 127.0.1.1,127.0.1.2 (tcp); 192.168.78.1,192.168.78.2
    /// (verbs, the rxe guest's addresses).
    #[arg(long)]
    addrs: Option<String>,
    /// Smallest message, bytes (0 or a power of two).
    #[arg(long, default_value_t = 0)]
    min_size: usize,
    /// Largest message, bytes.
    #[arg(long, default_value_t = 4 << 20)]
    max_size: usize,
    /// Messages in flight per bandwidth iteration (osu_bw's window).
    #[arg(long, default_value_t = 64)]
    window: usize,
    /// Alternating reference/fabric runs per size; the medians are printed.
    #[arg(long, default_value_t = 5)]
    runs: usize,
    /// Skip the reference (prints the fabric's column only).
    #[arg(long)]
    no_reference: bool,
    /// Adaptive polling of both fabric ends, microseconds after each message (as
    /// `cohortd --spin-us`; 0: sleep in epoll between messages, like the references).
    #[arg(long, default_value_t = cohort_proto::env::DEFAULT_SPIN_US)]
    spin_us: u64,
    /// How received messages reach the benchmark (handler: as `cohortd` receives).
    #[arg(long, value_enum, default_value_t = Delivery::Handler)]
    delivery: Delivery,
}

/// The hidden child side.
#[derive(Args, Clone, Debug)]
pub struct PeerOpts {
    #[arg(long, value_enum)]
    mode: Mode,
    #[arg(long, value_enum)]
    fabric: Backend,
    #[arg(long)]
    addr: String,
    #[arg(long)]
    sizes: String,
    #[arg(long)]
    window: usize,
    #[arg(long)]
    runs: usize,
    #[arg(long)]
    iterations: usize,
    #[arg(long)]
    warmup: usize,
    /// Raw TCP reference listener of node 0 (`none` without a raw reference).
    #[arg(long)]
    raw: String,
    #[arg(long)]
    spin_us: u64,
    #[arg(long, value_enum)]
    delivery: Delivery,
}

/// Messages above this size use the "large" iteration counts, as in the OSU suite.
const LARGE: usize = 8192;

/// Timed and warm-up iterations for one size: `-i`/`-x` for small messages and a
/// tenth of them for large ones (latency); a tenth and a fiftieth (bandwidth, where
/// each iteration is a window of messages).
fn counts(mode: Mode, size: usize, iterations: usize, warmup: usize) -> (usize, usize) {
    let (div_small, div_large) = match mode {
        Mode::Latency => (1, 10),
        Mode::Bw => (10, 50),
    };
    let div = if size > LARGE { div_large } else { div_small };
    ((iterations / div).max(3), (warmup / div).max(1))
}

fn sizes(min: usize, max: usize) -> Vec<usize> {
    let mut out = Vec::new();
    if min == 0 {
        out.push(0);
    }
    let mut s = min.max(1).next_power_of_two();
    while s <= max {
        out.push(s);
        s *= 2;
    }
    out
}

fn runtime() -> Res<tokio::runtime::Runtime> {
    // The node server's flavour: one thread drives every fabric task.
    Ok(tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?)
}

fn secret() -> Res<Vec<u8>> {
    let mut s = vec![0u8; 16];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut s)?;
    Ok(s)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Res<Vec<u8>> {
    (0..s.len() / 2)
        .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).map_err(Into::into))
        .collect()
}

/// A measurement's handling of events inside the fabric's handler: returns the events
/// it passes on to [`Node::events`] (the one that ends the measurement, or one it did
/// not expect).
type Inline = Box<dyn FnMut(FabricEvent) -> Option<FabricEvent> + Send>;

/// A bound fabric with its event stream.
struct Node {
    fabric: AnyFabric,
    /// Every event in channel mode; in handler mode those the handler passes on (all
    /// of them while no [`Inline`] is installed: set-up and teardown).
    events: UnboundedReceiver<FabricEvent>,
    /// Handler mode: the installed measurement, if any.
    inline: Option<Arc<Mutex<Option<Inline>>>>,
    /// The fabric's adaptive polling; the Tokio reference feeds it too, so it polls
    /// exactly as the fabric does.
    spinner: Arc<Spinner>,
}

impl Node {
    /// Binds node `node`'s fabric on `ip`, polling `spin_us` after each message.
    async fn bind(
        backend: Backend,
        node: u32,
        ip: &str,
        secret: Vec<u8>,
        spin_us: u64,
        delivery: Delivery,
    ) -> Res<Node> {
        let mut cfg = FabricConfig::new(node, format!("{ip}:0").parse()?, secret);
        let spinner = Spinner::new(Duration::from_micros(spin_us));
        tokio::spawn(spinner.clone().run());
        cfg.spinner = Some(spinner.clone());
        let (fabric, events, inline) = match delivery {
            Delivery::Channel => {
                let (fabric, events) = AnyFabric::bind(backend.kind(), cfg).await?;
                (fabric, events, None)
            }
            Delivery::Handler => {
                let (tx, events) = tokio::sync::mpsc::unbounded_channel();
                let slot: Arc<Mutex<Option<Inline>>> = Arc::default();
                let installed = slot.clone();
                let handler = Arc::new(move |ev| {
                    let mut inline = installed.lock().unwrap_or_else(|e| e.into_inner());
                    let passed = match inline.as_mut() {
                        Some(measure) => measure(ev),
                        None => Some(ev),
                    };
                    drop(inline);
                    if let Some(ev) = passed {
                        let _ = tx.send(ev);
                    }
                });
                let fabric = AnyFabric::bind_handler(backend.kind(), cfg, handler).await?;
                (fabric, events, Some(slot))
            }
        };
        Ok(Node {
            fabric,
            events,
            inline,
            spinner,
        })
    }

    /// Handler mode: installs (or with `None` removes) the measurement's handling.
    fn install(&self, measure: Option<Inline>) {
        if let Some(slot) = &self.inline {
            *slot.lock().unwrap_or_else(|e| e.into_inner()) = measure;
        }
    }

    async fn recv(&mut self) -> Res<Bytes> {
        match self.events.recv().await {
            Some(FabricEvent::Message { payload, .. }) => Ok(payload),
            Some(FabricEvent::PeerLost { peer, reason, .. }) => {
                Err(format!("fabric peer {peer} lost: {reason}").into())
            }
            None => Err("fabric event stream ended".into()),
        }
    }

    /// `(device, port, GID index)` of a verbs fabric.
    fn verbs_device(&self) -> Option<(String, u8, u32)> {
        match &self.fabric {
            AnyFabric::Verbs(v) => Some((v.device_name(), v.port(), v.gid_index())),
            AnyFabric::Tcp(_) => None,
        }
    }
}

/// The child process, with line-based set-up pipes.
struct PeerProcess {
    child: Child,
    to: ChildStdin,
    from: BufReader<ChildStdout>,
}

impl PeerProcess {
    fn line(&mut self) -> Res<String> {
        let mut l = String::new();
        if self.from.read_line(&mut l)? == 0 {
            return Err("the peer process exited during set-up".into());
        }
        Ok(l.trim_end().to_string())
    }
}

/// One row's measurements over the runs.
#[derive(Default)]
struct Row {
    fabric: Vec<f64>,
    reference: Vec<f64>,
    reference_tokio: Vec<f64>,
    /// Raw ping-pong on std sockets that polls (non-blocking reads, sched_yield), the
    /// like-for-like reference of a polling fabric (latency with --spin-us > 0 only).
    reference_poll: Vec<f64>,
}

/// The raw TCP references' two connections (std blocking, tokio).
struct RawPair {
    blocking: Option<TcpStream>,
    tokio: tokio::net::TcpStream,
}

impl RawPair {
    /// Must be called inside the runtime's context (the tokio half registers there).
    fn new(a: TcpStream, b: TcpStream) -> std::io::Result<RawPair> {
        a.set_nodelay(true)?;
        b.set_nodelay(true)?;
        b.set_nonblocking(true)?;
        Ok(RawPair {
            blocking: Some(a),
            tokio: tokio::net::TcpStream::from_std(b)?,
        })
    }
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// Node 0: starts the child, measures, prints the table.
pub fn run(mode: Mode, o: Opts, iterations: usize, warmup: usize) -> Res<()> {
    let addrs = o.addrs.clone().unwrap_or_else(|| match o.fabric {
        Backend::Tcp => "127.0.1.1,127.0.1.2".into(),
        Backend::Verbs => "192.168.78.1,192.168.78.2".into(),
    });
    let addrs: Vec<&str> = addrs.split(',').map(str::trim).collect();
    let [ip0, ip1] = addrs[..] else {
        return Err("--addrs takes two addresses".into());
    };
    let sizes = sizes(o.min_size, o.max_size);
    let raw_ref = o.fabric == Backend::Tcp && !o.no_reference;
    let rt = runtime()?;
    let secret = secret()?;
    let mut node = rt.block_on(Node::bind(
        o.fabric,
        0,
        ip0,
        secret.clone(),
        o.spin_us,
        o.delivery,
    ))?;
    let raw_listener = if raw_ref {
        Some(TcpListener::bind(format!("{ip0}:0"))?)
    } else {
        None
    };
    let raw_addr = match &raw_listener {
        Some(l) => l.local_addr()?.to_string(),
        None => "none".into(),
    };
    let sizes_arg: Vec<String> = sizes.iter().map(|s| s.to_string()).collect();
    let mut child = Command::new(std::env::current_exe()?)
        .args([
            "transport-peer",
            "--mode",
            mode_name(mode),
            "--fabric",
            backend_name(o.fabric),
            "--addr",
            ip1,
            "--sizes",
            &sizes_arg.join(","),
            "--window",
            &o.window.to_string(),
            "--runs",
            &o.runs.to_string(),
            "--iterations",
            &iterations.to_string(),
            "--warmup",
            &warmup.to_string(),
            "--raw",
            &raw_addr,
            "--spin-us",
            &o.spin_us.to_string(),
            "--delivery",
            delivery_name(o.delivery),
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()?;
    let mut peer = PeerProcess {
        to: child.stdin.take().ok_or("no child stdin")?,
        from: BufReader::new(child.stdout.take().ok_or("no child stdout")?),
        child,
    };
    // The secret goes over the pipe, never on a command line.
    writeln!(peer.to, "{}", hex(&secret))?;
    let peer_addr = peer.line()?;
    let peer_gid = peer.line()?;
    let table = vec![node.fabric.local_addr(), peer_addr.clone()];
    writeln!(peer.to, "{}", table.join(","))?;
    node.fabric.set_peers(table);
    // Both links up before anything is timed.
    rt.block_on(async {
        node.fabric.send(1, Bytes::from_static(b"hello"))?;
        node.recv().await.map(drop)
    })?;
    // Two raw connections: one driven by blocking std calls, one by tokio on the
    // fabric's runtime (the execution model the fabric itself runs in).
    let raw = match raw_listener {
        Some(l) => {
            let (a, _) = l.accept()?;
            let (b, _) = l.accept()?;
            let _context = rt.enter();
            Some(RawPair::new(a, b)?)
        }
        None => None,
    };
    let (node, rows) = measure_in_task(
        &rt,
        mode,
        node,
        raw,
        sizes.clone(),
        Sweep {
            window: o.window,
            runs: o.runs,
            iterations,
            warmup,
            poll_reference: mode == Mode::Latency && o.spin_us > 0,
        },
        true,
    )?;
    rt.block_on(node.fabric.shutdown());
    drop(peer.to);
    let status = peer.child.wait()?;
    if !status.success() {
        return Err(format!("the peer process failed ({status})").into());
    }
    // perftest after the fabric table, on the same device and GIDs.
    let perftest = if o.fabric == Backend::Verbs && !o.no_reference {
        let (dev, port, gid0) = node.verbs_device().ok_or("not a verbs fabric")?;
        let gid1: u32 = peer_gid.parse().map_err(|_| "bad GID index from peer")?;
        Some(perftest(
            mode,
            &dev,
            port,
            gid0,
            gid1,
            ip0,
            &sizes,
            (iterations, warmup, o.runs, o.window),
        )?)
    } else {
        None
    };

    print_table(
        mode,
        &o,
        &sizes,
        &rows,
        perftest.as_ref(),
        iterations,
        warmup,
        &node,
    );
    Ok(())
}

fn delivery_name(d: Delivery) -> &'static str {
    match d {
        Delivery::Handler => "handler",
        Delivery::Channel => "channel",
    }
}

fn mode_name(m: Mode) -> &'static str {
    match m {
        Mode::Latency => "latency",
        Mode::Bw => "bw",
    }
}

fn backend_name(b: Backend) -> &'static str {
    match b {
        Backend::Tcp => "tcp",
        Backend::Verbs => "verbs",
    }
}

fn pattern(size: usize) -> Bytes {
    (0..size).map(|i| (i % 251) as u8).collect()
}

/// Per size: the reference's median and the median fabric/reference ratio.
type RefColumn = Vec<Option<(f64, f64)>>;

#[allow(clippy::too_many_arguments)]
fn print_table(
    mode: Mode,
    o: &Opts,
    sizes: &[usize],
    rows: &[Row],
    perftest: Option<&PerftestTable>,
    iterations: usize,
    warmup: usize,
    node: &Node,
) {
    let (what, unit, osu) = match mode {
        Mode::Latency => ("transport-latency", "Latency (us)", "osu_latency"),
        Mode::Bw => ("transport-bw", "Bandwidth (MB/s)", "osu_bw"),
    };
    let (small, large) = (
        counts(mode, 1, iterations, warmup),
        counts(mode, LARGE + 1, iterations, warmup),
    );
    let polling = match node.fabric.backend() {
        "verbs" if verbs_polling() => " (COHORT_VERBS_POLL=1: busy-polling)",
        "verbs" => " (completion channel, the default)",
        _ => "",
    };
    println!(
        "# cohort-bench {what} ({osu} format): fabric {}{polling}, node 0 (this process) <-> node 1 (child process)",
        node.fabric.backend()
    );
    if o.spin_us > 0 {
        println!(
            "# Both fabric ends poll their runtime for {} us after each message (--spin-us, as cohortd does; 0 sleeps in epoll like the references)",
            o.spin_us
        );
    } else {
        println!("# --spin-us 0: both fabric ends sleep in epoll between messages");
    }
    let window = if mode == Mode::Bw {
        format!(", window {}", o.window)
    } else {
        String::new()
    };
    println!(
        "# {} iterations ({} warm-up) up to {LARGE} B, {} ({}) above{window}; median of {} alternating runs",
        small.0, small.1, large.0, large.1, o.runs
    );
    let ratio = match mode {
        Mode::Latency => "Ratio = Latency / Reference",
        Mode::Bw => "Ratio = Bandwidth / Reference",
    };
    // One or two reference columns, each with its ratio: (header, value per row).
    let mut refs: Vec<(String, RefColumn)> = Vec::new();
    let paired = |pick: fn(&Row) -> &Vec<f64>| -> RefColumn {
        rows.iter()
            .map(|r| {
                let reference = pick(r);
                if reference.is_empty() {
                    return None;
                }
                // The median of the per-run ratios (each run's pair was measured back
                // to back), next to the median reference.
                let ratios: Vec<f64> = r.fabric.iter().zip(reference).map(|(f, x)| f / x).collect();
                Some((median(reference), median(&ratios)))
            })
            .collect()
    };
    if !o.no_reference {
        match (o.fabric, perftest) {
            (Backend::Tcp, _) => {
                let (std_what, tokio_what) = match mode {
                    Mode::Latency => ("raw TCP ping-pong", "raw TCP ping-pong"),
                    Mode::Bw => (
                        "raw TCP stream (same window and ack)",
                        "raw TCP stream (same window and ack)",
                    ),
                };
                println!("# References (same run, same two processes, 4-byte length + payload per message, TCP_NODELAY):");
                println!("#   Std   = {std_what} on blocking std sockets");
                println!("#   Tokio = {tokio_what} on tokio sockets, same current-thread runtime as the fabric{}", if mode == Mode::Latency && o.spin_us > 0 { ", keeping the runtime polling as the fabric does (each message told to its Spinner) but reading on readiness events, where the fabric reads its hot connections directly" } else { "" });
                refs.push(("Std".into(), paired(|r| &r.reference)));
                refs.push(("Tokio".into(), paired(|r| &r.reference_tokio)));
                if rows.iter().any(|r| !r.reference_poll.is_empty()) {
                    println!("#   Poll  = {std_what} on std sockets polling (non-blocking reads, sched_yield): the like-for-like reference of a polling fabric");
                    println!("#   (the blocking Std pair runs after polling phases, which leave the two processes on different vCPUs; for the blocking comparison run --spin-us 0)");
                    refs.push(("Poll".into(), paired(|r| &r.reference_poll)));
                }
            }
            (Backend::Verbs, Some(p)) => {
                println!("# Reference (same run, same device and GIDs): {}", p.what);
                let col = |pick: fn(PerftestRow) -> Option<f64>| -> RefColumn {
                    sizes
                        .iter()
                        .zip(rows)
                        .map(|(&size, r)| {
                            p.row(size).and_then(pick).map(|x| {
                                let ratios: Vec<f64> = r.fabric.iter().map(|f| f / x).collect();
                                (x, median(&ratios))
                            })
                        })
                        .collect()
                };
                refs.push(("perftest".into(), col(|r| Some(r.value))));
                if mode == Mode::Latency {
                    // The fabric's latency is a mean (osu_latency's): beside perftest's
                    // median, its mean, which counts the same stalls.
                    println!("#   perftest = t_typical (median); perftest-avg = t_avg (mean, like the fabric's column)");
                    refs.push(("perftest-avg".into(), col(|r| r.avg)));
                }
            }
            (Backend::Verbs, None) => {}
        }
        println!("# {ratio}");
    }
    let mut header = format!("{:<12}{:>18}", "# Size", unit);
    for (name, _) in &refs {
        header += &format!("{:>14}{:>8}", name, "Ratio");
    }
    println!("{header}");
    for (i, &size) in sizes.iter().enumerate() {
        let mut line = format!("{size:<12}{:>18.2}", median(&rows[i].fabric));
        for (_, col) in &refs {
            line += &match col[i] {
                Some((x, ratio)) => format!("{x:>14.2}{ratio:>8.2}"),
                None => format!("{:>14}{:>8}", "-", "-"),
            };
        }
        println!("{line}");
    }
}

/// Node 1: the child process.
pub fn run_peer(p: PeerOpts) -> Res<()> {
    let mode = p.mode;
    let sizes: Vec<usize> = p
        .sizes
        .split(',')
        .map(|s| s.parse())
        .collect::<Result<_, _>>()?;
    let stdin = std::io::stdin();
    let mut lines = stdin.lock().lines();
    let mut line = || -> Res<String> { Ok(lines.next().ok_or("set-up pipe closed")??) };
    let secret = unhex(&line()?)?;
    let rt = runtime()?;
    let mut node = rt.block_on(Node::bind(
        p.fabric, 1, &p.addr, secret, p.spin_us, p.delivery,
    ))?;
    let gid = node.verbs_device().map_or(0, |(_, _, g)| g);
    println!("{}\n{gid}", node.fabric.local_addr());
    std::io::stdout().flush()?;
    let table: Vec<String> = line()?.split(',').map(String::from).collect();
    node.fabric.set_peers(table);
    rt.block_on(async {
        let hello = node.recv().await?;
        node.fabric.send(0, hello)?;
        Res::Ok(())
    })?;
    let raw = if p.raw != "none" {
        let a = TcpStream::connect(&p.raw)?;
        let b = TcpStream::connect(&p.raw)?;
        let _context = rt.enter();
        Some(RawPair::new(a, b)?)
    } else {
        None
    };
    let (node, _) = measure_in_task(
        &rt,
        mode,
        node,
        raw,
        sizes,
        Sweep {
            window: p.window,
            runs: p.runs,
            iterations: p.iterations,
            warmup: p.warmup,
            poll_reference: p.mode == Mode::Latency && p.spin_us > 0,
        },
        false,
    )?;
    // Node 0 closes first: its goodbye is read while this runtime runs, and node 0
    // closes our stdin once its own shutdown completed (a goodbye raises no event
    // here, so waiting for one would only time out). Then ours, so neither side
    // reports a loss.
    drop(lines);
    rt.block_on(async {
        let eof = tokio::task::spawn_blocking(|| std::io::stdin().lines().all(|l| l.is_ok()));
        let _ = tokio::time::timeout(Duration::from_secs(30), eof).await;
        node.fabric.shutdown().await;
    });
    Ok(())
}

/// Runs [`measure_all`] as a task spawned on `rt`, not as `rt`'s `block_on` future.
///
/// Why: when a spawned task (the fabric's connection reader) wakes the `block_on`
/// future, Tokio's current-thread scheduler polls its I/O driver once more
/// (`epoll_wait` with a zero timeout) before it polls that future; a spawned task it
/// woke runs at once. The consumer runs where a node server's consumer runs: in a task.
#[allow(clippy::too_many_arguments)]
fn measure_in_task(
    rt: &tokio::runtime::Runtime,
    mode: Mode,
    node: Node,
    raw: Option<RawPair>,
    sizes: Vec<usize>,
    sweep: Sweep,
    leader: bool,
) -> Res<(Node, Vec<Row>)> {
    let (node, rows) = rt.block_on(async move {
        tokio::spawn(async move {
            let mut node = node;
            let rows = measure_all(mode, &mut node, raw, &sizes, sweep, leader).await;
            (node, rows)
        })
        .await
    })?;
    Ok((node, rows?))
}

/// What [`measure_all`] sweeps: iterations per size and run, and which references.
struct Sweep {
    window: usize,
    runs: usize,
    iterations: usize,
    warmup: usize,
    /// Also the polling raw ping-pong (a polling fabric's like-for-like reference).
    poll_reference: bool,
}

/// Every size, `runs` times: the raw reference (if any) then the fabric. Runs inside
/// the runtime so the fabric's tasks keep flushing while the blocking raw loop runs
/// on a blocking-pool thread; returns one [`Row`] per size (filled on node 0 only).
async fn measure_all(
    mode: Mode,
    node: &mut Node,
    mut raw: Option<RawPair>,
    sizes: &[usize],
    sweep: Sweep,
    leader: bool,
) -> Res<Vec<Row>> {
    let Sweep {
        window,
        runs,
        iterations,
        warmup,
        poll_reference,
    } = sweep;
    let mut rows: Vec<Row> = sizes.iter().map(|_| Row::default()).collect();
    for (i, &size) in sizes.iter().enumerate() {
        let (iters, skip) = counts(mode, size, iterations, warmup);
        let payload = pattern(size);
        for _ in 0..runs {
            if let Some(pair) = raw.as_mut() {
                let mut s = pair.blocking.take().ok_or("raw stream lost")?;
                let p = payload.clone();
                let (s, v, vp) = tokio::task::spawn_blocking(move || {
                    let v = match mode {
                        Mode::Latency => raw_latency(&mut s, &p, iters, skip, leader, false),
                        Mode::Bw => raw_bw(&mut s, &p, window, iters, skip, leader),
                    };
                    let vp =
                        poll_reference.then(|| raw_latency(&mut s, &p, iters, skip, leader, true));
                    (s, v, vp)
                })
                .await?;
                pair.blocking = Some(s);
                rows[i].reference.push(v?);
                if let Some(vp) = vp {
                    rows[i].reference_poll.push(vp?);
                }
                let s = &mut pair.tokio;
                let v = match mode {
                    Mode::Latency => {
                        tokio_latency(s, &payload, iters, skip, leader, &node.spinner).await?
                    }
                    Mode::Bw => tokio_bw(s, &payload, window, iters, skip, leader).await?,
                };
                rows[i].reference_tokio.push(v);
            }
            let v = match (mode, node.inline.is_some()) {
                (Mode::Latency, false) => {
                    fabric_latency(node, &payload, iters, skip, leader).await?
                }
                (Mode::Bw, false) => fabric_bw(node, &payload, window, iters, skip, leader).await?,
                (Mode::Latency, true) => {
                    inline_latency(node, &payload, iters, skip, leader).await?
                }
                (Mode::Bw, true) => inline_bw(node, &payload, window, iters, skip, leader).await?,
            };
            rows[i].fabric.push(v);
        }
    }
    Ok(rows)
}

/// osu_latency: `iters` round trips after `skip`; returns the one-way latency in µs.
/// The echoing side sends back what it received (no copy).
async fn fabric_latency(
    node: &mut Node,
    payload: &Bytes,
    iters: usize,
    skip: usize,
    leader: bool,
) -> Res<f64> {
    let mut start = Instant::now();
    for i in 0..iters + skip {
        if i == skip {
            start = Instant::now();
        }
        if leader {
            node.fabric.send(1, payload.clone())?;
            let back = node.recv().await?;
            if back.len() != payload.len() {
                return Err(format!(
                    "echo of {} bytes came back as {}",
                    payload.len(),
                    back.len()
                )
                .into());
            }
        } else {
            let got = node.recv().await?;
            node.fabric.send(0, got)?;
        }
    }
    Ok(start.elapsed().as_secs_f64() * 1e6 / (2 * iters) as f64)
}

/// Tells node 0 that node 1 installed its side of a handler-mode measurement.
const READY: &[u8] = b"ready";

/// The timed span of a handler-mode measurement, marked from inside the handler.
#[derive(Clone, Copy)]
struct Span {
    start: Instant,
    end: Instant,
}

impl Span {
    fn new() -> Arc<Mutex<Span>> {
        let now = Instant::now();
        Arc::new(Mutex::new(Span {
            start: now,
            end: now,
        }))
    }
}

fn span_of(span: &Mutex<Span>) -> Span {
    *span.lock().unwrap_or_else(|e| e.into_inner())
}

/// Node 0's side of a handler-mode measurement: waits for node 1's [`READY`], installs
/// `measure`, runs `kick` (the first send), then waits for the event `measure` passes
/// on at the end, which is returned.
async fn leader_inline(
    node: &mut Node,
    measure: Inline,
    kick: impl FnOnce(&AnyFabric) -> Res<()>,
) -> Res<Bytes> {
    let ready = node.recv().await?;
    if ready != READY {
        return Err(format!("expected node 1's ready, got {} bytes", ready.len()).into());
    }
    node.install(Some(measure));
    let kicked = kick(&node.fabric);
    let last = match kicked {
        Ok(()) => node.recv().await,
        Err(e) => Err(e),
    };
    node.install(None);
    last
}

/// Node 1's side: installs `measure`, says [`READY`], waits for the event `measure`
/// passes on at the end.
async fn peer_inline(node: &mut Node, measure: Inline) -> Res<Bytes> {
    node.install(Some(measure));
    let last = match node.fabric.send(0, Bytes::from_static(READY)) {
        Ok(()) => node.recv().await,
        Err(e) => Err(e.into()),
    };
    node.install(None);
    last
}

/// [`fabric_latency`] with the handler: each side's reply is sent from the fabric's
/// handler call that delivered the message (as `cohortd` answers a peer).
async fn inline_latency(
    node: &mut Node,
    payload: &Bytes,
    iters: usize,
    skip: usize,
    leader: bool,
) -> Res<f64> {
    let total = iters + skip;
    let expected = payload.len();
    let span = Span::new();
    let marks = span.clone();
    let fabric = node.fabric.clone();
    let mut count = 0;
    let measure: Inline = if leader {
        Box::new(move |ev| {
            let FabricEvent::Message { payload, .. } = &ev else {
                return Some(ev);
            };
            count += 1;
            if payload.len() != expected || count >= total {
                marks.lock().unwrap_or_else(|e| e.into_inner()).end = Instant::now();
                return Some(ev);
            }
            if count == skip {
                marks.lock().unwrap_or_else(|e| e.into_inner()).start = Instant::now();
            }
            fabric.send(1, payload.clone()).err().map(|_| ev)
        })
    } else {
        Box::new(move |ev| {
            let FabricEvent::Message { payload, .. } = &ev else {
                return Some(ev);
            };
            count += 1;
            if fabric.send(0, payload.clone()).is_err() || count >= total {
                return Some(ev);
            }
            None
        })
    };
    if !leader {
        peer_inline(node, measure).await?;
        return Ok(0.0);
    }
    let first = payload.clone();
    let last = leader_inline(node, measure, |f| {
        if skip == 0 {
            span.lock().unwrap_or_else(|e| e.into_inner()).start = Instant::now();
        }
        Ok(f.send(1, first)?)
    })
    .await?;
    if last.len() != expected {
        return Err(format!("echo of {expected} bytes came back as {}", last.len()).into());
    }
    let t = span_of(&span);
    Ok((t.end - t.start).as_secs_f64() * 1e6 / (2 * iters) as f64)
}

/// [`fabric_bw`] with the handler: node 1 acknowledges each window from the handler
/// call that delivered its last message, node 0 sends the next window from the call
/// that delivered the acknowledgement.
async fn inline_bw(
    node: &mut Node,
    payload: &Bytes,
    window: usize,
    iters: usize,
    skip: usize,
    leader: bool,
) -> Res<f64> {
    let total = iters + skip;
    let span = Span::new();
    let marks = span.clone();
    let fabric = node.fabric.clone();
    let data = payload.clone();
    let send_window = move |f: &AnyFabric| -> Res<()> {
        for _ in 0..window {
            f.send(1, data.clone())?;
        }
        Ok(())
    };
    let expected = payload.len();
    let mut count = 0;
    let measure: Inline = if leader {
        let send_window = send_window.clone();
        Box::new(move |ev| {
            if !matches!(&ev, FabricEvent::Message { payload, .. } if payload.len() == 4) {
                return Some(ev);
            }
            count += 1;
            if count >= total {
                marks.lock().unwrap_or_else(|e| e.into_inner()).end = Instant::now();
                return Some(ev);
            }
            if count == skip {
                marks.lock().unwrap_or_else(|e| e.into_inner()).start = Instant::now();
            }
            send_window(&fabric).err().map(|_| ev)
        })
    } else {
        let ack = Bytes::from_static(b"ack!");
        Box::new(move |ev| {
            let FabricEvent::Message { payload, .. } = &ev else {
                return Some(ev);
            };
            if payload.len() != expected {
                return Some(ev);
            }
            count += 1;
            if count % window == 0 && fabric.send(0, ack.clone()).is_err() {
                return Some(ev);
            }
            (count >= total * window).then_some(ev)
        })
    };
    if !leader {
        let last = peer_inline(node, measure).await?;
        if last.len() != expected {
            return Err(format!("expected {expected} bytes, got {}", last.len()).into());
        }
        return Ok(0.0);
    }
    let last = leader_inline(node, measure, |f| {
        if skip == 0 {
            span.lock().unwrap_or_else(|e| e.into_inner()).start = Instant::now();
        }
        send_window(f)
    })
    .await?;
    if last.len() != 4 {
        return Err(format!(
            "expected a 4-byte acknowledgement, got {} bytes",
            last.len()
        )
        .into());
    }
    let t = span_of(&span);
    Ok((payload.len() * window * iters) as f64 / (t.end - t.start).as_secs_f64() / 1e6)
}

/// osu_bw: per iteration `window` messages one way, then a 4-byte acknowledgement;
/// returns MB/s (10^6 bytes per second, as osu_bw).
async fn fabric_bw(
    node: &mut Node,
    payload: &Bytes,
    window: usize,
    iters: usize,
    skip: usize,
    leader: bool,
) -> Res<f64> {
    let ack = Bytes::from_static(b"ack!");
    let mut start = Instant::now();
    for i in 0..iters + skip {
        if i == skip {
            start = Instant::now();
        }
        if leader {
            for _ in 0..window {
                node.fabric.send(1, payload.clone())?;
            }
            node.recv().await?;
        } else {
            for _ in 0..window {
                let got = node.recv().await?;
                if got.len() != payload.len() {
                    return Err(
                        format!("expected {} bytes, got {}", payload.len(), got.len()).into(),
                    );
                }
            }
            node.fabric.send(0, ack.clone())?;
        }
    }
    let secs = start.elapsed().as_secs_f64();
    Ok((payload.len() * window * iters) as f64 / secs / 1e6)
}

/// One framed message as the raw reference sends it: the fabric's 4-byte length word
/// and the payload, written with one call.
fn framed(payload: &[u8]) -> Vec<u8> {
    let mut m = Vec::with_capacity(4 + payload.len());
    m.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    m.extend_from_slice(payload);
    m
}

/// Raw ping-pong on `s`: blocking reads and writes, or with `poll` non-blocking ones
/// retried after `sched_yield` (the reference of a polling fabric).
fn raw_latency(
    s: &mut TcpStream,
    payload: &[u8],
    iters: usize,
    skip: usize,
    leader: bool,
    poll: bool,
) -> std::io::Result<f64> {
    /// Runs `op` until it does not say WouldBlock, yielding the CPU in between.
    fn polled<T>(mut op: impl FnMut() -> std::io::Result<T>) -> std::io::Result<T> {
        loop {
            match op() {
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    cohort_proto::env::yield_cpu();
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                other => return other,
            }
        }
    }
    fn recv(s: &mut TcpStream, buf: &mut [u8], poll: bool) -> std::io::Result<()> {
        if !poll {
            return s.read_exact(buf);
        }
        let mut at = 0;
        while at < buf.len() {
            match polled(|| s.read(&mut buf[at..]))? {
                0 => return Err(std::io::ErrorKind::UnexpectedEof.into()),
                n => at += n,
            }
        }
        Ok(())
    }
    fn send(s: &mut TcpStream, mut msg: &[u8], poll: bool) -> std::io::Result<()> {
        if !poll {
            return s.write_all(msg);
        }
        while !msg.is_empty() {
            let n = polled(|| s.write(msg))?;
            msg = &msg[n..];
        }
        Ok(())
    }
    let msg = framed(payload);
    let mut buf = vec![0u8; msg.len()];
    s.set_nonblocking(poll)?;
    let mut start = Instant::now();
    let mut run = || -> std::io::Result<()> {
        for i in 0..iters + skip {
            if i == skip {
                start = Instant::now();
            }
            if leader {
                send(s, &msg, poll)?;
                recv(s, &mut buf, poll)?;
            } else {
                recv(s, &mut buf, poll)?;
                send(s, &msg, poll)?;
            }
        }
        Ok(())
    };
    let r = run();
    s.set_nonblocking(false)?;
    r?;
    Ok(start.elapsed().as_secs_f64() * 1e6 / (2 * iters) as f64)
}

fn raw_bw(
    s: &mut TcpStream,
    payload: &[u8],
    window: usize,
    iters: usize,
    skip: usize,
    leader: bool,
) -> std::io::Result<f64> {
    let msg = framed(payload);
    let mut buf = vec![0u8; msg.len()];
    let mut ack = *b"ack!";
    let mut start = Instant::now();
    for i in 0..iters + skip {
        if i == skip {
            start = Instant::now();
        }
        if leader {
            for _ in 0..window {
                s.write_all(&msg)?;
            }
            s.read_exact(&mut ack)?;
        } else {
            for _ in 0..window {
                s.read_exact(&mut buf)?;
            }
            s.write_all(&ack)?;
        }
    }
    let secs = start.elapsed().as_secs_f64();
    Ok((payload.len() * window * iters) as f64 / secs / 1e6)
}

/// Raw ping-pong on tokio sockets; each message is announced to `spinner` as the
/// fabric announces its own, so with `--spin-us` the runtime polls exactly as it does
/// for the fabric (and sleeps in epoll without).
async fn tokio_latency(
    s: &mut tokio::net::TcpStream,
    payload: &[u8],
    iters: usize,
    skip: usize,
    leader: bool,
    spinner: &Spinner,
) -> Res<f64> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let msg = framed(payload);
    let mut buf = vec![0u8; msg.len()];
    let mut start = Instant::now();
    for i in 0..iters + skip {
        if i == skip {
            start = Instant::now();
        }
        if leader {
            spinner.input();
            s.write_all(&msg).await?;
            s.read_exact(&mut buf).await?;
        } else {
            s.read_exact(&mut buf).await?;
            spinner.input();
            s.write_all(&msg).await?;
        }
    }
    Ok(start.elapsed().as_secs_f64() * 1e6 / (2 * iters) as f64)
}

async fn tokio_bw(
    s: &mut tokio::net::TcpStream,
    payload: &[u8],
    window: usize,
    iters: usize,
    skip: usize,
    leader: bool,
) -> Res<f64> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let msg = framed(payload);
    let mut buf = vec![0u8; msg.len()];
    let mut ack = *b"ack!";
    let mut start = Instant::now();
    for i in 0..iters + skip {
        if i == skip {
            start = Instant::now();
        }
        if leader {
            for _ in 0..window {
                s.write_all(&msg).await?;
            }
            s.read_exact(&mut ack).await?;
        } else {
            for _ in 0..window {
                s.read_exact(&mut buf).await?;
            }
            s.write_all(&ack).await?;
        }
    }
    let secs = start.elapsed().as_secs_f64();
    Ok((payload.len() * window * iters) as f64 / secs / 1e6)
}

/// perftest's numbers by message size: the medians over its runs of its headline
/// value and (latency) of its mean.
struct PerftestTable {
    what: String,
    rows: Vec<(usize, PerftestRow)>,
}

/// One size of perftest's output: `t_typical` (its median round trip, halved) and
/// `t_avg` for `ib_send_lat`; `BW average` (and no second value) for `ib_write_bw`.
#[derive(Debug, Clone, Copy, PartialEq)]
struct PerftestRow {
    value: f64,
    avg: Option<f64>,
}

impl PerftestTable {
    /// The row for `size` (perftest starts at 2 bytes: smaller sizes use that row).
    fn row(&self, size: usize) -> Option<PerftestRow> {
        let want = size.max(2);
        self.rows.iter().find(|(s, _)| *s == want).map(|(_, r)| *r)
    }
}

/// Runs perftest's server (on GID `gid0`) and client (on `gid1`) on `dev` per wanted
/// size (`-s`; perftest starts at 2 bytes, so 0 and 1 use that row), `runs` times,
/// with the fabric's own message count for that size (`counts`; for bandwidth its
/// iterations times `window`, with `window` in flight, `-t`), and takes the medians
/// of `t_typical` and `t_avg` (µs, half the round trip as perftest reports them) for
/// `ib_send_lat`, of `BW average` (MB/s, converted from perftest's Gb/s) for
/// `ib_write_bw`. A run per size rather than one `-a` sweep, which always goes up to
/// 8 MiB at one count: under emulation the sizes nobody asked for took most of a
/// bench's time. A run that fails, or does not finish within a deadline generous for
/// its bytes (perftest's polling client has been seen to hang on rxe under TCG; it is
/// then killed), is tried again on a fresh port, twice at most, so the bench never
/// waits forever for its reference nor fails on one bad launch.
#[allow(clippy::too_many_arguments)]
fn perftest(
    mode: Mode,
    dev: &str,
    port: u8,
    gid0: u32,
    gid1: u32,
    server_ip: &str,
    sizes: &[usize],
    (iterations, warmup, runs, window): (usize, usize, usize, usize),
) -> Res<PerftestTable> {
    let polling = verbs_polling();
    let tool = match mode {
        Mode::Latency => "ib_send_lat",
        Mode::Bw => "ib_write_bw",
    };
    let runs = runs.max(1);
    let mut wanted: Vec<usize> = sizes.iter().map(|&s| s.max(2)).collect();
    wanted.dedup();
    let mut rows = Vec::new();
    for &size in &wanted {
        let (iters, skip) = counts(mode, size, iterations, warmup);
        let (n, bytes) = match mode {
            // As many round trips as the fabric makes (its warm-up included: perftest
            // reports the median, which a few slow first ones hardly move).
            Mode::Latency => {
                let n = (iters + skip).max(5);
                (n, 2 * size * n)
            }
            // As many messages as the fabric sends, at most `window` in flight.
            Mode::Bw => {
                let n = (iters + skip) * window;
                (n, size * n)
            }
        };
        let args = |gid: u32, tcp_port: u16| -> Vec<String> {
            let mut a = vec![
                "-d".into(),
                dev.into(),
                "-i".into(),
                port.to_string(),
                "-x".into(),
                gid.to_string(),
                "-p".into(),
                tcp_port.to_string(),
                "-n".into(),
                n.to_string(),
                "-s".into(),
                size.to_string(),
                "-F".into(),
            ];
            if mode == Mode::Bw {
                // MB/s as osu_bw reports it (10^6), not MiB/s; the fabric's window.
                a.extend(["--report_gbits".into(), "-t".into(), window.to_string()]);
            }
            if !polling && mode == Mode::Latency {
                // The fabric sleeps on its completion channel: so does perftest with -e
                // (ib_write_bw has no event mode: it always polls).
                a.push("-e".into());
            }
            a
        };
        // A minute to start, then the bytes at 4 MB/s (rxe under TCG moves 30-40).
        let limit = Duration::from_secs(60) + Duration::from_secs_f64(bytes as f64 / 4e6);
        let (mut values, mut avgs) = (Vec::new(), Vec::new());
        for _ in 0..runs {
            let row = perftest_run(
                mode,
                tool,
                size,
                limit,
                |p| args(gid0, p),
                |p| args(gid1, p),
                server_ip,
            )?;
            values.push(row.value);
            avgs.extend(row.avg);
        }
        rows.push((
            size,
            PerftestRow {
                value: median(&values),
                avg: (!avgs.is_empty()).then(|| median(&avgs)),
            },
        ));
    }
    let what = match mode {
        Mode::Latency => {
            format!("perftest ib_send_lat t_typical (its median) and t_avg, {dev} GID {gid1} -> {gid0}, -n as the fabric's per size, median of {runs} runs")
        }
        Mode::Bw => format!(
            "perftest ib_write_bw BW average, {dev} GID {gid1} -> {gid0}, -t {window} (the window), -n as the fabric's messages per size, median of {runs} runs"
        ),
    };
    Ok(PerftestTable { what, rows })
}

/// One perftest run at `size`, tried again (on a fresh port) when it fails or outlives
/// `limit`.
fn perftest_run(
    mode: Mode,
    tool: &str,
    size: usize,
    limit: Duration,
    server_args: impl Fn(u16) -> Vec<String>,
    client_args: impl Fn(u16) -> Vec<String>,
    server_ip: &str,
) -> Res<PerftestRow> {
    // A failed run (its server gone before the client connected, say: the port taken
    // in between) is tried again on a fresh port like one that hung.
    let mut text = None;
    let mut last = String::new();
    for attempt in 1..=3 {
        let tcp_port = free_port(server_ip)?;
        match perftest_once(
            tool,
            &server_args(tcp_port),
            &client_args(tcp_port),
            server_ip,
            limit,
        ) {
            Ok(Some(out)) => {
                text = Some(out);
                break;
            }
            Ok(None) => last = format!("did not finish within {limit:?}; killed"),
            Err(e) => last = e.to_string(),
        }
        eprintln!("# {tool} -s {size} (try {attempt} of 3): {last}");
    }
    let text = text.ok_or_else(|| format!("{tool} -s {size} failed three times; last: {last}"))?;
    parse_perftest(mode, &text)
        .into_iter()
        .find(|&(s, _)| s == size)
        .map(|(_, row)| row)
        .ok_or_else(|| format!("no {size}-byte row in {tool}'s output:\n{text}").into())
}

/// One perftest run: the server with `server_args`, then the client with
/// `client_args` towards `server_ip` (retried while the server is not listening yet).
/// `Ok(None)` when it did not finish within `limit` (both were killed); an error when
/// the client failed for good.
fn perftest_once(
    tool: &str,
    server_args: &[String],
    client_args: &[String],
    server_ip: &str,
    limit: Duration,
) -> Res<Option<String>> {
    let deadline = Instant::now() + limit;
    let mut server = Command::new(tool)
        .args(server_args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run {tool} (perftest): {e}"))?;
    let outcome = (|| -> Res<Option<String>> {
        // The server needs a moment to listen; the client retries its connect.
        let connect_until = Instant::now() + Duration::from_secs(60);
        loop {
            let mut client = Command::new(tool)
                .args(client_args)
                .arg(server_ip)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()?;
            // perftest prints a few lines (well under a pipe's buffer), so waiting
            // before reading cannot block it.
            let Some(status) = wait_until(&mut client, deadline)? else {
                return Ok(None);
            };
            let mut out = String::new();
            let mut err = String::new();
            if let Some(mut s) = client.stdout.take() {
                s.read_to_string(&mut out)?;
            }
            if let Some(mut s) = client.stderr.take() {
                s.read_to_string(&mut err)?;
            }
            if status.success() {
                return Ok(Some(out));
            }
            if let Some(gone) = server.try_wait()? {
                let mut why = String::new();
                if let Some(mut s) = server.stderr.take() {
                    let _ = s.read_to_string(&mut why);
                }
                return Err(format!(
                    "{tool}'s server ended ({gone}) before its client connected: {why}\nclient ({status}):\n{out}{err}"
                )
                .into());
            }
            if Instant::now() > connect_until {
                return Err(format!("{tool} failed ({status}):\n{out}{err}").into());
            }
            std::thread::sleep(Duration::from_millis(300));
        }
    })();
    // The server ends with its client; one that does not is killed.
    let grace = Instant::now() + Duration::from_secs(10);
    if !matches!(outcome, Ok(Some(_))) || wait_until(&mut server, grace)?.is_none() {
        let _ = server.kill();
        let _ = server.wait();
    }
    outcome
}

/// Waits for `child` until `deadline`; kills it then (`Ok(None)`).
fn wait_until(
    child: &mut Child,
    deadline: Instant,
) -> std::io::Result<Option<std::process::ExitStatus>> {
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(Some(status));
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Ok(None);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Rows of perftest output: first column the size, then (latency) `#iterations t_min
/// t_max t_typical t_avg …` → t_typical and t_avg, or (bw, `--report_gbits`)
/// `#iterations BW_peak BW_average …` in Gb/s → MB/s.
fn parse_perftest(mode: Mode, text: &str) -> Vec<(usize, PerftestRow)> {
    let mut rows = Vec::new();
    for line in text.lines() {
        let cols: Vec<&str> = line.split_whitespace().collect();
        let Some(Ok(size)) = cols.first().map(|c| c.parse::<usize>()) else {
            continue;
        };
        let value = match mode {
            Mode::Latency => cols.get(4).and_then(|c| c.parse::<f64>().ok()),
            Mode::Bw => cols
                .get(3)
                .and_then(|c| c.parse::<f64>().ok())
                .map(|gbits| gbits * 1e9 / 8.0 / 1e6),
        };
        let avg = match mode {
            Mode::Latency => cols.get(5).and_then(|c| c.parse::<f64>().ok()),
            Mode::Bw => None,
        };
        if let Some(value) = value {
            rows.push((size, PerftestRow { value, avg }));
        }
    }
    rows
}

/// Whether the verbs fabric busy-polls (both processes inherit the environment).
fn verbs_polling() -> bool {
    cohort_transport::busy_poll_from_env()
}

fn free_port(ip: &str) -> Res<u16> {
    Ok(TcpListener::bind(format!("{ip}:0"))?.local_addr()?.port())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_zero_then_powers_of_two() {
        assert_eq!(sizes(0, 8), vec![0, 1, 2, 4, 8]);
        assert_eq!(sizes(1, 4), vec![1, 2, 4]);
        assert_eq!(*sizes(0, 4 << 20).last().unwrap(), 4 << 20);
    }

    #[test]
    fn parses_perftest_tables() {
        let lat = " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] \n 2       100          80.12        300.00       95.50          99.00        10.00   200.00    300.00\n";
        let row = |value, avg| PerftestRow { value, avg };
        assert_eq!(
            parse_perftest(Mode::Latency, lat),
            vec![(2, row(95.5, Some(99.0)))]
        );
        let bw = " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]\n 4194304    640              1.20               0.80                  0.000024\n";
        assert_eq!(
            parse_perftest(Mode::Bw, bw),
            vec![(4194304, row(100.0, None))]
        );
    }

    #[test]
    fn large_messages_get_fewer_iterations() {
        assert_eq!(counts(Mode::Latency, 8, 1000, 100), (1000, 100));
        assert_eq!(counts(Mode::Latency, 1 << 20, 1000, 100), (100, 10));
        assert_eq!(counts(Mode::Bw, 1 << 20, 1000, 100), (20, 2));
    }
}

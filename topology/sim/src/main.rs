//! `cohort-sim`: see the library docs (`cohort_sim`) for the model.

use std::process::ExitCode;

/// The allocator `cohortd` uses, so that `cohort-sim cost` measures what it spends.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

use clap::{Parser, Subcommand, ValueEnum};
use cohort_sim::{
    ceil_log, lower_bound, memory_estimate, simulate, simulate_model, Collective, Params, Report,
    Scenario,
};
use cohort_topology::{radix::CostModel, Allgather, TreeShape};

mod calibrate;
mod plot;

#[derive(Parser)]
#[command(
    name = "cohort-sim",
    about = "Discrete-event simulator of cohort's node servers: runs the node servers' own \
             collective state machines for N simulated servers under an α/β/o cost model",
    after_help = "Examples:\n  cohort-sim table                      HDR-like parameters, N = 2 … 16384\n  \
                  cohort-sim table --params measured    this machine's TCP α/β (measured first)\n  \
                  cohort-sim run --nodes 512 --op fence --shape 4\n  \
                  cohort-sim calibrate                  measure α, β, o, α_c here"
)]
struct Cli {
    #[command(subcommand)]
    what: What,
}

#[derive(Clone, Copy, ValueEnum)]
enum ParamSet {
    /// InfiniBand HDR-like: α = 1 µs, 25 GB/s, o = 0.5 µs, α_c = 0.5 µs.
    Hdr,
    /// Measured on this machine (TCP over loopback, Unix sockets, the engine's own cost).
    Measured,
}

#[derive(clap::Args)]
struct Model {
    /// Parameter set; --alpha-us etc. override single values.
    #[arg(long, value_enum, default_value_t = ParamSet::Hdr)]
    params: ParamSet,
    /// Per-hop latency between node servers, µs.
    #[arg(long)]
    alpha_us: Option<f64>,
    /// Link bandwidth, GB/s (β = 1/bandwidth).
    #[arg(long)]
    gbps: Option<f64>,
    /// Per-message processing time of a node server, µs.
    #[arg(long)]
    overhead_us: Option<f64>,
    /// A node server's processing time per byte of a peer message it takes in, ns
    /// (γ: a step costs o + γ·size; default 0, `--params measured` fits it).
    #[arg(long)]
    overhead_ns_per_byte: Option<f64>,
    /// Rank ⇄ node-server latency, µs.
    #[arg(long)]
    client_alpha_us: Option<f64>,
    /// Simulate node servers emulated on one host with this many cores (as
    /// `cohort run --nodes M` does): hops become CPU work competing for the cores.
    #[arg(long)]
    host_cores: Option<u32>,
}

impl Model {
    fn params(&self) -> Params {
        let mut p = match self.params {
            ParamSet::Hdr => Params::hdr(),
            ParamSet::Measured => {
                let m = calibrate::measure();
                eprintln!("{}", m.describe());
                m.params
            }
        };
        if let Some(a) = self.alpha_us {
            p.alpha_s = a * 1e-6;
        }
        if let Some(g) = self.gbps {
            p.beta_s_per_byte = 1.0 / (g * 1e9);
        }
        if let Some(o) = self.overhead_us {
            p.overhead_s = o * 1e-6;
        }
        if let Some(g) = self.overhead_ns_per_byte {
            p.overhead_s_per_byte = g * 1e-9;
        }
        if let Some(c) = self.client_alpha_us {
            p.client_alpha_s = c * 1e-6;
        }
        if let Some(c) = self.host_cores {
            p.host_cores = Some(c);
        }
        p
    }
}

#[derive(Clone, Copy, ValueEnum)]
enum Op {
    Fence,
    Construct,
}

impl From<Op> for Collective {
    fn from(o: Op) -> Collective {
        match o {
            Op::Fence => Collective::Fence,
            Op::Construct => Collective::Construct,
        }
    }
}

#[derive(Subcommand)]
enum What {
    /// One simulated collective; prints time, rounds and messages per server.
    Run {
        #[arg(long)]
        nodes: u32,
        #[arg(long, default_value_t = 1)]
        ranks_per_node: u32,
        #[arg(long, value_enum, default_value_t = Op::Construct)]
        op: Op,
        /// Tree radix k (k-ary), "binomial", or "auto" (the radix the cost model picks).
        #[arg(long, default_value = "auto")]
        shape: String,
        /// tree, dissemination, or auto (per operation, as cohortd decides).
        #[arg(long, default_value_t = Allgather::Auto)]
        allgather: Allgather,
        /// Posted data per rank, bytes.
        #[arg(long, default_value_t = 1024)]
        bytes: usize,
        #[command(flatten)]
        model: Model,
    },
    /// The scaling table: N = 2, 4, 16, … 16384 beside the allgather lower bound.
    Table {
        #[arg(long, value_enum, default_value_t = Op::Construct)]
        op: Op,
        #[arg(long, default_value = "auto")]
        shape: String,
        /// tree, dissemination, or auto (per N, as cohortd decides).
        #[arg(long, default_value_t = Allgather::Auto)]
        allgather: Allgather,
        /// Largest N.
        #[arg(long, default_value_t = 16384)]
        max: u32,
        /// Posted data per node server, bytes.
        #[arg(long, default_value_t = 1024)]
        bytes: usize,
        /// Run the real engines while their estimated memory stays below this many GiB
        /// and N ≤ --engine-max; the schedule model (checked against the engines by
        /// the test suite) beyond. Constructs only; fences always use the engines.
        #[arg(long, default_value_t = 4.0)]
        mem_gib: f64,
        #[arg(long, default_value_t = 1024)]
        engine_max: u32,
        /// Also draw the table as a PNG plot.
        #[arg(long)]
        png: Option<std::path::PathBuf>,
        #[command(flatten)]
        model: Model,
    },
    /// Measures this machine's α (TCP ping-pong), β (TCP stream), α_c (Unix ping-pong)
    /// and o (the engine's cost per message, with encoding and decoding).
    Calibrate {
        /// Print only the measured values as `cohort-sim run` flags.
        #[arg(long)]
        args: bool,
    },
    /// A node server's CPU per message in steady state: the real engines and codec, in
    /// process, no I/O, repeating what `cohort-bench fence` and `cohort-bench group`
    /// time (with their untimed barrier) on warm engines.
    Cost {
        #[arg(long, default_value_t = 3)]
        nodes: u32,
        #[arg(long, default_value_t = 1)]
        ranks_per_node: u32,
        /// Posted data per rank for the fence, bytes.
        #[arg(long, default_value_t = 1024)]
        bytes: usize,
        #[arg(short, long, default_value_t = 20000)]
        iterations: usize,
        #[arg(short = 'x', long, default_value_t = 1000)]
        warmup: usize,
    },
    /// Prints each rank's construct result in the format of the `sim-compare` scenario
    /// of the test rank program, for comparing with a real job.
    Replay {
        #[arg(long)]
        nodes: u32,
        #[arg(short = 'n', long)]
        ranks: u32,
        #[arg(long)]
        nspace: String,
        #[arg(long, default_value = cohort_proto::digest::COMPARE_GROUP)]
        group: String,
        #[arg(long, default_value_t = 64)]
        bytes: usize,
        /// As the real job's `cohort run --allgather` (default auto, as cohortd).
        #[arg(long, default_value_t = Allgather::Auto)]
        allgather: Allgather,
    },
}

fn parse_shape(s: &str, n: u32, bytes: usize, p: &Params) -> Result<TreeShape, String> {
    match s {
        "auto" => Ok(CostModel {
            alpha_s: p.alpha_s,
            beta_s_per_byte: p.beta_s_per_byte,
            overhead_s: p.overhead_s,
            bytes_per_node: bytes as f64,
        }
        .best_shape(n as usize)),
        "binomial" => Ok(TreeShape::Binomial),
        k => match k.parse::<usize>() {
            Ok(k) if k >= 1 => Ok(TreeShape::KAry(k)),
            _ => Err(format!(
                "--shape {k}: expected a radix ≥ 1, \"binomial\" or \"auto\""
            )),
        },
    }
}

/// The round and message bounds `(2·⌈log_k N⌉ + 1, k + 2)` with the radix `k` of the
/// algorithm: a k-ary tree's k; a binomial tree has rounds of radix 2 but its root
/// sends ⌈log2 N⌉ messages (its fan-out); so does the dissemination allgather (its
/// ⌈log2 N⌉ rounds of one message each, then a binary tree of lean outcomes).
fn bounds(shape: TreeShape, dissemination: bool, n: u32) -> (u32, u32) {
    if dissemination {
        return bounds(TreeShape::Binomial, false, n);
    }
    match shape {
        TreeShape::KAry(k) => (2 * ceil_log(n, k as u32) + 1, k as u32 + 2),
        TreeShape::Binomial => (2 * ceil_log(n, 2) + 1, ceil_log(n, 2).max(1) + 2),
    }
}

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cohort-sim: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> Result<(), String> {
    match cli.what {
        What::Run {
            nodes,
            ranks_per_node,
            op,
            shape,
            allgather,
            bytes,
            model,
        } => {
            let p = model.params();
            let shape = parse_shape(&shape, nodes, bytes, &p)?;
            let mut s = Scenario::new(nodes, op.into(), shape);
            s.allgather = allgather;
            s.ranks_per_node = ranks_per_node;
            s.bytes_per_rank = bytes;
            let r = simulate(&s, p).map_err(|e| e.to_string())?;
            print_params(&p);
            println!(
                "# {} over {nodes} node servers × {ranks_per_node} ranks, {}, {bytes} B per rank",
                s.op,
                algorithm(shape, allgather.disseminates(nodes as usize))
            );
            println!("completion        {:>12.2} us", r.completion_s * 1e6);
            println!(
                "lower bound       {:>12.2} us",
                lower_bound(nodes, (bytes as u32 * ranks_per_node) as f64, &p) * 1e6
            );
            println!("rounds            {:>12}", r.rounds);
            println!("max msgs/server   {:>12}", r.max_msgs());
            println!("max bytes/server  {:>12}", r.max_bytes());
            println!(
                "engine wall time  {:>12.2} us per step ({} steps)",
                r.engine_wall.as_secs_f64() * 1e6 / r.engine_steps.max(1) as f64,
                r.engine_steps
            );
            Ok(())
        }
        What::Table {
            op,
            shape,
            allgather,
            max,
            bytes,
            mem_gib,
            engine_max,
            png,
            model,
        } => {
            let p = model.params();
            let rows = table(
                op.into(),
                &shape,
                allgather,
                max,
                bytes,
                mem_gib,
                engine_max,
                &p,
            )?;
            if let Some(path) = png {
                plot::draw(&path, &rows, op.into(), bytes, &p)?;
                eprintln!("cohort-sim: wrote {}", path.display());
            }
            Ok(())
        }
        What::Cost {
            nodes,
            ranks_per_node,
            bytes,
            iterations,
            warmup,
        } => {
            println!(
                "# cohort-sim cost: {nodes} node servers, {ranks_per_node} rank(s) each, real \
                 engines and codec, in process, {iterations} iterations ({warmup} warm-up)"
            );
            println!(
                "# A step: one message a server handles (a client request or a peer \
                 message): decode, engine, encode what it sends"
            );
            println!(
                "# γ: the step time's growth per byte of the message taken in (least-squares \
                 slope over every step)"
            );
            println!(
                "# {:<34}{:>12}{:>16}{:>16}{:>20}{:>12}",
                "Op (+ its untimed barrier)",
                "Steps/op",
                "Median(ns)",
                "Mean(ns)",
                "All servers(us)",
                "γ(ns/B)"
            );
            for (name, op) in [
                (format!("fence {bytes} B, collect"), Collective::Fence),
                (
                    "construct (context id) + destruct".to_string(),
                    Collective::Construct,
                ),
            ] {
                let c = cohort_sim::measure_steady(
                    nodes,
                    ranks_per_node,
                    op,
                    bytes,
                    iterations,
                    warmup,
                )
                .map_err(|e| e.to_string())?;
                println!(
                    "{:<36}{:>12.1}{:>16}{:>16}{:>20.2}{:>12.3}",
                    name,
                    c.steps_per_iteration,
                    c.median_step.as_nanos(),
                    c.mean_step.as_nanos(),
                    c.per_iteration.as_secs_f64() * 1e6,
                    c.per_byte_s * 1e9
                );
            }
            Ok(())
        }
        What::Calibrate { args } => {
            let m = calibrate::measure();
            if args {
                let p = m.params;
                println!(
                    "--alpha-us {:.3} --gbps {:.3} --overhead-us {:.3} --overhead-ns-per-byte {:.3} \
                     --client-alpha-us {:.3}",
                    p.alpha_s * 1e6,
                    1.0 / p.beta_s_per_byte / 1e9,
                    p.overhead_s * 1e6,
                    p.overhead_s_per_byte * 1e9,
                    p.client_alpha_s * 1e6
                );
            } else {
                println!("{}", m.describe());
            }
            Ok(())
        }
        What::Replay {
            nodes,
            ranks,
            nspace,
            group,
            bytes,
            allgather,
        } => {
            if nodes == 0 || ranks % nodes != 0 {
                return Err(format!(
                    "-n {ranks} must be a multiple of --nodes {nodes} (block mapping, equal ranks per node)"
                ));
            }
            let p = Params::hdr();
            let shape = cohort_topology::default_shape(nodes as usize);
            let mut s = Scenario::new(nodes, Collective::Construct, shape);
            s.ranks_per_node = ranks / nodes;
            s.nspace = nspace;
            s.group_id = group;
            s.bytes_per_rank = bytes;
            s.allgather = allgather;
            s.read_back = true;
            let r = simulate(&s, p).map_err(|e| e.to_string())?;
            for line in cohort_sim::compare_lines(&r.results) {
                println!("{line}");
            }
            Ok(())
        }
    }
}

fn print_params(p: &Params) {
    let host = match p.host_cores {
        Some(c) => format!(", one host with {c} cores"),
        None => String::new(),
    };
    println!(
        "# α = {:.2} us, β = {:.4} ns/B ({:.2} GB/s), o = {:.2} us, γ = {:.3} ns/B, \
         α_c = {:.2} us{host}",
        p.alpha_s * 1e6,
        p.beta_s_per_byte * 1e9,
        1.0 / p.beta_s_per_byte / 1e9,
        p.overhead_s * 1e6,
        p.overhead_s_per_byte * 1e9,
        p.client_alpha_s * 1e6
    );
}

/// One row of the scaling table.
pub struct Row {
    pub n: u32,
    pub tree: TreeShape,
    /// The dissemination allgather ran (`tree` is then unused).
    pub dissemination: bool,
    /// `None` when the row was not run.
    pub time_s: Option<f64>,
    pub bound_s: f64,
    pub rounds: u32,
    pub max_msgs: u64,
    pub driver: &'static str,
}

/// How the table names an operation's algorithm.
fn algorithm(tree: TreeShape, dissemination: bool) -> String {
    if dissemination {
        "bruck".into()
    } else {
        tree.to_string()
    }
}

#[allow(clippy::too_many_arguments)]
fn table(
    op: Collective,
    shape: &str,
    allgather: Allgather,
    max: u32,
    bytes: usize,
    mem_gib: f64,
    engine_max: u32,
    p: &Params,
) -> Result<Vec<Row>, String> {
    print_params(p);
    println!("# {op}, {bytes} B per node server; lower bound = ⌈log2 N⌉·α + (N−1)/N·N·D·β");
    println!("# driver: engine = N real engines; model = schedule model (tests/model.rs)");
    println!(
        "# algorithm: a k-ary or binomial tree, or bruck (the dissemination allgather, then \
         a lean outcome down a binary tree; bounded as a binomial tree: k = 2 for rounds, \
         ⌈log2 N⌉ for messages); --allgather {allgather}"
    );
    println!(
        "# {:>7} {:>9} {:>14} {:>14} {:>7} {:>7} {:>10} {:>9} {:>4} {:>7}",
        "N",
        "algorithm",
        "time(us)",
        "bound(us)",
        "ratio",
        "rounds",
        "2⌈logk⌉+1",
        "max msgs",
        "k+2",
        "driver"
    );
    let mut sizes = vec![2u32];
    let mut n = 4u32;
    while n <= max {
        sizes.push(n);
        n *= 4;
    }
    let mut rows = Vec::new();
    for n in sizes {
        let tree = parse_shape(shape, n, bytes, p)?;
        let mut s = Scenario::new(n, op, tree);
        s.allgather = allgather;
        s.bytes_per_rank = bytes;
        let dissemination = allgather.disseminates(n as usize);
        let need = memory_estimate(&s) as f64 / f64::from(1u32 << 30);
        let bound = lower_bound(n, bytes as f64, p);
        let (round_bound, msg_bound) = bounds(tree, dissemination, n);
        let engines = need <= mem_gib && n <= engine_max;
        let (r, driver): (Option<Report>, &str) = if engines {
            (Some(simulate(&s, *p).map_err(|e| e.to_string())?), "engine")
        } else if op == Collective::Construct {
            (
                Some(simulate_model(&s, *p).map_err(|e| e.to_string())?),
                "model",
            )
        } else {
            (None, "-")
        };
        let row = Row {
            n,
            tree,
            dissemination,
            time_s: r.as_ref().map(|r| r.completion_s),
            bound_s: bound,
            rounds: r.as_ref().map_or(0, |r| r.rounds),
            max_msgs: r.as_ref().map_or(0, |r| r.max_msgs()),
            driver,
        };
        let fmt_opt = |v: Option<String>| v.unwrap_or_else(|| "-".into());
        println!(
            "  {n:>7} {:>9} {:>14} {:>14.2} {:>7} {:>7} {:>10} {:>9} {:>4} {:>7}",
            algorithm(tree, dissemination),
            fmt_opt(row.time_s.map(|t| format!("{:.2}", t * 1e6))),
            bound * 1e6,
            fmt_opt(row.time_s.map(|t| format!("{:.2}", t / bound))),
            fmt_opt(r.as_ref().map(|_| row.rounds.to_string())),
            round_bound,
            fmt_opt(r.as_ref().map(|_| row.max_msgs.to_string())),
            msg_bound,
            driver
        );
        rows.push(row);
    }
    Ok(rows)
}

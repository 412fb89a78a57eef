//! Measuring this machine's cost-model parameters.
//!
//! * α: half the median round trip of a 64-byte TCP ping-pong between two threads over
//!   loopback (TCP_NODELAY) — a hop between two node servers on this box;
//! * β: the inverse throughput of a 64 MiB TCP stream in 4 MiB writes;
//! * α_c: half the median round trip of a 64-byte Unix-socket ping-pong (rank ⇄ its
//!   node server);
//! * o: what a node server spends per message besides the hop: the median time to
//!   decode, step the engine and encode, taken from simulated 3-server collectives
//!   run with the real engine and the real codec;
//! * γ: how that time grows per byte of the message taken in: the least-squares slope
//!   of step time over message size, in warm 32-server fences with 1 KiB per rank.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use cohort_sim::Params;

pub struct Measured {
    pub params: Params,
    pub tcp_rtt: Duration,
    pub unix_rtt: Duration,
    pub tcp_gbps: f64,
}

impl Measured {
    pub fn describe(&self) -> String {
        format!(
            "# measured here: TCP ping-pong RTT {:.1} us (α = RTT/2), TCP stream {:.2} GB/s, \
             Unix ping-pong RTT {:.1} us (α_c = RTT/2), engine+codec {:.2} us per message (o) \
             and {:.2} ns per byte taken in (γ)",
            self.tcp_rtt.as_secs_f64() * 1e6,
            self.tcp_gbps,
            self.unix_rtt.as_secs_f64() * 1e6,
            self.params.overhead_s * 1e6,
            self.params.overhead_s_per_byte * 1e9
        )
    }
}

/// γ is fitted over the steps of this many servers' fences (1 KiB per rank), where
/// messages range from a request to an outcome carrying every server's data.
const GAMMA_NODES: u32 = 32;
const GAMMA_ITERATIONS: usize = 200;
const ROUNDS: usize = 2000;
const WARMUP: usize = 200;

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort_unstable();
    v[v.len() / 2]
}

fn pingpong<S: Read + Write + Send + 'static>(mut a: S, mut b: S) -> Duration {
    let echo = std::thread::spawn(move || {
        let mut buf = [0u8; 64];
        for _ in 0..ROUNDS + WARMUP {
            b.read_exact(&mut buf).expect("echo read");
            b.write_all(&buf).expect("echo write");
        }
    });
    let mut buf = [7u8; 64];
    let mut times = Vec::with_capacity(ROUNDS);
    for i in 0..ROUNDS + WARMUP {
        let t = Instant::now();
        a.write_all(&buf).expect("ping write");
        a.read_exact(&mut buf).expect("ping read");
        if i >= WARMUP {
            times.push(t.elapsed());
        }
    }
    echo.join().expect("echo thread");
    median(times)
}

fn tcp_pair() -> (TcpStream, TcpStream) {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
    let a = TcpStream::connect(l.local_addr().expect("addr")).expect("connect");
    let (b, _) = l.accept().expect("accept");
    a.set_nodelay(true).expect("nodelay");
    b.set_nodelay(true).expect("nodelay");
    (a, b)
}

fn tcp_stream_gbps() -> f64 {
    const CHUNK: usize = 4 << 20;
    const TOTAL: usize = 64 << 20;
    let (mut a, mut b) = tcp_pair();
    let sink = std::thread::spawn(move || {
        let mut buf = vec![0u8; CHUNK];
        let mut got = 0;
        while got < TOTAL {
            got += b.read(&mut buf).expect("sink read");
        }
        b.write_all(&[1]).expect("sink ack");
    });
    let buf = vec![3u8; CHUNK];
    let t = Instant::now();
    for _ in 0..TOTAL / CHUNK {
        a.write_all(&buf).expect("stream write");
    }
    let mut ack = [0u8; 1];
    a.read_exact(&mut ack).expect("stream ack");
    let secs = t.elapsed().as_secs_f64();
    sink.join().expect("sink thread");
    TOTAL as f64 / secs / 1e9
}

pub fn measure() -> Measured {
    let (a, b) = tcp_pair();
    let tcp_rtt = pingpong(a, b);
    let (a, b) = UnixStream::pair().expect("socketpair");
    let unix_rtt = pingpong(a, b);
    let tcp_gbps = tcp_stream_gbps();
    let o = cohort_sim::measure_overhead(9);
    let gamma = cohort_sim::measure_steady(
        GAMMA_NODES,
        1,
        cohort_sim::Collective::Fence,
        1024,
        GAMMA_ITERATIONS,
        GAMMA_ITERATIONS / 10,
    )
    .map_or(0.0, |c| c.per_byte_s.max(0.0));
    Measured {
        params: Params {
            alpha_s: tcp_rtt.as_secs_f64() / 2.0,
            beta_s_per_byte: 1.0 / (tcp_gbps * 1e9),
            overhead_s: o.as_secs_f64(),
            overhead_s_per_byte: gamma,
            client_alpha_s: unix_rtt.as_secs_f64() / 2.0,
            host_cores: None,
        },
        tcp_rtt,
        unix_rtt,
        tcp_gbps,
    }
}

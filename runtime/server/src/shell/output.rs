//! Rank output forwarding: rank pipes are cut into whole lines (optionally tagged
//! `[NSPACE,RANK]<stdout>: `) and handed to one writer thread per stream, so lines of
//! different ranks never interleave and a slow terminal never stalls the node service.
//! Bytes are forwarded as they are: nothing assumes UTF-8.

use std::io::Write;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::sync::mpsc;

/// A partial line longer than this is forwarded without waiting for its newline.
pub const MAX_PENDING_LINE: usize = 64 * 1024;

/// Splits one stream into lines and prefixes each (sans-IO).
#[derive(Debug)]
pub struct LineTagger {
    prefix: Vec<u8>,
    /// Each line also starts with the time it is forwarded (`--timestamp-output`).
    stamp: bool,
    pending: Vec<u8>,
    /// The last emitted bytes ended mid-line (a cut over-long line).
    mid_line: bool,
}

impl LineTagger {
    /// `prefix` is prepended to every line; empty = forward bytes unchanged.
    pub fn new(prefix: Vec<u8>) -> LineTagger {
        LineTagger {
            prefix,
            stamp: false,
            pending: Vec::new(),
            mid_line: false,
        }
    }

    /// Every line also starts with `[TIME]`, the UTC time it is forwarded
    /// (`2026-11-28T16:01:02.123456Z`), before the prefix.
    pub fn stamped(mut self) -> LineTagger {
        self.stamp = true;
        self
    }

    /// What starts a line: the time (when stamped), then the prefix.
    fn start_line(&self, out: &mut Vec<u8>) {
        if self.stamp {
            out.push(b'[');
            out.extend_from_slice(utc_timestamp(std::time::SystemTime::now()).as_bytes());
            out.push(b']');
        }
        out.extend_from_slice(&self.prefix);
    }

    /// Whether lines are rewritten at all (else bytes pass unchanged).
    fn rewrites(&self) -> bool {
        self.stamp || !self.prefix.is_empty()
    }

    /// `[NSPACE,RANK]<stdout>: ` (the prefix of `--tag-output`).
    pub fn tag(nspace: &str, rank: u32, stream: &str) -> Vec<u8> {
        format!("[{nspace},{rank}]<{stream}>: ").into_bytes()
    }

    /// Feeds bytes read from the pipe; appends every complete line to `out`.
    pub fn push(&mut self, data: &[u8], out: &mut Vec<u8>) {
        self.pending.extend_from_slice(data);
        if let Some(last_nl) = self.pending.iter().rposition(|&b| b == b'\n') {
            let rest = self.pending.split_off(last_nl + 1);
            let complete = std::mem::replace(&mut self.pending, rest);
            if !self.rewrites() {
                out.extend_from_slice(&complete);
            } else {
                for line in complete.split_inclusive(|&b| b == b'\n') {
                    if !self.mid_line {
                        self.start_line(out);
                    }
                    out.extend_from_slice(line);
                    self.mid_line = false;
                }
            }
        }
        if self.pending.len() > MAX_PENDING_LINE {
            self.emit_partial(out);
        }
    }

    /// End of stream: flushes a last line that had no newline.
    pub fn finish(&mut self, out: &mut Vec<u8>) {
        if !self.pending.is_empty() {
            self.emit_partial(out);
        }
        // Tagged output stays line-structured; untagged output stays byte-exact.
        if self.mid_line && self.rewrites() {
            out.push(b'\n');
        }
        self.mid_line = false;
    }

    fn emit_partial(&mut self, out: &mut Vec<u8>) {
        if !self.mid_line {
            self.start_line(out);
        }
        out.append(&mut self.pending);
        self.mid_line = true;
    }
}

/// `t` in UTC as `2026-11-28T16:01:02.123456Z` (RFC 3339, microseconds).
pub fn utc_timestamp(t: std::time::SystemTime) -> String {
    let d = t.duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs();
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Days since 1970-01-01 to a civil date (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:06}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60,
        d.subsec_micros()
    )
}

/// Which of the daemon's own streams a sink writes to.
#[derive(Clone, Copy, Debug)]
pub enum Stream {
    Stdout,
    Stderr,
}

/// A writer thread for one of the daemon's streams, fed whole lines.
pub struct OutputSink {
    tx: Option<mpsc::Sender<Vec<u8>>>,
    done: std::sync::mpsc::Receiver<()>,
}

impl OutputSink {
    pub fn spawn(stream: Stream) -> std::io::Result<OutputSink> {
        let (tx, mut rx) = mpsc::channel::<Vec<u8>>(256);
        let (done_tx, done) = std::sync::mpsc::channel();
        std::thread::Builder::new()
            .name(format!("cohortd-{stream:?}").to_lowercase())
            .spawn(move || {
                while let Some(mut chunk) = rx.blocking_recv() {
                    // Batch what is already queued: fewer writes, lines stay whole.
                    while chunk.len() < MAX_PENDING_LINE {
                        match rx.try_recv() {
                            Ok(more) => chunk.extend_from_slice(&more),
                            Err(_) => break,
                        }
                    }
                    if write_all(stream, &chunk).is_err() {
                        // Nobody reads our output any more (`cohort run … | head`):
                        // hanging up makes the forwarders close the ranks' pipes, so
                        // ranks see EPIPE/SIGPIPE as in a shell pipeline.
                        break;
                    }
                }
                drop(rx);
                let _ = done_tx.send(());
            })?;
        Ok(OutputSink { tx: Some(tx), done })
    }

    pub fn sender(&self) -> mpsc::Sender<Vec<u8>> {
        self.tx.clone().expect("sink is open until closed")
    }

    /// Lets the thread drain what is queued (once every sender is gone), waiting at
    /// most `wait`: a reader that stopped reading must not keep us alive.
    pub fn close(mut self, wait: Duration) {
        self.tx = None;
        let _ = self.done.recv_timeout(wait);
    }
}

fn write_all(stream: Stream, bytes: &[u8]) -> std::io::Result<()> {
    match stream {
        Stream::Stdout => {
            let mut out = std::io::stdout().lock();
            out.write_all(bytes)?;
            out.flush()
        }
        Stream::Stderr => {
            let mut err = std::io::stderr().lock();
            err.write_all(bytes)?;
            err.flush()
        }
    }
}

/// Copies a rank's pipe into a sink line by line until EOF. If the sink hangs up, the
/// pipe is closed, so the rank gets EPIPE/SIGPIPE rather than writing into the void.
pub async fn forward<R: AsyncRead + Unpin>(
    mut pipe: R,
    mut tagger: LineTagger,
    sink: mpsc::Sender<Vec<u8>>,
) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match pipe.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let mut out = Vec::new();
        tagger.push(&buf[..n], &mut out);
        if !out.is_empty() && sink.send(out).await.is_err() {
            return;
        }
    }
    let mut out = Vec::new();
    tagger.finish(&mut out);
    if !out.is_empty() {
        let _ = sink.send(out).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(tagger: &mut LineTagger, chunks: &[&[u8]]) -> Vec<u8> {
        let mut out = Vec::new();
        for c in chunks {
            tagger.push(c, &mut out);
        }
        tagger.finish(&mut out);
        out
    }

    #[test]
    fn timestamps_are_utc_rfc3339_with_microseconds() {
        let at = |secs: u64, micros: u32| {
            utc_timestamp(
                std::time::UNIX_EPOCH
                    + Duration::from_secs(secs)
                    + Duration::from_micros(u64::from(micros)),
            )
        };
        assert_eq!(at(0, 0), "1970-01-01T00:00:00.000000Z");
        assert_eq!(at(1_795_881_662, 500_000), "2026-11-28T16:01:02.500000Z");
        assert_eq!(at(1_709_251_199, 7), "2024-02-29T23:59:59.000007Z");
        assert_eq!(at(951_868_800, 0), "2000-03-01T00:00:00.000000Z");
    }

    /// `--timestamp-output`: every line (also the halves of a line cut across reads,
    /// once) starts with `[TIME]` and the prefix; a last line without newline is ended.
    #[test]
    fn stamped_lines_start_with_the_time_then_the_prefix() {
        let mut t = LineTagger::new(b"<stdout>: ".to_vec()).stamped();
        let out = String::from_utf8(run(&mut t, &[b"one\ntw", b"o\nthree"])).unwrap();
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 3, "{out:?}");
        for (line, text) in lines.iter().zip(["one", "two", "three"]) {
            let (stamp, rest) = line.split_once(']').expect("a stamp");
            assert_eq!(rest, format!("<stdout>: {text}"), "{out:?}");
            let stamp = stamp.strip_prefix('[').expect("[");
            assert_eq!(stamp.len(), "2026-11-28T16:01:02.123456Z".len(), "{stamp}");
            assert!(stamp.starts_with("20") && stamp.ends_with('Z'), "{stamp}");
        }
        assert!(out.ends_with('\n'));
    }

    #[test]
    fn untagged_output_is_byte_exact() {
        let mut t = LineTagger::new(Vec::new());
        let out = run(&mut t, &[b"ab", b"c\nd\xff\xfe\n", b"tail"]);
        assert_eq!(out, b"abc\nd\xff\xfe\ntail");
    }

    #[test]
    fn tagged_lines_are_prefixed_and_split_across_reads() {
        let mut t = LineTagger::new(LineTagger::tag("ns", 3, "stdout"));
        let mut out = Vec::new();
        t.push(b"hel", &mut out);
        assert!(out.is_empty(), "no line is emitted before its newline");
        t.push(b"lo\nwor", &mut out);
        assert_eq!(out, b"[ns,3]<stdout>: hello\n");
        t.push(b"ld\n\nlast", &mut out);
        t.finish(&mut out);
        assert_eq!(
            out,
            b"[ns,3]<stdout>: hello\n[ns,3]<stdout>: world\n[ns,3]<stdout>: \n[ns,3]<stdout>: last\n"
        );
    }

    #[test]
    fn overlong_lines_are_cut_but_prefixed_once() {
        let mut t = LineTagger::new(b"P:".to_vec());
        let long = vec![b'x'; MAX_PENDING_LINE + 10];
        let out = run(&mut t, &[&long, b"yy\nz"]);
        let mut want = b"P:".to_vec();
        want.extend_from_slice(&long);
        want.extend_from_slice(b"yy\nP:z\n");
        assert_eq!(out, want);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn forward_delivers_whole_lines_then_the_tail() {
        let (tx, mut rx) = mpsc::channel(4);
        let data: &[u8] = b"one\ntwo";
        forward(data, LineTagger::new(Vec::new()), tx).await;
        let mut got = Vec::new();
        while let Ok(c) = rx.try_recv() {
            got.extend(c);
        }
        assert_eq!(got, b"one\ntwo");

        // A hung-up sink ends forwarding at once.
        let (tx, rx) = mpsc::channel(1);
        drop(rx);
        forward(&b"lots\nof\nlines\n"[..], LineTagger::new(Vec::new()), tx).await;
    }
}

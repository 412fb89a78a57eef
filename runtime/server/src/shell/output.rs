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
    pending: Vec<u8>,
    /// The last emitted bytes ended mid-line (a cut over-long line).
    mid_line: bool,
}

impl LineTagger {
    /// `prefix` is prepended to every line; empty = forward bytes unchanged.
    pub fn new(prefix: Vec<u8>) -> LineTagger {
        LineTagger {
            prefix,
            pending: Vec::new(),
            mid_line: false,
        }
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
            if self.prefix.is_empty() {
                out.extend_from_slice(&complete);
            } else {
                for line in complete.split_inclusive(|&b| b == b'\n') {
                    if !self.mid_line {
                        out.extend_from_slice(&self.prefix);
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
        if self.mid_line && !self.prefix.is_empty() {
            out.push(b'\n');
        }
        self.mid_line = false;
    }

    fn emit_partial(&mut self, out: &mut Vec<u8>) {
        if !self.mid_line {
            out.extend_from_slice(&self.prefix);
        }
        out.append(&mut self.pending);
        self.mid_line = true;
    }
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

//! Harness for tests that start real node servers on this host: finds the binaries
//! cargo built (`cohort`, `cohortd`, examples) next to the running test executable,
//! runs `cohort` with a deadline — killing the process group it runs in when the
//! deadline passes, so a test never hangs — and looks at processes through `/proc`.
//!
//! The suite expects `cargo build --workspace --bins --examples` to have run; when a
//! binary is missing it is built once on demand.

use std::ffi::OsStr;
use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::mpsc;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// A generous per-job deadline: reached only when something hangs.
pub const DEADLINE: Duration = Duration::from_secs(60);

/// `target/<profile>/` of the running test executable (it lives in `…/deps/`).
pub fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test executable has a path");
    let mut dir = exe
        .parent()
        .expect("executable has a directory")
        .to_path_buf();
    if dir.file_name() == Some(OsStr::new("deps")) {
        dir.pop();
    }
    dir
}

/// A workspace binary (`cohort`, `cohortd`, …), built on demand if missing.
pub fn bin(name: &str) -> PathBuf {
    let path = target_dir().join(name);
    if !path.exists() {
        build_once(&["--bins"]);
    }
    assert!(
        path.exists(),
        "{} is missing; run `cargo build --workspace --bins --examples` first",
        path.display()
    );
    path
}

/// A workspace example binary, built on demand if missing.
pub fn example(name: &str) -> PathBuf {
    let path = target_dir().join("examples").join(name);
    if !path.exists() {
        build_once(&["--examples"]);
    }
    assert!(
        path.exists(),
        "{} is missing; run `cargo build --workspace --bins --examples` first",
        path.display()
    );
    path
}

pub fn cohort_bin() -> PathBuf {
    bin("cohort")
}

pub fn cohortd_bin() -> PathBuf {
    bin("cohortd")
}

/// Runs `cargo build --workspace <what>` into our target dir, once per test process.
fn build_once(what: &[&str]) {
    static BINS: OnceLock<()> = OnceLock::new();
    static EXAMPLES: OnceLock<()> = OnceLock::new();
    let once = if what.contains(&"--examples") {
        &EXAMPLES
    } else {
        &BINS
    };
    once.get_or_init(|| {
        let target = target_dir();
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let mut cmd = Command::new(cargo);
        cmd.args(["build", "--workspace"]).args(what);
        if target.file_name() == Some(OsStr::new("release")) {
            cmd.arg("--release");
        }
        if let Some(root) = target.parent() {
            cmd.env("CARGO_TARGET_DIR", root);
        }
        cmd.current_dir(env!("CARGO_MANIFEST_DIR"));
        let _ = cmd.status();
    });
}

/// A `cohort` command ready to spawn: `COHORT_DAEMON` points at the `cohortd` built
/// alongside, and stdio is captured.
pub fn cohort_command<I, S>(args: I) -> Command
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let mut cmd = Command::new(cohort_bin());
    cmd.args(args)
        .env("COHORT_DAEMON", cohortd_bin())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

/// Runs `cohort ARGS…` to completion; see [`CohortRun::wait`].
pub fn run_cohort<I, S>(args: I, deadline: Duration) -> Output
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    CohortRun::spawn(cohort_command(args)).wait(deadline)
}

/// A running `cohort`, in a process group of its own that the test created (so the
/// test can kill it, and only it, on a deadline).
pub struct CohortRun {
    child: Option<Child>,
    stdout: mpsc::Receiver<Vec<u8>>,
    stderr: mpsc::Receiver<Vec<u8>>,
}

impl CohortRun {
    pub fn spawn(mut cmd: Command) -> CohortRun {
        cmd.process_group(0);
        let mut child = cmd.spawn().expect("cannot spawn cohort");
        let stdout = drain(child.stdout.take());
        let stderr = drain(child.stderr.take());
        CohortRun {
            child: Some(child),
            stdout,
            stderr,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().map(|c| c.id()).unwrap_or(0)
    }

    /// Sends `signal` to the launcher process (not its group).
    pub fn signal(&self, signal: i32) {
        // SAFETY: kill(2) on the pid of our own, not yet reaped, child.
        unsafe {
            libc::kill(self.pid() as libc::pid_t, signal);
        }
    }

    /// Waits for `cohort` to exit and its output to close. Past `deadline` the process
    /// group is SIGKILLed and the test fails, showing what was captured.
    pub fn wait(mut self, deadline: Duration) -> Output {
        let end = Instant::now() + deadline;
        let status = self.wait_status(end);
        let Some(status) = status else {
            self.kill();
            let out = self.collect(Instant::now() + Duration::from_secs(5));
            panic!(
                "cohort did not finish within {deadline:?}; killed it.\n--- stdout:\n{}\n--- stderr:\n{}",
                String::from_utf8_lossy(&out.0),
                String::from_utf8_lossy(&out.1)
            );
        };
        let (stdout, stderr, complete) = self.collect(end);
        assert!(
            complete,
            "cohort exited ({status}) but its output stayed open until the deadline: \
             something it started survived.\n--- stderr:\n{}",
            String::from_utf8_lossy(&stderr)
        );
        Output {
            status,
            stdout,
            stderr,
        }
    }

    fn wait_status(&mut self, end: Instant) -> Option<ExitStatus> {
        let child = self.child.as_mut()?;
        loop {
            if let Ok(Some(st)) = child.try_wait() {
                self.child = None;
                return Some(st);
            }
            if Instant::now() >= end {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn collect(&mut self, end: Instant) -> (Vec<u8>, Vec<u8>, bool) {
        let left = || end.saturating_duration_since(Instant::now());
        let out = self.stdout.recv_timeout(left());
        let err = self.stderr.recv_timeout(left());
        let complete = out.is_ok() && err.is_ok();
        (out.unwrap_or_default(), err.unwrap_or_default(), complete)
    }

    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            // SAFETY: the group was created by us for this child (process_group(0)).
            unsafe {
                libc::kill(-(child.id() as libc::pid_t), libc::SIGKILL);
            }
            let _ = child.wait();
        }
    }
}

impl Drop for CohortRun {
    fn drop(&mut self) {
        self.kill();
    }
}

fn drain<R: Read + Send + 'static>(pipe: Option<R>) -> mpsc::Receiver<Vec<u8>> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut buf = Vec::new();
        if let Some(mut p) = pipe {
            let _ = p.read_to_end(&mut buf);
        }
        let _ = tx.send(buf);
    });
    rx
}

/// Lossy text of captured output.
pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// `true` while `pid` exists and is not a zombie.
pub fn is_alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat_field(&stat, 0).is_some_and(|state| state != "Z" && state != "X"),
        Err(_) => false,
    }
}

/// Parent pid of `pid`.
pub fn parent_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat_field(&stat, 1)?.parse().ok()
}

/// Field `i` after the command name of a `/proc/<pid>/stat` line (0 = state).
fn stat_field(stat: &str, i: usize) -> Option<&str> {
    stat.rsplit_once(')')?.1.split_ascii_whitespace().nth(i)
}

/// Live children of `pid`.
pub fn children_of(pid: u32) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&p| parent_of(p) == Some(pid) && is_alive(p))
        .collect()
}

/// Every live descendant of `pid`.
pub fn descendants_of(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    let mut todo = vec![pid];
    while let Some(p) = todo.pop() {
        for c in children_of(p) {
            out.push(c);
            todo.push(c);
        }
    }
    out
}

/// `/proc/<pid>/cmdline` (NUL-separated arguments).
pub fn cmdline(pid: u32) -> Option<Vec<u8>> {
    std::fs::read(format!("/proc/{pid}/cmdline")).ok()
}

/// The value of `var` in the environment `pid` was started with.
pub fn initial_env_var(pid: u32, var: &str) -> Option<String> {
    let environ = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    let prefix = format!("{var}=");
    environ
        .split(|&b| b == 0)
        .find_map(|kv| kv.strip_prefix(prefix.as_bytes()))
        .map(|v| String::from_utf8_lossy(v).into_owned())
}

/// Polls `cond` every 20 ms until it holds or `deadline` passes.
pub fn wait_until(deadline: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + deadline;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= end {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits (bounded) for every pid to be gone; returns the survivors.
pub fn survivors(pids: &[u32], deadline: Duration) -> Vec<u32> {
    wait_until(deadline, || pids.iter().all(|&p| !is_alive(p)));
    pids.iter().copied().filter(|&p| is_alive(p)).collect()
}

/// A scratch directory removed on drop.
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        static SEQ: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!(
            "cohort-cluster-test-{tag}-{}-{n}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("cannot create a scratch directory");
        TempDir(dir)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }

    /// Names of the entries in the directory.
    pub fn entries(&self) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(&self.0)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Pids a rank script recorded with `echo $$ $PPID > $DIR/pid.$COHORT_RANK`:
/// `(rank pid, node server pid)` per rank, in rank order.
pub fn recorded_pids(dir: &Path, ranks: u32) -> Vec<(u32, u32)> {
    (0..ranks)
        .map(|r| {
            let path = dir.join(format!("pid.{r}"));
            let s = std::fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            let mut it = s.split_whitespace().map(|w| w.parse::<u32>().unwrap());
            (it.next().unwrap(), it.next().unwrap())
        })
        .collect()
}

/// Waits until every rank has recorded its pids (see [`recorded_pids`]).
pub fn wait_for_pid_files(dir: &Path, ranks: u32, deadline: Duration) -> bool {
    wait_until(deadline, || {
        (0..ranks).all(|r| {
            std::fs::read_to_string(dir.join(format!("pid.{r}")))
                .is_ok_and(|s| s.split_whitespace().count() == 2)
        })
    })
}

/// A finished command's status and output, for an assertion's message.
pub fn describe(out: &Output) -> String {
    format!(
        "status {:?}\n--- stdout:\n{}\n--- stderr:\n{}",
        out.status,
        text(&out.stdout),
        text(&out.stderr)
    )
}

/// The outcome of one `cohort run` of a rank program (`testprog`, `connectprog`).
pub struct Job {
    pub status: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl Job {
    /// The lines the ranks printed that contain `prefix`, from after it, in output
    /// order.
    pub fn lines(&self, prefix: &str) -> Vec<String> {
        self.stdout
            .lines()
            .filter_map(|l| l.split_once(prefix).map(|(_, r)| r.to_string()))
            .collect()
    }

    /// The `RESULT …` lines the ranks printed (without the prefix).
    pub fn results(&self) -> Vec<String> {
        self.lines("RESULT ")
    }

    /// Requires that the job (`what`, for the messages) succeeded and its ranks
    /// printed `expect` RESULT lines; returns them.
    pub fn succeeded_with(&self, what: &str, expect: usize) -> Vec<String> {
        assert_eq!(
            self.status,
            Some(0),
            "{what} failed\nstdout:\n{}\nstderr:\n{}",
            self.stdout,
            self.stderr
        );
        let r = self.results();
        assert_eq!(r.len(), expect, "{what}: {r:?}\nstderr:\n{}", self.stderr);
        r
    }
}

/// Runs `testprog <scenario>` with `n` ranks on `nodes` node servers (with
/// `--enable-recovery` when `recovery`), bounded by [`DEADLINE`].
pub fn run_testprog(nodes: u32, n: u32, scenario: &str, recovery: bool) -> Job {
    run_testprog_with(nodes, n, scenario, recovery, &[])
}

/// As [`run_testprog`], with extra `cohort run` options before the program.
pub fn run_testprog_with(
    nodes: u32,
    n: u32,
    scenario: &str,
    recovery: bool,
    options: &[&str],
) -> Job {
    run_example("testprog", nodes, n, scenario, recovery, options)
}

/// As [`run_testprog_with`], for the example rank program `program`.
pub fn run_example(
    program: &str,
    nodes: u32,
    n: u32,
    scenario: &str,
    recovery: bool,
    options: &[&str],
) -> Job {
    let prog = example(program).to_string_lossy().into_owned();
    let (nodes, n) = (nodes.to_string(), n.to_string());
    let mut args: Vec<&str> = vec!["run", "--nodes", &nodes, "-n", &n];
    if recovery {
        args.push("--enable-recovery");
    }
    args.extend_from_slice(options);
    args.push(&prog);
    args.push(scenario);
    let out = run_cohort(&args, DEADLINE);
    Job {
        status: out.status.code(),
        stdout: text(&out.stdout),
        stderr: text(&out.stderr),
    }
}

/// The warning and error lines the node servers' log (tracing: cohort_server,
/// cohort_core, cohort_transport) put on `stderr`. A loss the launcher reports to the
/// user must not also come out of every node server that saw it (one loss, one
/// report: at 64 node servers it was 315 lines).
pub fn server_warnings(stderr: &str) -> Vec<&str> {
    stderr
        .lines()
        .filter(|l| l.contains("ERROR") || l.contains("WARN"))
        .filter(|l| {
            ["cohort_server", "cohort_core", "cohort_transport"]
                .iter()
                .any(|m| l.contains(m))
        })
        .collect()
}

/// Runs testprog `scenario` on `servers` node servers (one rank each,
/// `--enable-recovery`, and `options`) with both gathering algorithms; see
/// [`survivors_agree_by`].
pub fn survivors_agree(servers: u32, scenario: &str, options: &[&str]) -> Vec<(&'static str, Job)> {
    survivors_agree_by(servers, 1, |allgather| {
        let mut all = vec!["--allgather", allgather];
        all.extend_from_slice(options);
        run_testprog_with(servers, servers, scenario, true, &all)
    })
}

/// A job of one rank per node server in which `lost` ranks' servers are lost: `run`
/// runs it with the given `--allgather` algorithm, for both. Every survivor reports the
/// same result, and the job ends with a lost rank's status (killed with its server).
pub fn survivors_agree_by(
    servers: u32,
    lost: u32,
    run: impl Fn(&'static str) -> Job,
) -> Vec<(&'static str, Job)> {
    ["tree", "dissemination"]
        .into_iter()
        .map(|allgather| {
            let job = run(allgather);
            let r = job.results();
            assert_eq!(
                r.len(),
                (servers - lost) as usize,
                "{allgather}: every survivor reports\nstdout:\n{}\nstderr:\n{}",
                job.stdout,
                job.stderr
            );
            assert!(
                r.windows(2).all(|w| w[0] == w[1]),
                "{allgather}: survivors disagree: {r:?}"
            );
            assert_eq!(
                job.status,
                Some(137),
                "{allgather}: the lost rank was killed:\n{}",
                job.stderr
            );
            (allgather, job)
        })
        .collect()
}

/// Says a tool the test needs is missing: a failure under `CI=true` (where `make
/// setup` has installed it), else a skip, loudly (returns `false`).
pub fn tool_missing(what: &str) -> bool {
    let ci = std::env::var("CI").is_ok_and(|v| v == "true");
    assert!(
        !ci,
        "{what} is missing (CI=true): `make setup` installs it (scripts/setup.sh)"
    );
    eprintln!("SKIPPED: {what} is missing; `make setup` installs it");
    false
}

/// The directory holding OpenPMIx's `pmix.h` (libpmix-dev), if there is one.
pub fn pmix_include() -> Option<PathBuf> {
    let from_pkg_config = Command::new("pkg-config")
        .args(["--cflags-only-I", "pmix"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| {
            text(&o.stdout)
                .split_whitespace()
                .filter_map(|f| f.strip_prefix("-I"))
                .map(PathBuf::from)
                .find(|d| d.join("pmix.h").exists())
        });
    from_pkg_config.or_else(|| {
        ["/usr/lib/x86_64-linux-gnu/pmix2/include", "/usr/include"]
            .iter()
            .map(PathBuf::from)
            .find(|d| d.join("pmix.h").exists())
    })
}

//! `cohort run` over ssh (or another remote shell, as Open MPI's rsh launcher): the
//! hosts (`--host`, `--hostfile`), how many ranks each gets (slots), the launch agent's
//! command line, and the one shell command that starts `cohortd --ssh` on a host.
//!
//! Everything here is a plain function of what it is given, tested without ssh; the
//! launcher (`launch.rs`) runs the agent.

use std::ffi::{OsStr, OsString};
use std::net::IpAddr;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

use crate::slurm::{self, Allocation, LauncherKind};

/// Environment variable giving the launch agent when `--launch-agent` is not given.
pub const AGENT_ENV: &str = "COHORT_LAUNCH_AGENT";
/// Environment variable giving `--prefix` when it is not given.
pub const PREFIX_ENV: &str = "COHORT_PREFIX";
/// The launch agent by default.
pub const DEFAULT_AGENT: &str = "ssh";
/// Seconds real ssh gets to connect (`-o ConnectTimeout`).
pub const CONNECT_TIMEOUT_SECS: u32 = 10;

/// One host of `--host` / `--hostfile`: where a node server runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Host {
    /// The login name of `user@host`, if given.
    pub user: Option<String>,
    /// The host as given (name or IP address): the node server's node name.
    pub name: String,
    /// The most ranks it takes (`slots=N`, `host:N`); `None`: no cap.
    pub slots: Option<u32>,
}

impl Host {
    /// What the agent is given: `user@host` or `host`.
    pub fn destination(&self) -> String {
        match &self.user {
            Some(u) => format!("{u}@{}", self.name),
            None => self.name.clone(),
        }
    }
}

/// Why a host entry is refused (a `--host` item or a hostfile line).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HostError {
    #[error("empty host name")]
    EmptyName,
    #[error("{0:?} is not a host name or IP address")]
    BadName(String),
    #[error("empty user name in {0:?}")]
    EmptyUser(String),
    #[error("slots {0:?} is not a whole number of at least 1")]
    BadSlots(String),
    #[error("unknown attribute {0:?} (a line is `NAME [slots=N] [max_slots=N]`)")]
    UnknownAttribute(String),
    #[error("{0} given twice")]
    GivenTwice(&'static str),
    #[error("host {name} is given as {first} and as {second}")]
    UserConflict {
        name: String,
        first: String,
        second: String,
    },
    #[error("no host")]
    NoHost,
}

/// A hostfile that cannot be used, with the line (counted from 1) at fault.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("hostfile {path}:{line}: {error}")]
pub struct HostfileError {
    pub path: String,
    /// 0 when the file as a whole is at fault (unreadable, no host).
    pub line: usize,
    pub error: HostError,
}

/// `[user@]host`, checked: a name of letters, digits, `-`, `.` and `_`, or an IP
/// address (IPv6 possibly in brackets, which are dropped).
fn parse_destination(word: &str) -> Result<(Option<String>, String), HostError> {
    let (user, host) = match word.rsplit_once('@') {
        Some(("", _)) => return Err(HostError::EmptyUser(word.into())),
        Some((u, h)) => (Some(u.to_string()), h),
        None => (None, word),
    };
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    if host.is_empty() {
        return Err(HostError::EmptyName);
    }
    let name_ok = host
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_'))
        && !host.starts_with('-');
    if !name_ok && host.parse::<IpAddr>().is_err() {
        return Err(HostError::BadName(host.into()));
    }
    if let Some(u) = &user {
        let user_ok = u
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_'))
            && !u.starts_with('-');
        if !user_ok {
            return Err(HostError::BadName(word.into()));
        }
    }
    Ok((user, host.to_string()))
}

fn parse_slots(v: &str) -> Result<u32, HostError> {
    v.parse::<u32>()
        .ok()
        .filter(|&n| n >= 1)
        .ok_or_else(|| HostError::BadSlots(v.into()))
}

/// `--host` items (each option's value split at commas): `[user@]host[:N]`, `N`
/// slots. An IPv6 address takes slots only in brackets (`[fe80::1]:4`).
pub fn parse_host_list<S: AsRef<str>>(items: &[S]) -> Result<Vec<Host>, String> {
    let mut hosts = Vec::new();
    for item in items.iter().flat_map(|s| s.as_ref().split(',')) {
        let item = item.trim();
        let parsed = (|| {
            let (dest, slots) = match item.rsplit_once(':') {
                // A bare IPv6 address has colons but no slots.
                Some((d, n)) if !d.contains(':') || d.ends_with(']') => (d, Some(parse_slots(n)?)),
                _ => (item, None),
            };
            let (user, name) = parse_destination(dest)?;
            Ok::<_, HostError>(Host { user, name, slots })
        })();
        hosts.push(parsed.map_err(|e| format!("--host {item:?}: {e}"))?);
    }
    merge_hosts(hosts).map_err(|e| format!("--host: {e}"))
}

/// An Open MPI hostfile's text: one host per line, `[user@]NAME [slots=N]
/// [max_slots=N]`; `#` starts a comment; blank lines are skipped. Both counts cap the
/// host's ranks (the smaller one when both are given: cohort never oversubscribes a
/// host past its slots). `path` names the file in errors.
pub fn parse_hostfile(path: &str, text: &str) -> Result<Vec<Host>, HostfileError> {
    let err = |line, error| HostfileError {
        path: path.to_string(),
        line,
        error,
    };
    let mut hosts = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.split('#').next().unwrap_or("");
        let mut words = line.split_whitespace();
        let Some(first) = words.next() else { continue };
        let (user, name) = parse_destination(first).map_err(|e| err(i + 1, e))?;
        let (mut slots, mut max_slots) = (None, None);
        for word in words {
            let (key, v, slot) = match word.split_once('=') {
                Some(("slots", v)) => ("slots", v, &mut slots),
                Some(("max_slots", v)) => ("max_slots", v, &mut max_slots),
                _ => return Err(err(i + 1, HostError::UnknownAttribute(word.into()))),
            };
            if slot.is_some() {
                return Err(err(i + 1, HostError::GivenTwice(key)));
            }
            *slot = Some(parse_slots(v).map_err(|e| err(i + 1, e))?);
        }
        let slots = match (slots, max_slots) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        hosts.push((i + 1, Host { user, name, slots }));
    }
    if hosts.is_empty() {
        return Err(err(0, HostError::NoHost));
    }
    // A conflict is reported at the line that causes it.
    let mut merged: Vec<Host> = Vec::new();
    for (line, h) in hosts {
        merged.push(h);
        merged = merge_hosts(merged).map_err(|e| err(line, e))?;
    }
    Ok(merged)
}

/// Reads and parses a hostfile.
pub fn read_hostfile(path: &Path) -> Result<Vec<Host>, String> {
    let text =
        std::fs::read_to_string(path).map_err(|e| format!("--hostfile {}: {e}", path.display()))?;
    parse_hostfile(&path.display().to_string(), &text).map_err(|e| e.to_string())
}

/// One entry per host, in order of first appearance: a host given twice is one node
/// server, its slots added up (uncapped if either entry is).
pub fn merge_hosts(hosts: Vec<Host>) -> Result<Vec<Host>, HostError> {
    let mut out: Vec<Host> = Vec::with_capacity(hosts.len());
    for h in hosts {
        match out.iter_mut().find(|o| o.name == h.name) {
            None => out.push(h),
            Some(o) => {
                if o.user != h.user {
                    return Err(HostError::UserConflict {
                        name: h.name.clone(),
                        first: o.destination(),
                        second: h.destination(),
                    });
                }
                o.slots = match (o.slots, h.slots) {
                    (Some(a), Some(b)) => Some(a.saturating_add(b)),
                    _ => None,
                };
            }
        }
    }
    if out.is_empty() {
        return Err(HostError::NoHost);
    }
    Ok(out)
}

/// The hosts of `--host` and `--hostfile` (both may be given: the file's first), the
/// first `nodes` of them when `--nodes` says (at most as many as there are).
pub fn hosts(
    host: &[String],
    hostfile: Option<&Path>,
    nodes: Option<u32>,
) -> Result<Vec<Host>, String> {
    let mut all = match hostfile {
        Some(p) => read_hostfile(p)?,
        None => Vec::new(),
    };
    if !host.is_empty() {
        all.extend(parse_host_list(host)?);
    }
    let mut all = merge_hosts(all).map_err(|e| format!("--host/--hostfile: {e}"))?;
    if let Some(m) = nodes {
        if m as usize > all.len() {
            return Err(format!(
                "--nodes {m}: --host/--hostfile name only {} host(s) (one node server per \
                 host); name more hosts, or give --nodes {} or less",
                all.len(),
                all.len()
            ));
        }
        all.truncate(m as usize);
    }
    Ok(all)
}

/// How many ranks each host gets: `None` when no host has a slot count (the ranks are
/// then split as on local node servers: `--map-by` alone decides). Otherwise slots
/// cap: the ranks are split as evenly as the caps allow (the first hosts take one more
/// where it does not divide), hosts without a count taking what is left evenly. When
/// every host is capped and they hold fewer than `np`: an error, or with
/// `oversubscribe` (mpirun's `--oversubscribe`) every host's slots filled and the
/// ranks left over spread evenly on top (the first hosts take one more).
pub fn rank_counts(
    np: u32,
    hosts: &[Host],
    oversubscribe: bool,
) -> Result<Option<Vec<u32>>, String> {
    if hosts.iter().all(|h| h.slots.is_none()) {
        return Ok(None);
    }
    let total: u64 = hosts
        .iter()
        .map(|h| h.slots.map_or(u64::MAX, u64::from))
        .fold(0, u64::saturating_add);
    if total < u64::from(np) && oversubscribe {
        let over = np - total as u32;
        let n = hosts.len() as u32;
        return Ok(Some(
            hosts
                .iter()
                .enumerate()
                .map(|(i, h)| {
                    let extra = over / n + u32::from((i as u32) < over % n);
                    h.slots.unwrap_or(0) + extra
                })
                .collect(),
        ));
    }
    if total < u64::from(np) {
        return Err(format!(
            "{np} ranks, but the hosts have only {total} slot(s) ({}); give fewer ranks, \
             more hosts or more slots, or --oversubscribe",
            hosts
                .iter()
                .map(|h| format!("{} slots={}", h.name, h.slots.unwrap_or(0)))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    // Water-filling: every host with room gets an even share of what is left, hosts
    // whose cap is below their share are filled and leave the rest to the others.
    let mut counts = vec![0u32; hosts.len()];
    let mut left = np;
    loop {
        let open: Vec<usize> = (0..hosts.len())
            .filter(|&i| hosts[i].slots.is_none_or(|s| counts[i] < s))
            .collect();
        if left == 0 || open.is_empty() {
            break;
        }
        let share = left / open.len() as u32;
        if share == 0 {
            // Fewer ranks than open hosts: one each to the first ones.
            for &i in open.iter().take(left as usize) {
                counts[i] += 1;
            }
            break;
        }
        for &i in &open {
            let room = hosts[i].slots.map_or(u32::MAX, |s| s - counts[i]);
            let give = share.min(room);
            counts[i] += give;
            left -= give;
        }
    }
    // Water-filling hands out the remainder from the first hosts: the same order an
    // even block split (`JobMap::block`) uses.
    Ok(Some(counts))
}

/// Splits the launch agent's text into words, as a shell would for plain words and
/// quotes: whitespace separates, '…' and "…" quote, \ escapes one character.
pub fn split_words(text: &str) -> Result<Vec<String>, String> {
    let mut words = Vec::new();
    let mut word: Option<String> = None;
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match c {
            c if c.is_whitespace() => {
                if let Some(w) = word.take() {
                    words.push(w);
                }
            }
            '\'' => {
                let w = word.get_or_insert_with(String::new);
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(c) => w.push(c),
                        None => return Err(format!("unterminated ' in {text:?}")),
                    }
                }
            }
            '"' => {
                let w = word.get_or_insert_with(String::new);
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some(c) => w.push(c),
                            None => return Err(format!("unterminated \" in {text:?}")),
                        },
                        Some(c) => w.push(c),
                        None => return Err(format!("unterminated \" in {text:?}")),
                    }
                }
            }
            '\\' => match chars.next() {
                Some(c) => word.get_or_insert_with(String::new).push(c),
                None => return Err(format!("trailing \\ in {text:?}")),
            },
            c => word.get_or_insert_with(String::new).push(c),
        }
    }
    words.extend(word);
    if words.is_empty() {
        return Err("the launch agent is empty".into());
    }
    Ok(words)
}

/// The launch agent's words: `--launch-agent`, else `$COHORT_LAUNCH_AGENT`, else ssh.
pub fn agent_words(given: Option<&str>, env: Option<&str>) -> Result<Vec<String>, String> {
    let (text, from) = match (given, env.filter(|e| !e.trim().is_empty())) {
        (Some(g), _) => (g, "--launch-agent"),
        (None, Some(e)) => (e, AGENT_ENV),
        (None, None) => (DEFAULT_AGENT, "the default"),
    };
    split_words(text).map_err(|e| format!("{from}: {e}"))
}

/// Whether the agent's program is OpenSSH's client (`ssh`, by any path).
pub fn is_ssh(words: &[String]) -> bool {
    words
        .first()
        .and_then(|p| Path::new(p).file_name())
        .is_some_and(|n| n == "ssh")
}

/// The agent's command line for `host`, before the remote command: the agent's words,
/// then — for real ssh only; another agent (rsh, a wrapper script) may not know them —
/// options that keep it from ever waiting for a person or a dead host: no password or
/// host-key prompts (`BatchMode=yes`), a connect timeout, no X11 forwarding (`-x`),
/// no terminal (`-T`); then `[user@]host`.
pub fn agent_args(words: &[String], host: &Host) -> Vec<OsString> {
    let mut args: Vec<OsString> = words.iter().map(OsString::from).collect();
    if is_ssh(words) {
        args.extend(
            [
                "-o".to_string(),
                "BatchMode=yes".to_string(),
                "-o".to_string(),
                format!("ConnectTimeout={CONNECT_TIMEOUT_SECS}"),
                "-x".to_string(),
                "-T".to_string(),
            ]
            .map(OsString::from),
        );
    }
    args.push(host.destination().into());
    args
}

/// `word` quoted for a POSIX shell: as it is when it has only safe characters, else in
/// single quotes (a `'` in it as `'\''`).
pub fn shell_quote(word: &OsStr) -> OsString {
    let bytes = word.as_bytes();
    let safe = !bytes.is_empty()
        && bytes.iter().all(|&b| {
            b.is_ascii_alphanumeric()
                || matches!(
                    b,
                    b'-' | b'_' | b'.' | b'/' | b':' | b',' | b'=' | b'+' | b'@' | b'%'
                )
        });
    if safe {
        return word.to_owned();
    }
    let mut out = Vec::with_capacity(bytes.len() + 2);
    out.push(b'\'');
    for &b in bytes {
        if b == b'\'' {
            out.extend_from_slice(b"'\\''");
        } else {
            out.push(b);
        }
    }
    out.push(b'\'');
    OsString::from_vec(out)
}

/// The one shell command the agent runs on a host: into `cwd` if it exists there
/// (as mpirun does; else the login directory), then `exec` of `VAR=VAL …` (not
/// secrets: log filters) and `cohortd ARGS`, every word quoted.
pub fn remote_command(
    cohortd: &Path,
    cwd: Option<&Path>,
    env: &[(String, OsString)],
    args: &[OsString],
) -> OsString {
    let mut cmd = OsString::new();
    if let Some(dir) = cwd {
        cmd.push("cd ");
        cmd.push(shell_quote(dir.as_os_str()));
        cmd.push(" 2>/dev/null; ");
    }
    cmd.push("exec");
    if !env.is_empty() {
        cmd.push(" env");
        for (k, v) in env {
            let mut kv = OsString::from(format!("{k}="));
            kv.push(v);
            cmd.push(" ");
            cmd.push(shell_quote(&kv));
        }
    }
    cmd.push(" ");
    cmd.push(shell_quote(cohortd.as_os_str()));
    for a in args {
        cmd.push(" ");
        cmd.push(shell_quote(a));
    }
    cmd
}

/// The variables of this environment the remote node servers get (over ssh they
/// start in the login environment, not this one): cohort's settings (`COHORT_*`: log
/// filter, fabric, tuning) and `RUST_LOG`, never a secret, nor what describes one rank
/// or only concerns this launcher.
pub fn forwarded_env(
    vars: impl IntoIterator<Item = (OsString, OsString)>,
) -> Vec<(String, OsString)> {
    use cohort_proto::env as e;
    let not_forwarded = [
        e::JOB_SECRET,
        e::CLIENT_TOKEN,
        e::SERVER_URI,
        e::NSPACE,
        e::RANK,
        e::SIZE,
        e::APPNUM,
        e::LOCAL_RANK,
        e::NODE_ID,
        e::NODE_NAME,
        e::BINDING,
        e::ALLGATHER,
        crate::daemon::DAEMON_ENV,
        AGENT_ENV,
        PREFIX_ENV,
        crate::launch::STARTUP_TIMEOUT_ENV,
    ];
    let mut out: Vec<(String, OsString)> = vars
        .into_iter()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v)))
        .filter(|(k, _)| {
            (k.starts_with("COHORT_") && !not_forwarded.contains(&k.as_str())) || k == "RUST_LOG"
        })
        .filter(|(k, _)| k.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'))
        .collect();
    out.sort();
    out
}

/// The hosts' install prefix: `--prefix`, else `$COHORT_PREFIX` (unless empty).
pub fn prefix(given: Option<&Path>, env_prefix: Option<&OsStr>) -> Option<PathBuf> {
    given
        .map(Path::to_path_buf)
        .or_else(|| env_prefix.filter(|p| !p.is_empty()).map(PathBuf::from))
}

/// The cohortd the hosts run: `PREFIX/bin/cohortd` with a [`prefix`], else the same
/// absolute path as this host's (a shared install, as mpirun assumes).
pub fn remote_cohortd(prefix: Option<&Path>, env_prefix: Option<&OsStr>, local: &Path) -> PathBuf {
    match self::prefix(prefix, env_prefix) {
        Some(p) => p.join("bin").join("cohortd"),
        None => std::path::absolute(local).unwrap_or_else(|_| local.to_path_buf()),
    }
}

/// Where the node servers run, as decided from `--launcher`, the hosts and the
/// environment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Launch {
    Local,
    Slurm(Allocation),
    Ssh,
}

/// `--launcher`'s decision. `auto`: inside a Slurm allocation (with srun), Slurm;
/// else over ssh when `--host`/`--hostfile` name hosts (as Open MPI then uses its rsh
/// launcher); else local. Hosts go with ssh only: with `local` they are refused, and
/// inside an allocation `auto` refuses them rather than silently ignoring them.
pub fn choose(
    kind: LauncherKind,
    hosts_given: bool,
    alloc: Option<Allocation>,
    srun: Option<&Path>,
) -> Result<Launch, String> {
    match kind {
        LauncherKind::Ssh if hosts_given => Ok(Launch::Ssh),
        LauncherKind::Ssh => Err("--launcher ssh: name the hosts with --host or --hostfile".into()),
        LauncherKind::Local | LauncherKind::Slurm if hosts_given => Err(format!(
            "--host/--hostfile name hosts to start node servers on over ssh; --launcher {} \
             does not use them (give --launcher ssh, or drop them)",
            if kind == LauncherKind::Local {
                "local"
            } else {
                "slurm"
            }
        )),
        LauncherKind::Auto if hosts_given => {
            if slurm::choose(LauncherKind::Auto, alloc, srun)?.is_some() {
                return Err(
                    "--host/--hostfile inside a Slurm allocation: the node servers \
                            run on the allocation's nodes (use salloc/sbatch to choose \
                            them), or give --launcher ssh to start them over ssh instead"
                        .into(),
                );
            }
            Ok(Launch::Ssh)
        }
        _ => Ok(match slurm::choose(kind, alloc, srun)? {
            Some(a) => Launch::Slurm(a),
            None => Launch::Local,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(name: &str, slots: Option<u32>) -> Host {
        Host {
            user: None,
            name: name.into(),
            slots,
        }
    }

    #[test]
    fn host_lists_take_users_slots_and_addresses() {
        let h = parse_host_list(&["h1,bob@h2:4", "10.0.0.3", "[fe80::1]:2,fe80::2"]).unwrap();
        assert_eq!(h[0], host("h1", None));
        assert_eq!(
            h[1],
            Host {
                user: Some("bob".into()),
                name: "h2".into(),
                slots: Some(4)
            }
        );
        assert_eq!(h[1].destination(), "bob@h2");
        assert_eq!(h[2], host("10.0.0.3", None));
        assert_eq!(h[3], host("fe80::1", Some(2)));
        assert_eq!(h[4], host("fe80::2", None));
        // Named twice: one node server, slots added up.
        let h = parse_host_list(&["a:2,b,a:3"]).unwrap();
        assert_eq!(h, [host("a", Some(5)), host("b", None)]);
        let e = |s: &str| parse_host_list(&[s]).unwrap_err();
        assert!(e("a,,b").contains("empty host name"), "{}", e("a,,b"));
        assert!(e("a:0").contains("slots \"0\""));
        assert!(e("a:x").contains("slots \"x\""));
        assert!(e("@a").contains("empty user"));
        assert!(e("a b").contains("not a host name"));
        assert!(e("-oProxyCommand=x").contains("not a host name"));
        assert!(e("-u@a").contains("not a host name"));
        assert!(e("u@a,v@a").contains("u@a and as v@a"));
    }

    #[test]
    fn hostfiles_are_open_mpi_format_with_line_numbered_errors() {
        let text = "# cluster\n\nn1 slots=2\nroot@n2   slots=4 # big\n  10.0.0.3\nn1 slots=1\n";
        let h = parse_hostfile("hf", text).unwrap();
        assert_eq!(h.len(), 3);
        assert_eq!(h[0], host("n1", Some(3)));
        assert_eq!((h[1].user.as_deref(), h[1].slots), (Some("root"), Some(4)));
        assert_eq!(h[2], host("10.0.0.3", None));
        let e = |t: &str| parse_hostfile("hf", t).unwrap_err();
        let bad = e("n1\nn2 slots=two\n");
        assert_eq!(
            (bad.line, &bad.error),
            (2, &HostError::BadSlots("two".into()))
        );
        assert_eq!(
            bad.to_string(),
            "hostfile hf:2: slots \"two\" is not a whole number of at least 1"
        );
        assert_eq!(
            e("n1 cpus=4").error,
            HostError::UnknownAttribute("cpus=4".into())
        );
        assert_eq!(
            e("n1 slots=1 slots=2").error,
            HostError::GivenTwice("slots")
        );
        assert_eq!(
            e("n1 max_slots=1 max_slots=2").error,
            HostError::GivenTwice("max_slots")
        );
        let caps = parse_hostfile(
            "hf",
            "a slots=4 max_slots=2\nb max_slots=3\nc slots=1 max_slots=5\n",
        );
        let caps: Vec<Option<u32>> = caps.unwrap().iter().map(|h| h.slots).collect();
        assert_eq!(caps, [Some(2), Some(3), Some(1)]);
        assert_eq!(e("\n\nn$1\n").line, 3);
        assert_eq!(e("# nothing\n\n").error, HostError::NoHost);
        assert_eq!(e("# nothing\n\n").line, 0);
        let c = e("a@n1\nb@n1\n");
        assert_eq!(c.line, 2);
        assert!(matches!(c.error, HostError::UserConflict { .. }));
    }

    #[test]
    fn nodes_pick_the_first_hosts() {
        let hs = vec!["a,b,c".to_string()];
        assert_eq!(hosts(&hs, None, Some(2)).unwrap().len(), 2);
        assert_eq!(hosts(&hs, None, None).unwrap().len(), 3);
        let e = hosts(&hs, None, Some(4)).unwrap_err();
        assert!(e.contains("--nodes 4") && e.contains("only 3 host"), "{e}");
    }

    #[test]
    fn slots_cap_an_even_split() {
        let hs = |slots: &[Option<u32>]| -> Vec<Host> {
            slots
                .iter()
                .enumerate()
                .map(|(i, &s)| host(&format!("h{i}"), s))
                .collect()
        };
        assert_eq!(rank_counts(6, &hs(&[None, None, None]), false), Ok(None));
        assert_eq!(
            rank_counts(6, &hs(&[Some(2), Some(2), Some(2)]), false),
            Ok(Some(vec![2, 2, 2]))
        );
        assert_eq!(
            rank_counts(4, &hs(&[Some(4), Some(4)]), false),
            Ok(Some(vec![2, 2]))
        );
        assert_eq!(
            rank_counts(6, &hs(&[Some(1), Some(4), Some(4)]), false),
            Ok(Some(vec![1, 3, 2]))
        );
        assert_eq!(
            rank_counts(5, &hs(&[Some(1), None, None]), false),
            Ok(Some(vec![1, 2, 2]))
        );
        assert_eq!(
            rank_counts(7, &hs(&[Some(1), Some(2), None]), false),
            Ok(Some(vec![1, 2, 4]))
        );
        assert_eq!(
            rank_counts(2, &hs(&[Some(3), Some(3), Some(3)]), false),
            Ok(Some(vec![1, 1, 0]))
        );
        assert_eq!(
            rank_counts(7, &hs(&[Some(3), Some(3), Some(3)]), false),
            Ok(Some(vec![3, 2, 2]))
        );
        let e = rank_counts(6, &hs(&[Some(1), Some(2), Some(2)]), false).unwrap_err();
        assert!(e.contains("6 ranks") && e.contains("only 5 slot"), "{e}");
        assert!(e.contains("--oversubscribe"), "{e}");
        // --oversubscribe: slots filled, the rest spread evenly on top.
        assert_eq!(
            rank_counts(6, &hs(&[Some(1), Some(2), Some(2)]), true),
            Ok(Some(vec![2, 2, 2]))
        );
        assert_eq!(
            rank_counts(9, &hs(&[Some(1), Some(1)]), true),
            Ok(Some(vec![5, 4]))
        );
        // within the slots it changes nothing
        assert_eq!(
            rank_counts(7, &hs(&[Some(3), Some(3), Some(3)]), true),
            Ok(Some(vec![3, 2, 2]))
        );
    }

    #[test]
    fn agent_text_splits_like_a_shell() {
        assert_eq!(
            split_words("ssh -F '/tmp/my cfg'").unwrap(),
            ["ssh", "-F", "/tmp/my cfg"]
        );
        assert_eq!(
            split_words(" a \"b \\\" c\"  d\\ e ").unwrap(),
            ["a", "b \" c", "d e"]
        );
        assert_eq!(split_words("x ''").unwrap(), ["x", ""]);
        assert!(split_words("ssh 'x").is_err());
        assert!(split_words("   ").is_err());
        assert_eq!(agent_words(None, None).unwrap(), ["ssh"]);
        assert_eq!(
            agent_words(None, Some("rsh -l u")).unwrap(),
            ["rsh", "-l", "u"]
        );
        assert_eq!(agent_words(None, Some(" ")).unwrap(), ["ssh"]);
        assert_eq!(
            agent_words(Some("ssh -p 2222"), Some("rsh")).unwrap(),
            ["ssh", "-p", "2222"]
        );
        assert!(agent_words(Some("'"), None)
            .unwrap_err()
            .contains("--launch-agent"));
    }

    #[test]
    fn only_real_ssh_gets_the_non_interactive_options() {
        let strs = |v: Vec<OsString>| -> Vec<String> {
            v.into_iter().map(|a| a.into_string().unwrap()).collect()
        };
        let h = Host {
            user: Some("u".into()),
            name: "n1".into(),
            slots: None,
        };
        let ssh = strs(agent_args(
            &["/usr/bin/ssh".into(), "-F".into(), "cfg".into()],
            &h,
        ));
        assert_eq!(
            ssh.join(" "),
            "/usr/bin/ssh -F cfg -o BatchMode=yes -o ConnectTimeout=10 -x -T u@n1"
        );
        let rsh = strs(agent_args(&["rsh".into()], &host("n1", None)));
        assert_eq!(rsh, ["rsh", "n1"]);
        assert!(!is_ssh(&["autossh".into()]));
        assert!(!is_ssh(&["/opt/ssh-wrapper".into()]));
    }

    #[test]
    fn remote_command_is_quoted_for_a_shell() {
        assert_eq!(
            shell_quote(OsStr::new("a/b-c_1.2:3,x=y")),
            "a/b-c_1.2:3,x=y"
        );
        assert_eq!(shell_quote(OsStr::new("")), "''");
        assert_eq!(shell_quote(OsStr::new("it's $HOME")), "'it'\\''s $HOME'");
        let cmd = remote_command(
            Path::new("/opt/c/bin/cohortd"),
            Some(Path::new("/home/me/run 1")),
            &[("COHORT_LOG".into(), "debug".into())],
            &[
                "--ssh".into(),
                "--".into(),
                "sh".into(),
                "-c".into(),
                "echo $X; a&b".into(),
            ],
        );
        assert_eq!(
            cmd,
            "cd '/home/me/run 1' 2>/dev/null; exec env COHORT_LOG=debug /opt/c/bin/cohortd \
             --ssh -- sh -c 'echo $X; a&b'"
        );
        assert_eq!(
            remote_command(Path::new("/c"), None, &[], &["x".into()]),
            "exec /c x"
        );
    }

    #[test]
    fn only_settings_are_forwarded() {
        let vars = [
            ("COHORT_LOG", "debug"),
            ("COHORT_JOB_SECRET", "00"),
            ("COHORT_TOKEN", "00"),
            ("COHORT_RANK", "3"),
            ("COHORT_FABRIC", "tcp"),
            ("COHORT_LAUNCH_AGENT", "rsh"),
            ("RUST_LOG", "info"),
            ("HOME", "/root"),
        ]
        .map(|(k, v)| (OsString::from(k), OsString::from(v)));
        let got: Vec<String> = forwarded_env(vars)
            .into_iter()
            .map(|(k, v)| format!("{k}={}", v.to_string_lossy()))
            .collect();
        assert_eq!(
            got,
            ["COHORT_FABRIC=tcp", "COHORT_LOG=debug", "RUST_LOG=info"]
        );
    }

    #[test]
    fn remote_cohortd_is_the_local_path_unless_a_prefix_says() {
        let local = Path::new("/opt/cohort/bin/cohortd");
        assert_eq!(remote_cohortd(None, None, local), local);
        assert_eq!(
            remote_cohortd(Some(Path::new("/sw/cohort")), Some(OsStr::new("/x")), local),
            Path::new("/sw/cohort/bin/cohortd")
        );
        assert_eq!(
            remote_cohortd(None, Some(OsStr::new("/x")), local),
            Path::new("/x/bin/cohortd")
        );
        assert_eq!(remote_cohortd(None, Some(OsStr::new("")), local), local);
    }

    #[test]
    fn launcher_choice_with_hosts() {
        use LauncherKind::*;
        let alloc = Allocation::from_env(|k| match k {
            "SLURM_JOB_ID" => Some("42".into()),
            "SLURM_JOB_NODELIST" => Some("n[1-3]".into()),
            _ => None,
        });
        let srun = Some(Path::new("/usr/bin/srun"));
        assert_eq!(choose(Auto, true, None, srun), Ok(Launch::Ssh));
        assert_eq!(choose(Auto, true, alloc.clone(), None), Ok(Launch::Ssh));
        assert!(choose(Auto, true, alloc.clone(), srun)
            .unwrap_err()
            .contains("inside a Slurm allocation"));
        assert_eq!(choose(Ssh, true, alloc.clone(), srun), Ok(Launch::Ssh));
        assert!(choose(Ssh, false, None, None)
            .unwrap_err()
            .contains("--host"));
        assert!(choose(Local, true, None, None)
            .unwrap_err()
            .contains("--launcher local"));
        assert!(choose(Slurm, true, alloc.clone(), srun).is_err());
        assert_eq!(choose(Auto, false, None, srun), Ok(Launch::Local));
        assert_eq!(
            choose(Auto, false, alloc.clone(), srun),
            Ok(Launch::Slurm(alloc.clone().unwrap()))
        );
        assert_eq!(choose(Local, false, alloc, srun), Ok(Launch::Local));
    }
}

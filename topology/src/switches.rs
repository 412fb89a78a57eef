//! The cluster's switch map, from a Slurm `topology.conf` in the format of the
//! `topology/tree` plugin:
//!
//! ```text
//! # leaf switches list nodes, upper switches list switches
//! SwitchName=s1  Nodes=node[0-3]
//! SwitchName=s2  Nodes=node[4-7]   LinkSpeed=100
//! SwitchName=top Switches=s[1-2]
//! ```
//!
//! Parameter names are case-insensitive, `#` starts a comment, values are Slurm
//! hostlist expressions ([`crate::hostlist`]). `LinkSpeed` is accepted and ignored.
//! The file may describe the whole cluster: nodes of a job that it does not list are
//! simply not placed on a switch ([`Locality::unknown`] names them so the caller can
//! warn). Malformed input is a [`ParseError`] carrying the 1-based line number; a node
//! listed under two switches keeps the first and yields a [`SwitchMap::warnings`] entry.
//!
//! [`Locality`] resolves a job's node names against the map once, so that collective
//! trees ([`crate::Tree::with_locality`]) are built without string lookups.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::path::{Path, PathBuf};

use crate::hostlist::{self, HostlistError};
use crate::NodeId;

/// Largest topology file read (a whole-cluster map is far smaller).
pub const MAX_FILE_BYTES: u64 = 64 << 20;

/// What is wrong with one line of a topology file.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ParseErrorKind {
    #[error("expected SwitchName=<name> first, found {found:?}")]
    MissingSwitchName { found: String },
    #[error("{token:?} is not a Key=Value pair")]
    NotAPair { token: String },
    #[error("unknown parameter {key:?} (expected SwitchName, Switches, Nodes or LinkSpeed)")]
    UnknownKey { key: String },
    #[error(
        "BlockName (the topology/block plugin's format) is not supported; \
         cohort reads the topology/tree format (SwitchName=…)"
    )]
    BlockFormat,
    #[error("{key} is given twice")]
    RepeatedKey { key: String },
    #[error("{key}= has no value")]
    EmptyValue { key: String },
    #[error("SwitchName must name exactly one switch, {expr:?} names {count}")]
    NotOneSwitch { expr: String, count: usize },
    #[error("switch {name:?} has neither Nodes= nor Switches=")]
    NoChildren { name: String },
    #[error("switch {name:?} is already defined on line {first_line}")]
    DuplicateSwitch { name: String, first_line: usize },
    #[error("switch {name:?} is listed under Switches= but never defined")]
    UndefinedSwitch { name: String },
    #[error("switch {name:?} is already a child of {parent:?} (line {first_line})")]
    TwoParents {
        name: String,
        parent: String,
        first_line: usize,
    },
    #[error("switch {name:?} is its own ancestor (a cycle through Switches=)")]
    Cycle { name: String },
    #[error("bad hostlist in {key}=: {source}")]
    Hostlist {
        key: String,
        #[source]
        source: HostlistError,
    },
}

/// A malformed topology file: where and what.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {kind}")]
pub struct ParseError {
    /// 1-based line number.
    pub line: usize,
    pub kind: ParseErrorKind,
}

/// A topology file that cannot be used; the message names the file (and the line).
#[derive(Debug, thiserror::Error)]
pub enum TopologyFileError {
    #[error("cannot read the topology file {}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("topology file {} is larger than {MAX_FILE_BYTES} bytes", path.display())]
    TooLarge { path: PathBuf },
    #[error("topology file {}:{}: {}", path.display(), error.line, error.kind)]
    Parse { path: PathBuf, error: ParseError },
}

impl TopologyFileError {
    /// The 1-based line of a parse error.
    pub fn line(&self) -> Option<usize> {
        match self {
            TopologyFileError::Parse { error, .. } => Some(error.line),
            _ => None,
        }
    }
}

/// Something suspicious but usable in a topology file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParseWarning {
    pub line: usize,
    pub message: String,
}

impl fmt::Display for ParseWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}: {}", self.line, self.message)
    }
}

/// Index of a switch in a [`SwitchMap`] (file order).
pub type SwitchId = u32;

#[derive(Clone, Debug, PartialEq, Eq)]
struct Switch {
    name: String,
    line: usize,
    parent: Option<SwitchId>,
    /// Child switches, in the order listed.
    switches: Vec<SwitchId>,
    /// Nodes attached directly, in the order listed (first listing wins).
    nodes: Vec<String>,
}

/// Which switch every node hangs off and how switches nest.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SwitchMap {
    switches: Vec<Switch>,
    by_name: HashMap<String, SwitchId>,
    /// Node name → the switch listing it.
    node_switch: HashMap<String, SwitchId>,
    warnings: Vec<ParseWarning>,
}

impl SwitchMap {
    /// Reads and parses `path`.
    pub fn from_file(path: &Path) -> Result<SwitchMap, TopologyFileError> {
        use std::io::Read as _;
        let io = |source| TopologyFileError::Io {
            path: path.to_path_buf(),
            source,
        };
        let file = std::fs::File::open(path).map_err(io)?;
        let mut text = String::new();
        file.take(MAX_FILE_BYTES + 1)
            .read_to_string(&mut text)
            .map_err(io)?;
        if text.len() as u64 > MAX_FILE_BYTES {
            return Err(TopologyFileError::TooLarge {
                path: path.to_path_buf(),
            });
        }
        SwitchMap::parse(&text).map_err(|error| TopologyFileError::Parse {
            path: path.to_path_buf(),
            error,
        })
    }

    /// Parses the text of a `topology.conf`.
    pub fn parse(text: &str) -> Result<SwitchMap, ParseError> {
        let mut map = SwitchMap::default();
        // Child switch names per switch, resolved once every switch is defined.
        let mut pending: Vec<(SwitchId, Vec<String>)> = Vec::new();
        for (i, raw) in text.lines().enumerate() {
            let line = i + 1;
            let err = |kind| ParseError { line, kind };
            let content = raw.split('#').next().unwrap_or("").trim();
            if content.is_empty() {
                continue;
            }
            let mut name: Option<String> = None;
            let mut nodes: Option<&str> = None;
            let mut children: Option<&str> = None;
            let mut link_speed = false;
            for (n, token) in content.split_ascii_whitespace().enumerate() {
                let Some((key, value)) = token.split_once('=') else {
                    return Err(err(if n == 0 {
                        ParseErrorKind::MissingSwitchName {
                            found: token.into(),
                        }
                    } else {
                        ParseErrorKind::NotAPair {
                            token: token.into(),
                        }
                    }));
                };
                let lower = key.to_ascii_lowercase();
                if n == 0 && lower != "switchname" {
                    return Err(err(if lower == "blockname" {
                        ParseErrorKind::BlockFormat
                    } else {
                        ParseErrorKind::MissingSwitchName {
                            found: token.into(),
                        }
                    }));
                }
                let canonical = match lower.as_str() {
                    "switchname" => "SwitchName",
                    "nodes" => "Nodes",
                    "switches" => "Switches",
                    "linkspeed" => "LinkSpeed",
                    "blockname" | "blocksizes" => return Err(err(ParseErrorKind::BlockFormat)),
                    _ => return Err(err(ParseErrorKind::UnknownKey { key: key.into() })),
                };
                if value.is_empty() {
                    return Err(err(ParseErrorKind::EmptyValue {
                        key: canonical.into(),
                    }));
                }
                let repeated = match canonical {
                    "SwitchName" => name.is_some(),
                    "Nodes" => nodes.replace(value).is_some(),
                    "Switches" => children.replace(value).is_some(),
                    _ => std::mem::replace(&mut link_speed, true),
                };
                if repeated {
                    return Err(err(ParseErrorKind::RepeatedKey {
                        key: canonical.into(),
                    }));
                }
                if canonical == "SwitchName" {
                    let names = expand(value, canonical).map_err(err)?;
                    if names.len() != 1 {
                        return Err(err(ParseErrorKind::NotOneSwitch {
                            expr: value.into(),
                            count: names.len(),
                        }));
                    }
                    name = names.into_iter().next();
                }
            }
            let name = name.expect("the first token is SwitchName");
            if nodes.is_none() && children.is_none() {
                return Err(err(ParseErrorKind::NoChildren { name }));
            }
            if let Some(&first) = map.by_name.get(&name) {
                return Err(err(ParseErrorKind::DuplicateSwitch {
                    first_line: map.switches[first as usize].line,
                    name,
                }));
            }
            let id = map.switches.len() as SwitchId;
            let mut sw = Switch {
                name: name.clone(),
                line,
                parent: None,
                switches: Vec::new(),
                nodes: Vec::new(),
            };
            if let Some(expr) = nodes {
                for node in expand(expr, "Nodes").map_err(err)? {
                    match map.node_switch.get(&node) {
                        Some(&other) => {
                            let other = &map.switches[other as usize];
                            map.warnings.push(ParseWarning {
                                line,
                                message: format!(
                                    "node {node} is already on switch {} (line {}); \
                                     keeping that one",
                                    other.name, other.line
                                ),
                            });
                        }
                        None => {
                            map.node_switch.insert(node.clone(), id);
                            sw.nodes.push(node);
                        }
                    }
                }
            }
            if let Some(expr) = children {
                pending.push((id, expand(expr, "Switches").map_err(err)?));
            }
            map.by_name.insert(name, id);
            map.switches.push(sw);
        }

        for (id, names) in pending {
            let line = map.switches[id as usize].line;
            let err = |kind| ParseError { line, kind };
            for child_name in names {
                let Some(&child) = map.by_name.get(&child_name) else {
                    return Err(err(ParseErrorKind::UndefinedSwitch { name: child_name }));
                };
                if let Some(parent) = map.switches[child as usize].parent {
                    let parent = &map.switches[parent as usize];
                    return Err(err(ParseErrorKind::TwoParents {
                        name: child_name,
                        parent: parent.name.clone(),
                        first_line: parent.line,
                    }));
                }
                map.switches[child as usize].parent = Some(id);
                map.switches[id as usize].switches.push(child);
            }
        }

        // Every chain of parents must end at a top switch.
        for start in 0..map.switches.len() {
            let mut at = start;
            for _ in 0..=map.switches.len() {
                match map.switches[at].parent {
                    Some(p) => at = p as usize,
                    None => break,
                }
            }
            if map.switches[at].parent.is_some() {
                let sw = &map.switches[start];
                return Err(ParseError {
                    line: sw.line,
                    kind: ParseErrorKind::Cycle {
                        name: sw.name.clone(),
                    },
                });
            }
        }
        Ok(map)
    }

    /// Number of switches.
    pub fn switch_count(&self) -> usize {
        self.switches.len()
    }

    /// Number of nodes placed on a switch.
    pub fn node_count(&self) -> usize {
        self.node_switch.len()
    }

    /// Switch names, in file order.
    pub fn switch_names(&self) -> impl Iterator<Item = &str> {
        self.switches.iter().map(|s| s.name.as_str())
    }

    /// Usable oddities found while parsing (with line numbers).
    pub fn warnings(&self) -> &[ParseWarning] {
        &self.warnings
    }

    /// The switch `node` is attached to.
    pub fn switch_of(&self, node: &str) -> Option<&str> {
        self.node_switch
            .get(node)
            .map(|&s| self.switches[s as usize].name.as_str())
    }

    /// The switch above `switch`, if any.
    pub fn parent_of(&self, switch: &str) -> Option<&str> {
        let &id = self.by_name.get(switch)?;
        self.switches[id as usize]
            .parent
            .map(|p| self.switches[p as usize].name.as_str())
    }

    /// The switches between `node` and the top: its own switch first. Empty when the
    /// map does not list `node`.
    pub fn path_of(&self, node: &str) -> Vec<&str> {
        self.path_ids(node)
            .iter()
            .rev()
            .map(|&s| self.switches[s as usize].name.as_str())
            .collect()
    }

    /// Nodes attached directly to `switch`, in the order listed.
    pub fn nodes_on(&self, switch: &str) -> &[String] {
        match self.by_name.get(switch) {
            Some(&id) => &self.switches[id as usize].nodes,
            None => &[],
        }
    }

    /// Switch ids from the top switch down to `node`'s own switch.
    fn path_ids(&self, node: &str) -> Vec<SwitchId> {
        let mut path = Vec::new();
        let mut at = self.node_switch.get(node).copied();
        while let Some(s) = at {
            path.push(s);
            at = self.switches[s as usize].parent;
        }
        path.reverse();
        path
    }

    fn name(&self, id: SwitchId) -> &str {
        &self.switches[id as usize].name
    }
}

/// Environment variable Slurm reads its configuration path from.
pub const SLURM_CONF_ENV: &str = "SLURM_CONF";

/// The switch map of a Slurm cluster: `topology.conf` in the directory of
/// `slurm_conf` (the value of `SLURM_CONF`), when that file exists.
pub fn slurm_topology_file(slurm_conf: Option<&std::ffi::OsStr>) -> Option<PathBuf> {
    let conf = Path::new(slurm_conf.filter(|c| !c.is_empty())?);
    let candidate = conf.parent()?.join("topology.conf");
    candidate.is_file().then_some(candidate)
}

fn expand(expr: &str, key: &str) -> Result<Vec<String>, ParseErrorKind> {
    hostlist::expand(expr).map_err(|source| ParseErrorKind::Hostlist {
        key: key.into(),
        source,
    })
}

/// A job's node servers placed on a [`SwitchMap`]: for node id `n` (index into the
/// job's node names), the switches from the top of the map down to `n`'s own switch.
/// Build it once per job; trees are then built from it without string lookups.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Locality {
    /// Per node id: switch ids top-down; empty = not on the map.
    paths: Vec<Vec<SwitchId>>,
    /// Names of the switches the job uses, by switch id.
    names: BTreeMap<SwitchId, String>,
}

impl Locality {
    /// Places `node_names` (index = node id) on `map`.
    pub fn new<S: AsRef<str>>(map: &SwitchMap, node_names: &[S]) -> Locality {
        let paths: Vec<Vec<SwitchId>> = node_names
            .iter()
            .map(|n| map.path_ids(n.as_ref()))
            .collect();
        let names = paths
            .iter()
            .flatten()
            .map(|&s| (s, map.name(s).to_string()))
            .collect();
        Locality { paths, names }
    }

    /// Places nodes by explicit switch paths (top-down switch ids; empty = unknown).
    /// For tests and simulations that need no file.
    pub fn from_paths(paths: Vec<Vec<SwitchId>>) -> Locality {
        let names = paths
            .iter()
            .flatten()
            .map(|&s| (s, format!("switch{s}")))
            .collect();
        Locality { paths, names }
    }

    /// Number of nodes described (placed or not).
    pub fn len(&self) -> usize {
        self.paths.len()
    }

    pub fn is_empty(&self) -> bool {
        self.paths.is_empty()
    }

    /// Switches from the top of the map down to `node`'s own switch (empty when the
    /// map does not list it).
    pub fn path(&self, node: NodeId) -> &[SwitchId] {
        self.paths.get(node as usize).map_or(&[], |p| p.as_slice())
    }

    /// The switch `node` is attached to.
    pub fn leaf_of(&self, node: NodeId) -> Option<SwitchId> {
        self.path(node).last().copied()
    }

    /// Name of a switch the job uses.
    pub fn switch_name(&self, id: SwitchId) -> Option<&str> {
        self.names.get(&id).map(String::as_str)
    }

    /// Nodes the map does not list (their trees ignore the switch map for them).
    pub fn unknown(&self) -> Vec<NodeId> {
        (0..self.paths.len() as NodeId)
            .filter(|&n| self.paths[n as usize].is_empty())
            .collect()
    }

    /// Distinct switches the job's nodes are attached to.
    pub fn leaf_switches(&self) -> usize {
        let mut leaves: Vec<SwitchId> = self
            .paths
            .iter()
            .filter_map(|p| p.last())
            .copied()
            .collect();
        leaves.sort_unstable();
        leaves.dedup();
        leaves.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXAMPLE: &str = "\
# a two-level fat tree
SwitchName=s1 Nodes=node[0-3]
switchname=s2 nodes=node[4-7]   LinkSpeed=100   # a comment
\t
SwitchName=top Switches=s[1-2]
";

    fn parse_err(text: &str) -> ParseError {
        SwitchMap::parse(text).unwrap_err()
    }

    #[test]
    fn parses_the_tree_format() {
        let m = SwitchMap::parse(EXAMPLE).unwrap();
        assert_eq!(m.switch_count(), 3);
        assert_eq!(m.node_count(), 8);
        assert_eq!(m.switch_of("node5"), Some("s2"));
        assert_eq!(m.switch_of("node9"), None);
        assert_eq!(m.parent_of("s1"), Some("top"));
        assert_eq!(m.parent_of("top"), None);
        assert_eq!(m.path_of("node2"), ["s1", "top"]);
        assert!(m.path_of("nope").is_empty());
        assert_eq!(m.nodes_on("s1"), ["node0", "node1", "node2", "node3"]);
        assert_eq!(m.switch_names().collect::<Vec<_>>(), ["s1", "s2", "top"]);
        assert!(m.warnings().is_empty());
    }

    #[test]
    fn parents_may_come_first_and_levels_may_differ() {
        let m = SwitchMap::parse(
            "SwitchName=core Switches=agg1,leaf9\n\
             SwitchName=agg1 Switches=leaf[1-2]\n\
             SwitchName=leaf1 Nodes=rack1-n[01-16]\n\
             SwitchName=leaf2 Nodes=rack2-n[01-16]\n\
             SwitchName=leaf9 Nodes=gpu[1-4,7]\n",
        )
        .unwrap();
        assert_eq!(m.path_of("rack2-n07"), ["leaf2", "agg1", "core"]);
        assert_eq!(m.path_of("gpu7"), ["leaf9", "core"]);
        assert_eq!(m.switch_of("rack1-n16"), Some("leaf1"));
        assert_eq!(m.switch_of("rack1-n1"), None, "zero padding is significant");
    }

    #[test]
    fn empty_file_is_an_empty_map() {
        let m = SwitchMap::parse("# nothing\n\n").unwrap();
        assert_eq!(m.switch_count(), 0);
    }

    #[test]
    fn node_on_two_switches_keeps_the_first_with_a_warning() {
        let m = SwitchMap::parse("SwitchName=a Nodes=n[1-2]\nSwitchName=b Nodes=n[2-3]\n").unwrap();
        assert_eq!(m.switch_of("n2"), Some("a"));
        assert_eq!(m.nodes_on("b"), ["n3"]);
        assert_eq!(m.warnings().len(), 1);
        assert_eq!(m.warnings()[0].line, 2);
        assert!(m.warnings()[0].to_string().contains("n2"));
    }

    #[test]
    fn malformed_lines_are_typed_errors_with_line_numbers() {
        use ParseErrorKind as K;
        type Case = (&'static str, usize, fn(&K) -> bool);
        let cases: Vec<Case> = vec![
            ("Nodes=n1 SwitchName=s", 1, |k| {
                matches!(k, K::MissingSwitchName { .. })
            }),
            ("# c\nSwitch s1", 2, |k| {
                matches!(k, K::MissingSwitchName { .. })
            }),
            ("SwitchName=s Nodes=n1 junk", 1, |k| {
                matches!(k, K::NotAPair { .. })
            }),
            ("SwitchName=s Nodes=n1 Colour=red", 1, |k| {
                matches!(k, K::UnknownKey { .. })
            }),
            ("\n\nBlockName=b1 Nodes=n[1-4]", 3, |k| {
                matches!(k, K::BlockFormat)
            }),
            ("SwitchName=s Nodes=a Nodes=b", 1, |k| {
                matches!(k, K::RepeatedKey { .. })
            }),
            ("SwitchName=s Nodes=", 1, |k| {
                matches!(k, K::EmptyValue { .. })
            }),
            ("SwitchName= Nodes=a", 1, |k| {
                matches!(k, K::EmptyValue { .. })
            }),
            ("SwitchName=s[1-2] Nodes=a", 1, |k| {
                matches!(k, K::NotOneSwitch { count: 2, .. })
            }),
            ("SwitchName=s LinkSpeed=1", 1, |k| {
                matches!(k, K::NoChildren { .. })
            }),
            ("SwitchName=s Nodes=a\nSwitchName=s Nodes=b", 2, |k| {
                matches!(k, K::DuplicateSwitch { first_line: 1, .. })
            }),
            (
                "SwitchName=s Nodes=a\nSwitchName=t Switches=s,u",
                2,
                |k| matches!(k, K::UndefinedSwitch { name } if name == "u"),
            ),
            (
                "SwitchName=s Nodes=a\nSwitchName=t Switches=s\nSwitchName=u Switches=s",
                3,
                |k| matches!(k, K::TwoParents { first_line: 2, .. }),
            ),
            ("SwitchName=a Switches=b\nSwitchName=b Switches=a", 1, |k| {
                matches!(k, K::Cycle { .. })
            }),
            ("SwitchName=a Switches=a", 1, |k| {
                matches!(k, K::Cycle { .. })
            }),
            ("SwitchName=s Nodes=n[1-", 1, |k| {
                matches!(k, K::Hostlist { .. })
            }),
            ("SwitchName=s Nodes=n[3-1]", 1, |k| {
                matches!(k, K::Hostlist { .. })
            }),
        ];
        for (text, line, kind) in cases {
            let e = parse_err(text);
            assert_eq!(e.line, line, "{text:?}: {e}");
            assert!(kind(&e.kind), "{text:?}: unexpected {e:?}");
            assert!(e.to_string().starts_with(&format!("line {line}: ")));
        }
    }

    #[test]
    fn file_errors_name_the_file_and_line() {
        let dir = std::env::temp_dir().join(format!("cohort-switches-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("topology.conf");
        std::fs::write(
            &path,
            "SwitchName=s1 Nodes=n[0-3]\nSwitchName=s2 Nodes=n[4-\n",
        )
        .unwrap();
        let e = SwitchMap::from_file(&path).unwrap_err();
        assert_eq!(e.line(), Some(2));
        let msg = e.to_string();
        assert!(msg.contains(&format!("{}:2:", path.display())), "{msg}");
        std::fs::write(&path, EXAMPLE).unwrap();
        assert_eq!(SwitchMap::from_file(&path).unwrap().switch_count(), 3);
        let missing = SwitchMap::from_file(&dir.join("absent.conf")).unwrap_err();
        assert!(missing.to_string().contains("absent.conf"));
        assert_eq!(missing.line(), None);

        // Found next to slurm.conf (which itself need not exist), else nothing.
        let conf = dir.join("slurm.conf");
        assert_eq!(
            slurm_topology_file(Some(conf.as_os_str())),
            Some(path.clone())
        );
        std::fs::remove_file(&path).unwrap();
        assert_eq!(slurm_topology_file(Some(conf.as_os_str())), None);
        assert_eq!(slurm_topology_file(None), None);
        assert_eq!(slurm_topology_file(Some("".as_ref())), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn locality_places_job_nodes_and_names_the_unknown() {
        let m = SwitchMap::parse(EXAMPLE).unwrap();
        let names = ["node1", "node6", "elsewhere", "node2"];
        let l = Locality::new(&m, &names);
        assert_eq!(l.len(), 4);
        assert_eq!(l.path(0).len(), 2);
        assert_eq!(l.leaf_of(0), l.leaf_of(3));
        assert_ne!(l.leaf_of(0), l.leaf_of(1));
        assert_eq!(l.path(0)[0], l.path(1)[0], "same top switch");
        assert_eq!(l.unknown(), [2]);
        assert_eq!(l.leaf_switches(), 2);
        assert_eq!(l.switch_name(l.leaf_of(1).unwrap()), Some("s2"));
        assert!(l.path(99).is_empty());
    }
}

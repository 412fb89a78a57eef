//! What one host looks like to cohort: packages, NUMA nodes with their memory, cores,
//! PUs and network / OpenFabrics devices with the NUMA node and CPUs each is near.
//!
//! [`Topology`] is a plain serializable summary: discovery (hwloc, or the affinity
//! fallback) fills it, and everything after that — placement, the NIC choice, the
//! `cohort topo` table — is pure code over it.

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use crate::cpuset::CpuSet;

/// Summary of one host's hardware, as far as this process may use it (CPUs outside
/// its allowed set are left out).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Topology {
    pub machine: Machine,
    pub packages: Vec<Package>,
    pub numa_nodes: Vec<NumaNode>,
    pub cores: Vec<Core>,
    pub pus: Vec<Pu>,
    /// The L1 (data), L2 and L3 caches, each level in hwloc's logical order; empty when
    /// unknown (the affinity fallback).
    #[serde(default)]
    pub caches: Vec<Cache>,
    pub nics: Vec<NicInfo>,
    /// The whole topology as hwloc 2 exports it (XML, with the devices when they were
    /// looked for), for processes that would otherwise discover it again (Open MPI
    /// reads it as `pmix.hwlocxml2`); `None` without hwloc. Kept local: never sent.
    #[serde(skip)]
    pub hwloc_xml: Option<String>,
}

/// The host as a whole.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Machine {
    pub hostname: String,
    /// Where this summary came from: `hwloc` or `affinity` (the fallback).
    pub source: String,
    pub architecture: Option<String>,
    pub os: Option<String>,
    /// Vendor and product name as DMI reports them, when known.
    pub product: Option<String>,
    /// Memory of all NUMA nodes, bytes (0 when unknown).
    pub memory_bytes: u64,
    /// CPUs this process may run on.
    pub cpuset: CpuSet,
}

/// A processor package (socket).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Package {
    pub index: u32,
    pub model: Option<String>,
    pub cpuset: CpuSet,
}

/// A NUMA node: memory and the CPUs local to it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NumaNode {
    /// OS index, as in `/sys/devices/system/node/node<N>` and numactl.
    pub os_index: u32,
    pub memory_bytes: u64,
    pub cpuset: CpuSet,
}

/// A core and its hardware threads (PUs).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Core {
    /// Position among the allowed cores, in hwloc's logical order.
    pub index: u32,
    pub package: Option<u32>,
    /// OS index of the NUMA node whose CPUs include this core.
    pub numa: Option<u32>,
    pub cpuset: CpuSet,
}

/// A processing unit (hardware thread), by OS index.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pu {
    pub os_index: u32,
    /// [`Core::index`] of its core.
    pub core: u32,
}

/// A CPU cache shared by the PUs of its cpuset.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cache {
    /// 1 (the data or unified L1), 2 or 3.
    pub level: u8,
    pub cpuset: CpuSet,
}

/// What kind of network device.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NicKind {
    /// A verbs (OpenFabrics) device: InfiniBand, RoCE, iWARP (`mlx5_0`, `rxe0`).
    OpenFabrics,
    /// A kernel network interface (`eth0`, `ib0`).
    Network,
}

/// A network or OpenFabrics device and where it sits.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NicInfo {
    pub name: String,
    pub kind: NicKind,
    /// `InfiniBand` or `Ethernet` (RoCE) for OpenFabrics devices, when sysfs says.
    pub link_layer: Option<String>,
    /// Port 1 active (OpenFabrics) or interface up (network), when known.
    pub active: Option<bool>,
    /// PCI address (`0000:3b:00.0`), when the device sits on PCI.
    pub pci_bus_id: Option<String>,
    /// OS index of the one NUMA node the device is attached to (`None` when it is
    /// equally far from several, or unknown).
    pub numa: Option<u32>,
    /// CPUs near the device.
    pub cpuset: CpuSet,
    /// Other devices on the same PCI function (an OpenFabrics device's `ib0`/`eth2`).
    pub siblings: Vec<String>,
}

impl Topology {
    /// The NUMA node with OS index `os_index`.
    pub fn numa_node(&self, os_index: u32) -> Option<&NumaNode> {
        self.numa_nodes.iter().find(|n| n.os_index == os_index)
    }

    /// Where a process bound to `cpus` sits, as a PMIx locality string
    /// (PMIX_LOCALITY_STRING, `pmix.locstr`): for each kind of object that `cpus`
    /// touches, its two-letter tag and the logical indexes of the objects `cpus`
    /// intersects, in hwloc's list syntax, joined by colons. Packages (`SK`), L3, L2
    /// and L1 caches, cores (`CR`), PUs (`HT`), then NUMA nodes (`NM`) last, as
    /// OpenPMIx writes them; Open MPI 4.1 and `PMIx_Get_relative_locality` match the
    /// tokens by tag, in any order. `None` for a process that is not bound: `cpus`
    /// empty or covering every allowed CPU.
    pub fn locality_string(&self, cpus: &CpuSet) -> Option<String> {
        if cpus.is_empty() || self.machine.cpuset.is_subset(cpus) {
            return None;
        }
        // The logical indexes of the objects of one kind, in order, that hold a CPU
        // of the binding (`hits`: whether each does).
        let touched = |hits: &mut dyn Iterator<Item = bool>| -> CpuSet {
            (0u32..)
                .zip(hits)
                .filter(|&(_, hit)| hit)
                .map(|(i, _)| i)
                .collect()
        };
        let meets = |set: &CpuSet| set.intersects(cpus);
        let cache = |level: u8| {
            touched(
                &mut self
                    .caches
                    .iter()
                    .filter(move |c| c.level == level)
                    .map(|c| meets(&c.cpuset)),
            )
        };
        let tokens = [
            (
                "SK",
                touched(&mut self.packages.iter().map(|p| meets(&p.cpuset))),
            ),
            ("L3", cache(3)),
            ("L2", cache(2)),
            ("L1", cache(1)),
            (
                "CR",
                touched(&mut self.cores.iter().map(|c| meets(&c.cpuset))),
            ),
            (
                "HT",
                touched(&mut self.pus.iter().map(|p| cpus.contains(p.os_index))),
            ),
            (
                "NM",
                touched(&mut self.numa_nodes.iter().map(|n| meets(&n.cpuset))),
            ),
        ];
        let s = tokens
            .iter()
            .filter(|(_, set)| !set.is_empty())
            .map(|(tag, set)| format!("{tag}{set}"))
            .collect::<Vec<_>>()
            .join(":");
        (!s.is_empty()).then_some(s)
    }

    /// How `--report-bindings` shows a process bound to `cpus`: the logical indexes
    /// of the cores it touches, the CPUs, and a map of the host with one bracket per
    /// package, its cores separated by `/`, each core's PUs `B` (bound) or `.`. On
    /// 2 packages of 2 cores of 2 PUs: `core 1 (CPUs 1,5): [../BB][../..]`.
    pub fn describe_binding(&self, cpus: &CpuSet) -> String {
        let cores: CpuSet = self
            .cores
            .iter()
            .filter(|c| c.cpuset.intersects(cpus))
            .map(|c| c.index)
            .collect();
        let mut map = String::new();
        let mut packages: Vec<Option<u32>> = self.packages.iter().map(|p| Some(p.index)).collect();
        if self.cores.iter().any(|c| c.package.is_none()) {
            packages.push(None);
        }
        for package in packages {
            let cores: Vec<String> = self
                .cores
                .iter()
                .filter(|c| c.package == package)
                .map(|c| {
                    self.pus
                        .iter()
                        .filter(|p| p.core == c.index)
                        .map(|p| if cpus.contains(p.os_index) { 'B' } else { '.' })
                        .collect()
                })
                .collect();
            if !cores.is_empty() {
                map.push('[');
                map.push_str(&cores.join("/"));
                map.push(']');
            }
        }
        format!("core {cores} (CPUs {cpus}): {map}")
    }

    /// Fills in what can be derived from the rest: each core's NUMA node, the
    /// machine's memory. Discovery calls it last.
    pub fn derive(&mut self) {
        for core in &mut self.cores {
            if core.numa.is_none() {
                core.numa = self
                    .numa_nodes
                    .iter()
                    .find(|n| core.cpuset.is_subset(&n.cpuset))
                    .map(|n| n.os_index);
            }
        }
        if self.machine.memory_bytes == 0 {
            self.machine.memory_bytes = self.numa_nodes.iter().map(|n| n.memory_bytes).sum();
        }
    }

    /// The readable table `cohort topo` prints.
    pub fn render_table(&self) -> String {
        let mut out = String::new();
        let m = &self.machine;
        let line = |out: &mut String, k: &str, v: &str| {
            let _ = writeln!(out, "{k:<12} {v}");
        };
        line(&mut out, "host", &m.hostname);
        let mut what = Vec::new();
        what.extend(m.product.clone());
        what.extend(m.architecture.clone());
        what.extend(m.os.clone());
        if !what.is_empty() {
            line(&mut out, "machine", &what.join(", "));
        }
        line(
            &mut out,
            "summary",
            &format!(
                "{} package(s), {} NUMA node(s), {} core(s), {} PU(s), {} memory",
                self.packages.len(),
                self.numa_nodes.len(),
                self.cores.len(),
                self.pus.len(),
                human_bytes(m.memory_bytes)
            ),
        );
        let caches: Vec<String> = (1..=3u8)
            .filter_map(|level| {
                let of_level: Vec<&Cache> =
                    self.caches.iter().filter(|c| c.level == level).collect();
                let pus = of_level.first()?.cpuset.len();
                let s = if pus == 1 { "" } else { "s" };
                Some(format!("L{level}: {} of {pus} PU{s}", of_level.len()))
            })
            .collect();
        if !caches.is_empty() {
            line(&mut out, "caches", &caches.join(", "));
        }
        line(&mut out, "allowed", &format!("cpus {}", m.cpuset));
        line(&mut out, "source", &m.source);

        out.push_str("\nPACKAGE  CPUS          MODEL\n");
        for p in &self.packages {
            let model = p.model.as_deref().unwrap_or("-");
            let _ = writeln!(out, "{:<8} {:<13} {model}", p.index, p.cpuset.to_string());
        }

        out.push_str("\nNUMA     CPUS          MEMORY\n");
        for n in &self.numa_nodes {
            let _ = writeln!(
                out,
                "{:<8} {:<13} {}",
                n.os_index,
                n.cpuset.to_string(),
                human_bytes(n.memory_bytes)
            );
        }

        out.push_str("\nCORE     PACKAGE  NUMA     PUS\n");
        for c in &self.cores {
            let _ = writeln!(
                out,
                "{:<8} {:<8} {:<8} {}",
                c.index,
                opt(c.package),
                opt(c.numa),
                c.cpuset
            );
        }

        out.push_str(
            "\nNIC          KIND         LINK         STATE  PCI            NUMA     CPUS\n",
        );
        if self.nics.is_empty() {
            out.push_str("(no network or OpenFabrics device found)\n");
        }
        let preferred = preferred_nic(self).map(|n| n.name);
        for n in &self.nics {
            let kind = match n.kind {
                NicKind::OpenFabrics => "openfabrics",
                NicKind::Network => "network",
            };
            let mark = if preferred.as_deref() == Some(n.name.as_str()) {
                "  (preferred)"
            } else {
                ""
            };
            let state = match n.active {
                Some(true) => "up",
                Some(false) => "down",
                None => "-",
            };
            let _ = writeln!(
                out,
                "{:<12} {:<12} {:<12} {:<6} {:<14} {:<8} {}{mark}",
                n.name,
                kind,
                n.link_layer.as_deref().unwrap_or("-"),
                state,
                n.pci_bus_id.as_deref().unwrap_or("-"),
                opt(n.numa),
                n.cpuset
            );
        }
        out
    }
}

fn opt(v: Option<u32>) -> String {
    v.map_or_else(|| "-".to_string(), |v| v.to_string())
}

/// `123.4 GiB`-style size.
pub fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = bytes as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{v:.1} {}", UNITS[unit])
    }
}

/// The device a node server should use and sit near: an OpenFabrics device if there
/// is one (a verbs transport can use it), else a network interface on PCI (a real
/// NIC rather than a virtual one), else any network interface; among equals, an
/// active one, then one attached to a single NUMA node, then the lowest name. `None`
/// when there is no device at all.
pub fn preferred_nic(topo: &Topology) -> Option<NicInfo> {
    topo.nics
        .iter()
        .min_by_key(|n| {
            (
                n.kind != NicKind::OpenFabrics,
                n.pci_bus_id.is_none(),
                n.active == Some(false),
                n.numa.is_none(),
                n.name.clone(),
            )
        })
        .cloned()
}

/// CPUs a node server using `nic` should run on: its NUMA node's CPUs, else the CPUs
/// hwloc reports near it; `None` when neither says anything narrower than nothing.
pub fn cpus_near(topo: &Topology, nic: &NicInfo) -> Option<CpuSet> {
    let near = nic
        .numa
        .and_then(|n| topo.numa_node(n))
        .map(|n| n.cpuset.clone())
        .filter(|c| !c.is_empty())
        .unwrap_or_else(|| nic.cpuset.clone());
    let allowed = near.intersection(&topo.machine.cpuset);
    (!allowed.is_empty()).then_some(allowed)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// `numa` NUMA nodes of `cores` cores each, `smt` PUs per core, numbered like
    /// Linux does on most x86 boxes (thread siblings `n` apart).
    pub fn synthetic(numa: u32, cores: u32, smt: u32) -> Topology {
        let ncores = numa * cores;
        let mut t = Topology {
            machine: Machine {
                hostname: "test".into(),
                source: "synthetic".into(),
                cpuset: (0..ncores * smt).collect(),
                ..Default::default()
            },
            packages: Vec::new(),
            numa_nodes: Vec::new(),
            cores: Vec::new(),
            pus: Vec::new(),
            caches: Vec::new(),
            nics: Vec::new(),
            hwloc_xml: None,
        };
        for n in 0..numa {
            let mut cpus = CpuSet::new();
            for c in n * cores..(n + 1) * cores {
                let pus: CpuSet = (0..smt).map(|s| c + s * ncores).collect();
                cpus = cpus.union(&pus);
                for pu in pus.iter() {
                    t.pus.push(Pu {
                        os_index: pu,
                        core: c,
                    });
                }
                // A private L1 and L2 per core, an L3 per package.
                for level in [2, 1] {
                    t.caches.push(Cache {
                        level,
                        cpuset: pus.clone(),
                    });
                }
                t.cores.push(Core {
                    index: c,
                    package: Some(n),
                    numa: None,
                    cpuset: pus,
                });
            }
            t.caches.push(Cache {
                level: 3,
                cpuset: cpus.clone(),
            });
            t.packages.push(Package {
                index: n,
                model: None,
                cpuset: cpus.clone(),
            });
            t.numa_nodes.push(NumaNode {
                os_index: n,
                memory_bytes: 1 << 30,
                cpuset: cpus,
            });
        }
        t.derive();
        t
    }

    fn nic(name: &str, kind: NicKind, pci: bool, numa: Option<u32>) -> NicInfo {
        NicInfo {
            name: name.into(),
            kind,
            link_layer: None,
            active: None,
            pci_bus_id: pci.then(|| "0000:00:03.0".into()),
            numa,
            cpuset: CpuSet::from([0]),
            siblings: Vec::new(),
        }
    }

    /// PMIX_LOCALITY_STRING: logical indexes per kind of object, in OpenPMIx's order.
    #[test]
    fn a_binding_has_a_locality_string() {
        // 2 packages (= NUMA nodes) of 2 cores of 2 PUs: core c holds PUs c and c+4,
        // which are PUs 2c and 2c+1 in logical order.
        let t = synthetic(2, 2, 2);
        let loc = |cpus: &[u32]| t.locality_string(&cpus.iter().copied().collect());
        assert_eq!(loc(&[0]).as_deref(), Some("SK0:L30:L20:L10:CR0:HT0:NM0"));
        assert_eq!(
            loc(&[0, 4]).as_deref(),
            Some("SK0:L30:L20:L10:CR0:HT0-1:NM0")
        );
        assert_eq!(
            loc(&[0, 1, 4, 5]).as_deref(),
            Some("SK0:L30:L20-1:L10-1:CR0-1:HT0-3:NM0")
        );
        // Across both packages.
        assert_eq!(
            loc(&[1, 2]).as_deref(),
            Some("SK0-1:L30-1:L21-2:L11-2:CR1-2:HT2,4:NM0-1")
        );
        // Unbound: no CPU, or every one.
        assert_eq!(loc(&[]), None);
        assert_eq!(loc(&[0, 1, 2, 3, 4, 5, 6, 7]), None);
        // Without caches (the affinity fallback) the other tags remain.
        let mut bare = t.clone();
        bare.caches.clear();
        assert_eq!(
            bare.locality_string(&CpuSet::from([7])).as_deref(),
            Some("SK1:CR3:HT7:NM1")
        );
    }

    /// `--report-bindings`: the cores, the CPUs, and the map of the host.
    #[test]
    fn a_binding_is_described_with_a_map_of_the_host() {
        let t = synthetic(2, 2, 2);
        let describe = |cpus: &[u32]| t.describe_binding(&cpus.iter().copied().collect());
        assert_eq!(describe(&[1, 5]), "core 1 (CPUs 1,5): [../BB][../..]");
        assert_eq!(describe(&[2]), "core 2 (CPUs 2): [../..][B./..]");
        assert_eq!(
            describe(&[0, 1, 4, 5]),
            "core 0-1 (CPUs 0-1,4-5): [BB/BB][../..]"
        );
    }

    #[test]
    fn derive_places_cores_in_numa_nodes() {
        let t = synthetic(2, 2, 2);
        assert_eq!(t.cores[0].cpuset.to_string(), "0,4");
        let numa: Vec<Option<u32>> = t.cores.iter().map(|c| c.numa).collect();
        assert_eq!(numa, [Some(0), Some(0), Some(1), Some(1)]);
        assert_eq!(t.machine.memory_bytes, 2 << 30);
        assert_eq!(t.numa_nodes[1].cpuset.to_string(), "2-3,6-7");
    }

    #[test]
    fn openfabrics_is_preferred_then_pci_then_numa() {
        let mut t = synthetic(2, 2, 1);
        assert_eq!(preferred_nic(&t), None);
        t.nics = vec![
            nic("veth0", NicKind::Network, false, None),
            nic("eth1", NicKind::Network, true, Some(1)),
            nic("eth0", NicKind::Network, true, None),
        ];
        assert_eq!(preferred_nic(&t).unwrap().name, "eth1");
        t.nics
            .push(nic("mlx5_1", NicKind::OpenFabrics, true, Some(1)));
        t.nics
            .push(nic("mlx5_0", NicKind::OpenFabrics, true, Some(0)));
        assert_eq!(preferred_nic(&t).unwrap().name, "mlx5_0");
        t.nics[4].active = Some(false);
        assert_eq!(
            preferred_nic(&t).unwrap().name,
            "mlx5_1",
            "an active port wins"
        );
    }

    #[test]
    fn cpus_near_a_nic_are_its_numa_node() {
        let t = synthetic(2, 2, 1);
        let near = cpus_near(&t, &nic("mlx5_0", NicKind::OpenFabrics, true, Some(1)));
        assert_eq!(near.unwrap().to_string(), "2-3");
        let unknown = cpus_near(&t, &nic("eth0", NicKind::Network, true, None));
        assert_eq!(unknown.unwrap().to_string(), "0");
    }

    #[test]
    fn table_and_json_show_everything() {
        let mut t = synthetic(2, 1, 2);
        t.nics = vec![nic("mlx5_0", NicKind::OpenFabrics, true, Some(0))];
        let table = t.render_table();
        assert!(
            table.contains("2 NUMA node(s), 2 core(s), 4 PU(s)"),
            "{table}"
        );
        assert!(table.contains("mlx5_0"), "{table}");
        assert!(table.contains("(preferred)"), "{table}");
        assert!(
            table.contains("caches       L1: 2 of 2 PUs, L2: 2 of 2 PUs, L3: 2 of 2 PUs"),
            "{table}"
        );
        assert_eq!(human_bytes(3 << 30), "3.0 GiB");
    }
}

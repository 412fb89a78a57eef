//! Discovery: fills a [`Topology`] from hwloc (feature `hwloc`), or — without hwloc,
//! or when hwloc fails — from this process's CPU affinity and `/proc`, so a node
//! server always has something to place ranks on.
//!
//! Only CPUs this process may run on (its cgroup and its affinity) are reported.

use crate::affinity::current_affinity;
use crate::cpuset::CpuSet;
use crate::machine::{Core, Machine, NumaNode, Package, Pu, Topology};

/// What to discover.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Discover {
    /// Also look for network and OpenFabrics devices (slower: walks PCI).
    pub io: bool,
    /// Also export the whole topology as hwloc XML ([`Topology::hwloc_xml`]), for a
    /// node server to hand to its processes.
    pub xml: bool,
}

/// Why discovery through hwloc failed.
#[derive(Debug, thiserror::Error)]
#[error("hwloc topology discovery failed: {0}")]
pub struct DiscoveryError(pub String);

impl Discover {
    /// Discovers this host: through hwloc when built with it, else (or if hwloc fails,
    /// with a warning) from the CPU affinity.
    pub fn run(self) -> Topology {
        #[cfg(feature = "hwloc")]
        match self.with_hwloc() {
            Ok(t) => return t,
            Err(e) => tracing::warn!("{e}; falling back to the CPU affinity"),
        }
        from_affinity()
    }

    /// Discovers this host through hwloc.
    #[cfg(feature = "hwloc")]
    pub fn with_hwloc(self) -> Result<Topology, DiscoveryError> {
        hwloc::discover(self.io, self.xml)
    }
}

/// A topology made of this process's allowed CPUs alone: one package, one NUMA node,
/// every CPU a core of its own, no device. What cohort assumes without hwloc.
pub fn from_affinity() -> Topology {
    let cpus = current_affinity().unwrap_or_else(|e| {
        tracing::warn!("cannot read the CPU affinity ({e}); assuming CPU 0 only");
        CpuSet::from([0])
    });
    let memory = meminfo_total().unwrap_or(0);
    let mut t = Topology {
        machine: Machine {
            hostname: hostname(),
            source: "affinity".into(),
            architecture: Some(std::env::consts::ARCH.into()),
            os: Some(std::env::consts::OS.into()),
            product: None,
            memory_bytes: memory,
            cpuset: cpus.clone(),
        },
        packages: vec![Package {
            index: 0,
            model: None,
            cpuset: cpus.clone(),
        }],
        numa_nodes: vec![NumaNode {
            os_index: 0,
            memory_bytes: memory,
            cpuset: cpus.clone(),
        }],
        cores: Vec::new(),
        pus: Vec::new(),
        caches: Vec::new(),
        nics: Vec::new(),
        hwloc_xml: None,
    };
    for (i, cpu) in cpus.iter().enumerate() {
        t.cores.push(Core {
            index: i as u32,
            package: Some(0),
            numa: None,
            cpuset: CpuSet::from([cpu]),
        });
        t.pus.push(Pu {
            os_index: cpu,
            core: i as u32,
        });
    }
    t.derive();
    t
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "localhost".into())
}

fn meminfo_total() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

#[cfg(feature = "hwloc")]
mod hwloc {
    use hwlocality::cpu::cpuset::CpuSet as HwCpuSet;
    use hwlocality::object::attributes::ObjectAttributes;
    use hwlocality::object::types::{OSDeviceType, ObjectType};
    use hwlocality::object::TopologyObject;
    use hwlocality::topology::builder::TypeFilter;
    use hwlocality::topology::export::xml::XMLExportFlags;

    use super::*;
    use crate::machine::{Cache, NicInfo, NicKind};

    fn cpus(set: &HwCpuSet) -> CpuSet {
        set.iter_set().map(|i| usize::from(i) as u32).collect()
    }

    fn obj_cpus(obj: &TopologyObject) -> CpuSet {
        obj.cpuset().map(|c| cpus(&c)).unwrap_or_default()
    }

    /// One line of sysfs, trimmed.
    fn sysfs(path: &str) -> Option<String> {
        std::fs::read_to_string(path)
            .ok()
            .map(|s| s.trim().to_string())
    }

    fn text(c: Option<&std::ffi::CStr>) -> Option<String> {
        c.map(|c| c.to_string_lossy().trim().to_string())
            .filter(|s| !s.is_empty())
    }

    pub(super) fn discover(io: bool, xml: bool) -> Result<Topology, DiscoveryError> {
        let err = |e: &dyn std::fmt::Display| DiscoveryError(e.to_string());
        let mut builder = hwlocality::Topology::builder();
        if io {
            builder = builder
                .with_io_type_filter(TypeFilter::KeepImportant)
                .map_err(|e| err(&e))?;
        }
        let topo = builder.build().map_err(|e| err(&e))?;

        // The cgroup's CPUs (hwloc) narrowed by this process's affinity (taskset).
        let mut allowed = cpus(&topo.allowed_cpuset());
        if let Ok(mine) = current_affinity() {
            let narrowed = allowed.intersection(&mine);
            if !narrowed.is_empty() {
                allowed = narrowed;
            }
        }

        let root = topo.root_object();
        let info = |k: &str| text(root.info(k));
        let product = [info("DMISysVendor"), info("DMIProductName")]
            .into_iter()
            .flatten()
            .collect::<Vec<_>>()
            .join(" ");
        let os = match (info("OSName"), info("OSRelease")) {
            (Some(n), Some(r)) => Some(format!("{n} {r}")),
            (n, _) => n,
        };
        let mut t = Topology {
            machine: Machine {
                hostname: info("HostName").unwrap_or_else(hostname),
                source: "hwloc".into(),
                architecture: info("Architecture"),
                os,
                product: (!product.is_empty()).then_some(product),
                memory_bytes: 0,
                cpuset: allowed.clone(),
            },
            packages: Vec::new(),
            numa_nodes: Vec::new(),
            cores: Vec::new(),
            pus: Vec::new(),
            caches: Vec::new(),
            nics: Vec::new(),
            hwloc_xml: xml
                .then(|| topo.export_xml(XMLExportFlags::empty()).ok())
                .flatten()
                .map(|x| x.as_str().to_string()),
        };

        for p in topo.objects_with_type(ObjectType::Package) {
            let set = obj_cpus(p).intersection(&allowed);
            if set.is_empty() {
                continue;
            }
            t.packages.push(Package {
                index: p.os_index().unwrap_or(p.logical_index()) as u32,
                model: text(p.info("CPUModel")),
                cpuset: set,
            });
        }
        for n in topo.objects_with_type(ObjectType::NUMANode) {
            let memory = match n.attributes() {
                Some(ObjectAttributes::NUMANode(a)) => a.local_memory().map_or(0, |m| m.get()),
                _ => 0,
            };
            t.numa_nodes.push(NumaNode {
                os_index: n.os_index().unwrap_or(n.logical_index()) as u32,
                memory_bytes: memory,
                cpuset: obj_cpus(n).intersection(&allowed),
            });
        }
        for c in topo.objects_with_type(ObjectType::Core) {
            let set = obj_cpus(c).intersection(&allowed);
            if set.is_empty() {
                continue;
            }
            let package = c
                .first_ancestor_with_type(ObjectType::Package)
                .map(|p| p.os_index().unwrap_or(p.logical_index()) as u32);
            t.cores.push(Core {
                index: t.cores.len() as u32,
                package,
                numa: None,
                cpuset: set,
            });
        }
        // Some platforms (and VMs) have PUs without Core objects: one core per PU then.
        let has_cores = !t.cores.is_empty();
        for pu in topo.objects_with_type(ObjectType::PU) {
            let Some(os) = pu.os_index().map(|i| i as u32) else {
                continue;
            };
            if !allowed.contains(os) {
                continue;
            }
            let core = if has_cores {
                t.cores
                    .iter()
                    .find(|c| c.cpuset.contains(os))
                    .map(|c| c.index)
            } else {
                let index = t.cores.len() as u32;
                t.cores.push(Core {
                    index,
                    package: None,
                    numa: None,
                    cpuset: CpuSet::from([os]),
                });
                Some(index)
            };
            if let Some(core) = core {
                t.pus.push(Pu { os_index: os, core });
            }
        }
        for (level, kind) in [
            (1, ObjectType::L1Cache),
            (2, ObjectType::L2Cache),
            (3, ObjectType::L3Cache),
        ] {
            for c in topo.objects_with_type(kind) {
                let set = obj_cpus(c).intersection(&allowed);
                if !set.is_empty() {
                    t.caches.push(Cache { level, cpuset: set });
                }
            }
        }
        if io {
            t.nics = nics(&topo, &t);
        }
        t.derive();
        Ok(t)
    }

    fn nics(topo: &hwlocality::Topology, t: &Topology) -> Vec<NicInfo> {
        let mut out: Vec<NicInfo> = Vec::new();
        let devices: Vec<&TopologyObject> = topo
            .os_devices()
            .filter(|d| {
                matches!(
                    d.attributes(),
                    Some(ObjectAttributes::OSDevice(a))
                        if matches!(a.device_type(), OSDeviceType::Network | OSDeviceType::OpenFabrics)
                )
            })
            .collect();
        for d in &devices {
            let Some(name) = text(d.name()) else { continue };
            let kind = match d.attributes() {
                Some(ObjectAttributes::OSDevice(a))
                    if a.device_type() == OSDeviceType::OpenFabrics =>
                {
                    NicKind::OpenFabrics
                }
                _ => NicKind::Network,
            };
            let pci = d
                .parent()
                .filter(|p| p.object_type() == ObjectType::PCIDevice);
            let pci_bus_id = pci.and_then(|p| match p.attributes() {
                Some(ObjectAttributes::PCIDevice(a)) => Some(format!(
                    "{:04x}:{:02x}:{:02x}.{:x}",
                    a.domain(),
                    a.bus_id(),
                    a.bus_device(),
                    a.function()
                )),
                _ => None,
            });
            let near = d.first_non_io_ancestor();
            let cpuset = near
                .map(obj_cpus)
                .unwrap_or_default()
                .intersection(&t.machine.cpuset);
            let numa = near.and_then(|a| a.nodeset()).and_then(|ns| {
                let nodes: Vec<u32> = ns.iter_set().map(|i| usize::from(i) as u32).collect();
                match nodes.as_slice() {
                    [one] => Some(*one),
                    _ => None,
                }
            });
            let siblings = pci
                .map(|p| {
                    p.io_children()
                        .filter(|s| s.object_type() == ObjectType::OSDevice)
                        .filter_map(|s| text(s.name()))
                        .filter(|s| *s != name)
                        .collect()
                })
                .unwrap_or_default();
            let (link_layer, active) = match kind {
                NicKind::OpenFabrics => (
                    sysfs(&format!("/sys/class/infiniband/{name}/ports/1/link_layer")),
                    text(d.info("Port1State")).map(|s| s == "4"),
                ),
                NicKind::Network => (
                    None,
                    sysfs(&format!("/sys/class/net/{name}/operstate")).map(|s| s == "up"),
                ),
            };
            out.push(NicInfo {
                name,
                kind,
                link_layer,
                active,
                pci_bus_id,
                numa,
                cpuset,
                siblings,
            });
        }
        out.sort_by(|a, b| (a.kind, &a.name).cmp(&(b.kind, &b.name)));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fallback_sees_at_least_one_cpu() {
        let t = from_affinity();
        assert!(!t.cores.is_empty());
        assert_eq!(t.cores.len(), t.pus.len());
        assert_eq!(t.cores[0].numa, Some(0));
        assert!(!t.machine.hostname.is_empty());
    }

    #[cfg(feature = "hwloc")]
    #[test]
    fn hwloc_finds_cores_inside_numa_nodes() {
        let t = Discover {
            io: true,
            xml: true,
        }
        .with_hwloc()
        .unwrap();
        assert!(!t.cores.is_empty() && !t.pus.is_empty() && !t.numa_nodes.is_empty());
        assert!(
            t.hwloc_xml
                .as_deref()
                .is_some_and(|x| x.contains("<topology")),
            "the XML asked for"
        );
        let all: CpuSet = t.pus.iter().map(|p| p.os_index).collect();
        assert_eq!(all, t.machine.cpuset);
        for c in &t.cores {
            assert!(c.numa.is_some(), "core {c:?} outside every NUMA node");
        }
        // Caches hold allowed CPUs only; a core's L1 (when the host reports one) is
        // its own or shared by the core's PUs only.
        for c in &t.caches {
            assert!((1..=3).contains(&c.level), "{c:?}");
            assert!(!c.cpuset.is_empty() && c.cpuset.is_subset(&t.machine.cpuset));
        }
        let core0 = &t.cores[0].cpuset;
        if let Some(l1) = t
            .caches
            .iter()
            .find(|c| c.level == 1 && c.cpuset.intersects(core0))
        {
            assert!(
                l1.cpuset.is_subset(core0) || core0.is_subset(&l1.cpuset),
                "{l1:?}"
            );
        }
        assert!(t.machine.memory_bytes > 0);
    }
}

//! A Kubernetes node's pods, found where the kubelet puts their cgroups.
//!
//! The kubelet makes one cgroup per pod under its root (`kubepods`),
//! grouped by the pod's QoS class: guaranteed pods directly under the
//! root, burstable and best-effort ones a level deeper. Each of the pod's
//! containers is a cgroup below the pod's, so the pod's cgroup holds all
//! of its processes (see [`crate::ContainerCgroups::members`]): the pod is
//! the unit overbook watches and preempts.
//!
//! The names depend on the kubelet's cgroup driver:
//!
//! | driver | guaranteed | burstable |
//! |---|---|---|
//! | `cgroupfs` | `kubepods/pod<uid>` | `kubepods/burstable/pod<uid>` |
//! | `systemd` | `kubepods.slice/kubepods-pod<uid_>.slice` | `kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid_>.slice` |
//!
//! (best-effort as burstable; systemd writes the uid's `-` as `_`). The
//! same on cgroup v1 (below each controller's mount) and v2.

use crate::{CgroupError, ContainerCgroups, ContainerPath, Outcome};
use std::fmt;

/// How the kubelet names its cgroups (its `--cgroup-driver`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CgroupDriver {
    Cgroupfs,
    Systemd,
}

/// A pod's QoS class, as its cgroup's place says.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum QosClass {
    Guaranteed,
    Burstable,
    BestEffort,
}

impl QosClass {
    pub fn as_str(self) -> &'static str {
        match self {
            QosClass::Guaranteed => "guaranteed",
            QosClass::Burstable => "burstable",
            QosClass::BestEffort => "besteffort",
        }
    }
}

impl fmt::Display for QosClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One pod's cgroup.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodCgroup {
    pub path: ContainerPath,
    /// The pod's `metadata.uid`, with its dashes.
    pub uid: String,
    pub qos: QosClass,
}

/// The pods under the kubelet's root, and the directories that are none.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodDiscovery {
    /// Sorted by path.
    pub pods: Vec<PodCgroup>,
    /// Directories at a pod's level whose name is no pod's (shown lossily).
    pub skipped: Vec<String>,
}

impl CgroupDriver {
    /// The driver named as the kubelet's `--cgroup-driver` names it.
    pub fn parse(name: &str) -> Option<CgroupDriver> {
        match name {
            "cgroupfs" => Some(CgroupDriver::Cgroupfs),
            "systemd" => Some(CgroupDriver::Systemd),
            _ => None,
        }
    }

    /// The QoS group's directory name under the root (guaranteed pods have
    /// none).
    pub fn qos_dir(self, qos: QosClass) -> Option<String> {
        match (self, qos) {
            (_, QosClass::Guaranteed) => None,
            (CgroupDriver::Cgroupfs, q) => Some(q.as_str().to_string()),
            (CgroupDriver::Systemd, q) => Some(format!("kubepods-{q}.slice")),
        }
    }

    /// The pod cgroup's directory name for a pod `uid` of class `qos`.
    pub fn pod_dir(self, qos: QosClass, uid: &str) -> String {
        match (self, qos) {
            (CgroupDriver::Cgroupfs, _) => format!("pod{uid}"),
            (CgroupDriver::Systemd, QosClass::Guaranteed) => {
                format!("kubepods-pod{}.slice", uid.replace('-', "_"))
            }
            (CgroupDriver::Systemd, q) => {
                format!("kubepods-{q}-pod{}.slice", uid.replace('-', "_"))
            }
        }
    }

    /// The pod uid in a directory named as [`Self::pod_dir`] names one of
    /// class `qos`, if it is one.
    pub fn pod_uid(self, qos: QosClass, name: &str) -> Option<String> {
        let uid = match self {
            CgroupDriver::Cgroupfs => name.strip_prefix("pod")?.to_string(),
            CgroupDriver::Systemd => {
                let prefix = match qos {
                    QosClass::Guaranteed => "kubepods-pod".to_string(),
                    q => format!("kubepods-{q}-pod"),
                };
                name.strip_prefix(&prefix)?.strip_suffix(".slice")?.replace('_', "-")
            }
        };
        is_uid(&uid).then_some(uid)
    }
}

/// Whether `s` reads as a Kubernetes uid (a UUID's hex digits and dashes;
/// static pods' uids are hashes, hex digits alone).
fn is_uid(s: &str) -> bool {
    !s.is_empty() && s.len() <= 64 && s.chars().all(|c| c.is_ascii_hexdigit() || c == '-')
}

/// The pods under `root` (the kubelet's `kubepods` or `kubepods.slice`).
/// `Vanished` if `root` is gone; a missing QoS group is no error (a node
/// may have no burstable pod yet).
pub fn discover_pods<C: ContainerCgroups + ?Sized>(
    cgroups: &C,
    root: &ContainerPath,
    driver: CgroupDriver,
) -> Result<Outcome<PodDiscovery>, CgroupError> {
    let top = match cgroups.discover_all(root)? {
        Outcome::Done(d) => d,
        Outcome::Vanished => return Ok(Outcome::Vanished),
    };
    let mut found = PodDiscovery { skipped: top.skipped, ..PodDiscovery::default() };
    let groups: Vec<(QosClass, String)> = [QosClass::Burstable, QosClass::BestEffort]
        .into_iter()
        .filter_map(|q| driver.qos_dir(q).map(|d| (q, d)))
        .collect();
    for path in top.containers {
        let name = path.name();
        if let Some(uid) = driver.pod_uid(QosClass::Guaranteed, name) {
            found.pods.push(PodCgroup { path, uid, qos: QosClass::Guaranteed });
        } else if !groups.iter().any(|(_, d)| d == name) {
            found.skipped.push(path.as_str().to_string());
        }
    }
    for (qos, dir) in groups {
        let group = root
            .child(&dir)
            .map_err(|e| CgroupError::Unsupported { what: format!("QoS group {dir}: {e}") })?;
        let inner = match cgroups.discover_all(&group)? {
            Outcome::Done(d) => d,
            Outcome::Vanished => continue,
        };
        found.skipped.extend(inner.skipped);
        for path in inner.containers {
            match driver.pod_uid(qos, path.name()) {
                Some(uid) => found.pods.push(PodCgroup { path, uid, qos }),
                None => found.skipped.push(path.as_str().to_string()),
            }
        }
    }
    found.pods.sort_by(|a, b| a.path.as_str().cmp(b.path.as_str()));
    Ok(Outcome::Done(found))
}

#[cfg(test)]
mod tests {
    use super::*;

    const UID: &str = "0f6b3c1e-5d0a-4c6e-9a51-3b2d7e8f9a10";

    #[test]
    fn both_drivers_name_and_read_back_every_class() {
        for driver in [CgroupDriver::Cgroupfs, CgroupDriver::Systemd] {
            for qos in [QosClass::Guaranteed, QosClass::Burstable, QosClass::BestEffort] {
                let dir = driver.pod_dir(qos, UID);
                assert_eq!(driver.pod_uid(qos, &dir).as_deref(), Some(UID), "{driver:?} {dir}");
            }
        }
        assert_eq!(
            CgroupDriver::Systemd.pod_dir(QosClass::Burstable, UID),
            "kubepods-burstable-pod0f6b3c1e_5d0a_4c6e_9a51_3b2d7e8f9a10.slice"
        );
        assert_eq!(CgroupDriver::Cgroupfs.pod_dir(QosClass::BestEffort, UID), format!("pod{UID}"));
    }

    #[test]
    fn what_is_no_pod_is_not_taken_for_one() {
        let d = CgroupDriver::Systemd;
        for name in [
            "kubepods-burstable.slice",
            "kubepods-pod.slice",
            "kubepods-podxyz.slice",
            "kubepods-besteffort-pod0f6b.scope",
            "system.slice",
        ] {
            assert_eq!(d.pod_uid(QosClass::Guaranteed, name), None, "{name}");
        }
        // A burstable pod's name is not a best-effort one's.
        let burstable = d.pod_dir(QosClass::Burstable, UID);
        assert_eq!(d.pod_uid(QosClass::BestEffort, &burstable), None);
        for name in ["burstable", "besteffort", "pod", "podzz", "user.slice"] {
            assert_eq!(CgroupDriver::Cgroupfs.pod_uid(QosClass::Guaranteed, name), None, "{name}");
        }
    }
}

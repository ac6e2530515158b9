//! What the agent sees of its node: the containers under its root, each with
//! a stable id and a class, and their counters turned into the core's
//! [`overbook_core::Observation`] types.
//!
//! Containers are found anew at every sample, so a container created or
//! removed by anyone is picked up at once, and a restarted agent adopts
//! whatever it finds (their start time is when it first saw them; a
//! container found frozen is reported so the agent can queue its resume).
//! An empty container (no process left, e.g. after a kill) holds no task and
//! is not shown to the policy.

use crate::classes::ClassRules;
use overbook_core::{
    Class, ContainerId, ContainerStats, FaultCounters, ImageInfo, JobId, NodeStats, RunState, Time,
};
use overbook_linux::kubepods::{discover_pods, CgroupDriver};
use overbook_linux::parse::FreezerState;
use overbook_linux::{
    host, CgroupError, ContainerCgroups, ContainerControl, ContainerPath, MemoryCounters, Outcome,
};
use std::collections::BTreeMap;
use std::time::Duration;

/// One container as the agent knows it.
#[derive(Clone, Debug)]
pub struct Known {
    pub id: ContainerId,
    pub path: ContainerPath,
    pub class: Class,
    /// Its share for the `weighted` reclaimer.
    pub weight: u32,
    /// When the agent first saw it (or started it).
    pub seen_at: Time,
    /// Its last counters, and when they were read.
    pub counters: MemoryCounters,
    pub read_at: Time,
    /// Major faults and refaults per second over the last sample interval.
    pub major_rate: f64,
    pub refault_rate: f64,
    /// Processes in it at the last sample.
    pub members: usize,
    /// Whether it is frozen (by this agent, or found so).
    pub frozen: bool,
}

/// One sample of the node.
#[derive(Clone, Debug, Default)]
pub struct NodeSample {
    pub node: NodeStats,
    /// Every container with processes, as the policy sees it.
    pub containers: Vec<ContainerStats>,
    /// Containers seen for the first time (ids).
    pub appeared: Vec<ContainerId>,
    /// Containers gone since the last sample: id and path.
    pub gone: Vec<(ContainerId, ContainerPath)>,
    /// Containers whose last process left since the last sample (or found
    /// empty): their leftover page cache can be released.
    pub emptied: Vec<ContainerId>,
    /// Containers where the kernel's OOM killer killed since the last
    /// sample, with how many it killed.
    pub kernel_kills: Vec<(ContainerId, u64)>,
    /// Directories under the root that are no container (a control
    /// character in the name, not UTF-8): not watched.
    pub skipped: Vec<String>,
    /// Containers whose files could not be read this time, and why: left
    /// out of this sample (a known one keeps its identity).
    pub unreadable: Vec<(ContainerPath, String)>,
}

/// The node's containers, sampled.
#[derive(Debug)]
pub struct NodeView<C> {
    cgroups: C,
    root: ContainerPath,
    /// Configured capacity; `None`: the root's limit, else the machine's memory.
    configured: Option<u64>,
    classes: ClassRules,
    known: BTreeMap<String, Known>,
    /// Ids and classes given before the container exists (`overbook run`).
    reserved: BTreeMap<String, (ContainerId, Class, Option<u32>)>,
    next_id: u64,
    /// The limits on the way up as of the last full sample (they rarely
    /// change), read once per sample however often the node is looked at.
    limits: std::cell::RefCell<Option<std::sync::Arc<Limits>>>,
    /// What a container's task carries from before its current container:
    /// work done (kept across checkpoints) and its pre-dump, if any.
    carried: BTreeMap<ContainerId, (Duration, Option<ImageInfo>)>,
    /// `Some`: the containers are a kubelet's pods, named by this driver.
    pods: Option<CgroupDriver>,
    /// Pods' classes as the API server says them, by uid.
    api_classes: BTreeMap<String, Class>,
    /// Each known pod's uid, by its path.
    pod_uids: BTreeMap<String, String>,
}

/// The limits that bound the node: the root's and its ancestors'.
#[derive(Debug)]
struct Limits {
    /// The tightest of them, `None` when none is set.
    tightest: Option<u64>,
    /// The root's ancestors that have a limit: only they can take hits in
    /// the root's place.
    limited_ancestors: Vec<ContainerPath>,
}

/// The containers under the root, each with the name its class rules match,
/// and the directories that are none.
type Found = (Vec<(ContainerPath, String, Option<String>)>, Vec<String>);

impl<C: ContainerCgroups + ContainerControl> NodeView<C> {
    /// A view of the containers directly under `root`.
    pub fn new(
        cgroups: C,
        root: ContainerPath,
        capacity: Option<u64>,
        classes: ClassRules,
    ) -> Self {
        NodeView {
            cgroups,
            root,
            configured: capacity,
            classes,
            known: BTreeMap::new(),
            reserved: BTreeMap::new(),
            next_id: 1,
            limits: std::cell::RefCell::new(None),
            carried: BTreeMap::new(),
            pods: None,
            api_classes: BTreeMap::new(),
            pod_uids: BTreeMap::new(),
        }
    }

    /// The API server says pod `uid` is of `class`: its container takes it
    /// now if it is known (returned, with the class it had), else when
    /// it is found.
    pub fn set_pod_class(&mut self, uid: &str, class: Class) -> Option<(ContainerPath, Class)> {
        self.api_classes.insert(uid.to_string(), class);
        let key = self.pod_uids.iter().find(|(_, u)| *u == uid).map(|(k, _)| k.clone())?;
        let k = self.known.get_mut(&key)?;
        let before = k.class;
        k.class = class;
        (before != class).then(|| (k.path.clone(), before))
    }

    /// The API server no longer has pod `uid`: what its rules say holds
    /// again for a container found later.
    pub fn forget_pod(&mut self, uid: &str) {
        self.api_classes.remove(uid);
    }

    /// The containers are a kubelet's pods under `root`, named by `driver`
    /// (see [`overbook_linux::kubepods`]); a pod's name for the class rules
    /// is its QoS class and uid, `besteffort-<uid>`.
    pub fn with_pods(self, driver: Option<CgroupDriver>) -> Self {
        NodeView { pods: driver, ..self }
    }

    /// Whether the containers are a kubelet's pods.
    pub fn pods(&self) -> bool {
        self.pods.is_some()
    }

    /// The containers under the root, each with the name its class rules
    /// match, and the directories that are none.
    fn discover(&self) -> Result<Outcome<Found>, CgroupError> {
        Ok(match self.pods {
            None => self.cgroups.discover_all(&self.root)?.map(|d| {
                let named = d.containers.into_iter().map(|p| {
                    let name = p.name().to_string();
                    (p, name, None)
                });
                (named.collect(), d.skipped)
            }),
            Some(driver) => discover_pods(&self.cgroups, &self.root, driver)?.map(|d| {
                let named = d
                    .pods
                    .into_iter()
                    .map(|p| (p.path, format!("{}-{}", p.qos, p.uid), Some(p.uid)));
                (named.collect(), d.skipped)
            }),
        })
    }

    /// The uid of the pod whose cgroup is `path`, on a Kubernetes node.
    pub fn pod_uid(&self, path: &ContainerPath) -> Option<&str> {
        self.pod_uids.get(path.as_str()).map(String::as_str)
    }

    pub fn cgroups(&self) -> &C {
        &self.cgroups
    }

    pub fn root(&self) -> &ContainerPath {
        &self.root
    }

    /// The container with this id, if it was there at the last sample.
    pub fn by_id(&self, id: ContainerId) -> Option<&Known> {
        self.known.values().find(|k| k.id == id)
    }

    fn by_id_mut(&mut self, id: ContainerId) -> Option<&mut Known> {
        self.known.values_mut().find(|k| k.id == id)
    }

    /// Whether a container is there (at the last sample) or reserved.
    pub fn knows(&self, path: &ContainerPath) -> bool {
        self.known.contains_key(path.as_str()) || self.reserved.contains_key(path.as_str())
    }

    /// Gives a container the agent is about to make its id and class now.
    pub fn reserve(
        &mut self,
        path: &ContainerPath,
        class: Class,
        weight: Option<u32>,
    ) -> ContainerId {
        let id = ContainerId(self.next_id);
        self.next_id += 1;
        self.reserved.insert(path.as_str().to_string(), (id, class, weight));
        id
    }

    /// The id of a container seen at the last sample, or reserved.
    pub fn id_of(&self, path: &ContainerPath) -> Option<ContainerId> {
        let key = path.as_str();
        self.known.get(key).map(|k| k.id).or_else(|| self.reserved.get(key).map(|r| r.0))
    }

    /// Forgets a reservation (the task is done or was refused).
    pub fn unreserve(&mut self, path: &ContainerPath) {
        self.reserved.remove(path.as_str());
    }

    /// The node's own counters (hierarchical: every container's faults
    /// show in them), one cheap read.
    pub fn root_counters(&self) -> Result<Option<MemoryCounters>, CgroupError> {
        let Some(mut c) = self.cgroups.counters(&self.root)?.done() else { return Ok(None) };
        if c.limit_hits.is_none() {
            c.limit_hits = self.cgroups.limit_hits(&self.root)?.done().flatten();
        }
        Ok(Some(c))
    }

    /// What container `id`'s task carries into the policy's view: work
    /// done before its current container, and an image to build on.
    pub fn carry(&mut self, id: ContainerId, progress: Duration, image: Option<ImageInfo>) {
        self.carried.insert(id, (progress, image));
    }

    /// The task of container `id` is over: it carries nothing.
    pub fn uncarry(&mut self, id: ContainerId) {
        self.carried.remove(&id);
    }

    /// Records that a container was frozen or thawed by the agent.
    pub fn set_frozen(&mut self, id: ContainerId, frozen: bool) {
        if let Some(k) = self.by_id_mut(id) {
            k.frozen = frozen;
        }
    }

    /// Every container found at the last sample.
    pub fn containers(&self) -> impl Iterator<Item = &Known> {
        self.known.values()
    }

    /// Read every container now. A container that vanishes mid-read is
    /// dropped; an error reading one that is there is returned.
    pub fn sample(&mut self, now: Time) -> Result<NodeSample, CgroupError> {
        let (found, skipped) = match self.discover()? {
            Outcome::Done(found) => found,
            Outcome::Vanished => {
                return Err(CgroupError::Unsupported {
                    what: format!("the node's root cgroup {} does not exist", self.root),
                })
            }
        };
        let mut sample = NodeSample { skipped, ..NodeSample::default() };
        let mut next = BTreeMap::new();
        for (path, rule_name, uid) in found {
            let key = path.as_str().to_string();
            // One container's odd files (a kernel quirk, a file made
            // unreadable) must not blind the agent to every other one.
            let read = self.cgroups.counters(&path).and_then(|counters| {
                Ok(match (counters, self.cgroups.members(&path)?) {
                    (Outcome::Done(c), Outcome::Done(m)) => Some((c, m)),
                    _ => None,
                })
            });
            let (counters, members) = match read {
                Ok(Some(read)) => read,
                Ok(None) => continue,
                Err(e) => {
                    if let Some(k) = self.known.remove(&key) {
                        next.insert(key, k);
                    }
                    sample.unreadable.push((path, e.to_string()));
                    continue;
                }
            };
            let members = members.pids.len() + members.invisible;
            let known = match self.known.remove(&key) {
                Some(mut k) => {
                    if k.members > 0 && members == 0 {
                        sample.emptied.push(k.id);
                    }
                    if let (Some(now_kills), Some(before)) =
                        (counters.oom_kills, k.counters.oom_kills)
                    {
                        if now_kills > before {
                            sample.kernel_kills.push((k.id, now_kills - before));
                        }
                    }
                    let secs = now.since(k.read_at).as_secs_f64();
                    if secs > 0.0 {
                        let d = |a: u64, b: u64| a.saturating_sub(b) as f64 / secs;
                        k.major_rate = d(counters.major_faults, k.counters.major_faults);
                        k.refault_rate = d(refaults(&counters), refaults(&k.counters));
                    }
                    k.counters = counters;
                    k.read_at = now;
                    k.members = members;
                    k
                }
                None => {
                    let (class_by_name, weight_by_name) = self.classes.of(&rule_name);
                    // What the API server says of a pod comes before any rule.
                    let class_by_name = uid
                        .as_ref()
                        .and_then(|u| self.api_classes.get(u))
                        .copied()
                        .unwrap_or(class_by_name);
                    if let Some(u) = &uid {
                        self.pod_uids.insert(key.clone(), u.clone());
                    }
                    let (id, class, weight) = match self.reserved.get(&key) {
                        Some(&(id, class, weight)) => (id, class, weight.unwrap_or(weight_by_name)),
                        None => {
                            self.next_id += 1;
                            (ContainerId(self.next_id - 1), class_by_name, weight_by_name)
                        }
                    };
                    let frozen = match self.cgroups.freezer_state(&path) {
                        Ok(Outcome::Done(s)) => s != FreezerState::Thawed,
                        // No freezer here: nothing can be frozen.
                        Ok(Outcome::Vanished) | Err(_) => false,
                    };
                    sample.appeared.push(id);
                    if members == 0 {
                        sample.emptied.push(id);
                    }
                    Known {
                        id,
                        path,
                        class,
                        weight,
                        seen_at: now,
                        counters,
                        read_at: now,
                        major_rate: 0.0,
                        refault_rate: 0.0,
                        members,
                        frozen,
                    }
                }
            };
            if known.members > 0 {
                sample.containers.push(stats_of(&known, now, self.carried.get(&known.id)));
            }
            next.insert(key, known);
        }
        sample.gone =
            std::mem::take(&mut self.known).into_values().map(|k| (k.id, k.path)).collect();
        self.known = next;
        let known = &self.known;
        self.pod_uids.retain(|key, _| known.contains_key(key));
        let root = self.root_counters()?;
        self.limits.replace(None);
        sample.node = self.node_stats(root.as_ref())?;
        Ok(sample)
    }

    /// Capacity and availability (from the root's counters, read by the
    /// caller): the root cgroup's limit less its usage
    /// when the node is a cgroup with a limit, else the machine's
    /// `MemAvailable`; swap from `/proc/meminfo`, stall from system PSI.
    pub fn node_stats(&self, root: Option<&MemoryCounters>) -> Result<NodeStats, CgroupError> {
        let mem = host::meminfo()?;
        // The kubelet's working set: inactive page cache is what the kernel
        // drops first, so it counts as available; active cache is someone's
        // working set (and counting it would hide file thrashing).
        let (root_usage, root_hits) = match root {
            Some(c) => (Some(c.usage.saturating_sub(c.inactive_file)), c.limit_hits),
            None => (None, None),
        };
        let limits = self.limits()?;
        let limit = limits.tightest.filter(|&l| l < mem.total);
        let capacity = self.configured.or(limit).unwrap_or(mem.total);
        let available = match (self.configured.or(limit), root_usage) {
            (Some(cap), Some(used)) => cap.saturating_sub(used),
            _ => mem.available_or_free().min(capacity),
        };
        let stall = host::system_pressure()?.map(|p| p.some.total);
        let reclaims = match limit {
            Some(_) => self.reclaims(root_hits, &limits.limited_ancestors)?,
            // The whole machine: full when the kernel scanned to reclaim.
            None => host::vmstat()?.pages_scanned(),
        };
        Ok(NodeStats {
            capacity,
            available,
            swap_total: mem.swap_total,
            swap_free: mem.swap_free,
            stall,
            reclaims,
        })
    }
}

impl<C: ContainerCgroups + ContainerControl> NodeView<C> {
    /// The root and the cgroups above it, up to (not including) the
    /// hierarchy's root, whose memory is the machine's.
    fn limited_chain(&self) -> impl Iterator<Item = ContainerPath> {
        std::iter::successors(Some(self.root.clone()), ContainerPath::parent)
            .take_while(|p| !p.is_root())
    }

    /// The limits on the way up, read at the first look after a full sample.
    fn limits(&self) -> Result<std::sync::Arc<Limits>, CgroupError> {
        if let Some(cached) = self.limits.borrow().as_ref() {
            return Ok(std::sync::Arc::clone(cached));
        }
        // The tightest limit on the way up: a node cgroup can never hold
        // more than an enclosing one allows.
        let mut read = Limits { tightest: None, limited_ancestors: Vec::new() };
        for path in self.limited_chain() {
            let l = match self.cgroups.limit(&path) {
                Ok(Outcome::Done(l)) => l.bytes(),
                // The hierarchy's root has no limit file: the machine is the node.
                Ok(Outcome::Vanished) | Err(CgroupError::NoSuchFile { .. }) => None,
                Err(e) => return Err(e),
            };
            if let Some(b) = l {
                read.tightest = Some(read.tightest.map_or(b, |a| a.min(b)));
                if path != self.root {
                    read.limited_ancestors.push(path);
                }
            }
        }
        let read = std::sync::Arc::new(read);
        self.limits.replace(Some(std::sync::Arc::clone(&read)));
        Ok(read)
    }

    /// How often a node with a limit was full, as one count that grows:
    /// the hits of the root's limit and of every limit above it, and the
    /// machine's direct reclaim scans. Any of them can be the one that
    /// binds: a parent whose limit is reached first (a kubelet's `kubepods`
    /// in a slice no larger, a test's node) takes the hits in the root's
    /// place, and a machine so short that allocators reclaim themselves
    /// reclaims from every cgroup, limited or not.
    /// Counting only the root's made thrashing under a binding parent look
    /// like a working set read back into free memory, and never fire.
    fn reclaims(
        &self,
        root_hits: Option<u64>,
        limited_ancestors: &[ContainerPath],
    ) -> Result<Option<u64>, CgroupError> {
        let mut total = root_hits;
        let mut add = |n: Option<u64>| {
            if let Some(n) = n {
                total = Some(total.unwrap_or(0).saturating_add(n));
            }
        };
        // Only a limit can bind: an unlimited ancestor's count (v2's is of
        // its whole subtree) would be its other children's.
        for path in limited_ancestors {
            match self.cgroups.limit_hits(path) {
                Ok(Outcome::Done(hits)) => add(hits),
                Ok(Outcome::Vanished) | Err(CgroupError::NoSuchFile { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        add(host::vmstat()?.direct_reclaim_scans());
        Ok(total)
    }
}

fn refaults(c: &MemoryCounters) -> u64 {
    c.refault_anon.unwrap_or(0).saturating_add(c.refault_file.unwrap_or(0))
}

fn stats_of(
    k: &Known,
    now: Time,
    carried: Option<&(Duration, Option<ImageInfo>)>,
) -> ContainerStats {
    let c = &k.counters;
    let mut s = ContainerStats::new(k.id, JobId(k.id.0), k.class, k.seen_at);
    s.state = if k.frozen { RunState::Frozen } else { RunState::Running };
    s.usage = c.usage;
    s.weight = k.weight;
    s.swap = c.swap.unwrap_or(0);
    s.progress = Duration::from_micros(now.as_micros().saturating_sub(k.seen_at.as_micros()));
    if let Some((before, image)) = carried {
        s.progress += *before;
        s.image = *image;
    }
    s.faults = FaultCounters {
        major_faults: c.major_faults,
        refault_anon: c.refault_anon.unwrap_or(0),
        refault_file: c.refault_file.unwrap_or(0),
    };
    s.stall = c.pressure.map(|p| p.some.total);
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use overbook_linux::V2Cgroups;
    use std::path::Path;

    fn put(dir: &Path, file: &str, text: &str) {
        std::fs::create_dir_all(dir).expect("mkdir");
        std::fs::write(dir.join(file), text).expect("write fixture");
    }

    /// A v2 cgroup directory (plain files) with one member, `pid`.
    fn container(dir: &Path, pid: u32) {
        let fixtures = concat!(env!("CARGO_MANIFEST_DIR"), "/../linux/tests/fixtures/v2");
        for file in ["memory.current", "memory.stat", "memory.swap.current", "memory.pressure"] {
            let text = std::fs::read_to_string(format!("{fixtures}/{file}")).expect("fixture");
            put(dir, file, &text);
        }
        put(dir, "memory.events", "low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\n");
        put(dir, "memory.max", "max\n");
        put(dir, "cgroup.procs", &format!("{pid}\n"));
        put(dir, "cgroup.freeze", "0\n");
        put(dir, "cgroup.events", "populated 1\nfrozen 0\n");
    }

    /// Issue 13: one container's unreadable file made the whole sample
    /// fail, so no container was watched.
    #[test]
    fn a_container_whose_files_cannot_be_read_is_left_out_and_the_rest_watched() {
        let tmp = tempfile::tempdir().expect("temp dir");
        container(&tmp.path().join("node"), 1);
        container(&tmp.path().join("node/good"), 1);
        container(&tmp.path().join("node/bad"), 1);
        let root = ContainerPath::new("node").expect("valid");
        let mut view = NodeView::new(
            V2Cgroups::new(tmp.path().to_path_buf()),
            root.clone(),
            Some(1 << 30),
            ClassRules::default(),
        );
        let first = view.sample(Time::ZERO).expect("samples");
        assert_eq!(first.containers.len(), 2);
        let bad_id = view.id_of(&root.child("bad").expect("valid")).expect("known");

        put(&tmp.path().join("node/bad"), "memory.stat", "anon twelve\n");
        let second = view.sample(Time::from_secs(1)).expect("one bad file fails no sample");
        let good = view.id_of(&root.child("good").expect("valid")).expect("known");
        let ids: Vec<ContainerId> = second.containers.iter().map(|c| c.id).collect();
        assert_eq!(ids, vec![good]);
        assert_eq!(second.unreadable.len(), 1);
        assert_eq!(second.unreadable[0].0.name(), "bad");
        assert!(second.unreadable[0].1.contains("memory.stat"), "{:?}", second.unreadable);
        assert!(second.gone.is_empty(), "an unreadable container is not gone");

        // Readable again: the same container, under the same id.
        container(&tmp.path().join("node/bad"), 1);
        let third = view.sample(Time::from_secs(2)).expect("samples");
        assert_eq!(third.containers.len(), 2);
        assert!(third.appeared.is_empty());
        assert_eq!(view.id_of(&root.child("bad").expect("valid")), Some(bad_id));
    }
}

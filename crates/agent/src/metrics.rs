//! Prometheus metrics, built from the last published status at each scrape.
//!
//! Why a fresh registry per scrape: containers come and go, and a metric
//! family rebuilt from the status never shows a container that is gone.

use crate::agent::NodeStatus;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ContainerLabels {
    container: String,
    class: String,
}

type FloatGauge = Gauge<f64, AtomicU64>;

/// The status as Prometheus text (OpenMetrics).
pub fn encode(status: &NodeStatus) -> String {
    let mut registry = Registry::default();
    let node = |registry: &mut Registry, name: &str, help: &str, value: u64| {
        let g = FloatGauge::default();
        g.set(value as f64);
        registry.register(name, help, g);
    };
    node(
        &mut registry,
        "overbook_node_memory_capacity_bytes",
        "Memory the node's containers may use",
        status.capacity,
    );
    node(
        &mut registry,
        "overbook_node_memory_available_bytes",
        "Memory still available on the node",
        status.available,
    );
    node(
        &mut registry,
        "overbook_node_swap_total_bytes",
        "Swap space of the machine",
        status.swap_total,
    );
    node(&mut registry, "overbook_node_swap_free_bytes", "Swap space unused", status.swap_free);
    let preemptions = Counter::<u64>::default();
    preemptions.inc_by(status.preemptions);
    registry.register(
        "overbook_preemptions",
        "Best-effort containers preempted (killed or frozen)",
        preemptions,
    );
    let resumes = Counter::<u64>::default();
    resumes.inc_by(status.resumes);
    registry.register("overbook_resumes", "Preempted containers resumed", resumes);

    let usage = Family::<ContainerLabels, FloatGauge>::default();
    let swap = Family::<ContainerLabels, FloatGauge>::default();
    let major = Family::<ContainerLabels, FloatGauge>::default();
    let refaults = Family::<ContainerLabels, FloatGauge>::default();
    let frozen = Family::<ContainerLabels, FloatGauge>::default();
    for c in &status.containers {
        let l = ContainerLabels { container: c.name.clone(), class: c.class.clone() };
        usage.get_or_create(&l).set(c.usage as f64);
        swap.get_or_create(&l).set(c.swap.unwrap_or(0) as f64);
        major.get_or_create(&l).set(c.major_faults_per_s);
        refaults.get_or_create(&l).set(c.refaults_per_s);
        frozen.get_or_create(&l).set(if c.state == "frozen" { 1.0 } else { 0.0 });
    }
    registry.register(
        "overbook_container_memory_usage_bytes",
        "Memory charged to the container",
        usage,
    );
    registry.register("overbook_container_swap_bytes", "Memory of the container in swap", swap);
    registry.register(
        "overbook_container_major_faults_per_second",
        "Major faults per second, last interval",
        major,
    );
    registry.register(
        "overbook_container_refaults_per_second",
        "Workingset refaults per second, last interval",
        refaults,
    );
    registry.register("overbook_container_frozen", "1 while the container is frozen", frozen);
    let mut out = String::new();
    if let Err(e) = prometheus_client::encoding::text::encode(&mut out, &registry) {
        return format!("# encoding failed: {e}\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::ContainerStatus;

    #[test]
    fn metrics_follow_prometheus_names_and_show_each_container() {
        let status = NodeStatus {
            capacity: 1 << 30,
            preemptions: 3,
            containers: vec![ContainerStatus {
                name: "be-1".into(),
                class: "best-effort".into(),
                usage: 4096,
                swap: None,
                major_faults_per_s: 12.5,
                refaults_per_s: 0.0,
                pressure_some_avg10: None,
                processes: 1,
                state: "frozen".into(),
                oom_kills: None,
            }],
            ..NodeStatus::default()
        };
        let text = encode(&status);
        assert!(text.contains("overbook_node_memory_capacity_bytes 1073741824"), "{text}");
        assert!(text.contains("overbook_preemptions_total 3"), "{text}");
        assert!(
            text.contains("overbook_container_frozen{container=\"be-1\",class=\"best-effort\"} 1"),
            "{text}"
        );
        assert!(text.ends_with("# EOF\n"));
    }
}

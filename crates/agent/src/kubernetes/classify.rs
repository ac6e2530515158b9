//! Which class a Kubernetes pod is, from what the API server says of it
//! (issue 17): its `overbook.io/class` annotation, else its PriorityClass
//! by the configured mapping, else a request of the opportunistic resource
//! `overbook.io/batch-memory` (best-effort), else production. A value that
//! cannot be read is production, the safe class, and says why: a pod
//! overbook does not understand is never one it preempts.

use overbook_core::Class;
use std::collections::BTreeMap;

/// The annotation that names a pod's class.
pub const CLASS_ANNOTATION: &str = "overbook.io/class";
/// The opportunistic resource best-effort pods request.
pub const BATCH_MEMORY: &str = "overbook.io/batch-memory";

/// What the classes depend on, read off a pod.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodFacts {
    pub uid: String,
    pub namespace: String,
    pub name: String,
    pub class_annotation: Option<String>,
    pub priority_class: Option<String>,
    /// Whether any of its containers requests `overbook.io/batch-memory`.
    pub requests_batch_memory: bool,
    /// How much of it the pod requests, bytes (its containers' requests
    /// summed; an init container's counts where it is larger). What it
    /// holds within this is part of the node's offer.
    pub batch_memory: u64,
    /// A request of it that is no quantity, said in the pod's event.
    pub batch_memory_problem: Option<String>,
}

/// A pod's class and the reason, for its event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodClass {
    pub class: Class,
    pub why: String,
    /// Set when something was not understood (the class is the safe one).
    pub problem: Option<String>,
}

/// PriorityClass names and the class their pods are.
pub fn default_priority_classes() -> BTreeMap<String, Class> {
    [("system-node-critical", Class::Critical), ("system-cluster-critical", Class::Critical)]
        .into_iter()
        .map(|(n, c)| (n.to_string(), c))
        .collect()
}

/// The pod's class, by the rules above.
pub fn classify(pod: &PodFacts, priority_classes: &BTreeMap<String, Class>) -> PodClass {
    let mut problem = None;
    if let Some(value) = &pod.class_annotation {
        match value.trim().parse::<Class>() {
            Ok(class) => {
                return PodClass {
                    class,
                    why: format!("annotation {CLASS_ANNOTATION}={value}"),
                    problem: None,
                }
            }
            Err(_) => {
                problem = Some(format!(
                    "annotation {CLASS_ANNOTATION}={value:?} is no class (best-effort, production \
                     or critical): ignored"
                ))
            }
        }
    }
    if let Some(name) = &pod.priority_class {
        if let Some(&class) = priority_classes.get(name) {
            return PodClass { class, why: format!("priority class {name}"), problem };
        }
    }
    if let Some(bad) = &pod.batch_memory_problem {
        let said = format!("{BATCH_MEMORY} request {bad}: counted as 0");
        problem = Some(match problem {
            Some(p) => format!("{p}; {said}"),
            None => said,
        });
    }
    if pod.requests_batch_memory {
        return PodClass {
            class: Class::BestEffort,
            why: format!("requests {BATCH_MEMORY}"),
            problem,
        };
    }
    PodClass { class: Class::Production, why: "no class said: production".into(), problem }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod() -> PodFacts {
        PodFacts {
            uid: "u".into(),
            namespace: "ns".into(),
            name: "p".into(),
            ..PodFacts::default()
        }
    }

    #[test]
    fn the_annotation_first_then_the_priority_class_then_the_resource() {
        let map = default_priority_classes();
        let all = PodFacts {
            class_annotation: Some("best-effort".into()),
            priority_class: Some("system-node-critical".into()),
            requests_batch_memory: true,
            ..pod()
        };
        assert_eq!(classify(&all, &map).class, Class::BestEffort);
        let critical = PodFacts { class_annotation: None, ..all.clone() };
        assert_eq!(classify(&critical, &map).class, Class::Critical);
        let batch = PodFacts { priority_class: Some("high".into()), ..critical };
        assert_eq!(classify(&batch, &map).class, Class::BestEffort);
        let plain = classify(&pod(), &map);
        assert_eq!((plain.class, plain.problem), (Class::Production, None));
    }

    #[test]
    fn a_class_not_understood_is_production_and_says_why() {
        let odd = PodFacts { class_annotation: Some("batch".into()), ..pod() };
        let c = classify(&odd, &default_priority_classes());
        assert_eq!(c.class, Class::Production);
        assert!(c.problem.is_some_and(|p| p.contains("\"batch\"")));
        // The annotation not understood does not hide the resource.
        let odd_batch = PodFacts { requests_batch_memory: true, ..odd };
        assert_eq!(classify(&odd_batch, &default_priority_classes()).class, Class::BestEffort);
    }
}

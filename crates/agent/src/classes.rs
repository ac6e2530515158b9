//! Which class a container is: rules matching container names by glob
//! pattern, first match wins. A container no rule matches gets the default
//! class, `production` unless configured: a container overbook does not know
//! is never one it preempts. A rule may also give the matched containers a
//! weight, their share for the `weighted` reclaimer (003); 1 otherwise.

use overbook_core::Class;

/// One rule: containers whose name matches `pattern` are of `class`.
#[derive(Clone, Debug, PartialEq)]
pub struct ClassRule {
    pattern: glob::Pattern,
    class: Class,
    weight: u32,
}

impl ClassRule {
    pub fn new(pattern: &str, class: Class) -> Result<ClassRule, String> {
        let pattern = glob::Pattern::new(pattern).map_err(|e| format!("{pattern:?}: {e}"))?;
        Ok(ClassRule { pattern, class, weight: 1 })
    }

    /// The matched containers' weight (at least 1).
    pub fn with_weight(self, weight: u32) -> ClassRule {
        ClassRule { weight: weight.max(1), ..self }
    }
}

/// The rules in order, and the class of what none matches.
#[derive(Clone, Debug, PartialEq)]
pub struct ClassRules {
    rules: Vec<ClassRule>,
    default: Class,
}

impl Default for ClassRules {
    fn default() -> ClassRules {
        ClassRules { rules: Vec::new(), default: Class::Production }
    }
}

impl ClassRules {
    pub fn new(rules: Vec<ClassRule>, default: Class) -> ClassRules {
        ClassRules { rules, default }
    }

    /// The class of the container named `name` (the last part of its path).
    pub fn class_of(&self, name: &str) -> Class {
        self.of(name).0
    }

    /// The class and weight of the container named `name`.
    pub fn of(&self, name: &str) -> (Class, u32) {
        self.rules
            .iter()
            .find(|r| r.pattern.matches(name))
            .map_or((self.default, 1), |r| (r.class, r.weight))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_match_wins_and_unknown_containers_are_protected() {
        let rules = ClassRules::new(
            vec![
                ClassRule::new("am-*", Class::Critical).expect("valid"),
                ClassRule::new("*-batch-*", Class::BestEffort).expect("valid"),
                ClassRule::new("am-batch-*", Class::BestEffort).expect("valid"),
                ClassRule::new("svc-*", Class::Production).expect("valid").with_weight(3),
            ],
            Class::Production,
        );
        assert_eq!(rules.class_of("am-batch-1"), Class::Critical);
        assert_eq!(rules.class_of("etl-batch-7"), Class::BestEffort);
        assert_eq!(rules.class_of("redis"), Class::Production);
        assert_eq!(rules.of("svc-a"), (Class::Production, 3));
        assert_eq!(rules.of("redis"), (Class::Production, 1));
        assert!(ClassRule::new("[", Class::BestEffort).is_err());
    }
}

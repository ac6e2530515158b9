//! Which class a container is: rules matching container names by glob
//! pattern, first match wins. A container no rule matches gets the default
//! class, `production` unless configured: a container overbook does not know
//! is never one it preempts.

use overbook_core::Class;

/// One rule: containers whose name matches `pattern` are of `class`.
#[derive(Clone, Debug, PartialEq)]
pub struct ClassRule {
    pattern: glob::Pattern,
    class: Class,
}

impl ClassRule {
    pub fn new(pattern: &str, class: Class) -> Result<ClassRule, String> {
        let pattern = glob::Pattern::new(pattern).map_err(|e| format!("{pattern:?}: {e}"))?;
        Ok(ClassRule { pattern, class })
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
        self.rules.iter().find(|r| r.pattern.matches(name)).map_or(self.default, |r| r.class)
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
            ],
            Class::Production,
        );
        assert_eq!(rules.class_of("am-batch-1"), Class::Critical);
        assert_eq!(rules.class_of("etl-batch-7"), Class::BestEffort);
        assert_eq!(rules.class_of("redis"), Class::Production);
        assert!(ClassRule::new("[", Class::BestEffort).is_err());
    }
}

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
    /// A rule; `Err` says why `pattern` is not a glob, or why no container
    /// name can match it (a rule that silently matches nothing leaves its
    /// containers in the default class: a typo'd best-effort rule is a node
    /// that never preempts).
    pub fn new(pattern: &str, class: Class) -> Result<ClassRule, String> {
        let glob = glob::Pattern::new(pattern).map_err(|e| format!("{pattern:?}: {e}"))?;
        if let Some(why) = never_matches(pattern) {
            return Err(format!("{pattern:?} can match no container name: {why}"));
        }
        Ok(ClassRule { pattern: glob, class, weight: 1 })
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

    /// The rules in order (pattern, class, weight), and the default class.
    pub fn rules(&self) -> (Vec<(String, Class, u32)>, Class) {
        let rules = self.rules.iter().map(|r| (r.pattern.as_str().to_string(), r.class, r.weight));
        (rules.collect(), self.default)
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

/// Why no container name can match `pattern` (a valid glob), if none can.
///
/// A container's name is one cgroup path component: not empty, not `.` or
/// `..`, no `/`, no control character (`ContainerPath`'s rules). The
/// pattern is read token by token as the glob crate reads it: `*` (and
/// `**`, with the `/` that may follow it) matches any run of characters,
/// and every other token exactly one. A name exists iff every one-character
/// token admits a character a name may hold and the result can avoid being
/// empty, `.` or `..`.
fn never_matches(pattern: &str) -> Option<String> {
    let chars: Vec<char> = pattern.chars().collect();
    let mut star = false;
    // For each one-character token: whether it admits a character other
    // than '.'.
    let mut singles: Vec<bool> = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        match chars[i] {
            '?' => {
                singles.push(true);
                i += 1;
            }
            '*' => {
                star = true;
                let run = chars[i..].iter().take_while(|c| **c == '*').count();
                i += run;
                if run == 2 && chars.get(i) == Some(&'/') {
                    // `**/` is one token: the '/' is not a literal.
                    i += 1;
                }
            }
            '[' => {
                // As glob parses classes: `[!` negates; the first member may
                // be `]`; a valid pattern always has the closing `]`.
                let negated = chars.get(i + 1) == Some(&'!');
                let first = if negated { i + 2 } else { i + 1 };
                let close = chars[first + 1..].iter().position(|c| *c == ']')? + first + 1;
                let class = class_members(&chars[first..close]);
                let admits = |c: char| class.iter().any(|&(lo, hi)| lo <= c && c <= hi) != negated;
                // A character this token admits, other than '.'; a range
                // of only control characters is shorter than 256.
                let pick = if negated {
                    (' '..='~')
                        .chain(['\u{e9}', '\u{4e00}'])
                        .find(|c| name_char(*c) && *c != '.' && admits(*c))
                } else {
                    class.iter().find_map(|&(lo, hi)| {
                        (lo..=hi).take(256).find(|c| name_char(*c) && *c != '.')
                    })
                };
                match pick {
                    Some(_) => singles.push(true),
                    None if admits('.') => singles.push(false),
                    None => {
                        let text: String = chars[i..=close].iter().collect();
                        return Some(format!("{text} admits no character a name may hold"));
                    }
                }
                i = close + 1;
            }
            '/' => {
                return Some(
                    "it holds a '/', and a pattern matches the container's name, the last part \
                     of its path (\"prod-*\", not \"/overbook/prod-*\")"
                        .into(),
                )
            }
            c if c.is_control() => {
                return Some(format!("it holds the control character {c:?}, which no name has"))
            }
            c => {
                singles.push(c != '.');
                i += 1;
            }
        }
    }
    if !star && singles.is_empty() {
        return Some("it is empty".into());
    }
    if !star && singles.len() <= 2 && singles.iter().all(|other| !other) {
        return Some("it matches only \".\" or \"..\", which are not names".into());
    }
    None
}

/// Whether a container name may hold `c`.
fn name_char(c: char) -> bool {
    c != '/' && !c.is_control()
}

/// A class's members as glob reads them (`a-z` a range, anything else one
/// character), each as an inclusive range of name characters' bounds.
fn class_members(members: &[char]) -> Vec<(char, char)> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < members.len() {
        if i + 2 < members.len() && members[i + 1] == '-' {
            out.push((members[i], members[i + 2]));
            i += 3;
        } else {
            out.push((members[i], members[i]));
            i += 1;
        }
    }
    out
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

    #[test]
    fn a_pattern_no_name_can_match_is_refused() {
        for (pattern, why) in [
            ("", "empty"),
            ("/overbook/be-*", "'/'"),
            ("be-*/", "'/'"),
            ("be\n*", "control"),
            (".", "\".\""),
            ("..", "\".\""),
            ("[.].", "\".\""),
            ("[/]*", "admits no character"),
            ("a[\u{1}-\u{1f}]", "admits no character"),
        ] {
            let e = ClassRule::new(pattern, Class::BestEffort).expect_err(pattern);
            assert!(e.contains("can match no container name") && e.contains(why), "{e}");
        }
    }

    #[test]
    fn a_pattern_some_name_matches_is_taken() {
        // Each with a name it matches, checked by the glob crate itself, so
        // the reading above agrees with the matcher.
        for (pattern, name) in [
            ("*", "a"),
            ("?", "a"),
            ("**", "x"),
            ("**/be-*", "be-1"),
            ("...", "..."),
            (".*", ".a"),
            ("[.a]", "a"),
            ("[!.]", "b"),
            ("[!a-z]", "0"),
            ("[]]x", "]x"),
            ("[!]]", "a"),
            ("svc-[0-9]", "svc-7"),
            ("user@*.service", "user@0.service"),
        ] {
            let rule = ClassRule::new(pattern, Class::BestEffort).expect(pattern);
            assert!(rule.pattern.matches(name), "{pattern} {name}");
            assert!(overbook_linux::ContainerPath::root().child(name).is_ok(), "{name}");
        }
    }
}

//! Policy configuration: raw TOML (serde) is checked once, at load, into a
//! validated form; a bad value is refused with the key it sits at.

use crate::detect::DetectorConfig;
use crate::launch::LaunchConfig;
use crate::preempt::PreemptorConfig;
use crate::rank::RankerConfig;
use crate::reclaim::ReclaimerConfig;
use serde::{Deserialize, Serialize};

/// A configuration value that cannot work, with the dotted key it sits at.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{key}: {problem}")]
pub struct ConfigError {
    pub key: String,
    pub problem: String,
}

impl ConfigError {
    pub fn new(key: impl Into<String>, problem: impl Into<String>) -> ConfigError {
        ConfigError { key: key.into(), problem: problem.into() }
    }

    /// The same error, one level deeper: `detector` + `tolerance` → `detector.tolerance`.
    pub fn under(self, parent: &str) -> ConfigError {
        ConfigError { key: format!("{parent}.{}", self.key), problem: self.problem }
    }
}

/// A deserializer's message about a value of the wrong type or range, in
/// the words of whoever wrote the file: `invalid type: string "fast",
/// expected f64` becomes `expected a number (e.g. 0.1), not "fast"`.
/// Any other message is returned as it is.
pub fn plain_words(message: &str) -> String {
    let message = message.trim();
    let Some(rest) =
        message.strip_prefix("invalid type: ").or_else(|| message.strip_prefix("invalid value: "))
    else {
        return message.to_string();
    };
    let Some((found, wanted)) = rest.rsplit_once(", expected ") else {
        return message.to_string();
    };
    let wanted = match wanted.trim() {
        "f64" | "f32" => "a number (e.g. 0.1)",
        "usize" | "u64" | "u32" | "u16" | "u8" => "a whole number, 0 or more",
        "i64" | "i32" | "i16" | "i8" | "isize" => "a whole number",
        "a boolean" => "true or false",
        "a string" | "a borrowed string" => "text in quotes",
        other => other,
    };
    let found = if let Some(text) = found.strip_prefix("string ") {
        text.to_string()
    } else if let Some(v) =
        ["integer ", "floating point ", "boolean "].iter().find_map(|p| found.strip_prefix(p))
    {
        v.trim_matches('`').to_string()
    } else {
        match found {
            "map" => "a table".to_string(),
            "sequence" => "a list".to_string(),
            other => other.to_string(),
        }
    };
    format!("expected {wanted}, not {found}")
}

/// Check that a number is finite and within `[lo, hi]`.
pub fn check_range(key: &str, value: f64, lo: f64, hi: f64) -> Result<(), ConfigError> {
    if !value.is_finite() || value < lo || value > hi {
        return Err(ConfigError::new(key, format!("{value} is outside [{lo}, {hi}]")));
    }
    Ok(())
}

/// The whole node policy: one choice per stage.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PolicyConfig {
    pub detector: DetectorConfig,
    pub ranker: RankerConfig,
    pub preemptor: PreemptorConfig,
    pub launcher: LaunchConfig,
    pub reclaimer: ReclaimerConfig,
    pub protect: ProtectConfig,
}

/// `[protect]`: whose memory the kernel is told to keep.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ProtectConfig {
    /// Production containers' memory is protected at their usage (v2
    /// `memory.low`, raised as it grows): when the node's memory is short,
    /// the kernel reclaims from everything else first, so best-effort work
    /// pays for its own collisions and production runs on. v1 has no
    /// such protection for a node under a cgroup limit.
    pub production: bool,
}

impl PolicyConfig {
    /// overbook's own policy, `overbook agent`'s default: production first.
    /// 000's detector with production's own thrashing acted on in 0.3 s and
    /// 5% of memory kept for it, 004's adaptive choice unless production
    /// would wait for the dump, and a launcher that charges tasks their
    /// profiled peaks until they reach them and holds while anyone
    /// thrashes. The simulator's `overbook` variants run the same.
    pub fn production_first() -> PolicyConfig {
        PolicyConfig {
            detector: DetectorConfig::production_first(),
            preemptor: PreemptorConfig::production_first(),
            launcher: LaunchConfig {
                charge_until_peak: true,
                resync_on_finish: true,
                hold_while_thrashing: true,
                delay_after_kill: false,
                ..LaunchConfig::default()
            },
            protect: ProtectConfig { production: true },
            ..PolicyConfig::default()
        }
    }

    /// Every key checked; the first problem found is returned with its key.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.detector.validate().map_err(|e| e.under("detector"))?;
        self.ranker.validate().map_err(|e| e.under("ranker"))?;
        self.preemptor.validate().map_err(|e| e.under("preemptor"))?;
        self.launcher.validate().map_err(|e| e.under("launcher"))?;
        self.reclaimer.validate().map_err(|e| e.under("reclaimer"))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every kind of every stage (its table, its `kind`, its own keys).
    const KINDS: &[(&str, &str, &[&str])] = &[
        ("detector", "static", &[]),
        ("detector", "threshold", &["fraction"]),
        ("detector", "constraint-thrashing", &["tolerance", "min_rate"]),
        (
            "detector",
            "production-first",
            &["tolerance", "production_tolerance", "min_rate", "production_stall", "floor"],
        ),
        ("detector", "fault-rate", &["threshold", "duration", "rss_growth"]),
        ("ranker", "memory-per-runtime", &[]),
        ("ranker", "score", &[]),
        ("ranker", "newest-first", &[]),
        ("ranker", "checkpoint-cost", &["write_bandwidth", "incremental"]),
        ("preemptor", "kill", &[]),
        ("preemptor", "suspend", &[]),
        ("preemptor", "suspend-and-swap-out", &[]),
        ("preemptor", "checkpoint", &["incremental"]),
        ("preemptor", "adaptive", &["incremental"]),
        ("preemptor", "production-first", &["incremental", "production_wait"]),
        ("reclaimer", "none", &[]),
        ("reclaimer", "recency", &["headroom", "interval", "growth"]),
        ("reclaimer", "weighted", &["headroom", "interval"]),
    ];

    fn parse(text: &str) -> Result<PolicyConfig, String> {
        toml::from_str::<PolicyConfig>(text).map_err(|e| e.to_string())
    }

    #[test]
    fn every_kind_parses_alone_and_round_trips() {
        for (stage, kind, _) in KINDS {
            let text = format!("[{stage}]\nkind = \"{kind}\"\n");
            let cfg = parse(&text).unwrap_or_else(|e| panic!("{text}: {e}"));
            let back = toml::to_string(&cfg).expect("serializes");
            assert!(back.contains(&format!("kind = \"{kind}\"")), "{back}");
            assert_eq!(parse(&back), Ok(cfg), "{back}");
        }
    }

    #[test]
    fn an_unknown_key_under_any_kind_is_refused_by_name() {
        // Misspellings, and every key that belongs to some other kind.
        let mut strays = vec!["tolerence", "fractoin", "kinds", "Incremental"];
        strays.extend(KINDS.iter().flat_map(|(_, _, keys)| keys.iter().copied()));
        for (stage, kind, own) in KINDS {
            for key in strays.iter().filter(|k| !own.contains(k)) {
                let text = format!("[{stage}]\nkind = \"{kind}\"\n{key} = 1\n");
                let err = parse(&text).expect_err(&text);
                assert!(err.contains(&format!("unknown field `{key}`")), "{text}: {err}");
            }
        }
    }

    #[test]
    fn an_unknown_key_under_the_launcher_or_the_policy_is_refused_by_name() {
        for (text, key) in [
            ("[launcher]\nqueue_limt = 10\n", "queue_limt"),
            ("[launcher]\nadmission = \"snapshot\"\nkind = \"snapshot\"\n", "kind"),
            ("[launcher]\nfraction = 0.1\n", "fraction"),
            ("[detectr]\nkind = \"static\"\n", "detectr"),
        ] {
            let err = parse(text).expect_err(text);
            assert!(err.contains(&format!("unknown field `{key}`")), "{text}: {err}");
        }
        assert!(parse("[launcher]\nadmission = \"snapshots\"\n").is_err());
    }

    #[test]
    fn a_static_detector_with_a_stray_key_is_refused() {
        // The case that used to pass: a unit variant ignored every other key.
        let err = parse("[detector]\nkind = \"static\"\nfraction = 0.1\n").unwrap_err();
        assert!(err.contains("fraction"), "{err}");
        let err = parse("[preemptor]\nkind = \"kill\"\nincremental = true\n").unwrap_err();
        assert!(err.contains("incremental"), "{err}");
        let err = parse("[ranker]\nkind = \"newest-first\"\nweight = 2\n").unwrap_err();
        assert!(err.contains("weight"), "{err}");
    }

    #[test]
    fn defaults_are_unchanged() {
        let cfg = parse("").expect("empty policy");
        assert_eq!(cfg, PolicyConfig::default());
        assert_eq!(cfg.detector.name(), "constraint-thrashing");
        assert_eq!(cfg.ranker.name(), "memory-per-runtime");
        assert_eq!(cfg.preemptor.name(), "kill");
        assert_eq!(cfg.validate(), Ok(()));
    }
}

#[cfg(test)]
mod production_first_tests {
    use super::*;

    /// The `overbook` variant of a shipped scenario: its `policy` keys.
    fn variant_policy(scenario: &str) -> PolicyConfig {
        let doc: toml::Table = toml::from_str(scenario).expect("scenario parses");
        let variants = doc["variants"].as_array().expect("variants");
        let overbook = variants
            .iter()
            .find(|v| v["name"].as_str() == Some("overbook"))
            .expect("an overbook variant");
        overbook["policy"].clone().try_into().expect("a policy")
    }

    #[test]
    fn the_simulator_s_overbook_is_the_agent_s_default_policy() {
        let preset = PolicyConfig::production_first();
        assert_eq!(preset.validate(), Ok(()));
        for (name, text) in [
            ("default", include_str!("../../../scenarios/default.toml")),
            ("charon-loads", include_str!("../../../scenarios/charon-loads.toml")),
        ] {
            assert_eq!(variant_policy(text), preset, "scenarios/{name}.toml");
        }
    }
}

#[cfg(test)]
mod plain_words_tests {
    use super::plain_words;

    #[test]
    fn serde_s_type_names_become_the_file_s_words() {
        let cases = [
            (
                "invalid type: string \"fast\", expected f64",
                "expected a number (e.g. 0.1), not \"fast\"",
            ),
            (
                "invalid value: integer `-1`, expected usize",
                "expected a whole number, 0 or more, not -1",
            ),
            (
                "invalid type: floating point `1.5`, expected u32",
                "expected a whole number, 0 or more, not 1.5",
            ),
            ("invalid type: integer `1`, expected a boolean", "expected true or false, not 1"),
            ("invalid type: sequence, expected a string", "expected text in quotes, not a list"),
            ("unknown field `x`, expected `y`", "unknown field `x`, expected `y`"),
        ];
        for (serde, plain) in cases {
            assert_eq!(plain_words(serde), plain, "{serde}");
        }
    }
}

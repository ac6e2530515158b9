//! Sizes and durations as people write them in config: `"64GiB"`, `"512 MB"`,
//! `4096` (bytes); `"6h"`, `"90s"`, `2.5` (seconds).

use overbook_core::Bytes;
use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize, Serializer};
use std::fmt;
use std::time::Duration;

/// A memory size in bytes, written as a number of bytes or a string with a unit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Size(pub Bytes);

/// A span of time, written as seconds (a number) or a string with units.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Span(pub Duration);

/// Parse `"64GiB"`, `"1.5 GB"`, `"300M"`, `"4096"`. Binary and decimal units
/// are both accepted and mean what they say (`G`/`GiB` binary, `GB` decimal).
pub fn parse_size(text: &str) -> Result<Bytes, String> {
    let t = text.trim();
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let value: f64 = num.parse().map_err(|_| {
        format!("{text:?} is not a size (try \"64GiB\", \"512MB\" or a number of bytes)")
    })?;
    let mult: f64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "k" | "kib" => 1024.0,
        "m" | "mib" => 1024.0 * 1024.0,
        "g" | "gib" => 1024.0 * 1024.0 * 1024.0,
        "t" | "tib" => 1024f64.powi(4),
        "kb" => 1e3,
        "mb" => 1e6,
        "gb" => 1e9,
        "tb" => 1e12,
        other => {
            return Err(format!(
                "{text:?}: unknown size unit {other:?} (use B, KiB, MiB, GiB, TiB, KB, MB, GB, TB)"
            ))
        }
    };
    let bytes = value * mult;
    if !bytes.is_finite() || bytes < 0.0 || bytes > u64::MAX as f64 {
        return Err(format!("{text:?} is out of range"));
    }
    Ok(overbook_core::convert::to_u64(bytes))
}

/// Parse `"6h"`, `"90s"`, `"1h 30m"`, `"250ms"` or a number of seconds.
pub fn parse_span(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    if let Ok(secs) = t.parse::<f64>() {
        return secs_to_duration(secs)
            .ok_or_else(|| format!("{text:?}: seconds must be finite and not negative"));
    }
    humantime::parse_duration(t).map_err(|e| {
        format!("{text:?} is not a duration ({e}; try \"90s\", \"6h\" or a number of seconds)")
    })
}

pub fn secs_to_duration(secs: f64) -> Option<Duration> {
    ((0.0..1e12).contains(&secs)).then(|| Duration::from_secs_f64(secs))
}

pub use overbook_core::model::show_size;

impl<'de> Deserialize<'de> for Size {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Size, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Size;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a size such as \"64GiB\" or a number of bytes")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Size, E> {
                Ok(Size(v))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Size, E> {
                u64::try_from(v)
                    .map(Size)
                    .map_err(|_| E::custom(format!("{v}: a size cannot be negative")))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Size, E> {
                parse_size(v).map(Size).map_err(E::custom)
            }
        }
        d.deserialize_any(V)
    }
}

impl Serialize for Size {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(self.0)
    }
}

impl<'de> Deserialize<'de> for Span {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Span, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Span;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a duration such as \"6h\" or a number of seconds")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Span, E> {
                Ok(Span(Duration::from_secs(v)))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Span, E> {
                u64::try_from(v)
                    .map(|s| Span(Duration::from_secs(s)))
                    .map_err(|_| E::custom(format!("{v}: a duration cannot be negative")))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Span, E> {
                secs_to_duration(v).map(Span).ok_or_else(|| {
                    E::custom(format!("{v}: seconds must be finite and not negative"))
                })
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Span, E> {
                parse_span(v).map(Span).map_err(E::custom)
            }
        }
        d.deserialize_any(V)
    }
}

impl Serialize for Span {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(self.0.as_secs_f64())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_units_and_refuse_nonsense() {
        assert_eq!(parse_size("64GiB"), Ok(64 << 30));
        assert_eq!(parse_size("1.5 G"), Ok(3 << 29));
        assert_eq!(parse_size("512MB"), Ok(512_000_000));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert!(parse_size("lots").unwrap_err().contains("not a size"));
        assert!(parse_size("3 parsecs").unwrap_err().contains("unknown size unit"));
    }

    #[test]
    fn spans_parse_as_seconds_or_with_units() {
        assert_eq!(parse_span("90"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_span("6h"), Ok(Duration::from_secs(6 * 3600)));
        assert_eq!(parse_span("250ms"), Ok(Duration::from_millis(250)));
        assert!(parse_span("-3").is_err());
        assert!(parse_span("soon").unwrap_err().contains("not a duration"));
    }

    #[test]
    fn show_size_picks_a_unit() {
        assert_eq!(show_size(512), "512 B");
        assert_eq!(show_size(3 << 29), "1.5 GiB");
    }
}

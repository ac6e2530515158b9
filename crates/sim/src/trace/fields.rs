//! Reading one field of a row: numbers from text or JSON, each failure a
//! sentence naming the field, which becomes a bad row's `problem`.

use overbook_core::Bytes;
use serde_json::Value;

/// A field of a row before it is read: CSV gives text, JSON gives values
/// (BigQuery exports 64-bit integers as strings, so both reach the same
/// parsers).
#[derive(Clone, Copy, Debug)]
pub(crate) enum Field<'a> {
    /// Absent, JSON `null`, or empty text.
    Missing,
    Text(&'a str),
    Json(&'a Value),
}

impl<'a> Field<'a> {
    pub fn text(s: &'a str) -> Field<'a> {
        let s = s.trim();
        if s.is_empty() {
            Field::Missing
        } else {
            Field::Text(s)
        }
    }

    pub fn json(v: Option<&'a Value>) -> Field<'a> {
        match v {
            None | Some(Value::Null) => Field::Missing,
            Some(Value::String(s)) => Field::text(s),
            Some(v) => Field::Json(v),
        }
    }

    /// The field as text; JSON numbers and booleans are spelled out, so that
    /// identifiers written either way read the same.
    pub fn string(self, what: &str) -> Result<Option<String>, String> {
        match self {
            Field::Missing => Ok(None),
            Field::Text(s) => Ok(Some(s.to_string())),
            Field::Json(v @ (Value::Number(_) | Value::Bool(_))) => Ok(Some(v.to_string())),
            Field::Json(v) => Err(format!("{what}: expected text, found {}", kind(v))),
        }
    }

    /// A whole number that may not be negative.
    pub fn u64(self, what: &str) -> Result<Option<u64>, String> {
        match self {
            Field::Missing => Ok(None),
            Field::Text(s) => parse_u64(what, s).map(Some),
            Field::Json(Value::Number(n)) => match n.as_u64() {
                Some(v) => Ok(Some(v)),
                None => parse_u64(what, &n.to_string()).map(Some),
            },
            Field::Json(v) => Err(format!("{what}: expected a number, found {}", kind(v))),
        }
    }

    /// A finite number that may not be negative.
    pub fn f64(self, what: &str) -> Result<Option<f64>, String> {
        self.signed_f64(what)?
            .map(|v| if v < 0.0 { Err(format!("{what}: {v} is negative")) } else { Ok(v) })
            .transpose()
    }

    /// A finite number of either sign (for fields whose negative values mean
    /// something, such as Alibaba's `-1` for "invalid").
    pub fn signed_f64(self, what: &str) -> Result<Option<f64>, String> {
        let v = match self {
            Field::Missing => return Ok(None),
            Field::Text(s) => {
                s.parse::<f64>().map_err(|_| format!("{what}: {s:?} is not a number"))?
            }
            Field::Json(Value::Number(n)) => {
                n.as_f64().ok_or_else(|| format!("{what}: {n} is not a number"))?
            }
            Field::Json(v) => return Err(format!("{what}: expected a number, found {}", kind(v))),
        };
        if v.is_finite() {
            Ok(Some(v))
        } else {
            Err(format!("{what}: {v} is not a finite number"))
        }
    }
}

fn parse_u64(what: &str, s: &str) -> Result<u64, String> {
    s.parse::<u64>().map_err(|_| {
        if s.parse::<i128>().is_ok_and(|v| v < 0) {
            format!("{what}: {s} is negative")
        } else {
            format!("{what}: {s:?} is not a whole number")
        }
    })
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "text",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// `Ok(Some(v))` to `Ok(v)`, a missing field to an error naming it.
pub(crate) fn required<T>(what: &str, v: Result<Option<T>, String>) -> Result<T, String> {
    v?.ok_or_else(|| format!("{what} is missing"))
}

/// A non-negative, finite number of bytes (callers check sign and
/// finiteness; the `as` saturates above `u64::MAX`).
pub(crate) fn to_bytes(b: f64) -> Bytes {
    if b.is_finite() && b > 0.0 {
        overbook_core::convert::to_u64(b.round())
    } else {
        0
    }
}

/// Seconds (or milliseconds times 1e-3) as whole microseconds.
pub(crate) fn secs_to_us(secs: f64) -> u64 {
    if secs.is_finite() && secs > 0.0 {
        overbook_core::convert::to_u64((secs * 1e6).round())
    } else {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn numbers_read_from_text_and_json_alike() {
        assert_eq!(Field::text(" 42 ").u64("x"), Ok(Some(42)));
        assert_eq!(Field::json(Some(&json!("42"))).u64("x"), Ok(Some(42)));
        assert_eq!(Field::json(Some(&json!(42))).u64("x"), Ok(Some(42)));
        assert_eq!(Field::text("").u64("x"), Ok(None));
        assert_eq!(Field::json(Some(&json!(null))).f64("x"), Ok(None));
        assert_eq!(Field::json(Some(&json!(0.5))).f64("x"), Ok(Some(0.5)));
    }

    #[test]
    fn failures_name_the_field_and_the_problem() {
        assert_eq!(Field::text("-5").u64("time"), Err("time: -5 is negative".into()));
        assert_eq!(
            Field::text("abc").u64("time"),
            Err("time: \"abc\" is not a whole number".into())
        );
        assert_eq!(Field::text("-0.5").f64("memory"), Err("memory: -0.5 is negative".into()));
        assert_eq!(
            Field::text("NaN").f64("memory"),
            Err("memory: NaN is not a finite number".into())
        );
        assert_eq!(
            Field::json(Some(&json!([1]))).u64("time"),
            Err("time: expected a number, found an array".into())
        );
        assert_eq!(
            required("job ID", Field::Missing.u64("job ID")),
            Err("job ID is missing".into())
        );
    }
}

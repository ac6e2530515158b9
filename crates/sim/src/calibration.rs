//! The thrashing calibration: how fast a node's tasks run when its memory
//! demand exceeds its capacity, and what fault counters that shows, measured
//! on a real node (`calibration/default.toml`, produced by
//! `tools/calibrate/run.sh`; its header documents the method and machine).
//!
//! # The file (format version 1)
//!
//! ```toml
//! version = 1
//! [machine]            # where and how it was measured (free text, optional)
//! [method]             # the measurement's parameters (optional)
//! [anon]               # anonymous memory squeezed into swap: the model's curve
//! baseline_touches_per_sec = 4.8e7   # optional, for the record
//! points = [
//!   { squeeze = 1.1, speed = 0.26, major_faults = 9070, refaults = 9096 },
//! ]
//! [file]               # page cache squeezed (optional, same shape)
//! ```
//!
//! `squeeze` is demand / capacity, strictly increasing; `speed` is progress
//! relative to an unsqueezed node, in (0, 1], exactly 1 at or under capacity
//! and never rising with the squeeze; `major_faults` and `refaults` are the
//! whole node's events per second at that squeeze.
//!
//! # The model
//!
//! `speed` is 1 up to capacity. Above it, the log of the speed is linear in
//! the squeeze between the measured points, starting from (1, 1): speeds span
//! orders of magnitude (0.5 to 0.0005 on the first host), so interpolating
//! the log keeps a point's neighbourhood at its own order of magnitude, and
//! a line between two non-increasing points never rises. Beyond the last
//! point, the last point's values hold. Fault rates are linear in the squeeze
//! from zero at capacity, and are the node's: [`Curve::fault_rates`] divides
//! them by the node's demand in GiB, so that the engine, which multiplies by
//! each task's GiB, hands out the node's measured rate in proportion to the
//! memory each task holds (a swap device serves so many faults per second,
//! however many tasks share it).

use crate::engine::ThrashModel;
use overbook_core::Bytes;
use serde::Deserialize;
use std::fmt;
use std::path::Path;

/// The calibration shipped with overbook, measured on its development host.
pub const DEFAULT_TOML: &str = include_str!("../../../calibration/default.toml");

/// The format version this build reads.
pub const FORMAT_VERSION: i64 = 1;

const GIB: f64 = (1u64 << 30) as f64;

/// A calibration that cannot be used: the key (`anon.points[3].speed`) and
/// what is wrong with it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct CalibrationError {
    /// Where: a dotted key path, empty for the file as a whole.
    pub key: String,
    pub problem: String,
}

impl fmt::Display for CalibrationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.key.is_empty() {
            f.write_str(&self.problem)
        } else {
            write!(f, "{}: {}", self.key, self.problem)
        }
    }
}

fn invalid(key: impl Into<String>, problem: impl Into<String>) -> CalibrationError {
    CalibrationError { key: key.into(), problem: problem.into() }
}

/// Where the calibration was measured (free text, for reports).
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Machine {
    pub kernel: String,
    pub cpu: String,
    pub cores: u32,
    /// Bytes of memory.
    pub memory: Bytes,
    /// The swap device.
    pub swap: String,
    /// When (RFC 3339).
    pub date: String,
    /// The command that produced the file.
    pub command: String,
}

/// How it was measured.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Method {
    /// The node cgroup's memory limit, bytes.
    pub node_limit: Bytes,
    pub workers: u32,
    pub repetitions: u32,
    pub warm_secs: f64,
    pub measure_secs: f64,
    pub swappiness: u32,
}

/// One measured point of a curve.
#[derive(Clone, Copy, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Point {
    /// Demand / capacity.
    pub squeeze: f64,
    /// Progress relative to the unsqueezed node, (0, 1].
    pub speed: f64,
    /// The node's major faults per second.
    pub major_faults: f64,
    /// The node's refaults (anon + file) per second.
    pub refaults: f64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCurve {
    #[serde(default)]
    baseline_touches_per_sec: Option<f64>,
    points: Vec<Point>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    #[allow(dead_code)] // checked before the typed parse, kept for deny_unknown_fields
    version: i64,
    #[serde(default)]
    machine: Machine,
    #[serde(default)]
    method: Method,
    anon: RawCurve,
    #[serde(default)]
    file: Option<RawCurve>,
}

/// A validated thrashing curve, ready to evaluate.
///
/// The knots are the model's: (1, speed 1, no faults) then every measured
/// point above capacity, with the log of each speed precomputed, so that an
/// evaluation is a binary search over a handful of knots and one `exp`.
#[derive(Clone, Debug, PartialEq)]
pub struct Curve {
    points: Vec<Point>,
    baseline_touches_per_sec: Option<f64>,
    knot_squeeze: Vec<f64>,
    knot_ln_speed: Vec<f64>,
    knot_major: Vec<f64>,
    knot_refault: Vec<f64>,
}

impl Curve {
    /// Check `points` (reported under `key`, e.g. `anon.points`) and build the model.
    pub fn new(points: Vec<Point>, key: &str) -> Result<Curve, CalibrationError> {
        let mut previous: Option<Point> = None;
        for (i, p) in points.iter().enumerate() {
            let at = |field: &str| format!("{key}[{i}].{field}");
            if !(p.squeeze.is_finite() && p.squeeze > 0.0) {
                return Err(invalid(
                    at("squeeze"),
                    format!("must be a positive number, got {}", p.squeeze),
                ));
            }
            if !(p.speed.is_finite() && p.speed > 0.0 && p.speed <= 1.0) {
                return Err(invalid(at("speed"), format!("must be in (0, 1], got {}", p.speed)));
            }
            if p.squeeze <= 1.0 && p.speed != 1.0 {
                return Err(invalid(
                    at("speed"),
                    format!(
                        "must be 1 at or under capacity (squeeze {} <= 1), got {}",
                        p.squeeze, p.speed
                    ),
                ));
            }
            for (field, value) in [("major_faults", p.major_faults), ("refaults", p.refaults)] {
                if !(value.is_finite() && value >= 0.0) {
                    return Err(invalid(
                        at(field),
                        format!("must be a rate per second, zero or more, got {value}"),
                    ));
                }
            }
            if let Some(prev) = previous {
                if p.squeeze <= prev.squeeze {
                    return Err(invalid(
                        at("squeeze"),
                        format!(
                            "must be greater than {key}[{}].squeeze ({}): squeezes strictly increase",
                            i - 1,
                            prev.squeeze
                        ),
                    ));
                }
                if p.speed > prev.speed {
                    return Err(invalid(
                        at("speed"),
                        format!(
                            "{} is above {key}[{}].speed ({}): speed cannot rise with the squeeze",
                            p.speed,
                            i - 1,
                            prev.speed
                        ),
                    ));
                }
            }
            previous = Some(*p);
        }
        if !points.iter().any(|p| p.squeeze > 1.0) {
            return Err(invalid(key, "needs at least one point above capacity (squeeze > 1)"));
        }

        let above = points.iter().filter(|p| p.squeeze > 1.0);
        let knot_squeeze = std::iter::once(1.0).chain(above.clone().map(|p| p.squeeze)).collect();
        let knot_ln_speed =
            std::iter::once(0.0).chain(above.clone().map(|p| p.speed.ln())).collect();
        let knot_major =
            std::iter::once(0.0).chain(above.clone().map(|p| p.major_faults)).collect();
        let knot_refault = std::iter::once(0.0).chain(above.map(|p| p.refaults)).collect();
        Ok(Curve {
            points,
            baseline_touches_per_sec: None,
            knot_squeeze,
            knot_ln_speed,
            knot_major,
            knot_refault,
        })
    }

    /// The measured points, as in the file.
    pub fn points(&self) -> &[Point] {
        &self.points
    }

    /// The unsqueezed rate the measurement saw, if the file says.
    pub fn baseline_touches_per_sec(&self) -> Option<f64> {
        self.baseline_touches_per_sec
    }

    /// Where `squeeze` falls: the knot segment `(i - 1, i)` and the fraction
    /// along it, or `None` at or under capacity; clamped to the last knot.
    fn locate(&self, squeeze: f64) -> Option<(usize, f64)> {
        if squeeze.is_nan() || squeeze <= 1.0 {
            return None;
        }
        let last = self.knot_squeeze.len() - 1;
        // knot_squeeze[0] = 1 < squeeze, so the first knot >= squeeze is at 1 or later.
        let i = self.knot_squeeze.partition_point(|&k| k < squeeze);
        if i > last {
            return Some((last, 1.0));
        }
        let (k0, k1) = (self.knot_squeeze[i - 1], self.knot_squeeze[i]);
        Some((i, (squeeze - k0) / (k1 - k0)))
    }

    /// Relative speed at `squeeze` = demand / capacity.
    pub fn speed_at(&self, squeeze: f64) -> f64 {
        match self.locate(squeeze) {
            None => 1.0,
            Some((i, t)) => {
                let (a, b) = (self.knot_ln_speed[i - 1], self.knot_ln_speed[i]);
                (a + t * (b - a)).exp().min(1.0)
            }
        }
    }

    /// The node's (major faults/s, refaults/s) at `squeeze`.
    pub fn node_fault_rates_at(&self, squeeze: f64) -> (f64, f64) {
        match self.locate(squeeze) {
            None => (0.0, 0.0),
            Some((i, t)) => {
                let lerp = |v: &[f64]| v[i - 1] + t * (v[i] - v[i - 1]);
                (lerp(&self.knot_major), lerp(&self.knot_refault))
            }
        }
    }

    /// Relative speed of tasks on a node holding `demand` in `capacity`.
    pub fn speed(&self, demand: Bytes, capacity: Bytes) -> f64 {
        if demand <= capacity {
            return 1.0;
        }
        // A node with no memory at all is past any measured squeeze.
        let squeeze = if capacity == 0 { f64::INFINITY } else { demand as f64 / capacity as f64 };
        self.speed_at(squeeze)
    }

    /// Major faults and refaults per second per GiB of the node's demand: a
    /// task holding g GiB sees g times these, and the node's tasks together
    /// see the node's measured rates.
    pub fn fault_rates(&self, demand: Bytes, capacity: Bytes) -> (f64, f64) {
        if demand <= capacity {
            return (0.0, 0.0);
        }
        let squeeze = if capacity == 0 { f64::INFINITY } else { demand as f64 / capacity as f64 };
        let (major, refault) = self.node_fault_rates_at(squeeze);
        let gib = demand as f64 / GIB;
        (major / gib, refault / gib)
    }
}

impl ThrashModel for Curve {
    fn speed(&self, demand: Bytes, capacity: Bytes) -> f64 {
        Curve::speed(self, demand, capacity)
    }
    fn fault_rates(&self, demand: Bytes, capacity: Bytes) -> (f64, f64) {
        Curve::fault_rates(self, demand, capacity)
    }
}

/// A parsed, validated calibration file.
#[derive(Clone, Debug, PartialEq)]
pub struct Calibration {
    pub machine: Machine,
    pub method: Method,
    /// Anonymous memory squeezed into swap: the simulator's model.
    pub anon: Curve,
    /// Page cache squeezed, where measured.
    pub file: Option<Curve>,
}

impl Calibration {
    /// The calibration shipped with overbook ([`DEFAULT_TOML`]).
    pub fn builtin() -> Result<Calibration, CalibrationError> {
        Calibration::from_toml(DEFAULT_TOML)
    }

    /// Read a calibration file.
    pub fn load(path: &Path) -> Result<Calibration, CalibrationError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| invalid("", format!("{}: {e}", path.display())))?;
        Calibration::from_toml(&text).map_err(|e| CalibrationError {
            problem: format!("{} (in {})", e.problem, path.display()),
            ..e
        })
    }

    /// Parse and validate a calibration from TOML text.
    pub fn from_toml(text: &str) -> Result<Calibration, CalibrationError> {
        let table: toml::Table = text.parse().map_err(|e: toml::de::Error| {
            invalid("", format!("not valid TOML: {}", e.message()))
        })?;
        // The version first: a newer file should say so, not fail on its new keys.
        match table.get("version") {
            None => {
                return Err(invalid(
                    "version",
                    format!("missing (this build reads version = {FORMAT_VERSION})"),
                ))
            }
            Some(toml::Value::Integer(v)) if *v == FORMAT_VERSION => {}
            Some(other) => {
                return Err(invalid(
                    "version",
                    format!("must be {FORMAT_VERSION} (the format this build reads), got {other}"),
                ))
            }
        }
        let raw: RawFile =
            serde_path_to_error::deserialize(toml::Value::Table(table)).map_err(|e| {
                let key = e.path().to_string();
                let key = if key == "." { String::new() } else { key };
                invalid(key, e.into_inner().message().to_string())
            })?;
        let curve = |raw: RawCurve, key: &str| -> Result<Curve, CalibrationError> {
            if let Some(b) = raw.baseline_touches_per_sec {
                if !(b.is_finite() && b > 0.0) {
                    return Err(invalid(
                        format!("{key}.baseline_touches_per_sec"),
                        format!("must be a positive rate, got {b}"),
                    ));
                }
            }
            let mut c = Curve::new(raw.points, &format!("{key}.points"))?;
            c.baseline_touches_per_sec = raw.baseline_touches_per_sec;
            Ok(c)
        };
        Ok(Calibration {
            machine: raw.machine,
            method: raw.method,
            anon: curve(raw.anon, "anon")?,
            file: raw.file.map(|f| curve(f, "file")).transpose()?,
        })
    }

    /// Relative speed of tasks on a node holding `demand` in `capacity` (the anon curve).
    pub fn speed(&self, demand: Bytes, capacity: Bytes) -> f64 {
        self.anon.speed(demand, capacity)
    }

    /// Major faults/s and refaults/s per GiB held (the anon curve; see [`Curve::fault_rates`]).
    pub fn fault_rates(&self, demand: Bytes, capacity: Bytes) -> (f64, f64) {
        self.anon.fault_rates(demand, capacity)
    }
}

impl ThrashModel for Calibration {
    fn speed(&self, demand: Bytes, capacity: Bytes) -> f64 {
        self.anon.speed(demand, capacity)
    }
    fn fault_rates(&self, demand: Bytes, capacity: Bytes) -> (f64, f64) {
        self.anon.fault_rates(demand, capacity)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB_BYTES: Bytes = 1 << 30;

    fn builtin() -> Calibration {
        match Calibration::builtin() {
            Ok(c) => c,
            Err(e) => panic!("the shipped calibration does not load: {e}"),
        }
    }

    /// A minimal file with these anon points.
    fn file_with_points(points: &str) -> String {
        format!("version = 1\n[anon]\npoints = [\n{points}\n]\n")
    }

    const GOOD: &str = "\
        { squeeze = 0.9, speed = 1.0, major_faults = 0, refaults = 0 },\n\
        { squeeze = 1.1, speed = 0.5, major_faults = 1000, refaults = 1000 },\n\
        { squeeze = 1.5, speed = 0.01, major_faults = 20000, refaults = 20000 },\n\
        { squeeze = 2.0, speed = 0.001, major_faults = 20000, refaults = 21000 },";

    fn error_of(text: &str) -> CalibrationError {
        match Calibration::from_toml(text) {
            Ok(_) => panic!("accepted:\n{text}"),
            Err(e) => e,
        }
    }

    #[test]
    fn the_default_file_parses_and_has_a_steep_anon_curve() {
        let c = builtin();
        assert!(!c.machine.kernel.is_empty() && !c.machine.command.is_empty());
        assert!(c.anon.points().len() >= 5);
        // Measured, not made up: the curve really falls, by orders of magnitude.
        let last = c.anon.points().last().map(|p| p.speed).unwrap_or(1.0);
        assert!(last < 0.1, "last anon speed {last}");
        assert!(c.anon.points().iter().any(|p| p.major_faults > 1000.0));
    }

    #[test]
    fn speed_is_one_at_or_under_capacity() {
        let c = builtin();
        for (demand, capacity) in
            [(0, 0), (0, GIB_BYTES), (GIB_BYTES, GIB_BYTES), (GIB_BYTES / 2, GIB_BYTES)]
        {
            assert_eq!(c.speed(demand, capacity), 1.0);
            assert_eq!(c.fault_rates(demand, capacity), (0.0, 0.0));
        }
        assert!(c.speed(GIB_BYTES + 4096, GIB_BYTES) < 1.0);
        assert!(c.speed(GIB_BYTES + 4096, GIB_BYTES) > 0.99, "continuous at capacity");
    }

    #[test]
    fn speed_matches_the_measured_points_above_capacity() {
        let good = match Calibration::from_toml(&file_with_points(GOOD)) {
            Ok(c) => c.anon,
            Err(e) => panic!("{e}"),
        };
        for c in [builtin().anon, good] {
            for p in c.points().iter().filter(|p| p.squeeze > 1.0) {
                let s = c.speed_at(p.squeeze);
                assert!((s - p.speed).abs() <= 1e-9 * p.speed.max(1e-300) + 1e-15, "{p:?}: {s}");
                let (major, refault) = c.node_fault_rates_at(p.squeeze);
                assert!(
                    (major - p.major_faults).abs() < 1e-6 && (refault - p.refaults).abs() < 1e-6
                );
            }
        }
    }

    #[test]
    fn speed_is_monotone_and_clamped_beyond_the_last_point() {
        for c in [
            builtin().anon,
            Calibration::from_toml(&file_with_points(GOOD))
                .map(|c| c.anon)
                .unwrap_or_else(|e| panic!("{e}")),
        ] {
            let mut last = 1.0;
            for i in 0..=4000 {
                let squeeze = 0.5 + i as f64 * 0.001;
                let s = c.speed_at(squeeze);
                assert!(s > 0.0 && s <= last + 1e-15, "rises at {squeeze}: {last} -> {s}");
                last = s;
            }
            let end = c.points().last().map(|p| (p.squeeze, p.speed)).unwrap_or((1.0, 1.0));
            assert_eq!(c.speed_at(end.0 * 10.0), c.speed_at(end.0));
            assert!((c.speed_at(f64::INFINITY) - end.1).abs() < 1e-12);
            assert_eq!(c.speed(GIB_BYTES, 0), c.speed_at(f64::INFINITY));
        }
    }

    #[test]
    fn interpolation_is_log_linear_between_points() {
        let c = match Calibration::from_toml(&file_with_points(GOOD)) {
            Ok(c) => c.anon,
            Err(e) => panic!("{e}"),
        };
        // Halfway from (1.1, 0.5) to (1.5, 0.01): the geometric mean.
        let s = c.speed_at(1.3);
        assert!((s - (0.5f64 * 0.01).sqrt()).abs() < 1e-12, "{s}");
        // Halfway from the (1, 1) anchor to (1.1, 0.5).
        assert!((c.speed_at(1.05) - 0.5f64.sqrt()).abs() < 1e-12);
        // Fault rates are linear from zero at capacity.
        let (major, _) = c.node_fault_rates_at(1.05);
        assert!((major - 500.0).abs() < 1e-9);
    }

    #[test]
    fn fault_rates_share_the_nodes_rate_by_gib_held() {
        let c = match Calibration::from_toml(&file_with_points(GOOD)) {
            Ok(c) => c,
            Err(e) => panic!("{e}"),
        };
        // 2 GiB in a node of 1 GiB: squeeze 2, node rates (20000, 21000).
        let (major, refault) = c.fault_rates(2 * GIB_BYTES, GIB_BYTES);
        assert!((major * 2.0 - 20000.0).abs() < 1e-6 && (refault * 2.0 - 21000.0).abs() < 1e-6);
    }

    #[test]
    fn bad_files_name_the_key_and_the_problem() {
        let cases: [(String, &str, &str); 10] = [
            (
                file_with_points(&GOOD.replace("speed = 0.01", "speed = 1.5")),
                "anon.points[2].speed",
                "must be in (0, 1]",
            ),
            (
                file_with_points(&GOOD.replace("speed = 0.001", "speed = 0")),
                "anon.points[3].speed",
                "must be in (0, 1]",
            ),
            (
                file_with_points(&GOOD.replace("squeeze = 1.5", "squeeze = 1.1")),
                "anon.points[2].squeeze",
                "strictly increase",
            ),
            (
                file_with_points(&GOOD.replace("speed = 0.001", "speed = 0.2")),
                "anon.points[3].speed",
                "cannot rise",
            ),
            (
                file_with_points(&GOOD.replace("speed = 1.0", "speed = 0.9")),
                "anon.points[0].speed",
                "at or under capacity",
            ),
            (
                file_with_points(&GOOD.replace("major_faults = 1000", "major_faults = -1")),
                "anon.points[1].major_faults",
                "zero or more",
            ),
            (
                file_with_points(&GOOD.replace("refaults = 1000", "refualts = 1000")),
                "anon.points[1].refualts",
                "unknown field `refualts`",
            ),
            (
                file_with_points("{ squeeze = 0.9, speed = 1.0, major_faults = 0, refaults = 0 },"),
                "anon.points",
                "above capacity",
            ),
            (file_with_points(GOOD).replace("version = 1", "version = 2"), "version", "must be 1"),
            (file_with_points(GOOD).replace("version = 1\n", ""), "version", "missing"),
        ];
        for (text, key, problem) in cases {
            let e = error_of(&text);
            assert_eq!(e.key, key, "{e}");
            assert!(e.problem.contains(problem), "{e}");
            assert!(e.to_string().starts_with(&format!("{key}: ")), "{e}");
        }
        let e = error_of("version = 1\n[anon]\npoints = [ { squeeze = 1.1, speed = \"fast\", major_faults = 0, refaults = 0 } ]\n");
        assert_eq!(e.key, "anon.points[0].speed", "{e}");
        let e = error_of("version = 1\n[anon\n");
        assert!(e.key.is_empty() && e.problem.starts_with("not valid TOML"), "{e}");
        let e = error_of("version = 1\n");
        assert!(e.to_string().contains("anon"), "{e}");
    }

    #[test]
    fn a_file_curve_is_optional_and_checked_when_present() {
        let ok = format!("{}[file]\npoints = [ {{ squeeze = 1.2, speed = 0.1, major_faults = 5, refaults = 5 }} ]\n", file_with_points(GOOD));
        let c = match Calibration::from_toml(&ok) {
            Ok(c) => c,
            Err(e) => panic!("{e}"),
        };
        assert!(c.file.is_some());
        let bad = ok.replace("speed = 0.1", "speed = 2");
        assert_eq!(error_of(&bad).key, "file.points[0].speed");
    }
}

//! The metrics a scenario's `[[paper_numbers]]` may name in `ours`, and the
//! expressions built from them. This is the one list of metric names:
//!
//! * run-wide: [`RunStat::ALL`] (`kills`, `wasted_cpu_hours`, `wasted_pct`,
//!   `energy_kwh`, ...);
//! * per group: `<stat>.<group>` with a stat of [`GroupStat::ALL`] (`jct_p90`,
//!   `jcr`, `response_mean`, ...) and a group of
//!   [`GroupKey::ALL`](super::summary::GroupKey::ALL) (`production`,
//!   `best-effort`, `critical`, `low`, `medium`, `high`).
//!
//! Expressions over them (ratios, reductions) are in [`super::paper`].

use super::summary::{GroupKey, GroupSummary, RunSummary};

/// How a metric's value reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit {
    Count,
    /// Seconds, shown in s/m/h/d.
    Seconds,
    /// A ratio 0–1, shown as a percentage.
    Fraction,
    Percent,
    Hours,
    Kwh,
    NodeSeconds,
    Gigabytes,
}

impl Unit {
    pub fn format(self, v: f64) -> String {
        match self {
            Unit::Count => compact(v),
            Unit::Seconds => human_secs(v),
            Unit::Fraction => format!("{:.1}%", 100.0 * v),
            Unit::Percent => format!("{v:.1}%"),
            Unit::Hours => format!("{} h", compact(v)),
            Unit::Kwh => format!("{} kWh", compact(v)),
            Unit::NodeSeconds => format!("{} node-s", compact(v)),
            Unit::Gigabytes => format!("{} GB", compact(v)),
        }
    }
}

/// A statistic of one group of a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GroupStat {
    Tasks,
    Jobs,
    CompletedJobs,
    Jcr,
    JctP50,
    JctP90,
    JctP95,
    JctP99,
    ResponseMean,
    Kills,
    Suspensions,
    Checkpoints,
    IncrementalCheckpoints,
    RemoteResumes,
    Restarts,
    Rejections,
    ThrashingTaskHours,
    WastedCpuHours,
}

impl GroupStat {
    pub const ALL: [GroupStat; 18] = [
        GroupStat::Tasks,
        GroupStat::Jobs,
        GroupStat::CompletedJobs,
        GroupStat::Jcr,
        GroupStat::JctP50,
        GroupStat::JctP90,
        GroupStat::JctP95,
        GroupStat::JctP99,
        GroupStat::ResponseMean,
        GroupStat::Kills,
        GroupStat::Suspensions,
        GroupStat::Checkpoints,
        GroupStat::IncrementalCheckpoints,
        GroupStat::RemoteResumes,
        GroupStat::Restarts,
        GroupStat::Rejections,
        GroupStat::ThrashingTaskHours,
        GroupStat::WastedCpuHours,
    ];

    pub fn name(self) -> &'static str {
        match self {
            GroupStat::Tasks => "tasks",
            GroupStat::Jobs => "jobs",
            GroupStat::CompletedJobs => "completed_jobs",
            GroupStat::Jcr => "jcr",
            GroupStat::JctP50 => "jct_p50",
            GroupStat::JctP90 => "jct_p90",
            GroupStat::JctP95 => "jct_p95",
            GroupStat::JctP99 => "jct_p99",
            GroupStat::ResponseMean => "response_mean",
            GroupStat::Kills => "kills",
            GroupStat::Suspensions => "suspensions",
            GroupStat::Checkpoints => "checkpoints",
            GroupStat::IncrementalCheckpoints => "incremental_checkpoints",
            GroupStat::RemoteResumes => "remote_resumes",
            GroupStat::Restarts => "restarts",
            GroupStat::Rejections => "rejections",
            GroupStat::ThrashingTaskHours => "thrashing_task_hours",
            GroupStat::WastedCpuHours => "wasted_cpu_hours",
        }
    }

    pub fn unit(self) -> Unit {
        match self {
            GroupStat::Jcr => Unit::Fraction,
            GroupStat::JctP50
            | GroupStat::JctP90
            | GroupStat::JctP95
            | GroupStat::JctP99
            | GroupStat::ResponseMean => Unit::Seconds,
            GroupStat::ThrashingTaskHours | GroupStat::WastedCpuHours => Unit::Hours,
            _ => Unit::Count,
        }
    }

    pub fn of(self, g: &GroupSummary) -> Option<f64> {
        let a = &g.actions;
        match self {
            GroupStat::Tasks => Some(g.tasks as f64),
            GroupStat::Jobs => Some(g.jobs as f64),
            GroupStat::CompletedJobs => Some(g.completed_jobs as f64),
            GroupStat::Jcr => g.jcr,
            GroupStat::JctP50 => g.jct_p50,
            GroupStat::JctP90 => g.jct_p90,
            GroupStat::JctP95 => g.jct_p95,
            GroupStat::JctP99 => g.jct_p99,
            GroupStat::ResponseMean => g.response_mean,
            GroupStat::Kills => Some(a.kills as f64),
            GroupStat::Suspensions => Some(a.suspensions as f64),
            GroupStat::Checkpoints => Some(a.checkpoints as f64),
            GroupStat::IncrementalCheckpoints => Some(a.incremental_checkpoints as f64),
            GroupStat::RemoteResumes => Some(a.remote_resumes as f64),
            GroupStat::Restarts => Some(a.restarts as f64),
            GroupStat::Rejections => Some(a.rejections as f64),
            // A group with no task has no harm to show (and an empty sum is -0).
            GroupStat::ThrashingTaskHours => (g.tasks > 0).then_some(g.thrashing_task_hours),
            GroupStat::WastedCpuHours => Some(g.wasted_cpu_hours),
        }
    }
}

/// A statistic of a whole run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunStat {
    Tasks,
    Jobs,
    Kills,
    Suspensions,
    Checkpoints,
    IncrementalCheckpoints,
    RemoteResumes,
    Restarts,
    Rejections,
    WastedCpuHours,
    BusyCpuHours,
    WastedPct,
    EnergyKwh,
    ThrashingNodeSeconds,
    CheckpointHours,
    CheckpointGbWritten,
    CheckpointGbRead,
    Events,
    SkippedRows,
}

impl RunStat {
    pub const ALL: [RunStat; 19] = [
        RunStat::Tasks,
        RunStat::Jobs,
        RunStat::Kills,
        RunStat::Suspensions,
        RunStat::Checkpoints,
        RunStat::IncrementalCheckpoints,
        RunStat::RemoteResumes,
        RunStat::Restarts,
        RunStat::Rejections,
        RunStat::WastedCpuHours,
        RunStat::BusyCpuHours,
        RunStat::WastedPct,
        RunStat::EnergyKwh,
        RunStat::ThrashingNodeSeconds,
        RunStat::CheckpointHours,
        RunStat::CheckpointGbWritten,
        RunStat::CheckpointGbRead,
        RunStat::Events,
        RunStat::SkippedRows,
    ];

    pub fn name(self) -> &'static str {
        match self {
            RunStat::Tasks => "tasks",
            RunStat::Jobs => "jobs",
            RunStat::Kills => "kills",
            RunStat::Suspensions => "suspensions",
            RunStat::Checkpoints => "checkpoints",
            RunStat::IncrementalCheckpoints => "incremental_checkpoints",
            RunStat::RemoteResumes => "remote_resumes",
            RunStat::Restarts => "restarts",
            RunStat::Rejections => "rejections",
            RunStat::WastedCpuHours => "wasted_cpu_hours",
            RunStat::BusyCpuHours => "busy_cpu_hours",
            RunStat::WastedPct => "wasted_pct",
            RunStat::EnergyKwh => "energy_kwh",
            RunStat::ThrashingNodeSeconds => "thrashing_node_seconds",
            RunStat::CheckpointHours => "checkpoint_hours",
            RunStat::CheckpointGbWritten => "checkpoint_gb_written",
            RunStat::CheckpointGbRead => "checkpoint_gb_read",
            RunStat::Events => "events",
            RunStat::SkippedRows => "skipped_rows",
        }
    }

    pub fn unit(self) -> Unit {
        match self {
            RunStat::WastedCpuHours | RunStat::BusyCpuHours | RunStat::CheckpointHours => {
                Unit::Hours
            }
            RunStat::WastedPct => Unit::Percent,
            RunStat::EnergyKwh => Unit::Kwh,
            RunStat::ThrashingNodeSeconds => Unit::NodeSeconds,
            RunStat::CheckpointGbWritten | RunStat::CheckpointGbRead => Unit::Gigabytes,
            _ => Unit::Count,
        }
    }

    pub fn of(self, s: &RunSummary) -> Option<f64> {
        let a = &s.actions;
        Some(match self {
            RunStat::Tasks => s.tasks as f64,
            RunStat::Jobs => s.jobs as f64,
            RunStat::Kills => a.kills as f64,
            RunStat::Suspensions => a.suspensions as f64,
            RunStat::Checkpoints => a.checkpoints as f64,
            RunStat::IncrementalCheckpoints => a.incremental_checkpoints as f64,
            RunStat::RemoteResumes => a.remote_resumes as f64,
            RunStat::Restarts => a.restarts as f64,
            RunStat::Rejections => a.rejections as f64,
            RunStat::WastedCpuHours => s.wasted_cpu_hours,
            RunStat::BusyCpuHours => s.busy_cpu_hours,
            RunStat::WastedPct => return s.wasted_pct,
            RunStat::EnergyKwh => s.energy_kwh,
            RunStat::ThrashingNodeSeconds => s.thrashing_node_seconds,
            RunStat::CheckpointHours => s.checkpoint_hours,
            RunStat::CheckpointGbWritten => s.checkpoint_gb_written,
            RunStat::CheckpointGbRead => s.checkpoint_gb_read,
            RunStat::Events => s.events as f64,
            RunStat::SkippedRows => s.skipped_rows as f64,
        })
    }
}

/// A named number of a run summary.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Metric {
    Run(RunStat),
    Group(GroupStat, GroupKey),
}

impl Metric {
    /// `kills`, `jct_p90.production`, ...
    pub fn parse(name: &str) -> Result<Metric, String> {
        let name = name.trim();
        let unknown = || format!("unknown metric {name:?}; {}", metric_help());
        match name.split_once('.') {
            None => RunStat::ALL
                .into_iter()
                .find(|s| s.name() == name)
                .map(Metric::Run)
                .ok_or_else(unknown),
            Some((stat, group)) => {
                let stat = GroupStat::ALL.into_iter().find(|s| s.name() == stat);
                match (stat, GroupKey::parse(group)) {
                    (Some(s), Some(g)) => Ok(Metric::Group(s, g)),
                    _ => Err(unknown()),
                }
            }
        }
    }

    pub fn of(self, s: &RunSummary) -> Option<f64> {
        match self {
            Metric::Run(stat) => stat.of(s),
            Metric::Group(stat, key) => s.group(key).and_then(|g| stat.of(g)),
        }
    }

    pub fn unit(self) -> Unit {
        match self {
            Metric::Run(stat) => stat.unit(),
            Metric::Group(stat, _) => stat.unit(),
        }
    }
}

/// Every metric name, for error messages and docs.
pub fn metric_help() -> String {
    let run: Vec<&str> = RunStat::ALL.iter().map(|s| s.name()).collect();
    let stats: Vec<&str> = GroupStat::ALL.iter().map(|s| s.name()).collect();
    let groups: Vec<&str> = GroupKey::ALL.iter().map(|g| g.name()).collect();
    format!(
        "run metrics are {}; group metrics are <stat>.<group> with a stat of {} and a group of {}",
        run.join(", "),
        stats.join(", "),
        groups.join(", ")
    )
}

/// `a / b`, or `None` when `b` is zero (no meaningful ratio).
pub fn ratio(a: f64, b: f64) -> Option<f64> {
    (b != 0.0 && a.is_finite() && b.is_finite()).then(|| a / b)
}

pub fn format_ratio(v: f64) -> String {
    if v.abs() >= 100.0 {
        format!("{v:.0}x")
    } else if v.abs() >= 10.0 {
        format!("{v:.1}x")
    } else {
        format!("{v:.2}x")
    }
}

/// Seconds in the unit that keeps the number short: `42.0s`, `12.5m`, `3.2h`, `1.5d`.
pub fn human_secs(s: f64) -> String {
    if s < 60.0 {
        format!("{s:.1}s")
    } else if s < 3600.0 {
        format!("{:.1}m", s / 60.0)
    } else if s < 86_400.0 {
        format!("{:.1}h", s / 3600.0)
    } else {
        format!("{:.1}d", s / 86_400.0)
    }
}

/// A count or amount in at most about six characters: `12`, `3.4`, `12.3k`, `4.5M`.
pub fn compact(v: f64) -> String {
    let a = v.abs();
    if a >= 1e7 {
        format!("{:.1}M", v / 1e6)
    } else if a >= 1e5 {
        format!("{:.0}k", v / 1e3)
    } else if a >= 100.0 || v.fract() == 0.0 {
        format!("{v:.0}")
    } else if a >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_parse_by_name_and_unknown_ones_are_refused() {
        assert_eq!(Metric::parse("kills").unwrap(), Metric::Run(RunStat::Kills));
        assert_eq!(
            Metric::parse("jct_p90.production").unwrap(),
            Metric::Group(GroupStat::JctP90, GroupKey::PRODUCTION)
        );
        assert_eq!(
            Metric::parse(" response_mean.low ").unwrap(),
            Metric::Group(
                GroupStat::ResponseMean,
                GroupKey::Band(super::super::summary::Band::Low)
            )
        );
        let err = Metric::parse("jct_p90.prod").unwrap_err();
        assert!(err.contains("\"jct_p90.prod\"") && err.contains("best-effort"), "{err}");
        assert!(Metric::parse("jct_p42.production").is_err());
        assert!(Metric::parse("wasted").is_err());
    }

    #[test]
    fn every_named_metric_parses_back() {
        for s in RunStat::ALL {
            assert_eq!(Metric::parse(s.name()).unwrap(), Metric::Run(s));
        }
        for s in GroupStat::ALL {
            for g in GroupKey::ALL {
                let name = format!("{}.{}", s.name(), g.name());
                assert_eq!(Metric::parse(&name).unwrap(), Metric::Group(s, g));
            }
        }
    }

    #[test]
    fn compact_numbers_stay_short() {
        assert_eq!(compact(12.0), "12");
        assert_eq!(compact(3.456), "3.46");
        assert_eq!(compact(123_456.0), "123k");
        assert_eq!(compact(12_345_678.0), "12.3M");
        assert_eq!(human_secs(5400.0), "1.5h");
    }
}

//! `overbook bench calibrate`: how a task's progress falls on this node as
//! its working set is squeezed into swap (`anon`) and as its page cache is
//! reclaimed (`file`), written as the calibration file the simulator's
//! thrashing model reads (format version 1, see `overbook_sim::calibration`).
//!
//! For every squeeze s, one worker with a working set of s × the node limit
//! runs twice: in a node without a limit (its baseline, just before) and in
//! a node with the limit. speed = its touches per second limited / baseline;
//! major faults and refaults are the limited node's, per second, over the
//! same window. Points at or under capacity are speed 1 by the model's
//! definition; speeds are capped at 1 and made non-increasing.

use super::{BenchNode, Worker, WorkloadProgram, MIB};
use overbook_linux::{host, ContainerCgroups, Outcome};
use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// What to measure.
#[derive(Clone, Debug)]
pub struct CalibratePlan {
    pub workload: WorkloadProgram,
    /// The node's memory limit.
    pub limit: u64,
    pub anon_points: Vec<f64>,
    pub file_points: Vec<f64>,
    pub warm: Duration,
    pub window: Duration,
    /// Where the `file` workers' files go (a disk, not tmpfs).
    pub scratch: PathBuf,
    /// The command line, for the file's header.
    pub command: String,
}

/// One measured point.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Measured {
    pub squeeze: f64,
    pub baseline: f64,
    pub limited: f64,
    pub major_faults: f64,
    pub refaults: f64,
}

/// Mean of the `rate` lines a worker prints over `window`, after `warm`.
fn mean_rate(w: &mut Worker, warm: Duration, window: Duration) -> Result<f64, String> {
    let _ = w.drain_rates();
    std::thread::sleep(warm);
    let _ = w.drain_rates();
    let until = Instant::now() + window;
    let mut rates = Vec::new();
    while Instant::now() < until {
        rates.extend(w.rate_within(until.saturating_duration_since(Instant::now())));
        if w.exited() {
            return Err("the worker died while measured".into());
        }
    }
    Ok(if rates.is_empty() { 0.0 } else { rates.iter().sum::<f64>() / rates.len() as f64 })
}

fn args_for(mode: &str, size: u64, file: &str) -> Vec<String> {
    match mode {
        "anon" => vec!["anon".into(), size.to_string()],
        _ => vec!["file".into(), file.to_string(), size.to_string()],
    }
}

/// Measures one squeeze of one mode.
fn point(plan: &CalibratePlan, mode: &str, squeeze: f64, n: usize) -> Result<Measured, String> {
    let size = overbook_core::convert::to_u64(plan.limit as f64 * squeeze).max(MIB);
    let dir = tempfile::Builder::new()
        .prefix("overbook-calibrate-")
        .tempdir_in(&plan.scratch)
        .map_err(|e| format!("scratch directory in {}: {e}", plan.scratch.display()))?;
    let file = dir.path().join("working-set").to_string_lossy().to_string();
    let args = args_for(mode, size, &file);
    let pid = std::process::id();
    let baseline = {
        let mut node = BenchNode::new(&format!("overbook-calibrate-{pid}-{n}-base"), None)?;
        let mut w = node.worker(&plan.workload, "worker", &args)?;
        w.ready(Duration::from_secs(120))?;
        let rate = mean_rate(&mut w, plan.warm, plan.window)?;
        if rate <= 0.0 {
            return Err(format!(
                "{mode} squeeze {squeeze}: the unlimited worker reported no rate in {:?}",
                plan.window
            ));
        }
        rate
    };
    // The file's pages were charged to the baseline node; drop them so the
    // limited run reads its working set in for itself.
    let _ = std::fs::File::open(&file).map(|f| {
        let _ = rustix::fs::fadvise(&f, 0, None, rustix::fs::Advice::DontNeed);
    });
    let mut node = BenchNode::new(&format!("overbook-calibrate-{pid}-{n}"), Some(plan.limit))?;
    // v1: a charge reclaim cannot satisfy waits instead of OOM-killing the
    // worker; that stall is part of the slowdown.
    let _ = std::fs::write(node.dir(None).join("memory.oom_control"), "1");
    let mut w = node.worker(&plan.workload, "worker", &args)?;
    w.ready(Duration::from_secs(300))?;
    let root = node.root.clone();
    let read = |node: &BenchNode| -> Result<(u64, u64), String> {
        match node.cg.counters(&root).map_err(|e| e.to_string())? {
            Outcome::Done(c) => Ok((
                c.major_faults,
                c.refault_anon.unwrap_or(0).saturating_add(c.refault_file.unwrap_or(0)),
            )),
            Outcome::Vanished => Err("the node vanished".into()),
        }
    };
    std::thread::sleep(plan.warm);
    let (m0, r0) = read(&node)?;
    let started = Instant::now();
    let limited = mean_rate(&mut w, Duration::ZERO, plan.window)?;
    let secs = started.elapsed().as_secs_f64();
    let (m1, r1) = read(&node)?;
    Ok(Measured {
        squeeze,
        baseline,
        limited,
        major_faults: m1.saturating_sub(m0) as f64 / secs,
        refaults: r1.saturating_sub(r0) as f64 / secs,
    })
}

/// The curve as the model wants it: speed 1 at or under capacity, capped
/// at 1, never rising with the squeeze, never zero.
pub fn speeds(points: &[Measured]) -> Vec<f64> {
    let mut floor: f64 = 1.0;
    points
        .iter()
        .map(|p| {
            let raw =
                if p.squeeze <= 1.0 || p.baseline <= 0.0 { 1.0 } else { p.limited / p.baseline };
            floor = floor.min(raw.clamp(1e-6, 1.0));
            if p.squeeze <= 1.0 {
                1.0
            } else {
                floor
            }
        })
        .collect()
}

/// Runs every point and returns the calibration file's text.
pub fn run(plan: &CalibratePlan, mut say: impl FnMut(&str)) -> Result<String, String> {
    let mut curves = Vec::new();
    let mut n = 0;
    for (mode, points) in [("anon", &plan.anon_points), ("file", &plan.file_points)] {
        if points.is_empty() {
            continue;
        }
        let mut measured = Vec::new();
        for &s in points {
            n += 1;
            let p = point(plan, mode, s, n)?;
            say(&format!(
                "{mode} squeeze {s:.2}: {:.3e} → {:.3e} touches/s, {:.0} major faults/s, {:.0} refaults/s",
                p.baseline, p.limited, p.major_faults, p.refaults
            ));
            measured.push(p);
        }
        curves.push((mode, measured));
    }
    Ok(render(plan, &curves))
}

fn render(plan: &CalibratePlan, curves: &[(&str, Vec<Measured>)]) -> String {
    let mem = host::meminfo().ok();
    let kernel = host::kernel_release().unwrap_or_default();
    let cpu = host::cpu_model().ok().flatten().unwrap_or_default();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let date = humantime::format_rfc3339_seconds(std::time::SystemTime::now());
    let q = |s: &str| s.replace('\\', "\\\\").replace('"', "\\\"");
    let mut out = String::new();
    let _ =
        writeln!(out, "# overbook thrashing calibration, written by `overbook bench calibrate`.");
    let _ = writeln!(
        out,
        "# squeeze = working set / node limit; speed = touches/s in the limited node"
    );
    let _ =
        writeln!(out, "# / touches/s of the same worker in an unlimited node just before; faults");
    let _ =
        writeln!(out, "# are the limited node's per second over the window. `anon` writes random");
    let _ =
        writeln!(out, "# pages of anonymous memory (evictions go to swap), `file` reads random");
    let _ = writeln!(out, "# pages of a file with pread (evictions drop page cache).");
    let _ = writeln!(out, "version = 1\n\n[machine]");
    let _ = writeln!(out, "kernel = \"{}\"", q(&kernel));
    let _ = writeln!(out, "cpu = \"{}\"", q(&cpu));
    let _ = writeln!(out, "cores = {cores}");
    let _ = writeln!(out, "memory = {}", mem.map_or(0, |m| m.total));
    let swap = mem.map_or("unknown".to_string(), |m| format!("{} MiB of swap", m.swap_total / MIB));
    let _ = writeln!(out, "swap = \"{}\"", q(&swap));
    let _ = writeln!(out, "date = \"{date}\"");
    let _ = writeln!(out, "command = \"{}\"\n\n[method]", q(&plan.command));
    let _ = writeln!(out, "node_limit = {}", plan.limit);
    let _ = writeln!(out, "workers = 1\nrepetitions = 1");
    let _ = writeln!(out, "warm_secs = {}", plan.warm.as_secs_f64());
    let _ = writeln!(out, "measure_secs = {}", plan.window.as_secs_f64());
    let swappiness = host::swappiness().unwrap_or(60);
    let _ = writeln!(out, "swappiness = {swappiness}");
    for (mode, points) in curves {
        let speeds = speeds(points);
        let baseline = points.iter().map(|p| p.baseline).fold(0.0, f64::max);
        let _ = writeln!(out, "\n[{mode}]\nbaseline_touches_per_sec = {baseline:.4e}\npoints = [");
        for (p, s) in points.iter().zip(speeds) {
            let _ = writeln!(
                out,
                "    {{ squeeze = {}, speed = {s:.6}, major_faults = {:.0}, refaults = {:.0} }},",
                p.squeeze, p.major_faults, p.refaults
            );
        }
        let _ = writeln!(out, "]");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(squeeze: f64, limited: f64) -> Measured {
        Measured { squeeze, baseline: 100.0, limited, major_faults: 0.0, refaults: 0.0 }
    }

    #[test]
    fn speeds_are_one_under_capacity_capped_and_never_rising() {
        let s = speeds(&[m(0.9, 80.0), m(1.1, 120.0), m(1.2, 10.0), m(1.5, 20.0), m(2.0, 0.0)]);
        assert_eq!(s, vec![1.0, 1.0, 0.1, 0.1, 1e-6]);
    }
}

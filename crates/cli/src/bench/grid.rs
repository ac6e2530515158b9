//! `overbook bench sim`: the simulator's speed and memory at Google scale,
//! one run, or (`--grid`) how they grow with the cluster and the span, each
//! point run as a process of its own so that its peak memory is its own.

use crate::huge_pages::HugePages;
use anyhow::{bail, Context, Result};
use overbook_sim::scenario::{self, Scenario};
use overbook_sim::tally::Outcomes;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

#[derive(Debug, clap::Args)]
pub struct SimArgs {
    /// Override settings of the `scale` scenario (`--set cluster.nodes=1000`);
    /// with --grid, of every point.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    set: Vec<String>,
    /// Run the grid: 1,000, 2,500, 5,000 and 12,500 nodes over a day, and
    /// 1,000 nodes over 7 and 29 days (about 5 minutes on one idle core).
    #[arg(long)]
    grid: bool,
    /// With --grid: where grid.json and the plots go.
    #[arg(long, requires = "grid", default_value = "out/bench-sim")]
    out: PathBuf,
    /// Print each run's result as one line of JSON (what --grid reads from
    /// each point).
    #[arg(long, conflicts_with = "grid")]
    json: bool,
    /// Compare this binary's speed with another overbook binary's (an older
    /// build, say): both run `bench sim` (with --set) in rounds, one after
    /// the other, their order swapped every round; prints each round and
    /// the mean speedup with its 95% t-interval.
    #[arg(long, value_name = "BINARY", conflicts_with_all = ["grid", "json"])]
    pub against: Option<PathBuf>,
    /// With --against: how many rounds (at least 2).
    #[arg(long, requires = "against", default_value_t = 8)]
    rounds: usize,
}

/// One run's measure.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SimPoint {
    pub run: String,
    pub nodes: usize,
    pub days: f64,
    pub tasks: usize,
    pub events: u64,
    /// Wall time of the run on one core, seconds.
    pub wall_s: f64,
    pub events_per_s: f64,
    /// The process's peak resident memory, MiB (`None`: no /proc).
    pub peak_rss_mib: Option<f64>,
    /// Whether the allocator ran on transparent huge pages (`None`: a
    /// point measured before this was recorded).
    #[serde(default)]
    pub huge_pages: Option<bool>,
}

/// The grid's points: (nodes, days). A day at every size, then longer
/// spans at the smallest (a 29-day run at 12,500 nodes takes a quarter of
/// an hour).
const GRID: [(usize, u32); 6] =
    [(1000, 1), (2500, 1), (5000, 1), (12_500, 1), (1000, 7), (1000, 29)];

pub fn bench_sim(args: SimArgs) -> Result<()> {
    if args.grid {
        return grid(&args.set, &args.out);
    }
    if let Some(other) = &args.against {
        let this = std::env::current_exe().context("finding the overbook binary")?;
        return super::rounds::against(&this, other, args.rounds, &args.set);
    }
    let scenario = Scenario::load("scale", &args.set)?;
    let huge_pages = crate::huge_pages::state();
    for run in &scenario.runs {
        let started = Instant::now();
        let result = scenario::execute(run, Outcomes::Tallied, &mut ())
            .with_context(|| format!("run {}", run.name))?;
        let wall = started.elapsed().as_secs_f64();
        let c = &result.counters;
        let point = SimPoint {
            run: run.name.clone(),
            nodes: c.nodes,
            days: run.spec.sim.horizon.0.as_secs_f64() / 86_400.0,
            tasks: result.tally.all.tasks,
            events: c.events,
            wall_s: wall,
            events_per_s: c.events as f64 / wall.max(1e-9),
            peak_rss_mib: peak_rss_kib().map(|kib| kib as f64 / 1024.0),
            huge_pages: Some(matches!(huge_pages, HugePages::On(_))),
        };
        if args.json {
            println!("{}", serde_json::to_string(&point)?);
            continue;
        }
        println!("run:              {}", point.run);
        println!("nodes:            {}", point.nodes);
        println!("tasks:            {}", point.tasks);
        println!("simulated time:   {:.1} h", c.horizon.as_secs_f64() / 3600.0);
        println!("events:           {}", point.events);
        println!("wall time:        {wall:.2} s (one core)");
        println!("events/s:         {:.2} M", point.events_per_s / 1e6);
        match point.peak_rss_mib {
            Some(mib) => println!("peak RSS:         {mib:.0} MiB"),
            None => println!("peak RSS:         unknown (no /proc/self/status)"),
        }
        println!("huge pages:       {huge_pages}");
    }
    Ok(())
}

/// `VmHWM` of this process: the most resident memory it ever held.
fn peak_rss_kib() -> Option<u64> {
    overbook_linux::process::own_status().ok()?.vm_hwm.map(|bytes| bytes / 1024)
}

fn grid(set: &[String], out: &Path) -> Result<()> {
    // Refuse bad settings before a quarter of an hour of runs.
    Scenario::load("scale", set)?;
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let exe = std::env::current_exe().context("finding the overbook binary")?;
    let mut points = Vec::new();
    for (i, &(nodes, days)) in GRID.iter().enumerate() {
        eprintln!("[{}/{}] {nodes} nodes over {days} day(s) …", i + 1, GRID.len());
        let mut cmd = Command::new(&exe);
        cmd.args(["bench", "sim", "--json"]);
        for s in set {
            cmd.args(["--set", s]);
        }
        cmd.args(["--set", &format!("cluster.nodes={nodes}")]);
        cmd.args(["--set", &format!("sim.horizon={days}d")]);
        let output = cmd
            .stderr(Stdio::inherit())
            .output()
            .with_context(|| format!("running {}", exe.display()))?;
        if !output.status.success() {
            bail!("the point {nodes} nodes × {days} days failed: {}", output.status);
        }
        let text = String::from_utf8_lossy(&output.stdout);
        let line = text.lines().next().unwrap_or_default();
        let point: SimPoint = serde_json::from_str(line)
            .with_context(|| format!("the point's output is not its result: {line:?}"))?;
        eprintln!(
            "        {:.1} s, {:.2} M events/s, {} peak",
            point.wall_s,
            point.events_per_s / 1e6,
            point.peak_rss_mib.map_or("unknown".into(), |m| format!("{m:.0} MiB"))
        );
        points.push(point);
    }
    let json = out.join("grid.json");
    std::fs::write(&json, serde_json::to_string_pretty(&points)?)
        .with_context(|| format!("writing {}", json.display()))?;
    println!("{}", table(&points));
    for path in plots(&points, out)? {
        println!("wrote {}", path.display());
    }
    println!("wrote {}", json.display());
    Ok(())
}

fn table(points: &[SimPoint]) -> String {
    let mut t =
        String::from("nodes   days      tasks       events   wall s   M events/s   peak MiB\n");
    for p in points {
        let mib = p.peak_rss_mib.map_or("-".into(), |m| format!("{m:.0}"));
        t.push_str(&format!(
            "{:>5} {:>6} {:>10} {:>12} {:>8.1} {:>12.2} {:>10}\n",
            p.nodes,
            p.days,
            p.tasks,
            p.events,
            p.wall_s,
            p.events_per_s / 1e6,
            mib
        ));
    }
    t
}

/// Wall time and peak memory against nodes (one day) and against days
/// (the smallest cluster), four plots.
fn plots(points: &[SimPoint], out: &Path) -> Result<Vec<PathBuf>> {
    type Of = fn(&SimPoint) -> f64;
    let smallest = points.iter().map(|p| p.nodes).min().unwrap_or(0);
    let by_nodes: Vec<&SimPoint> = points.iter().filter(|p| p.days == 1.0).collect();
    let by_days: Vec<&SimPoint> = points.iter().filter(|p| p.nodes == smallest).collect();
    // (file part, title part, points, x, x label) × (file part, title part, y, y label)
    let axes: [(&str, String, &[&SimPoint], Of, &str); 2] = [
        ("nodes", "one simulated day".into(), &by_nodes, |p| p.nodes as f64, "nodes"),
        ("days", format!("{smallest} nodes"), &by_days, |p| p.days, "simulated days"),
    ];
    let measures: [(&str, &str, Of, &str); 2] = [
        ("time", "Wall time", |p| p.wall_s, "seconds"),
        ("memory", "Peak memory", |p| p.peak_rss_mib.unwrap_or(0.0), "MiB"),
    ];
    let mut written = Vec::new();
    for (axis, over, pts, x, x_label) in &axes {
        for (measure, title, y, y_label) in &measures {
            let path = out.join(format!("sim-{measure}-by-{axis}.png"));
            let line = pts.iter().map(|p| (x(p), y(p))).collect();
            let series = vec![(y_label.to_string(), line)];
            let title = format!("{title}, {over}");
            overbook_sim::report::draw_lines(&path, &title, x_label, y_label, series)
                .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
            written.push(path);
        }
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_grid_draws_time_and_memory_against_nodes_and_days() {
        let point = |nodes: usize, days: f64, wall_s: f64, mib: f64| SimPoint {
            run: "charon".into(),
            nodes,
            days,
            tasks: 1,
            events: 1,
            wall_s,
            events_per_s: 1.0,
            peak_rss_mib: Some(mib),
            huge_pages: Some(true),
        };
        let points: Vec<SimPoint> = GRID
            .iter()
            .map(|&(n, d)| {
                point(n, f64::from(d), n as f64 / 1e3 * f64::from(d), 90.0 * f64::from(d))
            })
            .collect();
        let dir = tempfile::tempdir().expect("tempdir");
        let written = plots(&points, dir.path()).expect("drawn");
        let names: Vec<String> = written
            .iter()
            .map(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default())
            .collect();
        assert_eq!(
            names,
            [
                "sim-time-by-nodes.png",
                "sim-memory-by-nodes.png",
                "sim-time-by-days.png",
                "sim-memory-by-days.png"
            ]
        );
        for path in &written {
            let size = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
            assert!(size > 1000, "{} is {size} bytes", path.display());
        }
        let table = table(&points);
        assert_eq!(table.lines().count(), 1 + GRID.len(), "{table}");
    }
}

//! The plain-text comparison printed on stdout: fixed-width columns, no
//! colours, within 120 columns.

use super::metrics::{compact, format_ratio, human_secs, ratio, GroupStat, Metric, RunStat, Unit};
use super::paper::PaperRow;
use super::summary::{Band, GroupKey, RunSummary};
use crate::scenario::Scenario;
use overbook_core::preempt::PreemptorConfig;

/// Lines of the stdout report stay within this many columns; run names are
/// cut to fit (the CSV has them whole).
const LINE_WIDTH: usize = 120;
/// Run names are never cut below this.
const MIN_RUN_WIDTH: usize = 12;

/// A column of a comparison table: a metric of each run.
struct Column {
    top: &'static str,
    bottom: &'static str,
    metric: Metric,
}

const fn group(top: &'static str, bottom: &'static str, stat: GroupStat, key: GroupKey) -> Column {
    Column { top, bottom, metric: Metric::Group(stat, key) }
}

const fn run(top: &'static str, bottom: &'static str, stat: RunStat) -> Column {
    Column { top, bottom, metric: Metric::Run(stat) }
}

const BE: GroupKey = GroupKey::BEST_EFFORT;
const PROD: GroupKey = GroupKey::PRODUCTION;

/// The main table: what 000 §5.3–5.5 and 004 §3.3.2 compare.
const MAIN: [Column; 13] = {
    use GroupStat as G;
    use RunStat as R;
    [
        group("BE JCT", "p50", G::JctP50, BE),
        group("BE JCT", "p90", G::JctP90, BE),
        group("BE JCT", "p95", G::JctP95, BE),
        group("BE JCT", "p99", G::JctP99, BE),
        group("prod JCT", "p90", G::JctP90, PROD),
        group("BE", "JCR", G::Jcr, BE),
        group("prod", "JCR", G::Jcr, PROD),
        // Production's harm, beside its JCR: what "as if alone" is about.
        group("prod", "thr-h", G::ThrashingTaskHours, PROD),
        run("", "kills", R::Kills),
        run("", "susp", R::Suspensions),
        run("", "ckpts", R::Checkpoints),
        run("wasted", "CPU-h", R::WastedCpuHours),
        run("thrash", "node-s", R::ThrashingNodeSeconds),
    ]
};

/// 004 §3.3.2 Fig. 3's per-priority response times, with JCR beside them.
const BANDS: [Column; 6] = {
    use GroupStat as G;
    const LOW: GroupKey = GroupKey::Band(Band::Low);
    const MEDIUM: GroupKey = GroupKey::Band(Band::Medium);
    const HIGH: GroupKey = GroupKey::Band(Band::High);
    [
        group("low", "response", G::ResponseMean, LOW),
        group("medium", "response", G::ResponseMean, MEDIUM),
        group("high", "response", G::ResponseMean, HIGH),
        group("low", "JCR", G::Jcr, LOW),
        group("medium", "JCR", G::Jcr, MEDIUM),
        group("high", "JCR", G::Jcr, HIGH),
    ]
};

/// Widths of the paper-vs-overbook columns: metric, source, paper, ours.
const PAPER_WIDTHS: [usize; 4] = [40, 18, 28, 26];

/// The whole stdout report.
pub(super) fn render(scenario: &Scenario, summaries: &[RunSummary], papers: &[PaperRow]) -> String {
    let mut out = comparison(scenario, summaries, &MAIN);
    out.push_str(
        "\nJCT: job completion time (submit of the first task to end of the last); JCR: completed / \
         submitted jobs;\nprod thr-h: hours production's tasks spent thrashing (its harm); wasted: \
         CPU time lost to kills\nplus checkpoint time; energy (a linear power model): in \
         summary.json.\n",
    );
    if let Some(base) = &scenario.baseline {
        out.push_str(&format!("vs {base}: ratio to {base} at the same point.\n"));
    }
    if shows_bands(scenario) {
        out.push_str(
            "\nMean job response time (queueing + execution, 004 §3.3.2) by priority band ",
        );
        out.push_str("(low 0-1, medium 2-8, high 9-11):\n");
        out.push_str(&comparison(scenario, summaries, &BANDS));
    }
    // Runs of one trace mostly read the same: one note for all when so.
    let notes: Vec<(String, String)> = summaries
        .iter()
        .map(|s| (s.run.clone(), trace_note(s)))
        .filter(|(_, n)| !n.is_empty())
        .collect();
    let same = |(run, note): &(String, String)| note.replacen(&format!(": {run}: "), ": ", 1);
    match notes.first().map(same) {
        Some(first) if notes.len() > 1 && notes.iter().all(|n| same(n) == first) => {
            out.push_str(&first.replacen("note: ", "note: every run: ", 1));
        }
        _ => notes.iter().for_each(|(_, n)| out.push_str(n)),
    }
    out.push_str(&cluster_warning(summaries));
    if !papers.is_empty() {
        out.push_str("\nPaper vs overbook:\n");
        out.push_str(&paper_table(papers));
    }
    out
}

/// What a run's trace reader read and dropped (a trace replay), or the
/// rows it skipped or replayed late (any run that has some).
fn trace_note(s: &RunSummary) -> String {
    let skipped =
        s.first_skipped_row.as_deref().map(|r| format!(" (first: {r})")).unwrap_or_default();
    match &s.trace {
        Some(t) => {
            let mut machines = match t.trace_machines {
                0 => String::new(),
                m => format!("; the trace's tasks ran on {m} machines"),
            };
            if let Some(m) = t.machine_table.as_ref().filter(|m| m.sized_the_cluster) {
                machines.push_str(&format!(
                    "; the cluster is the trace's machine table: {} nodes of {} ({} machines \
                     had that memory)",
                    m.machines,
                    overbook_core::model::show_size(m.node_memory),
                    m.with_that_memory
                ));
            }
            let window = match (t.trace_first_row_s, t.window_from_s) {
                (Some(first), Some(from)) => format!(
                    "a window of {} starting {} after the trace's first row (at {first:.0} s \
                     on its clock); ",
                    human_secs(s.horizon_s),
                    human_secs(from),
                ),
                _ => String::new(),
            };
            format!(
                "note: {}: {window}{} trace rows read, {} tasks in {} jobs; {} rows \
                 skipped{skipped}, {} replayed late, {} unmatched; {} tasks after the horizon; \
                 {} ended by the trace{machines}\n",
                s.run,
                t.rows_read,
                s.tasks,
                s.jobs,
                s.skipped_rows,
                s.late_rows,
                t.unmatched,
                t.after_horizon,
                t.trace_deaths,
            )
        }
        None if s.skipped_rows > 0 || s.late_rows > 0 => format!(
            "note: {}: {} trace rows skipped{skipped}, {} replayed late\n",
            s.run, s.skipped_rows, s.late_rows
        ),
        None => String::new(),
    }
}

/// A warning when the simulated cluster is more than twice, or less than
/// half, the machines the trace's tasks ran on: the load is then not the
/// trace's. Once per cluster size.
fn cluster_warning(summaries: &[RunSummary]) -> String {
    let mut out = String::new();
    let mut seen = Vec::new();
    for s in summaries {
        let Some(t) = s.trace.as_ref() else { continue };
        // The machine table's count where there is one: it is the cell's,
        // where the task rows name only the machines they ran on.
        let (machines, table) = match &t.machine_table {
            // A cluster the table sized is the trace's.
            Some(m) if m.sized_the_cluster => continue,
            Some(m) => (m.machines, true),
            None => (t.trace_machines, false),
        };
        if machines == 0 {
            continue;
        }
        let nodes = s.nodes as u64;
        if seen.contains(&(nodes, machines)) {
            continue;
        }
        seen.push((nodes, machines));
        if (nodes > 2 * machines || 2 * nodes < machines) && table {
            out.push_str(&format!(
                "warning: the trace's machine table has {machines} machines but the simulated \
                 cluster has {nodes} nodes: its load is not the trace's (workload.cluster = \
                 \"trace\" takes the table's)\n"
            ));
        } else if nodes > 2 * machines || 2 * nodes < machines {
            out.push_str(&format!(
                "warning: the trace's tasks ran on {machines} machines but the simulated cluster \
                 has {nodes} nodes: its load is not the trace's (set cluster.nodes near \
                 {machines})\n"
            ));
        }
    }
    out
}

/// Whether the scenario preempts by checkpoint, so 004's per-band view applies.
fn shows_bands(scenario: &Scenario) -> bool {
    scenario.runs.iter().any(|r| {
        matches!(
            r.spec.policy.preemptor,
            PreemptorConfig::Checkpoint { .. } | PreemptorConfig::Adaptive { .. }
        )
    })
}

/// One row per run, grouped by sweep point, each non-baseline run followed by
/// its ratio to the baseline at the same point.
fn comparison(scenario: &Scenario, summaries: &[RunSummary], columns: &[Column]) -> String {
    let mut rows: Vec<Option<Vec<String>>> = Vec::new();
    for (i, point) in by_point(summaries).into_iter().enumerate() {
        if i > 0 {
            rows.push(None);
        }
        let base = scenario
            .baseline
            .as_deref()
            .and_then(|b| point.iter().find(|s| s.variant == b).copied());
        for s in &point {
            rows.push(Some(values_row(s, columns)));
            if let Some(base) = base.filter(|b| b.variant != s.variant) {
                rows.push(Some(ratio_row(s, base, columns)));
            }
        }
    }
    let mut head_top = vec![String::new()];
    let mut head_bottom = vec!["run".to_string()];
    head_top.extend(columns.iter().map(|c| c.top.to_string()));
    head_bottom.extend(columns.iter().map(|c| c.bottom.to_string()));
    fixed_width(&[head_top, head_bottom], &rows)
}

/// Runs grouped by sweep point, points in the order they first appear.
fn by_point(summaries: &[RunSummary]) -> Vec<Vec<&RunSummary>> {
    let mut points: Vec<(Option<&str>, Vec<&RunSummary>)> = Vec::new();
    for s in summaries {
        match points.iter_mut().find(|(p, _)| *p == s.point.as_deref()) {
            Some((_, runs)) => runs.push(s),
            None => points.push((s.point.as_deref(), vec![s])),
        }
    }
    points.into_iter().map(|(_, runs)| runs).collect()
}

fn values_row(s: &RunSummary, columns: &[Column]) -> Vec<String> {
    let mut row = vec![s.run.clone()];
    row.extend(columns.iter().map(|c| c.metric.of(s).map_or_else(dash, |v| cell(c.metric, v))));
    row
}

fn ratio_row(s: &RunSummary, base: &RunSummary, columns: &[Column]) -> Vec<String> {
    let mut row = vec![format!("  vs {}", base.variant)];
    row.extend(columns.iter().map(|c| match (c.metric.of(s), c.metric.of(base)) {
        (Some(a), Some(b)) => ratio(a, b).map_or_else(dash, format_ratio),
        _ => dash(),
    }));
    row
}

/// A value as short as a table cell wants it (units are in the header).
fn cell(metric: Metric, v: f64) -> String {
    match metric.unit() {
        Unit::Seconds => human_secs(v),
        Unit::Fraction => format!("{:.1}%", 100.0 * v),
        Unit::Percent => format!("{v:.1}%"),
        _ => compact(v),
    }
}

fn dash() -> String {
    "-".to_string()
}

/// At most `width` characters, with `~` marking a cut.
fn cut(text: &str, width: usize) -> String {
    if text.chars().count() <= width {
        return text.to_string();
    }
    let mut s: String = text.chars().take(width.saturating_sub(1)).collect();
    s.push('~');
    s
}

/// Lay out rows under a header: the first column left-aligned, the others
/// right-aligned, each as wide as its widest cell, the first cut so lines fit
/// `LINE_WIDTH`; `None` is a blank line.
fn fixed_width(head: &[Vec<String>], rows: &[Option<Vec<String>>]) -> String {
    let all = head.iter().chain(rows.iter().flatten());
    let mut widths: Vec<usize> = Vec::new();
    for row in all {
        for (i, c) in row.iter().enumerate() {
            let w = c.chars().count();
            match widths.get_mut(i) {
                Some(max) => *max = (*max).max(w),
                None => widths.push(w),
            }
        }
    }
    let others: usize = widths.iter().skip(1).map(|w| w + 2).sum();
    if let Some(first) = widths.first_mut() {
        *first = (*first).min(LINE_WIDTH.saturating_sub(others)).max(MIN_RUN_WIDTH);
    }
    let line = |row: &[String]| {
        let cells: Vec<String> = row
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let w = widths[i];
                if i == 0 {
                    format!("{:<w$}", cut(c, w))
                } else {
                    format!("{c:>w$}")
                }
            })
            .collect();
        cells.join("  ").trim_end().to_string() + "\n"
    };
    let mut out: String = head.iter().map(|r| line(r)).collect();
    for row in rows {
        out.push_str(&row.as_deref().map_or_else(|| "\n".to_string(), line));
    }
    out
}

/// metric | source | paper | ours, with long cells wrapped.
fn paper_table(papers: &[PaperRow]) -> String {
    let head = ["metric", "source", "paper", "ours"].map(|h| vec![h.to_string()]);
    let mut out = wrapped_row(&head);
    let rule: Vec<String> = PAPER_WIDTHS.iter().map(|w| "-".repeat(*w)).collect();
    out.push_str(rule.join("  ").trim_end());
    out.push('\n');
    for p in papers {
        let cells =
            [vec![paper_metric(p)], vec![p.source.clone()], vec![p.paper.clone()], ours_lines(p)];
        out.push_str(&wrapped_row(&cells));
    }
    out
}

/// The metric with the run it is about: `charon@X4: best-effort JCR`.
fn paper_metric(p: &PaperRow) -> String {
    match (&p.variant, &p.point) {
        (Some(v), Some(pt)) => format!("{v}@{pt}: {}", p.metric),
        (Some(v), None) => format!("{v}: {}", p.metric),
        (None, _) => p.metric.clone(),
    }
}

/// One line per sweep point when ours spans several.
fn ours_lines(p: &PaperRow) -> Vec<String> {
    if p.ours.len() <= 1 {
        return vec![p.ours_text()];
    }
    p.ours.iter().map(|o| format!("{} {}", o.point.as_deref().unwrap_or(""), o.text)).collect()
}

/// Cells (each a list of lines) wrapped to `PAPER_WIDTHS` and laid side by side.
fn wrapped_row(cells: &[Vec<String>; 4]) -> String {
    let wrapped: Vec<Vec<String>> = cells
        .iter()
        .zip(PAPER_WIDTHS)
        .map(|(lines, w)| lines.iter().flat_map(|l| wrap(l, w)).collect())
        .collect();
    let height = wrapped.iter().map(Vec::len).max().unwrap_or(0);
    let mut out = String::new();
    for i in 0..height {
        let parts: Vec<String> = wrapped
            .iter()
            .zip(PAPER_WIDTHS)
            .map(|(lines, w)| format!("{:<w$}", lines.get(i).map_or("", String::as_str)))
            .collect();
        out.push_str(parts.join("  ").trim_end());
        out.push('\n');
    }
    out
}

/// Greedy word wrap; words longer than `width` are split.
fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines = Vec::new();
    let mut line = String::new();
    for word in text.split_whitespace() {
        let mut word: Vec<char> = word.chars().collect();
        while word.len() > width {
            if !line.is_empty() {
                lines.push(std::mem::take(&mut line));
            }
            lines.push(word.drain(..width).collect());
        }
        let word: String = word.into_iter().collect();
        let len = line.chars().count();
        if len > 0 && len + 1 + word.chars().count() > width {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(&word);
    }
    if !line.is_empty() || lines.is_empty() {
        lines.push(line);
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::super::summary::fixtures::*;
    use super::*;

    #[test]
    fn wrap_keeps_lines_within_the_width() {
        assert_eq!(wrap("a bb ccc dddd", 6), vec!["a bb", "ccc", "dddd"]);
        assert_eq!(wrap("abcdefgh", 3), vec!["abc", "def", "gh"]);
        assert_eq!(wrap("", 5), vec![""]);
    }

    #[test]
    fn a_replay_says_what_it_read_and_dropped_and_warns_of_a_cluster_far_from_the_traces() {
        let mut s = RunSummary::new(&result("a", be_jobs(2)), 32);
        assert_eq!(trace_note(&s), "", "a generated workload has no note");
        s.trace = Some(super::super::summary::TraceStats {
            rows_read: 1000,
            unmatched: 7,
            after_horizon: 3,
            trace_deaths: 12,
            trace_machines: 4000,
            trace_first_row_s: Some(600.0),
            window_from_s: Some(7200.0),
            machine_table: None,
        });
        s.nodes = 50;
        assert_eq!(
            trace_note(&s),
            "note: a: a window of 1.0h starting 2.0h after the trace's first row (at 600 s on \
             its clock); 1000 trace rows read, 2 tasks in 2 jobs; 0 rows skipped, 0 replayed \
             late, 7 unmatched; 3 tasks after the horizon; 12 ended by the trace; the trace's \
             tasks ran on 4000 machines\n"
        );
        let warning = cluster_warning(&[s.clone(), s.clone()]);
        assert_eq!(
            warning,
            "warning: the trace's tasks ran on 4000 machines but the simulated cluster has 50 \
             nodes: its load is not the trace's (set cluster.nodes near 4000)\n",
            "once per cluster size"
        );
        let scenario = Scenario::parse(
            "name = \"t\"\ntitle = \"t\"\n[[variants]]\nname = \"a\"\n[[variants]]\nname = \"b\"\n",
            "t",
            &[],
        )
        .unwrap();
        let mut b = s.clone().at_point("b", None);
        let text = render(&scenario, &[s.clone(), b.clone()], &[]);
        assert_eq!(text.matches("note: ").count(), 1, "{text}");
        assert!(text.contains("note: every run: a window of 1.0h"), "{text}");
        if let Some(t) = b.trace.as_mut() {
            t.trace_deaths = 11;
        }
        let text = render(&scenario, &[s.clone(), b], &[]);
        assert!(text.contains("note: a: a window") && text.contains("note: b: a window"), "{text}");
        for (nodes, warns) in [(2000, false), (1999, true), (8000, false), (8001, true)] {
            s.nodes = nodes;
            assert_eq!(!cluster_warning(std::slice::from_ref(&s)).is_empty(), warns, "{nodes}");
        }
        if let Some(t) = s.trace.as_mut() {
            t.machine_table = Some(super::super::summary::MachineTable {
                machines: 8001,
                node_memory: 1 << 30,
                with_that_memory: 8001,
                sized_the_cluster: true,
            });
        }
        assert_eq!(cluster_warning(std::slice::from_ref(&s)), "", "the table sized it");
        if let Some(m) = s.trace.as_mut().and_then(|t| t.machine_table.as_mut()) {
            m.sized_the_cluster = false;
            m.machines = 20_000;
        }
        assert!(
            cluster_warning(std::slice::from_ref(&s)).contains("machine table has 20000 machines"),
            "the table's count, when it did not size the cluster"
        );
    }

    #[test]
    fn cut_marks_long_names() {
        assert_eq!(cut("short", 10), "short");
        assert_eq!(cut("a-very-long-name", 6), "a-ver~");
    }

    #[test]
    fn comparison_rows_show_values_dashes_and_ratios_to_the_baseline() {
        let scenario = Scenario::parse(
            "name = \"t\"\ntitle = \"t\"\nbaseline = \"a\"\n[[variants]]\nname = \"a\"\n[[variants]]\nname = \"b\"\n",
            "t",
            &[],
        )
        .unwrap();
        let a = RunSummary::new(&result("a", be_jobs(10)), 32);
        let b = RunSummary::new(&result("b", be_jobs(20)), 32);
        let text = comparison(&scenario, &[a, b], &MAIN);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 5, "{text}");
        assert!(lines[1].starts_with("run") && lines[1].contains("thr-h"), "{text}");
        assert!(lines[2].starts_with("a ") && lines[2].contains("50.0s"), "{text}");
        // b's p50 is 100 s, twice a's; production has no jobs: dashes.
        assert!(lines[4].starts_with("  vs a") && lines[4].contains("2.00x"), "{text}");
        assert!(lines[3].contains(" - "), "{text}");
        assert!(text.lines().all(|l| l.chars().count() <= 120), "{text}");
    }
}

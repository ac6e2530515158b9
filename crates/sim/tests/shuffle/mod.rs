//! Copies of the trace fixtures with their rows and parts out of order.

use std::path::{Path, PathBuf};

/// The time a row is replayed at and the task it is about, as text, for
/// the fixtures' tables.
fn time_and_task(table: &str, header: Option<&str>, line: &str) -> (String, String) {
    if line.starts_with('{') {
        let v: serde_json::Value = serde_json::from_str(line).expect("json row");
        let t = v.get("time").or_else(|| v.get("start_time")).expect("a time");
        let task = format!("{}/{}", v["collection_id"], v["instance_index"]);
        return (t.to_string(), task);
    }
    let fields: Vec<&str> = line.split(',').collect();
    let (time, task): (usize, &[usize]) = match (table, header) {
        (_, Some(h)) => {
            let names: Vec<&str> = h.split(',').collect();
            let at = |n: &str| names.iter().position(|c| *c == n).expect("column");
            let time = names.iter().position(|n| *n == "time" || *n == "start_time");
            return (
                fields[time.expect("time column")].to_string(),
                format!("{}/{}", fields[at("collection_id")], fields[at("instance_index")]),
            );
        }
        ("batch_task", None) => (5, &[0, 2]),
        ("batch_instance", None) => (5, &[0, 1, 2]),
        ("container_meta" | "container_usage", None) => (2, &[0]),
        _ => (0, &[2, 3]),
    };
    let task: Vec<&str> = task.iter().map(|&i| fields[i]).collect();
    (fields[time].to_string(), task.join("/"))
}

/// Copy a fixture's tables to `to`, each table's rows shuffled across
/// `parts` files named in reverse of their time order. One task's rows of
/// one instant stay in order (nothing in them says which came first).
pub fn shuffled_copy(from: &Path, to: &Path, parts: usize) {
    let mut tables: Vec<(String, String, Option<String>, Vec<String>)> = Vec::new();
    for file in walk(from) {
        let rel = file.strip_prefix(from).expect("inside").to_string_lossy().to_string();
        let name = file.file_name().expect("name").to_string_lossy().to_string();
        let key = match rel.split_once('/') {
            Some((dir, _)) => dir.to_string(),
            None => name.split(['-', '.']).next().unwrap_or("").to_string(),
        };
        let ext = if name.ends_with(".json") { "json" } else { "csv" };
        let text = std::fs::read_to_string(&file).expect("read");
        let mut lines: Vec<String> =
            text.lines().filter(|l| !l.trim().is_empty()).map(String::from).collect();
        let header = (ext == "csv" && rel.contains("instance_")).then(|| lines.remove(0));
        match tables.iter_mut().find(|t| t.0 == key) {
            Some(t) => t.3.extend(lines),
            None => tables.push((key, ext.to_string(), header, lines)),
        }
    }
    let scramble = |t: &str| {
        t.bytes()
            .fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3))
    };
    for (key, ext, header, rows) in tables {
        let mut files = vec![Vec::new(); parts];
        for row in rows {
            let (time, task) = time_and_task(&key, header.as_deref(), &row);
            let group = format!("{time}@{task}");
            let part = usize::try_from(scramble(&group) % parts as u64).expect("a part");
            files[part].push((scramble(&group), row));
        }
        for (i, mut rows) in files.into_iter().enumerate() {
            // Stable: one task's rows of one instant keep their order.
            rows.sort_by_key(|(h, _)| *h);
            let mut text = header.clone().map(|h| h + "\n").unwrap_or_default();
            for (_, row) in rows {
                text.push_str(&row);
                text.push('\n');
            }
            std::fs::write(to.join(format!("{key}-{:02}.{ext}", parts - i)), text).expect("write");
        }
    }
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).expect("dir") {
        let p = e.expect("entry").path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out.sort();
    out
}

//! Finding a trace's files, telling its tables apart and opening them
//! (plain or gzip).

use crate::workload::TraceError;
use flate2::read::MultiGzDecoder;
use std::fs::{self, File};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};

/// A file of a trace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct TraceFile {
    pub path: PathBuf,
    /// Named by the caller rather than found in a directory: a file the
    /// caller named must be understood, one found beside it may be ignored
    /// (the published traces ship READMEs, checksums and other tables).
    pub explicit: bool,
}

/// Directories nested deeper than this are not searched (a symlink loop
/// would otherwise never end).
const MAX_DEPTH: usize = 16;

/// The files under `paths`, directories searched recursively, each
/// directory's files in name order. Hidden files are skipped.
pub(crate) fn expand(paths: &[PathBuf]) -> Result<Vec<TraceFile>, TraceError> {
    if paths.is_empty() {
        return Err(TraceError::BadFile {
            path: PathBuf::new(),
            problem: "no trace files given".into(),
        });
    }
    let mut out = Vec::new();
    for path in paths {
        let meta = fs::metadata(path).map_err(|source| io_err(path, source))?;
        if meta.is_dir() {
            walk(path, 0, &mut out)?;
        } else {
            out.push(TraceFile { path: path.clone(), explicit: true });
        }
    }
    refuse_twice(&out)?;
    Ok(out)
}

/// A file reached twice (named twice, or named and inside a directory also
/// named) would replay its rows twice: refused.
fn refuse_twice(files: &[TraceFile]) -> Result<(), TraceError> {
    let mut seen: std::collections::HashMap<PathBuf, &Path> = std::collections::HashMap::new();
    for f in files {
        let real = fs::canonicalize(&f.path).unwrap_or_else(|_| f.path.clone());
        if let Some(first) = seen.insert(real, &f.path) {
            return Err(TraceError::BadFile {
                path: f.path.clone(),
                problem: format!(
                    "given twice (also as {}): its rows would be replayed twice",
                    first.display()
                ),
            });
        }
    }
    Ok(())
}

fn walk(dir: &Path, depth: usize, out: &mut Vec<TraceFile>) -> Result<(), TraceError> {
    if depth > MAX_DEPTH {
        return Ok(());
    }
    let mut entries = Vec::new();
    for entry in fs::read_dir(dir).map_err(|source| io_err(dir, source))? {
        let entry = entry.map_err(|source| io_err(dir, source))?;
        if !entry.file_name().to_string_lossy().starts_with('.') {
            entries.push(entry.path());
        }
    }
    entries.sort();
    for path in entries {
        let meta = fs::metadata(&path).map_err(|source| io_err(&path, source))?;
        if meta.is_dir() {
            walk(&path, depth + 1, out)?;
        } else if meta.is_file() {
            out.push(TraceFile { path, explicit: false });
        }
    }
    Ok(())
}

/// Sort `files` into tables by name: a file belongs to the first table whose
/// name its file name contains, else the first its directories' names
/// contain (the Google traces keep `task_events/part-00000-of-00500.csv.gz`).
/// Each table's files come back in path order. A file named by the caller
/// that matches no table is an error; one found in a directory is ignored.
pub(crate) fn classify(
    files: &[TraceFile],
    tables: &[&str],
) -> Result<Vec<Vec<PathBuf>>, TraceError> {
    let mut out = vec![Vec::new(); tables.len()];
    for file in files {
        let by_name = file.path.file_name().and_then(|base| {
            let base = base.to_string_lossy();
            tables.iter().position(|t| base.contains(t))
        });
        let by_dir = || {
            file.path.parent().and_then(|dir| {
                dir.components().rev().find_map(|c| {
                    let c = c.as_os_str().to_string_lossy();
                    tables.iter().position(|t| c.contains(t))
                })
            })
        };
        match by_name.or_else(by_dir) {
            Some(i) => out[i].push(file.path.clone()),
            None if file.explicit => {
                return Err(TraceError::BadFile {
                    path: file.path.clone(),
                    problem: format!(
                        "cannot tell which table this is: its name (or its directory's) should contain one of {}",
                        tables.join(", ")
                    ),
                })
            }
            None => {}
        }
    }
    for table in &mut out {
        table.sort();
    }
    Ok(out)
}

/// Open `path` for reading, through gzip when it starts with gzip's magic
/// bytes. A file named `.gz` that is not gzip is refused rather than read as
/// text, which would only give a screen of confusing bad rows.
pub(crate) fn open(path: &Path) -> Result<Box<dyn BufRead + Send>, TraceError> {
    let file = File::open(path).map_err(|source| io_err(path, source))?;
    let mut plain = BufReader::with_capacity(1 << 16, file);
    let head = plain.fill_buf().map_err(|source| io_err(path, source))?;
    let gzip = head.starts_with(&[0x1f, 0x8b]);
    let named_gz = path.extension().is_some_and(|e| e.eq_ignore_ascii_case("gz"));
    if named_gz && !gzip && !head.is_empty() {
        return Err(TraceError::BadFile {
            path: path.to_path_buf(),
            problem: "named .gz but is not gzip".into(),
        });
    }
    let mut input: Box<dyn BufRead + Send> = if gzip {
        // Multi-member: concatenated gzip files are one valid gzip file.
        Box::new(BufReader::with_capacity(1 << 16, MultiGzDecoder::new(plain)))
    } else {
        Box::new(plain)
    };
    // A UTF-8 byte-order mark (spreadsheets write one) is not part of the
    // first row: it would hide the first field.
    let head = input.fill_buf().map_err(|source| io_err(path, source))?;
    if head.starts_with(UTF8_BOM) {
        input.consume(UTF8_BOM.len());
    }
    Ok(input)
}

const UTF8_BOM: &[u8] = b"\xef\xbb\xbf";

pub(crate) fn io_err(path: &Path, source: std::io::Error) -> TraceError {
    TraceError::Io { path: path.to_path_buf(), source }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(p: &str, explicit: bool) -> TraceFile {
        TraceFile { path: PathBuf::from(p), explicit }
    }

    #[test]
    fn tables_are_told_by_file_name_then_directory() {
        let files = [
            f("t/task_usage/part-00001.csv.gz", false),
            f("t/task_events/part-00000.csv.gz", false),
            f("t/task_usage/part-00000.csv.gz", false),
            f("t/task_events/task_usage.csv", true),
            f("t/README", false),
        ];
        let tables = classify(&files, &["task_events", "task_usage"]).expect("classify");
        assert_eq!(tables[0], [PathBuf::from("t/task_events/part-00000.csv.gz")]);
        assert_eq!(
            tables[1],
            [
                PathBuf::from("t/task_events/task_usage.csv"),
                PathBuf::from("t/task_usage/part-00000.csv.gz"),
                PathBuf::from("t/task_usage/part-00001.csv.gz"),
            ]
        );
    }

    #[test]
    fn a_file_given_twice_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("task_events.csv");
        fs::write(&file, "x\n").expect("write");
        let err = expand(&[file.clone(), file.clone()]).expect_err("twice");
        assert!(err.to_string().contains("given twice"), "{err}");
        let err = expand(&[dir.path().to_path_buf(), file.clone()]).expect_err("in its dir too");
        assert!(err.to_string().contains("given twice"), "{err}");
        assert_eq!(expand(std::slice::from_ref(&file)).expect("once").len(), 1);
    }

    #[test]
    fn a_named_file_of_no_table_is_refused() {
        let err = classify(&[f("x.csv", true)], &["task_events"]).unwrap_err();
        assert!(err.to_string().starts_with("x.csv: cannot tell"), "{err}");
    }
}

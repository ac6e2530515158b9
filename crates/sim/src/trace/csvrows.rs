//! CSV rows of one table, read from its part files in turn.
//!
//! One row per line: no trace this reads puts a line break inside a field,
//! and reading lines ourselves keeps line numbers exact (a general CSV
//! reader counts a row's first line from before any blank lines it skips).
//! Fields may be quoted (`"a,b"`, `""` for a quote), as BigQuery writes them.

use super::fields::Field;
use super::files;
use super::lines::{Line, Lines};
use super::merge::Located;
use crate::workload::TraceError;
use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The fields of one line, kept in one string.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Fields {
    text: String,
    /// Each field's byte range in `text`.
    spans: Vec<(usize, usize)>,
}

impl Fields {
    /// Split a line at commas outside quotes.
    pub fn split(line: &str) -> Result<Fields, String> {
        if !line.contains('"') {
            // The common case (every row of the Google and Alibaba traces):
            // the fields are the line's own text between commas.
            let mut spans = Vec::new();
            let mut start = 0;
            for (i, _) in line.match_indices(',') {
                spans.push((start, i));
                start = i + 1;
            }
            spans.push((start, line.len()));
            return Ok(Fields { text: line.to_string(), spans });
        }
        // Quoted fields are unescaped into `text`, one after another.
        let mut f = Fields { text: String::with_capacity(line.len()), spans: Vec::new() };
        let mut chars = line.chars().peekable();
        loop {
            let start = f.text.len();
            if chars.peek() == Some(&'"') {
                chars.next();
                loop {
                    match chars.next() {
                        None => return Err("a quoted field is not closed".into()),
                        Some('"') if chars.peek() == Some(&'"') => {
                            chars.next();
                            f.text.push('"');
                        }
                        Some('"') => break,
                        Some(c) => f.text.push(c),
                    }
                }
                if !matches!(chars.peek(), None | Some(',')) {
                    return Err("text after a quoted field's closing quote".into());
                }
            } else {
                while let Some(&c) = chars.peek() {
                    if c == ',' {
                        break;
                    }
                    f.text.push(c);
                    chars.next();
                }
            }
            f.spans.push((start, f.text.len()));
            if chars.next().is_none() {
                return Ok(f);
            }
        }
    }

    pub fn len(&self) -> usize {
        self.spans.len()
    }

    pub fn get(&self, i: usize) -> Option<&str> {
        let &(start, end) = self.spans.get(i)?;
        self.text.get(start..end)
    }

    fn iter(&self) -> impl Iterator<Item = &str> {
        (0..self.len()).filter_map(|i| self.get(i))
    }
}

/// The column names of a file with a header row (BigQuery's CSV export).
#[derive(Debug)]
pub(crate) struct Header {
    index: HashMap<String, usize>,
}

impl Header {
    fn new(names: &Fields) -> Header {
        let index = names
            .iter()
            .enumerate()
            // A byte-order mark would hide the first column's name.
            .map(|(i, n)| (n.trim_start_matches('\u{feff}').trim().to_string(), i))
            .collect();
        Header { index }
    }

    /// The column of `name`, written as `a.b` (nested field flattened) or
    /// `a_b` (the way BigQuery names a flattened field by default).
    pub fn column(&self, name: &str) -> Option<usize> {
        self.index.get(name).or_else(|| self.index.get(&name.replace('.', "_"))).copied()
    }
}

/// One CSV row and where it was.
#[derive(Debug)]
pub(crate) struct CsvRow {
    pub path: Arc<Path>,
    pub line: u64,
    pub fields: Fields,
    /// The file's header, for tables picked by column name.
    pub header: Option<Arc<Header>>,
}

impl CsvRow {
    /// Positional field `i` (0-based), missing when the row is short.
    pub fn at(&self, i: usize) -> Field<'_> {
        Field::text(self.fields.get(i).unwrap_or(""))
    }

    /// The field in column `name` of the header, missing if there is none.
    pub fn named(&self, name: &str) -> Field<'_> {
        match self.header.as_ref().and_then(|h| h.column(name)) {
            Some(i) => self.at(i),
            None => Field::Missing,
        }
    }

    /// The row has one of the column counts a schema allows.
    pub fn expect_columns(&self, allowed: &[usize], table: &str) -> Result<(), String> {
        if allowed.contains(&self.fields.len()) {
            return Ok(());
        }
        let want: Vec<String> = allowed.iter().map(|n| n.to_string()).collect();
        Err(format!(
            "expected {} columns ({table}), found {}",
            want.join(" or "),
            self.fields.len()
        ))
    }
}

impl Located for CsvRow {
    fn path(&self) -> &Path {
        &self.path
    }
    fn line(&self) -> u64 {
        self.line
    }
}

struct Open {
    path: Arc<Path>,
    lines: Lines,
    header: Option<Arc<Header>>,
}

/// The rows of a table's files, one file after another.
pub(crate) struct CsvTable {
    files: VecDeque<PathBuf>,
    current: Option<Open>,
    has_header: bool,
    buf: Vec<u8>,
}

impl CsvTable {
    /// Files without a header row (the Google 2011 and Alibaba traces).
    pub fn headerless(files: Vec<PathBuf>) -> CsvTable {
        CsvTable { files: files.into(), current: None, has_header: false, buf: Vec::new() }
    }

    /// Files whose first non-blank line names the columns.
    pub fn with_header(files: Vec<PathBuf>) -> CsvTable {
        CsvTable { has_header: true, ..CsvTable::headerless(files) }
    }
}

impl Iterator for CsvTable {
    type Item = Result<CsvRow, TraceError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let Some(open) = self.current.as_mut() else {
                let path = self.files.pop_front()?;
                match files::open(&path) {
                    Ok(input) => {
                        self.current =
                            Some(Open { path: path.into(), lines: Lines::new(input), header: None })
                    }
                    Err(e) => return Some(Err(e)),
                }
                continue;
            };
            let bad =
                |line, problem| TraceError::BadRow { path: open.path.to_path_buf(), line, problem };
            let line = match open.lines.read(&mut self.buf) {
                Err(source) => {
                    // Nothing after a read error (a truncated gzip, say)
                    // can be trusted.
                    let e = files::io_err(&open.path, source);
                    self.current = None;
                    self.files.clear();
                    return Some(Err(e));
                }
                Ok(None) => {
                    self.current = None;
                    continue;
                }
                Ok(Some(Line::TooLong(n))) => {
                    return Some(Err(bad(
                        n,
                        format!("line longer than {} bytes", super::lines::MAX_LINE),
                    )))
                }
                Ok(Some(Line::Text(n))) => n,
            };
            if self.buf.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            let text = match std::str::from_utf8(&self.buf) {
                Ok(t) => t,
                Err(e) => return Some(Err(bad(line, format!("not UTF-8 text ({e})")))),
            };
            let fields = match Fields::split(text) {
                Ok(f) => f,
                Err(problem) => return Some(Err(bad(line, problem))),
            };
            if self.has_header && open.header.is_none() {
                // Column names are never numbers: a first line with one is
                // a row, and the file has no header to pick columns by.
                if let Some(n) = fields.iter().find(|f| f.trim().parse::<f64>().is_ok()) {
                    let e = TraceError::BadHeader {
                        path: open.path.to_path_buf(),
                        line,
                        problem: format!(
                            "expected a header row of column names (BigQuery's CSV export \
                             starts with one: time, type, collection_id, …), found a row \
                             ({n:?} is a number); export again with the header, or add it"
                        ),
                    };
                    self.current = None;
                    return Some(Err(e));
                }
                open.header = Some(Arc::new(Header::new(&fields)));
                continue;
            }
            return Some(Ok(CsvRow {
                path: open.path.clone(),
                line,
                fields,
                header: open.header.clone(),
            }));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn table(text: &[u8], header: bool) -> Vec<Result<CsvRow, TraceError>> {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("t.csv");
        std::fs::File::create(&path).and_then(|mut f| f.write_all(text)).expect("write");
        if header {
            CsvTable::with_header(vec![path]).collect()
        } else {
            CsvTable::headerless(vec![path]).collect()
        }
    }

    #[test]
    fn fields_split_at_commas_outside_quotes() {
        let f = Fields::split(r#"1,"a,""b""",,x"#).expect("split");
        let got: Vec<&str> = f.iter().collect();
        assert_eq!(got, ["1", "a,\"b\"", "", "x"]);
        let f = Fields::split("1,,x,").expect("split");
        let got: Vec<&str> = f.iter().collect();
        assert_eq!(got, ["1", "", "x", ""]);
        assert_eq!(Fields::split("").expect("empty").len(), 1);
        assert!(Fields::split(r#""open"#).is_err());
        assert!(Fields::split(r#""a"b,c"#).is_err());
    }

    #[test]
    fn rows_carry_their_line_and_blank_lines_are_skipped() {
        let rows = table(b"1,2,3\n\n4,5\r\n", false);
        let rows: Vec<_> = rows.into_iter().map(|r| r.expect("row")).collect();
        assert_eq!(rows.len(), 2);
        assert_eq!((rows[0].line, rows[1].line), (1, 3));
        assert_eq!(rows[1].fields.get(1), Some("5"));
        assert!(rows[1].expect_columns(&[3], "t").is_err());
    }

    #[test]
    fn a_header_names_columns_dotted_or_underscored() {
        let rows = table(b"time,resource_request_memory\n5,0.25\n", true);
        let row = rows.into_iter().next().expect("one row").expect("row");
        assert_eq!(row.line, 2);
        assert_eq!(row.named("time").u64("time"), Ok(Some(5)));
        assert_eq!(row.named("resource_request.memory").f64("m"), Ok(Some(0.25)));
        assert!(matches!(row.named("nope"), Field::Missing));
    }

    #[test]
    fn a_file_without_its_header_is_refused_at_its_first_line() {
        let rows = table(b"\n1300,0,42,3\n1400,1,42,3\n", true);
        assert_eq!(rows.len(), 1, "nothing after it");
        let err = rows.into_iter().next().expect("one").expect_err("no header");
        assert!(matches!(err, TraceError::BadHeader { line: 2, .. }), "{err}");
        assert!(err.to_string().contains("t.csv:2: expected a header row"), "{err}");
    }

    #[test]
    fn a_byte_order_mark_is_dropped() {
        let rows = table(b"\xef\xbb\xbfa,2\n", false);
        let row = rows.into_iter().next().expect("one row").expect("row");
        assert_eq!(row.fields.get(0), Some("a"));
    }

    #[test]
    fn invalid_utf8_is_a_bad_row_and_reading_goes_on() {
        let rows = table(b"1,2\n\xff\xfe,3\n4,5\n", false);
        assert_eq!(rows.len(), 3);
        assert!(matches!(rows[1], Err(TraceError::BadRow { line: 2, .. })));
        assert!(rows[2].is_ok());
    }
}

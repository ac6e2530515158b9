//! JSON values of one table, from files holding either one value per line
//! (JSON lines, BigQuery's JSON export) or one array of values, which is
//! split element by element so that it is never held whole.

use super::fields::Field;
use super::files;
use super::lines::{Line, Lines, MAX_LINE};
use super::merge::Located;
use crate::workload::TraceError;
use serde_json::Value;
use std::collections::VecDeque;
use std::io::{self, BufRead};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// One JSON value and where it starts.
#[derive(Debug)]
pub(crate) struct JsonRow {
    pub path: Arc<Path>,
    pub line: u64,
    pub value: Value,
}

impl JsonRow {
    /// The field `name` of the row (see [`lookup`]).
    pub fn named(&self, name: &str) -> Field<'_> {
        Field::json(lookup(&self.value, name))
    }
}

/// Field `name` of `value`, where a dotted name is found either as a key
/// holding the dots (`"resource_request.memory": 1`), nested
/// (`"resource_request": {"memory": 1}`), or underscored.
pub(crate) fn lookup<'a>(value: &'a Value, name: &str) -> Option<&'a Value> {
    let obj = value.as_object()?;
    if let Some(v) = obj.get(name) {
        return Some(v);
    }
    if let Some((head, rest)) = name.split_once('.') {
        if let Some(v) = obj.get(head).and_then(|inner| lookup(inner, rest)) {
            return Some(v);
        }
        return obj.get(&name.replace('.', "_"));
    }
    None
}

impl Located for JsonRow {
    fn path(&self) -> &Path {
        &self.path
    }
    fn line(&self) -> u64 {
        self.line
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Mode {
    /// Nothing read yet: the first byte tells lines from an array.
    Start,
    Lines,
    /// Inside `[ ... ]`; `first` until an element has been read.
    Array {
        first: bool,
    },
    Done,
}

struct Open {
    path: Arc<Path>,
    lines: Lines,
    mode: Mode,
}

/// The values of a table's files, one file after another.
pub(crate) struct JsonTable {
    files: VecDeque<PathBuf>,
    current: Option<Open>,
}

impl JsonTable {
    pub fn new(files: Vec<PathBuf>) -> JsonTable {
        JsonTable { files: files.into(), current: None }
    }
}

enum Step {
    Row(u64, Vec<u8>),
    Bad(u64, String),
    Again,
    EndOfFile,
}

impl Open {
    fn peek(&mut self) -> io::Result<Option<u8>> {
        Ok(self.lines.input.fill_buf()?.first().copied())
    }

    fn bump(&mut self) -> io::Result<Option<u8>> {
        let b = self.peek()?;
        if let Some(b) = b {
            self.lines.input.consume(1);
            if b == b'\n' {
                self.lines.line += 1;
            }
        }
        Ok(b)
    }

    /// The line the next byte is on.
    fn here(&self) -> u64 {
        self.lines.line + 1
    }

    fn skip_space(&mut self) -> io::Result<Option<u8>> {
        while let Some(b) = self.peek()? {
            if !b.is_ascii_whitespace() {
                return Ok(Some(b));
            }
            self.bump()?;
        }
        Ok(None)
    }

    fn step(&mut self) -> io::Result<Step> {
        match self.mode {
            Mode::Done => Ok(Step::EndOfFile),
            Mode::Start => {
                self.mode = match self.skip_space()? {
                    None => Mode::Done,
                    Some(b'[') => {
                        self.bump()?;
                        Mode::Array { first: true }
                    }
                    Some(_) => Mode::Lines,
                };
                Ok(Step::Again)
            }
            Mode::Lines => self.line_step(),
            Mode::Array { first } => self.element_step(first),
        }
    }

    fn line_step(&mut self) -> io::Result<Step> {
        let mut buf = Vec::new();
        match self.lines.read(&mut buf)? {
            None => {
                self.mode = Mode::Done;
                Ok(Step::EndOfFile)
            }
            Some(Line::TooLong(n)) => {
                Ok(Step::Bad(n, format!("line longer than {MAX_LINE} bytes")))
            }
            Some(Line::Text(_)) if buf.iter().all(u8::is_ascii_whitespace) => Ok(Step::Again),
            Some(Line::Text(n)) => Ok(Step::Row(n, buf)),
        }
    }

    fn element_step(&mut self, first: bool) -> io::Result<Step> {
        let Some(b) = self.skip_space()? else {
            self.mode = Mode::Done;
            return Ok(Step::Bad(self.here(), "the array is not closed".into()));
        };
        if b == b']' {
            self.bump()?;
            self.mode = Mode::Done;
            return Ok(match self.skip_space()? {
                None => Step::EndOfFile,
                Some(_) => Step::Bad(self.here(), "text after the array's closing ]".into()),
            });
        }
        if !first {
            if b != b',' {
                self.mode = Mode::Done;
                return Ok(Step::Bad(self.here(), "expected , or ] after an element".into()));
            }
            self.bump()?;
            if self.skip_space()?.is_none() {
                return Ok(Step::Again);
            }
        }
        self.mode = Mode::Array { first: false };
        let line = self.here();
        match self.element()? {
            Ok(bytes) => Ok(Step::Row(line, bytes)),
            Err(problem) => {
                self.mode = Mode::Done;
                Ok(Step::Bad(line, problem))
            }
        }
    }

    /// The bytes of one array element: up to the `,` or `]` that closes it
    /// at depth zero, outside strings. Syntax inside is serde_json's business.
    fn element(&mut self) -> io::Result<Result<Vec<u8>, String>> {
        let mut buf = Vec::new();
        let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
        while let Some(b) = self.peek()? {
            if in_string {
                in_string = b != b'"' || escaped;
                escaped = b == b'\\' && !escaped;
            } else {
                match b {
                    b',' | b']' if depth == 0 => break,
                    b'"' => in_string = true,
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => depth = depth.saturating_sub(1),
                    _ => {}
                }
            }
            buf.push(b);
            self.bump()?;
            if buf.len() > MAX_LINE {
                return Ok(Err(format!("array element longer than {MAX_LINE} bytes")));
            }
        }
        Ok(Ok(buf))
    }
}

impl Iterator for JsonTable {
    type Item = Result<JsonRow, TraceError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let Some(open) = self.current.as_mut() else {
                let path = self.files.pop_front()?;
                match files::open(&path) {
                    Ok(input) => {
                        self.current = Some(Open {
                            path: path.into(),
                            lines: Lines::new(input),
                            mode: Mode::Start,
                        })
                    }
                    Err(e) => return Some(Err(e)),
                }
                continue;
            };
            let path = open.path.clone();
            let bad =
                |line, problem| TraceError::BadRow { path: path.to_path_buf(), line, problem };
            match open.step() {
                Err(source) => {
                    // Nothing after a read error can be trusted.
                    let e = files::io_err(&path, source);
                    self.current = None;
                    self.files.clear();
                    return Some(Err(e));
                }
                Ok(Step::Again) => {}
                Ok(Step::EndOfFile) => self.current = None,
                Ok(Step::Bad(line, problem)) => return Some(Err(bad(line, problem))),
                Ok(Step::Row(line, bytes)) => {
                    return Some(match serde_json::from_slice::<Value>(&bytes) {
                        Ok(value) => Ok(JsonRow { path: path.clone(), line, value }),
                        Err(e) => Err(bad(line, format!("not JSON ({e})"))),
                    })
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::io::Write;

    fn rows(text: &[u8]) -> Vec<Result<(u64, Value), String>> {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("t.json");
        std::fs::File::create(&path).and_then(|mut f| f.write_all(text)).expect("write");
        JsonTable::new(vec![path])
            .map(|r| r.map(|r| (r.line, r.value)).map_err(|e| e.to_string()))
            .collect()
    }

    #[test]
    fn json_lines_give_one_value_per_line() {
        let got = rows(b"{\"a\":1}\n\n{\"a\":2}\n");
        assert_eq!(got, vec![Ok((1, json!({"a":1}))), Ok((3, json!({"a":2})))]);
    }

    #[test]
    fn an_array_is_split_into_its_elements_with_their_lines() {
        let got = rows(b"[\n  {\"a\": \"x,]\"},\n  {\"b\": [1, {\"c\": 2}]}\n]\n");
        assert_eq!(got, vec![Ok((2, json!({"a":"x,]"}))), Ok((3, json!({"b":[1, {"c": 2}]})))]);
        assert_eq!(rows(b"[]"), vec![]);
    }

    #[test]
    fn broken_values_are_bad_rows_naming_their_line() {
        let got = rows(b"{\"a\":1}\n{\"a\":\n{\"a\":3}\n");
        assert!(got[0].is_ok() && got[2].is_ok());
        let err = got[1].as_ref().expect_err("bad line");
        assert!(err.contains(":2: not JSON"), "{err}");
        let got = rows(b"[{\"a\":1}, {\"a\":");
        assert!(got[0].is_ok());
        assert!(got[1].is_err());
    }

    #[test]
    fn dotted_names_are_found_flat_nested_or_underscored() {
        let flat = json!({"resource_request.memory": 1});
        let nested = json!({"resource_request": {"memory": 2}});
        let under = json!({"resource_request_memory": 3});
        assert_eq!(lookup(&flat, "resource_request.memory"), Some(&json!(1)));
        assert_eq!(lookup(&nested, "resource_request.memory"), Some(&json!(2)));
        assert_eq!(lookup(&under, "resource_request.memory"), Some(&json!(3)));
        assert_eq!(lookup(&json!(5), "a"), None);
    }
}

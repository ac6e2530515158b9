//! Reading a file line by line, counting lines exactly (bad rows name them)
//! and refusing to buffer a line without end.

use std::io::{self, BufRead, Read};

/// A line may not be longer than this: trace rows are well under a
/// kilobyte, so a longer line is a broken file, not a row to hold.
pub(crate) const MAX_LINE: usize = 16 << 20;

/// What [`Lines::read`] found.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Line {
    /// A line, now in the buffer without its terminator, at this 1-based number.
    Text(u64),
    /// A line longer than [`MAX_LINE`], skipped.
    TooLong(u64),
}

pub(crate) struct Lines {
    pub input: Box<dyn BufRead + Send>,
    /// Lines consumed so far: the next byte is on line `line + 1`.
    pub line: u64,
}

impl Lines {
    pub fn new(input: Box<dyn BufRead + Send>) -> Lines {
        Lines { input, line: 0 }
    }

    /// The next line into `buf` (cleared first), without `\n` or `\r\n`;
    /// `None` at the end of the file.
    pub fn read(&mut self, buf: &mut Vec<u8>) -> io::Result<Option<Line>> {
        buf.clear();
        let limit = (MAX_LINE + 1) as u64;
        let n = (&mut self.input).take(limit).read_until(b'\n', buf)?;
        if n == 0 {
            return Ok(None);
        }
        self.line += 1;
        if buf.last() == Some(&b'\n') {
            buf.pop();
            if buf.last() == Some(&b'\r') {
                buf.pop();
            }
        } else if buf.len() > MAX_LINE {
            buf.clear();
            self.skip_rest()?;
            return Ok(Some(Line::TooLong(self.line)));
        }
        Ok(Some(Line::Text(self.line)))
    }

    fn skip_rest(&mut self) -> io::Result<()> {
        loop {
            let chunk = self.input.fill_buf()?;
            if chunk.is_empty() {
                return Ok(());
            }
            if let Some(i) = chunk.iter().position(|&b| b == b'\n') {
                self.input.consume(i + 1);
                return Ok(());
            }
            let len = chunk.len();
            self.input.consume(len);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_numbered_and_stripped() {
        let mut l = Lines::new(Box::new(&b"a\r\n\nb"[..]));
        let mut buf = Vec::new();
        assert_eq!(l.read(&mut buf).ok().flatten(), Some(Line::Text(1)));
        assert_eq!(buf, b"a");
        assert_eq!(l.read(&mut buf).ok().flatten(), Some(Line::Text(2)));
        assert_eq!(buf, b"");
        assert_eq!(l.read(&mut buf).ok().flatten(), Some(Line::Text(3)));
        assert_eq!(buf, b"b");
        assert_eq!(l.read(&mut buf).ok().flatten(), None);
    }
}

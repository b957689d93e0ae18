//! Cutting a file's bytes into numbered lines, as they arrive in chunks of any size.
//!
//! A trace of tens of millions of requests is never held whole: it is read a chunk at a time
//! (a block of a file, a piece of a decompressed stream, a slice a browser hands over), and
//! [`Lines`] hands out the whole lines each chunk completes, numbered from 1 in each file.
//! Lines that lie wholly within a chunk are handed out as a slice of it, without a copy; only
//! the start of a line that a chunk boundary cuts is kept, so memory is bounded by the longest
//! line, and a line longer than [`MAX_LINE_BYTES`] is reported and skipped rather than kept.
//! A UTF-8 byte order mark at the start of a file, which some editors write, is dropped.

use alloc::vec::Vec;

use super::MAX_LINE_BYTES;

/// A UTF-8 byte order mark.
const BOM: &[u8] = b"\xEF\xBB\xBF";

/// What [`Lines`] hands out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Piece<'a> {
    /// Whole lines, the first numbered `first`: every line ends in `\n`, except the last line
    /// of a file that does not end in one. Read them with [`numbered`].
    Lines {
        /// Number of the first line (1-based).
        first: u64,
        /// The lines' bytes.
        text: &'a [u8],
    },
    /// Line `line` is longer than [`MAX_LINE_BYTES`]; its bytes are not kept.
    TooLong {
        /// Its number.
        line: u64,
    },
}

/// Cuts files into lines. See the [module docs](self).
#[derive(Debug)]
pub struct Lines {
    /// The start of a line that has not ended yet (and, at a file's start, up to three bytes
    /// that may be a byte order mark).
    pending: Vec<u8>,
    /// The number of the next line.
    next: u64,
    /// Bytes of the current file seen so far, up to 3 (a byte order mark's length).
    head: usize,
    /// Whether the rest of a too long line is being skipped.
    skipping: bool,
}

impl Default for Lines {
    fn default() -> Self {
        Lines { pending: Vec::new(), next: 1, head: 0, skipping: false }
    }
}

impl Lines {
    /// A splitter at the start of a file.
    pub fn new() -> Lines {
        Lines::default()
    }

    /// Bytes held for a line that has not ended yet.
    pub fn pending_bytes(&self) -> usize {
        self.pending.len()
    }

    /// Takes the next chunk of the file, handing `each` every piece it completes, in order.
    /// Stops at the first error `each` returns (the splitter is then at that piece's end).
    pub fn feed<E>(
        &mut self,
        mut chunk: &[u8],
        each: &mut impl FnMut(Piece<'_>) -> Result<(), E>,
    ) -> Result<(), E> {
        if self.head < BOM.len() {
            // The file's first three bytes go through `pending` one chunk at a time (a chunk
            // may end inside a byte order mark): unless they hold a line end, the start of the
            // line is kept there, so all three are side by side when the third arrives.
            let take = (BOM.len() - self.head).min(chunk.len());
            self.pending.extend_from_slice(&chunk[..take]);
            chunk = &chunk[take..];
            self.head += take;
            if self.head == BOM.len() && self.pending.starts_with(BOM) {
                self.pending.drain(..BOM.len());
            }
            // Those bytes may hold whole lines of their own (a file that starts "\n\n").
            let head = core::mem::take(&mut self.pending);
            self.feed_body(&head, each)?;
        }
        self.feed_body(chunk, each)
    }

    fn feed_body<E>(
        &mut self,
        mut chunk: &[u8],
        each: &mut impl FnMut(Piece<'_>) -> Result<(), E>,
    ) -> Result<(), E> {
        if self.skipping {
            let Some(end) = memchr::memchr(b'\n', chunk) else { return Ok(()) };
            chunk = &chunk[end + 1..];
            self.skipping = false;
            self.next += 1;
        }
        if !self.pending.is_empty() {
            // The chunk continues a line begun before.
            let Some(end) = memchr::memchr(b'\n', chunk) else {
                return self.keep(chunk, each);
            };
            if self.pending.len() + end > MAX_LINE_BYTES {
                self.pending.clear();
                let line = self.next;
                self.next += 1;
                each(Piece::TooLong { line })?;
            } else {
                self.pending.extend_from_slice(&chunk[..=end]);
                let first = self.next;
                self.next += 1;
                let result = each(Piece::Lines { first, text: &self.pending });
                self.pending.clear();
                result?;
            }
            chunk = &chunk[end + 1..];
        }
        if let Some(last) = memchr::memrchr(b'\n', chunk) {
            let (text, rest) = chunk.split_at(last + 1);
            let first = self.next;
            self.next += memchr::memchr_iter(b'\n', text).count() as u64;
            each(Piece::Lines { first, text })?;
            chunk = rest;
        }
        self.keep(chunk, each)
    }

    /// Keeps `rest`, the start of a line, or reports the line too long and skips the rest of
    /// it.
    fn keep<E>(
        &mut self,
        rest: &[u8],
        each: &mut impl FnMut(Piece<'_>) -> Result<(), E>,
    ) -> Result<(), E> {
        if self.pending.len() + rest.len() > MAX_LINE_BYTES {
            self.pending.clear();
            self.skipping = true;
            return each(Piece::TooLong { line: self.next });
        }
        self.pending.extend_from_slice(rest);
        Ok(())
    }

    /// Ends the file: hands out its last line if it did not end in `\n`, and gets ready for
    /// the next file (numbered from 1 again).
    pub fn finish<E>(
        &mut self,
        each: &mut impl FnMut(Piece<'_>) -> Result<(), E>,
    ) -> Result<(), E> {
        let pending = core::mem::take(&mut self.pending);
        let first = self.next;
        *self = Lines::default();
        if pending.is_empty() {
            return Ok(());
        }
        // A file shorter than a byte order mark may still hold whole lines.
        each(Piece::Lines { first, text: &pending })
    }
}

/// The lines of a [`Piece::Lines`] text, each with its number and without its `\n` (a text
/// that does not end in `\n` ends with a line all the same).
pub fn numbered(first: u64, text: &[u8]) -> impl Iterator<Item = (u64, &[u8])> {
    let mut rest = Some(text).filter(|t| !t.is_empty());
    let mut number = first;
    core::iter::from_fn(move || {
        let text = rest?;
        let line = match memchr::memchr(b'\n', text) {
            Some(end) => {
                rest = Some(&text[end + 1..]).filter(|r| !r.is_empty());
                &text[..end]
            }
            None => {
                rest = None;
                text
            }
        };
        number += 1;
        Some((number - 1, line))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;

    /// The lines `Lines` hands out for `file` cut at the given chunk sizes.
    fn split(file: &[u8], sizes: &[usize]) -> Vec<(u64, Vec<u8>)> {
        let mut lines = Lines::new();
        let mut out = Vec::new();
        let mut each = |piece: Piece<'_>| -> Result<(), ()> {
            match piece {
                Piece::Lines { first, text } => {
                    out.extend(numbered(first, text).map(|(n, l)| (n, l.to_vec())));
                }
                Piece::TooLong { line } => out.push((line, b"<too long>".to_vec())),
            }
            Ok(())
        };
        let mut rest = file;
        for &size in sizes.iter().cycle() {
            if rest.is_empty() {
                break;
            }
            let (chunk, tail) = rest.split_at(size.min(rest.len()));
            lines.feed(chunk, &mut each).unwrap();
            rest = tail;
        }
        lines.finish(&mut each).unwrap();
        out
    }

    /// What a plain split of the whole file gives, byte order mark dropped.
    fn expected(file: &[u8]) -> Vec<(u64, Vec<u8>)> {
        let file = file.strip_prefix(BOM).unwrap_or(file);
        numbered(1, file).map(|(n, l)| (n, l.to_vec())).collect()
    }

    #[test]
    fn any_chunking_gives_the_same_numbered_lines() {
        let files: [&[u8]; 8] = [
            b"",
            b"\n",
            b"\n\n",
            b"a",
            b"a\nbb\n\nccc",
            b"a\nbb\n\nccc\n",
            b"\xEF\xBB\xBF{\"x\": 1}\n{\"y\": 2}",
            b"\xEF\xBB",
        ];
        for file in files {
            for sizes in [vec![1], vec![2], vec![3], vec![1, 5], vec![100], vec![2, 1, 7]] {
                assert_eq!(split(file, &sizes), expected(file), "{file:?} in chunks of {sizes:?}");
            }
        }
    }

    #[test]
    fn a_bom_is_dropped_at_the_start_of_each_file_only() {
        let mut lines = Lines::new();
        let mut got = Vec::new();
        let mut each = |piece: Piece<'_>| -> Result<(), ()> {
            if let Piece::Lines { first, text } = piece {
                got.extend(numbered(first, text).map(|(n, l)| (n, l.to_vec())));
            }
            Ok(())
        };
        lines.feed(b"\xEF\xBB\xBFa\n\xEF\xBB\xBFb\n", &mut each).unwrap();
        lines.finish(&mut each).unwrap();
        lines.feed(b"\xEF", &mut each).unwrap();
        lines.feed(b"\xBB\xBFc\n", &mut each).unwrap();
        lines.finish(&mut each).unwrap();
        assert_eq!(
            got,
            [(1, b"a".to_vec()), (2, b"\xEF\xBB\xBFb".to_vec()), (1, b"c".to_vec())],
            "a second file is numbered from 1 and loses its own mark"
        );
    }

    /// A line whose last byte comes in a later chunk is judged with it: 64 MiB is read, one
    /// byte more is too long; the next line is line 2 either way.
    #[test]
    fn a_line_completed_by_a_later_chunk_is_judged_whole() {
        for (len, want) in [(MAX_LINE_BYTES, None), (MAX_LINE_BYTES + 1, Some(1))] {
            let mut lines = Lines::new();
            let (mut too_long, mut read) = (None, Vec::new());
            let mut each = |piece: Piece<'_>| -> Result<(), ()> {
                match piece {
                    Piece::TooLong { line } => too_long = Some(line),
                    Piece::Lines { first, text } => read.push((first, text.len())),
                }
                Ok(())
            };
            lines.feed(&vec![b'x'; len - 1], &mut each).unwrap();
            lines.feed(b"x\ny\n", &mut each).unwrap();
            assert_eq!(too_long, want, "a line of {len} bytes");
            let first = if want.is_none() { vec![(1, len + 1)] } else { vec![] };
            assert_eq!(read, [first, vec![(2, 2)]].concat(), "a line of {len} bytes");
        }
    }

    /// The kept start of a line may reach 64 MiB; one byte more and it is dropped, the line
    /// reported at once and its rest skipped up to its end.
    #[test]
    fn the_kept_start_of_a_line_stops_at_64_mib() {
        for (more, reported) in [(MAX_LINE_BYTES - 1, false), (MAX_LINE_BYTES, true)] {
            let mut lines = Lines::new();
            let (mut too_long, mut read) = (None, Vec::new());
            let mut each = |piece: Piece<'_>| -> Result<(), ()> {
                match piece {
                    Piece::TooLong { line } => too_long = Some(line),
                    Piece::Lines { first, text } => {
                        read.extend(numbered(first, text).map(|(n, l)| (n, l.len())));
                    }
                }
                Ok(())
            };
            lines.feed(b"a\nx", &mut each).unwrap();
            lines.feed(&vec![b'x'; more], &mut each).unwrap();
            let kept = lines.pending_bytes();
            // The line ends: after more of its bytes if it was reported (they are skipped).
            let rest: &[u8] = if reported { b"xx\nbb\n" } else { b"\nbb\n" };
            lines.feed(rest, &mut each).unwrap();
            assert_eq!(too_long, reported.then_some(2), "1 + {more} bytes");
            assert_eq!(kept, if reported { 0 } else { 1 + more });
            let second = if reported { vec![] } else { vec![(2, 1 + more)] };
            assert_eq!(read, [vec![(1, 1)], second, vec![(3, 2)]].concat(), "1 + {more} bytes");
        }
    }

    /// Only the start of a line a chunk cuts is kept (and, at a file's start, up to three
    /// bytes that may be a byte order mark).
    #[test]
    fn only_the_start_of_an_unfinished_line_is_kept() {
        let mut lines = Lines::new();
        let mut nothing = |_: Piece<'_>| -> Result<(), ()> { Ok(()) };
        let mut kept = |chunk: &[u8]| {
            lines.feed(chunk, &mut nothing).unwrap();
            lines.pending_bytes()
        };
        assert_eq!(kept(b"ab"), 2);
        assert_eq!(kept(b"c"), 3);
        assert_eq!(kept(b"d\nef"), 2);
        assert_eq!(kept(b"g\nh\n"), 0);
        assert_eq!(kept(b"12345"), 5);
    }

    #[test]
    fn a_too_long_line_is_reported_once_and_the_next_lines_go_on() {
        let mut file = b"short\n".to_vec();
        file.resize(file.len() + MAX_LINE_BYTES + 1, b'x');
        file.extend_from_slice(b"\nafter\nlast");
        let want = [
            (1, b"short".to_vec()),
            (2, b"<too long>".to_vec()),
            (3, b"after".to_vec()),
            (4, b"last".to_vec()),
        ];
        for sizes in [vec![4096], vec![MAX_LINE_BYTES / 3], vec![1 << 20, 7]] {
            let got = split(&file, &sizes);
            assert_eq!(got, want, "chunks of {sizes:?}");
        }
        // A too long line inside one large chunk is handed out whole; `numbered` shows it, and
        // the caller judges its length.
        let got = split(&file, &[file.len()]);
        assert_eq!(got[1].0, 2);
        assert_eq!(got[1].1.len(), MAX_LINE_BYTES + 1);
        // The kept start of a line never exceeds the limit.
        let mut lines = Lines::new();
        let mut nothing = |_: Piece<'_>| -> Result<(), ()> { Ok(()) };
        for _ in 0..3 {
            lines.feed(&vec![b'x'; MAX_LINE_BYTES / 2], &mut nothing).unwrap();
            assert!(lines.pending_bytes() <= MAX_LINE_BYTES);
        }
    }
}

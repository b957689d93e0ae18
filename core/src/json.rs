//! A pull reader of JSON text, for trace records: the caller asks for the value it expects
//! (an object, an unsigned integer, an array of them, a string) and gets it or an error that
//! says what was found instead, at which byte.
//!
//! Trace records are JSON objects of a handful of known keys whose values are mostly integers
//! and arrays of integers. Reading them straight into their fields, without a generic layer in
//! between, makes parsing several times faster than a general deserializer and keeps the
//! browser build small (no float formatting or parsing, no generic error machinery). It reads
//! one complete text (a line, or one element of a larger document that `trace` has cut out);
//! everything it accepts is valid JSON (RFC 8259), and a differential fuzz target checks it
//! against `serde_json` (see `kvreuse-tests`).
//!
//! Values the caller does not want are skipped, but checked against JSON's grammar all the
//! same (as `serde_json` skips them: a skipped string's bytes are not decoded). Objects and
//! arrays nest up to [`MAX_DEPTH`] levels, counting the record's own.

use alloc::borrow::Cow;
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

/// How deeply objects and arrays may nest (as `serde_json`'s default limit allows).
pub const MAX_DEPTH: usize = 127;

/// Why a text could not be read, and where (a byte offset into it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JsonError {
    /// What is wrong.
    pub message: String,
    /// Byte offset where reading stopped.
    pub offset: usize,
}

impl fmt::Display for JsonError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// A reader positioned in a JSON text. See the [module docs](self).
#[derive(Clone, Debug)]
pub struct Json<'a> {
    text: &'a [u8],
    at: usize,
    /// Objects and arrays open around the position.
    depth: usize,
}

/// The kind of value that starts at the reader's position.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `{`.
    Object,
    /// `[`.
    Array,
    /// `"`.
    String,
    /// A digit or `-`.
    Number,
    /// `true` or `false`.
    Bool,
    /// `null`.
    Null,
    /// Anything else (not JSON).
    Invalid,
    /// The end of the text.
    End,
}

impl<'a> Json<'a> {
    /// A reader at the start of `text`.
    pub fn new(text: &'a [u8]) -> Json<'a> {
        Json { text, at: 0, depth: 0 }
    }

    /// The byte offset reached.
    pub fn offset(&self) -> usize {
        self.at
    }

    /// An error at the current position.
    pub fn error(&self, message: impl Into<String>) -> JsonError {
        JsonError { message: message.into(), offset: self.at }
    }

    #[inline(always)]
    fn skip_blanks(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.text.get(self.at) {
            self.at += 1;
        }
    }

    /// The kind of the next value (after blanks).
    pub fn peek(&mut self) -> Kind {
        self.skip_blanks();
        match self.text.get(self.at) {
            None => Kind::End,
            Some(b'{') => Kind::Object,
            Some(b'[') => Kind::Array,
            Some(b'"') => Kind::String,
            Some(b'-' | b'0'..=b'9') => Kind::Number,
            Some(b't' | b'f') => Kind::Bool,
            Some(b'n') => Kind::Null,
            Some(_) => Kind::Invalid,
        }
    }

    /// Describes the value at the current position for an error message: its kind and, for a
    /// short scalar, its text.
    fn found(&mut self) -> String {
        let kind = self.peek();
        let start = self.at;
        let text = match kind {
            Kind::End => return "the end of the text".into(),
            Kind::Object => return "an object".into(),
            Kind::Array => return "an array".into(),
            Kind::Invalid => {
                // Quoted rather than `{:?}`, whose Unicode tables the browser build does without.
                let mut c = String::new();
                c.push(self.char_here());
                return alloc::format!("the character {}", crate::names::Quoted(&c));
            }
            _ => {
                // The token's extent, scanned plainly (no parsing: this runs on errors).
                let rest = &self.text[start..];
                let len = match kind {
                    Kind::String => {
                        rest[1..].iter().position(|&b| b == b'"').map_or(rest.len(), |end| end + 2)
                    }
                    Kind::Number => rest
                        .iter()
                        .position(|b| !matches!(b, b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E'))
                        .unwrap_or(rest.len()),
                    _ => rest.iter().position(|b| !b.is_ascii_alphabetic()).unwrap_or(rest.len()),
                };
                &rest[..len.min(40)]
            }
        };
        let text = String::from_utf8_lossy(text);
        match kind {
            Kind::String => alloc::format!("the string {text}"),
            Kind::Number => alloc::format!("the number {text}"),
            _ => alloc::format!("`{text}`"),
        }
    }

    /// The (UTF-8) character at the current position.
    fn char_here(&self) -> char {
        let rest = &self.text[self.at..];
        let len = rest.len().min(4);
        (1..=len)
            .find_map(|n| core::str::from_utf8(&rest[..n]).ok())
            .and_then(|s| s.chars().next())
            .unwrap_or(char::REPLACEMENT_CHARACTER)
    }

    /// An error saying what was expected and what was found.
    pub fn expected(&mut self, what: &str) -> JsonError {
        let found = self.found();
        self.error(alloc::format!("expected {what}, found {found}"))
    }

    fn eat(&mut self, byte: u8) -> bool {
        self.skip_blanks();
        if self.text.get(self.at) == Some(&byte) {
            self.at += 1;
            true
        } else {
            false
        }
    }

    /// Reads an object, calling `member` with each key (unescaped, valid UTF-8) and the
    /// reader positioned at its value, which `member` must read or skip.
    pub fn object(
        &mut self,
        mut member: impl FnMut(&mut Self, &[u8]) -> Result<(), JsonError>,
    ) -> Result<(), JsonError> {
        if !self.eat(b'{') {
            return Err(self.expected("an object"));
        }
        self.enter()?;
        if self.eat(b'}') {
            self.depth -= 1;
            return Ok(());
        }
        loop {
            if self.peek() != Kind::String {
                return Err(self.expected("a key (a string)"));
            }
            // Keys are short and nearly always plain ASCII: those need no decoding.
            let plain = self.text[self.at + 1..]
                .iter()
                .position(|&b| b == b'"' || b == b'\\' || !(0x20..0x80).contains(&b))
                .filter(|&end| self.text[self.at + 1 + end] == b'"');
            let key: Cow<'a, [u8]> = match plain {
                Some(len) => {
                    let key = &self.text[self.at + 1..self.at + 1 + len];
                    self.at += len + 2;
                    Cow::Borrowed(key)
                }
                None => match self.string()? {
                    Cow::Borrowed(s) => Cow::Borrowed(s.as_bytes()),
                    Cow::Owned(s) => Cow::Owned(s.into_bytes()),
                },
            };
            if !self.eat(b':') {
                return Err(self.expected("`:` after a key"));
            }
            member(self, &key)?;
            if self.eat(b',') {
                continue;
            }
            if self.eat(b'}') {
                self.depth -= 1;
                return Ok(());
            }
            return Err(self.expected("`,` or `}` in an object"));
        }
    }

    /// One more object or array open; an error past [`MAX_DEPTH`].
    fn enter(&mut self) -> Result<(), JsonError> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            self.at -= 1;
            return Err(self.error("objects and arrays nested too deeply"));
        }
        Ok(())
    }

    /// Reads an array, calling `item` with the reader positioned at each element, which `item`
    /// must read or skip.
    pub fn array(
        &mut self,
        mut item: impl FnMut(&mut Self) -> Result<(), JsonError>,
    ) -> Result<(), JsonError> {
        if !self.eat(b'[') {
            return Err(self.expected("an array"));
        }
        self.enter()?;
        if self.eat(b']') {
            self.depth -= 1;
            return Ok(());
        }
        loop {
            item(self)?;
            if self.eat(b',') {
                continue;
            }
            if self.eat(b']') {
                self.depth -= 1;
                return Ok(());
            }
            return Err(self.expected("`,` or `]` in an array"));
        }
    }

    /// Reads an unsigned integer (`-0` reads as 0, as JSON has it equal to 0); anything else
    /// (a fraction, an exponent, a sign, a number beyond `u64`) is an error.
    #[inline]
    pub fn u64(&mut self) -> Result<u64, JsonError> {
        self.skip_blanks();
        let start = self.at;
        let negative = self.text.get(self.at) == Some(&b'-');
        let digits_at = start + usize::from(negative);
        let mut value: u64 = 0;
        let mut end = digits_at;
        let mut overflow = false;
        while let Some(&d @ b'0'..=b'9') = self.text.get(end) {
            match value.checked_mul(10).and_then(|v| v.checked_add(u64::from(d - b'0'))) {
                Some(v) => value = v,
                None => overflow = true,
            }
            end += 1;
        }
        let digits = end - digits_at;
        let leading_zero = digits > 1 && self.text[digits_at] == b'0';
        let more = matches!(self.text.get(end), Some(b'.' | b'e' | b'E'));
        if digits == 0 || leading_zero || more || overflow || (negative && value != 0) {
            return Err(self.expected("an unsigned integer (0..=18446744073709551615)"));
        }
        self.at = end;
        Ok(value)
    }

    /// Reads an unsigned integer that fits `u32` (a token id).
    #[inline]
    pub fn u32(&mut self) -> Result<u32, JsonError> {
        let mut probe = self.clone();
        match probe.u64().ok().and_then(|v| u32::try_from(v).ok()) {
            Some(v) => {
                *self = probe;
                Ok(v)
            }
            None => Err(self.expected("a token id (an integer in 0..=4294967295)")),
        }
    }

    /// Reads an array of unsigned integers into `out` (appended).
    ///
    /// The hot loop of trace parsing (a Mooncake record is mostly its `hash_ids`): integers of
    /// up to 19 digits, which cannot overflow, are read without checks; anything else goes
    /// through [`u64`](Self::u64) and its errors.
    pub fn u64_array(&mut self, out: &mut Vec<u64>) -> Result<(), JsonError> {
        if !self.eat(b'[') {
            return Err(self.expected("an array"));
        }
        if self.eat(b']') {
            return Ok(());
        }
        let t = self.text;
        // One allocation: as many slots as commas before the array's end (a cheap scan), and
        // no more than the text there could hold (a digit and a comma each): a run of commas
        // reserves no more than a valid array of its length needs.
        if let Some(end) = memchr::memchr(b']', &t[self.at..]) {
            let commas = memchr::memchr_iter(b',', &t[self.at..self.at + end]).count();
            out.reserve(commas.min(end / 2) + 1);
        }
        loop {
            self.skip_blanks();
            // Fast path: a run of digits not starting with 0 (or a lone 0), ended by a blank,
            // `,` or `]`.
            let start = self.at;
            let (value, len) = leading_digits(&t[start..]);
            let i = start + len;
            let plain = (1..=19).contains(&len)
                && (t[start] != b'0' || len == 1)
                && matches!(t.get(i), Some(b',' | b']' | b' ' | b'\t' | b'\n' | b'\r'));
            if plain {
                self.at = i;
                out.push(value);
            } else {
                out.push(self.u64()?);
            }
            match t.get(self.at) {
                Some(b',') => self.at += 1,
                Some(b']') => {
                    self.at += 1;
                    return Ok(());
                }
                _ => {
                    if self.eat(b',') {
                        continue;
                    }
                    if self.eat(b']') {
                        return Ok(());
                    }
                    return Err(self.expected("`,` or `]` in an array"));
                }
            }
        }
    }

    /// Reads an array of token ids into `out` (appended).
    pub fn u32_array(&mut self, out: &mut Vec<u32>) -> Result<(), JsonError> {
        self.array(|json| {
            out.push(json.u32()?);
            Ok(())
        })
    }

    /// Reads a non-negative decimal number (`12`, `0.5`, `1.25e3`) as an integer count of
    /// `10^-scale` units, rounded to the nearest (half up): `decimal(3)` reads seconds as
    /// milliseconds, exactly, without floating point.
    pub fn decimal(&mut self, scale: u32) -> Result<u64, JsonError> {
        self.skip_blanks();
        let start = self.at;
        let mut probe = self.clone();
        if probe.number().is_err()
            || self.text[start] == b'-' && !is_zero(&self.text[start..probe.at])
        {
            return Err(self.expected("a non-negative number"));
        }
        let text = &self.text[start..probe.at];
        let (mantissa, exponent) = match text.iter().position(|&b| b == b'e' || b == b'E') {
            Some(e) => (&text[..e], &text[e + 1..]),
            None => (text, &b""[..]),
        };
        // The exponent, clamped far beyond any value that fits (a longer one overflows below).
        let mut exp: i64 = 0;
        let (sign, digits) = match exponent.first() {
            Some(b'-') => (-1, &exponent[1..]),
            Some(b'+') => (1, &exponent[1..]),
            _ => (1, exponent),
        };
        for &d in digits {
            exp = (exp * 10 + i64::from(d - b'0')).min(1_000);
        }
        exp = sign * exp + i64::from(scale);
        let mantissa = mantissa.strip_prefix(b"-").unwrap_or(mantissa);
        let (int, frac) = match mantissa.iter().position(|&b| b == b'.') {
            Some(dot) => (&mantissa[..dot], &mantissa[dot + 1..]),
            None => (mantissa, &b""[..]),
        };
        exp -= frac.len() as i64;
        // value = digits(int ++ frac) * 10^exp, rounded.
        let mut value: u64 = 0;
        let too_large = || self.error("the number is too large");
        // Digits beyond the scale are dropped (rounding on the first of them).
        let kept = (int.len() + frac.len()) as i64 + exp.min(0);
        let mut round_up = false;
        for (index, d) in (0i64..).zip(int.iter().chain(frac).map(|d| u64::from(d - b'0'))) {
            if index < kept {
                value =
                    value.checked_mul(10).and_then(|v| v.checked_add(d)).ok_or_else(too_large)?;
            } else if index == kept {
                round_up = d >= 5;
            }
        }
        for _ in 0..exp {
            value = value.checked_mul(10).ok_or_else(too_large)?;
        }
        if round_up {
            value = value.checked_add(1).ok_or_else(too_large)?;
        }
        self.at = probe.at;
        Ok(value)
    }

    /// Checks a number at the current position and moves past it (JSON's grammar).
    fn number(&mut self) -> Result<(), JsonError> {
        self.skip_blanks();
        let t = self.text;
        let mut i = self.at;
        let digits = |i: &mut usize| {
            let start = *i;
            while t.get(*i).is_some_and(u8::is_ascii_digit) {
                *i += 1;
            }
            *i - start
        };
        if t.get(i) == Some(&b'-') {
            i += 1;
        }
        match t.get(i) {
            Some(b'0') => i += 1,
            Some(b'1'..=b'9') => {
                digits(&mut i);
            }
            _ => return Err(self.expected("a number")),
        }
        if t.get(i) == Some(&b'.') {
            i += 1;
            if digits(&mut i) == 0 {
                self.at = i;
                return Err(self.error("a number's fraction needs a digit"));
            }
        }
        if let Some(b'e' | b'E') = t.get(i) {
            i += 1;
            if let Some(b'+' | b'-') = t.get(i) {
                i += 1;
            }
            if digits(&mut i) == 0 {
                self.at = i;
                return Err(self.error("a number's exponent needs a digit"));
            }
        }
        self.at = i;
        Ok(())
    }

    /// Reads a string, unescaped (borrowed when it has no escapes).
    pub fn string(&mut self) -> Result<Cow<'a, str>, JsonError> {
        if !self.eat(b'"') {
            return Err(self.expected("a string"));
        }
        let start = self.at;
        let t = self.text;
        // The common case: no escapes.
        let mut i = start;
        while let Some(&b) = t.get(i) {
            match b {
                b'"' => {
                    let s = core::str::from_utf8(&t[start..i]).map_err(|e| JsonError {
                        message: "invalid UTF-8 in a string".into(),
                        offset: start + e.valid_up_to(),
                    })?;
                    self.at = i + 1;
                    return Ok(Cow::Borrowed(s));
                }
                b'\\' => break,
                0..=0x1f => {
                    self.at = i;
                    return Err(self.error("a control character in a string (escape it)"));
                }
                _ => i += 1,
            }
        }
        if i >= t.len() {
            self.at = i;
            return Err(self.error("a string that does not end"));
        }
        let mut out: Vec<u8> = t[start..i].to_vec();
        loop {
            match t.get(i) {
                None => {
                    self.at = i;
                    return Err(self.error("a string that does not end"));
                }
                Some(b'"') => break,
                Some(b'\\') => {
                    i += 1;
                    let escaped = match t.get(i) {
                        Some(b'"') => b'"',
                        Some(b'\\') => b'\\',
                        Some(b'/') => b'/',
                        Some(b'b') => 8,
                        Some(b'f') => 12,
                        Some(b'n') => b'\n',
                        Some(b'r') => b'\r',
                        Some(b't') => b'\t',
                        Some(b'u') => {
                            self.at = i - 1;
                            let c = self.unicode_escape(&mut i)?;
                            let mut buf = [0u8; 4];
                            out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
                            continue;
                        }
                        _ => {
                            self.at = i - 1;
                            return Err(self.error("an invalid escape in a string"));
                        }
                    };
                    out.push(escaped);
                    i += 1;
                }
                Some(&b) if b < 0x20 => {
                    self.at = i;
                    return Err(self.error("a control character in a string (escape it)"));
                }
                Some(&b) => {
                    out.push(b);
                    i += 1;
                }
            }
        }
        let s = String::from_utf8(out).map_err(|_| {
            // Escapes decode to whole characters, so the decoded text is UTF-8 exactly when the
            // raw text is: the error is at the raw text's first byte that is not.
            let valid = core::str::from_utf8(&t[start..i]).err().map_or(0, |e| e.valid_up_to());
            JsonError { message: "invalid UTF-8 in a string".into(), offset: start + valid }
        })?;
        self.at = i + 1;
        Ok(Cow::Owned(s))
    }

    /// Reads the `\uXXXX` escape (and its low surrogate, for a high one) at `*i` (pointing at
    /// the `u`), moving `*i` past it.
    fn unicode_escape(&self, i: &mut usize) -> Result<char, JsonError> {
        let hex = |at: usize| -> Option<u32> {
            let digits = self.text.get(at..at + 4)?;
            let s = core::str::from_utf8(digits).ok()?;
            if !s.bytes().all(|b| b.is_ascii_hexdigit()) {
                return None;
            }
            u32::from_str_radix(s, 16).ok()
        };
        let bad = || self.error("an invalid \\u escape in a string");
        let high = hex(*i + 1).ok_or_else(bad)?;
        *i += 5;
        let code = if (0xD800..0xDC00).contains(&high) {
            if self.text.get(*i..*i + 2) != Some(b"\\u") {
                return Err(bad());
            }
            let low = hex(*i + 2).ok_or_else(bad)?;
            if !(0xDC00..0xE000).contains(&low) {
                return Err(bad());
            }
            *i += 6;
            0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00)
        } else {
            high
        };
        char::from_u32(code).ok_or_else(bad)
    }

    /// Skips a value of any kind, checking it against JSON's grammar.
    pub fn skip(&mut self) -> Result<(), JsonError> {
        match self.peek() {
            Kind::Object => self.object(|json, _| json.skip()),
            Kind::Array => self.array(Json::skip),
            Kind::String => self.skip_string(),
            Kind::Number => self.number(),
            Kind::Bool | Kind::Null => {
                for literal in [&b"true"[..], b"false", b"null"] {
                    if self.text[self.at..].starts_with(literal) {
                        self.at += literal.len();
                        return Ok(());
                    }
                }
                Err(self.expected("a value"))
            }
            Kind::Invalid | Kind::End => Err(self.expected("a value")),
        }
    }

    /// Skips a string: no control characters, valid escapes (`\uXXXX` of any four hex digits);
    /// its bytes are not decoded.
    fn skip_string(&mut self) -> Result<(), JsonError> {
        self.at += 1;
        loop {
            match self.text.get(self.at) {
                None => return Err(self.error("a string that does not end")),
                Some(b'"') => {
                    self.at += 1;
                    return Ok(());
                }
                Some(b'\\') => {
                    let escape = self.text.get(self.at + 1).copied();
                    let len = match escape {
                        Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => 2,
                        Some(b'u') => {
                            let hex = self.text.get(self.at + 2..self.at + 6);
                            if !hex.is_some_and(|h| h.iter().all(u8::is_ascii_hexdigit)) {
                                return Err(self.error("an invalid \\u escape in a string"));
                            }
                            6
                        }
                        _ => return Err(self.error("an invalid escape in a string")),
                    };
                    self.at += len;
                }
                Some(0..=0x1f) => {
                    return Err(self.error("a control character in a string (escape it)"));
                }
                Some(_) => self.at += 1,
            }
        }
    }

    /// Reads `-1` if it is next (the "none" of some integer fields); returns whether it was.
    pub fn minus_one(&mut self) -> bool {
        self.skip_blanks();
        let rest = &self.text[self.at..];
        let more = matches!(rest.get(2), Some(b'0'..=b'9' | b'.' | b'e' | b'E'));
        if rest.starts_with(b"-1") && !more {
            self.at += 2;
            true
        } else {
            false
        }
    }

    /// Reads `true` or `false`.
    pub fn bool(&mut self) -> Result<bool, JsonError> {
        self.skip_blanks();
        let rest = &self.text[self.at..];
        let (value, len) = if rest.starts_with(b"true") {
            (true, 4)
        } else if rest.starts_with(b"false") {
            (false, 5)
        } else {
            return Err(self.expected("true or false"));
        };
        if matches!(rest.get(len), Some(b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'_')) {
            return Err(self.expected("true or false"));
        }
        self.at += len;
        Ok(value)
    }

    /// Reads `null` if it is next; returns whether it was.
    pub fn null(&mut self) -> bool {
        self.skip_blanks();
        if self.text[self.at..].starts_with(b"null") {
            self.at += 4;
            true
        } else {
            false
        }
    }

    /// Checks that nothing but blanks follows.
    pub fn end(&mut self) -> Result<(), JsonError> {
        match self.peek() {
            Kind::End => Ok(()),
            _ => Err(self.error("trailing characters after the value")),
        }
    }
}

/// The value and the length of the run of ASCII digits that starts `text`, wrapping on
/// overflow (callers check the length). Eight bytes are examined at once: the digits found
/// among them become a number with a few multiplications rather than a loop of branches whose
/// length the branch predictor cannot guess.
#[inline(always)]
fn leading_digits(text: &[u8]) -> (u64, usize) {
    if let Some(&eight) = text.first_chunk::<8>() {
        let v = u64::from_le_bytes(eight).wrapping_sub(0x3030_3030_3030_3030);
        // A byte's high bit is set here exactly when it is not a digit: below '0' it wrapped
        // (or borrowed from an earlier non-digit), above '9' adding 0x76 carries into bit 7.
        // Borrows and carries only move toward later bytes, so the first non-digit is exact.
        let not_digit = (v | v.wrapping_add(0x7676_7676_7676_7676)) & 0x8080_8080_8080_8080;
        let digits = (not_digit.trailing_zeros() / 8) as usize;
        if digits == 0 {
            return (0, 0);
        }
        if digits < 8 {
            // Keep the digits, as the high bytes, below leading zeros.
            return (eight_digits(v << (8 * (8 - digits))), digits);
        }
    }
    let mut value: u64 = 0;
    let mut len = 0;
    while let Some(&d @ b'0'..=b'9') = text.get(len) {
        value = value.wrapping_mul(10).wrapping_add(u64::from(d - b'0'));
        len += 1;
    }
    (value, len)
}

/// The number eight digit values (0 to 9, one per byte, the first in the lowest byte) write.
#[inline(always)]
fn eight_digits(v: u64) -> u64 {
    // Pairs, then quadruples, then the whole: three multiply-add steps.
    let v = v.wrapping_mul(10).wrapping_add(v >> 8);
    let low = (v & 0x0000_00ff_0000_00ff).wrapping_mul(100 + (1_000_000 << 32));
    let high = ((v >> 16) & 0x0000_00ff_0000_00ff).wrapping_mul(1 + (10_000 << 32));
    low.wrapping_add(high) >> 32
}

/// Whether a number's text is a zero (`0`, `-0`, `0.0`, `-0e5`).
fn is_zero(text: &[u8]) -> bool {
    text.iter().take_while(|&&b| b != b'e' && b != b'E').all(|&b| matches!(b, b'-' | b'0' | b'.'))
}

/// Tracks which of up to 64 keys an object has given, to refuse one given twice.
#[derive(Clone, Copy, Debug, Default)]
pub struct Seen(u64);

impl Seen {
    /// Records key `index` (its position in the caller's list); an error naming `key` if it
    /// was seen before.
    pub fn first(&mut self, index: usize, key: &[u8], json: &Json<'_>) -> Result<(), JsonError> {
        let bit = 1u64 << index;
        if self.0 & bit != 0 {
            let key = String::from_utf8_lossy(key);
            return Err(json.error(alloc::format!("duplicate key \"{key}\"")));
        }
        self.0 |= bit;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_rng::xorshift;
    use alloc::string::ToString;
    use alloc::vec;

    fn skip(text: &str) -> Result<(), JsonError> {
        let mut json = Json::new(text.as_bytes());
        json.skip()?;
        json.end()
    }

    #[test]
    fn valid_json_is_skipped_whole() {
        for text in [
            "0",
            "-0",
            "12.5e-3",
            "1E+2",
            " true ",
            "false",
            "null",
            "\"\"",
            "\"a\\\"b\\\\c\\/\\b\\f\\n\\r\\t\\u00e9\\ud83d\\ude00\"",
            "[]",
            "[1, [2, {\"a\": [null]}], \"x\"]",
            "{}",
            "{\"a\": {\"b\": {}}, \"c\": []}",
            "\"é ü 中\"",
        ] {
            assert_eq!(skip(text), Ok(()), "{text}");
        }
    }

    #[test]
    fn invalid_json_is_an_error_at_its_place() {
        for (text, offset) in [
            ("", 0),
            ("01", 1),
            ("1.", 2),
            ("1e", 2),
            ("+1", 0),
            ("[1,]", 3),
            ("[1 2]", 3),
            ("{\"a\" 1}", 5),
            ("{\"a\": 1,}", 8),
            ("{1: 2}", 1),
            ("\"abc", 4),
            ("\"a\\x\"", 2),
            ("\"\\u12G4\"", 1),
            ("\"tab\there\"", 4),
            ("tru", 0),
            ("nul", 0),
            ("[1] 2", 4),
            ("'a'", 0),
        ] {
            let error = skip(text).unwrap_err();
            assert_eq!(error.offset, offset, "{text:?}: {error:?}");
        }
        let deep = "[".repeat(MAX_DEPTH + 1) + &"]".repeat(MAX_DEPTH + 1);
        let error = skip(&deep).unwrap_err();
        assert!(error.message.contains("nested too deeply"), "{error:?}");
        assert_eq!(error.offset, MAX_DEPTH);
        assert_eq!(skip(&("[".repeat(MAX_DEPTH) + &"]".repeat(MAX_DEPTH))), Ok(()));
    }

    #[test]
    fn errors_say_what_was_found() {
        const U64: &str = "expected an unsigned integer (0..=18446744073709551615), found";
        let integer = |text: &[u8]| Json::new(text).u64().unwrap_err().to_string();
        for (text, found) in [
            ("", "the end of the text"),
            ("  ", "the end of the text"),
            ("{\"a\": 1}", "an object"),
            ("[1]", "an array"),
            ("\"abc\", 1", "the string \"abc\""),
            ("\"abc", "the string \"abc"),
            ("-12.5e+3]", "the number -12.5e+3"),
            ("truex", "`truex`"),
            ("nul,", "`nul`"),
            ("'a'", "the character \"'\""),
            ("\u{e9}", "the character \"\u{e9}\""),
            ("\u{1f600}x", "the character \"\u{1f600}\""),
        ] {
            assert_eq!(integer(text.as_bytes()), alloc::format!("{U64} {found}"), "{text:?}");
        }
        // A byte that starts no UTF-8 character; a long token is cut at 40 bytes.
        assert_eq!(integer(b"\xff"), alloc::format!("{U64} the character \"\u{fffd}\""));
        let long = "1".repeat(50) + ".5";
        assert_eq!(integer(long.as_bytes()), alloc::format!("{U64} the number {}", &long[..40]));
        let error = skip("").unwrap_err();
        assert_eq!(error.message, "expected a value, found the end of the text");
        assert_eq!(error.to_string(), error.message);
    }

    #[test]
    fn empty_objects_and_arrays_close_their_level() {
        // Siblings do not add up: each value closes the level it opened, empty or not.
        for value in ["{}", "[]", "{ }", "[ ]", "{\"a\": {}}", "[[]]"] {
            let text = alloc::format!("[{}]", vec![value; 2 * MAX_DEPTH].join(","));
            assert_eq!(skip(&text), Ok(()), "{value}");
            let text = alloc::format!("{{\"a\": {value}, \"b\": [{}", "[".repeat(MAX_DEPTH - 2));
            let text = text + &"]".repeat(MAX_DEPTH - 2) + "]}";
            assert_eq!(skip(&text), Ok(()), "{value} before the deepest nesting");
        }
    }

    #[test]
    fn keys_read_as_the_same_text_read_as_a_string() {
        // Plain keys are taken as they stand, others decoded: the same key either way, wherever
        // it sits.
        let keys = [r"a", r"", r#"a\"b"#, r#"ab\"c"#, r#"\"a"#, r"a\u0062", "\u{e9}", r"\\"];
        for blanks in 0..4 {
            for key in keys {
                let text =
                    alloc::format!("{{{}\"{key}\": 1, \"{key}\" : [2]}}", " ".repeat(blanks));
                let quoted = alloc::format!("\"{key}\"");
                let want = Json::new(quoted.as_bytes()).string().unwrap();
                let mut got = vec![];
                Json::new(text.as_bytes())
                    .object(|json, key| {
                        got.push(key.to_vec());
                        json.skip()
                    })
                    .unwrap();
                assert_eq!(got, [want.as_bytes(), want.as_bytes()], "{text}");
            }
        }
        // A key is a string: a control character or a byte that is not UTF-8 is an error in it.
        for (text, message, offset) in [
            (&b"{\"a\x01\": 1}"[..], "a control character in a string (escape it)", 3),
            (b"{\"\xff\": 1}", "invalid UTF-8 in a string", 2),
        ] {
            let error = Json::new(text).object(|json, _| json.skip()).unwrap_err();
            assert_eq!((error.message.as_str(), error.offset), (message, offset), "{text:?}");
        }
    }

    #[test]
    fn unsigned_integers_are_exact_and_nothing_else_passes() {
        for (text, want) in [("0", 0), ("-0", 0), ("42", 42), ("18446744073709551615", u64::MAX)] {
            assert_eq!(Json::new(text.as_bytes()).u64(), Ok(want), "{text}");
        }
        for text in ["18446744073709551616", "-1", "1.0", "1e2", "01", "\"1\"", "", "null"] {
            let error = Json::new(text.as_bytes()).u64().unwrap_err();
            assert!(error.message.starts_with("expected an unsigned integer"), "{text}: {error:?}");
        }
        let error = Json::new(b"[1, -2]").u32_array(&mut vec![]).unwrap_err();
        assert_eq!(
            error.message,
            "expected a token id (an integer in 0..=4294967295), found the number -2"
        );
        assert_eq!(error.offset, 4);
        let error = Json::new(b"4294967296").u32().unwrap_err();
        assert!(error.message.ends_with("found the number 4294967296"), "{error:?}");
    }

    #[test]
    fn integer_arrays_read_as_serde_json_reads_them() {
        // Random arrays of integers of every length with blanks anywhere, and elements that are
        // not unsigned integers (leading zeros, fractions, exponents, signs, values past u64,
        // nothing): `u64_array` gives serde_json's values or an error where serde_json fails.
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || xorshift(&mut state);
        let blanks = ["", " ", "\n\t", "  \r"];
        for _ in 0..20_000 {
            let mut text = String::from(blanks[(next() % 4) as usize]);
            text.push('[');
            for k in 0..next() % 9 {
                if k > 0 {
                    text.push(',');
                }
                text.push_str(blanks[(next() % 4) as usize]);
                let r = next();
                let digits: String = (0..1 + r % 20)
                    .map(|i| char::from(b'0' + ((r >> (8 + 2 * i)) % 10) as u8))
                    .collect();
                let element = match (r >> 4) % 12 {
                    0 => "0".into(),
                    1 => alloc::format!("0{digits}"),
                    2 => alloc::format!("{digits}.5"),
                    3 => alloc::format!("{digits}e2"),
                    // (Not `-0`, which JSON has equal to 0 but serde_json refuses as a `u64`.)
                    4 => alloc::format!("-1{digits}"),
                    5 => String::new(),
                    6 => "18446744073709551615".into(),
                    7 => "18446744073709551616".into(),
                    _ => digits.trim_start_matches('0').into(),
                };
                text.push_str(&element);
                text.push_str(blanks[(next() % 4) as usize]);
            }
            text.push(']');
            text.push_str(blanks[(next() % 4) as usize]);
            let want: Result<Vec<u64>, _> = serde_json::from_str(&text);
            let mut got = Vec::new();
            let mut json = Json::new(text.as_bytes());
            let read = json.u64_array(&mut got).and_then(|()| json.end());
            match want {
                Ok(want) => {
                    assert_eq!(read, Ok(()), "{text:?}");
                    assert_eq!(got, want, "{text:?}");
                    // One allocation of as many slots as elements (Vec's first allocation
                    // holds at least 4).
                    if !want.is_empty() {
                        assert_eq!(got.capacity(), want.len().max(4), "{text:?}");
                    }
                }
                Err(_) => assert!(read.is_err(), "{text:?} read as {got:?}"),
            }
        }
    }

    #[test]
    fn digit_runs_read_eight_at_a_time_equal_the_plain_loop() {
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..20_000 {
            xorshift(&mut state);
            let digits = (state % 21) as usize;
            let mut text: Vec<u8> =
                (0..digits).map(|k| b'0' + ((state >> (k % 60)) % 10) as u8).collect();
            // Bytes just below and above the digits, and bytes whose offset from `0` has the
            // high bit set (0xb0 to 0xb9), each after a digit or after another non-digit.
            let others = b",]} x/:\x00\xff\xb0\xb5\xb9";
            text.extend((0..3).map(|k| others[(state >> (40 + 4 * k)) as usize % others.len()]));
            text.truncate(digits + (state >> 50) as usize % 4);
            let mut want = (0u64, 0);
            while let Some(&d @ b'0'..=b'9') = text.get(want.1) {
                want = (want.0.wrapping_mul(10).wrapping_add(u64::from(d - b'0')), want.1 + 1);
            }
            assert_eq!(leading_digits(&text), want, "{:?}", String::from_utf8_lossy(&text));
        }
    }

    #[test]
    fn decimals_become_exact_integers_of_the_unit() {
        for (text, scale, want) in [
            ("0", 3, 0),
            ("1", 3, 1000),
            ("0.5", 3, 500),
            ("12.345", 3, 12_345),
            ("12.3456", 3, 12_346),
            ("12.3454", 3, 12_345),
            ("1.25e3", 3, 1_250_000),
            ("125e-2", 3, 1250),
            ("1E+2", 0, 100),
            ("0.0005", 3, 1),
            ("0.0004", 3, 0),
            ("-0", 3, 0),
            ("-0.0", 3, 0),
            ("1706745600.123456", 6, 1_706_745_600_123_456),
            ("-0e5", 3, 0),
            ("-0.0E3", 3, 0),
        ] {
            assert_eq!(Json::new(text.as_bytes()).decimal(scale), Ok(want), "{text} at {scale}");
        }
        for text in ["-1", "-0.5", "\"1\"", "1e400", "99999999999999999999"] {
            assert!(Json::new(text.as_bytes()).decimal(3).is_err(), "{text}");
        }
    }

    #[test]
    fn objects_give_their_members_and_seen_refuses_repeats() {
        let text = br#" {"a": 1, "b\u0021": [2, 3], "c": {"d": null}} "#;
        let mut json = Json::new(text);
        let (mut a, mut b) = (0, vec![]);
        let mut seen = Seen::default();
        json.object(|json, key| match key {
            b"a" => {
                seen.first(0, key, json)?;
                a = json.u64()?;
                Ok(())
            }
            b"b!" => json.u64_array(&mut b),
            _ => json.skip(),
        })
        .unwrap();
        json.end().unwrap();
        assert_eq!((a, b), (1, vec![2, 3]));
        let mut seen = Seen::default();
        let error = Json::new(br#"{"a": 1, "a": 2}"#)
            .object(|json, key| {
                seen.first(0, key, json)?;
                json.u64().map(drop)
            })
            .unwrap_err();
        assert_eq!(error.message, "duplicate key \"a\"");
    }

    #[test]
    fn strings_read_are_decoded_and_strings_skipped_only_checked() {
        fn read(text: &[u8]) -> Result<Cow<'_, str>, JsonError> {
            Json::new(text).string()
        }
        assert_eq!(read(br#""a\u00e9\ud83d\ude00""#).unwrap(), "a\u{e9}\u{1f600}");
        assert_eq!(read(br#""plain""#).unwrap(), "plain");
        assert_eq!(read(br#""\"\\\/\b\f\n\r\t x""#).unwrap(), "\"\\/\u{8}\u{c}\n\r\t x");
        // Control characters must be escaped, before an escape and after one; the error is at
        // the character, as it is at the first byte that is not UTF-8.
        for (text, message, offset) in [
            (&b"\"ab\tc\""[..], "a control character in a string (escape it)", 3),
            (b"\"\\nab\x1fc\"", "a control character in a string (escape it)", 5),
            (b"\"ab\xffc\"", "invalid UTF-8 in a string", 3),
            (b"\"\\nab\xffc\"", "invalid UTF-8 in a string", 5),
            (b"\"ab", "a string that does not end", 3),
            (b"\"\\nab", "a string that does not end", 5),
            (b"\"\\xab\"", "an invalid escape in a string", 1),
            (b"\"ab\\u12G4\"", "an invalid \\u escape in a string", 3),
            (b"\"ab\\ud800\\u0041\"", "an invalid \\u escape in a string", 3),
        ] {
            let error = read(text).unwrap_err();
            assert_eq!((error.message.as_str(), error.offset), (message, offset), "{text:?}");
        }
        // A lone surrogate cannot be decoded, nor bytes that are not UTF-8; skipped, both are
        // only checked against the grammar, as serde_json skips them.
        for text in [&br#""\ud83d""#[..], b"\"\xff\""] {
            assert!(read(text).is_err(), "{text:?}");
            let mut json = Json::new(text);
            assert_eq!(json.skip(), Ok(()), "{text:?}");
        }
    }
}

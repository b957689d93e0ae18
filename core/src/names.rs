//! Names given on a command line or in a browser option that name nothing, and user text
//! quoted in error messages: one wording for every front end.
//!
//! A policy or hashing scheme is chosen by name; the command line and the browser build reject
//! an unknown one with the same message, listing the names that exist, so the list cannot fall
//! behind when one is added. Rejected text is quoted as `{:?}` quotes ordinary strings (double
//! quotes; quotes, backslashes and control characters escaped), but without `{:?}` itself,
//! whose Unicode tables would cost the browser build kilobytes.

use alloc::string::String;
use core::fmt;

/// `text` in double quotes, escaped (see the [module docs](self)).
#[derive(Clone, Copy, Debug)]
pub struct Quoted<'a>(pub &'a str);

impl fmt::Display for Quoted<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("\"")?;
        for c in self.0.chars() {
            match c {
                '"' | '\\' => write!(f, "\\{c}")?,
                '\n' => f.write_str("\\n")?,
                '\t' => f.write_str("\\t")?,
                c if c.is_control() => write!(f, "\\u{{{:x}}}", u32::from(c))?,
                c => write!(f, "{c}")?,
            }
        }
        f.write_str("\"")
    }
}

/// A name that is none of the names of its kind.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnknownName {
    /// What the name was for: `"policy"`, `"scheme"`.
    pub kind: &'static str,
    /// The name given.
    pub name: String,
    /// The names that exist, in their documented order.
    pub expected: &'static [&'static str],
}

impl fmt::Display for UnknownName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "unknown {} {} (expected one of ", self.kind, Quoted(&self.name))?;
        for (i, name) in self.expected.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            f.write_str(name)?;
        }
        f.write_str(")")
    }
}

impl core::error::Error for UnknownName {}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::format;
    use alloc::string::ToString;

    #[test]
    fn quoting_escapes_what_debug_escapes_in_ordinary_text() {
        for text in
            ["mru", "", "a \"b\" c", "back\\slash", "two\nlines\tand tab", "bell\u{7}", "é ü 中"]
        {
            assert_eq!(Quoted(text).to_string(), format!("{text:?}"), "{text}");
        }
    }

    #[test]
    fn an_unknown_name_lists_the_known_ones() {
        let error = UnknownName { kind: "policy", name: "mru".into(), expected: &["fifo", "lru"] };
        assert_eq!(error.to_string(), "unknown policy \"mru\" (expected one of fifo, lru)");
    }
}

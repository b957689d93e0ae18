//! Plain-text tables and the numbers in them.

use std::io::Write;

/// Writes `header` and `rows` as aligned columns: the `left` columns left-aligned (names),
/// the rest right-aligned (numbers).
pub(crate) fn write(
    out: &mut impl Write,
    header: &[&str],
    rows: &[Vec<String>],
    left: &[usize],
) -> std::io::Result<()> {
    let widths: Vec<usize> = (0..header.len())
        .map(|c| rows.iter().map(|row| row[c].len()).chain([header[c].len()]).max().unwrap_or(0))
        .collect();
    let line = |out: &mut dyn Write, row: &[&str]| -> std::io::Result<()> {
        for (c, (cell, width)) in row.iter().zip(&widths).enumerate() {
            let gap = if c == 0 { "" } else { "  " };
            if left.contains(&c) {
                write!(out, "{gap}{cell:<width$}")?;
            } else {
                write!(out, "{gap}{cell:>width$}")?;
            }
        }
        writeln!(out)
    };
    line(out, header)?;
    for row in rows {
        line(out, &row.iter().map(String::as_str).collect::<Vec<_>>())?;
    }
    Ok(())
}

pub(crate) fn thousands(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

pub(crate) fn human_bytes(bytes: usize) -> String {
    const UNITS: [&str; 4] = ["B", "KiB", "MiB", "GiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 { format!("{bytes} B") } else { format!("{value:.1} {}", UNITS[unit]) }
}

pub(crate) fn human_ms(ms: u64) -> String {
    match ms {
        0..1_000 => format!("{ms} ms"),
        1_000..60_000 => format!("{:.1} s", ms as f64 / 1e3),
        60_000..3_600_000 => format!("{:.1} min", ms as f64 / 6e4),
        _ => format!("{:.1} h", ms as f64 / 3.6e6),
    }
}

/// `part` of `whole` as a percentage with two decimals, or `-` for an empty whole.
pub(crate) fn percent(part: u64, whole: u64) -> String {
    if whole == 0 { "-".into() } else { format!("{:.2}%", 100.0 * part as f64 / whole as f64) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_read_well() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(1234567), "1,234,567");
        assert_eq!(human_bytes(512), "512 B");
        assert_eq!(human_bytes(3 << 20), "3.0 MiB");
        assert_eq!(human_ms(999), "999 ms");
        assert_eq!(human_ms(90_000), "1.5 min");
        assert_eq!(percent(1, 3), "33.33%");
        assert_eq!(percent(1, 0), "-");
    }
}

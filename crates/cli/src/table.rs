//! Plain-text output: aligned tables and short ages.

use chrono::{DateTime, Utc};

/// Prints `rows` under `header` to stdout, columns left-aligned and separated by two spaces.
pub(crate) fn print(header: &[&str], rows: &[Vec<String>]) {
    crate::out!("{}", render(header, rows));
}

/// The text of [`print`].
fn render(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let header: Vec<String> = header.iter().map(|h| (*h).to_owned()).collect();
    for row in std::iter::once(&header).chain(rows) {
        let last = row.len().saturating_sub(1);
        let mut line = String::new();
        for (i, (cell, width)) in row.iter().zip(&widths).enumerate() {
            line.push_str(cell);
            if i < last {
                let pad = width - cell.chars().count() + 2;
                line.extend(std::iter::repeat_n(' ', pad));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// How long ago `time` was, in its largest unit: `12s ago`, `5m ago`, `3h ago`, `2d ago`.
pub(crate) fn age(time: DateTime<Utc>, now: DateTime<Utc>) -> String {
    let secs = (now - time).num_seconds().max(0);
    match secs {
        0..60 => format!("{secs}s ago"),
        60..3600 => format!("{}m ago", secs / 60),
        3600..86400 => format!("{}h ago", secs / 3600),
        _ => format!("{}d ago", secs / 86400),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_align() {
        let rows = vec![
            vec!["sb-1".to_owned(), "base".to_owned(), "running".to_owned()],
            vec!["sb-22222".to_owned(), "t".to_owned(), "".to_owned()],
        ];
        assert_eq!(
            render(&["ID", "TEMPLATE", "STATE"], &rows),
            "ID        TEMPLATE  STATE\nsb-1      base      running\nsb-22222  t\n"
        );
    }

    #[test]
    fn ages_use_the_largest_unit() {
        let now: DateTime<Utc> = "2025-01-10T00:00:00Z".parse().expect("time");
        let at = |s: &str| s.parse::<DateTime<Utc>>().expect("time");
        assert_eq!(age(at("2025-01-09T23:59:50Z"), now), "10s ago");
        assert_eq!(age(at("2025-01-09T23:55:00Z"), now), "5m ago");
        assert_eq!(age(at("2025-01-09T21:00:00Z"), now), "3h ago");
        assert_eq!(age(at("2025-01-08T00:00:00Z"), now), "2d ago");
        assert_eq!(age(at("2025-01-11T00:00:00Z"), now), "0s ago");
    }
}

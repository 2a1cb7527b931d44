//! Results: each metric with its baselines, printed as a table and written as JSON.
//!
//! Every ratio is Cove ÷ baseline of the central value (p50, or the single value): for times
//! and memory lower is better, so `3.0x` means three times the raw runtime's; for rates
//! (`/s`, `MiB/s`) higher is better, so `0.5x` means half the raw runtime's.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::Context;
use serde::Serialize;

use crate::goals::GoalResult;
use crate::stats::Summary;

/// Unit of a metric's values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Unit {
    /// Milliseconds.
    Ms,
    /// Mebibytes (2^20 bytes).
    Mib,
    /// Events (sandboxes, cycles) per second.
    PerS,
    /// A count.
    Count,
}

impl Unit {
    fn label(self) -> &'static str {
        match self {
            Unit::Ms => "ms",
            Unit::Mib => "MiB",
            Unit::PerS => "/s",
            Unit::Count => "count",
        }
    }
}

/// The values of a metric: a distribution over runs, or one value for the whole run.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Stats {
    /// p50/p90/p99 over runs.
    Distribution(Summary),
    /// One value (a count, a per-sandbox average, a rate over the whole run).
    Single {
        /// The value.
        value: f64,
    },
}

impl Stats {
    /// A single value.
    pub fn single(value: f64) -> Stats {
        Stats::Single { value }
    }

    /// p50 of a distribution, or the single value: what ratios compare.
    pub fn center(&self) -> f64 {
        match self {
            Stats::Distribution(s) => s.p50,
            Stats::Single { value } => *value,
        }
    }
}

/// A raw-runtime (or host) measurement of the same work, taken in the same run.
#[derive(Debug, Clone, Serialize)]
pub struct Baseline {
    /// What was measured (`runc run /bin/true`).
    pub name: String,
    /// Its values, in the metric's unit.
    #[serde(flatten)]
    pub stats: Stats,
    /// Cove ÷ baseline of the central values; `None` when the baseline is 0.
    pub ratio: Option<f64>,
}

/// One measured metric.
#[derive(Debug, Clone, Serialize)]
pub struct Metric {
    /// Stable key (`cold_start`, `exec_round_trip`, ...).
    pub key: &'static str,
    /// What was measured, for people.
    pub name: String,
    /// Unit of every value of this metric and of its baselines.
    pub unit: Unit,
    /// Cove's values.
    #[serde(flatten)]
    pub stats: Stats,
    /// Baselines, the main one first.
    pub baselines: Vec<Baseline>,
    /// A remark shown after the table row (throughput, why a run stopped, ...).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// Further numbers (error counts, throughput), by name.
    #[serde(skip_serializing_if = "serde_json::Map::is_empty")]
    pub extra: serde_json::Map<String, serde_json::Value>,
    /// Whether the metric met its goal (`goals.rs`), once judged; `None` without a goal.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub goal: Option<GoalResult>,
}

impl Metric {
    /// A metric without baselines yet.
    pub fn new(key: &'static str, name: impl Into<String>, unit: Unit, stats: Stats) -> Metric {
        Metric {
            key,
            name: name.into(),
            unit,
            stats,
            baselines: Vec::new(),
            note: None,
            extra: serde_json::Map::new(),
            goal: None,
        }
    }

    /// Adds a baseline (the first added is the main one) and its ratio.
    pub fn baseline(mut self, name: impl Into<String>, stats: Stats) -> Metric {
        let base = stats.center();
        let ratio = (base > 0.0).then(|| self.stats.center() / base);
        self.baselines.push(Baseline {
            name: name.into(),
            stats,
            ratio,
        });
        self
    }

    /// Sets the remark.
    pub fn note(mut self, note: impl Into<String>) -> Metric {
        self.note = Some(note.into());
        self
    }

    /// Adds a further number.
    pub fn extra(mut self, name: &str, value: impl Into<serde_json::Value>) -> Metric {
        self.extra.insert(name.to_string(), value.into());
        self
    }
}

/// A metric this build cannot measure, and why.
#[derive(Debug, Clone, Serialize)]
pub struct Unavailable {
    /// The metric's key.
    pub key: &'static str,
    /// What it would measure.
    pub name: String,
    /// Why it is missing.
    pub reason: String,
}

/// The machine a run ran on.
#[derive(Debug, Clone, Serialize)]
pub struct Machine {
    /// CPUs this process may use.
    pub cores: usize,
    /// `MemTotal`, GiB.
    pub mem_total_gib: f64,
    /// Kernel release (`uname -r`).
    pub kernel: String,
    /// First line of `runc --version`.
    pub runc: String,
    /// First line of `qemu-system-x86_64 --version` (runs of `--runtime qemu`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub qemu: Option<String>,
}

/// Everything one run measured.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// `cove-bench <version>`.
    pub tool: String,
    /// Whether this was a `--quick` smoke run (its numbers are not measurements).
    pub quick: bool,
    /// Where it ran.
    pub machine: Machine,
    /// Template every Cove sandbox was created from.
    pub template: &'static str,
    /// Start time (RFC 3339, UTC).
    pub started_at: String,
    /// Wall time of the whole run, seconds.
    pub elapsed_s: f64,
    /// The metrics, in the order measured.
    pub metrics: Vec<Metric>,
    /// Metrics this build could not measure.
    pub unavailable: Vec<Unavailable>,
}

impl Report {
    /// The report of a run of `tiny` sandboxes that began at `began` (`started_at`, RFC 3339).
    pub fn finish(
        quick: bool,
        machine: Machine,
        started_at: String,
        began: std::time::Instant,
        metrics: Vec<Metric>,
        unavailable: Vec<Unavailable>,
    ) -> Report {
        Report {
            tool: format!("cove-bench {}", env!("CARGO_PKG_VERSION")),
            quick,
            machine,
            template: crate::measure::TEMPLATE,
            started_at,
            elapsed_s: began.elapsed().as_secs_f64(),
            metrics,
            unavailable,
        }
    }

    /// Writes the report as pretty JSON to `path`.
    pub fn write_json(&self, path: &Path) -> anyhow::Result<()> {
        let json = serde_json::to_vec_pretty(self).context("serialise the results")?;
        std::fs::write(path, json).with_context(|| format!("write {}", path.display()))
    }

    /// Judges every metric against its goal (`goals.rs`).
    pub fn judge(&mut self) {
        for m in &mut self.metrics {
            m.goal = crate::goals::evaluate(m);
        }
    }

    /// The results as an aligned text table (one row per metric, a row per extra baseline).
    pub fn table(&self) -> String {
        let mut rows: Vec<[String; COLUMNS]> = vec![[
            "metric".into(),
            "p50".into(),
            "p90".into(),
            "p99".into(),
            "baseline p50".into(),
            "ratio".into(),
            "goal (measured ÷ bound)".into(),
            "baseline / note".into(),
        ]];
        for m in &self.metrics {
            let name = format!("{} ({})", m.name, m.unit.label());
            let (p50, p90, p99) = match m.stats {
                Stats::Distribution(s) => (num(s.p50), num(s.p90), num(s.p99)),
                Stats::Single { value } => (num(value), "-".into(), "-".into()),
            };
            let mut baselines = m.baselines.iter();
            let (base, main_ratio, what) = match baselines.next() {
                Some(b) => (num(b.stats.center()), ratio(b.ratio), b.name.clone()),
                None => ("-".into(), "-".into(), String::new()),
            };
            let what = match &m.note {
                Some(note) if what.is_empty() => note.clone(),
                Some(note) => format!("{what}; {note}"),
                None => what,
            };
            let goal = m.goal.as_ref().map(|g| g.cell()).unwrap_or_default();
            rows.push([name, p50, p90, p99, base, main_ratio, goal, what]);
            for b in baselines {
                rows.push([
                    String::new(),
                    String::new(),
                    String::new(),
                    String::new(),
                    String::new(),
                    num(b.stats.center()),
                    ratio(b.ratio),
                    b.name.clone(),
                ]);
            }
        }
        for u in &self.unavailable {
            rows.push([
                u.name.clone(),
                "-".into(),
                "-".into(),
                "-".into(),
                "-".into(),
                "-".into(),
                String::new(),
                u.reason.clone(),
            ]);
        }
        render(&rows)
    }
}

/// Columns of the table.
const COLUMNS: usize = 8;

/// Left-aligned first and last two columns, right-aligned numbers.
fn render(rows: &[[String; COLUMNS]]) -> String {
    let mut widths = [0usize; COLUMNS];
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for row in rows {
        let mut line = String::new();
        for (i, (cell, w)) in row.iter().zip(widths).enumerate() {
            let pad = w - cell.chars().count();
            match i {
                0 => {
                    line.push_str(cell);
                    line.push_str(&" ".repeat(pad));
                }
                6 => {
                    line.push_str("  ");
                    line.push_str(cell);
                    line.push_str(&" ".repeat(pad));
                }
                7 => {
                    line.push_str("  ");
                    line.push_str(cell);
                }
                _ => {
                    line.push_str("  ");
                    line.push_str(&" ".repeat(pad));
                    line.push_str(cell);
                }
            }
        }
        let _ = writeln!(out, "{}", line.trim_end());
    }
    out
}

/// A value with about three significant digits.
fn num(v: f64) -> String {
    if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else if v.abs() >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

fn ratio(r: Option<f64>) -> String {
    match r {
        Some(r) => format!("{r:.2}x"),
        None => "-".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(metrics: Vec<Metric>) -> Report {
        Report {
            tool: "cove-bench test".into(),
            quick: true,
            machine: Machine {
                cores: 2,
                mem_total_gib: 24.0,
                kernel: "6.18".into(),
                runc: "runc version 1.1.5".into(),
                qemu: None,
            },
            template: "tiny",
            started_at: "2025-01-01T00:00:00Z".into(),
            elapsed_s: 1.0,
            metrics,
            unavailable: vec![Unavailable {
                key: "pause_resume",
                name: "pause+resume".into(),
                reason: "not available in this build".into(),
            }],
        }
    }

    #[test]
    fn ratios_are_cove_over_baseline() {
        let dist = Summary::of(&[10.0, 20.0, 30.0]).expect("summary");
        let m = Metric::new("x", "x", Unit::Ms, Stats::Distribution(dist))
            .baseline("raw", Stats::single(5.0))
            .baseline("zero", Stats::single(0.0));
        assert_eq!(m.baselines[0].ratio, Some(4.0));
        assert_eq!(m.baselines[1].ratio, None);
    }

    #[test]
    fn json_has_flat_values_and_baselines() {
        let dist = Summary::of(&[1.0, 2.0]).expect("summary");
        let r = report(vec![
            Metric::new("a", "a", Unit::Ms, Stats::Distribution(dist))
                .baseline("raw", Stats::Distribution(dist)),
            Metric::new("b", "b", Unit::PerS, Stats::single(3.0)).extra("errors", 0),
        ]);
        let json = serde_json::to_value(&r).expect("json");
        let a = &json["metrics"][0];
        assert_eq!(
            (a["p50"].as_f64(), a["unit"].as_str()),
            (Some(1.0), Some("ms"))
        );
        assert_eq!(a["baselines"][0]["p99"].as_f64(), Some(2.0));
        assert_eq!(a["baselines"][0]["ratio"].as_f64(), Some(1.0));
        let b = &json["metrics"][1];
        assert_eq!(b["value"].as_f64(), Some(3.0));
        assert_eq!(b["extra"]["errors"].as_u64(), Some(0));
        assert_eq!(json["unavailable"][0]["key"], "pause_resume");
    }

    #[test]
    fn table_has_a_row_per_metric_and_extra_baseline() {
        let dist = Summary::of(&[1.0, 2.0]).expect("summary");
        let r = report(vec![Metric::new(
            "a",
            "exec",
            Unit::Ms,
            Stats::Distribution(dist),
        )
        .baseline("runc exec", Stats::single(0.5))
        .baseline("fork/exec", Stats::single(0.25))
        .note("n=2")]);
        let table = r.table();
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines.len(), 4, "{table}");
        assert!(lines[1].starts_with("exec (ms)"), "{table}");
        assert!(
            lines[1].contains("2.00x") && lines[1].ends_with("runc exec; n=2"),
            "{table}"
        );
        assert!(
            lines[2].contains("4.00x") && lines[2].ends_with("fork/exec"),
            "{table}"
        );
        assert!(lines[3].ends_with("not available in this build"), "{table}");
    }
}

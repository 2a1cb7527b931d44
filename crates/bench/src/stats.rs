//! Percentiles of a set of samples.

use std::time::Duration;

use serde::Serialize;

/// p50/p90/p95/p99 of some samples (nearest-rank: the smallest sample with at least p% of the
/// samples at or below it), in the samples' unit.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Summary {
    /// Number of samples.
    pub n: usize,
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 95th percentile; `None` where the source gave none (the table prints it only where a
    /// row's note names it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub p95: Option<f64>,
    /// 99th percentile (the maximum when there are fewer than 100 samples).
    pub p99: f64,
}

impl Summary {
    /// The summary of `samples`, or `None` when there are none (or one is not a number).
    pub fn of(samples: &[f64]) -> Option<Summary> {
        if samples.is_empty() || samples.iter().any(|s| s.is_nan()) {
            return None;
        }
        let mut sorted = samples.to_vec();
        sorted.sort_by(f64::total_cmp);
        Some(Summary {
            n: sorted.len(),
            p50: nearest_rank(&sorted, 50.0),
            p90: nearest_rank(&sorted, 90.0),
            p95: Some(nearest_rank(&sorted, 95.0)),
            p99: nearest_rank(&sorted, 99.0),
        })
    }

    /// The summary of durations, in milliseconds.
    pub fn of_ms(samples: &[Duration]) -> Option<Summary> {
        let ms: Vec<f64> = samples.iter().map(|d| d.as_secs_f64() * 1e3).collect();
        Summary::of(&ms)
    }
}

/// Least-squares slope of `y` over `x` (Δy per unit of x); `None` with fewer than two
/// distinct x.
pub fn slope(points: &[(f64, f64)]) -> Option<f64> {
    let n = points.len() as f64;
    if points.len() < 2 {
        return None;
    }
    let mean_x = points.iter().map(|p| p.0).sum::<f64>() / n;
    let mean_y = points.iter().map(|p| p.1).sum::<f64>() / n;
    let (mut cov, mut var) = (0.0, 0.0);
    for (x, y) in points {
        cov += (x - mean_x) * (y - mean_y);
        var += (x - mean_x) * (x - mean_x);
    }
    (var > 0.0).then(|| cov / var)
}

/// The `p`th percentile of non-empty, ascending `sorted`.
fn nearest_rank(sorted: &[f64], p: f64) -> f64 {
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_nearest_rank() {
        let samples: Vec<f64> = (1..=100).rev().map(f64::from).collect();
        let s = Summary::of(&samples).expect("summary");
        assert_eq!(
            (s.n, s.p50, s.p90, s.p95, s.p99),
            (100, 50.0, 90.0, Some(95.0), 99.0)
        );

        let s = Summary::of(&[3.0, 1.0, 2.0]).expect("summary");
        assert_eq!((s.p50, s.p90, s.p99), (2.0, 3.0, 3.0));

        let s = Summary::of(&[7.0]).expect("summary");
        assert_eq!((s.p50, s.p90, s.p99), (7.0, 7.0, 7.0));
    }

    #[test]
    fn nothing_to_summarise_is_none() {
        assert_eq!(Summary::of(&[]), None);
        assert_eq!(Summary::of(&[1.0, f64::NAN]), None);
    }

    #[test]
    fn slope_is_least_squares() {
        let line = [(0.0, 100.0), (1.0, 98.0), (2.0, 96.0), (3.0, 94.0)];
        assert_eq!(slope(&line), Some(-2.0));
        let noisy = [(0.0, 0.0), (1.0, 1.0), (2.0, 0.0), (3.0, 1.0)];
        let s = slope(&noisy).expect("slope");
        assert!((s - 0.2).abs() < 1e-9, "{s}");
        assert_eq!(slope(&[(1.0, 5.0)]), None);
        assert_eq!(slope(&[(1.0, 5.0), (1.0, 6.0)]), None);
    }

    #[test]
    fn durations_are_in_milliseconds() {
        let s = Summary::of_ms(&[Duration::from_micros(1500), Duration::from_secs(2)])
            .expect("summary");
        assert_eq!((s.p50, s.p99), (1.5, 2000.0));
    }
}

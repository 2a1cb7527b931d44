//! The process-wide Prometheus recorder: installed once (the `metrics` facade has one global
//! recorder per process), rendered by `GET /metrics` on the management listener.

use std::sync::{Arc, OnceLock};

use cove_control_plane::metrics::{MetricsRender, CREATE_TO_RUNNING, OPERATION_DURATION};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use tracing::warn;

/// Histogram buckets of the `*_seconds` series (seconds, 5 ms to 10 min).
const BUCKETS_S: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0,
];

static HANDLE: OnceLock<Option<PrometheusHandle>> = OnceLock::new();

/// Installs the Prometheus recorder on the first call and returns its renderer; later calls
/// (more servers in one process, as in tests) share it. `None` when another recorder was
/// installed in this process first (logged; `/metrics` then answers 404).
pub fn recorder() -> Option<MetricsRender> {
    let handle = HANDLE.get_or_init(|| {
        let builder = [OPERATION_DURATION, CREATE_TO_RUNNING]
            .into_iter()
            .try_fold(PrometheusBuilder::new(), |b, name| {
                b.set_buckets_for_metric(Matcher::Full(name.to_string()), BUCKETS_S)
            });
        let builder = match builder {
            Ok(b) => b,
            Err(e) => {
                warn!(error = %e, "cannot configure the metrics buckets");
                return None;
            }
        };
        let recorder = builder.build_recorder();
        let handle = recorder.handle();
        match metrics::set_global_recorder(recorder) {
            Ok(()) => Some(handle),
            Err(e) => {
                warn!(error = %e, "a metrics recorder was installed already; /metrics is off");
                None
            }
        }
    });
    let handle = handle.clone()?;
    Some(MetricsRender(Arc::new(move || handle.render())))
}

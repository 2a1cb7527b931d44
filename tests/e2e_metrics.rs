//! The metrics surfaces against a real server and runc: `GET /metrics` (Prometheus text)
//! counts exactly what a create → exec → delete did, and `GET /v1/sandboxes/{id}/metrics`
//! reports a sandbox's CPU, memory and disk from its cgroups and disk.
//!
//! The Prometheus recorder is process-wide and the tests of this binary share one server, so
//! the tests run one at a time ([`SERIAL`]) and assert on deltas between scrapes.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use cove_api_types::{CreateSandboxRequest, ErrorCode, PutPoolRequest, ResourcesRequest};
use cove_e2e::{delete, ensure_template, root_sh, sandbox, sandbox_with, sh};

/// This binary's server gives sandboxes no default disk, so a sandbox without one (its
/// writable layer measured on the node's disk) can be made.
fn no_default_disk(cfg: &mut cove_server::Config) {
    cfg.default_disk_mib = None;
}

fn server() -> &'static cove_e2e::Server {
    cove_e2e::server_with(no_default_disk)
}

fn client() -> cove_client::Client {
    cove_e2e::client_of(server())
}

static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Series of one scrape: `name{label="v",...}` (labels sorted) → value.
type Series = BTreeMap<String, f64>;

/// Parses the Prometheus text exposition format (comments skipped; labels re-sorted so keys
/// do not depend on the exporter's order).
fn parse(text: &str) -> Series {
    let mut out = Series::new();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (series, value) = line.rsplit_once(' ').expect("`series value` line");
        let value: f64 = value
            .parse()
            .unwrap_or_else(|_| panic!("value of {line:?}"));
        let key = match series.split_once('{') {
            None => series.to_string(),
            Some((name, labels)) => {
                let labels = labels.strip_suffix('}').expect("closing brace");
                let mut pairs: Vec<&str> = labels.split(',').filter(|p| !p.is_empty()).collect();
                pairs.sort_unstable();
                format!("{name}{{{}}}", pairs.join(","))
            }
        };
        out.insert(key, value);
    }
    out
}

async fn scrape() -> Series {
    let url = format!("{}/metrics", server().api_url);
    let resp = reqwest::get(&url).await.expect("GET /metrics");
    assert_eq!(resp.status(), 200);
    let ctype = resp
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    assert!(ctype.starts_with("text/plain"), "{ctype}");
    parse(&resp.text().await.expect("body"))
}

fn get(s: &Series, key: &str) -> f64 {
    s.get(key).copied().unwrap_or(0.0)
}

fn delta(before: &Series, after: &Series, key: &str) -> f64 {
    get(after, key) - get(before, key)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_counts_exactly_what_happened() {
    let _serial = SERIAL.lock().await;
    let c = client();
    ensure_template(&c, "tiny").await;
    let before = scrape().await;

    let id = sandbox(&c, "tiny").await;
    let running = scrape().await;
    let state = |s: &str| format!("cove_sandboxes{{state=\"{s}\"}}");
    assert_eq!(delta(&before, &running, &state("running")), 1.0);
    assert_eq!(delta(&before, &running, "cove_node_sandboxes"), 1.0);
    // Default resources: 1 vCPU, 512 MiB.
    assert_eq!(
        delta(&before, &running, "cove_sandboxes_allotted_vcpus"),
        1.0
    );
    assert_eq!(
        delta(&before, &running, "cove_sandboxes_allotted_memory_bytes"),
        (512u64 << 20) as f64
    );
    assert!(get(&running, "cove_node_cpus") >= 1.0);
    assert!(get(&running, "cove_node_memory_bytes") > 0.0);
    assert!(get(&running, "cove_node_memory_available_bytes") > 0.0);

    let out = sh(&c, &id, "printf hello-metrics; printf oops >&2").await;
    assert_eq!(out.stdout_text(), "hello-metrics");
    delete(&c, &id).await;
    let after = scrape().await;

    let ops = |kind: &str| format!("cove_operations_total{{kind=\"{kind}\",result=\"succeeded\"}}");
    assert_eq!(delta(&before, &after, &ops("create_sandbox")), 1.0);
    assert_eq!(delta(&before, &after, &ops("delete_sandbox")), 1.0);
    for kind in ["create_sandbox", "delete_sandbox"] {
        let count = format!("cove_operation_duration_seconds_count{{kind=\"{kind}\"}}");
        assert_eq!(delta(&before, &after, &count), 1.0, "{count}");
        let sum = format!("cove_operation_duration_seconds_sum{{kind=\"{kind}\"}}");
        assert!(delta(&before, &after, &sum) > 0.0, "{sum}");
    }
    assert_eq!(
        delta(
            &before,
            &after,
            "cove_sandbox_create_to_running_seconds_count"
        ),
        1.0
    );
    assert_eq!(delta(&before, &after, "cove_commands_total"), 1.0);
    let bytes = |s: &str| format!("cove_data_plane_bytes_total{{stream=\"{s}\"}}");
    assert_eq!(
        delta(&before, &after, &bytes("stdout")),
        "hello-metrics".len() as f64
    );
    assert_eq!(
        delta(&before, &after, &bytes("stderr")),
        "oops".len() as f64
    );
    assert_eq!(delta(&before, &after, &state("running")), 0.0);
    assert_eq!(delta(&before, &after, "cove_node_sandboxes"), 0.0);
    // Nothing failed.
    assert!(
        !after
            .iter()
            .any(|(k, v)| k.starts_with("cove_operations_total")
                && k.contains("result=\"failed\"")
                && *v != get(&before, k)),
        "an operation failed: {after:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_requests_and_warm_pools_have_series() {
    let _serial = SERIAL.lock().await;
    let c = client();
    ensure_template(&c, "tiny").await;
    let before = scrape().await;

    // Two answered requests of one route: counted under its template, never the tenant's path.
    for _ in 0..2 {
        let e = c.get_sandbox("sb-nope").await.expect_err("no such sandbox");
        assert_eq!(
            e.api_body().map(|b| b.code),
            Some(ErrorCode::SandboxNotFound)
        );
    }
    let unmatched = reqwest::get(format!("{}/no/such/route", server().api_url))
        .await
        .expect("GET");
    assert_eq!(unmatched.status(), 404);

    // A pool with a ready member, then a create it serves.
    let size = Some(ResourcesRequest {
        memory_mib: Some(320),
        ..Default::default()
    });
    let put = PutPoolRequest {
        template: "tiny".into(),
        release: None,
        resources: size.clone(),
        min_ready: 1,
        max: 1,
    };
    c.put_pool("metrics-warm", &put).await.expect("put pool");
    let start = Instant::now();
    while c.pool("metrics-warm").await.expect("pool").ready < 1 {
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "no ready member"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let warm = scrape().await;
    assert!(get(&warm, "cove_pools") >= 1.0);
    assert!(get(&warm, "cove_pool_min_ready") >= 1.0);
    assert!(get(&warm, "cove_pool_members{state=\"ready\"}") >= 1.0);
    let req = CreateSandboxRequest {
        resources: size,
        ..Default::default()
    };
    let id = sandbox_with(&c, "tiny", req).await;
    let pool = c.pool("metrics-warm").await.expect("pool");
    c.delete_pool("metrics-warm").await.expect("delete pool");
    delete(&c, &id).await;
    let after = scrape().await;

    let route = "cove_http_requests_total{listener=\"api\",method=\"GET\",\
                 route=\"/v1/sandboxes/{id}\",status=\"404\"}";
    assert_eq!(delta(&before, &after, route), 2.0, "{after:?}");
    let nowhere = "cove_http_requests_total{listener=\"api\",method=\"GET\",\
                   route=\"unmatched\",status=\"404\"}";
    assert_eq!(delta(&before, &after, nowhere), 1.0);
    let timed = "cove_http_request_duration_seconds_count{listener=\"api\",\
                 route=\"/v1/sandboxes/{id}\"}";
    assert!(delta(&before, &after, timed) >= 2.0);
    assert!(
        !after
            .keys()
            .any(|k| k.contains("sb-nope") || k.contains("metrics-warm")),
        "a tenant's words became a label"
    );
    let hits = "cove_pool_claims_total{result=\"hit\"}";
    assert_eq!(
        pool.hits, 1,
        "the create was served from the pool: {pool:?}"
    );
    assert_eq!(delta(&warm, &after, hits), 1.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sandbox_metrics_read_cgroups_disk_and_keep_history() {
    let _serial = SERIAL.lock().await;
    let c = client();
    let req = CreateSandboxRequest {
        resources: Some(ResourcesRequest {
            memory_mib: Some(256),
            disk_mib: Some(128),
            ..Default::default()
        }),
        ..Default::default()
    };
    let id = sandbox_with(&c, "tiny", req).await;
    // Some CPU (a busy loop of about a second) and 8 MiB written to the sandbox's own disk.
    let out = root_sh(
        &c,
        &id,
        "dd if=/dev/zero of=/root/fill bs=1M count=8 2>/dev/null && sync; \
         end=$(($(date +%s) + 1)); while [ $(date +%s) -le $end ]; do :; done; echo done",
    )
    .await;
    assert_eq!(out.stdout_text(), "done\n");

    let m = c.sandbox_metrics(&id).await.expect("metrics");
    assert_eq!(m.sandbox_id, id);
    assert_eq!(m.interval_s, 5);
    let cur = &m.current;
    // At least a tenth of the busy second, however loaded the host is.
    assert!(cur.cpu.usage_us >= 100_000, "cpu {:?}", cur.cpu);
    assert_eq!(cur.memory.limit_bytes, Some(256 << 20));
    assert!(
        cur.memory.bytes > 0 && cur.memory.bytes <= 256 << 20,
        "{:?}",
        cur.memory
    );
    assert!(cur.memory.peak_bytes.unwrap_or(0) >= cur.memory.bytes);
    let used = cur.disk.used_bytes.expect("disk used");
    let limit = cur.disk.limit_bytes.expect("own disk size");
    assert!(used >= 8 << 20, "disk used {used}");
    assert!(
        (100 << 20..=128 << 20).contains(&limit),
        "disk size {limit}"
    );
    assert_eq!(cur.network, None);

    // The node samples every 5 s: within 12 s there is history, and a rate against it.
    let t0 = Instant::now();
    let m = loop {
        let m = c.sandbox_metrics(&id).await.expect("metrics");
        if !m.history.is_empty() || t0.elapsed() > Duration::from_secs(12) {
            break m;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    assert!(!m.history.is_empty(), "no history after 12 s");
    let last = m.history.last().expect("a sample");
    assert!(last.at <= m.current.at);
    assert!(last.cpu.usage_us <= m.current.cpu.usage_us);
    let rate = m.current.cpu.rate.expect("a rate against the last sample");
    assert!((0.0..=64.0).contains(&rate), "rate {rate}");

    // A paused sandbox still has its cgroups; a deleted one is gone.
    let op = c.pause_sandbox(&id).await.expect("pause");
    c.wait_operation(&op.id, Duration::from_secs(30))
        .await
        .expect("paused");
    let m = c.sandbox_metrics(&id).await.expect("metrics while paused");
    assert_eq!(m.current.memory.limit_bytes, Some(256 << 20));
    delete(&c, &id).await;
    let err = c.sandbox_metrics(&id).await.expect_err("deleted");
    assert_eq!(
        err.api_body().map(|b| b.code),
        Some(ErrorCode::SandboxNotFound)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sandbox_without_own_disk_reports_its_writable_layer() {
    let _serial = SERIAL.lock().await;
    let c = client();
    let id = sandbox(&c, "tiny").await;
    let before = c.sandbox_metrics(&id).await.expect("metrics");
    assert_eq!(before.current.disk.limit_bytes, None);
    let out = root_sh(
        &c,
        &id,
        "dd if=/dev/urandom of=/root/blob bs=1M count=4 2>/dev/null && sync && echo ok",
    )
    .await;
    assert_eq!(out.stdout_text(), "ok\n");
    let after = c.sandbox_metrics(&id).await.expect("metrics");
    let grown = after.current.disk.used_bytes.expect("used")
        - before.current.disk.used_bytes.expect("used");
    assert!(grown >= 4 << 20, "writable layer grew by {grown}");
    delete(&c, &id).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_routes_need_no_token_and_sandbox_metrics_do() {
    let s = server();
    let http = reqwest::Client::new();
    let doc: serde_json::Value = http
        .get(format!("{}/v1/openapi.json", s.api_url))
        .send()
        .await
        .expect("GET /v1/openapi.json")
        .error_for_status()
        .expect("200 without a token")
        .json()
        .await
        .expect("json");
    let checked_in: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/openapi.json"))
            .expect("docs/openapi.json"),
    )
    .expect("checked-in json");
    assert_eq!(doc, checked_in, "the served document is the checked-in one");
    let metrics = http
        .get(format!("{}/metrics", s.api_url))
        .send()
        .await
        .expect("GET /metrics");
    assert_eq!(metrics.status(), 200);
    let denied = http
        .get(format!(
            "{}/v1/sandboxes/sb-0000000000000000/metrics",
            s.api_url
        ))
        .send()
        .await
        .expect("GET sandbox metrics");
    assert_eq!(denied.status(), 401);
    let body: serde_json::Value = denied.json().await.expect("error body");
    assert_eq!(body["code"], "unauthorized");
}

//! Smoke test of `cove-bench --quick`: the binary runs end to end against a real server and
//! real runc, and its JSON has every metric with positive numbers. No timing is asserted.
//!
//! Uses `COVE_GUEST_AGENT` when set, else the debug guest agent under the target dir (built
//! with `scripts/build-guest-agent.sh` when missing).

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

/// Every metric a run reports, measured or listed as unavailable.
const METRICS: &[&str] = &[
    "cold_start",
    "exec_round_trip",
    "stdout_stream",
    "file_upload",
    "file_download",
    "pause_resume",
    "suspend_wake",
    "warm_pool_create",
    "warm_pool_burst",
    "density_sandboxes",
    "density_rss_per_sandbox",
    "density_mem_available_per_sandbox",
    "concurrency_throughput",
    "concurrency_create",
    "concurrency_delete",
    "tier_cold_create",
    "tier_pool_claim",
    "cold_start_network",
    "gateway_request",
    "gateway_download",
    "port_proxy_request",
    "network_leak",
    "cold_start_userns",
    "checkpoint_pause",
    "checkpoint",
    "rollback",
    "fork_3",
    "scheduler_decision",
];

/// Metrics a server may lack (`not available in this build`): the lifecycle round trips.
const MAY_BE_UNAVAILABLE: &[&str] = &["pause_resume", "suspend_wake"];

/// Metrics without a raw baseline (compared with `cold_start` of the same run instead).
const NO_BASELINE: &[&str] = &["checkpoint", "fork_3"];

/// Metrics whose value must be exactly zero (a leak count).
const MUST_BE_ZERO: &[&str] = &["network_leak"];

/// Metrics whose values may be any finite number in a quick run: the `MemAvailable` drop of 10
/// sandboxes (under 1 MiB each) is below what other processes on a shared machine move it by.
const MAY_BE_NOISE: &[&str] = &["density_mem_available_per_sandbox"];

/// The two runs take turns: each checks that it left no `cove-bench-*` entry in the temp dir,
/// which the other's live entries would fail.
static ONE_RUN_AT_A_TIME: parking_lot::Mutex<()> = parking_lot::Mutex::new(());

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn guest_agent() -> PathBuf {
    if let Some(p) = std::env::var_os("COVE_GUEST_AGENT") {
        return PathBuf::from(p);
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("target"));
    let path = target.join("x86_64-unknown-linux-gnu/debug/cove-guest-agent");
    if !path.is_file() {
        let status = Command::new("bash")
            .arg(workspace_root().join("scripts/build-guest-agent.sh"))
            .status()
            .expect("run scripts/build-guest-agent.sh");
        assert!(status.success(), "building the guest agent failed");
    }
    path
}

/// The numbers of one value set (a distribution or a single value): all positive, or, for a
/// metric in [`MAY_BE_NOISE`], all finite.
fn assert_numbers(key: &str, what: &str, v: &Value) {
    let fields: &[&str] = if v.get("value").is_some() {
        &["value"]
    } else {
        &["p50", "p90", "p99"]
    };
    for f in fields {
        let n = v[f].as_f64().unwrap_or(f64::NAN);
        if MUST_BE_ZERO.contains(&key) {
            assert_eq!(n, 0.0, "{what}.{f} is {:?}, want 0", v[f]);
        } else if MAY_BE_NOISE.contains(&key) {
            assert!(n.is_finite(), "{what}.{f} is {:?}, want a number", v[f]);
        } else {
            assert!(n > 0.0, "{what}.{f} is {:?}, want a number > 0", v[f]);
        }
    }
    if let Some(n) = v.get("n") {
        assert!(n.as_u64().unwrap_or(0) > 0, "{what}.n is {n}");
    }
}

#[test]
fn quick_run_reports_every_metric() {
    let _turn = ONE_RUN_AT_A_TIME.lock();
    let dir = tempfile::tempdir().expect("temp dir");
    let json_path = dir.path().join("out.json");
    let before = bench_dirs();
    let out = Command::new(env!("CARGO_BIN_EXE_cove-bench"))
        .arg("--quick")
        .arg("--json")
        .arg(&json_path)
        .arg("--guest-agent")
        .arg(guest_agent())
        .output()
        .expect("run cove-bench");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "cove-bench failed\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );

    let report: Value =
        serde_json::from_slice(&std::fs::read(&json_path).expect("read the JSON")).expect("JSON");
    assert_eq!(report["quick"], true);
    assert_eq!(report["template"], "tiny");
    assert!(report["machine"]["cores"].as_u64().unwrap_or(0) > 0);
    let metrics = report["metrics"].as_array().expect("metrics");
    let unavailable = report["unavailable"].as_array().expect("unavailable");

    for key in METRICS {
        let measured = metrics.iter().find(|m| m["key"] == *key);
        let missing = unavailable.iter().find(|u| u["key"] == *key);
        let Some(m) = measured else {
            let u = missing.unwrap_or_else(|| panic!("{key} is neither measured nor unavailable"));
            assert!(
                MAY_BE_UNAVAILABLE.contains(key),
                "{key} is unavailable: {u}"
            );
            assert!(
                u["reason"]
                    .as_str()
                    .unwrap_or("")
                    .contains("not available in this build"),
                "{u}"
            );
            continue;
        };
        assert!(missing.is_none(), "{key} is both measured and unavailable");
        assert_numbers(key, key, m);
        for b in m["baselines"].as_array().expect("baselines") {
            assert_numbers(key, &format!("{key} baseline {}", b["name"]), b);
            if !MAY_BE_NOISE.contains(key) {
                assert!(
                    b["ratio"].as_f64().unwrap_or(0.0) > 0.0,
                    "{key}: ratio {}",
                    b["ratio"]
                );
            }
        }
        if *key != "density_sandboxes" && !MUST_BE_ZERO.contains(key) && !NO_BASELINE.contains(key)
        {
            assert!(
                !m["baselines"].as_array().is_none_or(Vec::is_empty),
                "{key} has no baseline"
            );
        }
        // The table on stdout has a row for it.
        let name = m["name"].as_str().expect("name");
        assert!(stdout.contains(name), "no table row for {key}:\n{stdout}");
    }

    let exec = metrics
        .iter()
        .find(|m| m["key"] == "exec_round_trip")
        .expect("exec");
    assert_eq!(
        exec["baselines"].as_array().map(Vec::len),
        Some(2),
        "runc exec and fork/exec"
    );
    let conc = metrics
        .iter()
        .find(|m| m["key"] == "concurrency_throughput")
        .expect("conc");
    assert!(conc["extra"]["errors"].is_u64(), "error count: {conc}");
    assert_eq!(conc["extra"]["clients"], 5);
    // A row per quick tier (1 and 5) of cold creates and of pool claims, each with its error
    // count and rate; the replicas' tiers need PostgreSQL.
    for key in ["tier_cold_create", "tier_pool_claim"] {
        let tiers: Vec<u64> = metrics
            .iter()
            .filter(|m| m["key"] == key)
            .map(|m| {
                assert!(m["extra"]["errors"].is_u64(), "{key}: {m}");
                assert!(
                    m["extra"]["creates_per_s"].as_f64().unwrap_or(0.0) > 0.0,
                    "{m}"
                );
                assert!(m["p95"].as_f64().unwrap_or(0.0) > 0.0, "{key} p95: {m}");
                m["extra"]["tier"].as_u64().unwrap_or(0)
            })
            .collect();
        assert_eq!(tiers, vec![1, 5], "{key}");
    }
    let replica_tiers: Vec<u64> = metrics
        .iter()
        .filter(|m| m["key"] == "tier_replicas_create")
        .map(|m| m["extra"]["tier"].as_u64().unwrap_or(0))
        .collect();
    if replica_tiers.is_empty() {
        let replicas = unavailable
            .iter()
            .find(|u| u["key"] == "tier_replicas_create")
            .expect("the replicas' tiers are unavailable without --postgres-url");
        assert!(replicas["reason"]
            .as_str()
            .is_some_and(|r| r.contains("--postgres-url")));
    } else {
        assert_eq!(replica_tiers, vec![1, 5]);
    }
    // The data path baselines: the same writer first, then the host's own tools.
    for (key, n) in [
        ("stdout_stream", 2),
        ("stdout_stream_binary", 2),
        ("file_upload", 3),
        ("file_download", 2),
    ] {
        let m = metrics
            .iter()
            .find(|m| m["key"] == key)
            .unwrap_or_else(|| panic!("{key} missing"));
        assert_eq!(m["baselines"].as_array().map(Vec::len), Some(n), "{m}");
    }
    let density = metrics
        .iter()
        .find(|m| m["key"] == "density_sandboxes")
        .expect("density");
    assert!(density["value"].as_f64().unwrap_or(0.0) <= 10.0);
    let stream = metrics
        .iter()
        .find(|m| m["key"] == "stdout_stream")
        .expect("stream");
    assert_eq!(stream["extra"]["bytes"], 10 * 1024 * 1024);

    // Nothing left behind: no new bench data dir, raw runc dir or file dir (each would still
    // hold a mount or a container's files if cleanup had failed).
    let leftovers: Vec<String> = bench_dirs().difference(&before).cloned().collect();
    assert!(leftovers.is_empty(), "left behind: {leftovers:?}");
}

/// Names of `cove-bench-*` entries in the temp dir.
fn bench_dirs() -> std::collections::BTreeSet<String> {
    std::fs::read_dir(std::env::temp_dir())
        .expect("read temp dir")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("cove-bench-"))
        .collect()
}

/// `cove-bench --runtime qemu --quick`: every VM metric measured, each beside its raw QEMU
/// baseline but exec (which has none). Skipped (passes with a message) without QEMU.
#[test]
fn quick_qemu_run_reports_every_vm_metric() {
    let have_qemu = Command::new("qemu-system-x86_64")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !have_qemu {
        eprintln!("skipped: no qemu-system-x86_64 (scripts/install-deps.sh installs it)");
        return;
    }
    let _turn = ONE_RUN_AT_A_TIME.lock();
    let dir = tempfile::tempdir().expect("temp dir");
    let json_path = dir.path().join("out.json");
    let before = bench_dirs();
    let out = Command::new(env!("CARGO_BIN_EXE_cove-bench"))
        .args(["--runtime", "qemu", "--quick", "--json"])
        .arg(&json_path)
        .arg("--guest-agent")
        .arg(guest_agent())
        .output()
        .expect("run cove-bench");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "cove-bench failed\nstdout:\n{stdout}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value =
        serde_json::from_slice(&std::fs::read(&json_path).expect("read the JSON")).expect("JSON");
    assert!(report["machine"]["qemu"]
        .as_str()
        .is_some_and(|q| q.contains("QEMU")));
    let metrics = report["metrics"].as_array().expect("metrics");
    for key in [
        "qemu_first_create",
        "qemu_create_from_base",
        "qemu_exec",
        "qemu_pause_resume",
        "qemu_suspend",
        "qemu_wake",
    ] {
        let m = metrics
            .iter()
            .find(|m| m["key"] == key)
            .unwrap_or_else(|| panic!("{key} missing:\n{stdout}"));
        assert_numbers(key, key, m);
        let baselines = m["baselines"].as_array().expect("baselines");
        assert_eq!(baselines.is_empty(), key == "qemu_exec", "{key}: {m}");
        for b in baselines {
            assert_numbers(key, &format!("{key} baseline"), b);
        }
    }
    let leftovers: Vec<String> = bench_dirs().difference(&before).cloned().collect();
    assert!(leftovers.is_empty(), "left behind: {leftovers:?}");
}

/// `cove-bench --runtime gvisor --quick`: every gVisor metric measured beside its raw `runsc`
/// baseline, and the system-call row also beside the same loop on a runc server. Without runsc
/// it passes with a message, except under `CI=true`, where it fails.
#[test]
fn quick_gvisor_run_reports_every_gvisor_metric() {
    let have_runsc = Command::new("runsc")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !have_runsc {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "runsc is missing (scripts/install-deps.sh installs it)"
        );
        eprintln!("skipped: no runsc (scripts/install-deps.sh installs it)");
        return;
    }
    let _turn = ONE_RUN_AT_A_TIME.lock();
    let dir = tempfile::tempdir().expect("temp dir");
    let json_path = dir.path().join("out.json");
    let before = bench_dirs();
    let out = Command::new(env!("CARGO_BIN_EXE_cove-bench"))
        .args(["--runtime", "gvisor", "--quick", "--json"])
        .arg(&json_path)
        .arg("--guest-agent")
        .arg(guest_agent())
        .output()
        .expect("run cove-bench");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "cove-bench failed\nstdout:\n{stdout}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value =
        serde_json::from_slice(&std::fs::read(&json_path).expect("read the JSON")).expect("JSON");
    let metrics = report["metrics"].as_array().expect("metrics");
    for (key, baselines) in [
        ("gvisor_create", 1),
        ("gvisor_exec", 1),
        ("gvisor_suspend", 2),
        ("gvisor_wake", 1),
        ("gvisor_fork", 1),
        ("gvisor_syscalls", 2),
    ] {
        let m = metrics
            .iter()
            .find(|m| m["key"] == key)
            .unwrap_or_else(|| panic!("{key} missing:\n{stdout}"));
        assert_numbers(key, key, m);
        assert!(
            m["name"]
                .as_str()
                .is_some_and(|n| n.starts_with("gvisor (")),
            "{key} names its platform: {m}"
        );
        let bs = m["baselines"].as_array().expect("baselines");
        assert_eq!(bs.len(), baselines, "{key}: {m}");
        for b in bs {
            assert_numbers(key, &format!("{key} baseline"), b);
            assert!(b["ratio"].as_f64().unwrap_or(0.0) > 0.0, "{key}: {b}");
        }
    }
    let leftovers: Vec<String> = bench_dirs().difference(&before).cloned().collect();
    assert!(leftovers.is_empty(), "left behind: {leftovers:?}");
}

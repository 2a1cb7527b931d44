//! Issue 12, honest limits: inside a 1 vCPU / 512 MiB sandbox, `nproc`, `os.cpu_count()`,
//! `/proc/cpuinfo` and `free` report the sandbox's resources, not the node's (cpuset + lxcfs).

use cove_api_types::{CreateSandboxRequest, ResourcesRequest};
use cove_e2e::{client, delete, sandbox_with, sh};

async fn number(c: &cove_client::Client, id: &str, line: &str) -> u64 {
    let out = sh(c, id, line).await;
    let text = out.stdout_text();
    text.trim()
        .parse()
        .unwrap_or_else(|_| panic!("{line}: {text:?} / {:?}", out.stderr_text()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_small_sandbox_sees_its_own_cpus_and_memory() {
    let host_cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as u64;
    assert!(
        std::path::Path::new("/var/lib/lxcfs/proc/meminfo").exists() || which_lxcfs(),
        "lxcfs must be installed (scripts/install-deps.sh)"
    );
    let c = client();
    let id = sandbox_with(
        &c,
        "base",
        CreateSandboxRequest {
            resources: Some(ResourcesRequest {
                vcpus: Some(1),
                memory_mib: Some(512),
                ..Default::default()
            }),
            ..Default::default()
        },
    )
    .await;
    let want_cpus = 1.min(host_cpus);
    assert_eq!(number(&c, &id, "nproc").await, want_cpus, "nproc");
    assert_eq!(
        number(&c, &id, "python3 -c 'import os; print(os.cpu_count())'").await,
        want_cpus,
        "os.cpu_count()"
    );
    assert_eq!(
        number(&c, &id, "grep -c ^processor /proc/cpuinfo").await,
        want_cpus,
        "/proc/cpuinfo"
    );
    let total_mib = number(&c, &id, "free -m | awk '/^Mem:/{print $2}'").await;
    assert!(
        (400..=512).contains(&total_mib),
        "free shows {total_mib} MiB for a 512 MiB sandbox"
    );
    let meminfo_kib = number(&c, &id, "awk '/^MemTotal:/{print $2}' /proc/meminfo").await;
    assert_eq!(meminfo_kib, 512 * 1024, "MemTotal is the memory limit");
    delete(&c, &id).await;
}

fn which_lxcfs() -> bool {
    std::process::Command::new("sh")
        .args(["-c", "command -v lxcfs"])
        .output()
        .is_ok_and(|o| o.status.success())
}

//! Gateway cost, measured beside a direct veth path in the same run.

use std::io::{Read, Write};
use std::net::{SocketAddr, SocketAddrV4, TcpStream};
use std::time::{Duration, Instant};

use serde::Serialize;

use super::{check_route, FakeInternet, WEB_A};
use crate::cmd;
use crate::error::{NetworkError, Result};
use crate::network::Network;
use crate::policy::EgressPolicy;

/// Downloads per path (alternating direct and gateway); the median is reported.
const DOWNLOADS: usize = 5;

/// Results of [`bench()`]. Times in microseconds, throughput in MiB/s.
#[derive(Debug, Clone, Serialize)]
pub struct BenchReport {
    /// Rounds of connection setup measured per path.
    pub rounds: usize,
    /// Bytes downloaded per path.
    pub download_bytes: u64,
    /// TCP connect + small HTTP request/response, direct veth path, p50 (µs).
    pub direct_request_p50_us: f64,
    /// The same through the gateway (nft DNAT + proxy + upstream connect), p50 (µs).
    pub gateway_request_p50_us: f64,
    /// Direct path, p90 (µs).
    pub direct_request_p90_us: f64,
    /// Gateway path, p90 (µs).
    pub gateway_request_p90_us: f64,
    /// Direct path, p99 (µs; the maximum with fewer than 100 rounds).
    pub direct_request_p99_us: f64,
    /// Gateway path, p99 (µs; the maximum with fewer than 100 rounds).
    pub gateway_request_p99_us: f64,
    /// Download of `download_bytes`, direct path, median of 5 (MiB/s).
    pub direct_mib_s: f64,
    /// The same through the gateway, median of 5 (MiB/s).
    pub gateway_mib_s: f64,
    /// `gateway_mib_s / direct_mib_s`.
    pub throughput_ratio: f64,
    /// CPU time (user + system, every thread of this process: the client, the fake internet's
    /// server and, on the gateway path, the gateway) per GiB downloaded, direct path, median of
    /// 5 (s/GiB). Softirq work is charged to whichever thread the kernel interrupted, so this
    /// is close to the whole machine's CPU for the transfer: on 2 cores a path that needs more
    /// CPU per byte is slower by about the ratio of the two.
    pub direct_cpu_s_per_gib: f64,
    /// The same through the gateway (s/GiB).
    pub gateway_cpu_s_per_gib: f64,
    /// Time to take a prepared namespace with [`Network::attach`], p50 (µs).
    pub attach_p50_us: f64,
}

fn request(dest: SocketAddrV4, path: &str) -> std::result::Result<u64, String> {
    let mut s = TcpStream::connect_timeout(&SocketAddr::V4(dest), Duration::from_secs(5))
        .map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(Duration::from_secs(30)))
        .map_err(|e| e.to_string())?;
    s.write_all(
        format!("GET {path} HTTP/1.1\r\nHost: bench.test\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .map_err(|e| e.to_string())?;
    let mut buf = vec![0u8; 256 * 1024];
    let mut total = 0u64;
    loop {
        match s.read(&mut buf) {
            Ok(0) => return Ok(total),
            Ok(n) => total += n as u64,
            Err(e) => return Err(e.to_string()),
        }
    }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

/// In `ns`: `rounds` small requests; sorted latencies (µs).
fn latencies(ns: &str, rounds: usize) -> Result<Vec<f64>> {
    check_route(ns, WEB_A.ip())?;
    let dest = SocketAddrV4::new(WEB_A.ip(), 80);
    cmd::run_in_netns(ns, move || -> std::result::Result<Vec<f64>, String> {
        let mut lat = Vec::with_capacity(rounds);
        for _ in 0..rounds {
            let t = Instant::now();
            request(dest, "/")?;
            lat.push(t.elapsed().as_secs_f64() * 1e6);
        }
        lat.sort_by(f64::total_cmp);
        Ok(lat)
    })?
    .map_err(|e| NetworkError::io("bench", std::io::Error::other(e)))
}

/// CPU time (user + system) of every thread of this process so far (s).
fn process_cpu_s() -> f64 {
    let tv = |t: nix::sys::time::TimeVal| t.tv_sec() as f64 + t.tv_usec() as f64 / 1e6;
    nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_SELF)
        .map(|u| tv(u.user_time()) + tv(u.system_time()))
        .unwrap_or(f64::NAN)
}

/// In `ns`: one download of `bytes`: (MiB/s, CPU s per GiB of this process meanwhile).
fn download(ns: &str, bytes: u64) -> Result<(f64, f64)> {
    check_route(ns, WEB_A.ip())?;
    let dest = SocketAddrV4::new(WEB_A.ip(), 80);
    cmd::run_in_netns(ns, move || -> std::result::Result<(f64, f64), String> {
        let cpu = process_cpu_s();
        let t = Instant::now();
        let got = request(dest, &format!("/bytes/{bytes}"))?;
        let secs = t.elapsed().as_secs_f64();
        let cpu = process_cpu_s() - cpu;
        if got < bytes {
            return Err(format!("download stopped at {got} of {bytes} bytes"));
        }
        let gib = bytes as f64 / (1024.0 * 1024.0 * 1024.0);
        Ok((bytes as f64 / (1024.0 * 1024.0) / secs, cpu / gib))
    })?
    .map_err(|e| NetworkError::io("bench", std::io::Error::other(e)))
}

/// Medians of 5 downloads per path: (MiB/s, CPU s/GiB).
#[derive(Debug, Clone, Copy)]
struct Downloads {
    mib_s: f64,
    cpu_s_per_gib: f64,
}

fn medians(mut runs: Vec<(f64, f64)>) -> Downloads {
    let mut cpu: Vec<f64> = runs.iter().map(|r| r.1).collect();
    runs.sort_by(|a, b| a.0.total_cmp(&b.0));
    cpu.sort_by(f64::total_cmp);
    let mib_s: Vec<f64> = runs.iter().map(|r| r.0).collect();
    Downloads {
        mib_s: percentile(&mib_s, 0.5),
        cpu_s_per_gib: percentile(&cpu, 0.5),
    }
}

/// Latencies of both paths, then downloads alternating direct/gateway so load on the machine
/// hits both alike; (direct latencies, gateway latencies, direct downloads, gateway downloads).
fn measure(
    direct: &str,
    gateway: &str,
    rounds: usize,
    bytes: u64,
) -> Result<(Vec<f64>, Vec<f64>, Downloads, Downloads)> {
    let d_lat = latencies(direct, rounds)?;
    let g_lat = latencies(gateway, rounds)?;
    let (mut d, mut g) = (Vec::new(), Vec::new());
    for _ in 0..DOWNLOADS {
        d.push(download(direct, bytes)?);
        g.push(download(gateway, bytes)?);
    }
    Ok((d_lat, g_lat, medians(d), medians(g)))
}

/// Builds a fake internet (prefix `{prefix}l`) and a gateway (prefix `{prefix}`), then measures
/// small-request latency (`rounds` each, sequential) and a `bytes` download through the gateway
/// and over the direct veth path, plus `attach` from the prepared pool; removes everything after.
/// `prefix` is 1-7 of `[a-z0-9]`. Traffic stays inside the namespaces it creates.
pub async fn bench(prefix: &str, rounds: usize, bytes: u64) -> Result<BenchReport> {
    let lab = FakeInternet::create(&format!("{prefix}l")).await?;
    let result = run(&lab, prefix, rounds.clamp(1, 10_000), bytes).await;
    let cleanup = lab.destroy();
    let report = result?;
    cleanup?;
    Ok(report)
}

async fn run(lab: &FakeInternet, prefix: &str, rounds: usize, bytes: u64) -> Result<BenchReport> {
    let (net, _) = Network::start(lab.network_config(prefix), Vec::new()).await?;
    let result = async {
        net.wait_prepared(Duration::from_secs(30)).await;
        let mut attach = Vec::new();
        for i in 0..3 {
            let t = Instant::now();
            net.attach(&format!("bench-{i}"), EgressPolicy::default())
                .await?;
            attach.push(t.elapsed().as_secs_f64() * 1e6);
        }
        attach.sort_by(f64::total_cmp);
        let sbx = net.attachment("bench-0")?.netns;
        let direct_ns = lab.direct_ns.clone();
        let (direct, gateway, direct_dl, gateway_dl) =
            tokio::task::spawn_blocking(move || measure(&direct_ns, &sbx, rounds, bytes))
                .await
                .map_err(|e| NetworkError::io("bench", std::io::Error::other(e.to_string())))??;
        Ok(BenchReport {
            rounds,
            download_bytes: bytes,
            direct_request_p50_us: percentile(&direct, 0.5),
            gateway_request_p50_us: percentile(&gateway, 0.5),
            direct_request_p90_us: percentile(&direct, 0.9),
            gateway_request_p90_us: percentile(&gateway, 0.9),
            direct_request_p99_us: percentile(&direct, 0.99),
            gateway_request_p99_us: percentile(&gateway, 0.99),
            direct_mib_s: direct_dl.mib_s,
            gateway_mib_s: gateway_dl.mib_s,
            attach_p50_us: percentile(&attach, 0.5),
            throughput_ratio: gateway_dl.mib_s / direct_dl.mib_s,
            direct_cpu_s_per_gib: direct_dl.cpu_s_per_gib,
            gateway_cpu_s_per_gib: gateway_dl.cpu_s_per_gib,
        })
    }
    .await;
    net.shutdown().await?;
    result
}

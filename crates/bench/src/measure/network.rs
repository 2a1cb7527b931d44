//! Sandbox networks: what networking costs a cold start (the server under test, networking on,
//! beside a second server with `--network off`, interleaved in the same run), the egress
//! gateway itself (`cove_network::lab::bench`: request setup and a download through the gateway
//! beside a direct veth path, in namespaces of its own), connection setup through the port proxy
//! (a fresh connection and a small request to busybox `httpd` in a sandbox, by host name on the
//! proxy listener, beside the same `httpd` on the host over loopback), and a leak check (create →
//! delete cycles through the server, then the network inventory compared with before).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::Context;

use super::{dist_ms, progress, run_command, Ctx, TEMPLATE};
use crate::report::{Metric, Stats, Unavailable, Unit};
use crate::server::{create_sandbox, delete_sandbox, CoveServer, ServerSettings};

/// Metrics, or why they could not be taken.
pub struct Network {
    /// What was measured.
    pub metrics: Vec<Metric>,
    /// What this host cannot measure (networking off).
    pub unavailable: Vec<Unavailable>,
}

/// Namespaces the gateway keeps prepared (`cove_network::NetworkConfig::new`'s default).
const PREPARED: usize = 8;

/// Measures every network metric, when the server under test has sandbox networks.
pub async fn measure(ctx: &Ctx<'_>, settings: &ServerSettings) -> anyhow::Result<Network> {
    let mut out = Network {
        metrics: Vec::new(),
        unavailable: Vec::new(),
    };
    if !ctx.client.capabilities().await?.network {
        for (key, name) in [
            (
                "cold_start_network",
                "create → first command, networking on vs off",
            ),
            ("gateway_request", "request through the egress gateway"),
            ("gateway_download", "download through the egress gateway"),
            ("port_proxy_request", "request through the port proxy"),
            ("network_leak", "network leak after create/delete cycles"),
        ] {
            out.unavailable.push(Unavailable {
                key,
                name: name.to_string(),
                reason: "sandbox networks are off on this host (root, ip and nft needed)".into(),
            });
        }
        return Ok(out);
    }
    out.metrics.push(cold_starts(ctx, settings).await?);
    out.metrics.extend(gateway(ctx).await?);
    out.metrics.push(port_proxy(ctx).await?);
    out.metrics.push(leaks(ctx).await?);
    Ok(out)
}

/// One cold start: create, `true`, delete; the time to the end of `true`.
pub(super) async fn cold_start(client: &cove_client::Client) -> anyhow::Result<Duration> {
    let t0 = Instant::now();
    let id = create_sandbox(client, TEMPLATE).await?;
    run_command(client, &id, &["true"]).await?;
    let took = t0.elapsed();
    delete_sandbox(client, &id).await?;
    Ok(took)
}

/// Cold starts alternating between the server under test and a second server started with
/// `off` (`what` names that server in errors, e.g. `--network off`): one warm-up each, then
/// `runs` each, alternating so load on the machine hits both alike. (on, off) durations.
pub(super) async fn alternating_cold_starts(
    ctx: &Ctx<'_>,
    off: ServerSettings,
    runs: usize,
    what: &str,
) -> anyhow::Result<(Vec<Duration>, Vec<Duration>)> {
    let off = CoveServer::start(off)
        .await
        .with_context(|| format!("start a server with {what}"))?;
    let measured = async {
        let off_client = off.client()?;
        off.ensure_release(&off_client, TEMPLATE).await?;
        let (mut on, mut plain) = (Vec::new(), Vec::new());
        cold_start(&ctx.client).await?;
        cold_start(&off_client).await?;
        for _ in 0..runs {
            on.push(cold_start(&ctx.client).await?);
            plain.push(cold_start(&off_client).await?);
        }
        anyhow::Ok((on, plain))
    }
    .await;
    off.stop()
        .await
        .with_context(|| format!("stop the {what} server"))?;
    measured
}

async fn cold_starts(ctx: &Ctx<'_>, settings: &ServerSettings) -> anyhow::Result<Metric> {
    let runs = ctx.scale.network_cold_starts;
    progress(&format!(
        "network: {runs} cold starts each with networking on and off"
    ));
    let off = ServerSettings {
        network: cove_server::NetworkMode::Off,
        ..settings.clone()
    };
    let (on, plain) = alternating_cold_starts(ctx, off, runs, "--network off").await?;
    Ok(Metric::new(
        "cold_start_network",
        "create → first command `true`, networking on",
        Unit::Ms,
        dist_ms(&on)?,
    )
    .baseline("the same, --network off (loopback only)", dist_ms(&plain)?))
}

async fn gateway(ctx: &Ctx<'_>) -> anyhow::Result<Vec<Metric>> {
    let rounds = ctx.scale.gateway_rounds;
    let bytes = ctx.scale.gateway_bytes;
    progress(&format!(
        "network: gateway, {rounds} requests and {} MiB downloads per path",
        bytes / crate::args::MIB
    ));
    let r = cove_network::lab::bench("cbg", rounds, bytes)
        .await
        .context("the gateway bench")?;
    let ms = |us: f64| us / 1000.0;
    let dist = |p50: f64, p90: f64, p99: f64| {
        Stats::Distribution(crate::stats::Summary {
            n: rounds,
            p50: ms(p50),
            p90: ms(p90),
            p95: None,
            p99: ms(p99),
        })
    };
    let download_ms = |mib_s: f64| bytes as f64 / crate::args::MIB as f64 / mib_s * 1000.0;
    Ok(vec![
        Metric::new(
            "gateway_request",
            "connect + small HTTP request through the gateway",
            Unit::Ms,
            dist(
                r.gateway_request_p50_us,
                r.gateway_request_p90_us,
                r.gateway_request_p99_us,
            ),
        )
        .baseline(
            "direct veth path",
            dist(
                r.direct_request_p50_us,
                r.direct_request_p90_us,
                r.direct_request_p99_us,
            ),
        )
        .note(format!(
            "nft DNAT + proxy + upstream connect; attach of a prepared namespace p50 {:.0} µs",
            r.attach_p50_us
        ))
        .extra("attach_p50_us", r.attach_p50_us),
        Metric::new(
            "gateway_download",
            format!(
                "download {} MiB through the gateway",
                bytes / crate::args::MIB
            ),
            Unit::Ms,
            Stats::single(download_ms(r.gateway_mib_s)),
        )
        .baseline(
            "direct veth path",
            Stats::single(download_ms(r.direct_mib_s)),
        )
        .note(format!(
            "{:.0} MiB/s vs {:.0} MiB/s (median of 5); CPU {:.2} vs {:.2} s/GiB",
            r.gateway_mib_s, r.direct_mib_s, r.gateway_cpu_s_per_gib, r.direct_cpu_s_per_gib
        ))
        .extra("gateway_mib_s", r.gateway_mib_s)
        .extra("direct_mib_s", r.direct_mib_s)
        .extra("gateway_cpu_s_per_gib", r.gateway_cpu_s_per_gib)
        .extra("direct_cpu_s_per_gib", r.direct_cpu_s_per_gib),
    ])
}

/// One fresh connection to `addr`: a `GET /` naming `host` (with the port token when given),
/// the whole answer read until the server closes; the time it took.
async fn http_round(addr: SocketAddr, host: &str, token: Option<&str>) -> anyhow::Result<Duration> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let t0 = Instant::now();
    let mut s = tokio::net::TcpStream::connect(addr).await?;
    s.set_nodelay(true)?;
    let mut req = format!("GET / HTTP/1.1\r\nhost: {host}\r\nconnection: close\r\n");
    if let Some(t) = token {
        req.push_str(&format!("x-cove-port-token: {t}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).await?;
    let mut answer = Vec::new();
    s.read_to_end(&mut answer).await?;
    anyhow::ensure!(
        answer.get(9..12) == Some(b"200".as_slice()),
        "answer: {}",
        String::from_utf8_lossy(&answer[..answer.len().min(200)])
    );
    Ok(t0.elapsed())
}

/// Busybox `httpd` on the host (the baseline's server) and the directory it serves; the
/// process is killed on drop, then the directory removed.
struct HostHttpd {
    child: std::process::Child,
    _www: tempfile::TempDir,
}

impl Drop for HostHttpd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn port_proxy(ctx: &Ctx<'_>) -> anyhow::Result<Metric> {
    let rounds = ctx.scale.gateway_rounds;
    progress(&format!(
        "network: port proxy, {rounds} requests each through the proxy and direct"
    ));
    let proxy = ctx
        .server
        .proxy_addr()
        .context("the server under test has no proxy listener")?;
    let id = create_sandbox(&ctx.client, TEMPLATE).await?;
    let measured = async {
        let token = ctx.client.sandbox_ports(&id).await?.token;
        ctx.client
            .create_command(
                &id,
                &cove_api_types::CreateCommandRequest {
                    shell: Some(
                        "mkdir -p /tmp/www && echo hello > /tmp/www/index.html && \
                         exec httpd -f -p 8080 -h /tmp/www"
                            .into(),
                    ),
                    ..Default::default()
                },
            )
            .await?;
        let host = format!("8080-{id}.{}", cove_server::DEFAULT_PROXY_DOMAIN);
        let mut ready = false;
        for _ in 0..100 {
            if http_round(proxy, &host, Some(&token)).await.is_ok() {
                ready = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        anyhow::ensure!(
            ready,
            "httpd in the sandbox never answered through the proxy"
        );
        // The baseline: the same busybox httpd on the host, reached directly over loopback.
        let www = tempfile::tempdir()?;
        std::fs::write(www.path().join("index.html"), "hello\n")?;
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let direct: SocketAddr = ([127, 0, 0, 1], port).into();
        let child = std::process::Command::new("busybox")
            .args(["httpd", "-f", "-p", &format!("127.0.0.1:{port}"), "-h"])
            .arg(www.path())
            .spawn()
            .context("start busybox httpd on the host")?;
        let _httpd = HostHttpd { child, _www: www };
        let mut ready = false;
        for _ in 0..100 {
            if http_round(direct, "localhost", None).await.is_ok() {
                ready = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        anyhow::ensure!(ready, "busybox httpd on the host never answered");
        let (mut through, mut plain) = (Vec::new(), Vec::new());
        for _ in 0..rounds {
            through.push(http_round(proxy, &host, Some(&token)).await?);
            plain.push(http_round(direct, "localhost", None).await?);
        }
        anyhow::Ok((through, plain))
    }
    .await;
    delete_sandbox(&ctx.client, &id).await?;
    let (through, plain) = measured?;
    Ok(Metric::new(
        "port_proxy_request",
        "connect + small HTTP request through the port proxy",
        Unit::Ms,
        dist_ms(&through)?,
    )
    .baseline(
        "the same busybox httpd on the host, direct over loopback",
        dist_ms(&plain)?,
    )
    .note("by host name on the proxy listener, port token; proxy → gateway namespace → sandbox"))
}

/// The counts a leak would change.
fn counts(i: &cove_network::Inventory) -> [usize; 7] {
    [
        i.namespaces.len(),
        i.gateway_links,
        i.gateway_routes,
        i.gateway_addresses,
        i.nft_elements,
        i.nft_rules,
        i.host_links,
    ]
}

/// The inventory once no sandbox is attached and the prepared pool is full again.
async fn settled(prefix: &str) -> anyhow::Result<cove_network::Inventory> {
    let mut inv = cove_network::inventory(prefix)?;
    for _ in 0..300 {
        if inv.namespaces.len() == 1 + PREPARED
            && inv.gateway_links == 1 + PREPARED
            && inv.nft_elements == PREPARED
        {
            return Ok(inv);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        inv = cove_network::inventory(prefix)?;
    }
    anyhow::bail!("the network inventory did not settle: {inv:?}")
}

async fn leaks(ctx: &Ctx<'_>) -> anyhow::Result<Metric> {
    let cycles = ctx.scale.network_leak_cycles;
    progress(&format!(
        "network: {cycles} create → delete cycles, then a leak count"
    ));
    let prefix = ctx.server.network_prefix().to_string();
    let before = settled(&prefix).await?;
    let t0 = Instant::now();
    let parallel = 4;
    let mut done = 0;
    while done < cycles {
        let n = parallel.min(cycles - done);
        let batch = (0..n).map(|_| async {
            let id = create_sandbox(&ctx.client, TEMPLATE).await?;
            delete_sandbox(&ctx.client, &id).await
        });
        for r in futures::future::join_all(batch).await {
            r?;
        }
        done += n;
    }
    let elapsed = t0.elapsed();
    let after = settled(&prefix).await?;
    let leaked: usize = counts(&before)
        .iter()
        .zip(counts(&after))
        .map(|(b, a)| a.abs_diff(*b))
        .sum();
    Ok(Metric::new(
        "network_leak",
        format!("network objects leaked after {cycles} create/delete cycles"),
        Unit::Count,
        Stats::single(leaked as f64),
    )
    .note(format!(
        "namespaces, links, routes, addresses, nft elements and rules compared; {cycles} cycles \
         ({parallel} at once) in {:.1} s",
        elapsed.as_secs_f64()
    ))
    .extra("cycles", cycles)
    .extra("seconds", elapsed.as_secs_f64()))
}

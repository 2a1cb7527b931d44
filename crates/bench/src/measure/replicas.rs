//! Creates per second through two control-plane replicas on PostgreSQL, beside the single
//! SQLite server of the same run: both replicas (`--no-local-node`, one schema of the database
//! at `--postgres-url`) and one node agent that joins the first run in this process, and the
//! creates alternate between the replicas. One sample is `creates` creates, `PARALLEL` at a
//! time, each waited until it runs and then deleted (so a small node has room for them all: the
//! scheduler gives a node 4 vCPUs per CPU); the figure is creates over the wall time, deletes
//! included on both sides. Failed creates (5xx included) are counted.

use std::time::{Duration, Instant};

use anyhow::Context;
use cove_client::Client;
use futures::StreamExt;

use super::{progress, TEMPLATE};
use crate::report::{Metric, Stats, Unavailable, Unit};
use crate::server::{create_sandbox, delete_sandbox, CoveServer, ServerSettings};

const KEY: &str = "replicas_creates_per_s";
const NAME: &str = "creates/s through two replicas on PostgreSQL";
/// Creates under way at once, on each side.
const PARALLEL: usize = 4;
/// The join token of the bench's own cluster.
const TOKEN: &str = "cove-bench-replicas-join-token";

/// What one side did: creates per second of wall time, and failed creates.
struct Side {
    per_s: f64,
    failed: u64,
    first_error: Option<String>,
}

/// Measures `creates` creates through `single` (SQLite) and through two replicas on PostgreSQL.
/// Without a PostgreSQL URL the metric is unavailable.
pub async fn measure(
    single: &CoveServer,
    settings: &ServerSettings,
    postgres_url: Option<&str>,
    creates: usize,
) -> anyhow::Result<Result<Metric, Unavailable>> {
    let Some(url) = postgres_url else {
        return Ok(Err(Unavailable {
            key: KEY,
            name: NAME.to_string(),
            reason: "no --postgres-url (COVE_BENCH_POSTGRES_URL) given".to_string(),
        }));
    };
    progress(&format!(
        "replicas: {creates} creates through the SQLite server"
    ));
    let lite = side(&[single.client()?], creates).await?;
    progress(&format!(
        "replicas: {creates} creates through two replicas on PostgreSQL"
    ));
    let replicas = Replicas::start(settings, url).await?;
    let two = match replicas.clients() {
        Ok(clients) => side(&clients, creates).await,
        Err(e) => Err(e),
    };
    let stopped = replicas.stop().await;
    let two = two?;
    stopped?;
    for (what, s) in [("SQLite", &lite), ("two replicas", &two)] {
        if let Some(e) = &s.first_error {
            progress(&format!(
                "replicas: {what}: {} failed, first: {e}",
                s.failed
            ));
        }
    }
    Ok(Ok(Metric::new(
        KEY,
        NAME,
        Unit::PerS,
        Stats::single(two.per_s),
    )
    .baseline("one server on SQLite", Stats::single(lite.per_s))
    .note(format!("failed creates {} vs {}", two.failed, lite.failed))
    .extra("failed", two.failed)
    .extra("baseline_failed", lite.failed)
    .extra("creates", creates as u64)
    .extra("parallel", PARALLEL as u64)))
}

/// Two control-plane replicas (`--no-local-node`) on one schema of a PostgreSQL database, and
/// one node agent joined to the first, the `tiny` release built: ready for creates through
/// either replica. [`Replicas::stop`] stops them all and drops the schema.
pub struct Replicas {
    a: CoveServer,
    b: CoveServer,
    node: CoveServer,
    admin: sqlx::PgPool,
    schema: String,
}

impl Replicas {
    /// Makes the schema, starts both replicas and the node, and waits until the node is ready
    /// and the release built; everything started is stopped again on an error.
    pub async fn start(settings: &ServerSettings, url: &str) -> anyhow::Result<Replicas> {
        let admin = sqlx::postgres::PgPoolOptions::new()
            .max_connections(1)
            .connect(url)
            .await
            .context("connect to --postgres-url")?;
        let schema = format!(
            "cove_bench_replicas_{}_{}",
            std::process::id(),
            SCHEMAS.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        );
        sqlx::query(&format!("CREATE SCHEMA \"{schema}\""))
            .execute(&admin)
            .await
            .context("create the replicas' schema")?;
        let sep = if url.contains('?') { '&' } else { '?' };
        let store = format!("{url}{sep}options[search_path]={schema}");
        let (a, b, node) = match start_servers(settings, &store).await {
            Ok(servers) => servers,
            Err(e) => {
                let _ = drop_schema(&admin, &schema).await;
                admin.close().await;
                return Err(e);
            }
        };
        let replicas = Replicas {
            a,
            b,
            node,
            admin,
            schema,
        };
        match replicas.wait_ready().await {
            Ok(()) => Ok(replicas),
            Err(e) => {
                let _ = replicas.stop().await;
                Err(e)
            }
        }
    }

    /// A client of each replica.
    pub fn clients(&self) -> anyhow::Result<[Client; 2]> {
        Ok([self.a.client()?, self.b.client()?])
    }

    /// Waits until replica B sees the node ready, and builds the release through A.
    async fn wait_ready(&self) -> anyhow::Result<()> {
        let [ca, cb] = self.clients()?;
        let start = Instant::now();
        loop {
            let ready = cb.nodes().await.is_ok_and(|l| {
                l.nodes.len() == 1 && l.nodes[0].state == cove_api_types::NodeState::Ready
            });
            if ready {
                break;
            }
            anyhow::ensure!(
                start.elapsed() < Duration::from_secs(60),
                "the node did not join"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        self.a.ensure_release(&ca, TEMPLATE).await
    }

    /// Stops B (it deletes every sandbox while the node still serves them), A and the node,
    /// then drops the schema; the first error after trying all.
    pub async fn stop(self) -> anyhow::Result<()> {
        let stopped_b = self.b.stop().await;
        let stopped_a = self.a.stop().await;
        let stopped_node = self.node.stop().await;
        let dropped = drop_schema(&self.admin, &self.schema).await;
        self.admin.close().await;
        stopped_b?;
        stopped_a?;
        stopped_node?;
        dropped
    }
}

/// Numbers the schemas of one bench process.
static SCHEMAS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

async fn drop_schema(admin: &sqlx::PgPool, schema: &str) -> anyhow::Result<()> {
    sqlx::query(&format!("DROP SCHEMA \"{schema}\" CASCADE"))
        .execute(admin)
        .await
        .context("drop the replicas' schema")?;
    Ok(())
}

/// Starts replicas A and B on `store` and a node joined to A; stops what it started when a
/// later one fails.
async fn start_servers(
    settings: &ServerSettings,
    store: &str,
) -> anyhow::Result<(CoveServer, CoveServer, CoveServer)> {
    let node_listen = |port: u16| std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let (port_a, port_b) = (free_port()?, free_port()?);
    let replica = |port: u16| {
        let store = store.to_string();
        move |cfg: &mut cove_server::Config| {
            cfg.store = Some(store);
            cfg.cluster = Some(cove_server::ClusterSettings {
                local_node: false,
                heartbeat_interval: Duration::from_millis(500),
                ..cove_server::ClusterSettings::new(TOKEN, node_listen(port))
            });
        }
    };
    let a = CoveServer::start_with(settings.clone(), replica(port_a), None).await?;
    let b = match CoveServer::start_with(
        settings.clone(),
        replica(port_b),
        Some(a.token().to_string()),
    )
    .await
    {
        Ok(b) => b,
        Err(e) => {
            let _ = a.stop().await;
            return Err(e);
        }
    };
    let node = CoveServer::start_node(
        settings.clone(),
        |_| {},
        cove_server::NodeSettings {
            name: "bench-node".into(),
            control_plane: format!("https://{}", node_listen(port_a)),
            join_token: TOKEN.into(),
            listen: node_listen(0),
            advertise: None,
        },
    )
    .await;
    match node {
        Ok(node) => Ok((a, b, node)),
        Err(e) => {
            let _ = b.stop().await;
            let _ = a.stop().await;
            Err(e)
        }
    }
}

/// `creates` creates through `clients` in turn, `PARALLEL` at a time, each deleted once it
/// runs.
async fn side(clients: &[Client], creates: usize) -> anyhow::Result<Side> {
    let start = Instant::now();
    let results: Vec<anyhow::Result<()>> = futures::stream::iter(0..creates)
        .map(|i| {
            let c = clients[i % clients.len()].clone();
            async move {
                let id = create_sandbox(&c, TEMPLATE).await?;
                delete_sandbox(&c, &id).await
            }
        })
        .buffer_unordered(PARALLEL)
        .collect()
        .await;
    let wall = start.elapsed();
    let mut side = Side {
        per_s: 0.0,
        failed: 0,
        first_error: None,
    };
    let mut made = 0u32;
    for r in results {
        match r {
            Ok(()) => made += 1,
            Err(e) => {
                side.failed += 1;
                side.first_error.get_or_insert_with(|| format!("{e:#}"));
            }
        }
    }
    side.per_s = f64::from(made) / wall.as_secs_f64().max(1e-9);
    Ok(side)
}

fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")
        .context("find a free port")?
        .local_addr()?
        .port())
}

//! `cove create`: creates a sandbox, waits until it runs, prints its id.

use std::time::Duration;

use anyhow::bail;
use clap::Args;
use cove_api_types::{
    CreateSandboxRequest, EgressPolicy, EgressRule, OnExpiry, OperationState, ResourcesRequest,
    Sandbox, VolumeMount,
};
use cove_client::Client;

use super::exec::parse_key_value;

/// How long `create` waits for the create operation (which has its own, shorter deadline).
pub(crate) const CREATE_WAIT: Duration = Duration::from_secs(3600);

/// Options of `cove create`.
#[derive(Debug, Args)]
pub struct CreateArgs {
    /// Template to start from (default: the server's, `base`).
    #[arg(short, long)]
    pub template: Option<String>,
    /// Release of the template (default: its latest ready release).
    #[arg(long)]
    pub release: Option<u32>,
    /// Runtime to run on (`runc`, `qemu`; default: the server's). One the server does not
    /// offer is refused.
    #[arg(long)]
    pub runtime: Option<String>,
    /// Resource limits.
    #[command(flatten)]
    pub resources: ResourceArgs,
    /// Egress policy.
    #[command(flatten)]
    pub network: NetworkArgs,
    /// Environment of every command in the sandbox (repeatable).
    #[arg(short, long = "env", value_name = "K=V", value_parser = parse_key_value)]
    pub env: Vec<(String, String)>,
    /// Label of the sandbox (repeatable).
    #[arg(short, long = "metadata", value_name = "K=V", value_parser = parse_key_value)]
    pub metadata: Vec<(String, String)>,
    /// Default working directory of commands.
    #[arg(long, value_name = "DIR")]
    pub cwd: Option<String>,
    /// Default user of commands.
    #[arg(short, long)]
    pub user: Option<String>,
    /// Suspend the sandbox after this many seconds without activity (default 21600; 0 = never).
    #[arg(long, value_name = "SECONDS")]
    pub idle_timeout: Option<u64>,
    /// Delete the sandbox this many seconds after its creation (default: never).
    #[arg(long, value_name = "SECONDS")]
    pub ttl: Option<u64>,
    /// What the end of --ttl does: `delete` (default) or `suspend` (`cove expire` changes it
    /// live).
    #[arg(long, value_name = "ACTION", value_parser = parse_on_expiry)]
    pub on_expiry: Option<OnExpiry>,
    /// Start from this checkpoint (`ck-…`, see `cove checkpoint`): its files, template,
    /// release and size (then --template, --release and the resource flags must be absent).
    #[arg(long, value_name = "CHECKPOINT")]
    pub checkpoint: Option<String>,
    /// Make the sandbox's ports reachable without a credential (`cove ports ID --private`
    /// closes them again).
    #[arg(long)]
    pub public: bool,
    /// Mount a volume (`cove volume create`): `NAME:/path`, or `NAME:/path:ro` read-only
    /// (repeatable).
    #[arg(long = "volume", value_name = "NAME:/PATH[:ro]", value_parser = parse_volume)]
    pub volumes: Vec<VolumeMount>,
    /// Idempotency key: repeating a create with the same key returns the same sandbox.
    #[arg(long, value_name = "KEY")]
    pub idempotency_key: Option<String>,
    /// Print the sandbox as JSON instead of its id.
    #[arg(long)]
    pub json: bool,
}

impl CreateArgs {
    /// The create request these options describe.
    pub fn request(&self) -> CreateSandboxRequest {
        CreateSandboxRequest {
            template: self.template.clone(),
            release: self.release,
            runtime: self.runtime.clone(),
            resources: self.resources.request(),
            env: self.env.iter().cloned().collect(),
            metadata: self.metadata.iter().cloned().collect(),
            cwd: self.cwd.clone(),
            user: self.user.clone(),
            idle_timeout_s: self.idle_timeout,
            ttl_s: self.ttl,
            expires_at: None,
            on_expiry: self.on_expiry,
            network: self.network.policy(),
            secrets: Default::default(),
            checkpoint: self.checkpoint.clone(),
            public: self.public,
            volumes: self.volumes.clone(),
        }
    }
}

/// Parses `delete`, `suspend` or `pause`.
pub(crate) fn parse_on_expiry(s: &str) -> Result<OnExpiry, String> {
    OnExpiry::parse(s).ok_or_else(|| format!("{s:?} is not `delete`, `suspend` or `pause`"))
}

/// Parses one `--volume NAME:/path[:ro]`.
pub(crate) fn parse_volume(s: &str) -> Result<VolumeMount, String> {
    let bad = || format!("{s:?} is not NAME:/path or NAME:/path:ro");
    let (name, rest) = s.split_once(':').ok_or_else(bad)?;
    let (path, read_only) = match rest.rsplit_once(':') {
        Some((path, "ro")) => (path, true),
        Some((path, "rw")) => (path, false),
        Some(_) | None => (rest, false),
    };
    if name.is_empty() || !path.starts_with('/') {
        return Err(bad());
    }
    Ok(VolumeMount {
        name: name.to_string(),
        path: path.to_string(),
        read_only,
    })
}

/// The egress flags of `cove create`, `cove run` and `cove network`, one definition for all.
#[derive(Debug, Clone, Default, Args)]
pub struct NetworkArgs {
    /// Reach only what `--allow` names (the internet is closed; DNS answers only allowed names).
    #[arg(long, help_heading = "Network")]
    pub no_internet: bool,
    /// Open a destination: an IPv4 CIDR or address, a domain, or `*.domain` (repeatable).
    #[arg(long, value_name = "DEST", value_parser = parse_rule, help_heading = "Network")]
    pub allow: Vec<EgressRule>,
    /// Close a destination, whatever else allows it (repeatable).
    #[arg(long, value_name = "DEST", value_parser = parse_rule, help_heading = "Network")]
    pub deny: Vec<EgressRule>,
}

impl NetworkArgs {
    /// Whether any flag was given.
    pub fn any(&self) -> bool {
        self.no_internet || !self.allow.is_empty() || !self.deny.is_empty()
    }

    /// The policy these flags describe (`None` without any: the server's default).
    pub fn policy(&self) -> Option<EgressPolicy> {
        self.any().then(|| EgressPolicy {
            internet: !self.no_internet,
            allow: self.allow.clone(),
            deny: self.deny.clone(),
        })
    }
}

/// Parses one `--allow`/`--deny` entry.
pub(crate) fn parse_rule(s: &str) -> Result<EgressRule, String> {
    s.parse()
}

/// The resource flags of `cove create` and `cove run`, one definition for both.
#[derive(Debug, Clone, Default, Args)]
pub struct ResourceArgs {
    /// CPU limit in vCPUs.
    #[arg(long, help_heading = "Resources")]
    pub vcpus: Option<u32>,
    /// Memory limit in MiB.
    #[arg(long, help_heading = "Resources")]
    pub memory_mib: Option<u64>,
    /// Process limit.
    #[arg(long, help_heading = "Resources")]
    pub pids_max: Option<u64>,
    /// A disk of its own of this many MiB (its files can fill it without filling the node's).
    #[arg(long, help_heading = "Resources")]
    pub disk_mib: Option<u64>,
}

impl ResourceArgs {
    /// The resource overrides, or `None` when no flag is given (the server's defaults).
    pub fn request(&self) -> Option<ResourcesRequest> {
        let ResourceArgs {
            vcpus,
            memory_mib,
            pids_max,
            disk_mib,
        } = self.clone();
        let any =
            vcpus.is_some() || memory_mib.is_some() || pids_max.is_some() || disk_mib.is_some();
        any.then_some(ResourcesRequest {
            vcpus,
            memory_mib,
            pids_max,
            disk_mib,
        })
    }
}

/// Runs `cove create`.
pub async fn run(client: &Client, args: CreateArgs) -> anyhow::Result<()> {
    let created = client
        .create_sandbox(&args.request(), args.idempotency_key.as_deref())
        .await?;
    let sandbox = wait_created(client, &created.sandbox.id, &created.operation.id).await?;
    if args.json {
        crate::outln!("{}", serde_json::to_string_pretty(&sandbox)?);
    } else {
        crate::outln!("{}", sandbox.id);
    }
    Ok(())
}

/// Waits for a create operation; the running sandbox, or an error saying why it did not start.
pub(crate) async fn wait_created(
    client: &Client,
    sandbox_id: &str,
    operation_id: &str,
) -> anyhow::Result<Sandbox> {
    let operation = client.wait_operation(operation_id, CREATE_WAIT).await?;
    if operation.state != OperationState::Succeeded {
        match operation.error {
            Some(error) => bail!(
                "sandbox {sandbox_id} did not start: {}: {}",
                error.code,
                error.message
            ),
            None => bail!(
                "sandbox {sandbox_id} did not start: {}",
                operation.state.as_str()
            ),
        }
    }
    Ok(client.get_sandbox(sandbox_id).await?)
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::{Cli, Verb};

    #[test]
    fn create_flags_become_a_request() {
        let cli = Cli::try_parse_from([
            "cove",
            "create",
            "--template",
            "tiny",
            "--vcpus",
            "2",
            "--memory-mib",
            "1024",
            "--env",
            "A=1",
            "-e",
            "B=x=y",
            "--cwd",
            "/srv",
            "--user",
            "root",
        ])
        .expect("parses");
        let Verb::Create(args) = cli.verb else {
            panic!("expected create")
        };
        let request = args.request();
        assert_eq!(request.template.as_deref(), Some("tiny"));
        assert_eq!(
            request.resources,
            Some(ResourcesRequest {
                vcpus: Some(2),
                memory_mib: Some(1024),
                pids_max: None,
                disk_mib: None
            })
        );
        assert_eq!(request.env["A"], "1");
        assert_eq!(request.env["B"], "x=y");
        assert_eq!(request.cwd.as_deref(), Some("/srv"));
        assert_eq!(request.user.as_deref(), Some("root"));
        assert_eq!(request.network, None);
    }

    #[test]
    fn volume_flags_become_mounts() {
        let cli = Cli::try_parse_from([
            "cove",
            "create",
            "--volume",
            "data:/data",
            "--volume",
            "refs:/mnt/r:ro",
        ])
        .expect("parses");
        let Verb::Create(args) = cli.verb else {
            panic!("expected create")
        };
        let mounts = args.request().volumes;
        assert_eq!(
            mounts,
            vec![
                VolumeMount {
                    name: "data".into(),
                    path: "/data".into(),
                    read_only: false
                },
                VolumeMount {
                    name: "refs".into(),
                    path: "/mnt/r".into(),
                    read_only: true
                },
            ]
        );
        for bad in ["data", "data:rel", ":/x"] {
            assert!(parse_volume(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn network_flags_become_a_policy() {
        let cli = Cli::try_parse_from([
            "cove",
            "create",
            "--no-internet",
            "--allow",
            "pypi.org",
            "--allow",
            "*.pythonhosted.org",
            "--deny",
            "10.0.0.0/8",
        ])
        .expect("parses");
        let Verb::Create(args) = cli.verb else {
            panic!("expected create")
        };
        let policy = args.request().network.expect("a policy");
        assert!(!policy.internet);
        assert_eq!(
            policy
                .allow
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>(),
            ["pypi.org", "*.pythonhosted.org"]
        );
        assert_eq!(policy.deny[0].to_string(), "10.0.0.0/8");
        assert!(Cli::try_parse_from(["cove", "create", "--allow", "10.0.0.0/33"]).is_err());
    }

    #[test]
    fn defaults_send_an_empty_request() {
        let cli = Cli::try_parse_from(["cove", "create"]).expect("parses");
        let Verb::Create(args) = cli.verb else {
            panic!("expected create")
        };
        assert_eq!(args.request(), CreateSandboxRequest::default());
        assert!(Cli::try_parse_from(["cove", "create", "--env", "novalue"]).is_err());
    }
}

//! Sandboxes: `Sandbox` (create, connect, resume and fork answers), `SandboxDetail` /
//! `ListedSandbox` (get and list answers) and what they hold.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::errors::ErrorBody;

/// What `Sandbox` and `SandboxDetail` both say of a sandbox (flattened into each).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SandboxIds {
    /// The template it was made from (Cove's template name).
    #[serde(rename = "templateID")]
    pub template_id: String,
    /// E2B sandbox id (Cove's id without `sb-`).
    #[serde(rename = "sandboxID")]
    pub sandbox_id: String,
    /// The template's alias (the same name).
    pub alias: String,
    /// Always `cove`.
    #[serde(rename = "clientID")]
    pub client_id: &'static str,
    /// The envd version the SDK plans its features by ([`crate::ENVD_VERSION`]).
    pub envd_version: &'static str,
    /// The token envd requests carry (`X-Access-Token`).
    pub envd_access_token: String,
    /// Domain of `{port}-{id}.{domain}` host names; `null` when none is configured (the SDK
    /// then uses `E2B_DOMAIN`).
    pub domain: Option<String>,
}

/// `Sandbox`: a sandbox just created, connected to, resumed or forked.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NewSandbox {
    /// Its ids, envd access and domain.
    #[serde(flatten)]
    pub ids: SandboxIds,
    /// E2B's `e2b-traffic-access-token` for a sandbox whose ports are private; `null` when
    /// they are public.
    pub traffic_access_token: Option<String>,
}

/// `SandboxDetail` / `ListedSandbox`: a sandbox as get and list show it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SandboxDetail {
    /// Its ids, envd access and domain.
    #[serde(flatten)]
    pub ids: SandboxIds,
    /// Creation time, RFC 3339 (UTC, microseconds).
    pub started_at: String,
    /// When its timeout ends it, RFC 3339 (far away for a sandbox without one).
    pub end_at: String,
    /// vCPUs.
    pub cpu_count: u32,
    /// Memory limit, MiB.
    #[serde(rename = "memoryMB")]
    pub memory_mb: u64,
    /// Disk size, MiB (0 without a disk of its own).
    #[serde(rename = "diskSizeMB")]
    pub disk_size_mb: u64,
    /// `running` or `paused`.
    pub state: &'static str,
    /// The user's metadata.
    pub metadata: BTreeMap<String, String>,
    /// Whether it may reach the internet.
    pub allow_internet_access: bool,
    /// What its timeout does.
    pub lifecycle: SandboxLifecycle,
    /// Whether envd did not answer when it was paused: always `false` (Cove never snapshots
    /// a guest that does not answer).
    pub envd_unresponsive_at_pause: bool,
    /// Of a paused sandbox: `full` (memory kept) or `filesystem`; omitted while it runs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pause_mode: Option<&'static str>,
    /// Its egress rules; omitted for the default policy.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub network: Option<SandboxNetwork>,
}

/// `SandboxLifecycle`: what the end of a sandbox's timeout does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SandboxLifecycle {
    /// Envd traffic wakes it while paused.
    pub auto_resume: bool,
    /// `kill` or `pause`.
    pub on_timeout: OnTimeout,
}

/// `SandboxNetworkConfig`: a sandbox's egress policy in E2B's terms.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SandboxNetwork {
    /// Allowed destinations (host names, IPs, CIDR blocks).
    pub allow_out: Vec<String>,
    /// Denied destinations; `0.0.0.0/0` when the internet is off.
    pub deny_out: Vec<String>,
}

/// What the end of a sandbox's timeout does (also the `onTimeout` of Cove's own marker).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnTimeout {
    /// Delete it.
    Kill,
    /// Suspend it (E2B's pause).
    Pause,
}

/// One item of a fork answer: the new sandbox, or why it could not be made.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum ForkResult {
    /// `{"sandbox": Sandbox}`.
    Made {
        /// The new sandbox.
        sandbox: NewSandbox,
    },
    /// `{"error": {"code", "message"}}`.
    Failed {
        /// The HTTP status and message it would have had alone.
        error: ErrorBody,
    },
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::assert_wire;

    fn ids(domain: Option<&str>) -> SandboxIds {
        SandboxIds {
            template_id: "base".into(),
            sandbox_id: "abc".into(),
            alias: "base".into(),
            client_id: "cove",
            envd_version: "0.6.13",
            envd_access_token: "t".into(),
            domain: domain.map(String::from),
        }
    }

    fn new_sandbox(token: Option<&str>) -> NewSandbox {
        NewSandbox {
            ids: ids(None),
            traffic_access_token: token.map(String::from),
        }
    }

    #[test]
    fn a_new_sandbox_sends_its_optional_fields_as_null() {
        assert_wire(
            &new_sandbox(None),
            r#"{"templateID":"base","sandboxID":"abc","alias":"base","clientID":"cove",
                "envdVersion":"0.6.13","envdAccessToken":"t","trafficAccessToken":null,
                "domain":null}"#,
        );
    }

    #[test]
    fn a_detail_leaves_out_pause_mode_and_network_when_unset() {
        let mut d = SandboxDetail {
            ids: ids(Some("e2b.test")),
            started_at: "2026-01-01T00:00:00.000000Z".into(),
            end_at: "2026-01-01T00:05:00.000000Z".into(),
            cpu_count: 2,
            memory_mb: 512,
            disk_size_mb: 0,
            state: "running",
            metadata: BTreeMap::from([("k".into(), "v".into())]),
            allow_internet_access: true,
            lifecycle: SandboxLifecycle {
                auto_resume: false,
                on_timeout: OnTimeout::Kill,
            },
            envd_unresponsive_at_pause: false,
            pause_mode: None,
            network: None,
        };
        let base = r#""templateID":"base","sandboxID":"abc","alias":"base","clientID":"cove",
            "startedAt":"2026-01-01T00:00:00.000000Z","endAt":"2026-01-01T00:05:00.000000Z",
            "envdVersion":"0.6.13","envdAccessToken":"t","cpuCount":2,"memoryMB":512,
            "diskSizeMB":0,"state":"running","metadata":{"k":"v"},"allowInternetAccess":true,
            "domain":"e2b.test","envdUnresponsiveAtPause":false"#;
        assert_wire(
            &d,
            &format!(r#"{{{base},"lifecycle":{{"autoResume":false,"onTimeout":"kill"}}}}"#),
        );
        d.state = "paused";
        d.pause_mode = Some("filesystem");
        d.lifecycle.on_timeout = OnTimeout::Pause;
        d.network = Some(SandboxNetwork {
            allow_out: vec!["1.1.1.1".into()],
            deny_out: vec!["0.0.0.0/0".into()],
        });
        let base = base.replace(r#""state":"running""#, r#""state":"paused""#);
        assert_wire(
            &d,
            &format!(
                r#"{{{base},"lifecycle":{{"autoResume":false,"onTimeout":"pause"}},
                "pauseMode":"filesystem",
                "network":{{"allowOut":["1.1.1.1"],"denyOut":["0.0.0.0/0"]}}}}"#
            ),
        );
    }

    #[test]
    fn fork_results_are_a_sandbox_or_an_error() {
        assert_wire(
            &[
                ForkResult::Made {
                    sandbox: new_sandbox(Some("p")),
                },
                ForkResult::Failed {
                    error: ErrorBody {
                        code: 503,
                        message: "busy".into(),
                    },
                },
            ],
            r#"[{"sandbox":{"templateID":"base","sandboxID":"abc","alias":"base",
                "clientID":"cove","envdVersion":"0.6.13","envdAccessToken":"t",
                "trafficAccessToken":"p","domain":null}},
               {"error":{"code":503,"message":"busy"}}]"#,
        );
    }
}

//! Commands: `/v1/sandboxes/{id}/commands`.

use std::time::Duration;

use cove_api_types::{
    Attachment, Command, CommandList, CommandOutput, CommandState, CreateCommandRequest,
    CreateCommandResponse, KillRequest, SignalRequest,
};
use reqwest::Method;

use crate::{wait_param, Client, Result, LONG_POLL_SLACK, MAX_LONG_POLL};

impl Client {
    /// `POST /v1/sandboxes/{sandbox}/commands`: starts a command; read its output with
    /// [`Client::attach`] on the returned attachment.
    pub async fn create_command(
        &self,
        sandbox: &str,
        request: &CreateCommandRequest,
    ) -> Result<CreateCommandResponse> {
        let url = self.url(&["v1", "sandboxes", sandbox, "commands"]);
        self.json(self.request(Method::POST, url).json(request))
            .await
    }

    /// `GET /v1/sandboxes/{sandbox}/commands/{command}`. With `wait`, long-polls until the
    /// command exits or the wait (at most 30 s per request) elapses; check `state`.
    pub async fn get_command(
        &self,
        sandbox: &str,
        command: &str,
        wait: Option<Duration>,
    ) -> Result<Command> {
        let url = self.url(&["v1", "sandboxes", sandbox, "commands", command]);
        let mut request = self.request(Method::GET, url);
        if let Some(wait) = wait {
            let wait = wait.min(MAX_LONG_POLL);
            request = request
                .query(&[("wait", wait_param(wait))])
                .timeout(wait + LONG_POLL_SLACK);
        }
        self.json(request).await
    }

    /// `GET /v1/sandboxes/{sandbox}/commands`: the commands the sandbox keeps (running, and
    /// ended until deleted), oldest first.
    pub async fn list_commands(&self, sandbox: &str) -> Result<CommandList> {
        self.list_commands_in(sandbox, None).await
    }

    /// `GET /v1/sandboxes/{sandbox}/commands?state=`: the commands in `state` (all when
    /// `None`), oldest first.
    pub async fn list_commands_in(
        &self,
        sandbox: &str,
        state: Option<CommandState>,
    ) -> Result<CommandList> {
        let url = self.url(&["v1", "sandboxes", sandbox, "commands"]);
        let mut request = self.request(Method::GET, url);
        if let Some(state) = state {
            let state = match state {
                CommandState::Running => "running",
                CommandState::Exited => "exited",
            };
            request = request.query(&[("state", state)]);
        }
        self.json(request).await
    }

    /// `DELETE /v1/sandboxes/{sandbox}/commands/{command}`: forgets an ended command and its
    /// kept output (`409 failed_precondition` while it runs).
    pub async fn forget_command(&self, sandbox: &str, command: &str) -> Result<()> {
        let url = self.url(&["v1", "sandboxes", sandbox, "commands", command]);
        self.send(self.request(Method::DELETE, url)).await.map(drop)
    }

    /// `GET .../commands/{command}/output?wait=&max_bytes=`: waits up to `wait` (at most 60 s)
    /// for the command to end and answers with its output in one piece: all of it when it fits
    /// `max_bytes` (server default 1 MiB, at most 16 MiB), else its head and tail with the
    /// `omitted` range between.
    pub async fn command_output(
        &self,
        sandbox: &str,
        command: &str,
        wait: Option<Duration>,
        max_bytes: Option<u64>,
    ) -> Result<CommandOutput> {
        let url = self.url(&["v1", "sandboxes", sandbox, "commands", command, "output"]);
        let mut request = self.request(Method::GET, url);
        if let Some(wait) = wait {
            let wait = wait.min(Duration::from_secs(60));
            request = request
                .query(&[("wait", wait_param(wait))])
                .timeout(wait + LONG_POLL_SLACK);
        }
        if let Some(max) = max_bytes {
            request = request.query(&[("max_bytes", max)]);
        }
        self.json(request).await
    }

    /// `POST .../commands/{command}/signal`: sends `signal` (`SIGINT`, `INT` or `"2"`) to the
    /// command's process group.
    pub async fn signal(&self, sandbox: &str, command: &str, signal: &str) -> Result<Command> {
        let url = self.url(&["v1", "sandboxes", sandbox, "commands", command, "signal"]);
        let body = SignalRequest {
            signal: signal.to_owned(),
        };
        self.json(self.request(Method::POST, url).json(&body)).await
    }

    /// `POST .../commands/{command}/kill`: SIGTERM to the process tree, SIGKILL after `grace`
    /// (server default 2 s); answers once every process is gone.
    pub async fn kill(
        &self,
        sandbox: &str,
        command: &str,
        grace: Option<Duration>,
    ) -> Result<Command> {
        let url = self.url(&["v1", "sandboxes", sandbox, "commands", command, "kill"]);
        let body = KillRequest {
            grace_ms: grace.map(|g| u64::try_from(g.as_millis()).unwrap_or(u64::MAX)),
        };
        self.json(self.request(Method::POST, url).json(&body)).await
    }

    /// `POST .../commands/{command}/attachment`: a new data-plane token for the command; the
    /// previous one is revoked.
    pub async fn new_attachment(&self, sandbox: &str, command: &str) -> Result<Attachment> {
        let url = self.url(&[
            "v1",
            "sandboxes",
            sandbox,
            "commands",
            command,
            "attachment",
        ]);
        self.json(self.request(Method::POST, url)).await
    }
}

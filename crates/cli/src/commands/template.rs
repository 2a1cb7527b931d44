//! `cove template build|ls`.

use std::collections::VecDeque;
use std::time::Duration;

use anyhow::{bail, Context as _};
use clap::{Args, Subcommand};
use cove_api_types::{BuildReleaseRequest, Operation, OperationLogEvent, OperationState};
use cove_client::Client;
use futures::StreamExt;
use indicatif::{ProgressBar, ProgressStyle};

use crate::table;

/// Log lines shown after a failed build when they were not printed as they came.
const TAIL_LINES: usize = 30;
/// How long `build` follows a build that streams no `done` event.
const BUILD_WAIT: Duration = Duration::from_secs(4 * 3600);

/// `cove template ...`.
#[derive(Debug, Subcommand)]
pub enum TemplateVerb {
    /// Build a new release of a template, showing its progress; fails if the build fails.
    Build(BuildArgs),
    /// List templates.
    Ls(TemplateLsArgs),
}

/// Options of `cove template build`.
#[derive(Debug, Args)]
pub struct BuildArgs {
    /// Template name.
    pub name: String,
    /// Build from scratch, without the build cache.
    #[arg(long)]
    pub no_cache: bool,
    /// Print every build log line (otherwise the bar shows the latest one).
    #[arg(short, long)]
    pub verbose: bool,
}

/// Options of `cove template ls`.
#[derive(Debug, Args)]
pub struct TemplateLsArgs {
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Runs a `template` verb.
pub async fn run(client: &Client, verb: TemplateVerb) -> anyhow::Result<()> {
    match verb {
        TemplateVerb::Build(args) => build(client, args).await,
        TemplateVerb::Ls(args) => ls(client, args).await,
    }
}

async fn build(client: &Client, args: BuildArgs) -> anyhow::Result<()> {
    let request = BuildReleaseRequest {
        no_cache: args.no_cache,
    };
    let started = client.build_release(&args.name, &request).await?;
    let release = started.release.number;
    let bar = ProgressBar::new(100);
    bar.set_style(
        ProgressStyle::with_template("{spinner} [{elapsed_precise}] {bar:30} {pos:>3}% {msg}")
            .context("progress bar template")?,
    );
    bar.enable_steady_tick(Duration::from_millis(120));
    bar.set_message(format!("building {} release {release}", args.name));

    let mut tail: VecDeque<String> = VecDeque::with_capacity(TAIL_LINES);
    let mut phase = String::new();
    let mut done: Option<Operation> = None;
    let mut logs = std::pin::pin!(client.operation_logs(&started.operation.id, None));
    while let Some(event) = logs.next().await {
        match event {
            Ok(OperationLogEvent::Log { line, .. }) => {
                if args.verbose {
                    print_above(&bar, &line);
                } else {
                    bar.set_message(format!("{phase} {}", shorten(&line, 60)).trim().to_owned());
                }
                if tail.len() == TAIL_LINES {
                    tail.pop_front();
                }
                tail.push_back(line);
            }
            Ok(OperationLogEvent::Progress {
                percent,
                phase: now,
            }) => {
                bar.set_position(u64::from(percent.min(100)));
                bar.set_message(now.clone());
                phase = now;
            }
            Ok(OperationLogEvent::Done { operation }) => done = Some(operation),
            Err(err) => {
                // The log is a nicety: fall back to waiting for the operation itself.
                print_above(&bar, &format!("warning: build log unavailable: {err}"));
                break;
            }
        }
    }
    let operation = match done {
        Some(operation) => operation,
        None => {
            client
                .wait_operation(&started.operation.id, BUILD_WAIT)
                .await?
        }
    };
    bar.finish_and_clear();

    if operation.state == OperationState::Succeeded {
        eprintln!("template {} release {release} is ready", args.name);
        crate::outln!("{release}");
        return Ok(());
    }
    if !args.verbose {
        for line in &tail {
            eprintln!("{line}");
        }
    }
    match operation.error {
        Some(error) => bail!(
            "build of {} release {release} {}: {}: {}",
            args.name,
            operation.state.as_str(),
            error.code,
            error.message
        ),
        None => bail!(
            "build of {} release {release} {}",
            args.name,
            operation.state.as_str()
        ),
    }
}

/// Prints a line to stderr above the bar (or plainly when the bar is hidden: not a terminal).
fn print_above(bar: &ProgressBar, line: &str) {
    if bar.is_hidden() {
        eprintln!("{line}");
    } else {
        bar.println(line);
    }
}

/// `s` cut to at most `max` characters, with an ellipsis when cut.
fn shorten(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_owned();
    }
    let mut out: String = s.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}

async fn ls(client: &Client, args: TemplateLsArgs) -> anyhow::Result<()> {
    let list = client.templates().await?;
    if args.json {
        crate::outln!("{}", serde_json::to_string_pretty(&list.templates)?);
        return Ok(());
    }
    let rows: Vec<Vec<String>> = list
        .templates
        .iter()
        .map(|t| {
            vec![
                t.name.clone(),
                t.latest_release
                    .map_or_else(|| "-".to_owned(), |n| n.to_string()),
                t.releases.len().to_string(),
                t.description.clone(),
            ]
        })
        .collect();
    table::print(&["NAME", "LATEST", "RELEASES", "DESCRIPTION"], &rows);
    Ok(())
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::{Cli, Verb};

    #[test]
    fn build_and_ls_parse() {
        let cli = Cli::try_parse_from(["cove", "template", "build", "base", "--no-cache", "-v"])
            .expect("parses");
        let Verb::Template(TemplateVerb::Build(args)) = cli.verb else {
            panic!("expected build")
        };
        assert_eq!(args.name, "base");
        assert!(args.no_cache && args.verbose);

        let cli = Cli::try_parse_from(["cove", "template", "ls", "--json"]).expect("parses");
        assert!(matches!(
            cli.verb,
            Verb::Template(TemplateVerb::Ls(TemplateLsArgs { json: true }))
        ));
        assert!(Cli::try_parse_from(["cove", "template", "build"]).is_err());
    }

    #[test]
    fn long_lines_are_shortened() {
        assert_eq!(shorten("abc", 5), "abc");
        assert_eq!(shorten("abcdefgh", 5), "abcd…");
    }
}

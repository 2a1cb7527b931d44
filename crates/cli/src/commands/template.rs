//! `cove template build|ls|rm`.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context as _};
use clap::{Args, Subcommand};
use cove_api_types::{
    BuildReleaseRequest, BuildReleaseResponse, CreateTemplateQuery, Operation, OperationLogEvent,
    OperationState,
};
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
    /// With a build context directory `CONTEXT` or `-f FILE`, builds the template from a
    /// template file (a Dockerfile subset; default `CONTEXT/Dockerfile`) and the context.
    Build(BuildArgs),
    /// List templates.
    Ls(TemplateLsArgs),
    /// Delete a template built from a file (or, with `--release`, one release of any template).
    Rm(RmArgs),
}

/// Options of `cove template rm`.
#[derive(Debug, Args)]
pub struct RmArgs {
    /// Template name.
    pub name: String,
    /// Delete only this release.
    #[arg(long)]
    pub release: Option<u32>,
}

/// Options of `cove template build`.
#[derive(Debug, Args)]
pub struct BuildArgs {
    /// Template name.
    pub name: String,
    /// The template file (a Dockerfile subset: FROM, RUN, COPY/ADD, ENV, WORKDIR, USER, ARG,
    /// LABEL, EXPOSE, START, READY); default: `CONTEXT/Dockerfile`.
    #[arg(short = 'f', long = "file")]
    pub file: Option<PathBuf>,
    /// The build context directory COPY reads from.
    pub context: Option<PathBuf>,
    /// A build argument: replaces the default of the file's `ARG NAME` (repeatable).
    #[arg(long = "build-arg", value_name = "NAME=VALUE", value_parser = parse_build_arg)]
    pub build_args: Vec<(String, String)>,
    /// Build from scratch, without the build cache.
    #[arg(long)]
    pub no_cache: bool,
    /// The egress policy of the build's RUN steps (only with `-f`; default: the internet
    /// open). Not part of the build cache key: a cached step is not rerun under another
    /// policy.
    #[command(flatten)]
    pub network: super::create::NetworkArgs,
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
        TemplateVerb::Rm(args) => rm(client, args).await,
    }
}

async fn rm(client: &Client, args: RmArgs) -> anyhow::Result<()> {
    match args.release {
        Some(n) => {
            client.delete_release(&args.name, n).await?;
            eprintln!("deleted release {n} of {}", args.name);
        }
        None => {
            client.delete_template(&args.name).await?;
            eprintln!("deleted template {}", args.name);
        }
    }
    Ok(())
}

/// Name the template file gets in the context tar when it lies outside the context.
const FILE_IN_TAR: &str = ".cove-template-file";

/// The build context tar: `context`'s tree (symlinks kept as symlinks) plus the template
/// file, and the file's path inside the tar.
fn pack_context(file: &Path, context: Option<&Path>) -> anyhow::Result<(Vec<u8>, String)> {
    let mut tar = tar::Builder::new(Vec::new());
    tar.follow_symlinks(false);
    let mut inside = None;
    if let Some(dir) = context {
        let dir = dir
            .canonicalize()
            .with_context(|| format!("context {}", dir.display()))?;
        tar.append_dir_all(".", &dir)
            .with_context(|| format!("pack {}", dir.display()))?;
        let abs = file
            .canonicalize()
            .with_context(|| format!("template file {}", file.display()))?;
        inside = abs
            .strip_prefix(&dir)
            .ok()
            .map(|p| p.to_string_lossy().into_owned());
    }
    let path = match inside {
        Some(p) => p,
        None => {
            let text = std::fs::read(file).with_context(|| format!("read {}", file.display()))?;
            let mut h = tar::Header::new_gnu();
            h.set_size(text.len() as u64);
            h.set_mode(0o644);
            h.set_cksum();
            tar.append_data(&mut h, FILE_IN_TAR, text.as_slice())
                .context("pack the template file")?;
            FILE_IN_TAR.to_owned()
        }
    };
    Ok((tar.into_inner().context("finish the context tar")?, path))
}

/// `NAME=VALUE` of `--build-arg`.
fn parse_build_arg(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((name, value)) if !name.is_empty() => Ok((name.to_string(), value.to_string())),
        _ => Err("expected NAME=VALUE".into()),
    }
}

/// The template file of a build: `-f FILE`, else `CONTEXT/Dockerfile` (as `docker build`).
fn template_file(args: &BuildArgs) -> anyhow::Result<Option<PathBuf>> {
    match (&args.file, &args.context) {
        (Some(f), _) => Ok(Some(f.clone())),
        (None, Some(dir)) => {
            let f = dir.join("Dockerfile");
            if !f.is_file() {
                bail!(
                    "{} has no Dockerfile; name the template file with -f FILE",
                    dir.display()
                );
            }
            Ok(Some(f))
        }
        (None, None) => Ok(None),
    }
}

async fn build(client: &Client, args: BuildArgs) -> anyhow::Result<()> {
    let started = match template_file(&args)? {
        Some(file) => {
            let (context, path) = pack_context(&file, args.context.as_deref())?;
            let query = CreateTemplateQuery {
                name: args.name.clone(),
                file: Some(path),
                no_cache: args.no_cache,
                network: args.network.policy(),
                build_args: args.build_args.iter().cloned().collect(),
            };
            client.create_template(&query, context).await?
        }
        None if !args.build_args.is_empty() => {
            bail!("--build-arg applies to builds from a template file (-f or a context)")
        }
        None if args.network.any() => {
            bail!("--no-internet, --allow and --deny apply to builds from a template file (-f)")
        }
        None => {
            let request = BuildReleaseRequest {
                no_cache: args.no_cache,
            };
            client.build_release(&args.name, &request).await?
        }
    };
    follow(client, started, &args).await
}

async fn follow(
    client: &Client,
    started: BuildReleaseResponse,
    args: &BuildArgs,
) -> anyhow::Result<()> {
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
    fn a_file_build_takes_network_flags() {
        let cli = Cli::try_parse_from([
            "cove",
            "template",
            "build",
            "web",
            "-f",
            "ctx/Dockerfile",
            "ctx",
            "--no-internet",
            "--allow",
            "pypi.org",
            "--deny",
            "10.0.0.0/8",
        ])
        .expect("parses");
        let Verb::Template(TemplateVerb::Build(args)) = cli.verb else {
            panic!("expected build")
        };
        let policy = args.network.policy().expect("a policy");
        assert!(!policy.internet);
        assert_eq!(policy.allow[0].to_string(), "pypi.org");
        assert_eq!(policy.deny[0].to_string(), "10.0.0.0/8");
        let cli =
            Cli::try_parse_from(["cove", "template", "build", "web", "-f", "F"]).expect("parses");
        let Verb::Template(TemplateVerb::Build(args)) = cli.verb else {
            panic!("expected build")
        };
        assert_eq!(args.network.policy(), None, "the server's default");
    }

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

        let cli =
            Cli::try_parse_from(["cove", "template", "build", "web", "-f", "Dockerfile", "."])
                .expect("parses");
        let Verb::Template(TemplateVerb::Build(args)) = cli.verb else {
            panic!("expected build")
        };
        assert_eq!(args.file.as_deref(), Some(Path::new("Dockerfile")));
        assert_eq!(args.context.as_deref(), Some(Path::new(".")));

        let cli = Cli::try_parse_from(["cove", "template", "rm", "web", "--release", "2"])
            .expect("parses");
        let Verb::Template(TemplateVerb::Rm(args)) = cli.verb else {
            panic!("expected rm")
        };
        assert_eq!((args.name.as_str(), args.release), ("web", Some(2)));
    }

    #[test]
    fn the_context_tar_holds_the_file_inside_or_beside_it() {
        let dir = tempfile::tempdir().expect("tmp");
        std::fs::create_dir(dir.path().join("ctx")).expect("dir");
        std::fs::write(dir.path().join("ctx/Dockerfile"), "FROM tiny\n").expect("file");
        std::fs::write(dir.path().join("ctx/a.txt"), "a").expect("file");
        std::fs::write(dir.path().join("Other"), "FROM base\n").expect("file");
        let ctx = dir.path().join("ctx");
        let (_, path) = pack_context(&ctx.join("Dockerfile"), Some(&ctx)).expect("pack");
        assert_eq!(path, "Dockerfile");
        let (tar, path) = pack_context(&dir.path().join("Other"), Some(&ctx)).expect("pack");
        assert_eq!(path, FILE_IN_TAR);
        let mut names: Vec<String> = tar::Archive::new(tar.as_slice())
            .entries()
            .expect("entries")
            .map(|e| {
                e.expect("entry")
                    .path()
                    .expect("path")
                    .to_string_lossy()
                    .into_owned()
            })
            .collect();
        names.sort();
        assert!(names.iter().any(|n| n.ends_with("a.txt")), "{names:?}");
        assert!(names.contains(&FILE_IN_TAR.to_owned()), "{names:?}");
    }

    #[test]
    fn long_lines_are_shortened() {
        assert_eq!(shorten("abc", 5), "abc");
        assert_eq!(shorten("abcdefgh", 5), "abcd…");
    }

    #[test]
    fn a_context_alone_reads_its_dockerfile_and_build_args_parse() {
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            build: BuildArgs,
        }
        let dir = tempfile::tempdir().expect("tmp");
        let ctx = dir.path().join("ctx");
        std::fs::create_dir(&ctx).expect("dir");
        let parse = |extra: &[&str]| {
            let mut argv = vec!["cove", "web"];
            argv.extend_from_slice(extra);
            Cli::try_parse_from(argv).map(|c| c.build)
        };
        let ctx_s = ctx.to_string_lossy().into_owned();
        let args = parse(&[&ctx_s]).expect("parse");
        let err = template_file(&args).expect_err("no Dockerfile yet");
        assert!(err.to_string().contains("has no Dockerfile"), "{err}");
        std::fs::write(ctx.join("Dockerfile"), "FROM tiny\n").expect("file");
        assert_eq!(
            template_file(&args).expect("file"),
            Some(ctx.join("Dockerfile"))
        );
        let args = parse(&["-f", "Other", &ctx_s]).expect("parse");
        assert_eq!(
            template_file(&args).expect("file"),
            Some(PathBuf::from("Other"))
        );
        assert_eq!(
            template_file(&parse(&[]).expect("parse")).expect("none"),
            None
        );
        let args = parse(&["--build-arg", "V=1=2", "--build-arg", "E=", &ctx_s]).expect("parse");
        assert_eq!(
            args.build_args,
            [
                ("V".to_string(), "1=2".to_string()),
                ("E".to_string(), String::new())
            ]
        );
        assert!(parse(&["--build-arg", "=x"]).is_err());
        assert!(parse(&["--build-arg", "novalue"]).is_err());
    }
}

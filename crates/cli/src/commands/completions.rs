//! `cove completions SHELL`: prints a completion script for bash, zsh, fish, elvish or
//! PowerShell (`cove completions bash > /etc/bash_completion.d/cove`).

use clap::{Args, CommandFactory};
use clap_complete::Shell;

/// Options of `cove completions`.
#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell.
    pub shell: Shell,
}

/// Runs `cove completions`.
pub fn run(args: CompletionsArgs) -> anyhow::Result<()> {
    let mut script = Vec::new();
    clap_complete::generate(args.shell, &mut crate::Cli::command(), "cove", &mut script);
    crate::out!("{}", String::from_utf8_lossy(&script));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scripts_name_the_verbs() {
        let mut script = Vec::new();
        clap_complete::generate(Shell::Bash, &mut crate::Cli::command(), "cove", &mut script);
        let script = String::from_utf8(script).expect("utf-8");
        for verb in ["exec", "logs", "attach", "ps", "kill", "completions"] {
            assert!(script.contains(verb), "{verb} missing");
        }
    }
}

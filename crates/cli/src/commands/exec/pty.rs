//! `cove exec -t`: an interactive session on a pseudo-terminal in the sandbox.
//!
//! The local terminal is put in raw mode (every key, Ctrl-C included, goes to the remote
//! terminal) and restored on exit, also on an error; a local window resize (SIGWINCH) resizes
//! the remote terminal. Output is copied as it arrives; `cove` exits with the command's status.
#![allow(unsafe_code)]

use std::io::IsTerminal;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};

use anyhow::Context as _;
use bytes::Bytes;
use cove_client::{Client, PtyEvent};
use nix::sys::termios::{self, SetArg, Termios};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::signal::unix::{signal, SignalKind};

use cove_api_types::Attachment;

use super::{Ended, ExecOptions};

/// Size of the chunks keystrokes are read in.
const STDIN_CHUNK: usize = 16 * 1024;
/// The terminal's end-of-input key.
const CTRL_D: u8 = 0x04;
/// How often Ctrl-D is repeated after the end of a piped input.
const EOF_REPEAT: std::time::Duration = std::time::Duration::from_secs(1);
/// Size of a terminal whose size cannot be read.
const FALLBACK_SIZE: (u16, u16) = (80, 24);

/// Restores the terminal's settings when dropped.
struct RawMode {
    saved: Termios,
}

impl RawMode {
    /// Puts stdin's terminal in raw mode; `None` when stdin is not a terminal.
    fn enable() -> anyhow::Result<Option<RawMode>> {
        let stdin = std::io::stdin();
        if !stdin.is_terminal() {
            return Ok(None);
        }
        let saved = termios::tcgetattr(stdin.as_fd()).context("reading the terminal's mode")?;
        let mut raw = saved.clone();
        termios::cfmakeraw(&mut raw);
        termios::tcsetattr(stdin.as_fd(), SetArg::TCSANOW, &raw)
            .context("setting the terminal to raw mode")?;
        Ok(Some(RawMode { saved }))
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        let _ = termios::tcsetattr(std::io::stdin().as_fd(), SetArg::TCSANOW, &self.saved);
    }
}

/// `(cols, rows)` of the terminal on `fd`, if it is one.
fn size_of(fd: BorrowedFd<'_>) -> Option<(u16, u16)> {
    // SAFETY: winsize is plain data; TIOCGWINSZ writes one into the valid local.
    let mut ws: libc::winsize = unsafe { std::mem::zeroed() };
    // SAFETY: as above; `fd` is open for the duration of the call.
    let rc = unsafe { libc::ioctl(fd.as_raw_fd(), libc::TIOCGWINSZ, &mut ws) };
    (rc == 0 && ws.ws_col > 0 && ws.ws_row > 0).then_some((ws.ws_col, ws.ws_row))
}

/// The local terminal's size: stdout's, else stdin's, else 80x24.
fn local_size() -> (u16, u16) {
    size_of(std::io::stdout().as_fd())
        .or_else(|| size_of(std::io::stdin().as_fd()))
        .unwrap_or(FALLBACK_SIZE)
}

/// Runs `options` on a terminal in `sandbox`; returns how it ended.
pub(super) async fn execute(
    client: &Client,
    sandbox: &str,
    options: &ExecOptions,
) -> anyhow::Result<Ended> {
    let (cols, rows) = local_size();
    let mut request = options.request();
    request.pty = true;
    request.cols = Some(cols);
    request.rows = Some(rows);
    if let Ok(term) = std::env::var("TERM") {
        request.env.entry("TERM".into()).or_insert(term);
    }
    let started = client.create_command(sandbox, &request).await?;
    session(client, &started.attachment, 0).await
}

/// Connects this terminal to the terminal of a `pty` command from output byte `offset` until
/// the command ends (keys, resizes, output); returns how it ended.
pub(crate) async fn session(
    client: &Client,
    attachment: &Attachment,
    offset: u64,
) -> anyhow::Result<Ended> {
    let (mut writer, mut reader) = client.pty(attachment, offset).await?;
    // Attaching from another terminal: the remote terminal takes this one's size.
    if let Some((cols, rows)) =
        size_of(std::io::stdout().as_fd()).or_else(|| size_of(std::io::stdin().as_fd()))
    {
        writer.resize(cols, rows).await?;
    }
    let raw = RawMode::enable()?;
    let mut winch = signal(SignalKind::window_change()).context("watching window resizes")?;
    let (keys_tx, mut keys) = tokio::sync::mpsc::channel::<Bytes>(16);
    let stdin_task = tokio::spawn(async move {
        let mut stdin = tokio::io::stdin();
        let mut buf = vec![0u8; STDIN_CHUNK];
        while let Ok(n) = stdin.read(&mut buf).await {
            if n == 0
                || keys_tx
                    .send(Bytes::copy_from_slice(&buf[..n]))
                    .await
                    .is_err()
            {
                return;
            }
        }
    });
    let mut stdout = tokio::io::stdout();
    let mut stdin_open = true;
    // After the end of a piped (not a terminal) input, Ctrl-D is sent again every second: a
    // shell that was not reading yet when the first one came (still starting) can lose it.
    let mut eof_again = tokio::time::interval(EOF_REPEAT);
    let mut eof_sent = false;
    let outcome = loop {
        tokio::select! {
            event = reader.next() => match event {
                Some(Ok(PtyEvent::Output(data))) => {
                    stdout.write_all(&data).await.context("writing to stdout")?;
                    stdout.flush().await.context("writing to stdout")?;
                }
                Some(Ok(PtyEvent::Gap { .. })) => {}
                Some(Ok(PtyEvent::Exit(command))) => break Ok(Ended::exited(*command)),
                Some(Err(err)) => break Err(anyhow::Error::new(err)),
                None => break Err(anyhow::anyhow!("the terminal session ended without an exit")),
            },
            key = keys.recv(), if stdin_open => match key {
                Some(data) => writer.write(data).await?,
                // Local end of input: the remote terminal reads it as Ctrl-D.
                None => {
                    stdin_open = false;
                    if raw.is_none() {
                        writer.write(Bytes::from_static(&[CTRL_D])).await?;
                        eof_sent = true;
                        eof_again.reset();
                    }
                }
            },
            _ = eof_again.tick(), if eof_sent => {
                writer.write(Bytes::from_static(&[CTRL_D])).await?;
            }
            Some(()) = winch.recv() => {
                let (cols, rows) = local_size();
                writer.resize(cols, rows).await?;
            }
        }
    };
    stdin_task.abort();
    drop(raw);
    let _ = writer.close().await;
    outcome
}

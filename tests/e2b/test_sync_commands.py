"""E2B sync SDK: commands and PTYs."""

import threading
import time

import pytest
from e2b import CommandExitException, PtySize, Sandbox
from e2b.exceptions import AuthenticationException, SandboxException, TimeoutException


@pytest.fixture(scope="module")
def sbx():
    s = Sandbox.create(envs={"GLOBAL": "g"})
    yield s
    s.kill()


def test_run_foreground(sbx):
    r = sbx.commands.run("echo hello; echo oops >&2")
    assert (r.stdout, r.stderr, r.exit_code, r.error) == ("hello\n", "oops\n", 0, None)
    assert sbx.commands.run("whoami; pwd").stdout == "user\n/home/user\n"
    assert sbx.commands.run("whoami", user="root").stdout == "root\n"
    assert sbx.commands.run("pwd", cwd="/tmp").stdout == "/tmp\n"
    assert sbx.commands.run("echo $A-$GLOBAL", envs={"A": "1"}).stdout == "1-g\n"
    assert sbx.commands.run("echo ${A:-unset}").stdout == "unset\n"
    assert sbx.commands.run("shopt -q login_shell && echo login").stdout == "login\n"
    assert sbx.commands.run("sudo -n whoami").stdout == "root\n"


def test_exit_codes_and_errors(sbx):
    with pytest.raises(CommandExitException) as e:
        sbx.commands.run("echo partial; exit 3")
    assert e.value.exit_code == 3
    assert e.value.stdout == "partial\n"
    assert e.value.error == "exit status 3"
    with pytest.raises(SandboxException, match="does not exist"):
        sbx.commands.run("pwd", cwd="/no/such/dir")
    with pytest.raises(TimeoutException):
        sbx.commands.run("sleep 10", timeout=1)
    # The server ends the process at the same deadline; its stream still ends as a timeout
    # (deadline_exceeded), never as an exit of -1 (issue 31, item 3).
    for _ in range(3):
        with pytest.raises(TimeoutException):
            sbx.commands.run("sleep 10", timeout=2)


def test_login_shell_keeps_the_sandbox_path(sbx):
    """`commands.run` is `bash -l -c`; Debian's /etc/profile resets PATH, yet the sandbox's
    PATH stays, with ~/.local/bin on it before it exists (issue 31, item 2)."""
    envs = {"PATH": "/opt/tool/bin:/usr/local/bin:/usr/bin:/bin"}
    path = sbx.commands.run("echo $PATH", envs=envs).stdout.strip().split(":")
    assert "/opt/tool/bin" in path, path
    assert path.index("/opt/tool/bin") < path.index("/usr/bin"), path
    r = sbx.commands.run(
        "rm -rf ~/.local/bin && mkdir -p ~/.local/bin && "
        "printf '#!/bin/sh\\necho local tool\\n' > ~/.local/bin/ltool && "
        "chmod +x ~/.local/bin/ltool && ltool"
    )
    assert r.stdout == "local tool\n"


def test_callbacks(sbx):
    out = []
    sbx.commands.run("for i in 1 2 3; do echo $i; done", on_stdout=out.append)
    assert "".join(out) == "1\n2\n3\n"


def test_background_kill_list_and_real_pid(sbx):
    h = sbx.commands.run("sleep 60", background=True)
    assert h.pid > 0
    assert sbx.commands.run(f"kill -0 {h.pid} && echo alive").stdout == "alive\n"
    assert h.pid in [p.pid for p in sbx.commands.list()]
    listed = [p for p in sbx.commands.list() if p.pid == h.pid][0]
    assert listed.cmd == "/bin/bash"
    assert listed.args == ["-l", "-c", "sleep 60"]
    assert sbx.commands.kill(h.pid) is True
    with pytest.raises(CommandExitException) as e:
        h.wait()
    assert e.value.exit_code == -1
    assert e.value.error == "signal: killed"
    assert sbx.commands.kill(h.pid) is False


def test_stdin_send_and_close(sbx):
    h = sbx.commands.run("cat", background=True, stdin=True)
    sbx.commands.send_stdin(h.pid, "line one\n")
    h.send_stdin("line two\n")
    sbx.commands.close_stdin(h.pid)
    r = h.wait()
    assert r.stdout == "line one\nline two\n"
    assert r.exit_code == 0


def test_connect_to_running_process(sbx):
    h = sbx.commands.run("sleep 1; echo late", background=True)
    h.disconnect()
    again = sbx.commands.connect(h.pid)
    r = again.wait()
    assert r.stdout == "late\n"
    with pytest.raises(SandboxException):
        sbx.commands.connect(999999)


def test_process_survives_disconnect(sbx):
    h = sbx.commands.run("sleep 2; echo done > /tmp/survived", background=True)
    h.disconnect()
    time.sleep(3)
    assert sbx.files.read("/tmp/survived") == "done\n"


def test_pty_create_input_resize(sbx):
    out = bytearray()
    h = sbx.pty.create(PtySize(rows=24, cols=80))
    # The output is read in a thread so each step waits for the previous one's answer: input
    # typed before bash's readline is ready may be discarded when it sets up the terminal.
    reader = threading.Thread(target=lambda: h.wait(on_pty=lambda data: out.extend(data)))
    reader.start()

    def seen(needle, timeout_s=60):
        until = time.monotonic() + timeout_s
        while needle not in out.decode(errors="replace"):
            assert time.monotonic() < until, f"{needle!r} never came: {bytes(out)!r}"
            time.sleep(0.05)

    sbx.pty.send_stdin(h.pid, b"echo $((6*7))\n")
    seen("42\r\n")
    sbx.pty.resize(h.pid, PtySize(rows=30, cols=100))
    sbx.pty.send_stdin(h.pid, b"tput cols\n")
    seen("100\r\n")
    sbx.pty.send_stdin(h.pid, b"exit\n")
    reader.join(60)
    assert not reader.is_alive(), bytes(out)


def test_invalid_user(sbx):
    with pytest.raises(AuthenticationException, match="invalid username: 'no-such-user'"):
        sbx.commands.run("true", user="no-such-user")


def test_stream_input(sbx):
    h = sbx.commands.run("cat", background=True, stdin=True)
    sbx.commands.stream_input(h.pid, iter([b"a", b"b", b"c\n"]))
    sbx.commands.close_stdin(h.pid)
    assert h.wait().stdout == "abc\n"


def test_connect_to_ended_process_reports_its_end(sbx):
    h = sbx.commands.run("exit 5", background=True)
    with pytest.raises(CommandExitException):
        h.wait()
    with pytest.raises(CommandExitException) as e:
        sbx.commands.connect(h.pid).wait()
    assert e.value.exit_code == 5


def test_pty_connect_and_kill(sbx):
    h = sbx.pty.create(PtySize(rows=24, cols=80))
    h.disconnect()
    again = sbx.pty.connect(h.pid)
    out = bytearray()
    sbx.pty.send_stdin(h.pid, b"echo reconnected\n")
    time.sleep(1)
    assert sbx.pty.kill(h.pid) is True
    with pytest.raises(CommandExitException):
        again.wait(on_pty=lambda d: out.extend(d))
    assert "reconnected" in out.decode(errors="replace")

//! Issue 12, suites: isolation probes run as root inside a sandbox, each of which must be
//! denied: the host's `/proc/1` and paths, another sandbox's files and processes, mount,
//! kernel modules, raw sockets, ptrace of the guest agent, the host's loopback services and
//! the control plane's ports, and writing the agent's files.
//!
//! Network safety: the only addresses probed are the sandbox's own loopback (its namespace)
//! and its gateway, an address in the namespace the server under test made; the gateway is
//! checked to be in the sandbox pool and on the sandbox's `eth0` route before anything is sent.
//! Every connection attempt is bounded by `timeout 3`.

use cove_e2e::{client, delete, root_sh, sandbox, server};

/// Runs a probe as root; returns (stdout, stderr, exit code).
async fn probe(c: &cove_client::Client, id: &str, script: &str) -> (String, String, Option<i32>) {
    let o = root_sh(c, id, script).await;
    (o.stdout_text(), o.stderr_text(), o.command.exit_code)
}

/// A Python one-liner's printed result (python3 is in `base`).
fn py(code: &str) -> String {
    format!("python3 -c '{code}'")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_isolation_probe_is_denied() {
    let c = client();
    let a = sandbox(&c, "base").await;
    let b = sandbox(&c, "base").await;
    let mut failures = Vec::new();
    let mut check = |name: &str, ok: bool, detail: String| {
        if !ok {
            failures.push(format!("{name}: {detail}"));
        }
    };

    // The host's PID 1 and processes: PID 1 is the agent, and only the sandbox's processes
    // exist.
    let (out, _, _) = probe(
        &c,
        &a,
        "tr '\\0' ' ' < /proc/1/cmdline; echo; ls /proc | grep -c '^[0-9]'",
    )
    .await;
    let mut lines = out.lines();
    let init = lines.next().unwrap_or_default().to_string();
    let count: usize = lines
        .next()
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(9999);
    check(
        "host /proc/1",
        init.contains("cove-guest-agent"),
        init.clone(),
    );
    check(
        "host processes",
        count < 20,
        format!("{count} processes visible"),
    );

    // Host paths: the server's data dir and the host's root are not reachable.
    let data_dir = server().data_dir.display().to_string();
    let (out, _, _) = probe(&c, &a, &format!("test -e '{data_dir}' && echo visible; test -e /var/lib/lxcfs/proc && echo lxcfs; echo done")).await;
    check("host paths", out == "done\n", out.clone());

    // Another sandbox's files and processes.
    let marker = format!("probe-{}", a.replace('-', ""));
    let (out, _, _) = probe(
        &c,
        &b,
        &format!(
            "echo secret > /root/{marker} && (setsid sleep 4243 >/dev/null 2>&1 &) && echo ok"
        ),
    )
    .await;
    assert_eq!(out, "ok\n");
    let (out, _, _) = probe(
        &c,
        &a,
        &format!(
            "find / -xdev -name '{marker}' 2>/dev/null; find /proc /sys /dev -maxdepth 1 -name '{marker}' 2>/dev/null; \
             pgrep -xf 'sleep 4243'; echo done"
        ),
    )
    .await;
    check("another sandbox", out == "done\n", out.clone());

    // mount, kernel modules, raw and packet sockets, ptrace of the agent.
    let (out, err, _) = probe(
        &c,
        &a,
        "mkdir -p /tmp/m && mount -t tmpfs none /tmp/m && echo mounted; echo done",
    )
    .await;
    check("mount", out == "done\n", format!("{out} {err}"));
    let (out, _, _) = probe(
        &c,
        &a,
        &py("import ctypes,os; l=ctypes.CDLL(None,use_errno=True); r=l.syscall(175,0,0,b\"\"); print(r, os.strerror(ctypes.get_errno()))"),
    )
    .await;
    check(
        "init_module",
        out.starts_with("-1 Operation not permitted"),
        out.clone(),
    );
    let (out, _, _) = probe(
        &c,
        &a,
        &py("import socket\nfor f,t,p in ((socket.AF_INET,socket.SOCK_RAW,1),(socket.AF_PACKET,socket.SOCK_RAW,0)):\n try: socket.socket(f,t,p); print(\"open\")\n except PermissionError: print(\"denied\")"),
    )
    .await;
    check("raw sockets", out == "denied\ndenied\n", out.clone());
    let (out, _, _) = probe(
        &c,
        &a,
        &py("import ctypes,os; l=ctypes.CDLL(None,use_errno=True); r=l.ptrace(16,1,0,0); print(r, os.strerror(ctypes.get_errno()))"),
    )
    .await;
    check(
        "ptrace of the agent",
        out.starts_with("-1 Operation not permitted"),
        out.clone(),
    );
    let (out, _, _) = probe(&c, &a, "cat /proc/1/environ >/dev/null 2>&1 && echo read; readlink /proc/1/fd/0 >/dev/null 2>&1 && echo fd; \
         head -c1 /proc/1/mem >/dev/null 2>&1 && echo mem; echo done").await;
    check("the agent's /proc entries", out == "done\n", out.clone());

    // The control plane's ports and the host's loopback services: the sandbox's loopback is its
    // own, and its gateway answers none of the host's ports.
    let api_port = server()
        .api_url
        .rsplit(':')
        .next()
        .unwrap_or("0")
        .trim_end_matches('/')
        .to_string();
    let dp_port = server()
        .data_plane_url
        .rsplit(':')
        .next()
        .unwrap_or("0")
        .trim_end_matches('/')
        .to_string();
    for port in [api_port.as_str(), dp_port.as_str()] {
        let (out, _, _) = probe(
            &c,
            &a,
            &format!("timeout 3 bash -c 'echo > /dev/tcp/127.0.0.1/{port}' 2>/dev/null && echo open; echo done"),
        )
        .await;
        check(
            "control plane on loopback",
            out == "done\n",
            format!("port {port}: {out}"),
        );
    }
    let (gw, _, _) = probe(&c, &a, "ip -4 route show default | awk '{print $3; exit}'").await;
    let gw = gw.trim().to_string();
    if !gw.is_empty() {
        let in_pool = gw.starts_with("10.239.");
        let (dev, _, _) = probe(&c, &a, &format!("ip -4 route get {gw} | head -1")).await;
        assert!(
            in_pool && dev.contains("dev eth0"),
            "gateway {gw} via {dev}: not the sandbox's own"
        );
        for port in [api_port.as_str(), dp_port.as_str(), "22"] {
            // Every TCP connection of a sandbox is diverted to the egress proxy, so the
            // connect itself succeeds: what must not happen is a host service answering.
            let script = format!(
                "timeout 3 bash -c 'exec 3<>/dev/tcp/{gw}/{port} && \
                 printf \"GET /healthz HTTP/1.1\\r\\nHost: {gw}\\r\\nConnection: close\\r\\n\\r\\n\" >&3 && \
                 head -c 300 <&3' 2>/dev/null; echo; echo done"
            );
            let (out, _, _) = probe(&c, &a, &script).await;
            let answered = out.contains(" 200 ") || out.contains("SSH-");
            check(
                "host services via the gateway",
                !answered,
                format!("{gw}:{port}: {out}"),
            );
        }
    }

    // Writing the agent's files.
    let (out, _, _) = probe(
        &c,
        &a,
        "echo x > /.cove/bin/cove-guest-agent 2>/dev/null && echo wrote-agent; rm -f /.cove/run/agent.sock 2>/dev/null && echo removed-socket; echo done",
    )
    .await;
    check("the agent's files", out == "done\n", out.clone());
    let (out, _, _) = probe(&c, &a, "test -S /.cove/run/agent.sock && echo alive").await;
    assert_eq!(out, "alive\n");

    assert!(
        failures.is_empty(),
        "probes not denied:\n{}",
        failures.join("\n")
    );
    delete(&c, &a).await;
    delete(&c, &b).await;
}

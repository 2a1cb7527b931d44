//! Issue 9, ports in: a real server with sandbox networks and the proxy listener
//! (`--proxy-listen`, on loopback port 0, domain `localhost`), real runc sandboxes of `base`
//! running small Python servers. Every request goes to loopback: the proxy listener or the API;
//! host names `{port}-{id}.localhost` are resolved to the proxy's loopback address by the
//! client itself (as a browser does for `*.localhost`). Needs root.
//!
//! Covered: routing by host name; the port token (header); a one-time link that sets an
//! HttpOnly cookie for its host and redirects, works with that cookie and is refused when
//! used again, and whose cookie opens no other port; `public` on create and changed live;
//! nothing listening is `502` with the JSON error body; a host that names no sandbox port is
//! `404`; a WebSocket echo through the proxy listener and through the path proxy.

use std::net::SocketAddr;
use std::time::Duration;

use cove_api_types::{CreateCommandRequest, CreateSandboxRequest};
use cove_client::{Client, UploadOptions};
use cove_e2e::{delete, sandbox_with, server_with, Server};
use futures::{SinkExt, StreamExt};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message;

/// Networking on (the gateway's upstream is the host's namespace: these tests never connect
/// out of a sandbox), the proxy listener on a free loopback port.
fn tweak(cfg: &mut cove_server::Config) {
    cfg.network.mode = cove_server::NetworkMode::On;
    cfg.proxy = Some(cove_server::ProxySettings {
        listen: "127.0.0.1:0".parse().expect("addr"),
        domain: "localhost".into(),
    });
}

fn srv() -> &'static Server {
    server_with(tweak)
}

fn c() -> Client {
    cove_e2e::client_of(srv())
}

fn proxy() -> SocketAddr {
    srv().proxy_addr.expect("the proxy listener runs")
}

/// An HTTP echo: answers JSON naming the method, path, host, cookies, the port token and
/// `Authorization` it received.
const HTTP_ECHO: &str = r#"
import http.server, json
class H(http.server.BaseHTTPRequestHandler):
    def answer(self):
        n = int(self.headers.get("content-length") or 0)
        out = json.dumps({"method": self.command, "path": self.path,
            "host": self.headers.get("host"), "cookie": self.headers.get("cookie"),
            "token": self.headers.get("x-cove-port-token"),
            "authorization": self.headers.get("authorization"),
            "body": self.rfile.read(n).decode()}).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)
    do_GET = do_POST = answer
    def log_message(self, *a): pass
http.server.ThreadingHTTPServer(("0.0.0.0", 8000), H).serve_forever()
"#;

/// A WebSocket echo (stdlib only): text and binary frames come back as they went.
const WS_ECHO: &str = r#"
import base64, hashlib, socket, struct, threading
GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
def handle(c):
    data = b""
    while b"\r\n\r\n" not in data:
        d = c.recv(4096)
        if not d:
            return
        data += d
    head, buf = data.split(b"\r\n\r\n", 1)
    lines = head.decode().split("\r\n")
    hdr = {k.strip().lower(): v.strip() for k, v in (l.split(":", 1) for l in lines[1:])}
    accept = base64.b64encode(hashlib.sha1((hdr["sec-websocket-key"] + GUID).encode()).digest())
    c.sendall(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
              b"Sec-WebSocket-Accept: " + accept + b"\r\nX-Path: " + lines[0].split()[1].encode()
              + b"\r\n\r\n")
    def need(n):
        nonlocal buf
        while len(buf) < n:
            d = c.recv(65536)
            if not d:
                raise EOFError
            buf += d
        out, buf = buf[:n], buf[n:]
        return out
    try:
        while True:
            b1, b2 = need(2)
            op, n = b1 & 0x0F, b2 & 0x7F
            if n == 126:
                n = struct.unpack(">H", need(2))[0]
            elif n == 127:
                n = struct.unpack(">Q", need(8))[0]
            mask = need(4) if b2 & 0x80 else b"\0\0\0\0"
            payload = bytes(x ^ mask[i % 4] for i, x in enumerate(need(n)))
            if op == 8:
                c.sendall(b"\x88\x00")
                break
            if op == 9:
                op = 10
            out = bytes([0x80 | op])
            if len(payload) < 126:
                out += bytes([len(payload)])
            elif len(payload) < 65536:
                out += bytes([126]) + struct.pack(">H", len(payload))
            else:
                out += bytes([127]) + struct.pack(">Q", len(payload))
            c.sendall(out + payload)
    except EOFError:
        pass
    c.close()
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", 8765))
s.listen(16)
while True:
    conn, _ = s.accept()
    threading.Thread(target=handle, args=(conn,), daemon=True).start()
"#;

/// Starts `script` with python3 in the sandbox (in the background).
async fn serve(c: &Client, id: &str, name: &str, script: &str) {
    let path = format!("/tmp/{name}.py");
    c.upload(id, &path, script.to_string(), &UploadOptions::default())
        .await
        .expect("upload");
    c.create_command(
        id,
        &CreateCommandRequest {
            shell: Some(format!("exec python3 {path}")),
            ..Default::default()
        },
    )
    .await
    .expect("serve");
}

/// The host of `port` of sandbox `id` on the proxy listener.
fn host(id: &str, port: u16) -> String {
    format!("{port}-{id}.localhost")
}

/// An HTTP client that resolves the host names of `id`'s ports to the proxy listener (as a
/// browser does for `*.localhost`) and does not follow redirects.
fn browser(id: &str, ports: &[u16]) -> reqwest::Client {
    let mut b = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none());
    for p in ports {
        b = b.resolve(&host(id, *p), proxy());
    }
    b.build().expect("client")
}

fn url(id: &str, port: u16, path: &str) -> String {
    format!("http://{}:{}{path}", host(id, port), proxy().port())
}

/// Waits (bounded) until `port` answers through the proxy with the port token.
async fn wait_listening(http: &reqwest::Client, id: &str, port: u16, token: &str) {
    for _ in 0..100 {
        let r = http
            .get(url(id, port, "/"))
            .header("x-cove-port-token", token)
            .header("connection", "close")
            .send()
            .await
            .expect("get");
        if r.status() != 502 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("port {port} never answered through the proxy");
}

async fn error_code(r: reqwest::Response) -> (u16, serde_json::Value) {
    let status = r.status().as_u16();
    let body: serde_json::Value = r.json().await.expect("json error body");
    assert!(
        body["request_id"].as_str().is_some_and(|s| !s.is_empty()),
        "{body}"
    );
    assert!(body["message"].is_string(), "{body}");
    (status, body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ports_by_host_name_token_link_cookie_and_public() {
    let c = c();
    let id = sandbox_with(&c, "base", CreateSandboxRequest::default()).await;
    assert!(!c.get_sandbox(&id).await.expect("get").public);
    serve(&c, &id, "echo", HTTP_ECHO).await;
    let ports = c.sandbox_ports(&id).await.expect("ports");
    assert!(!ports.public);
    assert_eq!(
        ports.host.as_deref(),
        Some(format!("{{port}}-{id}.localhost:{}", proxy().port()).as_str())
    );
    let http = browser(&id, &[8000, 8001]);
    wait_listening(&http, &id, 8000, &ports.token).await;

    // Private by default: nothing, or a wrong token, is refused with the JSON error body.
    let (status, body) = error_code(http.get(url(&id, 8000, "/")).send().await.expect("get")).await;
    assert_eq!((status, body["code"].as_str()), (401, Some("unauthorized")));
    let r = http
        .get(url(&id, 8000, "/"))
        .header("x-cove-port-token", "0123456789abcdef0123456789abcdef")
        .send()
        .await
        .expect("get");
    assert_eq!(r.status(), 401);

    // The port token: routed by host, path and query kept, the token not passed on.
    let r = http
        .post(url(&id, 8000, "/a/b?x=1"))
        .header("x-cove-port-token", &ports.token)
        .body("hello")
        .send()
        .await
        .expect("post");
    assert_eq!(r.status(), 200);
    let got: serde_json::Value = r.json().await.expect("json");
    assert_eq!(got["method"], "POST");
    assert_eq!(got["path"], "/a/b?x=1");
    assert_eq!(got["body"], "hello");
    assert_eq!(
        got["host"],
        format!("{}:{}", host(&id, 8000), proxy().port())
    );
    assert_eq!(got["token"], serde_json::Value::Null);

    // A one-time link: the first visit sets an HttpOnly cookie for this host and redirects.
    let link = c
        .port_link(&id, 8000, Some("/landing?y=2"))
        .await
        .expect("link");
    assert!(
        link.url
            .starts_with(&url(&id, 8000, "/landing?y=2&cove_link=")),
        "{}",
        link.url
    );
    let r = http.get(&link.url).send().await.expect("visit");
    assert_eq!(r.status(), 303);
    assert_eq!(r.headers()["location"], "/landing?y=2");
    let set_cookie = r.headers()["set-cookie"]
        .to_str()
        .expect("cookie")
        .to_string();
    assert!(set_cookie.starts_with("cove_port="), "{set_cookie}");
    assert!(set_cookie.contains("HttpOnly"), "{set_cookie}");
    assert!(
        !set_cookie.to_ascii_lowercase().contains("domain="),
        "host-only: {set_cookie}"
    );
    let cookie = set_cookie.split(';').next().expect("pair").to_string();
    // With the cookie the port answers; the application's own cookies pass, Cove's does not.
    let r = http
        .get(url(&id, 8000, "/landing?y=2"))
        .header("cookie", format!("app=1; {cookie}"))
        .send()
        .await
        .expect("get");
    assert_eq!(r.status(), 200);
    let got: serde_json::Value = r.json().await.expect("json");
    assert_eq!(got["path"], "/landing?y=2");
    assert_eq!(got["cookie"], "app=1");
    // The link works once.
    let (status, body) = error_code(http.get(&link.url).send().await.expect("again")).await;
    assert_eq!((status, body["code"].as_str()), (401, Some("unauthorized")));
    // The cookie opens its own port only (another host: another port).
    let r = http
        .get(url(&id, 8001, "/"))
        .header("cookie", cookie.clone())
        .send()
        .await
        .expect("get");
    assert_eq!(r.status(), 401);
    // A tampered cookie is refused.
    let r = http
        .get(url(&id, 8000, "/"))
        .header("cookie", format!("{cookie}0"))
        .send()
        .await
        .expect("get");
    assert_eq!(r.status(), 401);

    // Nothing listening: 502 with the JSON error body naming the port.
    let (status, body) = error_code(
        http.get(url(&id, 8001, "/"))
            .header("x-cove-port-token", &ports.token)
            .send()
            .await
            .expect("get"),
    )
    .await;
    assert_eq!((status, body["code"].as_str()), (502, Some("bad_gateway")));
    assert!(
        body["message"].as_str().unwrap_or("").contains("8001"),
        "{body}"
    );

    // Public, changed live, and private again.
    let now = c.set_sandbox_ports(&id, true).await.expect("public");
    assert!(now.public);
    assert!(c.get_sandbox(&id).await.expect("get").public);
    let r = http.get(url(&id, 8000, "/open")).send().await.expect("get");
    assert_eq!(r.status(), 200);
    assert!(
        !c.set_sandbox_ports(&id, false)
            .await
            .expect("private")
            .public
    );
    let r = http.get(url(&id, 8000, "/open")).send().await.expect("get");
    assert_eq!(r.status(), 401);

    // A host that names no sandbox port.
    let plain = reqwest::Client::new();
    let (status, body) = error_code(
        plain
            .get(format!("http://{}/", proxy()))
            .send()
            .await
            .expect("get"),
    )
    .await;
    assert_eq!((status, body["code"].as_str()), (404, Some("not_found")));
    delete(&c, &id).await;

    // `public` on create.
    let open = sandbox_with(
        &c,
        "base",
        CreateSandboxRequest {
            public: true,
            ..Default::default()
        },
    )
    .await;
    assert!(c.get_sandbox(&open).await.expect("get").public);
    serve(&c, &open, "echo", HTTP_ECHO).await;
    let http = browser(&open, &[8000]);
    let mut status = 0;
    for _ in 0..100 {
        status = http
            .get(url(&open, 8000, "/"))
            .send()
            .await
            .expect("get")
            .status()
            .as_u16();
        if status == 200 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(status, 200, "a public sandbox's port needs no credential");
    delete(&c, &open).await;
}

/// Sends a text and a binary frame over `socket` and expects each back, then closes.
async fn echo_round<S>(socket: &mut tokio_tungstenite::WebSocketStream<S>)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    socket
        .send(Message::text("hello through the proxy"))
        .await
        .expect("send text");
    let big: Vec<u8> = (0..70_000u32).map(|i| (i % 251) as u8).collect();
    socket
        .send(Message::binary(big.clone()))
        .await
        .expect("send binary");
    let mut got = Vec::new();
    tokio::time::timeout(Duration::from_secs(20), async {
        while got.len() < 2 {
            let m = socket.next().await.expect("a frame").expect("frame");
            if matches!(m, Message::Text(_) | Message::Binary(_)) {
                got.push(m);
            }
        }
    })
    .await
    .expect("echoes in time");
    assert_eq!(got[0], Message::text("hello through the proxy"));
    assert_eq!(got[1], Message::binary(big));
    socket.close(None).await.expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn websocket_echo_through_both_proxies() {
    let c = c();
    let id = sandbox_with(&c, "base", CreateSandboxRequest::default()).await;
    serve(&c, &id, "ws", WS_ECHO).await;
    let token = c.sandbox_ports(&id).await.expect("ports").token;

    // The proxy listener, by host name, with the port token (a TCP connection to the proxy's
    // loopback address; the request names the sandbox's host).
    let mut connected = None;
    for _ in 0..100 {
        let tcp = tokio::net::TcpStream::connect(proxy())
            .await
            .expect("connect");
        let mut request = format!("ws://{}:{}/chat?room=1", host(&id, 8765), proxy().port())
            .into_client_request()
            .expect("request");
        request
            .headers_mut()
            .insert("x-cove-port-token", token.parse().expect("header"));
        match tokio_tungstenite::client_async(request, tcp).await {
            Ok(ok) => {
                connected = Some(ok);
                break;
            }
            // 502 until the server listens.
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
    let (mut socket, response) = connected.expect("the WebSocket echo answered through the proxy");
    assert_eq!(response.status(), 101);
    assert_eq!(response.headers()["x-path"], "/chat?room=1");
    echo_round(&mut socket).await;

    // Without a credential the upgrade is refused.
    let tcp = tokio::net::TcpStream::connect(proxy())
        .await
        .expect("connect");
    let request = format!("ws://{}:{}/", host(&id, 8765), proxy().port())
        .into_client_request()
        .expect("request");
    match tokio_tungstenite::client_async(request, tcp).await {
        Err(tokio_tungstenite::tungstenite::Error::Http(r)) => assert_eq!(r.status(), 401),
        other => panic!("an upgrade without a credential must be refused: {other:?}"),
    }

    // The path proxy of the management API, with the admin token.
    let s = srv();
    let mut request = format!(
        "{}/v1/sandboxes/{id}/ports/8765/chat",
        s.api_url.replacen("http", "ws", 1)
    )
    .into_client_request()
    .expect("request");
    request.headers_mut().insert(
        "authorization",
        format!("Bearer {}", s.token).parse().expect("header"),
    );
    let (mut socket, response) = tokio_tungstenite::connect_async(request)
        .await
        .expect("upgrade through the path proxy");
    assert_eq!(response.headers()["x-path"], "/chat");
    echo_round(&mut socket).await;
    delete(&c, &id).await;
}

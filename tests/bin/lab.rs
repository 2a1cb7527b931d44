//! `cove-e2e-lab PREFIX CA_FILE`: a fake internet (`cove_network::lab::FakeInternet`: web
//! servers, DNS, all in namespaces it creates under `PREFIX`) as its own process, for tests in
//! other languages (the E2B SDK tests). Writes the CA that signed its HTTPS certificate to
//! `CA_FILE`, prints one line of JSON (`{"upstream_ns", "resolver", "pool"}`: what a server's
//! gateway needs as its upstream; and `inet`, `web_a`, `web_b`: the fake internet's range, chosen
//! at run time, and the addresses of its two web servers), then serves until its standard input
//! closes, and removes its namespaces. Needs root.

use std::io::{Read, Write};
use std::process::ExitCode;

use cove_network::lab::{self, DNS_ADDR, WEB_A, WEB_B};

const USAGE: &str = "usage: cove-e2e-lab PREFIX CA_FILE";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [prefix, ca_file] = args.as_slice() else {
        eprintln!("{USAGE}");
        return ExitCode::from(2);
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let lab = match runtime.block_on(lab::FakeInternet::create(prefix)) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("fake internet: {e}");
            return ExitCode::FAILURE;
        }
    };
    let announced = std::fs::write(ca_file, &lab.ca_pem)
        .map_err(|e| e.to_string())
        .and_then(|()| {
            let line = serde_json::json!({
                "upstream_ns": lab.upstream_ns,
                "resolver": format!("{DNS_ADDR}:53"),
                "pool": lab::lab_pool().to_string(),
                "inet": lab::inet_range().to_string(),
                "web_a": WEB_A.to_string(),
                "web_b": WEB_B.to_string(),
            });
            let mut out = std::io::stdout().lock();
            writeln!(out, "{line}")
                .and_then(|()| out.flush())
                .map_err(|e| e.to_string())
        });
    if let Err(e) = announced {
        eprintln!("announcing the lab: {e}");
    } else {
        // Serve (on the runtime's threads) until the parent closes our stdin.
        let mut sink = [0u8; 64];
        let stdin = std::io::stdin();
        let mut stdin = stdin.lock();
        while matches!(stdin.read(&mut sink), Ok(n) if n > 0) {}
    }
    let _guard = runtime.enter();
    match lab.destroy() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("removing the fake internet: {e}");
            ExitCode::FAILURE
        }
    }
}

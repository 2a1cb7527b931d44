//! TEMPORARY measurement (not committed).
use std::time::{Duration, Instant};
use cove_api_types::OperationState;
use cove_e2e::{client, sandbox, sh};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn measure() {
    let c = client();
    let id = sandbox(&c, "tiny").await;
    let out = sh(&c, &id, "mkdir -p /home/user/data; for i in $(seq 1 100); do head -c 1048576 /dev/urandom > /home/user/data/f$i; done; du -sm /home/user/data").await;
    eprintln!("{}", out.stdout_text());
    let mut t: std::collections::BTreeMap<&str, Vec<Duration>> = Default::default();
    let mut s: std::collections::BTreeMap<&str, Vec<i64>> = Default::default();
    for _ in 0..7 {
        for verb in ["pause", "resume", "suspend", "wake"] {
            let t0 = Instant::now();
            let op = match verb { "pause" => c.pause_sandbox(&id).await, "resume" => c.resume_sandbox(&id).await, "suspend" => c.suspend_sandbox(&id).await, _ => c.wake_sandbox(&id).await }.expect("call");
            let op = c.wait_operation(&op.id, Duration::from_secs(120)).await.expect("wait");
            assert_eq!(op.state, OperationState::Succeeded);
            t.entry(verb).or_default().push(t0.elapsed());
            s.entry(verb).or_default().push((op.updated_at - op.created_at).num_milliseconds());
        }
    }
    for (verb, mut v) in t { v.sort(); let mut sv = s[verb].clone(); sv.sort(); eprintln!("{verb}: p50 {:?} min {:?} max {:?}  server-side p50 {} ms", v[v.len()/2], v[0], v[v.len()-1], sv[sv.len()/2]); }
    cove_e2e::delete(&c, &id).await;
}

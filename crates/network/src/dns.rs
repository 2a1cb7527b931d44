//! The gateway's DNS server (the sandbox's only resolver) and its upstream forwarding.
//!
//! A question from a sandbox is answered only when the sandbox's policy allows the name (internet
//! on, or an allow rule matches it): then the question alone, in a query the gateway builds, is
//! forwarded to the configured upstream resolver from the upstream namespace. Otherwise the
//! answer is REFUSED and nothing is sent upstream. The proxy looks names up under the same rule
//! ([`resolves_to`] is called only for names the policy lets be looked up). AAAA questions get an empty answer (sandboxes
//! have IPv4 only). The A records seen are remembered so the proxy can check that a connection
//! carrying an allowed name goes to an address that name really has.

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hickory_proto::op::{Message, MessageType, OpCode, Query, ResponseCode};
use hickory_proto::rr::{Name, RData, RecordType};
use parking_lot::Mutex;
use tokio::net::UdpSocket;
use tokio::sync::Semaphore;
use tracing::{debug, warn};

use crate::counters::{Counters, DeniedReason};
use crate::network::Shared;
use crate::policy::normalize_name;
use crate::sockets::SocketMaker;

/// Questions handled at once; more are dropped (the client retries).
const MAX_INFLIGHT: usize = 256;
/// How long one upstream question may take.
const UPSTREAM_TIMEOUT: Duration = Duration::from_secs(3);
/// Bounds on how long a seen A record is remembered.
const MIN_TTL: u64 = 30;
const MAX_TTL: u64 = 300;

/// Name → IPv4 addresses seen from the upstream resolver, with expiry.
#[derive(Default)]
pub(crate) struct NameCache {
    map: Mutex<HashMap<String, (Vec<Ipv4Addr>, Instant)>>,
}

impl NameCache {
    fn get(&self, name: &str) -> Option<Vec<Ipv4Addr>> {
        let map = self.map.lock();
        map.get(name)
            .filter(|(_, exp)| *exp > Instant::now())
            .map(|(ips, _)| ips.clone())
    }

    fn put(&self, name: String, ips: Vec<Ipv4Addr>, ttl: u32) {
        let ttl = u64::from(ttl).clamp(MIN_TTL, MAX_TTL);
        let mut map = self.map.lock();
        if map.len() > 100_000 {
            let now = Instant::now();
            map.retain(|_, (_, exp)| *exp > now);
        }
        map.insert(name, (ips, Instant::now() + Duration::from_secs(ttl)));
    }

    /// Remembers the A records of an upstream answer to a question for `qname`.
    fn learn(&self, qname: &str, answer: &Message) {
        let mut ips = Vec::new();
        let mut ttl = u32::MAX;
        for r in &answer.answers {
            if let RData::A(a) = &r.data {
                ips.push(a.0);
                ttl = ttl.min(r.ttl);
            }
        }
        if !ips.is_empty() {
            self.put(qname.to_string(), ips, ttl);
        }
    }
}

/// Sends `query` to `resolver` from `maker`'s namespace and returns the matching answer.
async fn ask_upstream(
    maker: &SocketMaker,
    resolver: SocketAddrV4,
    query: &[u8],
    id: u16,
) -> Option<Message> {
    let socket = maker.udp().await.ok()?;
    socket.connect(SocketAddr::V4(resolver)).await.ok()?;
    socket.send(query).await.ok()?;
    let deadline = tokio::time::Instant::now() + UPSTREAM_TIMEOUT;
    let mut buf = vec![0u8; 4096];
    for _ in 0..8 {
        let n = tokio::time::timeout_at(deadline, socket.recv(&mut buf))
            .await
            .ok()?
            .ok()?;
        if let Ok(msg) = Message::from_vec(&buf[..n]) {
            if msg.metadata.id == id && msg.metadata.message_type == MessageType::Response {
                return Some(msg);
            }
        }
    }
    None
}

/// True when `name` resolves (upstream, or as seen recently) to `ip`.
pub(crate) async fn resolves_to(shared: &Shared, name: &str, ip: Ipv4Addr) -> bool {
    if let Some(ips) = shared.names.get(name) {
        if ips.contains(&ip) {
            return true;
        }
    }
    let Ok(qname) = Name::from_ascii(format!("{name}.")) else {
        return false;
    };
    let mut msg = Message::query();
    msg.metadata.recursion_desired = true;
    msg.add_query(Query::query(qname, RecordType::A));
    let id = msg.metadata.id;
    let Ok(bytes) = msg.to_vec() else {
        return false;
    };
    match ask_upstream(
        &shared.upstream,
        shared.config.upstream.resolver,
        &bytes,
        id,
    )
    .await
    {
        Some(answer) => {
            shared.names.learn(name, &answer);
            shared.names.get(name).is_some_and(|ips| ips.contains(&ip))
        }
        None => false,
    }
}

/// Answers sandbox questions until the task is aborted.
pub(crate) async fn serve(shared: Arc<Shared>, socket: UdpSocket) {
    let socket = Arc::new(socket);
    let inflight = Arc::new(Semaphore::new(MAX_INFLIGHT));
    let mut buf = vec![0u8; 4096];
    loop {
        let (n, from) = match socket.recv_from(&mut buf).await {
            Ok(v) => v,
            Err(e) => {
                warn!(error = %e, "gateway dns receive failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let SocketAddr::V4(from) = from else { continue };
        let Ok(permit) = inflight.clone().try_acquire_owned() else {
            continue;
        };
        let (shared, socket, packet) = (shared.clone(), socket.clone(), buf[..n].to_vec());
        tokio::spawn(async move {
            if let Some(reply) = answer(&shared, *from.ip(), &packet).await {
                let _ = socket.send_to(&reply, from).await;
            }
            drop(permit);
        });
    }
}

fn reply_with(request: &Message, code: ResponseCode) -> Message {
    let mut m = Message::error_msg(request.metadata.id, request.metadata.op_code, code);
    m.metadata.recursion_desired = request.metadata.recursion_desired;
    m.metadata.recursion_available = true;
    m.queries = request.queries.clone();
    m
}

async fn answer(shared: &Shared, from: Ipv4Addr, packet: &[u8]) -> Option<Vec<u8>> {
    let entry = shared.entry(from)?;
    let request = Message::from_vec(packet).ok()?;
    if request.metadata.message_type != MessageType::Query {
        return None;
    }
    if request.metadata.op_code != OpCode::Query || request.queries.len() != 1 {
        return reply_with(&request, ResponseCode::NotImp).to_vec().ok();
    }
    let q = &request.queries[0];
    let name = normalize_name(&q.name.to_ascii());
    let policy = entry.policy();
    if !policy.allows_lookup(&name) {
        Counters::add(&entry.counters.dns_refused, 1);
        let reason = if policy.deny.iter().any(|r| r.matches_name(&name)) {
            DeniedReason::Denied
        } else {
            DeniedReason::NotAllowed
        };
        shared.deny_dns(&entry, &name, reason);
        return reply_with(&request, ResponseCode::Refused).to_vec().ok();
    }
    Counters::add(&entry.counters.dns_answered, 1);
    if q.query_type == RecordType::AAAA {
        return reply_with(&request, ResponseCode::NoError).to_vec().ok();
    }
    // Only the question goes upstream, in a query the gateway builds: nothing else the sandbox
    // put in its packet (additional records, EDNS options, flags) leaves the node.
    let mut forwarded = Message::query();
    forwarded.metadata.recursion_desired = true;
    forwarded.add_query(Query::query(q.name.clone(), q.query_type));
    let id = forwarded.metadata.id;
    let bytes = forwarded.to_vec().ok()?;
    match ask_upstream(
        &shared.upstream,
        shared.config.upstream.resolver,
        &bytes,
        id,
    )
    .await
    {
        Some(mut reply) => {
            if q.query_type == RecordType::A {
                shared.names.learn(&name, &reply);
            }
            reply.metadata.id = request.metadata.id;
            reply.to_vec().ok()
        }
        None => {
            debug!(sandbox_id = %entry.id, %name, "upstream resolver did not answer");
            reply_with(&request, ResponseCode::ServFail).to_vec().ok()
        }
    }
}

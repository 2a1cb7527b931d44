//! Test doubles for Cove's contracts. [`FakeNode`] implements every `cove-node-api` trait in
//! memory: sandboxes with node states, snapshots, releases, commands with scripted output and
//! exit ([`Script`]), a file tree per sandbox and per volume. Tests steer it with faults per
//! kind of call ([`Fault`]: fail with a given `NodeError`, delay, hang until released or
//! cancelled; before or after the call's effect) and inspect what they were asked through a
//! call log.
//!
//! Deterministic: no randomness, no wall clock (timestamps and pids come from counters),
//! listings in id order; delays use tokio time, so `tokio::time::pause` drives them.
//!
//! This crate is for tests only: production crates may depend on it only as a dev-dependency.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::Arc;

use cove_node_api::{NodeCapabilities, NodeError, NodeSandboxState, RecipeInfo, SandboxLaunch};
use parking_lot::{Mutex, MutexGuard};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

mod checkpoints;
mod commands;
pub mod contract;
mod faults;
mod files;
mod lifecycle;
mod metrics;
mod network;
mod postgres;
mod volumes;

pub use commands::{End, Script};
pub use faults::{Action, Call, CallRecord, Fault, Stage};
pub use lifecycle::fake_digest;
pub use metrics::{
    FAKE_CPUS, FAKE_MEMORY_AVAILABLE_BYTES, FAKE_MEMORY_BYTES, FAKE_SANDBOX_MEMORY_BYTES,
};
pub use postgres::{postgres_url, POSTGRES_URL_VAR};

use commands::FakeCommand;
use files::Tree;

/// An in-memory node agent; cheap to clone (clones share one node).
#[derive(Clone)]
pub struct FakeNode {
    shared: Arc<Shared>,
}

struct Shared {
    state: Mutex<State>,
    /// Bumped on every call and every change, so waiters (hangs, followers, tests) wake up.
    changed: watch::Sender<u64>,
    capabilities: NodeCapabilities,
    recipes: Vec<RecipeInfo>,
    /// `network_denials` subscribers ([`FakeNode::deny`] sends).
    denials: tokio::sync::broadcast::Sender<cove_node_api::NetworkDenied>,
}

/// A sandbox on the fake node.
pub(crate) struct FakeSandbox {
    pub(crate) state: NodeSandboxState,
    pub(crate) launch: SandboxLaunch,
    pub(crate) files: Tree,
    pub(crate) commands: BTreeMap<String, FakeCommand>,
    /// Command ids in the order they were started.
    pub(crate) order: Vec<String>,
    /// Its guest agent hangs ([`FakeNode::hang_agent`]): checks find it unresponsive and
    /// command and file calls fail with `AgentUnavailable` until a repair.
    pub(crate) agent_hung: bool,
}

/// A complete snapshot in the fake snapshot store.
pub(crate) struct Snapshot {
    pub(crate) files: Tree,
}

#[derive(Default)]
pub(crate) struct State {
    pub(crate) sandboxes: BTreeMap<String, FakeSandbox>,
    pub(crate) snapshots: BTreeMap<String, Snapshot>,
    /// Checkpoints by checkpoint id.
    pub(crate) checkpoints: BTreeMap<String, Snapshot>,
    pub(crate) releases: BTreeSet<(String, u32)>,
    /// Pieces of interrupted snapshot uploads, removed by `sweep_snapshots`.
    pub(crate) partial_uploads: u64,
    pub(crate) scripts: Vec<(String, Script)>,
    faults: HashMap<Call, VecDeque<Fault>>,
    /// How often each kind of hang was released.
    releases_of_hangs: HashMap<Call, u64>,
    log: Vec<CallRecord>,
    pub(crate) next_pid: u32,
    /// Logical clock for timestamps (Unix ms), advanced by 1 per use.
    pub(crate) ticks: u64,
    pub(crate) watchers: Vec<files::Watcher>,
    /// What `capacity` reports as free disk ([`FakeNode::set_disk_available`]; `None`).
    pub(crate) disk_available_bytes: Option<u64>,
    /// Volumes by id.
    pub(crate) volumes: BTreeMap<String, volumes::FakeVolume>,
}

impl State {
    /// The next timestamp of the logical clock (Unix ms).
    pub(crate) fn tick(&mut self) -> u64 {
        self.ticks += 1;
        1_700_000_000_000 + self.ticks
    }

    pub(crate) fn sandbox(&mut self, id: &str) -> Result<&mut FakeSandbox, NodeError> {
        self.sandboxes
            .get_mut(id)
            .ok_or_else(|| NodeError::SandboxNotFound(id.to_string()))
    }

    /// A sandbox whose guest agent answers (running), for command and file calls.
    pub(crate) fn serving(&mut self, id: &str) -> Result<&mut FakeSandbox, NodeError> {
        let sb = self.sandbox(id)?;
        if sb.agent_hung {
            return Err(NodeError::AgentUnavailable(format!(
                "the guest agent of sandbox {id} does not answer"
            )));
        }
        match sb.state {
            NodeSandboxState::Running => Ok(sb),
            NodeSandboxState::Paused => Err(NodeError::AgentUnavailable(format!(
                "sandbox {id} is paused"
            ))),
            NodeSandboxState::Stopped => Err(NodeError::AgentUnavailable(format!(
                "sandbox {id} is stopped"
            ))),
        }
    }
}

impl Default for FakeNode {
    fn default() -> Self {
        FakeNode::new()
    }
}

impl FakeNode {
    /// A node like runc on this host: pause works, suspend saves files but not memory, a
    /// `file` snapshot store, and the recipes `base` (user `user`, workdir `/home/user`) and
    /// `tiny` (user `root`, workdir `/root`). No release is built yet.
    pub fn new() -> FakeNode {
        FakeNode::with_capabilities(NodeCapabilities {
            runtime: "fake".into(),
            boundary: "container".into(),
            pause: true,
            suspend_memory: false,
            snapshot_store: "file".into(),
            network: true,
            user_namespaces: false,
            volumes: true,
            attach_volumes: true,
        })
    }

    /// A node with these capabilities (`suspend_memory` decides `memory_restored` of wakes).
    pub fn with_capabilities(capabilities: NodeCapabilities) -> FakeNode {
        let recipe = |name: &str, user: &str, workdir: &str| RecipeInfo {
            name: name.into(),
            description: format!("fake {name}"),
            user: user.into(),
            workdir: workdir.into(),
            env: BTreeMap::from([("LANG".to_string(), "C.UTF-8".to_string())]),
            recipe_hash: format!("hash-{name}"),
        };
        FakeNode {
            shared: Arc::new(Shared {
                state: Mutex::new(State {
                    next_pid: 100,
                    ..State::default()
                }),
                changed: watch::channel(0).0,
                capabilities,
                recipes: vec![
                    recipe("base", "user", "/home/user"),
                    recipe("tiny", "root", "/root"),
                ],
                denials: tokio::sync::broadcast::channel(64).0,
            }),
        }
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        self.shared.state.lock()
    }

    pub(crate) fn bump(&self) {
        self.shared.changed.send_modify(|v| *v = v.wrapping_add(1));
    }

    pub(crate) fn subscribe(&self) -> watch::Receiver<u64> {
        self.shared.changed.subscribe()
    }

    pub(crate) fn capabilities_now(&self) -> NodeCapabilities {
        self.shared.capabilities.clone()
    }

    pub(crate) fn recipe_list(&self) -> Vec<RecipeInfo> {
        self.shared.recipes.clone()
    }

    /// Adds a fault for calls of kind `call`.
    pub fn inject(&self, call: Call, fault: Fault) {
        self.lock().faults.entry(call).or_default().push_back(fault);
    }

    /// Removes every fault not used yet.
    pub fn clear_faults(&self) {
        self.lock().faults.clear();
    }

    /// Lets every call of kind `call` hanging now carry on (as if it had no fault).
    pub fn release(&self, call: Call) {
        *self.lock().releases_of_hangs.entry(call).or_default() += 1;
        self.bump();
    }

    /// Scripts what a command does: programs whose text is `program` (an argv joined with
    /// spaces, or the shell string) behave as `script`. Unscripted commands exit 0 at once
    /// with no output.
    pub fn script(&self, program: &str, script: Script) {
        self.lock().scripts.push((program.to_string(), script));
    }

    /// Marks release `number` of `template` as built on the node.
    pub fn add_release(&self, template: &str, number: u32) {
        self.lock().releases.insert((template.to_string(), number));
    }

    /// Every call so far, in order.
    pub fn calls(&self) -> Vec<CallRecord> {
        self.lock().log.clone()
    }

    /// How many calls of kind `call` were made (on any sandbox).
    pub fn count(&self, call: Call) -> usize {
        self.lock().log.iter().filter(|r| r.call == call).count()
    }

    /// How many calls of kind `call` were made on sandbox `id`.
    pub fn count_on(&self, call: Call, id: &str) -> usize {
        self.lock()
            .log
            .iter()
            .filter(|r| r.call == call && r.target == id)
            .count()
    }

    /// The kinds of lifecycle call made on sandbox `id`, in order (command, file and listing
    /// calls left out).
    pub fn lifecycle_calls(&self, id: &str) -> Vec<Call> {
        use Call::*;
        self.lock()
            .log
            .iter()
            .filter(|r| r.target == id)
            .map(|r| r.call)
            .filter(|c| {
                matches!(
                    c,
                    Start | Adopt | Repair | Pause | Resume | Suspend | Wake | Release | Destroy
                )
            })
            .collect()
    }

    /// Waits until at least `n` calls of kind `call` have been made (entered, not finished).
    pub async fn wait_for_calls(&self, call: Call, n: usize) {
        let mut rx = self.subscribe();
        loop {
            rx.borrow_and_update();
            if self.count(call) >= n {
                return;
            }
            if rx.changed().await.is_err() {
                return;
            }
        }
    }

    /// The node state of sandbox `id` (`None`: the node has no such sandbox).
    pub fn state_of(&self, id: &str) -> Option<NodeSandboxState> {
        self.lock().sandboxes.get(id).map(|s| s.state)
    }

    /// What sandbox `id` was started (or woken) with.
    pub fn launch_of(&self, id: &str) -> Option<SandboxLaunch> {
        self.lock().sandboxes.get(id).map(|s| s.launch.clone())
    }

    /// Whether a complete snapshot of `id` is in the snapshot store.
    pub fn snapshot_exists(&self, id: &str) -> bool {
        self.lock().snapshots.contains_key(id)
    }

    /// Ids of every sandbox on the node.
    pub fn sandbox_ids(&self) -> Vec<String> {
        self.lock().sandboxes.keys().cloned().collect()
    }

    /// Ids of every snapshot.
    pub fn snapshot_ids(&self) -> Vec<String> {
        self.lock().snapshots.keys().cloned().collect()
    }

    /// The node loses sandbox `id` (it crashed, the host rebooted): it is gone without a
    /// trace; its snapshot, if any, stays.
    pub fn lose(&self, id: &str) {
        self.lock().sandboxes.remove(id);
        self.bump();
    }

    /// Sets the node state of sandbox `id` (e.g. `Stopped`: its init died).
    pub fn set_state(&self, id: &str, state: NodeSandboxState) {
        if let Some(sb) = self.lock().sandboxes.get_mut(id) {
            sb.state = state;
        }
        self.bump();
    }

    /// The guest agent of sandbox `id` hangs (its process lives, its socket does not
    /// answer) until a repair.
    pub fn hang_agent(&self, id: &str) {
        if let Some(sb) = self.lock().sandboxes.get_mut(id) {
            sb.agent_hung = true;
        }
        self.bump();
    }

    /// Sets the free disk `capacity` reports (`None`: unknown, the default).
    pub fn set_disk_available(&self, bytes: Option<u64>) {
        self.lock().disk_available_bytes = bytes;
        self.bump();
    }

    /// Puts a running sandbox on the node that no one asked for (a leftover).
    pub fn add_leftover(&self, id: &str) {
        let launch = SandboxLaunch {
            id: id.to_string(),
            template: "base".into(),
            release: 1,
            release_digest: None,
            resources: cove_domain::Resources::default(),
            network: Default::default(),
            secrets: Default::default(),
            arm_secrets: false,
            volumes: Vec::new(),
        };
        let sb = lifecycle::new_sandbox(launch, "/home/user");
        self.lock().sandboxes.insert(id.to_string(), sb);
        self.bump();
    }

    /// Puts a snapshot of `id` in the snapshot store that no one asked for.
    pub fn add_snapshot(&self, id: &str) {
        let files = Tree::seeded("/home/user");
        self.lock()
            .snapshots
            .insert(id.to_string(), Snapshot { files });
        self.bump();
    }

    /// Leaves `n` pieces of interrupted snapshot uploads for `sweep_snapshots`.
    pub fn add_partial_uploads(&self, n: u64) {
        self.lock().partial_uploads += n;
    }

    /// Records a call and takes the fault that applies to it, if any.
    fn enter(&self, call: Call, target: &str) -> Option<Fault> {
        let mut st = self.lock();
        st.log.push(CallRecord {
            call,
            target: target.to_string(),
        });
        let queue = st.faults.entry(call).or_default();
        let pos = queue.iter().position(|f| f.matches(target));
        let fault = pos.and_then(|i| {
            let f = queue.get_mut(i)?;
            let taken = f.clone();
            match &mut f.times {
                Some(n) if *n <= 1 => {
                    queue.remove(i);
                }
                Some(n) => *n -= 1,
                None => {}
            }
            Some(taken)
        });
        drop(st);
        self.bump();
        fault
    }

    /// Acts out a fault: `Err` to return it instead of the call's result.
    async fn strike(
        &self,
        call: Call,
        action: &Action,
        cancel: Option<&CancellationToken>,
    ) -> Result<(), NodeError> {
        let cancelled = async {
            match cancel {
                Some(c) => c.cancelled().await,
                None => std::future::pending().await,
            }
        };
        match action {
            Action::Fail(e) => Err(e.clone()),
            Action::Delay(d) => tokio::select! {
                () = tokio::time::sleep(*d) => Ok(()),
                () = cancelled => Err(NodeError::Cancelled),
            },
            Action::Hang => {
                let released = async {
                    let mut rx = self.subscribe();
                    let seen = self.lock().releases_of_hangs.get(&call).copied();
                    loop {
                        rx.borrow_and_update();
                        if self.lock().releases_of_hangs.get(&call).copied() != seen {
                            return;
                        }
                        if rx.changed().await.is_err() {
                            return;
                        }
                    }
                };
                tokio::select! {
                    () = released => Ok(()),
                    () = cancelled => Err(NodeError::Cancelled),
                }
            }
        }
    }

    /// Runs one call: records it, applies its fault (before or after), and makes its effect
    /// on the state (under the lock, never across an await).
    pub(crate) async fn run<T>(
        &self,
        call: Call,
        target: &str,
        cancel: Option<&CancellationToken>,
        effect: impl FnOnce(&mut State) -> Result<T, NodeError>,
    ) -> Result<T, NodeError> {
        let fault = self.enter(call, target);
        if let Some(f) = fault.as_ref().filter(|f| f.stage == Stage::Before) {
            self.strike(call, &f.action, cancel).await?;
        }
        if cancel.is_some_and(|c| c.is_cancelled()) {
            return Err(NodeError::Cancelled);
        }
        let out = effect(&mut self.lock());
        self.bump();
        let out = out?;
        if let Some(f) = fault.as_ref().filter(|f| f.stage == Stage::After) {
            self.strike(call, &f.action, cancel).await?;
        }
        Ok(out)
    }
}

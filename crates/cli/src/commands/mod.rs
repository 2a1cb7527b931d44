//! One module per verb. Each has its clap arguments and a `run` function.

pub mod attach;
pub mod completions;
pub mod cp;
pub mod create;
pub mod events;
pub mod exec;
pub mod files;
pub mod get;
pub mod kill;
pub mod logs;
pub mod ls;
pub mod metrics;
pub mod network;
pub mod node;
pub mod ops;
pub mod pause;
pub mod pool;
pub mod ps;
pub mod resume;
pub mod rm;
pub mod run;
pub mod server;
pub mod suspend;
pub mod template;
pub mod wake;

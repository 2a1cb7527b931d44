//! One module per verb. Each has its clap arguments and a `run` function.

pub mod cp;
pub mod create;
pub mod events;
pub mod exec;
pub mod files;
pub mod get;
pub mod ls;
pub mod ops;
pub mod pause;
pub mod resume;
pub mod rm;
pub mod run;
pub mod server;
pub mod suspend;
pub mod template;
pub mod wake;

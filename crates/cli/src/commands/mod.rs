//! One module per verb. Each has its clap arguments and a `run` function.

pub mod cp;
pub mod create;
pub mod exec;
pub mod get;
pub mod ls;
pub mod rm;
pub mod run;
pub mod server;
pub mod template;

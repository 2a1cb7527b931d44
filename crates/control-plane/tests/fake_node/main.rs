//! Control-plane tests against the in-memory fake node.
mod create;
mod harness;
mod lifecycle;

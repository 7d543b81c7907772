//! sluice: a thread-per-core AMQP 1.0 broker for Linux on glommio (io_uring).
//!
//! The binary is `src/main.rs`; the modules are a library so that tests and
//! benches can use them.

pub mod admin;
pub mod auth;
pub mod broker;
pub mod config;
pub mod net;
pub mod server;
pub mod shard;
pub mod store;

#![recursion_limit = "256"]
//! sluice-perf: an AMQP 1.0 load generator for sluice and any other AMQP 1.0 broker,
//! and the blocking client it (and the black-box tests) are built on.

pub mod body;
pub mod client;
pub mod flow;
pub mod frames;
pub mod opts;
pub mod run;
pub mod sys;
pub mod worker;

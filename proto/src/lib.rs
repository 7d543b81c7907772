//! sluice-proto: the AMQP 1.0 protocol core of sluice, without any I/O.
//!
//! * [`codec`]: the type system (part 1 of the specification).
//! * [`types`]: performatives, termini, delivery states, message sections, SASL.
//! * [`frame`]: frame header, deframer and frame writer; TRANSFER payloads are
//!   `Bytes` slices of the read buffer.
//! * [`trail`]: the keys one owner holds in a shared map (unsettled deliveries).
//! * [`engine`]: connection, session and link state machines driven by bytes and
//!   a time argument, drained for output bytes, events and timer deadlines.
//!
//! Nothing here depends on a runtime, a socket or a clock.
#![warn(missing_docs)]

pub mod codec;
pub mod engine;
pub mod frame;
pub mod trail;
pub mod types;

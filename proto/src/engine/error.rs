//! The engine's one error type and the one function that turns it into an AMQP
//! condition at the right scope.

use crate::codec::DecodeError;
use crate::frame::FrameError;
use crate::types::{condition, Error};

/// Where an error takes effect (2.8.14: connection close, session end, link detach).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Close the connection.
    Connection,
    /// End the session on this local channel.
    Session(u16),
    /// Detach the link with this engine link id (closed=true).
    Link(super::LinkId),
}

/// A protocol violation by the peer, or a limit it ran into.
#[derive(Debug, Clone, PartialEq)]
pub enum ProtocolError {
    /// The byte stream is not framed correctly.
    Framing(FrameError),
    /// A frame body did not decode.
    Decode(DecodeError),
    /// A protocol header this endpoint does not speak.
    BadProtocolHeader,
    /// A frame that is not allowed in the connection's current state.
    IllegalState(&'static str),
    /// A second OPEN on an open connection.
    SecondOpen,
    /// max-frame-size below 512 in the peer's OPEN.
    FrameSizeTooSmall,
    /// A channel number above channel-max, or a frame for a channel with no session.
    BadChannel(&'static str),
    /// The peer was silent longer than the idle time-out.
    IdleTimeout,
    /// The peer did not finish the handshake in time.
    HandshakeTimeout,
    /// Too many bytes before OPEN (pre-authentication traffic cap).
    PreOpenLimit,
    /// A handle above handle-max.
    HandleAboveMax,
    /// ATTACH on a handle already in use (session; the reference calls it errant-link).
    HandleInUse(u16),
    /// A FLOW or DETACH for a handle that is not attached (session).
    UnattachedHandle(u16),
    /// A TRANSFER for a handle that is not attached (session; errant-link in the reference).
    ErrantTransfer(u16),
    /// A TRANSFER beyond the session's incoming window (session).
    WindowViolation(u16),
    /// A session-scope violation with its condition (session).
    Session(u16, &'static str, &'static str),
    /// A TRANSFER without link credit (link).
    TransferLimitExceeded(super::LinkId),
    /// A message above the link's max-message-size (link).
    MessageSizeExceeded(super::LinkId),
    /// A link-scope violation with its condition and description (link).
    Link(super::LinkId, &'static str, &'static str),
}

impl From<FrameError> for ProtocolError {
    fn from(e: FrameError) -> Self {
        ProtocolError::Framing(e)
    }
}

impl From<DecodeError> for ProtocolError {
    fn from(e: DecodeError) -> Self {
        ProtocolError::Decode(e)
    }
}

impl ProtocolError {
    /// The scope of the error and the AMQP error to send. Descriptions are short and
    /// name nothing internal.
    pub fn to_amqp(&self) -> (Scope, Error) {
        use ProtocolError::*;
        match self {
            Framing(e) => (Scope::Connection, Error::new(condition::FRAMING_ERROR, e.to_string())),
            Decode(e) => (Scope::Connection, Error::new(condition::DECODE_ERROR, e.to_string())),
            BadProtocolHeader => {
                (Scope::Connection, Error::new(condition::FRAMING_ERROR, "unsupported protocol header"))
            }
            IllegalState(what) => (Scope::Connection, Error::new(condition::ILLEGAL_STATE, *what)),
            SecondOpen => (Scope::Connection, Error::new(condition::NOT_ALLOWED, "unexpected second open")),
            FrameSizeTooSmall => {
                (Scope::Connection, Error::new(condition::FRAME_SIZE_TOO_SMALL, "max-frame-size below 512"))
            }
            BadChannel(what) => (Scope::Connection, Error::new(condition::FRAMING_ERROR, *what)),
            IdleTimeout => (Scope::Connection, Error::new(condition::RESOURCE_LIMIT_EXCEEDED, "idle timeout expired")),
            HandshakeTimeout => {
                (Scope::Connection, Error::new(condition::RESOURCE_LIMIT_EXCEEDED, "handshake not completed in time"))
            }
            PreOpenLimit => {
                (Scope::Connection, Error::new(condition::RESOURCE_LIMIT_EXCEEDED, "too much data before open"))
            }
            HandleAboveMax => (Scope::Connection, Error::new(condition::FRAMING_ERROR, "handle above handle-max")),
            HandleInUse(ch) => (Scope::Session(*ch), Error::new(condition::ERRANT_LINK, "handle already attached")),
            ErrantTransfer(ch) => {
                (Scope::Session(*ch), Error::new(condition::ERRANT_LINK, "transfer on an unattached handle"))
            }
            UnattachedHandle(ch) => {
                (Scope::Session(*ch), Error::new(condition::UNATTACHED_HANDLE, "frame for an unattached handle"))
            }
            WindowViolation(ch) => (
                Scope::Session(*ch),
                Error::new(condition::WINDOW_VIOLATION, "transfer beyond the session incoming window"),
            ),
            Session(ch, cond, what) => (Scope::Session(*ch), Error::new(cond, *what)),
            TransferLimitExceeded(l) => {
                (Scope::Link(*l), Error::new(condition::TRANSFER_LIMIT_EXCEEDED, "transfer without link credit"))
            }
            MessageSizeExceeded(l) => {
                (Scope::Link(*l), Error::new(condition::MESSAGE_SIZE_EXCEEDED, "message larger than max-message-size"))
            }
            Link(l, cond, what) => (Scope::Link(*l), Error::new(cond, *what)),
        }
    }
}

/// Why an application call on the engine was refused (not a protocol error).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UsageError {
    /// The connection is not open (or is closing).
    NotOpen,
    /// No such session or link, or it is not in a state for this call.
    UnknownEndpoint,
    /// The link is not a sending link / not a receiving link.
    WrongRole,
    /// No link credit left.
    NoCredit,
    /// The peer's session incoming window has no room for the frames.
    SessionWindow,
    /// No free channel or handle.
    Exhausted,
}

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            UsageError::NotOpen => "connection not open",
            UsageError::UnknownEndpoint => "unknown session or link",
            UsageError::WrongRole => "wrong link role for this call",
            UsageError::NoCredit => "no link credit",
            UsageError::SessionWindow => "session outgoing window exhausted",
            UsageError::Exhausted => "no free channel or handle",
        })
    }
}

impl std::error::Error for UsageError {}

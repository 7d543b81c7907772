//! AMQP 1.0 composite types: performatives (part 2), messaging (part 3) and SASL (part 5).

pub mod definitions;
pub(crate) mod fast;
pub mod messaging;
pub mod performatives;
pub mod sasl;

pub use definitions::{condition, DeliveryTag, Error, ReceiverSettleMode, Role, SenderSettleMode};
pub use messaging::{Body, BodyKind, Header, Message, Properties, RawMessage};
pub use performatives::{
    Accepted, Attach, AttachTarget, Begin, Close, Coordinator, DeliveryState, Detach, Disposition, End, Flow, Modified,
    Open, Performative, Received, Rejected, Released, Source, Target, Transfer,
};
pub use sasl::{SaslChallenge, SaslFrame, SaslInit, SaslMechanisms, SaslOutcome, SaslResponse};

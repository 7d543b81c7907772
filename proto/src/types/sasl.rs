//! SASL frames (part 5 section 5.3.3).

use crate::codec::{format, Decode, DecodeError, DecodeResult, Decoder, Encode, Symbol, Symbols};
use crate::described_list;
use bytes::{Bytes, BytesMut};

described_list! {
    /// 5.3.3.1 sasl-mechanisms: advertise available SASL mechanisms.
    pub struct SaslMechanisms = 0x40, "amqp:sasl-mechanisms:list" {
        /// Supported SASL mechanisms.
        pub sasl_server_mechanisms: Symbols,
    }
}

described_list! {
    /// 5.3.3.2 sasl-init: initiate SASL exchange.
    pub struct SaslInit = 0x41, "amqp:sasl-init:list" {
        /// Selected security mechanism.
        pub mechanism: Symbol,
        /// Security response data.
        pub initial_response: Option<Bytes>,
        /// The name of the target host.
        pub hostname: Option<String>,
    }
}

described_list! {
    /// 5.3.3.3 sasl-challenge: security mechanism challenge.
    pub struct SaslChallenge = 0x42, "amqp:sasl-challenge:list" {
        /// Security challenge data.
        pub challenge: Bytes,
    }
}

described_list! {
    /// 5.3.3.4 sasl-response: security mechanism response.
    pub struct SaslResponse = 0x43, "amqp:sasl-response:list" {
        /// Security response data.
        pub response: Bytes,
    }
}

described_list! {
    /// 5.3.3.5 sasl-outcome: indicates the outcome of the sasl dialog.
    pub struct SaslOutcome = 0x44, "amqp:sasl-outcome:list" {
        /// Indicates the outcome of the sasl dialog (0 ok, 1 auth, 2 sys, 3 sys-perm, 4 sys-temp).
        pub code: u8,
        /// Additional data as specified in RFC-4422.
        pub additional_data: Option<Bytes>,
    }
}

/// Any SASL frame body.
#[derive(Debug, Clone, PartialEq)]
#[allow(missing_docs)]
pub enum SaslFrame {
    Mechanisms(SaslMechanisms),
    Init(SaslInit),
    Challenge(SaslChallenge),
    Response(SaslResponse),
    Outcome(SaslOutcome),
}

const SASL_NAMES: &[(&str, u64)] = &[
    (SaslMechanisms::SYMBOL, SaslMechanisms::CODE),
    (SaslInit::SYMBOL, SaslInit::CODE),
    (SaslChallenge::SYMBOL, SaslChallenge::CODE),
    (SaslResponse::SYMBOL, SaslResponse::CODE),
    (SaslOutcome::SYMBOL, SaslOutcome::CODE),
];

impl<'a> Decode<'a> for SaslFrame {
    fn decode_with(d: &mut Decoder<'a>, code: u8) -> DecodeResult<Self> {
        if code != format::DESCRIBED {
            return Err(DecodeError::UnexpectedType { expected: "sasl frame", found: code });
        }
        d.enter()?;
        let r = match d.descriptor_code(SASL_NAMES)? {
            SaslMechanisms::CODE => SaslMechanisms::decode_list(d).map(SaslFrame::Mechanisms),
            SaslInit::CODE => SaslInit::decode_list(d).map(SaslFrame::Init),
            SaslChallenge::CODE => SaslChallenge::decode_list(d).map(SaslFrame::Challenge),
            SaslResponse::CODE => SaslResponse::decode_list(d).map(SaslFrame::Response),
            SaslOutcome::CODE => SaslOutcome::decode_list(d).map(SaslFrame::Outcome),
            _ => Err(DecodeError::UnknownDescriptor),
        };
        d.leave();
        r
    }
}

impl Encode for SaslFrame {
    fn encode(&self, out: &mut BytesMut) {
        match self {
            SaslFrame::Mechanisms(f) => f.encode(out),
            SaslFrame::Init(f) => f.encode(out),
            SaslFrame::Challenge(f) => f.encode(out),
            SaslFrame::Response(f) => f.encode(out),
            SaslFrame::Outcome(f) => f.encode(out),
        }
    }
}

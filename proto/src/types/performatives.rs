//! Performatives of the transport layer (part 2 section 2.7), delivery states
//! (part 3 section 3.4) and termini (part 3 section 3.5).

use super::definitions::{DeliveryTag, Error, ReceiverSettleMode, Role, SenderSettleMode};
use crate::codec::{
    format, put_descriptor, Decode, DecodeError, DecodeResult, Decoder, Encode, Fields, Symbol, Symbols, Value,
};
use crate::described_list;
use bytes::BytesMut;

described_list! {
    /// 2.7.1 open: negotiate connection parameters.
    pub struct Open = 0x10, "amqp:open:list" {
        /// The id of the source container.
        pub container_id: String,
        /// The name of the target host.
        pub hostname: Option<String>,
        /// Proposed maximum frame size (default 4294967295).
        pub max_frame_size: Option<u32>,
        /// The maximum channel number that can be used on the connection (default 65535).
        pub channel_max: Option<u16>,
        /// Idle time-out in milliseconds.
        pub idle_time_out: Option<u32>,
        /// Locales available for outgoing text.
        pub outgoing_locales: Option<Symbols>,
        /// Desired locales for incoming text in decreasing level of preference.
        pub incoming_locales: Option<Symbols>,
        /// The extension capabilities the sender supports.
        pub offered_capabilities: Option<Symbols>,
        /// The extension capabilities the sender can use if the receiver supports them.
        pub desired_capabilities: Option<Symbols>,
        /// Connection properties.
        pub properties: Option<Fields>,
    }
}

described_list! {
    /// 2.7.2 begin: begin a session on a channel.
    pub struct Begin = 0x11, "amqp:begin:list" {
        /// The remote channel for this session (set when answering a peer's begin).
        pub remote_channel: Option<u16>,
        /// The transfer-id of the first transfer id the sender will send.
        pub next_outgoing_id: u32,
        /// The initial incoming-window of the sender.
        pub incoming_window: u32,
        /// The initial outgoing-window of the sender.
        pub outgoing_window: u32,
        /// The maximum handle value that can be used on the session (default 4294967295).
        pub handle_max: Option<u32>,
        /// The extension capabilities the sender supports.
        pub offered_capabilities: Option<Symbols>,
        /// The extension capabilities the sender can use if the receiver supports them.
        pub desired_capabilities: Option<Symbols>,
        /// Session properties.
        pub properties: Option<Fields>,
    }
}

described_list! {
    /// 2.7.3 attach: attach a link to a session.
    pub struct Attach = 0x12, "amqp:attach:list" {
        /// The name of the link.
        pub name: String,
        /// The handle for the link while attached.
        pub handle: u32,
        /// The role of the link endpoint.
        pub role: Role,
        /// Settlement policy for the sender (default mixed).
        pub snd_settle_mode: Option<SenderSettleMode>,
        /// The settlement policy of the receiver (default first).
        pub rcv_settle_mode: Option<ReceiverSettleMode>,
        /// The source for messages.
        pub source: Option<Source>,
        /// The target for messages.
        pub target: Option<AttachTarget>,
        /// Unsettled delivery state (a map of delivery-tag to delivery-state).
        pub unsettled: Option<Value>,
        /// The sender has more unsettled deliveries than fitted (default false).
        pub incomplete_unsettled: Option<bool>,
        /// The sender's initial value for delivery-count (set by senders only).
        pub initial_delivery_count: Option<u32>,
        /// The maximum message size supported by the link endpoint.
        pub max_message_size: Option<u64>,
        /// The extension capabilities the sender supports.
        pub offered_capabilities: Option<Symbols>,
        /// The extension capabilities the sender can use if the receiver supports them.
        pub desired_capabilities: Option<Symbols>,
        /// Link properties.
        pub properties: Option<Fields>,
    }
}

impl Attach {
    /// snd-settle-mode with its default applied.
    pub fn snd_settle_mode(&self) -> SenderSettleMode {
        self.snd_settle_mode.unwrap_or_default()
    }
    /// rcv-settle-mode with its default applied.
    pub fn rcv_settle_mode(&self) -> ReceiverSettleMode {
        self.rcv_settle_mode.unwrap_or_default()
    }
    /// The target terminus when it is a plain target (not a transaction coordinator).
    pub fn target(&self) -> Option<&Target> {
        match &self.target {
            Some(AttachTarget::Target(t)) => Some(t),
            _ => None,
        }
    }
}

described_list! {
    /// 2.7.4 flow: update link state.
    pub struct Flow = 0x13, "amqp:flow:list", encoded_by_hand {
        /// Identifies the expected transfer-id of the next incoming transfer frame.
        pub next_incoming_id: Option<u32>,
        /// Defines the maximum number of incoming transfer frames the endpoint can receive.
        pub incoming_window: u32,
        /// The transfer-id that will be assigned to the next outgoing transfer frame.
        pub next_outgoing_id: u32,
        /// Defines the maximum number of outgoing transfer frames the endpoint could send.
        pub outgoing_window: u32,
        /// The link this flow applies to (absent: session-level flow only).
        pub handle: Option<u32>,
        /// The sender's delivery-count.
        pub delivery_count: Option<u32>,
        /// The current maximum number of messages that can be received.
        pub link_credit: Option<u32>,
        /// The number of available messages.
        pub available: Option<u32>,
        /// Drain mode (default false).
        pub drain: Option<bool>,
        /// Request state from the partner (default false).
        pub echo: Option<bool>,
        /// Link state properties.
        pub properties: Option<Fields>,
    }
}

impl Flow {
    /// A FLOW frame body in its usual shape (`00 53 13` and a list of fixed-width
    /// fields, no properties) decoded into `f`, a slot the caller keeps, without
    /// building a [`Performative`] (the engine takes every such FLOW this way; see
    /// [`RawFrame::flow_in`](crate::frame::RawFrame::flow_in)). Bytes after the
    /// performative are ignored, as the engine ignores a FLOW's payload. On `false`
    /// (any other body) `f` holds some mix of its old and new fields and is to be
    /// ignored; [`Performative::decode_body`] then decodes the body or reports why not.
    #[inline(always)]
    pub fn decode_body_in(body: &[u8], f: &mut Flow) -> bool {
        super::fast::after_descriptor(body, 0x13).is_some_and(|mut d| super::fast::flow_into(&mut d, f))
    }

    /// drain with its default applied.
    pub fn drain(&self) -> bool {
        self.drain.unwrap_or(false)
    }
    /// echo with its default applied.
    pub fn echo(&self) -> bool {
        self.echo.unwrap_or(false)
    }
}

described_list! {
    /// 2.7.5 transfer: transfer a message (its payload follows the performative in the frame).
    pub struct Transfer = 0x14, "amqp:transfer:list", encoded_by_hand {
        /// Specifies the link on which the message is transferred.
        pub handle: u32,
        /// Alias for delivery-tag (mandatory on the first transfer of a delivery).
        pub delivery_id: Option<u32>,
        /// Delivery-tag (mandatory on the first transfer of a delivery).
        pub delivery_tag: Option<DeliveryTag>,
        /// Indicates the message format.
        pub message_format: Option<u32>,
        /// The delivery is settled by the sender.
        pub settled: Option<bool>,
        /// Indicates that the message has more content (default false).
        pub more: Option<bool>,
        /// The receiver settle mode for this delivery.
        pub rcv_settle_mode: Option<ReceiverSettleMode>,
        /// The state of the delivery at the sender.
        pub state: Option<DeliveryState>,
        /// Indicates a resumed delivery (default false).
        pub resume: Option<bool>,
        /// Indicates that the message is aborted (default false).
        pub aborted: Option<bool>,
        /// Batchable hint (default false).
        pub batchable: Option<bool>,
    }
}

impl Transfer {
    /// more with its default applied.
    pub fn more(&self) -> bool {
        self.more.unwrap_or(false)
    }
    /// aborted with its default applied.
    pub fn aborted(&self) -> bool {
        self.aborted.unwrap_or(false)
    }
    /// settled with its default applied.
    pub fn settled(&self) -> bool {
        self.settled.unwrap_or(false)
    }
}

described_list! {
    /// 2.7.6 disposition: inform remote peer of delivery state changes.
    pub struct Disposition = 0x15, "amqp:disposition:list", encoded_by_hand {
        /// Directionality of disposition.
        pub role: Role,
        /// Lower bound of deliveries.
        pub first: u32,
        /// Upper bound of deliveries (default first).
        pub last: Option<u32>,
        /// Indicates deliveries are settled (default false).
        pub settled: Option<bool>,
        /// Indicates state of deliveries.
        pub state: Option<DeliveryState>,
        /// Batchable hint (default false).
        pub batchable: Option<bool>,
    }
}

impl Disposition {
    /// A DISPOSITION frame body in its usual shape (`00 53 15`, a list of fixed-width
    /// fields, no state or an accepted or released one) decoded into `x`, a slot the
    /// caller keeps, as [`Flow::decode_body_in`] does for FLOW (the engine takes every
    /// such DISPOSITION this way). On `false` `x` is to be ignored and
    /// [`Performative::decode_body`] decodes the body or reports why not.
    #[inline(always)]
    pub fn decode_body_in(body: &[u8], x: &mut Disposition) -> bool {
        super::fast::after_descriptor(body, 0x15).is_some_and(|mut d| super::fast::disposition_into(&mut d, x))
    }

    /// last with its default (first) applied.
    pub fn last(&self) -> u32 {
        self.last.unwrap_or(self.first)
    }
    /// settled with its default applied.
    pub fn settled(&self) -> bool {
        self.settled.unwrap_or(false)
    }
}

described_list! {
    /// 2.7.7 detach: detach the link endpoint from the session.
    pub struct Detach = 0x16, "amqp:detach:list" {
        /// The local handle of the link to be detached.
        pub handle: u32,
        /// If true then the sender has closed the link (default false).
        pub closed: Option<bool>,
        /// Error causing the detach.
        pub error: Option<Error>,
    }
}

impl Detach {
    /// closed with its default applied.
    pub fn closed(&self) -> bool {
        self.closed.unwrap_or(false)
    }
}

described_list! {
    /// 2.7.8 end: end the session.
    pub struct End = 0x17, "amqp:end:list" {
        /// Error causing the end.
        pub error: Option<Error>,
    }
}

described_list! {
    /// 2.7.9 close: signal a connection close.
    pub struct Close = 0x18, "amqp:close:list" {
        /// Error causing the close.
        pub error: Option<Error>,
    }
}

/// Any performative of the AMQP frame type (2.7).
#[derive(Debug, Clone, PartialEq)]
#[allow(missing_docs)]
pub enum Performative {
    /// Boxed: OPEN is large and rare, and the hot performatives should not pay for its size.
    Open(Box<Open>),
    Begin(Begin),
    /// Boxed, like OPEN.
    Attach(Box<Attach>),
    Flow(Flow),
    Transfer(Transfer),
    Disposition(Disposition),
    Detach(Detach),
    End(End),
    Close(Close),
}

const PERFORMATIVE_NAMES: &[(&str, u64)] = &[
    (Open::SYMBOL, Open::CODE),
    (Begin::SYMBOL, Begin::CODE),
    (Attach::SYMBOL, Attach::CODE),
    (Flow::SYMBOL, Flow::CODE),
    (Transfer::SYMBOL, Transfer::CODE),
    (Disposition::SYMBOL, Disposition::CODE),
    (Detach::SYMBOL, Detach::CODE),
    (End::SYMBOL, End::CODE),
    (Close::SYMBOL, Close::CODE),
];

impl Performative {
    /// Decode the performative at the start of a frame body: the performative and the
    /// number of bytes it took (the payload follows). FLOW, TRANSFER and DISPOSITION in
    /// their usual shapes (`00 53 13..15` and a list of simple fields) go straight to
    /// their one-pass decoders; everything else, and anything those decline, to the
    /// general decoder.
    #[inline(always)]
    pub fn decode_body(body: &[u8]) -> DecodeResult<(Performative, usize)> {
        if let [format::DESCRIBED, format::SMALLULONG, code, ..] = *body {
            let mut d = Decoder::new(&body[3..]);
            let fast = match code {
                0x13 => super::fast::flow(&mut d).map(Performative::Flow),
                0x14 => super::fast::transfer(&mut d).map(Performative::Transfer),
                0x15 => super::fast::disposition(&mut d).map(Performative::Disposition),
                _ => None,
            };
            if let Some(p) = fast {
                return Ok((p, 3 + d.position()));
            }
        }
        Self::decode_body_general(body)
    }

    /// [`Performative::decode_body`] through the general decoder.
    #[inline(never)]
    fn decode_body_general(body: &[u8]) -> DecodeResult<(Performative, usize)> {
        let mut d = Decoder::new(body);
        let p = Performative::decode(&mut d)?;
        Ok((p, d.position()))
    }

    /// The performative's name, for logs.
    pub fn name(&self) -> &'static str {
        match self {
            Performative::Open(_) => "open",
            Performative::Begin(_) => "begin",
            Performative::Attach(_) => "attach",
            Performative::Flow(_) => "flow",
            Performative::Transfer(_) => "transfer",
            Performative::Disposition(_) => "disposition",
            Performative::Detach(_) => "detach",
            Performative::End(_) => "end",
            Performative::Close(_) => "close",
        }
    }
}

impl<'a> Decode<'a> for Performative {
    #[inline]
    fn decode_with(d: &mut Decoder<'a>, code: u8) -> DecodeResult<Self> {
        if code != format::DESCRIBED {
            return Err(DecodeError::UnexpectedType { expected: "performative", found: code });
        }
        d.enter()?;
        // The usual smallulong descriptor (00 53 10..18) without the general lookup.
        let code = match d.rest() {
            [0x53, c @ 0x10..=0x18, ..] => {
                let c = *c as u64;
                d.take(2)?;
                c
            }
            _ => d.descriptor_code(PERFORMATIVE_NAMES)?,
        };
        let r = match code {
            // The hot three: one-pass decoders first, the general ones when they decline.
            Flow::CODE => match super::fast::flow(d) {
                Some(f) => Ok(Performative::Flow(f)),
                None => Flow::decode_list(d).map(Performative::Flow),
            },
            Transfer::CODE => match super::fast::transfer(d) {
                Some(t) => Ok(Performative::Transfer(t)),
                None => Transfer::decode_list(d).map(Performative::Transfer),
            },
            Disposition::CODE => match super::fast::disposition(d) {
                Some(x) => Ok(Performative::Disposition(x)),
                None => Disposition::decode_list(d).map(Performative::Disposition),
            },
            Open::CODE => Open::decode_list(d).map(|o| Performative::Open(Box::new(o))),
            Begin::CODE => Begin::decode_list(d).map(Performative::Begin),
            Attach::CODE => Attach::decode_list(d).map(|a| Performative::Attach(Box::new(a))),
            Detach::CODE => Detach::decode_list(d).map(Performative::Detach),
            End::CODE => End::decode_list(d).map(Performative::End),
            Close::CODE => Close::decode_list(d).map(Performative::Close),
            _ => Err(DecodeError::UnknownDescriptor),
        };
        d.leave();
        r
    }
}

impl Encode for Performative {
    fn encode(&self, out: &mut BytesMut) {
        match self {
            Performative::Open(p) => p.encode(out),
            Performative::Begin(p) => p.encode(out),
            Performative::Attach(p) => p.encode(out),
            Performative::Flow(p) => p.encode(out),
            Performative::Transfer(p) => p.encode(out),
            Performative::Disposition(p) => p.encode(out),
            Performative::Detach(p) => p.encode(out),
            Performative::End(p) => p.encode(out),
            Performative::Close(p) => p.encode(out),
        }
    }
}

described_list! {
    /// 3.4.1 received: partial message data seen by the receiver.
    pub struct Received = 0x23, "amqp:received:list" {
        /// Section number of the first unreceived section.
        pub section_number: u32,
        /// Offset into that section.
        pub section_offset: u64,
    }
}

described_list! {
    /// 3.4.2 accepted: the terminal state for successfully processed deliveries.
    pub struct Accepted = 0x24, "amqp:accepted:list" {}
}

described_list! {
    /// 3.4.3 rejected: the terminal state for invalid deliveries.
    pub struct Rejected = 0x25, "amqp:rejected:list" {
        /// The error that caused the rejection.
        pub error: Option<Error>,
    }
}

described_list! {
    /// 3.4.4 released: the message was not (and will not be) acted upon.
    pub struct Released = 0x26, "amqp:released:list" {}
}

described_list! {
    /// 3.4.5 modified: the message was modified, but not processed.
    pub struct Modified = 0x27, "amqp:modified:list" {
        /// Count the transfer as an unsuccessful delivery attempt.
        pub delivery_failed: Option<bool>,
        /// Prevent redelivery to this link.
        pub undeliverable_here: Option<bool>,
        /// Message attributes to combine with the existing message-annotations.
        pub message_annotations: Option<Fields>,
    }
}

/// A delivery state or outcome (3.4).
#[derive(Debug, Clone, PartialEq)]
#[allow(missing_docs)]
pub enum DeliveryState {
    Received(Received),
    Accepted,
    /// Boxed (it carries an error): the common states stay 16 bytes, and so the
    /// TRANSFER and DISPOSITION that hold a state stay small to move.
    Rejected(Box<Rejected>),
    Released,
    /// Boxed, like `Rejected`.
    Modified(Box<Modified>),
    /// A state this codec does not model (e.g. transactional states), kept as a value.
    Other(Box<Value>),
}

const STATE_NAMES: &[(&str, u64)] = &[
    (Received::SYMBOL, Received::CODE),
    (Accepted::SYMBOL, Accepted::CODE),
    (Rejected::SYMBOL, Rejected::CODE),
    (Released::SYMBOL, Released::CODE),
    (Modified::SYMBOL, Modified::CODE),
];

impl DeliveryState {
    /// True for the terminal outcomes.
    pub fn is_outcome(&self) -> bool {
        !matches!(self, DeliveryState::Received(_) | DeliveryState::Other(_))
    }
}

impl<'a> Decode<'a> for DeliveryState {
    #[inline]
    fn decode_with(d: &mut Decoder<'a>, code: u8) -> DecodeResult<Self> {
        if code != format::DESCRIBED {
            return Err(DecodeError::UnexpectedType { expected: "delivery-state", found: code });
        }
        // The common outcomes in their canonical form: 00 53 24 45 / 00 53 26 45.
        match d.rest() {
            [0x53, 0x24, 0x45, ..] => {
                d.take(3)?;
                return Ok(DeliveryState::Accepted);
            }
            [0x53, 0x26, 0x45, ..] => {
                d.take(3)?;
                return Ok(DeliveryState::Released);
            }
            _ => {}
        }
        let start = d.clone();
        d.enter()?;
        let r = match d.descriptor_code(STATE_NAMES) {
            Ok(Received::CODE) => Received::decode_list(d).map(DeliveryState::Received),
            Ok(Accepted::CODE) => Accepted::decode_list(d).map(|_| DeliveryState::Accepted),
            Ok(Rejected::CODE) => Rejected::decode_list(d).map(|r| DeliveryState::Rejected(Box::new(r))),
            Ok(Released::CODE) => Released::decode_list(d).map(|_| DeliveryState::Released),
            Ok(Modified::CODE) => Modified::decode_list(d).map(|m| DeliveryState::Modified(Box::new(m))),
            Ok(_) | Err(DecodeError::UnknownDescriptor) => {
                // Not a state this codec models: keep it whole as a value.
                *d = start;
                return Value::decode_with(d, format::DESCRIBED).map(|v| DeliveryState::Other(Box::new(v)));
            }
            Err(e) => Err(e),
        };
        d.leave();
        r
    }
}

impl Encode for DeliveryState {
    fn encode(&self, out: &mut BytesMut) {
        match self {
            DeliveryState::Received(s) => s.encode(out),
            DeliveryState::Accepted => {
                put_descriptor(out, Accepted::CODE);
                Accepted {}.encode_list(out)
            }
            DeliveryState::Rejected(s) => s.encode(out),
            DeliveryState::Released => {
                put_descriptor(out, Released::CODE);
                Released {}.encode_list(out)
            }
            DeliveryState::Modified(s) => s.encode(out),
            DeliveryState::Other(v) => v.encode(out),
        }
    }
}

described_list! {
    /// 3.5.3 source: the source terminus of a link.
    pub struct Source = 0x28, "amqp:source:list" {
        /// The address of the source.
        pub address: Option<String>,
        /// Indicates the durability of the terminus (default 0, none).
        pub durable: Option<u32>,
        /// The expiry policy of the source (default session-end).
        pub expiry_policy: Option<Symbol>,
        /// Duration that an expiring source will be retained (seconds, default 0).
        pub timeout: Option<u32>,
        /// Request dynamic creation of a remote node (default false).
        pub dynamic: Option<bool>,
        /// Properties of the dynamically created node.
        pub dynamic_node_properties: Option<Fields>,
        /// The distribution mode of the link (move or copy).
        pub distribution_mode: Option<Symbol>,
        /// A set of predicates to filter the messages admitted onto the link.
        pub filter: Option<Fields>,
        /// Default outcome for unsettled transfers.
        pub default_outcome: Option<DeliveryState>,
        /// Descriptors for the outcomes that can be chosen on this link.
        pub outcomes: Option<Symbols>,
        /// The extension capabilities the sender supports/desires.
        pub capabilities: Option<Symbols>,
    }
}

impl Source {
    /// dynamic with its default applied.
    pub fn dynamic(&self) -> bool {
        self.dynamic.unwrap_or(false)
    }
}

described_list! {
    /// 3.5.4 target: the target terminus of a link.
    pub struct Target = 0x29, "amqp:target:list" {
        /// The address of the target.
        pub address: Option<String>,
        /// Indicates the durability of the terminus (default 0, none).
        pub durable: Option<u32>,
        /// The expiry policy of the target (default session-end).
        pub expiry_policy: Option<Symbol>,
        /// Duration that an expiring target will be retained (seconds, default 0).
        pub timeout: Option<u32>,
        /// Request dynamic creation of a remote node (default false).
        pub dynamic: Option<bool>,
        /// Properties of the dynamically created node.
        pub dynamic_node_properties: Option<Fields>,
        /// The extension capabilities the sender supports/desires.
        pub capabilities: Option<Symbols>,
    }
}

impl Target {
    /// dynamic with its default applied.
    pub fn dynamic(&self) -> bool {
        self.dynamic.unwrap_or(false)
    }
}

described_list! {
    /// Transactions 4.5.1 coordinator: the target of a transaction-controller link.
    pub struct Coordinator = 0x30, "amqp:coordinator:list" {
        /// The capabilities supported at the coordinator.
        pub capabilities: Option<Symbols>,
    }
}

/// The target field of an attach: a target or a transaction coordinator.
#[derive(Debug, Clone, PartialEq)]
#[allow(missing_docs)]
pub enum AttachTarget {
    Target(Target),
    Coordinator(Coordinator),
}

impl<'a> Decode<'a> for AttachTarget {
    fn decode_with(d: &mut Decoder<'a>, code: u8) -> DecodeResult<Self> {
        if code != format::DESCRIBED {
            return Err(DecodeError::UnexpectedType { expected: "target", found: code });
        }
        d.enter()?;
        let names = [(Target::SYMBOL, Target::CODE), (Coordinator::SYMBOL, Coordinator::CODE)];
        let r = match d.descriptor_code(&names)? {
            Target::CODE => Target::decode_list(d).map(AttachTarget::Target),
            Coordinator::CODE => Coordinator::decode_list(d).map(AttachTarget::Coordinator),
            _ => Err(DecodeError::UnknownDescriptor),
        };
        d.leave();
        r
    }
}

impl Encode for AttachTarget {
    fn encode(&self, out: &mut BytesMut) {
        match self {
            AttachTarget::Target(t) => t.encode(out),
            AttachTarget::Coordinator(c) => c.encode(out),
        }
    }
}

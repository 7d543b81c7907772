//! Property tests of the codec: arbitrary values and performatives survive
//! encode -> decode -> encode unchanged, and arbitrary or corrupted bytes never
//! make a decoder panic.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use bytes::Bytes;
use proptest::collection::vec;
use proptest::option;
use proptest::prelude::*;
use sluice_proto::codec::{
    Decode, Decoder, Described, Descriptor, Encode, Fields, Symbol, Symbols, Timestamp, Uuid, Value,
};
use sluice_proto::types::{
    Accepted, Attach, AttachTarget, Begin, Body, Close, Coordinator, DeliveryState, DeliveryTag, Detach, Disposition,
    End, Error, Flow, Header, Message, Modified, Open, Performative, Properties, RawMessage, Received,
    ReceiverSettleMode, Rejected, Released, Role, SaslFrame, SenderSettleMode, Source, Target, Transfer,
};
use std::fmt::Debug;

// ---------------------------------------------------------------------------
// primitive strategies

/// Small values are over-represented: they select the compact encodings.
fn uint() -> impl Strategy<Value = u32> + Clone {
    prop_oneof![Just(0u32), 1..=255u32, 256..=300u32, any::<u32>()]
}

fn ulong() -> impl Strategy<Value = u64> + Clone {
    prop_oneof![Just(0u64), 1..=255u64, 256..=300u64, any::<u64>()]
}

fn int() -> impl Strategy<Value = i32> + Clone {
    prop_oneof![-128..=127i32, any::<i32>()]
}

fn long() -> impl Strategy<Value = i64> + Clone {
    prop_oneof![-128..=127i64, any::<i64>()]
}

/// Any float but NaN (NaN != NaN would defeat the equality check).
fn float() -> impl Strategy<Value = f32> + Clone {
    any::<f32>().prop_filter("NaN", |f| !f.is_nan())
}

fn double() -> impl Strategy<Value = f64> + Clone {
    any::<f64>().prop_filter("NaN", |f| !f.is_nan())
}

/// Short and long (> 255 bytes: the 32-bit size forms) binaries.
fn binary() -> impl Strategy<Value = Bytes> + Clone {
    prop_oneof![4 => vec(any::<u8>(), 0..24), 1 => vec(any::<u8>(), 250..300)].prop_map(Bytes::from)
}

fn text() -> impl Strategy<Value = String> + Clone {
    prop_oneof![4 => ".{0,16}", 1 => "[a-z\u{e9}\u{1f600}]{240,280}"]
}

fn symbol() -> impl Strategy<Value = Symbol> + Clone {
    prop_oneof![8 => "[ -~]{0,16}", 1 => "[a-z:]{250,270}"].prop_map(|s| Symbol::new(&s))
}

fn descriptor() -> impl Strategy<Value = Descriptor> + Clone {
    prop_oneof![ulong().prop_map(Descriptor::Code), symbol().prop_map(Descriptor::Symbol)]
}

fn described(descriptor: Descriptor, value: Value) -> Value {
    Value::Described(Box::new(Described { descriptor, value }))
}

// ---------------------------------------------------------------------------
// Value strategies

fn leaf() -> BoxedStrategy<Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<u8>().prop_map(Value::Ubyte),
        any::<u16>().prop_map(Value::Ushort),
        uint().prop_map(Value::Uint),
        ulong().prop_map(Value::Ulong),
        any::<i8>().prop_map(Value::Byte),
        any::<i16>().prop_map(Value::Short),
        int().prop_map(Value::Int),
        long().prop_map(Value::Long),
        float().prop_map(Value::Float),
        double().prop_map(Value::Double),
        any::<[u8; 4]>().prop_map(Value::Decimal32),
        any::<[u8; 8]>().prop_map(Value::Decimal64),
        any::<[u8; 16]>().prop_map(Value::Decimal128),
        any::<char>().prop_map(Value::Char),
        any::<i64>().prop_map(|t| Value::Timestamp(Timestamp(t))),
        any::<[u8; 16]>().prop_map(|u| Value::Uuid(Uuid(u))),
        binary().prop_map(Value::Binary),
        text().prop_map(Value::String),
        symbol().prop_map(Value::Symbol),
    ]
    .boxed()
}

fn array_of<S>(element: S, wrap: fn(S::Value) -> Value) -> BoxedStrategy<Value>
where
    S: Strategy + 'static,
{
    vec(element, 0..6).prop_map(move |items| Value::Array(items.into_iter().map(wrap).collect())).boxed()
}

/// Homogeneous arrays of one primitive type (never null: an array of zero-width
/// elements is refused by the decoder, see the report on arrays of nulls).
fn primitive_array() -> BoxedStrategy<Value> {
    prop_oneof![
        array_of(any::<bool>(), Value::Bool),
        array_of(any::<u8>(), Value::Ubyte),
        array_of(any::<u16>(), Value::Ushort),
        array_of(uint(), Value::Uint),
        array_of(ulong(), Value::Ulong),
        array_of(any::<i8>(), Value::Byte),
        array_of(any::<i16>(), Value::Short),
        array_of(int(), Value::Int),
        array_of(long(), Value::Long),
        array_of(float(), Value::Float),
        array_of(double(), Value::Double),
        array_of(any::<[u8; 4]>(), Value::Decimal32),
        array_of(any::<[u8; 8]>(), Value::Decimal64),
        array_of(any::<[u8; 16]>(), Value::Decimal128),
        array_of(any::<char>(), Value::Char),
        array_of(any::<i64>(), |t| Value::Timestamp(Timestamp(t))),
        array_of(any::<[u8; 16]>(), |u| Value::Uuid(Uuid(u))),
        array_of(binary(), Value::Binary),
        array_of(text(), Value::String),
        array_of(symbol(), Value::Symbol),
    ]
    .boxed()
}

/// Arrays of described values: one descriptor shared by every element.
fn described_array() -> BoxedStrategy<Value> {
    (descriptor(), primitive_array())
        .prop_map(|(d, array)| match array {
            Value::Array(items) => Value::Array(items.into_iter().map(|v| described(d.clone(), v)).collect()),
            other => other,
        })
        .boxed()
}

fn value() -> BoxedStrategy<Value> {
    leaf()
        .prop_recursive(4, 64, 6, |inner| {
            prop_oneof![
                vec(inner.clone(), 0..6).prop_map(Value::List),
                vec((inner.clone(), inner.clone()), 0..5).prop_map(Value::Map),
                primitive_array(),
                described_array(),
                (descriptor(), inner.clone()).prop_map(|(d, v)| described(d, v)),
                // arrays of compound values
                vec(vec(inner.clone(), 0..4).prop_map(Value::List), 0..4).prop_map(Value::Array),
                vec(vec((inner.clone(), inner.clone()), 0..3).prop_map(Value::Map), 0..4).prop_map(Value::Array),
                vec(primitive_array(), 0..4).prop_map(Value::Array),
                (descriptor(), vec(vec(inner, 0..3), 0..3)).prop_map(|(d, lists)| Value::Array(
                    lists.into_iter().map(|l| described(d.clone(), Value::List(l))).collect()
                )),
            ]
        })
        .boxed()
}

// ---------------------------------------------------------------------------
// composite strategies

fn symbols() -> BoxedStrategy<Symbols> {
    vec(symbol(), 0..4).prop_map(Symbols).boxed()
}

fn fields() -> BoxedStrategy<Fields> {
    vec((symbol(), value()), 0..4).prop_map(Fields).boxed()
}

fn error() -> BoxedStrategy<Error> {
    (symbol(), option::of(text()), option::of(fields()))
        .prop_map(|(condition, description, info)| Error { condition, description, info })
        .boxed()
}

fn role() -> impl Strategy<Value = Role> + Clone {
    prop_oneof![Just(Role::Sender), Just(Role::Receiver)]
}

fn snd_settle_mode() -> impl Strategy<Value = SenderSettleMode> + Clone {
    prop_oneof![Just(SenderSettleMode::Unsettled), Just(SenderSettleMode::Settled), Just(SenderSettleMode::Mixed)]
}

fn rcv_settle_mode() -> impl Strategy<Value = ReceiverSettleMode> + Clone {
    prop_oneof![Just(ReceiverSettleMode::First), Just(ReceiverSettleMode::Second)]
}

fn delivery_tag() -> impl Strategy<Value = DeliveryTag> + Clone {
    vec(any::<u8>(), 0..=32).prop_map(|b| DeliveryTag::from_slice(&b).unwrap())
}

fn delivery_state() -> BoxedStrategy<DeliveryState> {
    prop_oneof![
        (uint(), ulong()).prop_map(|(section_number, section_offset)| {
            DeliveryState::Received(Received { section_number, section_offset })
        }),
        Just(DeliveryState::Accepted),
        option::of(error()).prop_map(|error| DeliveryState::Rejected(Box::new(Rejected { error }))),
        Just(DeliveryState::Released),
        (option::of(any::<bool>()), option::of(any::<bool>()), option::of(fields())).prop_map(
            |(delivery_failed, undeliverable_here, message_annotations)| {
                DeliveryState::Modified(Box::new(Modified { delivery_failed, undeliverable_here, message_annotations }))
            }
        ),
        // transactional states (declared 0x33, transactional-state 0x34, ...)
        (0x30u64..=0x3f, vec(value(), 0..3)).prop_map(|(code, items)| {
            DeliveryState::Other(Box::new(described(Descriptor::Code(code), Value::List(items))))
        }),
    ]
    .boxed()
}

fn source() -> BoxedStrategy<Source> {
    (
        (option::of(text()), option::of(uint()), option::of(symbol()), option::of(uint())),
        (option::of(any::<bool>()), option::of(fields()), option::of(symbol()), option::of(fields())),
        (option::of(delivery_state()), option::of(symbols()), option::of(symbols())),
    )
        .prop_map(
            |(
                (address, durable, expiry_policy, timeout),
                (dynamic, dynamic_node_properties, distribution_mode, filter),
                (default_outcome, outcomes, capabilities),
            )| Source {
                address,
                durable,
                expiry_policy,
                timeout,
                dynamic,
                dynamic_node_properties,
                distribution_mode,
                filter,
                default_outcome,
                outcomes,
                capabilities,
            },
        )
        .boxed()
}

fn target() -> BoxedStrategy<Target> {
    (
        option::of(text()),
        option::of(uint()),
        option::of(symbol()),
        option::of(uint()),
        option::of(any::<bool>()),
        option::of(fields()),
        option::of(symbols()),
    )
        .prop_map(|(address, durable, expiry_policy, timeout, dynamic, dynamic_node_properties, capabilities)| Target {
            address,
            durable,
            expiry_policy,
            timeout,
            dynamic,
            dynamic_node_properties,
            capabilities,
        })
        .boxed()
}

fn attach_target() -> BoxedStrategy<AttachTarget> {
    prop_oneof![
        3 => target().prop_map(AttachTarget::Target),
        1 => option::of(symbols()).prop_map(|capabilities| AttachTarget::Coordinator(Coordinator { capabilities })),
    ]
    .boxed()
}

fn open() -> BoxedStrategy<Open> {
    (
        (text(), option::of(text()), option::of(uint()), option::of(any::<u16>()), option::of(uint())),
        (option::of(symbols()), option::of(symbols()), option::of(symbols()), option::of(symbols())),
        option::of(fields()),
    )
        .prop_map(
            |(
                (container_id, hostname, max_frame_size, channel_max, idle_time_out),
                (outgoing_locales, incoming_locales, offered_capabilities, desired_capabilities),
                properties,
            )| Open {
                container_id,
                hostname,
                max_frame_size,
                channel_max,
                idle_time_out,
                outgoing_locales,
                incoming_locales,
                offered_capabilities,
                desired_capabilities,
                properties,
            },
        )
        .boxed()
}

fn begin() -> BoxedStrategy<Begin> {
    (
        option::of(any::<u16>()),
        uint(),
        uint(),
        uint(),
        option::of(uint()),
        option::of(symbols()),
        option::of(symbols()),
        option::of(fields()),
    )
        .prop_map(
            |(
                remote_channel,
                next_outgoing_id,
                incoming_window,
                outgoing_window,
                handle_max,
                offered_capabilities,
                desired_capabilities,
                properties,
            )| Begin {
                remote_channel,
                next_outgoing_id,
                incoming_window,
                outgoing_window,
                handle_max,
                offered_capabilities,
                desired_capabilities,
                properties,
            },
        )
        .boxed()
}

fn attach() -> BoxedStrategy<Attach> {
    let unsettled = vec((binary(), option::of(delivery_state())), 0..3).prop_map(|entries| {
        Value::Map(
            entries
                .into_iter()
                .map(|(tag, state)| {
                    let state = match state {
                        Some(s) => Value::decode_exact(&s.to_bytes()).unwrap(),
                        None => Value::Null,
                    };
                    (Value::Binary(tag), state)
                })
                .collect(),
        )
    });
    (
        (text(), uint(), role(), option::of(snd_settle_mode()), option::of(rcv_settle_mode())),
        (option::of(source()), option::of(attach_target()), option::of(unsettled)),
        (option::of(any::<bool>()), option::of(uint()), option::of(ulong())),
        (option::of(symbols()), option::of(symbols()), option::of(fields())),
    )
        .prop_map(
            |(
                (name, handle, role, snd_settle_mode, rcv_settle_mode),
                (source, target, unsettled),
                (incomplete_unsettled, initial_delivery_count, max_message_size),
                (offered_capabilities, desired_capabilities, properties),
            )| Attach {
                name,
                handle,
                role,
                snd_settle_mode,
                rcv_settle_mode,
                source,
                target,
                unsettled,
                incomplete_unsettled,
                initial_delivery_count,
                max_message_size,
                offered_capabilities,
                desired_capabilities,
                properties,
            },
        )
        .boxed()
}

fn flow() -> BoxedStrategy<Flow> {
    (
        (option::of(uint()), uint(), uint(), uint()),
        (option::of(uint()), option::of(uint()), option::of(uint()), option::of(uint())),
        (option::of(any::<bool>()), option::of(any::<bool>()), option::of(fields())),
    )
        .prop_map(
            |(
                (next_incoming_id, incoming_window, next_outgoing_id, outgoing_window),
                (handle, delivery_count, link_credit, available),
                (drain, echo, properties),
            )| Flow {
                next_incoming_id,
                incoming_window,
                next_outgoing_id,
                outgoing_window,
                handle,
                delivery_count,
                link_credit,
                available,
                drain,
                echo,
                properties,
            },
        )
        .boxed()
}

fn transfer() -> BoxedStrategy<Transfer> {
    (
        (uint(), option::of(uint()), option::of(delivery_tag()), option::of(uint())),
        (option::of(any::<bool>()), option::of(any::<bool>()), option::of(rcv_settle_mode())),
        (option::of(delivery_state()), option::of(any::<bool>()), option::of(any::<bool>()), option::of(any::<bool>())),
    )
        .prop_map(
            |(
                (handle, delivery_id, delivery_tag, message_format),
                (settled, more, rcv_settle_mode),
                (state, resume, aborted, batchable),
            )| Transfer {
                handle,
                delivery_id,
                delivery_tag,
                message_format,
                settled,
                more,
                rcv_settle_mode,
                state,
                resume,
                aborted,
                batchable,
            },
        )
        .boxed()
}

fn disposition() -> BoxedStrategy<Disposition> {
    (
        role(),
        uint(),
        option::of(uint()),
        option::of(any::<bool>()),
        option::of(delivery_state()),
        option::of(any::<bool>()),
    )
        .prop_map(|(role, first, last, settled, state, batchable)| Disposition {
            role,
            first,
            last,
            settled,
            state,
            batchable,
        })
        .boxed()
}

fn performative() -> BoxedStrategy<Performative> {
    prop_oneof![
        open().prop_map(|o| Performative::Open(Box::new(o))),
        begin().prop_map(Performative::Begin),
        attach().prop_map(|a| Performative::Attach(Box::new(a))),
        flow().prop_map(Performative::Flow),
        transfer().prop_map(Performative::Transfer),
        disposition().prop_map(Performative::Disposition),
        (uint(), option::of(any::<bool>()), option::of(error()))
            .prop_map(|(handle, closed, error)| Performative::Detach(Detach { handle, closed, error })),
        option::of(error()).prop_map(|error| Performative::End(End { error })),
        option::of(error()).prop_map(|error| Performative::Close(Close { error })),
    ]
    .boxed()
}

fn message_id() -> BoxedStrategy<Value> {
    prop_oneof![
        ulong().prop_map(Value::Ulong),
        any::<[u8; 16]>().prop_map(|u| Value::Uuid(Uuid(u))),
        binary().prop_map(Value::Binary),
        text().prop_map(Value::String),
    ]
    .boxed()
}

fn message() -> BoxedStrategy<Message> {
    let header = (
        option::of(any::<bool>()),
        option::of(any::<u8>()),
        option::of(uint()),
        option::of(any::<bool>()),
        option::of(uint()),
    )
        .prop_map(|(durable, priority, ttl, first_acquirer, delivery_count)| Header {
            durable,
            priority,
            ttl,
            first_acquirer,
            delivery_count,
        });
    let properties = (
        (option::of(message_id()), option::of(binary()), option::of(text()), option::of(text())),
        (option::of(text()), option::of(message_id()), option::of(symbol()), option::of(symbol())),
        (option::of(any::<i64>()), option::of(any::<i64>()), option::of(text())),
        (option::of(uint()), option::of(text())),
    )
        .prop_map(
            |(
                (message_id, user_id, to, subject),
                (reply_to, correlation_id, content_type, content_encoding),
                (absolute_expiry_time, creation_time, group_id),
                (group_sequence, reply_to_group_id),
            )| Properties {
                message_id,
                user_id,
                to,
                subject,
                reply_to,
                correlation_id,
                content_type,
                content_encoding,
                absolute_expiry_time: absolute_expiry_time.map(Timestamp),
                creation_time: creation_time.map(Timestamp),
                group_id,
                group_sequence,
                reply_to_group_id,
            },
        );
    let body = prop_oneof![
        Just(Body::Empty),
        binary().prop_map(Body::Data),
        vec(value(), 0..4).prop_map(Body::Sequence),
        value().prop_map(Body::Value),
    ];
    (
        option::of(header),
        option::of(vec((symbol().prop_map(Value::Symbol), value()), 0..3)),
        option::of(properties),
        // Application-properties values are simple types (3.2.5); others are refused
        // (`RawMessage::application_properties`).
        option::of(vec((text(), leaf()), 0..3)),
        body,
    )
        .prop_map(|(header, message_annotations, properties, application_properties, body)| Message {
            header,
            message_annotations,
            properties,
            application_properties,
            body,
        })
        .boxed()
}

// ---------------------------------------------------------------------------
// checks

/// decode(encode(x)) == x and encode(decode(encode(x))) == encode(x).
fn check_roundtrip<T>(x: &T) -> Result<(), TestCaseError>
where
    T: for<'a> Decode<'a> + Encode + PartialEq + Debug,
{
    let bytes = x.to_bytes();
    let decoded = T::decode_exact(&bytes).map_err(|e| TestCaseError::fail(format!("decode failed: {e:?}")))?;
    prop_assert_eq!(&decoded, x);
    prop_assert_eq!(decoded.to_bytes(), bytes);
    Ok(())
}

/// Whatever a decoder accepts re-encodes canonically and stably:
/// encode(decode(encode(y))) == encode(y). (Bytes are compared, not values, so a
/// NaN produced by corrupted input does not matter.)
fn check_reencode<T>(y: &T) -> Result<(), TestCaseError>
where
    T: for<'a> Decode<'a> + Encode + Debug,
{
    let bytes = y.to_bytes();
    let again =
        T::decode_exact(&bytes).map_err(|e| TestCaseError::fail(format!("re-decode failed: {e:?} for {y:?}")))?;
    prop_assert_eq!(again.to_bytes(), bytes);
    Ok(())
}

/// Run every decoder over `bytes`; none may panic.
fn decode_everything(bytes: &[u8]) -> Result<(), TestCaseError> {
    if let Ok(v) = Value::decode_exact(bytes) {
        check_reencode(&v)?;
    }
    let _ = Value::decode(&mut Decoder::new(bytes));
    if let Ok(p) = Performative::decode_exact(bytes) {
        check_reencode(&p)?;
    }
    let _ = Performative::decode(&mut Decoder::new(bytes));
    let _ = Flow::decode_exact(bytes);
    let _ = Transfer::decode_exact(bytes);
    let _ = Attach::decode_exact(bytes);
    let _ = DeliveryState::decode_exact(bytes);
    let _ = Source::decode_exact(bytes);
    let _ = AttachTarget::decode_exact(bytes);
    let _ = Accepted::decode_exact(bytes);
    let _ = Released::decode_exact(bytes);
    let _ = Fields::decode_exact(bytes);
    let _ = Symbols::decode_exact(bytes);
    let _ = DeliveryTag::decode_exact(bytes);
    let _ = SaslFrame::decode_exact(bytes);
    let mut d = Decoder::new(bytes);
    while d.skip_value().is_ok() && !d.is_empty() {}
    if let Ok(m) = RawMessage::parse(&Bytes::copy_from_slice(bytes)) {
        let _ = m.header();
        let _ = m.properties();
        let _ = m.application_properties();
        let _ = m.message_annotations();
        let _ = m.data();
        let _ = m.encoded_len();
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn value_roundtrip(v in value()) {
        check_roundtrip(&v)?;
    }

    #[test]
    fn performative_roundtrip(p in performative()) {
        check_roundtrip(&p)?;
        // The same bytes through each performative's own decoder.
        match &p {
            Performative::Open(x) => check_roundtrip(&**x)?,
            Performative::Begin(x) => check_roundtrip(x)?,
            Performative::Attach(x) => check_roundtrip(&**x)?,
            Performative::Flow(x) => check_roundtrip(x)?,
            Performative::Transfer(x) => check_roundtrip(x)?,
            Performative::Disposition(x) => check_roundtrip(x)?,
            Performative::Detach(x) => check_roundtrip(x)?,
            Performative::End(x) => check_roundtrip(x)?,
            Performative::Close(x) => check_roundtrip(x)?,
        }
        // A performative followed by a payload: decode stops at the performative.
        let mut wire = p.to_bytes();
        let len = wire.len();
        wire.extend_from_slice(b"payload");
        let mut d = Decoder::new(&wire);
        prop_assert_eq!(Performative::decode(&mut d).unwrap(), p);
        prop_assert_eq!(d.position(), len);
    }

    #[test]
    fn delivery_state_and_termini_roundtrip(s in delivery_state(), src in source(), t in attach_target(), e in error()) {
        check_roundtrip(&s)?;
        check_roundtrip(&src)?;
        check_roundtrip(&t)?;
        check_roundtrip(&e)?;
    }

    #[test]
    fn message_sections_roundtrip(m in message()) {
        let wire = m.to_bytes().freeze();
        let raw = RawMessage::parse(&wire).map_err(|e| TestCaseError::fail(format!("{e:?}")))?;
        prop_assert_eq!(raw.encoded_len(), wire.len());
        prop_assert_eq!(raw.header().unwrap(), m.header.clone());
        prop_assert_eq!(raw.properties().unwrap(), m.properties.clone());
        prop_assert_eq!(raw.message_annotations().unwrap(), m.message_annotations.clone());
        prop_assert_eq!(raw.application_properties().unwrap(), m.application_properties.clone());
        match &m.body {
            Body::Empty => prop_assert!(raw.body_bytes().is_empty()),
            Body::Data(b) => prop_assert_eq!(raw.data().unwrap(), Some(b.to_vec())),
            Body::Sequence(items) => prop_assert_eq!(
                Value::decode_exact(raw.body_bytes()).unwrap(),
                described(Descriptor::Code(0x76), Value::List(items.clone()))
            ),
            Body::Value(v) => prop_assert_eq!(
                Value::decode_exact(raw.body_bytes()).unwrap(),
                described(Descriptor::Code(0x77), v.clone())
            ),
        }
        // Replacing the header with itself reproduces the message.
        let mut out = bytes::BytesMut::new();
        raw.encode_with_header(&m.header.clone().unwrap_or_default(), &mut out);
        if m.header.is_some() {
            prop_assert_eq!(&out[..], &wire[..]);
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in vec(any::<u8>(), 0..512)) {
        decode_everything(&bytes)?;
    }

    /// Bytes that start like real encodings reach deeper into the decoders.
    #[test]
    fn prefixed_arbitrary_bytes_never_panic(
        prefix in prop_oneof![
            Just(vec![0x00, 0x53, 0x10]), Just(vec![0x00, 0x53, 0x12]), Just(vec![0x00, 0x53, 0x13]),
            Just(vec![0x00, 0x53, 0x14]), Just(vec![0x00, 0x53, 0x15]), Just(vec![0x00, 0x53, 0x70]),
            Just(vec![0x00, 0x53, 0x73]), Just(vec![0x00, 0x53, 0x75]), Just(vec![0x00, 0x53, 0x77]),
            Just(vec![0x00, 0x53, 0x41]), Just(vec![0xc0]), Just(vec![0xe0]), Just(vec![0xf0]),
        ],
        rest in vec(any::<u8>(), 0..256),
    ) {
        decode_everything(&[prefix, rest].concat())?;
    }

    /// Valid encodings with a few bytes overwritten, or cut short.
    #[test]
    fn corrupted_encodings_never_panic(
        p in performative(),
        m in message(),
        edits in vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
        cut in any::<prop::sample::Index>(),
    ) {
        for original in [p.to_bytes().to_vec(), m.to_bytes().to_vec()] {
            if original.is_empty() {
                continue; // a message with no sections
            }
            let mut bytes = original.clone();
            for (at, b) in &edits {
                let i = at.index(bytes.len());
                bytes[i] = *b;
            }
            decode_everything(&bytes)?;
            decode_everything(&original[..cut.index(original.len())])?;
        }
        // A strict prefix of a performative is never a performative.
        let wire = p.to_bytes();
        let n = cut.index(wire.len());
        prop_assert!(Performative::decode_exact(&wire[..n]).is_err());
        prop_assert!(Performative::decode(&mut Decoder::new(&wire[..n])).is_err());
    }
}

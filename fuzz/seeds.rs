//! Seed inputs for the fuzz targets, built with the encoder of `sluice-proto`.
//!
//! Written to `fuzz/corpus/<target>/seed-*` by
//! `cargo test --test fuzz_corpus -- --ignored generate_seed_corpus`; the
//! committed corpus is what remained of them (and of what the fuzzer found) after
//! `cargo fuzz cmin`. Included by `tests/fuzz_corpus.rs` next to `harness.rs`.

use crate::harness::{client_attach, client_handshake, raw_frame};
use bytes::{Bytes, BytesMut};
use sluice_proto::codec::{Described, Descriptor, Encode, Fields, Symbol, Symbols, Timestamp, Uuid, Value};
use sluice_proto::frame::{write_empty_frame, write_frame, AMQP_HEADER, FRAME_TYPE_SASL, SASL_HEADER};
use sluice_proto::types::{
    condition, Accepted, Attach, AttachTarget, Begin, Body, Close, Coordinator, DeliveryState, DeliveryTag, Detach,
    Disposition, End, Error, Flow, Header, Message, Modified, Open, Performative, Properties, Received,
    ReceiverSettleMode, Rejected, Role, SaslChallenge, SaslFrame, SaslInit, SaslMechanisms, SaslOutcome, SaslResponse,
    SenderSettleMode, Source, Target, Transfer,
};

/// A named seed.
pub(crate) type Seed = (String, Vec<u8>);

/// Seeds of one target by its name.
pub(crate) fn seeds_for(target: &str) -> Vec<Seed> {
    match target {
        "frame_decode" => frame_seeds(),
        "value_decode" => value_seeds(),
        "engine" => engine_seeds(),
        other => panic!("unknown fuzz target {other}"),
    }
}

fn syms(names: &[&str]) -> Symbols {
    Symbols(names.iter().map(|n| Symbol::new(n)).collect())
}

fn fields() -> Fields {
    Fields(vec![(Symbol::new("product"), Value::string("sluice")), (Symbol::new("x-opt-n"), Value::Long(-42))])
}

fn amqp_error() -> Error {
    Error {
        condition: Symbol::new(condition::NOT_FOUND),
        description: Some("no such queue".into()),
        info: Some(fields()),
    }
}

fn tag(n: u64) -> Option<DeliveryTag> {
    Some(DeliveryTag::from_u64(n))
}

/// Every performative, with its fields unset and with every field set.
pub(crate) fn performatives() -> Vec<(&'static str, Performative)> {
    let source = Source {
        address: Some("queues/a".into()),
        durable: Some(2),
        expiry_policy: Some(Symbol::new("never")),
        timeout: Some(60),
        dynamic: Some(false),
        dynamic_node_properties: Some(fields()),
        distribution_mode: Some(Symbol::new("move")),
        filter: Some(Fields(vec![(
            Symbol::new("selector"),
            Value::Described(Box::new(Described {
                descriptor: Descriptor::Code(0x0000_468C_0000_0004),
                value: Value::string("color = 'red'"),
            })),
        )])),
        default_outcome: Some(DeliveryState::Released),
        outcomes: Some(syms(&["amqp:accepted:list", "amqp:rejected:list"])),
        capabilities: Some(syms(&["queue"])),
    };
    let target = Target {
        address: Some("queues/a".into()),
        durable: Some(1),
        expiry_policy: Some(Symbol::new("link-detach")),
        timeout: Some(0),
        dynamic: Some(true),
        dynamic_node_properties: Some(fields()),
        capabilities: Some(syms(&["topic", "shared"])),
    };
    vec![
        ("open-min", Performative::Open(Box::new(Open { container_id: "c".into(), ..Default::default() }))),
        (
            "open-full",
            Performative::Open(Box::new(Open {
                container_id: "client-1".into(),
                hostname: Some("localhost".into()),
                max_frame_size: Some(65536),
                channel_max: Some(255),
                idle_time_out: Some(30_000),
                outgoing_locales: Some(syms(&["en-US"])),
                incoming_locales: Some(syms(&["en-US", "fr-FR"])),
                offered_capabilities: Some(syms(&["ANONYMOUS-RELAY"])),
                desired_capabilities: Some(syms(&["DELAYED_DELIVERY", "SHARED-SUBS"])),
                properties: Some(fields()),
            })),
        ),
        (
            "begin",
            Performative::Begin(Begin {
                next_outgoing_id: 0,
                incoming_window: 2048,
                outgoing_window: 2048,
                ..Default::default()
            }),
        ),
        (
            "begin-full",
            Performative::Begin(Begin {
                remote_channel: Some(1),
                next_outgoing_id: u32::MAX,
                incoming_window: 1,
                outgoing_window: 0,
                handle_max: Some(1023),
                offered_capabilities: Some(syms(&["x"])),
                desired_capabilities: Some(syms(&["y"])),
                properties: Some(fields()),
            }),
        ),
        ("attach-sender", client_attach(0, Role::Sender)),
        ("attach-receiver", client_attach(1, Role::Receiver)),
        (
            "attach-full",
            Performative::Attach(Box::new(Attach {
                name: "link-full".into(),
                handle: 2,
                role: Role::Receiver,
                snd_settle_mode: Some(SenderSettleMode::Mixed),
                rcv_settle_mode: Some(ReceiverSettleMode::Second),
                source: Some(source),
                target: Some(AttachTarget::Target(target)),
                unsettled: Some(Value::Map(vec![(
                    Value::Binary(Bytes::from_static(b"tag1")),
                    Value::Described(Box::new(Described {
                        descriptor: Descriptor::Code(0x24),
                        value: Value::List(vec![]),
                    })),
                )])),
                incomplete_unsettled: Some(false),
                initial_delivery_count: Some(7),
                max_message_size: Some(1 << 20),
                offered_capabilities: Some(syms(&["a"])),
                desired_capabilities: Some(syms(&["b"])),
                properties: Some(fields()),
            })),
        ),
        (
            "attach-coordinator",
            Performative::Attach(Box::new(Attach {
                name: "txn".into(),
                handle: 3,
                role: Role::Sender,
                initial_delivery_count: Some(0),
                source: Some(Source::default()),
                target: Some(AttachTarget::Coordinator(Coordinator {
                    capabilities: Some(syms(&["amqp:local-transactions"])),
                })),
                ..Default::default()
            })),
        ),
        (
            "flow-session",
            Performative::Flow(Flow {
                next_incoming_id: Some(0),
                incoming_window: 2048,
                next_outgoing_id: 0,
                outgoing_window: 2048,
                ..Default::default()
            }),
        ),
        (
            "flow-link",
            Performative::Flow(Flow {
                next_incoming_id: Some(1),
                incoming_window: 100,
                next_outgoing_id: 1,
                outgoing_window: 100,
                handle: Some(1),
                delivery_count: Some(0),
                link_credit: Some(10),
                available: Some(0),
                drain: Some(false),
                echo: Some(true),
                properties: Some(fields()),
            }),
        ),
        (
            "flow-drain",
            Performative::Flow(Flow {
                incoming_window: 100,
                next_outgoing_id: 1,
                outgoing_window: 100,
                handle: Some(1),
                delivery_count: Some(0),
                link_credit: Some(3),
                drain: Some(true),
                ..Default::default()
            }),
        ),
        (
            "transfer",
            Performative::Transfer(Transfer {
                handle: 0,
                delivery_id: Some(0),
                delivery_tag: tag(0),
                ..Default::default()
            }),
        ),
        (
            "transfer-full",
            Performative::Transfer(Transfer {
                handle: 0,
                delivery_id: Some(1),
                delivery_tag: tag(1),
                message_format: Some(0),
                settled: Some(false),
                more: Some(false),
                rcv_settle_mode: Some(ReceiverSettleMode::First),
                state: Some(DeliveryState::Received(Received { section_number: 1, section_offset: 2 })),
                resume: Some(false),
                aborted: Some(false),
                batchable: Some(true),
            }),
        ),
        (
            "disposition",
            Performative::Disposition(Disposition {
                role: Role::Receiver,
                first: 0,
                last: Some(3),
                settled: Some(true),
                state: Some(DeliveryState::Accepted),
                batchable: Some(false),
            }),
        ),
        (
            "disposition-rejected",
            Performative::Disposition(Disposition {
                role: Role::Receiver,
                first: 1,
                state: Some(DeliveryState::Rejected(Box::new(Rejected { error: Some(amqp_error()) }))),
                ..Default::default()
            }),
        ),
        (
            "disposition-modified",
            Performative::Disposition(Disposition {
                role: Role::Sender,
                first: 2,
                last: Some(2),
                settled: Some(true),
                state: Some(DeliveryState::Modified(Box::new(Modified {
                    delivery_failed: Some(true),
                    undeliverable_here: Some(false),
                    message_annotations: Some(fields()),
                }))),
                batchable: None,
            }),
        ),
        (
            "disposition-other-state",
            Performative::Disposition(Disposition {
                role: Role::Receiver,
                first: 0,
                state: Some(DeliveryState::Other(Box::new(Value::Described(Box::new(Described {
                    descriptor: Descriptor::Code(0x34),
                    value: Value::List(vec![Value::Binary(Bytes::from_static(b"txn-1")), Value::Null]),
                }))))),
                ..Default::default()
            }),
        ),
        ("detach", Performative::Detach(Detach { handle: 0, closed: Some(true), error: None })),
        ("detach-error", Performative::Detach(Detach { handle: 1, closed: Some(false), error: Some(amqp_error()) })),
        ("end", Performative::End(End { error: None })),
        ("end-error", Performative::End(End { error: Some(amqp_error()) })),
        ("close", Performative::Close(Close { error: None })),
        ("close-error", Performative::Close(Close { error: Some(amqp_error()) })),
    ]
}

/// Every SASL frame.
pub(crate) fn sasl_frames() -> Vec<(&'static str, SaslFrame)> {
    vec![
        (
            "sasl-mechanisms",
            SaslFrame::Mechanisms(SaslMechanisms { sasl_server_mechanisms: syms(&["ANONYMOUS", "PLAIN"]) }),
        ),
        ("sasl-mechanisms-one", SaslFrame::Mechanisms(SaslMechanisms { sasl_server_mechanisms: syms(&["EXTERNAL"]) })),
        (
            "sasl-init-anonymous",
            SaslFrame::Init(SaslInit { mechanism: Symbol::new("ANONYMOUS"), initial_response: None, hostname: None }),
        ),
        (
            "sasl-init-plain",
            SaslFrame::Init(SaslInit {
                mechanism: Symbol::new("PLAIN"),
                initial_response: Some(Bytes::from_static(b"\0guest\0guest")),
                hostname: Some("localhost".into()),
            }),
        ),
        ("sasl-challenge", SaslFrame::Challenge(SaslChallenge { challenge: Bytes::from_static(b"nonce") })),
        ("sasl-response", SaslFrame::Response(SaslResponse { response: Bytes::from_static(b"proof") })),
        ("sasl-outcome-ok", SaslFrame::Outcome(SaslOutcome { code: 0, additional_data: None })),
        (
            "sasl-outcome-auth",
            SaslFrame::Outcome(SaslOutcome { code: 1, additional_data: Some(Bytes::from_static(b"denied")) }),
        ),
    ]
}

/// A few messages: every section, every body kind.
pub(crate) fn messages() -> Vec<(&'static str, Vec<u8>)> {
    let full = Message {
        header: Some(Header {
            durable: Some(true),
            priority: Some(9),
            ttl: Some(1000),
            first_acquirer: Some(false),
            delivery_count: Some(2),
        }),
        message_annotations: Some(vec![
            (Value::symbol("x-opt-partition-key"), Value::string("p1")),
            (Value::Ulong(0x1234), Value::Bool(true)),
        ]),
        properties: Some(Properties {
            message_id: Some(Value::string("msg-1")),
            user_id: Some(Bytes::from_static(b"guest")),
            to: Some("queues/a".into()),
            subject: Some("hello".into()),
            reply_to: Some("queues/reply".into()),
            correlation_id: Some(Value::Uuid(Uuid([7; 16]))),
            content_type: Some(Symbol::new("text/plain")),
            content_encoding: Some(Symbol::new("utf-8")),
            absolute_expiry_time: Some(Timestamp(1_700_000_000_000)),
            creation_time: Some(Timestamp(1_600_000_000_000)),
            group_id: Some("g".into()),
            group_sequence: Some(3),
            reply_to_group_id: Some("rg".into()),
        }),
        application_properties: Some(vec![
            ("color".into(), Value::string("red")),
            ("n".into(), Value::Int(-1)),
            ("f".into(), Value::Double(1.5)),
        ]),
        body: Body::Data(Bytes::from_static(b"hello, world")),
    };
    let mut out = vec![
        ("message-full", full.to_bytes().to_vec()),
        (
            "message-data",
            Message { body: Body::Data(Bytes::from_static(b"payload")), ..Default::default() }.to_bytes().to_vec(),
        ),
        (
            "message-value",
            Message { body: Body::Value(Value::Map(vec![(Value::string("k"), Value::Long(1))])), ..Default::default() }
                .to_bytes()
                .to_vec(),
        ),
        (
            "message-sequence",
            Message { body: Body::Sequence(vec![Value::Int(1), Value::string("two")]), ..Default::default() }
                .to_bytes()
                .to_vec(),
        ),
        ("message-empty", Message::default().to_bytes().to_vec()),
    ];
    // Sections the owned Message does not write: delivery-annotations, several data
    // sections, a footer, and symbolic descriptors.
    let mut raw = BytesMut::new();
    Header { durable: Some(false), ..Default::default() }.encode(&mut raw);
    Value::Described(Box::new(Described {
        descriptor: Descriptor::Code(0x71),
        value: Value::Map(vec![(Value::symbol("x-opt-trace"), Value::string("abc"))]),
    }))
    .encode(&mut raw);
    for chunk in [&b"part one "[..], &b"part two"[..]] {
        Value::Described(Box::new(Described {
            descriptor: Descriptor::Code(0x75),
            value: Value::Binary(Bytes::copy_from_slice(chunk)),
        }))
        .encode(&mut raw);
    }
    Value::Described(Box::new(Described {
        descriptor: Descriptor::Symbol(Symbol::new("amqp:footer:map")),
        value: Value::Map(vec![(Value::symbol("x-hash"), Value::Binary(Bytes::from_static(&[1, 2, 3])))]),
    }))
    .encode(&mut raw);
    out.push(("message-raw-sections", raw.to_vec()));
    let mut sym = BytesMut::new();
    Value::Described(Box::new(Described {
        descriptor: Descriptor::Symbol(Symbol::new("amqp:value:*")),
        value: Value::string("symbolic descriptor"),
    }))
    .encode(&mut sym);
    out.push(("message-symbolic-value", sym.to_vec()));
    out
}

/// One value of every type, in canonical and in non-canonical encodings.
fn values() -> Vec<(String, Vec<u8>)> {
    let described = |d: Descriptor, v: Value| Value::Described(Box::new(Described { descriptor: d, value: v }));
    let vals: Vec<(&str, Value)> = vec![
        ("null", Value::Null),
        ("bool", Value::Bool(true)),
        ("ubyte", Value::Ubyte(200)),
        ("ushort", Value::Ushort(60000)),
        ("uint0", Value::Uint(0)),
        ("smalluint", Value::Uint(7)),
        ("uint", Value::Uint(70000)),
        ("ulong0", Value::Ulong(0)),
        ("smallulong", Value::Ulong(9)),
        ("ulong", Value::Ulong(u64::MAX)),
        ("byte", Value::Byte(-5)),
        ("short", Value::Short(-300)),
        ("smallint", Value::Int(-3)),
        ("int", Value::Int(i32::MIN)),
        ("smalllong", Value::Long(100)),
        ("long", Value::Long(i64::MIN)),
        ("float", Value::Float(3.5)),
        ("float-nan", Value::Float(f32::NAN)),
        ("double", Value::Double(-0.25)),
        ("double-nan", Value::Double(f64::NAN)),
        ("decimal32", Value::Decimal32([1, 2, 3, 4])),
        ("decimal64", Value::Decimal64([1; 8])),
        ("decimal128", Value::Decimal128([2; 16])),
        ("char", Value::Char('λ')),
        ("timestamp", Value::Timestamp(Timestamp(1_700_000_000_000))),
        ("uuid", Value::Uuid(Uuid([0xab; 16]))),
        ("vbin8", Value::Binary(Bytes::from_static(b"bin"))),
        ("vbin32", Value::Binary(Bytes::from(vec![0x5a; 300]))),
        ("str8", Value::string("héllo")),
        ("str32", Value::String("x".repeat(300))),
        ("sym8", Value::symbol("amqp:accepted:list")),
        ("sym32", Value::Symbol(Symbol::new(&"s".repeat(256)))),
        ("list0", Value::List(vec![])),
        ("list8", Value::List(vec![Value::Int(1), Value::string("a"), Value::Null])),
        ("list32", Value::List((0..100).map(|i| Value::Long(i * 1000)).collect())),
        ("map8", Value::Map(vec![(Value::symbol("k"), Value::Uint(1)), (Value::string("s"), Value::List(vec![]))])),
        ("map32", Value::Map((0..40).map(|i| (Value::Uint(i), Value::String(format!("value-{i}")))).collect())),
        ("array-int", Value::Array(vec![Value::Int(1), Value::Int(2), Value::Int(3)])),
        ("array-ulong", Value::Array(vec![Value::Ulong(1), Value::Ulong(u64::MAX)])),
        ("array-bool", Value::Array(vec![Value::Bool(true), Value::Bool(false)])),
        ("array-sym", Value::Array(vec![Value::symbol("a"), Value::symbol("bb")])),
        ("array-str-wide", Value::Array(vec![Value::string("a"), Value::String("w".repeat(300))])),
        ("array-double", Value::Array(vec![Value::Double(1.0), Value::Double(f64::NAN)])),
        ("array-uuid", Value::Array(vec![Value::Uuid(Uuid([1; 16])), Value::Uuid(Uuid([2; 16]))])),
        ("array-list", Value::Array(vec![Value::List(vec![Value::Int(1)]), Value::List(vec![])])),
        ("array-map", Value::Array(vec![Value::Map(vec![(Value::Int(1), Value::Null)])])),
        (
            "array-array",
            Value::Array(vec![
                Value::Array(vec![Value::Short(1), Value::Short(2)]),
                Value::Array(vec![Value::Char('a')]),
            ]),
        ),
        (
            "array-described",
            Value::Array(vec![
                described(Descriptor::Code(0x75), Value::Binary(Bytes::from_static(b"a"))),
                described(Descriptor::Code(0x75), Value::Binary(Bytes::from_static(b"b"))),
            ]),
        ),
        ("array-empty", Value::Array(vec![])),
        ("described-code", described(Descriptor::Code(0x77), Value::string("v"))),
        (
            "described-symbol",
            described(Descriptor::Symbol(Symbol::new("com.example:thing")), Value::List(vec![Value::Int(1)])),
        ),
        (
            "described-nested",
            described(
                Descriptor::Code(1),
                described(
                    Descriptor::Code(2),
                    Value::Map(vec![(Value::Null, Value::Array(vec![Value::Timestamp(Timestamp(0))]))]),
                ),
            ),
        ),
    ];
    let mut out: Vec<(String, Vec<u8>)> =
        vals.into_iter().map(|(n, v)| (format!("value-{n}"), v.to_bytes().to_vec())).collect();
    // Non-canonical encodings the decoder must accept.
    let raw: &[(&str, &[u8])] = &[
        ("noncanon-uint", &[0x70, 0, 0, 0, 1]),
        ("noncanon-ulong", &[0x80, 0, 0, 0, 0, 0, 0, 0, 1]),
        ("noncanon-bool", &[0x56, 0x01]),
        ("noncanon-list32", &[0xd0, 0, 0, 0, 5, 0, 0, 0, 1, 0x40]),
        ("noncanon-map32", &[0xd1, 0, 0, 0, 6, 0, 0, 0, 2, 0x40, 0x40]),
        ("noncanon-str32", &[0xb1, 0, 0, 0, 2, b'h', b'i']),
        ("noncanon-array32", &[0xf0, 0, 0, 0, 6, 0, 0, 0, 1, 0x54, 0x05]),
        ("array-smalluint", &[0xe0, 0x04, 0x03, 0x52, 1, 2, 3]),
        ("array-list8", &[0xe0, 0x08, 0x02, 0xc0, 0x02, 0x01, 0x40, 0x02, 0x01, 0x41]),
        ("deep-described", &[0x00, 0x53, 0x01, 0x00, 0x53, 0x02, 0x00, 0x53, 0x03, 0x45]),
        ("deep-lists", &[0xc0, 0x07, 0x01, 0xc0, 0x04, 0x01, 0xc0, 0x01, 0x00]),
        ("descriptor-ulong", &[0x00, 0x80, 0, 0, 0, 0, 0, 0, 0, 0x10, 0x45]),
    ];
    out.extend(raw.iter().map(|(n, b)| (format!("value-{n}"), b.to_vec())));
    out
}

fn sasl_frame(f: &SaslFrame) -> Vec<u8> {
    let mut b = BytesMut::new();
    write_frame(&mut b, FRAME_TYPE_SASL, 0, f, &[]);
    b.to_vec()
}

fn heartbeat() -> Vec<u8> {
    let mut b = BytesMut::new();
    write_empty_frame(&mut b);
    b.to_vec()
}

fn transfer(handle: u32, id: Option<u32>, more: bool, settled: bool) -> Performative {
    Performative::Transfer(Transfer {
        handle,
        delivery_id: id,
        delivery_tag: id.and_then(|i| tag(i as u64)),
        message_format: id.map(|_| 0),
        settled: settled.then_some(true),
        more: more.then_some(true),
        ..Default::default()
    })
}

fn frames(ps: &[(u16, Performative, Vec<u8>)]) -> Vec<u8> {
    ps.iter().flat_map(|(ch, p, payload)| raw_frame(*ch, p, payload)).collect()
}

fn flow_link(handle: u32, credit: u32, drain: bool, echo: bool) -> Performative {
    Performative::Flow(Flow {
        next_incoming_id: Some(0),
        incoming_window: 100,
        next_outgoing_id: 0,
        outgoing_window: 100,
        handle: Some(handle),
        delivery_count: Some(0),
        link_credit: Some(credit),
        drain: drain.then_some(true),
        echo: echo.then_some(true),
        ..Default::default()
    })
}

fn disposition(first: u32, last: u32, state: DeliveryState) -> Performative {
    Performative::Disposition(Disposition {
        role: Role::Receiver,
        first,
        last: Some(last),
        settled: Some(true),
        state: Some(state),
        batchable: None,
    })
}

/// What a client sends after [`client_handshake`]: traffic on the attached link
/// (handle 0, the client sends), a second link where the client receives, and
/// the orderly teardown.
fn conversation() -> Vec<(&'static str, Vec<u8>)> {
    let msgs = messages();
    let msg = |i: usize| msgs[i % msgs.len()].1.clone();
    let big = Message { body: Body::Data(Bytes::from(vec![0x42; 3000])), ..Default::default() }.to_bytes().to_vec();
    let (first, rest) = big.split_at(1000);
    let (second, third) = rest.split_at(1000);
    vec![
        ("transfer", frames(&[(0, transfer(0, Some(0), false, false), msg(0))])),
        (
            "transfers-settled-and-not",
            frames(&[
                (0, transfer(0, Some(0), false, true), msg(1)),
                (0, transfer(0, Some(1), false, false), msg(2)),
                (0, transfer(0, Some(2), false, false), msg(3)),
            ]),
        ),
        (
            "transfer-multi-frame",
            frames(&[
                (0, transfer(0, Some(0), true, false), first.to_vec()),
                (0, transfer(0, None, true, false), second.to_vec()),
                (0, transfer(0, None, false, false), third.to_vec()),
            ]),
        ),
        (
            "transfer-aborted",
            frames(&[
                (0, transfer(0, Some(0), true, false), first.to_vec()),
                (0, Performative::Transfer(Transfer { handle: 0, aborted: Some(true), ..Default::default() }), vec![]),
                (0, transfer(0, Some(1), false, false), msg(4)),
            ]),
        ),
        (
            "flow-session-echo",
            frames(&[(
                0,
                Performative::Flow(Flow {
                    next_incoming_id: Some(0),
                    incoming_window: 10,
                    next_outgoing_id: 1,
                    outgoing_window: 10,
                    echo: Some(true),
                    ..Default::default()
                }),
                vec![],
            )]),
        ),
        (
            "receiver-link",
            frames(&[
                (0, client_attach(1, Role::Receiver), vec![]),
                (0, flow_link(1, 5, false, false), vec![]),
                (0, disposition(0, 1, DeliveryState::Accepted), vec![]),
                (0, flow_link(1, 5, true, true), vec![]),
            ]),
        ),
        (
            "receiver-link-rejects",
            frames(&[
                (0, client_attach(1, Role::Receiver), vec![]),
                (0, flow_link(1, 3, false, false), vec![]),
                (
                    0,
                    disposition(0, 0, DeliveryState::Rejected(Box::new(Rejected { error: Some(amqp_error()) }))),
                    vec![],
                ),
                (
                    0,
                    disposition(
                        1,
                        2,
                        DeliveryState::Modified(Box::new(Modified {
                            delivery_failed: Some(true),
                            ..Default::default()
                        })),
                    ),
                    vec![],
                ),
                (0, Performative::Detach(Detach { handle: 1, closed: Some(true), error: None }), vec![]),
            ]),
        ),
        (
            "refused-link",
            frames(&[(0, client_attach(7, Role::Sender), vec![]), (0, transfer(7, Some(0), false, false), msg(0))]),
        ),
        (
            "second-session",
            frames(&[
                (
                    1,
                    Performative::Begin(Begin {
                        next_outgoing_id: 0,
                        incoming_window: 10,
                        outgoing_window: 10,
                        handle_max: Some(4),
                        ..Default::default()
                    }),
                    vec![],
                ),
                (1, client_attach(0, Role::Sender), vec![]),
                (1, transfer(0, Some(0), false, false), msg(1)),
                (1, Performative::End(End { error: None }), vec![]),
            ]),
        ),
        (
            "teardown",
            [
                frames(&[(0, Performative::Detach(Detach { handle: 0, closed: Some(true), error: None }), vec![])]),
                heartbeat(),
                frames(&[
                    (0, Performative::End(End { error: None }), vec![]),
                    (0, Performative::Close(Close { error: None }), vec![]),
                ]),
            ]
            .concat(),
        ),
        ("close-error", frames(&[(0, Performative::Close(Close { error: Some(amqp_error()) }), vec![])])),
        ("heartbeats", [heartbeat(), heartbeat()].concat()),
    ]
}

fn sasl_handshake() -> Vec<u8> {
    let mut v = SASL_HEADER.to_vec();
    v.extend(sasl_frame(&SaslFrame::Init(SaslInit {
        mechanism: Symbol::new("ANONYMOUS"),
        initial_response: None,
        hostname: None,
    })));
    v.extend(client_handshake());
    v
}

fn frame_seeds() -> Vec<Seed> {
    let mut out: Vec<Seed> = Vec::new();
    for (n, p) in performatives() {
        let payload = if matches!(p, Performative::Transfer(_)) { messages()[0].1.clone() } else { vec![] };
        out.push((format!("frame-{n}"), raw_frame(3, &p, &payload)));
    }
    for (n, f) in sasl_frames() {
        out.push((format!("frame-{n}"), sasl_frame(&f)));
    }
    for (n, m) in messages() {
        out.push((format!("frame-transfer-{n}"), raw_frame(0, &transfer(0, Some(0), false, false), &m)));
    }
    out.push(("frame-heartbeat".into(), heartbeat()));
    // Extended header (doff = 3): four bytes the receiver must skip.
    let mut ext = vec![0, 0, 0, 0, 3, 0, 0, 1, 0xde, 0xad, 0xbe, 0xef];
    ext.extend(Performative::End(End { error: None }).to_bytes());
    let len = ext.len() as u32;
    ext[..4].copy_from_slice(&len.to_be_bytes());
    out.push(("frame-extended-header".into(), ext));
    let handshake = client_handshake();
    out.push(("stream-client-handshake".into(), handshake.clone()));
    out.push(("stream-sasl-handshake".into(), sasl_handshake()));
    for (n, c) in conversation() {
        out.push((format!("stream-{n}"), [handshake.clone(), c].concat()));
    }
    out
}

fn value_seeds() -> Vec<Seed> {
    let mut out = values();
    for (n, p) in performatives() {
        out.push((format!("performative-{n}"), p.to_bytes().to_vec()));
    }
    for (n, f) in sasl_frames() {
        out.push((n.to_string(), f.to_bytes().to_vec()));
    }
    for (n, m) in messages() {
        out.push((n.to_string(), m));
    }
    for (n, s) in [
        ("state-accepted", DeliveryState::Accepted),
        ("state-released", DeliveryState::Released),
        ("state-received", DeliveryState::Received(Received { section_number: 0, section_offset: 10 })),
        (
            "state-modified",
            DeliveryState::Modified(Box::new(Modified { undeliverable_here: Some(true), ..Default::default() })),
        ),
    ] {
        out.push((n.to_string(), s.to_bytes().to_vec()));
    }
    out.push(("accepted-list".into(), {
        let mut b = BytesMut::new();
        sluice_proto::codec::put_descriptor(&mut b, Accepted::CODE);
        Accepted {}.encode_list(&mut b);
        b.to_vec()
    }));
    out
}

fn engine_seeds() -> Vec<Seed> {
    let mut out: Vec<Seed> = conversation().into_iter().map(|(n, c)| (format!("after-handshake-{n}"), c)).collect();
    // For the fresh server, which reads the same bytes from the start.
    let handshake = client_handshake();
    out.push(("fresh-client-handshake".into(), handshake.clone()));
    out.push(("fresh-sasl-handshake".into(), sasl_handshake()));
    for (n, c) in conversation() {
        out.push((format!("fresh-{n}"), [handshake.clone(), c].concat()));
    }
    let mut plain = SASL_HEADER.to_vec();
    plain.extend(sasl_frame(&SaslFrame::Init(SaslInit {
        mechanism: Symbol::new("PLAIN"),
        initial_response: Some(Bytes::from_static(b"\0guest\0guest")),
        hostname: Some("localhost".into()),
    })));
    plain.extend(AMQP_HEADER);
    plain.extend(raw_frame(
        0,
        &Performative::Open(Box::new(Open { container_id: "c".into(), ..Default::default() })),
        &[],
    ));
    plain.extend(raw_frame(0, &Performative::Close(Close { error: None }), &[]));
    out.push(("fresh-sasl-plain-open-close".into(), plain));
    out
}

//! Codec micro-benchmarks: sluice-proto side by side with the peer fe2o3-amqp
//! (serde_amqp 0.18 + fe2o3-amqp-types 0.18), in one criterion run.
//!
//! Every benchmark id is `<operation>/<implementation>` with
//! `Throughput::Elements(1)`, so criterion reports operations per second:
//!
//! * `flow_encode`, `flow_decode`: a FLOW with next-incoming-id, incoming-window,
//!   next-outgoing-id, outgoing-window, handle, delivery-count, link-credit and
//!   drain = false.
//! * `disposition_encode`, `disposition_decode`: role receiver, first, last,
//!   settled, state accepted.
//! * `transfer_encode`: a TRANSFER (handle, delivery-id, 8-byte delivery-tag,
//!   message-format, settled = false) followed by a message made of one 100-byte
//!   data section, written as one frame (8-byte header, performative, message as
//!   payload) into a reused frame buffer. sluice encodes the message in place as
//!   the payload (`write_frame_with`, the path of `Connection::send_message`);
//!   fe2o3 serializes it into a reused scratch buffer and appends that (serde_amqp
//!   has no way to write a message behind a performative it is serializing).
//! * `transfer_decode`: frame body (after the 8-byte header) -> performative and
//!   payload slice, then the message sections.
//! * `transfer_roundtrip`: `transfer_encode` followed by `transfer_decode` of the
//!   bytes just written.
//!
//! How each side does the work:
//!
//! * sluice: `write_frame` into a reused `BytesMut` of a prebuilt `Performative` (FLOW,
//!   DISPOSITION) or of the `Transfer` itself (TRANSFER, as the engine's
//!   `Transmit::transfer_frame_copied` writes every TRANSFER with a small payload);
//!   `Flow::decode_body_in` / `Disposition::decode_body_in` for FLOW / DISPOSITION
//!   (into a slot kept across frames, what the engine's `RawFrame::flow_in` and
//!   `disposition_in` call for every such frame in its usual shape) and
//!   `RawFrame::into_transfer_in` (into a `Transfer` slot kept across
//!   frames, as the engine keeps one) + `RawMessage::parse_owned` for TRANSFER
//!   (on a `RawFrame` cloned from one built once; in `transfer_roundtrip` the frame
//!   just written becomes the `RawFrame` body by `split().freeze()`, without
//!   copying). These are the entry points the engine uses for every frame.
//! * fe2o3: the same 8-byte header, then `serde_amqp::ser::Serializer` over
//!   `BytesMut::writer()` of the concrete performative (what fe2o3-amqp's
//!   `FrameBodyCodec` does), message payload appended; decoding with
//!   `serde_amqp::from_slice` of the *concrete* performative type (its cheapest
//!   path, cheaper than the `Performative` enum fe2o3-amqp's frame decoder uses)
//!   and `from_slice::<Deserializable<Message<Data>>>` of the payload.
//!   `from_slice` cannot report where the performative ended, so
//!   `transfer_decode/fe2o3` takes the payload offset as a precomputed constant
//!   (favouring the peer); `transfer_decode/fe2o3_ioreader` locates the payload
//!   the way fe2o3-amqp's `FrameBodyCodec` does (an `IoReader` over the body,
//!   `Performative` deserialization, the rest is the payload).
//!
//! At start-up the bench checks that both encoders produce frames the other
//! decoder accepts and that the decoded values match, so the two sides do the
//! same work on the same bytes.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use criterion::measurement::WallTime;
use criterion::{criterion_group, criterion_main, BenchmarkGroup, Criterion, Throughput};
use serde_amqp::serde::{Deserialize, Serialize};

use sluice_proto::codec::Encode;
use sluice_proto::frame::{write_frame, write_frame_with, RawFrame, FRAME_TYPE_AMQP};
use sluice_proto::types as sl;

use fe2o3_amqp_types::definitions as fd;
use fe2o3_amqp_types::messaging as fm;
use fe2o3_amqp_types::messaging::message::__private::{Deserializable, Serializable};
use fe2o3_amqp_types::performatives as fp;

const CHANNEL: u16 = 3;
const PAYLOAD_LEN: usize = 100;
static PAYLOAD: [u8; PAYLOAD_LEN] = [0x5a; PAYLOAD_LEN];

// ---------------------------------------------------------------------------
// The values, once per implementation.

fn sl_flow() -> sl::Flow {
    sl::Flow {
        next_incoming_id: Some(1_000),
        incoming_window: 2_048,
        next_outgoing_id: 5_000,
        outgoing_window: 2_048,
        handle: Some(1),
        delivery_count: Some(70_000),
        link_credit: Some(500),
        available: None,
        drain: Some(false),
        echo: None,
        properties: None,
    }
}

fn fe_flow() -> fp::Flow {
    fp::Flow {
        next_incoming_id: Some(1_000),
        incoming_window: 2_048,
        next_outgoing_id: 5_000,
        outgoing_window: 2_048,
        handle: Some(fd::Handle(1)),
        delivery_count: Some(70_000),
        link_credit: Some(500),
        available: None,
        drain: false,
        echo: false,
        properties: None,
    }
}

fn sl_disposition() -> sl::Disposition {
    sl::Disposition {
        role: sl::Role::Receiver,
        first: 70_000,
        last: Some(70_063),
        settled: Some(true),
        state: Some(sl::DeliveryState::Accepted),
        batchable: None,
    }
}

fn fe_disposition() -> fp::Disposition {
    fp::Disposition {
        role: fd::Role::Receiver,
        first: 70_000,
        last: Some(70_063),
        settled: true,
        state: Some(fm::DeliveryState::Accepted(fm::Accepted {})),
        batchable: false,
    }
}

fn sl_transfer() -> sl::Transfer {
    sl::Transfer {
        handle: 1,
        delivery_id: Some(70_000),
        delivery_tag: Some(sl::DeliveryTag::from_u64(70_000)),
        message_format: Some(0),
        settled: Some(false),
        ..Default::default()
    }
}

fn fe_transfer() -> fp::Transfer {
    fp::Transfer {
        handle: fd::Handle(1),
        delivery_id: Some(70_000),
        delivery_tag: Some(serde_bytes::ByteBuf::from(70_000u64.to_be_bytes().to_vec())),
        message_format: Some(0),
        settled: Some(false),
        more: false,
        rcv_settle_mode: None,
        state: None,
        resume: false,
        aborted: false,
        batchable: false,
    }
}

fn sl_message() -> sl::Message {
    sl::Message { body: sl::Body::Data(Bytes::from_static(&PAYLOAD)), ..Default::default() }
}

type FeMessage = fm::Message<fm::Data>;

fn fe_message() -> FeMessage {
    fm::Message {
        header: None,
        delivery_annotations: None,
        message_annotations: None,
        properties: None,
        application_properties: None,
        body: fm::Data(serde_bytes::ByteBuf::from(PAYLOAD.to_vec())),
        footer: None,
    }
}

// ---------------------------------------------------------------------------
// Frame writing and reading, per implementation.

/// sluice: the whole TRANSFER frame, the message encoded in place as its payload
/// (what the engine's `Connection::send_message` does through
/// `Transmit::transfer_frame_message`).
#[inline(always)]
fn sl_encode_transfer(out: &mut BytesMut, perf: &sl::Transfer, msg: &sl::Message) {
    write_frame_with(out, FRAME_TYPE_AMQP, CHANNEL, perf, msg.body_len(), |out| msg.encode(out));
}

fn raw_frame(body: Bytes) -> RawFrame {
    RawFrame { frame_type: FRAME_TYPE_AMQP, channel: CHANNEL, body }
}

/// sluice: frame body -> transfer + payload -> message sections, consuming the frame
/// as the engine does (`RawFrame::into_transfer_in`, the path every TRANSFER frame
/// takes in the engine: the transfer is decoded into a slot that lives across frames,
/// the payload is the body advanced past the performative).
#[inline(always)]
fn sl_decode_transfer(raw: RawFrame, t: &mut sl::Transfer) -> sl::RawMessage {
    let payload = raw.into_transfer_in(t).unwrap();
    sl::RawMessage::parse_owned(payload).unwrap()
}

/// sluice: a FLOW or DISPOSITION frame body -> performative.
#[inline(always)]
fn sl_decode_performative(body: &[u8]) -> sl::Performative {
    sl::Performative::decode_body(body).unwrap().0
}

/// fe2o3: header + performative serialized through a `Serializer` over the
/// frame buffer (as fe2o3-amqp's FrameBodyCodec) + payload; size patched in.
#[inline(always)]
fn fe_write_frame<T: Serialize>(out: &mut BytesMut, perf: &T, payload: &[u8]) {
    let at = out.len();
    out.put_slice(&[0, 0, 0, 0, 2, FRAME_TYPE_AMQP]);
    out.put_u16(CHANNEL);
    {
        let mut ser = serde_amqp::ser::Serializer::new((&mut *out).writer());
        perf.serialize(&mut ser).unwrap();
    }
    out.put_slice(payload);
    let size = (out.len() - at) as u32;
    out[at..at + 4].copy_from_slice(&size.to_be_bytes());
}

#[inline(always)]
fn fe_encode_transfer(out: &mut BytesMut, scratch: &mut BytesMut, perf: &fp::Transfer, msg: &FeMessage) {
    scratch.clear();
    {
        let mut ser = serde_amqp::ser::Serializer::new((&mut *scratch).writer());
        Serializable(msg).serialize(&mut ser).unwrap();
    }
    fe_write_frame(out, perf, scratch);
}

/// fe2o3, cheapest path: `from_slice` of the Transfer, then of the message at an
/// offset known in advance.
#[inline(always)]
fn fe_decode_transfer(body: &[u8], payload_at: usize) -> (fp::Transfer, FeMessage) {
    let t: fp::Transfer = serde_amqp::from_slice(body).unwrap();
    let m: Deserializable<FeMessage> = serde_amqp::from_slice(&body[payload_at..]).unwrap();
    (t, m.0)
}

/// fe2o3 as its frame decoder does it: an IoReader over the body, `Performative`,
/// the unread rest is the payload; then the message.
#[inline(always)]
fn fe_decode_transfer_ioreader(body: &[u8]) -> (fp::Performative, FeMessage) {
    let mut rest = body;
    let p = {
        let mut de = serde_amqp::de::Deserializer::new(serde_amqp::read::IoReader::new(&mut rest));
        fp::Performative::deserialize(&mut de).unwrap()
    };
    let m: Deserializable<FeMessage> = serde_amqp::from_slice(rest).unwrap();
    (p, m.0)
}

// ---------------------------------------------------------------------------
// Start-up checks: both sides encode the same values, each decoder accepts the
// other's bytes.

fn body_of(frame: &[u8]) -> &[u8] {
    assert_eq!(u32::from_be_bytes(frame[..4].try_into().unwrap()) as usize, frame.len());
    &frame[8..]
}

fn cross_check() {
    eprintln!(
        "size_of: sluice Performative {} B (Open {}, Attach {}, Flow {}, Transfer {}, Disposition {}), \
         RawMessage {} B, DecodeError {} B, DecodeResult<Option<u32>> {} B; \
         fe2o3 Performative {} B, Flow {} B, Transfer {} B",
        std::mem::size_of::<sl::Performative>(),
        std::mem::size_of::<sl::Open>(),
        std::mem::size_of::<sl::Attach>(),
        std::mem::size_of::<sl::Flow>(),
        std::mem::size_of::<sl::Transfer>(),
        std::mem::size_of::<sl::Disposition>(),
        std::mem::size_of::<sl::RawMessage>(),
        std::mem::size_of::<sluice_proto::codec::DecodeError>(),
        std::mem::size_of::<sluice_proto::codec::DecodeResult<Option<u32>>>(),
        std::mem::size_of::<fp::Performative>(),
        std::mem::size_of::<fp::Flow>(),
        std::mem::size_of::<fp::Transfer>(),
    );

    // FLOW
    let mut a = BytesMut::new();
    write_frame(&mut a, FRAME_TYPE_AMQP, CHANNEL, &sl::Performative::Flow(sl_flow()), &[]);
    let mut b = BytesMut::new();
    fe_write_frame(&mut b, &fe_flow(), &[]);
    assert_eq!(serde_amqp::from_slice::<fp::Flow>(body_of(&a)).unwrap(), fe_flow());
    let sl_from_fe = sl_decode_performative(body_of(&b));
    let sl::Performative::Flow(f) = &sl_from_fe else { panic!("not a flow") };
    assert_eq!(f.next_incoming_id, Some(1_000));
    assert_eq!(f.link_credit, Some(500));
    assert!(!f.drain());
    // The engine's entry point (what flow_decode/sluice runs) decodes the same FLOW.
    let mut slot = sl::Flow::default();
    assert!(sl::Flow::decode_body_in(body_of(&b), &mut slot));
    assert_eq!(&slot, f);
    eprintln!("FLOW frame: sluice {} B, fe2o3 {} B", a.len(), b.len());

    // DISPOSITION
    let mut a = BytesMut::new();
    write_frame(&mut a, FRAME_TYPE_AMQP, CHANNEL, &sl::Performative::Disposition(sl_disposition()), &[]);
    let mut b = BytesMut::new();
    fe_write_frame(&mut b, &fe_disposition(), &[]);
    assert_eq!(serde_amqp::from_slice::<fp::Disposition>(body_of(&a)).unwrap(), fe_disposition());
    let sl::Performative::Disposition(d) = sl_decode_performative(body_of(&b)) else { panic!("not a disposition") };
    // The engine's entry point (what disposition_decode/sluice runs) decodes the same.
    let mut slot = sl::Disposition::default();
    assert!(sl::Disposition::decode_body_in(body_of(&b), &mut slot));
    assert_eq!(slot, d);
    assert_eq!((d.role, d.first, d.last(), d.settled()), (sl::Role::Receiver, 70_000, 70_063, true));
    assert_eq!(d.state, Some(sl::DeliveryState::Accepted));
    eprintln!("DISPOSITION frame: sluice {} B, fe2o3 {} B", a.len(), b.len());

    // TRANSFER
    let mut a = BytesMut::new();
    sl_encode_transfer(&mut a, &sl_transfer(), &sl_message());
    let sa = sl_message().to_bytes();
    let (mut b, mut sb) = (BytesMut::new(), BytesMut::new());
    fe_encode_transfer(&mut b, &mut sb, &fe_transfer(), &fe_message());
    assert_eq!(sa, sb, "the two message encodings differ");
    eprintln!("TRANSFER frame: sluice {} B, fe2o3 {} B (message {} B)", a.len(), b.len(), sa.len());
    // sluice decodes the fe2o3 frame, fe2o3 decodes the sluice frame.
    let mut t = sl::Transfer::default();
    let m = sl_decode_transfer(raw_frame(Bytes::copy_from_slice(body_of(&b))), &mut t);
    assert_eq!(t, sl_transfer());
    assert_eq!(m.data().unwrap().as_deref(), Some(&PAYLOAD[..]));
    let a_body = body_of(&a);
    let at = a_body.len() - sa.len();
    let (t, m) = fe_decode_transfer(a_body, at);
    assert_eq!((t, m), (fe_transfer(), fe_message()));
    let (p, m) = fe_decode_transfer_ioreader(a_body);
    assert_eq!((p, m), (fp::Performative::Transfer(fe_transfer()), fe_message()));
}

// ---------------------------------------------------------------------------

/// Make a decoded value observable, then drop it (inside the timed region).
///
/// Criterion's `iter` passes the closure's return value through its own
/// `black_box`, a `read_volatile` copy: for sluice's `Performative` (a few hundred
/// bytes) that copy alone costs tens of nanoseconds, which is harness overhead,
/// not codec work. So every closure returns `()` and the value is pinned by
/// reference where it was produced. (A macro, not a function: passing the value to a
/// function moves it once more, a `memcpy` of the whole result that is again the
/// harness's, not the codec's; measured at 4-6 ns for the TRANSFER results.)
macro_rules! consume {
    ($e:expr) => {{
        let v = $e;
        black_box(&v);
    }};
}

fn group<'a>(c: &'a mut Criterion, name: &str) -> BenchmarkGroup<'a, WallTime> {
    let mut g = c.benchmark_group(name);
    g.throughput(Throughput::Elements(1));
    g
}

fn flow(c: &mut Criterion) {
    cross_check();

    let sl_perf = sl::Performative::Flow(sl_flow());
    let fe_perf = fe_flow();

    let mut g = group(c, "flow_encode");
    g.bench_function("sluice", |bch| {
        let mut out = BytesMut::with_capacity(4096);
        bch.iter(|| {
            out.clear();
            write_frame(&mut out, FRAME_TYPE_AMQP, CHANNEL, black_box(&sl_perf), &[]);
            black_box(&out);
        })
    });
    g.bench_function("fe2o3", |bch| {
        let mut out = BytesMut::with_capacity(4096);
        bch.iter(|| {
            out.clear();
            fe_write_frame(&mut out, black_box(&fe_perf), &[]);
            black_box(&out);
        })
    });
    g.finish();

    let mut frame = BytesMut::new();
    write_frame(&mut frame, FRAME_TYPE_AMQP, CHANNEL, &sl_perf, &[]);
    let body = frame.freeze().slice(8..);
    let mut g = group(c, "flow_decode");
    g.bench_function("sluice", |bch| {
        let mut f = sl::Flow::default();
        bch.iter(|| {
            assert!(sl::Flow::decode_body_in(black_box(&body), &mut f));
            black_box(&f);
        })
    });
    g.bench_function("fe2o3", |bch| {
        bch.iter(|| consume!(serde_amqp::from_slice::<fp::Flow>(black_box(&body)).unwrap()))
    });
    g.finish();
}

fn disposition(c: &mut Criterion) {
    let sl_perf = sl::Performative::Disposition(sl_disposition());
    let fe_perf = fe_disposition();

    let mut g = group(c, "disposition_encode");
    g.bench_function("sluice", |bch| {
        let mut out = BytesMut::with_capacity(4096);
        bch.iter(|| {
            out.clear();
            write_frame(&mut out, FRAME_TYPE_AMQP, CHANNEL, black_box(&sl_perf), &[]);
            black_box(&out);
        })
    });
    g.bench_function("fe2o3", |bch| {
        let mut out = BytesMut::with_capacity(4096);
        bch.iter(|| {
            out.clear();
            fe_write_frame(&mut out, black_box(&fe_perf), &[]);
            black_box(&out);
        })
    });
    g.finish();

    let mut frame = BytesMut::new();
    write_frame(&mut frame, FRAME_TYPE_AMQP, CHANNEL, &sl_perf, &[]);
    let body = frame.freeze().slice(8..);
    let mut g = group(c, "disposition_decode");
    g.bench_function("sluice", |bch| {
        let mut d = sl::Disposition::default();
        bch.iter(|| {
            assert!(sl::Disposition::decode_body_in(black_box(&body), &mut d));
            black_box(&d);
        })
    });
    g.bench_function("fe2o3", |bch| {
        bch.iter(|| consume!(serde_amqp::from_slice::<fp::Disposition>(black_box(&body)).unwrap()))
    });
    g.finish();
}

fn transfer(c: &mut Criterion) {
    let sl_perf = sl_transfer();
    let sl_msg = sl_message();
    let fe_perf = fe_transfer();
    let fe_msg = fe_message();

    let mut g = group(c, "transfer_encode");
    g.bench_function("sluice", |bch| {
        let mut out = BytesMut::with_capacity(4096);
        bch.iter(|| {
            out.clear();
            sl_encode_transfer(&mut out, black_box(&sl_perf), black_box(&sl_msg));
            black_box(&out);
        })
    });
    g.bench_function("fe2o3", |bch| {
        let mut out = BytesMut::with_capacity(4096);
        let mut scratch = BytesMut::with_capacity(4096);
        bch.iter(|| {
            out.clear();
            fe_encode_transfer(&mut out, &mut scratch, black_box(&fe_perf), black_box(&fe_msg));
            black_box(&out);
        })
    });
    g.finish();

    // Decode from the sluice-encoded frame (the encodings are cross-checked above).
    let mut frame = BytesMut::new();
    sl_encode_transfer(&mut frame, &sl_perf, &sl_msg);
    let body = frame.freeze().slice(8..);
    let payload_at = body.len() - sl_msg.to_bytes().len();
    let raw = raw_frame(body.clone());
    let mut g = group(c, "transfer_decode");
    // The frame is cloned (one reference count) because decoding consumes it.
    g.bench_function("sluice", |bch| {
        let mut t = sl::Transfer::default();
        bch.iter(|| {
            consume!(sl_decode_transfer(black_box(&raw).clone(), &mut t));
            black_box(&t);
        })
    });
    g.bench_function("fe2o3", |bch| bch.iter(|| consume!(fe_decode_transfer(black_box(&body), black_box(payload_at)))));
    g.bench_function("fe2o3_ioreader", |bch| bch.iter(|| consume!(fe_decode_transfer_ioreader(black_box(&body)))));
    g.finish();

    let mut g = group(c, "transfer_roundtrip");
    g.bench_function("sluice", |bch| {
        let mut out = BytesMut::with_capacity(4096);
        let mut t = sl::Transfer::default();
        bch.iter(|| {
            out.clear();
            sl_encode_transfer(&mut out, black_box(&sl_perf), black_box(&sl_msg));
            // The written frame becomes a `Bytes` without copying, its header
            // stepped over as the deframer does; its memory is reclaimed by `out`
            // on the next iteration once the frame is dropped.
            let mut frame = out.split().freeze();
            frame.advance(8);
            let raw = raw_frame(frame);
            consume!(sl_decode_transfer(black_box(raw), &mut t));
            black_box(&t);
        })
    });
    g.bench_function("fe2o3", |bch| {
        let mut out = BytesMut::with_capacity(4096);
        let mut scratch = BytesMut::with_capacity(4096);
        bch.iter(|| {
            out.clear();
            fe_encode_transfer(&mut out, &mut scratch, black_box(&fe_perf), black_box(&fe_msg));
            let body = black_box(&out[8..]);
            let payload_at = body.len() - scratch.len();
            consume!(fe_decode_transfer(body, payload_at))
        })
    });
    g.finish();
}

criterion_group!(benches, flow, disposition, transfer);
criterion_main!(benches);

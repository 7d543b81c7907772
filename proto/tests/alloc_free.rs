//! Decoding the hot-path performatives (FLOW, TRANSFER, DISPOSITION) performs no
//! heap allocation.
//!
//! A counting global allocator wraps the system allocator. Counting is switched
//! on per thread, so allocations made concurrently by the test harness's other
//! threads are not counted.
#![allow(unsafe_code)] // implementing GlobalAlloc requires it; this file only
#![allow(clippy::unwrap_used, clippy::expect_used)]

use sluice_proto::codec::{Decode, Decoder, Encode, Fields, Symbol, Value};
use sluice_proto::frame::{RawFrame, FRAME_TYPE_AMQP};
use sluice_proto::types::{
    DeliveryState, DeliveryTag, Disposition, Flow, Performative, Received, ReceiverSettleMode, Role, Transfer,
};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::hint::black_box;

struct CountingAllocator;

thread_local! {
    static COUNTING: Cell<bool> = const { Cell::new(false) };
    // Per thread: tests run in parallel and must not see each other's allocations.
    static ALLOCATIONS: Cell<usize> = const { Cell::new(0) };
}

fn note_allocation() {
    // try_with: the thread-local may already be gone while a thread exits.
    if COUNTING.try_with(Cell::get).unwrap_or(false) {
        let _ = ALLOCATIONS.try_with(|a| a.set(a.get() + 1));
    }
}

// SAFETY: every method forwards to `System` with the caller's arguments unchanged;
// the counting touches only an atomic and a const-initialised thread-local, and
// never allocates.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note_allocation();
        // SAFETY: forwarded contract.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note_allocation();
        // SAFETY: forwarded contract.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note_allocation();
        // SAFETY: forwarded contract.
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded contract.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: CountingAllocator = CountingAllocator;

/// Heap allocations made by `f` on this thread.
fn allocations_during(f: impl FnOnce()) -> usize {
    let before = ALLOCATIONS.with(Cell::get);
    COUNTING.with(|c| c.set(true));
    f();
    COUNTING.with(|c| c.set(false));
    ALLOCATIONS.with(Cell::get) - before
}

const ROUNDS: usize = 1000;

/// A FLOW with every field set except properties.
fn full_flow() -> Flow {
    Flow {
        next_incoming_id: Some(1),
        incoming_window: 2048,
        next_outgoing_id: 70_000,
        outgoing_window: u32::MAX,
        handle: Some(3),
        delivery_count: Some(1_000_000),
        link_credit: Some(100),
        available: Some(0),
        drain: Some(true),
        echo: Some(false),
        properties: None,
    }
}

#[test]
fn the_counter_sees_allocations() {
    // Guards against a counter that never counts (which would make the tests
    // below pass vacuously): a FLOW whose properties hold a symbol key and a
    // string value must allocate while decoding.
    let n = allocations_during(|| {
        black_box(vec![1u8; 64]);
    });
    assert!(n >= 1);
    let flow = Flow { properties: Some(Fields(vec![(Symbol::new("k"), Value::string("v"))])), ..full_flow() };
    let wire = flow.to_bytes().freeze();
    let n = allocations_during(|| {
        black_box(Flow::decode(&mut Decoder::new(black_box(&wire[..]))).unwrap());
    });
    assert!(n >= 2, "only {n} allocations counted for a FLOW with properties");
}

#[test]
fn flow_decode_does_not_allocate() {
    let flow = full_flow();
    let wire = flow.to_bytes().freeze(); // encoded once, before counting starts
    let mut slot = Flow::default();
    let n = allocations_during(|| {
        for _ in 0..ROUNDS {
            let mut d = Decoder::new(black_box(&wire[..]));
            let p = Performative::decode(&mut d).unwrap();
            assert!(matches!(&p, Performative::Flow(f) if f.link_credit == Some(100)));
            black_box(p);
            let mut d = Decoder::new(black_box(&wire[..]));
            let f = Flow::decode(&mut d).unwrap();
            assert_eq!(f.delivery_count, Some(1_000_000));
            black_box(f);
            // What RawFrame::into_amqp calls for every frame.
            let (p, at) = Performative::decode_body(black_box(&wire[..])).unwrap();
            assert_eq!(at, wire.len());
            black_box(p);
            // What the engine's RawFrame::flow_in calls for every FLOW in its usual shape.
            assert!(Flow::decode_body_in(black_box(&wire[..]), &mut slot));
            assert_eq!(slot.link_credit, Some(100));
            black_box(&slot);
        }
    });
    assert_eq!(n, 0, "{n} allocations in {ROUNDS} x 4 FLOW decodes");
    // (checked after counting: the comparison's Debug formatting may allocate)
    assert_eq!(Flow::decode_exact(&wire).unwrap(), flow);
}

#[test]
fn flow_with_a_symbolic_descriptor_decodes_without_allocating() {
    let mut wire = vec![0x00, 0xa3, 14];
    wire.extend_from_slice(b"amqp:flow:list");
    wire.extend_from_slice(&full_flow().to_bytes()[3..]); // the list after `00 53 13`
    let n = allocations_during(|| {
        for _ in 0..ROUNDS {
            black_box(Performative::decode(&mut Decoder::new(black_box(&wire[..]))).unwrap());
        }
    });
    assert_eq!(n, 0);
    assert_eq!(Performative::decode_exact(&wire).unwrap(), Performative::Flow(full_flow()));
}

#[test]
fn transfer_decode_does_not_allocate() {
    let transfers = [
        // 32-byte tag (the inline maximum), received state
        Transfer {
            handle: 7,
            delivery_id: Some(123_456),
            delivery_tag: Some(DeliveryTag::from_slice(&[0xab; 32]).unwrap()),
            message_format: Some(0),
            settled: Some(false),
            more: Some(true),
            rcv_settle_mode: Some(ReceiverSettleMode::Second),
            state: Some(DeliveryState::Received(Received { section_number: 2, section_offset: 1 << 40 })),
            resume: Some(true),
            aborted: Some(false),
            batchable: Some(true),
        },
        // the common case: 8-byte tag, pre-settled, accepted
        Transfer {
            handle: 0,
            delivery_id: Some(9),
            delivery_tag: Some(DeliveryTag::from_u64(9)),
            message_format: Some(0),
            settled: Some(true),
            state: Some(DeliveryState::Accepted),
            ..Default::default()
        },
    ];
    for t in transfers {
        // Followed by a payload, as in a frame body.
        let mut wire = t.to_bytes();
        let end = wire.len();
        wire.extend_from_slice(&[0x00, 0x53, 0x75, 0xa0, 0x02, b'h', b'i']);
        let wire = wire.freeze();
        let mut slot = Transfer::default();
        let n = allocations_during(|| {
            for _ in 0..ROUNDS {
                let mut d = Decoder::new(black_box(&wire[..]));
                let p = Performative::decode(&mut d).unwrap();
                assert_eq!(d.position(), end);
                black_box(p);
                let mut d = Decoder::new(black_box(&wire[..]));
                black_box(Transfer::decode(&mut d).unwrap());
                // The engine's path: the frame body straight to a Transfer.
                let frame = RawFrame { frame_type: FRAME_TYPE_AMQP, channel: 0, body: wire.clone() };
                let taken = match black_box(frame).into_transfer() {
                    Ok((t, payload)) => black_box((t, payload.len())).1,
                    Err(f) => black_box(f.into_amqp().unwrap()).payload.len(),
                };
                assert_eq!(taken, wire.len() - end);
                // The same into the engine's reused slot.
                let frame = RawFrame { frame_type: FRAME_TYPE_AMQP, channel: 0, body: wire.clone() };
                if let Ok(payload) = black_box(frame).into_transfer_in(&mut slot) {
                    assert_eq!(payload.len(), wire.len() - end);
                    assert_eq!(black_box(&slot), &t);
                }
            }
        });
        assert_eq!(n, 0, "{n} allocations in {ROUNDS} x 4 TRANSFER decodes");
        let mut d = Decoder::new(&wire);
        assert_eq!(Transfer::decode(&mut d).unwrap(), t);
    }
}

#[test]
fn disposition_decode_does_not_allocate() {
    let disposition = Disposition {
        role: Role::Receiver,
        first: 10,
        last: Some(1000),
        settled: Some(true),
        state: Some(DeliveryState::Released),
        batchable: Some(false),
    };
    let wire = disposition.to_bytes().freeze();
    let mut slot = Disposition::default();
    let n = allocations_during(|| {
        for _ in 0..ROUNDS {
            black_box(Performative::decode(&mut Decoder::new(black_box(&wire[..]))).unwrap());
            // What the engine's RawFrame::disposition_in calls for every DISPOSITION in
            // its usual shape.
            assert!(Disposition::decode_body_in(black_box(&wire[..]), &mut slot));
            assert_eq!(slot.last, Some(1000));
            black_box(&slot);
        }
    });
    assert_eq!(n, 0);
    assert_eq!(Disposition::decode_exact(&wire).unwrap(), disposition);
}

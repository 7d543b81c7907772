//! A third-party Rust AMQP 1.0 client, fe2o3-amqp (on tokio), against the real broker
//! binary: queues at-least-once, events fan-out, events-store replay from a start
//! position, an RPC round trip, a refused attach, and the drain. Nothing of sluice's own
//! client is used; the broker is reached over loopback like any client would.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::Broker;
use fe2o3_amqp::connection::ConnectionHandle;
use fe2o3_amqp::link::receiver::CreditMode;
use fe2o3_amqp::session::SessionHandle;
use fe2o3_amqp::types::definitions::{Fields, SenderSettleMode};
use fe2o3_amqp::types::messaging::{Message, MessageId, Properties};
use fe2o3_amqp::types::primitives::{Symbol, Value};
use fe2o3_amqp::{Connection, Delivery, Receiver, Sender, Session};
use std::time::{Duration, Instant};

const WAIT: Duration = Duration::from_secs(10);

async fn open(b: &Broker, id: &str) -> (ConnectionHandle<()>, SessionHandle<()>) {
    let url = format!("amqp://{}", b.addr());
    let mut connection = Connection::open(id.to_owned(), url.as_str()).await.expect("open");
    let session = Session::begin(&mut connection).await.expect("begin");
    (connection, session)
}

async fn recv_text(r: &mut Receiver) -> Delivery<String> {
    tokio::time::timeout(WAIT, r.recv::<String>()).await.expect("a delivery in time").expect("recv")
}

/// The consumers the broker lists for a channel (its subscriptions are placed on
/// the channel's home shard, which may come after the attach reply).
fn wait_consumers(b: &Broker, pattern: &str, channel: &str, n: u64) {
    let deadline = Instant::now() + WAIT;
    loop {
        let (_, body) = b.http("/api/channels").unwrap();
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        let found = v["channels"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["pattern"] == pattern && c["channel"] == channel && c["consumers"].as_u64() == Some(n));
        if found {
            return;
        }
        assert!(Instant::now() < deadline, "{pattern}/{channel} never had {n} consumers: {body}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[tokio::test]
async fn a_queue_round_trip_with_fe2o3() {
    let b = Broker::start(&[]);
    let (mut connection, mut session) = open(&b, "fe2o3-queue").await;
    let mut sender = Sender::attach(&mut session, "q-sender", "queues/fe2o3-q").await.unwrap();
    for i in 0..20 {
        let outcome = sender.send(format!("message {i}")).await.unwrap();
        assert!(outcome.is_accepted(), "{outcome:?}");
    }
    let mut receiver = Receiver::attach(&mut session, "q-receiver", "queues/fe2o3-q").await.unwrap();
    for i in 0..20 {
        let d = recv_text(&mut receiver).await;
        assert_eq!(d.body(), &format!("message {i}"));
        receiver.accept(&d).await.unwrap();
    }
    // Nothing more: a drain is answered at once, and nothing arrives.
    receiver.drain().await.unwrap();
    assert!(tokio::time::timeout(Duration::from_millis(300), receiver.recv::<String>()).await.is_err());
    receiver.close().await.unwrap();
    sender.close().await.unwrap();
    session.end().await.unwrap();
    connection.close().await.unwrap();
}

#[tokio::test]
async fn a_released_queue_message_comes_back_with_fe2o3() {
    let b = Broker::start(&[]);
    let (mut connection, mut session) = open(&b, "fe2o3-release").await;
    let mut sender = Sender::attach(&mut session, "s", "queues/fe2o3-rel").await.unwrap();
    assert!(sender.send("again").await.unwrap().is_accepted());
    let mut receiver = Receiver::builder()
        .name("r")
        .source("queues/fe2o3-rel")
        .credit_mode(CreditMode::Manual)
        .attach(&mut session)
        .await
        .unwrap();
    receiver.set_credit(1).await.unwrap();
    let d = recv_text(&mut receiver).await;
    receiver.release(&d).await.unwrap();
    receiver.set_credit(1).await.unwrap();
    let again = recv_text(&mut receiver).await;
    assert_eq!(again.body(), "again");
    receiver.accept(&again).await.unwrap();
    connection.close().await.unwrap();
}

#[tokio::test]
async fn events_reach_every_subscriber_with_fe2o3() {
    let b = Broker::start(&[]);
    let (mut connection, mut session) = open(&b, "fe2o3-events").await;
    let mut r1 = Receiver::attach(&mut session, "ev-1", "events/fe2o3-ev").await.unwrap();
    let mut r2 = Receiver::attach(&mut session, "ev-2", "events/fe2o3-ev").await.unwrap();
    wait_consumers(&b, "events", "fe2o3-ev", 2);
    let mut sender = Sender::builder()
        .name("ev-sender")
        .target("events/fe2o3-ev")
        .sender_settle_mode(SenderSettleMode::Settled)
        .attach(&mut session)
        .await
        .unwrap();
    for i in 0..10 {
        sender.send(format!("event {i}")).await.unwrap();
    }
    for r in [&mut r1, &mut r2] {
        for i in 0..10 {
            let d = recv_text(r).await;
            assert_eq!(d.body(), &format!("event {i}"));
        }
    }
    connection.close().await.unwrap();
}

#[tokio::test]
async fn an_events_store_replay_from_sequence_3_with_fe2o3() {
    let b = Broker::start(&[]);
    let (mut connection, mut session) = open(&b, "fe2o3-store").await;
    let mut sender = Sender::attach(&mut session, "es-sender", "events-store/fe2o3-es").await.unwrap();
    for i in 1..=5 {
        assert!(sender.send(format!("stored {i}")).await.unwrap().is_accepted());
    }
    let mut props = Fields::new();
    props.insert(Symbol::from("x-opt-kubemq-start"), Value::String("sequence:3".into()));
    let mut r = Receiver::builder()
        .name("es-reader")
        .source("events-store/fe2o3-es")
        .properties(props)
        .attach(&mut session)
        .await
        .unwrap();
    for i in 3..=5 {
        assert_eq!(recv_text(&mut r).await.body(), &format!("stored {i}"));
    }
    connection.close().await.unwrap();
}

#[tokio::test]
async fn a_command_is_answered_with_fe2o3() {
    let b = Broker::start(&[]);
    let (mut connection, mut session) = open(&b, "fe2o3-rpc").await;
    // The responder, answering on the anonymous terminus.
    let mut responder = Receiver::attach(&mut session, "responder", "commands/fe2o3-cmd").await.unwrap();
    // (A request waits for a responder until its deadline: no need to wait here.)
    let mut answers = Sender::builder()
        .name("answers")
        .target(fe2o3_amqp::types::messaging::Target::builder().build())
        .attach(&mut session)
        .await
        .unwrap();
    // The requester: a dynamic node for its replies.
    let mut replies = Receiver::builder()
        .name("replies")
        .source(fe2o3_amqp::types::messaging::Source::builder().dynamic(true).build())
        .attach(&mut session)
        .await
        .unwrap();
    let reply_to = replies.source().as_ref().and_then(|s| s.address.clone()).expect("a dynamic address");
    assert!(reply_to.starts_with("_amqp10.tmp."), "{reply_to}");
    let mut requests = Sender::attach(&mut session, "requests", "commands/fe2o3-cmd").await.unwrap();
    let request = Message::builder()
        .properties(Properties::builder().correlation_id("corr-1".to_owned()).reply_to(reply_to).build())
        .value("do it".to_owned())
        .build();
    assert!(requests.send(request).await.unwrap().is_accepted());
    let d = recv_text(&mut responder).await;
    assert_eq!(d.body(), "do it");
    let props = d.message().properties.clone().expect("request properties");
    let to = props.reply_to.expect("reply-to");
    assert!(to.starts_with("/responses/"), "{to}");
    responder.accept(&d).await.unwrap();
    let answer = Message::builder()
        .properties(Properties::builder().to(to).correlation_id(props.correlation_id.expect("correlation-id")).build())
        .value("done".to_owned())
        .build();
    assert!(answers.send(answer).await.unwrap().is_accepted());
    let reply = recv_text(&mut replies).await;
    assert_eq!(reply.body(), "done");
    let correlation = reply.message().properties.as_ref().and_then(|p| p.correlation_id.clone());
    assert_eq!(correlation, Some(MessageId::from("corr-1".to_owned())));
    connection.close().await.unwrap();
}

#[tokio::test]
async fn a_bad_channel_name_is_refused_with_not_found_and_the_session_goes_on() {
    let b = Broker::start(&[]);
    let (mut connection, mut session) = open(&b, "fe2o3-bad").await;
    let err = Receiver::attach(&mut session, "bad", "queues/a*b").await.unwrap_err();
    // fe2o3 shows the condition as AmqpError(NotFound): amqp:not-found.
    assert!(format!("{err:?}").contains("AmqpError(NotFound)"), "{err:?}");
    let mut sender = Sender::attach(&mut session, "good", "queues/fe2o3-good").await.unwrap();
    assert!(sender.send("still served").await.unwrap().is_accepted());
    connection.close().await.unwrap();
}

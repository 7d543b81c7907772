// Package sluicego drives sluice with go-amqp (github.com/Azure/go-amqp v1.6.0, vendored
// unchanged in tests/third_party/go-amqp), an AMQP 1.0 client written from scratch in Go
// that shares no code with proton, rhea or fe2o3-amqp.
//
// tests/python/test_third_party_suites.py builds and runs these tests against a fresh
// two-shard sluice (GOPATH mode, Debian's Go and the Debian packages of go-amqp's own
// test dependencies; scripts/test.sh installs them), with its addresses in the
// environment: SLUICE_URL (plain AMQP), SLUICE_TLS_URL (its TLS listener, whose server
// and client certificates are in SLUICE_PKI, made by the test's CA) and SLUICE_ADMIN (its
// admin endpoint).
package sluicego

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/Azure/go-amqp"
)

// How long one operation may take before the test fails: generous (the machine is
// shared with the broker and the other tests); nothing is measured against it.
const opTimeout = 10 * time.Second

func url(t *testing.T) string {
	u := os.Getenv("SLUICE_URL")
	if u == "" {
		t.Fatal("SLUICE_URL is not set (the address of the sluice under test)")
	}
	return u
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), opTimeout)
	t.Cleanup(cancel)
	return c
}

func uid(prefix string) string {
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return prefix + "-" + hex.EncodeToString(b)
}

// dial opens a connection and a session, to SLUICE_URL or to `to` when given.
func dial(t *testing.T, opts *amqp.ConnOptions, to ...string) (*amqp.Conn, *amqp.Session) {
	t.Helper()
	addr := url(t)
	if len(to) > 0 {
		addr = to[0]
	}
	c, err := amqp.Dial(ctx(t), addr, opts)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	s, err := c.NewSession(ctx(t), nil)
	if err != nil {
		t.Fatalf("session: %v", err)
	}
	return c, s
}

func sender(t *testing.T, s *amqp.Session, addr string, opts *amqp.SenderOptions) *amqp.Sender {
	t.Helper()
	snd, err := s.NewSender(ctx(t), addr, opts)
	if err != nil {
		t.Fatalf("sender on %q: %v", addr, err)
	}
	return snd
}

func receiver(t *testing.T, s *amqp.Session, addr string, opts *amqp.ReceiverOptions) *amqp.Receiver {
	t.Helper()
	r, err := s.NewReceiver(ctx(t), addr, opts)
	if err != nil {
		t.Fatalf("receiver on %q: %v", addr, err)
	}
	return r
}

// sendNumbered sends the messages whose bodies are the numbers from..to-1, one after
// another, each waited for (its outcome, or its send when pre-settled).
func sendNumbered(t *testing.T, snd *amqp.Sender, from, to int) {
	t.Helper()
	for i := from; i < to; i++ {
		if err := snd.Send(ctx(t), amqp.NewMessage([]byte(fmt.Sprint(i))), nil); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
	}
}

func receive(t *testing.T, r *amqp.Receiver) *amqp.Message {
	t.Helper()
	m, err := r.Receive(ctx(t), nil)
	if err != nil {
		t.Fatalf("receive: %v", err)
	}
	return m
}

func deref(s *string) string {
	if s == nil {
		return "<nil>"
	}
	return *s
}

// subscribed waits until each receiver on an events channel has its credit at the
// broker: go-amqp sends a receiver's first credit from its own goroutine after
// NewReceiver returns, and an event that meets no credit is dropped (the contract). It
// sends probe events (body "probe", with the application properties `props`) until every
// receiver has taken one; receiveEvent steps over any probe that comes later.
func subscribed(t *testing.T, snd *amqp.Sender, props map[string]any, rs ...*amqp.Receiver) {
	t.Helper()
	deadline := time.Now().Add(opTimeout)
	for _, r := range rs {
		for {
			if time.Now().After(deadline) {
				t.Fatal("no probe event reached a subscriber")
			}
			m := amqp.NewMessage([]byte("probe"))
			m.ApplicationProperties = props
			if err := snd.Send(ctx(t), m, nil); err != nil {
				t.Fatal(err)
			}
			c, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			got, err := r.Receive(c, nil)
			cancel()
			if err == nil && string(got.GetData()) == "probe" {
				break
			}
		}
	}
}

// receiveEvent is receive, stepping over probe events.
func receiveEvent(t *testing.T, r *amqp.Receiver) *amqp.Message {
	t.Helper()
	for {
		if m := receive(t, r); string(m.GetData()) != "probe" {
			return m
		}
	}
}

// nothingMore asserts that no message arrives within a short wait (a late probe event
// of subscribed's is stepped over).
func nothingMore(t *testing.T, r *amqp.Receiver) {
	t.Helper()
	for {
		c, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		m, err := r.Receive(c, nil)
		cancel()
		if err != nil {
			return
		}
		if string(m.GetData()) != "probe" {
			t.Fatalf("unexpected message %q", m.GetData())
		}
	}
}

// remoteError is the AMQP error the broker answered with, from whichever of go-amqp's
// error types carries it.
func remoteError(err error) *amqp.Error {
	var e *amqp.Error
	if errors.As(err, &e) {
		return e
	}
	var le *amqp.LinkError
	if errors.As(err, &le) {
		return le.RemoteErr
	}
	var se *amqp.SessionError
	if errors.As(err, &se) {
		return se.RemoteErr
	}
	var ce *amqp.ConnError
	if errors.As(err, &ce) {
		return ce.RemoteErr
	}
	return nil
}

func expectCondition(t *testing.T, err error, cond amqp.ErrCond, descr string) {
	t.Helper()
	if err == nil {
		t.Fatalf("expected %s, got no error", cond)
	}
	e := remoteError(err)
	if e == nil || e.Condition != cond || !strings.Contains(e.Description, descr) {
		t.Fatalf("expected %s containing %q, got %v", cond, descr, err)
	}
}

// A thousand messages through a queue, twenty sends in flight: each is accepted when
// stored, each arrives once with its body and application property, and accepting them
// empties the queue.
func TestQueueAtLeastOnceRoundTrip(t *testing.T) {
	_, s := dial(t, nil)
	addr := "queues/" + uid("go-rt")
	snd := sender(t, s, addr, nil)
	const n = 1000
	var wg sync.WaitGroup
	errs := make(chan error, n)
	inflight := make(chan struct{}, 20)
	for i := 0; i < n; i++ {
		inflight <- struct{}{}
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			defer func() { <-inflight }()
			m := amqp.NewMessage([]byte(fmt.Sprintf("body %d", i)))
			m.ApplicationProperties = map[string]any{"i": int64(i)}
			c, cancel := context.WithTimeout(context.Background(), opTimeout)
			defer cancel()
			if err := snd.Send(c, m, nil); err != nil {
				errs <- fmt.Errorf("send %d: %w", i, err)
			}
		}(i)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	r := receiver(t, s, addr, &amqp.ReceiverOptions{Credit: 10})
	seen := make(map[int64]bool, n)
	for len(seen) < n {
		m := receive(t, r)
		i, ok := m.ApplicationProperties["i"].(int64)
		if !ok {
			t.Fatalf("application property i: %#v", m.ApplicationProperties)
		}
		if seen[i] {
			t.Fatalf("message %d arrived twice", i)
		}
		seen[i] = true
		if got, want := string(m.GetData()), fmt.Sprintf("body %d", i); got != want {
			t.Fatalf("message %d: body %q, want %q", i, got, want)
		}
		if m.DeliveryTag == nil {
			t.Fatalf("message %d: no delivery tag", i)
		}
		if err := r.AcceptMessage(ctx(t), m); err != nil {
			t.Fatalf("accept %d: %v", i, err)
		}
	}
	nothingMore(t, r)
}

// Released and modified (delivery-failed) go back to the queue; each return raises the
// delivery-count (sluice's contract, as the reference's receive count: delivery-count
// is the receive count less one, whatever the outcome); rejected is gone.
func TestQueueOutcomes(t *testing.T) {
	_, s := dial(t, nil)
	addr := "queues/" + uid("go-outcomes")
	snd := sender(t, s, addr, nil)
	if err := snd.Send(ctx(t), amqp.NewMessage([]byte("m")), nil); err != nil {
		t.Fatal(err)
	}
	r := receiver(t, s, addr, &amqp.ReceiverOptions{Credit: 1})
	m := receive(t, r)
	if m.Header == nil || m.Header.DeliveryCount != 0 || !m.Header.FirstAcquirer {
		t.Fatalf("first delivery's header: %+v", m.Header)
	}
	if err := r.ReleaseMessage(ctx(t), m); err != nil {
		t.Fatal(err)
	}
	m = receive(t, r)
	if string(m.GetData()) != "m" || m.Header.DeliveryCount != 1 || m.Header.FirstAcquirer {
		t.Fatalf("after release: %q, header %+v", m.GetData(), m.Header)
	}
	if err := r.ModifyMessage(ctx(t), m, &amqp.ModifyMessageOptions{DeliveryFailed: true}); err != nil {
		t.Fatal(err)
	}
	m = receive(t, r)
	if string(m.GetData()) != "m" || m.Header.DeliveryCount != 2 {
		t.Fatalf("after modified(delivery-failed): %q, header %+v", m.GetData(), m.Header)
	}
	if err := r.RejectMessage(ctx(t), m, nil); err != nil {
		t.Fatal(err)
	}
	nothingMore(t, r)
}

// Messages a receiver held unsettled when its connection went come back to the next
// consumer, marked as redelivered (delivery-count 1).
func TestQueueUnsettledComeBackAfterDisconnect(t *testing.T) {
	addr := "queues/" + uid("go-disconnect")
	c1, s1 := dial(t, nil)
	snd := sender(t, s1, addr, nil)
	sendNumbered(t, snd, 0, 3)
	r1 := receiver(t, s1, addr, &amqp.ReceiverOptions{Credit: 3})
	for i := 0; i < 3; i++ {
		receive(t, r1)
	}
	c1.Close()

	_, s2 := dial(t, nil)
	r2 := receiver(t, s2, addr, &amqp.ReceiverOptions{Credit: 3})
	got := map[string]bool{}
	for i := 0; i < 3; i++ {
		m := receive(t, r2)
		if m.Header == nil || m.Header.DeliveryCount != 1 {
			t.Fatalf("redelivery's header: %+v", m.Header)
		}
		got[string(m.GetData())] = true
		if err := r2.AcceptMessage(ctx(t), m); err != nil {
			t.Fatal(err)
		}
	}
	if len(got) != 3 {
		t.Fatalf("redelivered %v", got)
	}
	nothingMore(t, r2)
}

// A consumer asking for pre-settled deliveries gets more messages than its credit, in
// order, as its credit is renewed.
func TestQueuePresettledConsumerBeyondItsCredit(t *testing.T) {
	_, s := dial(t, nil)
	addr := "queues/" + uid("go-settled")
	snd := sender(t, s, addr, nil)
	const n = 20
	sendNumbered(t, snd, 0, n)
	r := receiver(t, s, addr, &amqp.ReceiverOptions{Credit: 5, RequestedSenderSettleMode: amqp.SenderSettleModeSettled.Ptr()})
	for i := 0; i < n; i++ {
		if got := string(receive(t, r).GetData()); got != fmt.Sprint(i) {
			t.Fatalf("message %d: %q", i, got)
		}
	}
	nothingMore(t, r)
}

// Drain: with manual credit, the broker sends what it has, then answers the drain
// (go-amqp's DrainCredit returns once the FLOW with drain=true and no credit is back),
// and sends nothing more: without the drain, the 7 credits left would take the message
// sent after it.
func TestDrainUsesUpTheCredit(t *testing.T) {
	_, s := dial(t, nil)
	addr := "queues/" + uid("go-drain")
	snd := sender(t, s, addr, nil)
	sendNumbered(t, snd, 0, 3)
	r := receiver(t, s, addr, &amqp.ReceiverOptions{Credit: -1})
	if err := r.IssueCredit(10); err != nil {
		t.Fatal(err)
	}
	// The first message shows the credit went out: go-amqp folds credit still pending
	// into a drain requested before its next FLOW, and drains zero credit.
	m := receive(t, r)
	if err := r.AcceptMessage(ctx(t), m); err != nil {
		t.Fatal(err)
	}
	if err := r.DrainCredit(ctx(t), nil); err != nil {
		t.Fatalf("drain: %v", err)
	}
	for i := 1; i < 3; i++ {
		m := r.Prefetched()
		if m == nil {
			t.Fatalf("only %d of 3 messages arrived before the drain was answered", i)
		}
		if err := r.AcceptMessage(ctx(t), m); err != nil {
			t.Fatal(err)
		}
	}
	if err := snd.Send(ctx(t), amqp.NewMessage([]byte("after")), nil); err != nil {
		t.Fatal(err)
	}
	nothingMore(t, r)
	if err := r.IssueCredit(1); err != nil {
		t.Fatal(err)
	}
	if got := string(receive(t, r).GetData()); got != "after" {
		t.Fatalf("after the drain: %q", got)
	}
}

// Every section and property go-amqp writes comes back as it was written: header,
// annotations, properties, application properties of each type, an amqp-value body and
// a footer.
func TestMessageSectionsPassUnchanged(t *testing.T) {
	_, s := dial(t, nil)
	addr := "queues/" + uid("go-sections")
	snd := sender(t, s, addr, nil)
	subject, ctype, to := "subj", "application/x-test", "somewhere"
	uuid := amqp.UUID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}
	at := time.UnixMilli(1_764_000_000_123).UTC()
	sent := &amqp.Message{
		Header:      &amqp.MessageHeader{Durable: true, Priority: 7, TTL: time.Hour},
		Annotations: amqp.Annotations{"x-opt-go": "annotated"},
		Properties: &amqp.MessageProperties{
			MessageID: uuid, CorrelationID: uint64(42), Subject: &subject,
			ContentType: &ctype, To: &to, CreationTime: &at,
		},
		ApplicationProperties: map[string]any{
			"s": "text", "i64": int64(-5), "u32": uint32(7), "b": true, "f": 2.5,
			"bin": []byte{0, 1, 2}, "t": at, "u": uuid,
		},
		Value:  map[string]any{"k": []any{int64(1), "two", nil}},
		Footer: amqp.Annotations{"x-opt-footer": int64(9)},
	}
	if err := snd.Send(ctx(t), sent, nil); err != nil {
		t.Fatal(err)
	}
	r := receiver(t, s, addr, &amqp.ReceiverOptions{Credit: 1})
	m := receive(t, r)
	if m.Header == nil || !m.Header.Durable || m.Header.Priority != 7 || m.Header.TTL != time.Hour {
		t.Errorf("header: %+v", m.Header)
	}
	if m.Annotations["x-opt-go"] != "annotated" {
		t.Errorf("annotations: %v", m.Annotations)
	}
	p := m.Properties
	if p == nil || p.MessageID != uuid || p.CorrelationID != uint64(42) || deref(p.Subject) != subject ||
		deref(p.ContentType) != ctype || deref(p.To) != to || p.CreationTime == nil || !p.CreationTime.Equal(at) {
		t.Errorf("properties: %+v", p)
	}
	for k, v := range sent.ApplicationProperties {
		got := m.ApplicationProperties[k]
		if tv, ok := v.(time.Time); ok {
			// go-amqp decodes a timestamp in the local time zone.
			if gt, ok := got.(time.Time); !ok || !gt.Equal(tv) {
				t.Errorf("application property %s: %T %v, sent %v", k, got, got, tv)
			}
			continue
		}
		if fmt.Sprintf("%T %v", got, got) != fmt.Sprintf("%T %v", v, v) {
			t.Errorf("application property %s: %T %v, sent %T %v", k, got, got, v, v)
		}
	}
	if fmt.Sprint(m.Value) != fmt.Sprint(sent.Value) {
		t.Errorf("value: %v, sent %v", m.Value, sent.Value)
	}
	if m.Footer["x-opt-footer"] != int64(9) {
		t.Errorf("footer: %v", m.Footer)
	}
	if err := r.AcceptMessage(ctx(t), m); err != nil {
		t.Fatal(err)
	}
}

// Events fan out: each of two subscribers gets every event, in order, pre-settled.
func TestEventsFanOut(t *testing.T) {
	_, s := dial(t, nil)
	addr := "events/" + uid("go-events")
	subs := []*amqp.Receiver{
		receiver(t, s, addr, &amqp.ReceiverOptions{Credit: 100}),
		receiver(t, s, addr, &amqp.ReceiverOptions{Credit: 100}),
	}
	snd := sender(t, s, addr, &amqp.SenderOptions{SettlementMode: amqp.SenderSettleModeSettled.Ptr()})
	subscribed(t, snd, nil, subs...)
	const n = 50
	sendNumbered(t, snd, 0, n)
	for k, r := range subs {
		for i := 0; i < n; i++ {
			if got := string(receiveEvent(t, r).GetData()); got != fmt.Sprint(i) {
				t.Fatalf("subscriber %d, event %d: %q", k, i, got)
			}
		}
	}
}

// Events-store: replay from the first event, and a durable subscription (container-id
// and link name, expiry-policy never) resumes after the events it took.
func TestEventsStoreReplayAndDurableResume(t *testing.T) {
	addr := "events-store/" + uid("go-store")
	_, s := dial(t, nil)
	snd := sender(t, s, addr, nil)
	sendNumbered(t, snd, 0, 5)
	first := receiver(t, s, addr, &amqp.ReceiverOptions{Credit: 10, Properties: map[string]any{"x-opt-kubemq-start": "first"}})
	for i := 0; i < 5; i++ {
		if got := string(receive(t, first).GetData()); got != fmt.Sprint(i) {
			t.Fatalf("replay %d: %q", i, got)
		}
	}

	container := uid("go-container")
	durable := &amqp.ReceiverOptions{
		// The source's expiry-policy (go-amqp's ExpiryPolicy is the target's).
		Credit: 10, Name: "go-durable", SourceExpiryPolicy: amqp.ExpiryPolicyNever,
		Properties: map[string]any{"x-opt-kubemq-start": "first"},
	}
	c1, s1 := dial(t, &amqp.ConnOptions{ContainerID: container})
	r1 := receiver(t, s1, addr, durable)
	for i := 0; i < 5; i++ {
		m := receive(t, r1)
		if err := r1.AcceptMessage(ctx(t), m); err != nil {
			t.Fatal(err)
		}
	}
	if err := r1.Close(ctx(t)); err != nil {
		t.Fatal(err)
	}
	c1.Close()
	sendNumbered(t, snd, 5, 8)
	_, s2 := dial(t, &amqp.ConnOptions{ContainerID: container})
	r2 := receiver(t, s2, addr, durable)
	for i := 5; i < 8; i++ {
		if got := string(receive(t, r2).GetData()); got != fmt.Sprint(i) {
			t.Fatalf("resumed at %q, want %d", got, i)
		}
	}
	nothingMore(t, r2)
}

// A command through a dynamic reply node: the responder replies through the anonymous
// terminus (a null target: go-amqp's empty address) to the request's reply-to, and the
// requester gets the reply with the request's correlation-id.
func TestCommandRoundTripThroughADynamicNode(t *testing.T) {
	ch := "commands/" + uid("go-cmd")
	_, rs := dial(t, nil)
	replies := receiver(t, rs, "", &amqp.ReceiverOptions{Credit: 10, DynamicAddress: true})
	if !strings.HasPrefix(replies.Address(), "_amqp10.tmp.") {
		t.Fatalf("dynamic node address %q", replies.Address())
	}
	_, ps := dial(t, nil)
	inbox := receiver(t, ps, ch, &amqp.ReceiverOptions{Credit: 10})
	answer := sender(t, ps, "", nil)
	requests := sender(t, rs, ch, nil)

	replyTo := replies.Address()
	req := amqp.NewMessage([]byte("do-it"))
	req.Properties = &amqp.MessageProperties{ReplyTo: &replyTo, CorrelationID: "corr-go"}
	if err := requests.Send(ctx(t), req, nil); err != nil {
		t.Fatal(err)
	}
	got := receive(t, inbox)
	if string(got.GetData()) != "do-it" || got.Properties == nil || got.Properties.ReplyTo == nil ||
		!strings.HasPrefix(*got.Properties.ReplyTo, "/responses/") {
		t.Fatalf("request as the responder sees it: %q %+v", got.GetData(), got.Properties)
	}
	if err := inbox.AcceptMessage(ctx(t), got); err != nil {
		t.Fatal(err)
	}
	resp := amqp.NewMessage([]byte("done"))
	resp.Properties = &amqp.MessageProperties{To: got.Properties.ReplyTo, CorrelationID: got.Properties.CorrelationID}
	resp.ApplicationProperties = map[string]any{"x-opt-kubemq-executed": true}
	if err := answer.Send(ctx(t), resp, nil); err != nil {
		t.Fatalf("reply: %v", err)
	}
	reply := receive(t, replies)
	if string(reply.GetData()) != "done" || reply.Properties == nil || reply.Properties.CorrelationID != "corr-go" ||
		reply.ApplicationProperties["x-opt-kubemq-executed"] != true {
		t.Fatalf("reply: %q %+v %v", reply.GetData(), reply.Properties, reply.ApplicationProperties)
	}
}

// What sluice refuses, go-amqp sees with the condition and the reason, and the
// connection goes on serving.
func TestRefusalsReachGoAmqp(t *testing.T) {
	_, s := dial(t, nil)
	_, err := s.NewSender(ctx(t), "queues/with space", nil)
	expectCondition(t, err, amqp.ErrCondNotFound, "whitespace")
	_, err = s.NewReceiver(ctx(t), "nowhere/x", nil)
	expectCondition(t, err, amqp.ErrCondNotFound, "unknown address prefix")
	_, err = s.NewReceiver(ctx(t), "queues/"+uid("go-second"), &amqp.ReceiverOptions{SettlementMode: amqp.ReceiverSettleModeSecond.Ptr()})
	expectCondition(t, err, amqp.ErrCondNotImplemented, "second")
	_, err = s.NewReceiver(ctx(t), "queues/"+uid("go-sel"), &amqp.ReceiverOptions{
		Filters: []amqp.LinkFilter{amqp.NewSelectorFilter("a = 1")},
	})
	expectCondition(t, err, amqp.ErrCondNotImplemented, "selector")
	// Queues are move-only: copy (browsing) is refused, as the reference refuses it.
	_, err = s.NewReceiver(ctx(t), "queues/"+uid("go-copy"), &amqp.ReceiverOptions{
		SourceDistributionMode: amqp.SourceDistributionModeCopy,
	})
	expectCondition(t, err, amqp.ErrCondInvalidField, "distribution-mode copy")

	// An anonymous sender's message without a `to` is rejected; the link stays up.
	anon := sender(t, s, "", nil)
	err = anon.Send(ctx(t), amqp.NewMessage([]byte("x")), nil)
	expectCondition(t, err, amqp.ErrCondPreconditionFailed, "no 'to' address")
	addr := "queues/" + uid("go-after")
	to := addr
	m := amqp.NewMessage([]byte("still here"))
	m.Properties = &amqp.MessageProperties{To: &to}
	if err := anon.Send(ctx(t), m, nil); err != nil {
		t.Fatalf("the anonymous link after a rejection: %v", err)
	}
	r := receiver(t, s, addr, &amqp.ReceiverOptions{Credit: 1})
	if got := string(receive(t, r).GetData()); got != "still here" {
		t.Fatalf("%q", got)
	}
}

// A selector on events: only matching events reach the subscriber.
func TestEventsSelector(t *testing.T) {
	_, s := dial(t, nil)
	addr := "events/" + uid("go-selector")
	r := receiver(t, s, addr, &amqp.ReceiverOptions{Credit: 100, Filters: []amqp.LinkFilter{amqp.NewSelectorFilter("color = 'red'")}})
	snd := sender(t, s, addr, &amqp.SenderOptions{SettlementMode: amqp.SenderSettleModeSettled.Ptr()})
	subscribed(t, snd, map[string]any{"color": "red"}, r)
	for i, color := range []string{"red", "blue", "red", "green"} {
		m := amqp.NewMessage([]byte(fmt.Sprint(i)))
		m.ApplicationProperties = map[string]any{"color": color}
		if err := snd.Send(ctx(t), m, nil); err != nil {
			t.Fatal(err)
		}
	}
	for _, want := range []string{"0", "2"} {
		if got := string(receiveEvent(t, r).GetData()); got != want {
			t.Fatalf("got %q, want %q", got, want)
		}
	}
	nothingMore(t, r)
}

func env(t *testing.T, name string) string {
	v := os.Getenv(name)
	if v == "" {
		t.Fatalf("%s is not set", name)
	}
	return v
}

// tlsConfig trusts the test CA (Go's own TLS stack, not OpenSSL or rustls), with the
// client certificate (CN worker-7) when asked.
func tlsConfig(t *testing.T, clientCert bool) *tls.Config {
	pki := env(t, "SLUICE_PKI")
	ca, err := os.ReadFile(filepath.Join(pki, "ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		t.Fatal("no CA certificate in ca.pem")
	}
	cfg := &tls.Config{RootCAs: pool, ServerName: "localhost", MinVersion: tls.VersionTLS12}
	if clientCert {
		cert, err := tls.LoadX509KeyPair(filepath.Join(pki, "client.pem"), filepath.Join(pki, "client.key"))
		if err != nil {
			t.Fatal(err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg
}

type connInfo struct {
	ContainerID string `json:"container_id"`
	ClientID    string `json:"client_id"`
	SASL        string `json:"sasl"`
	TLS         bool   `json:"tls"`
}

// adminConnection is the broker's view of the connection opened as `container`
// (GET /api/amqp10/connections), asked until it lists it: a shard publishes what it
// lists every 20 ms at most.
func adminConnection(t *testing.T, container string) connInfo {
	t.Helper()
	deadline := time.Now().Add(opTimeout)
	for {
		resp, err := http.Get(env(t, "SLUICE_ADMIN") + "/api/amqp10/connections")
		if err != nil {
			t.Fatal(err)
		}
		var all struct {
			Connections []connInfo `json:"connections"`
		}
		err = json.NewDecoder(resp.Body).Decode(&all)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range all.Connections {
			if c.ContainerID == container {
				return c
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no connection %q in %+v", container, all.Connections)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func roundTripOver(t *testing.T, s *amqp.Session) {
	t.Helper()
	addr := "queues/" + uid("go-tls")
	if err := sender(t, s, addr, nil).Send(ctx(t), amqp.NewMessage([]byte("over tls")), nil); err != nil {
		t.Fatal(err)
	}
	r := receiver(t, s, addr, &amqp.ReceiverOptions{Credit: 1})
	m := receive(t, r)
	if string(m.GetData()) != "over tls" {
		t.Fatalf("%q", m.GetData())
	}
	if err := r.AcceptMessage(ctx(t), m); err != nil {
		t.Fatal(err)
	}
}

// TLS with SASL PLAIN: with authentication off, the username names the client.
func TestTLSWithSASLPlain(t *testing.T) {
	container := uid("go-plain")
	_, s := dial(t, &amqp.ConnOptions{
		ContainerID: container, TLSConfig: tlsConfig(t, false), SASLType: amqp.SASLTypePlain("go-user", "secret"),
	}, env(t, "SLUICE_TLS_URL"))
	roundTripOver(t, s)
	if c := adminConnection(t, container); c.ClientID != "go-user" || c.SASL != "plain" || !c.TLS {
		t.Fatalf("the broker's view: %+v", c)
	}
}

// TLS with a client certificate and SASL EXTERNAL: the certificate's CN names the client.
func TestTLSWithSASLExternal(t *testing.T) {
	container := uid("go-external")
	_, s := dial(t, &amqp.ConnOptions{
		ContainerID: container, TLSConfig: tlsConfig(t, true), SASLType: amqp.SASLTypeExternal(""),
	}, env(t, "SLUICE_TLS_URL"))
	roundTripOver(t, s)
	if c := adminConnection(t, container); c.ClientID != "worker-7" || c.SASL != "external" || !c.TLS {
		t.Fatalf("the broker's view: %+v", c)
	}
}

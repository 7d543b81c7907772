//! The audit log lines of `sluice::auth`, in a test binary of their own.
//!
//! tracing caches each callsite's interest process-wide. In the lib's test binary, other tests
//! run on other threads and hit the same `audit` callsites while this test's scoped subscriber is
//! being installed, which is the likeliest reason about 1 run in 50 lost the `auth.failure` line
//! there. Alone in its binary, the test has no other thread to race with.

use sluice::auth::{audit_failure, audit_success, AuthError, Identity, Mechanism};

#[test]
fn audit_lines_are_structured() {
    use std::io::Write;
    use std::sync::{Arc, Mutex};
    #[derive(Clone, Default)]
    struct Buf(Arc<Mutex<Vec<u8>>>);
    impl Write for Buf {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let buf = Buf::default();
    let writer = buf.clone();
    let subscriber = tracing_subscriber::fmt().json().with_writer(move || writer.clone()).finish();
    tracing::subscriber::with_default(subscriber, || {
        let id = Identity {
            client_id: "order-service".into(),
            mechanism: Mechanism::Anonymous,
            expires_at: None,
            username: Some("bob".into()),
        };
        audit_success(&id, "10.0.0.1");
        audit_failure("EXTERNAL", "10.0.0.2", &AuthError::EmptyCommonName);
    });
    let out = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
    let lines: Vec<serde_json::Value> = out.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), 2, "{out}");
    assert_eq!(lines[0]["target"], "audit");
    let f = &lines[0]["fields"];
    assert_eq!(f["event"], "auth.success");
    assert_eq!(f["client_id"], "order-service");
    assert_eq!(f["transport"], "amqp10");
    assert_eq!(f["source_ip"], "10.0.0.1");
    assert_eq!(f["mechanism"], "anonymous");
    assert_eq!(f["username"], "bob");
    let f = &lines[1]["fields"];
    assert_eq!(f["event"], "auth.failure");
    assert_eq!(f["mechanism"], "external");
    assert_eq!(f["error"], "empty certificate common name");
}

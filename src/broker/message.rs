//! What the broker reads from and rewrites in a message. Sections it does not
//! touch are copied as they came.

use super::selector::{SelectorSource, SelectorValue, TooLong};
use bytes::{Bytes, BytesMut};
use sluice_proto::codec::{Encode, Value};
use sluice_proto::types::messaging::BodyKind;
use sluice_proto::types::{Header, Properties, RawMessage};

/// A produced message that failed the broker's checks: (condition, description).
pub type Refusal = (&'static str, String);

/// Parse an incoming message; AmqpSequence bodies are refused.
pub fn check(payload: Bytes) -> Result<RawMessage, Refusal> {
    let raw = RawMessage::parse_owned(payload).map_err(|e| ("amqp:decode-error", format!("invalid message: {e}")))?;
    if raw.body_kind == BodyKind::AmqpSequence {
        return Err(("amqp:not-implemented", "amqp-sequence bodies are not supported".into()));
    }
    Ok(raw)
}

/// The message re-encoded with a header that says how often it was delivered
/// (queues: delivery-count = receive count - 1, first-acquirer only on the first).
pub fn with_delivery_header(payload: &Bytes, receive_count: u32) -> Bytes {
    let Ok(raw) = RawMessage::parse(payload) else { return payload.clone() };
    let mut header = raw.header().ok().flatten().unwrap_or_default();
    let count = receive_count.saturating_sub(1);
    header.delivery_count = (count > 0).then_some(count);
    header.first_acquirer = Some(receive_count <= 1);
    let mut out = BytesMut::with_capacity(payload.len() + 16);
    raw.encode_with_header(&header, &mut out);
    exact(out)
}

/// A rewritten message as `Bytes` of exactly its length (the spare room is given
/// back in place): such a `Bytes` needs no separate reference-count allocation, and
/// dropping it, the usual fate of a delivery once written, frees the buffer without
/// an atomic update. (`freeze` of a buffer with spare room allocates that count.)
fn exact(out: BytesMut) -> Bytes {
    Bytes::from(Vec::from(out).into_boxed_slice())
}

/// The message with one more message-annotation (replacing one of the same key). The
/// others are copied as they came, not decoded: an annotation's value may be anything,
/// and decoded, a list of nulls costs 40 times its size (a 100 MiB event, 4 GB).
/// Annotations that do not parse are dropped (as they were when they were decoded).
pub fn with_annotation(payload: &Bytes, key: &str, value: Value) -> Bytes {
    let Ok(raw) = RawMessage::parse(payload) else { return payload.clone() };
    let mut out = BytesMut::with_capacity(payload.len() + 48);
    for s in [raw.header_section(), raw.delivery_annotations_section()].into_iter().flatten() {
        out.extend_from_slice(s);
    }
    sluice_proto::codec::put_descriptor(&mut out, 0x72);
    let at = sluice_proto::codec::begin_map(&mut out);
    let before = out.len();
    let kept = raw.message_annotations_section().map_or(Ok(0), |s| other_annotations(s, key, &mut out));
    let kept = kept.unwrap_or_else(|_| {
        out.truncate(before);
        0
    });
    Value::symbol(key).encode(&mut out);
    value.encode(&mut out);
    sluice_proto::codec::end_map(&mut out, at, kept + 1);
    for s in [raw.properties_section(), raw.application_properties_section()].into_iter().flatten() {
        out.extend_from_slice(s);
    }
    out.extend_from_slice(raw.body_bytes());
    if let Some(f) = raw.footer_section() {
        out.extend_from_slice(f);
    }
    exact(out)
}

/// Append the entries of the encoded message-annotations `section` whose key is not
/// `key` to `out`, as they are encoded (each value skipped, not decoded); how many.
fn other_annotations(section: &[u8], key: &str, out: &mut BytesMut) -> sluice_proto::codec::DecodeResult<u32> {
    use sluice_proto::codec::format;
    let mut d = sluice_proto::types::messaging::section_value(section)?;
    let c = d.byte()?;
    let (n, mut m) = d.map_header(c)?;
    let mut kept = 0;
    for _ in 0..n {
        let entry = m.rest();
        let k = m.rest();
        m.skip_value()?;
        let k = &k[..k.len() - m.rest().len()];
        m.skip_value()?;
        let entry = &entry[..entry.len() - m.rest().len()];
        let name = match k.first() {
            Some(&(format::SYM8 | format::STR8)) => k.get(2..),
            Some(&(format::SYM32 | format::STR32)) => k.get(5..),
            _ => None,
        };
        if name != Some(key.as_bytes()) {
            out.extend_from_slice(entry);
            kept += 1;
        }
    }
    Ok(kept)
}

/// Rebuild a message with new properties and extra application-properties.
pub fn rebuild(raw: &RawMessage, properties: &Properties, extra: &[(&str, Value)], keep_body: bool) -> Bytes {
    let mut out = BytesMut::with_capacity(raw.encoded_len() + 64);
    for s in [raw.header_section(), raw.delivery_annotations_section(), raw.message_annotations_section()]
        .into_iter()
        .flatten()
    {
        out.extend_from_slice(s);
    }
    properties.encode(&mut out);
    let section = raw.application_properties_section();
    // Decoded only to add `extra`: with nothing to add, or values that do not decode
    // (not simple types, more than the limit; decoded, they could cost many times their
    // size), the message's own are copied as they came (without `extra`).
    match (section, (!extra.is_empty()).then(|| raw.application_properties())) {
        (Some(s), None | Some(Err(_))) => out.extend_from_slice(s),
        (_, app) => {
            // In their order, less those `extra` replaces, then `extra`: encoded
            // straight from the decoded map (no copy of it).
            let app = app.and_then(Result::ok).flatten().unwrap_or_default();
            let kept = || app.iter().filter(|(name, _)| !extra.iter().any(|(k, _)| name == k));
            let count = kept().count() + extra.len();
            if count > 0 {
                sluice_proto::codec::put_descriptor(&mut out, 0x74);
                let at = sluice_proto::codec::begin_map(&mut out);
                for (k, v) in kept() {
                    k.as_str().encode(&mut out);
                    v.encode(&mut out);
                }
                for (k, v) in extra {
                    (*k).encode(&mut out);
                    v.encode(&mut out);
                }
                sluice_proto::codec::end_map(&mut out, at, count as u32);
            }
        }
    }
    if keep_body {
        out.extend_from_slice(raw.body_bytes());
    }
    if let Some(f) = raw.footer_section() {
        out.extend_from_slice(f);
    }
    exact(out)
}

/// The properties section, or an empty one.
pub fn properties(raw: &RawMessage) -> Properties {
    raw.properties().ok().flatten().unwrap_or_default()
}

/// The header section, or an empty one.
pub fn header(raw: &RawMessage) -> Header {
    raw.header().ok().flatten().unwrap_or_default()
}

/// A string application-property.
pub fn app_property(raw: &RawMessage, name: &str) -> Option<Value> {
    raw.application_properties().ok().flatten()?.into_iter().find(|(k, _)| k == name).map(|(_, v)| v)
}

#[cfg(test)]
thread_local! {
    /// Selector views built on this thread (tests count the parses).
    pub(crate) static VIEWS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    /// Property names compared by lookups (tests of their cost).
    static NAME_COMPARISONS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// The fields a selector can see: application-properties and the JMS header names.
#[derive(Debug)]
pub struct SelectorView {
    raw: RawMessage,
    props: Option<Properties>,
    header: Option<Header>,
    app: Vec<(String, Value)>,
    /// Positions in `app` sorted by name (first occurrence first), built at the first
    /// lookup when there are more than [`SCAN_MAX`]: a lookup costs log n comparisons,
    /// not n (before, each identifier of each evaluation scanned every property).
    by_name: std::cell::OnceCell<Vec<u32>>,
}

/// Application properties a lookup scans one by one; above it, they are indexed.
const SCAN_MAX: usize = 16;

impl SelectorView {
    /// A view of `payload` (a message that failed to parse shows nothing).
    pub fn new(payload: &Bytes) -> Self {
        #[cfg(test)]
        VIEWS.with(|n| n.set(n.get() + 1));
        let raw = RawMessage::parse(payload).unwrap_or_default();
        let props = raw.properties().ok().flatten();
        let header = raw.header().ok().flatten();
        let app = raw.application_properties().ok().flatten().unwrap_or_default();
        SelectorView { raw, props, header, app, by_name: Default::default() }
    }

    /// The first application property named `name`.
    fn app_value(&self, name: &str) -> Option<&Value> {
        if self.app.len() <= SCAN_MAX {
            return self
                .app
                .iter()
                .find(|(k, _)| {
                    #[cfg(test)]
                    NAME_COMPARISONS.with(|n| n.set(n.get() + 1));
                    k == name
                })
                .map(|(_, v)| v);
        }
        let by_name = self.by_name.get_or_init(|| {
            let mut v: Vec<u32> = (0..self.app.len() as u32).collect();
            // Stable: equal names keep their order, so the first one wins as before.
            v.sort_by(|a, b| self.app[*a as usize].0.cmp(&self.app[*b as usize].0));
            v
        });
        let at = by_name.partition_point(|i| {
            #[cfg(test)]
            NAME_COMPARISONS.with(|n| n.set(n.get() + 1));
            self.app[*i as usize].0.as_str() < name
        });
        let (k, v) = &self.app[*by_name.get(at)? as usize];
        (k == name).then_some(v)
    }

    /// The underlying message.
    pub fn raw(&self) -> &RawMessage {
        &self.raw
    }
}

/// The longest string property (in bytes) a selector sees.
pub const SELECTOR_MAX_STRING: usize = 1 << 20;

fn to_selector_value(v: &Value) -> Option<SelectorValue> {
    Some(match v {
        Value::Bool(b) => SelectorValue::Bool(*b),
        Value::Ubyte(x) => SelectorValue::Int(*x as i64),
        Value::Ushort(x) => SelectorValue::Int(*x as i64),
        Value::Uint(x) => SelectorValue::Int(*x as i64),
        Value::Ulong(x) => SelectorValue::Int(i64::try_from(*x).ok()?),
        Value::Byte(x) => SelectorValue::Int(*x as i64),
        Value::Short(x) => SelectorValue::Int(*x as i64),
        Value::Int(x) => SelectorValue::Int(*x as i64),
        Value::Long(x) => SelectorValue::Int(*x),
        Value::Timestamp(t) => SelectorValue::Int(t.0),
        Value::Float(x) => SelectorValue::Float(*x as f64),
        Value::Double(x) => SelectorValue::Float(*x),
        // Longer strings are out of a selector's reach (missing: unknown), so one
        // evaluation costs bounded memory.
        Value::String(s) if s.len() > SELECTOR_MAX_STRING => return None,
        Value::Symbol(s) if s.as_str().len() > SELECTOR_MAX_STRING => return None,
        Value::String(s) => SelectorValue::Str(s.clone()),
        Value::Symbol(s) => SelectorValue::Str(s.as_str().to_owned()),
        Value::Char(c) => SelectorValue::Str(c.to_string()),
        Value::Uuid(u) => SelectorValue::Str(uuid_string(&u.0)),
        _ => return None,
    })
}

/// RFC 4122 text of 16 bytes.
pub fn uuid_string(b: &[u8; 16]) -> String {
    let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!("{}-{}-{}-{}-{}", &h[0..8], &h[8..12], &h[12..16], &h[16..20], &h[20..32])
}

/// Where an identifier's value is in the message, before anything is copied: the
/// selector's budget is charged by its length (`str_len`), then it is read once
/// (`into_value`).
enum Field<'a> {
    /// A message-id, correlation-id or application property as it decoded.
    Value(&'a Value),
    /// A header string (JMSType, JMSDestination, JMSReplyTo, JMSXGroupID).
    Text(&'a str),
    /// The user-id's bytes (read as UTF-8, lossily).
    UserId(&'a [u8]),
    /// A value made from the header (numbers, the delivery mode).
    Made(SelectorValue),
}

impl Field<'_> {
    /// The length of the string it gives, in bytes as stored; None for a value that
    /// is not a string, or one too long to be seen (past [`SELECTOR_MAX_STRING`] it is
    /// missing, and costs nothing).
    fn str_len(&self) -> Option<usize> {
        let n = match self {
            Field::Value(Value::String(s)) => s.len(),
            Field::Value(Value::Symbol(s)) => s.as_str().len(),
            Field::Text(s) => s.len(),
            Field::UserId(u) => u.len(),
            _ => return None,
        };
        (n <= SELECTOR_MAX_STRING).then_some(n)
    }

    /// The value selectors see. Strings longer than [`SELECTOR_MAX_STRING`] are missing,
    /// header strings as properties are (before 2026-12-06 header strings of any length
    /// were copied for each evaluation).
    fn into_value(self) -> Option<SelectorValue> {
        match self {
            Field::Value(v) => to_selector_value(v),
            Field::Text(s) => (s.len() <= SELECTOR_MAX_STRING).then(|| SelectorValue::Str(s.to_owned())),
            Field::UserId(u) => {
                (u.len() <= SELECTOR_MAX_STRING).then(|| SelectorValue::Str(String::from_utf8_lossy(u).into_owned()))
            }
            Field::Made(v) => Some(v),
        }
    }
}

impl SelectorView {
    /// Where `identifier`'s value is: application-properties by name, plus the JMS
    /// header identifiers.
    fn field(&self, identifier: &str) -> Option<Field<'_>> {
        let p = self.props.as_ref();
        let h = self.header.as_ref();
        Some(match identifier {
            "JMSMessageID" => Field::Value(p?.message_id.as_ref()?),
            "JMSCorrelationID" => Field::Value(p?.correlation_id.as_ref()?),
            "JMSType" => Field::Text(p?.subject.as_deref()?),
            "JMSDestination" => Field::Text(p?.to.as_deref()?),
            "JMSReplyTo" => Field::Text(p?.reply_to.as_deref()?),
            "JMSTimestamp" => Field::Made(SelectorValue::Int(p?.creation_time?.0)),
            "JMSExpiration" => Field::Made(SelectorValue::Int(p?.absolute_expiry_time?.0)),
            "JMSPriority" => Field::Made(SelectorValue::Int(h.and_then(|h| h.priority).unwrap_or(4) as i64)),
            "JMSDeliveryMode" => Field::Made(SelectorValue::Str(
                if h.and_then(|h| h.durable).unwrap_or(false) { "PERSISTENT" } else { "NON_PERSISTENT" }.into(),
            )),
            "JMSXGroupID" => Field::Text(p?.group_id.as_deref()?),
            "JMSXGroupSeq" => Field::Made(SelectorValue::Int(p?.group_sequence? as i64)),
            "JMSXUserID" => Field::UserId(p?.user_id.as_deref()?),
            name => Field::Value(self.app_value(name)?),
        })
    }
}

impl SelectorSource for SelectorView {
    fn get(&self, identifier: &str) -> Option<SelectorValue> {
        self.field(identifier)?.into_value()
    }

    /// One lookup: the length is known before the copy.
    fn get_within(&self, identifier: &str, max: usize) -> Result<Option<SelectorValue>, TooLong> {
        let Some(f) = self.field(identifier) else { return Ok(None) };
        if f.str_len().is_some_and(|n| n > max) {
            return Err(TooLong);
        }
        Ok(f.into_value())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::broker::selector::{SelectorSource, SelectorValue, TooLong};
    use sluice_proto::codec::Encode;
    use sluice_proto::types::{Body, Message};

    /// One annotation added to a message's others, which are copied as they came: an
    /// earlier value of the same key goes, a list of a million nulls and a string that
    /// is not UTF-8 (which no decoder accepts) stay byte for byte, in their order.
    /// Before, the annotations were decoded (the list: 40 MB) and, as the string did not
    /// decode, all of them were dropped.
    #[test]
    fn an_added_annotation_leaves_the_others_undecoded() {
        use sluice_proto::codec::put_descriptor;
        let mut ma = BytesMut::new();
        let entries: Vec<Vec<u8>> = vec![
            [Value::symbol("x-opt-a").to_bytes().to_vec(), Value::Int(1).to_bytes().to_vec()].concat(),
            [Value::symbol("x-opt-sluice-dropped-before").to_bytes().to_vec(), Value::Ulong(3).to_bytes().to_vec()]
                .concat(),
            [
                Value::symbol("x-opt-nulls").to_bytes().to_vec(),
                Value::List(vec![Value::Null; 1_000_000]).to_bytes().to_vec(),
            ]
            .concat(),
            [Value::symbol("x-opt-bad").to_bytes().to_vec(), vec![0xa1, 2, 0xff, 0xfe]].concat(),
        ];
        put_descriptor(&mut ma, 0x72);
        let at = sluice_proto::codec::begin_map(&mut ma);
        for e in &entries {
            ma.extend_from_slice(e);
        }
        sluice_proto::codec::end_map(&mut ma, at, entries.len() as u32);
        let mut payload = ma.clone();
        let body = Message { body: Body::Data(Bytes::from_static(b"body")), ..Default::default() }.to_bytes();
        payload.extend_from_slice(&body);
        let out = with_annotation(&payload.freeze(), "x-opt-sluice-dropped-before", Value::Ulong(5));
        let raw = RawMessage::parse(&out).unwrap();
        let section = raw.message_annotations_section().unwrap();
        let mut want = BytesMut::new();
        put_descriptor(&mut want, 0x72);
        let at = sluice_proto::codec::begin_map(&mut want);
        for e in [&entries[0], &entries[2], &entries[3]] {
            want.extend_from_slice(e);
        }
        Value::symbol("x-opt-sluice-dropped-before").encode(&mut want);
        Value::Ulong(5).encode(&mut want);
        sluice_proto::codec::end_map(&mut want, at, 4);
        assert!(section == &want[..], "the annotations were not kept as they came");
        assert_eq!(raw.body_bytes(), &body[..]);
    }

    /// A string property longer than `SELECTOR_MAX_STRING` is missing to selectors
    /// (no copy of it per evaluation); shorter ones are seen as they are.
    #[test]
    fn selectors_do_not_see_huge_string_properties() {
        let m = Message {
            application_properties: Some(vec![
                ("big".into(), Value::String("x".repeat(SELECTOR_MAX_STRING + 1))),
                ("edge".into(), Value::String("y".repeat(SELECTOR_MAX_STRING))),
                ("small".into(), Value::String("red".into())),
            ]),
            body: Body::Data(Bytes::from_static(b"b")),
            ..Default::default()
        };
        let v = SelectorView::new(&m.to_bytes().freeze());
        assert_eq!(v.get("big"), None);
        assert!(matches!(v.get("edge"), Some(SelectorValue::Str(s)) if s.len() == SELECTOR_MAX_STRING));
        assert_eq!(v.get("small"), Some(SelectorValue::Str("red".into())));
        // The JMS header strings too.
        let long = "z".repeat(SELECTOR_MAX_STRING + 1);
        let m = Message {
            properties: Some(sluice_proto::types::Properties {
                subject: Some(long.clone()),
                to: Some(long.clone()),
                reply_to: Some(long.clone()),
                group_id: Some(long.clone()),
                user_id: Some(Bytes::from(long.clone().into_bytes())),
                ..Default::default()
            }),
            body: Body::Data(Bytes::from_static(b"b")),
            ..Default::default()
        };
        let v = SelectorView::new(&m.to_bytes().freeze());
        for name in ["JMSType", "JMSDestination", "JMSReplyTo", "JMSXGroupID", "JMSXUserID"] {
            assert_eq!(v.get(name), None, "{name}");
        }
        let m = Message {
            properties: Some(sluice_proto::types::Properties { subject: Some("t".into()), ..Default::default() }),
            body: Body::Data(Bytes::from_static(b"b")),
            ..Default::default()
        };
        assert_eq!(SelectorView::new(&m.to_bytes().freeze()).get("JMSType"), Some(SelectorValue::Str("t".into())));
    }

    /// The real view tells a string's length before copying it: a LIKE that spends the
    /// budget leaves the number on the other side of its OR to be read.
    #[test]
    fn a_view_reads_cheap_values_after_the_budget_is_spent() {
        let m = Message {
            application_properties: Some(vec![
                ("s".into(), Value::String("a".repeat(1 << 20))),
                ("n".into(), Value::Int(5)),
            ]),
            body: Body::Data(Bytes::from_static(b"b")),
            ..Default::default()
        };
        let v = SelectorView::new(&m.to_bytes().freeze());
        let like = format!("s LIKE '%{}b%'", "a".repeat(4000));
        let sel = |t: &str| crate::broker::selector::Selector::parse(t).unwrap();
        assert!(!sel(&like).matches(&v));
        assert!(sel(&format!("{like} OR n = 5")).matches(&v));
        assert!(sel(&format!("{like} OR JMSPriority = 4")).matches(&v));
        assert_eq!(v.get_within("s", 10), Err(TooLong));
        assert_eq!(v.get_within("n", 0), Ok(Some(SelectorValue::Int(5))));
    }

    /// A message with many application properties is looked up by an index: 10,000
    /// properties, the last one found in at most 15 name comparisons (a scan compared
    /// 10,000); duplicate names give the first, as a scan did; few properties are still
    /// scanned.
    #[test]
    fn many_properties_are_looked_up_by_index() {
        let mut props: Vec<(String, Value)> = (0..10_000).map(|i| (format!("p{i}"), Value::Int(i))).collect();
        props.push(("p42".into(), Value::Int(-1)));
        let m = Message {
            application_properties: Some(props),
            body: Body::Data(Bytes::from_static(b"b")),
            ..Default::default()
        };
        let v = SelectorView::new(&m.to_bytes().freeze());
        assert_eq!(v.get("p0"), Some(SelectorValue::Int(0)));
        NAME_COMPARISONS.with(|n| n.set(0));
        assert_eq!(v.get("p9999"), Some(SelectorValue::Int(9999)));
        assert!(NAME_COMPARISONS.with(|n| n.get()) <= 15);
        assert_eq!(v.get("p42"), Some(SelectorValue::Int(42)), "the first of two");
        assert_eq!(v.get("p10000"), None);
        assert_eq!(v.get("JMSPriority"), Some(SelectorValue::Int(4)));
    }
}

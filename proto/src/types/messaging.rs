//! Message format (part 3 section 3.2): sections are located in the payload and kept
//! as raw `Bytes` slices; only the sections a caller asks for are decoded.

use crate::codec::{format, Decode, DecodeError, DecodeResult, Decoder, Encode, Symbol, Timestamp, Value};
use crate::described_list;
use bytes::{BufMut, Bytes, BytesMut};

described_list! {
    /// 3.2.1 header: transport headers for a message.
    pub struct Header = 0x70, "amqp:header:list" {
        /// Specify durability requirements (default false).
        pub durable: Option<bool>,
        /// Relative message priority (default 4).
        pub priority: Option<u8>,
        /// Time to live in milliseconds.
        pub ttl: Option<u32>,
        /// The message has not been acquired by any other link (default false).
        pub first_acquirer: Option<bool>,
        /// The number of unsuccessful previous delivery attempts (default 0).
        pub delivery_count: Option<u32>,
    }
}

described_list! {
    /// 3.2.4 properties: immutable properties of the message.
    pub struct Properties = 0x73, "amqp:properties:list" {
        /// Application message identifier (ulong, uuid, binary or string).
        pub message_id: Option<Value>,
        /// Creating user id.
        pub user_id: Option<Bytes>,
        /// The address of the node the message is destined for.
        pub to: Option<String>,
        /// The subject of the message.
        pub subject: Option<String>,
        /// The node to send replies to.
        pub reply_to: Option<String>,
        /// Application correlation identifier.
        pub correlation_id: Option<Value>,
        /// MIME content type.
        pub content_type: Option<Symbol>,
        /// MIME content encoding.
        pub content_encoding: Option<Symbol>,
        /// The time when this message is considered expired.
        pub absolute_expiry_time: Option<Timestamp>,
        /// The time when this message was created.
        pub creation_time: Option<Timestamp>,
        /// The group this message belongs to.
        pub group_id: Option<String>,
        /// The relative position of this message within its group.
        pub group_sequence: Option<u32>,
        /// The group the reply message belongs to.
        pub reply_to_group_id: Option<String>,
    }
}

/// Section descriptor codes (3.2.1 – 3.2.10).
#[allow(missing_docs)]
pub mod section {
    pub const HEADER: u64 = 0x70;
    pub const DELIVERY_ANNOTATIONS: u64 = 0x71;
    pub const MESSAGE_ANNOTATIONS: u64 = 0x72;
    pub const PROPERTIES: u64 = 0x73;
    pub const APPLICATION_PROPERTIES: u64 = 0x74;
    pub const DATA: u64 = 0x75;
    pub const AMQP_SEQUENCE: u64 = 0x76;
    pub const AMQP_VALUE: u64 = 0x77;
    pub const FOOTER: u64 = 0x78;
}

const SECTION_NAMES: &[(&str, u64)] = &[
    ("amqp:header:list", section::HEADER),
    ("amqp:delivery-annotations:map", section::DELIVERY_ANNOTATIONS),
    ("amqp:message-annotations:map", section::MESSAGE_ANNOTATIONS),
    ("amqp:properties:list", section::PROPERTIES),
    ("amqp:application-properties:map", section::APPLICATION_PROPERTIES),
    ("amqp:data:binary", section::DATA),
    ("amqp:amqp-sequence:list", section::AMQP_SEQUENCE),
    ("amqp:amqp-value:*", section::AMQP_VALUE),
    ("amqp:footer:map", section::FOOTER),
];

/// The kind of a message body (3.2.5 – 3.2.8).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BodyKind {
    /// No body section.
    #[default]
    Empty,
    /// One or more data sections.
    Data,
    /// One or more amqp-sequence sections.
    AmqpSequence,
    /// One amqp-value section.
    AmqpValue,
}

/// A bare message in its encoded form: one `Bytes` and the offsets of its sections
/// (constructor and descriptor included), found by walking the section boundaries.
/// Nothing is copied and only one reference to the buffer is held.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RawMessage {
    payload: Bytes,
    /// Where header, delivery-annotations, message-annotations, properties,
    /// application-properties, body (all body sections) and footer end. Sections are
    /// contiguous and in this order, so each starts where the one before ends (the
    /// first at 0); an absent one ends where it starts. End offsets alone keep the whole
    /// struct in one cache line.
    ends: [u32; 7],
    /// What the body sections are.
    pub body_kind: BodyKind,
}

const HEADER_AT: usize = 0;
const DA_AT: usize = 1;
const MA_AT: usize = 2;
const PROPS_AT: usize = 3;
const APP_AT: usize = 4;
const BODY_AT: usize = 5;
const FOOTER_AT: usize = 6;

impl RawMessage {
    /// Locate the sections of `payload`, checking their order and that none repeats
    /// (other than the body sections that may repeat). Costs one pass over the
    /// section headers; section contents are skipped by their sizes.
    pub fn parse(payload: &Bytes) -> DecodeResult<RawMessage> {
        Self::parse_owned(payload.clone())
    }

    /// True when `payload` is exactly one data section (vbin8 or vbin32) and nothing
    /// else, the commonest message: what [`RawMessage::parse`] accepts without walking.
    #[inline(always)]
    pub fn is_single_data(payload: &[u8]) -> bool {
        let n = payload.len();
        let whole = match *payload {
            [0x00, 0x53, 0x75, 0xa0, len, ..] => len as usize + 5 == n,
            [0x00, 0x53, 0x75, 0xb0, a, b, c, d, ..] => {
                (u32::from_be_bytes([a, b, c, d]) as usize).checked_add(8) == Some(n)
            }
            _ => false,
        };
        whole && n <= u32::MAX as usize
    }

    /// [`RawMessage::parse`] taking the payload by value (no reference count update).
    #[inline(always)]
    pub fn parse_owned(payload: Bytes) -> DecodeResult<RawMessage> {
        let n = payload.len();
        if Self::is_single_data(&payload) {
            let n = n as u32;
            const _: () = assert!(BODY_AT == 5);
            let ends = [0, 0, 0, 0, 0, n, n];
            return Ok(RawMessage { payload, ends, body_kind: BodyKind::Data });
        }
        Self::walk(payload)
    }

    /// Locate the sections one by one.
    #[inline(never)]
    fn walk(payload: Bytes) -> DecodeResult<RawMessage> {
        if payload.len() > u32::MAX as usize {
            return Err(DecodeError::InvalidLength("message larger than 4 GiB"));
        }
        let mut m = RawMessage { payload, ends: [0; 7], body_kind: BodyKind::Empty };
        let payload = &m.payload;
        let mut d = Decoder::new(payload);
        let mut last_rank = 0u8;
        while !d.is_empty() {
            let c = d.byte()?;
            if c != format::DESCRIBED {
                return Err(DecodeError::Invalid("message section is not a described value"));
            }
            let code = d.descriptor_code(SECTION_NAMES)?;
            d.skip_value()?;
            let end = d.position() as u32;
            let (rank, at) = match code {
                section::HEADER => (1, HEADER_AT),
                section::DELIVERY_ANNOTATIONS => (2, DA_AT),
                section::MESSAGE_ANNOTATIONS => (3, MA_AT),
                section::PROPERTIES => (4, PROPS_AT),
                section::APPLICATION_PROPERTIES => (5, APP_AT),
                section::DATA | section::AMQP_SEQUENCE | section::AMQP_VALUE => (6, BODY_AT),
                section::FOOTER => (7, FOOTER_AT),
                _ => return Err(DecodeError::UnknownDescriptor),
            };
            if rank < last_rank || (rank == last_rank && rank != 6) {
                return Err(DecodeError::Invalid("message sections out of order or repeated"));
            }
            last_rank = rank;
            if at == BODY_AT {
                let kind = match code {
                    section::DATA => BodyKind::Data,
                    section::AMQP_SEQUENCE => BodyKind::AmqpSequence,
                    _ => BodyKind::AmqpValue,
                };
                if m.body_kind != BodyKind::Empty && (m.body_kind != kind || kind == BodyKind::AmqpValue) {
                    return Err(DecodeError::Invalid("mixed or repeated body sections"));
                }
                m.body_kind = kind;
            }
            // This section ends here, and so do the absent ones after it so far.
            for e in &mut m.ends[at..] {
                *e = end;
            }
        }
        Ok(m)
    }

    fn section(&self, at: usize) -> Option<&[u8]> {
        let s = if at == 0 { 0 } else { self.ends[at - 1] };
        let e = self.ends[at];
        (e > s).then(|| self.payload.get(s as usize..e as usize)).flatten()
    }

    /// The whole message as it came.
    pub fn payload(&self) -> &Bytes {
        &self.payload
    }

    /// The whole message as it came, giving up the section index.
    pub fn into_payload(self) -> Bytes {
        self.payload
    }

    /// The encoded header section.
    pub fn header_section(&self) -> Option<&[u8]> {
        self.section(HEADER_AT)
    }

    /// The encoded delivery-annotations section.
    pub fn delivery_annotations_section(&self) -> Option<&[u8]> {
        self.section(DA_AT)
    }

    /// The encoded message-annotations section.
    pub fn message_annotations_section(&self) -> Option<&[u8]> {
        self.section(MA_AT)
    }

    /// The encoded properties section.
    pub fn properties_section(&self) -> Option<&[u8]> {
        self.section(PROPS_AT)
    }

    /// The encoded application-properties section.
    pub fn application_properties_section(&self) -> Option<&[u8]> {
        self.section(APP_AT)
    }

    /// All body sections, contiguous and encoded (empty when there is no body).
    pub fn body_bytes(&self) -> &[u8] {
        self.section(BODY_AT).unwrap_or(&[])
    }

    /// The encoded footer section.
    pub fn footer_section(&self) -> Option<&[u8]> {
        self.section(FOOTER_AT)
    }

    /// The decoded header section.
    pub fn header(&self) -> DecodeResult<Option<Header>> {
        self.header_section().map(Header::decode_exact).transpose()
    }

    /// The decoded properties section.
    ///
    /// A message-id or correlation-id that holds other values (a list, map, array or
    /// described value) is refused before anything is decoded: 3.2.4 allows only ulong,
    /// uuid, binary and string, and decoded, a list of nulls costs 40 times its wire
    /// size (a 100 MiB message, 4 GB).
    pub fn properties(&self) -> DecodeResult<Option<Properties>> {
        let Some(raw) = self.properties_section() else { return Ok(None) };
        ids_are_simple(raw)?;
        Properties::decode_exact(raw).map(Some)
    }

    /// The decoded application-properties map (string keys). Refused, before its
    /// values are decoded, when a value holds other values (3.2.5 allows only simple
    /// types) or when it has more than [`MAX_APPLICATION_PROPERTIES`] entries: what
    /// the decoded map costs stays within a few MiB past the strings it copies.
    pub fn application_properties(&self) -> DecodeResult<Option<Vec<(String, Value)>>> {
        self.application_properties_section().map(decode_application_properties).transpose()
    }

    /// The decoded message-annotations map.
    pub fn message_annotations(&self) -> DecodeResult<Option<Vec<(Value, Value)>>> {
        match self.message_annotations_section() {
            None => Ok(None),
            Some(raw) => match Value::decode_exact(raw)? {
                Value::Described(d) => match d.value {
                    Value::Map(m) => Ok(Some(m)),
                    _ => Err(DecodeError::Invalid("message-annotations is not a map")),
                },
                _ => Err(DecodeError::Invalid("message-annotations is not described")),
            },
        }
    }

    /// The payload of a body made of data sections, concatenated (None for other bodies).
    pub fn data(&self) -> DecodeResult<Option<Vec<u8>>> {
        if self.body_kind != BodyKind::Data {
            return Ok(None);
        }
        let mut out = Vec::new();
        let mut d = Decoder::new(self.body_bytes());
        while !d.is_empty() {
            d.byte()?;
            d.descriptor_code(SECTION_NAMES)?;
            let c = d.byte()?;
            if c != format::VBIN8 && c != format::VBIN32 {
                return Err(DecodeError::UnexpectedType { expected: "binary data section", found: c });
            }
            out.extend_from_slice(d.variable(c)?);
        }
        Ok(Some(out))
    }

    /// The message re-assembled with `header` in place of its header section.
    /// Every other section is copied as it came.
    pub fn encode_with_header(&self, header: &Header, out: &mut BytesMut) {
        header.encode(out);
        // Everything after the header is contiguous in the payload.
        // The header, when present, starts at 0.
        let rest = self.payload.get(self.ends[HEADER_AT] as usize..).unwrap_or_default();
        out.put_slice(rest);
    }

    /// Total encoded size of the message.
    pub fn encoded_len(&self) -> usize {
        self.payload.len()
    }
}

/// Most entries [`RawMessage::application_properties`] decodes.
pub const MAX_APPLICATION_PROPERTIES: u32 = 65_536;

/// A constructor of a value that holds other values (list, map, array, or described):
/// what AMQP's simple types exclude.
fn holds_values(code: u8) -> bool {
    matches!(
        code,
        format::DESCRIBED
            | format::LIST0
            | format::LIST8
            | format::LIST32
            | format::MAP8
            | format::MAP32
            | format::ARRAY8
            | format::ARRAY32
    )
}

/// A decoder at the value of the encoded section `raw` (one a [`RawMessage`] located),
/// past its descriptor.
pub fn section_value(raw: &[u8]) -> DecodeResult<Decoder<'_>> {
    let mut d = Decoder::new(raw);
    if d.byte()? != format::DESCRIBED {
        return Err(DecodeError::Invalid("section is not described"));
    }
    d.descriptor_code(SECTION_NAMES)?;
    Ok(d)
}

/// The message-id and correlation-id of an encoded properties section hold no other
/// values (checked by skipping the fields before them, nothing decoded).
fn ids_are_simple(raw: &[u8]) -> DecodeResult<()> {
    let mut d = section_value(raw)?;
    let c = d.byte()?;
    let (n, mut l) = d.list_header(c)?;
    for i in 0..n.min(6) {
        if (i == 0 || i == 5) && holds_values(l.peek()?) {
            return Err(DecodeError::Invalid("message-id and correlation-id are ulong, uuid, binary or string"));
        }
        l.skip_value()?;
    }
    Ok(())
}

fn decode_application_properties(raw: &[u8]) -> DecodeResult<Vec<(String, Value)>> {
    let mut d = section_value(raw)?;
    let c = d.byte()?;
    let (n, mut m) = d.map_header(c)?;
    if n > MAX_APPLICATION_PROPERTIES {
        return Err(DecodeError::Invalid("more than 65,536 application properties"));
    }
    let mut out = Vec::with_capacity((n as usize).min(16));
    for _ in 0..n {
        let k = String::decode(&mut m)?;
        if holds_values(m.peek()?) {
            return Err(DecodeError::Invalid("application-properties values are of simple types"));
        }
        out.push((k, Value::decode(&mut m)?));
    }
    if !m.is_empty() {
        return Err(DecodeError::InvalidLength("map size does not match its elements"));
    }
    Ok(out)
}

/// An owned message, for building messages to send (the broker mostly forwards
/// [`RawMessage`]s untouched).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Message {
    /// header section.
    pub header: Option<Header>,
    /// message-annotations section (symbol or ulong keys).
    pub message_annotations: Option<Vec<(Value, Value)>>,
    /// properties section.
    pub properties: Option<Properties>,
    /// application-properties section.
    pub application_properties: Option<Vec<(String, Value)>>,
    /// body.
    pub body: Body,
}

/// The body of an owned [`Message`].
#[derive(Debug, Clone, Default, PartialEq)]
pub enum Body {
    /// No body.
    #[default]
    Empty,
    /// One data section.
    Data(Bytes),
    /// One amqp-sequence section.
    Sequence(Vec<Value>),
    /// One amqp-value section.
    Value(Value),
}

impl Encode for Message {
    fn encode(&self, out: &mut BytesMut) {
        if let Message {
            header: None,
            message_annotations: None,
            properties: None,
            application_properties: None,
            body: Body::Data(b),
        } = self
        {
            // The commonest message, one data section: its 5-byte head (vbin8) and the bytes.
            if let Ok(len) = u8::try_from(b.len()) {
                // The head is written as one 8-byte store and cut to its 5 bytes: five
                // byte stores copied out by a 5-byte `memcpy` made the copy's wider
                // loads wait for the narrow stores to retire (a store-forwarding
                // stall: most of the `memcpy` samples of the codec bench's round trip).
                out.reserve(8 + b.len());
                let at = out.len();
                out.put_slice(&[0u8; 8]);
                out[at..at + 8].copy_from_slice(&[
                    crate::codec::format::DESCRIBED,
                    crate::codec::format::SMALLULONG,
                    section::DATA as u8,
                    crate::codec::format::VBIN8,
                    len,
                    0,
                    0,
                    0,
                ]);
                out.truncate(at + 5);
                out.put_slice(b);
                return;
            }
        }
        self.encode_sections(out)
    }
}

impl Message {
    /// The size of a data body (0 for any other body): a lower bound of the encoded
    /// size, known without encoding.
    pub fn body_len(&self) -> usize {
        match &self.body {
            Body::Data(b) => b.len(),
            _ => 0,
        }
    }

    /// Every section the message has, in order, each with the general encoder.
    pub fn encode_sections(&self, out: &mut BytesMut) {
        if let Some(h) = &self.header {
            h.encode(out);
        }
        if let Some(ma) = &self.message_annotations {
            crate::codec::put_descriptor(out, section::MESSAGE_ANNOTATIONS);
            Value::Map(ma.clone()).encode(out);
        }
        if let Some(p) = &self.properties {
            p.encode(out);
        }
        if let Some(ap) = &self.application_properties {
            crate::codec::put_descriptor(out, section::APPLICATION_PROPERTIES);
            let at = crate::codec::begin_map(out);
            for (k, v) in ap {
                k.as_str().encode(out);
                v.encode(out);
            }
            crate::codec::end_map(out, at, ap.len() as u32);
        }
        match &self.body {
            Body::Empty => {}
            Body::Data(b) => {
                crate::codec::put_descriptor(out, section::DATA);
                b.encode(out);
            }
            Body::Sequence(items) => {
                crate::codec::put_descriptor(out, section::AMQP_SEQUENCE);
                Value::List(items.clone()).encode(out);
            }
            Body::Value(v) => {
                crate::codec::put_descriptor(out, section::AMQP_VALUE);
                v.encode(out);
            }
        }
    }
}

//! Primitive types (part 1, section 1.6) and the restricted types built on them.

use super::{begin_map, end_map, format, put_variable, Decode, DecodeError, DecodeResult, Decoder, Encode, Value};
use bytes::{BufMut, Bytes, BytesMut};

#[inline]
fn unexpected<T>(expected: &'static str, found: u8) -> DecodeResult<T> {
    Err(DecodeError::UnexpectedType { expected, found })
}

impl<'a> Decode<'a> for bool {
    #[inline]
    fn decode_with(d: &mut Decoder<'a>, code: u8) -> DecodeResult<Self> {
        match code {
            format::TRUE => Ok(true),
            format::FALSE => Ok(false),
            format::BOOLEAN => match d.byte()? {
                0 => Ok(false),
                1 => Ok(true),
                _ => Err(DecodeError::Invalid("boolean byte other than 0 or 1")),
            },
            found => unexpected("boolean", found),
        }
    }
}

impl Encode for bool {
    #[inline]
    fn encode(&self, out: &mut BytesMut) {
        out.put_u8(if *self { format::TRUE } else { format::FALSE })
    }
}

impl<'a> Decode<'a> for u8 {
    #[inline]
    fn decode_with(d: &mut Decoder<'a>, code: u8) -> DecodeResult<Self> {
        match code {
            format::UBYTE => d.byte(),
            found => unexpected("ubyte", found),
        }
    }
}

impl Encode for u8 {
    #[inline]
    fn encode(&self, out: &mut BytesMut) {
        out.put_slice(&[format::UBYTE, *self])
    }
}

impl<'a> Decode<'a> for u16 {
    #[inline]
    fn decode_with(d: &mut Decoder<'a>, code: u8) -> DecodeResult<Self> {
        match code {
            format::USHORT => d.be_u16(),
            found => unexpected("ushort", found),
        }
    }
}

impl Encode for u16 {
    #[inline]
    fn encode(&self, out: &mut BytesMut) {
        out.put_u8(format::USHORT);
        out.put_u16(*self);
    }
}

impl<'a> Decode<'a> for u32 {
    #[inline]
    fn decode_with(d: &mut Decoder<'a>, code: u8) -> DecodeResult<Self> {
        match code {
            format::SMALLUINT => Ok(d.byte()? as u32),
            format::UINT0 => Ok(0),
            format::UINT => d.be_u32(),
            found => unexpected("uint", found),
        }
    }
}

impl Encode for u32 {
    #[inline]
    fn encode(&self, out: &mut BytesMut) {
        match *self {
            0 => out.put_u8(format::UINT0),
            v @ 1..=255 => out.put_slice(&[format::SMALLUINT, v as u8]),
            v => {
                out.put_u8(format::UINT);
                out.put_u32(v);
            }
        }
    }
}

impl<'a> Decode<'a> for u64 {
    #[inline]
    fn decode_with(d: &mut Decoder<'a>, code: u8) -> DecodeResult<Self> {
        match code {
            format::SMALLULONG => Ok(d.byte()? as u64),
            format::ULONG0 => Ok(0),
            format::ULONG => d.be_u64(),
            found => unexpected("ulong", found),
        }
    }
}

impl Encode for u64 {
    #[inline]
    fn encode(&self, out: &mut BytesMut) {
        match *self {
            0 => out.put_u8(format::ULONG0),
            v @ 1..=255 => out.put_slice(&[format::SMALLULONG, v as u8]),
            v => {
                out.put_u8(format::ULONG);
                out.put_u64(v);
            }
        }
    }
}

impl<'a> Decode<'a> for i8 {
    fn decode_with(d: &mut Decoder<'a>, code: u8) -> DecodeResult<Self> {
        match code {
            format::BYTE => Ok(d.byte()? as i8),
            found => unexpected("byte", found),
        }
    }
}

impl Encode for i8 {
    fn encode(&self, out: &mut BytesMut) {
        out.put_slice(&[format::BYTE, *self as u8])
    }
}

impl<'a> Decode<'a> for i16 {
    fn decode_with(d: &mut Decoder<'a>, code: u8) -> DecodeResult<Self> {
        match code {
            format::SHORT => Ok(d.be_u16()? as i16),
            found => unexpected("short", found),
        }
    }
}

impl Encode for i16 {
    fn encode(&self, out: &mut BytesMut) {
        out.put_u8(format::SHORT);
        out.put_i16(*self);
    }
}

impl<'a> Decode<'a> for i32 {
    fn decode_with(d: &mut Decoder<'a>, code: u8) -> DecodeResult<Self> {
        match code {
            format::SMALLINT => Ok(d.byte()? as i8 as i32),
            format::INT => Ok(d.be_u32()? as i32),
            found => unexpected("int", found),
        }
    }
}

impl Encode for i32 {
    fn encode(&self, out: &mut BytesMut) {
        if let Ok(v) = i8::try_from(*self) {
            out.put_slice(&[format::SMALLINT, v as u8]);
        } else {
            out.put_u8(format::INT);
            out.put_i32(*self);
        }
    }
}

impl<'a> Decode<'a> for i64 {
    fn decode_with(d: &mut Decoder<'a>, code: u8) -> DecodeResult<Self> {
        match code {
            format::SMALLLONG => Ok(d.byte()? as i8 as i64),
            format::LONG => Ok(d.be_u64()? as i64),
            found => unexpected("long", found),
        }
    }
}

impl Encode for i64 {
    fn encode(&self, out: &mut BytesMut) {
        if let Ok(v) = i8::try_from(*self) {
            out.put_slice(&[format::SMALLLONG, v as u8]);
        } else {
            out.put_u8(format::LONG);
            out.put_i64(*self);
        }
    }
}

/// An AMQP timestamp: milliseconds since the Unix epoch (part 1, 1.6.18).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Timestamp(pub i64);

impl<'a> Decode<'a> for Timestamp {
    fn decode_with(d: &mut Decoder<'a>, code: u8) -> DecodeResult<Self> {
        match code {
            format::TIMESTAMP => Ok(Timestamp(d.be_u64()? as i64)),
            found => unexpected("timestamp", found),
        }
    }
}

impl Encode for Timestamp {
    fn encode(&self, out: &mut BytesMut) {
        out.put_u8(format::TIMESTAMP);
        out.put_i64(self.0);
    }
}

/// A UUID (part 1, 1.6.19), as its 16 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Uuid(pub [u8; 16]);

impl<'a> Decode<'a> for Uuid {
    fn decode_with(d: &mut Decoder<'a>, code: u8) -> DecodeResult<Self> {
        match code {
            format::UUID => Ok(Uuid(d.bytes16()?)),
            found => unexpected("uuid", found),
        }
    }
}

impl Encode for Uuid {
    fn encode(&self, out: &mut BytesMut) {
        out.put_u8(format::UUID);
        out.put_slice(&self.0);
    }
}

impl<'a> Decode<'a> for Bytes {
    fn decode_with(d: &mut Decoder<'a>, code: u8) -> DecodeResult<Self> {
        match code {
            format::VBIN8 | format::VBIN32 => Ok(Bytes::copy_from_slice(d.variable(code)?)),
            found => unexpected("binary", found),
        }
    }
}

impl Encode for Bytes {
    fn encode(&self, out: &mut BytesMut) {
        put_variable(out, format::VBIN8, self)
    }
}

impl<'a> Decode<'a> for String {
    fn decode_with(d: &mut Decoder<'a>, code: u8) -> DecodeResult<Self> {
        match code {
            format::STR8 | format::STR32 => {
                let raw = d.variable(code)?;
                std::str::from_utf8(raw).map(str::to_owned).map_err(|_| DecodeError::InvalidText)
            }
            found => unexpected("string", found),
        }
    }
}

impl Encode for String {
    fn encode(&self, out: &mut BytesMut) {
        put_variable(out, format::STR8, self.as_bytes())
    }
}

impl Encode for &str {
    fn encode(&self, out: &mut BytesMut) {
        put_variable(out, format::STR8, self.as_bytes())
    }
}

/// A symbolic value: ASCII only (part 1, 1.6.21).
///
/// The text is shared: a clone is a reference count, not a copy. That keeps the
/// decoding of an array of described values linear in its size, since each element
/// carries the array's one descriptor (a symbolic descriptor of `L` bytes and `N`
/// elements would otherwise cost `N * L` bytes).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Symbol(std::sync::Arc<str>);

impl Symbol {
    /// A symbol from ASCII bytes.
    pub fn from_ascii(raw: &[u8]) -> DecodeResult<Self> {
        if !raw.is_ascii() {
            return Err(DecodeError::InvalidText);
        }
        // ASCII is valid UTF-8.
        Ok(Symbol(String::from_utf8_lossy(raw).into()))
    }

    /// A symbol from a static name; non-ASCII characters are replaced by `?`.
    pub fn new(name: &str) -> Self {
        if name.is_ascii() {
            Symbol(name.into())
        } else {
            Symbol(name.chars().map(|c| if c.is_ascii() { c } else { '?' }).collect::<String>().into())
        }
    }

    /// The symbol's text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl From<&str> for Symbol {
    fn from(s: &str) -> Self {
        Symbol::new(s)
    }
}

impl PartialEq<str> for Symbol {
    fn eq(&self, other: &str) -> bool {
        &*self.0 == other
    }
}

impl PartialEq<&str> for Symbol {
    fn eq(&self, other: &&str) -> bool {
        &*self.0 == *other
    }
}

impl std::fmt::Display for Symbol {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl<'a> Decode<'a> for Symbol {
    fn decode_with(d: &mut Decoder<'a>, code: u8) -> DecodeResult<Self> {
        match code {
            format::SYM8 | format::SYM32 => Symbol::from_ascii(d.variable(code)?),
            found => unexpected("symbol", found),
        }
    }
}

impl Encode for Symbol {
    fn encode(&self, out: &mut BytesMut) {
        put_variable(out, format::SYM8, self.0.as_bytes())
    }
}

/// A `multiple="true"` symbol field: one symbol or an array of symbols on the wire
/// (part 1, 1.4 "multiple").
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Symbols(pub Vec<Symbol>);

impl Symbols {
    /// True when `name` is among the symbols.
    pub fn contains(&self, name: &str) -> bool {
        self.0.iter().any(|s| s.as_str() == name)
    }
}

impl<'a> Decode<'a> for Symbols {
    fn decode_with(d: &mut Decoder<'a>, code: u8) -> DecodeResult<Self> {
        match code {
            format::SYM8 | format::SYM32 => Ok(Symbols(vec![Symbol::decode_with(d, code)?])),
            format::ARRAY8 | format::ARRAY32 => {
                let mut h = d.array_header(code)?;
                if h.descriptor.is_some() || (h.element != format::SYM8 && h.element != format::SYM32) {
                    return unexpected("array of symbols", h.element);
                }
                let mut v = Vec::with_capacity((h.count as usize).min(16));
                for _ in 0..h.count {
                    v.push(Symbol::decode_with(&mut h.body, h.element)?);
                }
                if !h.body.is_empty() {
                    return Err(DecodeError::InvalidLength("array size does not match its elements"));
                }
                Ok(Symbols(v))
            }
            found => unexpected("symbol or array of symbols", found),
        }
    }
}

impl Encode for Symbols {
    fn encode(&self, out: &mut BytesMut) {
        if let [one] = self.0.as_slice() {
            one.encode(out);
            return;
        }
        // Array of symbols: sym8 elements when every symbol fits.
        let wide = self.0.iter().any(|s| s.0.len() > 255);
        let mut body = BytesMut::new();
        for s in &self.0 {
            if wide {
                body.put_u32(s.0.len() as u32);
            } else {
                body.put_u8(s.0.len() as u8);
            }
            body.put_slice(s.0.as_bytes());
        }
        let element = if wide { format::SYM32 } else { format::SYM8 };
        let count = self.0.len() as u32;
        if body.len() + 2 <= 255 && count <= 255 {
            out.put_slice(&[format::ARRAY8, (body.len() + 2) as u8, count as u8, element]);
        } else {
            out.put_u8(format::ARRAY32);
            out.put_u32((body.len() + 5) as u32);
            out.put_u32(count);
            out.put_u8(element);
        }
        out.put_slice(&body);
    }
}

/// A map with symbol keys (`fields`, part 2 section 2.8.14; also `filter-set`). A key
/// written as a string of ASCII characters is read as the symbol it spells: uAMQP writes
/// the keys of the maps it is given (its link properties) as strings, and a peer that
/// does should not lose its connection over it (it is encoded back as a symbol).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Fields(pub Vec<(Symbol, Value)>);

impl Fields {
    /// The value under `key`.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.0.iter().find(|(k, _)| k.as_str() == key).map(|(_, v)| v)
    }
}

impl<'a> Decode<'a> for Fields {
    fn decode_with(d: &mut Decoder<'a>, code: u8) -> DecodeResult<Self> {
        let (entries, mut m) = d.map_header(code)?;
        let mut v = Vec::with_capacity((entries as usize).min(16));
        for _ in 0..entries {
            let k = match m.byte()? {
                code @ (format::STR8 | format::STR32) => Symbol::from_ascii(m.variable(code)?)?,
                code => Symbol::decode_with(&mut m, code)?,
            };
            let val = Value::decode(&mut m)?;
            v.push((k, val));
        }
        if !m.is_empty() {
            return Err(DecodeError::InvalidLength("map size does not match its elements"));
        }
        Ok(Fields(v))
    }
}

impl Encode for Fields {
    fn encode(&self, out: &mut BytesMut) {
        let at = begin_map(out);
        for (k, v) in &self.0 {
            k.encode(out);
            v.encode(out);
        }
        end_map(out, at, self.0.len() as u32);
    }
}

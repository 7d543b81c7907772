//! AMQP 1.0 type system (OASIS AMQP 1.0, part 1 "Types").
//!
//! Decoding works over a borrowed byte slice through [`Decoder`], which tracks the
//! position and the nesting depth. Every length and count read from the input is
//! checked against the bytes actually present before anything is allocated or
//! looped over, so the work done is linear in the input size.
//!
//! Encoding appends to a [`bytes::BytesMut`] and always chooses the smallest
//! encoding of a value (uint0/smalluint, list0/list8, str8, ...), which makes the
//! encoder's output canonical: decoding and re-encoding canonical bytes reproduces
//! them exactly.

mod primitives;
mod value;

pub use primitives::{Fields, Symbol, Symbols, Timestamp, Uuid};
pub use value::{Described, Descriptor, Value};

use bytes::{BufMut, BytesMut};
use std::fmt;

/// Maximum nesting of compound and described values accepted by the decoder.
pub const MAX_DEPTH: u32 = 64;

/// Format codes (part 1, section 1.6).
#[allow(missing_docs)]
pub mod format {
    pub const DESCRIBED: u8 = 0x00;
    pub const NULL: u8 = 0x40;
    pub const BOOLEAN: u8 = 0x56;
    pub const TRUE: u8 = 0x41;
    pub const FALSE: u8 = 0x42;
    pub const UBYTE: u8 = 0x50;
    pub const USHORT: u8 = 0x60;
    pub const UINT: u8 = 0x70;
    pub const SMALLUINT: u8 = 0x52;
    pub const UINT0: u8 = 0x43;
    pub const ULONG: u8 = 0x80;
    pub const SMALLULONG: u8 = 0x53;
    pub const ULONG0: u8 = 0x44;
    pub const BYTE: u8 = 0x51;
    pub const SHORT: u8 = 0x61;
    pub const INT: u8 = 0x71;
    pub const SMALLINT: u8 = 0x54;
    pub const LONG: u8 = 0x81;
    pub const SMALLLONG: u8 = 0x55;
    pub const FLOAT: u8 = 0x72;
    pub const DOUBLE: u8 = 0x82;
    pub const DECIMAL32: u8 = 0x74;
    pub const DECIMAL64: u8 = 0x84;
    pub const DECIMAL128: u8 = 0x94;
    pub const CHAR: u8 = 0x73;
    pub const TIMESTAMP: u8 = 0x83;
    pub const UUID: u8 = 0x98;
    pub const VBIN8: u8 = 0xa0;
    pub const VBIN32: u8 = 0xb0;
    pub const STR8: u8 = 0xa1;
    pub const STR32: u8 = 0xb1;
    pub const SYM8: u8 = 0xa3;
    pub const SYM32: u8 = 0xb3;
    pub const LIST0: u8 = 0x45;
    pub const LIST8: u8 = 0xc0;
    pub const LIST32: u8 = 0xd0;
    pub const MAP8: u8 = 0xc1;
    pub const MAP32: u8 = 0xd1;
    pub const ARRAY8: u8 = 0xe0;
    pub const ARRAY32: u8 = 0xf0;
}

/// Why some bytes are not a valid AMQP encoding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DecodeError {
    /// The input ended inside a value.
    Truncated,
    /// A format code that is not defined by the specification.
    UnknownFormatCode(u8),
    /// A valid value of the wrong type for the place it appeared in.
    UnexpectedType {
        /// What the decoder expected.
        expected: &'static str,
        /// The format code it found.
        found: u8,
    },
    /// Compound or described values nested deeper than [`MAX_DEPTH`].
    TooDeep,
    /// A string that is not UTF-8, or a symbol that is not ASCII.
    InvalidText,
    /// A size or count that contradicts the bytes present (odd map count,
    /// more elements than bytes, a size past the end of the buffer, ...).
    InvalidLength(&'static str),
    /// A mandatory field of a composite type was null or absent.
    MissingField(&'static str),
    /// A described type with a descriptor this decoder does not know in that place.
    UnknownDescriptor,
    /// Any other structural violation.
    Invalid(&'static str),
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecodeError::Truncated => f.write_str("value truncated"),
            DecodeError::UnknownFormatCode(c) => write!(f, "unknown format code 0x{c:02x}"),
            DecodeError::UnexpectedType { expected, found } => {
                write!(f, "expected {expected}, found format code 0x{found:02x}")
            }
            DecodeError::TooDeep => f.write_str("values nested too deeply"),
            DecodeError::InvalidText => f.write_str("invalid UTF-8 string or non-ASCII symbol"),
            DecodeError::InvalidLength(what) => write!(f, "invalid length: {what}"),
            DecodeError::MissingField(name) => write!(f, "mandatory field {name} missing"),
            DecodeError::UnknownDescriptor => f.write_str("unknown descriptor"),
            DecodeError::Invalid(what) => f.write_str(what),
        }
    }
}

impl std::error::Error for DecodeError {}

/// Result of a decode step.
pub type DecodeResult<T> = Result<T, DecodeError>;

/// A cursor over an encoded buffer.
#[derive(Debug, Clone)]
pub struct Decoder<'a> {
    buf: &'a [u8],
    pos: usize,
    depth: u32,
}

impl<'a> Decoder<'a> {
    /// A decoder at the start of `buf`, at nesting depth 0.
    pub fn new(buf: &'a [u8]) -> Self {
        Decoder { buf, pos: 0, depth: 0 }
    }

    /// Bytes consumed so far.
    #[inline]
    pub fn position(&self) -> usize {
        self.pos
    }

    /// Bytes not yet consumed.
    #[inline]
    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// True when every byte has been consumed.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.pos >= self.buf.len()
    }

    /// The unconsumed bytes.
    #[inline]
    pub fn rest(&self) -> &'a [u8] {
        &self.buf[self.pos..]
    }

    /// The next byte, without consuming it.
    #[inline]
    pub fn peek(&self) -> DecodeResult<u8> {
        self.buf.get(self.pos).copied().ok_or(DecodeError::Truncated)
    }

    /// Consume one byte.
    #[inline]
    pub fn byte(&mut self) -> DecodeResult<u8> {
        let b = self.peek()?;
        self.pos += 1;
        Ok(b)
    }

    /// Consume `n` bytes.
    #[inline]
    pub fn take(&mut self, n: usize) -> DecodeResult<&'a [u8]> {
        if n > self.remaining() {
            return Err(DecodeError::Truncated);
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    /// Step over `n` bytes already known to be there (a fast decoder's list).
    #[inline(always)]
    pub(crate) fn advance(&mut self, n: usize) {
        self.pos = (self.pos + n).min(self.buf.len());
    }

    #[inline]
    fn array<const N: usize>(&mut self) -> DecodeResult<[u8; N]> {
        let s = self.take(N)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }

    /// Consume a big-endian u16.
    #[inline]
    pub fn be_u16(&mut self) -> DecodeResult<u16> {
        Ok(u16::from_be_bytes(self.array()?))
    }

    /// Consume a big-endian u32.
    #[inline]
    pub fn be_u32(&mut self) -> DecodeResult<u32> {
        Ok(u32::from_be_bytes(self.array()?))
    }

    /// Consume a big-endian u64.
    #[inline]
    pub fn be_u64(&mut self) -> DecodeResult<u64> {
        Ok(u64::from_be_bytes(self.array()?))
    }

    /// Consume 16 bytes.
    #[inline]
    pub fn bytes16(&mut self) -> DecodeResult<[u8; 16]> {
        self.array()
    }

    /// Consume a 4-byte or 8-byte fixed value as an array (decimal types).
    #[inline]
    pub(crate) fn fixed<const N: usize>(&mut self) -> DecodeResult<[u8; N]> {
        self.array()
    }

    /// A decoder for the next `len` bytes, one nesting level deeper; the bytes
    /// are consumed from `self`.
    #[inline]
    pub fn nested(&mut self, len: usize) -> DecodeResult<Decoder<'a>> {
        if self.depth >= MAX_DEPTH {
            return Err(DecodeError::TooDeep);
        }
        let buf = self.take(len)?;
        Ok(Decoder { buf, pos: 0, depth: self.depth + 1 })
    }

    /// Enter one nesting level for a described value (its descriptor and value
    /// are read from `self`); undo with [`Self::leave`].
    #[inline]
    pub fn enter(&mut self) -> DecodeResult<()> {
        if self.depth >= MAX_DEPTH {
            return Err(DecodeError::TooDeep);
        }
        self.depth += 1;
        Ok(())
    }

    /// Leave the nesting level entered with [`Self::enter`].
    #[inline]
    pub fn leave(&mut self) {
        self.depth = self.depth.saturating_sub(1);
    }

    /// Read the variable-width payload of a binary/string/symbol with format `code`.
    #[inline]
    pub fn variable(&mut self, code: u8) -> DecodeResult<&'a [u8]> {
        let len = match code & 0xf0 {
            0xa0 => self.byte()? as usize,
            0xb0 => self.be_u32()? as usize,
            _ => unreachable_variable(code)?,
        };
        self.take(len)
    }

    /// Read the header of a list with format `code` and return (count, a decoder over its elements).
    #[inline]
    pub fn list_header(&mut self, code: u8) -> DecodeResult<(u32, Decoder<'a>)> {
        match code {
            format::LIST0 => {
                if self.depth >= MAX_DEPTH {
                    return Err(DecodeError::TooDeep);
                }
                Ok((0, Decoder { buf: &[], pos: 0, depth: self.depth + 1 }))
            }
            format::LIST8 => self.compound8(),
            format::LIST32 => self.compound32(),
            found => Err(DecodeError::UnexpectedType { expected: "list", found }),
        }
    }

    /// Read the header of a map with format `code`: (entry count, decoder over the entries).
    pub fn map_header(&mut self, code: u8) -> DecodeResult<(u32, Decoder<'a>)> {
        let (count, d) = match code {
            format::MAP8 => self.compound8()?,
            format::MAP32 => self.compound32()?,
            found => return Err(DecodeError::UnexpectedType { expected: "map", found }),
        };
        if count % 2 != 0 {
            return Err(DecodeError::InvalidLength("map with an odd element count"));
        }
        Ok((count / 2, d))
    }

    #[inline]
    fn compound8(&mut self) -> DecodeResult<(u32, Decoder<'a>)> {
        let size = self.byte()? as usize;
        if size < 1 {
            return Err(DecodeError::InvalidLength("compound size smaller than its count"));
        }
        let mut d = self.nested(size)?;
        let count = d.byte()? as u32;
        check_count(count, d.remaining())?;
        Ok((count, d))
    }

    #[inline]
    fn compound32(&mut self) -> DecodeResult<(u32, Decoder<'a>)> {
        let size = self.be_u32()? as usize;
        if size < 4 {
            return Err(DecodeError::InvalidLength("compound size smaller than its count"));
        }
        let mut d = self.nested(size)?;
        let count = d.be_u32()?;
        check_count(count, d.remaining())?;
        Ok((count, d))
    }

    /// Read the header of an array with format `code`:
    /// (element count, element constructor, decoder over the element bodies).
    /// The constructor is `(descriptor decoder position, primitive format code)`;
    /// a described element constructor is returned as the raw descriptor bytes.
    pub fn array_header(&mut self, code: u8) -> DecodeResult<ArrayHeader<'a>> {
        let (count, mut d) = match code {
            format::ARRAY8 => {
                let size = self.byte()? as usize;
                let mut d = self.nested(size)?;
                let count = d.byte()? as u32;
                (count, d)
            }
            format::ARRAY32 => {
                let size = self.be_u32()? as usize;
                let mut d = self.nested(size)?;
                let count = d.be_u32()?;
                (count, d)
            }
            found => return Err(DecodeError::UnexpectedType { expected: "array", found }),
        };
        let mut descriptor = None;
        let mut element = d.byte()?;
        if element == format::DESCRIBED {
            let start = d.pos;
            d.skip_value()?;
            descriptor = Some(&d.buf[start..d.pos]);
            element = d.byte()?;
        }
        if element == format::DESCRIBED {
            return Err(DecodeError::Invalid("array element constructor nested twice"));
        }
        // Every element occupies at least one byte except the zero-width
        // constructors, which have no place in an array: refusing them here is what
        // keeps a count of 2^32 from costing 2^32 iterations.
        if fixed_width(element) == Some(0) && count > 0 {
            return Err(DecodeError::InvalidLength("array of zero-width elements"));
        }
        check_count(count, d.remaining())?;
        Ok(ArrayHeader { count, descriptor, element, body: d })
    }

    /// Skip one complete value (constructor included), in time linear in its size.
    pub fn skip_value(&mut self) -> DecodeResult<()> {
        let code = self.byte()?;
        self.skip_with(code)
    }

    /// Skip the body of a value whose constructor `code` has been read.
    pub fn skip_with(&mut self, code: u8) -> DecodeResult<()> {
        if code == format::DESCRIBED {
            self.enter()?;
            self.skip_value()?; // descriptor
            let r = self.skip_value();
            self.leave();
            return r;
        }
        if let Some(w) = fixed_width(code) {
            self.take(w)?;
            return Ok(());
        }
        match code & 0xf0 {
            0xa0 | 0xc0 | 0xe0 => {
                let n = self.byte()? as usize;
                self.take(n)?;
            }
            0xb0 | 0xd0 | 0xf0 => {
                let n = self.be_u32()? as usize;
                self.take(n)?;
            }
            _ => return Err(DecodeError::UnknownFormatCode(code)),
        }
        Ok(())
    }

    /// Read a descriptor (after the 0x00 constructor).
    pub fn descriptor(&mut self) -> DecodeResult<Descriptor> {
        let code = self.byte()?;
        match code {
            format::SMALLULONG => Ok(Descriptor::Code(self.byte()? as u64)),
            format::ULONG => Ok(Descriptor::Code(self.be_u64()?)),
            format::ULONG0 => Ok(Descriptor::Code(0)),
            format::SYM8 | format::SYM32 => {
                let s = self.variable(code)?;
                Ok(Descriptor::Symbol(Symbol::from_ascii(s)?))
            }
            found => Err(DecodeError::UnexpectedType { expected: "descriptor", found }),
        }
    }

    /// Read the descriptor of a described value whose 0x00 has been consumed and
    /// return its numeric code, resolving symbolic descriptors through `names`.
    #[inline]
    pub fn descriptor_code(&mut self, names: &[(&str, u64)]) -> DecodeResult<u64> {
        let code = self.byte()?;
        match code {
            format::SMALLULONG => Ok(self.byte()? as u64),
            format::ULONG => self.be_u64(),
            format::ULONG0 => Ok(0),
            format::SYM8 | format::SYM32 => {
                let s = self.variable(code)?;
                names.iter().find(|(n, _)| n.as_bytes() == s).map(|(_, c)| *c).ok_or(DecodeError::UnknownDescriptor)
            }
            found => Err(DecodeError::UnexpectedType { expected: "descriptor", found }),
        }
    }
}

/// The header of an encoded array, as returned by [`Decoder::array_header`].
#[derive(Debug)]
pub struct ArrayHeader<'a> {
    /// Number of elements.
    pub count: u32,
    /// Raw encoded descriptor of a described element type.
    pub descriptor: Option<&'a [u8]>,
    /// Format code shared by every element.
    pub element: u8,
    /// Decoder positioned at the first element body.
    pub body: Decoder<'a>,
}

#[cold]
fn unreachable_variable(code: u8) -> DecodeResult<usize> {
    Err(DecodeError::UnexpectedType { expected: "variable-width value", found: code })
}

#[inline]
fn check_count(count: u32, bytes: usize) -> DecodeResult<()> {
    if count as usize > bytes {
        return Err(DecodeError::InvalidLength("more elements than bytes"));
    }
    Ok(())
}

/// Width in bytes of the body of a fixed-width format code, or None for
/// variable-width, compound and array codes (and unknown codes).
#[inline]
pub fn fixed_width(code: u8) -> Option<usize> {
    match code {
        0x40..=0x45 => Some(0),
        0x50..=0x56 => Some(1),
        0x60 | 0x61 => Some(2),
        0x70..=0x74 => Some(4),
        0x80..=0x84 => Some(8),
        0x94 | 0x98 => Some(16),
        _ => None,
    }
}

/// Types that decode from AMQP bytes.
pub trait Decode<'a>: Sized {
    /// Decode the body of a value whose constructor `code` has been consumed.
    /// `code` is never `0x40` (null) for callers that handle nullable fields.
    fn decode_with(d: &mut Decoder<'a>, code: u8) -> DecodeResult<Self>;

    /// Decode one complete value.
    #[inline]
    fn decode(d: &mut Decoder<'a>) -> DecodeResult<Self> {
        let code = d.byte()?;
        Self::decode_with(d, code)
    }

    /// Decode a value that must fill `bytes` exactly.
    fn decode_exact(bytes: &'a [u8]) -> DecodeResult<Self> {
        let mut d = Decoder::new(bytes);
        let v = Self::decode(&mut d)?;
        if !d.is_empty() {
            return Err(DecodeError::Invalid("trailing bytes after value"));
        }
        Ok(v)
    }
}

/// Types that encode to AMQP bytes.
pub trait Encode {
    /// Append the smallest encoding of `self` to `out`.
    fn encode(&self, out: &mut BytesMut);

    /// The encoding of `self` as a fresh buffer.
    fn to_bytes(&self) -> BytesMut {
        let mut out = BytesMut::new();
        self.encode(&mut out);
        out
    }
}

/// A field of a composite (described list) type: `Option<T>` fields are nullable,
/// any other type is mandatory.
pub trait Field<'a>: Sized {
    /// Decode the field from the list element at the decoder's position.
    fn decode_field(d: &mut Decoder<'a>, name: &'static str) -> DecodeResult<Self>;
    /// The value of a field that the list did not contain.
    fn absent(name: &'static str) -> DecodeResult<Self>;
    /// Encode the field.
    fn encode_field(&self, out: &mut BytesMut);
    /// True when the field encodes as null (trailing nulls are elided).
    fn is_null(&self) -> bool;
}

impl<'a, T: Decode<'a> + Encode> Field<'a> for T {
    #[inline]
    fn decode_field(d: &mut Decoder<'a>, name: &'static str) -> DecodeResult<Self> {
        let code = d.byte()?;
        if code == format::NULL {
            return Err(DecodeError::MissingField(name));
        }
        T::decode_with(d, code)
    }
    #[inline]
    fn absent(name: &'static str) -> DecodeResult<Self> {
        Err(DecodeError::MissingField(name))
    }
    #[inline]
    fn encode_field(&self, out: &mut BytesMut) {
        self.encode(out)
    }
    #[inline]
    fn is_null(&self) -> bool {
        false
    }
}

impl<'a, T: Decode<'a> + Encode> Field<'a> for Option<T> {
    #[inline]
    fn decode_field(d: &mut Decoder<'a>, _name: &'static str) -> DecodeResult<Self> {
        let code = d.byte()?;
        if code == format::NULL {
            return Ok(None);
        }
        T::decode_with(d, code).map(Some)
    }
    #[inline]
    fn absent(_name: &'static str) -> DecodeResult<Self> {
        Ok(None)
    }
    #[inline]
    fn encode_field(&self, out: &mut BytesMut) {
        match self {
            Some(v) => v.encode(out),
            None => out.put_u8(format::NULL),
        }
    }
    #[inline]
    fn is_null(&self) -> bool {
        self.is_none()
    }
}

/// Begin a list: writes a list32 header placeholder and returns its position.
#[inline]
pub fn begin_list(out: &mut BytesMut) -> usize {
    let at = out.len();
    out.put_slice(&[format::LIST32, 0, 0, 0, 0, 0, 0, 0, 0]);
    at
}

/// Finish a list begun with [`begin_list`]: writes the size and count, and shrinks
/// the header to list0 or list8 when they fit.
#[inline]
pub fn end_list(out: &mut BytesMut, at: usize, count: u32) {
    finish_compound(out, at, count, format::LIST32)
}

/// Begin a list expected to be small (a performative, a section): a list8 header is
/// written and widened in [`end_small_list`] only when the list turns out large, so the
/// common case moves no bytes.
#[inline]
pub fn begin_small_list(out: &mut BytesMut) -> usize {
    let at = out.len();
    out.put_slice(&[format::LIST8, 0, 0]);
    at
}

/// Finish a list begun with [`begin_small_list`]: the same encoding [`end_list`] picks
/// (list0, list8 when size and count fit, else list32).
#[inline]
pub fn end_small_list(out: &mut BytesMut, at: usize, count: u32) {
    let body = out.len() - at - 3;
    if count == 0 {
        out.truncate(at);
        out.put_u8(format::LIST0);
    } else if body < 255 && count <= 255 {
        out[at + 1] = (body + 1) as u8;
        out[at + 2] = count as u8;
    } else {
        out.put_slice(&[0; 6]);
        out.copy_within(at + 3..at + 3 + body, at + 9);
        out[at] = format::LIST32;
        out[at + 1..at + 5].copy_from_slice(&((body + 4) as u32).to_be_bytes());
        out[at + 5..at + 9].copy_from_slice(&count.to_be_bytes());
    }
}

/// Begin a map (see [`begin_list`]).
#[inline]
pub fn begin_map(out: &mut BytesMut) -> usize {
    let at = out.len();
    out.put_slice(&[format::MAP32, 0, 0, 0, 0, 0, 0, 0, 0]);
    at
}

/// Finish a map begun with [`begin_map`]; `entries` counts key/value pairs.
#[inline]
pub fn end_map(out: &mut BytesMut, at: usize, entries: u32) {
    finish_compound(out, at, entries.saturating_mul(2), format::MAP32)
}

fn finish_compound(out: &mut BytesMut, at: usize, count: u32, code32: u8) {
    let body = out.len() - at - 9;
    if code32 == format::LIST32 && count == 0 {
        out.truncate(at);
        out.put_u8(format::LIST0);
        return;
    }
    if body < 255 && count <= 255 {
        // compound8: code, size (count byte + body), count
        out.copy_within(at + 9.., at + 3);
        out.truncate(at + 3 + body);
        out[at] = code32 - 0x10;
        out[at + 1] = (body + 1) as u8;
        out[at + 2] = count as u8;
    } else {
        let size = (body + 4) as u32;
        out[at + 1..at + 5].copy_from_slice(&size.to_be_bytes());
        out[at + 5..at + 9].copy_from_slice(&count.to_be_bytes());
    }
}

/// Write a described-type constructor with a small numeric descriptor.
#[inline]
pub fn put_descriptor(out: &mut BytesMut, code: u64) {
    if code <= 0xff {
        out.put_slice(&[format::DESCRIBED, format::SMALLULONG, code as u8]);
    } else {
        out.put_u8(format::DESCRIBED);
        out.put_u8(format::ULONG);
        out.put_u64(code);
    }
}

/// Write variable-width bytes with the 8- or 32-bit size form.
#[inline]
pub fn put_variable(out: &mut BytesMut, code8: u8, bytes: &[u8]) {
    if bytes.len() <= 255 {
        out.put_u8(code8);
        out.put_u8(bytes.len() as u8);
    } else {
        out.put_u8(code8 + 0x10);
        out.put_u32(bytes.len() as u32);
    }
    out.put_slice(bytes);
}

/// Declares a composite type (a described list, part 1 section 1.4) with its
/// descriptor code and symbolic name, and implements [`Decode`] and [`Encode`].
#[macro_export]
#[doc(hidden)]
///
/// `encoded_by_hand` after the symbol leaves out the [`Encode`] impl, for the hot
/// performatives whose one-pass encoders live in `types::fast`; their general
/// encoding stays available as `encode_general`. `every_field` writes every field, the
/// trailing nulls too, for peers that index the list instead of reading its count
/// (Azure's pure-Python client reads an error's third field): one byte (null) more per field.
macro_rules! described_list {
    (@encode $name:ident) => {
        impl $crate::codec::Encode for $name {
            #[inline]
            fn encode(&self, out: &mut bytes::BytesMut) {
                self.encode_general(out)
            }
        }
    };
    (@encode $name:ident encoded_by_hand) => {};
    (@encode $name:ident every_field) => {
        $crate::described_list!(@encode $name);
    };
    (@every every_field) => {
        true
    };
    (@every $($how:ident)?) => {
        false
    };
    (
        $(#[$meta:meta])*
        pub struct $name:ident = $code:literal, $symbol:literal $(, $how:ident)? {
            $( $(#[$fmeta:meta])* pub $field:ident : $ty:ty ),* $(,)?
        }
    ) => {
        $crate::described_list!(@encode $name $($how)?);

        $(#[$meta])*
        #[derive(Debug, Clone, PartialEq, Default)]
        pub struct $name {
            $( $(#[$fmeta])* pub $field: $ty, )*
        }

        impl $name {
            /// Numeric descriptor.
            pub const CODE: u64 = $code;
            /// Symbolic descriptor.
            pub const SYMBOL: &'static str = $symbol;

            /// Decode the list body after the descriptor has been read.
            #[inline]
            #[allow(unused_mut, unused_variables)]
            pub fn decode_list<'a>(d: &mut $crate::codec::Decoder<'a>) -> $crate::codec::DecodeResult<Self> {
                let code = d.byte()?;
                let (count, mut l) = d.list_header(code)?;
                let mut i = 0u32;
                let v = $name {
                    $( $field: {
                        let f = if i < count {
                            <$ty as $crate::codec::Field>::decode_field(&mut l, stringify!($field))?
                        } else {
                            <$ty as $crate::codec::Field>::absent(stringify!($field))?
                        };
                        i += 1;
                        f
                    }, )*
                };
                // Fields added by a later version of the specification are skipped.
                while i < count {
                    l.skip_value()?;
                    i += 1;
                }
                if !l.is_empty() {
                    return Err($crate::codec::DecodeError::InvalidLength("list size does not match its elements"));
                }
                Ok(v)
            }

            /// Encode the list body (without descriptor).
            #[allow(unused_mut, unused_assignments, unused_variables)]
            pub fn encode_list(&self, out: &mut bytes::BytesMut) {
                let mut count = 0u32;
                let mut n = 0u32;
                $( n += 1; if !$crate::codec::Field::is_null(&self.$field) { count = n; } )*
                if $crate::described_list!(@every $($how)?) {
                    count = n;
                }
                let at = $crate::codec::begin_small_list(out);
                let mut n = 0u32;
                $(
                    if n < count {
                        $crate::codec::Field::encode_field(&self.$field, out);
                    }
                    n += 1;
                )*
                $crate::codec::end_small_list(out, at, count);
            }
        }

        impl<'a> $crate::codec::Decode<'a> for $name {
            fn decode_with(d: &mut $crate::codec::Decoder<'a>, code: u8) -> $crate::codec::DecodeResult<Self> {
                if code != $crate::codec::format::DESCRIBED {
                    return Err($crate::codec::DecodeError::UnexpectedType { expected: $symbol, found: code });
                }
                d.enter()?;
                let desc = d.descriptor_code(&[($symbol, $code)])?;
                if desc != $code {
                    d.leave();
                    return Err($crate::codec::DecodeError::UnknownDescriptor);
                }
                let r = Self::decode_list(d);
                d.leave();
                r
            }
        }

        impl $name {
            /// Encode descriptor and list with the general field-by-field encoder.
            pub fn encode_general(&self, out: &mut bytes::BytesMut) {
                $crate::codec::put_descriptor(out, $code);
                self.encode_list(out);
            }
        }
    };
}

#[cfg(test)]
mod tests;

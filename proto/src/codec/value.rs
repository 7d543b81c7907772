//! The dynamically typed AMQP value (any type of part 1, section 1.6, plus described values).

use super::{
    begin_list, begin_map, end_list, end_map, format, put_variable, Decode, DecodeError, DecodeResult, Decoder, Encode,
    Symbol, Timestamp, Uuid,
};
use bytes::{BufMut, Bytes, BytesMut};

/// Any AMQP value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// null
    Null,
    /// boolean
    Bool(bool),
    /// ubyte
    Ubyte(u8),
    /// ushort
    Ushort(u16),
    /// uint
    Uint(u32),
    /// ulong
    Ulong(u64),
    /// byte
    Byte(i8),
    /// short
    Short(i16),
    /// int
    Int(i32),
    /// long
    Long(i64),
    /// float (IEEE 754 binary32)
    Float(f32),
    /// double (IEEE 754 binary64)
    Double(f64),
    /// decimal32, kept as its opaque IEEE 754 decimal bytes
    Decimal32([u8; 4]),
    /// decimal64, opaque
    Decimal64([u8; 8]),
    /// decimal128, opaque
    Decimal128([u8; 16]),
    /// char (a Unicode scalar value)
    Char(char),
    /// timestamp
    Timestamp(Timestamp),
    /// uuid
    Uuid(Uuid),
    /// binary
    Binary(Bytes),
    /// string (UTF-8)
    String(String),
    /// symbol (ASCII)
    Symbol(Symbol),
    /// list
    List(Vec<Value>),
    /// map, in wire order
    Map(Vec<(Value, Value)>),
    /// array: every element has the same type; encoded with one shared constructor
    Array(Vec<Value>),
    /// described value
    Described(Box<Described>),
}

/// A descriptor: a numeric code or a symbolic name (part 1, 1.5).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Descriptor {
    /// ulong descriptor (domain-id << 32 | descriptor-id)
    Code(u64),
    /// symbolic descriptor
    Symbol(Symbol),
}

/// A described value.
#[derive(Debug, Clone, PartialEq)]
pub struct Described {
    /// The descriptor.
    pub descriptor: Descriptor,
    /// The value it describes.
    pub value: Value,
}

impl Value {
    /// A string value.
    pub fn string(s: &str) -> Value {
        Value::String(s.to_owned())
    }

    /// A symbol value.
    pub fn symbol(s: &str) -> Value {
        Value::Symbol(Symbol::new(s))
    }

    /// The text of a string or symbol value.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            Value::Symbol(s) => Some(s.as_str()),
            _ => None,
        }
    }

    /// True for null.
    pub fn is_null(&self) -> bool {
        matches!(self, Value::Null)
    }
}

impl Encode for Descriptor {
    fn encode(&self, out: &mut BytesMut) {
        match self {
            Descriptor::Code(c) => c.encode(out),
            Descriptor::Symbol(s) => s.encode(out),
        }
    }
}

impl<'a> Decode<'a> for Value {
    fn decode_with(d: &mut Decoder<'a>, code: u8) -> DecodeResult<Self> {
        Ok(match code {
            format::DESCRIBED => {
                d.enter()?;
                let r = (|| {
                    let descriptor = d.descriptor()?;
                    let value = Value::decode(d)?;
                    Ok(Value::Described(Box::new(Described { descriptor, value })))
                })();
                d.leave();
                return r;
            }
            format::NULL => Value::Null,
            format::BOOLEAN | format::TRUE | format::FALSE => Value::Bool(bool::decode_with(d, code)?),
            format::UBYTE => Value::Ubyte(d.byte()?),
            format::USHORT => Value::Ushort(d.be_u16()?),
            format::UINT | format::SMALLUINT | format::UINT0 => Value::Uint(u32::decode_with(d, code)?),
            format::ULONG | format::SMALLULONG | format::ULONG0 => Value::Ulong(u64::decode_with(d, code)?),
            format::BYTE => Value::Byte(d.byte()? as i8),
            format::SHORT => Value::Short(d.be_u16()? as i16),
            format::INT | format::SMALLINT => Value::Int(i32::decode_with(d, code)?),
            format::LONG | format::SMALLLONG => Value::Long(i64::decode_with(d, code)?),
            format::FLOAT => Value::Float(f32::from_bits(d.be_u32()?)),
            format::DOUBLE => Value::Double(f64::from_bits(d.be_u64()?)),
            format::DECIMAL32 => Value::Decimal32(d.fixed()?),
            format::DECIMAL64 => Value::Decimal64(d.fixed()?),
            format::DECIMAL128 => Value::Decimal128(d.fixed()?),
            format::CHAR => Value::Char(
                char::from_u32(d.be_u32()?).ok_or(DecodeError::Invalid("char is not a Unicode scalar value"))?,
            ),
            format::TIMESTAMP => Value::Timestamp(Timestamp(d.be_u64()? as i64)),
            format::UUID => Value::Uuid(Uuid(d.bytes16()?)),
            format::VBIN8 | format::VBIN32 => Value::Binary(Bytes::decode_with(d, code)?),
            format::STR8 | format::STR32 => Value::String(String::decode_with(d, code)?),
            format::SYM8 | format::SYM32 => Value::Symbol(Symbol::decode_with(d, code)?),
            format::LIST0 | format::LIST8 | format::LIST32 => {
                let (count, mut l) = d.list_header(code)?;
                let mut v = Vec::with_capacity((count as usize).min(64));
                for _ in 0..count {
                    v.push(Value::decode(&mut l)?);
                }
                if !l.is_empty() {
                    return Err(DecodeError::InvalidLength("list size does not match its elements"));
                }
                Value::List(v)
            }
            format::MAP8 | format::MAP32 => {
                let (entries, mut m) = d.map_header(code)?;
                let mut v = Vec::with_capacity((entries as usize).min(64));
                for _ in 0..entries {
                    let k = Value::decode(&mut m)?;
                    let val = Value::decode(&mut m)?;
                    v.push((k, val));
                }
                if !m.is_empty() {
                    return Err(DecodeError::InvalidLength("map size does not match its elements"));
                }
                Value::Map(v)
            }
            format::ARRAY8 | format::ARRAY32 => {
                let mut h = d.array_header(code)?;
                let descriptor = match h.descriptor {
                    Some(raw) => {
                        let mut dd = Decoder::new(raw);
                        Some(dd.descriptor()?)
                    }
                    None => None,
                };
                let mut v = Vec::with_capacity((h.count as usize).min(64));
                for _ in 0..h.count {
                    let e = Value::decode_with(&mut h.body, h.element)?;
                    v.push(match &descriptor {
                        Some(desc) => Value::Described(Box::new(Described { descriptor: desc.clone(), value: e })),
                        None => e,
                    });
                }
                if !h.body.is_empty() {
                    return Err(DecodeError::InvalidLength("array size does not match its elements"));
                }
                Value::Array(v)
            }
            other => return Err(DecodeError::UnknownFormatCode(other)),
        })
    }
}

impl Encode for Value {
    fn encode(&self, out: &mut BytesMut) {
        match self {
            Value::Null => out.put_u8(format::NULL),
            Value::Bool(b) => b.encode(out),
            Value::Ubyte(v) => v.encode(out),
            Value::Ushort(v) => v.encode(out),
            Value::Uint(v) => v.encode(out),
            Value::Ulong(v) => v.encode(out),
            Value::Byte(v) => v.encode(out),
            Value::Short(v) => v.encode(out),
            Value::Int(v) => v.encode(out),
            Value::Long(v) => v.encode(out),
            Value::Float(v) => {
                out.put_u8(format::FLOAT);
                out.put_u32(v.to_bits());
            }
            Value::Double(v) => {
                out.put_u8(format::DOUBLE);
                out.put_u64(v.to_bits());
            }
            Value::Decimal32(b) => {
                out.put_u8(format::DECIMAL32);
                out.put_slice(b);
            }
            Value::Decimal64(b) => {
                out.put_u8(format::DECIMAL64);
                out.put_slice(b);
            }
            Value::Decimal128(b) => {
                out.put_u8(format::DECIMAL128);
                out.put_slice(b);
            }
            Value::Char(c) => {
                out.put_u8(format::CHAR);
                out.put_u32(*c as u32);
            }
            Value::Timestamp(t) => t.encode(out),
            Value::Uuid(u) => u.encode(out),
            Value::Binary(b) => b.encode(out),
            Value::String(s) => put_variable(out, format::STR8, s.as_bytes()),
            Value::Symbol(s) => s.encode(out),
            Value::List(items) => {
                let at = begin_list(out);
                for v in items {
                    v.encode(out);
                }
                end_list(out, at, items.len() as u32);
            }
            Value::Map(entries) => {
                let at = begin_map(out);
                for (k, v) in entries {
                    k.encode(out);
                    v.encode(out);
                }
                end_map(out, at, entries.len() as u32);
            }
            Value::Array(items) => encode_array(items, out),
            Value::Described(d) => {
                out.put_u8(format::DESCRIBED);
                d.descriptor.encode(out);
                d.value.encode(out);
            }
        }
    }
}

/// The shared element constructor of an array, and each element's body without it.
/// Arrays use the widest form of each type so that one constructor fits all
/// elements (uint as 0x70, ulong as 0x80, string as str32 unless all fit str8, ...).
fn encode_array(items: &[Value], out: &mut BytesMut) {
    let mut body = BytesMut::new();
    // Constructor: descriptor (if described) + element format code.
    let first = items.first();
    let (descriptor, inner_first) = match first {
        Some(Value::Described(d)) => (Some(&d.descriptor), Some(&d.value)),
        other => (None, other),
    };
    let element = inner_first.map(array_element_code(items)).unwrap_or(format::NULL);
    if let Some(desc) = descriptor {
        body.put_u8(format::DESCRIBED);
        desc.encode(&mut body);
    }
    body.put_u8(element);
    for item in items {
        let v = match item {
            Value::Described(d) => &d.value,
            v => v,
        };
        encode_array_element(v, element, &mut body);
    }
    let count = items.len() as u32;
    if body.len() < 255 && count <= 255 {
        out.put_slice(&[format::ARRAY8, (body.len() + 1) as u8, count as u8]);
    } else {
        out.put_u8(format::ARRAY32);
        out.put_u32((body.len() + 4) as u32);
        out.put_u32(count);
    }
    out.put_slice(&body);
}

fn array_element_code(items: &[Value]) -> impl Fn(&Value) -> u8 + '_ {
    move |v| {
        let inner = |v: &Value| -> usize {
            match v {
                Value::Described(d) => match &d.value {
                    Value::Binary(b) => b.len(),
                    Value::String(s) => s.len(),
                    Value::Symbol(s) => s.as_str().len(),
                    _ => 0,
                },
                Value::Binary(b) => b.len(),
                Value::String(s) => s.len(),
                Value::Symbol(s) => s.as_str().len(),
                _ => 0,
            }
        };
        let wide = items.iter().any(|v| inner(v) > 255);
        match v {
            Value::Null => format::NULL,
            Value::Bool(_) => format::BOOLEAN,
            Value::Ubyte(_) => format::UBYTE,
            Value::Ushort(_) => format::USHORT,
            Value::Uint(_) => format::UINT,
            Value::Ulong(_) => format::ULONG,
            Value::Byte(_) => format::BYTE,
            Value::Short(_) => format::SHORT,
            Value::Int(_) => format::INT,
            Value::Long(_) => format::LONG,
            Value::Float(_) => format::FLOAT,
            Value::Double(_) => format::DOUBLE,
            Value::Decimal32(_) => format::DECIMAL32,
            Value::Decimal64(_) => format::DECIMAL64,
            Value::Decimal128(_) => format::DECIMAL128,
            Value::Char(_) => format::CHAR,
            Value::Timestamp(_) => format::TIMESTAMP,
            Value::Uuid(_) => format::UUID,
            Value::Binary(_) => {
                if wide {
                    format::VBIN32
                } else {
                    format::VBIN8
                }
            }
            Value::String(_) => {
                if wide {
                    format::STR32
                } else {
                    format::STR8
                }
            }
            Value::Symbol(_) => {
                if wide {
                    format::SYM32
                } else {
                    format::SYM8
                }
            }
            Value::List(_) => format::LIST32,
            Value::Map(_) => format::MAP32,
            Value::Array(_) => format::ARRAY32,
            Value::Described(_) => format::NULL,
        }
    }
}

fn encode_array_element(v: &Value, element: u8, out: &mut BytesMut) {
    let mut tmp = BytesMut::new();
    match (v, element) {
        (Value::Bool(b), format::BOOLEAN) => out.put_u8(*b as u8),
        (Value::Uint(x), format::UINT) => out.put_u32(*x),
        (Value::Ulong(x), format::ULONG) => out.put_u64(*x),
        (Value::Int(x), format::INT) => out.put_i32(*x),
        (Value::Long(x), format::LONG) => out.put_i64(*x),
        (Value::Binary(b), format::VBIN32) => {
            out.put_u32(b.len() as u32);
            out.put_slice(b);
        }
        (Value::String(s), format::STR32) => {
            out.put_u32(s.len() as u32);
            out.put_slice(s.as_bytes());
        }
        (Value::Symbol(s), format::SYM32) => {
            out.put_u32(s.as_str().len() as u32);
            out.put_slice(s.as_str().as_bytes());
        }
        (Value::Binary(b), format::VBIN8) => {
            out.put_u8(b.len() as u8);
            out.put_slice(b);
        }
        (Value::String(s), format::STR8) => {
            out.put_u8(s.len() as u8);
            out.put_slice(s.as_bytes());
        }
        (Value::Symbol(s), format::SYM8) => {
            out.put_u8(s.as_str().len() as u8);
            out.put_slice(s.as_str().as_bytes());
        }
        (Value::List(items), format::LIST32) => {
            let at = begin_list(&mut tmp);
            for i in items {
                i.encode(&mut tmp);
            }
            end_list_32(&mut tmp, at, items.len() as u32);
            out.put_slice(&tmp[1..]);
        }
        (Value::Map(entries), format::MAP32) => {
            let at = begin_map(&mut tmp);
            for (k, val) in entries {
                k.encode(&mut tmp);
                val.encode(&mut tmp);
            }
            end_map_32(&mut tmp, at, entries.len() as u32);
            out.put_slice(&tmp[1..]);
        }
        (Value::Array(items), format::ARRAY32) => {
            encode_array(items, &mut tmp);
            if tmp.first() == Some(&format::ARRAY8) && tmp.len() >= 3 {
                // Widen array8 to array32 so that every element shares the constructor.
                let size = tmp[1] as u32 + 3;
                let count = tmp[2] as u32;
                out.put_u32(size);
                out.put_u32(count);
                out.put_slice(&tmp[3..]);
            } else {
                out.put_slice(&tmp[1..]);
            }
        }
        // Same-type fixed-width elements: their normal encoding minus the constructor.
        _ => {
            v.encode(&mut tmp);
            out.put_slice(tmp.get(1..).unwrap_or(&[]));
        }
    }
}

fn end_list_32(out: &mut BytesMut, at: usize, count: u32) {
    let size = (out.len() - at - 5) as u32;
    out[at + 1..at + 5].copy_from_slice(&size.to_be_bytes());
    out[at + 5..at + 9].copy_from_slice(&count.to_be_bytes());
}

fn end_map_32(out: &mut BytesMut, at: usize, entries: u32) {
    end_list_32(out, at, entries.saturating_mul(2))
}

//! The one encoding of state, CBOR, and the JSON text that Python, JavaScript and C guests
//! speak.
//!
//! Every state is stored as CBOR (RFC 8949), whatever the language of the operator that wrote
//! it: a value, map entry or list item written in one language reads the same in every other,
//! `weir state` shows it one way, and an operator rewritten in another language restores the
//! old one's state. The Rust SDK writes CBOR itself. The Python, JavaScript and C SDKs declare
//! their states as JSON (the WIT's `encoding`): their fast path is JSON text, which CPython's
//! `json` and JavaScript's `JSON` parse in native code, where a CBOR codec written in either
//! would run interpreted. The host converts at the boundary ([`crate::guest`]), in native code,
//! with [`json_to_cbor`] on every write and [`cbor_to_json`] on every read.
//!
//! The mapping, both ways: integers within 64 bits (CBOR major types 0 and 1), floats (a JSON
//! number with a fraction or an exponent; CBOR's smallest exact width), strings, arrays,
//! objects (CBOR maps with text keys), `true`, `false`, `null`. Two JSON objects have a CBOR
//! form of their own, so that what the Rust SDK writes round-trips: `{"$bytes": "<base64>"}`
//! is a byte string, and `{"$version": N, "$value": V}` is a versioned value
//! (`guest-sdk/src/state/version.rs`: the tag [`VERSION_TAG`] around `[N, V]`). What JSON
//! cannot say reads as the nearest thing it can: a map key that is an integer as its decimal
//! text, a bignum (tags 2 and 3) as its decimal digits, any other tag as the item it tags,
//! `undefined` as `null`, the non-finite floats as `NaN`, `Infinity` and `-Infinity` (which
//! Python's `json` reads and writes).

use base64::Engine as _;
use ciborium_ll::{Decoder, Encoder, Header};

/// The CBOR tag around a versioned value, `[version, value]`: "WEIR" in ASCII. The Rust SDK
/// defines the same number (`guest-sdk/src/state/version.rs`).
pub const VERSION_TAG: u64 = 0x5745_4952;

/// How deep arrays and objects may nest in a state value: deeper is an error rather than a
/// deep recursion on the host's stack.
const MAX_DEPTH: u32 = 256;

/// How a guest encodes a state's values, map keys and list items (the WIT's `encoding`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum StateEncoding {
    /// CBOR, stored as it is.
    #[default]
    Cbor,
    /// JSON text, converted to CBOR on its way in and back on its way out.
    Json,
}

/// Why a value could not be converted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EncodingError {
    #[error("not JSON text: {what} at byte {at}")]
    NotJson { what: &'static str, at: usize },
    #[error(
        "the integer {0} does not fit in 64 bits, which is as far as state integers go in every \
         language; store it as a string"
    )]
    IntegerTooLarge(String),
    #[error("`$bytes` holds no valid base64: {0}")]
    BadBase64(String),
    #[error("not CBOR: malformed at byte {0}")]
    NotCbor(usize),
    #[error("CBOR with no JSON form: {0}")]
    NoJsonForm(String),
    #[error("nested more than {MAX_DEPTH} levels deep")]
    TooDeep,
}

/// Appends the CBOR form of the JSON text `json` to `out`.
pub fn json_to_cbor(json: &[u8], out: &mut Vec<u8>) -> Result<(), EncodingError> {
    // Counters are the common case: plain digits skip the parser.
    if let Some(n) = plain_digits(json) {
        push(out, Header::Positive(n));
        return Ok(());
    }
    let mut reader = JsonReader { text: json, at: 0 };
    reader.skip_whitespace();
    reader.value(out, 0)?;
    reader.skip_whitespace();
    if reader.at != json.len() {
        return Err(reader.error("text after the value"));
    }
    Ok(())
}

/// Appends the JSON text of the CBOR item `cbor` to `out`.
pub fn cbor_to_json(cbor: &[u8], out: &mut Vec<u8>) -> Result<(), EncodingError> {
    // Counters are the common case: a non-negative integer skips the decoder.
    if let Some(n) = plain_unsigned(cbor) {
        push_decimal(out, n);
        return Ok(());
    }
    let mut writer = JsonWriter {
        decoder: Decoder::from(cbor),
        len: cbor.len(),
    };
    writer.item(out, 0)?;
    let end = writer.decoder.offset();
    if end != cbor.len() {
        return Err(EncodingError::NotCbor(end));
    }
    Ok(())
}

/// The converted bytes of `bytes` in a new vector.
pub fn converted(
    bytes: &[u8],
    convert: fn(&[u8], &mut Vec<u8>) -> Result<(), EncodingError>,
) -> Result<Vec<u8>, EncodingError> {
    let mut out = Vec::with_capacity(bytes.len() + 4);
    convert(bytes, &mut out)?;
    Ok(out)
}

/// `text` as a u64, when it is nothing but 1 to 19 decimal digits without a leading zero.
fn plain_digits(text: &[u8]) -> Option<u64> {
    if text.is_empty() || text.len() > 19 || (text[0] == b'0' && text.len() > 1) {
        return None;
    }
    let mut n = 0u64;
    for &b in text {
        if !b.is_ascii_digit() {
            return None;
        }
        // 19 digits stay below 10^19 < 2^64.
        n = n * 10 + u64::from(b - b'0');
    }
    Some(n)
}

/// `cbor` as a u64, when it is nothing but one CBOR unsigned integer (major type 0).
fn plain_unsigned(cbor: &[u8]) -> Option<u64> {
    let (&first, rest) = cbor.split_first()?;
    let be = |bytes: &[u8]| bytes.iter().fold(0u64, |n, &b| (n << 8) | u64::from(b));
    match (first, rest.len()) {
        (0..=0x17, 0) => Some(u64::from(first)),
        (0x18, 1) | (0x19, 2) | (0x1a, 4) | (0x1b, 8) => Some(be(rest)),
        _ => None,
    }
}

fn push(out: &mut Vec<u8>, header: Header) {
    // Writing into a vector cannot fail.
    let _ = Encoder::from(out).push(header);
}

fn push_decimal(out: &mut Vec<u8>, n: u64) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    let mut n = n;
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[i..]);
}

/// A recursive-descent reader of one JSON text, writing CBOR as it goes.
struct JsonReader<'a> {
    text: &'a [u8],
    at: usize,
}

impl JsonReader<'_> {
    fn error(&self, what: &'static str) -> EncodingError {
        EncodingError::NotJson { what, at: self.at }
    }

    fn skip_whitespace(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.text.get(self.at) {
            self.at += 1;
        }
    }

    fn eat(&mut self, word: &[u8]) -> bool {
        let found = self.text[self.at..].starts_with(word);
        if found {
            self.at += word.len();
        }
        found
    }

    fn value(&mut self, out: &mut Vec<u8>, depth: u32) -> Result<(), EncodingError> {
        if depth > MAX_DEPTH {
            return Err(EncodingError::TooDeep);
        }
        match self.text.get(self.at) {
            None => Err(self.error("the end where a value belongs")),
            Some(b'{') => self.object(out, depth),
            Some(b'[') => self.array(out, depth),
            Some(b'"') => {
                let text = self.string()?;
                push(out, Header::Text(Some(text.len())));
                out.extend_from_slice(text.as_bytes());
                Ok(())
            }
            Some(b'-' | b'0'..=b'9') if !self.text[self.at..].starts_with(b"-Infinity") => {
                self.number(out)
            }
            Some(_) => {
                let header = self
                    .word()
                    .ok_or_else(|| self.error("a character that starts no value"))?;
                push(out, header);
                Ok(())
            }
        }
    }

    /// The literal names JSON has (`true`, `false`, `null`) and the three Python's `json`
    /// writes for the non-finite floats, as their CBOR headers.
    fn word(&mut self) -> Option<Header> {
        const WORDS: [(&[u8], Header); 6] = [
            (b"true", Header::Simple(21)),
            (b"false", Header::Simple(20)),
            (b"null", Header::Simple(22)),
            (b"NaN", Header::Float(f64::NAN)),
            (b"Infinity", Header::Float(f64::INFINITY)),
            (b"-Infinity", Header::Float(f64::NEG_INFINITY)),
        ];
        let (word, header) = WORDS
            .into_iter()
            .find(|(word, _)| self.text[self.at..].starts_with(word))?;
        self.at += word.len();
        Some(header)
    }

    fn number(&mut self, out: &mut Vec<u8>) -> Result<(), EncodingError> {
        let start = self.at;
        let mut float = false;
        while let Some(&b) = self.text.get(self.at) {
            match b {
                b'0'..=b'9' | b'-' | b'+' => {}
                b'.' | b'e' | b'E' => float = true,
                _ => break,
            }
            self.at += 1;
        }
        // Only ASCII bytes were taken.
        let literal = std::str::from_utf8(&self.text[start..self.at]).unwrap_or_default();
        let bad = EncodingError::NotJson {
            what: "a malformed number",
            at: start,
        };
        let digits = literal.strip_prefix('-').unwrap_or(literal).as_bytes();
        if digits.len() > 1 && digits[0] == b'0' && digits[1].is_ascii_digit() {
            return Err(bad);
        }
        if float {
            let n: f64 = literal.parse().map_err(|_| bad)?;
            push(out, Header::Float(n));
            return Ok(());
        }
        let Ok(n) = literal.parse::<i128>() else {
            return Err(
                if !digits.is_empty() && digits.iter().all(u8::is_ascii_digit) {
                    EncodingError::IntegerTooLarge(literal.to_owned())
                } else {
                    bad
                },
            );
        };
        if let Ok(n) = u64::try_from(n) {
            push(out, Header::Positive(n));
        } else if n < 0 && -1 - n <= i128::from(u64::MAX) {
            push(out, Header::Negative((-1 - n) as u64));
        } else {
            return Err(EncodingError::IntegerTooLarge(literal.to_owned()));
        }
        Ok(())
    }

    /// A string, unescaped (borrowed from the text when it has no escapes).
    fn string(&mut self) -> Result<std::borrow::Cow<'_, str>, EncodingError> {
        self.at += 1; // the opening quote
        let start = self.at;
        let mut owned: Option<Vec<u8>> = None;
        let mut run = start;
        loop {
            let Some(&b) = self.text.get(self.at) else {
                return Err(self.error("a string without its closing quote"));
            };
            match b {
                b'"' => break,
                b'\\' => {
                    let buf = owned.get_or_insert_with(Vec::new);
                    buf.extend_from_slice(&self.text[run..self.at]);
                    self.at += 1;
                    self.escape(buf)?;
                    run = self.at;
                }
                0..=0x1f => return Err(self.error("a control character inside a string")),
                _ => self.at += 1,
            }
        }
        let end = self.at;
        self.at += 1; // the closing quote
        let bytes = match owned {
            Some(mut buf) => {
                buf.extend_from_slice(&self.text[run..end]);
                std::borrow::Cow::Owned(buf)
            }
            None => std::borrow::Cow::Borrowed(&self.text[start..end]),
        };
        let invalid = EncodingError::NotJson {
            what: "a string that is not UTF-8",
            at: start,
        };
        Ok(match bytes {
            std::borrow::Cow::Borrowed(b) => {
                std::borrow::Cow::Borrowed(std::str::from_utf8(b).map_err(|_| invalid)?)
            }
            std::borrow::Cow::Owned(b) => {
                std::borrow::Cow::Owned(String::from_utf8(b).map_err(|_| invalid)?)
            }
        })
    }

    /// One escape after its backslash, appended to `buf` as UTF-8.
    fn escape(&mut self, buf: &mut Vec<u8>) -> Result<(), EncodingError> {
        let Some(&b) = self.text.get(self.at) else {
            return Err(self.error("a string without its closing quote"));
        };
        self.at += 1;
        let c = match b {
            b'"' => '"',
            b'\\' => '\\',
            b'/' => '/',
            b'b' => '\u{8}',
            b'f' => '\u{c}',
            b'n' => '\n',
            b'r' => '\r',
            b't' => '\t',
            b'u' => {
                let first = self.hex4()?;
                let code = if (0xd800..0xdc00).contains(&first) {
                    if !self.eat(b"\\u") {
                        return Err(self.error("a lone surrogate in a \\u escape"));
                    }
                    let second = self.hex4()?;
                    if !(0xdc00..0xe000).contains(&second) {
                        return Err(self.error("a lone surrogate in a \\u escape"));
                    }
                    0x10000 + ((first - 0xd800) << 10) + (second - 0xdc00)
                } else {
                    first
                };
                char::from_u32(code)
                    .ok_or_else(|| self.error("a lone surrogate in a \\u escape"))?
            }
            _ => return Err(self.error("an unknown escape")),
        };
        let mut utf8 = [0u8; 4];
        buf.extend_from_slice(c.encode_utf8(&mut utf8).as_bytes());
        Ok(())
    }

    fn hex4(&mut self) -> Result<u32, EncodingError> {
        let digits = self
            .text
            .get(self.at..self.at + 4)
            .and_then(|d| std::str::from_utf8(d).ok())
            .and_then(|d| u32::from_str_radix(d, 16).ok())
            .ok_or_else(|| self.error("a \\u escape without four hex digits"))?;
        self.at += 4;
        Ok(digits)
    }

    fn array(&mut self, out: &mut Vec<u8>, depth: u32) -> Result<(), EncodingError> {
        self.at += 1;
        let mut body = Vec::new();
        let mut items = 0;
        self.skip_whitespace();
        if !self.eat(b"]") {
            loop {
                self.skip_whitespace();
                self.value(&mut body, depth + 1)?;
                items += 1;
                self.skip_whitespace();
                if self.eat(b"]") {
                    break;
                }
                if !self.eat(b",") {
                    return Err(self.error("an array item followed by neither `,` nor `]`"));
                }
            }
        }
        push(out, Header::Array(Some(items)));
        out.extend_from_slice(&body);
        Ok(())
    }

    fn object(&mut self, out: &mut Vec<u8>, depth: u32) -> Result<(), EncodingError> {
        self.at += 1;
        let mut body = Vec::new();
        // Each entry's key and where its value lies in `body`, for the two objects that have
        // a CBOR form of their own.
        let mut entries: Vec<(String, std::ops::Range<usize>)> = Vec::new();
        self.skip_whitespace();
        if !self.eat(b"}") {
            loop {
                self.skip_whitespace();
                if self.text.get(self.at) != Some(&b'"') {
                    return Err(self.error("an object key that is not a string"));
                }
                let key = self.string()?.into_owned();
                push(&mut body, Header::Text(Some(key.len())));
                body.extend_from_slice(key.as_bytes());
                self.skip_whitespace();
                if !self.eat(b":") {
                    return Err(self.error("an object key without `:`"));
                }
                self.skip_whitespace();
                let start = body.len();
                self.value(&mut body, depth + 1)?;
                entries.push((key, start..body.len()));
                self.skip_whitespace();
                if self.eat(b"}") {
                    break;
                }
                if !self.eat(b",") {
                    return Err(self.error("an object entry followed by neither `,` nor `}`"));
                }
            }
        }
        match entries.as_slice() {
            [(key, value)] if key == "$bytes" => {
                let encoded = &body[value.clone()];
                let text = text_item(encoded)
                    .ok_or_else(|| EncodingError::BadBase64("it is not a string".into()))?;
                let bytes = base64::engine::general_purpose::STANDARD
                    .decode(text)
                    .map_err(|e| EncodingError::BadBase64(e.to_string()))?;
                push(out, Header::Bytes(Some(bytes.len())));
                out.extend_from_slice(&bytes);
            }
            [(k1, v1), (k2, v2)] if versioned(k1, k2) || versioned(k2, k1) => {
                let (version, value) = if k1 == "$version" { (v1, v2) } else { (v2, v1) };
                push(out, Header::Tag(VERSION_TAG));
                push(out, Header::Array(Some(2)));
                out.extend_from_slice(&body[version.clone()]);
                out.extend_from_slice(&body[value.clone()]);
            }
            _ => {
                push(out, Header::Map(Some(entries.len())));
                out.extend_from_slice(&body);
            }
        }
        Ok(())
    }
}

fn versioned(first: &str, second: &str) -> bool {
    first == "$version" && second == "$value"
}

/// The text of a CBOR text item of definite length, as [`JsonReader`] writes them.
fn text_item(cbor: &[u8]) -> Option<&[u8]> {
    let mut decoder = Decoder::from(cbor);
    match decoder.pull().ok()? {
        Header::Text(Some(len)) => cbor.get(decoder.offset()..decoder.offset() + len),
        _ => None,
    }
}

/// Writes one CBOR item as JSON text.
struct JsonWriter<'a> {
    decoder: Decoder<&'a [u8]>,
    /// The length of the item's bytes: no string in them is longer than what is left.
    len: usize,
}

impl JsonWriter<'_> {
    fn malformed(&mut self) -> EncodingError {
        EncodingError::NotCbor(self.decoder.offset())
    }

    fn pull(&mut self) -> Result<Header, EncodingError> {
        let at = self.decoder.offset();
        self.decoder.pull().map_err(|_| EncodingError::NotCbor(at))
    }

    fn item(&mut self, out: &mut Vec<u8>, depth: u32) -> Result<(), EncodingError> {
        let header = self.pull()?;
        self.item_after(header, out, depth)
    }

    fn item_after(
        &mut self,
        header: Header,
        out: &mut Vec<u8>,
        depth: u32,
    ) -> Result<(), EncodingError> {
        if depth > MAX_DEPTH {
            return Err(EncodingError::TooDeep);
        }
        match header {
            Header::Positive(n) => push_decimal(out, n),
            Header::Negative(n) => {
                out.push(b'-');
                // -1 - n, whose magnitude n + 1 may need 65 bits.
                out.extend_from_slice((u128::from(n) + 1).to_string().as_bytes());
            }
            Header::Float(f) => push_float(out, f),
            Header::Simple(20) => out.extend_from_slice(b"false"),
            Header::Simple(21) => out.extend_from_slice(b"true"),
            Header::Simple(22 | 23) => out.extend_from_slice(b"null"),
            Header::Simple(other) => {
                return Err(EncodingError::NoJsonForm(format!(
                    "the simple value {other}"
                )));
            }
            Header::Break => return Err(self.malformed()),
            Header::Text(len) => {
                let text = self.text(len)?;
                push_string(out, &text);
            }
            Header::Bytes(len) => {
                let bytes = self.bytes(len)?;
                out.extend_from_slice(b"{\"$bytes\":\"");
                let encoded = base64::engine::general_purpose::STANDARD.encode(bytes);
                out.extend_from_slice(encoded.as_bytes());
                out.extend_from_slice(b"\"}");
            }
            Header::Tag(VERSION_TAG) => {
                if self.pull()? != Header::Array(Some(2)) {
                    return Err(EncodingError::NoJsonForm(
                        "a versioned value that is not [version, value]".into(),
                    ));
                }
                out.extend_from_slice(b"{\"$version\":");
                self.item(out, depth + 1)?;
                out.extend_from_slice(b",\"$value\":");
                self.item(out, depth + 1)?;
                out.push(b'}');
            }
            Header::Tag(tag @ (2 | 3)) => match self.pull()? {
                Header::Bytes(len) => {
                    let bytes = self.bytes(len)?;
                    push_bignum(out, tag == 3, &bytes)?;
                }
                other => self.item_after(other, out, depth + 1)?,
            },
            Header::Tag(_) => self.item(out, depth + 1)?,
            Header::Array(len) => {
                out.push(b'[');
                let mut first = true;
                self.each(len, |writer, header| {
                    if !std::mem::take(&mut first) {
                        out.push(b',');
                    }
                    writer.item_after(header, out, depth + 1)
                })?;
                out.push(b']');
            }
            Header::Map(len) => {
                out.push(b'{');
                let mut first = true;
                self.each(len, |writer, header| {
                    if !std::mem::take(&mut first) {
                        out.push(b',');
                    }
                    writer.map_key(header, out)?;
                    out.push(b':');
                    writer.item(out, depth + 1)
                })?;
                out.push(b'}');
            }
        }
        Ok(())
    }

    /// Calls `f` with the header of each item of an array (or each key of a map) of `len`
    /// items, or up to its break when its length is indefinite.
    fn each(
        &mut self,
        len: Option<usize>,
        mut f: impl FnMut(&mut Self, Header) -> Result<(), EncodingError>,
    ) -> Result<(), EncodingError> {
        match len {
            Some(len) => {
                for _ in 0..len {
                    let header = self.pull()?;
                    f(self, header)?;
                }
            }
            None => loop {
                match self.pull()? {
                    Header::Break => break,
                    header => f(self, header)?,
                }
            },
        }
        Ok(())
    }

    /// A map key as a JSON object's key: text as itself, an integer as its decimal text.
    fn map_key(&mut self, header: Header, out: &mut Vec<u8>) -> Result<(), EncodingError> {
        match header {
            Header::Text(len) => {
                let text = self.text(len)?;
                push_string(out, &text);
            }
            Header::Positive(_) | Header::Negative(_) => {
                out.push(b'"');
                self.item_after(header, out, 0)?;
                out.push(b'"');
            }
            other => {
                return Err(EncodingError::NoJsonForm(format!(
                    "a map key that is neither text nor an integer ({other:?})"
                )));
            }
        }
        Ok(())
    }

    /// Room for a string whose head says `len`: no more than the bytes left, whatever it
    /// says (a length the bytes do not hold fails as the string is read).
    fn at_most(&mut self, len: Option<usize>) -> usize {
        let left = self.len.saturating_sub(self.decoder.offset());
        len.unwrap_or(0).min(left)
    }

    fn text(&mut self, len: Option<usize>) -> Result<String, EncodingError> {
        let at = self.decoder.offset();
        let mut text = String::with_capacity(self.at_most(len));
        let mut scratch = [0u8; 4096];
        let mut segments = self.decoder.text(len);
        while let Some(mut segment) = segments.pull().map_err(|_| EncodingError::NotCbor(at))? {
            while let Some(chunk) = segment
                .pull(&mut scratch)
                .map_err(|_| EncodingError::NotCbor(at))?
            {
                text.push_str(chunk);
            }
        }
        Ok(text)
    }

    fn bytes(&mut self, len: Option<usize>) -> Result<Vec<u8>, EncodingError> {
        let at = self.decoder.offset();
        let mut bytes = Vec::with_capacity(self.at_most(len));
        let mut scratch = [0u8; 4096];
        let mut segments = self.decoder.bytes(len);
        while let Some(mut segment) = segments.pull().map_err(|_| EncodingError::NotCbor(at))? {
            while let Some(chunk) = segment
                .pull(&mut scratch)
                .map_err(|_| EncodingError::NotCbor(at))?
            {
                bytes.extend_from_slice(chunk);
            }
        }
        Ok(bytes)
    }
}

/// A float as JSON text that every SDK reads back as a float: `1.0`, not `1`.
fn push_float(out: &mut Vec<u8>, f: f64) {
    if f.is_nan() {
        out.extend_from_slice(b"NaN");
    } else if f.is_infinite() {
        out.extend_from_slice(if f > 0.0 { b"Infinity" } else { b"-Infinity" });
    } else {
        // `Debug` prints the shortest text that reads back as the same f64, with a `.0` or
        // an exponent.
        out.extend_from_slice(format!("{f:?}").as_bytes());
    }
}

/// A bignum's magnitude (big-endian bytes) as decimal digits; `negative` is tag 3, -1 - n.
fn push_bignum(out: &mut Vec<u8>, negative: bool, magnitude: &[u8]) -> Result<(), EncodingError> {
    let significant = magnitude.iter().skip_while(|&&b| b == 0).count();
    if significant > 16 {
        return Err(EncodingError::NoJsonForm(format!(
            "a bignum of {significant} bytes"
        )));
    }
    let n = magnitude
        .iter()
        .fold(0u128, |n, &b| (n << 8) | u128::from(b));
    if negative {
        out.push(b'-');
        match n.checked_add(1) {
            Some(m) => out.extend_from_slice(m.to_string().as_bytes()),
            None => out.extend_from_slice(b"340282366920938463463374607431768211456"),
        }
    } else {
        out.extend_from_slice(n.to_string().as_bytes());
    }
    Ok(())
}

/// `text` as a JSON string, escaping what JSON requires.
fn push_string(out: &mut Vec<u8>, text: &str) {
    out.push(b'"');
    let bytes = text.as_bytes();
    let mut run = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let escape: &[u8] = match b {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            b'\n' => b"\\n",
            b'\r' => b"\\r",
            b'\t' => b"\\t",
            0..=0x1f => b"",
            _ => continue,
        };
        out.extend_from_slice(&bytes[run..i]);
        if escape.is_empty() {
            out.extend_from_slice(format!("\\u{b:04x}").as_bytes());
        } else {
            out.extend_from_slice(escape);
        }
        run = i + 1;
    }
    out.extend_from_slice(&bytes[run..]);
    out.push(b'"');
}

#[cfg(test)]
mod tests {
    use super::*;

    fn to_cbor(json: &str) -> Vec<u8> {
        converted(json.as_bytes(), json_to_cbor).unwrap_or_else(|e| panic!("{json}: {e}"))
    }

    fn to_json(cbor: &[u8]) -> String {
        let json = converted(cbor, cbor_to_json).unwrap_or_else(|e| panic!("{cbor:02x?}: {e}"));
        String::from_utf8(json).expect("UTF-8")
    }

    fn cbor(value: &impl serde::Serialize) -> Vec<u8> {
        let mut out = Vec::new();
        ciborium::into_writer(value, &mut out).expect("CBOR");
        out
    }

    /// What the Rust SDK writes for a value is what a JSON guest's text of it converts to,
    /// and converts back to the same text.
    #[test]
    fn json_text_and_the_rust_sdks_cbor_are_one_value() {
        #[derive(serde::Serialize)]
        struct Seen {
            count: u64,
            last_seen: i64,
            page: String,
            ratio: f64,
            tags: Vec<String>,
            parent: Option<u32>,
            ok: bool,
        }
        let seen = Seen {
            count: 3,
            last_seen: -1_700_000_000_000,
            page: "caf\u{e9} \"q\"\n".into(),
            ratio: 0.25,
            tags: vec!["a".into(), "b".into()],
            parent: None,
            ok: true,
        };
        let json = r#"{"count":3,"last_seen":-1700000000000,"page":"café \"q\"\n","ratio":0.25,"tags":["a","b"],"parent":null,"ok":true}"#;
        assert_eq!(to_cbor(json), cbor(&seen));
        assert_eq!(to_json(&cbor(&seen)), json);
        for (json, value) in [("0", 0i64), ("7", 7), ("23", 23), ("24", 24), ("-1", -1)] {
            assert_eq!(to_cbor(json), cbor(&value), "{json}");
            assert_eq!(to_json(&cbor(&value)), json);
        }
        for n in [24u64, 255, 256, 65_535, 65_536, 1 << 32, u64::MAX] {
            assert_eq!(to_json(&cbor(&n)), n.to_string());
            assert_eq!(to_cbor(&n.to_string()), cbor(&n));
        }
        assert_eq!(to_cbor("18446744073709551615"), cbor(&u64::MAX));
        assert_eq!(
            to_cbor("-18446744073709551616"),
            cbor(&(-1i128 - i128::from(u64::MAX)))
        );
        assert_eq!(to_json(&cbor(&i64::MIN)), i64::MIN.to_string());
        assert_eq!(to_cbor("1.0"), cbor(&1.0f64), "the smallest exact width");
        assert_eq!(to_json(&cbor(&1.0f64)), "1.0", "a float stays a float");
        assert_eq!(to_json(&cbor(&1e300f64)), "1e300");
        assert_eq!(to_json(&cbor(&(1u32, "a"))), r#"[1,"a"]"#);
        let by_number: std::collections::BTreeMap<u32, bool> = [(3, true)].into();
        assert_eq!(to_json(&cbor(&by_number)), r#"{"3":true}"#);
    }

    #[test]
    fn bytes_and_versioned_values_have_cbor_forms_of_their_own() {
        let bytes = serde_bytes_like(&[0, 1, 255]);
        assert_eq!(to_cbor(r#"{"$bytes":"AAH/"}"#), bytes);
        assert_eq!(to_json(&bytes), r#"{"$bytes":"AAH/"}"#);
        // The Rust SDK's versioned value: the tag's head, then [version, value].
        let mut versioned = vec![0xda, 0x57, 0x45, 0x49, 0x52, 0x82, 0x02];
        versioned.extend(cbor(&"x"));
        assert_eq!(to_cbor(r#"{"$version":2,"$value":"x"}"#), versioned);
        assert_eq!(to_cbor(r#"{"$value":"x", "$version":2}"#), versioned);
        assert_eq!(to_json(&versioned), r#"{"$version":2,"$value":"x"}"#);
        // An object that merely has such a key is an object.
        assert_eq!(
            to_json(&to_cbor(r#"{"$bytes":1,"n":2}"#)),
            r#"{"$bytes":1,"n":2}"#
        );
    }

    fn serde_bytes_like(bytes: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        push(&mut out, Header::Bytes(Some(bytes.len())));
        out.extend_from_slice(bytes);
        out
    }

    #[test]
    fn what_python_writes_reads_back_the_same() {
        for json in [
            "\"\"",
            "\"\\u00e9\\ud83d\\ude00 \\\\ \\/\"",
            "[]",
            "{}",
            "[[1,[2,[3]]],{\"a\":{\"b\":[]}}]",
            " { \"a\" : [ 1 , 2.5e-7 , -0.0 ] } ",
            "NaN",
            "[Infinity,-Infinity]",
            "1E+400",
        ] {
            let back = to_json(&to_cbor(json));
            let reparsed = to_json(&to_cbor(&back));
            assert_eq!(back, reparsed, "{json}");
        }
        assert_eq!(to_json(&to_cbor("\"\\u00e9\\ud83d\\ude00\"")), "\"é😀\"");
        assert_eq!(to_json(&to_cbor("\"a\\u0001\"")), "\"a\\u0001\"");
        assert_eq!(to_json(&to_cbor("[1E+400]")), "[Infinity]");
    }

    #[test]
    fn what_is_not_json_or_has_no_form_is_an_error() {
        for (json, what) in [
            ("", "the end where a value belongs"),
            ("{\"a\":1", "an object entry followed by neither"),
            ("[1 2]", "an array item followed by neither"),
            ("\"open", "a string without its closing quote"),
            ("01", "a malformed number"),
            ("1 1", "text after the value"),
            ("{1:2}", "an object key that is not a string"),
            ("\"\\ud800\"", "a lone surrogate"),
            ("tru", "a character that starts no value"),
            ("--1", "a malformed number"),
        ] {
            let e = converted(json.as_bytes(), json_to_cbor).expect_err(json);
            assert!(e.to_string().contains(what), "{json}: {e}");
        }
        let e = converted(b"123456789012345678901234567890", json_to_cbor).expect_err("big");
        assert!(matches!(e, EncodingError::IntegerTooLarge(_)), "{e}");
        let e = converted(b"{\"$bytes\":\"***\"}", json_to_cbor).expect_err("base64");
        assert!(matches!(e, EncodingError::BadBase64(_)), "{e}");
        let deep = "[".repeat(300) + &"]".repeat(300);
        assert_eq!(
            converted(deep.as_bytes(), json_to_cbor),
            Err(EncodingError::TooDeep)
        );

        assert!(matches!(
            converted(&[0x18], cbor_to_json),
            Err(EncodingError::NotCbor(_))
        ));
        assert!(matches!(
            converted(&[0x01, 0x02], cbor_to_json),
            Err(EncodingError::NotCbor(1))
        ));
        let float_keyed = [0xa1, 0xf9, 0x3c, 0x00, 0x01];
        assert!(matches!(
            converted(&float_keyed, cbor_to_json),
            Err(EncodingError::NoJsonForm(_))
        ));
    }

    #[test]
    fn indefinite_lengths_and_bignums_read_as_json() {
        // [_ 1, "a" "b" (two segments)], {_ "k": 2}
        let indefinite = [0x9f, 0x01, 0x7f, 0x61, b'a', 0x61, b'b', 0xff, 0xff];
        assert_eq!(to_json(&indefinite), r#"[1,"ab"]"#);
        assert_eq!(to_json(&[0xbf, 0x61, b'k', 0x02, 0xff]), r#"{"k":2}"#);
        assert_eq!(to_json(&cbor(&u128::MAX)), u128::MAX.to_string());
        assert_eq!(to_json(&cbor(&i128::MIN)), i128::MIN.to_string());
        assert_eq!(to_json(&[0xf7]), "null", "undefined");
    }
}

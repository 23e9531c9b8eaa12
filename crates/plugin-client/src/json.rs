//! Just enough JSON for the static clients: the string value of a top-level member of a
//! network config (`daemonSocketDir`, `cniVersion`), read without a JSON library.
//!
//! The whole document is checked against the JSON grammar (RFC 8259, as strictly as
//! serde_json: UTF-8 only, no control characters in strings, no lone surrogates, nothing after
//! the value, at most [`MAX_DEPTH`] nested arrays and objects). A document this module refuses makes
//! the client hand the call to the full plugin, which reports it, so being stricter than the
//! agent only ever costs an exec. Where both accept a document they agree on the value
//! (property-tested against serde_json in `json_tests.rs`); for duplicate members the last
//! one counts, as in the agent's parser.

use std::fmt;

/// Most arrays and objects nested in one another, the top-level object included (serde_json's
/// default recursion limit of 128 stops at the 128th).
pub const MAX_DEPTH: usize = 127;

/// Why a document is not read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JsonError {
    /// Byte offset where reading stopped.
    pub at: usize,
    /// What was wrong there.
    pub what: &'static str,
}

impl fmt::Display for JsonError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} at byte {}", self.what, self.at)
    }
}

impl std::error::Error for JsonError {}

/// A top-level member of an object, as far as the clients care.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Member {
    /// No member of that name.
    Absent,
    /// A string (unescaped).
    String(String),
    /// Any other value.
    Other,
}

/// The value of the top-level member `key` of the JSON object `doc` when that value is a
/// string; `Ok(None)` when there is no such member or its value is not a string; an error when
/// `doc` is not a JSON object.
pub fn top_level_string(doc: &[u8], key: &str) -> Result<Option<String>, JsonError> {
    Ok(match top_level_member(doc, key)? {
        Member::String(value) => Some(value),
        Member::Absent | Member::Other => None,
    })
}

/// The top-level member `key` of the JSON object `doc` (the last one of that name); an error
/// when `doc` is not a JSON object.
pub fn top_level_member(doc: &[u8], key: &str) -> Result<Member, JsonError> {
    read_member(doc, key).map(|(member, _)| member)
}

/// How many top-level members of the JSON object `doc` are named `key` (a struct decoder such
/// as serde's derive refuses a repeated one where a map keeps the last).
pub fn top_level_count(doc: &[u8], key: &str) -> Result<usize, JsonError> {
    read_member(doc, key).map(|(_, count)| count)
}

fn read_member(doc: &[u8], key: &str) -> Result<(Member, usize), JsonError> {
    let text = std::str::from_utf8(doc).map_err(|e| JsonError {
        at: e.valid_up_to(),
        what: "not UTF-8",
    })?;
    let mut reader = Reader {
        bytes: text.as_bytes(),
        at: 0,
    };
    reader.skip_ws();
    if reader.peek() != Some(b'{') {
        return Err(reader.error("not a JSON object"));
    }
    let (mut found, mut count) = (Member::Absent, 0);
    reader.object(0, &mut |member, value| {
        if member == key {
            found = value.map_or(Member::Other, Member::String);
            count += 1;
        }
    })?;
    reader.skip_ws();
    if reader.at != reader.bytes.len() {
        return Err(reader.error("trailing characters"));
    }
    Ok((found, count))
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn error(&self, what: &'static str) -> JsonError {
        JsonError { at: self.at, what }
    }

    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.at).copied()
    }

    fn next(&mut self) -> Option<u8> {
        let byte = self.peek();
        self.at += usize::from(byte.is_some());
        byte
    }

    fn expect(&mut self, byte: u8, what: &'static str) -> Result<(), JsonError> {
        if self.peek() == Some(byte) {
            self.at += 1;
            Ok(())
        } else {
            Err(self.error(what))
        }
    }

    fn skip_ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.at += 1;
        }
    }

    /// An object at `depth` (its `{` next); `member` sees each top-level member (only called
    /// at depth 0) with its value when that is a string.
    fn object(
        &mut self,
        depth: usize,
        member: &mut dyn FnMut(String, Option<String>),
    ) -> Result<(), JsonError> {
        self.expect(b'{', "expected '{'")?;
        self.skip_ws();
        if self.peek() == Some(b'}') {
            self.at += 1;
            return Ok(());
        }
        loop {
            self.skip_ws();
            if self.peek() != Some(b'"') {
                return Err(self.error("expected a member name"));
            }
            let name = self.string()?;
            self.skip_ws();
            self.expect(b':', "expected ':'")?;
            self.skip_ws();
            let value = self.value(depth + 1)?;
            if depth == 0 {
                member(name, value);
            }
            self.skip_ws();
            match self.next() {
                Some(b',') => continue,
                Some(b'}') => return Ok(()),
                _ => return Err(self.error("expected ',' or '}'")),
            }
        }
    }

    fn array(&mut self, depth: usize) -> Result<(), JsonError> {
        self.expect(b'[', "expected '['")?;
        self.skip_ws();
        if self.peek() == Some(b']') {
            self.at += 1;
            return Ok(());
        }
        loop {
            self.skip_ws();
            self.value(depth + 1)?;
            self.skip_ws();
            match self.next() {
                Some(b',') => continue,
                Some(b']') => return Ok(()),
                _ => return Err(self.error("expected ',' or ']'")),
            }
        }
    }

    /// A value inside `depth` containers; its text when it is a string.
    fn value(&mut self, depth: usize) -> Result<Option<String>, JsonError> {
        if matches!(self.peek(), Some(b'{' | b'[')) && depth >= MAX_DEPTH {
            return Err(self.error("nested too deeply"));
        }
        match self.peek() {
            Some(b'"') => self.string().map(Some),
            Some(b'{') => self.object(depth, &mut |_, _| {}).map(|()| None),
            Some(b'[') => self.array(depth).map(|()| None),
            Some(b't') => self.literal("true"),
            Some(b'f') => self.literal("false"),
            Some(b'n') => self.literal("null"),
            Some(b'-' | b'0'..=b'9') => self.number(),
            _ => Err(self.error("expected a value")),
        }
    }

    fn literal(&mut self, word: &'static str) -> Result<Option<String>, JsonError> {
        if self.bytes[self.at..].starts_with(word.as_bytes()) {
            self.at += word.len();
            Ok(None)
        } else {
            Err(self.error("invalid literal"))
        }
    }

    fn digits(&mut self) -> usize {
        let start = self.at;
        while matches!(self.peek(), Some(b'0'..=b'9')) {
            self.at += 1;
        }
        self.at - start
    }

    fn number(&mut self) -> Result<Option<String>, JsonError> {
        let start = self.at;
        if self.peek() == Some(b'-') {
            self.at += 1;
        }
        match self.peek() {
            Some(b'0') => self.at += 1,
            Some(b'1'..=b'9') => {
                self.digits();
            }
            _ => return Err(self.error("invalid number")),
        }
        if self.peek() == Some(b'.') {
            self.at += 1;
            if self.digits() == 0 {
                return Err(self.error("invalid number"));
            }
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            self.at += 1;
            if matches!(self.peek(), Some(b'+' | b'-')) {
                self.at += 1;
            }
            if self.digits() == 0 {
                return Err(self.error("invalid number"));
            }
        }
        // As serde_json: a number beyond f64's range is an error, not infinity.
        let lexeme =
            std::str::from_utf8(&self.bytes[start..self.at]).map_err(|_| self.error("invalid number"))?;
        match lexeme.parse::<f64>() {
            Ok(value) if value.is_finite() => Ok(None),
            _ => Err(JsonError {
                at: start,
                what: "number out of range",
            }),
        }
    }

    fn hex4(&mut self) -> Result<u32, JsonError> {
        let digits = self
            .bytes
            .get(self.at..self.at + 4)
            .ok_or_else(|| self.error("short \\u escape"))?;
        let text = std::str::from_utf8(digits).map_err(|_| self.error("invalid \\u escape"))?;
        if !text.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(self.error("invalid \\u escape"));
        }
        self.at += 4;
        u32::from_str_radix(text, 16).map_err(|_| self.error("invalid \\u escape"))
    }

    /// A string (its `"` next), unescaped. The input is known to be UTF-8.
    fn string(&mut self) -> Result<String, JsonError> {
        self.expect(b'"', "expected '\"'")?;
        let mut out = Vec::new();
        loop {
            let start = self.at;
            while matches!(self.peek(), Some(b) if b != b'"' && b != b'\\' && b >= 0x20) {
                self.at += 1;
            }
            out.extend_from_slice(&self.bytes[start..self.at]);
            match self.next() {
                Some(b'"') => break,
                Some(b'\\') => {
                    let escaped = match self.next() {
                        Some(b'"') => '"',
                        Some(b'\\') => '\\',
                        Some(b'/') => '/',
                        Some(b'b') => '\u{8}',
                        Some(b'f') => '\u{c}',
                        Some(b'n') => '\n',
                        Some(b'r') => '\r',
                        Some(b't') => '\t',
                        Some(b'u') => self.unicode_escape()?,
                        _ => return Err(self.error("invalid escape")),
                    };
                    let mut buf = [0; 4];
                    out.extend_from_slice(escaped.encode_utf8(&mut buf).as_bytes());
                }
                Some(_) => return Err(self.error("control character in a string")),
                None => return Err(self.error("unterminated string")),
            }
        }
        // Only whole UTF-8 sequences of valid input and encoded chars were copied.
        String::from_utf8(out).map_err(|_| self.error("not UTF-8"))
    }

    /// The character of a `\u` escape whose `u` was just read (a surrogate pair takes two).
    fn unicode_escape(&mut self) -> Result<char, JsonError> {
        let first = self.hex4()?;
        let code = match first {
            0xD800..=0xDBFF => {
                if !self.bytes[self.at..].starts_with(b"\\u") {
                    return Err(self.error("lone leading surrogate"));
                }
                self.at += 2;
                let second = self.hex4()?;
                if !(0xDC00..=0xDFFF).contains(&second) {
                    return Err(self.error("invalid surrogate pair"));
                }
                0x10000 + ((first - 0xD800) << 10) + (second - 0xDC00)
            }
            0xDC00..=0xDFFF => return Err(self.error("lone trailing surrogate")),
            code => code,
        };
        char::from_u32(code).ok_or_else(|| self.error("invalid \\u escape"))
    }
}

#[cfg(test)]
#[path = "json_tests.rs"]
mod tests;

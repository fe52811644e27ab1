//! Idle conversations, packed into one byte buffer.
//!
//! A conversation in use is a `Vec<Msg>`: every message is a ~100-byte struct with a
//! heap-allocated id, content vector and text, each allocation with its own header and
//! rounding: for an agent holding many idle sessions, kilobytes of bookkeeping per
//! session on top of the text itself. [`Packed`] holds the same messages as
//! one exactly-sized buffer: a few bytes of framing per message, ids the runtime
//! generated (`msg_` and 16 hex digits) as 8 bytes, a name repeated from the previous
//! message as one flag bit. Packing is lossless: [`Packed::unpack`] gives back messages
//! equal to the packed ones, field for field.
//!
//! The format (lengths and counts as LEB128 varints):
//! - the message count, then per message a flags byte (role in bits 0–1; bit 2: a
//!   name follows; bit 3: the name is the previous message's; bit 4: metadata
//!   follows; bit 5: the id is a generated one, as 8 bytes little-endian), the id,
//!   the name, the metadata as JSON, then the block count and the blocks;
//! - a block is a tag byte, then: text; a tool use's id, name and input (JSON); a tool
//!   result's id, name and text (the tag holds `is_error`); any other block as its
//!   JSON form.

use serde_json::{Map, Value};

use crate::message::{ContentBlock, Msg, Role, ToolResult, ToolUse};
use crate::util::hex_id;

const ROLE_MASK: u8 = 0b11;
const HAS_NAME: u8 = 1 << 2;
const SAME_NAME: u8 = 1 << 3;
const HAS_METADATA: u8 = 1 << 4;
const GENERATED_ID: u8 = 1 << 5;

const TEXT: u8 = 0;
const TOOL_USE: u8 = 1;
const TOOL_RESULT: u8 = 2;
const TOOL_ERROR: u8 = 3;
const JSON_BLOCK: u8 = 4;

/// The prefix of the message ids the runtime generates.
const ID_PREFIX: &str = "msg";

/// Messages packed into one exactly-sized buffer (see the module docs).
pub(crate) struct Packed(Box<[u8]>);

impl std::fmt::Debug for Packed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Packed({} bytes)", self.0.len())
    }
}

impl Packed {
    /// Packs `messages`. `None` when a JSON part (tool input, metadata, a thinking
    /// block) cannot be serialized; the caller then keeps the messages as they are.
    pub(crate) fn pack(messages: &[Msg]) -> Option<Self> {
        let text: usize = messages
            .iter()
            .flat_map(|m| &m.content)
            .map(|b| match b {
                ContentBlock::Text(t) => t.len(),
                ContentBlock::ToolResult(r) => r.content.len(),
                _ => 32,
            })
            .sum();
        let mut out = Vec::with_capacity(text + 24 * messages.len() + 4);
        varint(&mut out, messages.len());
        let mut previous: Option<&str> = None;
        for m in messages {
            let generated = generated_id(&m.id);
            let same_name = m.name.is_some() && m.name.as_deref() == previous;
            let mut flags = role_bits(m.role);
            if m.name.is_some() {
                flags |= if same_name { SAME_NAME } else { HAS_NAME };
            }
            if !m.metadata.is_empty() {
                flags |= HAS_METADATA;
            }
            if generated.is_some() {
                flags |= GENERATED_ID;
            }
            out.push(flags);
            match generated {
                Some(v) => out.extend_from_slice(&v.to_le_bytes()),
                None => bytes(&mut out, m.id.as_bytes()),
            }
            if let Some(name) = &m.name
                && !same_name
            {
                bytes(&mut out, name.as_bytes());
            }
            if m.name.is_some() {
                previous = m.name.as_deref();
            }
            if !m.metadata.is_empty() {
                json(&mut out, &m.metadata)?;
            }
            varint(&mut out, m.content.len());
            for block in &m.content {
                match block {
                    ContentBlock::Text(t) => {
                        out.push(TEXT);
                        bytes(&mut out, t.as_bytes());
                    }
                    ContentBlock::ToolUse(u) => {
                        out.push(TOOL_USE);
                        bytes(&mut out, u.id.as_bytes());
                        bytes(&mut out, u.name.as_bytes());
                        json(&mut out, &u.input)?;
                    }
                    ContentBlock::ToolResult(r) => {
                        out.push(if r.is_error { TOOL_ERROR } else { TOOL_RESULT });
                        bytes(&mut out, r.id.as_bytes());
                        bytes(&mut out, r.name.as_bytes());
                        bytes(&mut out, r.content.as_bytes());
                    }
                    other @ ContentBlock::Thinking(_) => {
                        out.push(JSON_BLOCK);
                        json(&mut out, other)?;
                    }
                }
            }
        }
        Some(Self(out.into_boxed_slice()))
    }

    /// The packed messages, equal to the ones [`Packed::pack`] was given. An error
    /// names the byte offset where the buffer stopped making sense (a bug: the buffer
    /// is only ever written by `pack`).
    pub(crate) fn unpack(&self) -> Result<Vec<Msg>, String> {
        let mut r = Reader {
            buf: &self.0,
            pos: 0,
        };
        let count = r.varint()?;
        // Every message takes at least 3 bytes: a corrupt count cannot over-allocate.
        let mut messages = Vec::with_capacity(count.min(self.0.len() / 3));
        let mut previous: Option<String> = None;
        for _ in 0..count {
            let flags = r.byte()?;
            let role = match flags & ROLE_MASK {
                0 => Role::System,
                1 => Role::User,
                2 => Role::Assistant,
                _ => Role::Tool,
            };
            let id = if flags & GENERATED_ID != 0 {
                let raw = r.take(8)?;
                let mut le = [0u8; 8];
                le.copy_from_slice(raw);
                hex_id(ID_PREFIX, u64::from_le_bytes(le))
            } else {
                r.string()?
            };
            let name = if flags & HAS_NAME != 0 {
                let name = r.string()?;
                previous = Some(name.clone());
                Some(name)
            } else if flags & SAME_NAME != 0 {
                Some(
                    previous
                        .clone()
                        .ok_or_else(|| r.error("a repeated name with no earlier name"))?,
                )
            } else {
                None
            };
            let metadata: Map<String, Value> = if flags & HAS_METADATA != 0 {
                r.json()?
            } else {
                Map::new()
            };
            let blocks = r.varint()?;
            let mut content = Vec::with_capacity(blocks.min(r.remaining()));
            for _ in 0..blocks {
                content.push(match r.byte()? {
                    TEXT => ContentBlock::Text(r.string()?),
                    TOOL_USE => ContentBlock::ToolUse(ToolUse {
                        id: r.string()?,
                        name: r.string()?,
                        input: r.json()?,
                    }),
                    tag @ (TOOL_RESULT | TOOL_ERROR) => ContentBlock::ToolResult(ToolResult {
                        id: r.string()?,
                        name: r.string()?,
                        content: r.string()?,
                        is_error: tag == TOOL_ERROR,
                    }),
                    JSON_BLOCK => r.json()?,
                    tag => return Err(r.error(&format!("unknown block tag {tag}"))),
                });
            }
            messages.push(Msg {
                id,
                name,
                role,
                content,
                metadata,
            });
        }
        if r.remaining() != 0 {
            return Err(r.error("bytes after the last message"));
        }
        Ok(messages)
    }

    /// The buffer's size in bytes.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }
}

fn role_bits(role: Role) -> u8 {
    match role {
        Role::System => 0,
        Role::User => 1,
        Role::Assistant => 2,
        Role::Tool => 3,
    }
}

/// The number behind an id of the form the runtime generates (`msg_` and 16 lowercase
/// hex digits), which then packs as 8 bytes.
fn generated_id(id: &str) -> Option<u64> {
    let digits = id.strip_prefix(ID_PREFIX)?.strip_prefix('_')?;
    if digits.len() != 16
        || !digits
            .bytes()
            .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    {
        return None;
    }
    u64::from_str_radix(digits, 16).ok()
}

fn varint(out: &mut Vec<u8>, mut n: usize) {
    while n >= 0x80 {
        out.push((n as u8 & 0x7f) | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

fn bytes(out: &mut Vec<u8>, b: &[u8]) {
    varint(out, b.len());
    out.extend_from_slice(b);
}

/// Writes `value`'s JSON form with its length in front (the length is patched in after
/// the JSON is written, so it is serialized once).
fn json<T: serde::Serialize + ?Sized>(out: &mut Vec<u8>, value: &T) -> Option<()> {
    let mut buf = Vec::new();
    serde_json::to_writer(&mut buf, value).ok()?;
    bytes(out, &buf);
    Some(())
}

struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn error(&self, what: &str) -> String {
        format!("packed conversation: {what} at byte {}", self.pos)
    }

    fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    fn byte(&mut self) -> Result<u8, String> {
        let b = *self
            .buf
            .get(self.pos)
            .ok_or_else(|| self.error("unexpected end"))?;
        self.pos += 1;
        Ok(b)
    }

    fn varint(&mut self) -> Result<usize, String> {
        let mut n: usize = 0;
        for shift in (0..usize::BITS).step_by(7) {
            let b = self.byte()?;
            n |= usize::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(n);
            }
        }
        Err(self.error("an overlong length"))
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&end| end <= self.buf.len())
            .ok_or_else(|| self.error("a length past the end"))?;
        let b = &self.buf[self.pos..end];
        self.pos = end;
        Ok(b)
    }

    fn string(&mut self) -> Result<String, String> {
        let n = self.varint()?;
        let b = self.take(n)?;
        std::str::from_utf8(b)
            .map(str::to_owned)
            .map_err(|_| self.error("text that is not UTF-8"))
    }

    fn json<T: serde::de::DeserializeOwned>(&mut self) -> Result<T, String> {
        let n = self.varint()?;
        let b = self.take(n)?;
        serde_json::from_slice(b)
            .map_err(|e| self.error(&format!("JSON that does not parse ({e})")))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::message::Thinking;

    fn roundtrip(messages: Vec<Msg>) -> Packed {
        let packed = Packed::pack(&messages).unwrap();
        assert_eq!(packed.unpack().unwrap(), messages);
        packed
    }

    #[test]
    fn every_block_kind_and_field_survives_packing() {
        let mut assistant = Msg::new(
            Role::Assistant,
            vec![
                ContentBlock::Thinking(Thinking {
                    text: "hmm".into(),
                    signature: Some("sig".into()),
                }),
                ContentBlock::Text("calling ünïcödé 🚀".into()),
                ContentBlock::ToolUse(ToolUse::new(
                    "call_1",
                    "refund",
                    json!({"amount": 1.5e300, "n": -3, "s": "x"}),
                )),
                ContentBlock::ToolUse(ToolUse::new("call_2", "raw", json!("not json {"))),
            ],
        );
        assistant.name = Some("support".into());
        let mut tool = Msg::tool([
            ToolResult::new("call_1", "refund", "ok"),
            ToolResult::error("call_2", "raw", "bad arguments"),
        ]);
        tool.metadata.insert("rein.synthetic".into(), json!(true));
        let mut again = Msg::assistant("done");
        again.name = Some("support".into());
        let mut other = Msg::assistant("");
        other.name = Some("other".into());
        let mut custom_id = Msg::user("imported");
        custom_id.id = "msg_NOT-HEX-0000000".into();
        let mut near_id = Msg::user("imported too");
        near_id.id = "msg_0123456789ABCDEF".into();
        roundtrip(vec![
            Msg::system("sys"),
            Msg::user("hi"),
            assistant,
            tool,
            again,
            other,
            custom_id,
            near_id,
            Msg::new(Role::User, Vec::new()),
        ]);
        roundtrip(Vec::new());
    }

    #[test]
    fn a_packed_text_conversation_costs_a_few_bytes_per_message_beyond_its_text() {
        let messages: Vec<Msg> = (0..10)
            .map(|i| {
                let mut m = if i % 2 == 0 {
                    Msg::user(format!("question {i}"))
                } else {
                    Msg::assistant(format!("answer {i}"))
                };
                if i % 2 == 1 {
                    m.name = Some("assistant-agent".into());
                }
                m
            })
            .collect();
        let text: usize = messages.iter().map(|m| m.text().len()).sum();
        let packed = roundtrip(messages);
        // 1 flags + 8 id + 1 block count + 1 tag + 1 length per message, the name once.
        assert!(
            packed.len() - text <= 10 * 12 + 16 + 1,
            "{} bytes for {text} bytes of text",
            packed.len()
        );
    }

    #[test]
    fn a_damaged_buffer_is_an_error_that_names_the_offset_never_a_panic() {
        let packed = Packed::pack(&[Msg::user("hello"), Msg::assistant("there")]).unwrap();
        for cut in 0..packed.0.len() {
            let damaged = Packed(packed.0[..cut].to_vec().into_boxed_slice());
            let err = damaged.unpack().unwrap_err();
            assert!(err.contains("at byte"), "{err}");
        }
        let mut flipped = packed.0.to_vec();
        flipped.push(0);
        assert!(
            Packed(flipped.into_boxed_slice())
                .unpack()
                .unwrap_err()
                .contains("after the last message")
        );
    }
}

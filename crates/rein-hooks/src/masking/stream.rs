//! [`MaskedStream`]: a call's event stream with personal data masked in every item.

use std::borrow::Cow;
use std::collections::VecDeque;
use std::fmt;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures::Stream;
use serde_json::Value;

use rein_core::agent::{AgentEvent, CallOutcome};
use rein_core::{ContentBlock, Msg, ToolResult, ToolUse};
use rein_pii::{MAX_NUMBER_GROUPS, SensitiveDataMasker, is_soft};

/// The carry-over is never cut inside a token shorter than this, whatever the carry
/// limit: every built-in match (at most 42 bytes, a printed 34-character IBAN) fits.
const MIN_TOKEN_HOLD: usize = 64;

/// A call's event stream with personal data masked in **every** item it yields.
///
/// - Text and thinking deltas are buffered per agent (the top-level agent and each
///   subagent path have their own carry-over, since deltas of different agents
///   interleave) and emitted up to a hard boundary (see
///   [`SensitiveDataMasker::stable_prefix_len`]), so a phone number split across chunks
///   (`"1380013"` + `"8000"`) is still masked. Without overflow the concatenated deltas
///   of one agent equal `masker.mask(whole text)`.
/// - An agent's carry-over is flushed, masked, before any other event of that agent
///   (a tool call, a redo, its final reply), before the top-level `Final`/`Error` (all
///   agents), and at the end of the stream. A subagent that ends without a final event
///   (it failed) has its carry-over flushed at the top-level end.
/// - When an agent's carry-over passes the carry limit, only the text before its
///   trailing *unfinished token* is emitted: the last word of ASCII letters, digits and
///   `. _ % + - @ ( )` (full-width digits and letters included), extended back over the
///   groups of a space-separated number while they could still form one number with
///   it (at most five groups for Chinese mobile and card numbers; back to the last space
///   no match can cross when a phone number's `+` or parentheses or an IBAN's upper-case
///   letters are in reach). That token is held back up to `max(carry_limit, 64)`
///   bytes; a longer token is masked **whole** (replaced by the masker's replacement
///   string, and its continuation up to the next hard boundary is dropped) rather than
///   split in two unmasked halves. Emitting early may over-mask (a group of a long
///   number sequence judged alone) but never leaves a detected match unmasked.
/// - Subagent events ([`AgentEvent::Subagent`]) are masked recursively.
/// - [`AgentEvent::ToolCall`]: every string in the arguments (keys and values);
///   [`AgentEvent::ToolProgress`]: the text; [`AgentEvent::ToolResult`]: the content (inside its JSON string literals too);
///   [`AgentEvent::Final`]: the reply's text, thinking, tool-use arguments and tool
///   results, and the decisions' reasons and digests; [`AgentEvent::Error`]: the
///   message. Tool call ids and tool names are left as they are.
///
/// Only the streamed copy is masked: the tools still receive the real arguments and
/// memory keeps what the hooks recorded.
pub struct MaskedStream<S> {
    inner: S,
    masker: SensitiveDataMasker,
    limit: usize,
    carries: Vec<Carry>,
    ready: VecDeque<AgentEvent>,
    done: bool,
}

/// The carry-over of one agent: the path chain of the `Subagent` wrappers its events
/// come in (empty for the top-level agent) and one buffer per delta kind.
struct Carry {
    chain: Vec<String>,
    text: Buffer,
    thinking: Buffer,
}

#[derive(Default)]
struct Buffer {
    held: String,
    /// Set after an over-long token was masked whole: the token's last character; the
    /// rest of the token (up to a hard boundary) is dropped.
    swallowing: Option<char>,
}

impl<S> fmt::Debug for MaskedStream<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let carried: usize = self
            .carries
            .iter()
            .map(|c| c.text.held.len() + c.thinking.held.len())
            .sum();
        f.debug_struct("MaskedStream")
            .field("agents", &self.carries.len())
            .field("carried", &carried)
            .finish_non_exhaustive()
    }
}

#[derive(Clone, Copy)]
enum Delta {
    Text,
    Thinking,
}

impl Delta {
    fn event(self, text: String) -> AgentEvent {
        match self {
            Delta::Text => AgentEvent::TextDelta(text),
            Delta::Thinking => AgentEvent::ThinkingDelta(text),
        }
    }
}

impl<S> MaskedStream<S> {
    /// Wraps `inner`, masking with `masker` and holding back at most `carry_limit`
    /// bytes per agent and delta kind, except for the trailing unfinished token, which
    /// is held up to `max(carry_limit, 64)` bytes (see the type documentation).
    pub fn new(inner: S, masker: SensitiveDataMasker, carry_limit: usize) -> Self {
        Self {
            inner,
            masker,
            limit: carry_limit,
            carries: Vec::new(),
            ready: VecDeque::new(),
            done: false,
        }
    }

    fn carry_index(&mut self, chain: &[String]) -> usize {
        match self.carries.iter().position(|c| c.chain == chain) {
            Some(i) => i,
            None => {
                self.carries.push(Carry {
                    chain: chain.to_vec(),
                    text: Buffer::default(),
                    thinking: Buffer::default(),
                });
                self.carries.len() - 1
            }
        }
    }

    fn on_event(&mut self, event: AgentEvent) {
        let mut chain = Vec::new();
        let mut event = event;
        while let AgentEvent::Subagent { path, event: inner } = event {
            chain.push(path);
            event = *inner;
        }
        let masked = match event {
            AgentEvent::TextDelta(d) => return self.on_delta(chain, Delta::Text, &d),
            AgentEvent::ThinkingDelta(d) => return self.on_delta(chain, Delta::Thinking, &d),
            AgentEvent::Final(outcome) => {
                self.flush_finished(&chain);
                AgentEvent::Final(mask_outcome(&self.masker, outcome))
            }
            AgentEvent::Error(e) => {
                self.flush_finished(&chain);
                AgentEvent::Error(e.map_message(|m| owned(self.masker.mask(m))))
            }
            other => {
                if let Some(i) = self.carries.iter().position(|c| c.chain == chain) {
                    self.flush_carry(i);
                }
                match other {
                    AgentEvent::ToolCall(mut call) => {
                        mask_tool_use(&self.masker, &mut call);
                        AgentEvent::ToolCall(call)
                    }
                    AgentEvent::ToolProgress { id, text } => AgentEvent::ToolProgress {
                        id,
                        text: self.masker.mask(&text).into_owned(),
                    },
                    AgentEvent::ToolResult(mut result) => {
                        mask_tool_result(&self.masker, &mut result);
                        AgentEvent::ToolResult(result)
                    }
                    // Ids, tool names and markers: nothing personal to mask.
                    e @ (AgentEvent::ToolCallStart { .. } | AgentEvent::ReasoningRedone) => e,
                    // Handled above; listed so a new variant fails to compile here.
                    e @ (AgentEvent::TextDelta(_)
                    | AgentEvent::ThinkingDelta(_)
                    | AgentEvent::Final(_)
                    | AgentEvent::Error(_)
                    | AgentEvent::Subagent { .. }) => e,
                    // An event kind this version does not know: passed on as it is.
                    e => e,
                }
            }
        };
        self.ready.push_back(wrap(&chain, masked));
    }

    fn on_delta(&mut self, chain: Vec<String>, kind: Delta, delta: &str) {
        let i = self.carry_index(&chain);
        // Switching between text and thinking ends the other kind's run.
        let other = match kind {
            Delta::Text => Delta::Thinking,
            Delta::Thinking => Delta::Text,
        };
        self.flush_buffer(i, other);
        let limit = self.limit;
        let carry = &mut self.carries[i];
        let buf = match kind {
            Delta::Text => &mut carry.text,
            Delta::Thinking => &mut carry.thinking,
        };
        let out = feed(&self.masker, limit, buf, delta);
        if !out.is_empty() {
            self.ready.push_back(wrap(&carry.chain, kind.event(out)));
        }
    }

    /// Flushes the agent that just finished (`Final`/`Error` at `chain`) and every
    /// agent below it; at the top level, every agent.
    fn flush_finished(&mut self, chain: &[String]) {
        let below = chain.last().map(|p| format!("{p}/"));
        for i in 0..self.carries.len() {
            let c = &self.carries[i].chain;
            let finished = match &below {
                None => true,
                Some(prefix) => {
                    c == chain || c.last().is_some_and(|p| p.starts_with(prefix.as_str()))
                }
            };
            if finished {
                self.flush_carry(i);
            }
        }
    }

    fn flush_carry(&mut self, i: usize) {
        self.flush_buffer(i, Delta::Thinking);
        self.flush_buffer(i, Delta::Text);
    }

    /// Queues the masked remainder of one buffer (the stream of that kind ended).
    fn flush_buffer(&mut self, i: usize, kind: Delta) {
        let Some(carry) = self.carries.get_mut(i) else {
            return;
        };
        let buf = match kind {
            Delta::Text => &mut carry.text,
            Delta::Thinking => &mut carry.thinking,
        };
        buf.swallowing = None;
        if buf.held.is_empty() {
            return;
        }
        let out = self.masker.mask(&buf.held).into_owned();
        buf.held.clear();
        if !out.is_empty() {
            self.ready.push_back(wrap(&carry.chain, kind.event(out)));
        }
    }

    fn flush_all(&mut self) {
        for i in 0..self.carries.len() {
            self.flush_carry(i);
        }
    }
}

/// Appends `delta` to `buf` and returns the masked text that can be emitted now.
fn feed(masker: &SensitiveDataMasker, limit: usize, buf: &mut Buffer, delta: &str) -> String {
    let mut delta = delta;
    if let Some(mut last) = buf.swallowing {
        // Drop the rest of a token that was already masked whole.
        let mut cut = delta.len();
        for (i, c) in delta.char_indices() {
            if !is_soft(c, || Some(last)) {
                cut = i;
                break;
            }
            last = c;
        }
        if cut == delta.len() {
            buf.swallowing = Some(last);
            return String::new();
        }
        buf.swallowing = None;
        delta = &delta[cut..];
    }
    buf.held.push_str(delta);
    let held = &buf.held;
    let n = masker.stable_prefix_len(held);
    if held.len() - n <= limit {
        let out = masker.mask(&held[..n]).into_owned();
        buf.held.drain(..n);
        return out;
    }
    // Overflow: emit up to the trailing unfinished token only.
    let start = n + unfinished_token_start(&held[n..]);
    let mut out = masker.mask(&held[..start]).into_owned();
    if held.len() - start <= limit.max(MIN_TOKEN_HOLD) {
        buf.held.drain(..start);
    } else {
        // A token longer than the hard bound: mask it whole, never split it.
        out.push_str(masker.replacement());
        buf.swallowing = held.chars().next_back();
        buf.held.clear();
    }
    out
}

/// Start of the trailing unfinished token of `tail`, a run of soft characters (no hard
/// boundary; every space in it follows an ASCII digit, an upper-case ASCII letter or `)`).
///
/// First the last *exact* cut: a space followed by anything but a digit, an upper-case
/// letter or `(` (no match continues across it: phone, card and IBAN groups start with
/// one of those). Behind it, a phone number (`+`, parentheses) or an IBAN (upper-case
/// groups) can span any of the spaces, so the token is everything after the exact cut.
/// Without those, only Chinese mobile and card numbers span spaces, and the token is
/// refined by [`digit_group_start`].
fn unfinished_token_start(tail: &str) -> usize {
    let b = tail.as_bytes();
    let exact = b
        .iter()
        .enumerate()
        .rev()
        .find(|&(i, &c)| {
            c == b' '
                && b.get(i + 1)
                    .is_some_and(|&n| !(n.is_ascii_digit() || n.is_ascii_uppercase() || n == b'('))
        })
        .map_or(0, |(i, _)| i + 1);
    let rest = &tail[exact..];
    let cut = digit_group_start(rest);
    let spans = |c: &u8| matches!(c, b'+' | b'(' | b')') || c.is_ascii_uppercase();
    if rest.as_bytes()[..cut].iter().any(spans) {
        exact
    } else {
        exact + cut
    }
}

/// Start of the trailing token of `tail` when only space-separated digit groups can
/// span its spaces (Chinese mobile and card numbers).
///
/// The token is the last word, extended back over space-separated digit groups that
/// could still be judged as one number with it. A cut at a space followed by a
/// non-digit is exact (no group sequence crosses it). A cut at a space inside a
/// sequence is safe only when the sequence has more than [`MAX_NUMBER_GROUPS`] groups
/// (the masker then judges each group alone); otherwise the token reaches back to the
/// word holding the sequence's first group, and when that word's leading digits close
/// an earlier sequence, on over that one too.
fn digit_group_start(tail: &str) -> usize {
    let b = tail.as_bytes();
    let Some(space) = b.iter().rposition(|&c| c == b' ') else {
        return 0;
    };
    // `start` is a word start after a space; its leading digits (or, at the end, the
    // group still to come) are the last group of a sequence.
    let mut start = space + 1;
    if start < b.len() && !b[start].is_ascii_digit() {
        return start;
    }
    loop {
        let mut groups = 1;
        let mut end = start - 1;
        let first = loop {
            let ws = b[..end]
                .iter()
                .rposition(|&c| c == b' ')
                .map_or(0, |p| p + 1);
            groups += 1;
            if groups > MAX_NUMBER_GROUPS {
                break None;
            }
            if ws == 0 || !b[ws..end].iter().all(u8::is_ascii_digit) {
                break Some(ws);
            }
            end = ws - 1;
        };
        match first {
            // Too many groups to be one number: each is judged alone.
            None => return start,
            // The word holding the first group starts the tail, or starts with a
            // non-digit (an exact cut before it).
            Some(ws) if ws == 0 || !b[ws].is_ascii_digit() => return ws,
            // Its leading digits close an earlier sequence: judge that one too.
            Some(ws) => start = ws,
        }
    }
}

/// `event` inside the `Subagent` wrappers of `chain` (outermost first).
fn wrap(chain: &[String], event: AgentEvent) -> AgentEvent {
    chain
        .iter()
        .rev()
        .fold(event, |event, path| AgentEvent::Subagent {
            path: path.clone(),
            event: Box::new(event),
        })
}

fn owned(c: Cow<'_, str>) -> Option<String> {
    match c {
        Cow::Owned(s) => Some(s),
        Cow::Borrowed(_) => None,
    }
}

fn mask_in_place(masker: &SensitiveDataMasker, s: &mut String) {
    if let Some(m) = owned(masker.mask(s)) {
        *s = m;
    }
}

/// Masks every string of a JSON value: string values and object keys.
fn mask_value(masker: &SensitiveDataMasker, v: &mut Value) {
    match v {
        Value::String(s) => mask_in_place(masker, s),
        Value::Array(items) => items.iter_mut().for_each(|i| mask_value(masker, i)),
        Value::Object(map) => {
            let renamed: Vec<(String, String)> = map
                .keys()
                .filter_map(|k| owned(masker.mask(k)).map(|m| (k.clone(), m)))
                .collect();
            for (old, new) in renamed {
                if let Some(value) = map.remove(&old) {
                    map.insert(new, value);
                }
            }
            map.values_mut().for_each(|i| mask_value(masker, i));
        }
        Value::Null | Value::Bool(_) | Value::Number(_) => {}
    }
}

fn mask_tool_use(masker: &SensitiveDataMasker, call: &mut ToolUse) {
    mask_value(masker, &mut call.input);
}

fn mask_tool_result(masker: &SensitiveDataMasker, result: &mut ToolResult) {
    if let Some(m) = super::json::mask_tool_text(masker, &result.content) {
        result.content = m;
    }
}

/// Masks every text-bearing block of a message.
fn mask_msg(masker: &SensitiveDataMasker, msg: &mut Msg) {
    for block in &mut msg.content {
        match block {
            ContentBlock::Text(t) => mask_in_place(masker, t),
            ContentBlock::Thinking(th) => mask_in_place(masker, &mut th.text),
            ContentBlock::ToolUse(u) => mask_tool_use(masker, u),
            ContentBlock::ToolResult(r) => mask_tool_result(masker, r),
            // A block kind this version does not know carries no text it can reach.
            _ => {}
        }
    }
}

fn mask_outcome(masker: &SensitiveDataMasker, mut outcome: CallOutcome) -> CallOutcome {
    mask_msg(masker, &mut outcome.reply);
    for d in &mut outcome.decisions {
        mask_in_place(masker, &mut d.before);
        mask_in_place(masker, &mut d.after);
        if let Some(reason) = &mut d.reason {
            mask_in_place(masker, reason);
        }
    }
    outcome
}

impl<S> Stream for MaskedStream<S>
where
    S: Stream<Item = AgentEvent> + Unpin,
{
    type Item = AgentEvent;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<AgentEvent>> {
        let this = &mut *self;
        loop {
            if let Some(event) = this.ready.pop_front() {
                return Poll::Ready(Some(event));
            }
            if this.done {
                return Poll::Ready(None);
            }
            match Pin::new(&mut this.inner).poll_next(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(None) => {
                    this.done = true;
                    this.flush_all();
                }
                Poll::Ready(Some(event)) => this.on_event(event),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::unfinished_token_start;

    #[test]
    fn the_unfinished_token_is_the_last_word_or_a_short_number_sequence() {
        fn t(s: &str) -> &str {
            &s[unfinished_token_start(s)..]
        }
        assert_eq!(t("user.name@exa"), "user.name@exa");
        assert_eq!(t("12 12 12 12 12 12 1380013"), "1380013");
        assert_eq!(t("12 138 0013 80"), "12 138 0013 80");
        assert_eq!(t("+86 138 0013 80"), "+86 138 0013 80");
        assert_eq!(t("x1 12 12 12 12 12 "), "");
        assert_eq!(t("a-86 138 0013 "), "a-86 138 0013 ");
        assert_eq!(t("12 abc"), "abc");
        assert_eq!(t("1 2 3 4 5"), "1 2 3 4 5");
        assert_eq!(t("0 1 2 3 4 5"), "5");
        // `8000` closes the first sequence, `86` opens the second.
        assert_eq!(
            t("86 138 0013 8000+86 138 0013 80"),
            "86 138 0013 8000+86 138 0013 80"
        );
        assert_eq!(t("0 1 2 3 4 5 8000+86 138 0013 80"), "8000+86 138 0013 80");
        // Phone numbers and IBANs span their spaces: the token reaches back to the last
        // space that no match crosses.
        assert_eq!(t("call +33 1 23 45 67 8"), "+33 1 23 45 67 8");
        assert_eq!(t("x +1 (415) 55"), "+1 (415) 55");
        assert_eq!(t("GB29 NWBK 6016 13"), "GB29 NWBK 6016 13");
        assert_eq!(t("1 2 3 4 5 6 GB29 NWBK 60"), "1 2 3 4 5 6 GB29 NWBK 60");
        assert_eq!(t("1 2 3 4 5 6 +44 20 79"), "+44 20 79");
    }
}

//! Small internal helpers.

use std::any::Any;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// A process-unique id `"{prefix}_{16 hex digits}"`.
///
/// Uniqueness inside a process comes from a counter; across processes the counter is
/// offset by a per-process seed taken from the clock and the process id, so ids written
/// to a shared store by two processes do not collide in practice.
///
/// Hand-written rather than `uuid` v7: ids are made several times per call, a counter
/// needs no randomness per id, and a bijection over a counter cannot collide in-process
/// (the comparison is in `benches/README.md`).
pub(crate) fn new_id(prefix: &str) -> String {
    static SEED: OnceLock<u64> = OnceLock::new();
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let seed = *SEED.get_or_init(|| {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        mix(nanos ^ (u64::from(std::process::id()) << 32))
    });
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    hex_id(prefix, mix(seed.wrapping_add(n)))
}

/// `format!("{prefix}_{v:016x}")`, written directly into one exactly-sized allocation:
/// ids are made several times per call, and the formatting machinery is not free.
pub(crate) fn hex_id(prefix: &str, v: u64) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut digits = [0u8; 16];
    for (i, d) in digits.iter_mut().enumerate() {
        *d = HEX[((v >> (60 - 4 * i)) & 0xF) as usize];
    }
    let mut id = Vec::with_capacity(prefix.len() + 17);
    id.extend_from_slice(prefix.as_bytes());
    id.push(b'_');
    id.extend_from_slice(&digits);
    // Always valid UTF-8 (a `str` prefix, then ASCII); the check is over 20-odd bytes.
    String::from_utf8(id).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

/// SplitMix64 finaliser: a bijection, so distinct inputs give distinct ids.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The message of a caught panic payload.
pub(crate) fn panic_message(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_owned()
    }
}

/// `text` cut to at most `max` bytes on a char boundary, with `…` when cut.
pub(crate) fn truncate(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

/// The candidate nearest to `name` (case-insensitive edit distance), if near enough to
/// be a likely typo.
pub(crate) fn closest<'a>(name: &str, candidates: &[&'a str]) -> Option<&'a str> {
    let lower = name.to_lowercase();
    candidates
        .iter()
        .map(|c| (edit_distance(&lower, &c.to_lowercase()), *c))
        .filter(|(d, c)| *d <= (c.len().max(name.len()) / 3).max(2))
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

pub(crate) fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = if ca == *cb {
                prev
            } else {
                1 + prev.min(row[j]).min(cur)
            };
            prev = cur;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_the_prefix_and_sixteen_lower_hex_digits_of_the_mixed_counter() {
        for v in [0, 1, 0xabc, u64::MAX, 0x0123_4567_89ab_cdef, mix(42)] {
            assert_eq!(hex_id("msg", v), format!("msg_{v:016x}"));
        }
        let (a, b) = (new_id("call"), new_id("call"));
        assert_ne!(a, b);
        assert!(a.starts_with("call_") && a.len() == 21, "{a}");
    }
}

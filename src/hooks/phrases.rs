//! Keyword matching with exclusion phrases, negations and conditional suffixes, shared
//! by [`SelfCorrectionHook`](super::SelfCorrectionHook) and
//! [`DynamicOptionsHook`](super::DynamicOptionsHook).

use std::borrow::Cow;

use aho_corasick::AhoCorasick;

/// Finds keywords in text, ignoring occurrences that are part of an exclusion phrase,
/// negated, or conditional. ASCII letters match case-insensitively; everything else
/// matches exactly.
#[derive(Clone, Debug, Default)]
pub(crate) struct PhraseMatcher {
    keywords: Vec<String>,
    exclusions: Vec<String>,
    negations: Vec<String>,
    negation_window: usize,
    conditional_suffixes: Vec<String>,
    /// Every keyword in one automaton, built once: a text is scanned once, not once per
    /// keyword. `None` only if the automaton could not be built (then each keyword is
    /// searched on its own, with the same results).
    keyword_set: Option<AhoCorasick>,
    /// The same for the exclusion phrases.
    exclusion_set: Option<AhoCorasick>,
}

/// An automaton finding every (overlapping) occurrence of `patterns`.
fn automaton(patterns: &[String]) -> Option<AhoCorasick> {
    if patterns.is_empty() {
        return None;
    }
    AhoCorasick::new(patterns).ok()
}

/// Every occurrence of every pattern in `text` as (pattern index, start, end),
/// overlapping occurrences included, passed to `f`.
fn each_occurrence(
    set: Option<&AhoCorasick>,
    patterns: &[String],
    text: &str,
    mut f: impl FnMut(usize, usize, usize),
) {
    match set {
        Some(ac) => {
            for m in ac.find_overlapping_iter(text) {
                f(m.pattern().as_usize(), m.start(), m.end());
            }
        }
        None => {
            for (p, pat) in patterns.iter().enumerate() {
                for (i, _) in text.char_indices() {
                    if text[i..].starts_with(pat.as_str()) {
                        f(p, i, i + pat.len());
                    }
                }
            }
        }
    }
}

fn normalize(list: &[String]) -> Vec<String> {
    list.iter()
        .map(|s| s.trim().to_ascii_lowercase())
        .filter(|s| !s.is_empty())
        .collect()
}

impl PhraseMatcher {
    /// Blank entries are ignored.
    pub(crate) fn new(
        keywords: &[String],
        exclusions: &[String],
        negations: &[String],
        negation_window: usize,
        conditional_suffixes: &[String],
    ) -> Self {
        let keywords = normalize(keywords);
        let exclusions = normalize(exclusions);
        Self {
            keyword_set: automaton(&keywords),
            exclusion_set: automaton(&exclusions),
            keywords,
            exclusions,
            negations: normalize(negations),
            negation_window,
            conditional_suffixes: normalize(conditional_suffixes),
        }
    }

    /// The first keyword (as configured, normalized) with an occurrence in `text` that
    /// is not inside an exclusion phrase, not preceded by a negation (allowing up to
    /// `negation_window` characters in between) and not followed by a conditional
    /// suffix. Occurrences may overlap.
    pub(crate) fn find(&self, text: &str) -> Option<&str> {
        if self.keywords.is_empty() || text.is_empty() {
            return None;
        }
        let lower: Cow<'_, str> = if text.bytes().any(|b| b.is_ascii_uppercase()) {
            Cow::Owned(text.to_ascii_lowercase())
        } else {
            Cow::Borrowed(text)
        };
        let lower = &*lower;
        let mut excluded: Vec<(usize, usize)> = Vec::new();
        each_occurrence(
            self.exclusion_set.as_ref(),
            &self.exclusions,
            lower,
            |_, s, e| excluded.push((s, e)),
        );
        let mut best: Option<usize> = None;
        each_occurrence(
            self.keyword_set.as_ref(),
            &self.keywords,
            lower,
            |p, start, end| {
                if best.is_some_and(|b| b <= p) {
                    return;
                }
                let valid = !excluded.iter().any(|&(s, e)| s <= start && end <= e)
                    && !self.negated(&lower[..start])
                    && !self
                        .conditional_suffixes
                        .iter()
                        .any(|c| lower[end..].starts_with(c.as_str()));
                if valid {
                    best = Some(p);
                }
            },
        );
        best.and_then(|p| self.keywords.get(p)).map(String::as_str)
    }

    /// Whether `before` ends with a negation followed by at most `negation_window`
    /// characters.
    fn negated(&self, before: &str) -> bool {
        if self.negations.is_empty() {
            return false;
        }
        let mut cut = before.len();
        let mut chars = before.char_indices().rev();
        for _ in 0..=self.negation_window {
            let head = &before[..cut];
            if self.negations.iter().any(|n| head.ends_with(n.as_str())) {
                return true;
            }
            match chars.next() {
                Some((i, _)) => cut = i,
                None => return false,
            }
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| (*s).to_owned()).collect()
    }

    fn matcher() -> PhraseMatcher {
        PhraseMatcher::new(
            &v(&["已退款", "退款成功", "已经退", "refunded"]),
            &v(&["已经退货"]),
            &v(&["不是", "没有"]),
            2,
            &v(&["后"]),
        )
    }

    #[test]
    fn a_plain_keyword_occurrence_matches() {
        assert_eq!(matcher().find("您的订单已退款，请查收"), Some("已退款"));
    }

    #[test]
    fn ascii_keywords_match_case_insensitively() {
        assert_eq!(matcher().find("Your order was REFUNDED."), Some("refunded"));
    }

    #[test]
    fn an_occurrence_inside_an_exclusion_phrase_does_not_match() {
        assert_eq!(matcher().find("您已经退货了吗"), None);
    }

    #[test]
    fn a_negated_occurrence_does_not_match_even_with_a_short_gap() {
        assert_eq!(matcher().find("这不是已退款的状态"), None);
        assert_eq!(matcher().find("还没有说退款成功"), None);
        assert_eq!(matcher().find("没有，我们很快退款成功了"), Some("退款成功"));
    }

    #[test]
    fn a_conditional_occurrence_does_not_match() {
        assert_eq!(matcher().find("退款成功后会短信通知您"), None);
    }

    #[test]
    fn a_later_unqualified_occurrence_still_matches() {
        assert_eq!(matcher().find("不是已退款？其实已退款了"), Some("已退款"));
    }

    #[test]
    fn blank_keywords_never_match() {
        let m = PhraseMatcher::new(&v(&["", "  "]), &[], &[], 0, &[]);
        assert_eq!(m.find("anything"), None);
    }

    #[test]
    fn the_automaton_and_the_per_keyword_scan_agree() {
        let fast = matcher();
        let slow = PhraseMatcher {
            keyword_set: None,
            exclusion_set: None,
            ..matcher()
        };
        assert!(fast.keyword_set.is_some() && fast.exclusion_set.is_some());
        for text in [
            "您的订单已退款，请查收",
            "Your order was REFUNDED.",
            "您已经退货了吗",
            "这不是已退款的状态",
            "没有，我们很快退款成功了",
            "退款成功后会短信通知您",
            "不是已退款？其实已退款了",
            "已经退款成功, refunded twice: refundedrefunded",
            "",
        ] {
            assert_eq!(fast.find(text), slow.find(text), "{text}");
        }
    }

    #[test]
    fn the_first_configured_keyword_wins_whatever_its_position_in_the_text() {
        // "refunded" occurs first in the text, "已退款" first in the configuration.
        assert_eq!(matcher().find("refunded, 已退款"), Some("已退款"));
    }
}

//! Keyword matching with exclusion phrases, negations and conditional suffixes, shared
//! by [`SelfCorrectionHook`](super::SelfCorrectionHook) and
//! [`DynamicOptionsHook`](super::DynamicOptionsHook).

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

/// An automaton finding every (overlapping) occurrence of `patterns`, ASCII letters
/// case-insensitively (so a text is never lowercased into a copy).
fn automaton(patterns: &[String]) -> Option<AhoCorasick> {
    if patterns.is_empty() {
        return None;
    }
    AhoCorasick::builder()
        .ascii_case_insensitive(true)
        .build(patterns)
        .ok()
}

/// `hay` starts with `needle`, ASCII letters compared case-insensitively.
fn starts_with_ci(hay: &str, needle: &str) -> bool {
    hay.as_bytes()
        .get(..needle.len())
        .is_some_and(|head| head.eq_ignore_ascii_case(needle.as_bytes()))
}

/// `hay` ends with `needle`, ASCII letters compared case-insensitively.
fn ends_with_ci(hay: &str, needle: &str) -> bool {
    hay.len()
        .checked_sub(needle.len())
        .and_then(|start| hay.as_bytes().get(start..))
        .is_some_and(|tail| tail.eq_ignore_ascii_case(needle.as_bytes()))
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
                    if starts_with_ci(&text[i..], pat) {
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
        // The exclusion phrases are looked for only once a keyword occurs: most texts
        // hold none, and are then scanned once.
        let mut excluded: Option<Vec<(usize, usize)>> = None;
        let mut best: Option<usize> = None;
        each_occurrence(
            self.keyword_set.as_ref(),
            &self.keywords,
            text,
            |p, start, end| {
                if best.is_some_and(|b| b <= p) {
                    return;
                }
                let excluded = excluded.get_or_insert_with(|| {
                    let mut spans = Vec::new();
                    each_occurrence(
                        self.exclusion_set.as_ref(),
                        &self.exclusions,
                        text,
                        |_, s, e| spans.push((s, e)),
                    );
                    spans
                });
                let valid = !excluded.iter().any(|&(s, e)| s <= start && end <= e)
                    && !self.negated(&text[..start])
                    && !self
                        .conditional_suffixes
                        .iter()
                        .any(|c| starts_with_ci(&text[end..], c));
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
            if self.negations.iter().any(|n| ends_with_ci(head, n)) {
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
    fn ascii_negations_exclusions_and_suffixes_apply_case_insensitively() {
        let m = PhraseMatcher::new(
            &v(&["refunded"]),
            &v(&["refunded later"]),
            &v(&["not"]),
            1,
            &v(&["?"]),
        );
        assert_eq!(m.find("It was NOT Refunded"), None);
        assert_eq!(m.find("REFUNDED LATER, they said"), None);
        assert_eq!(m.find("Refunded?"), None);
        assert_eq!(m.find("Refunded!"), Some("refunded"));
        // The fallback without an automaton gives the same answers.
        let plain = PhraseMatcher {
            keyword_set: None,
            exclusion_set: None,
            ..m.clone()
        };
        for text in [
            "It was NOT Refunded",
            "REFUNDED LATER",
            "Refunded?",
            "Refunded!",
        ] {
            assert_eq!(plain.find(text), m.find(text), "{text}");
        }
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

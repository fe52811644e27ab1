//! Keyword matching with exclusion phrases, negations and conditional suffixes, shared
//! by [`SelfCorrectionHook`](super::SelfCorrectionHook) and
//! [`DynamicOptionsHook`](super::DynamicOptionsHook).

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
        Self {
            keywords: normalize(keywords),
            exclusions: normalize(exclusions),
            negations: normalize(negations),
            negation_window,
            conditional_suffixes: normalize(conditional_suffixes),
        }
    }

    /// The first keyword (as configured, normalized) with an occurrence in `text` that
    /// is not inside an exclusion phrase, not preceded by a negation (allowing up to
    /// `negation_window` characters in between) and not followed by a conditional
    /// suffix.
    pub(crate) fn find(&self, text: &str) -> Option<&str> {
        if self.keywords.is_empty() || text.is_empty() {
            return None;
        }
        let lower = text.to_ascii_lowercase();
        let excluded: Vec<(usize, usize)> = self
            .exclusions
            .iter()
            .flat_map(|e| {
                lower
                    .match_indices(e.as_str())
                    .map(|(i, m)| (i, i + m.len()))
            })
            .collect();
        self.keywords
            .iter()
            .find(|k| {
                lower.match_indices(k.as_str()).any(|(start, m)| {
                    let end = start + m.len();
                    !excluded.iter().any(|&(s, e)| s <= start && end <= e)
                        && !self.negated(&lower[..start])
                        && !self
                            .conditional_suffixes
                            .iter()
                            .any(|c| lower[end..].starts_with(c.as_str()))
                })
            })
            .map(String::as_str)
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
}

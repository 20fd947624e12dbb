//! Small helpers for untrusted text shown to people (plugin output in logs and
//! error messages).

use std::borrow::Cow;

/// Cuts `s` to at most `max` bytes on a char boundary, saying how much was cut.
pub fn truncate(s: &str, max: usize) -> Cow<'_, str> {
    if s.len() <= max {
        return s.into();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…[{} bytes truncated]", &s[..end], s.len() - end).into()
}

/// The last `max` bytes of `s` (on a char boundary).
pub fn tail(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut start = s.len() - max;
    while !s.is_char_boundary(start) {
        start += 1;
    }
    &s[start..]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuts_on_char_boundaries_and_says_so() {
        assert_eq!(truncate("short", 10), "short");
        let t = truncate("ééééé", 3);
        assert!(t.starts_with('é') && t.contains("truncated"), "{t}");
        assert_eq!(tail("ééé", 3), "é");
        assert_eq!(tail("abc", 10), "abc");
    }
}

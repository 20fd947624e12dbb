//! Small helpers for untrusted text shown to people (plugin output in logs and
//! error messages).

use std::borrow::Cow;

/// Writes each control character of untrusted text as an escape (`\n`,
/// `\u{1b}`), so that a plugin's words shown in an event, a log line or a
/// terminal cannot forge lines, move the cursor, or reorder what is shown
/// (bidirectional overrides count as control characters here).
pub fn escape_control(s: &str) -> Cow<'_, str> {
    if !s.chars().any(needs_escape) {
        return s.into();
    }
    let mut out = String::with_capacity(s.len() + 16);
    for c in s.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if needs_escape(c) => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
            c => out.push(c),
        }
    }
    out.into()
}

/// Control characters, and the characters that change or hide what text
/// shows: bidirectional controls, line separators, and invisible ones
/// (zero-width spaces and joiners, the soft hyphen, the byte-order mark),
/// which could make `pvc-a\u{200b}` look like `pvc-a`.
pub fn needs_escape(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{061c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}'
                | '\u{2028}' | '\u{2029}'
                | '\u{00ad}' | '\u{180e}' | '\u{200b}'..='\u{200d}' | '\u{2060}'..='\u{2064}' | '\u{feff}'
        )
}

/// Untrusted text made safe to show: control characters escaped first,
/// then cut to `max` bytes (escaping after cutting could exceed `max`).
pub fn untrusted(s: &str, max: usize) -> Cow<'_, str> {
    match escape_control(s) {
        Cow::Borrowed(b) => truncate(b, max),
        Cow::Owned(o) => truncate(&o, max).into_owned().into(),
    }
}

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

    #[test]
    fn control_characters_are_escaped_before_cutting() {
        assert_eq!(escape_control("plain é"), "plain é");
        assert_eq!(
            escape_control("a\nb\r\u{1b}[2J\0\u{202e}z\u{85}"),
            "a\\nb\\r\\u{1b}[2J\\u{0}\\u{202e}z\\u{85}"
        );
        let cut = untrusted("\u{1b}\u{1b}\u{1b}", 8);
        assert!(cut.starts_with("\\u{1b}"), "{cut}");
        assert!(!cut.contains('\u{1b}'), "{cut}");
        assert!(cut.contains("truncated"), "{cut}");
    }

    #[test]
    fn invisible_characters_are_escaped() {
        assert_eq!(
            escape_control("pvc-a\u{200b}\u{feff}\u{ad}b"),
            "pvc-a\\u{200b}\\u{feff}\\u{ad}b"
        );
    }
}

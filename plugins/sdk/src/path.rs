//! Safe path handling for plugins that create things under a preopened root.
//!
//! The rule: a path a plugin builds from request data is a trusted root plus
//! **one** checked component. A component is never empty, `.`, `..`, and never
//! contains `/`, NUL or control characters, so joining it cannot leave the
//! root. (The sandbox would stop an escape anyway; these checks make the
//! plugin's own answer say what was wrong instead of failing obscurely.)

/// Longest file name most filesystems accept, in bytes.
pub const MAX_COMPONENT_LEN: usize = 255;
/// Kubernetes object names are at most 253 characters.
pub const MAX_NAME_LEN: usize = 253;

/// Checks that `value` is an absolute path without `.`, `..` or empty
/// components and without control characters; returns it without a trailing
/// slash (`/` stays `/`). The error says why.
pub fn normalize_abs(value: &str) -> Result<String, String> {
    if !value.starts_with('/') {
        return Err("it does not start with /".to_string());
    }
    if value.chars().any(char::is_control) {
        return Err("it contains control characters".to_string());
    }
    let trimmed = value.trim_end_matches('/');
    if trimmed.is_empty() {
        return Ok("/".to_string());
    }
    for component in trimmed[1..].split('/') {
        match component {
            "" => return Err("it contains an empty component (//)".to_string()),
            "." | ".." => return Err("it contains a . or .. component".to_string()),
            _ => {}
        }
    }
    Ok(trimmed.to_string())
}

/// Checks that `name` is one safe path component (see the module docs).
pub fn check_component(name: &str) -> Result<(), String> {
    let why = if name.is_empty() {
        "it is empty"
    } else if name == "." || name == ".." {
        "it is . or .."
    } else if name.contains('/') {
        "it contains /"
    } else if name.chars().any(char::is_control) {
        "it contains control characters"
    } else if name.len() > MAX_COMPONENT_LEN {
        "it is longer than 255 bytes"
    } else {
        return Ok(());
    };
    Err(format!("{name:?} is not a single safe file name: {why}"))
}

/// `root` + `/` + `name`, after checking that `name` is one safe component.
/// `root` must be a normalized absolute path (see [`normalize_abs`]).
pub fn join(root: &str, name: &str) -> Result<String, String> {
    check_component(name)?;
    Ok(join_unchecked(root, name))
}

fn join_unchecked(root: &str, name: &str) -> String {
    if root == "/" {
        format!("/{name}")
    } else {
        format!("{root}/{name}")
    }
}

/// Checks that a PV name is a lowercase DNS subdomain
/// (`[a-z0-9]([-a-z0-9.]*[a-z0-9])?`, at most 253 characters): always one safe
/// directory name (never `.`, `..` or containing `/`).
pub fn check_pv_name(name: &str) -> Result<(), String> {
    let bytes = name.as_bytes();
    let alnum = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    let ok = !bytes.is_empty()
        && bytes.len() <= MAX_NAME_LEN
        && bytes.first().is_some_and(alnum)
        && bytes.last().is_some_and(alnum)
        && bytes.iter().all(|b| alnum(b) || *b == b'-' || *b == b'.');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "invalid volume name {name:?}: it must be a lowercase DNS name \
             ([a-z0-9]([-a-z0-9.]*[a-z0-9])?, at most {MAX_NAME_LEN} characters) \
             so that it is a single directory name under the root"
        ))
    }
}

/// Turns arbitrary text (claim names, annotation values...) into one safe
/// path component: every character other than ASCII letters, digits, `-`,
/// `_` and `.` becomes `-`, leading dots are dropped (no hidden files, never
/// `.` or `..`), and the result is cut to 255 bytes. `None` when nothing is
/// left.
pub fn sanitize_component(raw: &str) -> Option<String> {
    let mapped: String = raw
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.' {
                c
            } else {
                '-'
            }
        })
        .collect();
    let trimmed = mapped.trim_start_matches('.');
    let cut: String = trimmed.chars().take(MAX_COMPONENT_LEN).collect();
    if cut.is_empty() || cut.chars().all(|c| c == '-') {
        None
    } else {
        Some(cut)
    }
}

/// Splits a relative path of several components (e.g. the result of a path
/// pattern `ns/name`) into sanitized components: empty components, `.` and
/// `..` are dropped, each remaining one goes through [`sanitize_component`].
/// The joined result can never leave the directory it is joined to.
pub fn sanitize_relative(raw: &str) -> Vec<String> {
    raw.split('/').filter_map(sanitize_component).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalizes_absolute_paths() {
        assert_eq!(normalize_abs("/srv/x/").unwrap(), "/srv/x");
        assert_eq!(normalize_abs("/").unwrap(), "/");
        assert_eq!(normalize_abs("///").unwrap(), "/");
        for bad in ["relative", "", "/a/../b", "/a/./b", "/a//b", "/a\nb", "/.."] {
            assert!(normalize_abs(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn joins_only_single_safe_components() {
        assert_eq!(join("/data", "pvc-1").unwrap(), "/data/pvc-1");
        assert_eq!(join("/", "pvc-1").unwrap(), "/pvc-1");
        for bad in [
            "",
            ".",
            "..",
            "a/b",
            "../x",
            "/abs",
            "a\0b",
            &"a".repeat(256),
        ] {
            let err = join("/data", bad).unwrap_err();
            assert!(
                err.contains("not a single safe file name"),
                "{bad:?}: {err}"
            );
        }
    }

    #[test]
    fn pv_names() {
        for good in ["pvc-1234", "a", "0", "pvc-9f1c.x-y", &"a".repeat(253)] {
            assert!(check_pv_name(good).is_ok(), "{good}");
        }
        for bad in [
            "",
            ".",
            "..",
            "../etc",
            "a/b",
            "/abs",
            "-a",
            "a-",
            "a.",
            ".a",
            "PVC",
            "a b",
            "a\0b",
            "ä",
            &"a".repeat(254),
        ] {
            assert!(check_pv_name(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn sanitizing_never_escapes() {
        assert_eq!(
            sanitize_component("apps-data").as_deref(),
            Some("apps-data")
        );
        assert_eq!(sanitize_component("a b/c").as_deref(), Some("a-b-c"));
        assert_eq!(sanitize_component("..").as_deref(), None);
        assert_eq!(sanitize_component("../..").as_deref(), Some("-.."));
        assert_eq!(sanitize_component(".hidden").as_deref(), Some("hidden"));
        assert_eq!(sanitize_component("").as_deref(), None);
        assert_eq!(sanitize_component("//").as_deref(), None);
        assert_eq!(sanitize_component(&"x".repeat(300)).unwrap().len(), 255);
        for hostile in [
            "../../etc",
            "..",
            "/etc/passwd",
            "a/../../b",
            "./.",
            "\0",
            "ä/..",
        ] {
            for c in sanitize_relative(hostile) {
                assert!(check_component(&c).is_ok(), "{hostile:?} gave {c:?}");
                assert!(!c.starts_with('.'), "{hostile:?} gave {c:?}");
            }
        }
        assert_eq!(sanitize_relative("ns/../name"), ["ns", "name"]);
        assert_eq!(sanitize_relative("/a//b/"), ["a", "b"]);
    }
}

//! The name and key rules of apimachinery, with their messages: DNS-1123
//! subdomains and labels (object names, class names), qualified names
//! (label and annotation keys, finalizers, provisioners), label values and
//! ConfigMap keys.

const SUBDOMAIN: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
const LABEL: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";
const NAME_PART: &str = "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";
const TOO_MANY_SLASHES: &str = "a valid label key must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')";
const LABEL_VALUE: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')";
const CONFIG_KEY: &str = "a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')";

fn is_subdomain(s: &str) -> bool {
    !s.is_empty()
        && s.split('.').all(|part| {
            !part.is_empty()
                && part
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !part.starts_with('-')
                && !part.ends_with('-')
        })
}

/// `[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?`
fn is_name_part(s: &str) -> bool {
    let bytes = s.as_bytes();
    !bytes.is_empty()
        && bytes[0].is_ascii_alphanumeric()
        && bytes[bytes.len() - 1].is_ascii_alphanumeric()
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// What is wrong with `s` as a DNS-1123 subdomain (none: nothing).
pub fn dns_subdomain(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    if s.len() > 253 {
        out.push("must be no more than 253 characters".into());
    }
    if !is_subdomain(s) {
        out.push(SUBDOMAIN.into());
    }
    out
}

/// What is wrong with `s` as a DNS-1123 label.
pub fn dns_label(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    if s.len() > 63 {
        out.push("must be no more than 63 characters".into());
    }
    if is_subdomain(s) && s.contains('.') {
        out.push("must not contain dots".into());
    } else if !is_subdomain(s) {
        out.push(LABEL.into());
    }
    out
}

/// What is wrong with `s` as a qualified name (`[prefix/]name`).
pub fn qualified_name(s: &str) -> Vec<String> {
    let parts: Vec<&str> = s.split('/').collect();
    let (prefix, name) = match parts.as_slice() {
        [name] => (None, *name),
        [prefix, name] => (Some(*prefix), *name),
        _ => return vec![TOO_MANY_SLASHES.into()],
    };
    let mut out = Vec::new();
    match prefix {
        Some("") => out.push("prefix part must be non-empty".into()),
        Some(prefix) => {
            if prefix.len() > 253 {
                out.push("prefix part must be no more than 253 bytes".into());
            } else if !is_subdomain(prefix) {
                out.push(format!("prefix part {SUBDOMAIN}"));
            }
        }
        None => {}
    }
    if name.is_empty() {
        out.push("name part must be non-empty".into());
    } else if name.len() > 63 {
        out.push("name part must be no more than 63 bytes".into());
    }
    if !is_name_part(name) {
        out.push(NAME_PART.into());
    }
    out
}

/// What is wrong with `s` as a label value.
pub fn label_value(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    if s.len() > 63 {
        out.push("must be no more than 63 bytes".into());
    }
    if !s.is_empty() && !is_name_part(s) {
        out.push(LABEL_VALUE.into());
    }
    out
}

/// What is wrong with `k` as a ConfigMap key.
pub fn config_map_key(k: &str) -> Vec<String> {
    let mut out = Vec::new();
    if k.len() > 253 {
        out.push("must be no more than 253 characters".into());
    }
    if k.is_empty()
        || !k
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
    {
        out.push(CONFIG_KEY.into());
    }
    if k == "." {
        out.push("must not be '.'".into());
    } else if k == ".." {
        out.push("must not be '..'".into());
    } else if k.starts_with("..") {
        out.push("must not start with '..'".into());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_keys() {
        assert!(dns_subdomain("a.b-c").is_empty());
        assert_eq!(dns_subdomain("My_PVC").len(), 1);
        assert_eq!(dns_label("a.b"), ["must not contain dots"]);
        assert!(qualified_name("example.com/my-key").is_empty());
        assert_eq!(qualified_name("a/b/c"), [TOO_MANY_SLASHES]);
        assert_eq!(qualified_name("bad provisioner!"), [NAME_PART]);
        assert_eq!(
            qualified_name("/x"),
            ["prefix part must be non-empty".to_owned()]
        );
        assert!(label_value("").is_empty());
        assert_eq!(
            config_map_key("..a"),
            ["must not start with '..'".to_owned()]
        );
    }
}

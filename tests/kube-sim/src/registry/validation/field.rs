//! Field errors worded as kube-apiserver words them (apimachinery's
//! `field.Error.ErrorBody`): `<path>: <Type>[: <value>][: <detail>]`. A
//! value is shown as Go shows it: a string quoted, a number bare, anything
//! else as JSON.

use serde_json::Value;

/// A value as `field.Error` renders it.
pub fn shown(value: &Value) -> String {
    match value {
        Value::Null => "null".into(),
        Value::String(s) => quoted(s),
        other => other.to_string(),
    }
}

/// A string as Go's `%q` (and `json.Marshal`) show plain ASCII.
pub fn quoted(s: &str) -> String {
    serde_json::to_string(s).expect("a string serializes")
}

fn with_detail(head: String, detail: &str) -> String {
    if detail.is_empty() {
        head
    } else {
        format!("{head}: {detail}")
    }
}

pub fn required(path: &str, detail: &str) -> String {
    with_detail(format!("{path}: Required value"), detail)
}

pub fn forbidden(path: &str, detail: &str) -> String {
    with_detail(format!("{path}: Forbidden"), detail)
}

/// `Invalid value: "<value>": <detail>` for a string value.
pub fn invalid(path: &str, value: &str, detail: &str) -> String {
    invalid_value(path, &Value::String(value.to_owned()), detail)
}

/// `Invalid value: <value>: <detail>` for any value.
pub fn invalid_value(path: &str, value: &Value, detail: &str) -> String {
    with_detail(format!("{path}: Invalid value: {}", shown(value)), detail)
}

/// One `Invalid value` error per message, as validators that return a
/// list of messages are reported.
pub fn invalid_each(path: &str, value: &str, messages: Vec<String>) -> Vec<String> {
    messages
        .into_iter()
        .map(|m| invalid(path, value, &m))
        .collect()
}

pub fn not_supported(path: &str, value: &Value, supported: &[&str]) -> String {
    let list: Vec<String> = supported.iter().map(|s| quoted(s)).collect();
    format!(
        "{path}: Unsupported value: {}: supported values: {}",
        shown(value),
        list.join(", ")
    )
}

pub fn too_long(path: &str, limit: usize) -> String {
    let unit = if limit == 1 { "byte" } else { "bytes" };
    format!("{path}: Too long: may not be more than {limit} {unit}")
}

pub fn duplicate(path: &str, value: &Value, detail: &str) -> String {
    with_detail(format!("{path}: Duplicate value: {}", shown(value)), detail)
}

/// A quantity (`1Gi`, `500M`, `-1`) as bytes; none if it does not parse.
pub fn quantity(text: &str) -> Option<f64> {
    crate::controllers::pv::quantity_bytes(text)
}

/// Why `text` is not a quantity to the real server's decoder: its regular
/// expression, then its suffixes.
pub fn quantity_error(text: &str) -> Option<&'static str> {
    const FORMAT: &str =
        "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'";
    let body = text.strip_prefix(['+', '-']).unwrap_or(text);
    let split = body
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(body.len());
    let (number, suffix) = body.split_at(split);
    let letters = suffix
        .find(|c: char| !"eEinumkKMGTP".contains(c))
        .unwrap_or(suffix.len());
    let (letters_part, exponent) = suffix.split_at(letters);
    let exponent_digits = exponent.strip_prefix(['+', '-']).unwrap_or(exponent);
    if number.is_empty() || !exponent_digits.chars().all(|c| c.is_ascii_digit()) {
        return Some(FORMAT);
    }
    let known = matches!(
        letters_part,
        "" | "Ki"
            | "Mi"
            | "Gi"
            | "Ti"
            | "Pi"
            | "Ei"
            | "n"
            | "u"
            | "m"
            | "k"
            | "M"
            | "G"
            | "T"
            | "P"
            | "E"
    ) && exponent.is_empty()
        || matches!(letters_part, "e" | "E") && !exponent_digits.is_empty();
    (!known || number.matches('.').count() > 1).then_some("unable to parse quantity's suffix")
}

/// The canonical text kube-apiserver shows for a quantity that is not
/// positive: `0` for any zero, the text given otherwise.
pub fn canonical_non_positive(text: &str) -> String {
    match quantity(text) {
        Some(0.0) => "0".into(),
        _ => text.to_owned(),
    }
}

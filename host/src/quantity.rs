//! Kubernetes resource quantities ("1Gi", "500M", "1.5e3") as whole bytes.
//!
//! Only what a storage provisioner needs: parse a quantity to bytes (rounding
//! fractions up, as a volume must be at least as large as asked) and format bytes
//! back in the most readable exact form.

use std::fmt;

/// A quantity that could not be read as a number of bytes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid quantity {input:?}: {reason} (expected e.g. \"1Gi\", \"500Mi\", \"10G\" or \"1048576\")")]
pub struct QuantityError {
    input: String,
    reason: &'static str,
}

const BINARY: [(&str, u32); 6] = [
    ("Ki", 10),
    ("Mi", 20),
    ("Gi", 30),
    ("Ti", 40),
    ("Pi", 50),
    ("Ei", 60),
];
const DECIMAL: [(&str, u32); 7] = [
    ("m", 0), // handled specially: milli
    ("k", 3),
    ("M", 6),
    ("G", 9),
    ("T", 12),
    ("P", 15),
    ("E", 18),
];

/// The `storage` entry of a resource list (a claim's requests, a volume's
/// capacity) in bytes, if it is there and readable.
pub fn storage_of(
    resources: Option<
        &std::collections::BTreeMap<
            String,
            k8s_openapi::apimachinery::pkg::api::resource::Quantity,
        >,
    >,
) -> Option<u64> {
    parse_bytes(&resources?.get("storage")?.0).ok()
}

/// Parses a Kubernetes quantity into bytes, rounding a fractional result up.
pub fn parse_bytes(input: &str) -> Result<u64, QuantityError> {
    let err = |reason| QuantityError {
        input: input.to_owned(),
        reason,
    };
    let s = input.trim();
    if s.is_empty() {
        return Err(err("it is empty"));
    }
    if s.starts_with('-') {
        return Err(err("it is negative"));
    }
    let s = s.strip_prefix('+').unwrap_or(s);

    // Split the number from its suffix.
    let (number, multiplier) = if let Some((num, shift)) = BINARY
        .iter()
        .find_map(|(suffix, shift)| s.strip_suffix(suffix).map(|n| (n, *shift)))
    {
        (num, Scale::Binary(shift))
    } else if let Some(idx) = s.find(['e', 'E']).filter(|&i| i + 1 < s.len()) {
        // "1e3" is an exponent; a trailing "E" alone is the exa suffix.
        let exp: i32 = s[idx + 1..]
            .parse()
            .map_err(|_| err("its exponent is not an integer"))?;
        (&s[..idx], Scale::Decimal(exp))
    } else if let Some(num) = s.strip_suffix('m') {
        (num, Scale::Decimal(-3))
    } else if let Some((num, exp)) = DECIMAL
        .iter()
        .skip(1)
        .find_map(|(suffix, exp)| s.strip_suffix(suffix).map(|n| (n, *exp as i32)))
    {
        (num, Scale::Decimal(exp))
    } else {
        (s, Scale::Decimal(0))
    };

    let (int_part, frac_part) = match number.split_once('.') {
        Some((i, f)) => (i, f),
        None => (number, ""),
    };
    if int_part.is_empty() && frac_part.is_empty() {
        return Err(err("it has no digits"));
    }
    if !int_part.bytes().all(|b| b.is_ascii_digit())
        || !frac_part.bytes().all(|b| b.is_ascii_digit())
    {
        return Err(err("it is not a number with an optional unit suffix"));
    }

    // Exact arithmetic on (digits, decimal exponent) in u128, then round up.
    let digits: String = format!("{int_part}{frac_part}");
    let digits = digits.trim_start_matches('0');
    if digits.len() > 30 {
        return Err(err("it is too large"));
    }
    let mantissa: u128 = if digits.is_empty() {
        0
    } else {
        digits.parse().map_err(|_| err("it is too large"))?
    };
    let frac_len = frac_part.len() as i32;
    let too_large = || err("it is larger than 2^64 bytes");
    let value = match multiplier {
        Scale::Binary(shift) => {
            // `checked_shl` checks the shift, not the product: multiply.
            let scaled = mantissa.checked_mul(1u128 << shift).ok_or_else(too_large)?;
            div_ceil_pow10(scaled, frac_len)
        }
        Scale::Decimal(exp) => {
            let exp = exp - frac_len;
            if exp >= 0 {
                let factor = 10u128.checked_pow(exp as u32).ok_or_else(too_large)?;
                mantissa.checked_mul(factor).ok_or_else(too_large)?
            } else {
                div_ceil_pow10(mantissa, -exp)
            }
        }
    };
    u64::try_from(value).map_err(|_| too_large())
}

enum Scale {
    Binary(u32),
    Decimal(i32),
}

fn div_ceil_pow10(value: u128, exp: i32) -> u128 {
    if exp <= 0 {
        return value;
    }
    match 10u128.checked_pow(exp as u32) {
        Some(divisor) => value.div_ceil(divisor),
        // More than 38 fractional digits: anything non-zero rounds up to 1.
        None => u128::from(value > 0),
    }
}

/// Bytes formatted as the shortest exact Kubernetes quantity ("10Gi", "1500M").
pub struct Bytes(pub u64);

impl fmt::Display for Bytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.0;
        if n == 0 {
            return f.write_str("0");
        }
        // The largest exact binary and decimal forms; the shorter wins, and
        // binary wins a tie ("1Gi" rather than "1073741824", "10G" rather
        // than "9765625Ki").
        let binary = BINARY
            .iter()
            .rev()
            .find(|(_, shift)| n.is_multiple_of(1u64 << shift))
            .map(|(suffix, shift)| format!("{}{suffix}", n >> shift));
        let decimal = DECIMAL
            .iter()
            .skip(1)
            .rev()
            .find(|(_, exp)| n.is_multiple_of(10u64.pow(*exp)))
            .map(|(suffix, exp)| format!("{}{suffix}", n / 10u64.pow(*exp)));
        let plain = n.to_string();
        let best = [binary, decimal]
            .into_iter()
            .flatten()
            .fold(plain, |best, c| {
                if c.len() < best.len() || (c.len() == best.len() && c.ends_with('i')) {
                    c
                } else {
                    best
                }
            });
        f.write_str(&best)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_forms_kubernetes_accepts() {
        let cases = [
            ("1Gi", 1 << 30),
            ("500Mi", 500 << 20),
            ("1.5Gi", 3 << 29),
            ("10G", 10_000_000_000),
            ("1k", 1000),
            ("1048576", 1 << 20),
            ("1e3", 1000),
            ("1.5E3", 1500),
            ("+2Ki", 2048),
            ("0", 0),
            ("0.5", 1),   // fractions round up
            ("1500m", 2), // 1.5 bytes → 2
            ("1.0000001Ki", 1025),
            (".5Ki", 512),
            ("1E", 1_000_000_000_000_000_000),
        ];
        for (input, want) in cases {
            assert_eq!(parse_bytes(input), Ok(want), "{input}");
        }
    }

    #[test]
    fn rejects_what_is_not_a_quantity() {
        for input in [
            "",
            "-1Gi",
            "Gi",
            "1GB",
            "1.2.3",
            "abc",
            "1e",
            "99999999999Ei",
            // 2^68 + 1: times 2^60 wraps a u128 to exactly 1Ei.
            "295147905179352825857Ei",
            "1 Gi",
        ] {
            let e = parse_bytes(input).expect_err(input);
            assert!(e.to_string().contains(&format!("{input:?}")), "{e}");
        }
    }

    #[test]
    fn formats_bytes_exactly_and_briefly() {
        assert_eq!(Bytes(1 << 30).to_string(), "1Gi");
        assert_eq!(Bytes(3 << 29).to_string(), "1536Mi");
        assert_eq!(Bytes(10_000_000_000).to_string(), "10G");
        assert_eq!(Bytes(1023).to_string(), "1023");
        assert_eq!(Bytes(0).to_string(), "0");
        for n in [1u64, 1000, 1024, 1536 << 20, 123_456_789, u64::MAX] {
            assert_eq!(parse_bytes(&Bytes(n).to_string()), Ok(n));
        }
    }
}

//! Plugin file names and compression. A plugin is delivered as
//! `<name>.wasm`, or compressed as `<name>.wasm.gz` / `<name>.wasm.zst` so a
//! larger component fits a ConfigMap's 1 MiB.

use std::io::Read;

/// Decompressed components larger than this are refused: a small compressed
/// file must not be able to exhaust the host's memory.
pub const MAX_COMPONENT_SIZE: u64 = 256 << 20;

/// How a plugin file is compressed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Encoding {
    Plain,
    Gzip,
    Zstd,
}

impl Encoding {
    /// The file name suffix, after `<name>`.
    pub fn suffix(self) -> &'static str {
        match self {
            Encoding::Plain => ".wasm",
            Encoding::Gzip => ".wasm.gz",
            Encoding::Zstd => ".wasm.zst",
        }
    }
}

/// The plugin name and encoding of a file name, or `None` for files that are
/// not plugins (other extensions, hidden files such as editors' temporaries
/// and kubelet's `..data`).
pub fn plugin_file(file_name: &str) -> Option<(&str, Encoding)> {
    if file_name.starts_with('.') {
        return None;
    }
    // Longest suffix first: `x.wasm.gz` is not a plugin named `x.wasm`.
    for encoding in [Encoding::Gzip, Encoding::Zstd, Encoding::Plain] {
        if let Some(name) = file_name.strip_suffix(encoding.suffix()) {
            return valid_name(name).then_some((name, encoding));
        }
    }
    None
}

/// Plugin names appear in StorageClass parameters, metrics labels and
/// ConfigMap names: keep them to DNS-label characters.
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 63
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
}

/// A compressed file that does not decompress to a component.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    #[error("not valid {what} data: {source}; recreate it with `wasmprov plugin pack`")]
    Corrupt {
        what: &'static str,
        source: std::io::Error,
    },
    #[error("decompresses to more than {} MiB, the most a plugin may be", MAX_COMPONENT_SIZE >> 20)]
    TooLarge,
}

/// The component bytes of a plugin file.
pub fn decode(encoding: Encoding, bytes: Vec<u8>) -> Result<Vec<u8>, DecodeError> {
    let (what, reader): (_, Box<dyn Read + '_>) = match encoding {
        Encoding::Plain => return Ok(bytes),
        Encoding::Gzip => ("gzip", Box::new(flate2::read::GzDecoder::new(&bytes[..]))),
        Encoding::Zstd => (
            "zstd",
            Box::new(
                zstd::stream::read::Decoder::new(&bytes[..]).map_err(|source| {
                    DecodeError::Corrupt {
                        what: "zstd",
                        source,
                    }
                })?,
            ),
        ),
    };
    let mut out = Vec::with_capacity(bytes.len() * 3);
    reader
        .take(MAX_COMPONENT_SIZE + 1)
        .read_to_end(&mut out)
        .map_err(|source| DecodeError::Corrupt { what, source })?;
    if out.len() as u64 > MAX_COMPONENT_SIZE {
        return Err(DecodeError::TooLarge);
    }
    Ok(out)
}

/// Compresses a component for delivery (the inverse of [`decode`]).
pub fn encode(encoding: Encoding, wasm: &[u8]) -> std::io::Result<Vec<u8>> {
    match encoding {
        Encoding::Plain => Ok(wasm.to_vec()),
        Encoding::Gzip => {
            use std::io::Write;
            let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
            gz.write_all(wasm)?;
            gz.finish()
        }
        Encoding::Zstd => zstd::stream::encode_all(wasm, 19),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_names() {
        assert_eq!(
            plugin_file("hostpath.wasm"),
            Some(("hostpath", Encoding::Plain))
        );
        assert_eq!(
            plugin_file("js-tmpl.wasm.gz"),
            Some(("js-tmpl", Encoding::Gzip))
        );
        assert_eq!(plugin_file("py.wasm.zst"), Some(("py", Encoding::Zstd)));
        for ignored in [
            "..data",
            ".hostpath.wasm",
            "hostpath.wasm.tmp",
            "README",
            ".wasm",
            "Upper.wasm",
            "a.b.wasm",
        ] {
            assert_eq!(plugin_file(ignored), None, "{ignored}");
        }
    }

    #[test]
    fn round_trips_and_refuses_garbage() {
        let wasm = b"\0asm\x0d\0\x01\0 some component bytes".repeat(100);
        for encoding in [Encoding::Plain, Encoding::Gzip, Encoding::Zstd] {
            let packed = encode(encoding, &wasm).unwrap();
            assert_eq!(decode(encoding, packed).unwrap(), wasm, "{encoding:?}");
        }
        for encoding in [Encoding::Gzip, Encoding::Zstd] {
            let err = decode(encoding, b"not compressed".to_vec()).unwrap_err();
            assert!(err.to_string().contains("not valid"), "{err}");
            let mut truncated = encode(encoding, &wasm).unwrap();
            truncated.truncate(truncated.len() / 2);
            assert!(decode(encoding, truncated).is_err(), "{encoding:?}");
        }
    }

    #[test]
    fn refuses_decompression_bombs() {
        let zeros = vec![0u8; (MAX_COMPONENT_SIZE + 1) as usize];
        let bomb = zstd::stream::encode_all(&zeros[..], 1).unwrap();
        assert!(bomb.len() < 1 << 20);
        assert!(matches!(
            decode(Encoding::Zstd, bomb),
            Err(DecodeError::TooLarge)
        ));
    }
}

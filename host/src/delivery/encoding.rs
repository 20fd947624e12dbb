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
    #[error("not valid {what} data: {error}; recreate it with `wasmprov plugin pack`")]
    Corrupt {
        what: &'static str,
        // Part of the message, not a `source` (it would be said twice).
        error: std::io::Error,
    },
    #[error("decompresses to more than {} MiB, the most a plugin may be", MAX_COMPONENT_SIZE >> 20)]
    TooLarge,
}

/// The largest zstd window a plugin file may ask for (16 MiB): the decoder
/// allocates it up front, so a frame header alone could otherwise cost the
/// 128 MiB default. `encode` at level 19 uses 8 MiB.
const ZSTD_WINDOW_LOG_MAX: u32 = 24;

/// The component bytes of a plugin file.
///
/// Memory stays bounded by what the component really is: the stream is
/// first decompressed into nothing, counting, and refused past
/// [`MAX_COMPONENT_SIZE`]; only a stream within it is decompressed again
/// into a buffer of exactly its size. A bomb costs CPU time, never memory.
pub fn decode(encoding: Encoding, bytes: Vec<u8>) -> Result<Vec<u8>, DecodeError> {
    if encoding == Encoding::Plain {
        return Ok(bytes);
    }
    let what = match encoding {
        Encoding::Gzip => "gzip",
        _ => "zstd",
    };
    let corrupt = |error| DecodeError::Corrupt { what, error };
    let size = std::io::copy(
        &mut decoder(encoding, &bytes)?.take(MAX_COMPONENT_SIZE + 1),
        &mut std::io::sink(),
    )
    .map_err(corrupt)?;
    if size > MAX_COMPONENT_SIZE {
        return Err(DecodeError::TooLarge);
    }
    let mut out = Vec::with_capacity(usize::try_from(size).map_err(|_| DecodeError::TooLarge)?);
    decoder(encoding, &bytes)?
        .take(size)
        .read_to_end(&mut out)
        .map_err(corrupt)?;
    Ok(out)
}

fn decoder(encoding: Encoding, bytes: &[u8]) -> Result<Box<dyn Read + '_>, DecodeError> {
    let corrupt = |error| DecodeError::Corrupt {
        what: "zstd",
        error,
    };
    Ok(match encoding {
        Encoding::Plain => Box::new(bytes),
        Encoding::Gzip => Box::new(flate2::read::GzDecoder::new(bytes)),
        Encoding::Zstd => {
            let mut d = zstd::stream::read::Decoder::new(bytes).map_err(corrupt)?;
            d.window_log_max(ZSTD_WINDOW_LOG_MAX).map_err(corrupt)?;
            Box::new(d)
        }
    })
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

//! On-disk cache of compiled components.
//!
//! Compiling a component takes 40 ms (Rust) to 6 s (JavaScript, Python);
//! loading a compiled one takes well under a millisecond. Entries are keyed by
//! the component's SHA-256 and the engine's compatibility hash, so a different
//! wasmtime version or configuration never loads a stale entry.
//!
//! Each file is the serialized component followed by the SHA-256 of those
//! bytes: a truncated or corrupted entry is detected, ignored and rewritten
//! instead of being mapped as executable code.
//!
//! # Safety assumption
//!
//! Loading a cache entry runs the native code in it. The cache directory must be
//! writable only by the host (an `emptyDir` in the pod, or a private directory);
//! the checksum guards against accidents, not against someone who can write
//! there.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::io::Write;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use wasmtime::component::Component;
use wasmtime::Engine;

const CHECKSUM_LEN: usize = 32;

/// Where compiled components are kept between restarts.
#[derive(Debug, Clone)]
pub struct CompileCache {
    dir: PathBuf,
    engine_hash: String,
}

/// How a component was obtained, for logs and metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheOutcome {
    /// Loaded from the cache: no compilation.
    Hit,
    /// Compiled, and written to the cache.
    Compiled,
    /// Compiled; the cache is disabled or could not be written.
    CompiledUncached,
}

impl CompileCache {
    /// Uses `dir` (created if missing) for the entries of this engine.
    pub fn new(dir: &Path, engine: &Engine) -> std::io::Result<Self> {
        std::fs::create_dir_all(dir)?;
        let mut hasher = DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut hasher);
        Ok(Self {
            dir: dir.to_owned(),
            engine_hash: format!("{:016x}", hasher.finish()),
        })
    }

    fn entry_path(&self, digest: &str) -> PathBuf {
        self.dir
            .join(format!("{digest}-{}.cwasm", self.engine_hash))
    }

    /// The cached component with this digest, if a sound entry exists.
    pub fn load(&self, engine: &Engine, digest: &str) -> Option<Component> {
        let path = self.entry_path(digest);
        let bytes = std::fs::read(&path).ok()?;
        let Some(split) = bytes.len().checked_sub(CHECKSUM_LEN) else {
            tracing::warn!(path = %path.display(), "ignoring truncated compile cache entry");
            return None;
        };
        let (code, checksum) = bytes.split_at(split);
        if Sha256::digest(code).as_slice() != checksum {
            tracing::warn!(path = %path.display(), "ignoring corrupted compile cache entry (checksum mismatch)");
            return None;
        }
        // SAFETY: the bytes were produced by `Component::serialize` of an engine
        // with the same compatibility hash (it is in the file name), they passed
        // the checksum written with them, and the cache directory is private to
        // the host (see the module docs). Wasmtime re-checks the header and
        // rejects artifacts of another version or configuration.
        match unsafe { Component::deserialize(engine, code) } {
            Ok(component) => Some(component),
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "ignoring unusable compile cache entry");
                None
            }
        }
    }

    /// Writes a compiled component atomically (temporary file + rename), so a
    /// concurrent reader or a crash never leaves a half-written entry behind.
    pub fn store(&self, digest: &str, component: &Component) -> Result<(), String> {
        let code = component.serialize().map_err(|e| e.to_string())?;
        let path = self.entry_path(digest);
        let mut tmp = tempfile::NamedTempFile::new_in(&self.dir).map_err(|e| e.to_string())?;
        tmp.write_all(&code)
            .and_then(|()| tmp.write_all(&Sha256::digest(&code)))
            .and_then(|()| tmp.as_file().sync_all())
            .map_err(|e| e.to_string())?;
        tmp.persist(&path).map_err(|e| e.to_string())?;
        Ok(())
    }
}

//! The sandbox policy file, re-read when it changes.

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::policy::{PolicySet, RunsOn};

/// The policy file, the side it is read for, and the digest of the content
/// last applied.
#[derive(Debug)]
pub struct PolicyFile {
    path: PathBuf,
    side: RunsOn,
    applied: Option<[u8; 32]>,
}

impl PolicyFile {
    /// Reads and parses the policy for the first time, for a host of `side`.
    pub fn load(path: impl Into<PathBuf>, side: RunsOn) -> anyhow::Result<(Self, PolicySet)> {
        let path = path.into();
        let text = std::fs::read_to_string(&path).map_err(|e| {
            anyhow::anyhow!("cannot read the sandbox policy {}: {e}", path.display())
        })?;
        let policies = PolicySet::parse_for(&text, &path, side)?;
        let applied = Some(Sha256::digest(text.as_bytes()).into());
        Ok((
            Self {
                path,
                side,
                applied,
            },
            policies,
        ))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The new policy if the file's content changed since it was last
    /// applied; `Err` (to log) if the new content is not a valid policy.
    pub fn changed(&mut self) -> Option<Result<PolicySet, String>> {
        // A missing file (mid-swap, or deleted) keeps the policy in force.
        let text = std::fs::read_to_string(&self.path).ok()?;
        let digest: [u8; 32] = Sha256::digest(text.as_bytes()).into();
        if self.applied == Some(digest) {
            return None;
        }
        // Remember rejected content too, so it is reported once, not on every pass.
        self.applied = Some(digest);
        Some(PolicySet::parse_for(&text, &self.path, self.side).map_err(|e| e.to_string()))
    }
}

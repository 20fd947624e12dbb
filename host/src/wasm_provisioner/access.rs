//! Who may use a `hostPath`/`local` volume: the mode and owner of its
//! directory. The kubelet applies neither `fsGroup` nor anything else to
//! such volumes, and a sandboxed plugin cannot set them (WASI has no chmod
//! or chown), so the host sets them once the output policy has accepted the
//! volume, from the class's parameters `wasmprov.io/mode`, `wasmprov.io/uid`
//! and `wasmprov.io/gid`, or the claim's annotations of the same names
//! where the plugin's policy lets claims choose (`output.claimAccess`).
//! These parameters are the host's: plugins never see them.

use std::collections::BTreeMap;
use std::path::Path;

use rustix::fs::{Mode, OFlags, ResolveFlags};

/// The prefix of the class parameters the host reads and plugins never get.
pub const HOST_PARAMETER_PREFIX: &str = "wasmprov.io/";
pub const MODE_KEY: &str = "wasmprov.io/mode";
pub const UID_KEY: &str = "wasmprov.io/uid";
pub const GID_KEY: &str = "wasmprov.io/gid";

/// The mode and owner a volume's directory gets; `None` leaves it as the
/// plugin made it (owned by the host's user, mode 0755 with its umask).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Access {
    pub mode: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
}

impl Access {
    /// The access a claim's volume gets: its class's parameters, overridden
    /// by the claim's annotations when `claims_may_choose`. An error names
    /// the object and the fix.
    pub fn of(
        class: &str,
        parameters: &BTreeMap<String, String>,
        claim: &str,
        annotations: &BTreeMap<String, String>,
        claims_may_choose: bool,
        plugin: &str,
    ) -> Result<Access, String> {
        let mut access = Access::default();
        for (key, value) in parameters
            .iter()
            .filter(|(k, _)| k.starts_with(HOST_PARAMETER_PREFIX))
        {
            access
                .set(key, value)
                .map_err(|e| format!("StorageClass {class}: parameter {key}: {e}"))?;
        }
        for (key, value) in annotations {
            if ![MODE_KEY, UID_KEY, GID_KEY].contains(&key.as_str()) {
                continue;
            }
            if !claims_may_choose {
                return Err(format!(
                    "claim {claim}: annotation {key}: plugin {plugin}'s sandbox policy does not let \
                     claims choose their volume's mode and owner; remove the annotation (the class \
                     {class} decides), or grant it with plugins.{plugin}.output.claimAccess: true"
                ));
            }
            access
                .set(key, value)
                .map_err(|e| format!("claim {claim}: annotation {key}: {e}"))?;
        }
        Ok(access)
    }

    fn set(&mut self, key: &str, value: &str) -> Result<(), String> {
        match key {
            MODE_KEY => self.mode = Some(parse_mode(value)?),
            UID_KEY => self.uid = Some(parse_id(value)?),
            GID_KEY => self.gid = Some(parse_id(value)?),
            _ => {
                return Err(format!(
                    "not a parameter the host knows ({MODE_KEY}, {UID_KEY} and {GID_KEY} are); \
                     parameters starting with {HOST_PARAMETER_PREFIX} are the host's, never the \
                     plugin's: remove it"
                ))
            }
        }
        Ok(())
    }

    pub fn is_default(&self) -> bool {
        *self == Access::default()
    }

    /// Gives `path` (a volume's directory or file, already checked by the
    /// output policy) this owner, then this mode, on the object itself:
    /// no link is followed anywhere along the path.
    pub fn apply(&self, path: &Path) -> Result<(), String> {
        if self.is_default() {
            return Ok(());
        }
        let shown = path.display();
        let fd = rustix::fs::openat2(
            rustix::fs::CWD,
            path,
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC,
            Mode::empty(),
            ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
        )
        .map_err(|e| format!("{shown}: cannot be opened to set its mode and owner ({e})"))?;
        let file = std::fs::File::from(fd);
        let kind = file
            .metadata()
            .map_err(|e| format!("{shown}: {e}"))?
            .file_type();
        if !kind.is_dir() && !kind.is_file() {
            return Err(format!(
                "{shown} is not a directory or a regular file; its mode and owner are not set"
            ));
        }
        if self.uid.is_some() || self.gid.is_some() {
            std::os::unix::fs::fchown(&file, self.uid, self.gid).map_err(|e| {
                format!(
                    "{shown}: cannot give it to uid {} gid {} ({e}): a host without CAP_CHOWN may \
                     only give a file to a group it is in (add the gid to the host pod's \
                     securityContext.supplementalGroups); setting {UID_KEY} needs a host with \
                     CAP_CHOWN. Or drop the owner and choose a mode (e.g. {MODE_KEY}: \"0777\")",
                    shown_id(self.uid),
                    shown_id(self.gid),
                )
            })?;
        }
        if let Some(mode) = self.mode {
            use std::os::unix::fs::PermissionsExt;
            file.set_permissions(std::fs::Permissions::from_mode(mode))
                .map_err(|e| format!("{shown}: cannot set its mode to {mode:04o} ({e})"))?;
        }
        Ok(())
    }
}

/// Applies `access` to a volume source's node path: `hostPath` and
/// `local` only (anything else is not on a filesystem the host sees).
pub fn apply_to_source(access: &Access, source: &serde_json::Value) -> Result<(), String> {
    if access.is_default() {
        return Ok(());
    }
    let path = ["hostPath", "local"]
        .iter()
        .find_map(|kind| source.get(kind)?.get("path")?.as_str())
        .ok_or_else(|| {
            format!(
                "{MODE_KEY}, {UID_KEY} and {GID_KEY} apply to hostPath and local volumes only, \
                 and this one is not; remove them from the class"
            )
        })?;
    access.apply(Path::new(path))
}

fn shown_id(id: Option<u32>) -> String {
    id.map_or_else(|| "(unchanged)".to_owned(), |i| i.to_string())
}

/// An octal mode of at most 07777, as `chmod` takes it: `"0770"`, `"2775"`.
fn parse_mode(value: &str) -> Result<u32, String> {
    let digits = value.strip_prefix("0o").unwrap_or(value);
    match u32::from_str_radix(digits, 8) {
        Ok(mode) if mode <= 0o7777 && !digits.is_empty() => Ok(mode),
        _ => Err(format!(
            "{value:?} is not an octal file mode such as \"0770\" or \"2775\" (at most 7777)"
        )),
    }
}

/// A numeric user or group ID (names mean nothing on a node the host does
/// not share `/etc/passwd` with).
fn parse_id(value: &str) -> Result<u32, String> {
    value
        .parse::<u32>()
        .ok()
        .filter(|id| *id != u32::MAX)
        .ok_or_else(|| format!("{value:?} is not a numeric ID such as \"1000\""))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn of(class: &[(&str, &str)], claim: &[(&str, &str)], may: bool) -> Result<Access, String> {
        Access::of("sc", &map(class), "ns/c", &map(claim), may, "p")
    }

    #[test]
    fn the_class_sets_the_access_and_a_claim_overrides_it_where_allowed() {
        let class = [(MODE_KEY, "0770"), (GID_KEY, "1000"), ("root", "/v")];
        let a = of(&class, &[], false).unwrap();
        assert_eq!(
            a,
            Access {
                mode: Some(0o770),
                uid: None,
                gid: Some(1000)
            }
        );
        let a = of(&class, &[(MODE_KEY, "2775"), ("other", "x")], true).unwrap();
        assert_eq!(a.mode, Some(0o2775));
        assert_eq!(a.gid, Some(1000));
        assert!(of(&[], &[], false).unwrap().is_default());
    }

    #[test]
    fn bad_access_is_refused_naming_the_object_and_the_fix() {
        let e = of(&[(MODE_KEY, "0779")], &[], false).unwrap_err();
        assert!(
            e.starts_with("StorageClass sc: parameter wasmprov.io/mode"),
            "{e}"
        );
        assert!(e.contains("octal"), "{e}");
        for bad in ["", "rwx", "17777", "-1"] {
            assert!(parse_mode(bad).is_err(), "{bad:?}");
        }
        for bad in ["", "root", "-1", "4294967295", "1.5"] {
            assert!(parse_id(bad).is_err(), "{bad:?}");
        }
        let e = of(&[("wasmprov.io/owner", "1")], &[], false).unwrap_err();
        assert!(e.contains("not a parameter the host knows"), "{e}");
        let e = of(&[], &[(UID_KEY, "1000")], false).unwrap_err();
        assert!(
            e.starts_with("claim ns/c: annotation wasmprov.io/uid"),
            "{e}"
        );
        assert!(e.contains("plugins.p.output.claimAccess: true"), "{e}");
        let e = of(&[], &[(UID_KEY, "x")], true).unwrap_err();
        assert!(
            e.starts_with("claim ns/c: annotation wasmprov.io/uid"),
            "{e}"
        );
    }

    #[test]
    fn the_mode_is_set_on_the_directory_never_through_a_link() {
        let dir = tempfile::tempdir().unwrap();
        let volume = dir.path().join("pvc-1");
        std::fs::create_dir(&volume).unwrap();
        let access = Access {
            mode: Some(0o2777),
            ..Access::default()
        };
        access.apply(&volume).unwrap();
        let mode = std::fs::metadata(&volume).unwrap().permissions().mode();
        assert_eq!(mode & 0o7777, 0o2777);

        let target = dir.path().join("target");
        std::fs::create_dir(&target).unwrap();
        std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o700)).unwrap();
        std::os::unix::fs::symlink(&target, dir.path().join("link")).unwrap();
        assert!(access.apply(&dir.path().join("link")).is_err());
        assert!(access.apply(&dir.path().join("link/x")).is_err());
        let mode = std::fs::metadata(&target).unwrap().permissions().mode();
        assert_eq!(mode & 0o7777, 0o700, "the link's target is untouched");
    }

    #[test]
    fn the_owner_is_set_when_the_host_may_and_refused_with_the_fix_when_not() {
        let dir = tempfile::tempdir().unwrap();
        let access = Access {
            uid: Some(4321),
            gid: Some(4321),
            mode: Some(0o750),
        };
        let result = access.apply(dir.path());
        if rustix::process::geteuid().is_root() {
            result.unwrap();
            let meta = std::fs::metadata(dir.path()).unwrap();
            assert_eq!((meta.uid(), meta.gid()), (4321, 4321));
            assert_eq!(meta.permissions().mode() & 0o7777, 0o750);
        } else {
            let e = result.unwrap_err();
            assert!(
                e.contains("CAP_CHOWN") && e.contains("supplementalGroups"),
                "{e}"
            );
        }
    }
}

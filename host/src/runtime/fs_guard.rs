//! What wasmtime-wasi has no permission bit for, enforced by wrapping the
//! `wasi:filesystem` functions that do it: links, moves and special files.
//!
//! Two rules.
//!
//! **Special files are never opened** (every sandbox). A pod can make a FIFO,
//! a device node or a socket inside its own volume; a plugin that opens a
//! FIFO would block a host thread inside `open(2)`, where neither the call's
//! timeout nor the epoch deadline can reach it, and a device node is a way to
//! the node's disks. `open-at` is redone here with `O_NONBLOCK | O_NOCTTY`
//! (so opening a FIFO or a leased file cannot block, and no terminal is
//! taken over) and the opened file's type is checked on the descriptor
//! itself, so nothing swapped in between a check and the open gets through.
//! Only directories and regular files are handed to the guest; anything
//! else is closed at once and the guest gets `not-permitted`.
//!
//! **Where volumes live, the layout cannot be rearranged**
//! ([`SandboxPolicy::guard_volumes`]: a plugin whose preopens overlap a
//! granted volume path). The host checks a volume's path once, when the
//! plugin returns it; what keeps it true afterwards is that nothing a pod can
//! write ever becomes part of the path to a volume. Pods write only inside
//! their volumes, so a plugin may not:
//!
//! - make a symbolic or hard link (`symlink-at`, `link-at`);
//! - move anything but a regular file (`rename-at`), with one exception: a
//!   volume's own directory may be renamed to another name of the same
//!   volume (`pvc-<uid>` → `archived-pvc-<uid>`), as archiving plugins do.
//!
//! So a directory never changes place in the layout: a pod's directory (or
//! a volume's directory, holding a pod's link) can never be moved to where
//! another volume's path leads, nor can the directories above a volume be
//! swapped. A plugin may still create and remove directories and files
//! anywhere in its preopens: it is the storage backend, trusted with the
//! data, not with the node.
//!
//! `rename-at` looks at its source without following links; a directory
//! moved with the exception above is not searched (its contents are the
//! volume's own). The guest gets `error-code::not-permitted` (`EPERM` in
//! libc), an ordinary I/O error, never a trap, and the host logs a warning
//! naming the plugin, the object and the path.
//!
//! The functions are redefined in the linker instance wasmtime-wasi
//! registers ([`FILESYSTEM_TYPES`]); a guest importing any other `0.2.x`
//! version, older or newer, is linked to that same instance (the component
//! linker matches semver-compatible versions), so it gets the wrapped
//! functions too. Every other function is wasmtime-wasi's own.
//!
//! [`SandboxPolicy::guard_volumes`]: crate::policy::SandboxPolicy::guard_volumes

use std::os::unix::fs::FileTypeExt;
use std::path::Path;
use std::sync::Arc;

use cap_primitives::fs::{FollowSymlinks, OpenOptions, OpenOptionsExt};
use wasmtime::component::{Linker, LinkerInstance, Resource};
use wasmtime::StoreContextMut;
use wasmtime_wasi::filesystem::{self as wasi_fs, WasiFilesystemCtxView, WasiFilesystemView};
use wasmtime_wasi::p2::bindings::filesystem::types::{
    self, Descriptor, DescriptorFlags, DescriptorType, ErrorCode, HostDescriptor, OpenFlags,
    PathFlags,
};
use wasmtime_wasi::p2::{FsError, FsResult};
use wasmtime_wasi::OpenMode;

use super::sandbox::CallState;
use crate::policy::output::volume_named;

/// The `wasi:filesystem/types` instance wasmtime-wasi 48 registers (its
/// `src/p2/wit/deps/filesystem.wit`). Checked by [`add_to_linker`]: if a
/// wasmtime-wasi upgrade changes it, the runtime refuses to start instead of
/// silently linking the unwrapped functions.
pub const FILESYSTEM_TYPES: &str = "wasi:filesystem/types@0.2.12";

type Answer<T> = wasmtime::Result<(Result<T, ErrorCode>,)>;
/// Redefines the guarded functions in a linker that already holds
/// wasmtime-wasi's preview 2 filesystem (`add_to_linker_async`).
pub fn add_to_linker(linker: &mut Linker<CallState>) -> wasmtime::Result<()> {
    // Each function must already be defined by wasmtime-wasi in this very
    // instance (defining it again without shadowing fails); otherwise
    // `instance` would make a new, nearly empty instance beside
    // wasmtime-wasi's and guests would keep the unwrapped functions.
    for (name, wrap) in WRAPPERS {
        let mut probe = linker.clone();
        probe.allow_shadowing(false);
        if wrap(&mut probe.instance(FILESYSTEM_TYPES)?).is_ok() {
            wasmtime::bail!(
                "wasmtime-wasi does not define `{name}` in {FILESYSTEM_TYPES}: the runtime cannot guard the filesystem; set FILESYSTEM_TYPES in host/src/runtime/fs_guard.rs to the version in wasmtime-wasi's src/p2/wit/deps/filesystem.wit"
            );
        }
    }
    linker.allow_shadowing(true);
    let result = WRAPPERS.iter().try_for_each(|(_, wrap)| {
        linker
            .instance(FILESYSTEM_TYPES)
            .and_then(|mut i| wrap(&mut i))
    });
    linker.allow_shadowing(false);
    result
}

type Wrapper = fn(&mut LinkerInstance<'_, CallState>) -> wasmtime::Result<()>;

const WRAPPERS: [(&str, Wrapper); 4] = [
    (SYMLINK_AT, symlink_at),
    (LINK_AT, link_at),
    (RENAME_AT, rename_at),
    (OPEN_AT, open_at),
];

const SYMLINK_AT: &str = "[method]descriptor.symlink-at";
const LINK_AT: &str = "[method]descriptor.link-at";
const RENAME_AT: &str = "[method]descriptor.rename-at";
const OPEN_AT: &str = "[method]descriptor.open-at";

/// Why the guarded sandbox refuses links and most moves, for the warning.
const LAYOUT: &str = "a plugin whose preopens overlap a granted volume directory (output.paths) may not make links, nor move anything but regular files and a volume's own directory (to another name of the same volume, e.g. archived-pvc-…), so that nothing a pod wrote can become part of another volume's path; create and remove real directories and files instead";

fn symlink_at(fs: &mut LinkerInstance<'_, CallState>) -> wasmtime::Result<()> {
    fs.func_wrap_async(
        SYMLINK_AT,
        |mut store: StoreContextMut<'_, CallState>,
         (fd, old_path, new_path): (Resource<Descriptor>, String, String)| {
            Box::new(async move {
                let state = store.data_mut();
                if state.guard_volumes {
                    state.refused("make a symbolic link", &new_path, LAYOUT);
                    return Ok((Err(ErrorCode::NotPermitted),));
                }
                let mut view = state.filesystem();
                let result = view.symlink_at(fd, old_path, new_path).await;
                answer(&mut view, result)
            })
        },
    )
}

fn link_at(fs: &mut LinkerInstance<'_, CallState>) -> wasmtime::Result<()> {
    fs.func_wrap_async(
        LINK_AT,
        |mut store: StoreContextMut<'_, CallState>,
         (fd, flags, old_path, new_fd, new_path): (
            Resource<Descriptor>,
            PathFlags,
            String,
            Resource<Descriptor>,
            String,
        )| {
            Box::new(async move {
                let state = store.data_mut();
                if state.guard_volumes {
                    state.refused("make a hard link", &new_path, LAYOUT);
                    return Ok((Err(ErrorCode::NotPermitted),));
                }
                let mut view = state.filesystem();
                let result = view.link_at(fd, flags, old_path, new_fd, new_path).await;
                answer(&mut view, result)
            })
        },
    )
}

fn rename_at(fs: &mut LinkerInstance<'_, CallState>) -> wasmtime::Result<()> {
    fs.func_wrap_async(
        RENAME_AT,
        |mut store: StoreContextMut<'_, CallState>,
         (fd, old_path, new_fd, new_path): (
            Resource<Descriptor>,
            String,
            Resource<Descriptor>,
            String,
        )| {
            Box::new(async move {
                let state = store.data_mut();
                if state.guard_volumes {
                    // The source itself, not what a link there points to.
                    let source = Resource::new_borrow(fd.rep());
                    let stat = state
                        .filesystem()
                        .stat_at(source, PathFlags::empty(), old_path.clone())
                        .await;
                    match stat {
                        Ok(stat) => {
                            if let Err(what) = may_move(stat.type_, &old_path, &new_path) {
                                state.refused(&what, &new_path, LAYOUT);
                                return Ok((Err(ErrorCode::NotPermitted),));
                            }
                        }
                        // Whatever made the stat fail makes the rename fail.
                        Err(e) => return answer(&mut state.filesystem(), Err(e)),
                    }
                }
                let mut view = state.filesystem();
                let result = view.rename_at(fd, old_path, new_fd, new_path).await;
                answer(&mut view, result)
            })
        },
    )
}

/// Whether a guarded sandbox may move `from` (of type `kind`) to `to`; if
/// not, what was refused, for the warning.
fn may_move(kind: DescriptorType, from: &str, to: &str) -> Result<(), String> {
    match kind {
        DescriptorType::RegularFile => Ok(()),
        DescriptorType::Directory => match (volume_of(from), volume_of(to)) {
            (Some(a), Some(b)) if a == b => Ok(()),
            _ => Err("move a directory".to_owned()),
        },
        DescriptorType::SymbolicLink => Err("move a symbolic link".to_owned()),
        other => Err(format!("move a {}", special_kind(other))),
    }
}

/// The volume the last component of a guest path names, if any.
fn volume_of(path: &str) -> Option<&str> {
    Path::new(path)
        .file_name()
        .and_then(|name| name.to_str())
        .and_then(volume_named)
}

fn special_kind(kind: DescriptorType) -> &'static str {
    match kind {
        DescriptorType::BlockDevice => "block device",
        DescriptorType::CharacterDevice => "character device",
        DescriptorType::Fifo => "FIFO",
        DescriptorType::Socket => "socket",
        DescriptorType::SymbolicLink => "symbolic link",
        DescriptorType::Directory => "directory",
        DescriptorType::RegularFile => "regular file",
        DescriptorType::Unknown => "file of unknown type",
    }
}

fn open_at(fs: &mut LinkerInstance<'_, CallState>) -> wasmtime::Result<()> {
    fs.func_wrap_async(
        OPEN_AT,
        |mut store: StoreContextMut<'_, CallState>,
         (fd, path_flags, path, oflags, flags): (
            Resource<Descriptor>,
            PathFlags,
            String,
            OpenFlags,
            DescriptorFlags,
        )| {
            Box::new(async move {
                let state = store.data_mut();
                let blocking_ok = state.blocking_filesystem_calls;
                let kind = {
                    let mut view = state.filesystem();
                    let opened =
                        open_regular(&mut view, fd, path_flags, &path, oflags, flags, blocking_ok)
                            .await;
                    match opened {
                        Ok(Opened::Descriptor(d)) => return Ok((Ok(view.table.push(d)?),)),
                        Ok(Opened::Special(kind)) => kind,
                        Err(e) => return answer(&mut view, Err(e)),
                    }
                };
                state.refused(
                    &format!("open a {}", special_kind(kind)),
                    &path,
                    "a plugin may open only directories and regular files: a FIFO could block a host thread and a device node reaches the node's disks (such files are made by pods in their volumes)",
                );
                Ok((Err(ErrorCode::NotPermitted),))
            })
        },
    )
}

enum Opened {
    Descriptor(Descriptor),
    /// Neither a directory nor a regular file: closed again.
    Special(DescriptorType),
}

/// wasmtime-wasi's `open-at` (same flags, same permission checks, the new
/// descriptor inherits the directory's permissions), opened without blocking
/// and kept only if it is a directory or a regular file.
async fn open_regular(
    view: &mut WasiFilesystemCtxView<'_>,
    fd: Resource<Descriptor>,
    path_flags: PathFlags,
    path: &str,
    oflags: OpenFlags,
    flags: DescriptorFlags,
    blocking_ok: bool,
) -> FsResult<Opened> {
    let dir = match view.table.get(&fd)? {
        wasi_fs::Descriptor::Dir(dir) => dir.clone(),
        wasi_fs::Descriptor::File(_) => return Err(ErrorCode::NotDirectory.into()),
    };
    let mut create = false;
    let mut mode = OpenMode::empty();
    let mut opts = OpenOptions::new();
    if oflags.contains(OpenFlags::CREATE) {
        if oflags.contains(OpenFlags::EXCLUSIVE) {
            opts.create_new(true);
        } else {
            opts.create(true);
        }
        create = true;
        opts.write(true);
        mode |= OpenMode::WRITE;
    }
    if oflags.contains(OpenFlags::TRUNCATE) {
        opts.truncate(true).write(true);
        mode |= OpenMode::WRITE;
    }
    if flags.contains(DescriptorFlags::READ) {
        opts.read(true);
        mode |= OpenMode::READ;
    }
    if flags.contains(DescriptorFlags::WRITE) {
        opts.write(true);
        mode |= OpenMode::WRITE;
    } else {
        // As wasmtime-wasi: opened for reading so the OS lets it be opened;
        // the permissions refuse what the mode does not allow later.
        opts.read(true);
        mode |= OpenMode::READ;
    }
    // cap-primitives keeps these setters for its cap-fs-ext crate (public,
    // underscored); wasmtime-wasi's copy of it calls the same options.
    opts._cap_fs_ext_follow(if path_flags.contains(PathFlags::SYMLINK_FOLLOW) {
        FollowSymlinks::Yes
    } else {
        FollowSymlinks::No
    });
    // Opening a FIFO (or a file under a lease) returns at once; regular
    // files and directories ignore it. O_NOCTTY: a terminal device never
    // becomes the host's controlling terminal.
    opts._cap_fs_ext_nonblock(true);
    opts.custom_flags(libc::O_NOCTTY);
    if flags.intersects(
        DescriptorFlags::FILE_INTEGRITY_SYNC
            | DescriptorFlags::DATA_INTEGRITY_SYNC
            | DescriptorFlags::REQUESTED_WRITE_SYNC,
    ) {
        return Err(ErrorCode::Unsupported.into());
    }
    if oflags.contains(OpenFlags::DIRECTORY)
        && oflags.intersects(OpenFlags::CREATE | OpenFlags::EXCLUSIVE | OpenFlags::TRUNCATE)
    {
        return Err(ErrorCode::Invalid.into());
    }
    if dir.perms.write_not_permitted() && (create || mode.contains(OpenMode::WRITE)) {
        return Err(ErrorCode::NotPermitted.into());
    }
    let path = path.to_owned();
    let open = move |start: &std::fs::File| -> std::io::Result<(std::fs::File, std::fs::FileType)> {
        let file = cap_primitives::fs::open(start, Path::new(&path), &opts)?;
        let kind = file.metadata()?.file_type();
        Ok((file, kind))
    };
    let (file, kind) = if blocking_ok {
        open(&dir.dir)?
    } else {
        let start = Arc::clone(&dir.dir);
        tokio::task::spawn_blocking(move || open(&start))
            .await
            .map_err(|e| FsError::trap(wasmtime::format_err!("open-at: {e}")))??
    };
    if kind.is_dir() {
        return Ok(Opened::Descriptor(wasi_fs::Descriptor::Dir(
            wasi_fs::Dir::new(file, dir.perms, mode, blocking_ok),
        )));
    }
    if oflags.contains(OpenFlags::DIRECTORY) {
        return Err(ErrorCode::NotDirectory.into());
    }
    if kind.is_file() {
        return Ok(Opened::Descriptor(wasi_fs::Descriptor::File(
            wasi_fs::File::new(file, dir.perms, mode, blocking_ok),
        )));
    }
    drop(file);
    Ok(Opened::Special(descriptor_type(kind)))
}

/// What a file is, for messages ("FIFO", "character device", …): also the
/// output check's word for a volume that is not a directory or file.
pub fn file_kind_name(kind: std::fs::FileType) -> &'static str {
    special_kind(descriptor_type(kind))
}

fn descriptor_type(kind: std::fs::FileType) -> DescriptorType {
    if kind.is_dir() {
        DescriptorType::Directory
    } else if kind.is_file() {
        DescriptorType::RegularFile
    } else if kind.is_block_device() {
        DescriptorType::BlockDevice
    } else if kind.is_char_device() {
        DescriptorType::CharacterDevice
    } else if kind.is_fifo() {
        DescriptorType::Fifo
    } else if kind.is_socket() {
        DescriptorType::Socket
    } else if kind.is_symlink() {
        DescriptorType::SymbolicLink
    } else {
        DescriptorType::Unknown
    }
}

/// wasmtime-wasi's result as the guest sees it: an error code, or a trap
/// for a host failure (e.g. a bad handle).
fn answer<T>(view: &mut WasiFilesystemCtxView<'_>, result: FsResult<T>) -> Answer<T> {
    Ok((match result {
        Ok(value) => Ok(value),
        Err(e) => Err(types::Host::convert_error_code(view, e)?),
    },))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{DirMode, Preopen, SandboxPolicy};
    use crate::runtime::{Runtime, RuntimeConfig};
    use wasmtime::component::Component;
    use wasmtime::Store;

    const ERROR_CODES: &str = "\"access\" \"would-block\" \"already\" \"bad-descriptor\" \"busy\" \
        \"deadlock\" \"quota\" \"exist\" \"file-too-large\" \"illegal-byte-sequence\" \
        \"in-progress\" \"interrupted\" \"invalid\" \"io\" \"is-directory\" \"loop\" \
        \"too-many-links\" \"message-size\" \"name-too-long\" \"no-device\" \"no-entry\" \
        \"no-lock\" \"insufficient-memory\" \"insufficient-space\" \"not-directory\" \
        \"not-empty\" \"not-recoverable\" \"unsupported\" \"no-tty\" \"no-such-device\" \
        \"overflow\" \"not-permitted\" \"pipe\" \"read-only\" \"invalid-seek\" \
        \"text-file-busy\" \"cross-device\"";
    const NOT_PERMITTED: u32 = 31;
    /// What `run` answers when the function succeeded.
    const OK: u32 = 1000;

    /// A component importing `wasi:filesystem` at `version` whose `run`
    /// calls `function` (`symlink-at` or `link-at`) in its first preopen to
    /// make `link` (→ `..`, or a hard link to the file `target`), and
    /// returns the error code, or [`OK`].
    fn guest(version: &str, hard: bool) -> Vec<u8> {
        let (function, params, call) = if hard {
            (
                "link-at",
                "(param \"self\" (borrow 0)) (param \"old-path-flags\" 4) (param \"old-path\" string) (param \"new-descriptor\" (borrow 0)) (param \"new-path\" string)",
                "(call $link (local.get $fd) (i32.const 0) (i32.const 16) (i32.const 6) (local.get $fd) (i32.const 32) (i32.const 4) (i32.const 64))",
            )
        } else {
            (
                "symlink-at",
                "(param \"self\" (borrow 0)) (param \"old-path\" string) (param \"new-path\" string)",
                "(call $link (local.get $fd) (i32.const 48) (i32.const 2) (i32.const 32) (i32.const 4) (i32.const 64))",
            )
        };
        let link_type = if hard {
            "(func $link (param i32 i32 i32 i32 i32 i32 i32 i32))"
        } else {
            "(func $link (param i32 i32 i32 i32 i32 i32))"
        };
        let text = format!(
            r#"(component
  (import "wasi:filesystem/types@{version}" (instance $types
    (export "descriptor" (type (sub resource)))
    (type $ec (enum {ERROR_CODES}))
    (export "error-code" (type (eq $ec)))
    (type $flags (flags "symlink-follow"))
    (export "path-flags" (type (eq $flags)))
    (export "[method]descriptor.{function}" (func {params} (result (result (error 2)))))
  ))
  (alias export $types "descriptor" (type $descriptor))
  (import "wasi:filesystem/preopens@{version}" (instance $preopens
    (alias outer 1 $descriptor (type $d))
    (export "descriptor" (type (eq $d)))
    (export "get-directories" (func (result (list (tuple (own 1) string)))))
  ))
  (core module $mem
    (memory (export "memory") 1)
    (global $next (mut i32) (i32.const 1024))
    (func (export "realloc") (param i32 i32 i32 i32) (result i32)
      (local $at i32)
      (local.set $at (i32.and (i32.add (global.get $next) (i32.const 7)) (i32.const -8)))
      (global.set $next (i32.add (local.get $at) (local.get 3)))
      (local.get $at))
    (data (i32.const 16) "target")
    (data (i32.const 32) "link")
    (data (i32.const 48) ".."))
  (core instance $m (instantiate $mem))
  (alias core export $m "memory" (core memory $memory))
  (alias core export $m "realloc" (core func $realloc))
  (core func $get (canon lower (func $preopens "get-directories") (memory $memory) (realloc $realloc)))
  (core func $link (canon lower (func $types "[method]descriptor.{function}") (memory $memory)))
  (core module $main
    (import "env" "memory" (memory 1))
    (import "env" "get" (func $get (param i32)))
    (import "env" "link" {link_type})
    (func (export "run") (result i32)
      (local $fd i32)
      (call $get (i32.const 128))
      ;; list at 128: (ptr, len); first element: (handle, string)
      (local.set $fd (i32.load (i32.load (i32.const 128))))
      {call}
      (if (result i32) (i32.eqz (i32.load8_u (i32.const 64)))
        (then (i32.const {OK}))
        (else (i32.load8_u (i32.const 65))))))
  (core instance $i (instantiate $main (with "env" (instance
    (export "memory" (memory $memory))
    (export "get" (func $get))
    (export "link" (func $link))))))
  (func (export "run") (result u32) (canon lift (core func $i "run")))
)"#
        );
        wat::parse_str(&text).unwrap_or_else(|e| panic!("{e}\n{text}"))
    }

    async fn run(
        runtime: &Runtime,
        wasm: &[u8],
        dir: &std::path::Path,
        guard_volumes: bool,
    ) -> u32 {
        let component = Component::new(&runtime.engine, wasm).unwrap();
        let policy = SandboxPolicy {
            preopens: vec![Preopen {
                host: dir.to_owned(),
                guest: "/data".into(),
                mode: DirMode::ReadWrite,
            }],
            guard_volumes,
            ..SandboxPolicy::default()
        };
        let state = CallState::new("links-test", "pv", &policy).unwrap();
        let mut store = Store::new(&runtime.engine, state);
        store.set_epoch_deadline(1_000);
        let instance = runtime
            .linker
            .instantiate_async(&mut store, &component)
            .await
            .unwrap();
        let run = instance
            .get_typed_func::<(), (u32,)>(&mut store, "run")
            .unwrap();
        run.call_async(&mut store, ()).await.unwrap().0
    }

    /// Whichever 0.2.x `wasi:filesystem` a guest imports, it gets the
    /// wrapped functions: refused when guarded, made when not.
    #[tokio::test]
    async fn every_0_2_version_of_the_import_gets_the_wrapped_functions() {
        let runtime = Runtime::new(RuntimeConfig {
            max_concurrent_calls: 2,
            ..RuntimeConfig::default()
        })
        .unwrap();
        let wasi_version = FILESYSTEM_TYPES.rsplit('@').next().unwrap();
        for version in ["0.2.0", "0.2.3", "0.2.6", wasi_version, "0.2.99"] {
            for hard in [false, true] {
                let dir = tempfile::tempdir().unwrap();
                std::fs::write(dir.path().join("target"), "t").unwrap();
                let link = dir.path().join("link");
                let wasm = guest(version, hard);
                let code = run(&runtime, &wasm, dir.path(), true).await;
                assert_eq!(code, NOT_PERMITTED, "{version}, hard link {hard}");
                assert!(std::fs::symlink_metadata(&link).is_err(), "{version}");
                let code = run(&runtime, &wasm, dir.path(), false).await;
                assert_eq!(code, OK, "{version}, hard link {hard}: links allowed");
                let made = std::fs::symlink_metadata(&link).unwrap();
                assert_eq!(made.file_type().is_symlink(), !hard, "{version}");
            }
        }
    }

    #[test]
    fn a_guarded_plugin_moves_files_and_archives_a_volume_only() {
        let a = "pvc-0000000a-0000-4000-8000-00000000000a";
        let b = "pvc-0000000b-0000-4000-8000-00000000000b";
        let dir = DescriptorType::Directory;
        let moved = |kind, from: &str, to: &str| may_move(kind, from, to).is_ok();
        assert!(moved(DescriptorType::RegularFile, "x/tmp", "x/quota"));
        assert!(moved(dir, a, &format!("archived-{a}")));
        assert!(moved(dir, &format!("/v/{a}"), &format!("/v/old/{a}.1")));
        for (from, to) in [
            (a.to_owned(), b.to_owned()),      // another claim's directory
            (a.to_owned(), "s".to_owned()),    // into the layout
            ("s".to_owned(), "t".to_owned()),  // the layout itself
            ("x".to_owned(), a.to_owned()),    // a pod's directory as a volume
            (format!("{a}/.."), a.to_owned()), // no last part to name it
        ] {
            assert!(!moved(dir, &from, &to), "{from} -> {to}");
        }
        for kind in [
            DescriptorType::SymbolicLink,
            DescriptorType::Fifo,
            DescriptorType::Socket,
            DescriptorType::BlockDevice,
            DescriptorType::CharacterDevice,
            DescriptorType::Unknown,
        ] {
            assert!(!moved(kind, a, &format!("archived-{a}")), "{kind:?}");
        }
    }

    /// Without wasmtime-wasi's functions in that instance (a wasmtime-wasi
    /// upgrade moved them to another version), the runtime does not start.
    #[test]
    fn a_linker_without_wasmtime_wasi_s_functions_is_refused() {
        let engine = wasmtime::Engine::default();
        let mut linker = Linker::<CallState>::new(&engine);
        let err = add_to_linker(&mut linker).unwrap_err().to_string();
        assert!(
            err.contains(&format!(
                "does not define `{SYMLINK_AT}` in {FILESYSTEM_TYPES}: the runtime cannot guard the filesystem"
            )),
            "{err}"
        );
    }
}

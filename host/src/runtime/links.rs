//! Refuses the filesystem calls that create links, for a call whose sandbox
//! says links are forbidden ([`SandboxPolicy::allow_links`]).
//!
//! Why: a plugin can make a real directory, have it accepted as a volume
//! path, and on a later call swap it for a relative symbolic link that
//! climbs out of its preopen (to `/`): the volume then mounts the node's
//! root. wasmtime-wasi has no permission bit for links (a read-write preopen
//! may create them), so the host wraps the functions that can create one.
//!
//! The complete list, for WASI preview 2 (`wasi:filesystem/types`, the only
//! filesystem interface the runtime links; preview 1 guests reach it through
//! their adapter):
//!
//! - `[method]descriptor.symlink-at` creates a symbolic link: refused.
//! - `[method]descriptor.link-at` creates a hard link: refused.
//! - `[method]descriptor.rename-at` can move an existing symbolic link (one
//!   the plugin did not make) into place: refused when its source is a
//!   symbolic link.
//!
//! What this does not cover: a directory moved by `rename-at` is not
//! searched for links inside it, and a symbolic link swapped in by another
//! process between the check and the rename is moved. Either needs a link
//! made by something outside this sandbox; the policy layer keeps every
//! plugin that shares a directory with a refused one refused as well
//! (`policy::links`), so that something is not another plugin.
//!
//! Every other function creates only directories and regular files
//! (`open-at` with `create`, `create-directory-at`), or removes, reads or
//! changes metadata. The guest gets `error-code::not-permitted` (`EPERM` in
//! libc), an ordinary I/O error, never a trap; when links are allowed, each
//! function is wasmtime-wasi's own.
//!
//! The functions are redefined in the linker instance wasmtime-wasi
//! registers ([`FILESYSTEM_TYPES`]); a guest importing any other `0.2.x`
//! version, older or newer, is linked to that same instance (the component
//! linker matches semver-compatible versions), so it gets the wrapped
//! functions too.
//!
//! [`SandboxPolicy::allow_links`]: crate::policy::SandboxPolicy::allow_links

use wasmtime::component::{Linker, LinkerInstance, Resource};
use wasmtime::StoreContextMut;
use wasmtime_wasi::filesystem::{WasiFilesystemCtxView, WasiFilesystemView};
use wasmtime_wasi::p2::bindings::filesystem::types::{
    self, Descriptor, DescriptorType, ErrorCode, HostDescriptor, PathFlags,
};
use wasmtime_wasi::p2::FsResult;

use super::sandbox::CallState;

/// The `wasi:filesystem/types` instance wasmtime-wasi 48 registers (its
/// `src/p2/wit/deps/filesystem.wit`). Checked by [`add_to_linker`]: if a
/// wasmtime-wasi upgrade changes it, the runtime refuses to start instead of
/// silently linking the unwrapped functions.
pub const FILESYSTEM_TYPES: &str = "wasi:filesystem/types@0.2.12";

type Answer<T> = wasmtime::Result<(Result<T, ErrorCode>,)>;
/// Redefines the link-creating functions in a linker that already holds
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
                "wasmtime-wasi does not define `{name}` in {FILESYSTEM_TYPES}: the runtime cannot refuse links; set FILESYSTEM_TYPES in host/src/runtime/links.rs to the version in wasmtime-wasi's src/p2/wit/deps/filesystem.wit"
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

const WRAPPERS: [(&str, Wrapper); 3] = [
    (SYMLINK_AT, symlink_at),
    (LINK_AT, link_at),
    (RENAME_AT, rename_at),
];

const SYMLINK_AT: &str = "[method]descriptor.symlink-at";
const LINK_AT: &str = "[method]descriptor.link-at";
const RENAME_AT: &str = "[method]descriptor.rename-at";

fn symlink_at(fs: &mut LinkerInstance<'_, CallState>) -> wasmtime::Result<()> {
    fs.func_wrap_async(
        SYMLINK_AT,
        |mut store: StoreContextMut<'_, CallState>,
         (fd, old_path, new_path): (Resource<Descriptor>, String, String)| {
            Box::new(async move {
                let state = store.data_mut();
                if !state.allow_links {
                    state.refused_link("a symbolic link", &new_path);
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
                if !state.allow_links {
                    state.refused_link("a hard link", &new_path);
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
                let allow_links = state.allow_links;
                if !allow_links {
                    // The source itself, not what a link there points to.
                    let source = Resource::new_borrow(fd.rep());
                    let stat = state
                        .filesystem()
                        .stat_at(source, PathFlags::empty(), old_path.clone())
                        .await;
                    match stat {
                        Ok(stat) if stat.type_ == DescriptorType::SymbolicLink => {
                            state.refused_link("a moved symbolic link", &new_path);
                            return Ok((Err(ErrorCode::NotPermitted),));
                        }
                        Ok(_) => {}
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

    async fn run(runtime: &Runtime, wasm: &[u8], dir: &std::path::Path, allow_links: bool) -> u32 {
        let component = Component::new(&runtime.engine, wasm).unwrap();
        let policy = SandboxPolicy {
            preopens: vec![Preopen {
                host: dir.to_owned(),
                guest: "/data".into(),
                mode: DirMode::ReadWrite,
            }],
            allow_links,
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
    /// wrapped functions: refused without `allow_links`, made with it.
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
                let code = run(&runtime, &wasm, dir.path(), false).await;
                assert_eq!(code, NOT_PERMITTED, "{version}, hard link {hard}");
                assert!(std::fs::symlink_metadata(&link).is_err(), "{version}");
                let code = run(&runtime, &wasm, dir.path(), true).await;
                assert_eq!(code, OK, "{version}, hard link {hard}: links allowed");
                let made = std::fs::symlink_metadata(&link).unwrap();
                assert_eq!(made.file_type().is_symlink(), !hard, "{version}");
            }
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
                "does not define `{SYMLINK_AT}` in {FILESYSTEM_TYPES}: the runtime cannot refuse links"
            )),
            "{err}"
        );
    }
}

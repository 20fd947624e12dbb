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
//! Every other function creates only directories and regular files
//! (`open-at` with `create`, `create-directory-at`), or removes, reads or
//! changes metadata. The guest gets `error-code::not-permitted` (`EPERM` in
//! libc), an ordinary I/O error, never a trap; when links are allowed, each
//! function is wasmtime-wasi's own.
//!
//! The functions are redefined in the linker instance wasmtime-wasi
//! registers ([`FILESYSTEM_TYPES`]); a guest importing any older `0.2.x`
//! version is linked to that same instance (the component linker matches
//! semver-compatible versions), so it gets the wrapped functions too.
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

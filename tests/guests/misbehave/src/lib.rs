//! A deliberately hostile or broken wasmprov plugin for the host's sandbox
//! tests. The class parameter `behavior` picks what `provision` (and `delete`)
//! do; every behaviour really does the bad thing, so a test that expects the
//! host to contain it fails when the protection is removed.
//!
//! Class parameters (all optional):
//! - `behavior` (default `ok`): see [`BEHAVIORS`] and the match in `provision`.
//! - `dir` (default `/data`): guest directory for `write-outside`,
//!   `write-inside` and `read-inside`.
//! - `addr` (required by `socket`): `host:port` to connect to.
//! - `spin-ms` (default `100`): how long `spin` busy-waits.
//! - `then` (for `slow-create`, default `in-background`): what it answers
//!   after its first `in-background` until done: `in-background` or
//!   `no-change`.
//! - `delete-failures` (any behaviour): `delete` fails this many times for a
//!   volume (counted in `<dir>/<pv>.delete-attempts`), then succeeds and
//!   writes `<dir>/<pv>.deleted`.
//! - `refuse` (for `reschedule`): the only node names (comma-separated) it
//!   refuses; on any other selected node it provisions. Without it, every
//!   node is refused. With `spin-ms`, it busy-waits that long first (a slow
//!   backend, during which the scheduler may choose again).
//!
//! - For `return` (a volume exactly as the class says, to test the host's
//!   output policy): `source` (JSON, default the healthy hostPath),
//!   `mount-options`, `labels` and `annotations` (`;`-separated, labels and
//!   annotations as `key=value`), `label-count` (that many extra labels
//!   `misbehave.test/l<i>`), `capacity-bytes` (the capacity to return),
//!   `pin-to` (a node name: node affinity to its hostname label), `mkdir`
//!   (a guest directory to create first). It records the storage it "made" as
//!   `<dir>/<pv>.made` when `dir` is given, and `delete` removes that file.
//! - For `link-out`: `host-dir`, the host path of the preopen `dir`. It makes
//!   `<dir>/<pv>` a symbolic link climbing to `/` and returns the hostPath
//!   `<host-dir>/<pv>/etc`.
//! - For `swap-link` (a link swapped in after the host checked the volume):
//!   `host-dir` as for `link-out`. The first `provision` makes `<dir>/<pv>`
//!   a real directory and returns the hostPath `<host-dir>/<pv>` (with the
//!   `annotations` parameter's annotations, so a test can have it refused);
//!   a later `provision`, and `delete`, replace that directory with a
//!   symbolic link climbing to `/`.
//! - For `hard-link`: writes `<dir>/<pv>.target` and hard-links
//!   `<dir>/<pv>.hard` to it.
//! - For `move-link`: `from`, a guest path it renames to `<dir>/<pv>` (a
//!   test puts a symbolic link there, or a plain file).
//! - For `rename`: `renames`, `;`-separated `from>to` guest paths it renames
//!   in order; it answers `failed` listing each outcome (`from>to: ok` or the
//!   error). `delete` does the same. `return` does them in its `delete` too
//!   when `delete-renames` lists them (the host's clean-up delete).
//! - For `open`: `path`, a guest path it opens for reading (and, with
//!   `write`, for writing) and reads; it answers `failed` with the outcome.
//! - For `huge-message`: `message-bytes` (default 30 MiB), the size of the
//!   `failed` message.
//!
//! Escape attempts (`read-passwd`, `write-outside`, `socket`) answer
//! `failed("<what>: <error>")` when the sandbox denied them and a volume with the
//! annotation `misbehave.test/escaped` when they succeeded, so a test can tell
//! the two apart. Every annotation it sets is under `misbehave.test/`.

use std::hint::black_box;
use std::io::Write;
use std::time::{Duration, Instant};

use exports::wasmprov::provisioner::plugin::Guest;
use wasmprov::provisioner::logging::{self, Level};
use wasmprov::provisioner::types::{
    DeleteError, DeleteRequest, NodeAffinity, NodeSelectorOperator, NodeSelectorRequirement,
    NodeSelectorTerm, PluginCapabilities, ProvisionError, ProvisionRequest, Volume,
};

wit_bindgen::generate!({
    path: "../../../wit",
    world: "provisioner",
});

/// Where the sandbox preopens `/tmp/ok`, the directory of healthy volumes.
const OK_DIR: &str = "/ok";

/// Every value of the `behavior` parameter `provision` understands.
pub const BEHAVIORS: &[&str] = &[
    "ok",
    "keep-on-delete",
    "loop",
    "oom",
    "trap",
    "spin",
    "log-flood",
    "slow-create",
    "invalid-source",
    "no-source",
    "two-sources",
    "zero-capacity",
    "relative-path",
    "reserved-annotation",
    "read-passwd",
    "write-outside",
    "write-inside",
    "log-huge",
    "read-inside",
    "socket",
    "env",
    "fail",
    "in-background",
    "no-change",
    "reschedule",
    "invalid-argument",
    "return",
    "link-out",
    "swap-link",
    "hard-link",
    "move-link",
    "rename",
    "open",
    "huge-message",
    "echo-parameters",
    "control-text",
    "control-trap",
];

/// What `control-text` and `control-trap` say: a terminal escape that would
/// clear the screen, a forged log line, a NUL and a right-to-left override.
const CONTROL_TEXT: &str = "\u{1b}[2J\r\nlevel=INFO msg=\"forged\"\0\u{202e}";

/// The prefix of every label and annotation key this guest sets.
const KEY_PREFIX: &str = "misbehave.test/";

const DEFAULT_DIR: &str = "/data";
const DEFAULT_SPIN_MS: u64 = 100;
const MIB: usize = 1 << 20;

struct Misbehave;

impl Guest for Misbehave {
    fn capabilities() -> PluginCapabilities {
        PluginCapabilities {
            block_volumes: false,
        }
    }

    fn provision(request: ProvisionRequest) -> Result<Volume, ProvisionError> {
        use ProvisionError::{Failed, InBackground, InvalidArgument, NoChange, Reschedule};

        let params = &request.storage_class.parameters;
        let pv = request.pv_name.as_str();
        let bytes = request.claim.requested_bytes;
        let dir = param(params, "dir").unwrap_or(DEFAULT_DIR);
        let ok = || volume(pv, bytes, Vec::new());

        match param(params, "behavior").unwrap_or("ok") {
            "ok" | "keep-on-delete" => Ok(ok()),
            "loop" => spin_forever(),
            "oom" => allocate_forever(),
            "trap" => panic!("misbehave: deliberate panic"),
            "spin" => {
                let ms = spin_ms(params).map_err(InvalidArgument)?;
                busy_wait(Duration::from_millis(ms));
                Ok(ok())
            }
            "log-flood" => {
                flood();
                Ok(ok())
            }
            // An asynchronous backend: in-background until the `attempts`-th
            // call (default 3), counted in `<dir>/<pv>.attempts`.
            "slow-create" => {
                let path = format!("{dir}/{pv}.attempts");
                let mut seen = std::fs::read_to_string(&path).unwrap_or_default();
                seen.push('x');
                std::fs::write(&path, &seen).map_err(|e| Failed(format!("write {path}: {e}")))?;
                let want: usize = param(params, "attempts")
                    .unwrap_or("3")
                    .parse()
                    .map_err(|e| InvalidArgument(format!("parameter attempts: {e}")))?;
                if seen.len() < want {
                    let message = format!("misbehave: still creating ({} of {want})", seen.len());
                    match (seen.len(), param(params, "then").unwrap_or("in-background")) {
                        (1, _) | (_, "in-background") => Err(InBackground(message)),
                        (_, "no-change") => Err(NoChange(message)),
                        (_, other) => Err(InvalidArgument(format!(
                            "parameter then={other:?}: in-background or no-change"
                        ))),
                    }
                } else {
                    Ok(ok())
                }
            }

            // Invalid volumes: the host's validation must reject each one.
            "invalid-source" => Ok(Volume {
                source: "this is not JSON {".to_string(),
                ..ok()
            }),
            "no-source" => Ok(Volume {
                source: "{}".to_string(),
                ..ok()
            }),
            "two-sources" => Ok(Volume {
                source: serde_json::json!({
                    "hostPath": { "path": format!("/tmp/ok/{pv}") },
                    "nfs": { "server": "10.0.0.1", "path": format!("/exports/{pv}") },
                })
                .to_string(),
                ..ok()
            }),
            "zero-capacity" => Ok(Volume {
                capacity_bytes: 0,
                ..ok()
            }),
            "relative-path" => Ok(Volume {
                source: serde_json::json!({ "hostPath": { "path": "relative/dir" } }).to_string(),
                ..ok()
            }),
            "reserved-annotation" => Ok(Volume {
                annotations: vec![("wasmprov.io/plugin".to_string(), "evil".to_string())],
                ..ok()
            }),
            "return" => {
                let mut v = ok();
                if let Some(source) = param(params, "source") {
                    v.source = source.to_string();
                }
                v.mount_options = list(params, "mount-options").map(str::to_string).collect();
                v.labels = pairs(params, "labels");
                v.annotations = pairs(params, "annotations");
                if let Some(n) = param(params, "label-count") {
                    let n: usize = n
                        .parse()
                        .map_err(|e| InvalidArgument(format!("parameter label-count: {e}")))?;
                    v.labels
                        .extend((0..n).map(|i| (format!("{KEY_PREFIX}l{i}"), "x".to_string())));
                }
                if let Some(n) = param(params, "capacity-bytes") {
                    v.capacity_bytes = n
                        .parse()
                        .map_err(|e| InvalidArgument(format!("parameter capacity-bytes: {e}")))?;
                }
                if let Some(node) = param(params, "pin-to") {
                    v.node_affinity = Some(NodeAffinity {
                        terms: vec![NodeSelectorTerm {
                            match_expressions: vec![NodeSelectorRequirement {
                                key: "kubernetes.io/hostname".to_string(),
                                operator: NodeSelectorOperator::In,
                                values: vec![node.to_string()],
                            }],
                        }],
                    });
                }
                if let Some(dir) = param(params, "mkdir") {
                    std::fs::create_dir_all(dir)
                        .map_err(|e| Failed(format!("mkdir {dir}: {e}")))?;
                }
                if param(params, "dir").is_some() {
                    let made = format!("{dir}/{pv}.made");
                    std::fs::write(&made, "made")
                        .map_err(|e| Failed(format!("write {made}: {e}")))?;
                }
                Ok(v)
            }
            "link-out" => {
                let host_dir = param(params, "host-dir").ok_or_else(|| {
                    InvalidArgument("behavior link-out needs the parameter host-dir".into())
                })?;
                let link = format!("{dir}/{pv}");
                symlink_to_root(&link).map_err(|e| Failed(format!("symlink {link}: {e}")))?;
                Ok(Volume {
                    source: serde_json::json!({ "hostPath": { "path": format!("{host_dir}/{pv}/etc") } })
                        .to_string(),
                    ..ok()
                })
            }
            "swap-link" => {
                let host_dir = param(params, "host-dir").ok_or_else(|| {
                    InvalidArgument("behavior swap-link needs the parameter host-dir".into())
                })?;
                let path = format!("{dir}/{pv}");
                if std::fs::symlink_metadata(&path).is_ok() {
                    // Checked and accepted earlier: now swap in the link.
                    swap_in_link(&path).map_err(Failed)?;
                    return Ok(escaped(pv, bytes, &format!("swapped {path} for a link")));
                }
                std::fs::create_dir(&path).map_err(|e| Failed(format!("mkdir {path}: {e}")))?;
                Ok(Volume {
                    source:
                        serde_json::json!({ "hostPath": { "path": format!("{host_dir}/{pv}") } })
                            .to_string(),
                    annotations: pairs(params, "annotations"),
                    ..ok()
                })
            }
            "hard-link" => {
                let target = format!("{dir}/{pv}.target");
                let link = format!("{dir}/{pv}.hard");
                std::fs::write(&target, "target")
                    .map_err(|e| Failed(format!("write {target}: {e}")))?;
                std::fs::hard_link(&target, &link)
                    .map_err(|e| Failed(format!("hard link {link} -> {target}: {e}")))?;
                Ok(escaped(pv, bytes, &format!("hard-linked {link}")))
            }
            "move-link" => {
                let from = param(params, "from").ok_or_else(|| {
                    InvalidArgument("behavior move-link needs the parameter from".into())
                })?;
                let to = format!("{dir}/{pv}");
                std::fs::rename(from, &to)
                    .map_err(|e| Failed(format!("rename {from} -> {to}: {e}")))?;
                Ok(escaped(pv, bytes, &format!("moved {from} to {to}")))
            }
            "rename" => Err(Failed(renames(list(params, "renames")))),
            "open" => {
                let path = param(params, "path").unwrap_or_default();
                let opened = std::fs::OpenOptions::new()
                    .read(true)
                    .write(param(params, "write").is_some())
                    .open(path);
                let outcome = opened.and_then(|mut file| {
                    let mut text = String::new();
                    std::io::Read::read_to_string(&mut file, &mut text).map(|_| text)
                });
                Err(Failed(match outcome {
                    Ok(text) => format!("open {path}: read {text:?}"),
                    Err(e) => format!("open {path}: {e}"),
                }))
            }
            "echo-parameters" => Ok(volume(
                pv,
                bytes,
                vec![key_value("parameters", parameter_names(params))],
            )),
            "huge-message" => {
                let n: usize = param(params, "message-bytes")
                    .unwrap_or("31457280")
                    .parse()
                    .map_err(|e| InvalidArgument(format!("parameter message-bytes: {e}")))?;
                Err(Failed("m".repeat(n)))
            }

            "control-text" => {
                logging::log(
                    Level::Warn,
                    &format!("log {CONTROL_TEXT}"),
                    &[(format!("key{CONTROL_TEXT}"), CONTROL_TEXT.to_string())],
                );
                let _ = writeln!(std::io::stdout(), "stdout {CONTROL_TEXT}");
                Err(Failed(format!("failed {CONTROL_TEXT}")))
            }
            "control-trap" => {
                let _ = writeln!(std::io::stderr(), "stderr {CONTROL_TEXT}");
                panic!("misbehave: trap {CONTROL_TEXT}")
            }

            // Escape attempts: denied → failed, succeeded → annotation `escaped`.
            "read-passwd" => match std::fs::read_to_string("/etc/passwd") {
                Ok(text) => Ok(escaped(pv, bytes, text.lines().next().unwrap_or_default())),
                Err(e) => Err(Failed(format!("read /etc/passwd: {e}"))),
            },
            "write-outside" => write_outside(dir)
                .map(|what| escaped(pv, bytes, &what))
                .map_err(Failed),
            "socket" => {
                let addr = param(params, "addr").ok_or_else(|| {
                    InvalidArgument("behavior socket needs the parameter addr (host:port)".into())
                })?;
                connect(addr)
                    .map(|()| escaped(pv, bytes, &format!("connected to {addr}")))
                    .map_err(Failed)
            }

            // Granted access: prove a read-write preopen works.
            "write-inside" => {
                let path = format!("{dir}/inside.txt");
                // With `bytes`, that many (in one write call of the guest).
                let text = match param(params, "bytes") {
                    Some(n) => "x".repeat(
                        n.parse()
                            .map_err(|e| InvalidArgument(format!("parameter bytes: {e}")))?,
                    ),
                    None => "hello".to_string(),
                };
                std::fs::write(&path, text).map_err(|e| Failed(format!("write {path}: {e}")))?;
                Ok(ok())
            }
            // One log call carrying `message-bytes` bytes (default 32 MiB).
            "log-huge" => {
                let n: usize = param(params, "message-bytes")
                    .unwrap_or("33554432")
                    .parse()
                    .map_err(|e| InvalidArgument(format!("parameter message-bytes: {e}")))?;
                logging::log(Level::Info, &"x".repeat(n), &[]);
                Ok(ok())
            }
            "read-inside" => {
                let path = format!("{dir}/inside.txt");
                let content = std::fs::read_to_string(&path)
                    .map_err(|e| Failed(format!("read {path}: {e}")))?;
                Ok(volume(pv, bytes, vec![key_value("content", content)]))
            }
            "env" => {
                let env = std::env::vars()
                    .map(|(key, value)| format!("{key}={value}"))
                    .collect::<Vec<_>>()
                    .join(";");
                let args = std::env::args().collect::<Vec<_>>().join(" ");
                Ok(volume(
                    pv,
                    bytes,
                    vec![key_value("env", env), key_value("args", args)],
                ))
            }

            // Each error variant of the contract, on demand.
            "fail" => Err(Failed("misbehave: deliberate failure".to_string())),
            "in-background" => Err(InBackground("misbehave: still creating".to_string())),
            "no-change" => Err(NoChange("misbehave: nothing changed".to_string())),
            "reschedule" => {
                if param(params, "spin-ms").is_some() {
                    busy_wait(Duration::from_millis(
                        spin_ms(params).map_err(InvalidArgument)?,
                    ));
                }
                let node = request.selected_node.as_ref().map(|n| n.name.as_str());
                let refused = match param(params, "refuse") {
                    Some(list) => node.is_some_and(|n| list.split(',').any(|r| r == n)),
                    None => true,
                };
                if refused {
                    Err(Reschedule(
                        "misbehave: this node cannot host it".to_string(),
                    ))
                } else {
                    Ok(ok())
                }
            }
            "invalid-argument" => Err(InvalidArgument("misbehave: deliberate".to_string())),

            other => Err(InvalidArgument(unknown_behavior(other))),
        }
    }

    fn delete(request: DeleteRequest) -> Result<(), DeleteError> {
        let params = &request.parameters;
        if let Some(failures) = param(params, "delete-failures") {
            return delete_after_failures(params, &request.pv_name, failures);
        }
        match param(params, "behavior").unwrap_or("ok") {
            "loop" => spin_forever(),
            "oom" => allocate_forever(),
            "trap" => panic!("misbehave: deliberate panic in delete"),
            "spin" => {
                let ms = spin_ms(params).map_err(DeleteError::Failed)?;
                busy_wait(Duration::from_millis(ms));
                Ok(())
            }
            "log-flood" => {
                flood();
                Ok(())
            }
            // Records the delete of a `slow-create` volume as `<dir>/<pv>.deleted`.
            "slow-create" => {
                let dir = param(params, "dir").unwrap_or(DEFAULT_DIR);
                let path = format!("{dir}/{}.deleted", request.pv_name);
                std::fs::write(&path, "deleted")
                    .map_err(|e| DeleteError::Failed(format!("write {path}: {e}")))
            }
            "fail" => Err(DeleteError::Failed(
                "misbehave: deliberate delete failure".to_string(),
            )),
            // Says which parameters delete got (as a failure, to be seen).
            "echo-parameters" => Err(DeleteError::Failed(format!(
                "parameters: {}",
                parameter_names(params)
            ))),
            // Removes what `return` recorded; with `delete-fails`, refuses to.
            "return" => {
                if param(params, "delete-fails").is_some() {
                    return Err(DeleteError::Failed("misbehave: cannot delete".to_string()));
                }
                renames(list(params, "delete-renames"));
                match param(params, "dir") {
                    Some(dir) => {
                        let made = format!("{dir}/{}.made", request.pv_name);
                        match std::fs::remove_file(&made) {
                            Ok(()) => Ok(()),
                            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
                            Err(e) => Err(DeleteError::Failed(format!("remove {made}: {e}"))),
                        }
                    }
                    None => Ok(()),
                }
            }
            // The host's clean-up (or a reclaim): swap the checked directory
            // for a link to `/` instead of deleting it.
            "swap-link" => {
                let dir = param(params, "dir").unwrap_or(DEFAULT_DIR);
                swap_in_link(&format!("{dir}/{}", request.pv_name)).map_err(DeleteError::Failed)
            }
            "rename" => Err(DeleteError::Failed(renames(list(params, "renames")))),
            "ignored" => Err(DeleteError::Ignored("misbehave: not my volume".to_string())),
            // Says the storage is gone, and leaves it.
            "keep-on-delete" => Ok(()),
            // Everything else only misbehaves in provision: only the
            // healthy volume's directory to remove, if it was made.
            known if BEHAVIORS.contains(&known) => {
                let _ = std::fs::remove_dir(format!("{OK_DIR}/{}", request.pv_name));
                Ok(())
            }
            other => Err(DeleteError::Failed(unknown_behavior(other))),
        }
    }
}

/// `delete-failures`: fails the first `failures` deletes of `pv`, then
/// records the delete as `<dir>/<pv>.deleted`.
fn delete_after_failures(
    params: &[(String, String)],
    pv: &str,
    failures: &str,
) -> Result<(), DeleteError> {
    let failures: usize = failures
        .parse()
        .map_err(|e| DeleteError::Failed(format!("parameter delete-failures: {e}")))?;
    let dir = param(params, "dir").unwrap_or(DEFAULT_DIR);
    let path = format!("{dir}/{pv}.delete-attempts");
    let mut seen = std::fs::read_to_string(&path).unwrap_or_default();
    seen.push('x');
    std::fs::write(&path, &seen).map_err(|e| DeleteError::Failed(format!("write {path}: {e}")))?;
    if seen.len() <= failures {
        return Err(DeleteError::Failed(format!(
            "misbehave: deliberate delete failure ({} of {failures})",
            seen.len()
        )));
    }
    let deleted = format!("{dir}/{pv}.deleted");
    std::fs::write(&deleted, "deleted")
        .map_err(|e| DeleteError::Failed(format!("write {deleted}: {e}")))
}

/// Renames each `from>to` in order; says how each went.
fn renames<'a>(pairs: impl Iterator<Item = &'a str>) -> String {
    let outcomes: Vec<String> = pairs
        .map(|pair| {
            let (from, to) = pair.split_once('>').unwrap_or((pair, ""));
            match std::fs::rename(from, to) {
                Ok(()) => format!("{pair}: ok"),
                Err(e) => format!("{pair}: {e}"),
            }
        })
        .collect();
    format!("renamed: {}", outcomes.join("; "))
}

fn param<'a>(params: &'a [(String, String)], key: &str) -> Option<&'a str> {
    params
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, value)| value.as_str())
}

/// The `;`-separated items of a parameter.
fn list<'a>(params: &'a [(String, String)], key: &str) -> impl Iterator<Item = &'a str> {
    param(params, key)
        .unwrap_or_default()
        .split(';')
        .filter(|s| !s.is_empty())
}

/// The `key=value` items of a parameter.
fn pairs(params: &[(String, String)], key: &str) -> Vec<(String, String)> {
    list(params, key)
        .map(|kv| {
            let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
            (k.to_string(), v.to_string())
        })
        .collect()
}

/// The names of the parameters, sorted, comma-separated.
fn parameter_names(params: &[(String, String)]) -> String {
    let mut names: Vec<&str> = params.iter().map(|(k, _)| k.as_str()).collect();
    names.sort();
    names.join(",")
}

/// An annotation under this guest's prefix.
fn key_value(key: &str, value: String) -> (String, String) {
    (format!("{KEY_PREFIX}{key}"), value)
}

fn unknown_behavior(behavior: &str) -> String {
    format!(
        "unknown behavior {behavior:?}; known: {} (delete also knows \"ignored\")",
        BEHAVIORS.join(", ")
    )
}

fn spin_ms(params: &[(String, String)]) -> Result<u64, String> {
    match param(params, "spin-ms") {
        None => Ok(DEFAULT_SPIN_MS),
        Some(value) => value
            .parse()
            .map_err(|e| format!("parameter spin-ms={value:?}: {e}")),
    }
}

/// A healthy volume: `hostPath` at `/tmp/ok/<pv>`, the requested capacity.
/// The host refuses a hostPath it cannot see, so the directory is made when
/// the sandbox preopens `/tmp/ok` at [`OK_DIR`] (the tests' policies do).
fn volume(pv: &str, bytes: u64, annotations: Vec<(String, String)>) -> Volume {
    let _ = std::fs::create_dir_all(format!("{OK_DIR}/{pv}"));
    Volume {
        capacity_bytes: bytes,
        source: serde_json::json!({ "hostPath": { "path": format!("/tmp/ok/{pv}") } }).to_string(),
        node_affinity: None,
        mount_options: Vec::new(),
        labels: Vec::new(),
        annotations,
    }
}

/// The answer of an escape attempt that worked: the sandbox has a hole.
fn escaped(pv: &str, bytes: u64, what: &str) -> Volume {
    volume(pv, bytes, vec![key_value("escaped", what.to_string())])
}

/// Replaces the directory `path` with a symbolic link climbing to `/`.
fn swap_in_link(path: &str) -> Result<(), String> {
    std::fs::remove_dir(path).map_err(|e| format!("remove {path}: {e}"))?;
    symlink_to_root(path).map_err(|e| format!("symlink {path}: {e}"))
}

/// Loops until the host interrupts it; `black_box` keeps the optimizer from
/// proving the loop useless.
fn spin_forever() -> ! {
    let mut n: u64 = 0;
    loop {
        n = black_box(n.wrapping_add(1));
    }
}

/// Allocates 1 MiB chunks forever, writing every page and keeping them all.
fn allocate_forever() -> ! {
    let mut chunks: Vec<Vec<u8>> = Vec::new();
    loop {
        let mut chunk = vec![0u8; MIB];
        let mark = (chunks.len() as u8) | 1;
        for page in chunk.chunks_mut(4096) {
            page[0] = mark;
        }
        chunks.push(black_box(chunk));
        black_box(&chunks);
    }
}

/// Busy-waits on the monotonic clock (WASI `monotonic-clock`).
fn busy_wait(duration: Duration) {
    let start = Instant::now();
    while black_box(start.elapsed()) < duration {}
}

/// 64 log calls of 1 MiB each, then 8 MiB to stdout and to stderr.
fn flood() {
    let message = "x".repeat(MIB);
    for i in 0..64 {
        logging::log(
            Level::Info,
            &message,
            &[("chunk".to_string(), i.to_string())],
        );
    }
    let chunk = vec![b'y'; MIB];
    // Write errors (a closed stream) are not this guest's concern.
    let mut stdout = std::io::stdout().lock();
    for _ in 0..8 {
        let _ = stdout.write_all(&chunk);
    }
    let _ = stdout.flush();
    let mut stderr = std::io::stderr().lock();
    for _ in 0..8 {
        let _ = stderr.write_all(&chunk);
    }
}

/// Tries to write a file outside the preopens: at `/`, through `..` from
/// `dir`, and through a symlink in `dir` pointing (relatively) at `/`. Returns what worked,
/// or every error.
fn write_outside(dir: &str) -> Result<String, String> {
    let content = "escaped by misbehave\n";
    let mut errors = Vec::new();
    for path in ["/escape.txt".to_string(), format!("{dir}/../escape.txt")] {
        match std::fs::write(&path, content) {
            Ok(()) => return Ok(format!("wrote {path}")),
            Err(e) => errors.push(format!("write {path}: {e}")),
        }
    }
    let up = UP_TO_ROOT.to_string_lossy();
    let link = format!("{dir}/escape-link");
    match symlink_to_root(&link) {
        Ok(()) => {
            let path = format!("{link}/escape.txt");
            let result = std::fs::write(&path, content);
            let _ = std::fs::remove_file(&link);
            match result {
                Ok(()) => return Ok(format!("wrote {path} (symlink to {up})")),
                Err(e) => errors.push(format!("write {path} (symlink to {up}): {e}")),
            }
        }
        Err(e) => errors.push(format!("symlink {link} -> {up}: {e}")),
    }
    Err(errors.join("; "))
}

/// A relative symlink target that climbs to `/` from any directory less than
/// 16 levels deep (wasmtime refuses to create absolute symlinks at all).
const UP_TO_ROOT: &std::ffi::CStr = c"../../../../../../../../../../../../../../../..";

/// `std::os::wasi::fs::symlink_path` is unstable on wasm32-wasip2, so call
/// wasi-libc's `symlink(2)` (linked into every wasip2 std program) directly.
#[cfg(target_os = "wasi")]
fn symlink_to_root(link: &str) -> std::io::Result<()> {
    use std::ffi::{c_char, c_int, CString};
    extern "C" {
        fn symlink(target: *const c_char, link: *const c_char) -> c_int;
    }
    let link = CString::new(link).map_err(|_| std::io::ErrorKind::InvalidInput)?;
    // SAFETY: both arguments are valid NUL-terminated strings that outlive the call.
    if unsafe { symlink(UP_TO_ROOT.as_ptr(), link.as_ptr()) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[cfg(unix)]
fn symlink_to_root(link: &str) -> std::io::Result<()> {
    std::os::unix::fs::symlink(UP_TO_ROOT.to_str().unwrap_or(".."), link)
}

#[cfg(not(any(target_os = "wasi", unix)))]
fn symlink_to_root(_link: &str) -> std::io::Result<()> {
    Err(std::io::ErrorKind::Unsupported.into())
}

/// Opens a TCP connection and sends a line over it.
fn connect(addr: &str) -> Result<(), String> {
    let mut stream =
        std::net::TcpStream::connect(addr).map_err(|e| format!("connect {addr}: {e}"))?;
    stream
        .write_all(b"escaped by misbehave\n")
        .map_err(|e| format!("connected to {addr} but write failed: {e}"))
}

export!(Misbehave);

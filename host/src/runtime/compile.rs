//! Compiling a component within a budget.
//!
//! A valid component of a few kilobytes can cost gigabytes to compile: 5 KB
//! of nested blocks, each passing 600 values and all reached from one
//! `br_table`, take 1.3 GB (`host/tests/compile_budget.rs`). Decompression
//! is bounded before this point; compilation is bounded here, twice:
//!
//! - **Shape** ([`check_shape`]), before anything is compiled, in every
//!   mode: limits on locals per function and in all, and on a function's
//!   body size, far above what compilers emit (the shipped JavaScript and
//!   Python components, whole language runtimes, stay well below them).
//!   They cost microseconds and refuse what no compiler makes; they do not
//!   catch every costly shape (the one above passes them).
//! - **Memory and time** ([`CompileBudget`]): where the runtime is given a
//!   compiler program (the `wasmprov` binary, run as
//!   `wasmprov __compile-component`), each compilation runs in that child
//!   process under `RLIMIT_DATA` and a deadline, and the host loads what it
//!   wrote. A component over budget kills only the child: the host stays
//!   up and the previous version keeps serving. Without a compiler program
//!   (tests, benchmarks, embedding the library), compilation runs in
//!   process, bounded by the shape check alone.

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use wasmtime::wasmparser::{Parser, Payload};

/// Locals one function may declare; compilers emit at most a few thousand.
pub const MAX_LOCALS_PER_FUNCTION: u64 = 10_000;
/// Locals all functions of a component may declare together.
pub const MAX_LOCALS_TOTAL: u64 = 4_000_000;
/// Bytes of one function body (the WebAssembly limit is 7,654,321).
pub const MAX_FUNCTION_BYTES: usize = 4 << 20;

/// The child's memory and time, and the program that compiles.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompileBudget {
    /// The program run as `PROGRAM __compile-component`: the `wasmprov` binary.
    pub compiler: PathBuf,
    /// `RLIMIT_DATA` of the child: heap and private writable mappings.
    pub memory_limit: u64,
    /// The child is killed past this.
    pub timeout: Duration,
}

/// The subcommand the child runs (hidden from `--help`).
pub const SUBCOMMAND: &str = "__compile-component";

/// Refuses a component whose shape makes compiling it dangerous, with what
/// was found; `Ok` also for bytes that do not parse (compiling reports
/// those properly).
pub fn check_shape(bytes: &[u8]) -> Result<(), String> {
    let mut total: u64 = 0;
    for payload in Parser::new(0).parse_all(bytes) {
        let Ok(Payload::CodeSectionEntry(body)) = payload else {
            continue;
        };
        let size = body.range().len();
        if size > MAX_FUNCTION_BYTES {
            return Err(format!(
                "a function body is {size} bytes, above the {MAX_FUNCTION_BYTES} a plugin may have"
            ));
        }
        let Ok(locals) = body.get_locals_reader() else {
            continue;
        };
        let mut declared: u64 = 0;
        for local in locals {
            let Ok((count, _)) = local else { break };
            declared = declared.saturating_add(u64::from(count));
        }
        if declared > MAX_LOCALS_PER_FUNCTION {
            return Err(format!(
                "a function declares {declared} locals, above the {MAX_LOCALS_PER_FUNCTION} a plugin may have (compiling it could take gigabytes)"
            ));
        }
        total = total.saturating_add(declared);
        if total > MAX_LOCALS_TOTAL {
            return Err(format!(
                "its functions declare more than {MAX_LOCALS_TOTAL} locals together (compiling it could take gigabytes)"
            ));
        }
    }
    Ok(())
}

/// Why the child did not compile the component.
#[derive(Debug)]
pub enum ChildError {
    /// Not a valid component: the child's message.
    Invalid(String),
    /// Over the memory or time budget, or the child could not run.
    Budget(String),
}

/// Compiles `bytes` in the child and returns the serialized artifact.
pub fn compile_in_child(budget: &CompileBudget, bytes: &[u8]) -> Result<Vec<u8>, ChildError> {
    let cannot = |e: std::io::Error| {
        ChildError::Budget(format!(
            "cannot run the compiler {} ({e}); it is the wasmprov binary itself",
            budget.compiler.display()
        ))
    };
    let mut child = Command::new(&budget.compiler)
        .arg(SUBCOMMAND)
        .arg("--memory-limit")
        .arg(budget.memory_limit.to_string())
        // Parallel compilation holds one function's working set per thread:
        // two keep the memory a component needs the same on any node.
        .env("RAYON_NUM_THREADS", "2")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(cannot)?;
    // Feed and drain on threads: a pipe holds 64 KiB, a component megabytes.
    let mut stdin = child.stdin.take().expect("piped stdin");
    let input = bytes.to_vec();
    let feeder = std::thread::spawn(move || stdin.write_all(&input));
    let mut stdout = child.stdout.take().expect("piped stdout");
    let reader = std::thread::spawn(move || {
        let mut out = Vec::new();
        stdout.read_to_end(&mut out).map(|_| out)
    });
    let mut stderr = child.stderr.take().expect("piped stderr");
    let errors = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.by_ref().take(64 << 10).read_to_string(&mut text);
        text
    });
    let deadline = Instant::now() + budget.timeout;
    let status = loop {
        match child.try_wait().map_err(cannot)? {
            Some(status) => break Some(status),
            None if Instant::now() >= deadline => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            None => std::thread::sleep(Duration::from_millis(5)),
        }
    };
    let _ = feeder.join();
    let artifact = reader.join().ok().and_then(Result::ok).unwrap_or_default();
    let stderr = errors.join().unwrap_or_default();
    let Some(status) = status else {
        return Err(ChildError::Budget(format!(
            "compiling it took longer than {:?} (--compile-timeout)",
            budget.timeout
        )));
    };
    if status.success() {
        return Ok(artifact);
    }
    if status.code() == Some(INVALID_EXIT) {
        return Err(ChildError::Invalid(stderr.trim().to_owned()));
    }
    Err(ChildError::Budget(format!(
        "compiling it needed more than the {} MiB compile budget (--compile-memory-limit) and was stopped ({status}{})",
        budget.memory_limit >> 20,
        if stderr.trim().is_empty() {
            String::new()
        } else {
            format!(": {}", crate::text::untrusted(stderr.trim(), 512))
        }
    )))
}

/// The child's exit code for a component that is not valid.
pub const INVALID_EXIT: i32 = 3;

/// The child: limits its own memory, reads a component on stdin, compiles
/// it with `engine` and writes the artifact on stdout. Exits
/// [`INVALID_EXIT`] with the error on stderr for an invalid component; an
/// allocation over the limit aborts it.
pub fn child_main(memory_limit: u64, engine: wasmtime::Engine) -> std::process::ExitCode {
    use std::process::ExitCode;
    let limit = rustix::process::Rlimit {
        current: Some(memory_limit),
        maximum: Some(memory_limit),
    };
    if let Err(e) = rustix::process::setrlimit(rustix::process::Resource::Data, limit) {
        eprintln!("cannot limit the compiler's memory: {e}");
        return ExitCode::FAILURE;
    }
    let mut bytes = Vec::new();
    if let Err(e) = std::io::stdin().read_to_end(&mut bytes) {
        eprintln!("cannot read the component: {e}");
        return ExitCode::FAILURE;
    }
    match engine.precompile_component(&bytes) {
        Ok(artifact) => match std::io::stdout().write_all(&artifact) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("cannot write the compiled component: {e}");
                ExitCode::FAILURE
            }
        },
        Err(e) => {
            eprintln!("{e:#}");
            ExitCode::from(INVALID_EXIT as u8)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A component holding a core module whose one function declares
    /// `locals` i64 locals (consecutive locals of one type are one counted
    /// entry in the binary, as in a compile bomb).
    pub(crate) fn with_locals(locals: usize) -> Vec<u8> {
        let declared = " (local i64)".repeat(locals);
        wat::parse_str(format!("(component (core module (func{declared})))")).unwrap()
    }

    #[test]
    fn too_many_locals_are_refused_before_compiling() {
        assert!(check_shape(&with_locals(100)).is_ok());
        let err = check_shape(&with_locals(MAX_LOCALS_PER_FUNCTION as usize + 1)).unwrap_err();
        assert!(err.contains("declares 10001 locals"), "{err}");
        // Garbage is left to the compiler, which says what is wrong.
        assert!(check_shape(b"not wasm").is_ok());
    }
}

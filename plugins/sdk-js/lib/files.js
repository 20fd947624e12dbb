// Files, for JavaScript plugins: the WASI filesystem (wasi:filesystem,
// which JavaScript reaches only through its world's imports) behind a few
// path-based calls. Paths are absolute guest paths inside the directories
// the operator's sandbox policy preopens for the plugin (e.g. /volumes);
// nothing else of the node exists for the plugin. Symbolic links are never
// followed.

import { getDirectories } from 'wasi:filesystem/preopens@0.2.12';
import { normalizeAbs } from './path.js';

/** A filesystem call that failed. `code` is the WASI error code ('exist',
 * 'no-entry', 'not-empty', 'access', 'read-only'...), or 'not-preopened' for
 * a path outside every preopened directory. */
export class FsError extends Error {
  constructor(op, path, code, hint = '') {
    super(`${op} ${path}: ${code}${hint}`);
    this.code = code;
    this.path = path;
  }
}

let preopens;

/** The preopened directories: [descriptor, guest path] pairs, asked once. */
function preopened() {
  preopens ??= getDirectories().map(([descriptor, guest]) => [descriptor, normalizeAbs(guest)]);
  return preopens;
}

/** The preopen holding `path` (the deepest) and `path` relative to it. */
function locate(op, path) {
  let abs;
  try {
    abs = normalizeAbs(path);
  } catch (why) {
    throw new FsError(op, path, 'invalid', ` (${why.message}; use an absolute path)`);
  }
  let best;
  for (const [descriptor, root] of preopened()) {
    let rel;
    if (abs === root) rel = '.';
    else if (root === '/') rel = abs.slice(1);
    else if (abs.startsWith(`${root}/`)) rel = abs.slice(root.length + 1);
    else continue;
    if (!best || root.length > best.root.length) best = { descriptor, root, rel };
  }
  if (!best) {
    const roots = preopened().map(([, root]) => root);
    throw new FsError(op, path, 'not-preopened',
      ` (the sandbox policy preopens ${roots.length > 0 ? roots.join(', ') : 'no directory'} for this plugin)`);
  }
  return best;
}

function call(op, path, fn) {
  const { descriptor, rel } = locate(op, path);
  try {
    return fn(descriptor, rel);
  } catch (e) {
    // componentize-js throws a WASI error-code as the error's payload.
    throw new FsError(op, path, e?.payload ?? String(e));
  }
}

const NO_FOLLOW = { symlinkFollow: false };

/** Creates the directory `path` (its parent must exist); FsError 'exist' if
 * something is there already. */
export function mkdir(path) {
  call('mkdir', path, (dir, rel) => dir.createDirectoryAt(rel));
}

/** `{ type, size }` of what is at `path` ('directory', 'regular-file',
 * 'symbolic-link'...; size a BigInt), or `undefined` if nothing is. */
export function stat(path) {
  try {
    const { type, size } = call('stat', path, (dir, rel) => dir.statAt(NO_FOLLOW, rel));
    return { type, size };
  } catch (e) {
    if (e.code === 'no-entry') return undefined;
    throw e;
  }
}

/** Whether `path` is a directory. */
export const isDir = (path) => stat(path)?.type === 'directory';

/** The names in the directory `path`. */
export function readDir(path) {
  return call('readdir', path, (dir, rel) => {
    const target = rel === '.' ? dir : dir.openAt(NO_FOLLOW, rel, { directory: true }, { read: true });
    const entries = target.readDirectory();
    const names = [];
    for (let entry; (entry = entries.readDirectoryEntry()) !== undefined;) names.push(entry.name);
    return names;
  });
}

/** Removes `path` and, if it is a directory, everything in it. Returns
 * false if nothing was there. */
export function removeAll(path) {
  const found = stat(path);
  if (found === undefined) return false;
  const abs = normalizeAbs(path);
  if (found.type === 'directory') {
    for (const name of readDir(abs)) removeAll(`${abs}/${name}`);
    call('rmdir', abs, (dir, rel) => dir.removeDirectoryAt(rel));
  } else {
    call('unlink', abs, (dir, rel) => dir.unlinkFileAt(rel));
  }
  return true;
}

/** Writes `text` (UTF-8) to the file `path`, created or truncated. */
export function writeText(path, text) {
  call('write', path, (dir, rel) => {
    const file = dir.openAt(NO_FOLLOW, rel, { create: true, truncate: true }, { write: true });
    const bytes = new TextEncoder().encode(text);
    for (let done = 0; done < bytes.length;) {
      done += Number(file.write(bytes.subarray(done), BigInt(done)));
    }
  });
}

/** The content of the file `path`, as UTF-8 text. */
export function readText(path) {
  return call('read', path, (dir, rel) => {
    const file = dir.openAt(NO_FOLLOW, rel, {}, { read: true });
    const chunks = [];
    let length = 0;
    for (;;) {
      const [bytes, end] = file.read(65536n, BigInt(length));
      chunks.push(bytes);
      length += bytes.length;
      if (end || bytes.length === 0) break;
    }
    const all = new Uint8Array(length);
    let at = 0;
    for (const chunk of chunks) {
      all.set(chunk, at);
      at += chunk.length;
    }
    return new TextDecoder().decode(all);
  });
}

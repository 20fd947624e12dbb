// Safe path handling for plugins that create things under a preopened root.
//
// The rule: a path a plugin builds from request data is a trusted root plus
// **one** checked component. A component is never empty, `.`, `..`, and never
// contains `/`, NUL or control characters, so joining it cannot leave the
// root. (The sandbox would stop an escape anyway; these checks make the
// plugin's own answer say what was wrong instead of failing obscurely.)
//
// Every check throws an Error whose message says why.

/** Longest file name most filesystems accept, in bytes. */
export const MAX_COMPONENT_LEN = 255;
/** Kubernetes object names are at most 253 characters. */
export const MAX_NAME_LEN = 253;

// eslint-disable-next-line no-control-regex
const CONTROL = /[\u0000-\u001f\u007f-\u009f]/;
const PV_NAME = /^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$/;

/** `value` without a trailing slash (`/` stays `/`), if it is an absolute
 * path without `.`, `..` or empty components and without control characters. */
export function normalizeAbs(value) {
  if (!value.startsWith('/')) throw new Error('it does not start with /');
  if (CONTROL.test(value)) throw new Error('it contains control characters');
  const trimmed = value.replace(/\/+$/, '');
  if (trimmed === '') return '/';
  for (const component of trimmed.slice(1).split('/')) {
    if (component === '') throw new Error('it contains an empty component (//)');
    if (component === '.' || component === '..') throw new Error('it contains a . or .. component');
  }
  return trimmed;
}

/** Throws unless `name` is one safe path component. */
export function checkComponent(name) {
  let why;
  if (name === '') why = 'it is empty';
  else if (name === '.' || name === '..') why = 'it is . or ..';
  else if (name.includes('/')) why = 'it contains /';
  else if (CONTROL.test(name)) why = 'it contains control characters';
  else if (new TextEncoder().encode(name).length > MAX_COMPONENT_LEN) why = 'it is longer than 255 bytes';
  else return;
  throw new Error(`${JSON.stringify(name)} is not a single safe file name: ${why}`);
}

/** `root` + `/` + `name`, after checking that `name` is one safe component.
 * `root` must be normalized (see `normalizeAbs`). */
export function join(root, name) {
  checkComponent(name);
  return root === '/' ? `/${name}` : `${root}/${name}`;
}

/** Throws unless a PV name is a lowercase DNS subdomain (at most 253
 * characters): always one safe directory name. */
export function checkPvName(name) {
  if (name.length > MAX_NAME_LEN || !PV_NAME.test(name)) {
    throw new Error(`invalid volume name ${JSON.stringify(name)}: it must be a lowercase DNS name `
      + `([a-z0-9]([-a-z0-9.]*[a-z0-9])?, at most ${MAX_NAME_LEN} characters) so that it is a `
      + 'single directory name under the root');
  }
}

/** Arbitrary text (a claim name, an annotation value...) as one safe path
 * component: characters other than ASCII letters, digits, `-`, `_` and `.`
 * become `-`, leading dots are dropped, the result is cut to 255 characters.
 * `undefined` when nothing is left. */
export function sanitizeComponent(raw) {
  const cut = raw.replace(/[^A-Za-z0-9._-]/g, '-').replace(/^\.+/, '').slice(0, MAX_COMPONENT_LEN);
  return cut === '' || /^-+$/.test(cut) ? undefined : cut;
}

/** A relative path of several components (e.g. `ns/name`) as a list of
 * sanitized components; empty ones, `.` and `..` are dropped. */
export function sanitizeRelative(raw) {
  return raw.split('/').map(sanitizeComponent).filter((c) => c !== undefined);
}

// PersistentVolumeSource JSON, as `volume.source` carries it: builders for
// the common kinds, and readers for `delete`, which gets the source back.

/** `{"hostPath":{"path":…,"type":…}}`; `type` is e.g. "Directory". */
export function hostPath(path, type) {
  return JSON.stringify({ hostPath: type === undefined ? { path } : { path, type } });
}

/** `{"nfs":{"server":…,"path":…}}`, with `readOnly` when true. */
export function nfs(server, path, readOnly = false) {
  return JSON.stringify({ nfs: readOnly ? { server, path, readOnly } : { server, path } });
}

/** `{"local":{"path":…}}`, with `fsType` when given. A local volume needs
 * node affinity (see `pinToNode`). */
export function local(path, fsType) {
  return JSON.stringify({ local: fsType === undefined ? { path } : { path, fsType } });
}

/** `{"csi":{"driver":…,"volumeHandle":…,…}}`; `attributes` is an object of
 * `volumeAttributes`. */
export function csi(driver, volumeHandle, { fsType, readOnly = false, attributes } = {}) {
  const fields = { driver, volumeHandle };
  if (fsType !== undefined) fields.fsType = fsType;
  if (readOnly) fields.readOnly = true;
  if (attributes && Object.keys(attributes).length > 0) fields.volumeAttributes = { ...attributes };
  return JSON.stringify({ csi: fields });
}

/** The string field `field` of the `kind` source in `source` JSON, e.g.
 * `fieldOf(source, 'nfs', 'path')`; the Error says what is missing. */
export function fieldOf(source, kind, field) {
  let value;
  try {
    value = JSON.parse(source);
  } catch (e) {
    throw new Error(`the source is not JSON (${e.message})`);
  }
  const found = value?.[kind]?.[field];
  if (typeof found !== 'string') throw new Error(`the source has no ${kind}.${field}`);
  return found;
}

/** The `hostPath.path` of a source. */
export const hostPathOf = (source) => fieldOf(source, 'hostPath', 'path');

/** The `[server, path]` of an nfs source. */
export const nfsOf = (source) => [fieldOf(source, 'nfs', 'server'), fieldOf(source, 'nfs', 'path')];

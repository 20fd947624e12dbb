// The checks most plugins make on a provision request, with messages that
// name the claim field and the fix. Every refusal throws InvalidArgument.

import { InvalidArgument } from './errors.js';
import { checkPvName } from './path.js';

/** The node label node affinity is usually expressed with. */
export const HOSTNAME_LABEL = 'kubernetes.io/hostname';

/** Checks a claim for a plugin that makes empty filesystem volumes: a size
 * above 0, at least one access mode, `volumeMode: Filesystem`, no data
 * source, no selector, and a PV name that is a safe directory name. Returns
 * the requested size in bytes (a BigInt). */
export function checkFilesystemClaim(plugin, request) {
  const { claim } = request;
  if (claim.requestedBytes === 0n) {
    throw new InvalidArgument('the claim requests 0 bytes: set spec.resources.requests.storage to a positive size');
  }
  if (claim.accessModes.length === 0) {
    throw new InvalidArgument('the claim has no access modes: set spec.accessModes, e.g. [ReadWriteOnce]');
  }
  if (claim.volumeMode === 'block') {
    throw new InvalidArgument(`the claim asks for a block volume (volumeMode: Block); the ${plugin} plugin only `
      + 'provides filesystem volumes');
  }
  if (claim.dataSource !== undefined) {
    throw new InvalidArgument(`the claim wants its data copied from ${claim.dataSource.kind} `
      + `${JSON.stringify(claim.dataSource.name)}; the ${plugin} plugin cannot pre-populate volumes `
      + '(no snapshots or cloning)');
  }
  if (claim.selector !== undefined) {
    throw new InvalidArgument(`the claim has a spec.selector; the ${plugin} plugin cannot select among `
      + 'existing volumes: remove the selector');
  }
  try {
    checkPvName(request.pvName);
  } catch (e) {
    throw new InvalidArgument(e.message);
  }
  return claim.requestedBytes;
}

/** The selected node, for a class that needs one (`neededBy` names the
 * parameter or feature in the message). */
export function selectedNode(request, neededBy) {
  if (request.selectedNode !== undefined) return request.selectedNode;
  const fix = request.storageClass.volumeBindingMode === 'immediate'
    ? 'the StorageClass has volumeBindingMode: Immediate; set it to WaitForFirstConsumer'
    : 'the class waits for the first consumer but no node was selected yet (with '
      + '`wasmprov plugin invoke`, pass --node)';
  throw new InvalidArgument(`${neededBy} pins the volume to the selected node, but the request has none: ${fix}`);
}

/** The value of a claim annotation, or `undefined`. */
export function annotation(request, key) {
  return new Map(request.claim.annotations).get(key);
}

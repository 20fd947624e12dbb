// The plugin object a JavaScript plugin exports, and the values it returns.

import { PluginError, witError } from './errors.js';
import { HOSTNAME_LABEL } from './claim.js';

function answering(hook, fn) {
  return (request) => {
    try {
      return fn(request);
    } catch (error) {
      // The SDK's answers become WIT errors; anything else is a bug, and
      // traps the call (the host reports it as a plugin failure).
      if (error instanceof PluginError) throw witError(hook, error);
      throw error;
    }
  };
}

/** The `plugin` export of a component, from the hooks:
 *
 *   export const plugin = definePlugin({
 *     provision(request) { ...; return volume(size, source.hostPath(dir, 'Directory')); },
 *     delete(request) { ... },
 *   });
 *
 * `provision` returns a volume (`volume()`) or throws one of the SDK's
 * answers (InvalidArgument, Failed, InBackground, NoChange, Reschedule);
 * `delete` returns nothing or throws Failed or Ignored. Set `blockVolumes:
 * true` if the plugin provisions `volumeMode: Block` claims. */
export function definePlugin({ provision, delete: remove, blockVolumes = false }) {
  if (typeof provision !== 'function' || typeof remove !== 'function') {
    throw new TypeError('definePlugin needs both provision(request) and delete(request)');
  }
  return {
    capabilities: () => ({ blockVolumes }),
    provision: answering('provision', provision),
    delete: answering('delete', remove),
  };
}

const pairs = (map) => Object.entries(map).map(([k, v]) => [String(k), String(v)]);

/** A volume of `capacityBytes` (a BigInt or a number) reached through
 * `source` (see the source module); labels and annotations are objects. */
export function volume(capacityBytes, source, { nodeAffinity, mountOptions = [], labels = {}, annotations = {} } = {}) {
  return {
    capacityBytes: BigInt(capacityBytes),
    source,
    nodeAffinity,
    mountOptions: [...mountOptions],
    labels: pairs(labels),
    annotations: pairs(annotations),
  };
}

/** A node affinity that pins a volume to one node by its
 * kubernetes.io/hostname label (its name when it has none). */
export function pinToNode(node) {
  const hostname = new Map(node.labels).get(HOSTNAME_LABEL) ?? node.name;
  return { terms: [{ matchExpressions: [{ key: HOSTNAME_LABEL, operator: 'in', values: [hostname] }] }] };
}

// The {{name}} plugin for wasmprov: each volume is a directory
// `<hostRoot>/<pv-name>` on the node, served to pods as a `hostPath` volume.
//
// The plugin sees the node only through the directory the operator's
// sandbox policy preopens for it: `hostRoot` at the guest path `root`.
//
// StorageClass parameters:
// - `hostRoot` (required): the directory on the node that holds the volumes;
// - `root` (default `/volumes`): where the policy preopens `hostRoot`.
//
// Unknown parameters are refused, so that an operator's typo is reported
// instead of ignored. Change what you need: `wasmprov plugin test` says what
// the host expects of every answer.

import { Failed, Params, claim, definePlugin, files, log, path, source, volume } from 'wasmprov-plugin';

const PLUGIN = '{{name}}';
const HOST_ROOT = 'hostRoot';
const ROOT = 'root';
const DEFAULT_ROOT = '/volumes';

const readme = (request) => `Volume ${request.pvName} of the claim ${request.claim.namespace}/`
  + `${request.claim.name}, made by the ${PLUGIN} plugin of wasmprov.\n`;

export const plugin = definePlugin({
  provision(request) {
    const params = new Params(PLUGIN, request.storageClass.parameters);
    params.rejectUnknown([HOST_ROOT, ROOT]);
    const hostRoot = params.absPath(HOST_ROOT, undefined,
      'the directory on the node that holds the volumes, e.g. /var/lib/{{name}}');
    const root = params.absPath(ROOT, DEFAULT_ROOT, 'where the policy preopens hostRoot');
    // A size above 0, a filesystem volume, a safe pv-name.
    const size = claim.checkFilesystemClaim(PLUGIN, request);
    const directory = path.join(root, request.pvName);
    const hostDirectory = path.join(hostRoot, request.pvName);
    // Asked again after a restart: the same directory is the same volume.
    try {
      files.mkdir(directory);
      log.info('created volume directory', { path: hostDirectory });
    } catch (e) {
      if (e.code !== 'exist' || !files.isDir(directory)) {
        throw new Failed(`${e.message}; the policy must preopen ${hostRoot} read-write at ${root}`);
      }
    }
    // Who the volume belongs to, for whoever finds it on the node.
    files.writeText(path.join(directory, 'README.txt'), readme(request));
    return volume(size, source.hostPath(hostDirectory, 'Directory'));
  },

  delete(request) {
    const params = new Params(PLUGIN, request.parameters);
    const root = params.absPath(ROOT, DEFAULT_ROOT, 'where the policy preopens hostRoot');
    let directory;
    try {
      directory = path.join(root, request.pvName);
    } catch (e) {
      throw new Failed(e.message);
    }
    try {
      if (files.removeAll(directory)) {
        log.info('removed volume directory', { path: directory });
      } else if (!files.isDir(root)) {
        // Already gone is success (the host retries deletes), as long as
        // the root is there: a missing preopen is not a deleted volume.
        throw new Failed(`${root} is missing; the policy must preopen hostRoot at ${root}`);
      }
    } catch (e) {
      if (e instanceof Failed) throw e;
      throw new Failed(e.message);
    }
  },
});

// Helpers for writing wasmprov plugins in JavaScript, built with
// componentize-js (see README.md):
//
//   import { definePlugin, Params, claim, files, path, source, volume } from 'wasmprov-plugin';
//
//   export const plugin = definePlugin({
//     provision(request) {
//       const params = new Params('mine', request.storageClass.parameters);
//       params.rejectUnknown(['root']);
//       const root = params.absPath('root', '/volumes', 'where the policy preopens the volumes');
//       const size = claim.checkFilesystemClaim('mine', request);
//       files.mkdir(path.join(root, request.pvName));
//       return volume(size, source.hostPath(`/var/lib/mine/${request.pvName}`, 'Directory'));
//     },
//     delete(request) { ... },
//   });

export * from './lib/errors.js';
export { Params, quoteList } from './lib/params.js';
export { definePlugin, volume, pinToNode } from './lib/plugin.js';
export * as claim from './lib/claim.js';
export * as files from './lib/files.js';
export * as log from './lib/log.js';
export * as path from './lib/path.js';
export * as source from './lib/source.js';

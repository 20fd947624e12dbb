// Logging into the host's log stream (wasmprov:provisioner/logging). The host
// attributes every line to the plugin and the volume being processed,
// truncates long messages and caps lines per call:
//
//   log.info('created volume directory', { path: directory });

import { log as hostLog } from 'wasmprov:provisioner/logging@0.2.0';

/** One line at `level` ('trace', 'debug', 'info', 'warn' or 'error') with
 * key/value `fields`. */
export function log(level, message, fields = {}) {
  hostLog(level, message, Object.entries(fields).map(([k, v]) => [k, String(v)]));
}

export const trace = (message, fields) => log('trace', message, fields);
export const debug = (message, fields) => log('debug', message, fields);
export const info = (message, fields) => log('info', message, fields);
export const warn = (message, fields) => log('warn', message, fields);
export const error = (message, fields) => log('error', message, fields);

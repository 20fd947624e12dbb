// wasmprov plugin "template": renders a PersistentVolume source (nfs or csi)
// for each claim from templates in the StorageClass, with validation. The
// storage itself exists already (an NFS export per team, volumes a CSI driver
// attaches by handle...): this backend maps claims onto it, so it creates
// nothing and deletes nothing. See plugins/README.md for the parameters.

import { log } from 'wasmprov:provisioner/logging@0.1.0';

const PLUGIN = 'template';
const COMMON = ['kind', 'readOnly'];
const KINDS = {
  nfs: { required: ['server', 'path'], optional: [] },
  csi: { required: ['driver'], optional: ['volumeHandle', 'fsType'], prefix: 'attributes.' },
};
// Variables that differ between claims: every template of a volume's
// identity must use one, or two claims would get the same storage.
const PER_CLAIM = ['pvName', 'uid', 'name'];

// A request that can never succeed as it is.
class Invalid extends Error {}

const invalid = (message) => new Invalid(message);
const quote = (items) => items.map((i) => JSON.stringify(i)).join(', ');

function info(message, fields) {
  log('info', message, Object.entries(fields));
}

function parameters(pairs) {
  const params = new Map(pairs);
  const kind = params.get('kind');
  if (!kind) {
    throw invalid(`missing class parameter "kind": the ${PLUGIN} plugin needs it; set it to one of ${quote(Object.keys(KINDS))}`);
  }
  const spec = KINDS[kind];
  if (!spec) {
    throw invalid(`class parameter "kind" is ${JSON.stringify(kind)}: it must be one of ${quote(Object.keys(KINDS))}`);
  }
  const known = [...COMMON, ...spec.required, ...spec.optional];
  const unknown = [...params.keys()]
    .filter((k) => !known.includes(k) && !(spec.prefix && k.startsWith(spec.prefix)))
    .sort();
  if (unknown.length > 0) {
    const also = spec.prefix ? ` and ${spec.prefix}<key>` : '';
    throw invalid(`unknown class parameter${unknown.length === 1 ? '' : 's'} ${quote(unknown)}: with kind ${kind} the ${PLUGIN} plugin accepts only ${quote(known)}${also} (parameter names are case-sensitive)`);
  }
  for (const key of spec.required) {
    if (!params.get(key)) {
      throw invalid(`missing class parameter "${key}": the ${PLUGIN} plugin needs it for kind ${kind}`);
    }
  }
  const readOnly = params.get('readOnly') ?? 'false';
  if (readOnly !== 'true' && readOnly !== 'false') {
    throw invalid(`class parameter "readOnly" is ${JSON.stringify(readOnly)}: it must be "true" or "false"`);
  }
  return { kind, params, readOnly: readOnly === 'true' };
}

// Expands ${var} in a template. Values from the claim are sanitized so they
// cannot add path components or characters a source field does not allow.
function render(key, template, vars) {
  let perClaim = false;
  const out = template.replace(/\$\{([^}]*)\}/g, (_, name) => {
    name = name.trim();
    let value;
    if (name.startsWith('annotations.')) {
      value = vars.annotations.get(name.slice('annotations.'.length));
    } else if (name.startsWith('labels.')) {
      value = vars.labels.get(name.slice('labels.'.length));
    } else if (Object.hasOwn(vars.plain, name)) {
      value = vars.plain[name];
      perClaim ||= PER_CLAIM.includes(name);
    } else {
      throw invalid(`class parameter "${key}": unknown variable \${${name}}; use \${pvName}, \${uid}, \${namespace}, \${name}, \${annotations.KEY} or \${labels.KEY}`);
    }
    if (value === undefined) {
      throw invalid(`class parameter "${key}" uses \${${name}}, which the claim does not have; add it to the claim or change the template`);
    }
    const safe = value.replace(/[^A-Za-z0-9._-]/g, '-').replace(/^\.+/, '');
    if (!safe) {
      throw invalid(`class parameter "${key}": \${${name}} is ${JSON.stringify(value)}, which leaves nothing usable`);
    }
    return safe;
  });
  if (out.includes('${')) {
    throw invalid(`class parameter "${key}" has an unclosed \${ in ${JSON.stringify(template)}`);
  }
  return { value: out, perClaim };
}

function source(config, request) {
  const claim = request.claim;
  const vars = {
    plain: { pvName: request.pvName, uid: claim.uid, name: claim.name, namespace: claim.namespace },
    annotations: new Map(claim.annotations),
    labels: new Map(claim.labels),
  };
  const { kind, params, readOnly } = config;
  if (kind === 'nfs') {
    const server = params.get('server');
    if (!/^[A-Za-z0-9.:\[\]-]+$/.test(server)) {
      throw invalid(`class parameter "server" is ${JSON.stringify(server)}: it must be a host name or IP address`);
    }
    const template = params.get('path');
    if (!template.startsWith('/') || template.split('/').some((c) => c === '..' || c === '.')) {
      throw invalid(`class parameter "path" is ${JSON.stringify(template)}: it must be an absolute path template without . or .. components, e.g. /exports/\${namespace}/\${pvName}`);
    }
    const path = render('path', template, vars);
    if (!path.perClaim) {
      throw invalid(`class parameter "path" (${JSON.stringify(template)}) gives every claim the same directory; use \${pvName}, \${uid} or \${name} in it`);
    }
    return { nfs: { server, path: path.value.replace(/\/+/g, '/'), ...(readOnly && { readOnly }) } };
  }
  const driver = params.get('driver');
  if (!/^[a-z0-9]([-a-z0-9.]{0,61}[a-z0-9])?$/.test(driver)) {
    throw invalid(`class parameter "driver" is ${JSON.stringify(driver)}: it must be a CSI driver name (a DNS subdomain of at most 63 characters, e.g. disk.csi.example.com)`);
  }
  const handle = render('volumeHandle', params.get('volumeHandle') ?? '${pvName}', vars);
  if (!handle.perClaim) {
    throw invalid('class parameter "volumeHandle" gives every claim the same handle; use ${pvName}, ${uid} or ${name} in it');
  }
  const csi = { driver, volumeHandle: handle.value };
  if (params.has('fsType')) csi.fsType = params.get('fsType');
  if (readOnly) csi.readOnly = true;
  const attributes = {};
  for (const [key, template] of params) {
    if (key.startsWith('attributes.')) {
      attributes[key.slice('attributes.'.length)] = render(key, template, vars).value;
    }
  }
  if (Object.keys(attributes).length > 0) csi.volumeAttributes = attributes;
  return { csi };
}

function checkClaim(request) {
  const claim = request.claim;
  if (claim.requestedBytes === 0n) {
    throw invalid('the claim requests 0 bytes: set spec.resources.requests.storage to a positive size');
  }
  if (claim.accessModes.length === 0) {
    throw invalid('the claim has no access modes: set spec.accessModes, e.g. [ReadWriteOnce]');
  }
  if (claim.volumeMode === 'block') {
    throw invalid(`the claim asks for a block volume; the ${PLUGIN} plugin renders filesystem volumes only`);
  }
  if (claim.dataSource) {
    throw invalid(`the claim wants its data copied from ${claim.dataSource.kind} ${JSON.stringify(claim.dataSource.name)}; the ${PLUGIN} plugin cannot pre-populate volumes`);
  }
}

function provision(request) {
  try {
    const config = parameters(request.storageClass.parameters);
    checkClaim(request);
    const rendered = JSON.stringify(source(config, request));
    info('rendered volume source', { pv: request.pvName, source: rendered });
    return {
      capacityBytes: request.claim.requestedBytes,
      source: rendered,
      nodeAffinity: undefined,
      mountOptions: [],
      labels: [],
      annotations: [],
    };
  } catch (e) {
    // Errors are thrown as the WIT variant; anything else would trap.
    if (e instanceof Invalid) throw { tag: 'invalid-argument', val: e.message };
    throw { tag: 'failed', val: `${PLUGIN}: unexpected error: ${e}` };
  }
}

// The storage is not the plugin's to remove: deleting the volume only checks
// that it is one this class renders (else it is left alone: `ignored`).
function del(request) {
  let kind;
  try {
    kind = parameters(request.parameters).kind;
  } catch (e) {
    throw { tag: 'failed', val: `the volume's recorded class parameters are unusable: ${e.message}` };
  }
  let parsed;
  try {
    parsed = JSON.parse(request.source);
  } catch {
    parsed = {};
  }
  if (!parsed || typeof parsed !== 'object' || !(kind in parsed)) {
    throw { tag: 'ignored', val: `volume ${request.pvName} has no ${kind} source; it was not rendered by this class` };
  }
  info('nothing to delete: the storage is managed outside wasmprov', { pv: request.pvName });
}

export const plugin = {
  capabilities: () => ({ blockVolumes: false }),
  provision,
  delete: del,
};

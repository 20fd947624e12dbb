// Unit tests of the SDK's pure helpers, in Node (no component):
// node --test plugins/sdk-js/test/
// (files.js and log.js import the host's interfaces and are tested through
// a built plugin: `wasmprov plugin new NAME --lang js`.)

import { test } from 'node:test';
import assert from 'node:assert/strict';

import { Failed, Ignored, InvalidArgument, ParamError, Reschedule, witError } from '../lib/errors.js';
import { Params } from '../lib/params.js';
import * as path from '../lib/path.js';
import { definePlugin, pinToNode, volume } from '../lib/plugin.js';
import * as source from '../lib/source.js';

test('paths: absolute and normalized, one safe component joined', () => {
  assert.equal(path.normalizeAbs('/srv/x/'), '/srv/x');
  assert.equal(path.normalizeAbs('/'), '/');
  assert.equal(path.normalizeAbs('///'), '/');
  for (const bad of ['relative', '', '/a/../b', '/a/./b', '/a//b', '/a\nb', '/..']) {
    assert.throws(() => path.normalizeAbs(bad), Error, bad);
  }
  assert.equal(path.join('/volumes', 'pvc-1'), '/volumes/pvc-1');
  assert.equal(path.join('/', 'pvc-1'), '/pvc-1');
  for (const bad of ['', '.', '..', 'a/b', 'a\u0000b', 'x'.repeat(256)]) {
    assert.throws(() => path.join('/volumes', bad), /is not a single safe file name/, bad);
  }
  path.checkPvName('pvc-1.a');
  for (const bad of ['', 'PVC', '-a', 'a-', 'a/b', '..', 'a'.repeat(254)]) {
    assert.throws(() => path.checkPvName(bad), /invalid volume name/, bad);
  }
  assert.equal(path.sanitizeComponent('apps/data:1'), 'apps-data-1');
  assert.equal(path.sanitizeComponent('..hidden'), 'hidden');
  assert.equal(path.sanitizeComponent('///'), undefined);
  assert.deepEqual(path.sanitizeRelative('ns/../name/./x'), ['ns', 'name', 'x']);
});

const params = (pairs) => new Params('demo', Object.entries(pairs));

test('params: unknown ones refused by name, the same words as the other SDKs', () => {
  params({ hostRoot: '/a' }).rejectUnknown(['hostRoot']);
  assert.throws(
    () => params({ hostRoot: '/a', hostroot: '/b', zeta: '1' }).rejectUnknown(['hostRoot']),
    (e) => e instanceof ParamError && e.message === 'unknown class parameters "hostroot", "zeta": the demo '
      + 'plugin accepts only "hostRoot" (parameter names are case-sensitive)',
  );
  assert.equal(params({ server: 'a' }).required('server', 'an address'), 'a');
  for (const p of [params({}), params({ server: '' })]) {
    assert.throws(() => p.required('server', 'an address, e.g. 10.0.0.5'), {
      message: 'missing class parameter "server": the demo plugin needs it; set it to an address, e.g. 10.0.0.5',
    });
  }
  assert.equal(params({}).optional('mode', 'delete'), 'delete');
});

test('params: typed values say what is accepted', () => {
  assert.equal(params({ archive: 'true' }).bool('archive', false), true);
  assert.equal(params({}).bool('archive', false), false);
  assert.throws(() => params({ archive: 'yes' }).bool('archive', false), {
    message: 'class parameter "archive" is "yes": it must be "true" or "false"',
  });
  assert.equal(params({ mode: 'archive' }).oneOf('mode', ['delete', 'archive']), 'archive');
  assert.throws(() => params({ mode: 'keep' }).oneOf('mode', ['delete', 'archive'], 'delete'),
    /it must be one of "delete", "archive"/);
  assert.throws(() => params({}).oneOf('mode', ['delete', 'archive']), ParamError);
  assert.equal(params({ n: '12' }).integer('n', 1n), 12n);
  for (const bad of ['-1', '1.5', 'x', '']) {
    assert.throws(() => params({ n: bad }).integer('n', 1n), ParamError, bad);
  }
  assert.equal(params({ root: '/v/' }).absPath('root', '/d', 'a path'), '/v');
  assert.equal(params({}).absPath('root', '/d', 'a path'), '/d');
  assert.throws(() => params({ root: 'v/../x' }).absPath('root', undefined, 'a path'),
    /it must be an absolute, normalized path/);
  assert.throws(() => params({}).absPath('root', undefined, 'the directory of volumes'),
    /set it to the directory of volumes/);
});

test('sources: as the Kubernetes API writes them, and read back', () => {
  assert.equal(source.hostPath('/srv/x', 'Directory'), '{"hostPath":{"path":"/srv/x","type":"Directory"}}');
  assert.equal(source.hostPath('/srv/x'), '{"hostPath":{"path":"/srv/x"}}');
  assert.deepEqual(JSON.parse(source.nfs('10.0.0.5', '/e/a', true)),
    { nfs: { server: '10.0.0.5', path: '/e/a', readOnly: true } });
  assert.deepEqual(JSON.parse(source.local('/mnt/a', 'ext4')), { local: { path: '/mnt/a', fsType: 'ext4' } });
  assert.deepEqual(JSON.parse(source.csi('d.example.com', 'v1', { attributes: { p: 'f' } })),
    { csi: { driver: 'd.example.com', volumeHandle: 'v1', volumeAttributes: { p: 'f' } } });
  const weird = '/srv/we"ird\\dir/pvc-1';
  assert.equal(source.hostPathOf(source.hostPath(weird)), weird);
  assert.deepEqual(source.nfsOf(source.nfs('nfs.example', '/e/a')), ['nfs.example', '/e/a']);
  assert.throws(() => source.hostPathOf(source.nfs('a', '/b')), /no hostPath.path/);
  assert.throws(() => source.nfsOf('nope'), /not JSON/);
});

test('answers: each exception becomes its WIT variant; delete cannot refuse', () => {
  assert.deepEqual(witError('provision', new Reschedule('full')), { tag: 'reschedule', val: 'full' });
  assert.deepEqual(witError('provision', new ParamError('bad')), { tag: 'invalid-argument', val: 'bad' });
  assert.deepEqual(witError('provision', new Ignored('not mine')), { tag: 'failed', val: 'not mine' });
  assert.deepEqual(witError('delete', new Ignored('other node')), { tag: 'ignored', val: 'other node' });
  assert.deepEqual(witError('delete', new InvalidArgument('no')), { tag: 'failed', val: 'no' });
  assert.deepEqual(witError('delete', new ParamError('class parameter "root" is "x"')), {
    tag: 'failed',
    val: 'the volume\'s recorded class parameters are unusable: class parameter "root" is "x"',
  });
});

test('definePlugin: answers are thrown as WIT errors, bugs are not hidden', () => {
  const plugin = definePlugin({
    provision(request) {
      if (request === 'bug') throw new TypeError('oops');
      throw new Failed('backend down');
    },
    delete() {},
  });
  assert.deepEqual(plugin.capabilities(), { blockVolumes: false });
  assert.throws(() => plugin.provision('x'), (e) => e.tag === 'failed' && e.val === 'backend down');
  assert.throws(() => plugin.provision('bug'), TypeError);
  assert.equal(plugin.delete('x'), undefined);
  assert.throws(() => definePlugin({ provision() {} }), /needs both provision\(request\) and delete\(request\)/);
});

test('volumes and node affinity in the shapes componentize-js expects', () => {
  assert.deepEqual(volume(5, '{}', { labels: { a: 'b' } }), {
    capacityBytes: 5n, source: '{}', nodeAffinity: undefined, mountOptions: [], labels: [['a', 'b']], annotations: [],
  });
  assert.deepEqual(pinToNode({ name: 'n1', labels: [] }).terms[0].matchExpressions[0],
    { key: 'kubernetes.io/hostname', operator: 'in', values: ['n1'] });
});

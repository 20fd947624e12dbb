"""wasmprov plugin "static-pool": hands out pre-created volumes.

An operator lists existing volumes (NFS exports, CSI volumes, ...) in a pool
file; each claim gets the smallest free one that is big enough, and gets it
back again when provisioned again (idempotent). Deleting the volume returns
it to the pool. The pool file and the assignments live in a directory the
sandbox policy preopens read-write (class parameter ``poolDir``, default
``/pool``):

    <poolDir>/<pool>.json          the pool, written by the operator
    <poolDir>/<pool>.claims/<vol>  one file per assigned volume: the PV name

Assignment files are created with O_EXCL, so two concurrent claims can never
get the same volume. See plugins/README.md for the pool file format.
"""

import errno
import json
import os
import re

from componentize_py_types import Err
from wit_world import exports
from wit_world.imports import logging
from wit_world.imports.types import (
    AccessMode,
    DeleteError_Failed,
    PluginCapabilities,
    ProvisionError_Failed,
    ProvisionError_InvalidArgument,
    Volume,
    VolumeMode,
)

PLUGIN = "static-pool"
KNOWN = ("pool", "poolDir")
DEFAULT_POOL_DIR = "/pool"
NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
QUANTITY = re.compile(r"^([0-9]+)(Ki|Mi|Gi|Ti|Pi|k|M|G|T|P)?$")
UNITS = {None: 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15,
         "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50}
MODES = {"ReadWriteOnce": AccessMode.READ_WRITE_ONCE, "ReadOnlyMany": AccessMode.READ_ONLY_MANY,
         "ReadWriteMany": AccessMode.READ_WRITE_MANY,
         "ReadWriteOncePod": AccessMode.READ_WRITE_ONCE_POD}
VOLUME_ANNOTATION = "static-pool/volume"


class Refused(Exception):
    """A request that can never succeed as it is: invalid-argument."""


class Failure(Exception):
    """The backend (the pool) cannot serve the request now: failed."""


def log(message, **fields):
    logging.log(logging.Level.INFO, message, [(k, str(v)) for k, v in fields.items()])


class Config:
    def __init__(self, pairs, strict):
        params = dict(pairs)
        unknown = sorted(k for k in params if k not in KNOWN)
        if strict and unknown:
            raise Refused(
                "unknown class parameter%s %s: the %s plugin accepts only \"pool\", \"poolDir\" "
                "(parameter names are case-sensitive)"
                % ("" if len(unknown) == 1 else "s", ", ".join('"%s"' % k for k in unknown), PLUGIN))
        self.pool = params.get("pool", "")
        if not self.pool:
            raise Refused(
                "missing class parameter \"pool\": the %s plugin needs it; set it to the name of "
                "the pool, e.g. pool: fast (the volumes are listed in <poolDir>/fast.json)" % PLUGIN)
        if not NAME.match(self.pool):
            raise Refused("class parameter \"pool\" is %r: it must be a lowercase name like "
                          "\"fast\" ([a-z0-9] and - or .)" % self.pool)
        self.dir = params.get("poolDir", DEFAULT_POOL_DIR)
        parts = self.dir.split("/")
        if not self.dir.startswith("/") or any(p in (".", "..") for p in parts[1:]):
            raise Refused("class parameter \"poolDir\" is %r: it must be an absolute path "
                          "without . or .. (the guest path of the pool's preopen)" % self.dir)
        self.dir = self.dir.rstrip("/") or "/"
        self.file = os.path.join(self.dir, self.pool + ".json")
        self.claims = os.path.join(self.dir, self.pool + ".claims")

    def hint(self):
        return ("does the sandbox policy preopen the pool directory read-write at %s? "
                "(class parameter \"poolDir\", default %s)" % (self.dir, DEFAULT_POOL_DIR))


def parse_quantity(text, where):
    match = QUANTITY.match(str(text))
    if not match:
        raise Failure("%s: capacity %r is not a size like 10Gi or 500Mi" % (where, text))
    return int(match.group(1)) * UNITS[match.group(2)]


def load_pool(config):
    try:
        with open(config.file, encoding="utf-8") as f:
            data = json.load(f)
    except FileNotFoundError:
        raise Failure("the pool file %s does not exist; create it (see plugins/README.md) or fix "
                      "class parameter \"pool\"; %s" % (config.file, config.hint()))
    except (OSError, ValueError) as e:
        raise Failure("cannot read the pool file %s: %s" % (config.file, e))
    volumes = data.get("volumes") if isinstance(data, dict) else None
    if not isinstance(volumes, list):
        raise Failure('%s: expected {"volumes": [...]}' % config.file)
    pool = {}
    for i, v in enumerate(volumes):
        where = "%s: volumes[%d]" % (config.file, i)
        if not isinstance(v, dict) or not NAME.match(str(v.get("name", ""))):
            raise Failure("%s: needs a lowercase \"name\" ([a-z0-9] and - or .)" % where)
        if v["name"] in pool:
            raise Failure("%s: the name %r is used twice" % (where, v["name"]))
        source = v.get("source")
        if not isinstance(source, dict) or len(source) != 1:
            raise Failure("%s (%s): \"source\" must be one PersistentVolumeSource, e.g. "
                          "{\"nfs\": {\"server\": \"10.0.0.5\", \"path\": \"/exports/a\"}}"
                          % (where, v["name"]))
        modes = v.get("accessModes", list(MODES))
        if not isinstance(modes, list) or any(m not in MODES for m in modes):
            raise Failure("%s (%s): \"accessModes\" must list some of %s"
                          % (where, v["name"], ", ".join(MODES)))
        capacity = parse_quantity(v.get("capacity"), "%s (%s)" % (where, v["name"]))
        if capacity <= 0:
            raise Failure("%s (%s): capacity must be above 0" % (where, v["name"]))
        pool[v["name"]] = {"capacity": capacity, "source": json.dumps(source, sort_keys=True),
                           "modes": {MODES[m] for m in modes}}
    return pool


def assignments(config):
    """Volume name -> PV name, for every assigned volume."""
    result = {}
    try:
        names = os.listdir(config.claims)
    except FileNotFoundError:
        return result
    for name in names:
        with open(os.path.join(config.claims, name), encoding="utf-8") as f:
            result[name] = f.read().strip()
    return result


def volume_of(name, entry):
    return Volume(capacity_bytes=entry["capacity"], source=entry["source"], node_affinity=None,
                  mount_options=[], labels=[], annotations=[(VOLUME_ANNOTATION, name)])


def check_claim(request):
    claim = request.claim
    if claim.requested_bytes == 0:
        raise Refused("the claim requests 0 bytes: set spec.resources.requests.storage to a "
                      "positive size")
    if not claim.access_modes:
        raise Refused("the claim has no access modes: set spec.accessModes, e.g. [ReadWriteOnce]")
    if claim.volume_mode == VolumeMode.BLOCK:
        raise Refused("the claim asks for a block volume; the %s plugin hands out filesystem "
                      "volumes only" % PLUGIN)
    if claim.data_source is not None:
        raise Refused("the claim wants its data copied from %s %r; pool volumes cannot be "
                      "pre-populated" % (claim.data_source.kind, claim.data_source.name))
    if claim.selector is not None:
        raise Refused("the claim has a spec.selector; the %s plugin picks volumes by size and "
                      "access modes only: remove the selector" % PLUGIN)
    if not NAME.match(request.pv_name):
        raise Refused("invalid volume name %r" % request.pv_name)


def provision(request):
    config = Config(request.storage_class.parameters, strict=True)
    check_claim(request)
    pool = load_pool(config)
    taken = assignments(config)
    for name, pv in taken.items():
        if pv == request.pv_name:
            if name not in pool:
                raise Failure("%s was given volume %s, which is no longer in %s; put it back or "
                              "remove %s" % (pv, name, config.file,
                                             os.path.join(config.claims, name)))
            log("volume already assigned", pv=pv, volume=name)
            return volume_of(name, pool[name])
    wanted = set(request.claim.access_modes)
    free = sorted((e["capacity"], name) for name, e in pool.items()
                  if name not in taken and e["capacity"] >= request.claim.requested_bytes
                  and wanted <= e["modes"])
    try:
        os.makedirs(config.claims, exist_ok=True)
    except OSError as e:
        raise Failure("cannot create %s: %s; %s" % (config.claims, e, config.hint()))
    for _, name in free:
        path = os.path.join(config.claims, name)
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            continue  # taken meanwhile by another claim
        except OSError as e:
            raise Failure("cannot assign %s: %s; %s" % (name, e, config.hint()))
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(request.pv_name + "\n")
        log("assigned volume", pv=request.pv_name, volume=name)
        return volume_of(name, pool[name])
    raise Failure("no free volume in pool %s for %d bytes (%s): %d volumes, %d assigned; add "
                  "volumes to %s" % (config.pool, request.claim.requested_bytes,
                                     ", ".join(sorted(m.name for m in wanted)), len(pool),
                                     len(taken), config.file))


def delete(request):
    config = Config(request.parameters, strict=False)
    if not os.path.isdir(config.dir):
        raise Failure("the pool directory %s is not visible; %s" % (config.dir, config.hint()))
    released = [name for name, pv in assignments(config).items() if pv == request.pv_name]
    for name in released:
        try:
            os.remove(os.path.join(config.claims, name))
        except FileNotFoundError:
            pass
        log("returned volume to the pool", pv=request.pv_name, volume=name)
    if not released:
        log("no volume assigned (already returned)", pv=request.pv_name)


class Plugin(exports.Plugin):
    def capabilities(self):
        return PluginCapabilities(block_volumes=False)

    def provision(self, request):
        # Only Err(...) reaches the host as an answer: any other exception
        # would crash the call, so every path ends in a value or an Err.
        try:
            return provision(request)
        except Refused as e:
            raise Err(ProvisionError_InvalidArgument(str(e)))
        except Failure as e:
            raise Err(ProvisionError_Failed(str(e)))
        except Exception as e:  # a bug here, or an unexpected I/O error
            raise Err(ProvisionError_Failed("%s: unexpected error: %r" % (PLUGIN, e)))

    def delete(self, request):
        try:
            delete(request)
        except (Refused, Failure) as e:
            raise Err(DeleteError_Failed(str(e)))
        except Exception as e:
            raise Err(DeleteError_Failed("%s: unexpected error: %r" % (PLUGIN, e)))

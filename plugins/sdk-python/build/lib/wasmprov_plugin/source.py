"""``PersistentVolumeSource`` JSON, as ``volume.source`` carries it: builders
for the common kinds, and readers for ``delete``, which gets the source back.
"""

import json


def _dump(kind, fields):
    return json.dumps({kind: fields}, separators=(",", ":"))


def host_path(path, kind=None):
    """``{"hostPath":{"path":…,"type":…}}``; ``kind`` is e.g. ``Directory``
    (``None`` leaves the type out)."""
    fields = {"path": path}
    if kind is not None:
        fields["type"] = kind
    return _dump("hostPath", fields)


def nfs(server, path, read_only=False):
    """``{"nfs":{"server":…,"path":…}}``, with ``readOnly`` when true."""
    fields = {"server": server, "path": path}
    if read_only:
        fields["readOnly"] = True
    return _dump("nfs", fields)


def local(path, fs_type=None):
    """``{"local":{"path":…}}``, with ``fsType`` when given. A ``local``
    volume needs node affinity (see ``pin_to_node``)."""
    fields = {"path": path}
    if fs_type is not None:
        fields["fsType"] = fs_type
    return _dump("local", fields)


def csi(driver, volume_handle, fs_type=None, read_only=False, attributes=None):
    """``{"csi":{"driver":…,"volumeHandle":…,…}}``; ``attributes`` is a dict
    of ``volumeAttributes``."""
    fields = {"driver": driver, "volumeHandle": volume_handle}
    if fs_type is not None:
        fields["fsType"] = fs_type
    if read_only:
        fields["readOnly"] = True
    if attributes:
        fields["volumeAttributes"] = dict(attributes)
    return _dump("csi", fields)


def field_of(source, kind, field):
    """The string field ``field`` of the ``kind`` source in ``source`` JSON,
    e.g. ``field_of(source, "nfs", "path")``; ``ValueError`` says what is
    missing."""
    try:
        value = json.loads(source)
    except ValueError as e:
        raise ValueError("the source is not JSON (%s)" % e)
    inner = value.get(kind) if isinstance(value, dict) else None
    found = inner.get(field) if isinstance(inner, dict) else None
    if not isinstance(found, str):
        raise ValueError("the source has no %s.%s" % (kind, field))
    return found


def host_path_of(source):
    """The ``hostPath.path`` of a source."""
    return field_of(source, "hostPath", "path")


def nfs_of(source):
    """The ``(server, path)`` of an ``nfs`` source."""
    return field_of(source, "nfs", "server"), field_of(source, "nfs", "path")

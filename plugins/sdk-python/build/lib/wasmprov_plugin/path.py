"""Safe path handling for plugins that create things under a preopened root.

The rule: a path a plugin builds from request data is a trusted root plus
**one** checked component. A component is never empty, ``.``, ``..``, and
never contains ``/``, NUL or control characters, so joining it cannot leave
the root. (The sandbox would stop an escape anyway; these checks make the
plugin's own answer say what was wrong instead of failing obscurely.)

Every check raises ``ValueError`` whose text says why.
"""

import re

MAX_COMPONENT_LEN = 255
"""Longest file name most filesystems accept, in bytes."""
MAX_NAME_LEN = 253
"""Kubernetes object names are at most 253 characters."""

_PV_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


def _has_control(text):
    return any(ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0 for c in text)


def normalize_abs(value):
    """``value`` without a trailing slash (``/`` stays ``/``), if it is an
    absolute path without ``.``, ``..`` or empty components and without
    control characters."""
    if not value.startswith("/"):
        raise ValueError("it does not start with /")
    if _has_control(value):
        raise ValueError("it contains control characters")
    trimmed = value.rstrip("/")
    if not trimmed:
        return "/"
    for component in trimmed[1:].split("/"):
        if component == "":
            raise ValueError("it contains an empty component (//)")
        if component in (".", ".."):
            raise ValueError("it contains a . or .. component")
    return trimmed


def check_component(name):
    """Raises unless ``name`` is one safe path component."""
    if name == "":
        why = "it is empty"
    elif name in (".", ".."):
        why = "it is . or .."
    elif "/" in name:
        why = "it contains /"
    elif _has_control(name):
        why = "it contains control characters"
    elif len(name.encode()) > MAX_COMPONENT_LEN:
        why = "it is longer than 255 bytes"
    else:
        return
    raise ValueError("%r is not a single safe file name: %s" % (name, why))


def join(root, name):
    """``root`` + ``/`` + ``name``, after checking that ``name`` is one safe
    component. ``root`` must be normalized (see ``normalize_abs``)."""
    check_component(name)
    return "/" + name if root == "/" else root + "/" + name


def check_pv_name(name):
    """Raises unless a PV name is a lowercase DNS subdomain (at most 253
    characters): always one safe directory name."""
    if len(name) > MAX_NAME_LEN or not _PV_NAME.match(name):
        raise ValueError(
            "invalid volume name %r: it must be a lowercase DNS name "
            "([a-z0-9]([-a-z0-9.]*[a-z0-9])?, at most %d characters) so that it is a "
            "single directory name under the root" % (name, MAX_NAME_LEN))


def sanitize_component(raw):
    """Arbitrary text (a claim name, an annotation value...) as one safe path
    component: characters other than ASCII letters, digits, ``-``, ``_`` and
    ``.`` become ``-``, leading dots are dropped, the result is cut to 255
    characters. ``None`` when nothing is left."""
    cut = _UNSAFE.sub("-", raw).lstrip(".")[:MAX_COMPONENT_LEN]
    if not cut or set(cut) == {"-"}:
        return None
    return cut


def sanitize_relative(raw):
    """A relative path of several components (e.g. ``ns/name``) as a list of
    sanitized components; empty ones, ``.`` and ``..`` are dropped. Their
    join can never leave the directory it is joined to."""
    return [c for c in (sanitize_component(part) for part in raw.split("/")) if c]

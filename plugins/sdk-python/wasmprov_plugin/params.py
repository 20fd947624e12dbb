"""StorageClass parameters with errors that name the parameter and the fix.

Every accessor raises ``ParamError`` (an ``InvalidArgument``), which the SDK's
``Plugin`` answers as ``invalid-argument`` in ``provision`` and as ``failed``
in ``delete``.
"""

import json

from . import path
from .errors import ParamError


def quote_list(items):
    """``"a", "b", "c"``."""
    return ", ".join('"%s"' % item for item in items)


class Params:
    """A plugin's view of the class parameters: ``storage_class.parameters``
    in ``provision``, ``request.parameters`` in ``delete`` (a list of
    ``(key, value)`` pairs). ``plugin`` names the plugin in messages."""

    def __init__(self, plugin, pairs):
        self.plugin = plugin
        self.pairs = dict(pairs)

    def get(self, key):
        """The raw value of ``key``, or ``None``."""
        return self.pairs.get(key)

    def reject_unknown(self, known):
        """Raises if any parameter is not in ``known``: an operator's typo is
        reported instead of ignored."""
        unknown = sorted(k for k in self.pairs if k not in known)
        if unknown:
            raise ParamError(
                "unknown class parameter%s %s: the %s plugin accepts only %s "
                "(parameter names are case-sensitive)"
                % ("" if len(unknown) == 1 else "s", quote_list(unknown), self.plugin,
                   quote_list(known) if known else "none"))

    def required(self, key, what):
        """The value of a required parameter; ``what`` says what to set it
        to, e.g. ``"the NFS server's address, e.g. 10.0.0.5"``. Empty counts
        as missing."""
        value = self.pairs.get(key)
        if not value:
            raise ParamError(
                'missing class parameter "%s": the %s plugin needs it; set it to %s'
                % (key, self.plugin, what))
        return value

    def optional(self, key, default):
        """The value of an optional parameter, or ``default``."""
        return self.pairs.get(key, default)

    def bool(self, key, default):
        """Exactly ``"true"`` or ``"false"``, ``default`` when unset."""
        value = self.pairs.get(key)
        if value is None:
            return default
        if value in ("true", "false"):
            return value == "true"
        raise self.invalid(key, value, 'it must be "true" or "false"')

    def one_of(self, key, allowed, default=None):
        """One of ``allowed`` (case-sensitive), ``default`` when unset
        (``None``: required)."""
        value = self.pairs.get(key)
        if value is None:
            if default is not None:
                return default
            return self.required(key, "one of " + quote_list(allowed))
        if value not in allowed:
            raise self.invalid(key, value, "it must be one of " + quote_list(allowed))
        return value

    def int(self, key, default):
        """A non-negative integer, ``default`` when unset."""
        value = self.pairs.get(key)
        if value is None:
            return default
        if not value.isascii() or not value.isdigit():
            raise self.invalid(key, value, "it must be a non-negative integer")
        return int(value)

    def abs_path(self, key, default, what):
        """An absolute, normalized path (see ``path.normalize_abs``),
        ``default`` when unset (``None``: required, ``what`` describes it)."""
        value = self.pairs.get(key, default)
        if value is None:
            return self.required(key, what)
        try:
            return path.normalize_abs(value)
        except ValueError as why:
            raise self.invalid(key, value, "it must be an absolute, normalized path: %s" % why)

    def invalid(self, key, value, why):
        """A ``ParamError`` for ``key``, for checks of the plugin's own."""
        return ParamError('class parameter "%s" is %s: %s' % (key, json.dumps(value), why))

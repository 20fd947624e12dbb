// StorageClass parameters with errors that name the parameter and the fix.
// Every accessor throws a ParamError (an InvalidArgument), which
// `definePlugin` answers as `invalid-argument` from `provision` and as
// `failed` from `delete`.

import { ParamError } from './errors.js';
import { normalizeAbs } from './path.js';

/** `"a", "b", "c"`. */
export const quoteList = (items) => items.map((item) => JSON.stringify(item)).join(', ');

/** A plugin's view of the class parameters: `request.storageClass.parameters`
 * in `provision`, `request.parameters` in `delete` (a list of `[key, value]`
 * pairs). `plugin` names the plugin in messages. */
export class Params {
  constructor(plugin, pairs) {
    this.plugin = plugin;
    this.pairs = new Map(pairs);
  }

  /** The raw value of `key`, or `undefined`. */
  get(key) {
    return this.pairs.get(key);
  }

  /** Throws if any parameter is not in `known`: an operator's typo is
   * reported instead of ignored. */
  rejectUnknown(known) {
    const unknown = [...this.pairs.keys()].filter((k) => !known.includes(k)).sort();
    if (unknown.length > 0) {
      throw new ParamError(`unknown class parameter${unknown.length === 1 ? '' : 's'} `
        + `${quoteList(unknown)}: the ${this.plugin} plugin accepts only `
        + `${known.length > 0 ? quoteList(known) : 'none'} (parameter names are case-sensitive)`);
    }
  }

  /** The value of a required parameter; `what` says what to set it to, e.g.
   * "the NFS server's address, e.g. 10.0.0.5". Empty counts as missing. */
  required(key, what) {
    const value = this.pairs.get(key);
    if (!value) {
      throw new ParamError(`missing class parameter "${key}": the ${this.plugin} plugin needs it; `
        + `set it to ${what}`);
    }
    return value;
  }

  /** The value of an optional parameter, or `fallback`. */
  optional(key, fallback) {
    return this.pairs.get(key) ?? fallback;
  }

  /** Exactly "true" or "false", `fallback` when unset. */
  bool(key, fallback) {
    const value = this.pairs.get(key);
    if (value === undefined) return fallback;
    if (value === 'true' || value === 'false') return value === 'true';
    throw this.invalid(key, value, 'it must be "true" or "false"');
  }

  /** One of `allowed` (case-sensitive), `fallback` when unset (none: required). */
  oneOf(key, allowed, fallback) {
    const value = this.pairs.get(key);
    if (value === undefined) {
      return fallback !== undefined ? fallback : this.required(key, `one of ${quoteList(allowed)}`);
    }
    if (!allowed.includes(value)) throw this.invalid(key, value, `it must be one of ${quoteList(allowed)}`);
    return value;
  }

  /** A non-negative integer (a BigInt, as WIT's u64), `fallback` when unset. */
  integer(key, fallback) {
    const value = this.pairs.get(key);
    if (value === undefined) return fallback;
    if (!/^[0-9]+$/.test(value)) throw this.invalid(key, value, 'it must be a non-negative integer');
    return BigInt(value);
  }

  /** An absolute, normalized path (see `normalizeAbs`), `fallback` when unset
   * (none: required, `what` describes it). */
  absPath(key, fallback, what) {
    const value = this.pairs.get(key) ?? fallback;
    if (value === undefined) return this.required(key, what);
    try {
      return normalizeAbs(value);
    } catch (why) {
      throw this.invalid(key, value, `it must be an absolute, normalized path: ${why.message}`);
    }
  }

  /** A ParamError for `key`, for checks of the plugin's own. */
  invalid(key, value, why) {
    return new ParamError(`class parameter "${key}" is ${JSON.stringify(value)}: ${why}`);
  }
}

// The answers a plugin gives instead of a volume, as exceptions. Throw one
// from `provision` or `delete`; `definePlugin` turns it into the WIT error
// variant of the same name, which tells the host what to do next (see
// `provision-error` and `delete-error` in the WIT file). The message is what
// the host records in the claim's or the volume's events.

export class PluginError extends Error {
  get name() {
    return this.constructor.name;
  }
}

/** The request can never succeed as it is (a missing or invalid class
 * parameter, a zero size, a block claim...): nothing was created; the host
 * reports it and retries only slowly. From `delete` it becomes `failed`. */
export class InvalidArgument extends PluginError {}

/** Nothing was created (or deleted) and trying again may help. */
export class Failed extends PluginError {}

/** `provision` only: the backend may still be creating the volume; the host
 * calls `provision` again until it gets a final answer. */
export class InBackground extends PluginError {}

/** `provision` only: nothing changed since the last attempt; the host
 * retries later without a new event. */
export class NoChange extends PluginError {}

/** `provision` only: the selected node cannot hold this volume; the host
 * asks the scheduler to pick another node. */
export class Reschedule extends PluginError {}

/** `delete` only: this plugin does not own the volume (e.g. it lives on
 * another node); the host leaves it alone without an error event. */
export class Ignored extends PluginError {}

/** A class parameter that cannot be used; the message names it and the fix.
 * From `delete` (parameters recorded on the volume) it becomes `failed`. */
export class ParamError extends InvalidArgument {}

const PROVISION = new Map([
  [InvalidArgument, 'invalid-argument'],
  [Failed, 'failed'],
  [InBackground, 'in-background'],
  [NoChange, 'no-change'],
  [Reschedule, 'reschedule'],
]);
const DELETE = new Map([
  [Failed, 'failed'],
  [Ignored, 'ignored'],
]);

/** The WIT error (`{ tag, val }`, as componentize-js expects it thrown) that
 * answers `error` from the hook `hook` ('provision' or 'delete'). */
export function witError(hook, error) {
  const variants = hook === 'provision' ? PROVISION : DELETE;
  for (let cls = error.constructor; cls && cls !== PluginError; cls = Object.getPrototypeOf(cls)) {
    if (variants.has(cls)) {
      return { tag: variants.get(cls), val: error.message };
    }
  }
  // An answer this hook cannot give (e.g. InvalidArgument from delete): a
  // failure, saying what was wrong.
  const val = error instanceof ParamError
    ? `the volume's recorded class parameters are unusable: ${error.message}`
    : error.message;
  return { tag: 'failed', val };
}

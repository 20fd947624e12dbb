// Helpers for writing wasmprov plugins in C: class parameters, claim checks,
// safe paths, volume sources (JSON-escaped), answers and logging, over the
// bindings wit-bindgen generates for the `provisioner` world
// (bindings/provisioner.h). The same checks and messages as the Rust,
// Python and JavaScript SDKs.
//
// Conventions: a function that can fail returns false and writes why into
// a `wp_error_t`; a `char *` it returns is malloc'd and the caller frees it.
// Files: plain POSIX calls (mkdir, open, unlink...) work in the directories
// the operator's sandbox policy preopens for the plugin, and nowhere else.
#ifndef WASMPROV_PLUGIN_H
#define WASMPROV_PLUGIN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "provisioner.h"

typedef provisioner_string_t wp_string_t;
// Class parameters (`storage_class.parameters`, or a delete request's
// recorded `parameters`): a list of key/value pairs.
typedef provisioner_list_tuple2_string_string_t wp_params_t;
typedef exports_wasmprov_provisioner_plugin_provision_request_t wp_provision_request_t;
typedef exports_wasmprov_provisioner_plugin_delete_request_t wp_delete_request_t;
typedef exports_wasmprov_provisioner_plugin_volume_t wp_volume_t;
typedef exports_wasmprov_provisioner_plugin_provision_error_t wp_provision_error_t;
typedef exports_wasmprov_provisioner_plugin_delete_error_t wp_delete_error_t;

// Why a helper failed: a message for the claim's or volume's events.
typedef struct {
    char message[1024];
} wp_error_t;

// The answers of `provision` other than a volume (see provision-error in the
// WIT file) and of `delete`.
#define WP_FAILED WASMPROV_PROVISIONER_TYPES_PROVISION_ERROR_FAILED
#define WP_IN_BACKGROUND WASMPROV_PROVISIONER_TYPES_PROVISION_ERROR_IN_BACKGROUND
#define WP_NO_CHANGE WASMPROV_PROVISIONER_TYPES_PROVISION_ERROR_NO_CHANGE
#define WP_RESCHEDULE WASMPROV_PROVISIONER_TYPES_PROVISION_ERROR_RESCHEDULE
#define WP_INVALID_ARGUMENT WASMPROV_PROVISIONER_TYPES_PROVISION_ERROR_INVALID_ARGUMENT
#define WP_DELETE_FAILED WASMPROV_PROVISIONER_TYPES_DELETE_ERROR_FAILED
#define WP_DELETE_IGNORED WASMPROV_PROVISIONER_TYPES_DELETE_ERROR_IGNORED

// --- strings ---------------------------------------------------------------

// A NUL-terminated copy of a WIT string (malloc'd); NULL if it holds a NUL.
char *wp_cstr(const wp_string_t *s);
bool wp_str_eq(const wp_string_t *s, const char *c);
// `"…"`: `s` as a JSON string, quotes included (malloc'd).
char *wp_json_string(const char *s);

// --- class parameters ------------------------------------------------------

// The value of `key` (malloc'd), or NULL when it is not set.
char *wp_param(const wp_params_t *params, const char *key);
// Fails naming every parameter not in `known` (an operator's typo is
// reported instead of ignored).
bool wp_reject_unknown(const char *plugin, const wp_params_t *params, const char *const *known,
                       size_t known_len, wp_error_t *err);
// The value of a required parameter (empty counts as missing); `what` says
// what to set it to, e.g. "the NFS server's address, e.g. 10.0.0.5".
bool wp_param_required(const char *plugin, const wp_params_t *params, const char *key,
                       const char *what, char **out, wp_error_t *err);
// An absolute, normalized path (no trailing slash, no ".", ".." or empty
// components), `fallback` when unset (NULL: required, `what` describes it).
bool wp_param_abs_path(const char *plugin, const wp_params_t *params, const char *key,
                       const char *fallback, const char *what, char **out, wp_error_t *err);

// --- claims ----------------------------------------------------------------

// Checks a claim for a plugin that makes empty filesystem volumes: a size
// above 0, access modes, `volumeMode: Filesystem`, no data source, no
// selector, and a PV name that is one safe directory name. Sets `*size`.
bool wp_check_filesystem_claim(const char *plugin, const wp_provision_request_t *request,
                               uint64_t *size, wp_error_t *err);

// --- paths and files -------------------------------------------------------

// `value` normalized (see wp_param_abs_path), or false saying why.
bool wp_normalize_abs(const char *value, char **out, wp_error_t *err);
// `root/name` (malloc'd) if `name` is one safe component: not empty, "." or
// "..", without "/" or control characters, at most 255 bytes.
bool wp_join(const char *root, const char *name, char **out, wp_error_t *err);
// Whether `path` is a directory (symbolic links are not followed).
bool wp_is_dir(const char *path);
// Removes `path` and everything in it: 0, or the errno of the first failure
// (ENOENT when nothing was there).
int wp_remove_all(const char *path);

// --- volumes and sources ---------------------------------------------------

// `{"hostPath":{"path":…,"type":…}}` (malloc'd); `type` may be NULL.
char *wp_source_host_path(const char *path, const char *type);
// `{"nfs":{"server":…,"path":…}}` (malloc'd), with `readOnly` when true.
char *wp_source_nfs(const char *server, const char *path, bool read_only);
// Fills `ret` with a volume of `capacity_bytes` reached through `source`
// (taken: freed with the volume), nothing else set.
void wp_volume(wp_volume_t *ret, uint64_t capacity_bytes, char *source);

// --- answers and logging ---------------------------------------------------

// Sets `*err` to the variant `tag` (WP_INVALID_ARGUMENT...) with a formatted
// message; returns false, for `return wp_provision_error(err, ...);`.
bool wp_provision_error(wp_provision_error_t *err, uint8_t tag, const char *format, ...)
    __attribute__((format(printf, 3, 4)));
// The same for delete (WP_DELETE_FAILED or WP_DELETE_IGNORED).
bool wp_delete_error(wp_delete_error_t *err, uint8_t tag, const char *format, ...)
    __attribute__((format(printf, 3, 4)));
// One line in the host's log with one key/value field (key may be NULL).
void wp_log_info(const char *message, const char *key, const char *value);

#endif

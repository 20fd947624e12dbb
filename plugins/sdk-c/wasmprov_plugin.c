// See wasmprov_plugin.h.
#include "wasmprov_plugin.h"

#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

// The bindings are generated without wit-bindgen's type-information object
// (`--no-object-file`): the world is embedded by `wasmprov plugin
// componentize --wit`. This is the symbol that object would define.
void __component_type_object_force_link_provisioner(void) {}

static void *checked(void *p) {
    if (p == NULL) abort();
    return p;
}

static bool fail(wp_error_t *err, const char *format, ...) __attribute__((format(printf, 2, 3)));
static bool fail(wp_error_t *err, const char *format, ...) {
    va_list ap;
    va_start(ap, format);
    vsnprintf(err->message, sizeof err->message, format, ap);
    va_end(ap);
    return false;
}

static bool has_control(const char *s) {
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p < 0x20 || *p == 0x7f) return true;
    }
    return false;
}

// --- strings ---------------------------------------------------------------

char *wp_cstr(const wp_string_t *s) {
    if (memchr(s->ptr, 0, s->len) != NULL) return NULL;
    char *out = checked(malloc(s->len + 1));
    memcpy(out, s->ptr, s->len);
    out[s->len] = 0;
    return out;
}

bool wp_str_eq(const wp_string_t *s, const char *c) {
    size_t n = strlen(c);
    return s->len == n && memcmp(s->ptr, c, n) == 0;
}

char *wp_json_string(const char *s) {
    size_t n = strlen(s);
    char *out = checked(malloc(n * 6 + 3)), *o = out;
    *o++ = '"';
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\') {
            *o++ = '\\';
            *o++ = (char)*p;
        } else if (*p < 0x20) {
            o += sprintf(o, "\\u%04x", *p);
        } else {
            *o++ = (char)*p;
        }
    }
    *o++ = '"';
    *o = 0;
    return out;
}

// --- class parameters ------------------------------------------------------

char *wp_param(const wp_params_t *params, const char *key) {
    for (size_t i = 0; i < params->len; i++) {
        if (wp_str_eq(&params->ptr[i].f0, key)) return wp_cstr(&params->ptr[i].f1);
    }
    return NULL;
}

static int compare_strings(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

// Appends `"item"` (with ", " between items) to `buf`.
static void append_quoted(char *buf, size_t size, const char *item, bool first) {
    size_t used = strlen(buf);
    snprintf(buf + used, size - used, "%s\"%s\"", first ? "" : ", ", item);
}

bool wp_reject_unknown(const char *plugin, const wp_params_t *params, const char *const *known,
                       size_t known_len, wp_error_t *err) {
    char **unknown = checked(calloc(params->len + 1, sizeof *unknown));
    size_t count = 0;
    for (size_t i = 0; i < params->len; i++) {
        bool found = false;
        for (size_t k = 0; k < known_len && !found; k++) {
            found = wp_str_eq(&params->ptr[i].f0, known[k]);
        }
        if (!found) {
            char *key = wp_cstr(&params->ptr[i].f0);
            unknown[count++] = key ? key : strdup("(a name with a NUL byte)");
        }
    }
    if (count == 0) {
        free(unknown);
        return true;
    }
    qsort(unknown, count, sizeof *unknown, compare_strings);
    char keys[512] = "", accepted[512] = "";
    for (size_t i = 0; i < count; i++) append_quoted(keys, sizeof keys, unknown[i], i == 0);
    for (size_t k = 0; k < known_len; k++) append_quoted(accepted, sizeof accepted, known[k], k == 0);
    fail(err,
         "unknown class parameter%s %s: the %s plugin accepts only %s (parameter names are "
         "case-sensitive)",
         count == 1 ? "" : "s", keys, plugin, known_len ? accepted : "none");
    for (size_t i = 0; i < count; i++) free(unknown[i]);
    free(unknown);
    return false;
}

bool wp_param_required(const char *plugin, const wp_params_t *params, const char *key,
                       const char *what, char **out, wp_error_t *err) {
    char *value = wp_param(params, key);
    if (value == NULL || value[0] == 0) {
        free(value);
        return fail(err, "missing class parameter \"%s\": the %s plugin needs it; set it to %s",
                    key, plugin, what);
    }
    *out = value;
    return true;
}

bool wp_param_abs_path(const char *plugin, const wp_params_t *params, const char *key,
                       const char *fallback, const char *what, char **out, wp_error_t *err) {
    char *value = wp_param(params, key);
    if (value == NULL) {
        if (fallback == NULL) return wp_param_required(plugin, params, key, what, out, err);
        value = checked(strdup(fallback));
    }
    wp_error_t why;
    bool ok = wp_normalize_abs(value, out, &why);
    if (!ok) {
        char *shown = wp_json_string(value);
        fail(err, "class parameter \"%s\" is %s: it must be an absolute, normalized path: %s", key,
             shown, why.message);
        free(shown);
    }
    free(value);
    return ok;
}

// --- claims ----------------------------------------------------------------

static bool good_pv_name(const char *s) {
    size_t n = strlen(s);
    if (n == 0 || n > 253) return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        bool alnum = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
        if (!alnum && (i == 0 || i == n - 1 || (c != '-' && c != '.'))) return false;
    }
    return true;
}

bool wp_check_filesystem_claim(const char *plugin, const wp_provision_request_t *request,
                               uint64_t *size, wp_error_t *err) {
    const wasmprov_provisioner_types_claim_t *claim = &request->claim;
    if (claim->requested_bytes == 0)
        return fail(err, "the claim requests 0 bytes: set spec.resources.requests.storage to a "
                         "positive size");
    if (claim->access_modes.len == 0)
        return fail(err, "the claim has no access modes: set spec.accessModes, e.g. "
                         "[ReadWriteOnce]");
    if (claim->volume_mode == WASMPROV_PROVISIONER_TYPES_VOLUME_MODE_BLOCK)
        return fail(err,
                    "the claim asks for a block volume (volumeMode: Block); the %s plugin only "
                    "provides filesystem volumes",
                    plugin);
    if (claim->data_source.is_some)
        return fail(err,
                    "the claim wants its data copied from %.*s \"%.*s\"; the %s plugin cannot "
                    "pre-populate volumes (no snapshots or cloning)",
                    (int)claim->data_source.val.kind.len, (const char *)claim->data_source.val.kind.ptr,
                    (int)claim->data_source.val.name.len, (const char *)claim->data_source.val.name.ptr,
                    plugin);
    if (claim->selector.is_some)
        return fail(err,
                    "the claim has a spec.selector; the %s plugin cannot select among existing "
                    "volumes: remove the selector",
                    plugin);
    char *pv = wp_cstr(&request->pv_name);
    bool good = pv != NULL && good_pv_name(pv);
    if (!good) {
        fail(err,
             "invalid volume name \"%s\": it must be a lowercase DNS name "
             "([a-z0-9]([-a-z0-9.]*[a-z0-9])?, at most 253 characters) so that it is a single "
             "directory name under the root",
             pv ? pv : "(contains NUL)");
    }
    free(pv);
    *size = claim->requested_bytes;
    return good;
}

// --- paths and files -------------------------------------------------------

bool wp_normalize_abs(const char *value, char **out, wp_error_t *err) {
    if (value[0] != '/') return fail(err, "it does not start with /");
    if (has_control(value)) return fail(err, "it contains control characters");
    size_t n = strlen(value);
    while (n > 1 && value[n - 1] == '/') n--;
    if (n == 1) {
        *out = checked(strdup("/"));
        return true;
    }
    // Each component, between slashes, must be neither empty, "." nor "..".
    for (size_t start = 1; start <= n;) {
        size_t end = start;
        while (end < n && value[end] != '/') end++;
        size_t len = end - start;
        if (len == 0) return fail(err, "it contains an empty component (//)");
        if ((len == 1 && value[start] == '.') ||
            (len == 2 && value[start] == '.' && value[start + 1] == '.'))
            return fail(err, "it contains a . or .. component");
        start = end + 1;
    }
    *out = checked(strndup(value, n));
    return true;
}

bool wp_join(const char *root, const char *name, char **out, wp_error_t *err) {
    const char *why = NULL;
    if (name[0] == 0) why = "it is empty";
    else if (strcmp(name, ".") == 0 || strcmp(name, "..") == 0) why = "it is . or ..";
    else if (strchr(name, '/') != NULL) why = "it contains /";
    else if (has_control(name)) why = "it contains control characters";
    else if (strlen(name) > 255) why = "it is longer than 255 bytes";
    if (why != NULL) return fail(err, "\"%s\" is not a single safe file name: %s", name, why);
    size_t size = strlen(root) + strlen(name) + 2;
    *out = checked(malloc(size));
    snprintf(*out, size, "%s/%s", strcmp(root, "/") == 0 ? "" : root, name);
    return true;
}

bool wp_is_dir(const char *path) {
    struct stat st;
    return lstat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

int wp_remove_all(const char *path) {
    struct stat st;
    if (lstat(path, &st) != 0) return errno;
    if (!S_ISDIR(st.st_mode)) return unlink(path) == 0 ? 0 : errno;
    DIR *dir = opendir(path);
    if (dir == NULL) return errno;
    int result = 0;
    struct dirent *entry;
    while (result == 0 && (entry = readdir(dir)) != NULL) {
        if (strcmp(entry->d_name, ".") == 0 || strcmp(entry->d_name, "..") == 0) continue;
        size_t size = strlen(path) + strlen(entry->d_name) + 2;
        char *child = checked(malloc(size));
        snprintf(child, size, "%s/%s", path, entry->d_name);
        result = wp_remove_all(child);
        free(child);
    }
    closedir(dir);
    if (result != 0) return result;
    return rmdir(path) == 0 ? 0 : errno;
}

// --- volumes and sources ---------------------------------------------------

char *wp_source_host_path(const char *path, const char *type) {
    char *p = wp_json_string(path), *t = type ? wp_json_string(type) : NULL;
    size_t size = strlen(p) + (t ? strlen(t) : 0) + 40;
    char *out = checked(malloc(size));
    if (t) snprintf(out, size, "{\"hostPath\":{\"path\":%s,\"type\":%s}}", p, t);
    else snprintf(out, size, "{\"hostPath\":{\"path\":%s}}", p);
    free(p);
    free(t);
    return out;
}

char *wp_source_nfs(const char *server, const char *path, bool read_only) {
    char *s = wp_json_string(server), *p = wp_json_string(path);
    size_t size = strlen(s) + strlen(p) + 50;
    char *out = checked(malloc(size));
    snprintf(out, size, "{\"nfs\":{\"server\":%s,\"path\":%s%s}}", s, p,
             read_only ? ",\"readOnly\":true" : "");
    free(s);
    free(p);
    return out;
}

void wp_volume(wp_volume_t *ret, uint64_t capacity_bytes, char *source) {
    memset(ret, 0, sizeof *ret);
    ret->capacity_bytes = capacity_bytes;
    ret->source.ptr = (uint8_t *)source;
    ret->source.len = strlen(source);
}

// --- answers and logging ---------------------------------------------------

// Every variant of provision-error and delete-error carries one string, at
// the same place: set the tag and that string.
static bool answer(uint8_t *tag_out, wp_string_t *message_out, uint8_t tag, const char *format,
                   va_list ap) {
    char buf[2048];
    vsnprintf(buf, sizeof buf, format, ap);
    *tag_out = tag;
    provisioner_string_dup(message_out, buf);
    return false;
}

bool wp_provision_error(wp_provision_error_t *err, uint8_t tag, const char *format, ...) {
    va_list ap;
    va_start(ap, format);
    answer(&err->tag, &err->val.failed, tag, format, ap);
    va_end(ap);
    return false;
}

bool wp_delete_error(wp_delete_error_t *err, uint8_t tag, const char *format, ...) {
    va_list ap;
    va_start(ap, format);
    answer(&err->tag, &err->val.failed, tag, format, ap);
    va_end(ap);
    return false;
}

void wp_log_info(const char *message, const char *key, const char *value) {
    wp_string_t msg;
    provisioner_tuple2_string_string_t field;
    provisioner_string_set(&msg, message);
    wp_params_t fields = {&field, 0};
    if (key != NULL) {
        provisioner_string_set(&field.f0, key);
        provisioner_string_set(&field.f1, value);
        fields.len = 1;
    }
    wasmprov_provisioner_logging_log(WASMPROV_PROVISIONER_LOGGING_LEVEL_INFO, &msg, &fields);
}

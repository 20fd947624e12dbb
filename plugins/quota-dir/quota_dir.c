// wasmprov plugin "quota-dir" (C): each volume is a directory
// <hostRoot>/<pv-name> holding a `.quota` file with the volume's size in
// bytes, for a node agent (or an XFS/ext4 project-quota job) to enforce. The
// plugin works through a read-write preopen of hostRoot at `root` (default
// /volumes) and returns a hostPath source.
//
// Class parameters: hostRoot (required), root (default /volumes), maxBytes
// (optional upper bound per volume, in bytes). Unknown parameters are
// rejected. See plugins/README.md.

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "provisioner.h"

#define PLUGIN "quota-dir"
#define DEFAULT_ROOT "/volumes"
#define QUOTA_FILE ".quota"
#define QUOTA_ANNOTATION "quota-dir/quota-bytes"
// Quotas are kept in whole MiB: the capacity is the request rounded up.
#define GRANULARITY (1024ull * 1024ull)
#define MAX_NAME 253
#define MSG 1536

typedef provisioner_string_t str_t;
typedef provisioner_list_tuple2_string_string_t map_t;

// --- small helpers -------------------------------------------------------

// A NUL-terminated copy of a WIT string; NULL if it holds a NUL byte.
static char *cstr(const str_t *s) {
    if (memchr(s->ptr, 0, s->len) != NULL) return NULL;
    char *out = malloc(s->len + 1);
    if (out == NULL) abort();
    memcpy(out, s->ptr, s->len);
    out[s->len] = 0;
    return out;
}

static bool str_eq(const str_t *s, const char *c) {
    size_t n = strlen(c);
    return s->len == n && memcmp(s->ptr, c, n) == 0;
}

// The value of `key` in a WIT string map, as a C string (NULL: not set or
// not representable).
static char *lookup(const map_t *map, const char *key) {
    for (size_t i = 0; i < map->len; i++) {
        if (str_eq(&map->ptr[i].f0, key)) return cstr(&map->ptr[i].f1);
    }
    return NULL;
}

static void set_str(str_t *out, const char *fmt, ...) {
    char buf[MSG];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    provisioner_string_dup(out, buf);
}

static void info(const char *message, const char *key, const char *value) {
    str_t msg;
    provisioner_tuple2_string_string_t field;
    provisioner_string_set(&msg, message);
    provisioner_string_set(&field.f0, key);
    provisioner_string_set(&field.f1, value);
    map_t fields = {&field, 1};
    wasmprov_provisioner_logging_log(WASMPROV_PROVISIONER_LOGGING_LEVEL_INFO, &msg, &fields);
}

// An absolute path without ".", ".." or empty components, without quotes,
// backslashes or control characters (it goes into JSON verbatim). A trailing
// slash is removed in place.
static bool good_abs_path(char *p) {
    size_t n = strlen(p);
    if (n == 0 || p[0] != '/') return false;
    while (n > 1 && p[n - 1] == '/') p[--n] = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)p[i];
        if (c < 0x20 || c == 0x7f || c == '"' || c == '\\') return false;
    }
    const char *c = p + 1;
    while (n > 1 && *c) {
        const char *end = strchr(c, '/');
        size_t len = end ? (size_t)(end - c) : strlen(c);
        if (len == 0 || (len == 1 && c[0] == '.') || (len == 2 && c[0] == '.' && c[1] == '.'))
            return false;
        c = end ? end + 1 : c + len;
    }
    return true;
}

// A lowercase DNS name: one safe directory name, never "." or "..".
static bool good_pv_name(const char *s) {
    size_t n = strlen(s);
    if (n == 0 || n > MAX_NAME) return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        bool alnum = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
        if (!alnum && !((c == '-' || c == '.') && i > 0 && i < n - 1)) return false;
    }
    return true;
}

static char *join(const char *dir, const char *name) {
    size_t n = strlen(dir) + strlen(name) + 2;
    char *out = malloc(n);
    if (out == NULL) abort();
    snprintf(out, n, "%s/%s", strcmp(dir, "/") == 0 ? "" : dir, name);
    return out;
}

static bool is_dir(const char *path) {
    struct stat st;
    return lstat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

// --- parameters ------------------------------------------------------------

typedef struct {
    char *host_root;
    char *root;
    unsigned long long max_bytes;  // 0: no limit
} params_t;

static const char *const KNOWN[] = {"hostRoot", "root", "maxBytes"};

// Parses class parameters; on error writes a message to `msg` and returns false.
static bool parse_params(const map_t *map, bool strict, params_t *p, char *msg) {
    if (strict) {
        for (size_t i = 0; i < map->len; i++) {
            bool known = false;
            for (size_t k = 0; k < sizeof KNOWN / sizeof KNOWN[0]; k++)
                known = known || str_eq(&map->ptr[i].f0, KNOWN[k]);
            if (!known) {
                snprintf(msg, MSG,
                         "unknown class parameter \"%.*s\": the " PLUGIN
                         " plugin accepts only \"hostRoot\", \"root\", \"maxBytes\" "
                         "(parameter names are case-sensitive)",
                         (int)map->ptr[i].f0.len, (const char *)map->ptr[i].f0.ptr);
                return false;
            }
        }
    }
    p->host_root = lookup(map, "hostRoot");
    if (p->host_root == NULL || p->host_root[0] == 0) {
        snprintf(msg, MSG,
                 "missing class parameter \"hostRoot\": the " PLUGIN
                 " plugin needs it; set it to the absolute directory on the node under "
                 "which volumes are created, e.g. hostRoot: /var/lib/wasmprov/quota");
        return false;
    }
    if (!good_abs_path(p->host_root) || strcmp(p->host_root, "/") == 0) {
        snprintf(msg, MSG,
                 "class parameter \"hostRoot\" is \"%s\": it must be an absolute, normalized "
                 "path other than / (no . or .. components, quotes or backslashes)",
                 p->host_root);
        return false;
    }
    p->root = lookup(map, "root");
    if (p->root == NULL) p->root = strdup(DEFAULT_ROOT);
    if (!good_abs_path(p->root)) {
        snprintf(msg, MSG,
                 "class parameter \"root\" is \"%s\": it must be the absolute guest path "
                 "where the sandbox policy preopens hostRoot, e.g. /volumes",
                 p->root);
        return false;
    }
    p->max_bytes = 0;
    char *max = lookup(map, "maxBytes");
    if (max != NULL) {
        char *end = NULL;
        errno = 0;
        unsigned long long v = strtoull(max, &end, 10);
        if (max[0] < '0' || max[0] > '9' || *end != 0 || errno != 0 || v == 0) {
            snprintf(msg, MSG,
                     "class parameter \"maxBytes\" is \"%s\": it must be a positive number "
                     "of bytes, e.g. \"10737418240\" for 10Gi",
                     max);
            free(max);
            return false;
        }
        p->max_bytes = v;
        free(max);
    }
    return true;
}

static const char *hint(const params_t *p) {
    static char buf[512];
    snprintf(buf, sizeof buf,
             "does the sandbox policy preopen hostRoot read-write at %s? (class parameter "
             "\"root\", default " DEFAULT_ROOT ")",
             p->root);
    return buf;
}

// --- provision -------------------------------------------------------------

// Writes the quota file atomically (temporary file, then rename), unless it
// already holds exactly this size.
static int write_quota(const char *dir, unsigned long long bytes) {
    char want[32];
    int n = snprintf(want, sizeof want, "%llu\n", bytes);
    char *path = join(dir, QUOTA_FILE);
    char have[32] = {0};
    int fd = open(path, O_RDONLY);
    if (fd >= 0) {
        ssize_t got = read(fd, have, sizeof have - 1);
        close(fd);
        if (got == n && memcmp(have, want, (size_t)n) == 0) {
            free(path);
            return 0;
        }
    }
    char *tmp = join(dir, QUOTA_FILE ".tmp");
    int err = 0;
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || write(fd, want, (size_t)n) != n) err = errno ? errno : EIO;
    if (fd >= 0 && close(fd) != 0 && err == 0) err = errno;
    if (err == 0 && rename(tmp, path) != 0) err = errno;
    if (err != 0) unlink(tmp);
    free(tmp);
    free(path);
    return err;
}

static bool invalid(exports_wasmprov_provisioner_plugin_provision_error_t *err, const char *msg) {
    err->tag = WASMPROV_PROVISIONER_TYPES_PROVISION_ERROR_INVALID_ARGUMENT;
    provisioner_string_dup(&err->val.invalid_argument, msg);
    return false;
}

bool exports_wasmprov_provisioner_plugin_provision(
    exports_wasmprov_provisioner_plugin_provision_request_t *request,
    exports_wasmprov_provisioner_plugin_volume_t *ret,
    exports_wasmprov_provisioner_plugin_provision_error_t *err) {
    char msg[MSG];
    params_t p;
    if (!parse_params(&request->storage_class.parameters, true, &p, msg)) return invalid(err, msg);

    wasmprov_provisioner_types_claim_t *claim = &request->claim;
    if (claim->requested_bytes == 0)
        return invalid(err, "the claim requests 0 bytes: set spec.resources.requests.storage "
                            "to a positive size");
    if (claim->access_modes.len == 0)
        return invalid(err, "the claim has no access modes: set spec.accessModes, e.g. "
                            "[ReadWriteOnce]");
    if (claim->volume_mode == WASMPROV_PROVISIONER_TYPES_VOLUME_MODE_BLOCK)
        return invalid(err, "the claim asks for a block volume (volumeMode: Block); the " PLUGIN
                            " plugin only provides filesystem volumes");
    if (claim->data_source.is_some)
        return invalid(err, "the claim wants its data copied from a data source; the " PLUGIN
                            " plugin cannot pre-populate volumes (no snapshots or cloning)");
    if (claim->selector.is_some)
        return invalid(err, "the claim has a spec.selector; the " PLUGIN
                            " plugin cannot select among existing volumes: remove the selector");
    char *pv = cstr(&request->pv_name);
    if (pv == NULL || !good_pv_name(pv)) {
        snprintf(msg, MSG,
                 "invalid volume name \"%s\": it must be a lowercase DNS name so that it is a "
                 "single directory name under the root",
                 pv ? pv : "(contains NUL)");
        return invalid(err, msg);
    }
    unsigned long long capacity = claim->requested_bytes;
    if (capacity > ~0ull - GRANULARITY) return invalid(err, "the claim's size is too large");
    capacity = (capacity + GRANULARITY - 1) / GRANULARITY * GRANULARITY;
    if (p.max_bytes != 0 && capacity > p.max_bytes) {
        snprintf(msg, MSG,
                 "the claim asks for %llu bytes (%llu with the 1Mi quota granularity), more than "
                 "this class's maxBytes of %llu; request less or use another class",
                 (unsigned long long)claim->requested_bytes, capacity, p.max_bytes);
        return invalid(err, msg);
    }

    char *dir = join(p.root, pv);
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
        err->tag = WASMPROV_PROVISIONER_TYPES_PROVISION_ERROR_FAILED;
        set_str(&err->val.failed, "create %s: %s; %s", dir, strerror(errno), hint(&p));
        return false;
    }
    if (!is_dir(dir)) {
        err->tag = WASMPROV_PROVISIONER_TYPES_PROVISION_ERROR_FAILED;
        set_str(&err->val.failed, "%s exists but is not a directory; remove it or pick another "
                                  "hostRoot", dir);
        return false;
    }
    int e = write_quota(dir, capacity);
    if (e != 0) {
        err->tag = WASMPROV_PROVISIONER_TYPES_PROVISION_ERROR_FAILED;
        set_str(&err->val.failed, "write %s/" QUOTA_FILE ": %s; %s", dir, strerror(e), hint(&p));
        return false;
    }
    char *host_dir = join(p.host_root, pv);
    info("volume directory ready", "path", host_dir);

    memset(ret, 0, sizeof *ret);
    ret->capacity_bytes = capacity;
    set_str(&ret->source, "{\"hostPath\":{\"path\":\"%s\",\"type\":\"Directory\"}}", host_dir);
    ret->annotations.len = 1;
    ret->annotations.ptr = calloc(1, sizeof *ret->annotations.ptr);
    if (ret->annotations.ptr == NULL) abort();
    provisioner_string_dup(&ret->annotations.ptr[0].f0, QUOTA_ANNOTATION);
    set_str(&ret->annotations.ptr[0].f1, "%llu", capacity);
    return true;
}

// --- delete ------------------------------------------------------------------

// Removes a directory tree without following symlinks; 0 or an errno.
static int remove_tree(const char *path) {
    struct stat st;
    if (lstat(path, &st) != 0) return errno;
    if (!S_ISDIR(st.st_mode)) return unlink(path) == 0 ? 0 : errno;
    DIR *d = opendir(path);
    if (d == NULL) return errno;
    int e = 0;
    struct dirent *entry;
    while (e == 0 && (entry = readdir(d)) != NULL) {
        if (strcmp(entry->d_name, ".") == 0 || strcmp(entry->d_name, "..") == 0) continue;
        char *child = join(path, entry->d_name);
        e = remove_tree(child);
        if (e == ENOENT) e = 0;
        free(child);
    }
    closedir(d);
    if (e == 0 && rmdir(path) != 0) e = errno;
    return e;
}

static bool delete_failed(exports_wasmprov_provisioner_plugin_delete_error_t *err, const char *msg) {
    err->tag = WASMPROV_PROVISIONER_TYPES_DELETE_ERROR_FAILED;
    provisioner_string_dup(&err->val.failed, msg);
    return false;
}

bool exports_wasmprov_provisioner_plugin_delete(
    exports_wasmprov_provisioner_plugin_delete_request_t *request,
    exports_wasmprov_provisioner_plugin_delete_error_t *err) {
    char msg[MSG], why[MSG];
    params_t p;
    char *pv = cstr(&request->pv_name);
    if (!parse_params(&request->parameters, false, &p, why)) {
        snprintf(msg, MSG, "cannot delete volume %s: its recorded class parameters are "
                 "unusable: %s", pv ? pv : "?", why);
        return delete_failed(err, msg);
    }
    if (pv == NULL || !good_pv_name(pv)) return delete_failed(err, "refusing to delete: invalid volume name");
    // The source must name exactly <hostRoot>/<pv>: never delete anything else.
    char *host_dir = join(p.host_root, pv);
    char needle[MSG];
    snprintf(needle, sizeof needle, "\"path\":\"%s\"", host_dir);
    char *source = cstr(&request->source);
    if (source == NULL || strstr(source, "\"hostPath\"") == NULL || strstr(source, needle) == NULL) {
        snprintf(msg, MSG,
                 "refusing to delete volume %s: its source is not a hostPath at %s, where "
                 "hostRoot=%s puts it; nothing was removed",
                 pv, host_dir, p.host_root);
        return delete_failed(err, msg);
    }
    char *dir = join(p.root, pv);
    int e = remove_tree(dir);
    if (e == ENOENT) {
        // Already gone is success, but only if the root is visible at all.
        if (is_dir(p.root)) {
            info("volume directory already gone", "path", host_dir);
            return true;
        }
        snprintf(msg, MSG, "remove %s: the root %s is not visible; %s", dir, p.root, hint(&p));
        return delete_failed(err, msg);
    }
    if (e != 0) {
        snprintf(msg, MSG, "remove %s: %s; %s", dir, strerror(e), hint(&p));
        return delete_failed(err, msg);
    }
    info("removed volume directory", "path", host_dir);
    return true;
}

void exports_wasmprov_provisioner_plugin_capabilities(
    exports_wasmprov_provisioner_plugin_plugin_capabilities_t *ret) {
    ret->block_volumes = false;
}

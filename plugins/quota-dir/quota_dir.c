// wasmprov plugin "quota-dir" (C): each volume is a directory
// <hostRoot>/<pv-name> holding a `.quota` file with the volume's size in
// bytes, for a node agent (or an XFS/ext4 project-quota job) to enforce. The
// plugin works through a read-write preopen of hostRoot at `root` (default
// /volumes) and returns a hostPath source. It targets the
// `resizable-provisioner` world: `resize` grows a volume's `.quota`.
//
// Class parameters: hostRoot (required), root (default /volumes), maxBytes
// (optional upper bound per volume, in bytes), poolBytes (optional upper
// bound of the sum of the `.quota` of every volume directory under hostRoot,
// in bytes: a claim or a resize that would take the pool past it is refused).
// Unknown parameters are rejected. See plugins/README.md.
//
// The pool is checked before and again after writing a `.quota`: two calls
// that race for the last bytes of the pool cannot both win (the loser undoes
// its write and answers `failed`, so the host retries it).

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

#include "resizable_provisioner.h"

#define PLUGIN "quota-dir"
#define DEFAULT_ROOT "/volumes"
#define QUOTA_FILE ".quota"
#define QUOTA_ANNOTATION "quota-dir/quota-bytes"
// Quotas are kept in whole MiB: the capacity is the request rounded up.
#define GRANULARITY (1024ull * 1024ull)
#define MAX_NAME 253
#define MSG 1536

typedef resizable_provisioner_string_t str_t;
typedef resizable_provisioner_list_tuple2_string_string_t map_t;

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
    resizable_provisioner_string_dup(out, buf);
}

static void info(const char *message, const char *key, const char *value) {
    str_t msg;
    resizable_provisioner_tuple2_string_string_t field;
    resizable_provisioner_string_set(&msg, message);
    resizable_provisioner_string_set(&field.f0, key);
    resizable_provisioner_string_set(&field.f1, value);
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
    unsigned long long max_bytes;   // 0: no limit
    unsigned long long pool_bytes;  // 0: no limit
} params_t;

static const char *const KNOWN[] = {"hostRoot", "root", "maxBytes", "poolBytes"};

// Parses the optional byte count `key` into *out (left at 0 when not set);
// on error writes a message to `msg` and returns false.
static bool parse_bytes(const map_t *map, const char *key, const char *what,
                        unsigned long long *out, char *msg) {
    *out = 0;
    char *text = lookup(map, key);
    if (text == NULL) return true;
    char *end = NULL;
    errno = 0;
    unsigned long long v = strtoull(text, &end, 10);
    bool ok = text[0] >= '0' && text[0] <= '9' && *end == 0 && errno == 0 && v != 0;
    if (!ok)
        snprintf(msg, MSG,
                 "class parameter \"%s\" is \"%s\": it must be a positive number of bytes (%s), "
                 "e.g. \"10737418240\" for 10Gi",
                 key, text, what);
    else
        *out = v;
    free(text);
    return ok;
}

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
                         " plugin accepts only \"hostRoot\", \"root\", \"maxBytes\", "
                         "\"poolBytes\" (parameter names are case-sensitive)",
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
    return parse_bytes(map, "maxBytes", "the largest volume of the class", &p->max_bytes, msg) &&
           parse_bytes(map, "poolBytes", "the most all volumes under hostRoot may hold together",
                       &p->pool_bytes, msg);
}

static const char *hint(const params_t *p) {
    static char buf[512];
    snprintf(buf, sizeof buf,
             "does the sandbox policy preopen hostRoot read-write at %s? (class parameter "
             "\"root\", default " DEFAULT_ROOT ")",
             p->root);
    return buf;
}

// --- quota files and the pool ------------------------------------------------

// `bytes` rounded up to whole MiB (GRANULARITY); false if that overflows.
static bool round_up(unsigned long long bytes, unsigned long long *out) {
    if (bytes > ~0ull - GRANULARITY) return false;
    *out = (bytes + GRANULARITY - 1) / GRANULARITY * GRANULARITY;
    return true;
}

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

// Reads `<dir>/.quota` (`shown` is the directory as messages name it): 1 with
// *bytes when it holds a size, 0 when there is none, -1 when it cannot be
// read or holds something else (then `msg` says what and what to do).
static int read_quota(const char *dir, const char *shown, unsigned long long *bytes, char *msg) {
    *bytes = 0;
    char *path = join(dir, QUOTA_FILE);
    int fd = open(path, O_RDONLY);
    free(path);
    if (fd < 0) {
        if (errno == ENOENT || errno == ENOTDIR) return 0;
        snprintf(msg, MSG, "read %s/" QUOTA_FILE ": %s", shown, strerror(errno));
        return -1;
    }
    char buf[32];
    ssize_t got = read(fd, buf, sizeof buf - 1);
    int e = errno;
    close(fd);
    if (got < 0) {
        snprintf(msg, MSG, "read %s/" QUOTA_FILE ": %s", shown, strerror(e));
        return -1;
    }
    size_t n = (size_t)got;
    buf[n] = 0;
    if (n > 0 && buf[n - 1] == '\n') buf[--n] = 0;
    char *end = NULL;
    errno = 0;
    unsigned long long v = strtoull(buf, &end, 10);
    if (n == 0 || buf[0] < '0' || buf[0] > '9' || *end != 0 || errno != 0) {
        snprintf(msg, MSG,
                 "%s/" QUOTA_FILE " does not hold a size in bytes; write the volume's size into "
                 "it (a decimal number of bytes, as the " PLUGIN " plugin writes it)",
                 shown);
        return -1;
    }
    *bytes = v;
    return 1;
}

// Puts a volume's quota file back as it was before this call wrote it: the
// size `before`, or no file when it had none.
static void restore_quota(const char *dir, bool had, unsigned long long before) {
    if (had) {
        write_quota(dir, before);
    } else {
        char *path = join(dir, QUOTA_FILE);
        unlink(path);
        free(path);
    }
}

static unsigned long long add_sat(unsigned long long a, unsigned long long b) {
    return a > ~0ull - b ? ~0ull : a + b;
}

// The sum of the quotas of every volume directory under the root, except
// `skip` (NULL: none), in *total. Entries without a quota file are not
// volumes and count for nothing. False, with `msg`, when the root or a quota
// file cannot be read.
static bool pool_usage(const params_t *p, const char *skip, unsigned long long *total, char *msg) {
    char why[MSG];
    *total = 0;
    DIR *d = opendir(p->root);
    if (d == NULL) {
        snprintf(msg, MSG,
                 "cannot add up the quotas under hostRoot %s (poolBytes): list %s: %s; %s",
                 p->host_root, p->root, strerror(errno), hint(p));
        return false;
    }
    bool ok = true;
    struct dirent *entry;
    while (ok && (entry = readdir(d)) != NULL) {
        // Volume directories are DNS names: never hidden.
        if (entry->d_name[0] == '.' || (skip != NULL && strcmp(entry->d_name, skip) == 0)) continue;
        char *dir = join(p->root, entry->d_name);
        if (is_dir(dir)) {
            char *shown = join(p->host_root, entry->d_name);
            unsigned long long bytes;
            int r = read_quota(dir, shown, &bytes, why);
            if (r < 0) {
                snprintf(msg, MSG,
                         "cannot add up the quotas under hostRoot %s (poolBytes): %s", p->host_root,
                         why);
                ok = false;
            }
            if (r > 0) *total = add_sat(*total, bytes);
            free(shown);
        }
        free(dir);
    }
    closedir(d);
    return ok;
}

typedef enum { POOL_FITS, POOL_FULL, POOL_UNKNOWN } pool_check_t;

// Whether volume `pv` may hold `capacity` bytes next to the quotas of the
// other volumes under the root (their sum in *others). POOL_UNKNOWN: they
// could not be read (`msg` says why).
static pool_check_t pool_check(const params_t *p, const char *pv, unsigned long long capacity,
                               unsigned long long *others, char *msg) {
    *others = 0;
    if (p->pool_bytes == 0) return POOL_FITS;
    if (!pool_usage(p, pv, others, msg)) return POOL_UNKNOWN;
    return add_sat(*others, capacity) > p->pool_bytes ? POOL_FULL : POOL_FITS;
}

// After writing a quota: whether the pool still holds every quota (two calls
// may have checked at the same time). False with `msg` when it does not.
static bool pool_recheck(const params_t *p, char *msg) {
    unsigned long long total;
    if (p->pool_bytes == 0) return true;
    if (!pool_usage(p, NULL, &total, msg)) return false;
    if (total <= p->pool_bytes) return true;
    snprintf(msg, MSG,
             "another volume took space in the pool under hostRoot %s at the same time: the "
             "volumes would hold %llu bytes, more than poolBytes of %llu",
             p->host_root, total, p->pool_bytes);
    return false;
}

static unsigned long long pool_free(const params_t *p, unsigned long long others) {
    return others >= p->pool_bytes ? 0 : p->pool_bytes - others;
}

// "request at most N bytes, " when N, the free space of the pool rounded
// down to the granularity, is more than 0.
static const char *ask_less(const params_t *p, unsigned long long others) {
    static char buf[64];
    unsigned long long fits = pool_free(p, others) / GRANULARITY * GRANULARITY;
    if (fits == 0) return "";
    snprintf(buf, sizeof buf, "request at most %llu bytes, ", fits);
    return buf;
}

// --- provision -------------------------------------------------------------

static bool invalid(exports_wasmprov_provisioner_plugin_provision_error_t *err, const char *msg) {
    err->tag = WASMPROV_PROVISIONER_TYPES_PROVISION_ERROR_INVALID_ARGUMENT;
    resizable_provisioner_string_dup(&err->val.invalid_argument, msg);
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
    unsigned long long capacity;
    if (!round_up(claim->requested_bytes, &capacity))
        return invalid(err, "the claim's size is too large");
    if (p.max_bytes != 0 && capacity > p.max_bytes) {
        snprintf(msg, MSG,
                 "the claim asks for %llu bytes (%llu with the 1Mi quota granularity), more than "
                 "this class's maxBytes of %llu; request less or use another class",
                 (unsigned long long)claim->requested_bytes, capacity, p.max_bytes);
        return invalid(err, msg);
    }
    if (p.pool_bytes != 0 && capacity > p.pool_bytes) {
        snprintf(msg, MSG,
                 "the claim asks for %llu bytes (%llu with the 1Mi quota granularity), more than "
                 "the whole pool of this class (poolBytes of %llu); request less or use another "
                 "class",
                 (unsigned long long)claim->requested_bytes, capacity, p.pool_bytes);
        return invalid(err, msg);
    }

    char *dir = join(p.root, pv);
    char *host_dir = join(p.host_root, pv);
    // The pool: the other volumes' quotas plus this one must fit. A full
    // pool is not a bad request: it frees up as volumes are deleted, so the
    // host retries (failed, with backoff).
    unsigned long long others;
    switch (pool_check(&p, pv, capacity, &others, msg)) {
    case POOL_FITS:
        break;
    case POOL_UNKNOWN:
        err->tag = WASMPROV_PROVISIONER_TYPES_PROVISION_ERROR_FAILED;
        set_str(&err->val.failed, "cannot provision volume %s: %s", pv, msg);
        return false;
    case POOL_FULL:
        err->tag = WASMPROV_PROVISIONER_TYPES_PROVISION_ERROR_FAILED;
        set_str(&err->val.failed,
                "cannot provision volume %s: the pool under hostRoot %s is full: its other "
                "volumes hold %llu bytes of this class's poolBytes of %llu, %llu bytes are free, "
                "and the claim needs %llu (%llu requested, rounded up to whole MiB); %sdelete "
                "volumes that are no longer needed or raise poolBytes",
                pv, p.host_root, others, p.pool_bytes, pool_free(&p, others), capacity,
                (unsigned long long)claim->requested_bytes, ask_less(&p, others));
        return false;
    }
    unsigned long long before = 0;
    bool had_quota = p.pool_bytes != 0 && read_quota(dir, host_dir, &before, msg) > 0;

    bool created = mkdir(dir, 0755) == 0;
    if (!created && errno != EEXIST) {
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
    if (!pool_recheck(&p, msg)) {
        restore_quota(dir, had_quota, before);
        if (created) rmdir(dir);
        err->tag = WASMPROV_PROVISIONER_TYPES_PROVISION_ERROR_FAILED;
        set_str(&err->val.failed, "cannot provision volume %s: %s; nothing was kept, the host "
                                  "retries", pv, msg);
        return false;
    }
    info("volume directory ready", "path", host_dir);

    memset(ret, 0, sizeof *ret);
    ret->capacity_bytes = capacity;
    set_str(&ret->source, "{\"hostPath\":{\"path\":\"%s\",\"type\":\"Directory\"}}", host_dir);
    ret->annotations.len = 1;
    ret->annotations.ptr = calloc(1, sizeof *ret->annotations.ptr);
    if (ret->annotations.ptr == NULL) abort();
    resizable_provisioner_string_dup(&ret->annotations.ptr[0].f0, QUOTA_ANNOTATION);
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

// Whether a volume source (JSON) is a hostPath at exactly `host_dir`.
static bool source_is(const str_t *json, const char *host_dir) {
    char needle[MSG];
    snprintf(needle, sizeof needle, "\"path\":\"%s\"", host_dir);
    char *source = cstr(json);
    bool ok = source != NULL && strstr(source, "\"hostPath\"") != NULL &&
              strstr(source, needle) != NULL;
    free(source);
    return ok;
}

static bool delete_failed(exports_wasmprov_provisioner_plugin_delete_error_t *err, const char *msg) {
    err->tag = WASMPROV_PROVISIONER_TYPES_DELETE_ERROR_FAILED;
    resizable_provisioner_string_dup(&err->val.failed, msg);
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
    if (!source_is(&request->source, host_dir)) {
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

// --- resize ------------------------------------------------------------------

typedef exports_wasmprov_provisioner_resizer_resize_error_t resize_error_t;

__attribute__((format(printf, 3, 4)))
static bool resize_error(resize_error_t *err, uint8_t tag, const char *fmt, ...) {
    char buf[MSG];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    err->tag = tag;
    str_t *out;
    switch (tag) {
    case WASMPROV_PROVISIONER_TYPES_RESIZE_ERROR_INVALID_ARGUMENT:
        out = &err->val.invalid_argument;
        break;
    case WASMPROV_PROVISIONER_TYPES_RESIZE_ERROR_INFEASIBLE:
        out = &err->val.infeasible;
        break;
    default:
        err->tag = WASMPROV_PROVISIONER_TYPES_RESIZE_ERROR_FAILED;
        out = &err->val.failed;
    }
    resizable_provisioner_string_dup(out, buf);
    return false;
}

// The most a volume of `current` bytes can be asked to hold when `bound`
// bytes are allowed: `bound` rounded down to the granularity, but never
// less than what it holds already (asking for that always succeeds).
static unsigned long long room(unsigned long long bound, unsigned long long current) {
    unsigned long long fits = bound / GRANULARITY * GRANULARITY;
    return fits > current ? fits : current;
}

#define RESIZE_FAILED WASMPROV_PROVISIONER_TYPES_RESIZE_ERROR_FAILED
#define RESIZE_INVALID WASMPROV_PROVISIONER_TYPES_RESIZE_ERROR_INVALID_ARGUMENT
#define RESIZE_INFEASIBLE WASMPROV_PROVISIONER_TYPES_RESIZE_ERROR_INFEASIBLE
// Where the parameters a resize works with come from.
#define RECORDED "the class parameters the volume was provisioned with, recorded in its " \
                 "wasmprov.io/parameters annotation"

// Grows a volume's quota to the request rounded up to whole MiB; never
// shrinks it (a quota that is already large enough is a success, with its
// size). maxBytes and poolBytes bound it as they bound provisioning; the
// claim's limit is not consulted, as when provisioning.
bool exports_wasmprov_provisioner_resizer_resize(
    exports_wasmprov_provisioner_resizer_resize_request_t *request,
    exports_wasmprov_provisioner_resizer_resized_volume_t *ret,
    resize_error_t *err) {
    char why[MSG];
    params_t p;
    wasmprov_provisioner_types_delete_request_t *volume = &request->volume;
    char *pv = cstr(&volume->pv_name);
    if (!parse_params(&volume->parameters, false, &p, why))
        return resize_error(err, RESIZE_INVALID,
                            "cannot grow volume %s: %s; fix it in " RECORDED, pv ? pv : "?", why);
    if (pv == NULL || !good_pv_name(pv))
        return resize_error(err, RESIZE_INVALID,
                            "cannot grow volume \"%s\": the name must be a lowercase DNS name",
                            pv ? pv : "(contains NUL)");
    char *host_dir = join(p.host_root, pv);
    if (!source_is(&volume->source, host_dir))
        return resize_error(err, RESIZE_INVALID,
                            "cannot grow volume %s: its source is not a hostPath at %s, where "
                            "hostRoot=%s puts it, so it has no quota of the " PLUGIN
                            " plugin to grow; check " RECORDED,
                            pv, host_dir, p.host_root);
    unsigned long long requested = request->requested_bytes, capacity;
    if (!round_up(requested, &capacity))
        return resize_error(err, RESIZE_INFEASIBLE,
                            "cannot grow volume %s to %llu bytes: too large for a quota; ask for "
                            "less",
                            pv, requested);

    char *dir = join(p.root, pv);
    if (!is_dir(dir)) {
        if (!is_dir(p.root))
            return resize_error(err, RESIZE_FAILED,
                                "cannot grow volume %s: the root %s is not visible; %s", pv,
                                p.root, hint(&p));
        return resize_error(err, RESIZE_FAILED,
                            "cannot grow volume %s: its directory %s is missing, so the "
                            "volume's storage is gone (removed outside wasmprov?) and there is "
                            "nothing to grow; restore the directory, or delete the claim and "
                            "create a new one",
                            pv, host_dir);
    }
    unsigned long long current;
    int r = read_quota(dir, host_dir, &current, why);
    if (r < 0) return resize_error(err, RESIZE_FAILED, "cannot grow volume %s: %s", pv, why);
    if (r > 0 && current >= capacity) {
        // Already grown (a retry, or a request within the granularity).
        info("volume quota already large enough", "path", host_dir);
        ret->capacity_bytes = current;
        ret->node_expansion_required = false;
        return true;
    }
    if (p.max_bytes != 0 && capacity > p.max_bytes)
        return resize_error(err, RESIZE_INFEASIBLE,
                            "cannot grow volume %s to %llu bytes (%llu with the 1Mi quota "
                            "granularity): that is more than maxBytes of %llu; ask for at most "
                            "%llu bytes, or raise maxBytes in " RECORDED,
                            pv, requested, capacity, p.max_bytes,
                            room(p.max_bytes, current));
    unsigned long long others;
    switch (pool_check(&p, pv, capacity, &others, why)) {
    case POOL_FITS:
        break;
    case POOL_UNKNOWN:
        return resize_error(err, RESIZE_FAILED, "cannot grow volume %s: %s", pv, why);
    case POOL_FULL:
        return resize_error(err, RESIZE_INFEASIBLE,
                            "cannot grow volume %s to %llu bytes (%llu with the 1Mi quota "
                            "granularity): the pool under hostRoot %s would overflow: the other "
                            "volumes hold %llu bytes of poolBytes of %llu; ask for at most %llu "
                            "bytes, delete volumes that are no longer needed, or raise poolBytes "
                            "in " RECORDED,
                            pv, requested, capacity, p.host_root, others, p.pool_bytes,
                            room(pool_free(&p, others), current));
    }
    int e = write_quota(dir, capacity);
    if (e != 0)
        return resize_error(err, RESIZE_FAILED, "cannot grow volume %s: write %s/" QUOTA_FILE
                            ": %s; %s", pv, host_dir, strerror(e), hint(&p));
    if (!pool_recheck(&p, why)) {
        restore_quota(dir, r > 0, current);
        return resize_error(err, RESIZE_FAILED,
                            "cannot grow volume %s: %s; its quota was left at %llu bytes, the "
                            "host retries", pv, why, current);
    }
    char grown[32];
    snprintf(grown, sizeof grown, "%llu", capacity);
    info("grew volume quota", "quota-bytes", grown);
    ret->capacity_bytes = capacity;
    ret->node_expansion_required = false;
    return true;
}

// The {{name}} plugin for wasmprov: each volume is a directory
// `<hostRoot>/<pv-name>` on the node, served to pods as a `hostPath` volume.
//
// The plugin sees the node only through the directory the operator's
// sandbox policy preopens for it: `hostRoot` at the guest path `root`.
//
// StorageClass parameters:
// - `hostRoot` (required): the directory on the node that holds the volumes;
// - `root` (default `/volumes`): where the policy preopens `hostRoot`.
//
// Unknown parameters are refused, so that an operator's typo is reported
// instead of ignored. Change what you need: `wasmprov plugin test` says what
// the host expects of every answer.
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "wasmprov_plugin.h"

#define PLUGIN "{{name}}"
#define HOST_ROOT "hostRoot"
#define ROOT "root"
#define DEFAULT_ROOT "/volumes"
#define ROOT_WHAT "where the policy preopens hostRoot"

static const char *const KNOWN[] = {HOST_ROOT, ROOT};

void exports_wasmprov_provisioner_plugin_capabilities(
    exports_wasmprov_provisioner_plugin_plugin_capabilities_t *ret) {
    ret->block_volumes = false;
}

// Who the volume belongs to, for whoever finds it on the node.
static bool write_readme(const wp_provision_request_t *request, const char *dir, wp_error_t *err) {
    size_t size = strlen(dir) + sizeof "/README.txt";
    char *path = malloc(size);
    if (path == NULL) abort();
    snprintf(path, size, "%s/README.txt", dir);
    FILE *f = fopen(path, "w");
    bool ok = f != NULL &&
              fprintf(f, "Volume %.*s of the claim %.*s/%.*s, made by the " PLUGIN
                         " plugin of wasmprov.\n",
                      (int)request->pv_name.len, (const char *)request->pv_name.ptr,
                      (int)request->claim.namespace_.len, (const char *)request->claim.namespace_.ptr,
                      (int)request->claim.name.len, (const char *)request->claim.name.ptr) > 0;
    if (f != NULL && fclose(f) != 0) ok = false;
    if (!ok) snprintf(err->message, sizeof err->message, "write %s: %s", path, strerror(errno));
    free(path);
    return ok;
}

static bool provision(const wp_provision_request_t *request, wp_volume_t *ret,
                      wp_provision_error_t *err) {
    const wp_params_t *params = &request->storage_class.parameters;
    wp_error_t why;
    char *host_root = NULL, *root = NULL, *dir = NULL, *host_dir = NULL, *pv = NULL;
    uint64_t size;
    bool ok = false;
    if (!wp_reject_unknown(PLUGIN, params, KNOWN, 2, &why) ||
        !wp_param_abs_path(PLUGIN, params, HOST_ROOT, NULL,
                           "the directory on the node that holds the volumes, e.g. "
                           "/var/lib/{{name}}",
                           &host_root, &why) ||
        !wp_param_abs_path(PLUGIN, params, ROOT, DEFAULT_ROOT, ROOT_WHAT, &root, &why) ||
        // A size above 0, a filesystem volume, a safe pv-name.
        !wp_check_filesystem_claim(PLUGIN, request, &size, &why) ||
        (pv = wp_cstr(&request->pv_name)) == NULL || !wp_join(root, pv, &dir, &why) ||
        !wp_join(host_root, pv, &host_dir, &why)) {
        wp_provision_error(err, WP_INVALID_ARGUMENT, "%s", why.message);
        goto out;
    }
    // Asked again after a restart: the same directory is the same volume.
    if (mkdir(dir, 0755) == 0) {
        wp_log_info("created volume directory", "path", host_dir);
    } else if (errno != EEXIST || !wp_is_dir(dir)) {
        wp_provision_error(err, WP_FAILED,
                           "create %s: %s; the policy must preopen %s read-write at %s", dir,
                           strerror(errno), host_root, root);
        goto out;
    }
    if (!write_readme(request, dir, &why)) {
        wp_provision_error(err, WP_FAILED, "%s", why.message);
        goto out;
    }
    wp_volume(ret, size, wp_source_host_path(host_dir, "Directory"));
    ok = true;
out:
    free(host_root);
    free(root);
    free(dir);
    free(host_dir);
    free(pv);
    return ok;
}

static bool delete_volume(const wp_delete_request_t *request, wp_delete_error_t *err) {
    wp_error_t why;
    char *root = NULL, *dir = NULL, *pv = wp_cstr(&request->pv_name);
    bool ok = false;
    if (!wp_param_abs_path(PLUGIN, &request->parameters, ROOT, DEFAULT_ROOT, ROOT_WHAT, &root,
                           &why) ||
        pv == NULL || !wp_join(root, pv, &dir, &why)) {
        wp_delete_error(err, WP_DELETE_FAILED,
                        "the volume's recorded class parameters are unusable: %s",
                        pv == NULL ? "its name holds a NUL byte" : why.message);
        goto out;
    }
    int e = wp_remove_all(dir);
    if (e == 0) {
        wp_log_info("removed volume directory", "path", dir);
    } else if (e != ENOENT || !wp_is_dir(root)) {
        // Already gone is success (the host retries deletes), as long as the
        // root is there: a missing preopen is not a deleted volume.
        wp_delete_error(err, WP_DELETE_FAILED, "remove %s: %s", dir, strerror(e));
        goto out;
    }
    ok = true;
out:
    free(root);
    free(dir);
    free(pv);
    return ok;
}

// The exports. A request belongs to the function it is given to: free it
// when done.
bool exports_wasmprov_provisioner_plugin_provision(wp_provision_request_t *request,
                                                   wp_volume_t *ret, wp_provision_error_t *err) {
    bool ok = provision(request, ret, err);
    exports_wasmprov_provisioner_plugin_provision_request_free(request);
    return ok;
}

bool exports_wasmprov_provisioner_plugin_delete(wp_delete_request_t *request,
                                                wp_delete_error_t *err) {
    bool ok = delete_volume(request, err);
    exports_wasmprov_provisioner_plugin_delete_request_free(request);
    return ok;
}

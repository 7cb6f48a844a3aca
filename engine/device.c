/* Loading device backends from their plugins (plugin.h).  A plugin stays
 * loaded for the life of the process once it has served a model; a search
 * that finds nothing is repeated at the next load, so a plugin installed
 * meanwhile is picked up. */
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "error.h"
#include "plugin.h"

#ifndef NN_PLUGIN_DIR
#define NN_PLUGIN_DIR "/usr/local/lib"
#endif

static nn_status host_set_error(nn_status st, const char *message) { return nn_set_error(st, "%s", message); }

static const nn_plugin_host host = {
    NN_PLUGIN_HOST_SIZES,
    .set_error = host_set_error,
    .last_error = nn_last_error,
    .clear_error = nn_clear_error,
    .strerror = nn_strerror,
    .dtype_size = nn_dtype_size,
    .tensor_elements = nn_tensor_elements,
    .shape_elements = nn_shape_elements,
    .op_get = nn_op_get,
    .node_call = nn_node_call,
    .value_root = nn_value_root,
    .check_memory_limit = nn_check_memory_limit,
    .axis_normalize = nn_axis_normalize,
    .broadcast_strides = nn_broadcast_strides,
    .conv_resolve = nn_conv_resolve,
    .pool_resolve = nn_pool_resolve,
    .softmax_view = nn_softmax_view,
    .reduce_mask = nn_reduce_mask,
    .transpose_perm = nn_transpose_perm,
    .resize_taps = nn_resize_taps,
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static const nn_backend *cuda; /* once loaded */

/* The folder of the object holding libnn: libnn.so, or the program that
 * linked libnn.a.  False when it cannot be told. */
static bool own_folder(char *dir, size_t size) {
    Dl_info info;
    if (!dladdr((void *)&host, &info) || !info.dli_fname || !info.dli_fname[0]) return false;
    char path[PATH_MAX];
    if (!realpath(info.dli_fname, path)) return false;
    char *slash = strrchr(path, '/');
    if (!slash) return false;
    *slash = 0;
    return snprintf(dir, size, "%s", path) < (int)size;
}

/* Open the plugin at `path` and take its backend. */
static nn_status open_plugin(const char *device, const char *path, const nn_backend **out) {
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!lib)
        return nn_set_error(NN_ERR_DEVICE, "device '%s' is not available: cannot load the CUDA plugin: %s", device,
                            dlerror());
    nn_plugin_entry_fn entry;
    *(void **)&entry = dlsym(lib, NN_PLUGIN_ENTRY);
    char why[256] = "it has no " NN_PLUGIN_ENTRY;
    const nn_backend *b = entry ? entry(&host, why, sizeof why) : NULL;
    if (!b) {
        dlclose(lib);
        return nn_set_error(NN_ERR_DEVICE, "device '%s' is not available: the CUDA plugin '%s' does not fit: %s",
                            device, path, why);
    }
    *out = b; /* the library stays loaded: models hold its backend */
    return NN_OK;
}

/* Where the CUDA plugin is: $NN_CUDA_PLUGIN, else beside libnn, else the
 * install's lib folder.  Returns false with `where` naming the folders
 * searched (or the missing file NN_CUDA_PLUGIN names). */
static bool find_plugin(char *path, size_t size, char *where, size_t where_size, bool *named_missing) {
    const char *named = getenv("NN_CUDA_PLUGIN");
    char here[PATH_MAX];
    bool near = own_folder(here, sizeof here);
    *named_missing = false;
    if (named && named[0]) {
        snprintf(path, size, "%s", named);
        snprintf(where, where_size, "%s", named);
        *named_missing = access(named, F_OK) != 0;
        return !*named_missing;
    }
    if (near && snprintf(path, size, "%s/%s", here, NN_CUDA_PLUGIN_NAME) < (int)size && access(path, F_OK) == 0)
        return true;
    if (snprintf(path, size, "%s", NN_PLUGIN_DIR "/" NN_CUDA_PLUGIN_NAME) < (int)size && access(path, F_OK) == 0)
        return true;
    snprintf(where, where_size, "%s%s" NN_PLUGIN_DIR, near ? here : "", near ? " and " : "");
    return false;
}

const char *nn_cuda_plugin_path(void) {
    static char path[PATH_MAX + 32];
    char where[2 * PATH_MAX + 64];
    bool named_missing;
    pthread_mutex_lock(&lock);
    bool found = find_plugin(path, sizeof path, where, sizeof where, &named_missing);
    pthread_mutex_unlock(&lock);
    return found ? path : NULL;
}

nn_status nn_plugin_backend_for(const char *device, const nn_backend **out) {
    pthread_mutex_lock(&lock);
    nn_status st = NN_OK;
    if (!cuda) {
        char path[PATH_MAX + 32], where[2 * PATH_MAX + 64];
        bool named_missing;
        if (find_plugin(path, sizeof path, where, sizeof where, &named_missing))
            st = open_plugin(device, path, &cuda);
        else if (named_missing)
            st = nn_set_error(NN_ERR_DEVICE, "device '%s' is not available: NN_CUDA_PLUGIN names '%s', which does not exist",
                              device, where);
        else
            st = nn_set_error(NN_ERR_DEVICE,
                              "device '%s' is not available: the CUDA plugin " NN_CUDA_PLUGIN_NAME
                              " is not installed (looked in %s; NN_CUDA_PLUGIN may name it)",
                              device, where);
    }
    *out = cuda;
    pthread_mutex_unlock(&lock);
    return st;
}

/* Opening cuBLASLt at attach (lt.h says why it is not linked). */
#include <dlfcn.h>
#include <string.h>

#include "lt.h"

#define NN_STR2(x) #x
#define NN_STR(x)  NN_STR2(x)
/* the soname of the cuBLAS the headers come from; NN_CUDA_LIBDIR (from the
 * Makefile) is tried when the loader's search path does not have it */
#define LT_SONAME "libcublasLt.so." NN_STR(CUBLAS_VER_MAJOR)

nn_status cu_lt_open(cu_lt *lt, const char *device) {
    memset(lt, 0, sizeof *lt);
    lt->lib = dlopen(LT_SONAME, RTLD_NOW | RTLD_LOCAL);
#ifdef NN_CUDA_LIBDIR
    if (!lt->lib) lt->lib = dlopen(NN_CUDA_LIBDIR "/" LT_SONAME, RTLD_NOW | RTLD_LOCAL);
#endif
    if (!lt->lib)
        return nn_set_error(NN_ERR_DEVICE, "device '%s' is not available: cannot load %s: %s", device, LT_SONAME,
                            dlerror());
#define NN_LT_RESOLVE(name)                                                                                            \
    lt->name = (decltype(lt->name))dlsym(lt->lib, #name);                                                              \
    if (!lt->name) {                                                                                                   \
        nn_status st_ =                                                                                                \
            nn_set_error(NN_ERR_DEVICE, "device '%s' is not available: %s has no %s", device, LT_SONAME, #name);       \
        cu_lt_close(lt);                                                                                               \
        return st_;                                                                                                    \
    }
    NN_LT_FUNCTIONS(NN_LT_RESOLVE)
#undef NN_LT_RESOLVE
    return NN_OK;
}

void cu_lt_close(cu_lt *lt) {
    if (lt->lib) dlclose(lt->lib);
    memset(lt, 0, sizeof *lt);
}

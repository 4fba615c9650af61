/* util/install.c -- where the files kiln uses at run time are: the measurement runner, the
 * runtime library every generated shared object links (libkiln_rt.a) and the headers the C
 * code of a cuda module includes.
 *
 * An installed kiln (cmake --install, README.md "Install") finds them relative to itself, so
 * that a prefix can be moved or copied: the binary holding this code is libkiln.so in
 * PREFIX/LIBDIR, or the kiln command (which links libkiln.a) in PREFIX/BINDIR, and
 * PREFIX/LIBDIR/kiln exists. Anywhere else -- the build tree, or a program linking libkiln.a
 * outside a kiln prefix -- the caller's build-tree path is used. LIBDIR, BINDIR and INCLUDEDIR
 * are GNUInstallDirs' relative directories, compiled in (KILN_INSTALL_*). */
#define _GNU_SOURCE /* dladdr1, RTLD_DL_LINKMAP */
#include "util.h"

#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef KILN_INSTALL_BINDIR
#define KILN_INSTALL_BINDIR "bin"
#endif
#ifndef KILN_INSTALL_LIBDIR
#define KILN_INSTALL_LIBDIR "lib"
#endif
#ifndef KILN_INSTALL_INCLUDEDIR
#define KILN_INSTALL_INCLUDEDIR "include"
#endif

/* The canonical directory of the binary this function is in; false when it cannot be told. */
static bool
self_dir(char *out, size_t size)
{
    Dl_info          info;
    struct link_map *lm = NULL;
    char             path[PATH_MAX];
    if (!dladdr1((void *)self_dir, &info, (void **)&lm, RTLD_DL_LINKMAP))
        return false;
    /* the main program's link map has an empty name: it is /proc/self/exe */
    const char *name = lm && lm->l_name && lm->l_name[0] ? lm->l_name : NULL;
    if (name) {
        if (!realpath(name, path))
            return false;
    } else {
        ssize_t n = readlink("/proc/self/exe", path, sizeof path - 1);
        if (n <= 0)
            return false;
        path[n] = 0;
    }
    char *slash = strrchr(path, '/');
    if (!slash || (size_t)(slash - path) >= size)
        return false;
    *slash = 0;
    snprintf(out, size, "%s", path[0] ? path : "/");
    return true;
}

/* If dir ends in "/" sub, cuts it off and returns true. */
static bool
strip_dir(char *dir, const char *sub)
{
    size_t n = strlen(dir), k = strlen(sub);
    if (k == 0 || n <= k || dir[n - k - 1] != '/' || strcmp(dir + n - k, sub) != 0)
        return false;
    dir[n - k - 1] = 0;
    return true;
}

/* The prefix of the installed kiln this code belongs to; false when it is not installed. */
static bool
install_prefix(char *out, size_t size)
{
    char dir[PATH_MAX], marker[PATH_MAX + 32];
    if (!self_dir(dir, sizeof dir))
        return false;
    if (!strip_dir(dir, KILN_INSTALL_LIBDIR) && !strip_dir(dir, KILN_INSTALL_BINDIR))
        return false;
    struct stat st;
    snprintf(marker, sizeof marker, "%s/%s/kiln", dir, KILN_INSTALL_LIBDIR);
    if (stat(marker, &st) != 0 || !S_ISDIR(st.st_mode))
        return false;
    if (strlen(dir) >= size)
        return false;
    snprintf(out, size, "%s", dir);
    return true;
}

enum kiln_status
kiln_install_path(kiln_ctx *ctx, enum kiln_install_file f, const char *build_path, char *out,
                  size_t size)
{
    static const struct {
        const char *what, *rel, *probe; /* probe: the file that must exist inside a directory */
        int         mode;
    } files[] = {
        [KILN_INSTALL_RUNNER] = {"the measurement runner",
                                 KILN_INSTALL_LIBDIR "/kiln/kiln_measure_runner", NULL, X_OK},
        [KILN_INSTALL_RT_LIB] = {"the runtime library", KILN_INSTALL_LIBDIR "/kiln/libkiln_rt.a",
                                 NULL, R_OK},
        [KILN_INSTALL_INCLUDE] = {"the ABI headers", KILN_INSTALL_INCLUDEDIR, "kiln_abi_impl.h",
                                  R_OK},
    };
    char prefix[PATH_MAX], check[PATH_MAX + 64];
    bool installed = install_prefix(prefix, sizeof prefix);
    int  n = installed ? snprintf(out, size, "%s/%s", prefix, files[f].rel)
                       : snprintf(out, size, "%s", build_path);
    if (n < 0 || (size_t)n >= size)
        return KILN_FAIL(ctx, KILN_ERR_BACKEND, "install", "the path of %s is too long: %s/%s",
                         files[f].what, installed ? prefix : build_path,
                         installed ? files[f].rel : "");
    if (files[f].probe)
        snprintf(check, sizeof check, "%s/%s", out, files[f].probe);
    else
        snprintf(check, sizeof check, "%s", out);
    if (access(check, files[f].mode) == 0)
        return KILN_OK;
    if (installed)
        return KILN_FAIL(ctx, KILN_ERR_BACKEND, "install",
                         "%s of the kiln installed in %s is missing: %s: %s (reinstall kiln)",
                         files[f].what, prefix, check, strerror(errno));
    return KILN_FAIL(ctx, KILN_ERR_BACKEND, "install",
                     "%s is missing: %s: %s (this kiln is not installed, and the build tree it "
                     "was built in no longer has it: rebuild, or use an installed kiln)",
                     files[f].what, check, strerror(errno));
}

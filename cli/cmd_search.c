/* cli/cmd_search.c -- `kiln search`: the kernel architecture search loop on Fashion-MNIST.
 * Training runs in PyTorch, so the loop is the Python package's kiln.search (python/kiln/
 * search.py, also runnable as `python3 -m kiln.search`); this command only starts it with the
 * package on PYTHONPATH and this kiln binary as KILN_BIN, passing every argument through. The
 * interpreter is $KILN_PYTHON, else the one CMake was configured with (KILN_PYTHON), and the
 * package directory $KILN_PYTHONPATH, else the source tree's python/. */
#include "cli.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef KILN_PYTHON
#define KILN_PYTHON "python3"
#endif
#ifndef KILN_PYTHON_DIR
#define KILN_PYTHON_DIR "python"
#endif

int
cmd_search(int argc, char **argv)
{
    const char *py = getenv("KILN_PYTHON");
    const char *dir = getenv("KILN_PYTHONPATH");
    if (!py || !*py)
        py = KILN_PYTHON;
    if (!dir || !*dir)
        dir = KILN_PYTHON_DIR;

    /* the package first on the path, then whatever the user had */
    const char *old = getenv("PYTHONPATH");
    size_t      n = strlen(dir) + (old ? strlen(old) + 1 : 0) + 1;
    char       *path = malloc(n);
    if (!path) {
        fprintf(stderr, "kiln: out of memory\n");
        return 1;
    }
    snprintf(path, n, "%s%s%s", dir, old && *old ? ":" : "", old && *old ? old : "");
    if (setenv("PYTHONPATH", path, 1) != 0) {
        fprintf(stderr, "kiln: cannot set PYTHONPATH: %s\n", strerror(errno));
        free(path);
        return 1;
    }
    free(path);
    if (!getenv("KILN_BIN")) {
        char    self[PATH_MAX];
        ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
        if (len > 0) {
            self[len] = '\0';
            setenv("KILN_BIN", self, 1);
        }
    }

    char **args = calloc((size_t)argc + 4, sizeof *args);
    if (!args) {
        fprintf(stderr, "kiln: out of memory\n");
        return 1;
    }
    static char opt_m[] = "-m", mod[] = "kiln.search";
    args[0] = (char *)py;
    args[1] = opt_m;
    args[2] = mod;
    for (int i = 1; i < argc; i++)
        args[i + 2] = argv[i];
    execvp(py, args);
    fprintf(stderr,
            "kiln: cannot run %s for kiln search: %s (set KILN_PYTHON to a Python with "
            "PyTorch and NumPy)\n",
            py, strerror(errno));
    free(args);
    return 1;
}

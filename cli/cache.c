/* cli/cache.c -- where the per-user records cache lives: the database every `kiln tune` also
 * stores its records in, and `kiln compile` and `kiln tune` read. The command resolves the
 * path (flags, environment, XDG base directories); the library is given paths only. */
#include "cli.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int
cli_cache_arg(const char *cmd, int argc, char **argv, int *i, struct cli_cache_opt *o)
{
    const char *a = argv[*i];
    if (!strcmp(a, "--no-cache")) {
        o->off = true;
        return 1;
    }
    if (strcmp(a, "--cache"))
        return 0;
    if (*i + 1 >= argc || !argv[*i + 1][0]) {
        cli_usage_error(cmd, "--cache needs a path (the records cache database)");
        return -2;
    }
    o->path = argv[++*i];
    return 1;
}

const char *
cli_records_cache(const struct cli_cache_opt *o)
{
    static char buf[4096];
    if (o && o->off)
        return NULL;
    if (o && o->path)
        return o->path;
    const char *env = getenv("KILN_CACHE");
    if (env)
        return !env[0] || !strcmp(env, "off") ? NULL : env;
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    int         n;
    if (xdg && xdg[0] == '/') /* relative values are invalid (XDG base directory spec) */
        n = snprintf(buf, sizeof buf, "%s/kiln/records.db", xdg);
    else if (home && home[0])
        n = snprintf(buf, sizeof buf, "%s/.cache/kiln/records.db", home);
    else
        return NULL;
    return n > 0 && (size_t)n < sizeof buf ? buf : NULL;
}

bool
cli_records_cache_mkdir(const char *path)
{
    const char *slash = strrchr(path, '/');
    if (!slash || slash == path)
        return true; /* in the working directory, or at the root */
    size_t n = (size_t)(slash - path);
    char  *dir = malloc(n + 1);
    if (!dir) {
        errno = ENOMEM;
        return false;
    }
    memcpy(dir, path, n);
    dir[n] = 0;
    bool ok = cli_mkdirs_mode(dir, 0700);
    free(dir);
    return ok;
}

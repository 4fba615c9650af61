/* tests/abi/so_build.h -- helpers for tests that build C programs and shared objects at test
 * time (tests/runtime, tests/abi): the build directory (where the running test binary,
 * libkiln_rt.a and the kiln command lie), a private temporary directory, and running a shell
 * command with its output captured. Programs are built with the compiler family and the
 * sanitizers the test binary itself was built with, so that a sanitized runtime loads into a
 * sanitized process. Test code only: it uses system(). */
#ifndef KILN_TESTS_SO_BUILD_H
#define KILN_TESTS_SO_BUILD_H

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#if defined(__clang__)
#define SO_BUILD_CC "clang"
#else
#define SO_BUILD_CC "cc"
#endif

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SO_BUILD_ASAN 1
#endif
#if __has_feature(thread_sanitizer)
#define SO_BUILD_TSAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define SO_BUILD_ASAN 1
#endif
#if defined(__SANITIZE_THREAD__)
#define SO_BUILD_TSAN 1
#endif
#if defined(SO_BUILD_ASAN)
#define SO_BUILD_SAN " -fsanitize=address,undefined -fno-omit-frame-pointer"
#elif defined(SO_BUILD_TSAN)
#define SO_BUILD_SAN " -fsanitize=thread"
#else
#define SO_BUILD_SAN ""
#endif

/* Prefix for running a built program that dlopens a module. LeakSanitizer of LLVM 14 crashes
 * ("Tracer caught signal 11") on the dynamic TLS of an OpenMP runtime that was dlopen'ed rather
 * than linked, which is exactly how a libkiln-free consumer gets it: leak checking is turned
 * off there (AddressSanitizer's other checks stay on). */
#if defined(SO_BUILD_ASAN)
#define SO_BUILD_RUN_ENV "ASAN_OPTIONS=\"$ASAN_OPTIONS:detect_leaks=0\" "
#else
#define SO_BUILD_RUN_ENV ""
#endif

/* LLVM 14's libomp leaks per-thread blocks when the team size changes, which LeakSanitizer
 * reports at exit; test binaries define their suppressions with this. */
#define SO_BUILD_LSAN_SUPPRESSIONS                 \
    const char *__lsan_default_suppressions(void); \
    const char *__lsan_default_suppressions(void)  \
    {                                              \
        return "leak:libomp.so\n";                 \
    }

/* The directory holding the running executable (the CMake build directory), into dir. */
static inline int
so_build_dir(char *dir, size_t size)
{
    ssize_t n = readlink("/proc/self/exe", dir, size - 1);
    if (n <= 0)
        return 0;
    dir[n] = 0;
    char *slash = strrchr(dir, '/');
    if (!slash)
        return 0;
    *slash = 0;
    return 1;
}

/* Runs cmd through the shell with stdout and stderr appended to log; returns the exit status
 * (-1 if it could not run or was killed). */
static inline int
so_build_run(const char *cmd, const char *log)
{
    size_t size = strlen(cmd) + strlen(log) + 32;
    char  *full = malloc(size);
    if (!full)
        return -1;
    snprintf(full, size, "(%s) >>'%s' 2>&1", cmd, log);
    int rc = system(full);
    free(full);
    if (rc == -1 || !WIFEXITED(rc))
        return -1;
    return WEXITSTATUS(rc);
}

/* Prints the log file to stderr (after a failure). */
static inline void
so_build_dump(const char *log)
{
    FILE *f = fopen(log, "r");
    if (!f)
        return;
    char line[1024];
    while (fgets(line, sizeof line, f))
        fprintf(stderr, "  | %s", line);
    fclose(f);
}

#endif

/* tuner/measure.c -- measurement that survives anything a candidate does.
 *
 * Process model (tuner/README.md has the long form):
 *   - build workers: forked children of the tuner; each lowers one candidate's schedule and
 *     compiles it to a shared object in the measurer's private temporary directory, then
 *     reports {error, message} through a pipe and _exits. At most build_workers at once.
 *   - runner: for each built candidate, one fresh kiln_measure_runner process (fork + exec,
 *     tuner/runner/); it loads the object, calls it once on the measurer's inputs with NaN-filled
 *     outputs, times it, and sends times and the first call's outputs through a pipe. One
 *     runner at a time: timings never overlap each other. With overlap off (the default on <= 2
 *     cores) no build runs while a candidate is timed either.
 *   - the cuda target: builds make modules of the cuda target (NVRTC's PTX in a shared object);
 *     the runner measures them on the GPU, opening the device itself (tuner/runner/cuda.c), so
 *     no CUDA context ever exists in the tuner and a driver fault ends a runner only.
 *     kiln_measure_cuda_device asks a runner (--cuda-probe) whether there is a device at all.
 * The tuner polls the pipes with the deadlines of the jobs; a job past its deadline has its
 * process group killed (SIGKILL) and is reported as TIMEOUT; a child that dies by a signal or
 * exits without a complete report is CRASH. The tuner never waits on a child without a
 * deadline. The runner is exec'ed rather than forked because GNU OpenMP hangs in a forked child
 * of a process that has used OpenMP (runner/runner.h).
 *
 * Reference: the reference interpreter (doubles) on the measurer's inputs when the graph has
 * at most ref_max_flops flops (default 1e8: the interpreter does about 4.5e7 flops/s here; see the
 * README), else the default schedule compiled and run the same way (for the cuda target: compiled
 * for the host CPU, whose default loop nest is not one GPU thread's). Inputs: one xoshiro256**
 * stream from the seed, argument by argument, floats uniform in [-1, 1) rounded to the dtype,
 * integers in [-4, 4], booleans 0/1 (as `kiln run`). */
#include "tuner.h"

#include "queue.h"
#include "runner/runner.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if defined(__linux__)
#include <sys/prctl.h>
#endif
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef KILN_MEASURE_RUNNER
#define KILN_MEASURE_RUNNER "kiln_measure_runner"
#endif

const char *const kiln_measure_error_name[KILN_MEASURE_COUNT] = {
    "ok", "lower", "compile", "crash", "timeout", "wrong", "runtime",
};

void
kiln_measure_opts_default(struct kiln_measure_opts *o)
{
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    memset(o, 0, sizeof *o);
    o->repeat = 5;
    o->min_repeat_ms = 20;
    o->warmup = 1;
    o->build_timeout_s = 30;
    o->run_timeout_s = 10;
    o->overlap = cores > 2;
    o->ref_max_flops = 1e8;
    o->queue_timeout_s = 600;
}

struct kiln_measurer {
    kiln_ctx                *ctx;
    const struct kiln_graph *g;
    struct kiln_measure_opts o;
    const char              *target;       /* canonical target string (ctx-owned) */
    const char              *build_target; /* what builds compile for: target, or while the
                                            * reference is made, ref_target */
    const char *ref_target;                /* the default schedule's, when it is the reference */
    int         threads;
    uint32_t    workers;
    double      flops;
    char        dir[PATH_MAX];
    char        job[PATH_MAX + 16];
    char        runner[PATH_MAX];
    uint32_t    nt, nin;
    uint8_t    *dtype;  /* per tensor, enum kiln_dtype */
    int64_t    *numel;  /* per tensor */
    double    **ref;    /* per output (nt - nin), numel doubles */
    double     *refmax; /* per output: max |ref| over finite values */
    const char *ref_kind;
    uint64_t    seq;        /* names of temporary files */
    double      hopeless_s; /* see kiln_measurer_set_hopeless; 0: none */
    void       *remote;     /* struct kiln_queue_producer: o.queue, measured by workers */
};

/* Tolerance of max |out - ref| / max |ref|: f32 1e-4 leaves ~100x headroom over the rounding
 * error of a 1e6-term f32 sum in any order on inputs in [-1, 1); integers must match. */
static double
tolerance(uint8_t dt)
{
    switch ((enum kiln_dtype)dt) {
    case KILN_DTYPE_F32:
        return 1e-4;
    case KILN_DTYPE_F64:
        return 1e-9;
    case KILN_DTYPE_F16:
        return 1e-2;
    case KILN_DTYPE_BF16:
        return 4e-2;
    case KILN_DTYPE_I8:
    case KILN_DTYPE_I32:
    case KILN_DTYPE_I64:
    case KILN_DTYPE_BOOL:
    case KILN_DTYPE_U8:
    case KILN_DTYPE_U16:
    case KILN_DTYPE_U32:
    case KILN_DTYPE_U64:
    case KILN_DTYPE_I16:
    case KILN_DTYPE_COUNT:
        break;
    }
    return 0;
}

/* ---- helpers ---- */

/* snprintf that truncates messages quietly (no -Wformat-truncation on long paths). */
static void KILN_PRINTF(3, 4) msgf(char *buf, size_t size, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, size, fmt, ap);
    va_end(ap);
}

static double
now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void *
mem_alloc(kiln_ctx *ctx, size_t n)
{
    void *p = kiln_mem_realloc(ctx, NULL, 0, n ? n : 1);
    if (!p)
        KILN_FAIL(ctx, KILN_ERR_NOMEM, "measure", "out of memory (%zu bytes)", n);
    return p;
}

static void
remove_dir(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    char           path[PATH_MAX + 256];
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        unlink(path);
    }
    closedir(d);
    rmdir(dir);
}

/* Appends the last line(s) of a worker's log (at most ~200 bytes) to msg. */
static void
append_log_tail(char *msg, size_t size, const char *log)
{
    int fd = open(log, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    char    tail[201];
    off_t   end = lseek(fd, 0, SEEK_END);
    off_t   start = end > 200 ? end - 200 : 0;
    ssize_t n = pread(fd, tail, (size_t)(end - start), start);
    close(fd);
    if (n <= 0)
        return;
    tail[n] = 0;
    while (n > 0 && (tail[n - 1] == '\n' || tail[n - 1] == ' '))
        tail[--n] = 0;
    for (char *c = tail; *c; c++)
        if (*c == '\n')
            *c = ' ';
    size_t len = strlen(msg);
    if (n > 0 && len + 8 < size)
        snprintf(msg + len, size - len, " [log: ...%s]", tail);
}

/* ---- worker processes ---- */

enum job_kind { JOB_BUILD, JOB_RUN };

struct job {
    bool           active;
    uint8_t        kind;
    uint32_t       cand;
    pid_t          pid;
    int            fd;
    bool           eof;
    double         start, deadline;
    unsigned char *buf;
    size_t         len, cap;
    char           log[PATH_MAX + 32];
};

struct build_reply {
    uint8_t error;
    char    msg[512];
};

/* The child side of a build: never returns. */
static void
build_child(struct kiln_measurer *m, const struct kiln_measure_input *in, const char *so, int wfd)
{
    kiln_ctx          *ctx = m->ctx;
    struct build_reply r = {0};
    kiln_ctx_error_clear(ctx);
    struct kiln_schedule s = {0};
    const char          *js = in->schedule_json;
    struct kiln_func    *f;
    enum kiln_status     st = KILN_OK;
    if (js)
        st = kiln_sched_from_json(ctx, js, strlen(js), &s);
    if (st == KILN_OK)
        st = kiln_lower(ctx, m->g, &s, &f);
    if (st != KILN_OK) {
        r.error = KILN_MEASURE_LOWER;
    } else {
        struct kiln_compile_options co = {m->build_target, js, js ? strlen(js) : 0,
                                          "kiln_candidate"};
        if (kiln_graph_compile(ctx, m->g, &co, so, NULL) != KILN_OK
            || (m->o.build_hook
                && m->o.build_hook(m->o.build_hook_ud, ctx, m->g, &co, so) != KILN_OK))
            r.error = KILN_MEASURE_COMPILE;
    }
    if (r.error != KILN_MEASURE_OK && kiln_ctx_error(ctx))
        kiln_error_format(kiln_ctx_error(ctx), r.msg, sizeof r.msg);
    const char *p = (const char *)&r;
    size_t      left = sizeof r;
    while (left > 0) {
        ssize_t w = write(wfd, p, left);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            break;
        p += w;
        left -= (size_t)w;
    }
    _exit(0);
}

/* A worker process with a pipe to it: fds[0] (close-on-exec) is the tuner's read end, fds[1]
 * the worker's write end. In the worker (*pid 0) its process group is its own and it dies with
 * the tuner; in the tuner the write end is closed. */
static enum kiln_status
fork_worker(kiln_ctx *ctx, int fds[2], pid_t *pid)
{
    if (pipe(fds) != 0)
        return KILN_FAIL(ctx, KILN_ERR_BACKEND, "measure", "pipe: %s", strerror(errno));
    fcntl(fds[0], F_SETFD, FD_CLOEXEC);
    fflush(NULL); /* nothing buffered is written twice */
    pid_t parent = getpid();
    *pid = fork();
    (void)parent;
    if (*pid < 0) {
        close(fds[0]);
        close(fds[1]);
        return KILN_FAIL(ctx, KILN_ERR_BACKEND, "measure", "fork: %s", strerror(errno));
    }
    if (*pid == 0) {
        setpgid(0, 0); /* killing the group also kills what the worker started (the linker) */
#if defined(__linux__)
        /* a tuner killed mid-batch takes its workers along (an endless loop would outlive it) */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(1);
#endif
        close(fds[0]);
        return KILN_OK;
    }
    setpgid(*pid, *pid); /* also here: no race with the kill below */
    close(fds[1]);
    return KILN_OK;
}

static enum kiln_status
start_job(struct kiln_measurer *m, struct job *j, uint8_t kind, uint32_t cand,
          const struct kiln_measure_input *in, const char *so, const char *const *argv)
{
    int   fds[2];
    pid_t pid;
    memset(j, 0, sizeof *j);
    snprintf(j->log, sizeof j->log, "%s/%s%llu.log", m->dir, kind == JOB_BUILD ? "b" : "r",
             (unsigned long long)m->seq++);
    KILN_TRY(fork_worker(m->ctx, fds, &pid));
    if (pid == 0) {
        int log = open(j->log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (log >= 0) {
            dup2(log, 2);
            close(log);
        }
        if (kind == JOB_BUILD)
            build_child(m, in, so, fds[1]);
        dup2(fds[1], 1);
        close(fds[1]);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    j->active = true;
    j->kind = kind;
    j->cand = cand;
    j->pid = pid;
    j->fd = fds[0];
    j->start = now_s();
    j->deadline = j->start + (kind == JOB_BUILD ? m->o.build_timeout_s : m->o.run_timeout_s);
    return KILN_OK;
}

/* Reads what is available; false on OOM. */
static bool
job_read(struct kiln_measurer *m, struct job *j)
{
    if (j->cap - j->len < 65536) {
        size_t         cap = j->cap ? 2 * j->cap : 65536 * 2;
        unsigned char *nb = kiln_mem_realloc(m->ctx, j->buf, j->cap, cap);
        if (!nb)
            return false;
        j->buf = nb;
        j->cap = cap;
    }
    ssize_t n = read(j->fd, j->buf + j->len, j->cap - j->len);
    if (n > 0)
        j->len += (size_t)n;
    else if (n == 0 || (errno != EINTR && errno != EAGAIN))
        j->eof = true;
    return true;
}

/* Waits for the job's process until its deadline, then kills its group. Returns the wait
 * status; *timed_out when it had to be killed. */
static int
job_reap(struct job *j, bool kill_now, bool *timed_out)
{
    int status = 0;
    *timed_out = false;
    while (!kill_now) {
        pid_t r = waitpid(j->pid, &status, WNOHANG);
        if (r == j->pid)
            goto done;
        if (r < 0 && errno != EINTR) /* ECHILD: someone else reaped it (SIGCHLD ignored) */
            goto done;
        if (now_s() >= j->deadline)
            break;
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    *timed_out = true;
    kill(-j->pid, SIGKILL);
    kill(j->pid, SIGKILL);
    while (waitpid(j->pid, &status, 0) < 0 && errno == EINTR)
        ;
done:
    kill(-j->pid, SIGKILL); /* anything the worker left running in its group */
    close(j->fd);
    j->active = false;
    return status;
}

static void
job_free(struct kiln_measurer *m, struct job *j)
{
    kiln_mem_free(m->ctx, j->buf, j->cap);
    j->buf = NULL;
    j->cap = j->len = 0;
    unlink(j->log);
}

static void
describe_death(char *msg, size_t size, const char *who, int status)
{
    if (WIFSIGNALED(status))
        snprintf(msg, size, "%s was killed by signal %d (%s)", who, WTERMSIG(status),
                 strsignal(WTERMSIG(status)));
    else if (WIFEXITED(status))
        snprintf(msg, size, "%s exited with status %d without a result", who, WEXITSTATUS(status));
    else
        snprintf(msg, size, "%s ended without a result", who);
}

/* ---- checking ---- */

static void
check_outputs(struct kiln_measurer *m, const unsigned char *out, struct kiln_measure_result *r)
{
    size_t off = 0;
    for (uint32_t t = m->nin; t < m->nt; t++) {
        uint32_t      o = t - m->nin;
        uint8_t       dt = m->dtype[t];
        const double *ref = m->ref[o];
        double        denom = m->refmax[o] > 0 ? m->refmax[o] : 1, worst = 0, tol = tolerance(dt);
        int64_t       unwritten = 0, first_unwritten = -1, worst_i = -1;
        struct kiln_tensor_info ti;
        kiln_graph_tensor(m->g, kiln_graph_output(m->g, o), &ti);
        for (int64_t i = 0; i < m->numel[t]; i++) {
            double got = kiln_scalar_load((enum kiln_dtype)dt, out + off, i), want = ref[i], e;
            if (isnan(want) && isnan(got))
                continue;
            if (isnan(got) && kiln_dtype_is_float((enum kiln_dtype)dt)) {
                if (first_unwritten < 0)
                    first_unwritten = i;
                unwritten++;
                continue;
            }
            e = got == want                                ? 0
                : isinf(want) || isinf(got) || isnan(want) ? INFINITY
                                                           : fabs(got - want) / denom;
            if (e > worst || worst_i < 0) {
                worst = e;
                worst_i = i;
            }
        }
        if (worst > r->max_err)
            r->max_err = worst;
        if (unwritten) {
            r->error = KILN_MEASURE_WRONG;
            snprintf(r->msg, sizeof r->msg,
                     "output %s: %lld of %lld elements never written (still NaN), the first at "
                     "flat index %lld",
                     ti.name, (long long)unwritten, (long long)m->numel[t],
                     (long long)first_unwritten);
            return;
        }
        if (worst > tol) {
            r->error = KILN_MEASURE_WRONG;
            snprintf(r->msg, sizeof r->msg,
                     "output %s: max error %.3g of max |ref| %.3g at flat index %lld (got %.9g, "
                     "want %.9g) exceeds the tolerance %g (reference: %s)",
                     ti.name, worst, m->refmax[o], (long long)worst_i,
                     kiln_scalar_load((enum kiln_dtype)dt, out + off, worst_i), ref[worst_i], tol,
                     m->ref_kind);
            return;
        }
        off += (size_t)m->numel[t] * kiln_dtype_size((enum kiln_dtype)dt);
    }
}

/* Converts a runner's outputs into the reference (default-schedule reference). */
static void
capture_reference(struct kiln_measurer *m, const unsigned char *out)
{
    size_t off = 0;
    for (uint32_t t = m->nin; t < m->nt; t++) {
        uint32_t o = t - m->nin;
        m->refmax[o] = 0;
        for (int64_t i = 0; i < m->numel[t]; i++) {
            m->ref[o][i] = kiln_scalar_load((enum kiln_dtype)m->dtype[t], out + off, i);
            if (isfinite(m->ref[o][i]) && fabs(m->ref[o][i]) > m->refmax[o])
                m->refmax[o] = fabs(m->ref[o][i]);
        }
        off += (size_t)m->numel[t] * kiln_dtype_size((enum kiln_dtype)m->dtype[t]);
    }
}

static void
finish_run(struct kiln_measurer *m, struct job *j, const struct kiln_measure_input *in,
           struct kiln_measure_result *r, bool timed_out, int status, bool capture)
{
    struct kiln_runner_reply rep;
    if (timed_out) {
        r->error = KILN_MEASURE_TIMEOUT;
        snprintf(r->msg, sizeof r->msg, "the run exceeded its time limit of %g s (killed)",
                 m->o.run_timeout_s);
        return;
    }
    if (j->len < sizeof rep || memcmp(j->buf, KILN_RUNNER_REPLY_MAGIC, 8)) {
        r->error = KILN_MEASURE_CRASH;
        if (WIFEXITED(status) && WEXITSTATUS(status) == 127)
            msgf(r->msg, sizeof r->msg, "the runner %s could not be started", m->runner);
        else
            describe_death(r->msg, sizeof r->msg, "the runner", status);
        append_log_tail(r->msg, sizeof r->msg, j->log);
        return;
    }
    memcpy(&rep, j->buf, sizeof rep);
    rep.msg[sizeof rep.msg - 1] = 0;
    if (rep.status != KILN_RUNNER_OK) {
        r->error = KILN_MEASURE_RUNTIME;
        msgf(r->msg, sizeof r->msg, "%s", rep.msg);
        return;
    }
    size_t want = 0;
    for (uint32_t t = m->nin; t < m->nt; t++)
        want += (size_t)m->numel[t] * kiln_dtype_size((enum kiln_dtype)m->dtype[t]);
    if (rep.out_bytes != want || j->len != sizeof rep + want) {
        r->error = KILN_MEASURE_CRASH;
        describe_death(r->msg, sizeof r->msg, "the runner (incomplete report)", status);
        append_log_tail(r->msg, sizeof r->msg, j->log);
        return;
    }
    r->error = KILN_MEASURE_OK;
    r->time_s = rep.median_s;
    r->stddev_s = rep.stddev_s;
    r->nrepeat = rep.nrepeat;
    for (uint32_t i = 0; i < rep.nrepeat && i < KILN_RUNNER_MAX_TIMES; i++)
        r->times[i] = rep.times[i];
    if (capture)
        capture_reference(m, j->buf + sizeof rep);
    else if (in->check)
        check_outputs(m, j->buf + sizeof rep, r);
    if (r->error != KILN_MEASURE_OK) {
        r->time_s = 0;
    }
}

/* ---- the scheduler of one batch ---- */

enum cand_state { C_PENDING, C_BUILDING, C_BUILT, C_RUNNING, C_DONE };

static enum kiln_status
measure_batch(struct kiln_measurer *m, const struct kiln_measure_input *in, uint32_t n,
              struct kiln_measure_result *res, bool capture)
{
    kiln_ctx *ctx = m->ctx;
    uint32_t  nslot = m->workers + 1;
    uint8_t  *state = mem_alloc(ctx, n);
    char(*so)[PATH_MAX + 32] = mem_alloc(ctx, (size_t)n * sizeof *so);
    struct job      *jobs = mem_alloc(ctx, nslot * sizeof *jobs);
    struct pollfd   *pfd = mem_alloc(ctx, nslot * sizeof *pfd);
    enum kiln_status st = KILN_OK;
    if (!state || !so || !jobs || !pfd) {
        st = KILN_ERR_NOMEM;
        goto out;
    }
    memset(jobs, 0, nslot * sizeof *jobs);
    for (uint32_t i = 0; i < n; i++) {
        memset(&res[i], 0, sizeof res[i]);
        state[i] = C_PENDING;
        if (in[i].so_path) {
            snprintf(so[i], sizeof so[i], "%s", in[i].so_path);
            state[i] = C_BUILT;
        } else {
            snprintf(so[i], sizeof so[i], "%s/c%llu.so", m->dir, (unsigned long long)m->seq++);
        }
    }
    char sr[16], sw[16], sm[32], sf[4], sth[16], sb[32], sh[32];
    snprintf(sr, sizeof sr, "%u", capture ? 0 : m->o.repeat);
    snprintf(sw, sizeof sw, "%u", capture ? 0 : m->o.warmup);
    snprintf(sm, sizeof sm, "%.0f", capture ? 0 : ceil(m->o.min_repeat_ms));
    snprintf(sf, sizeof sf, "%d", capture ? 0 : m->o.flush_cache ? 1 : m->o.flush_weights ? 2 : 0);
    snprintf(sth, sizeof sth, "%d", m->threads);
    snprintf(sb, sizeof sb, "%.0f", floor(m->o.run_timeout_s * 800));
    snprintf(sh, sizeof sh, "%.0f", capture ? 0 : ceil(m->hopeless_s * 1e6));

    uint32_t done = 0, next_build = 0, next_run;
    while (done < n) {
        uint32_t nbuild = 0;
        bool     running = false;
        for (uint32_t s = 0; s < nslot; s++) {
            nbuild += jobs[s].active && jobs[s].kind == JOB_BUILD;
            running |= jobs[s].active && jobs[s].kind == JOB_RUN;
        }
        next_run = 0; /* the first built candidate, in input order */
        while (next_run < n && state[next_run] != C_BUILT)
            next_run++;
        bool built_waiting = next_run < n;
        /* start builds */
        while (next_build < n && state[next_build] != C_PENDING)
            next_build++;
        while (next_build < n && nbuild < m->workers
               && (m->o.overlap || (!running && !built_waiting))) {
            uint32_t s = 0;
            while (jobs[s].active)
                s++;
            st = start_job(m, &jobs[s], JOB_BUILD, next_build, &in[next_build], so[next_build],
                           NULL);
            if (st != KILN_OK)
                goto out;
            state[next_build] = C_BUILDING;
            nbuild++;
            while (next_build < n && state[next_build] != C_PENDING)
                next_build++;
        }
        /* start the runner on the first built candidate, in order */
        if (!running && built_waiting && (m->o.overlap || nbuild == 0)) {
            uint32_t s = 0;
            while (jobs[s].active)
                s++;
            const char *argv[] = {m->runner, m->job, so[next_run], sr, sw,  sm,
                                  sf,        sth,    sb,           sh, NULL};
            st = start_job(m, &jobs[s], JOB_RUN, next_run, &in[next_run], so[next_run], argv);
            if (st != KILN_OK)
                goto out;
            state[next_run] = C_RUNNING;
        }
        /* wait for output or a deadline */
        nfds_t np = 0;
        double t = now_s(), wait = 0.1;
        for (uint32_t s = 0; s < nslot; s++) {
            if (!jobs[s].active)
                continue;
            pfd[np++] = (struct pollfd){jobs[s].fd, POLLIN, 0};
            if (jobs[s].deadline - t < wait)
                wait = jobs[s].deadline - t;
        }
        if (np == 0)
            continue; /* a build finished with nothing else to do: start the next step */
        int pr = poll(pfd, np, wait > 0 ? (int)ceil(wait * 1e3) : 0);
        if (pr < 0 && errno != EINTR) {
            st = KILN_FAIL(ctx, KILN_ERR_BACKEND, "measure", "poll: %s", strerror(errno));
            goto out;
        }
        t = now_s();
        nfds_t k = 0;
        for (uint32_t s = 0; s < nslot; s++) {
            struct job *j = &jobs[s];
            if (!j->active)
                continue;
            short rev = pfd[k++].revents;
            if (rev & (POLLIN | POLLHUP | POLLERR)) {
                if (!job_read(m, j)) {
                    st = KILN_FAIL(ctx, KILN_ERR_NOMEM, "measure", "out of memory");
                    goto out;
                }
            }
            bool late = !j->eof && t >= j->deadline;
            if (!j->eof && !late)
                continue;
            bool                        timed_out;
            int                         status = job_reap(j, late, &timed_out);
            struct kiln_measure_result *r = &res[j->cand];
            if (j->kind == JOB_BUILD) {
                r->build_s = now_s() - j->start;
                struct build_reply br;
                if (timed_out) {
                    r->error = KILN_MEASURE_TIMEOUT;
                    snprintf(r->msg, sizeof r->msg,
                             "the build exceeded its time limit of %g s (killed)",
                             m->o.build_timeout_s);
                } else if (j->len != sizeof br) {
                    r->error = KILN_MEASURE_CRASH;
                    describe_death(r->msg, sizeof r->msg, "the build worker", status);
                    append_log_tail(r->msg, sizeof r->msg, j->log);
                } else {
                    memcpy(&br, j->buf, sizeof br);
                    br.msg[sizeof br.msg - 1] = 0;
                    r->error = br.error < KILN_MEASURE_COUNT ? br.error : KILN_MEASURE_CRASH;
                    memcpy(r->msg, br.msg, sizeof r->msg);
                }
                state[j->cand] = r->error == KILN_MEASURE_OK ? C_BUILT : C_DONE;
                if (state[j->cand] == C_DONE) {
                    unlink(so[j->cand]);
                    done++;
                }
            } else {
                finish_run(m, j, &in[j->cand], r, timed_out, status, capture);
                state[j->cand] = C_DONE;
                if (!in[j->cand].so_path)
                    unlink(so[j->cand]);
                done++;
            }
            job_free(m, j);
        }
    }
out:
    if (jobs) {
        for (uint32_t s = 0; s < nslot; s++) {
            if (jobs[s].active) {
                bool to;
                job_reap(&jobs[s], true, &to);
                job_free(m, &jobs[s]);
            }
        }
    }
    for (uint32_t i = 0; so && i < n; i++)
        if (!in[i].so_path)
            unlink(so[i]);
    kiln_mem_free(ctx, state, n ? n : 1);
    kiln_mem_free(ctx, so, n ? (size_t)n * sizeof *so : 1);
    kiln_mem_free(ctx, jobs, nslot * sizeof *jobs);
    kiln_mem_free(ctx, pfd, nslot * sizeof *pfd);
    return st;
}

enum kiln_status
kiln_measure(struct kiln_measurer *m, const struct kiln_measure_input *in, uint32_t n,
             struct kiln_measure_result *results)
{
    if (!m || (n && (!in || !results)))
        return KILN_ERR_INVALID;
    if (!kiln_ok(m->ctx))
        return m->ctx->err.status;
    if (m->remote)
        return kiln_queue_measure(m->remote, in, n, results, m->o.run_timeout_s, m->hopeless_s);
    return measure_batch(m, in, n, results, false);
}

/* ---- the CUDA device ---- */

#define PROBE_TIMEOUT_S 120 /* cuInit on a machine of eight GPUs can take tens of seconds */

enum kiln_status
kiln_measure_cuda_device(kiln_ctx *ctx, const struct kiln_measure_opts *o,
                         struct kiln_measure_device *dev)
{
    char runner[PATH_MAX];
    memset(dev, 0, sizeof *dev);
    if (o && o->runner)
        snprintf(runner, sizeof runner, "%s", o->runner);
    else
        KILN_TRY(kiln_install_path(ctx, KILN_INSTALL_RUNNER, KILN_MEASURE_RUNNER, runner,
                                   sizeof runner));
    if (access(runner, X_OK) != 0)
        return KILN_FAIL(ctx, KILN_ERR_BACKEND, "measure",
                         "the measurement runner %s is not an executable: %s", runner,
                         strerror(errno));
    int   fds[2];
    pid_t pid;
    KILN_TRY(fork_worker(ctx, fds, &pid));
    if (pid == 0) {
        int null = open("/dev/null", O_WRONLY);
        if (null >= 0)
            dup2(null, 2);
        dup2(fds[1], 1);
        close(fds[1]);
        execl(runner, runner, "--cuda-probe", (char *)NULL);
        _exit(127);
    }
    struct kiln_runner_reply rep;
    size_t                   got = 0;
    double                   deadline = now_s() + PROBE_TIMEOUT_S;
    bool                     late = false;
    while (got < sizeof rep) {
        double left = deadline - now_s();
        if (left <= 0) {
            late = true;
            break;
        }
        struct pollfd pfd = {fds[0], POLLIN, 0};
        int           pr = poll(&pfd, 1, (int)ceil(left * 1e3));
        if (pr < 0 && errno == EINTR)
            continue;
        if (pr <= 0)
            continue; /* the deadline is checked above */
        ssize_t n = read(fds[0], (char *)&rep + got, sizeof rep - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    close(fds[0]);
    kill(-pid, SIGKILL);
    kill(pid, SIGKILL);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    if (late)
        return KILN_FAIL(ctx, KILN_ERR_BACKEND, "measure",
                         "opening the CUDA device took longer than %d s (the probe was killed)",
                         PROBE_TIMEOUT_S);
    if (got < sizeof rep || memcmp(rep.magic, KILN_RUNNER_REPLY_MAGIC, 8)) {
        char msg[200];
        describe_death(msg, sizeof msg, "the runner probing the CUDA device", status);
        return KILN_FAIL(ctx, KILN_ERR_BACKEND, "measure", "%s", msg);
    }
    rep.msg[sizeof rep.msg - 1] = 0;
    if (rep.status == KILN_RUNNER_NODEV)
        return KILN_FAIL(ctx, KILN_ERR_UNSUPPORTED, "measure",
                         "%s: measuring candidates for the cuda target needs a GPU", rep.msg);
    if (rep.status != KILN_RUNNER_OK)
        return KILN_FAIL(ctx, KILN_ERR_BACKEND, "measure", "the CUDA device did not open: %s",
                         rep.msg);
    const char *sp = strchr(rep.msg, ' ');
    size_t      alen = sp ? (size_t)(sp - rep.msg) : strlen(rep.msg);
    snprintf(dev->arch, sizeof dev->arch, "%.*s", (int)(alen < 15 ? alen : 15), rep.msg);
    snprintf(dev->name, sizeof dev->name, "%s", sp ? sp + 1 : "");
    return KILN_OK;
}

/* ---- the measurer ---- */

static enum kiln_status
write_job(struct kiln_measurer *m, double **argv_d)
{
    kiln_ctx *ctx = m->ctx;
    FILE     *f = fopen(m->job, "wb");
    if (!f)
        return KILN_FAIL(ctx, KILN_ERR_BACKEND, "measure", "cannot write %s: %s", m->job,
                         strerror(errno));
    struct kiln_runner_job h = {{0}, m->nt, m->nin};
    memcpy(h.magic, KILN_RUNNER_JOB_MAGIC, 8);
    bool ok = fwrite(&h, sizeof h, 1, f) == 1;
    for (uint32_t t = 0; ok && t < m->nt; t++) {
        int64_t b = m->numel[t] * (int64_t)kiln_dtype_size((enum kiln_dtype)m->dtype[t]);
        ok = fwrite(&b, 8, 1, f) == 1;
    }
    for (uint32_t t = 0; ok && t < m->nin; t++) {
        size_t         es = kiln_dtype_size((enum kiln_dtype)m->dtype[t]);
        unsigned char *buf = mem_alloc(ctx, (size_t)m->numel[t] * es);
        if (!buf) {
            fclose(f);
            return KILN_ERR_NOMEM;
        }
        for (int64_t i = 0; i < m->numel[t]; i++)
            kiln_scalar_store((enum kiln_dtype)m->dtype[t], buf, i, argv_d[t][i]);
        ok = fwrite(buf, es, (size_t)m->numel[t], f) == (size_t)m->numel[t];
        kiln_mem_free(ctx, buf, (size_t)m->numel[t] * es);
    }
    if (fclose(f) != 0 || !ok)
        return KILN_FAIL(ctx, KILN_ERR_BACKEND, "measure", "cannot write %s", m->job);
    return KILN_OK;
}

static enum kiln_status
make_reference(struct kiln_measurer *m, uint64_t seed)
{
    kiln_ctx *ctx = m->ctx;
    double  **val = mem_alloc(ctx, m->nt * sizeof *val);
    if (!val)
        return KILN_ERR_NOMEM;
    memset(val, 0, m->nt * sizeof *val);
    enum kiln_status st = KILN_OK;
    struct kiln_rng  rng = kiln_rng_new(seed);
    unsigned char    tmp[8];
    for (uint32_t t = 0; t < m->nin && st == KILN_OK; t++) {
        val[t] = mem_alloc(ctx, (size_t)m->numel[t] * sizeof(double));
        if (!val[t]) {
            st = KILN_ERR_NOMEM;
            break;
        }
        for (int64_t i = 0; i < m->numel[t]; i++) {
            uint8_t dt = m->dtype[t];
            double  v = kiln_dtype_is_float((enum kiln_dtype)dt) ? 2 * kiln_rng_uniform(&rng) - 1
                        : dt == KILN_DTYPE_BOOL                  ? (double)kiln_rng_below(&rng, 2)
                                                : (double)kiln_rng_below(&rng, 9) - 4;
            val[t][i] = kiln_scalar_store((enum kiln_dtype)dt, tmp, 0, v);
        }
    }
    if (st == KILN_OK)
        st = write_job(m, val);
    if (st == KILN_OK && m->flops <= m->o.ref_max_flops) {
        m->ref_kind = "interpreter";
        st = kiln_graph_eval(ctx, m->g, (const double *const *)val, m->ref);
        for (uint32_t o = 0; st == KILN_OK && o < m->nt - m->nin; o++) {
            m->refmax[o] = 0;
            for (int64_t i = 0; i < m->numel[m->nin + o]; i++)
                if (isfinite(m->ref[o][i]) && fabs(m->ref[o][i]) > m->refmax[o])
                    m->refmax[o] = fabs(m->ref[o][i]);
        }
    } else if (st == KILN_OK) {
        m->ref_kind =
            m->ref_target != m->target ? "default schedule (host CPU)" : "default schedule";
        struct kiln_measure_input  in = {NULL, false, NULL};
        struct kiln_measure_result r;
        /* the default loop nest of a large graph is slow (a naive 2048^3 matmul takes tens of
         * seconds): it runs once, under a generous limit */
        double run_limit = m->o.run_timeout_s;
        m->o.run_timeout_s = fmax(run_limit, 900);
        m->build_target = m->ref_target;
        st = measure_batch(m, &in, 1, &r, true);
        m->build_target = m->target;
        m->o.run_timeout_s = run_limit;
        if (st == KILN_OK && r.error != KILN_MEASURE_OK)
            st = KILN_FAIL(ctx, KILN_ERR_BACKEND, "measure",
                           "the default schedule, the reference of this graph, failed (%s): %s",
                           kiln_measure_error_name[r.error], r.msg);
    }
    for (uint32_t t = 0; t < m->nin; t++)
        if (val[t])
            kiln_mem_free(ctx, val[t], (size_t)m->numel[t] * sizeof(double));
    kiln_mem_free(ctx, val, m->nt * sizeof *val);
    return st;
}

enum kiln_status
kiln_measurer_new(kiln_ctx *ctx, const struct kiln_graph *g, const struct kiln_target *t,
                  const struct kiln_measure_opts *o, uint64_t seed, struct kiln_measurer **out)
{
    *out = NULL;
    if (!kiln_ok(ctx))
        return ctx->err.status;
    struct kiln_measure_opts dflt;
    kiln_measure_opts_default(&dflt);
    if (!o)
        o = &dflt;
    if (o->repeat == 0 || o->build_timeout_s <= 0 || o->run_timeout_s <= 0 || o->min_repeat_ms < 0)
        return KILN_FAIL(ctx, KILN_ERR_INVALID, "measure",
                         "measure options: repeat and the timeouts must be positive");
    struct kiln_measurer *m = mem_alloc(ctx, sizeof *m);
    if (!m)
        return KILN_ERR_NOMEM;
    memset(m, 0, sizeof *m);
    m->ctx = ctx;
    m->g = g;
    m->o = *o;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    m->target = m->build_target = m->ref_target = kiln_cg_target_str(ctx, t);
    m->threads = o->threads > 0 ? o->threads : t->num_cores > 0 ? t->num_cores : 1;
    if (kiln_target_is_cuda(t)) {
        /* the reference's default loop nest runs on the host (on the GPU it is one thread);
         * threads go to that CPU module only */
        m->ref_target = "llvm";
        m->threads = o->threads > 0 ? o->threads : cores > 0 ? (int)cores : 1;
    }
    m->workers = o->build_workers ? o->build_workers : cores > 0 ? (uint32_t)cores : 1;
    m->dir[0] = 0;
    if (!m->target) {
        kiln_measurer_free(m);
        return ctx->err.status;
    }
    if (o->queue) { /* workers make the inputs and the reference from the graph and the seed */
        struct kiln_queue_producer *qp = NULL;
        enum kiln_status            st = kiln_queue_producer_new(ctx, g, m->target, o, seed, &qp);
        m->remote = qp;
        if (st != KILN_OK) {
            kiln_measurer_free(m);
            return st;
        }
        m->ref_kind = "computed by each worker";
        *out = m;
        return KILN_OK;
    }
    if (o->runner)
        snprintf(m->runner, sizeof m->runner, "%s", o->runner);
    else if (kiln_install_path(ctx, KILN_INSTALL_RUNNER, KILN_MEASURE_RUNNER, m->runner,
                               sizeof m->runner)
             != KILN_OK) {
        kiln_measurer_free(m);
        return ctx->err.status;
    }
    if (access(m->runner, X_OK) != 0) {
        enum kiln_status st = KILN_FAIL(ctx, KILN_ERR_BACKEND, "measure",
                                        "the measurement runner %s is not an executable: %s",
                                        m->runner, strerror(errno));
        kiln_measurer_free(m);
        return st;
    }
    for (uint32_t c = 0; c < kiln_graph_ncalls(g); c++) {
        struct kiln_call_info ci;
        kiln_graph_call(g, c, &ci);
        m->flops += ci.flops;
    }
    uint32_t na = kiln_graph_nargs(g), no = kiln_graph_noutputs(g);
    m->nin = na;
    m->nt = na + no;
    m->dtype = mem_alloc(ctx, m->nt);
    m->numel = mem_alloc(ctx, m->nt * sizeof *m->numel);
    m->ref = mem_alloc(ctx, (no ? no : 1) * sizeof *m->ref);
    m->refmax = mem_alloc(ctx, (no ? no : 1) * sizeof *m->refmax);
    if (!m->dtype || !m->numel || !m->ref || !m->refmax) {
        kiln_measurer_free(m);
        return KILN_ERR_NOMEM;
    }
    memset(m->ref, 0, (no ? no : 1) * sizeof *m->ref);
    for (uint32_t i = 0; i < m->nt; i++) {
        uint32_t                ti = i < na ? kiln_graph_arg(g, i) : kiln_graph_output(g, i - na);
        struct kiln_tensor_info info;
        kiln_graph_tensor(g, ti, &info);
        m->dtype[i] = (uint8_t)info.dtype;
        m->numel[i] = kiln_graph_tensor_numel(g, ti);
        if (i >= na) {
            m->ref[i - na] = mem_alloc(ctx, (size_t)m->numel[i] * sizeof(double));
            if (!m->ref[i - na]) {
                kiln_measurer_free(m);
                return KILN_ERR_NOMEM;
            }
        }
    }
    snprintf(m->dir, sizeof m->dir, "%s/kiln-measure-XXXXXX", o->tmp_dir ? o->tmp_dir : "/tmp");
    if (!mkdtemp(m->dir)) {
        enum kiln_status st =
            KILN_FAIL(ctx, KILN_ERR_BACKEND, "measure",
                      "cannot create a temporary directory %s: %s", m->dir, strerror(errno));
        m->dir[0] = 0;
        kiln_measurer_free(m);
        return st;
    }
    snprintf(m->job, sizeof m->job, "%s/inputs.job", m->dir);
    enum kiln_status st = make_reference(m, seed);
    if (st != KILN_OK) {
        kiln_measurer_free(m);
        return st;
    }
    *out = m;
    return KILN_OK;
}

const char *
kiln_measurer_reference(const struct kiln_measurer *m)
{
    return m ? m->ref_kind : NULL;
}

void
kiln_measurer_set_run_timeout(struct kiln_measurer *m, double seconds)
{
    if (m && seconds > 0)
        m->o.run_timeout_s = seconds;
}

void
kiln_measurer_set_hopeless(struct kiln_measurer *m, double seconds)
{
    if (m)
        m->hopeless_s = seconds > 0 ? seconds : 0;
}

void
kiln_measurer_free(struct kiln_measurer *m)
{
    if (!m)
        return;
    kiln_ctx *ctx = m->ctx;
    kiln_queue_producer_free(m->remote);
    if (m->dir[0])
        remove_dir(m->dir);
    uint32_t no = m->nt - m->nin;
    for (uint32_t o = 0; m->ref && o < no; o++)
        if (m->ref[o])
            kiln_mem_free(ctx, m->ref[o], (size_t)m->numel[m->nin + o] * sizeof(double));
    if (m->ref)
        kiln_mem_free(ctx, m->ref, (no ? no : 1) * sizeof *m->ref);
    if (m->refmax)
        kiln_mem_free(ctx, m->refmax, (no ? no : 1) * sizeof *m->refmax);
    if (m->dtype)
        kiln_mem_free(ctx, m->dtype, m->nt ? m->nt : 1);
    if (m->numel)
        kiln_mem_free(ctx, m->numel, (m->nt ? m->nt : 1) * sizeof *m->numel);
    kiln_mem_free(ctx, m, sizeof *m);
}

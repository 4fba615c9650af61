/* tuner/queue.h -- measurement on workers over Redis Streams (tuner/queue.c: URLs, the job and
 * reply messages, the connection, the tuner's side; tuner/worker.c: `kiln worker`).
 * tuner/README.md, "Measurement on workers", describes the streams, the fields and the faults.
 * Internal to the tuner module and the kiln command. */
#ifndef KILN_QUEUE_H
#define KILN_QUEUE_H

#include "tuner.h"

#define KILN_QUEUE_GROUP          "workers"   /* the consumer group of every jobs stream */
#define KILN_QUEUE_VERSION        "1"         /* field v of jobs and replies */
#define KILN_QUEUE_MAX_GRAPH      (16u << 20) /* bytes of a job's .kg text */
#define KILN_QUEUE_MAX_SCHED      (1u << 20)  /* bytes of a job's schedule JSON */
#define KILN_QUEUE_MAX_DELIVERIES 2           /* a job delivered more often killed its workers */

/* True when kiln was built with hiredis; kiln_queue_support names it ("hiredis 0.14") or says
 * why not. */
bool        kiln_queue_available(void);
const char *kiln_queue_support(void);

/* redis://[[USER]:PASSWORD@]HOST:PORT/NAME; NAME ([A-Za-z0-9_.-], 1 to 64) prefixes every key.
 * Errors (KILN_ERR_INVALID) say what is wrong and never repeat the password; rediss:// (TLS) is
 * KILN_ERR_UNSUPPORTED with this hiredis. */
struct kiln_queue_url {
    char host[256];
    int  port;
    char user[128], pass[256];
    char name[65];
};
enum kiln_status kiln_queue_url_parse(kiln_ctx *ctx, const char *url, struct kiln_queue_url *u);
/* /proc/cpuinfo's model name (else uname's machine), ctx-owned. */
const char *kiln_queue_cpu_model(kiln_ctx *ctx);
/* "kiln:NAME:jobs:TARGET|CPU", ctx-owned: the stream of jobs for that target and CPU model. */
const char *kiln_queue_jobs_key(kiln_ctx *ctx, const char *name, const char *target,
                                const char *cpu);

/* A job as a worker decodes it: strings point into the message (valid while it is). */
struct kiln_queue_job {
    char                     id[128];
    char                     reply_to[256];
    char                     target[4096];
    const char              *graph; /* .kg text of the task graph, graph_len bytes, no NUL */
    size_t                   graph_len;
    const char              *schedule; /* schedule JSON, NULL: the default schedule */
    size_t                   schedule_len;
    bool                     check;
    uint64_t                 seed; /* of the inputs (kiln_measurer_new) */
    struct kiln_measure_opts mo;   /* repeat ... ref_max_flops as the tuner's */
    double                   hopeless_s;
};
/* Decodes and checks every field of a job (nf name/value pairs, as Redis returns them):
 * name is the queue's NAME (reply_to must be one of its reply streams). Unknown, repeated or
 * missing fields, numbers out of range and strings with NUL bytes make it false, with why. A
 * job whose reply_to and id could be read has them in j even then (empty otherwise). */
bool kiln_queue_job_decode(const char *const *f, const size_t *len, size_t nf, const char *name,
                           struct kiln_queue_job *j, char *why, size_t whysize);

/* A reply: the result of the job id, or (rejected) the reason the worker refused it. */
struct kiln_queue_reply {
    char                       id[128];
    bool                       rejected;
    struct kiln_measure_result r;
    double                     run_s;
    char                       worker[128];
};
/* Field names and values of a reply (for XADD): *nf names and values, numbers formatted into
 * buf[6] and the repeat times into times[KILN_QUEUE_TIMES_LEN]. */
#define KILN_QUEUE_REPLY_FIELDS 12
#define KILN_QUEUE_TIMES_LEN    400
void kiln_queue_reply_encode(const struct kiln_queue_reply *rep, const char **names,
                             const char **values, char (*buf)[64], char *times, size_t *nf);
/* Decodes and checks every field of a reply; false with why. */
bool kiln_queue_reply_decode(const char *const *f, const size_t *len, size_t nf,
                             struct kiln_queue_reply *rep, char *why, size_t whysize);

/* ---- the connection (hiredis; only with kiln_queue_available) ---- */
struct kiln_redis;
struct kiln_redis *kiln_redis_new(const struct kiln_queue_url *u); /* NULL: out of memory */
void               kiln_redis_free(struct kiln_redis *r);
/* Connects (and AUTHs) unless connected; false with why. */
bool kiln_redis_connect(struct kiln_redis *r, char *why, size_t whysize);
/* One command; its reply (a redisReply *, freed with kiln_redis_reply_free), or NULL when the
 * connection failed (why says how; the next call reconnects). Error replies are returned. */
void *kiln_redis_cmd(struct kiln_redis *r, int argc, const char **argv, const size_t *len,
                     char *why, size_t whysize);
void  kiln_redis_reply_free(void *reply);

/* ---- the tuner's side: a measurer whose kiln_measure sends jobs (measure.c calls these) ---- */
struct kiln_queue_producer;
enum kiln_status kiln_queue_producer_new(kiln_ctx *ctx, const struct kiln_graph *g,
                                         const char *target, const struct kiln_measure_opts *o,
                                         uint64_t seed, struct kiln_queue_producer **out);
void             kiln_queue_producer_free(struct kiln_queue_producer *p);
/* Sends in[0..n) as jobs and waits for their replies: fails (KILN_ERR_BACKEND) when Redis
 * stays unreachable, or no reply comes, for o->queue_timeout_s, when a reply is malformed or a
 * worker rejected a job; results only for a complete batch. */
enum kiln_status kiln_queue_measure(struct kiln_queue_producer      *p,
                                    const struct kiln_measure_input *in, uint32_t n,
                                    struct kiln_measure_result *results, double run_timeout_s,
                                    double hopeless_s);

/* ---- the worker (tuner/worker.c) ---- */
struct kiln_worker_opts {
    const char   *url;           /* redis://... */
    const char   *target;        /* NULL = host */
    const char   *jobs_key;      /* NULL = derived from the target and this machine's CPU */
    double        claim_after_s; /* claim jobs pending longer than this (default 300) */
    uint32_t      max_jobs;      /* stop after this many; 0 = never */
    volatile int *stop;          /* nonzero: stop after the job in flight */
};
/* Serves jobs until *stop (or max_jobs); every line it logs goes to stderr. Fails only when the
 * options are wrong or a resource of the worker itself fails; an unreachable Redis is retried. */
enum kiln_status kiln_worker_serve(kiln_ctx *ctx, const struct kiln_worker_opts *o);

#endif /* KILN_QUEUE_H */

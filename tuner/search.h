/* tuner/search.h -- private to tuner/search.c and tuner/tune.c: the state of one task while it
 * is tuned. */
#ifndef KILN_TUNER_SEARCH_H
#define KILN_TUNER_SEARCH_H

#include "tuner.h"

/* One measured program. */
struct tprog {
    struct kiln_prog p;
    bool             has_prog; /* false for records without a program (imported schedules) */
    char            *sched;    /* without a program: its schedule JSON (malloc'ed), else NULL */
    uint64_t         h;        /* kiln_sched_hash of its schedule JSON: a program's identity */
    struct kiln_feat feat;     /* nrow == 0 when the program did not lower */
    double           time_s, stddev_s;
    uint32_t         nrepeat;
    uint32_t         nmeas; /* measurements merged: time_s is their mean (kiln_ttask_record),
                             * or a final selection's verdict (final_select) */
    double  min_s;          /* its lowest single time (0 = none succeeded) */
    uint8_t error;          /* enum kiln_measure_error */
};

enum tphase {
    TPHASE_ANSOR,
    TPHASE_DROPLET,
    TPHASE_DONE,
};

struct ttask {
    struct kiln_task            *t;
    uint32_t                     index;
    kiln_ctx                    *ctx;
    const struct kiln_hw        *hw;
    const char                  *target; /* canonical string */
    struct kiln_sketch          *sk;
    uint32_t                     nsk;
    struct kiln_measurer        *meas;
    struct kiln_cost_model      *cm;
    struct tprog                *m;
    uint32_t                     nm, capm;
    uint64_t                    *seen; /* open-addressing set of measured schedules' hashes */
    uint32_t                     capseen, nseen;
    int32_t                      best;   /* index in m, -1 = none */
    uint32_t                     trials; /* records of this task, errors included */
    uint32_t                     errors;
    uint64_t                     trained_at; /* the session's nrecorded when last trained */
    uint32_t                     model_n;    /* programs the model last trained on */
    enum tphase                  phase;
    struct kiln_prog             center; /* Droplet: the current point */
    int32_t                      center_m;
    uint32_t                     droplet_rounds;
    int32_t                      converged_best; /* best when Droplet last converged, -1 */
    bool                         finalized;      /* the task's last record is a "final" one */
    double                       default_s;      /* the default schedule's time, 0 = unknown */
    double                      *hist;           /* best time after each round (task scheduler) */
    uint32_t                     nhist, caphist;
    uint32_t                     cached;      /* of trials: records taken from the records cache */
    double                       spent_s;     /* wall time of this session's rounds of the task */
    uint32_t                     spent_n;     /* trials those rounds measured */
    double                       conv_ref;    /* best time at the last gain of >= 1% */
    uint32_t                     conv_trials; /* trials then */
    bool                         stalled;     /* no such gain for CONVERGE_TRIALS trials */
    double                       curve_best;  /* least best time so far (model curve), 0 = none */
    struct kiln_rng              rng;
    struct kiln_tune_task_status status;
    FILE                        *curve; /* CSV, or NULL */
    FILE    *rank_curve;                /* CSV of the model's rank correlation per round, or NULL */
    double   rank_rho;                  /* the last round's (kiln_spearman) */
    uint32_t rank_rounds;               /* rounds it was computed for */
};

/* The tuning session: what a round needs besides its task. */
struct tsession {
    kiln_ctx                    *ctx;
    const struct kiln_tune_opts *o;
    struct kiln_db              *db;
    const char                  *target;
    const char                  *machine; /* records' machine; NULL: kiln_machine_desc */
    bool                         gpu;     /* the cuda target */
    uint32_t                     trials_done;
    double                       t0;
    struct ttask                *tasks; /* every task of the session (the cost model's data) */
    uint32_t                     ntasks;
    uint64_t                     nrecorded; /* programs recorded in any task */
    struct kiln_db              *cache;     /* the records cache, NULL = none (or given up) */
    const char                  *cache_path;
    FILE                        *model_csv;           /* curve_dir/model.csv, or NULL */
    double                      *model_t, *model_lat; /* the whole model's curve so far */
    uint32_t                     nmodel, capmodel;
};

/* Adds a measured program to the task (features computed here when prog is given), updating
 * the best; writes the record to the database, the log and the curve. A measurement of a
 * schedule the task holds (a "confirm" or "final" one, or a duplicate resumed from an older
 * database) is merged into it instead: its time becomes the mean of its measurements, and a
 * failed one takes it out for good. */
enum kiln_status kiln_ttask_record(struct tsession *S, struct ttask *T, const struct kiln_prog *p,
                                   const char *schedule_json, const struct kiln_measure_result *r,
                                   const char *strategy, bool store);
bool             kiln_ttask_seen(const struct ttask *T, uint64_t h);
/* The schedule JSON program p of T makes (malloc'ed), or NULL when it does not emit. */
char *kiln_ttask_schedule_json(struct ttask *T, const struct kiln_prog *p);
/* A program's identity: the hash of the schedule it makes. Knob values that the schedule
 * ignores (a split factor of a loop left unvectorised, say) make the same program, so the
 * search does not measure one schedule twice, and the tuner's mean of a schedule is the
 * database's (kiln_db_best groups records by schedule text). */
uint64_t kiln_sched_hash(const char *schedule_json);
uint64_t kiln_ttask_hash(struct ttask *T, const struct kiln_prog *p);
/* Features of program p of T (rows malloc'ed); false, with *out empty, when it does not lower. */
bool kiln_ttask_features(struct ttask *T, const struct kiln_prog *p, struct kiln_feat *out);

/* One round of evolutionary search: picks up to n unmeasured programs, measures and records
 * them. Returns the number measured in *done. */
enum kiln_status kiln_search_ansor_round(struct tsession *S, struct ttask *T, uint32_t n,
                                         uint32_t *done);
/* One round of Droplet search from the current point. When no neighbour improves
 * significantly, Droplet has converged: T->phase becomes TPHASE_ANSOR under ansor+droplet (the
 * rest of the budget goes to the evolutionary search, and Droplet starts again from a new best),
 * TPHASE_DONE under droplet alone. */
enum kiln_status kiln_search_droplet_round(struct tsession *S, struct ttask *T, uint32_t n,
                                           uint32_t *done);
/* Measures programs progs[0..n) (unmeasured, distinct) of T and records them. */
enum kiln_status kiln_search_measure(struct tsession *S, struct ttask *T,
                                     const struct kiln_prog *progs, uint32_t n,
                                     const char *strategy, uint32_t *done);
/* Spearman's rank correlation of x and y (n pairs; ties get their mean rank): 1 for the same
 * order, -1 for the reverse; 0 when either is constant or n < 2. */
double kiln_spearman(const double *x, const double *y, uint32_t n);
/* One-sided Welch t-test: probability that a mean as low as ma arises if ma >= mb. */
double kiln_welch_p(double ma, double sa, uint32_t na, double mb, double sb, uint32_t nb);

#endif

/* A small thread-safe metrics registry rendered in the Prometheus text exposition format 0.0.4.
 *
 * Families are created on first use: a name ([a-zA-Z_:][a-zA-Z0-9_:]*), a help text (taken
 * from the first call; later ones are ignored) and a type (counter, gauge or histogram). A
 * name keeps its type: using it as another type fails with -EINVAL. Series inside a family
 * are told apart by their labels, given as a NULL-terminated array of name/value pairs
 * {"k1", "v1", "k2", "v2", NULL} (at most METRICS_MAX_LABELS pairs; NULL = no labels). Label
 * names follow [a-zA-Z_][a-zA-Z0-9_]*, may not start with "__" nor repeat, and histograms may
 * not use "le". The order the pairs are given in does not matter.
 *
 * Every function may be called from any thread. Strings are copied; the caller keeps its own.
 * Return values: 0, -EINVAL for a bad name, label, value or type clash, -ENOMEM. */
#ifndef SERVER_METRICS_H
#define SERVER_METRICS_H

#include <stddef.h>

#define METRICS_MAX_LABELS 3

struct metrics;

/* A new empty registry (NULL when out of memory); metrics_free releases it (NULL is fine). */
struct metrics *metrics_new(void);
void metrics_free(struct metrics *m);

/* Adds v (>= 0, finite) to a counter. */
int metrics_counter_add(struct metrics *m, const char *name, const char *help, double v,
                        const char *const labels[]);
/* Sets a gauge to v (any value, NaN and infinities included). */
int metrics_gauge_set(struct metrics *m, const char *name, const char *help, double v,
                      const char *const labels[]);
/* Adds v to a gauge (negative to subtract). */
int metrics_gauge_add(struct metrics *m, const char *name, const char *help, double v,
                      const char *const labels[]);
/* Records v in a histogram whose upper bounds are buckets[0..n_buckets) (finite, strictly
 * increasing; +Inf is implicit). The first call fixes the bounds of the family; a later call
 * with other bounds fails with -EINVAL. v may not be NaN. */
int metrics_histogram_observe(struct metrics *m, const char *name, const char *help,
                              const double *buckets, size_t n_buckets, double v,
                              const char *const labels[]);

/* The histogram's series with nothing recorded (all counts 0), so that it is scraped before
 * its first observation; the same bounds rule as metrics_histogram_observe. */
int metrics_histogram_declare(struct metrics *m, const char *name, const char *help, const double *buckets,
                              size_t n_buckets, const char *const labels[]);

/* The whole registry as exposition text: families sorted by name, each with its HELP and
 * TYPE lines, series sorted by their label text. malloc'd, the caller frees it; NULL when out
 * of memory. An empty registry renders as "". */
char *metrics_render(struct metrics *m);

/* The content type to serve metrics_render's text with. */
#define METRICS_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

#endif

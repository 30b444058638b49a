/* What the operator's caches keep of the objects it owns, as client-go's transform functions
 * do: an informer calls these on every listed or watched object before caching it, and they
 * remove what no handler, planner or status reader ever reads. At 10,000 suspended MPIJobs the
 * cache holds 50,000 objects; a launcher Job's pod template and a Secret's key pair are most of
 * what the operator would otherwise keep and never read.
 *
 * What is read, and so kept:
 *  - launcher Job: all metadata, spec.suspend and the Job's other top-level spec fields, its
 *    status (conditions, counts, startTime), and of spec.template the metadata and the
 *    scheduling directives synced on resume (nodeSelector, tolerations, affinity,
 *    schedulingGates). Containers, volumes and every other field of the pod spec go.
 *  - Secret: all metadata and its type. data and stringData (the SSH key pair) go: the operator
 *    makes the keys once, when it creates the Secret, and only asks later whether it exists and
 *    whose it is. */
#ifndef MPIJOB_TRIM_H
#define MPIJOB_TRIM_H

#include <cjson/cJSON.h>

void trim_launcher_job(cJSON *job);
void trim_secret(cJSON *secret);

#endif

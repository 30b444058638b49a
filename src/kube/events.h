/* Event recorder: core/v1 Events about an object, as kubectl describe shows them.
 *
 * Repeated events (same involved object, type, reason and message) are aggregated like
 * client-go's correlator: the first creates an Event named "<object name>.<unique suffix>",
 * later ones patch that Event's count and lastTimestamp instead of creating new ones. If the
 * Event has gone (NotFound), a new one is created. Recording never blocks the caller on the
 * API server: events are queued and written by the recorder's own thread; a full queue drops
 * the event with a log line. */
#ifndef KUBE_EVENTS_H
#define KUBE_EVENTS_H

#include <cjson/cJSON.h>
#include <stdbool.h>

#include "kube/client.h"

struct event_recorder;

/* component: the source.component and reportingController ("mpijob-operator"). host may be
 * NULL. The client is borrowed. */
int event_recorder_new(struct kube_client *c, const char *component, const char *host,
                       struct event_recorder **out);

/* The object the event is about. */
struct event_target {
    const char *api_version; /* "kubeflow.org/v2beta1" */
    const char *kind;        /* "MPIJob" */
    const char *namespace;
    const char *name;
    const char *uid;
    const char *resource_version; /* optional */
};

/* type: "Normal" or "Warning". Returns 0, or KUBE_ENOMEM / KUBE_EINVAL. */
int event_record(struct event_recorder *r, const struct event_target *target, const char *type,
                 const char *reason, const char *message_fmt, ...)
    __attribute__((format(printf, 5, 6)));

/* Waits until every queued event has been written (or failed). For tests and shutdown. */
void event_recorder_flush(struct event_recorder *r);
/* Flushes, stops the thread and frees. */
void event_recorder_free(struct event_recorder *r);

#endif

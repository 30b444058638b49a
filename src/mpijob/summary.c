#include "mpijob/summary.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "util/json.h"

/* A string field fit for status and a printer column: present, printable ASCII, and short. */
static bool text_field(const cJSON *o, const char *name, char *out, size_t len, bool required, char *why,
                       size_t why_len)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    out[0] = '\0';
    if (!v && !required)
        return true;
    if (!cJSON_IsString(v) || !v->valuestring[0]) {
        snprintf(why, why_len, "\"%s\" is missing or not a string", name);
        return false;
    }
    size_t n = strlen(v->valuestring);
    if (n >= len) {
        snprintf(why, why_len, "\"%s\" is longer than %zu characters", name, len - 1);
        return false;
    }
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)v->valuestring[i] < 0x20 || (unsigned char)v->valuestring[i] > 0x7e) {
            snprintf(why, why_len, "\"%s\" holds a character that is not printable ASCII", name);
            return false;
        }
    memcpy(out, v->valuestring, n + 1);
    return true;
}

/* A number field: present (unless optional), finite, and within [lo, hi]. */
static bool number_field(const cJSON *o, const char *name, double lo, double hi, bool required, double *out,
                         char *why, size_t why_len)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    *out = 0;
    if (!v && !required)
        return true;
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || v->valuedouble < lo || v->valuedouble > hi) {
        snprintf(why, why_len, "\"%s\" is missing or not a number in [%g, %g]", name, lo, hi);
        return false;
    }
    *out = v->valuedouble;
    return true;
}

static bool fill(const cJSON *o, struct launcher_summary *s, char *why, size_t why_len)
{
    double ranks = 0;
    const cJSON *same = cJSON_GetObjectItemCaseSensitive(o, "weights_identical");
    if (!text_field(o, "transport", s->transport, sizeof(s->transport), true, why, why_len) ||
        !text_field(o, "backend", s->backend, sizeof(s->backend), true, why, why_len) ||
        !text_field(o, "device", s->device, sizeof(s->device), false, why, why_len) ||
        !number_field(o, "ranks", 1, 1e7, true, &ranks, why, why_len) ||
        !number_field(o, "samples_per_sec", 0, 1e15, true, &s->samples_per_sec, why, why_len) ||
        !number_field(o, "step_ms", 0, 1e12, true, &s->step_ms, why, why_len) ||
        !number_field(o, "exposed_comm_ms", -1e12, 1e12, true, &s->exposed_comm_ms, why, why_len) ||
        !number_field(o, "loss_first", -1e300, 1e300, false, &s->loss_first, why, why_len) ||
        !number_field(o, "loss_last", -1e300, 1e300, false, &s->loss_last, why, why_len))
        return false;
    if (!cJSON_IsBool(same)) {
        snprintf(why, why_len, "\"weights_identical\" is missing or not true/false");
        return false;
    }
    if (ranks != floor(ranks)) {
        snprintf(why, why_len, "\"ranks\" is not a whole number");
        return false;
    }
    s->ranks = (int)ranks;
    s->weights_identical = cJSON_IsTrue(same);
    return true;
}

/* Whether a line that did not parse was meant to be the summary. */
static bool says_summary(const char *p, size_t n)
{
    static const char *const forms[] = {"\"event\":\"summary\"", "\"event\": \"summary\""};
    for (size_t f = 0; f < sizeof(forms) / sizeof(forms[0]); f++) {
        size_t k = strlen(forms[f]);
        for (size_t i = 0; i + k <= n; i++)
            if (memcmp(p + i, forms[f], k) == 0)
                return true;
    }
    return false;
}

/* One line: SUMMARY_NONE when it is not the summary. */
static enum summary_found parse_line(const char *line, size_t n, struct launcher_summary *out, char *why,
                                     size_t why_len)
{
    const char *brace = memchr(line, '{', n);
    if (!brace || !says_summary(line, n))
        return SUMMARY_NONE;
    size_t len = n - (size_t)(brace - line);
    while (len && (brace[len - 1] == '\r' || brace[len - 1] == ' ' || brace[len - 1] == '\t'))
        len--;
    cJSON *o = cJSON_ParseWithLength(brace, len);
    if (!o) {
        snprintf(why, why_len, "the line is not JSON: %.*s", (int)(len < 120 ? len : 120), brace);
        return SUMMARY_BROKEN;
    }
    const char *event = json_string(o, "event");
    enum summary_found found = SUMMARY_NONE;
    if (event && strcmp(event, "summary") == 0) {
        memset(out, 0, sizeof(*out));
        found = fill(o, out, why, why_len) ? SUMMARY_FOUND : SUMMARY_BROKEN;
    }
    cJSON_Delete(o);
    return found;
}

enum summary_found summary_parse(const char *text, size_t len, struct launcher_summary *out, char *why,
                                 size_t why_len)
{
    if (why_len)
        why[0] = '\0';
    /* From the end: the last summary is the run's (a log may hold earlier runs' lines). */
    size_t end = len;
    while (end > 0) {
        size_t start = end;
        while (start > 0 && text[start - 1] != '\n')
            start--;
        enum summary_found f = parse_line(text + start, end - start, out, why, why_len);
        if (f != SUMMARY_NONE)
            return f;
        end = start > 0 ? start - 1 : 0;
    }
    return SUMMARY_NONE;
}

/* Rounded so that the value the API server gives back prints as it was written. */
static double rounded(double v, double unit)
{
    return round(v / unit) * unit;
}

cJSON *summary_to_status(const struct launcher_summary *s, const char *pod)
{
    cJSON *o = cJSON_CreateObject();
    bool ok = o && cJSON_AddStringToObject(o, "pod", pod) && cJSON_AddStringToObject(o, "transport", s->transport) &&
              cJSON_AddStringToObject(o, "backend", s->backend) &&
              (!s->device[0] || cJSON_AddStringToObject(o, "device", s->device)) &&
              cJSON_AddNumberToObject(o, "ranks", s->ranks) &&
              cJSON_AddNumberToObject(o, "samplesPerSecond", rounded(s->samples_per_sec, 0.1)) &&
              cJSON_AddNumberToObject(o, "stepMs", rounded(s->step_ms, 0.001)) &&
              cJSON_AddNumberToObject(o, "exposedCommunicationMs", rounded(s->exposed_comm_ms, 0.001)) &&
              cJSON_AddBoolToObject(o, "weightsIdentical", s->weights_identical);
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

bool summary_mismatch(enum transport asked, const char *used, const char *pod, char *message, size_t message_len)
{
    bool mismatch = false;
    const char *why = "";
    if (asked == TRANSPORT_RDMA && strcmp(used, "IB") != 0 && strcmp(used, SUMMARY_TRANSPORT_ONE_RANK) != 0) {
        mismatch = true;
        if (strcmp(used, "mpi") == 0)
            why = " (the CPU backend: NCCL did not run, and MPI's own transport is not reported)";
        else if (strcmp(used, "Socket") == 0)
            why = " (NCCL fell back to TCP sockets)";
        else if (strcmp(used, "P2P") == 0 || strcmp(used, "SHM") == 0)
            why = " (the ranks talked within one node; NCCL used no network)";
        else if (strcmp(used, "unknown") == 0)
            why = " (NCCL's log did not say which network it used)";
    } else if (asked == TRANSPORT_TCP && strcmp(used, "IB") == 0) {
        mismatch = true;
        why = " (NCCL used InfiniBand verbs although TCP was asked for)";
    }
    if (mismatch)
        snprintf(message, message_len,
                 "spec.networking.transport asks for %s, but launcher pod %s reports transport %s%s",
                 transport_name(asked), pod, used, why);
    return mismatch;
}

void summary_describe(const struct launcher_summary *s, const char *pod, char *out, size_t len)
{
    snprintf(out, len,
             "launcher pod %s: transport %s, %d rank%s (%s%s%s), %.1f samples/s, %.3f ms per step with %.3f ms of "
             "exposed communication, weights %s across ranks",
             pod, s->transport, s->ranks, s->ranks == 1 ? "" : "s", s->backend, s->device[0] ? " on " : "", s->device,
             s->samples_per_sec, s->step_ms, s->exposed_comm_ms, s->weights_identical ? "identical" : "DIFFERENT");
}

/* Fuzzes the quantity check (minResources) against the Kubernetes grammar written as a POSIX
 * regular expression: the two must agree on every string. Non-negative only, as the operator
 * accepts: "4", "0.5", "500m", "8Gi", "1e3", "1Ei". */
#include <regex.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "mpijob/mpijob.h"

static const char GRAMMAR[] =
    "^\\+?([0-9]+(\\.[0-9]*)?|\\.[0-9]+)(([KMGTPE]i)|[numkMGTPE]|([eE][+-]?[0-9]+))?$";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static regex_t re;
    static int compiled;
    if (!compiled) {
        if (regcomp(&re, GRAMMAR, REG_EXTENDED | REG_NOSUB) != 0)
            abort();
        compiled = 1;
    }
    if (size > 256 || memchr(data, '\0', size))
        return 0;
    char s[257];
    memcpy(s, data, size);
    s[size] = '\0';
    int ours = mpijob_quantity_valid(s);
    int theirs = regexec(&re, s, 0, NULL, 0) == 0;
    if (ours != theirs)
        abort(); /* the input is the disagreement */
    return 0;
}

/* How the GPU backend starts across ranks, with a stand-in plugin (no GPU needed): each rank's
 * own set-up is agreed before the collective connect, so a rank that fails its set-up never
 * leaves the others waiting in a communicator it will not join. */
#include <criterion/criterion.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runcmd.h"

/* init fails on rank $FAKE_INIT_FAIL_RANK; connect fails on rank $FAKE_CONNECT_FAIL_RANK and,
 * with $FAKE_CONNECT_HANGS, waits the way NCCL's bootstrap waits for a rank that never comes. */
static const char FAKE_SRC[] =
    "#include <stdlib.h>\n"
    "#include <stdio.h>\n"
    "#include <string.h>\n"
    "#include <unistd.h>\n"
    "#include \"worker/backend.h\"\n"
    "struct wk_ctx { int rank; };\n"
    "static int is_rank(const char *var, int rank) {\n"
    "  const char *v = getenv(var); return v != NULL && atoi(v) == rank; }\n"
    "static int available(char *why, size_t len) { if (len) why[0] = 0; return 1; }\n"
    "static int unique_id(unsigned char id[WK_NCCL_ID_BYTES], char *why, size_t len) {\n"
    "  (void)why; (void)len; memset(id, 7, WK_NCCL_ID_BYTES); return 0; }\n"
    "static int init(const struct wk_init *in, struct wk_ctx **out, char *why, size_t len) {\n"
    "  *out = NULL;\n"
    "  if (is_rank(\"FAKE_INIT_FAIL_RANK\", in->rank)) {\n"
    "    snprintf(why, len, \"init: cublasCreate: CUBLAS_STATUS_ALLOC_FAILED (fake)\"); return -1; }\n"
    "  *out = calloc(1, sizeof(**out)); (*out)->rank = in->rank; return 0; }\n"
    "static int connect_(struct wk_ctx *c, char *why, size_t len) {\n"
    "  if (is_rank(\"FAKE_CONNECT_FAIL_RANK\", c->rank)) {\n"
    "    snprintf(why, len, \"init: ncclCommInitRank: unhandled system error (fake)\"); return -1; }\n"
    "  if (getenv(\"FAKE_CONNECT_HANGS\") != NULL) sleep(600);\n"
    "  return 0; }\n"
    "static void fini(struct wk_ctx *c) { free(c); }\n"
    "static const char *error(struct wk_ctx *c) { (void)c; return \"fake\"; }\n"
    "static const char *device(struct wk_ctx *c) { (void)c; return \"fake GPU\"; }\n"
    "static void nop(void) {}\n"
    "#define NOP_OP(f) .f = (__typeof__(((struct wk_ops *)0)->f))nop\n"
    "static const struct wk_ops table = {\n"
    "  .abi = WK_BACKEND_ABI, .name = \"nccl\", .available = available, .unique_id = unique_id,\n"
    "  .init = init, .connect = connect_, .fini = fini, .error = error, .device = device,\n"
    "  NOP_OP(alloc), NOP_OP(release), NOP_OP(upload), NOP_OP(download), NOP_OP(gemm),\n"
    "  NOP_OP(bias_act), NOP_OP(relu_backward), NOP_OP(bias_grad), NOP_OP(mse), NOP_OP(sgd),\n"
    "  NOP_OP(fill), NOP_OP(bucket_ready), NOP_OP(finish), NOP_OP(allreduce), NOP_OP(sync),\n"
    "  NOP_OP(pending_bucket), NOP_OP(abort),\n"
    "};\n"
    "const struct wk_ops *mpijob_worker_backend(int abi) { (void)abi; return &table; }\n";

static char tmpdir[64];
static char plugin[PATH_MAX];

static void setup(void)
{
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/wk-gpustart-XXXXXX");
    cr_assert_not_null(mkdtemp(tmpdir));
    char src[PATH_MAX], cmd[3 * PATH_MAX];
    snprintf(src, sizeof(src), "%s/fake.c", tmpdir);
    FILE *f = fopen(src, "w");
    cr_assert_not_null(f);
    fputs(FAKE_SRC, f);
    fclose(f);
    snprintf(plugin, sizeof(plugin), "%s/fake-nccl.so", tmpdir);
    snprintf(cmd, sizeof(cmd), "cc -shared -fPIC -Wall -Werror -I'%s/src' -o '%s' '%s'", runcmd_src_dir(), plugin,
             src);
    cr_assert_eq(system(cmd), 0, "failed: %s", cmd);
}

static void teardown(void)
{
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
    (void)system(cmd);
}

/* mpirun -np 2 mpijob-worker train --backend nccl with the stand-in plugin and FAKE_* settings. */
static int start_two(const char *fake_env, char **err)
{
    char cmd[4 * PATH_MAX];
    snprintf(cmd, sizeof(cmd), RUNCMD_MPIRUN " -np 2 -x MPIJOB_WORKER_PLUGIN='%s' %s %s train --backend nccl --steps 5",
             plugin, fake_env, runcmd_worker_bin());
    return runcmd(cmd, NULL, err);
}

TestSuite(gpu_start, .init = setup, .fini = teardown);

Test(gpu_start, a_rank_failing_its_set_up_never_strands_the_others_in_connect)
{
    char *err = NULL;
    int status = start_two("-x FAKE_INIT_FAIL_RANK=1 -x FAKE_CONNECT_HANGS=1", &err);
    cr_assert_neq(status, 124, "rank 0 was left waiting in connect:\n%s", err);
    cr_assert_neq(status, 0, "%s", err);
    cr_assert_not_null(strstr(err, "the nccl backend failed to start"), "%s", err);
    cr_assert_not_null(strstr(err, "CUBLAS_STATUS_ALLOC_FAILED"), "rank 1's reason reaches rank 0's message:\n%s",
                       err);
    free(err);
}

Test(gpu_start, a_failed_connect_is_reported_by_every_rank_agreeing)
{
    char *err = NULL;
    int status = start_two("-x FAKE_CONNECT_FAIL_RANK=0", &err);
    cr_assert_neq(status, 124, "%s", err);
    cr_assert_neq(status, 0, "%s", err);
    cr_assert_not_null(strstr(err, "ncclCommInitRank: unhandled system error (fake)"), "%s", err);
    free(err);
}

#include <criterion/criterion.h>
#include <errno.h>

#include "worker/session.h"

Test(session, backend_names_parse)
{
    cr_expect_eq(wk_backend_parse("auto"), WK_BACKEND_AUTO);
    cr_expect_eq(wk_backend_parse("nccl"), WK_BACKEND_NCCL);
    cr_expect_eq(wk_backend_parse("mpi"), WK_BACKEND_MPI);
    cr_expect_eq(wk_backend_parse("gpu"), -EINVAL);
    cr_expect_eq(wk_backend_parse(""), -EINVAL);
    cr_expect_eq(wk_backend_parse(NULL), -EINVAL);
}

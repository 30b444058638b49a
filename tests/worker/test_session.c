#include <criterion/criterion.h>

#include "worker/session.h"

Test(session, backend_names_parse)
{
    cr_expect_eq(wk_backend_parse("auto"), WK_BACKEND_AUTO);
    cr_expect_eq(wk_backend_parse("nccl"), WK_BACKEND_NCCL);
    cr_expect_eq(wk_backend_parse("mpi"), WK_BACKEND_MPI);
    cr_expect_eq(wk_backend_parse("gpu"), -1);
    cr_expect_eq(wk_backend_parse(""), -1);
    cr_expect_eq(wk_backend_parse(NULL), -1);
}

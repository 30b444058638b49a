/* Whether this host has an ACTIVE RDMA port: the probe's verdicts in the tests depend on it. */
#ifndef TESTS_WORKER_HOST_RDMA_H
#define TESTS_WORKER_HOST_RDMA_H

int test_host_has_rdma(void);

#endif

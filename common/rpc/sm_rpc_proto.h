/* sm_rpc_proto: the generated protobuf-c message types, for code built on
 * sm_rpc. Generated headers live in the build directory (lib sm_proto).
 * Include this, never the generated headers directly, so the set stays in one
 * place: shmap.v1 (proto/shmap.proto), the health service, and the test
 * service of tests/test_rpc.c. */
#ifndef SM_RPC_PROTO_H
#define SM_RPC_PROTO_H

#include "grpc/health/v1/health.pb-c.h"
#include "shmap.pb-c.h"
#include "shmap_test.pb-c.h"

#endif

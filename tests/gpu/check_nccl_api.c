/* check_nccl_api.c: compiled (with -Werror) by tests/sh/nvrtc_mock_nccl.sh where nccl.h is installed:
 * the NCCL slice restated in runtime/cuda_api.h must match nccl.h's signatures, types and enum values. */
#include <nccl.h>
#include "runtime/cuda_api.h"

_Static_assert(sizeof(ncclUniqueId) == 128, "ncclUniqueId is 128 bytes");
_Static_assert((int)NCCL_SUM_ == (int)ncclSum && (int)NCCL_AVG_ == (int)ncclAvg && (int)NCCL_FLOAT32_ == (int)ncclFloat32 &&
               (int)NCCL_FLOAT64_ == (int)ncclFloat64 && (int)NCCL_BFLOAT16_ == (int)ncclBfloat16, "NCCL enum values");
_Static_assert(sizeof(ncclDataType_t) == sizeof(int) && sizeof(ncclRedOp_t) == sizeof(int), "enums are int-sized");
_Static_assert((int)NCCL_SUCCESS_ == (int)ncclSuccess && (int)NCCL_IN_PROGRESS_ == (int)ncclInProgress, "ncclResult_t values");

int main(void) {
    NcclApi a;
    a.ncclGetUniqueId = ncclGetUniqueId;
    a.ncclCommInitRank = ncclCommInitRank;
    a.ncclAllReduce = ncclAllReduce;
    a.ncclAllGather = ncclAllGather;
    a.ncclCommDestroy = ncclCommDestroy;
    a.ncclGetErrorString = ncclGetErrorString;
    a.ncclCommGetAsyncError = ncclCommGetAsyncError;
    a.ncclCommAbort = ncclCommAbort;
    a.ncclCommSplit = ncclCommSplit;
    a.ncclReduceScatter = ncclReduceScatter;
    a.ncclSend = ncclSend;
    a.ncclRecv = ncclRecv;
    a.ncclGroupStart = ncclGroupStart;
    a.ncclGroupEnd = ncclGroupEnd;
    return a.ncclGetUniqueId == 0;
}

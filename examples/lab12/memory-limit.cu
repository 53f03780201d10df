// Lab 12's proof of HAMi-core's memory ceiling, compiled inside each pod from the
// kai-hami-lab12-source ConfigMap (mounted at /lab-source):
//
//   memory-limit proof   allocate 3 GiB (within a 4096 MiB limit), hold it 30 s, then ask for
//                        2 GiB more (5 GiB in all, over the limit): that must fail.
//   memory-limit hold    allocate 3 GiB and keep it, so the monitor has live usage to export.
//
// Exit status 0 only when the first allocation succeeds and the second fails for want of
// memory. The words are cudaGetErrorString's: "no error", "out of memory".
#include <cstdio>
#include <cstring>
#include <cuda_runtime.h>
#include <unistd.h>

static const size_t GiB = 1024ull * 1024ull * 1024ull;

int main(int argc, char **argv) {
    const bool hold = argc > 1 && std::strcmp(argv[1], "hold") == 0;
    void *first = nullptr;
    cudaError_t in_quota = cudaMalloc(&first, 3 * GiB);
    std::printf("allocate 3 GiB: %s\n", cudaGetErrorString(in_quota));
    std::fflush(stdout);
    if (in_quota != cudaSuccess) {
        std::printf("FAIL: the in-quota allocation failed\n");
        return 1;
    }
    if (hold) {
        for (;;) {
            pause();
        }
    }
    sleep(30);
    void *second = nullptr;
    cudaError_t over_quota = cudaMalloc(&second, 2 * GiB);
    std::printf("allocate another 2 GiB: %s\n", cudaGetErrorString(over_quota));
    if (over_quota == cudaErrorMemoryAllocation) {
        std::printf("PASS: in-quota allocation succeeded and over-quota allocation failed\n");
        return 0;
    }
    std::printf("FAIL: the over-quota allocation did not fail with out of memory\n");
    if (over_quota == cudaSuccess) {
        cudaFree(second);
    }
    return 1;
}

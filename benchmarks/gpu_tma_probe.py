"""A hand-written Hopper GEMM, the design the ``wgmma`` kernels are to take next (issue 17):
TMA tensor copies into the 128-byte swizzle, a warp-specialized block (one producer thread of
warpgroup 0 issues every copy; warpgroups 1 and 2 only ``wgmma`` and store), ``setmaxnreg``
between the roles, a persistent grid over the output tiles. Timed against torch on the same
data and checked against a float64 product:

    python benchmarks/gpu_tma_probe.py                 # 4096^3, f16 and TF32
    python benchmarks/gpu_tma_probe.py --n 4000 --json rows.json

It reuses the generator's ``wgmma``, mbarrier and TMA helpers (:func:`polyopt.codegen.cuda_wgmma.
wgmma_helpers`), sm_90a build (:func:`polyopt.targets.sm90a.sm90a_module`) and tensor maps
(:func:`polyopt.targets.tensor_maps.tensor_map`); the kernel body is the hand-written one the
generated TMA kernels (``Variant.tma``) were modelled on. A = [M, K] row-major, B = [N, K]
(K-major, ``b_n_major`` 0) or [K, N] (f16 only: read transposed by ``wgmma``), C = A B^T in
float32; M, N, K need rows in
whole 16-byte vectors (TMA's stride rule); the tiles at the edges are zero-filled by TMA.
Needs CuPy, torch and an sm_90 GPU. The measured rows are in docs/performance.md.
"""
import argparse
import json

import numpy as np

from polyopt.codegen.cuda_wgmma import wgmma_helpers
from polyopt.targets.sm90a import sm90a_module
from polyopt.targets.tensor_maps import MapSpec, tensor_map

PRELUDE = "typedef unsigned long long uint64_t;\ntypedef unsigned int uint32_t;\n"
KERNEL = r'''
extern "C" __global__ void __launch_bounds__(384, 1) NAME(const void *mapA, const void *mapB, float *C, int M, int N, int K)
{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  enum { BM = 128, BN = @BN@, S = @S@ };
  extern __shared__ __align__(1024) unsigned char smem_[];
  const unsigned pad = (1024u - ((unsigned)__cvta_generic_to_shared(smem_) % 1024u)) % 1024u;
  unsigned char *const As = smem_ + pad, *const Bs = As + S * BM * 128;
  uint64_t *const full = (uint64_t *)(Bs + S * BN * 128), *const empty = full + S;
  const int tilesM = (M + BM - 1) / BM, tilesN = (N + BN - 1) / BN, KT = (K + @BKE@ - 1) / @BKE@, tiles = tilesM * tilesN;
  if (threadIdx.x == 0) {
    for (int s = 0; s < S; s++) { pl_mb_init(&full[s], 1); pl_mb_init(&empty[s], 256); }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  unsigned it = 0;
  if (threadIdx.x < 128) {
    @DEC@
    if (threadIdx.x == 0) {
      pl_tma_prefetch(mapA); pl_tma_prefetch(mapB);
      for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
        const int tm = t % tilesM, tn = t / tilesM;
        for (int kt = 0; kt < KT; kt++, it++) {
          const int s = it % S;
          pl_mb_wait(&empty[s], ((it / S) & 1) ^ 1);
          pl_mb_expect(&full[s], (BM + BN) * 128);
          pl_tma3(As + s * BM * 128, mapA, kt * @BKE@, tm * BM, 0, &full[s]);
#if @TB@
          #pragma unroll
          for (int j = 0; j < BN / 64; j++) pl_tma3(Bs + s * BN * 128 + j * 64 * 128, mapB, tn * BN + 64 * j, kt * 64, 0, &full[s]);
#else
          pl_tma3(Bs + s * BN * 128, mapB, kt * @BKE@, tn * BN, 0, &full[s]);
#endif
        }
      }
    }
  } else {
    @INC@
    const int wg = threadIdx.x / 128 - 1, wq = (threadIdx.x % 128) / 32, lane = threadIdx.x % 32, g = lane / 4, tg = lane % 4;
    for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
      const int tm = t % tilesM, tn = t / tilesM;
      float acc[BN / 2];
      #pragma unroll
      for (int i = 0; i < BN / 2; i++) { acc[i] = 0.0f; pl_wg_keep(acc[i]); }
      for (int kt = 0; kt < KT; kt++, it++) {
        const int s = it % S;
        pl_mb_wait(&full[s], (it / S) & 1);
        pl_wg_fence();
        const unsigned char *const sa = As + s * BM * 128 + wg * 64 * 128, *const sb = Bs + s * BN * 128;
        #pragma unroll
        for (int step = 0; step < 4; step++)
#if @TB@
          pl_wgmma_hmma_n@BN@_01(acc, pl_wg_desc(sa + step * 32, 16, 1024), pl_wg_desc(sb + step * 16 * 128, 64 * 128, 1024));
#else
          pl_wgmma_@ENGINE@_n@BN@_00(acc, pl_wg_desc(sa + step * 32, 16, 1024), pl_wg_desc(sb + step * 32, 16, 1024));
#endif
        pl_wg_commit();
        pl_wg_wait<1>();
        if (kt > 0) pl_mb_arrive(&empty[(it - 1) % S]);
      }
      pl_wg_wait<0>();
      #pragma unroll
      for (int i = 0; i < BN / 2; i++) pl_wg_keep(acc[i]);
      if (KT > 0) pl_mb_arrive(&empty[(it - 1) % S]);
      #pragma unroll
      for (int j = 0; j < BN / 8; j++)
        #pragma unroll
        for (int r = 0; r < 4; r++) {
          const long m = (long)tm * BM + wg * 64 + wq * 16 + g + (r / 2) * 8, n = (long)tn * BN + j * 8 + tg * 2 + (r % 2);
          if (m < M && n < N) C[m * N + n] = acc[j * 4 + r];
        }
    }
  }
#endif
}
'''



def operand_map(array, dims, box):
    """The tensor map of a C-contiguous f16/f32 CuPy array as 2-D (inner dimension first; a third of one)."""
    import cupy as cp
    row = dims[0] * array.itemsize
    spec = MapSpec("f16" if array.itemsize == 2 else "f32", (*dims, 1), (row, row * dims[1]), (*box, 1))
    return tensor_map(cp, array.data.ptr, spec)


def kernel_text(engine, bn, s, tb, reg):
    """(name, source) of the kernel for engine (hmma: f16, tf32), tile N, stages, B N-major, setmaxnreg."""
    name = f"tma_{engine}_{bn}_{s}_{tb}_{reg}"
    return name, (KERNEL.replace("NAME", name).replace("@BN@", str(bn)).replace("@S@", str(s))
                  .replace("@TB@", str(tb)).replace("@ENGINE@", engine).replace("@BKE@", "64" if engine == "hmma" else "32")
                  .replace("@DEC@", 'asm volatile("setmaxnreg.dec.sync.aligned.u32 40;");' if reg else "")
                  .replace("@INC@", 'asm volatile("setmaxnreg.inc.sync.aligned.u32 232;");' if reg else ""))


CONFIGS = ([("hmma", bn, s, tb, reg) for bn in (256, 128) for tb in (0, 1) for reg in (1, 0)
            for s in ((4, 3) if bn == 256 else (6, 4))]
           + [("tf32", bn, s, 0, 1) for bn in (256, 128) for s in ((4, 3) if bn == 256 else (6, 4))])


def source():
    """The translation unit: the generator's helpers, the TMA helpers, every configuration's kernel."""
    shapes = {(e, bn, 0, tb) for e, bn, s, tb, reg in CONFIGS}
    return PRELUDE + wgmma_helpers({"hmma", "tf32"}, "f16", shapes) + "\n".join(
        kernel_text(*c)[1] for c in CONFIGS)


def main():
    import cupy as cp
    import torch
    from gpu_contractions import per_launch_ms  # (this folder: the script's own)

    def timed(run):
        return per_launch_ms(cp, run)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=4096, help="M = N = K")
    parser.add_argument("--json", help="write the rows here")
    args = parser.parse_args()
    n = args.n
    M = N = K = n
    rows = []
    rng = np.random.default_rng(0)
    flops = 2.0 * M * N * K
    sms = cp.cuda.Device().attributes["MultiProcessorCount"]
    text = source()
    module = sm90a_module(cp, text)
    assert module is not None
    for engine, dtype in (("hmma", np.float16), ("tf32", np.float32)):
        a = cp.asarray(rng.standard_normal((M, K)).astype(dtype))
        b_nk = cp.asarray(rng.standard_normal((N, K)).astype(dtype))
        b_kn = cp.ascontiguousarray(b_nk.T)
        ta, tb_nk, tb_kn = (torch.as_tensor(x, device="cuda") for x in (a, b_nk, b_kn))
        ref = ta.double() @ tb_nk.double().T
        torch.backends.cuda.matmul.allow_tf32 = engine == "tf32"
        t_nt = timed(lambda: torch.matmul(ta, tb_nk.T))
        t_nn = timed(lambda: torch.matmul(ta, tb_kn))
        rows.append(dict(what=f"torch {engine} A@B^T (B [N,K])", ms=t_nt, tflops=flops / t_nt / 1e9))
        rows.append(dict(what=f"torch {engine} A@B (B [K,N])", ms=t_nn, tflops=flops / t_nn / 1e9))
        print(rows[-2], rows[-1], flush=True)
        bke = 64 if engine == "hmma" else 32
        map_a = operand_map(a, (K, M), (bke, 128))
        for config in CONFIGS:
            e, bn, s, tb, reg = config
            if e != engine:
                continue
            name = kernel_text(*config)[0]
            fn = module.get_function(name)
            smem = s * (128 + bn) * 128 + 1024 + 16 * s
            fn.max_dynamic_shared_size_bytes = smem
            map_b = operand_map(b_nk, (K, N), (bke, bn)) if not tb else operand_map(b_kn, (N, K), (64, 64))
            c = cp.zeros((M, N), cp.float32)
            tiles = -(-M // 128) * -(-N // bn)
            grid = (min(tiles, sms),)
            launch = lambda: fn(grid, (384,), (map_a, map_b, c, np.int32(M), np.int32(N), np.int32(K)), shared_mem=smem)
            try:
                launch()
                cp.cuda.Device().synchronize()
                err = float(torch.linalg.norm(torch.as_tensor(c, device="cuda").double() - ref) / torch.linalg.norm(ref))
                t = timed(launch)
                rows.append(dict(what=name, bn=bn, stages=s, b_n_major=tb, setmaxnreg=reg, ms=t, tflops=flops / t / 1e9,
                                 of_torch=(t_nn if tb else t_nt) / t, err=err, regs=fn.num_regs))
            except Exception as exc:
                rows.append(dict(what=name, error=f"{type(exc).__name__}: {exc}"[:400]))
            print(rows[-1], flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
